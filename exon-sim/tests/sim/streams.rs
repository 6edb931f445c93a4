//! Durable byte streams in the simulator (`Scenario::streams`): every node writes streams
//! to the other across crashes of both sides, torn writes and crashes inside commits; each
//! reader's store holds exactly its source, to its end. And the self-tests: with the
//! application's deferred take or the node's durable flows switched off, the oracle
//! reports bytes lost or streams broken.

use exon::proto::Rules;
use exon_sim::oracle::StreamCounts;
use exon_sim::{Scenario, Sim, StreamModel, ViolationKind};

/// [`crate::durable::durable`] (two nodes, eight crashes alternating between them, journals
/// that sync in 3 ms and tear unsynced writes, a lossy, duplicating, reordering network)
/// with crashes inside one commit in five, each node writing two streams of 24 KiB to the
/// other in chunks of at most 1000 bytes.
fn durable_streams(seed: u64) -> Scenario {
    let mut sc = crate::durable::durable(seed);
    sc.max_events = 3_000_000;
    if let Some(d) = sc.durable.as_mut() {
        d.crash_mid_commit = 0.2;
    }
    sc.streams = Some(StreamModel {
        bytes: 24 << 10,
        ..StreamModel::default()
    });
    sc
}

/// Runs `make` over `seeds`, each clean with every stream stored whole and ended; returns
/// the counters summed and the crashes.
fn soak(make: fn(u64) -> Scenario, seeds: std::ops::Range<u64>) -> (StreamCounts, u64) {
    let mut sum = StreamCounts::default();
    let mut crashes = 0;
    for seed in seeds {
        let r = Sim::new(make(seed)).run();
        assert!(r.ok(), "{}", r.describe_failure());
        let c = r.streams.expect("stream counters");
        assert_eq!((c.stored, c.ended), (c.bytes, c.streams), "{r}");
        crashes += u64::from(r.restarts);
        sum.add(&c);
    }
    println!("{crashes} crashes, {sum:?}");
    (sum, crashes)
}

/// Crashes of both sides: writers go on at the byte their marks kept, readers at the byte
/// of their last take, skipping what their store holds already; chunks read and not
/// stored before a crash come again.
#[test]
fn durable_streams_go_on_across_crashes_of_both_sides() {
    let (c, crashes) = soak(durable_streams, 0..24);
    assert!(crashes >= 6 * 6, "{crashes} crashes");
    assert!(c.writers_resumed > 0 && c.readers_resumed > 0, "{c:?}");
    assert!(
        c.redelivered > 0,
        "no reader crashed with chunks not taken: {c:?}"
    );
    assert!(
        c.skipped > 0,
        "no restarted reader skipped what it had stored: {c:?}"
    );
    assert!(c.held > 0, "nothing arrived out of order: {c:?}");
}

/// [`durable_streams`] with three nodes (each writing to both others) and every crash
/// inside a commit when one is pending.
fn three_nodes_torn_commits(seed: u64) -> Scenario {
    let mut sc = durable_streams(seed);
    sc.nodes = 3;
    if let Some(d) = sc.durable.as_mut() {
        d.crash_mid_commit = 1.0;
    }
    for (k, f) in sc.faults.iter_mut().enumerate() {
        if let exon_sim::FaultKind::Restart { node, .. } = &mut f.kind {
            *node = (k + seed as usize) % 3;
        }
    }
    sc
}

/// Three nodes, every crash inside a commit: a writer's position is never kept without its
/// chunk, nor a reader's without its take.
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn durable_streams_of_three_nodes_keep_their_bytes_through_torn_commits() {
    let (c, crashes) = soak(three_nodes_torn_commits, 0..12);
    assert!(crashes >= 12 * 6, "{crashes} crashes");
    assert!(c.readers_resumed > 0 && c.skipped > 0, "{c:?}");
}

