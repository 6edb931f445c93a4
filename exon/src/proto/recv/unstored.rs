//! Deliveries of ETOKENs held back from the application until their sender says its
//! records of them are on stable storage (STORED, or a later stored token).

use std::collections::BTreeMap;
use std::ops::Range;

use crate::proto::{DeliveryId, Event, NodeId, PeerMap};

/// What one source's early tokens wait for.
#[derive(Debug, Default)]
struct Source {
    /// The sender's records of its tokens in these slots are stored (its last STORED
    /// frame: the range of its current run).
    stored: Range<u64>,
    /// The sender holds no token below this (its collection frontier): an early token
    /// there was never stored and never will be.
    passed_below: u64,
    /// Early tokens on their way to the application whose own journal record is not
    /// durable yet (durable receivers only): they come to [`Unstored::ready`].
    on_the_way: u32,
    /// Deliveries ready but for the sender's word, by slot (a STORED frame releases a
    /// range of them in time to its size, whatever else waits).
    parked: BTreeMap<u64, Event>,
}

/// Early deliveries per source. An entry exists only while one of its tokens is on the
/// way or parked, so it holds at most the deliveries held untaken (`Limits::max_untaken`).
#[derive(Debug, Default)]
pub(crate) struct Unstored {
    by_source: PeerMap<Source>,
}

/// What became of an early delivery once its own record is durable.
#[derive(Debug)]
pub(crate) enum Ready {
    /// Its sender's records are stored: hand it over.
    Deliver(Event),
    /// Parked until they are.
    Parked,
    /// Its sender passed its slot without storing it: drop it, never handed over.
    Dropped(DeliveryId),
}

impl Unstored {
    /// An early token from `src` was delivered into its slot; [`ready`](Self::ready) comes
    /// once its record is durable.
    pub fn arrived(&mut self, src: NodeId) {
        let e = self.by_source.entry(src).or_default();
        e.on_the_way = e.on_the_way.saturating_add(1);
    }

    /// The early delivery `ev` (slot `s` from `src`) may be handed over as far as this
    /// node's own journal goes: it is, parked, or dropped.
    pub fn ready(&mut self, src: NodeId, s: u64, ev: Event) -> Ready {
        let e = self.by_source.entry(src).or_default();
        e.on_the_way = e.on_the_way.saturating_sub(1);
        let out = if e.stored.contains(&s) {
            Ready::Deliver(ev)
        } else if s < e.passed_below {
            match ev {
                Event::Delivered { id, .. } => Ready::Dropped(id),
                _ => Ready::Parked,
            }
        } else {
            e.parked.insert(s, ev);
            Ready::Parked
        };
        self.tidy(src);
        out
    }

    /// `src` says its records of its tokens in `slots` are stored: the deliveries parked
    /// there, to hand over. Nothing is kept for a source with nothing waiting.
    pub fn stored(&mut self, src: NodeId, slots: Range<u64>, out: &mut Vec<Event>) {
        let Some(e) = self.by_source.get_mut(&src) else {
            return;
        };
        if slots.is_empty() {
            // Covers nothing (a hostile `from > below` among them).
            return;
        }
        // Ranges of one run share their start and grow; a later run starts higher.
        if slots.start > e.stored.start
            || (slots.start == e.stored.start && slots.end > e.stored.end)
        {
            e.stored = slots.clone();
        }
        let go: Vec<u64> = e.parked.range(slots).map(|(s, _)| *s).collect();
        out.extend(go.iter().filter_map(|s| e.parked.remove(s)));
        self.tidy(src);
    }

    /// A stored copy of slot `s` came from `src`: its delivery, if parked, to hand over.
    /// (It says nothing of other slots: a range is learnt from STORED frames only.)
    pub fn stored_slot(&mut self, src: NodeId, s: u64) -> Option<Event> {
        let e = self.by_source.get_mut(&src)?;
        let ev = e.parked.remove(&s);
        self.tidy(src);
        ev
    }

    /// `src`'s frontier is `l`: it holds no token below, so the deliveries parked there
    /// were never stored by it and never will be: returned, to be dropped unseen.
    pub fn passed(&mut self, src: NodeId, l: u64, out: &mut Vec<DeliveryId>) {
        let Some(e) = self.by_source.get_mut(&src) else {
            return;
        };
        if l <= e.passed_below {
            return;
        }
        e.passed_below = l;
        let stay = e.parked.split_off(&l);
        for (_, ev) in std::mem::replace(&mut e.parked, stay) {
            if let Event::Delivered { id, .. } = ev {
                out.push(id);
            }
        }
        self.tidy(src);
    }

    /// Whether deliveries from `src` are parked for its word.
    pub fn waits_for(&self, src: NodeId) -> bool {
        self.by_source
            .get(&src)
            .is_some_and(|e| !e.parked.is_empty())
    }

    /// Whether no early delivery waits anywhere.
    pub fn is_empty(&self) -> bool {
        self.by_source.is_empty()
    }

