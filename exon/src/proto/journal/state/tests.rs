//! Tests of the replay of journal records into [`State`].

use super::*;

const A: NodeId = NodeId::from_const(1);

fn taken(slot: u64) -> Entry {
    Entry::Taken {
        from: A,
        rck: 5,
        slot,
    }
}

fn delivered(slot: u64) -> Entry {
    Entry::Delivered {
        from: A,
        rck: 5,
        slot,
        payload: Bytes::from_static(b"payload"),
    }
}

fn replay(entries: &[Entry]) -> State {
    let mut s = State::new();
    for e in entries {
        s.apply(e);
    }
    s
}

fn encoded(s: &State) -> usize {
    s.live_entries().map(|e| e.encoded_len()).sum()
}

#[test]
fn a_quiet_journal_replays_to_nothing() {
    let s = replay(&[
        delivered(10),
        delivered(11),
        taken(10),
        taken(11),
        Entry::Accepted {
            id: MsgId(3),
            to: A,
            payload: Bytes::from_static(b"x").into(),
        },
        Entry::Assigned {
            id: MsgId(3),
            rck: 8,
            slot: 40,
        },
        Entry::Confirmed { from: A, below: 12 },
        Entry::Resolved {
            id: MsgId(3),
            verdict: Some((A, Outcome::Acknowledged)),
        },
        Entry::Reported {
            first: MsgId(3),
            count: 1,
        },
    ]);
    assert!(s.is_empty());
    // What stays is where the sender's taken deliveries were forgotten.
    assert_eq!(s.forgotten().collect::<Vec<_>>(), [(A, 12)]);
    assert_eq!(
        s.live_bytes(),
        Entry::Confirmed { from: A, below: 12 }.encoded_len()
    );
    assert_eq!(s.live_bytes(), encoded(&s));
}

/// `Unassigned` undoes the assignment of the slot it names (a recovery sends the message
/// in a fresh one), and no other: a later assignment stays.
#[test]
fn an_unassigned_slot_is_not_recovered() {
    let assigned = |slot| Entry::Assigned {
        id: MsgId(3),
        rck: 8,
        slot,
    };
    let unassigned = |slot| Entry::Unassigned {
        id: MsgId(3),
        rck: 8,
        slot,
    };
    let msg = |s: &State| s.recovered(false).messages[0].assigned;
    let mut s = replay(&[accepted(3), assigned(40), unassigned(40)]);
    assert_eq!(msg(&s), None);
    assert_eq!(s.live_bytes(), encoded(&s));
    s.apply(&assigned(41));
    s.apply(&unassigned(40));
    assert_eq!(msg(&s), Some((8, 41)), "the slot it left, not its new one");
    assert_eq!(s.live_bytes(), encoded(&s));
    let again = replay(&s.live_entries().collect::<Vec<_>>());
    assert_eq!(msg(&again), Some((8, 41)));
}

fn accepted(id: u64) -> Entry {
    Entry::Accepted {
        id: MsgId(id),
        to: A,
        payload: Bytes::from_static(b"m").into(),
    }
}

/// An early delivery stays early through a compaction (its checkpoint record is
/// `DeliveredEarly`), is recovered as such, and is an ordinary taken slot once taken.
#[test]
fn an_early_delivery_stays_early_until_taken() {
    let n = NodeId::from_const(3);
    let mut st = State::new();
    st.apply(&Entry::DeliveredEarly {
        from: n,
        rck: 5,
        slot: 9,
        payload: Bytes::from_static(b"e"),
    });
    st.apply(&Entry::Delivered {
        from: n,
        rck: 5,
        slot: 10,
        payload: Bytes::from_static(b"d"),
    });
    let mut copy = State::new();
    for e in st.live_entries() {
        copy.apply(&e);
    }
    for s in [&st, &copy] {
        let d = s.recovered(false).deliveries;
        let early: Vec<_> = d.iter().map(|d| (d.slot, d.early)).collect();
        assert_eq!(early, [(9, true), (10, false)]);
    }
    st.apply(&Entry::Taken {
        from: n,
        rck: 5,
        slot: 9,
    });
    let live: Vec<_> = st.live_entries().collect();
    assert!(!live
        .iter()
        .any(|e| matches!(e, Entry::DeliveredEarly { .. })));
    assert!(!st.recovered(false).deliveries.iter().any(|d| d.early));
}

