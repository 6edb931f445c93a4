//! A request as a server's handler sees it.

use bytes::Bytes;

use crate::proto::{DeliveryId, NodeId};

/// A request delivered exactly once to this endpoint's server
/// ([`Handle::serve`](crate::Handle::serve)): the caller's node id and the
/// request's bytes, and its identity across restarts of a durable endpoint.
#[derive(Debug, Clone)]
pub struct Request {
    from: NodeId,
    body: Bytes,
    /// The caller's id of the call.
    call: u64,
    /// The delivery, taken when the reply is sent.
    delivery: DeliveryId,
}

impl Request {
    pub(crate) fn new(from: NodeId, call: u64, body: Bytes, delivery: DeliveryId) -> Request {
        Request {
            from,
            body,
            call,
            delivery,
        }
    }

    /// The calling node.
    pub fn from(&self) -> NodeId {
        self.from
    }

    /// The request's bytes.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The request's bytes, owned.
    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// Durable mode: whether this request was handed to the handler before a restart of
    /// this endpoint and not answered then (the handler may have run, in part or in full).
    /// A handler that commits its effects together with [`stable_id`](Self::stable_id) in
    /// its own store checks that store when this is true (see `docs/rpc.md`). Always false
    /// on an endpoint that is not durable.
    pub fn is_redelivery(&self) -> bool {
        self.delivery.is_redelivery()
    }

    /// The request's identity at this server, the same when it is handed out again after a
    /// restart of a durable endpoint, never reused: the caller, the receiver incarnation
    /// and the slot it was delivered in.
    pub fn stable_id(&self) -> (NodeId, u64, u64) {
        self.delivery.stable()
    }

    /// Decodes the request as a `T` (sent with `call_typed`).
    #[cfg(feature = "serde")]
    pub fn decode<T: serde::de::DeserializeOwned>(
        &self,
    ) -> Result<T, crate::endpoint::api::payload::PayloadError> {
        crate::endpoint::api::payload::decode(&self.body)
    }

    /// What the reply needs: the call id and the delivery it takes.
    pub(crate) fn reply_to(&self) -> (u64, DeliveryId) {
        (self.call, self.delivery)
    }
}
