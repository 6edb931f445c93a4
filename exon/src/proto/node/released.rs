//! Payloads of acknowledged messages handed back to the embedding instead of dropped in
//! the core, so that it frees them where and when it chooses.

use crate::proto::payload::Payload;

use super::Node;

impl Node {
    /// With `on`, the payload of every message acknowledged from now on is kept for
    /// [`take_released`](Self::take_released) instead of being dropped when its ACK is
    /// handled; off (the default), they are dropped there. Turned off, what was kept is
    /// dropped. What is kept grows until taken: an embedding that turns this on calls
    /// `take_released` after its inputs, as it drains the other outputs.
    ///
    /// Why: an ACK settles many messages at once, so their payloads are freed in a burst
    /// on the thread that handles datagrams, while the application allocates them one at
    /// a time on its own; a general-purpose allocator's per-thread caches hold only a few
    /// blocks of a size, so a burst goes to its slow path (glibc: about 400 instructions a
    /// 1 KiB message between the free and the next allocation, `BENCHMARKS.md`). The tokio
    /// endpoint turns it on and frees each payload in a later send, on the sender's thread.
    pub fn keep_released(&mut self, on: bool) {
        if on {
            self.released.get_or_insert_with(Vec::new);
        } else {
            self.released = None;
        }
    }

    /// Moves the payloads kept since the last call (see
    /// [`keep_released`](Self::keep_released)) to the end of `into`, in the order their
    /// messages were acknowledged. Nothing is kept while the node is not told to.
    pub fn take_released(&mut self, into: &mut Vec<Payload>) {
        if let Some(kept) = self.released.as_mut() {
            into.append(kept);
        }
    }
}
