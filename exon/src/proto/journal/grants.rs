//! A durable receiver's open incarnations (`Rules::deliver_from_senders_copy`): per source,
//! how far each incarnation granted it (`Granted`), until the source's collection frontier
//! passes that end (`Confirmed`: it then holds no token of the incarnation). After a
//! restart, a token of an open incarnation in a slot between the frontier and the end may
//! be one the last run handed over and the application did not take: it is delivered
//! again, flagged, from the sender's copy.

use std::collections::BTreeMap;

use crate::proto::journal::Entry;
use crate::proto::NodeId;

/// One source's open incarnations.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct Source {
    /// The source's frontier as last confirmed: it holds no token below it.
    floor: u64,
    /// Incarnation -> one past the highest slot it granted (above `floor`).
    open: BTreeMap<u64, u64>,
}

impl Source {
    /// The records that keep this source (a checkpoint's share).
    fn entries(&self, from: NodeId) -> impl Iterator<Item = Entry> + '_ {
        let floor = (self.floor > 0).then_some(Entry::Confirmed {
            from,
            below: self.floor,
        });
        let open = self
            .open
            .iter()
            .map(move |(&rck, &end)| Entry::Granted { from, rck, end });
        // The floor after the incarnations: a `Confirmed` record applies to open ones.
        open.chain(floor)
    }

    fn encoded_len(&self, from: NodeId) -> usize {
        self.entries(from).map(|e| e.encoded_len()).sum()
    }
}

/// Where a slot of an incarnation the receiver holds no record of stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Standing {
    /// Open, between the frontier and the end: its sender may hold a token there, which
    /// the last run may have handed over.
    Open,
    /// Below the source's confirmed frontier: its sender holds no token there (a stale
    /// copy).
    Passed,
    /// Not granted by an open incarnation (never granted, or closed).
    Closed,
}

/// The open incarnations of a journal, by source.
#[derive(Debug, Default, Clone)]
pub struct Grants {
    sources: BTreeMap<NodeId, Source>,
    /// Open incarnations over all sources.
    len: usize,
    /// Bytes their records take encoded (what a checkpoint writes for them).
    bytes: usize,
}

impl Grants {
    /// Incarnation `rck` granted `from` slots below `end` (`end` 0: it closed, nothing
    /// delivered into it). Returns whether that is news (a new incarnation, a higher end,
    /// or a close).
    pub fn grant(&mut self, from: NodeId, rck: u64, end: u64) -> bool {
        let src = self.sources.entry(from).or_default();
        let before = src.encoded_len(from);
        let changed = if end <= src.floor {
            let gone = src.open.remove(&rck).is_some();
            self.len -= usize::from(gone);
            gone
        } else {
            match src.open.insert(rck, end) {
                None => {
                    self.len += 1;
                    true
                }
                Some(old) if old >= end => {
                    src.open.insert(rck, old);
                    false
                }
                Some(_) => true,
            }
        };
        self.settle(from, before);
        changed
    }

    /// `from`'s frontier passed `below`: its floor rises, incarnations ending there close.
    /// Returns whether one did (the node writes `Confirmed` then, or when the archive
    /// forgets taken deliveries: a floor alone needs no record, since a stale copy matters
    /// only where a taken delivery was forgotten).
    pub fn confirm(&mut self, from: NodeId, below: u64) -> bool {
        let Some(src) = self.sources.get_mut(&from) else {
            return false;
        };
        if below <= src.floor {
            return false;
        }
        let before = src.encoded_len(from);
        src.floor = below;
        let n = src.open.len();
        src.open.retain(|_, end| *end > below);
        let closed = n - src.open.len();
        self.len -= closed;
        self.settle(from, before);
        closed > 0
    }

    /// Recounts `from`'s bytes (`before`: what they were), and forgets it once it holds
    /// no open incarnation.
    fn settle(&mut self, from: NodeId, before: usize) {
        let Some(src) = self.sources.get(&from) else {
            return;
        };
        let after = if src.open.is_empty() {
            self.sources.remove(&from);
            0
        } else {
            src.encoded_len(from)
        };
        self.bytes = self.bytes + after - before;
    }

