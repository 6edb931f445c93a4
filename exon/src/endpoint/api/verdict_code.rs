//! A verdict as a small code: in a batch's table of verdicts and in a receipt slab cell's
//! state, `PENDING` before it comes, `REFUSED` with its reason kept aside.

use crate::endpoint::api::error::{Error, ReceiptError};

/// No verdict yet.
pub(crate) const PENDING: u8 = 0;
/// Acknowledged.
pub(crate) const OK: u8 = 1;
const UNACKNOWLEDGED: u8 = 2;
const NOT_DELIVERED: u8 = 3;
const IN_DOUBT: u8 = 4;
/// Refused: the reason is kept beside the code.
pub(crate) const REFUSED: u8 = 5;

/// The code of `verdict`, and the reason of a refusal (to keep aside).
#[inline]
pub(crate) fn of(verdict: Result<(), ReceiptError>) -> (u8, Option<Error>) {
    match verdict {
        Ok(()) => (OK, None),
        Err(ReceiptError::Unacknowledged) => (UNACKNOWLEDGED, None),
        Err(ReceiptError::NotDelivered) => (NOT_DELIVERED, None),
        Err(ReceiptError::InDoubt) => (IN_DOUBT, None),
        Err(ReceiptError::Refused(e)) => (REFUSED, Some(e)),
    }
}

/// The verdict of `code` (`None` while pending); `refusal` finds a refusal's reason.
pub(crate) fn verdict(
    code: u8,
    refusal: impl FnOnce() -> Error,
) -> Option<Result<(), ReceiptError>> {
    Some(match code {
        PENDING => return None,
        OK => Ok(()),
        NOT_DELIVERED => Err(ReceiptError::NotDelivered),
        IN_DOUBT => Err(ReceiptError::InDoubt),
        REFUSED => Err(ReceiptError::Refused(refusal())),
        _ => Err(ReceiptError::Unacknowledged),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_verdict_comes_back_from_its_code() {
        let all = [
            Ok(()),
            Err(ReceiptError::Unacknowledged),
            Err(ReceiptError::NotDelivered),
            Err(ReceiptError::InDoubt),
            Err(ReceiptError::Refused(Error::Storage)),
        ];
        for v in all {
            let (code, reason) = of(v);
            assert_ne!(code, PENDING);
            assert_eq!(verdict(code, || reason.unwrap()), Some(v));
        }
        assert_eq!(verdict(PENDING, || Error::Closed), None);
    }
}
