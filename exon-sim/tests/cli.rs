//! The `exon-sim` command line, run as the built binary (hence a test binary of its own,
//! apart from `sim/`): it refuses what it cannot run, at start, with a clear message.

use std::process::Command;

use exon_sim::{Scenario, ScenarioError, Workload};

fn exon_sim(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_exon-sim"))
        .args(args)
        .output()
        .expect("exon-sim runs")
}

#[test]
fn payload_above_the_maximum_is_an_error_at_start() {
    let out = exon_sim(&["--payload", "20000000", "--messages", "10"]);
    assert_eq!(out.status.code(), Some(2), "exit status {:?}", out.status);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("payload of 20000000 bytes is above the maximum"),
        "stderr: {err}"
    );
    assert!(out.stdout.is_empty(), "nothing ran: {:?}", out.stdout);
}

#[test]
fn a_payload_that_fits_runs() {
    let out = exon_sim(&["--payload", "1000", "--messages", "50"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("violations=0"));
}

#[test]
fn too_few_nodes_is_an_error_at_start() {
    let out = exon_sim(&["--nodes", "1"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("need at least 2 nodes"));
}

#[test]
fn validate_names_the_limit() {
    let mut sc = Scenario::default();
    let max = sc.config.limits.max_message_size;
    sc.workload = Workload {
        payload_len: max + 1,
        ..Workload::default()
    };
    assert_eq!(
        sc.validate(),
        Err(ScenarioError::PayloadTooLarge { len: max + 1, max })
    );
    sc.workload.payload_len = max;
    assert_eq!(sc.validate(), Ok(()));
}

#[test]
fn the_settings_of_a_soak_are_options() {
    let out = exon_sim(&[
        "--messages",
        "300",
        "--payload",
        "3000",
        "--reorder",
        "0.5",
        "--reorder-max-delay-ms",
        "10",
        "--link-mtu",
        "1400",
        "--no-mtu-discovery",
        "--window",
        "256",
        "--envelope-target",
        "64",
        "--envelope-low",
        "32",
        "--ack-delay-ms",
        "1",
        "--ack-every",
        "4",
        "--record-cap",
        "64",
        "--congestion",
        "new-reno",
        "--take-delay-ms",
        "2",
        "--settle-s",
        "60",
        "--stats",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains("violations=0"), "{line}");
    assert!(
        line.contains("too_big=0"),
        "datagrams at the link MTU: {line}"
    );
    assert!(line.contains("spurious_found=") && line.contains("done_s="));
    assert!(String::from_utf8_lossy(&out.stderr).contains("spurious_retransmissions"));
}

#[test]
fn durable_runs_journal_and_report_it() {
    // No restarts: the core's `State::live_bytes` underflow (see tests/sim/durable.rs)
    // needs a message sent twice, which a debug build would turn into a panic.
    let out = exon_sim(&["--durable", "--messages", "200", "--seeds", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains("violations=0"), "{line}");
    assert!(
        line.contains("stored=200") && line.contains("commits="),
        "{line}"
    );
    assert!(line.contains("all_seeds_ok=true"), "{line}");
}

#[test]
fn rpc_runs_calls_and_reports_them() {
    let out = exon_sim(&[
        "--rpc",
        "--durable",
        "--nodes",
        "3",
        "--servers",
        "0",
        "--messages",
        "90",
        "--loss",
        "0.05",
        "--take-delay-ms",
        "2",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains("violations=0"), "{line}");
    assert!(
        line.contains("calls=90 replies=90") && line.contains("executions=90"),
        "{line}"
    );
}

#[test]
fn channels_run_ordered_flows_and_report_them() {
    let out = exon_sim(&[
        "--channels",
        "2",
        "--channel-window",
        "4",
        "--traffic",
        "many",
        "--nodes",
        "3",
        "--messages",
        "120",
        "--loss",
        "0.05",
        "--reorder",
        "0.3",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = String::from_utf8_lossy(&out.stdout);
    assert!(line.contains("violations=0"), "{line}");
    assert!(
        line.contains("flows=") && line.contains(" gaps=0"),
        "{line}"
    );
}
