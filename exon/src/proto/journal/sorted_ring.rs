//! An ordered map for keys that mostly arrive in ascending order and leave from the front,
//! as a journal's records do: a sorted ring, a B-tree when the order turns hostile.

use std::cell::Cell;
use std::collections::{btree_map, vec_deque, BTreeMap, VecDeque};

/// Entries an insert may shift in the ring before the map turns into a B-tree: an insert
/// near either end is cheap, one in the middle of a long ring is not.
const MAX_SHIFT: usize = 64;
/// Dead entries the ring tolerates beyond its live ones before it is swept.
const SLACK: usize = 64;

/// An ordered map of `K` to `V` with the answers of a [`BTreeMap`].
///
/// Journal records name messages and slots in about the order they were numbered, so a
/// key usually joins at the back and leaves near the front: the map keeps its entries
/// sorted in a ring, finds a key at either end at once (by binary search otherwise), and
/// leaves a removed entry in place as a hole until it reaches an end. A key that would
/// shift more than a few dozen entries (records from a damaged or forged disk, or many
/// keys far out of order) turns the map into a B-tree until it is empty again, so no order
/// of keys costs more than a B-tree does.
#[derive(Debug, Clone)]
pub(crate) struct SortedRing<K, V> {
    repr: Repr<K, V>,
    /// Live entries.
    live: usize,
    /// Where the last key looked up was found in the ring: keys are mostly looked up one
    /// after the other, so the next is there or just after (a guess, checked).
    hint: Cell<usize>,
}

#[derive(Debug, Clone)]
enum Repr<K, V> {
    /// Ascending by key, no two alike; `None` is a removed entry (never at either end).
    Ring(VecDeque<(K, Option<V>)>),
    Tree(BTreeMap<K, V>),
}

impl<K, V> Default for SortedRing<K, V> {
    fn default() -> Self {
        Self {
            repr: Repr::Ring(VecDeque::new()),
            live: 0,
            hint: Cell::new(0),
        }
    }
}

impl<K: Ord + Copy, V> SortedRing<K, V> {
    /// Live entries.
    pub fn len(&self) -> usize {
        self.live
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.live == 0
    }

    /// The value of `k`.
    pub fn get(&self, k: &K) -> Option<&V> {
        match &self.repr {
            Repr::Ring(r) => find(r, &self.hint, k).ok().and_then(|i| r[i].1.as_ref()),
            Repr::Tree(t) => t.get(k),
        }
    }

    /// The value of `k`, to change.
    pub fn get_mut(&mut self, k: &K) -> Option<&mut V> {
        match &mut self.repr {
            Repr::Ring(r) => match find(r, &self.hint, k) {
                Ok(i) => r[i].1.as_mut(),
                Err(_) => None,
            },
            Repr::Tree(t) => t.get_mut(k),
        }
    }

    /// Whether `k` is live.
    pub fn contains_key(&self, k: &K) -> bool {
        self.get(k).is_some()
    }

    /// Sets `k` to `v`; returns its old value.
    pub fn insert(&mut self, k: K, v: V) -> Option<V> {
        let old = match &mut self.repr {
            Repr::Ring(r) => match find(r, &self.hint, &k) {
                Ok(i) => r[i].1.replace(v),
                Err(i) if i == r.len() => {
                    r.push_back((k, Some(v)));
                    None
                }
                Err(0) => {
                    r.push_front((k, Some(v)));
                    None
                }
                Err(i) if i.min(r.len() - i) <= MAX_SHIFT => {
                    r.insert(i, (k, Some(v)));
                    None
                }
                Err(_) => {
                    let mut t: BTreeMap<K, V> =
                        r.drain(..).filter_map(|(k, v)| Some((k, v?))).collect();
                    t.insert(k, v);
                    self.repr = Repr::Tree(t);
                    None
                }
            },
            Repr::Tree(t) => t.insert(k, v),
        };
        if old.is_none() {
            self.live += 1;
        }
        old
    }

    /// Removes `k`; returns its value.
    pub fn remove(&mut self, k: &K) -> Option<V> {
        let old = match &mut self.repr {
            Repr::Ring(r) => {
                let i = find(r, &self.hint, k).ok()?;
                let old = r[i].1.take()?;
                tidy(r, self.live - 1);
                old
            }
            Repr::Tree(t) => t.remove(k)?,
        };
        self.live -= 1;
        if self.live == 0 {
            *self = Self::default();
        }
        Some(old)
    }

    /// Removes every entry `remove` says to, handing each to `removed`.
    pub fn remove_where(&mut self, remove: impl FnMut(&K, &V) -> bool, removed: impl FnMut(K, V)) {
        self.remove_below(None, remove, removed);
    }

