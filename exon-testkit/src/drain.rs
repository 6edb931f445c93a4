//! The one drain: every output of a node at one instant, taken through
//! [`Node::poll_output`], so the order of outputs (a clock to store, then datagrams, then
//! events) is the core's, written in one place.

use std::time::Instant;

use bytes::Bytes;
use exon::proto::{Event, Node, NodeId, Output, Transmit};

/// One output of a node, as [`drain_with`] hands it to its callback.
#[derive(Debug)]
pub enum Drained<'a> {
    /// A clock high-water mark to store. The callback confirms it with
    /// [`Node::handle_clock_stored`] (an in-memory store) or leaves it unconfirmed (a store
    /// that has not finished): the node asks for each mark once.
    StoreClock(u64),
    /// A journal record to store (durable mode). The callback reports it with
    /// [`Node::handle_stored`] when it chooses (at once: an in-memory journal).
    Store(exon::proto::journal::Write),
    /// A datagram: where it goes, and its bytes (valid for this call only).
    Transmit(Transmit, &'a [u8]),
    /// An event for the application.
    Event(Event),
}

/// Drains every output of `node` at `now`: calls `each` with the node and each output, in
/// the order [`Node::poll_output`] gives them, until the node has nothing more to do now.
/// Returns the node's timer (when to call [`Node::handle_timeout`]; `None`: no timer).
///
/// The callback may give the node inputs (confirm a clock store, take a delivery); their
/// outputs come later in the same drain, in the core's order.
pub fn drain_with(
    node: &mut Node,
    now: Instant,
    mut each: impl FnMut(&mut Node, Drained<'_>),
) -> Option<Instant> {
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match node.poll_output(now, &mut buf) {
            Output::StoreClock(hw) => each(node, Drained::StoreClock(hw)),
            Output::Store(w) => each(node, Drained::Store(w)),
            Output::Transmit(t) => {
                let data = &buf[buf.len() - t.size..];
                each(node, Drained::Transmit(t, data));
            }
            Output::Event(e) => each(node, Drained::Event(e)),
            Output::Timeout(at) => return at,
        }
    }
}

/// Everything [`drain`] took out of a node.
#[derive(Debug, Default)]
pub struct Outputs {
    /// The highest clock mark the node asked to store (each was confirmed at once).
    pub stored: Option<u64>,
    /// The journal records the node asked to store, in order (each reported durable at
    /// once).
    pub stores: Vec<exon::proto::journal::Entry>,
    /// The datagrams, in order: destination and bytes.
    pub datagrams: Vec<(NodeId, Bytes)>,
    /// The events, in order. Deliveries are not taken: the caller reports each with
    /// [`Node::handle_taken`] (and drains again for the ACKs).
    pub events: Vec<Event>,
    /// The node's timer after the drain.
    pub timeout: Option<Instant>,
}

/// Drains every output of `node` at `now` with an in-memory clock store (each mark confirmed
/// at once) and returns them.
pub fn drain(node: &mut Node, now: Instant) -> Outputs {
    let mut outs = Outputs::default();
    outs.timeout = drain_with(node, now, |node, out| match out {
        Drained::StoreClock(hw) => {
            outs.stored = Some(hw);
            node.handle_clock_stored(now, hw);
        }
        Drained::Store(w) => {
            node.handle_stored(now, w.seq);
            outs.stores.push(w.entry);
        }
        Drained::Transmit(t, data) => outs
            .datagrams
            .push((t.destination, Bytes::copy_from_slice(data))),
        Drained::Event(e) => outs.events.push(e),
    });
    outs
}

/// Drains every output of `node` at `now` as an embedding with an in-memory clock store
/// whose application takes every delivery at once: `datagram` gets each datagram (with the
/// node, to read its state), `event` each event, a delivery once taken. Returns the timer.
/// The ACKs of what was taken leave in this drain.
pub fn drain_taking(
    node: &mut Node,
    now: Instant,
    mut datagram: impl FnMut(&Node, Transmit, &[u8]),
    mut event: impl FnMut(Event),
) -> Option<Instant> {
    drain_with(node, now, |node, out| match out {
        Drained::StoreClock(hw) => node.handle_clock_stored(now, hw),
        Drained::Store(w) => node.handle_stored(now, w.seq),
        Drained::Transmit(t, data) => datagram(node, t, data),
        Drained::Event(e) => {
            if let Event::Delivered { id, .. } = &e {
                node.handle_taken(now, *id);
            }
            event(e);
        }
    })
}

/// Confirms every clock mark `node` asks to store, at once (an in-memory store).
pub fn confirm_clock(node: &mut Node, now: Instant) {
    while let Some(hw) = node.poll_clock_store() {
        node.handle_clock_stored(now, hw);
    }
}

/// The datagrams `node` has to send now, with its clock store confirmed first; its events
/// stay queued, for the caller to read apart.
///
/// Unlike [`drain`], this takes the outputs apart (as [`Node::poll_output`] allows): the
/// clock is confirmed once, before the datagrams, and no event is taken. Frame-by-frame
/// tests use it to look at what a node sends separately from what it delivers.
pub fn datagrams(node: &mut Node, now: Instant) -> Vec<(Transmit, Bytes)> {
    confirm_clock(node, now);
    let mut v = Vec::new();
    let mut buf = Vec::new();
    while let Some(t) = node.poll_transmit(now, &mut buf) {
        v.push((t, Bytes::copy_from_slice(&buf[buf.len() - t.size..])));
    }
    v
}
