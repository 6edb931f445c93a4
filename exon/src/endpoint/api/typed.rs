//! Typed sends and decodes (feature `serde`): [`Handle::send_typed`] and
//! [`Message::decode`], over the codec in [`payload`](super::payload).

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::endpoint::api::handle::Handle;
use crate::endpoint::api::message::Message;
use crate::endpoint::api::payload::{decode, encode_after, PayloadError};
use crate::endpoint::api::receipts::Receipt;
use crate::envelope::Envelope;
use crate::proto::NodeId;

impl Message {
    /// Decodes the payload as a `T` sent with [`Handle::send_typed`].
    pub fn decode<T: DeserializeOwned>(&self) -> Result<T, PayloadError> {
        decode(&self.payload)
    }
}

impl Handle {
    /// Encodes `value` with bincode and [`send`](Handle::send)s it.
    ///
    /// # Cancel safety
    ///
    /// This method is cancel safe, as [`send`](Handle::send) is: if it does not complete,
    /// the message was not sent.
    pub async fn send_typed<T: Serialize + ?Sized>(
        &self,
        to: NodeId,
        value: &T,
    ) -> Result<Receipt, PayloadError> {
        // Encoded straight behind its envelope: one buffer, no copy.
        let (sealed, len) = encode_after(Envelope::message(bytes::Bytes::new()).head(), value)?;
        self.check_len(to, len)?;
        Ok(self
            .send_sealed(to, sealed.into(), self.default_deadline())
            .await?)
    }
}
