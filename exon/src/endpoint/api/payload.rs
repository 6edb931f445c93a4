//! Typed payloads' codec (feature `serde`): [`encode`] and [`decode`] with bincode 2, and
//! [`PayloadError`]. Only payloads use it, never the wire format.

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::endpoint::api::error::Error;

/// Why a typed payload could not be encoded or decoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The value could not be encoded.
    #[error("encode: {0}")]
    Encode(#[from] bincode::error::EncodeError),
    /// The bytes are not a valid encoding of the type.
    #[error("decode: {0}")]
    Decode(#[from] bincode::error::DecodeError),
    /// The bytes hold a value followed by this many unexpected bytes.
    #[error("{0} trailing bytes after the value")]
    TrailingBytes(usize),
    /// Sending the encoded value failed.
    #[error(transparent)]
    Send(#[from] Error),
}

fn config() -> impl bincode::config::Config {
    bincode::config::standard()
}

/// Encodes `value` as a payload.
pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<bytes::Bytes, PayloadError> {
    Ok(bincode::serde::encode_to_vec(value, config())?.into())
}

/// Encodes `value` behind `prefix` (an envelope's head), in one buffer: returns it and the
/// value's length.
pub(crate) fn encode_after<T: Serialize + ?Sized>(
    prefix: &[u8],
    value: &T,
) -> Result<(bytes::Bytes, usize), PayloadError> {
    let mut buf = Vec::with_capacity(prefix.len() + 64);
    buf.extend_from_slice(prefix);
    let len = bincode::serde::encode_into_std_write(value, &mut buf, config())?;
    Ok((buf.into(), len))
}

/// Decodes a payload made by [`encode`].
pub fn decode<T: DeserializeOwned>(payload: &[u8]) -> Result<T, PayloadError> {
    let (value, used) = bincode::serde::decode_from_slice(payload, config())?;
    if used != payload.len() {
        return Err(PayloadError::TrailingBytes(payload.len() - used));
    }
    Ok(value)
}
