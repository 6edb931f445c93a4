//! Tests of the peer book: candidates and their challenges, races, amplification, bounds.

use super::*;

fn acc(id: u64, seq: Option<(u64, u8)>) -> Accepted {
    Accepted {
        from: NodeId::from_const(id),
        seq: seq.map(|(epoch, counter)| Seq { epoch, counter }),
        response: None,
        challenge: None,
        keepalive: false,
    }
}

thread_local! {
    static ORIGIN: Instant = Instant::now();
}

fn t0() -> Instant {
    ORIGIN.with(|o| *o)
}

fn addr(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

const WAIT: Duration = Duration::from_millis(100);

fn answer(id: u64, seq: (u64, u8), token: u64) -> Accepted {
    let mut a = acc(id, Some(seq));
    a.response = Some(token);
    a
}

/// A book that knows peer 1 at `addr(1)`, validated (it answered its challenge).
fn proven() -> PeerBook {
    let mut b = PeerBook::new(8, WAIT);
    let none = |_| false;
    assert_eq!(
        b.learn(acc(1, Some((5, 10))), addr(1), 1000, t0(), none),
        Learned::New
    );
    b.set_challenge(NodeId::from_const(1), 7, t0());
    b.learn(answer(1, (5, 11), 7), addr(1), 1000, t0(), none);
    assert!(b.is_validated(NodeId::from_const(1)));
    b
}

#[test]
fn a_fresher_datagram_from_a_new_address_makes_it_a_candidate_not_the_address() {
    let mut b = proven();
    let id = NodeId::from_const(1);
    let none = |_| false;
    // A replay (same or older sequence) from elsewhere is ignored.
    for seq in [(5, 11), (4, 99)] {
        assert_eq!(
            b.learn(acc(1, Some(seq)), addr(2), 1000, t0(), none),
            Learned::Unchanged
        );
    }
    assert_eq!(b.candidate(id), None);
    // A fresher one (a copy raced ahead of the original) makes its address the
    // candidate: challenged there, while everything else still goes to the proven one.
    assert_eq!(
        b.learn(acc(1, Some((5, 12))), addr(2), 1000, t0(), none),
        Learned::Challenge
    );
    assert_eq!(b.candidate(id), Some(addr(2)));
    assert_eq!(b.challenge_sent(id, Some((42, 60)), t0()), Ok(addr(2)));
    assert_eq!(b.send_to(id, 60_000), Ok(addr(1)));
    // The original, arriving later from the proven address, changes nothing.
    assert_eq!(
        b.learn(acc(1, Some((5, 12))), addr(1), 1000, t0(), none),
        Learned::Unchanged
    );
    // One candidate per peer: a third address waits for the first to fail.
    assert_eq!(
        b.learn(acc(1, Some((5, 13))), addr(3), 1000, t0(), none),
        Learned::Unchanged
    );
    assert_eq!(b.candidate(id), Some(addr(2)));
    // The token, but from the proven address: proves nothing about the candidate.
    assert_eq!(
        b.learn(answer(1, (5, 14), 42), addr(1), 100, t0(), none),
        Learned::Unchanged
    );
    assert_eq!(b.get(id), Some(addr(1)));
    // The answer, from the candidate: the peer moved there (a NAT rebinding).
    assert_eq!(
        b.learn(answer(1, (5, 15), 42), addr(2), 100, t0(), none),
        Learned::Moved
    );
    assert_eq!(b.get(id), Some(addr(2)));
    assert!(b.is_validated(id));
    assert_eq!(b.candidate(id), None);
    assert_eq!(b.send_to(id, 60_000), Ok(addr(2)));
}

#[test]
fn an_unanswered_candidate_fails_and_the_proven_address_stays() {
    let mut b = proven();
    let id = NodeId::from_const(1);
    let none = |_| false;
    let mut seq = 20;
    let mut copy = |b: &mut PeerBook, from: u16, at: Duration| {
        seq += 1;
        b.learn(acc(1, Some((5, seq))), addr(from), 1000, t0() + at, none)
    };
    let ms = Duration::from_millis;
    // Challenges at once, then after 100 ms, then after 200 ms more: each time more
    // copies come from the candidate.
    assert_eq!(copy(&mut b, 2, ms(0)), Learned::Challenge);
    assert_eq!(copy(&mut b, 2, ms(1)), Learned::Unchanged, "queued once");
    assert_eq!(b.challenge_sent(id, Some((1, 60)), t0()), Ok(addr(2)));
    assert_eq!(copy(&mut b, 2, ms(99)), Learned::Unchanged);
    assert_eq!(copy(&mut b, 2, ms(100)), Learned::Challenge);
    assert_eq!(
        b.challenge_sent(id, Some((2, 60)), t0() + ms(100)),
        Ok(addr(2))
    );
    assert_eq!(copy(&mut b, 2, ms(299)), Learned::Unchanged);
    assert_eq!(copy(&mut b, 2, ms(300)), Learned::Challenge);
    assert_eq!(
        b.challenge_sent(id, Some((3, 60)), t0() + ms(300)),
        Ok(addr(2))
    );
    // No fourth challenge; and until it has failed, no other address takes its turn.
    assert_eq!(copy(&mut b, 2, ms(650)), Learned::Unchanged);
    assert_eq!(copy(&mut b, 3, ms(650)), Learned::Unchanged);
    assert_eq!(b.get(id), Some(addr(1)));
    assert_eq!(b.send_to(id, 60_000), Ok(addr(1)));
    // Failed (400 ms after the last challenge): the next fresher datagram, from any
    // address, may be the next candidate; the proven address never left.
    assert_eq!(copy(&mut b, 3, ms(700)), Learned::Challenge);
    assert_eq!(b.candidate(id), Some(addr(3)));
    assert_eq!(b.get(id), Some(addr(1)));
    // A late answer to the first candidate proves nothing now.
    assert_eq!(
        b.learn(answer(1, (5, 99), 3), addr(2), 100, t0() + ms(701), none),
        Learned::Unchanged
    );
    assert_eq!(b.get(id), Some(addr(1)));
}

/// The next datagram (numbered `*seq + 1`) from a peer that moved to addr(2), `t` ms
/// after [`t0`]: an observer's copy from addr(9) first, the original 30 ms later.
fn raced(b: &mut PeerBook, seq: &mut u8, t: u64) -> (Learned, Learned) {
    *seq += 1;
    let at = |d| t0() + Duration::from_millis(d);
    let none = |_| false;
    let copy = b.learn(acc(1, Some((5, *seq))), addr(9), 1000, at(t), none);
    let original = b.learn(acc(1, Some((5, *seq))), addr(2), 1000, at(t + 30), none);
    (copy, original)
}

#[test]
fn a_peer_that_moved_while_an_observer_races_it_is_followed() {
    let mut b = proven();
    let id = NodeId::from_const(1);
    let none = |_| false;
    let ms = Duration::from_millis;
    let at = |d| t0() + ms(d);
    // The peer moved to addr(2) (its old address is silent); an observer at addr(9)
    // races a copy of each of its datagrams: the copies are the fresher ones.
    let mut seq = 20;
    let mut both = |b: &mut PeerBook, t: u64| raced(b, &mut seq, t);
    assert_eq!(both(&mut b, 0), (Learned::Challenge, Learned::Unchanged));
    for (k, t) in [(0, 0), (1, 100), (2, 300)] {
        if k > 0 {
            assert_eq!(both(&mut b, t), (Learned::Challenge, Learned::Unchanged));
        }
        assert_eq!(b.challenge_sent(id, Some((k, 60)), at(t)), Ok(addr(9)));
    }
    // The observer's candidate fails (at 700 ms) and sits out a cycle; the originals'
    // address waited, and is challenged as soon as the failure is noticed (by the
    // observer's next copy) although they are no fresher, because the proven address
    // has been quiet for as long.
    assert_eq!(both(&mut b, 700), (Learned::Challenge, Learned::Unchanged));
    assert_eq!(b.candidate(id), Some(addr(2)));
    assert_eq!(b.challenge_sent(id, Some((8, 60)), at(730)), Ok(addr(2)));
    assert_eq!(
        b.learn(answer(1, (5, 99), 8), addr(2), 100, at(760), none),
        Learned::Moved
    );
    assert_eq!(b.get(id), Some(addr(2)));
    // While the proven address is heard from, an older datagram from elsewhere is a
    // replay and challenges nothing.
    assert_eq!(
        b.learn(acc(1, Some((5, 50))), addr(3), 1000, at(800), none),
        Learned::Unchanged
    );
}

/// What CI caught: the peer moved (its datagrams come from addr(2)) while an observer
/// at addr(9) races copies ahead of them, and the peer sends sparsely (backing off). Its
/// datagram came just before the observer's candidate failed; its next burst came after
/// the failure and a cycle more, led by the observer's copy. The copy took the turn back
/// every time and addr(2) was never challenged; the address that waited now takes the
/// turn, whichever datagram shows the failure.
#[test]
fn the_address_that_waited_takes_the_turn_of_a_failed_candidate() {
    let mut b = proven();
    let id = NodeId::from_const(1);
    let none = |_| false;
    let at = |d| t0() + Duration::from_millis(d);
    let mut seq = 20;
    let mut both = |b: &mut PeerBook, t: u64| raced(b, &mut seq, t);
    assert_eq!(both(&mut b, 0), (Learned::Challenge, Learned::Unchanged));
    assert_eq!(b.challenge_sent(id, Some((1, 60)), at(0)), Ok(addr(9)));
    assert_eq!(both(&mut b, 100), (Learned::Challenge, Learned::Unchanged));
    assert_eq!(b.challenge_sent(id, Some((2, 60)), at(100)), Ok(addr(9)));
    assert_eq!(both(&mut b, 300), (Learned::Challenge, Learned::Unchanged));
    assert_eq!(b.challenge_sent(id, Some((3, 60)), at(300)), Ok(addr(9)));
    // The observer's candidate fails at 700 ms: the original at 699 ms came just before.
    assert_eq!(
        b.learn(acc(1, Some((5, 40))), addr(2), 1000, at(699), none),
        Learned::Unchanged
    );
    // The next burst, long after (the failure plus a cycle), led by the observer's copy.
    assert_eq!(both(&mut b, 1500), (Learned::Challenge, Learned::Unchanged));
    assert_eq!(b.candidate(id), Some(addr(2)));
    assert_eq!(b.challenge_sent(id, Some((4, 60)), at(1500)), Ok(addr(2)));
    // The answer: the observer's copy first (proves nothing), then the original.
    assert_eq!(
        b.learn(answer(1, (5, 99), 4), addr(9), 100, at(1560), none),
        Learned::Unchanged
    );
    assert_eq!(
        b.learn(answer(1, (5, 99), 4), addr(2), 100, at(1590), none),
        Learned::Moved
    );
    assert_eq!(b.get(id), Some(addr(2)));
}

#[test]
fn a_copy_raced_ahead_of_the_first_datagram_does_not_keep_the_peer() {
    let mut b = PeerBook::new(8, WAIT);
    let id = NodeId::from_const(1);
    let none = |_| false;
    // The observer's copy comes first: its address is learned, not validated.
    assert_eq!(
        b.learn(acc(1, Some((1, 0))), addr(9), 1000, t0(), none),
        Learned::New
    );
    b.set_challenge(id, 5, t0());
    // The original, from the peer's address, is no fresher, but the address the peer
    // has is not proven: the original's address is challenged.
    assert_eq!(
        b.learn(acc(1, Some((1, 0))), addr(1), 1000, t0(), none),
        Learned::Challenge
    );
    assert_eq!(b.challenge_sent(id, Some((6, 60)), t0()), Ok(addr(1)));
    // The answer: a copy from the observer first (proves nothing), then the original.
    assert_eq!(
        b.learn(answer(1, (1, 1), 6), addr(9), 100, t0(), none),
        Learned::Unchanged
    );
    assert!(!b.is_validated(id));
    assert_eq!(
        b.learn(answer(1, (1, 1), 6), addr(1), 100, t0(), none),
        Learned::Moved
    );
    assert_eq!(b.get(id), Some(addr(1)));
    assert!(b.is_validated(id));
}

#[test]
fn a_candidate_gets_three_times_what_it_sent() {
    let mut b = proven();
    let id = NodeId::from_const(1);
    assert_eq!(
        b.learn(acc(1, Some((6, 0))), addr(2), 20, t0(), |_| false),
        Learned::Challenge
    );
    assert_eq!(
        b.challenge_sent(id, Some((1, 61)), t0()),
        Err(NoRoute::Amplification)
    );
    assert_eq!(b.challenge_sent(id, None, t0()), Err(NoRoute::Unknown));
    // More from it, and the challenge fits.
    assert_eq!(
        b.learn(acc(1, Some((6, 1))), addr(2), 1, t0(), |_| false),
        Learned::Challenge
    );
    assert_eq!(b.challenge_sent(id, Some((1, 63)), t0()), Ok(addr(2)));
}

#[test]
fn with_the_rule_off_a_fresher_datagram_moves_the_peer_at_once() {
    let mut b = proven();
    b.set_moves_need_an_answer(false);
    let id = NodeId::from_const(1);
    assert_eq!(
        b.learn(acc(1, Some((6, 0))), addr(2), 1000, t0(), |_| false),
        Learned::New,
        "the defect the rule prevents"
    );
    assert_eq!(b.get(id), Some(addr(2)));
    // The original, later, is older: it never moves it back.
    assert_eq!(
        b.learn(acc(1, Some((6, 0))), addr(1), 1000, t0(), |_| false),
        Learned::Unchanged
    );
    assert_eq!(b.get(id), Some(addr(2)));
}

#[test]
fn plaintext_datagrams_never_move_a_configured_address() {
    let mut b = PeerBook::new(8, WAIT);
    let none = |_| false;
    assert_eq!(
        b.learn(acc(1, None), addr(1), 100, t0(), none),
        Learned::New
    );
    assert_eq!(
        b.learn(acc(1, None), addr(2), 100, t0(), none),
        Learned::New
    );
    b.configure(NodeId::from_const(2), addr(5));
    assert_eq!(
        b.learn(acc(2, None), addr(6), 100, t0(), none),
        Learned::Unchanged
    );
    assert_eq!(b.get(NodeId::from_const(1)), Some(addr(2)));
    assert_eq!(b.get(NodeId::from_const(2)), Some(addr(5)));
}

#[test]
fn an_address_gets_three_times_what_it_sent_until_it_answers_a_challenge() {
    let mut b = PeerBook::new(8, WAIT);
    let id = NodeId::from_const(1);
    assert_eq!(
        b.learn(acc(1, Some((1, 0))), addr(1), 100, t0(), |_| false),
        Learned::New
    );
    b.set_challenge(id, 77, t0());
    assert_eq!(b.send_to(id, 250), Ok(addr(1)));
    assert_eq!(b.send_to(id, 100), Err(NoRoute::Amplification));
    // More from it, more allowed; a wrong answer validates nothing.
    let mut wrong = acc(1, Some((1, 1)));
    wrong.response = Some(78);
    b.learn(wrong, addr(1), 100, t0(), |_| false);
    assert_eq!(b.send_to(id, 351), Err(NoRoute::Amplification));
    assert_eq!(b.send_to(id, 350), Ok(addr(1)));
    // The answer, from that address: no limit any more.
    let mut right = acc(1, Some((1, 2)));
    right.response = Some(77);
    b.learn(right, addr(1), 10, t0(), |_| false);
    assert!(b.is_validated(id));
    assert_eq!(b.send_to(id, 60_000), Ok(addr(1)));
    // An address the application set is trusted.
    b.configure(NodeId::from_const(5), addr(5));
    assert_eq!(b.send_to(NodeId::from_const(5), 60_000), Ok(addr(5)));
    assert_eq!(b.send_to(NodeId::from_const(6), 1), Err(NoRoute::Unknown));
}

/// Found by a seed sweep of the turmoil RPC test under 25 % loss: a first contact's one
/// challenge was lost, the server (its replies' datagrams lost too) had sent three times
/// what the quiet caller had, and every datagram it made after that was dropped by the
/// limit for a minute, until the caller happened to speak. The challenge now goes again in
/// datagrams of its own, backing off, in room that the limit keeps for it from the other
/// datagrams once it holds four times that room; an answer ends the repeats.
#[test]
fn a_first_contacts_lost_challenge_goes_again_in_room_kept_for_it() {
    let mut b = PeerBook::new(8, WAIT);
    let id = NodeId::from_const(1);
    assert_eq!(
        b.learn(acc(1, Some((1, 0))), addr(1), 1000, t0(), |_| false),
        Learned::New
    );
    b.set_challenge(id, 77, t0());
    assert_eq!(b.rechallenge_due(id, t0()), None, "the first one just went");
    // The other datagrams take all but the room.
    let room = RECHALLENGE_ROOM as usize;
    assert_eq!(b.send_to(id, 3000 - room), Ok(addr(1)));
    assert_eq!(b.send_to(id, 1), Err(NoRoute::Amplification));
    // The repeats, backing off: after the wait, then after twice it, then four times.
    let at = |ms: u64| t0() + Duration::from_millis(ms);
    assert_eq!(b.rechallenge_due(id, at(100)), Some(77));
    assert_eq!(b.rechallenge_due(id, at(150)), None);
    assert_eq!(b.rechallenge_due(id, at(200)), Some(77));
    assert_eq!(b.rechallenge_due(id, at(350)), None);
    assert_eq!(b.rechallenge_due(id, at(400)), Some(77));
    assert_eq!(b.rechallenge_due(id, at(750)), None);
    // They fit in the room, and nothing beyond it.
    for _ in 0..4 {
        assert_eq!(b.rechallenge_sent(id, 64), Ok(addr(1)));
    }
    assert_eq!(b.rechallenge_sent(id, 1), Err(NoRoute::Amplification));
    // The answer validates the address: no repeat any more, no limit.
    let mut right = acc(1, Some((1, 1)));
    right.response = Some(77);
    b.learn(right, addr(1), 10, at(800), |_| false);
    assert!(b.is_validated(id));
    assert_eq!(b.rechallenge_due(id, at(60_000)), None);
    assert_eq!(b.send_to(id, 60_000), Ok(addr(1)));
    // A first contact too small for the room keeps none: its first datagrams go whole.
    assert_eq!(
        b.learn(acc(2, Some((1, 0))), addr(2), 60, t0(), |_| false),
        Learned::New
    );
    b.set_challenge(NodeId::from_const(2), 5, t0());
    assert_eq!(b.send_to(NodeId::from_const(2), 180), Ok(addr(2)));
}

#[test]
fn learned_entries_are_bounded_and_pruned_with_records() {
    let mut b = PeerBook::new(4, WAIT);
    b.configure(NodeId::from_const(100), addr(100));
    let busy = |id: NodeId| id.get() < 2;
    for i in 0..4 {
        assert_eq!(
            b.learn(acc(i, Some((1, 0))), addr(1), 100, t0(), busy),
            Learned::New
        );
    }
    // Full: the entries of peers without a record make room.
    assert_eq!(
        b.learn(acc(10, Some((1, 0))), addr(1), 100, t0(), busy),
        Learned::New
    );
    assert_eq!(
        b.len(),
        4,
        "two with records, the new one, the configured one"
    );
    for i in 11..20 {
        b.learn(acc(i, Some((1, 0))), addr(1), 100, t0(), |_| true);
    }
    assert!(b.len() <= 5);
    assert_eq!(b.get(NodeId::from_const(100)), Some(addr(100)));
    b.take_pruned();
    let forgotten = b.forgotten();
    b.prune(t0(), Duration::ZERO, |_| false);
    assert_eq!(b.len(), 1, "only the configured entry survives");
    let pruned = b.take_pruned().count() as u64;
    assert!(pruned >= 2, "pruned peers are reported");
    // What a sender that found an address relies on to look again (`Sends`).
    assert_eq!(b.forgotten(), forgotten + pruned, "and counted");
}

#[test]
fn a_learned_address_outlives_its_records_for_a_while() {
    let mut b = PeerBook::new(8, WAIT);
    let id = NodeId::from_const(1);
    b.learn(acc(1, Some((1, 0))), addr(1), 100, t0(), |_| false);
    let idle = Duration::from_secs(60);
    b.prune(t0() + Duration::from_secs(59), idle, |_| false);
    assert_eq!(
        b.get(id),
        Some(addr(1)),
        "a reply shortly after still finds its way"
    );
    b.prune(t0() + Duration::from_secs(61), idle, |_| false);
    assert_eq!(b.get(id), None);
    assert_eq!(b.take_pruned().collect::<Vec<_>>(), [id]);
}

/// Learning a new peer costs no pass over the book: the count of learned entries is kept
/// through learning, configuring and pruning, and a full book of peers with records
/// tries a pruning pass only once per `cap / 16` newcomers it refuses.
#[test]
fn a_full_book_costs_a_pass_per_sixteenth_of_its_size_not_per_newcomer() {
    use std::cell::Cell;
    let cap = 1024;
    let mut b = PeerBook::new(cap, WAIT);
    b.configure(NodeId::from_const(1_000_000), addr(7));
    for i in 0..cap as u64 {
        assert_eq!(
            b.learn(acc(i, Some((1, 0))), addr(1), 100, t0(), |_| true),
            Learned::New
        );
        assert_eq!(b.learned(), i as usize + 1);
    }
    // Configuring a learned peer takes it out of the count; learning it again does not
    // count it twice.
    b.configure(NodeId::from_const(0), addr(2));
    assert_eq!(b.learned(), cap - 1);
    // Every peer has a record: each pass frees nothing. Count the passes (one call of
    // `has_record` per entry each).
    let calls = Cell::new(0u64);
    let busy = |_: NodeId| {
        calls.set(calls.get() + 1);
        true
    };
    let mut refused = 0;
    for i in 0..10_000u64 {
        if b.learn(acc(5000 + i, Some((1, 0))), addr(1), 100, t0(), busy) == Learned::Full {
            refused += 1;
        }
    }
    assert_eq!(b.learned(), cap);
    assert_eq!(refused, 10_000 - 1, "one newcomer took the free entry");
    let passes = calls.get() / (cap as u64 + 1);
    assert!(passes <= 10_000 / (cap as u64 / 16) + 2, "{passes} passes");
    // Once the records go, the next pass makes room at once.
    b.skip = 0;
    assert_eq!(
        b.learn(acc(99_999, Some((1, 0))), addr(1), 100, t0(), |_| false),
        Learned::New
    );
    assert_eq!(b.learned(), 1);
}

/// What a NAT that rebinds again before its challenges are answered did (turmoil,
/// `calls_through_a_rebinding_nat_under_loss_are_answered_once`): the peer's datagrams
/// came from addr(2), which became the candidate; its challenge was lost, and before the
/// peer's next datagram the NAT moved it to addr(3), then addr(4). The candidate never
/// sent again, so never drew its next challenge, so never failed by its challenges: it
/// held the turn for good and the peer was never followed. A candidate silent for a cycle
/// while the peer's datagrams come from elsewhere has failed; the address that waits is
/// the latest fresher one, not the first of many the peer has left.
#[test]
fn a_candidate_the_peer_left_before_answering_gives_its_turn_to_the_latest_address() {
    let mut b = proven();
    let id = NodeId::from_const(1);
    let none = |_| false;
    let ms = Duration::from_millis;
    let at = |d| t0() + ms(d);
    // The cycle: three waits of 100, 200 and 400 ms.
    let cycle = 700;
    assert_eq!(
        b.learn(acc(1, Some((5, 21))), addr(2), 1000, at(0), none),
        Learned::Challenge
    );
    assert_eq!(b.challenge_sent(id, Some((1, 60)), at(0)), Ok(addr(2)));
    // The peer moved on: addr(3), then addr(4), each fresher. Within the cycle the
    // candidate keeps its turn.
    assert_eq!(
        b.learn(acc(1, Some((5, 22))), addr(3), 1000, at(300), none),
        Learned::Unchanged
    );
    assert_eq!(
        b.learn(acc(1, Some((5, 23))), addr(4), 1000, at(500), none),
        Learned::Unchanged
    );
    assert_eq!(b.candidate(id), Some(addr(2)));
    // A cycle after its last datagram, the silent candidate has failed: the latest
    // address takes the turn (addr(3), which waited first, was left too).
    assert_eq!(
        b.learn(acc(1, Some((5, 24))), addr(4), 1000, at(cycle), none),
        Learned::Challenge
    );
    assert_eq!(b.candidate(id), Some(addr(4)));
    assert_eq!(b.challenge_sent(id, Some((2, 60)), at(cycle)), Ok(addr(4)));
    assert_eq!(
        b.learn(answer(1, (5, 25), 2), addr(4), 100, at(cycle + 30), none),
        Learned::Moved
    );
    assert_eq!(b.get(id), Some(addr(4)));
    // A replay (not fresher) from another address does not take a waiting turn.
    let mut b = proven();
    b.learn(acc(1, Some((5, 30))), addr(2), 1000, at(0), none);
    b.challenge_sent(id, Some((1, 60)), at(0)).unwrap();
    b.learn(acc(1, Some((5, 31))), addr(3), 1000, at(10), none);
    b.learn(acc(1, Some((5, 29))), addr(9), 1000, at(20), none);
    assert_eq!(
        b.learn(acc(1, Some((5, 32))), addr(3), 1000, at(cycle + 10), none),
        Learned::Challenge
    );
    assert_eq!(b.candidate(id), Some(addr(3)));
}
