//! What the oracle reports: the kinds of violation, and one violation with its message.

use std::fmt;
use std::time::Duration;

use crate::workload::MsgKey;

/// What went wrong.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ViolationKind {
    /// A message was delivered a second time.
    Duplicate,
    /// A message was delivered altered or in part (not the bytes submitted).
    Corrupted,
    /// A payload that was never submitted was delivered.
    NeverSent,
    /// A message was delivered to a node it was not sent to, or from the wrong source.
    Misdelivered,
    /// The sender was told a message was delivered that was not.
    AckWithoutDelivery,
    /// The sender was told a message was acknowledged that its receiver's node delivered
    /// but its application never took (acknowledged must mean taken).
    AckWithoutTake,
    /// The sender was told twice (acknowledged or in doubt).
    DoubleAck,
    /// The sender was told a message is in doubt although its receiver never restarted
    /// (nor, without a journal, evicted a record it had delivered into).
    UnexplainedDoubt,
    /// A message its sender was told is not delivered was delivered.
    DeliveredAfterNotDelivered,
    /// After healing and quiescence, a message was never delivered (and taken by the
    /// receiving application).
    Lost,
    /// After healing and quiescence, a live sender was never told the message's fate
    /// (neither acknowledged nor in doubt).
    NotAcknowledged,
    /// After quiescence a node still holds records, or events were still pending.
    NotIdle,
    /// A node's state exceeded a configured cap.
    Unbounded,
    /// A node sent a peer it had not heard from for a few `max_rto` more than the bound of
    /// `deafness.rs` (60 datagrams, 256 KiB in 30 s).
    DeafFlood,
    /// Durable mode: a sender was told a message is in doubt (a durable receiver never
    /// makes it so, unless its journal was damaged).
    DurableInDoubt,
    /// Durable mode: a message was handed to the receiving application again (flagged as a
    /// redelivery) after its sender was told it was acknowledged.
    RedeliveredAfterAck,
    /// Durable mode, restored copies: a message was delivered again after its sender was
    /// restored from a copy of its directory taken before the message's verdict, and sent
    /// it again (a duplicate of its own kind, to tell it from the others: the copy knew no
    /// slot for it, so it went in a fresh one; in its old slot it gets DOUBT,
    /// `Rules::doubt_below_forgotten`).
    ResentByRestoredSender,
    /// Durable mode: a message whose verdict its sender's application heard (given up at
    /// its deadline) was recovered by its restarted sender, to be sent again: the verdict
    /// heard was not the message's last word.
    VerdictRevoked,
    /// Durable mode: a verdict reported again after a restart (its journal held it as not
    /// reported) differs from the one reported before.
    VerdictChanged,
    /// Durable mode: after quiescence and a final compaction, a host's journal still holds
    /// live records (it must replay to nothing: obliviousness on disk).
    JournalNotEmpty,
    /// Durable mode: the journal failed with no fault injected (the simulated disk refused
    /// a write or a commit, or could not be opened).
    JournalError,
    /// RPC: a server executed a request a second time in effect (unflagged, or flagged
    /// with another stable id than the execution before).
    ExecutedTwice,
    /// RPC: a caller got two replies to one call.
    ReplyTwice,
    /// RPC: a request or a reply of a call its caller never made (or made to another
    /// server), or a call ended twice.
    UnknownCall,
    /// RPC: a call ended with a reply that is not its server's answer to it.
    WrongReply,
    /// RPC: a call ended not executed, and its request was (or later is) executed.
    ExecutedAfterNotExecuted,
    /// RPC: a server's message told in doubt handed back a payload that is not its own
    /// reply, or nothing for a reply the running node sent (`Event::InDoubt`'s `reply`:
    /// the endpoint sends a doubted reply once more from that payload alone).
    WrongPayloadBack,
    /// RPC: a call ended executed without its reply, and its request was never executed.
    NoReplyNotExecuted,
    /// RPC: after healing and quiescence, a request was acknowledged (so executed) and its
    /// reply never reached its caller, with no restart of a node without a journal to
    /// excuse it.
    ReplyLost,
    /// RPC: after healing and quiescence, a call never ended (its caller did not crash).
    CallNotEnded,
    /// Channels: a flow's numbers reached its receiving application out of order, twice,
    /// or as another message than the one sent under them (or a sender numbered its
    /// messages out of order).
    ChannelOrder,
    /// Channels: a message its sender was told is acknowledged was released to the
    /// receiving application as a gap, or never (discarded).
    ChannelAckedNotReleased,
    /// Channels: a message its sender was told is not delivered was released as itself.
    ChannelNotDeliveredReleased,
    /// Channels: a receiver held as many messages and gaps of one flow out of order as the
    /// window, or more (at most `window - 1` can be held: the one due is missing).
    ChannelHeldOverWindow,
    /// Channels: after healing and quiescence, a flow of a live sender and receiver was not
    /// released to its last number sent (a channel blocked forever).
    ChannelBlocked,
    /// Streams: a reading application stored bytes beyond the end of its store (bytes in
    /// between were skipped: read, counted as read, and lost).
    StreamSkipped,
    /// Streams: a reading application stored bytes it had stored already.
    StreamRepeated,
    /// Streams: a reading application stored bytes that are not the source's.
    StreamCorrupted,
    /// Streams: something outside the stream's order reached its reader (a chunk of a run
    /// it does not know, a copy of a chunk it passed, a gap).
    StreamOrder,
    /// Streams: a reader saw its stream's end twice, or before every byte was stored.
    StreamEnd,
    /// Streams: a writer was told a chunk was not delivered (the stream aborts; these runs
    /// give nothing up).
    StreamAborted,
    /// Streams: after healing and quiescence, a stream was not stored whole, or its end
    /// not seen.
    StreamIncomplete,
}

/// One violation, with the message involved if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// What.
    pub kind: ViolationKind,
    /// The message, if one is involved.
    pub key: Option<MsgKey>,
    /// Virtual time from the start.
    pub at: Duration,
    /// What was seen, including a short trace of the message.
    pub detail: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} at {:?}", self.kind, self.at)?;
        if let Some(k) = self.key {
            write!(f, " msg {k}")?;
        }
        write!(f, ": {}", self.detail)
    }
}