    /// Early deliveries parked, in all.
    pub fn parked(&self) -> usize {
        self.by_source.values().map(|e| e.parked.len()).sum()
    }

    fn tidy(&mut self, src: NodeId) {
        if self
            .by_source
            .get(&src)
            .is_some_and(|e| e.on_the_way == 0 && e.parked.is_empty())
        {
            self.by_source.remove(&src);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proto::recv::delivery::Kept;
    use bytes::Bytes;

    fn ev(s: u64) -> Event {
        Event::Delivered {
            from: NodeId::from_const(7),
            payload: Bytes::new(),
            id: DeliveryId::new(
                NodeId::from_const(7),
                1,
                s,
                Kept {
                    charge: 0,
                    pin: None,
                },
            ),
        }
    }

    #[test]
    fn an_early_delivery_waits_for_its_senders_word_in_either_order() {
        let mut u = Unstored::default();
        let src = NodeId::from_const(7);
        let mut out = Vec::new();
        // Word first, then the own record.
        u.arrived(src);
        u.stored(src, 0..11, &mut out);
        assert!(matches!(u.ready(src, 10, ev(10)), Ready::Deliver(_)));
        assert_eq!(u.by_source.len(), 0, "nothing kept once nothing waits");
        // Own record first: parked until the word covers it, not before.
        u.arrived(src);
        u.arrived(src);
        assert!(matches!(u.ready(src, 20, ev(20)), Ready::Parked));
        assert!(matches!(u.ready(src, 21, ev(21)), Ready::Parked));
        u.stored(src, 0..21, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(u.parked(), 1);
        u.stored(src, 0..22, &mut out);
        assert_eq!(out.len(), 2);
        assert_eq!(u.parked(), 0);
        assert_eq!(u.by_source.len(), 0);
    }

    #[test]
    fn a_restarted_sender_vouches_for_nothing_of_its_earlier_run() {
        let mut u = Unstored::default();
        let src = NodeId::from_const(7);
        let mut out = Vec::new();
        u.arrived(src);
        assert!(matches!(u.ready(src, 10, ev(10)), Ready::Parked));
        // The sender restarted before storing slot 10; its new run covers 50.. only.
        u.stored(src, 50..80, &mut out);
        assert!(out.is_empty(), "slot 10 is not in the new run's range");
        assert_eq!(u.parked(), 1);
        // An old run's late word does not shrink what the new run said.
        u.stored(src, 0..11, &mut out);
        assert_eq!(out.len(), 1);
        assert_eq!(u.by_source.len(), 0);
    }

    #[test]
    fn a_stored_copy_releases_its_own_slot_and_keeps_the_range() {
        let mut u = Unstored::default();
        let src = NodeId::from_const(7);
        let mut out = Vec::new();
        u.arrived(src);
        u.arrived(src);
        u.arrived(src);
        u.stored(src, 0..100, &mut out);
        assert!(matches!(u.ready(src, 150, ev(150)), Ready::Parked));
        assert!(u.stored_slot(src, 150).is_some());
        assert!(u.stored_slot(src, 150).is_none(), "once");
        // Slot 50, still on its way, is covered by the range the copy did not replace.
        assert!(matches!(u.ready(src, 50, ev(50)), Ready::Deliver(_)));
        assert!(matches!(u.ready(src, 160, ev(160)), Ready::Parked));
    }

    #[test]
    fn an_empty_or_inverted_range_releases_nothing() {
        let mut u = Unstored::default();
        let src = NodeId::from_const(7);
        let mut out = Vec::new();
        u.arrived(src);
        assert!(matches!(u.ready(src, 10, ev(10)), Ready::Parked));
        #[allow(clippy::reversed_empty_ranges)]
        u.stored(src, 20..5, &mut out);
        u.stored(src, 10..10, &mut out);
        u.stored(src, u64::MAX..u64::MAX, &mut out);
        assert!(out.is_empty());
        assert_eq!(u.parked(), 1);
    }

    #[test]
    fn a_word_for_a_source_with_nothing_waiting_is_not_kept() {
        let mut u = Unstored::default();
        let mut out = Vec::new();
        u.stored(NodeId::from_const(1), 0..100, &mut out);
        assert!(u.by_source.is_empty());
    }

    #[test]
    fn an_early_delivery_its_sender_passed_is_dropped_unseen() {
        let mut u = Unstored::default();
        let src = NodeId::from_const(7);
        let mut dropped = Vec::new();
        u.arrived(src);
        u.arrived(src);
        assert!(matches!(u.ready(src, 5, ev(5)), Ready::Parked));
        u.passed(src, 6, &mut dropped);
        assert_eq!(dropped.len(), 1);
        // One still on the way, below the frontier: dropped when it is ready.
        assert!(matches!(u.ready(src, 4, ev(4)), Ready::Dropped(_)));
        let mut out = Vec::new();
        u.stored(src, 0..100, &mut out);
        assert!(out.is_empty());
        assert!(u.by_source.is_empty());
    }
}