    /// Where slot `s` of `(from, rck)` stands.
    pub fn standing(&self, from: NodeId, rck: u64, s: u64) -> Standing {
        let Some(src) = self.sources.get(&from) else {
            return Standing::Closed;
        };
        match src.open.get(&rck) {
            Some(&end) if s < end && s >= src.floor => Standing::Open,
            Some(&end) if s < end => Standing::Passed,
            _ => Standing::Closed,
        }
    }

    /// The end granted by `(from, rck)`, if it is open.
    pub fn end(&self, from: NodeId, rck: u64) -> Option<u64> {
        self.sources.get(&from)?.open.get(&rck).copied()
    }

    /// Open incarnations over all sources.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no incarnation is open.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Bytes their records take encoded.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// The open incarnations: source, incarnation, end.
    pub fn iter(&self) -> impl Iterator<Item = (NodeId, u64, u64)> + '_ {
        self.sources
            .iter()
            .flat_map(|(&from, src)| src.open.iter().map(move |(&r, &end)| (from, r, end)))
    }

    /// The records that rebuild them (a checkpoint's share): per source, a `Granted` per
    /// open incarnation, then its floor (`Confirmed`).
    pub fn entries(&self) -> impl Iterator<Item = Entry> + '_ {
        self.sources
            .iter()
            .flat_map(|(&from, src)| src.entries(from))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: NodeId = NodeId::from_const(4);

    fn replayed(g: &Grants) -> Grants {
        let mut again = Grants::default();
        for e in g.entries() {
            match e {
                Entry::Granted { from, rck, end } => {
                    again.grant(from, rck, end);
                }
                Entry::Confirmed { from, below } => {
                    again.confirm(from, below);
                }
                _ => unreachable!(),
            }
        }
        again
    }

    #[test]
    fn an_incarnation_is_open_between_the_frontier_and_its_end_until_passed() {
        let mut g = Grants::default();
        assert!(g.grant(A, 7, 100));
        assert!(!g.grant(A, 7, 90), "a lower end is no news");
        assert!(g.grant(A, 7, 120));
        assert_eq!(g.standing(A, 7, 119), Standing::Open);
        assert_eq!(g.standing(A, 7, 120), Standing::Closed);
        assert_eq!(g.standing(A, 8, 10), Standing::Closed, "never granted");
        assert!(!g.confirm(A, 50), "nothing closed");
        assert_eq!(g.standing(A, 7, 49), Standing::Passed);
        assert_eq!(g.standing(A, 7, 50), Standing::Open);
        let again = replayed(&g);
        assert_eq!(again.standing(A, 7, 49), Standing::Passed);
        assert_eq!(again.bytes(), g.bytes());
        assert!(!g.confirm(A, 40), "the frontier does not go back");
        assert!(g.confirm(A, 120));
        assert!(g.is_empty());
        assert_eq!(g.bytes(), 0);
        assert_eq!(g.standing(A, 7, 100), Standing::Closed);
    }

    #[test]
    fn a_close_forgets_an_incarnation_and_bytes_are_counted() {
        let mut g = Grants::default();
        g.grant(A, 7, 100);
        g.grant(A, 9, 300);
        let n = NodeId::from_const(5);
        g.grant(n, 9, 1 << 40);
        assert_eq!(g.len(), 3);
        let bytes: usize = g.entries().map(|e| e.encoded_len()).sum();
        assert_eq!(g.bytes(), bytes);
        assert!(g.grant(A, 7, 0));
        assert_eq!(g.len(), 2);
        assert_eq!(g.end(A, 9), Some(300));
        let bytes: usize = g.entries().map(|e| e.encoded_len()).sum();
        assert_eq!(g.bytes(), bytes);
    }
}
