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

/// A link narrower than exon's base datagram size is refused: below it exon promises
/// nothing (a sweep's `--link-mtu 600` stalled with messages never settled).
#[test]
fn a_link_below_the_base_datagram_size_is_an_error_at_start() {
    let out = exon_sim(&["--link-mtu", "600"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("base datagram size"));
    let out = exon_sim(&["--link-mtu", "1200", "--messages", "200"]);
    assert!(out.status.success());
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

#[test]
fn durable_channels_run_clean_and_refuse_journals_they_cannot_keep() {
    let out = exon_sim(&[
        "--durable",
        "--channels",
        "2",
        "--messages",
        "400",
        "--restarts",
        "6",
        "--disk-sync-us",
        "3000",
        "--seeds",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("all_seeds_ok=true"), "{stdout}");
    assert!(stdout.contains("chan_lost_with_sender="), "{stdout}");
    let out = exon_sim(&["--durable", "--channels", "2", "--journal-loss", "0.1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("durable channels need their journals"),
        "{err}"
    );
}

/// Runs `args` (split at spaces) and asserts the run is clean (the core defects below fail
/// it).
fn clean(args: &str) {
    let out = exon_sim(&args.split_whitespace().collect::<Vec<_>>());
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Found by the durable channels (issue 44), fixed in the core by the rule
/// `restarted_sender_gets_slots`: node2 restarts (its clock jumps) while node0's receiver
/// record of it holds deliveries the channel keeps untaken for their turn. node0 refused
/// node2's new REQSLOTS as an implausible frontier (beyond what the record granted: a
/// restarted sender) and probed; node2's waiver removed the record's free slots but not the
/// record (`is_spent` needs no delivery held); so node2's requests were refused forever,
/// the gap the held messages waited for never left, and the flows stayed blocked with 32
/// messages queued. `exon/tests/core/sender_restarts.rs` isolates it.
#[test]
fn a_restarted_sender_gets_slots_while_its_record_holds_untaken_deliveries() {
    clean(concat!(
        "--durable --channels 4 --messages 4000 --loss 0.05 --dup 0.05 --reorder 0.05 ",
        "--disk-sync-us 3000 --restarts 40 --nodes 3 --traffic many --crash-mid-commit ",
        "0.2 --deadline-ms 300 --abandon-crash 0.2 --seed 24"
    ));
}

/// Found by the simulation campaign (seed 121; an oracle defect, not the core's): in durable
/// mode switched on at restarts, nodes run without a journal until their first restart, and
/// this run has none. node0, its table of two records full, evicted records it had
/// delivered into and, as a receiver without a journal does, answered DOUBT for slots of
/// them it could no longer tell free from filled; two of node1's requests ended in doubt,
/// truthfully. The oracle, in durable mode, took every node for journaled, and called both
/// `DurableInDoubt` and `UnexplainedDoubt`.
#[test]
fn a_node_not_yet_switched_to_durable_mode_may_doubt_after_evictions() {
    clean(concat!(
        "--nodes 4 --messages 1000 --loss 0.2 --record-cap 2 --take-delay-ms 200 ",
        "--rate 20000000 --queue-bytes 4000 --durable --durable-at-restart --rpc ",
        "--seed 47298608"
    ));
}

/// Found by the durable channels' soak (a core defect in plain durable mode, fixed by the
/// rule `whole_awaits_verdict`): with messages large enough to travel in fragments and the
/// receiving application taking 3 ms late, node0 took one message of node1 while node1 was
/// down (its one ACK lost); a late copy of node0's old GOT ("held whole") reached the
/// restarted node1 before it sent any of the restored message, which then had no timer and
/// stayed in flight for ever. `exon/tests/core/sender_restarts.rs` isolates it.
#[test]
fn a_fragmented_message_taken_while_its_sender_was_down_is_acknowledged() {
    clean(concat!(
        "--durable --messages 2000 --restarts 12 --loss 0.05 --dup 0.05 --reorder 0.05 ",
        "--disk-sync-us 3000 --max-payload 4000 --take-delay-ms 3 --seed 9"
    ));
}

/// Two seeds of durable streams across restarts: clean, every stream stored whole and
/// ended; and streams refuse to run without journals, or with deadlines.
#[test]
fn durable_streams_run_clean_and_need_durable_mode() {
    let args = "--durable --streams 2 --stream-bytes 16384 --restarts 6 --loss 0.05 \
                --disk-sync-us 3000 --seeds 2";
    let out = exon_sim(&args.split_whitespace().collect::<Vec<_>>());
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("all_seeds_ok=true"), "{stdout}");
    let whole = "stream_bytes=65536 bytes_stored=65536 ended=4";
    assert!(stdout.contains(whole), "{stdout}");
    for refused in [
        &["--streams", "2"][..],
        &["--durable", "--streams", "2", "--deadline-ms", "100"],
    ] {
        assert_eq!(exon_sim(refused).status.code(), Some(2), "{refused:?}");
    }
}

/// Runs `args` (split at spaces) and asserts the run fails with a violation of `kind`.
fn violates(args: &str, kind: &str) {
    let out = exon_sim(&args.split_whitespace().collect::<Vec<_>>());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains(kind), "{err}");
}

/// Two seeds the durable streams' soak found stalling (`docs/testing.md`, "durable
/// streams in the simulator"): chunks above the first datagram size (fragments, waiting
/// for reassembly credit) and crashes of both sides. A restarted reader held a chunk
/// untaken for an earlier one; its writer, restarted too, asked for credit naming the held
/// chunk (whose verdict the reader withholds) for ever (seed 8), or kept the held chunks
/// in flight, unanswered, until they filled its window (seed 93, three nodes). Fixed by the
/// core rules `credit_asks_each_waiting` and `report_recovered_held`
/// (`exon/tests/core/receiver_restarts.rs`); each seed stalls again with its rule off.
const CHUNKS_2048: &str = concat!(
    "--durable --streams 2 --stream-chunk 2048 --loss 0.05 --dup 0.05 --reorder 0.05 ",
    "--restarts 6 --crash-mid-commit 0.2 --disk-sync-us 3000 --max-events 2000000 --seed 8"
);
const CHUNKS_3000: &str = concat!(
    "--durable --streams 2 --nodes 3 --stream-chunk 3000 --loss 0.05 --dup 0.05 ",
    "--reorder 0.05 --restarts 6 --crash-mid-commit 0.2 --disk-sync-us 3000 ",
    "--max-events 3000000 --seed 93"
);

const CHUNKS_30000: &str = concat!(
    "--durable --streams 2 --nodes 3 --loss 0.05 --dup 0.05 --reorder 0.05 --restarts 6 ",
    "--crash-mid-commit 0.2 --disk-sync-us 3000 --max-events 3000000 --stream-chunk 30000 ",
    "--stream-bytes 400000 --seed 659"
);
/// A seed of the same soak that stalls with `credit_asks_each_waiting` off (and runs clean
/// with it on): since rate samples are bounded by the rate sent (e7a7612), seed 659's
/// course no longer reaches the gap with the rule off.
const CHUNKS_30000_STALLING: &str = concat!(
    "--durable --streams 2 --nodes 3 --loss 0.05 --dup 0.05 --reorder 0.05 --restarts 6 ",
    "--crash-mid-commit 0.2 --disk-sync-us 3000 --max-events 3000000 --stream-chunk 30000 ",
    "--stream-bytes 400000 --seed 602"
);

#[test]
fn fragmented_stream_chunks_go_on_after_crashes() {
    clean(CHUNKS_2048);
    clean(CHUNKS_3000);
    clean(CHUNKS_30000_STALLING);
}

#[test]
#[ignore = "heavy (CI runs it: scripts/heavy-tests.sh)"]
fn without_their_rules_fragmented_stream_chunks_stall_after_crashes() {
    let off = |args: &str, rule: &str| format!("{args} --rules-off {rule}");
    // Seed 8 stalls again with `credit_asks_each_waiting` off as it did when found, with
    // the credit asked as then: `credit_doubles` (larger asks, grants held from before a
    // restart) changes its course, and it runs clean with the first rule alone off.
    violates(
        &off(CHUNKS_2048, "credit_asks_each_waiting,credit_doubles"),
        "StreamIncomplete",
    );
    // With the credit doubling, a 30 000-byte seed of the soak that found the rotation's
    // gap (`credit_rotates_even_with_a_grant`) stalls with the rule off.
    violates(
        &off(CHUNKS_30000_STALLING, "credit_asks_each_waiting"),
        "StreamIncomplete",
    );
    // Seed 93 (three nodes) no longer stalls with `report_recovered_held` off, nor with
    // `probe_prompts_resend` off too: its writer's pace had sunk with the held chunks
    // unanswered, and BBR's pacing floor (the minimum window per round trip) keeps it
    // asking. Clean with every rule on (`fragmented_stream_chunks_go_on_after_crashes`);
    // the rule alone is shown by `receiver_restarts::without_report_recovered_held_it_stays_in_flight`.
}

#[test]
fn rules_off_names_rules() {
    let out = exon_sim(&["--messages", "10", "--rules-off", "no_such_rule"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no such rule: no_such_rule"), "{err}");
}

/// Found by a soak (`--damage 0.3`, 2 000 messages, seed 37): a receiver's journal found
/// damaged and cut at one opening read clean at the next (a crash came before the
/// restarted node's `Covers` record was synced), vouched again for the incarnation whose
/// `Handed` records the damage took, answered LOST, and the messages came again in fresh
/// slots, unflagged: 95 duplicates. The journal now writes the damage down at the opening
/// (`JournalConfig::mark_damage`); `--forget-damage` shows the duplicates come back.
#[test]
fn damage_found_at_one_opening_is_not_forgotten_at_the_next() {
    let args = "--durable --messages 2000 --restarts 12 --loss 0.05 --dup 0.05 --reorder 0.05 \
                --take-delay-ms 3 --disk-sync-us 3000 --damage 0.3 --seed 37";
    clean(args);
    let mut bad: Vec<&str> = args.split_whitespace().collect();
    bad.push("--forget-damage");
    let out = exon_sim(&bad);
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{all}");
    assert!(all.contains("Duplicate"), "{all}");
}

/// The value of `name=` in a report (its first line that has it).
fn field(text: &str, name: &str) -> f64 {
    let key = format!("{name}=");
    text.split_whitespace()
        .find_map(|w| w.strip_prefix(key.as_str()))
        .unwrap_or_else(|| panic!("a {name} field: {text}"))
        .parse()
        .expect("a number")
}

/// Runs `args` (split at spaces), asserts the run is clean, and returns its report.
fn report(args: &str) -> String {
    let out = exon_sim(&args.split_whitespace().collect::<Vec<_>>());
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(out.status.success(), "{text}");
    text
}

/// Found by campaign 87: a server's journal found damaged had lost the record of replies
/// it had sent; the requests came again flagged, its store absorbed the re-runs and it
/// answered again. The caller, whose calls the first replies had ended, discards the second
/// ones (`damage_replies`); the checker took them for `ReplyTwice`. (The campaign's seed
/// 531214937 no longer meets the case with wire version 4's smaller headers; seeds 121,
/// 375 and 378 of 1 to 400 did; since the receipt times of RECEIVED, 93, 94, 116 and 118 of
/// 1 to 300; since wire version 5's last frames without their length, 34, 81, 88, 110 and
/// 119 of 1 to 200.)
#[test]
fn a_damaged_servers_second_replies_are_discarded_by_the_ended_calls() {
    let text = report(
        "--nodes 2 --messages 2000 --loss 0.01 --dup 0.1 --reorder 0.5 --restarts 3 --durable \
         --crash-mid-commit 3 --damage 1 --rpc --fail-one-in 7 --seed 34",
    );
    let n = field(&text, "damage_replies");
    assert!(n > 0.0, "the run meets the case: {text}");
}

/// A durable sender restarted with 100 KB messages in flight: answers to what its life
/// before had sent came within a fraction of a round trip of this life's fragments and were
/// taken for round trips; the minimum RTT fell to a few hundred microseconds and the
/// congestion window with it, and the last ACK came after 15.4 s (2.1 s now; 1 to 2 s
/// without the restart).
#[test]
fn a_restarted_sender_does_not_time_round_trips_from_answers_to_its_life_before() {
    let text = report(
        "--nodes 2 --messages 500 --dup 0.02 --burst 0.05 --restarts 1 --jitter-ms 2 \
         --payload 100000 --durable --seed 16",
    );
    let done = field(&text, "done_s");
    assert!(done < 5.0, "last ACK at {done} s of virtual time: {text}");
}

/// A call's request is given up at the call's deadline, as the endpoint's are (campaign
/// 144: two nodes serving each other, each queue to the other full of its own requests
/// held untaken until their replies could be queued, waited for the event cap, since the
/// simulator gave requests up only at `--deadline-ms`). Here 100 KB requests at 2 MB/s
/// with 200 ms to live: most cannot arrive in time; given up, they end not executed,
/// where requests that outlive their calls are all executed and their late replies
/// discarded.
#[test]
fn a_calls_request_is_given_up_at_the_calls_deadline() {
    let args = "--nodes 2 --rpc --servers 0 --payload 100000 --rate 2000000 \
                --call-deadline-ms 200 --durable --messages 100 --loss 0.05 --seed 1";
    let text = report(args);
    let (calls, executed) = (field(&text, "calls"), field(&text, "executions"));
    assert!(executed < calls / 2.0, "{text}");
    assert!(field(&text, "not_executed") >= calls / 2.0, "{text}");
    assert!(field(&text, "not_delivered") > 0.0, "{text}");
    let text = report(&format!("{args} --requests-outlive-calls"));
    assert_eq!(field(&text, "executions"), calls, "{text}");
    assert_eq!(field(&text, "not_delivered"), 0.0, "{text}");
}

/// Campaign 141: a caller restarted with durable mode switched on (a new journal) makes
/// calls; its server, which never restarted, answers them in envelopes of the caller's
/// incarnation from before the restart, and is told the replies are in doubt. Those calls
/// ended executed without their reply (236 of them), truthfully but uselessly (the checker
/// took each for a reply lost, `ReplyLost`, until it learned which replies were told in
/// doubt). Rule `resend_doubted_replies`: each such reply goes once more, in the caller's
/// new incarnation, and every call gets its reply.
#[test]
fn replies_in_a_restarted_callers_old_envelopes_are_sent_again() {
    let args = "--nodes 2 --messages 4000 --loss 0.2 --dup 0.1 --burst 0.05 --partitions 1 \
                --restarts 1 --jitter-ms 2 --durable --journal-loss 1 --durable-at-restart \
                --rpc --link-mtu 9000 --no-mtu-discovery --max-datagram 9000 --seed 424771944";
    let text = report(args);
    assert!(
        field(&text, "resent_replies") > 0.0,
        "the run meets the case: {text}"
    );
    assert_eq!(field(&text, "no_reply"), 0.0, "{text}");
    let off = report(&format!("{args} --rules-off resend_doubted_replies"));
    assert!(
        field(&off, "no_reply") > 0.0,
        "rule off: calls end without reply: {off}"
    );
    assert_eq!(field(&off, "resent_replies"), 0.0, "{off}");
}

/// A stream run's work is its bytes stored: `done_s` says when the last of them were (it
/// said 0, since streams acknowledge no messages of the workload's), so that the campaign
/// tells a stream run cut off while it still moves (campaign 137: 4 nodes, one sender
/// record each, one-slot windows at 50 ms, 330 bytes a second, steadily, until the event
/// cap) from a stuck one.
#[test]
fn a_stream_runs_work_is_done_when_its_last_bytes_are_stored() {
    let text = report("--nodes 2 --streams 2 --durable --seed 3");
    let (done, end) = (field(&text, "done_s"), field(&text, "virtual_s"));
    assert!(
        done > 0.0 && done <= end,
        "done at {done} s of {end}: {text}"
    );
}

/// Rule `random_loss_made_up`: 20 000-byte messages over a path that loses a fifth of its
/// datagrams at random (in bursts) with 2 ms of jitter. Each delivery-rate sample counted
/// only what got through, the window (two products at the minimum RTT) was half full of
/// losses not yet declared, and the bandwidth estimate shrank round after round to the
/// pacing floor: the last ACK at 161 s of virtual time. Samples made up for the loss every
/// recent stretch of traffic met: 5.2 s. (The campaign's seed, 856040118, ends in 17-19 s
/// either way since wire version 5's last frames without their length; seed 21 of 1 to 60,
/// the first of seven that meet the collapse, takes 5.2 s with the rule, 163 s without.)
#[test]
fn a_path_that_loses_a_fifth_at_random_keeps_its_rate() {
    let args = "--nodes 2 --messages 4000 --payload 20000 --loss 0.2 --burst 0.05 \
                --jitter-ms 2 --seed 21";
    let done = field(&report(args), "done_s");
    assert!(done < 20.0, "last ACK at {done} s of virtual time");
    let off = field(
        &report(&format!("{args} --rules-off random_loss_made_up")),
        "done_s",
    );
    assert!(
        off > 60.0,
        "without the rule the estimate collapses: {off} s"
    );
}

/// Found by campaign 98 (seed 872294999, 2 000 messages): 100 000-byte messages under
/// NewReno at 20 % loss, the receiver restarted with its journal lost. The sender had
/// started about 170 messages in fragments while its pacing rate (NewReno's, the window
/// over the RTT) stood high; the rate then fell tenfold, every message in progress got a
/// fragment a few times a minute, and every partial expired at the receiver (30 s) before
/// it was whole: no ACK for the rest of the run. The messages in progress now get bytes
/// oldest first, as many as the path finishes in time (rule `progress_oldest_first`).
/// Since the budget follows what the receiver holds (`progress_measured`), fewer messages
/// are started when the rate falls and this cell passes with either rule alone (16 seeds
/// with `progress_oldest_first` off): the two are switched off together.
#[test]
fn messages_started_at_a_higher_rate_wait_for_the_older_ones() {
    let args = "--nodes 2 --messages 600 --loss 0.2 --dup 0.1 --burst 0.05 --partitions 3 \
                --restarts 1 --payload 100000 --record-cap 1 --congestion new-reno --durable \
                --journal-loss 1 --abandon-crash 3 --seed 872294999 --settle-s 3000";
    clean(args);
    let off = "progress_oldest_first,progress_measured";
    violates(&format!("{args} --rules-off {off}"), "Lost");
}

/// Found by campaign 107 (seed 926875471): four nodes, messages of 100 000 bytes, half the
/// datagrams held up to 5 s behind a shared 20 MB/s queue. Most of what moved was sent
/// again; BBR's bandwidth estimate stood about 25 times above what receivers came to hold,
/// so dozens of messages were in progress in turn, every partial expired (30 s without a
/// new byte) before its turn came again, and 273 of 500 messages were still missing after
/// 40 000 s. The budget of messages in progress now follows what the receiver came to hold
/// (rule `progress_measured`): done in about 140 s, no partial expired. Since BBR's window
/// keeps an allowance for what the path holds back (`reordering_allowance`), grown by a
/// quarter of each round's length, the estimate no longer stands that far above what
/// arrives and seeds 1-12 finish in 19-154 s with or without this rule; without the
/// allowance, seeds 1-6 finish only with it (and lose 133-375 of 500 without it). So the
/// rule is checked with the allowance off, seed 1.
#[test]
fn large_messages_held_for_seconds_are_bounded_by_what_arrives() {
    let args = "--nodes 4 --messages 500 --reorder 0.5 --reorder-max-delay-ms 5000 \
                --payload 100000 --rate 20000000 --shared-queue --latency-ms 1 \
                --seed 1 --settle-s 400";
    clean(args);
    clean(&format!("{args} --rules-off reordering_allowance"));
    violates(
        &format!("{args} --rules-off reordering_allowance,progress_measured"),
        "Lost",
    );
}

/// Half the datagrams held up to 100 ms on a 5 ms path with no bottleneck: data stays
/// unacknowledged well beyond the minimum RTT BBR sizes its window by (two products), so
/// that window bound the senders and the estimate, made of what it delivered, settled ever
/// lower: 500 messages of 100 000 bytes between three nodes took 32-59 s of virtual time
/// (seeds 1-5) where 50 ms holds take 0.6 s. The window now keeps an allowance for what the
/// path holds back while the bottleneck shows no queue (rule `reordering_allowance`):
/// 3.7-9.3 s (seeds 1-5).
///
/// With holds of up to 500 ms a round lasts about a second, so an allowance grown by a
/// quarter of the minimum RTT a round (as it first was) grew by a few milliseconds a
/// second, and the estimate fell from ~5 MB/s to 0.3 MB/s while the window waited for it:
/// 138 s (seeds 2-4: 46-58 s). It grows by a quarter of the round's length now: 9-16 s on
/// seeds 1-6, inside the second case's settle time.
#[test]
fn a_path_that_holds_datagrams_back_is_not_a_slow_path() {
    for (hold_ms, settle_s) in [(100, 20), (500, 40)] {
        let args = format!(
            "--nodes 3 --messages 500 --payload 100000 --reorder 0.5 \
             --reorder-max-delay-ms {hold_ms} --seed 1 --settle-s {settle_s}"
        );
        clean(&args);
        violates(&format!("{args} --rules-off reordering_allowance"), "Lost");
    }
}

/// Found by campaign 91 (seed 841090675): durable streams between four nodes that restart.
/// A restarted sender kept a grant of no bytes in its receiver's old incarnation (charged
/// for a partial of its life before, given back since) while its asks for credit went to
/// the current incarnation and were answered in full. A message recovered in the old
/// incarnation then waited for credit with nothing asked for it, no ask outstanding and
/// no timer: one stream's chunk never left, and the run ended not idle after 124 s. A
/// message waiting in an incarnation the last REQCREDIT did not name now asks.
#[test]
fn a_message_recovered_in_an_old_incarnation_asks_for_its_credit() {
    clean(
        "--nodes 4 --messages 4000 --loss 0.05 --dup 0.1 --reorder 0.2 --restarts 6 \
         --jitter-ms 2 --durable --crash-mid-commit 3 --streams 4 --stream-chunk 5000 \
         --seed 841090675",
    );
}

/// `--queue-bytes`: a rate limiter with room for a few datagrams is a policer, dropping
/// what comes above its rate where the default queue (256 KiB) holds it; both runs clean.
#[test]
fn a_short_queue_is_a_policer() {
    let base = "--nodes 2 --messages 2000 --payload 3000 --rate 1250000 --seed 1";
    let deep = field(&report(base), "link_drops");
    let short = field(&report(&format!("{base} --queue-bytes 4000")), "link_drops");
    assert!(deep == 0.0 && short > 100.0, "{short} against {deep}");
}

/// The `too_big` drops of a run, over its seeds' lines.
fn too_big(out: &std::process::Output) -> u64 {
    let text = String::from_utf8_lossy(&out.stdout);
    let fields: Vec<u64> = text
        .split_whitespace()
        .filter_map(|w| w.strip_prefix("too_big="))
        .map(|f| f.parse().expect("a number"))
        .collect();
    assert!(!fields.is_empty(), "a too_big field: {text}");
    fields.iter().sum()
}

#[test]
fn the_routes_size_is_probed_first_and_a_larger_one_falls_back() {
    // The link carries 1472 bytes. Told so, discovery probes nothing the link drops; told
    // nothing, its steps probe above it; told a larger route, that size fails and the
    // steps find the link's. Every run delivers everything exactly once, under loss,
    // duplication and reordering.
    let run = |route: Option<&str>| {
        let mut args = vec!["--loss", "0.05", "--dup", "0.05", "--reorder", "0.05"];
        args.extend(["--seeds", "3", "--messages", "3000"]);
        if let Some(r) = route {
            args.extend(["--route", r]);
        }
        let out = exon_sim(&args);
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(out.status.success(), "{text}");
        assert!(text.contains("all_seeds_ok=true"), "{text}");
        too_big(&out)
    };
    assert_eq!(run(Some("1472")), 0, "the route's size is the link's");
    assert!(run(None) > 0, "the steps probe above the link");
    assert!(
        run(Some("9000")) > 0,
        "a larger route's size is probed and fails"
    );
}

#[test]
fn durable_streams_with_chunks_above_a_few_kilobytes_are_journalled() {
    // The journal's records were sized for the workload's payloads alone: a chunk of
    // 20 000 bytes failed every append (a JournalError per chunk, the streams stalled).
    // Sized for the largest chunk in its envelope, every byte arrives once, through
    // restarts and loss, each chunk in fragments.
    let out = exon_sim(&[
        "--durable",
        "--streams",
        "2",
        "--stream-chunk",
        "20000",
        "--stream-bytes",
        "120000",
        "--restarts",
        "3",
        "--loss",
        "0.05",
        "--seeds",
        "3",
    ]);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("all_seeds_ok=true"), "{text}");
}

#[test]
fn credit_rotates_even_with_a_grant() {
    // Three durable nodes, 30 000-byte chunks (in fragments), crashes mid-commit: in seed
    // 659 a writer's chunks waited for credit in an incarnation its reader had lost in a
    // restart, while the writer still held a grant of it from before. Its REQCREDIT kept
    // naming a chunk the reader held untaken (no answer: its application waited for
    // another chunk first), because the sender named the next waiting chunk only when it
    // held no grant; the streams stalled for good (NotIdle, StreamIncomplete). Naming the
    // next one each time the ask goes unanswered, the reader answers for the others.
    let out = exon_sim(&CHUNKS_30000.split_whitespace().collect::<Vec<_>>());
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.contains(" violations=0 "), "{text}");
    assert!(text.contains(" idle_nodes=3 "), "{text}");
}

/// Senders competing at one bottleneck from the command line: several seeds of the incast
/// pattern through shared queues, with loss, partitions and a restart, keep every check;
/// a shared queue without a rate limit is refused at start.
#[test]
fn incast_through_shared_queues_soaks() {
    let out = exon_sim(&[
        "--traffic",
        "incast",
        "--shared-queue",
        "--rate",
        "125000",
        "--nodes",
        "4",
        "--messages",
        "2000",
        "--loss",
        "0.01",
        "--partitions",
        "2",
        "--restarts",
        "1",
        "--seeds",
        "3",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    assert!(stdout.contains("violations=0"), "{stdout}");
    let out = exon_sim(&["--shared-queue", "--messages", "10"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("a shared queue needs a rate limit"), "{err}");
}

/// Losses in step with the exchange (`--drop-every`): with every second datagram of each
/// link lost, a receiver's ACK of retransmitted tokens and its next probe fall one on each
/// side of the cycle, and the probe draws the tokens again (`probe_prompts_resend`). Found
/// by the core's every-third-datagram pair test when TOKEN framing shrank (wire version 3):
/// with `probe_repeats_ack` off the tokens stay in flight until the run gives up, with it
/// the probe carries the ACK again and every message is acknowledged. (Between two nodes
/// the probe's repeated grant, `probe_repeats_grant`, now shifts that cycle's phase too;
/// among three, the rule alone decides.)
#[test]
fn losses_in_step_with_the_exchange_end_with_every_message_acknowledged() {
    clean("--drop-every 2 --messages 20000 --seed 1");
    clean("--drop-every 3 --messages 20000 --seeds 3 --nodes 3 --dup 0.02");
    // 8 000 messages: with wire version 4's smaller headers no seed of 1 to 40 met the
    // defect with 5 000 (seed 1 did before), every seed of 1 to 20 does with 8 000.
    let three = "--drop-every 2 --messages 8000 --seed 1 --nodes 3";
    clean(three);
    violates(
        &format!("{three} --rules-off probe_repeats_ack"),
        "NotAcknowledged",
    );
}

/// Losses in step with the exchange after a restart: every answer to a retransmission lost,
/// every timer's datagram passing. Each case ends with every message settled with the rule
/// that carries the lost answer on the timer's datagram, and leaves messages unsent or in
/// flight without it: the restarted sender's waiver of the record it holds nothing of rides
/// with each REQSLOTS (`request_carries_waiver`); the receiver's probe repeats its last
/// unused grant (`probe_repeats_grant`), its verdicts for incarnations not its own
/// (`probe_repeats_old_verdicts`), and the GOT of messages in progress
/// (`probe_repeats_got`).
#[test]
fn losses_in_step_after_a_restart_end_with_every_message_settled() {
    let small = "--drop-every 2 --restarts 1 --messages 5000";
    let large = "--drop-every 2 --restarts 1 --messages 2000 --payload 100 --max-payload 20000";
    for (args, rule) in [
        // Timing decides whether a run meets the defect: seed 1 did until the controller
        // told jitter from a queue (its rounds changed), seed 56 does since; the large
        // messages' seed 1 did until messages in progress were served oldest first, seed 2
        // until BBR's window kept an allowance for datagrams held back, seed 5 until that
        // allowance grew with the rounds' length (seeds 29, 33 and 40 of 1 to 40 since);
        // the small messages' seeds 56, 14 and 69 and the large ones' 33 did until path MTU
        // discovery was told the reach of a token's whole datagram rather than its frame's
        // (the large messages' seeds 4, 5 and 17 of 1 to 17 since), and wire version 4's
        // smaller headers (since then: the small messages' first seeds of 1 to 1 000 are 234
        // for the waiver and 45 for the old verdicts; the repeated grant meets no seed of 1
        // to 1 000 with 5 000 messages, seeds 148, 175 and 220 of 1 to 300 with 2 000; the
        // large messages' seeds 16, 17 and 36 of 1 to 40; since the loss rate that marks
        // the others as not yielding counts in bandwidth-delay products, 17, 36 and 55 of 1
        // to 60; since a message in progress all in flight keeps no newer one waiting, 41
        // and 55 of 1 to 60; since the receipt times of RECEIVED, 10 of 1 to 60), and wire
        // version 5's last TOKEN without its length (since then: the small messages' seeds
        // 147, 228 and 241 of 1 to 400 for the waiver, 6, 22 and 33 for the old verdicts,
        // 134, 227 and 581 of 1 to 1 000 for the repeated grant, which meets no seed of 1 to
        // 2 000 with 2 000 messages; the large messages' 16, 113 and 150 of 1 to 150).
        (format!("{small} --seed 147"), "request_carries_waiver"),
        (format!("{small} --seed 134"), "probe_repeats_grant"),
        (format!("{small} --seed 6"), "probe_repeats_old_verdicts"),
        (format!("{large} --seed 16"), "probe_repeats_got"),
    ] {
        clean(&args);
        violates(&format!("{args} --rules-off {rule}"), "Lost");
    }
    clean("--drop-every 2 --restarts 3 --messages 3000 --seeds 10");
    clean("--drop-every 3 --restarts 2 --messages 3000 --seeds 10 --nodes 3");
    // A call whose request is acknowledged only after the call's deadline, its reply lost
    // with the server's restart, ends at the acknowledgement (`CallState`; it never ended).
    clean("--drop-every 2 --rpc --servers 2 --restarts 2 --call-deadline-ms 500 --messages 2000 --seed 22");
    // The same with random loss and a short call deadline (`CallNotEnded` before).
    clean(
        "--loss 0.3 --rpc --servers 2 --restarts 3 --call-deadline-ms 100 --messages 2000 --seed 5",
    );
    // In plaintext a restarted sender's request is refused, not counted: another phase
    // (seed 4; seed 40 met the defect until the controller told jitter from a queue, seed
    // 17 until wire version 4's smaller headers: 33, 49 and 70 of 1 to 70 since, and 33
    // until wire version 5's last frames without their length: 4 and 94 of 1 to 100 since).
    let plain = "--plaintext --drop-every 2 --restarts 1 --messages 5000 --seed 4";
    clean(plain);
    violates(
        &format!("{plain} --rules-off probe_repeats_old_verdicts"),
        "Lost",
    );
}

/// A durable sender's frontier stays below a slot a RETRY or LOST took its message out of
/// until the move's `Unassigned` record is durable (`frontier_waits_for_moves`). Without
/// it the frontier passes the slot at once; a crash before the record then recovers the
/// message in its old slot, below a frontier its receiver was told, and the receiver,
/// which forgot its deliveries there, answers DOUBT (`doubt_below_forgotten`): an honest
/// durable sender's message ends in doubt.
#[test]
fn a_moved_message_holds_the_frontier_until_its_move_is_journalled() {
    for args in [
        "--durable --restarts 6 --loss 0.1 --messages 3000 --seed 77",
        "--durable --restarts 8 --loss 0.05 --disk-sync-us 20000 --seed 11",
    ] {
        clean(args);
        violates(
            &format!("{args} --rules-off frontier_waits_for_moves"),
            "DurableInDoubt",
        );
        clean(&format!(
            "{args} --rules-off frontier_waits_for_moves,doubt_below_forgotten"
        ));
    }
}

/// `--trace` prints each datagram, decoded, with its fate: the frames of an exchange can be
/// read (how every cycle of losses in step was found). It needs `--plaintext`.
#[test]
fn a_trace_shows_each_datagram_and_its_fate() {
    let out = exon_sim(&[
        "--plaintext",
        "--trace",
        "--messages",
        "40",
        "--drop-every",
        "3",
        "--seed",
        "1",
    ]);
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains("->")).collect();
    assert!(lines.iter().any(|l| l.contains(" ok ReqSlots")), "{err}");
    assert!(
        lines.iter().any(|l| l.contains("Token { s: 0, r: 0")),
        "{err}"
    );
    let dropped = lines.iter().filter(|l| l.contains(" DROP ")).count();
    assert!(
        dropped * 3 >= lines.len() - 2 && dropped * 3 <= lines.len() + 2,
        "every third datagram of each link: {dropped} of {}",
        lines.len()
    );
    let out = exon_sim(&["--trace", "--messages", "10"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("needs --plaintext"), "{err}");
}

#[test]
fn drop_every_one_is_refused() {
    let out = exon_sim(&["--messages", "10", "--drop-every", "1"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("loses every datagram"), "{err}");
}

/// Keyed sends with a journal that forgets keys undetected (restored from an older copy,
/// or durable mode switched on at a restart) are refused as a scenario: exactly once is no
/// promise there (a random campaign ran them and reported duplicates, and with
/// `--durable-at-restart` an application that could never send keyed before its first
/// restart retried for ever). A lost or damaged journal says it forgot: those run.
#[test]
fn keyed_sends_with_a_journal_that_forgets_keys_undetected_are_refused() {
    for extra in [&["--durable-at-restart"][..], &["--restore", "0.5"]] {
        let mut args = vec![
            "--durable",
            "--keyed",
            "--messages",
            "10",
            "--restarts",
            "1",
        ];
        args.extend_from_slice(extra);
        let out = exon_sim(&args);
        assert_eq!(out.status.code(), Some(2), "{extra:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("keyed sends need their journals"), "{err}");
    }
}

/// Rule `forgotten_keys_refused`: a sender's journal lost (its clock kept) or damaged may
/// have forgotten keys it had accepted. The restarted node refuses keyed sends
/// (`KeysForgotten`) until the application settles the destination's keys; this
/// application gives its rows to that destination up in doubt and settles at the highest
/// key it used. No row is delivered twice, and every one ends with a verdict. With the rule
/// off, the rows sent again are new messages, and the oracle finds them delivered twice.
#[test]
fn keyed_rows_after_a_lost_or_damaged_journal_end_in_doubt_never_twice() {
    let base = "--durable --keyed --messages 2000 --restarts 8 --loss 0.05 --dup 0.05 \
                --reorder 0.05 --take-delay-ms 3";
    for seed in 1..=3 {
        clean(&format!("{base} --journal-loss 0.4 --seed {seed}"));
        clean(&format!("{base} --damage 0.4 --seed {seed}"));
    }
    let off = "--journal-loss 0.4 --seed 1 --rules-off forgotten_keys_refused";
    violates(&format!("{base} {off}"), "Duplicate");
}

/// Rule `progress_within_reassembly_timeout`: 100 000-byte messages over a path with 20 %
/// loss and 20 ms of jitter, where the bandwidth estimate falls low. Every message the
/// reassembly credit covered (about 160) was in progress at once, each at its share of the
/// path, so each took longer than the receiver keeps a partial (30 s): every partial
/// expired before it was whole and nothing more was delivered (74 of 1 000 in 2 000 s of
/// virtual time; found by `scripts/sim-campaign.py`). With the rule a sender keeps in
/// progress what the path moves in a quarter of that time: all delivered. Since BBR's
/// samples are made up for random loss, that path keeps its rate; a link of 300 KB/s
/// does the same (seeds 1, 3-6, 8, 9 and 12 of 1 to 12 lose 150-371 of 400 messages
/// without the rule since the reordering allowance grows with the rounds' length, seed 2
/// did before; all end within 88 s with it).
#[test]
fn fragmented_messages_in_progress_finish_before_their_partials_expire() {
    // Seed 2: seed 3, used before, no longer met the defect with wire version 4's smaller
    // headers; seeds 2, 5, 7 and 9 of 1 to 10 do.
    let args = "--nodes 2 --messages 400 --payload 100000 --loss 0.2 --jitter-ms 20 \
                --rate 300000 --seed 2 --settle-s 600";
    clean(args);
    let off = "--rules-off progress_within_reassembly_timeout";
    violates(&format!("{args} {off}"), "Lost");
}

/// A sender restored from an older copy of its directory sends again what the copy held
/// unsettled; a receiver that never restarted, having forgotten below the lost run's
/// frontier what it delivered there, answers DOUBT, truthfully (`doubt_below_forgotten`).
/// The oracle allowed that `InDoubt` as a durable verdict but still reported it as
/// unexplained, since the receiver never restarted (79 messages; found by
/// `scripts/sim-campaign.py`): the checker's fault, not the core's.
#[test]
fn a_restored_senders_doubt_from_a_receiver_that_forgot_is_explained() {
    clean(
        "--nodes 4 --messages 4000 --loss 0.2 --reorder 0.05 --restarts 6 --durable \
         --restore 1 --deadline-ms 100 --seed 580809990",
    );
}

/// Rule `parked_early_probes`: an early delivery parked for its sender's word (STORED, or
/// a frontier past it), from a sender that then restarted with its journal lost and had
/// nothing more to send, kept its receiver record (no free slot, so no probe) and the
/// delivery for good: the run never went idle (found by `scripts/sim-campaign.py`). The
/// record now probes while deliveries are parked, and the sender's waiver drops them.
#[test]
fn a_delivery_parked_for_a_silent_senders_word_is_probed_for_it() {
    let args = "--nodes 3 --messages 500 --loss 0.2 --dup 0.02 --reorder 0.2 --restarts 1 \
                --take-delay-ms 200 --durable --journal-loss 1 --deadline-ms 100 --seed 667348306";
    clean(args);
    violates(
        &format!("{args} --rules-off parked_early_probes"),
        "NotIdle",
    );
}

/// A sender's journal damaged after it gave messages up and reported their verdicts: the
/// damage took the `Resolved` records, so the restarted node recovers the messages, and
/// resolves each in doubt (it does not send them again). The checker took the recovery for
/// a resend and reported 231 verdicts revoked (found by `scripts/sim-campaign.py`).
#[test]
fn a_damaged_senders_recovered_messages_revoke_no_verdict() {
    clean(
        "--nodes 2 --messages 2000 --loss 0.01 --dup 0.1 --partitions 3 --restarts 1 \
         --take-delay-ms 200 --durable --damage 2 --deadline-ms 300 --seed 887321582",
    );
}

/// A server's journal lost at a restart after it took requests and stored their replies
/// with the takes: the replies go with the journal (documented), but the checker excused
/// only a restart after the caller heard the ACK, which may arrive later; 90 replies were
/// reported lost unexcused (found by `scripts/sim-campaign.py`). Now a restart after the
/// take excuses them.
#[test]
fn replies_lost_with_a_servers_journal_after_the_take_are_excused() {
    clean(
        "--nodes 2 --messages 1000 --restarts 1 --jitter-ms 20 --record-cap 1 --durable \
         --journal-loss 1 --rpc --call-deadline-ms 200 --seed 827918214",
    );
}

/// Late duplicates of old tokens reach a durable receiver below the frontier its sender
/// reported, where a live record answers DOUBT (to catch a restored sender's resends, the
/// next test). The honest sender holds no token there and ignores the verdict
/// (`stale_verdicts_ignored`). Without that, each such DOUBT made it drop its envelopes and
/// credit for the incarnation, and with 100 000-byte messages, duplication and a restart it
/// livelocked: 654 tokens, millions of retransmissions, nothing delivered (found by
/// `scripts/sim-campaign.py`; the rule off takes 90 s to show it here, so the core test
/// `a_doubt_below_the_senders_frontier_settles_nothing` switches it off instead).
#[test]
fn late_duplicates_below_the_frontier_do_not_unsettle_an_honest_sender() {
    clean(
        "--nodes 2 --messages 2000 --loss 0.1 --dup 0.1 --reorder 0.05 --partitions 1 \
         --restarts 1 --jitter-ms 2 --payload 100000 --durable --abandon-crash 1 --rpc \
         --fail-one-in 7 --seed 941883459",
    );
}

/// A sender restored from an older copy of its directory sends again, in the slots the
/// copy knew, messages the lost run gave up at their deadline. That run's frontier waived
/// those slots, never delivered, and the receiver's record lived on: the ACK of a
/// duplicate there reported messages delivered that never were (54 with seed 580022494,
/// found by `scripts/sim-campaign.py`, seed 80; 168 with the second run here, campaign
/// 129, where nothing below the frontier had been taken, so the journal had forgotten
/// nothing and answered the ACK even with `doubt_below_forgotten`). A record now answers
/// DOUBT below any frontier that waived free slots, and a durable receiver below every
/// frontier it heard (the core test
/// `a_restored_sender_in_slots_its_frontier_waived_is_not_told_delivered` switches the
/// rule off). The simulator's application now gives up at once, after a restore, the
/// messages whose deadline passed in the lost run (it keeps its deadlines, and a restored
/// message is in flight again), so these runs no longer send them: both end clean, the
/// second in 4.7 s where it took 520 s to send 147 long-expired 100 kB messages again.
/// An application that forgets its deadlines at a restore (`--restore-forgets-deadlines`,
/// drawn by the campaign) sends them again: the first run then ends clean with the rule,
/// 54 messages in doubt, and with 54 acknowledged never delivered without it.
#[test]
fn a_restored_senders_waived_slots_end_in_doubt_not_acknowledged() {
    let args = "--nodes 2 --messages 2000 --loss 0.05 --reorder 0.5 --partitions 1 \
                --restarts 3 --durable --restore 1 --deadline-ms 100 --seed 580022494";
    clean(args);
    let forgets = format!("{args} --restore-forgets-deadlines");
    clean(&forgets);
    violates(
        &format!("{forgets} --rules-off doubt_below_forgotten"),
        "AckWithoutDelivery",
    );
    clean(
        "--nodes 3 --messages 4000 --loss 0.2 --dup 0.02 --burst 0.01 --partitions 1 \
         --restarts 3 --payload 100000 --congestion new-reno --durable --restore 1 \
         --deadline-ms 300 --link-mtu 9000 --route 1500 --seed 674320645",
    );
}

/// Found by the campaign's `--restore-forgets-deadlines` at once: early deliveries (ETOKENs
/// held for their sender's word) dropped unseen when the sender's frontier passed them,
/// after it had stored the messages and given them up. A copy of its directory taken in
/// between, restored, sends them again in those slots. The drop answered its take with an
/// ACK, which a probe repeated to the restored sender (seed 7: 2 messages acknowledged,
/// never delivered), and the journal's archive kept that take although the frontier's
/// `Confirmed` had come first, so a record-less answer was its ACK (seed 189, three nodes:
/// 6). Rule `dropped_unseen_doubt`: such a slot counts as waived unfilled (DOUBT), the
/// drop's take answers DOUBT, and a take the archive holds below the forgotten frontier
/// answers DOUBT.
#[test]
fn early_deliveries_dropped_unseen_end_in_doubt_for_a_restored_sender() {
    for args in [
        "--nodes 2 --messages 2000 --loss 0.05 --reorder 0.5 --partitions 1 --restarts 3 \
         --durable --restore 1 --deadline-ms 100 --restore-forgets-deadlines --seed 7",
        "--nodes 3 --messages 1000 --loss 0.1 --dup 0.02 --restarts 3 --durable \
         --restore 0.5 --deadline-ms 300 --crash-mid-commit 1 --restore-forgets-deadlines \
         --seed 189",
    ] {
        clean(args);
        violates(
            &format!("{args} --rules-off dropped_unseen_doubt"),
            "AckWithoutDelivery",
        );
    }
}

/// A first form of `dropped_unseen_doubt` kept no take below the receiver's forgotten
/// frontier in the journal's archive. But a take stored after its sender's frontier
/// passed the slot (a call given up at its deadline before the server took its request)
/// is what the archive's probe is for: it brings the frontier again, whose `Confirmed`
/// then covers the take. Without the entry no probe went, and the journal kept the
/// deliveries live for good (`JournalNotEmpty`, found by a campaign focused on restores
/// with deadlines, `--require restore,deadline-ms`, seed 134; neither run restarts).
#[test]
fn late_takes_below_the_frontier_still_leave_the_journal() {
    clean(
        "--nodes 4 --messages 1000 --reorder 0.5 --reorder-max-delay-ms 5000 --jitter-ms 2 \
         --rate 2000000 --queue-bytes 32768 --durable --crash-mid-commit 3 --damage 1 \
         --restore 2 --deadline-ms 100 --rpc --servers 0 --seed 339615362",
    );
    clean(
        "--nodes 4 --messages 2000 --loss 0.1 --dup 0.02 --burst 0.01 --partitions 3 \
         --jitter-ms 2 --record-cap 1 --rate 20000000 --shared-queue --queue-bytes 32768 \
         --durable --restore 1 --deadline-ms 100 --rpc --fail-one-in 7 --window 16 \
         --envelope-target 8 --envelope-low 4 --drop-every 3 --servers 0 --seed 157725138",
    );
}

/// More sources than receiver records (three callers, a server with two): each new
/// source's REQSLOTS evicted the oldest unproven record, the one whose TOKEN was about to
/// arrive, so every TOKEN got RETRY and nothing was delivered (15 million datagrams in
/// 150 s of virtual time for 2 000 calls; found by `scripts/sim-campaign.py`). A sealed node keeps an
/// unproven record heard from within `probe_interval` (`fresh_records_kept`) and the new
/// source waits its turn. (The requests outlive their calls here: with the endpoint's
/// deadlines the storm's requests end given up, truthfully, and the defect shows only as
/// calls that never got through.)
#[test]
fn more_sources_than_records_take_turns_instead_of_evicting_each_other() {
    // A short settle time: without the rule the storm fills all of it.
    let args = "--nodes 4 --messages 300 --record-cap 2 --rpc --requests-outlive-calls \
                --seed 1 --settle-s 3";
    clean(args);
    violates(&format!("{args} --rules-off fresh_records_kept"), "Lost");
    clean("--nodes 3 --messages 600 --record-cap 1 --rpc --seeds 3");
}

/// The same in plaintext, where an unproven record may be a forger's: a plaintext node kept
/// none, and three callers of a server with one record delivered nothing (900 000
/// datagrams for 600 calls; found by `scripts/sim-campaign.py`, seeds 81 and 83). It keeps
/// a fresh one for two round trips to its source.
#[test]
fn plaintext_sources_beyond_the_records_take_turns_too() {
    let args = "--plaintext --nodes 3 --messages 300 --record-cap 1 --rpc \
                --requests-outlive-calls --seed 1 --settle-s 3";
    clean(args);
    violates(&format!("{args} --rules-off fresh_records_kept"), "Lost");
    clean(
        "--nodes 4 --messages 2000 --partitions 3 --restarts 1 --plaintext --record-cap 1 \
         --durable --crash-mid-commit 1 --journal-loss 1 --rpc --call-deadline-ms 1000 \
         --seed 707715167",
    );
}

/// Messages of many fragments over a path that reorders and jitters: a verdict that came
/// before the GOT making a message whole gave its reassembly credit back without trying
/// the messages waiting for that credit, and with the last CREDIT answered in full no
/// REQCREDIT was outstanding: the sender stopped for good, tokens queued, slots free,
/// nothing in flight, no timer (`credit_return_resumes`; found by
/// `scripts/sim-campaign.py`: 5 of 6 seeds of 4 000 messages).
#[test]
fn credit_a_verdict_gives_back_wakes_the_messages_waiting_for_it() {
    // Seed 2 (again): seed 2, used before, took another course once refused fragments were
    // answered (`got_charges_partials`), and seed 1, used since, with wire version 4's
    // smaller headers; seeds 2, 4, 6, 7 and 11 of 1 to 11 met the defect then, and seed 3
    // (with 4, 6, 8, 10-12 and 15-17 of 1 to 20) since a message in progress all in flight
    // keeps no newer one waiting (`progress_past_all_sent`), and seed 5 (with 6, 12 and 15
    // of 1 to 15) since wire version 5's last frames without their length.
    let args = "--nodes 2 --messages 1000 --reorder 0.2 --jitter-ms 20 --payload 100000 --seed 5";
    clean(args);
    violates(&format!("{args} --rules-off credit_return_resumes"), "Lost");
}

/// A receiver without a journal that evicts a record whose free slots lie in more ranges
/// than it keeps joins the closest ones into spans of doubt, instead of answering DOUBT for
/// every slot: found by a sweep (seed 5046: 27 messages in doubt, each reported by the
/// oracle, which did not know an eviction explains a doubt; now 2, explained).
#[test]
fn an_evicted_fragmented_record_leaves_few_messages_in_doubt() {
    let args = "--nodes 5 --traffic many --record-cap 2 --burst 0.3 --loss 0.1 --dup 0.1 \
                --messages 2000 --seed 5046";
    let out = exon_sim(&args.split_whitespace().collect::<Vec<_>>());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let last = text.lines().last().unwrap_or_default();
    let field = |k: &str| -> u64 {
        last.split_whitespace()
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {k} in {last}"))
    };
    assert_eq!(field("violations"), 0, "{last}");
    assert!(field("in_doubt") <= 2, "{last}");
    assert_eq!(field("duplicates"), 0);
    clean("--nodes 5 --traffic many --record-cap 2 --burst 0.3 --loss 0.1 --dup 0.1 --messages 2000 --seeds 40 --seed 5020");
}

/// Channels without journals across restarts: the simulator hands a restarted receiver's
/// unknown-run messages to the application out of the order, as the endpoint does, and the
/// oracle checks them (it reported them `ChannelAckedNotReleased` when the simulator
/// discarded them: 20 of 30 seeds of the first command).
#[test]
fn channels_without_journals_survive_restarts_as_the_endpoint_does() {
    clean(
        "--channels 3 --loss 0.2 --reorder 0.4 --restarts 2 --messages 2000 --seeds 20 --seed 7000",
    );
    clean("--channels 2 --channel-window 2 --loss 0.1 --dup 0.1 --restarts 4 --messages 2000 --seeds 10");
}

/// A channel whose sender restarted without a journal and never used it again: its
/// receiver asks about the stalled run, the new sender says it is over, and what was held
/// of it goes to the application out of order, so the receiver's record can go. Without
/// the question (`--stall-query-ms 0`) the run stays held and the receiver is not idle at
/// the end (found by a sweep: 38 of 200 seeds of this command; seed 5 was one until
/// `fresh_records_kept` changed the runs' timing, and 6 of 40 are since: seed 3 is one).
#[test]
fn a_run_its_restarted_sender_forgot_is_drained_on_its_answer() {
    let args = "--channels 2 --nodes 4 --traffic many --loss 0.1 --reorder 0.3 --restarts 4 \
                --record-cap 2 --messages 20000 --seed 3";
    let mut off: Vec<&str> = args.split_whitespace().collect();
    off.extend(["--stall-query-ms", "0"]);
    let out = exon_sim(&off);
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("NotIdle"), "{text}");
    clean(args);
    clean("--channels 2 --nodes 4 --traffic many --loss 0.1 --reorder 0.3 --restarts 4 --record-cap 2 --messages 20000 --seeds 10 --seed 9");
}

/// Damage injected into a journal segment, then an older copy of the directory restored:
/// the copy's version of that segment replaced the damaged one, and the checker still asked
/// recovery to find the damage ("damage to a synced record ... not found at recovery";
/// campaign 82). It asks only when the restored segment is the damaged one.
#[test]
fn damage_replaced_by_a_restored_copy_is_not_expected_at_recovery() {
    clean("--nodes 2 --messages 4000 --loss 0.01 --restarts 6 --durable --damage 2 --restore 2 --seed 941955828");
}

/// A receiver restarts with its journal lost; its sender, not knowing, puts a message
/// submitted after the restart in an envelope of an incarnation from before it, and the
/// receiver, whose new journal cannot vouch for that incarnation, answers DOUBT, truthfully.
/// The checker excused only the messages unsettled at the restart (campaign 84). It now
/// also excuses those sent after it until their sender's first report in doubt from that
/// receiver, which drops the old envelopes.
#[test]
fn messages_sent_into_a_lost_journals_old_envelopes_may_end_in_doubt() {
    clean(
        "--nodes 4 --messages 2000 --loss 0.1 --reorder 0.05 --restarts 6 --take-delay-ms 5 \
         --durable --journal-loss 1 --rpc --fail-one-in 7 --seed 605030534",
    );
}

/// Campaign 143: the sender held envelopes of two incarnations its receiver's lost journal
/// could not vouch for. The first DOUBT, for the older, dropped only that one's; a reply
/// sent once more after it (rule `resend_doubted_replies`) went in the newer one's and was
/// told in doubt with the old messages there, half a second later: truthful, and now
/// excused while sent no later than a report in doubt of a message that may have been in
/// such an envelope.
#[test]
fn a_message_sent_into_a_newer_lost_incarnation_may_end_in_doubt() {
    clean(
        "--nodes 2 --messages 1000 --reorder 0.5 --reorder-max-delay-ms 500 --partitions 1 \
         --restarts 1 --record-cap 2 --congestion new-reno --durable --journal-loss 1 \
         --deadline-ms 2000 --rpc --fail-one-in 7 --seed 78901778",
    );
}

/// A durable sender restarts with messages of 100 000 bytes in progress: its receiver
/// holds their partials, charged to the grant, but the restarted sender had not charged
/// them, so it started new messages the receiver refused for want of memory; with the
/// window at its floor only their refused first fragments went, and the stream stalled
/// until the partials expired (found by `scripts/sim-campaign.py`, seed 84: 380 messages
/// undelivered after 712 s). A refused FRAG is now answered with the GOT of a partial held,
/// in turn, and a GOT of a partial the sender has not charged charges it
/// (`got_charges_partials`). Twelve seeds of this cell: the last ACK after 126 s in all
/// with the rule, 370 s and one run failed without it. Seed 58 then (3.5 s with the rule,
/// `Lost` without) under a 20 s settle time: each change to the course moves the seeds that
/// meet the defect (since BBR's samples are made up for random loss: 19, 34, 40, 45 and 58
/// of 11 to 60; since the measured progress budget, `progress_measured`: 58 of 1 to 60,
/// 6 and 39 end not idle; since an answered probe of a message held whole leaves the
/// flight: 177 of 1 to 200, 8.6 s with the rule, and 77 and 149 end not idle; since wire
/// version 4's smaller headers: 13 of 1 to 40; since version 5's last frames without their
/// length: 45, 58, 80 and 91 of 1 to 100).
#[test]
fn a_restarted_sender_counts_the_partials_its_receiver_holds() {
    let args = "--nodes 2 --messages 2000 --dup 0.02 --burst 0.05 --restarts 1 --jitter-ms 2 \
                --payload 100000 --durable --seed 45 --settle-s 20";
    clean(args);
    violates(&format!("{args} --rules-off got_charges_partials"), "Lost");
}

/// A receiver drops a partial message after its reassembly timeout and starts a new one
/// from the next fragment; GOT is cumulative per partial, but the sender added each GOT to
/// what it took as held, so the dropped bytes stayed counted as held, were never sent again,
/// and each new partial expired in turn: 207 calls never ended (found by
/// `scripts/sim-campaign.py`, seed 86). A GOT that answers a fragment sent after the sender
/// last learnt of new bytes, and lacks bytes it had told of, now makes them pending again
/// (`got_forgets_dropped_bytes`). Partials expire only where the rate has collapsed: since
/// BBR's samples are made up for random loss this cell ends in 3.8 s, so the test switches
/// that off too (the run was then the one that found the defect, 614 s of virtual time).
/// Since an answered probe of a message held whole leaves the flight, that seed ends clean
/// without the rule too, and so do seeds 1 to 200 of the cell; at 30 % loss seed 14 of 1 to
/// 40 showed the defect (4 065 s with the rule, `Lost` without), and since messages held
/// whole are probed on their own backoff, seed 8 of 1 to 40 (2 922 s with the rule); with
/// wire version 4's smaller headers no seed of 1 to 200 at 30 % loss, seed 66 of 1 to 100
/// at 25 %; since the receipt times of RECEIVED, seed 70 of 1 to 100; since wire version 5's
/// last frames without their length, seed 78 of 1 to 100.
/// Its requests outlive their calls (`--requests-outlive-calls`): given up at the call's
/// deadline of one second, as the endpoint's are, the stuck messages end truthfully.
#[test]
fn bytes_of_a_dropped_partial_are_sent_again() {
    let args = "--nodes 2 --messages 2000 --loss 0.25 --dup 0.1 --payload 20000 --durable \
                --crash-mid-commit 1 --rpc --call-deadline-ms 1000 --requests-outlive-calls \
                --seed 78";
    // The partials expire only on the collapse `random_loss_made_up` answers, with every
    // message in progress served in turn (`progress_oldest_first` off).
    let off = "random_loss_made_up,progress_oldest_first";
    clean(&format!("{args} --rules-off {off}"));
    violates(
        &format!("{args} --rules-off {off},got_forgets_dropped_bytes"),
        "Lost",
    );
}

/// A documented limit of restored copies (docs/durability.md): a message the copy held with
/// no slot yet, which the lost run sent and had delivered, is given up at its deadline as
/// not delivered, since in the copy it never left. A restore cannot be told from a crash,
/// after which the journal is right. This test keeps the limit in sight: it fails the day
/// restores are detected and the verdict becomes doubt (found by `scripts/sim-campaign.py`,
/// seed 86; `limits.txt`).
#[test]
fn a_restored_copy_may_report_not_delivered_what_the_lost_run_delivered() {
    let args = "--nodes 2 --messages 2000 --loss 0.2 --dup 0.02 --burst 0.05 --restarts 3 \
                --durable --crash-mid-commit 1 --deadline-ms 300 --seed 478619211";
    clean(args);
    violates(&format!("{args} --restore 2"), "DeliveredAfterNotDelivered");
}

/// Sixteen durable channels of 100 000-byte messages with deadlines on a lossy path: a
/// message given up while it held the window left the messages queued behind it with
/// nothing in flight and no timer, each waiting for something else (a probe, another
/// send) to wake its sender, and the last ones for ever: gaps never sent, five channels
/// blocked after 527 s (found by `scripts/sim-campaign.py`, seed 86). Giving a message up
/// now wakes the sender when others are queued or in flight (`abandon_wakes_sender`): the
/// run ends at 7.5 s. Each change to the course moves the seeds that block without the
/// rule: since BBR's samples are made up for random loss, seeds 24 and 30 of 9 to 30 (6.8
/// and 6.6 s with it); since its window keeps an allowance for datagrams held back, 12,
/// 20, 22, 30, 35 and 39 of 9 to 40 (30: 6.6 s with it); since path MTU discovery is told
/// the reach of a token's whole datagram, 12, 20 and 35 of 9 to 22, 30, 35 and 39 (12:
/// 6.5 s with it); since an answered probe of a message held whole leaves the flight and
/// held tokens leave the slot window, 1, 5, 21 and 34 of 1 to 40 (1: 10.5 s with it);
/// since a receiver answers DOUBT below every frontier it heard, 5, 12, 19, 21, 22, 25,
/// 28, 34 and 35 of 1 to 40 (5: 10.7 s with it); with wire version 4's smaller headers,
/// 1, 13 and 16 of 1 to 20; since ACKs wait for a paced datagram on slow paths
/// (`acks_wait_for_a_paced_datagram`), 16 of 1 to 20; since a message in progress all in
/// flight keeps no newer one waiting (`progress_past_all_sent`), 4, 5, 21 and 30 of 1 to 30;
/// since the receipt times of RECEIVED (`receipt_times`), 2 of 1 to 24; since wire version
/// 5's last frames without their length, 10 and 12 of 1 to 30.
#[test]
fn a_message_given_up_wakes_the_messages_behind_it() {
    let args = "--nodes 2 --messages 4000 --loss 0.2 --restarts 1 --payload 100000 --durable \
                --crash-mid-commit 3 --compact-after 500 --deadline-ms 2000 --channels 16 \
                --channel-windows 4,8 --plain-one-in 5 --stall-query-ms 1000 --seed 10";
    clean(args);
    violates(
        &format!("{args} --rules-off abandon_wakes_sender"),
        "ChannelBlocked",
    );
}

/// The same class with a slot window of two (`--window 2`): the two messages in flight
/// held every slot the sender may ask for, a third waited in the queue for them, and both
/// were given up at their deadline. Waking the sender sent what had envelopes (nothing);
/// nothing asked for slots for the queued message, the channel's gap behind it was never
/// sent, and the flow blocked with the nodes quiet (found by `scripts/sim-campaign.py`
/// with its second set of draws, seed 123; seeds 2, 3, 4, 6, 7, 10 and 12 of 1 to 12
/// blocked). Giving a message up now also asks for the slots the queue wants.
#[test]
fn a_message_given_up_lets_the_queue_behind_it_ask_for_slots() {
    let args = "--messages 500 --loss 0.1 --deadline-ms 2000 --channels 1 --window 2 \
                --envelope-target 2 --envelope-low 1 --seed 4";
    clean(args);
    violates(
        &format!("{args} --rules-off abandon_wakes_sender"),
        "ChannelBlocked",
    );
}

/// Channel messages held untaken for a gap queued behind them: a slot window of two
/// (`--window 2`) filled by two messages the receiver held, ahead of numbers given up at
/// their deadline, and the gaps for those numbers waited in the sender's queue for a slot
/// the held messages occupied: sixteen channels blocked from the start, 24 M datagrams of
/// probes and nothing more (found by `scripts/sim-campaign.py` with its second set of
/// draws, campaign 125; seeds 1, 4, 5, 6, 7 and 8 of 1 to 8 blocked too). Tokens held whole
/// at their receiver now leave the slot window once nothing else is in flight
/// (`held_outside_slot_window`): the run ends at about 6 s.
#[test]
fn channel_messages_held_for_a_gap_leave_the_slot_window_to_it() {
    let args = "--nodes 3 --messages 2000 --loss 0.01 --reorder 0.5 --deadline-ms 100 \
                --channels 16 --window 2 --envelope-target 2 --envelope-low 1 --durable \
                --restarts 1 --max-events 3000000 --seed 339261265";
    clean(args);
    violates(
        &format!("{args} --rules-off held_outside_slot_window"),
        "ChannelBlocked",
    );
}

/// Streams whose chunks their reader held untaken for an earlier one: the sender probed
/// each held chunk with its first bytes at its timeouts, and an answered probe stayed in
/// flight until a loss was declared for it, so the probes of 66 held chunks filled the
/// congestion window and the chunk the reader waited for never went (six streams
/// incomplete from about 40 s on, probes and HELDs for ever; found by
/// `scripts/sim-campaign.py`, campaign 125). A probe of bytes the receiver holds now leaves
/// the flight when answered (`a_probe_of_a_message_held_whole_leaves_the_flight_when_answered`
/// in `exon/src/proto/send/fragments.rs`): the run ends at about 100 s.
#[test]
fn streams_probing_held_chunks_send_the_chunk_their_reader_waits_for() {
    clean(
        "--nodes 3 --loss 0.2 --reorder 0.2 --burst 0.01 --restarts 6 --durable \
         --crash-mid-commit 3 --compact-after 50 --streams 8 --stream-chunk 5000 \
         --stream-window 16 --max-events 3000000 --seed 347955666",
    );
}