/// A run of verdicts in one record is the same as one record per message; a run from
/// a damaged disk as long as the largest id resolves only the messages the journal
/// holds (no work in proportion to its length).
#[test]
fn a_resolved_run_is_its_messages_resolved_one_by_one() {
    let mut one_by_one: Vec<Entry> = (10..15).map(accepted).collect();
    let mut run = one_by_one.clone();
    for id in 10..14 {
        one_by_one.push(Entry::Resolved {
            id: MsgId(id),
            verdict: Some((A, Outcome::Acknowledged)),
        });
    }
    run.push(Entry::ResolvedRun {
        first: MsgId(10),
        count: 4,
        to: A,
        outcome: Outcome::Acknowledged,
    });
    let (a, b) = (replay(&one_by_one), replay(&run));
    let (ra, rb) = (a.recovered(false), b.recovered(false));
    assert_eq!(ra.messages, rb.messages);
    assert_eq!(ra.verdicts, rb.verdicts);
    assert_eq!(a.live_bytes(), b.live_bytes());
    assert_eq!(b.recovered(false).messages.len(), 1, "message 14 left");
    let huge = replay(&[
        accepted(7),
        Entry::ResolvedRun {
            first: MsgId(0),
            count: u64::MAX - 1,
            to: A,
            outcome: Outcome::InDoubt,
        },
    ]);
    assert!(huge.recovered(false).messages.is_empty());
    assert_eq!(huge.unreported(), 1);
}

#[test]
fn untaken_deliveries_survive_a_frontier_and_taken_ones_wait_for_it() {
    let s = replay(&[
        delivered(10),
        delivered(11),
        delivered(12),
        taken(10),
        taken(12),
        Entry::Confirmed { from: A, below: 12 },
    ]);
    let r = s.recovered(false);
    let kept: Vec<_> = r
        .deliveries
        .iter()
        .map(|d| (d.slot, d.payload.is_some()))
        .collect();
    assert_eq!(kept, [(11, true), (12, false)]);
    assert_eq!(s.live_bytes(), encoded(&s));
}

#[test]
fn live_entries_rebuild_the_same_state_and_count_their_bytes() {
    let s = replay(&[
        delivered(1),
        taken(1),
        delivered(2),
        Entry::Accepted {
            id: MsgId(9),
            to: A,
            payload: Bytes::from_static(b"abc").into(),
        },
        Entry::Assigned {
            id: MsgId(9),
            rck: 4,
            slot: 2,
        },
        Entry::Assigned {
            id: MsgId(9),
            rck: 6,
            slot: 7,
        },
        Entry::Accepted {
            id: MsgId(10),
            to: A,
            payload: Bytes::from_static(b"d").into(),
        },
    ]);
    let again = replay(&s.live_entries().collect::<Vec<_>>());
    assert_eq!(
        s.recovered(false).deliveries,
        again.recovered(false).deliveries
    );
    let msgs = again.recovered(false).messages;
    assert_eq!(msgs[0].assigned, Some((6, 7)), "the latest assignment");
    // A reassignment whose encoding is longer than the first one's is counted right
    // (the simulator found the count going below zero).
    let mut t = State::new();
    t.apply(&Entry::Accepted {
        id: MsgId(1),
        to: A,
        payload: Bytes::from_static(b"x").into(),
    });
    t.apply(&Entry::Assigned {
        id: MsgId(1),
        rck: 3,
        slot: 4,
    });
    t.apply(&Entry::Assigned {
        id: MsgId(1),
        rck: 1 << 40,
        slot: 1 << 40,
    });
    assert_eq!(t.live_bytes(), encoded(&t));
    t.apply(&Entry::Resolved {
        id: MsgId(1),
        verdict: None,
    });
    assert_eq!(t.live_bytes(), 0);
    assert_eq!(msgs[1].assigned, None);
    assert_eq!(s.live_bytes(), encoded(&s));
    assert_eq!(again.live_bytes(), encoded(&again));
}

