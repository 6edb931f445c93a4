//! One simulated host: its node (absent while crashed) and its application's state.

use std::collections::HashMap;

use bytes::Bytes;
use exon::call::CallState;
use exon::durable::{Journal, MemBackend};
use exon::proto::{DeliveryId, MsgId, Node};

/// One simulated host: the node (absent while crashed) and its application.
pub(crate) struct Host {
    pub(crate) node: Option<Node>,
    /// The clock high-water mark confirmed stored.
    pub(crate) stored_hw: u64,
    /// Simulation sequence number of each `MsgId` of the current node incarnation (in
    /// durable mode, of every incarnation: recovered messages keep their ids).
    pub(crate) msg_keys: HashMap<u64, u64>,
    /// Messages still to submit on the workload's initiative.
    pub(crate) quota: u64,
    /// RPC replies owed: (requester, request).
    pub(crate) replies: Vec<usize>,
    pub(crate) timer_at: Option<u64>,
    pub(crate) pump_scheduled: bool,
    pub(crate) restarts: u32,
    /// The clock this incarnation started from: every receiver incarnation (`rck`) it
    /// creates is at least this.
    pub(crate) boot_clock: u64,
    /// Deliveries in the application's buffer, not yet taken: (delivery, source, payload).
    pub(crate) inbox: Vec<(DeliveryId, usize, Bytes)>,
    pub(crate) take_scheduled: bool,
    /// Its simulated disk (with [`Scenario::disk`](crate::Scenario::disk)): the clock log.
    pub(crate) disk: crate::disk::Disk,
    /// Crashes that lost writes not yet synced, and recoveries that cut a damaged tail.
    pub(crate) crashes_losing_writes: u32,
    pub(crate) torn_tails_cut: u32,
    /// Durable mode: the journal's storage, which survives crashes.
    pub(crate) jdisk: MemBackend,
    /// Durable mode: the open journal (dropped at a crash, reopened at the restart).
    pub(crate) journal: Option<Journal<MemBackend>>,
    /// Durable mode: a commit is scheduled.
    pub(crate) commit_scheduled: bool,
    /// Durable mode: figures over the host's life (see [`Report`](crate::Report)).
    pub(crate) jstats: JournalStats,
    /// Durable mode: the host keeps a journal now (false until its first restart when
    /// durable mode is switched on at restarts, `JournalModel::switch_on`).
    pub(crate) durable_on: bool,
    /// Durable mode: a copy of its directory, to restore at a later restart
    /// (`JournalModel::restore`).
    pub(crate) snapshot: Option<Snapshot>,
    /// Durable mode: the directory was just restored from its copy; the boot gives up
    /// at once the messages it recovers whose deadline passed in the lost run.
    pub(crate) restored_now: bool,
    /// Durable mode: ids of the verdicts its journal held as not reported at its last
    /// recovery (reported again; the application may have heard them before the crash).
    pub(crate) replayed: std::collections::HashSet<u64>,
    /// RPC: the call of each request message of the open calls.
    pub(crate) calls: HashMap<u64, u64>,
    /// RPC: the open calls: their state and request message.
    pub(crate) open: HashMap<u64, (CallState, MsgId)>,
    /// RPC: requests executed and not yet answered (the reply was refused for now).
    pub(crate) answers: Vec<Answer>,
    /// RPC (rule `resend_doubted_replies`): the caller and call of each reply message
    /// sent for the first time and not settled yet, to send once more if told in doubt.
    /// Kept across a crash, as a durable node recovers those messages; `true` while the
    /// node that sent it still runs (its core hands the payload back with a doubt).
    pub(crate) reply_calls: HashMap<u64, (usize, u64, bool)>,
    /// RPC: replies told in doubt, to send once more (caller, call).
    pub(crate) resend_replies: Vec<(usize, u64)>,
    /// Channels: the state of its ordered flows, as sender and receiver (lost at a crash;
    /// a durable host rebuilds it from its journal).
    pub(crate) chans: super::channels::ChanHost,
    /// Channels: ids of the channel application's own messages (gaps and window
    /// advertisements), of every incarnation in durable mode, as `msg_keys`: a verdict
    /// reported again after a restart may be about one.
    pub(crate) chan_own: std::collections::HashSet<u64>,
    /// Streams: the state of its streams, as writer and reader (lost at a crash; rebuilt
    /// from its journal's marks).
    pub(crate) streams: super::streams::StreamHost,
    /// Streams: the reading application's own store, by (writer, stream): kept across
    /// crashes.
    pub(crate) stream_store: std::collections::BTreeMap<(usize, u16), super::stream_read::AppStore>,
    /// Keyed sends (`JournalModel::keyed`): the application's outbox, its own store (kept
    /// across crashes): each message it sent and holds no verdict for, by sequence number
    /// (its key): (destination, kind).
    pub(crate) outbox: std::collections::BTreeMap<u64, (usize, crate::workload::Kind)>,
    /// Keyed sends: ids of messages the application gave up in doubt (their keys
    /// forgotten): a verdict the node reports for one later is not the oracle's news.
    pub(crate) given_up: std::collections::HashSet<u64>,
    /// Its journal was lost at its last restart (its clock kept): the storage says so
    /// at recovery (`Recovered::replaced`).
    pub(crate) journal_replaced: bool,
    /// Keyed sends: the outbox's messages to send again since the last restart, in order.
    pub(crate) resend: std::collections::VecDeque<u64>,
}

