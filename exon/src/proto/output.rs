//! The one drain: every output of a node, in the order an embedding must take them.

use std::time::Instant;

use super::{Event, Node, Transmit};

/// What [`Node::poll_output`] hands back: one output at a time, in the order the node's
/// contract requires (a clock to store, then datagrams, then events), ending with the timer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// Store this clock high-water mark durably, then report it with
    /// [`Node::handle_clock_stored`] (an in-memory embedding may do so at once). The node
    /// uses no clock value above the last mark reported stored.
    StoreClock(u64),
    /// A datagram was appended to the buffer given to [`Node::poll_output`]: send it to its
    /// destination node.
    Transmit(Transmit),
    /// Something for the application (a delivery, a verdict, a change of reachability).
    Event(Event),
    /// Nothing more to do now: call [`Node::handle_timeout`] at this instant (`None`: no
    /// timer), unless another input comes first. After any input, poll again.
    Timeout(Option<Instant>),
}

impl Node {
    /// Output: the next thing the embedding must do, in the contract's order. Call it in a
    /// loop after each input (or batch of inputs) until it returns [`Output::Timeout`]:
    ///
    /// ```
    /// # use std::time::Instant;
    /// # use exon::proto::{Config, Node, NodeId, Output, Security};
    /// # let mut node = Node::new(NodeId::new(1).unwrap(), Security::InsecurePlaintext,
    /// #     Config::default(), 0).unwrap();
    /// # let now = Instant::now();
    /// let mut buf = Vec::new();
    /// let timer = loop {
    ///     match node.poll_output(now, &mut buf) {
    ///         Output::StoreClock(hw) => node.handle_clock_stored(now, hw), // after a sync
    ///         Output::Transmit(t) => {
    ///             // send buf[buf.len() - t.size..] to t.destination
    ///             buf.clear();
    ///         }
    ///         Output::Event(_event) => {}
    ///         Output::Timeout(at) => break at,
    ///     }
    /// };
    /// # let _ = timer;
    /// ```
    ///
    /// It is [`poll_clock_store`](Self::poll_clock_store),
    /// [`poll_transmit`](Self::poll_transmit), [`poll_event`](Self::poll_event) and
    /// [`poll_timeout`](Self::poll_timeout) in that order, each drained before the next; an
    /// embedding that needs them apart (a driver that batches datagrams) may call those.
    pub fn poll_output(&mut self, now: Instant, buf: &mut Vec<u8>) -> Output {
        if let Some(hw) = self.poll_clock_store() {
            return Output::StoreClock(hw);
        }
        if let Some(t) = self.poll_transmit(now, buf) {
            return Output::Transmit(t);
        }
        if let Some(e) = self.poll_event() {
            return Output::Event(e);
        }
        Output::Timeout(self.poll_timeout())
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use bytes::Bytes;

    use super::super::{Config, NodeId, Security};
    use super::*;

    fn node(id: u64) -> Node {
        let id = NodeId::new(id).unwrap();
        Node::new(id, Security::InsecurePlaintext, Config::default(), 0).unwrap()
    }

    /// Drains `n` and returns the kinds in order, delivering datagrams to `peer`.
    fn drain(n: &mut Node, peer: &mut Node, now: Instant) -> Vec<char> {
        let mut kinds = Vec::new();
        let mut buf = Vec::new();
        loop {
            match n.poll_output(now, &mut buf) {
                Output::StoreClock(hw) => {
                    kinds.push('c');
                    n.handle_clock_stored(now, hw);
                }
                Output::Transmit(t) => {
                    kinds.push('t');
                    let d = buf.split_off(buf.len() - t.size);
                    peer.handle_datagram(now, Bytes::from(d));
                }
                Output::Event(_) => kinds.push('e'),
                Output::Timeout(_) => return kinds,
            }
        }
    }

    #[test]
    fn outputs_come_in_the_contracts_order() {
        let now = Instant::now();
        let (mut a, mut b) = (node(1), node(2));
        a.send(now, b.id(), Bytes::from_static(b"x")).unwrap();
        let mut seen = Vec::new();
        for i in 0..50 {
            let t = now + Duration::from_millis(10 * i);
            a.handle_timeout(t);
            b.handle_timeout(t);
            seen.push(drain(&mut a, &mut b, t));
            seen.push(drain(&mut b, &mut a, t));
        }
        for kinds in &seen {
            // Within one drain: clock stores, then datagrams, then events.
            let rank = |k: &char| "cte".find(*k).unwrap();
            assert!(
                kinds.windows(2).all(|w| rank(&w[0]) <= rank(&w[1])),
                "{kinds:?}"
            );
        }
        assert_eq!(
            seen[0].first(),
            Some(&'c'),
            "a new node asks for its clock first"
        );
        assert!(
            seen.iter().flatten().any(|k| *k == 'e'),
            "the message got through"
        );
    }
}
