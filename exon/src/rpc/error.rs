//! What a call's failure says: whether the request was executed, and the handler's error.

use std::fmt;

use bytes::Bytes;

use crate::endpoint::Error;

/// Why a call returned no reply. Each variant says what is true of the request's
/// execution at the server ([`executed`](Self::executed)); none is a bare timeout.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CallError {
    /// The request was refused before it was sent (unknown peer, too large, endpoint
    /// closed, journal failed): it was **not executed**, and never will be.
    #[error("request not sent: {0}")]
    Refused(Error),
    /// The call's deadline passed before any whole copy of the request left this endpoint (or
    /// the server refused a message that large): **not executed**, and never will be.
    #[error("request not delivered before the deadline: not executed")]
    NotExecuted,
    /// The request may have been executed, or may yet be, at most once: a whole copy left, and
    /// the server did not acknowledge it before the deadline (or restarted, not durable,
    /// before answering). A reply that comes later is discarded and counted
    /// ([`EndpointStats::replies_discarded`](crate::endpoint::EndpointStats::replies_discarded)).
    #[error("request in doubt: executed at most once, maybe not at all")]
    InDoubt,
    /// The request **was executed** (its handler returned, and the server acknowledged the
    /// request with its reply queued), and the reply did not reach this endpoint before
    /// the deadline. It may still come (then it is discarded and counted); against a durable
    /// server it is not lost.
    #[error("request executed; its reply did not arrive before the deadline")]
    NoReply,
    /// The request was executed and its handler returned an error.
    #[error("handler failed: {0}")]
    Failed(Failure),
    /// The request's handler panicked: it ran, in part. The message is the panic's, if it
    /// was text.
    #[error("handler panicked: {0}")]
    Panicked(String),
    /// The request could not be encoded (typed calls): **not executed**, it was never sent.
    #[error("request does not encode: {0}")]
    Encode(String),
    /// The reply came but is not a valid encoding of the expected type (typed calls): the
    /// request was executed.
    #[error("reply does not decode: {0}")]
    Decode(String),
}

impl CallError {
    /// Whether the request was executed: `Some(false)` certainly not (and never will be),
    /// `Some(true)` certainly (its handler ran), `None` unknown ([`InDoubt`](Self::InDoubt)).
    pub fn executed(&self) -> Option<bool> {
        match self {
            CallError::Refused(_) | CallError::NotExecuted | CallError::Encode(_) => Some(false),
            CallError::InDoubt => None,
            CallError::NoReply
            | CallError::Failed(_)
            | CallError::Panicked(_)
            | CallError::Decode(_) => Some(true),
        }
    }
}

/// An error a handler returned, carried to the caller as bytes: text
/// ([`message`](Self::message)), a typed value (`typed`, feature `serde`),
/// or raw bytes ([`raw`](Self::raw)).
#[derive(Clone, PartialEq, Eq)]
pub struct Failure {
    body: Bytes,
}

impl Failure {
    /// A failure carrying `body` as it is.
    pub fn raw(body: impl Into<Bytes>) -> Failure {
        Failure { body: body.into() }
    }

    /// A failure carrying a text message (UTF-8).
    pub fn message(text: impl fmt::Display) -> Failure {
        Failure::raw(text.to_string())
    }

    /// A failure carrying `error` encoded as typed payloads are (bincode); the caller
    /// reads it back with [`decode`](Self::decode).
    #[cfg(feature = "serde")]
    pub fn typed<E: serde::Serialize + ?Sized>(error: &E) -> Failure {
        match crate::endpoint::encode(error) {
            Ok(body) => Failure { body },
            Err(e) => Failure::message(format!("error value does not encode: {e}")),
        }
    }

    /// The failure's bytes.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The failure as text, if it is UTF-8.
    pub fn text(&self) -> Option<&str> {
        std::str::from_utf8(&self.body).ok()
    }

    /// Decodes a failure made with [`typed`](Self::typed).
    #[cfg(feature = "serde")]
    pub fn decode<E: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<E, crate::endpoint::PayloadError> {
        crate::endpoint::decode(&self.body)
    }
}

impl fmt::Debug for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.text() {
            Some(t) => f.debug_tuple("Failure").field(&t).finish(),
            None => f.debug_tuple("Failure").field(&self.body).finish(),
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.text() {
            Some(t) if !t.is_empty() => f.write_str(t),
            _ => write!(f, "{} bytes", self.body.len()),
        }
    }
}

/// Any error type becomes a failure carrying its message.
impl<E: std::error::Error> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::message(e)
    }
}