#[test]
fn a_verdict_stays_until_reported_and_survives_a_compaction() {
    let accepted = |id| Entry::Accepted {
        id: MsgId(id),
        to: A,
        payload: Bytes::from_static(b"m").into(),
    };
    let resolved = |id, o| Entry::Resolved {
        id: MsgId(id),
        verdict: Some((A, o)),
    };
    let s = replay(&[
        accepted(4),
        accepted(5),
        accepted(6),
        resolved(4, Outcome::Acknowledged),
        resolved(5, Outcome::NotDelivered),
        resolved(6, Outcome::InDoubt),
        Entry::Reported {
            first: MsgId(4),
            count: 1,
        },
    ]);
    assert_eq!(s.unreported(), 2);
    assert_eq!(s.live_bytes(), encoded(&s));
    let again = replay(&s.live_entries().collect::<Vec<_>>());
    let r = again.recovered(false);
    assert!(r.messages.is_empty());
    let v: Vec<_> = r.verdicts.iter().map(|v| (v.id.0, v.outcome)).collect();
    assert_eq!(v, [(5, Outcome::NotDelivered), (6, Outcome::InDoubt)]);
    let mut done = again.clone();
    done.apply(&Entry::Reported {
        first: MsgId(5),
        count: 2,
    });
    assert!(done.is_empty());
    assert_eq!(done.live_bytes(), 0);
}

#[test]
fn a_keyed_verdict_keeps_its_key_through_compaction() {
    let to = NodeId::from_const(2);
    let mut s = State::new();
    s.apply(&Entry::AcceptedKeyed {
        id: MsgId(5),
        to,
        key: 42,
        payload: Bytes::from_static(b"row 42").into(),
    });
    s.apply(&Entry::Resolved {
        id: MsgId(5),
        verdict: Some((to, Outcome::NotDelivered)),
    });
    let expect = |s: &State| {
        let v = &s.recovered(false).verdicts;
        assert_eq!(v.len(), 1);
        assert_eq!(
            (v[0].id, v[0].outcome, v[0].key),
            (MsgId(5), Outcome::NotDelivered, Some(42))
        );
    };
    expect(&s);
    // A checkpoint: the state rebuilt from its live records, at their length.
    let live: Vec<Entry> = s.live_entries().collect();
    assert!(live
        .iter()
        .any(|e| matches!(e, Entry::ResolvedKeyed { key: 42, .. })));
    let len: usize = live.iter().map(Entry::encoded_len).sum();
    assert_eq!(len, s.live_bytes());
    let mut c = State::new();
    for e in &live {
        c.apply(e);
    }
    expect(&c);
    assert_eq!(c.live_bytes(), s.live_bytes());
    // Reported: only the key floor and nothing else stays.
    c.apply(&Entry::Reported {
        first: MsgId(5),
        count: 1,
    });
    assert!(c.is_empty());
    assert_eq!(c.keys().collect::<Vec<_>>(), vec![(to, 42)]);
    assert_eq!(
        c.live_bytes(),
        Entry::KeyFloor { to, key: 42 }.encoded_len()
    );
}
#[test]
fn a_held_message_stays_acknowledged_until_released_through_compactions() {
    let held = |id| Entry::AcceptedHeld {
        id: MsgId(id),
        to: A,
        payload: Bytes::from_static(b"request").into(),
    };
    let resolved = |id, o| Entry::Resolved {
        id: MsgId(id),
        verdict: Some((A, o)),
    };
    let compacted = |s: &State| {
        let c = replay(&s.live_entries().collect::<Vec<_>>());
        assert_eq!(c.live_bytes(), s.live_bytes());
        assert_eq!(s.live_bytes(), encoded(s));
        c
    };
    let s = replay(&[
        held(1),
        Entry::Assigned {
            id: MsgId(1),
            rck: 4,
            slot: 9,
        },
        held(2),
        held(3),
        resolved(1, Outcome::Acknowledged),
        resolved(2, Outcome::NotDelivered),
        Entry::Reported {
            first: MsgId(1),
            count: 2,
        },
    ]);
    // 1: acknowledged, held; 2: not delivered, forgotten; 3: not resolved, in the outbox.
    assert_eq!((s.held(), s.counts().1), (1, 1));
    let r = compacted(&s).recovered(false);
    assert_eq!(r.held.len(), 1);
    assert_eq!((r.held[0].id, r.held[0].to), (MsgId(1), A));
    assert_eq!(&r.held[0].payload.to_bytes()[..], b"request");
    assert!(r.verdicts.is_empty(), "reported");
    assert!(r.messages[0].held, "3 is held when it is acknowledged");
    // Released: 1 is forgotten; 3, released before its verdict, is forgotten with it.
    let mut s = compacted(&s);
    s.apply(&Entry::Released { id: MsgId(1) });
    s.apply(&delivered(7));
    s.apply(&Entry::TakenReleased {
        from: A,
        rck: 5,
        slot: 7,
        id: MsgId(3),
    });
    let mut s = compacted(&s);
    assert_eq!((s.held(), s.counts()), (0, (1, 1)));
    assert!(!s.recovered(false).messages[0].held);
    s.apply(&resolved(3, Outcome::Acknowledged));
    s.apply(&Entry::Confirmed { from: A, below: 8 });
    s.apply(&Entry::Reported {
        first: MsgId(3),
        count: 1,
    });
    assert!(s.is_empty(), "{:?}", s.recovered(false));
    assert_eq!(s.live_bytes(), encoded(&s), "one Confirmed record");
    assert_eq!(s.forgotten().count(), 1);
}

