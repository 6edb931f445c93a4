//! What a node hands back to its embedding: events and datagrams to transmit.

use std::collections::VecDeque;

use bytes::Bytes;

use crate::proto::{DeliveryId, MsgId, MsgIds, NodeId, Payload};

/// Something the application should know about, from [`Node::poll_event`](crate::proto::Node::poll_event).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// A message from `from` was delivered to this node, exactly once. It is not
    /// acknowledged yet: report with [`Node::handle_taken`](crate::proto::Node::handle_taken)`(id)`
    /// once the application has it; only then does its sender see `Acknowledged`.
    Delivered {
        /// The sending node.
        from: NodeId,
        /// The message.
        payload: Bytes,
        /// What to give [`Node::handle_taken`](crate::proto::Node::handle_taken) once the
        /// application has taken the message.
        id: DeliveryId,
    },
    /// Durable mode: a message accepted by [`Node::send`](crate::proto::Node::send) is on
    /// stable storage: a restart of this node sends it again, and its verdict comes, under
    /// this id, whatever happens to the process.
    Stored {
        /// The destination of the message.
        to: NodeId,
        /// The id `send` returned for it.
        id: MsgId,
    },
    /// Messages this node sent were taken by the receiving application: its receiver
    /// delivered each exactly once, and its embedding reported the hand-over
    /// ([`Node::handle_taken`](crate::proto::Node::handle_taken)) before acknowledging it.
    ///
    /// One event settles a run of consecutive ids: the messages one verdict frame
    /// acknowledged, in the order they were sent, as far as their ids follow one another.
    /// Every id of the run is acknowledged, once (durable mode: once per run of the node; a
    /// restarted node may report a verdict its journal holds again, see [`Event::InDoubt`]).
    Acknowledged {
        /// The destination of the messages.
        to: NodeId,
        /// The ids [`Node::send`](crate::proto::Node::send) returned for them.
        ids: MsgIds,
    },
    /// A message this node sent reached a receiver that has since lost the incarnation it
    /// was sent under (the receiver restarted, or evicted it under pressure), before its
    /// application was known to have taken it: it was delivered at most once, maybe not at
    /// all (or delivered and lost in the receiver's buffer), and will not be sent again. Never silent:
    /// every message ends as exactly one of `Acknowledged` or `InDoubt`.
    ///
    /// Durable mode: also the verdict of a message given up ([`Node::abandon`](crate::proto::Node::abandon)
    /// returned [`Abandoned::Pending`]) after a whole copy left.
    ///
    /// Durable mode, after a restart: a verdict the journal stored may be reported again
    /// (it was handed out before the crash and the journal had not yet recorded that): the
    /// same verdict for the same id, never a different one.
    InDoubt {
        /// The destination of the message.
        to: NodeId,
        /// The id [`Node::send`](crate::proto::Node::send) returned for it.
        id: MsgId,
        /// A reply ([`Node::reply`](crate::proto::Node::reply),
        /// [`Node::reply_many`](crate::proto::Node::reply_many)) told in doubt by its
        /// receiver: its payload, which the node held until this verdict, handed back so
        /// that the embedding may send it once more without keeping a copy of every reply
        /// (its caller lost the incarnation whose envelope carried it). `None` for every
        /// other message, for a reply given up, and for a verdict reported after a
        /// restart, which does not know which messages were replies.
        reply: Option<Box<Payload>>,
    },
    /// A message this node sent is given up, certainly not delivered: no copy of it ever
    /// left, and its receiver takes no message that large (its
    /// [`Config::limits.max_message_size`](crate::proto::Limits::max_message_size) is smaller than the
    /// message; it said so in its CREDIT). Never sent again.
    ///
    /// Durable mode: also the verdict of a message given up ([`Node::abandon`](crate::proto::Node::abandon)
    /// returned [`Abandoned::Pending`]) no whole copy of which left.
    NotDelivered {
        /// The destination of the message.
        to: NodeId,
        /// The id [`Node::send`](crate::proto::Node::send) returned for it.
        id: MsgId,
    },
    /// Work for `peer` (messages queued or unacknowledged, or a slot request) has waited
    /// [`Config::timers.unreachable_after`](crate::proto::TimerConfig::unreachable_after) without any datagram
    /// from it. Nothing is dropped: messages are still retried (unless given up with
    /// [`Node::abandon`](crate::proto::Node::abandon)). A peer whose application stopped taking
    /// messages looks the same (it answers nothing to messages it holds untaken).
    PeerUnreachable {
        /// The peer.
        peer: NodeId,
    },
    /// A peer reported unreachable was heard from again (or its sender record was
    /// discarded, so nothing is known of it any more).
    PeerReachable {
        /// The peer.
        peer: NodeId,
    },
}

