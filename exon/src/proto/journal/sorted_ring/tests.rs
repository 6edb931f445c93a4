use super::*;
use proptest::prelude::*;

/// One step on the map: what it does and the key it names.
#[derive(Debug, Clone)]
enum Op {
    Insert(u64),
    /// Inserts the next key above every key inserted so far (the journal's usual order).
    Append,
    Remove(u64),
    /// Removes the lowest live key (the usual order of leaving).
    RemoveFirst,
    /// Removes the live keys below this one whose values are even.
    RemoveEvenBelow(u64),
    Bump(u64),
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (0u64..600).prop_map(Op::Insert),
        6 => Just(Op::Append),
        2 => (0u64..600).prop_map(Op::Remove),
        4 => Just(Op::RemoveFirst),
        1 => (0u64..600).prop_map(Op::RemoveEvenBelow),
        1 => (0u64..600).prop_map(Op::Bump),
    ]
}

fn same(ring: &SortedRing<u64, u64>, model: &BTreeMap<u64, u64>) -> Result<(), TestCaseError> {
    let ours: Vec<_> = ring.iter().map(|(k, v)| (*k, *v)).collect();
    let theirs: Vec<_> = model.iter().map(|(k, v)| (*k, *v)).collect();
    prop_assert_eq!(ours, theirs);
    prop_assert_eq!(ring.len(), model.len());
    prop_assert_eq!(ring.is_empty(), model.is_empty());
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    /// Every answer is a B-tree's, in the journal's usual order and in any other (the map
    /// then turns into a B-tree, and back into a ring once empty).
    #[test]
    fn answers_as_a_btree_does(ops in prop::collection::vec(op(), 0..600)) {
        let (mut ring, mut model) = (SortedRing::default(), BTreeMap::new());
        let mut next = 0u64;
        for (n, op) in ops.into_iter().enumerate() {
            let v = n as u64;
            match op {
                Op::Insert(k) => prop_assert_eq!(ring.insert(k, v), model.insert(k, v)),
                Op::Append => {
                    next = next.max(model.keys().next_back().map_or(0, |k| k + 1));
                    prop_assert_eq!(ring.insert(next, v), model.insert(next, v));
                    next += 1;
                }
                Op::Remove(k) => prop_assert_eq!(ring.remove(&k), model.remove(&k)),
                Op::RemoveFirst => {
                    if let Some(k) = model.keys().next().copied() {
                        prop_assert_eq!(ring.remove(&k), model.remove(&k));
                    }
                }
                Op::RemoveEvenBelow(b) => {
                    let mut gone = Vec::new();
                    ring.remove_where(|k, v| *k < b && v % 2 == 0, |k, v| gone.push((k, v)));
                    let theirs: Vec<_> = model
                        .iter()
                        .filter(|(k, v)| **k < b && *v % 2 == 0)
                        .map(|(k, v)| (*k, *v))
                        .collect();
                    for (k, _) in &theirs {
                        model.remove(k);
                    }
                    prop_assert_eq!(gone, theirs);
                }
                Op::Bump(k) => {
                    if let Some(v) = ring.get_mut(&k) {
                        *v += 1000;
                    }
                    if let Some(v) = model.get_mut(&k) {
                        *v += 1000;
                    }
                }
            }
            same(&ring, &model)?;
            for k in [0, 7, 300, next.saturating_sub(1)] {
                prop_assert_eq!(ring.get(&k), model.get(&k));
                prop_assert_eq!(ring.contains_key(&k), model.contains_key(&k));
            }
            let (lo, hi) = (next / 3, next / 3 + 50);
            let ours: Vec<_> = ring.range(lo, hi).map(|(k, v)| (*k, *v)).collect();
            let theirs: Vec<_> = model.range(lo..hi).map(|(k, v)| (*k, *v)).collect();
            prop_assert_eq!(ours, theirs);
        }
    }
}

/// Keys in the journal's usual order keep the ring: no B-tree, and holes swept so the ring
/// stays about as long as what is live.
#[test]
fn the_usual_order_keeps_a_short_ring() {
    let mut ring = SortedRing::default();
    for k in 0..100_000u64 {
        ring.insert(k, k);
        if k >= 1000 {
            // Removals a little out of order, as verdicts come: 1, 0, 3, 2, ...
            let gone = if k % 2 == 0 { k - 999 } else { k - 1001 };
            assert_eq!(ring.remove(&gone), Some(gone));
        }
    }
    match &ring.repr {
        Repr::Ring(r) => assert!(r.len() <= 2 * ring.len() + SLACK, "{} entries", r.len()),
        Repr::Tree(_) => panic!("the usual order turned the ring into a tree"),
    }
}

/// Keys inserted into the middle of a long ring turn it into a B-tree (no insert shifts
/// more than `MAX_SHIFT` entries), which becomes a ring again once empty.
#[test]
fn keys_far_out_of_order_turn_it_into_a_tree() {
    let mut ring = SortedRing::default();
    for k in 0..1000u64 {
        ring.insert(2 * k, k);
    }
    assert!(matches!(ring.repr, Repr::Ring(_)));
    ring.insert(1001, 0);
    assert!(matches!(ring.repr, Repr::Tree(_)));
    assert_eq!(ring.len(), 1001);
    let keys: Vec<u64> = ring.iter().map(|(k, _)| *k).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    assert_eq!(keys, sorted);
    for k in keys {
        ring.remove(&k);
    }
    assert!(matches!(ring.repr, Repr::Ring(_)));
}