#[test]
fn a_held_verdict_not_yet_reported_is_kept_beside_the_held_message() {
    let mut s = State::new();
    s.apply(&Entry::AcceptedHeld {
        id: MsgId(8),
        to: A,
        payload: Bytes::from_static(b"q").into(),
    });
    s.apply(&Entry::Resolved {
        id: MsgId(8),
        verdict: Some((A, Outcome::Acknowledged)),
    });
    let c = replay(&s.live_entries().collect::<Vec<_>>());
    let r = c.recovered(false);
    assert_eq!((r.held.len(), r.verdicts.len()), (1, 1));
    assert_eq!(c.live_bytes(), s.live_bytes());
    // A `Held` record for a message already held, or still in the outbox, adds nothing.
    let mut d = c.clone();
    d.apply(&Entry::Held {
        id: MsgId(8),
        to: A,
        payload: Bytes::from_static(b"q").into(),
    });
    assert_eq!(d.live_bytes(), c.live_bytes());
}

/// The live-bytes count, checked against the encoding.
mod counted {
    use super::*;
    use proptest::prelude::*;

    /// One record of a small universe: two peers, a few ids and slots, so that records
    /// meet (a verdict for an accepted message, a take of a delivery, a frontier past it).
    fn entry() -> impl Strategy<Value = Entry> {
        let peer = prop_oneof![Just(NodeId::from_const(1)), Just(NodeId::from_const(2))];
        let id = (0u64..12).prop_map(MsgId);
        let payload = prop::collection::vec(any::<u8>(), 0..200).prop_map(Payload::from);
        let big = prop_oneof![0u64..8, Just(1u64 << 40), Just(u64::MAX)];
        let outcome = prop_oneof![
            Just(Outcome::Acknowledged),
            Just(Outcome::NotDelivered),
            Just(Outcome::InDoubt)
        ];
        prop_oneof![
            (id.clone(), peer.clone(), payload.clone())
                .prop_map(|(id, to, payload)| Entry::Accepted { id, to, payload }),
            (id.clone(), peer.clone(), big.clone(), payload.clone()).prop_map(
                |(id, to, key, payload)| Entry::AcceptedKeyed {
                    id,
                    to,
                    key,
                    payload
                }
            ),
            (id.clone(), peer.clone(), payload.clone())
                .prop_map(|(id, to, payload)| Entry::AcceptedHeld { id, to, payload }),
            (id.clone(), big.clone(), big.clone()).prop_map(|(id, rck, slot)| Entry::Assigned {
                id,
                rck,
                slot
            }),
            (id.clone(), big.clone(), big.clone())
                .prop_map(|(id, rck, slot)| { Entry::Unassigned { id, rck, slot } }),
            (id.clone(), peer.clone(), outcome.clone()).prop_map(|(id, to, o)| {
                Entry::Resolved {
                    id,
                    verdict: Some((to, o)),
                }
            }),
            (id.clone(), 0u64..6, peer.clone(), outcome).prop_map(|(first, count, to, outcome)| {
                Entry::ResolvedRun {
                    first,
                    count,
                    to,
                    outcome,
                }
            }),
            (id.clone(), 0u64..6).prop_map(|(first, count)| Entry::Reported { first, count }),
            id.clone().prop_map(|id| Entry::Released { id }),
            (
                peer.clone(),
                0u64..3,
                0u64..8,
                prop::collection::vec(any::<u8>(), 0..50)
            )
                .prop_map(|(from, rck, slot, p)| Entry::Delivered {
                    from,
                    rck,
                    slot,
                    payload: p.into()
                }),
            (peer.clone(), 0u64..3, 0u64..8).prop_map(|(from, rck, slot)| Entry::Handed {
                from,
                rck,
                slot
            }),
            (peer.clone(), 0u64..3, 0u64..8).prop_map(|(from, rck, slot)| Entry::Taken {
                from,
                rck,
                slot
            }),
            (peer.clone(), 0u64..10).prop_map(|(from, below)| Entry::Confirmed { from, below }),
            (peer.clone(), 0u64..3, 0u64..8, id.clone(), payload.clone()).prop_map(
                |(from, rck, slot, id, payload)| Entry::Replied {
                    from,
                    rck,
                    slot,
                    id,
                    payload
                }
            ),
            (peer.clone(), 0u64..3, 0u64..8, id.clone()).prop_map(|(from, rck, slot, id)| {
                Entry::TakenReleased {
                    from,
                    rck,
                    slot,
                    id,
                }
            }),
            (id.clone(), peer.clone(), payload).prop_map(|(id, to, payload)| Entry::Held {
                id,
                to,
                payload
            }),
            (peer.clone(), big.clone()).prop_map(|(to, key)| Entry::KeyFloor { to, key }),
            (big.clone(), big).prop_map(|(from, below)| Entry::Covers { from, below }),
            Just(Entry::Damaged),
            (
                peer,
                0u64..3,
                0u64..8,
                prop::collection::vec(any::<u8>(), 0..50)
            )
                .prop_map(|(from, rck, slot, p)| Entry::DeliveredEarly {
                    from,
                    rck,
                    slot,
                    payload: p.into()
                }),
        ]
    }

