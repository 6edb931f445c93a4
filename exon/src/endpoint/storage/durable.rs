//! Durable mode of the endpoint: the journal directory, opened at bind and recovered into
//! the node (`docs/durability.md`).

use crate::envelope::{Envelope, Place};
use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Instant;

use tokio::sync::oneshot;

use crate::durable::{FsBackend, Journal, JournalConfig};
use crate::endpoint::api::error::BindError;
use crate::endpoint::api::receipts::Ack;
use crate::endpoint::api::receipts::Receipt;
use crate::endpoint::flows::resume::ResumedFlows;
use crate::endpoint::storage::clock_store::FileStore;
use crate::endpoint::storage::journal_jobs::JournalJobs;
use crate::envelope::Flow;
use crate::proto::journal::{RecoveredDelivery, RecoveredMessage};
use crate::proto::{MsgId, Node, NodeId};
use crate::rpc::calls::{CallGuard, Calls};

/// What the driver of a durable endpoint starts with: its journal, and where the verdicts
/// of the messages recovered from it go.
pub(crate) struct DriverJournal {
    pub(crate) jobs: JournalJobs,
    pub(crate) recovered: Vec<(MsgId, NodeId, Ack)>,
    /// The journal was found damaged at recovery ([`Endpoint::journal_damaged`]).
    pub(crate) damaged: bool,
}

/// A message recovered from the journal of a durable endpoint after a restart: it is being
/// sent again, under the id it had ([`Receipt::id`]); the receipt resolves with its verdict.
///
/// Or (`settled`) a message whose verdict the journal stored before the crash and may not
/// have reported: the receipt resolves with that verdict at once, and the payload is empty
/// (the journal keeps only the verdict). Such a verdict may have reached the application
/// before the crash too (the journal records a report with its next commit): the same
/// verdict for the same id, never a different one.
#[derive(Debug)]
pub struct RecoveredSend {
    /// The message's receipt (stored already).
    pub receipt: Receipt,
    /// The destination.
    pub to: NodeId,
    /// The message, so the application knows which of its own items it is (empty when
    /// `settled`).
    pub payload: bytes::Bytes,
    /// The application's key, for a message sent with
    /// [`Handle::send_keyed`](crate::endpoint::Handle::send_keyed).
    pub key: Option<u64>,
    /// The message had its verdict before the restart: it is not sent again, and the
    /// receipt carries that verdict.
    pub settled: bool,
    /// A durable channel's message: the channel and the message's number in it. It is sent
    /// again on its channel, in its place (a gap replaces it if it is given up), whether or
    /// not the application makes the channel again: do not send it again.
    pub channel: Option<(u16, u64)>,
}

/// A request of a durable caller recovered from its journal: being sent again (or, when
/// `acknowledged`, waiting for its reply only), its call open again in the table of calls
/// (what
/// [`Endpoint::take_recovered_calls`](crate::endpoint::Endpoint::take_recovered_calls)
/// hands out as a [`RecoveredCall`](crate::rpc::RecoveredCall)).
#[derive(Debug)]
pub(crate) struct RecoveredRequest {
    /// The request's receipt (stored already).
    pub(crate) receipt: Receipt,
    /// The node called.
    pub(crate) to: NodeId,
    /// The request, out of its envelope.
    pub(crate) body: bytes::Bytes,
    /// The call, open again under its id (where its reply comes).
    pub(crate) guard: CallGuard,
    /// Its reply is among the deliveries recovered untaken: it may have reached the
    /// call's future before the restart.
    pub(crate) reply_stored: bool,
    /// The server acknowledged it before the restart (it was held in the journal,
    /// `Node::send_held`): not sent again, its receipt resolved.
    pub(crate) acknowledged: bool,
}

