//! Loopback tests that measure time and rates over real UDP on 127.0.0.1: a flood of
//! forgeries that new peers must get through within a deadline (`udp_flood`), and the
//! datagram budget of a one-way outage with its recovery time (`deaf_paths`), attacks whose
//! conversations must complete within deadlines (`udp_attacks`). They were each
//! alone in a binary; here every test runs through [`serially`], one at a time, so that no
//! other test (a flood uses both cores) shifts what they measure. A new test that measures
//! wall-clock time or rates on loopback goes here, through `serially`; any other endpoint
//! test goes in `endpoint/` (see `docs/testing.md`).
//!
//! Run: `cargo test -p exon --test timed`.

use std::future::Future;
use std::sync::Mutex;

mod deaf_paths;
mod two_way_outage;
mod udp_attacks;
mod udp_flood;

/// Held by the test running: one at a time in this binary.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs `f` on a multi-thread runtime of its own (two workers), with no other test of this
/// binary running (a test that failed and poisoned the lock does not stop the next).
fn serially<F: Future>(f: F) -> F::Output {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
        .block_on(f)
}
