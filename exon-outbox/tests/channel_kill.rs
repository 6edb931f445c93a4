//! A durable ordered channel through SIGKILLs (issue 44, item 2): `channel-node` processes,
//! a sender that sends items `0..count` on channel 0 (item `i` as the channel's number `i`,
//! going on from `Channel::next_seq()` after each restart) and a receiver that applies each
//! message in order into redb before acknowledging it, each killed at random moments during
//! the stream and started again on its directory and database. At the end the receiver's
//! database holds the numbers `0..count`, each once, in order, and no breach of the
//! channel's order was recorded (a gap, a message out of order, a number not due).
//!
//! A short run (debug) is a heavy test; the long run:
//! `CHANNEL_KILLS=60 CHANNEL_COUNT=100000 cargo test --release -p exon-outbox --test channel_kill -- --ignored --nocapture`
//! (also `CHANNEL_SEED`; `CHANNEL_RATE`, items a second; `CHANNEL_LIMIT_S`, the time the
//! stream has to finish after the kills).

use exon_outbox::Applied;
use exon_testkit::procs::KillRun;

#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn a_durable_channel_through_sigkills_arrives_in_order_exactly_once() {
    let run = KillRun::from_env(env!("CARGO_BIN_EXE_channel-node"), "CHANNEL", 10, 3000);
    let count = run.count;
    let root = tempfile::tempdir().unwrap();
    let killed = run.run(root.path());
    let (recv_kills, send_kills) = (killed.recv_kills, killed.send_kills);
    let order = Applied::open(&killed.recv_db).unwrap().order().unwrap();
    let (twice, missing) = (order.twice(count), order.missing(count));
    let out_of_order = order.out_of_order();
    eprintln!(
        "{count} messages, {} kills ({recv_kills} of the receiver, {send_kills} of the sender) \
         in {:.1} s: {twice} applied twice, {missing} missing, {out_of_order} out of order, \
         {} breaches recorded; {} flagged redeliveries of numbers applied before",
        recv_kills + send_kills,
        killed.elapsed.as_secs_f64(),
        order.violations.len(),
        order.skipped,
    );
    assert!(
        order.violations.is_empty(),
        "breaches of the order: {:?}",
        &order.violations[..order.violations.len().min(20)]
    );
    assert_eq!(
        (twice, missing, out_of_order),
        (0, 0, 0),
        "applied twice, missing, out of order"
    );
    assert_eq!(order.strays(count), 0, "numbers never sent");
    assert!(
        order.seqs.iter().copied().eq(0..count),
        "exactly 0..count in order"
    );
    assert!(recv_kills > 0 && send_kills > 0, "both sides killed");
}