    /// A verdict replaced by one of another length (a keyed message resolved again, records
    /// out of order on a damaged disk) is counted at its new length: counted at the old
    /// one, the count drifted below the live records (by a byte per such message, down
    /// to an overflow in the end).
    #[test]
    fn a_replaced_verdict_is_counted_at_its_new_length() {
        let a = NodeId::from_const(1);
        let mut s = State::new();
        for e in [
            Entry::Resolved {
                id: MsgId(5),
                verdict: Some((a, Outcome::Acknowledged)),
            },
            Entry::AcceptedKeyed {
                id: MsgId(5),
                to: a,
                key: 0,
                payload: Payload::default(),
            },
            Entry::ResolvedRun {
                first: MsgId(1),
                count: 5,
                to: a,
                outcome: Outcome::Acknowledged,
            },
            Entry::Reported {
                first: MsgId(5),
                count: 1,
            },
        ] {
            s.apply(&e);
            let live: usize = s.live_entries().map(|e| e.encoded_len()).sum();
            assert_eq!(s.live_bytes(), live, "after {e:?}");
        }
    }

    proptest! {
        /// After any records, in any order (a damaged disk's included), the bytes the state
        /// counts as live are those its live records take encoded (the lengths are computed
        /// without building records; this keeps them exact).
        #[test]
        fn live_bytes_are_the_live_records_encoded(entries in prop::collection::vec(entry(), 0..60)) {
            let mut s = State::new();
            for e in &entries {
                s.apply(e);
                let live: usize = s.live_entries().map(|e| e.encoded_len()).sum();
                prop_assert_eq!(s.live_bytes(), live, "after {:?}", e);
            }
        }
    }
}

#[test]
fn forgotten_keys_and_their_settlements_survive_compaction_in_order() {
    let (b, c) = (NodeId::from_const(2), NodeId::from_const(3));
    let mut s = State::new();
    s.apply(&Entry::KeyFloor { to: b, key: 4 });
    s.apply(&Entry::KeysSettled { to: c, key: 9 });
    // A settlement before the journal forgot is no settlement after.
    s.apply(&Entry::KeysForgotten);
    s.apply(&Entry::KeysSettled { to: b, key: 2 });
    let expect = |s: &State| {
        let r = s.recovered(false);
        assert!(r.keys_forgotten);
        assert_eq!(r.keys_settled, vec![b]);
        assert_eq!(r.keys, vec![(b, 4), (c, 9)], "a floor never lowers a key");
        assert!(!r.replaced, "only the storage says a journal was replaced");
    };
    expect(&s);
    let live: Vec<Entry> = s.live_entries().collect();
    let len: usize = live.iter().map(Entry::encoded_len).sum();
    assert_eq!(len, s.live_bytes());
    let mut c2 = State::new();
    for e in &live {
        c2.apply(e);
    }
    expect(&c2);
    // Forgotten again (another damage): every settlement ends.
    c2.apply(&Entry::KeysForgotten);
    assert!(c2.recovered(false).keys_settled.is_empty());
    assert_eq!(
        c2.live_entries().map(|e| e.encoded_len()).sum::<usize>(),
        c2.live_bytes()
    );
}
