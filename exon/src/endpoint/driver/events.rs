//! The driver's share of the node's events: verdicts and reachability, and each delivery
//! opened by its envelope (a message for the application, a request for the server, a
//! reply for its call, or a piece of an ordered flow).

use bytes::Bytes;

use super::Driver;
use crate::endpoint::api::error::ReceiptError;
use crate::endpoint::api::message::{Acker, Message};
use crate::endpoint::driver::outgoing::Outgoing;
use crate::endpoint::driver::trace::{debug_in_peer, peer_span};
use crate::endpoint::flows::at_driver::Held;
use crate::endpoint::flows::window_mark::window_mark;
use crate::endpoint::io::socket::DatagramSocket;
use crate::envelope::Envelope;
use crate::ordered::{Arrival, Window};
use crate::proto::{DeliveryId, Event, NodeId};
use crate::rpc::calls::{ReplyIn, Take};
use crate::rpc::request::Request;
use std::time::Instant;

impl<S: DatagramSocket> Driver<S> {
    /// One event of the node: a delivery to hand over, a verdict, a change of reachability.
    pub(super) fn on_event(&mut self, t: Instant, e: Event) {
        match e {
            Event::Delivered { from, payload, id } => {
                debug_in_peer(from, || {
                    tracing::debug!(len = payload.len(), "message delivered");
                });
                self.on_delivered(t, from, payload, id);
            }
            Event::Acknowledged { ids, to } => {
                if let Some((first, last)) = self.sends.settle_acknowledged(ids) {
                    debug_in_peer(to, || {
                        tracing::debug!(%first, %last, count = ids.count(), "messages acknowledged");
                    });
                }
            }
            Event::Stored { id, .. } => self.sends.on_stored(id),
            Event::PeerUnreachable { peer } => {
                tracing::warn!(%peer, "peer unreachable");
                self.shared.set_unreachable(peer, true);
            }
            Event::PeerReachable { peer } => {
                tracing::info!(%peer, "peer reachable again");
                self.shared.set_unreachable(peer, false);
            }
            Event::InDoubt { id, to, reply } => {
                if let Some(suppressed) = self.in_doubt.allow(t) {
                    tracing::warn!(
                        id = %self.node.id(),
                        peer = %to,
                        suppressed,
                        "message in doubt (its receiver lost its incarnation, or it was given up after a copy left)"
                    );
                }
                let (msg, again) = self.sends.settle_in_doubt(id, reply);
                if let Some(msg) = msg {
                    debug_in_peer(to, || tracing::debug!(%msg, "message in doubt"));
                }
                if let Some(payload) = again {
                    self.send_reply_again(t, to, payload);
                }
            }
            Event::NotDelivered { id, to } => {
                peer_span(to).in_scope(|| {
                    tracing::warn!(
                        "message not delivered (larger than the receiver takes, or given up)"
                    );
                });
                self.sends.settle(id, Err(ReceiptError::NotDelivered));
            }
        }
    }

    /// Sends a server's reply told in doubt once more, as a message of its own (nobody
    /// hears its verdict, and it is not sent a third time): the caller lost the incarnation
    /// whose envelope carried it, and its call, if it still waits, takes this copy.
    fn send_reply_again(&mut self, t: Instant, to: NodeId, payload: crate::proto::Payload) {
        self.stats.replies_resent += 1;
        debug_in_peer(to, || tracing::debug!("reply in doubt: sent again"));
        let out = Outgoing::reply_again(to, payload, self.shared.next_ids(1));
        self.sends.on_send(t, out, &mut self.node, &self.paths);
    }

    /// A plain message's body, for the application.
    #[inline]
    fn deliver_message(&mut self, from: NodeId, body: Bytes, id: DeliveryId) {
        let acker = self
            .cfg
            .ack_after_processing
            .then(|| Acker::new(self.shared.clone()));
        self.handover.push(Message::new(from, body, acker, id));
    }

    /// A delivery, opened: a plain message for the application, a request for the
    /// server, or a reply for the call waiting for it.
    pub(super) fn on_delivered(
        &mut self,
        t: Instant,
        from: NodeId,
        payload: Bytes,
        id: DeliveryId,
    ) {
        let payload = match Envelope::open_message(payload) {
            Ok(body) => return self.deliver_message(from, body, id),
            Err(payload) => payload,
        };
        match Envelope::open(payload) {
            Ok(Envelope::Message(body)) => self.deliver_message(from, body, id),
            Ok(Envelope::Request { call, body }) => {
                self.requests.push(Request::new(from, call, body, id));
            }
            Ok(Envelope::Reply {
                call,
                outcome,
                body,
            }) => {
                // Taken at once: the reply is the caller's now (or nobody's). Durable mode:
                // taken when its call ends, with the release of its held request (one
                // record).
                let replied = self
                    .calls
                    .on_reply(call, from, ReplyIn { outcome, body }, id);
                if !replied.handed {
                    self.stats.replies_discarded += 1;
                    debug_in_peer(from, || {
                        tracing::debug!(call, "reply for no waiting call discarded")
                    });
                }
                match replied.take {
                    Take::Now(Some(request)) => drop(self.node.take_reply(t, id, request)),
                    // Taken with the turn's other replies, once its events are drained.
                    Take::Now(None) => self.reply_takes.push(id),
                    Take::AtEnd => {}
                }
            }
            Ok(Envelope::Ordered { place, last, body }) => {
                let item = Held { id, body };
                self.on_ordered(t, from, place, Arrival::Message { item, last });
            }
            Ok(Envelope::Gap(place)) => {
                let item = Held {
                    id,
                    body: Bytes::new(),
                };
                self.on_ordered(t, from, place, Arrival::Gap(item));
            }
            Ok(Envelope::Window {
                flow,
                run,
                messages,
                bytes,
            }) => {
                let window = Window {
                    messages,
                    bytes: usize::try_from(bytes).unwrap_or(usize::MAX),
                };
                let lane = self.flows.on_window(from, flow, run, window);
                // Durable mode: the flow's mark keeps the window, in the take's record (a
                // crash keeps both, or neither and the advert comes again).
                let mark = lane.and_then(|l| window_mark(&self.node, (from, l), run, window));
                let marked = mark.is_some_and(|m| self.node.handle_taken_marked(t, id, m).is_ok());
                if !marked {
                    self.node.handle_taken(t, id);
                }
            }
            Ok(note @ (Envelope::Query(_) | Envelope::Over(_))) => {
                self.node.handle_taken(t, id);
                self.on_run_note(t, from, note);
            }
            Ok(Envelope::Reset(place)) => {
                self.node.handle_taken(t, id);
                let mut actions = std::mem::take(&mut self.actions);
                self.flows.on_reset(from, place, &mut actions);
                self.run_actions(t, &mut actions);
                self.actions = actions;
            }
            Err(e) => {
                self.stats.envelope_errors += 1;
                if let Some(suppressed) = self.receiver_dropped.allow(t) {
                    tracing::warn!(peer = %from, error = %e, suppressed, "message discarded");
                }
                self.node.handle_taken(t, id);
            }
        }
    }
}