impl Event {
    /// The doubt verdict on message `id` to `to`, with no payload handed back (not a
    /// reply, or one the node does not know for a reply: see [`Event::InDoubt`]).
    pub(crate) fn in_doubt(to: NodeId, id: MsgId) -> Event {
        Event::InDoubt {
            to,
            id,
            reply: None,
        }
    }

    /// Queues the acknowledgement of message `id` to `to` in `events`, merged into the last
    /// event when that acknowledges messages to `to` and `id` follows its run (as
    /// [`push_merged`](Self::push_merged), with no event made to be merged away).
    #[inline]
    pub(crate) fn push_acknowledged(events: &mut VecDeque<Event>, to: NodeId, id: MsgId) {
        if let Some(Event::Acknowledged { to: last_to, ids }) = events.back_mut() {
            if *last_to == to && ids.extend(id) {
                return;
            }
        }
        let ids = MsgIds::one(id);
        events.push_back(Event::Acknowledged { to, ids });
    }

    /// Queues `ev` in `events`, merged into the last event when both acknowledge messages
    /// to one destination and `ev`'s id follows the last one's run.
    pub(crate) fn push_merged(events: &mut VecDeque<Event>, ev: Event) {
        if let Event::Acknowledged { to, ids } = &ev {
            if let Some(Event::Acknowledged {
                to: last_to,
                ids: last,
            }) = events.back_mut()
            {
                if last_to == to && ids.count() == 1 && last.extend(ids.first()) {
                    return;
                }
            }
        }
        events.push_back(ev);
    }
}

/// A datagram written by [`Node::poll_transmit`](crate::proto::Node::poll_transmit).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transmit {
    /// Node the datagram is for; the embedding maps it to a network address.
    pub destination: NodeId,
    /// Number of bytes appended to the buffer.
    pub size: usize,
}

/// Datagrams written by [`Node::poll_transmit_run`](crate::proto::Node::poll_transmit_run):
/// `count` datagrams to one destination, one after the other in the buffer, each
/// `segment_size` bytes but the last, which may be shorter: what one segmented send (GSO)
/// carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransmitRun {
    /// Node the datagrams are for; the embedding maps it to a network address.
    pub destination: NodeId,
    /// Size of every datagram of the run but the last.
    pub segment_size: usize,
    /// Number of datagrams (at least one).
    pub count: usize,
    /// Number of bytes appended to the buffer, all datagrams together.
    pub size: usize,
}

impl TransmitRun {
    /// The sizes of the run's datagrams, in order.
    pub fn sizes(&self) -> impl Iterator<Item = usize> {
        let (seg, n, total) = (self.segment_size, self.count, self.size);
        (0..n).map(move |i| {
            if i + 1 < n {
                seg
            } else {
                total - seg * (n - 1)
            }
        })
    }
}

/// The verdict on a message the sender gave up with [`Node::abandon`](crate::proto::Node::abandon).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Abandoned {
    /// No whole copy of it ever left this node (it was never sent, or only in FRAGs some
    /// bytes of which never left): it was certainly not delivered, and never will be.
    NotDelivered,
    /// A whole copy left (it was sent at least once as a TOKEN, or every byte of it in
    /// FRAGs), even if it was cut into fragments since, when datagrams shrank: it may still
    /// be delivered, at most once, may have been, or may never be. It will not be sent
    /// again.
    InDoubt,
    /// Durable mode: the message is given up, and its verdict (one of the above) comes as
    /// [`Event::NotDelivered`] or [`Event::InDoubt`] for its id once its `Resolved` record
    /// is stored. A crash before then recovers the message, which is sent again: the
    /// restarted node decides its verdict anew.
    Pending,
}
