//! Request/reply over exactly-once messages: calls with truthful errors, servers that run
//! each request once and acknowledge it with its reply, and `tower::Service` on both sides.
//!
//! # Calls
//! [`Handle::call`](crate::endpoint::Handle::call) sends a request and waits for its reply;
//! many calls may be in flight at once. When no reply comes, the [`CallError`] says whether
//! the request was executed ([`CallError::executed`]): certainly not
//! ([`NotExecuted`](CallError::NotExecuted), [`Refused`](CallError::Refused)), certainly
//! ([`NoReply`](CallError::NoReply), [`Failed`](CallError::Failed),
//! [`Panicked`](CallError::Panicked)), or maybe, at most once ([`InDoubt`](CallError::InDoubt)).
//! Never a bare timeout, and never a second execution: retrying a call sends a *new*
//! request.
//!
//! # Servers
//! [`Handle::serve`](crate::endpoint::Handle::serve) runs a handler for each request, and
//! the server's endpoint acknowledges a request only together with its reply
//! ([`Node::reply`](crate::proto::Node::reply)): an acknowledged request was executed, and
//! its reply is on its way. With a durable endpoint the two are one journal record, so a
//! server that crashes after its handler returned neither runs it again nor loses the reply,
//! and one that crashes inside the handler gets the request again, flagged
//! ([`Request::is_redelivery`]), with the same [`Request::stable_id`] (`docs/rpc.md`).
//!
//! # tower
//! The server takes any `tower::Service<Request, Response = Response>`; [`Client`] is a
//! `tower::Service` whose `poll_ready` waits while the destination's queue is full, so
//! tower's timeout, concurrency-limit, load-balance and buffer layers apply. Do **not** use
//! tower's retry layer: each retry is a new request, executed again. Retry only on
//! errors whose [`executed`](CallError::executed) is `Some(false)` (see [`Client`]).
//!
//! # On the wire
//! Requests and replies are exon messages, in an envelope that carries the caller's call
//! id ([`envelope`](crate::envelope), `docs/wire.md`).

pub(crate) mod calls;
mod client;
mod error;
mod outcome;
pub(crate) mod queue;
pub(crate) mod recovered;
pub(crate) mod request;
mod server;
mod service;
#[cfg(test)]
mod wakes;

pub use error::{CallError, Failure};
pub use outcome::CallOutcome;
pub use recovered::{CallReply, RecoveredCall};
pub use request::Request;
pub use server::{HandlerFn, Response, ServeConfig};
pub use service::Client;
