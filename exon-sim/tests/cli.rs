//! The `exon-sim` binary refuses what it cannot run, at start, with a clear message.

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
    let max = sc.config.max_message_size;
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