/// What a durable endpoint recovered at bind for the application: messages and calls.
#[derive(Debug, Default)]
pub(crate) struct Recovery {
    /// Plain messages ([`Endpoint::take_recovered`](crate::endpoint::Endpoint::take_recovered)).
    pub(crate) sends: Vec<RecoveredSend>,
    /// Requests, their calls open again.
    pub(crate) calls: Vec<RecoveredRequest>,
    /// Durable channels and streams: where each stood.
    pub(crate) flows: ResumedFlows,
    /// Durable streams made again, for the application
    /// ([`Endpoint::take_recovered_streams`](crate::endpoint::Endpoint::take_recovered_streams)).
    pub(crate) streams: Vec<crate::endpoint::Stream>,
}

impl Recovery {
    /// Message `m`, recovered from the journal without a verdict: handed to the application
    /// (a plain message, a call), or to its durable channel. Returns where its verdict goes.
    fn recover_message(
        &mut self,
        m: &RecoveredMessage,
        (calls, register): (&std::sync::Arc<Calls>, bool),
        replies: &HashSet<(NodeId, u64)>,
    ) -> Ack {
        let (tx, rx) = oneshot::channel();
        let receipt = |rx| Receipt::recovered(m.id, m.to, rx);
        // Replies are sent again too, and have no receipt: the caller is told.
        match Envelope::open(m.payload.to_bytes()) {
            Ok(Envelope::Ordered {
                place:
                    place @ Place {
                        flow: Flow::Channel(n),
                        ..
                    },
                body,
                ..
            }) => {
                let len = Some(body.len());
                let ack = self.flows.recovered(m.to, n, place, len, Some(tx));
                self.sends.push(RecoveredSend {
                    receipt: receipt(rx),
                    to: m.to,
                    payload: body,
                    key: m.key,
                    settled: false,
                    channel: Some((n, place.seq)),
                });
                ack
            }
            Ok(Envelope::Gap(
                place @ Place {
                    flow: Flow::Channel(n),
                    ..
                },
            )) => self.flows.recovered(m.to, n, place, None, None),
            Ok(Envelope::Ordered {
                place:
                    place @ Place {
                        flow: Flow::Stream { id, opener_sent },
                        ..
                    },
                body,
                last,
            }) => {
                // A durable stream's chunk (this endpoint sent it: `opener_sent` says
                // whether it opened the stream) goes on with its stream.
                let stream = (id, opener_sent);
                let ack = self.flows.recovered_chunk(m.to, stream, place, body, last);
                ack.unwrap_or(Ack::One(tx))
            }
            Ok(Envelope::Message(body)) => {
                self.sends.push(RecoveredSend {
                    receipt: receipt(rx),
                    to: m.to,
                    payload: body,
                    key: m.key,
                    settled: false,
                    channel: None,
                });
                Ack::One(tx)
            }
            Ok(Envelope::Request { call, body }) => {
                let reopen = (calls, register);
                let r = reopen_call(m, (call, body), reopen, rx, replies, false);
                self.calls.push(r);
                Ack::One(tx)
            }
            // A server's reply: sent again to the end, and once more if told in doubt.
            Ok(Envelope::Reply { .. }) => Ack::Reply(Some(Box::new(m.payload.clone()))),
            _ => Ack::One(tx),
        }
    }
}

/// The file that records a durable directory's number of shards, when above one.
const SHARDS_FILE: &str = "shards";

/// Where a durable endpoint keeps its state, and how.
#[derive(Debug, Clone)]
pub(crate) struct DurableDir {
    pub(crate) dir: PathBuf,
    pub(crate) config: JournalConfig,
}

impl DurableDir {
    /// The clock file in the directory.
    pub(crate) fn clock_file(&self) -> FileStore {
        FileStore::new(self.dir.join("clock"))
    }

    /// The journal of shard `shard`: `journal/` for the first (so a directory of one shard
    /// has the layout it always had), `journal-<shard>/` for the others.
    pub(crate) fn journal_dir(&self, shard: usize) -> PathBuf {
        match shard {
            0 => self.dir.join("journal"),
            i => self.dir.join(format!("journal-{i}")),
        }
    }

