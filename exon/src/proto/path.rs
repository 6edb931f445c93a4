//! Path validation toward an address other than the one a peer's datagrams go to: a
//! datagram holding only a CHALLENGE, for the embedding to send there and nowhere else.

use super::frame::{frame_type, put_path, Header};
use super::{Node, NodeId, Transmit};

impl Node {
    /// A fresh challenge token: unique per challenge; unpredictable enough for plaintext
    /// mode, where nothing is secret anyway (sealed, the token is encrypted).
    pub(super) fn next_challenge_token(&mut self) -> u64 {
        self.challenges += 1;
        (self.challenges << 16) ^ u64::from(self.next_jitter()) ^ self.ck.rotate_left(40)
    }

    /// Output: appends to `buf` a datagram to `peer` holding a CHALLENGE alone, and returns
    /// its token with the datagram's [`Transmit`]. The embedding sends it to the one address
    /// it wants `peer` to prove it receives at (a candidate address, while the peer's
    /// datagrams keep going to the address it proved before); the token comes back in
    /// [`Accepted::response`](super::Accepted::response) when the peer answers. In sealed
    /// mode only the peer can read the token, so the answer proves the peer receives
    /// there. `None` (nothing appended) when a sealed node cannot send yet (its clock is not
    /// stored far enough) or has no key for `peer`.
    pub fn poll_challenge(&mut self, peer: NodeId, buf: &mut Vec<u8>) -> Option<(u64, Transmit)> {
        if !self.take_epoch_if_needed() {
            return None;
        }
        let start = buf.len();
        let mut header = Header::new(self.id, peer);
        if let Some(sealer) = &mut self.sealer {
            header.seal = sealer.next_seal_header(peer);
        }
        header.encode(buf);
        let header_end = buf.len();
        let token = self.next_challenge_token();
        put_path(buf, frame_type::CHALLENGE, token);
        self.stats.frames_out.challenge += 1;
        let tx = self.finish_datagram(peer, header, buf, start, header_end)?;
        Some((token, tx))
    }
}
