//! The tokens of one sender record, by slot number: a sorted ring instead of a tree.

use std::collections::VecDeque;
use std::ops::Range;

use crate::proto::send::token::Token;

/// Tokens of one S record keyed by slot number.
///
/// Tokens are made from envelopes in increasing slot order, so inserting is a push at the
/// back; lookups are a binary search over a contiguous ring; removing leaves a tombstone
/// that is trimmed from the front, or compacted away once tombstones outnumber live tokens
/// (a token stuck at the front cannot make memory grow past about twice the live count).
/// No allocation per token once the ring has grown to the window: emptied, it keeps room
/// for twice the most entries it held since it was last empty, so a sender whose tokens
/// all settle between bursts does not grow the ring again from nothing for each burst,
/// and one large burst's room goes at the next quiet moment after a smaller one.
#[derive(Debug, Default)]
pub(crate) struct Tokens {
    entries: VecDeque<(u64, Option<Token>)>,
    live: usize,
    /// The most entries held since the ring was last empty.
    peak: usize,
}

/// A token's place in [`Tokens`], as [`Tokens::position`] found it, and its slot.
#[derive(Debug, Clone, Copy)]
pub(crate) struct TokenAt(usize, u64);

/// Tombstones tolerated before a compaction, beyond the live count.
const SLACK: usize = 64;

/// Entries an emptied ring keeps room for whatever its peak.
const KEPT_ROOM: usize = 4 * SLACK;

impl Tokens {
    /// Number of tokens.
    pub fn len(&self) -> usize {
        self.live
    }

    /// True when there is no token.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The lowest slot holding a token.
    pub fn first_slot(&self) -> Option<u64> {
        // The front entry is never a tombstone (see `trim`).
        self.entries.front().map(|e| e.0)
    }

    fn index(&self, slot: u64) -> Option<usize> {
        // Slots are usually dense from the front: try the direct position first.
        let front = self.entries.front()?.0;
        let guess = usize::try_from(slot.checked_sub(front)?).ok()?;
        if self.entries.get(guess).is_some_and(|e| e.0 == slot) {
            return Some(guess);
        }
        self.entries.binary_search_by_key(&slot, |e| e.0).ok()
    }

    /// Records the token in `slot` (replacing any token already there).
    #[inline]
    pub fn insert(&mut self, slot: u64, tok: Token) {
        if self.entries.back().is_some_and(|&(last, _)| slot <= last) {
            return self.insert_sorted(slot, tok);
        }
        // Made in slot order: a push at the back, built in place.
        self.entries.push_back((slot, Some(tok)));
        self.live += 1;
        self.peak = self.peak.max(self.entries.len());
    }

    /// [`insert`](Self::insert) of a token not made in slot order (never happens in the
    /// node): the ring kept sorted.
    #[cold]
    fn insert_sorted(&mut self, slot: u64, tok: Token) {
        match self.entries.binary_search_by_key(&slot, |e| e.0) {
            Ok(i) => {
                if self.entries[i].1.replace(tok).is_none() {
                    self.live += 1;
                }
            }
            Err(i) => {
                self.entries.insert(i, (slot, Some(tok)));
                self.live += 1;
                self.peak = self.peak.max(self.entries.len());
            }
        }
    }

    /// The token in `slot`.
    pub fn get(&self, slot: u64) -> Option<&Token> {
        let i = self.index(slot)?;
        self.entries[i].1.as_ref()
    }

    /// The token in `slot`.
    pub fn get_mut(&mut self, slot: u64) -> Option<&mut Token> {
        let i = self.index(slot)?;
        self.entries[i].1.as_mut()
    }

    /// Where the token in `slot` lies in the ring: valid until the next insertion or
    /// removal, for [`at_mut`](Self::at_mut) to reach it again without a search.
    #[inline]
    pub fn position(&self, slot: u64) -> Option<TokenAt> {
        let i = self.index(slot)?;
        self.entries[i].1.is_some().then_some(TokenAt(i, slot))
    }

    /// The token at `at` (from [`position`](Self::position), with no insertion or
    /// removal since: debug builds check that the slot found there is still `at`'s).
    #[inline]
    pub fn at_mut(&mut self, at: TokenAt) -> Option<&mut Token> {
        let (slot, tok) = self.entries.get_mut(at.0)?;
        debug_assert_eq!(*slot, at.1, "a place kept across an insertion or removal");
        tok.as_mut()
    }

    /// Removes and returns the token in `slot`.
    pub fn remove(&mut self, slot: u64) -> Option<Token> {
        let i = self.index(slot)?;
        let tok = self.entries[i].1.take()?;
        self.live -= 1;
        self.trim();
        Some(tok)
    }

    /// Removes every token with a slot in `range` for which `pick` says yes, calling `take`
    /// with each (what it moves out of the token, with `std::mem::take`, is its own) just
    /// before the token is dropped where it lies, in slot order. Work is proportional to
    /// the tokens in the range, not to its width. Returns how many were removed.
    pub fn remove_in(
        &mut self,
        range: Range<u64>,
        mut pick: impl FnMut(&Token) -> bool,
        mut take: impl FnMut(u64, &mut Token),
    ) -> usize {
        let start = self.entries.partition_point(|e| e.0 < range.start);
        let mut removed = 0;
        for (slot, entry) in self.entries.range_mut(start..) {
            if *slot >= range.end {
                break;
            }
            if let Some(tok) = entry.as_mut().filter(|t| pick(t)) {
                take(*slot, tok);
                // Dropped in place: moving a token out copies its ~200 bytes.
                *entry = None;
                removed += 1;
            }
        }
        if removed > 0 {
            self.live -= removed;
            self.trim();
        }
        removed
    }

