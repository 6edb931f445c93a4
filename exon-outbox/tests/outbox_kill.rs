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

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use exon_outbox::{Effects, Outbox};
use exon_testkit::procs::{env_or, free_addr, kill_at_random, Proc};

/// One side: its process, and its database.
struct Side {
    proc: Proc,
    db: PathBuf,
}

/// The `role` side (`send`, `recv`), node `id`, binding `bind` and sending to `peer`, with
/// its directory and database under `root`; `rate`: rows a second (the sender's).
fn side(
    role: &str,
    id: u64,
    (bind, peer): (SocketAddr, SocketAddr),
    root: &Path,
    count: u64,
    rate: u64,
) -> Side {
    let db = root.join(format!("{role}.redb"));
    let mut args: Vec<std::ffi::OsString> = vec![role.into()];
    let flags = [
        ("--id", id.to_string()),
        ("--bind", bind.to_string()),
        ("--peer", peer.to_string()),
    ];
    let more = [("--count", count.to_string()), ("--rate", rate.to_string())];
    for (flag, value) in flags.into_iter().chain(more) {
        args.extend([flag.into(), value.into()]);
    }
    args.extend(["--dir".into(), root.join(format!("{role}.dir")).into()]);
    args.extend(["--db".into(), db.clone().into()]);
    let proc = Proc::new(env!("CARGO_BIN_EXE_outbox-node"), args);
    Side { proc, db }
}

#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn an_outbox_through_sigkills_is_processed_exactly_once() {
    let kills = env_or("OUTBOX_KILLS", 10);
    let count = env_or("OUTBOX_COUNT", 3000);
    let seed = env_or("OUTBOX_SEED", 0x9E37_79B9_7F4A_7C15);
    let limit = Duration::from_secs(env_or("OUTBOX_LIMIT_S", 300));
    // The stream lasts about half a second a kill: longer than the kills (one every 300 ms
    // on average, and the restart).
    let rate = env_or("OUTBOX_RATE", (count * 2 / kills.max(1)).max(1));
    let started = Instant::now();
    let root = tempfile::tempdir().unwrap();
    let (sa, ra) = (free_addr(), free_addr());
    let mut recv = side("recv", 2, (ra, sa), root.path(), count, 0);
    let mut send = side("send", 1, (sa, ra), root.path(), count, rate);
    recv.proc.start();
    send.proc.start();
    let procs = [&mut recv.proc, &mut send.proc];
    let [recv_kills, send_kills] = kill_at_random(procs, kills, (50, 400), seed, String::new);
    // (The receiver runs until stopped.)
    send.proc.wait_for_exit(&mut recv.proc, limit);
    recv.proc.kill();
    let tally = Effects::open(&recv.db).unwrap().tally().unwrap();
    let outbox = Outbox::open(&send.db).unwrap();
    let (twice, missing) = (tally.twice(count), tally.missing(count));
    eprintln!(
        "{count} items, {} kills ({recv_kills} of the receiver, {send_kills} of the sender) \
         in {:.1} s: {twice} processed twice, {missing} missing; sender's rows: {:?}",
        recv_kills + send_kills,
        started.elapsed().as_secs_f64(),
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
