//! The driver's share of ordered flows: each ordered message or gap to its flow, and what
//! the flows say to do (hand a message over, send a window or a reset, accept a stream).

use std::sync::Arc;
use std::time::Instant;

use super::outgoing::Outgoing;
use super::Driver;
use crate::endpoint::api::message::{Acker, Kind, Message};
use crate::endpoint::flows::at_driver::{Action, ChannelOut, Held};
use crate::endpoint::flows::out::FlowOut;
use crate::endpoint::io::socket::DatagramSocket;
use crate::envelope::{Envelope, Place};
use crate::ordered::Arrival;
use crate::proto::journal::Mark;
use crate::proto::NodeId;

impl<S: DatagramSocket> Driver<S> {
    /// An ordered message or gap: to its flow, then what the flow says to do.
    pub(super) fn on_ordered(
        &mut self,
        t: Instant,
        from: NodeId,
        place: Place,
        arrival: Arrival<Held>,
    ) {
        let mut actions = std::mem::take(&mut self.actions);
        if let Err(a) = self.flows.on_ordered(t, from, place, arrival, &mut actions) {
            // Too many channels: left untaken (its sender's deadline, if any, settles it).
            self.stats.channels_full += 1;
            drop(a);
        }
        self.run_actions(t, &mut actions);
        self.actions = actions;
    }

    pub(super) fn run_actions(&mut self, t: Instant, actions: &mut Vec<Action>) {
        for a in actions.drain(..) {
            match a {
                Action::Take(id) => {
                    self.node.handle_taken(t, id);
                }
                Action::Channel(c) => {
                    let (kind, held) = match c {
                        ChannelOut::Message { channel, seq, held } => {
                            (Kind::Channel { channel, seq }, held)
                        }
                        ChannelOut::Gap { channel, seq, held } => {
                            (Kind::Gap { channel, seq }, held)
                        }
                        ChannelOut::Stale { channel, seq, held } => {
                            self.stats.unordered += 1;
                            (Kind::Unordered { channel, seq }, held)
                        }
                    };
                    let acker = self
                        .cfg
                        .ack_after_processing
                        .then(|| Acker::new(self.shared.clone()));
                    let m = Message::new(held.id.from(), held.body, acker, held.id).with_kind(kind);
                    self.handover.push(m);
                }
                Action::Window {
                    to,
                    flow,
                    run,
                    window,
                } => {
                    let payload = Envelope::window(flow, run, window.messages, window.bytes as u64);
                    self.send_flow_note(t, to, payload, None);
                }
                Action::Reset { to, place } => {
                    self.send_flow_note(t, to, Envelope::reset(place), None)
                }
                Action::Query { to, place } => {
                    // Given up if not delivered by the next look: one question at a time
                    // to a sender that does not answer (gone, or cut off).
                    let until = self.flows.next_stall_look();
                    self.send_flow_note(t, to, Envelope::query(place), until)
                }
                Action::Over { to, place } => {
                    self.send_flow_note(t, to, Envelope::over(place), None)
                }
                Action::ForgetMarks { peer, lanes } => {
                    for lane in lanes {
                        let gone = Mark {
                            lane,
                            value: bytes::Bytes::new(),
                        };
                        let _ = self.node.set_mark(peer, gone);
                    }
                    let slots = lanes.map(|lane| (peer, lane));
                    self.flows.ordered().release_marks(&slots);
                }
                Action::NewStream {
                    peer,
                    id,
                    first,
                    held,
                    last,
                } => self.new_stream(t, peer, id, first, held, last),
            }
        }
    }

    /// Sends `to` a flow's note (a reset, a question about a run, or the answer that it is
    /// over): an ordered flow's message without a receipt, given up at `deadline` if any.
    fn send_flow_note(
        &mut self,
        t: Instant,
        to: NodeId,
        payload: crate::proto::Payload,
        deadline: Option<Instant>,
    ) {
        let out = Outgoing::note(to, payload, self.shared.next_ids(1), deadline);
        self.sends.on_send(t, out, &mut self.node, &self.paths);
    }

    /// Asks the senders of flows whose runs stalled here (or, streams, whose writers showed
    /// another run) whether those runs still live, when it is time to look.
    pub(super) fn look_at_stalls(&mut self, t: Instant) {
        if self.flows.next_stall_look().is_none_or(|at| at > t) {
            return;
        }
        let mut actions = std::mem::take(&mut self.actions);
        self.flows.look_at_stalls(t, &mut actions);
        self.run_actions(t, &mut actions);
        self.actions = actions;
    }

    /// A flow's note from `from` about a run: a question to this endpoint as the flow's
    /// sender, or the answer to this endpoint's, as its receiver.
    pub(super) fn on_run_note(&mut self, t: Instant, from: NodeId, note: Envelope) {
        let mut actions = std::mem::take(&mut self.actions);
        match note {
            Envelope::Query(place) => self.flows.on_query(from, place, &mut actions),
            Envelope::Over(place) => self.flows.on_over(from, place, &mut actions),
            _ => {}
        }
        self.run_actions(t, &mut actions);
        self.actions = actions;
    }

    /// A peer opened stream `id`: made and queued for accepting, or reset when there is no
    /// room or nobody accepts.
    pub(super) fn new_stream(
        &mut self,
        t: Instant,
        peer: NodeId,
        id: u64,
        first: Place,
        held: Held,
        last: bool,
    ) {
        let ordered = self.flows.ordered().clone();
        let refuse = |me: &mut Self, held: Held| {
            me.node.handle_taken(t, held.id);
            me.stats.stream_resets += 1;
            let place = Place {
                flow: first.flow.reversed(),
                run: ordered.run(),
                seq: 0,
            };
            me.send_flow_note(t, peer, Envelope::reset(place), None);
        };
        let slots = crate::endpoint::flows::positions::stream_slots((peer, id, false));
        if !self.flows.has_room_for_stream() || ordered.reserve_marks(&slots).is_err() {
            // Durable mode: no room for its positions, so not accepted at all.
            return refuse(self, held);
        }
        let inbox = Arc::new(ordered.stream_in(self.shared.clone()));
        let out = FlowOut::new(
            peer,
            first.flow.reversed(),
            ordered.run(),
            ordered.config().stream(),
            ordered.advertises(),
            Box::new(self.cmds_self.clone()),
            self.shared.clone(),
            Some((ordered.stream_out(self.shared.max_payload()), inbox.clone())),
        );
        let out = Arc::new(ordered.stream_out_durable(out, (peer, id, false)));
        let mut actions = std::mem::take(&mut self.actions);
        let accepted = self
            .flows
            .accept(peer, id, first, held, last, out, inbox, &mut actions);
        match accepted {
            Ok(()) => self.run_actions(t, &mut actions),
            Err(held) => {
                ordered.release_marks(&slots);
                refuse(self, held)
            }
        }
        self.actions = actions;
    }
}
