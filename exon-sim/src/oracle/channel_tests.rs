//! The channel checks of the oracle, fed by hand: each violation kind is reported when its
//! rule is broken, and a flow released in order reports nothing.

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
    o.on_chan_release(FLOW, 0, Some(k[0]), 1);
    o.on_chan_verdict(FLOW, 0, ChanVerdict::Delivered, 2);
    o.on_chan_verdict(FLOW, 1, ChanVerdict::NotDelivered, 3);
    o.on_chan_release(FLOW, 1, None, 4);
    o.on_chan_release(FLOW, 2, Some(k[2]), 5);
    o.on_chan_held(FLOW, 2, true, 3, 5);
    o.finish_channels(6);
    assert!(o.violations().is_empty(), "{:?}", o.violations());
    let c = o.channel_counts();
    assert_eq!((c.sent, c.released, c.gaps, c.max_held), (3, 2, 1, 2));
}

#[test]
fn out_of_order_twice_or_another_message_is_reported() {
    let (mut o, k) = three();
    o.on_chan_release(FLOW, 1, Some(k[1]), 1);
    assert_eq!(kinds(&o), vec![ViolationKind::ChannelOrder]);
    o.on_chan_release(FLOW, 0, Some(k[1]), 2);
    o.on_chan_release(FLOW, 0, Some(k[0]), 3);
    assert_eq!(kinds(&o), vec![ViolationKind::ChannelOrder; 3]);
}

#[test]
fn verdicts_must_match_what_was_released() {
    let (mut o, k) = three();
    o.on_chan_verdict(FLOW, 0, ChanVerdict::NotDelivered, 1);
    o.on_chan_release(FLOW, 0, Some(k[0]), 2);
    o.on_chan_release(FLOW, 1, None, 3);
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
