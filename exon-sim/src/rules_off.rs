//! The core's rules by name, for the command line's `--rules-off` (self-tests of the
//! rules the core keeps, run as the built binary).

use exon::proto::Rules;

macro_rules! by_name {
    ($($rule:ident),* $(,)?) => {
        /// The names of the core's rules (`exon::proto::Rules`' fields).
        pub const RULES: &[&str] = &[$(stringify!($rule)),*];

        /// Switches rule `name` off in `rules`; false for a name that is no rule.
        pub fn switch_off(rules: &mut Rules, name: &str) -> bool {
            match name {
                $(stringify!($rule) => {
                    rules.$rule = false;
                    true
                })*
                _ => false,
            }
        }
    };
}

by_name!(
    first_send_requests_slots,
    token_before_frontier,
    token_keeps_incarnation,
    ack_without_record,
    raise_clock_on_orphan_slots,
    bounded_input,
    receiver_probe,
    doubt_lost_incarnations,
    plausible_input,
    unproven_probe_limit,
    ack_on_take,
    deadline_doubts_sent_tokens,
    deadline_remembers_whole_copies,
    fragments_need_credit,
    deaf_backoff,
    evict_silent_records,
    remember_evicted_slots,
    fresh_records_kept,
    credit_return_resumes,
    abandon_tells_frontier,
    forgotten_keys_refused,
    progress_within_reassembly_timeout,
    progress_oldest_first,
    progress_past_all_sent,
    progress_measured,
    reordering_allowance,
    parked_early_probes,
    stale_verdicts_ignored,
    got_charges_partials,
    got_forgets_dropped_bytes,
    abandon_wakes_sender,
    pin_member_keys,
    address_cookies,
    reordering_window,
    spurious_undo,
    random_loss_made_up,
    receipt_times,
    clock_waits_for_store,
    journal_before_delivery,
    journal_before_ack,
    journal_before_token,
    journal_before_verdict,
    reply_in_one_record,
    journal_covers_incarnations,
    deadline_verdict_after_record,
    report_stored_verdicts,
    advertise_flow_window,
    hold_beyond_window,
    recover_calls,
    mark_in_one_record,
    durable_flows,
    hold_call_requests,
    resend_beyond_slot_window,
    held_outside_slot_window,
    held_probes_back_off,
    whole_awaits_verdict,
    restarted_sender_gets_slots,
    reserve_flow_marks,
    mark_flow_window,
    deliver_from_senders_copy,
    senders_copy_only_when_kept,
    early_token_waits_for_stored,
    probe_prompts_resend,
    probe_repeats_ack,
    request_carries_waiver,
    probe_repeats_old_verdicts,
    probe_repeats_grant,
    probe_repeats_got,
    doubt_below_forgotten,
    dropped_unseen_doubt,
    frontier_waits_for_moves,
    untaken_share_per_source,
    credit_asks_each_waiting,
    report_recovered_held,
    credit_doubles,
    resend_doubted_replies,
    acks_wait_for_a_paced_datagram,
    unyielding_loss_per_product,
    drain_test_counts_losses,
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_rule_is_named_and_switches_off() {
        for name in RULES {
            let mut r = Rules::ALL;
            assert!(switch_off(&mut r, name), "{name}");
            assert_ne!(r, Rules::ALL, "{name} changed nothing");
        }
        let mut all = Rules::ALL;
        assert!(!switch_off(&mut all, "no_such_rule"));
        // Every field of `Rules` (as its `Debug` lists them) is named here.
        let shown = format!("{:?}", Rules::ALL);
        let fields = shown.matches(": true").count() + shown.matches(": false").count();
        assert_eq!(
            fields,
            RULES.len(),
            "a rule of the core is missing here: {shown}"
        );
    }
}