    /// As [`remove_where`](Self::remove_where), looking only at keys below `below` (all of
    /// them with `None`).
    pub fn remove_below(
        &mut self,
        below: Option<K>,
        mut remove: impl FnMut(&K, &V) -> bool,
        mut removed: impl FnMut(K, V),
    ) {
        let under = |k: &K| below.is_none_or(|b| *k < b);
        let mut n = 0;
        match &mut self.repr {
            Repr::Ring(r) => {
                for (k, v) in r.iter_mut().take_while(|(k, _)| under(k)) {
                    if v.as_ref().is_some_and(|v| remove(k, v)) {
                        if let Some(v) = v.take() {
                            removed(*k, v);
                            n += 1;
                        }
                    }
                }
                tidy(r, self.live - n);
            }
            Repr::Tree(t) => {
                let keys: Vec<K> = t
                    .iter()
                    .take_while(|(k, _)| under(k))
                    .filter(|(k, v)| remove(k, v))
                    .map(|e| *e.0)
                    .collect();
                for k in keys {
                    if let Some(v) = t.remove(&k) {
                        removed(k, v);
                        n += 1;
                    }
                }
            }
        }
        self.live -= n;
        if self.live == 0 {
            *self = Self::default();
        }
    }

    /// The lowest live key.
    pub fn first_key(&self) -> Option<K> {
        match &self.repr {
            // Never a hole at either end.
            Repr::Ring(r) => r.front().map(|e| e.0),
            Repr::Tree(t) => t.keys().next().copied(),
        }
    }

    /// The highest live key.
    pub fn last_key(&self) -> Option<K> {
        match &self.repr {
            Repr::Ring(r) => r.back().map(|e| e.0),
            Repr::Tree(t) => t.keys().next_back().copied(),
        }
    }

    /// The live entries, ascending by key.
    pub fn iter(&self) -> Iter<'_, K, V> {
        match &self.repr {
            Repr::Ring(r) => Iter::Ring(r.iter()),
            Repr::Tree(t) => Iter::Tree(t.range(..)),
        }
    }

    /// The live entries with keys in `from..below`, ascending.
    pub fn range(&self, from: K, below: K) -> impl Iterator<Item = (&K, &V)> {
        let it = match &self.repr {
            Repr::Ring(r) => {
                let i = r.partition_point(|e| e.0 < from);
                Iter::Ring(r.range(i..))
            }
            Repr::Tree(t) => Iter::Tree(t.range(from..)),
        };
        it.take_while(move |(k, _)| **k < below)
    }

    /// The live values, ascending by key.
    pub fn values(&self) -> impl Iterator<Item = &V> {
        self.iter().map(|(_, v)| v)
    }
}

/// Where `k` is in `r` (`Err`: where it would go), looking at the ends first, then where
/// the `hint` says and just after it.
fn find<K: Ord, V>(
    r: &VecDeque<(K, Option<V>)>,
    hint: &Cell<usize>,
    k: &K,
) -> Result<usize, usize> {
    match r.back() {
        None => return Err(0),
        Some((b, _)) if b < k => return Err(r.len()),
        Some((b, _)) if b == k => return Ok(r.len() - 1),
        _ => {}
    }
    match r.front() {
        Some((f, _)) if f == k => return Ok(0),
        Some((f, _)) if k < f => return Err(0),
        _ => {}
    }
    let h = hint.get();
    for i in [h, h + 1] {
        if r.get(i).is_some_and(|e| e.0 == *k) {
            hint.set(i);
            return Ok(i);
        }
    }
    let at = r.binary_search_by(|e| e.0.cmp(k));
    if let Ok(i) = at {
        hint.set(i);
    }
    at
}

/// Drops the holes at both ends of `r`, and every hole once they outnumber its `live`
/// entries by [`SLACK`].
fn tidy<K, V>(r: &mut VecDeque<(K, Option<V>)>, live: usize) {
    while r.front().is_some_and(|e| e.1.is_none()) {
        r.pop_front();
    }
    while r.back().is_some_and(|e| e.1.is_none()) {
        r.pop_back();
    }
    if r.len() > 2 * live + SLACK {
        r.retain(|e| e.1.is_some());
    }
}

/// The live entries of a [`SortedRing`], ascending by key.
pub(crate) enum Iter<'a, K, V> {
    Ring(vec_deque::Iter<'a, (K, Option<V>)>),
    Tree(btree_map::Range<'a, K, V>),
}

impl<'a, K, V> Iterator for Iter<'a, K, V> {
    type Item = (&'a K, &'a V);

    fn next(&mut self) -> Option<Self::Item> {
        match self {
            Iter::Ring(it) => it.find_map(|(k, v)| Some((k, v.as_ref()?))),
            Iter::Tree(it) => it.next(),
        }
    }
}

#[cfg(test)]
mod tests;
