//! The outbox pattern through SIGKILLs (issue 44): `outbox-node` processes, a sender with
//! its outbox in redb and a receiver committing its effects in redb, each killed at random
//! moments during the stream and started again on its directory and database. At the end
//! the receiver's database holds every item's effect exactly once (none twice, including
//! the sender's gap of unkeyed sends, none missing), the sender's outbox is empty, and no
//! verdict other than acknowledged was recorded.
//!
//! A short run (debug) is a heavy test; the long run:
//! `OUTBOX_KILLS=60 OUTBOX_COUNT=100000 cargo test --release -p exon-outbox --test outbox_kill -- --ignored --nocapture`
//! (also `OUTBOX_SEED`; `OUTBOX_RATE`, rows a second; `OUTBOX_LIMIT_S`, the time the
//! stream has to finish after the kills).

use exon_outbox::{Effects, Outbox};
use exon_testkit::procs::KillRun;

#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn an_outbox_through_sigkills_is_processed_exactly_once() {
    let run = KillRun::from_env(env!("CARGO_BIN_EXE_outbox-node"), "OUTBOX", 10, 3000);
    let count = run.count;
    let root = tempfile::tempdir().unwrap();
    let killed = run.run(root.path());
    let (recv_kills, send_kills) = (killed.recv_kills, killed.send_kills);
    let tally = Effects::open(&killed.recv_db).unwrap().tally().unwrap();
    let outbox = Outbox::open(&killed.send_db).unwrap();
    let (twice, missing) = (tally.twice(count), tally.missing(count));
    eprintln!(
        "{count} items, {} kills ({recv_kills} of the receiver, {send_kills} of the sender) \
         in {:.1} s: {twice} processed twice, {missing} missing; sender's rows: {:?}",
        recv_kills + send_kills,
        killed.elapsed.as_secs_f64(),
        outbox.counters().unwrap()
    );
    assert_eq!((twice, missing), (0, 0), "items processed twice, missing");
    assert_eq!(tally.same_id, 0, "messages processed twice under one id");
    assert_eq!(tally.strays(count), 0, "effects of items never sent");
    assert_eq!(outbox.len().unwrap(), 0, "rows left in the outbox");
    let failures = outbox.failures().unwrap();
    assert!(
        failures.is_empty(),
        "verdicts other than acknowledged: {failures:?}"
    );
    assert!(recv_kills > 0 && send_kills > 0, "both sides killed");
}