    /// The tokens with a slot in `range`, in slot order. Work is proportional to the tokens
    /// in the range, not to its width.
    pub fn range_mut(&mut self, range: Range<u64>) -> impl Iterator<Item = (u64, &mut Token)> {
        let start = self.entries.partition_point(|e| e.0 < range.start);
        self.entries
            .range_mut(start..)
            .take_while(move |e| e.0 < range.end)
            .filter_map(|(s, t)| t.as_mut().map(|t| (*s, t)))
    }

    /// Every token, in slot order.
    pub fn iter(&self) -> impl Iterator<Item = (u64, &Token)> {
        self.entries
            .iter()
            .filter_map(|(s, t)| t.as_ref().map(|t| (*s, t)))
    }

    /// Every token, in slot order.
    pub fn iter_mut(&mut self) -> impl Iterator<Item = (u64, &mut Token)> {
        self.entries
            .iter_mut()
            .filter_map(|(s, t)| t.as_mut().map(|t| (*s, t)))
    }

    /// Drops tombstones at the front, and all of them once they outnumber the live tokens.
    /// Emptied, the ring keeps room for twice its peak since it was last empty (at least
    /// [`KEPT_ROOM`]), and gives back the rest.
    fn trim(&mut self) {
        // Counted, then drained: a tombstone is dropped where it lies instead of being
        // moved out whole (a `pop_front` copies the entry's ~200 bytes).
        let dead = self.entries.iter().take_while(|e| e.1.is_none()).count();
        self.entries.drain(..dead);
        if self.entries.len() > 2 * self.live + SLACK {
            self.entries.retain(|e| e.1.is_some());
        }
        if self.live == 0 {
            let keep = self.peak.saturating_mul(2).max(KEPT_ROOM);
            if self.entries.capacity() > 2 * keep {
                self.entries.shrink_to(keep);
            }
            self.peak = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::proto::send::token::Queued;
    use crate::proto::MsgId;

    fn tok(id: u64) -> Token {
        let mut t = Token::new(
            1,
            Queued {
                id: MsgId(id),
                payload: Bytes::new().into(),
                reported: false,
                senders_copy: false,
                reply: false,
            },
        );
        t.queued = false;
        t
    }

    #[test]
    fn insert_lookup_remove_in_any_order() {
        let mut t = Tokens::default();
        for s in [3, 5, 9, 4] {
            t.insert(s, tok(s));
        }
        assert_eq!(t.len(), 4);
        assert_eq!(t.first_slot(), Some(3));
        assert_eq!(t.get_mut(4).map(|x| x.id), Some(MsgId(4)));
        assert!(t.get_mut(6).is_none());
        assert_eq!(t.remove(3).map(|x| x.id), Some(MsgId(3)));
        assert!(t.remove(3).is_none());
        assert_eq!(t.first_slot(), Some(4));
        let mut got = Vec::new();
        let n = t.remove_in(0..(1 << 60), |x| x.id.0 != 5, |s, _| got.push(s));
        assert_eq!((n, got), (2, vec![4, 9]));
        assert_eq!(t.len(), 1);
        assert_eq!(t.first_slot(), Some(5));
        assert_eq!(t.iter_mut().map(|(s, _)| s).collect::<Vec<_>>(), [5]);
    }

    /// A place kept across a removal (the ring moved under it) is caught in debug builds,
    /// not taken for the token of another slot.
    #[test]
    #[cfg(debug_assertions)]
    #[should_panic(expected = "a place kept across an insertion or removal")]
    fn a_stale_place_is_caught() {
        let mut t = Tokens::default();
        for s in [3, 4, 5] {
            t.insert(s, tok(s));
        }
        let at = t.position(4).expect("a token");
        assert_eq!(t.at_mut(at).map(|x| x.id), Some(MsgId(4)));
        // Slot 3 goes: the ring's front is trimmed, and slot 5 now lies where 4 was found.
        assert!(t.remove(3).is_some());
        let _ = t.at_mut(at);
    }

    #[test]
    fn a_stuck_front_token_keeps_memory_bounded() {
        let mut t = Tokens::default();
        t.insert(0, tok(0));
        for s in 1..100_000 {
            t.insert(s, tok(s));
            assert!(t.remove(s).is_some());
        }
        assert_eq!(t.len(), 1);
        assert!(t.entries.len() <= 2 + SLACK, "{}", t.entries.len());
        assert_eq!(t.first_slot(), Some(0));
        assert!(t.remove(0).is_some());
        assert!(t.is_empty() && t.first_slot().is_none());
    }

    /// Made and settled in bursts: the slots of each, in order.
    fn burst(t: &mut Tokens, next: &mut u64, n: u64) {
        for s in *next..*next + n {
            t.insert(s, tok(s));
        }
        for s in *next..*next + n {
            assert!(t.remove(s).is_some());
        }
        *next += n;
    }

    #[test]
    fn an_emptied_ring_keeps_room_for_its_bursts_and_gives_a_large_ones_back() {
        let mut t = Tokens::default();
        let mut next = 0;
        burst(&mut t, &mut next, 1000);
        let room = t.entries.capacity();
        assert!(room >= 1000, "kept when emptied: {room}");
        for _ in 0..10 {
            burst(&mut t, &mut next, 1000);
            assert_eq!(
                t.entries.capacity(),
                room,
                "no regrowth for bursts of one size"
            );
        }
        // A small burst after the large ones: the ring gives their room back.
        burst(&mut t, &mut next, 10);
        let small = t.entries.capacity();
        assert!((KEPT_ROOM..=2 * KEPT_ROOM).contains(&small), "{small}");
        burst(&mut t, &mut next, 10);
        assert_eq!(t.entries.capacity(), small);
    }
}
