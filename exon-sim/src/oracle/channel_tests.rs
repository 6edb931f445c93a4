//! The channel checks of the oracle, fed by hand: each violation kind is reported when its
//! rule is broken, and a flow released in order reports nothing.

use std::collections::HashSet;

use super::*;

const FLOW: FlowKey = FlowKey {
    from: 0,
    to: 1,
    run: 7,
    channel: 3,
};

/// An oracle with three channel messages sent from node 0 to node 1 as numbers 0, 1, 2.
fn three() -> (Oracle, [MsgKey; 3]) {
    let mut o = Oracle::new(2);
    let keys = [0, 1, 2].map(|s| {
        let k = o.on_submit(0, 1, 0);
        o.on_chan_sent(FLOW, s, k, 0);
        k
    });
    (o, keys)
}

fn kinds(o: &Oracle) -> Vec<ViolationKind> {
    o.violations().iter().map(|v| v.kind).collect()
}

#[test]
fn a_flow_released_in_order_with_a_gap_is_clean() {
    let (mut o, k) = three();
    o.on_chan_release(FLOW, 0, Some(k[0]), false, 1);
    o.on_chan_verdict(FLOW, 0, ChanVerdict::Delivered, 2);
    o.on_chan_verdict(FLOW, 1, ChanVerdict::NotDelivered, 3);
    o.on_chan_release(FLOW, 1, None, false, 4);
    o.on_chan_release(FLOW, 2, Some(k[2]), false, 5);
    o.on_chan_held(FLOW, 2, true, 3, 5);
    o.finish_channels(6);
    assert!(o.violations().is_empty(), "{:?}", o.violations());
    let c = o.channel_counts();
    assert_eq!((c.sent, c.released, c.gaps, c.max_held), (3, 2, 1, 2));
}

#[test]
fn out_of_order_twice_or_another_message_is_reported() {
    let (mut o, k) = three();
    o.on_chan_release(FLOW, 1, Some(k[1]), false, 1);
    assert_eq!(kinds(&o), vec![ViolationKind::ChannelOrder]);
    o.on_chan_release(FLOW, 0, Some(k[1]), false, 2);
    o.on_chan_release(FLOW, 0, Some(k[0]), false, 3);
    assert_eq!(kinds(&o), vec![ViolationKind::ChannelOrder; 3]);
}

#[test]
fn verdicts_must_match_what_was_released() {
    let (mut o, k) = three();
    o.on_chan_verdict(FLOW, 0, ChanVerdict::NotDelivered, 1);
    o.on_chan_release(FLOW, 0, Some(k[0]), false, 2);
    o.on_chan_release(FLOW, 1, None, false, 3);
    o.on_chan_verdict(FLOW, 1, ChanVerdict::Delivered, 4);
    o.on_chan_verdict(FLOW, 2, ChanVerdict::Delivered, 5);
    assert_eq!(
        kinds(&o),
        vec![
            ViolationKind::ChannelNotDeliveredReleased,
            ViolationKind::ChannelAckedNotReleased,
            ViolationKind::ChannelAckedNotReleased,
        ]
    );
}

#[test]
fn a_window_held_and_a_flow_stuck_are_reported() {
    let (mut o, _) = three();
    o.on_chan_held(FLOW, 3, true, 3, 1);
    o.finish_channels(2);
    assert_eq!(
        kinds(&o),
        vec![
            ViolationKind::ChannelHeldOverWindow,
            ViolationKind::ChannelBlocked
        ]
    );
    // A restart of the sender excuses a flow that stops short.
    let (mut o, _) = three();
    o.on_chan_restart(0);
    o.finish_channels(2);
    assert!(o.violations().is_empty());
}

#[test]
fn durable_a_number_the_application_had_may_come_again_only_flagged_and_the_same() {
    let (mut o, k) = three();
    o.set_durable();
    o.on_chan_release(FLOW, 0, Some(k[0]), false, 1);
    o.on_chan_release(FLOW, 1, None, false, 2);
    // The receiver restarted: both come again, flagged; nothing changes.
    o.on_chan_release(FLOW, 0, Some(k[0]), true, 3);
    o.on_chan_release(FLOW, 1, None, true, 3);
    assert!(o.violations().is_empty(), "{:?}", o.violations());
    assert_eq!(o.channel_counts().repeated, 2);
    // Unflagged, or another message under the number: reported.
    o.on_chan_release(FLOW, 0, Some(k[0]), false, 4);
    o.on_chan_release(FLOW, 0, Some(k[1]), true, 5);
    assert_eq!(kinds(&o), vec![ViolationKind::ChannelOrder; 2]);
    // A restart excuses nothing: the flow must be released to its end.
    o.on_chan_restart(0);
    o.on_chan_restart(1);
    o.finish_channels(6);
    assert_eq!(kinds(&o)[2..], [ViolationKind::ChannelBlocked]);
}

