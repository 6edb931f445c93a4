//! A message waiting for an envelope, and a token: a message bound to a slot of its
//! receiver, kept until its verdict.

use std::time::Instant;

use crate::proto::send::fragments::Outgoing;
use crate::proto::send::sent::SentLog;
use crate::proto::{MsgId, Payload};

/// A message waiting for an envelope.
#[derive(Debug)]
pub(crate) struct Queued {
    pub(super) id: MsgId,
    pub(super) payload: Payload,
    /// Sent as FRAG frames even when it fits one TOKEN (then as one whole FRAG, with no
    /// fragment state), so that its receiver reports it held (HELD) before its
    /// application takes it ([`Node::send_reported`]).
    ///
    /// [`Node::send_reported`]: crate::proto::Node::send_reported
    pub(super) reported: bool,
    /// Its sender keeps its copy until the ACK, whatever happens: it goes as STOKEN or
    /// SFRAG, and a durable receiver journals no payload for it (`Rules::senders_copy_only_when_kept`).
    pub(super) senders_copy: bool,
    /// A reply ([`Node::reply`](crate::proto::Node::reply)): told in doubt, its payload
    /// goes back to the embedding with the verdict ([`Event::InDoubt`]'s `reply`), to be
    /// sent once more, rather than dropped.
    ///
    /// [`Event::InDoubt`]: crate::proto::Event::InDoubt
    pub(super) reply: bool,
}

/// A token: the sender's obligation to get `payload` delivered into slot `s` of receiver
/// incarnation `rck`, kept until acknowledged. The token keeps the incarnation it was made
/// under, whatever the record's `rck` becomes later (rule 3 of `docs/algorithm.md`).
///
/// What its last transmission shares with the other tokens of its datagram (when it left,
/// the delivery-rate snapshot, how far the datagram's frames reached) is kept once per
/// datagram ([`SentLog`]), found by `seq`; a fragmented message's transmissions are its
/// [`Outgoing`]'s.
#[derive(Debug)]
pub(crate) struct Token {
    /// The receiver incarnation this token's slot belongs to.
    pub(super) rck: u64,
    pub(super) payload: Payload,
    pub(super) id: MsgId,
    /// How many times it was put on the wire (as a TOKEN, or a FRAG of it).
    pub(super) sends: u32,
    /// A whole copy of the message left at least once: one TOKEN frame, or every byte of
    /// it in FRAG frames. Never cleared: a message cut into fragments later (smaller
    /// datagrams) of which some never left may still have been delivered from that copy.
    pub(super) whole_left: bool,
    /// Waiting in `to_send`.
    pub(super) queued: bool,
    /// Sequence number of the datagram of its last transmission (see [`LossDetector`](super::loss::LossDetector)):
    /// what loss detection and the datagram's record ([`SentLog`]: when it left, its
    /// delivery-rate snapshot, its reach) know it by. [`NEVER_SENT`] until it leaves.
    pub(super) seq: u64,
    /// Bytes it counts in the record's bytes in flight (0: not in flight).
    pub(super) flight: u64,
    /// Its TOKEN frame's size when last sent (within a datagram: at most 65 507).
    pub(super) size: u32,
    /// Its bytes, for a message sent in fragments (FRAG frames) rather than one TOKEN.
    pub(super) frag: Option<Box<Outgoing>>,
    /// What few tokens have (a loss declared, a verdict timed without a send): boxed, since
    /// every token is moved in and out of its ring.
    pub(super) rare: Option<Box<Rare>>,
    /// See [`Queued::reported`].
    pub(super) reported: bool,
    /// See [`Queued::senders_copy`].
    pub(super) senders_copy: bool,
    /// See [`Queued::reply`].
    pub(super) reply: bool,
    /// Sent whole and reported held by its receiver (HELD): out of flight and never sent
    /// again as it is, while its verdict waits for the take. Only asked about, at a
    /// timeout, by the first bytes of a FRAG ([`Token::probe_held`]).
    pub(super) held: bool,
}

/// The sequence number of a token that never left in this life of its sender: no datagram's.
pub(crate) const NEVER_SENT: u64 = u64::MAX;

/// A token's state that few tokens ever have.
#[derive(Debug, Default)]
pub(crate) struct Rare {
    /// Its last loss declared by loss detection (kept until it is settled).
    pub(super) lost: Option<Lost>,
    /// Held whole at its receiver (HELD) before this life of its sender put it on the wire
    /// (a token restored after a restart): when that was, from which its verdict is timed
    /// until it leaves.
    pub(super) held_unsent_at: Option<Instant>,
    /// When its datagram left, kept here once the datagram log forgot that datagram (past
    /// its hard bound) while this token still named it (a token held long at its
    /// receiver while many datagrams went after it); cleared when it is sent again.
    pub(super) sent_at: Option<Instant>,
}

/// A loss declared by loss detection, kept to tell later whether it was spurious.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Lost {
    /// When it was declared lost.
    pub(super) at: Instant,
    /// When the first transmission after that left (`None`: none yet).
    pub(super) resent_at: Option<Instant>,
    /// Its bytes in flight then.
    pub(super) bytes: u64,
}