    /// The number of driver shards the directory was used with: what its `shards` file
    /// says, else one more than the highest shard that has a journal (a directory of one
    /// shard, written before the file existed, has only `journal/`), else `None` (new).
    fn recorded_shards(&self) -> Result<Option<usize>, BindError> {
        match std::fs::read_to_string(self.dir.join(SHARDS_FILE)) {
            Ok(s) => {
                let n = s.trim().parse::<usize>().map_err(|e| {
                    BindError::Io(std::io::Error::new(std::io::ErrorKind::InvalidData, e))
                })?;
                return Ok(Some(n));
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
        let mut highest = None;
        for entry in std::fs::read_dir(&self.dir)? {
            let entry = entry?;
            let name = entry.file_name();
            let shard = match name.to_str() {
                Some("journal") => Some(0),
                Some(s) => s.strip_prefix("journal-").and_then(|i| i.parse().ok()),
                None => None,
            };
            if let Some(i) = shard.filter(|_| entry.path().is_dir()) {
                highest = highest.max(Some(i));
            }
        }
        Ok(highest.map(|i: usize| i + 1))
    }

    /// Checks that the directory (created if missing) was used with `n` shards, or is new
    /// ([`BindError::DurableShardsChanged`] otherwise: each journal holds the peers its
    /// shard owned, and owners change with the number of shards). Above one shard the
    /// number is recorded in the `shards` file (synced) before any journal is opened.
    pub(crate) fn check_shards(&self, n: usize) -> Result<(), BindError> {
        // Made already unless the clock is kept elsewhere (`Builder::clock_store`).
        std::fs::create_dir_all(&self.dir)?;
        let file = self.dir.join(SHARDS_FILE);
        let recorded = self.recorded_shards()?;
        if let Some(recorded) = recorded.filter(|&r| r != n) {
            return Err(BindError::DurableShardsChanged { recorded, asked: n });
        }
        if n > 1 && !file.exists() {
            // Decimal text, written atomically (a crash leaves no file or the whole one).
            crate::endpoint::storage::clock_store::ClockStore::store(
                &mut FileStore::new(file),
                n as u64,
            )?;
        }
        Ok(())
    }

    /// Opens the journal of shard `shard`, recovers `node` (that shard's) from it, and
    /// returns the driver's journal and receipts for the messages recovered (their verdicts
    /// are still to come); the calls of the requests recovered are opened again in `calls`
    /// (registered in its table with the rule `recover_calls`). `ran_before`: the
    /// directory's clock was stored by an earlier run, so a journal found new was lost or
    /// replaced (`Recovered::replaced`: the keys it had accepted are forgotten).
    pub(crate) fn open(
        &self,
        shard: usize,
        node: &mut Node,
        (calls, register): (&std::sync::Arc<Calls>, bool),
        ran_before: bool,
    ) -> Result<(DriverJournal, Recovery), BindError> {
        let backend = FsBackend::open(self.journal_dir(shard))?;
        let (journal, mut recovered, report) = Journal::open(backend, self.config.clone())?;
        if ran_before && recovered.covers.is_none() {
            recovered.replaced = true;
            tracing::warn!(
                shard,
                "journal new for a node that ran before (lost or replaced, its clock kept): \
                 keyed sends are refused until the application settles their keys"
            );
        }
        let (deliveries, messages) = (recovered.deliveries.len(), recovered.messages.len());
        tracing::info!(
            shard,
            records = report.records,
            torn_bytes = report.torn_bytes,
            damaged = report.damaged,
            messages,
            deliveries,
            "journal recovered"
        );
        if report.damaged {
            tracing::error!(
                "journal damaged: records it had made durable are lost; what they covered \
                 resolves as in doubt"
            );
        }
        let mut acks = Vec::with_capacity(messages);
        let mut out = Recovery::default();
        let replies = stored_replies(&recovered.deliveries);
        out.flows = ResumedFlows::from_marks(&recovered.marks);
        // Held requests no call will release (calls not registered).
        let mut release = Vec::new();
        let resend_replies = node.rules().resend_doubted_replies;
        for m in &recovered.messages {
            let ack = match out.recover_message(m, (calls, register), &replies) {
                Ack::Reply(_) if !resend_replies => Ack::None,
                ack => ack,
            };
            acks.push((m.id, m.to, ack));
            if m.held && !register {
                release.push(m.id);
            }
        }
        let acknowledged =
            reopen_acknowledged(&recovered.held, &replies, (calls, register), &mut out.calls);
        release.extend(acknowledged.release);
        let receipts = &mut out.sends;
        for v in &recovered.verdicts {
            if acknowledged.calls.contains(&v.id) {
                // Its call stands for it (its receipt resolved already).
                continue;
            }
            // The node reports these again at recovery: the receipts resolve at once.
            let (tx, rx) = oneshot::channel();
            acks.push((v.id, v.to, Ack::One(tx)));
            receipts.push(RecoveredSend {
                receipt: Receipt::recovered(v.id, v.to, rx),
                to: v.to,
                payload: bytes::Bytes::new(),
                key: v.key,
                settled: true,
                channel: None,
            });
        }
        node.recover(Instant::now(), recovered)
            .map_err(|e| BindError::Io(std::io::Error::other(e)))?;
        for id in release {
            node.release(id);
        }
        let jobs = JournalJobs::new(journal);
        Ok((
            DriverJournal {
                jobs,
                recovered: acks,
                damaged: report.damaged,
            },
            out,
        ))
    }
}

/// The acknowledged calls [`reopen_acknowledged`] opened again, and the held requests it
/// left to release.
struct Reopened {
    /// The ids of the requests whose calls were opened again.
    calls: HashSet<MsgId>,
    /// Held messages that no call will release.
    release: Vec<MsgId>,
}

/// Durable mode: the calls whose requests the server acknowledged before the restart and
/// the journal held (`Recovered::held`) are opened again, waiting for their replies only
/// (registered with the rule `recover_calls`; otherwise their requests are released).
fn reopen_acknowledged(
    held: &[RecoveredMessage],
    replies: &HashSet<(NodeId, u64)>,
    (calls, register): (&std::sync::Arc<Calls>, bool),
    out: &mut Vec<RecoveredRequest>,
) -> Reopened {
    let mut r = Reopened {
        calls: HashSet::new(),
        release: Vec::new(),
    };
    for m in held {
        let Ok(Envelope::Request { call, body }) = Envelope::open(m.payload.to_bytes()) else {
            r.release.push(m.id);
            continue;
        };
        if !register {
            r.release.push(m.id);
        }
        let (tx, rx) = oneshot::channel();
        let _ = tx.send(Ok(()));
        r.calls.insert(m.id);
        let reopen = (calls, register);
        out.push(reopen_call(m, (call, body), reopen, rx, replies, true));
    }
    r
}

/// Request `m` (of call `call`, `body` out of its envelope) recovered: its call opened
/// again in `calls` (registered with the rule `recover_calls`), held under its id if it was
/// sent held; its receipt resolves through `rx`. `acknowledged`: before the restart.
fn reopen_call(
    m: &RecoveredMessage,
    (call, body): (u64, bytes::Bytes),
    (calls, register): (&std::sync::Arc<Calls>, bool),
    rx: oneshot::Receiver<Result<(), crate::endpoint::api::error::ReceiptError>>,
    replies: &HashSet<(NodeId, u64)>,
    acknowledged: bool,
) -> RecoveredRequest {
    let guard = calls.reopen(call, m.to, register, m.held.then_some(m.id));
    RecoveredRequest {
        receipt: Receipt::recovered(m.id, m.to, rx),
        to: m.to,
        body,
        guard,
        reply_stored: replies.contains(&(m.to, call)),
        acknowledged,
    }
}

/// The replies among the deliveries recovered untaken: their senders and call ids.
fn stored_replies(deliveries: &[RecoveredDelivery]) -> HashSet<(NodeId, u64)> {
    deliveries
        .iter()
        .filter_map(|d| match Envelope::open(d.payload.clone()?) {
            Ok(Envelope::Reply { call, .. }) => Some((d.from, call)),
            _ => None,
        })
        .collect()
}