#[test]
fn durable_a_restarted_sender_keeps_the_numbers_known_durable() {
    let (mut o, k) = three();
    o.set_durable();
    o.on_chan_release(FLOW, 0, Some(k[0]), false, 1);
    // Number 1 outlived the crash in the journal, 2 did not (and never left).
    o.on_chan_sender_recovered(0, &HashSet::from([k[1]]));
    assert_eq!(o.channel_counts().lost_with_sender, 1);
    let again = o.on_submit(0, 1, 2);
    o.on_chan_sent(FLOW, 2, again, 2);
    o.on_chan_release(FLOW, 1, Some(k[1]), false, 3);
    o.on_chan_release(FLOW, 2, Some(again), false, 4);
    o.finish_channels(5);
    assert!(o.violations().is_empty(), "{:?}", o.violations());
    // A sender that skips a number is reported.
    let (mut o, k) = three();
    o.set_durable();
    o.on_chan_sender_recovered(0, &HashSet::from([k[0]]));
    let skip = o.on_submit(0, 1, 2);
    o.on_chan_sent(FLOW, 2, skip, 2);
    assert_eq!(kinds(&o), vec![ViolationKind::ChannelOrder]);
}

#[test]
fn a_message_released_out_of_the_order_may_be_acknowledged_once_and_only_as_itself() {
    // A receiver that no longer knows the run hands numbers over `Kind::Unordered`: the
    // sender may hear them acknowledged.
    let (mut o, k) = three();
    o.on_chan_release(FLOW, 0, Some(k[0]), false, 1);
    o.on_chan_restart(1);
    o.on_chan_unordered(FLOW, 2, Some(k[2]), 2);
    o.on_chan_verdict(FLOW, 2, ChanVerdict::Delivered, 3);
    assert!(o.violations().is_empty(), "{:?}", o.violations());
    assert_eq!(o.channel_counts().unordered, 1);
    // Never twice, never in the order after out of it, never another message, never one
    // told not delivered.
    o.on_chan_unordered(FLOW, 2, Some(k[2]), 4);
    o.on_chan_release(FLOW, 0, None, false, 5);
    o.on_chan_release(FLOW, 1, Some(k[1]), false, 5);
    o.on_chan_release(FLOW, 2, Some(k[2]), false, 6);
    let (mut p, q) = three();
    p.on_chan_restart(0);
    p.on_chan_unordered(FLOW, 1, Some(q[2]), 1);
    p.on_chan_verdict(FLOW, 0, ChanVerdict::NotDelivered, 2);
    p.on_chan_unordered(FLOW, 0, Some(q[0]), 3);
    assert_eq!(
        kinds(&o),
        vec![ViolationKind::ChannelOrder, ViolationKind::ChannelOrder]
    );
    assert_eq!(
        kinds(&p),
        vec![
            ViolationKind::ChannelOrder,
            ViolationKind::ChannelNotDeliveredReleased
        ]
    );
    // Out of the order while neither end restarted: the order is broken.
    let (mut r, m) = three();
    r.on_chan_unordered(FLOW, 1, Some(m[1]), 1);
    assert_eq!(kinds(&r), vec![ViolationKind::ChannelOrder]);
}

#[test]
fn a_receiver_restarted_without_a_journal_takes_a_flow_up_again_from_number_0() {
    // Message 0 released, then the receiver restarts before acknowledging it: its sender
    // is told in doubt and sends a gap for 0, which the new receiver takes as the run's
    // start. Without a journal that is its order; a message released twice is still a
    // duplicate for the oracle's delivery checks.
    let (mut o, k) = three();
    o.on_chan_release(FLOW, 0, Some(k[0]), false, 1);
    o.on_chan_restart(1);
    o.on_chan_verdict(FLOW, 0, ChanVerdict::InDoubt, 2);
    o.on_chan_release(FLOW, 0, None, false, 3);
    o.on_chan_release(FLOW, 1, Some(k[1]), false, 4);
    assert!(o.violations().is_empty(), "{:?}", o.violations());
    // With a journal the flow goes on across the restart: number 0 again is out of order.
    let (mut d, q) = three();
    d.set_durable();
    d.on_chan_release(FLOW, 0, Some(q[0]), false, 1);
    d.on_chan_restart(1);
    d.on_chan_release(FLOW, 0, None, false, 3);
    assert_eq!(kinds(&d), vec![ViolationKind::ChannelOrder]);
}