/// Runs `make` over `seeds` with the node rules `off` and the stream model changed by
/// `model_off` until one shows a violation of one of `kinds` (the same seed clean with
/// every rule on); fails if none does.
fn self_test(
    make: fn(u64) -> Scenario,
    seeds: std::ops::Range<u64>,
    off: fn(&mut Rules),
    model_off: fn(&mut StreamModel),
    kinds: &[ViolationKind],
) {
    let change = |sc: &mut Scenario| {
        if let Some(m) = sc.streams.as_mut() {
            model_off(m);
        }
    };
    crate::channels::rules_off_self_test(make, seeds, off, &change, kinds);
}

/// The deferred take off: a chunk read to its end is taken at once, before the reader
/// stored its bytes; a crash in between keeps the take and loses the bytes, and the
/// restarted reader goes on past them.
#[test]
fn without_the_deferred_take_a_crash_between_read_and_store_loses_bytes() {
    self_test(
        durable_streams,
        0..16,
        |_| {},
        |m| m.deferred_take = false,
        &[ViolationKind::StreamSkipped],
    );
}

/// `Rules::durable_flows` off: the hosts keep no positions and start their streams over
/// after a restart (a restarted writer writes from byte 0 in a new run; a restarted reader
/// reads from byte 0 and cannot place the chunks that come back): the readers' stores get
/// bytes out of place, or streams never end.
#[test]
fn without_durable_flows_a_restart_breaks_the_streams() {
    self_test(
        durable_streams,
        0..8,
        |r| r.durable_flows = false,
        |_| {},
        &[
            ViolationKind::StreamOrder,
            ViolationKind::StreamCorrupted,
            ViolationKind::StreamSkipped,
            ViolationKind::StreamRepeated,
            ViolationKind::StreamIncomplete,
        ],
    );
}

/// [`durable_streams`] with chunks of `chunk` bytes (fragments of one slot, which wait for
/// reassembly credit) on `nodes` nodes.
fn in_fragments(seed: u64, nodes: usize, chunk: usize) -> Scenario {
    let mut sc = durable_streams(seed);
    sc.nodes = nodes;
    if let Some(m) = sc.streams.as_mut() {
        m.chunk = chunk;
    }
    sc
}

fn chunks_of_2048(seed: u64) -> Scenario {
    in_fragments(seed, 2, 2048)
}

fn three_nodes_chunks_of_3000(seed: u64) -> Scenario {
    in_fragments(seed, 3, 3000)
}

/// Chunks in fragments across crashes of both sides (the soak's stall before
/// `Rules::credit_asks_each_waiting` and `report_recovered_held`: a restarted reader holds
/// a chunk untaken for an earlier one that waits for credit, or for room in the window).
#[test]
fn durable_streams_in_fragments_go_on_across_crashes() {
    soak(chunks_of_2048, 0..4);
    soak(three_nodes_chunks_of_3000, 0..2);
}

/// `Rules::credit_asks_each_waiting` off: a restarted writer's REQCREDIT always names the
/// chunk its restarted reader holds untaken (whose verdict it withholds), so the earlier
/// chunk the reader waits for never gets credit: the stream stalls.
#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn without_credit_asks_each_waiting_chunks_in_fragments_stall() {
    self_test(
        chunks_of_2048,
        0..24,
        |r| r.credit_asks_each_waiting = false,
        |_| {},
        &[ViolationKind::StreamIncomplete, ViolationKind::NotIdle],
    );
}

/// Streams refuse what they cannot survive: no journal, deadlines, lost journals.
#[test]
fn streams_need_durable_mode_with_its_journals_and_no_deadlines() {
    let mut sc = durable_streams(0);
    sc.durable = None;
    assert!(sc.validate().is_err());
    let mut sc = durable_streams(0);
    sc.deadline = Some(std::time::Duration::from_millis(200));
    assert!(sc.validate().is_err());
    let mut sc = durable_streams(0);
    if let Some(d) = sc.durable.as_mut() {
        d.journal_loss = 0.1;
    }
    assert!(sc.validate().is_err());
    assert!(durable_streams(0).validate().is_ok());
}