impl Token {
    /// The message back out of this token (its payload taken), to be queued for a fresh
    /// slot.
    #[inline]
    pub fn take_message(&mut self) -> Queued {
        Queued {
            id: self.id,
            payload: std::mem::take(&mut self.payload),
            reported: self.reported,
            senders_copy: self.senders_copy,
            reply: self.reply,
        }
    }

    /// A token for message `msg` under incarnation `rck`, never sent yet and waiting to be.
    #[inline]
    pub fn new(rck: u64, msg: Queued) -> Token {
        Token {
            rck,
            payload: msg.payload,
            id: msg.id,
            sends: 0,
            whole_left: false,
            queued: true,
            seq: NEVER_SENT,
            flight: 0,
            size: 0,
            frag: None,
            rare: None,
            reported: msg.reported,
            senders_copy: msg.senders_copy,
            reply: msg.reply,
            held: false,
        }
    }

    /// Held whole at its receiver, untaken: reported held (HELD), or every byte of it got
    /// (GOT), and neither in flight nor waiting to be sent (a probe) since.
    pub fn is_held_whole(&self) -> bool {
        self.flight == 0
            && !self.queued
            && (self.held || self.frag.as_ref().is_some_and(|o| o.is_whole()))
    }

    /// A token held whole at its receiver is to be asked about (a timeout, a probe): from
    /// now on it goes as a fragmented message the receiver holds every byte of, so that
    /// the question is its first bytes in a FRAG rather than the whole message again, and
    /// the answer (GOT or HELD, ACK, DOUBT or RETRY) is handled as for any fragmented one.
    /// Its last transmission's time (`log`: its datagram's) goes with it.
    pub fn probe_held(&mut self, log: &SentLog) {
        if self.held && self.frag.is_none() {
            let mut o = Outgoing::held_whole(self.payload.len() as u64);
            o.set_last_sent(self.last_sent(log));
            self.frag = Some(Box::new(o));
        }
        self.held = false;
    }

    /// When it was last put on the wire (`None`: never yet in this life of its sender),
    /// which its timers run from: its datagram's instant (`log`), its last fragment's, or
    /// for a token held whole before it ever left in this life, when it was found held.
    #[inline]
    pub fn last_sent(&self, log: &SentLog) -> Option<Instant> {
        match &self.frag {
            Some(o) => o.last_sent(),
            None if self.seq != NEVER_SENT => {
                self.datagram_sent_at(log).or_else(|| log.sent_at(self.seq))
            }
            None => self.rare.as_ref().and_then(|r| r.held_unsent_at),
        }
    }

    /// When the datagram of its last whole transmission left, if that is known exactly:
    /// the log's instant, or the one pinned here when the log forgot the datagram.
    #[inline]
    pub fn datagram_sent_at(&self, log: &SentLog) -> Option<Instant> {
        log.sent_exactly_at(self.seq)
            .or_else(|| self.rare.as_ref().and_then(|r| r.sent_at))
    }

    /// Its datagram, sent at `at`, is about to be forgotten by the datagram log: the token
    /// keeps the instant itself (see [`last_sent`](Self::last_sent)).
    #[cold]
    pub fn pin_sent_at(&mut self, at: Instant) {
        self.rare.get_or_insert_with(Box::default).sent_at = Some(at);
    }

    /// Its last loss declared by loss detection, if it is not settled yet.
    #[inline]
    pub fn lost(&self) -> Option<&Lost> {
        self.rare.as_ref().and_then(|r| r.lost.as_ref())
    }

    /// Records a loss declared by loss detection.
    pub fn set_lost(&mut self, lost: Lost) {
        self.rare.get_or_insert_with(Box::default).lost = Some(lost);
    }

    /// What its embedding gets back with a doubt verdict: a reply's payload (taken out of
    /// the token, which is being settled), boxed, since doubts are rare and every event
    /// stays small; nothing for any other message.
    #[inline]
    pub fn doubted_reply(&mut self) -> Option<Box<Payload>> {
        self.reply
            .then(|| Box::new(std::mem::take(&mut self.payload)))
    }

    /// Forgets its last loss (it arrived).
    #[inline]
    pub fn clear_lost(&mut self) {
        if let Some(r) = &mut self.rare {
            r.lost = None;
        }
    }

    /// It was found held whole before it ever left in this life: its verdict is timed
    /// from `now`.
    pub fn held_unsent(&mut self, now: Instant) {
        self.rare.get_or_insert_with(Box::default).held_unsent_at = Some(now);
    }

    /// The incarnation this token goes out under: its own (rule 3), or, with that rule
    /// switched off for the checker's self-test, whatever the record holds now.
    pub fn incarnation(&self, record_rck: Option<u64>, keep_own: bool) -> u64 {
        if keep_own {
            self.rck
        } else {
            record_rck.unwrap_or(self.rck)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A token's ring entry stays small: what its transmission shares with its datagram
    /// (when it left, the delivery-rate snapshot, the reach) is the datagram's, kept once
    /// ([`SentLog`]), its frame's size fits 32 bits, and what few tokens have is boxed
    /// ([`Rare`]). It was 144 bytes with a send time and a reach of its own; each entry is
    /// moved into the ring once.
    #[test]
    fn a_token_keeps_no_state_of_its_datagram() {
        assert!(std::mem::size_of::<(u64, Option<Token>)>() <= 120);
    }
}