/// A copy of a durable host's directory (clock and journal) and of its application's
/// message ids, taken at one restart to be put back at a later one.
pub(crate) struct Snapshot {
    /// Virtual time of the copy (ns).
    pub(crate) at: u64,
    /// The journal's segments: (number, bytes).
    pub(crate) segments: Vec<(u64, Vec<u8>)>,
    /// The clock log (with a simulated disk).
    pub(crate) disk: crate::disk::Disk,
    /// The stored clock (without a simulated disk).
    pub(crate) stored_hw: u64,
    /// The application's map of message ids to its sequence numbers.
    pub(crate) msg_keys: HashMap<u64, u64>,
}

/// A request its server's application executed and is to answer.
#[derive(Debug, Clone)]
pub(crate) struct Answer {
    /// The request's delivery.
    pub(crate) id: DeliveryId,
    /// The caller.
    pub(crate) from: usize,
    /// The caller's call id.
    pub(crate) call: u64,
    /// The request's body (its message header first).
    pub(crate) body: Bytes,
}

/// Figures of one host's journal over its life.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct JournalStats {
    pub(crate) commits: u64,
    /// Compactions of the journals closed so far (a crash or the end closes one).
    pub(crate) compactions: u64,
    pub(crate) bytes_max: u64,
    pub(crate) cut_commits: u32,
    pub(crate) cut_compactions: u32,
    pub(crate) damaged: u32,
    /// Crashes that changed a byte of a synced record (`JournalModel::damage`).
    pub(crate) damage_injected: u32,
    /// The segment of the synced record the last crash changed, until the next recovery
    /// checks that it found the damage.
    pub(crate) damaged_seg: Option<u64>,
    pub(crate) torn_bytes: u64,
    /// Restarts with a new, empty journal.
    pub(crate) lost: u32,
    /// Restarts that switched durable mode on.
    pub(crate) switched_on: u32,
    /// Restarts from an older copy of the directory.
    pub(crate) restored: u32,
    /// Crashes that followed a message given up.
    pub(crate) abandon_crashes: u32,
    /// Keyed sends: outbox messages sent again after a restart and accepted (their records
    /// were lost in the crash), and refused (exon had accepted them).
    pub(crate) keyed_resent: u64,
    pub(crate) keyed_refused: u64,
    /// Keyed sends: outbox messages the application gave up in doubt when the journal said
    /// it forgot their keys (`SendError::KeysForgotten`).
    pub(crate) keyed_given_up: u64,
}

impl Host {
    /// A host with no node yet, whose application is to submit `quota` messages.
    pub(crate) fn new(quota: u64) -> Host {
        Host {
            node: None,
            stored_hw: 0,
            msg_keys: HashMap::new(),
            outbox: Default::default(),
            given_up: Default::default(),
            journal_replaced: false,
            resend: Default::default(),
            quota,
            replies: Vec::new(),
            timer_at: None,
            pump_scheduled: false,
            restarts: 0,
            boot_clock: 0,
            inbox: Vec::new(),
            take_scheduled: false,
            disk: crate::disk::Disk::default(),
            crashes_losing_writes: 0,
            torn_tails_cut: 0,
            jdisk: MemBackend::new(),
            journal: None,
            commit_scheduled: false,
            jstats: JournalStats::default(),
            replayed: Default::default(),
            durable_on: true,
            snapshot: None,
            restored_now: false,
            calls: HashMap::new(),
            open: HashMap::new(),
            answers: Vec::new(),
            reply_calls: HashMap::new(),
            resend_replies: Vec::new(),
            chans: super::channels::ChanHost::default(),
            chan_own: Default::default(),
            streams: Default::default(),
            stream_store: Default::default(),
        }
    }

    /// Whether the application has messages to submit.
    pub(crate) fn has_traffic(&self) -> bool {
        self.quota > 0
            || !self.replies.is_empty()
            || !self.answers.is_empty()
            || !self.resend_replies.is_empty()
            || !self.chans.gaps_owed.is_empty()
            || !self.resend.is_empty()
            || self.streams.writing()
    }

    /// Crashes the host (node and application, with what was in its buffer). False if it
    /// was down already.
    pub(crate) fn crash(&mut self) -> bool {
        if self.node.take().is_none() {
            return false;
        }
        self.restarts += 1;
        self.replies.clear();
        // The application crashed with these messages in its buffer.
        self.inbox.clear();
        self.timer_at = None;
        // The RPC application forgets its calls and the requests it did not answer.
        self.calls.clear();
        self.open.clear();
        self.answers.clear();
        self.resend_replies.clear();
        // A recovered reply is not known to the restarted core for one: it hands nothing
        // back with its doubt.
        for r in self.reply_calls.values_mut() {
            r.2 = false;
        }
        // Its flows die with it: a restarted node starts new runs and reorders afresh.
        self.chans = super::channels::ChanHost::default();
        // And its streams (the application's store stays).
        self.streams = super::streams::StreamHost::default();
        true
    }
}
