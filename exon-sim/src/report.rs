//! The outcome of a run: counters, violations, and the one-line summary.

use std::fmt;
use std::time::Duration;

use crate::oracle::Violation;

/// Everything a run found.
#[derive(Debug, Clone)]
pub struct Report {
    /// The seed, to replay the run.
    pub seed: u64,
    /// Protocol nodes.
    pub nodes: usize,
    /// Messages submitted.
    pub messages: u64,
    /// Distinct messages delivered.
    pub delivered: u64,
    /// Deliveries beyond the first (each one is a violation).
    pub duplicates: u64,
    /// Messages never delivered with no restart to excuse them (each one is a violation).
    pub lost: u64,
    /// Messages never delivered because their sender restarted, or reported in doubt to
    /// their sender after their receiver restarted.
    pub lost_by_restart: u64,
    /// Acknowledgements seen by senders (each of a delivered message).
    pub acked: u64,
    /// Messages reported in doubt to their senders (their receiver restarted and lost the
    /// incarnation they were sent under; delivered at most once).
    pub in_doubt: u64,
    /// Messages given up at their deadline before any copy left: told not delivered (and
    /// checked never to arrive).
    pub not_delivered: u64,
    /// Messages given up at their deadline after a copy left: told in doubt.
    pub expired_in_doubt: u64,
    /// Number of violations (only the first ones are kept in `violations`).
    pub violation_count: u64,
    /// The first violations, with a trace of the message involved.
    pub violations: Vec<Violation>,
    /// How many violations of each kind (all of them, not only those kept).
    pub violation_kinds: Vec<(crate::oracle::ViolationKind, u64)>,
    /// Nodes idle (holding only their clock) at the end.
    pub idle_nodes: usize,
    /// Events still pending when the run stopped.
    pub pending_events: usize,
    /// Events processed.
    pub events: u64,
    /// Virtual time simulated.
    pub virtual_time: Duration,
    /// Virtual time of the last acknowledgement or stream bytes stored: when the work was
    /// done (the run itself goes on until the nodes' timers go quiet, idle timeouts
    /// included).
    pub done_at: Duration,
    /// Node restarts.
    pub restarts: u32,
    /// With a simulated disk: crashes that lost clock writes not yet synced.
    pub crashes_losing_writes: u32,
    /// With a simulated disk: recoveries that cut a torn or corrupt tail off a clock log.
    pub torn_tails_cut: u32,
    /// Datagrams put on links.
    pub datagrams: u64,
    /// Datagrams lost on links (loss, bursts, partitions, queue drops).
    pub link_drops: u64,
    /// Datagrams dropped as larger than a link's MTU (MTU probes above the path's, and
    /// datagrams caught by an MTU drop): not counted in `link_drops`.
    pub too_big: u64,
    /// Duplicate copies made by links.
    pub link_dups: u64,
    /// Token retransmissions over all live nodes.
    pub retransmissions: u64,
    /// Of those, the ones the senders found spurious (the datagram declared lost had
    /// arrived): `Stats::spurious_retransmissions` over all live nodes. On a link that loses
    /// nothing every retransmission is spurious, found or not.
    pub spurious_retransmissions: u64,
    /// Sealed datagrams refused because their tag did not verify (forged or altered), over
    /// all live nodes.
    pub bad_tags: u64,
    /// Durable mode: messages their senders' applications were told are stored.
    pub stored: u64,
    /// Durable mode: flagged redeliveries of messages handed to the application before a
    /// restart of its node (the hand-over was never acknowledged).
    pub redeliveries: u64,
    /// Durable mode: journal commits (group commits, each reported with `handle_stored`).
    pub journal_commits: u64,
    /// Durable mode: journal compactions (in commits, when quiet, and at the end).
    pub compactions: u64,
    /// Durable mode: the most bytes one host's journal took on disk (after a commit).
    pub journal_bytes_max: u64,
    /// Durable mode: crashes that cut a commit part way (the disk failed mid-way).
    pub crashes_mid_commit: u32,
    /// Durable mode: crashes that cut a compaction part way.
    pub crashes_mid_compaction: u32,
    /// Durable mode: bytes of torn tails cut off journals at recovery.
    pub journal_torn_bytes: u64,
    /// Durable mode: recoveries that found a journal damaged.
    pub journal_damaged: u32,
    /// Durable mode: crashes that changed a byte of a synced journal record
    /// (`JournalModel::damage`).
    pub journal_damage_injected: u32,
    /// Durable mode: restarts with a new, empty journal (`JournalModel::journal_loss`).
    pub journals_lost: u32,
    /// Durable mode: restarts that switched durable mode on (`JournalModel::switch_on`).
    pub switched_on: u32,
    /// Durable mode: restarts from an older copy of the directory (`JournalModel::restore`).
    pub restored: u32,
    /// Durable mode: crashes that followed a message given up, in pairs
    /// (`JournalModel::abandon_crash`).
    pub abandon_crashes: u32,
    /// Keyed sends (`JournalModel::keyed`): outbox messages sent again after restarts and
    /// accepted (their records were lost), and refused (exon had accepted them). `None`:
    /// not keyed.
    pub keyed: Option<(u64, u64)>,
    /// Keyed sends: outbox messages given up in doubt because the journal forgot their
    /// keys (a lost or damaged journal: `SendError::KeysForgotten`).
    pub keyed_given_up: u64,
    /// Durable mode: messages allowed to end in doubt by a restart with a journal that
    /// cannot vouch for its earlier incarnations (see `Oracle::on_unvouched_restart`).
    pub doubt_excused: u64,
    /// Durable mode: second deliveries tolerated after a restored copy (messages first
    /// delivered to the restored host after its copy was taken).
    pub restore_duplicates: u64,
    /// Durable mode: flagged redeliveries after acknowledgement tolerated after a restored
    /// copy (messages the restored host took after its copy was taken).
    pub restore_redeliveries: u64,
    /// Durable mode: verdicts of messages given up that a crash before their `Resolved`
    /// record was durable revoked (the message was recovered and sent again).
    pub revoked_verdicts: u64,
    /// Durable mode: verdicts reported again, the same, after a crash that came before
    /// their report was recorded (allowed).
    pub repeated_verdicts: u64,
    /// RPC mode: the calls' counters.
    pub rpc: Option<crate::oracle::RpcCounts>,
    /// Channel mode: the flows' counters.
    pub channels: Option<crate::oracle::ChannelCounts>,
    /// Stream mode: the streams' counters.
    pub streams: Option<crate::oracle::StreamCounts>,
}

impl Report {
    /// True when every check held.
    pub fn ok(&self) -> bool {
        self.violation_count == 0
    }

    /// The violations and the seed, for a failure message.
    pub fn describe_failure(&self) -> String {
        let mut s = format!(
            "seed={} (replay with EXON_SIM_SEED={}): {} violation(s)\n",
            self.seed, self.seed, self.violation_count
        );
        s.push_str(&format!("  by kind: {:?}\n", self.violation_kinds));
        for v in self.violations.iter().take(10) {
            s.push_str(&format!("  {v}\n"));
        }
        s.push_str(&format!("  {self}\n"));
        s
    }
}

impl Report {
    /// The channel workload's part of the summary (`Display`).
    fn fmt_channels(
        &self,
        c: &crate::oracle::ChannelCounts,
        f: &mut fmt::Formatter<'_>,
    ) -> fmt::Result {
        write!(
            f,
            " flows={} chan_sent={} released={} gaps={} gaps_sent={} discarded={} held={} \
             max_held={}",
            c.flows, c.sent, c.released, c.gaps, c.gaps_sent, c.discarded, c.held, c.max_held
        )?;
        if self.journal_commits > 0 {
            write!(
                f,
                " chan_released_again={} chan_repeated={} chan_lost_with_sender={} \
                 chan_owed_gaps={}",
                c.released_again, c.repeated, c.lost_with_sender, c.owed_gaps
            )?;
        }
        Ok(())
    }
}

impl fmt::Display for Report {
    /// The one-line `key=value` summary (without wall-clock figures).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "seed={} nodes={} messages={} delivered={} duplicates={} lost={} lost_by_restart={} \
             acked={} in_doubt={} violations={} idle_nodes={} restarts={} events={} datagrams={} \
             link_drops={} too_big={} link_dups={} retransmissions={} spurious_found={} done_s={:.3} virtual_s={:.3}",
            self.seed,
            self.nodes,
            self.messages,
            self.delivered,
            self.duplicates,
            self.lost,
            self.lost_by_restart,
            self.acked,
            self.in_doubt,
            self.violation_count,
            self.idle_nodes,
            self.restarts,
            self.events,
            self.datagrams,
            self.link_drops,
            self.too_big,
            self.link_dups,
            self.retransmissions,
            self.spurious_retransmissions,
            self.done_at.as_secs_f64(),
            self.virtual_time.as_secs_f64()
        )?;
        if let Some(c) = &self.rpc {
            write!(
                f,
                " calls={} replies={} failed={} not_executed={} call_in_doubt={} no_reply={} \
                 forgotten={} executions={} reruns={} discarded_replies={} damage_replies={} \
                 resent_replies={}",
                c.calls,
                c.replies,
                c.failed,
                c.not_executed,
                c.in_doubt,
                c.no_reply,
                c.forgotten,
                c.executions,
                c.reruns,
                c.discarded,
                c.damage_replies,
                c.resent_replies
            )?;
        }
        if let Some(c) = &self.channels {
            self.fmt_channels(c, f)?;
        }
        if let Some(c) = &self.streams {
            fmt_streams(c, f)?;
        }
        if self.journal_commits > 0 {
            write!(
                f,
                " stored={} redeliveries={} commits={} compactions={} journal_bytes_max={} \
                 mid_commit_crashes={} mid_compaction_crashes={} journal_torn_bytes={} \
                 journal_damaged={} journal_damage_injected={}",
                self.stored,
                self.redeliveries,
                self.journal_commits,
                self.compactions,
                self.journal_bytes_max,
                self.crashes_mid_commit,
                self.crashes_mid_compaction,
                self.journal_torn_bytes,
                self.journal_damaged,
                self.journal_damage_injected
            )?;
            write!(
                f,
                " journals_lost={} switched_on={} restored={} abandon_crashes={} \
                 doubt_excused={} restore_duplicates={} restore_redeliveries={} \
                 revoked_verdicts={} repeated_verdicts={} not_delivered={} expired_in_doubt={}",
                self.journals_lost,
                self.switched_on,
                self.restored,
                self.abandon_crashes,
                self.doubt_excused,
                self.restore_duplicates,
                self.restore_redeliveries,
                self.revoked_verdicts,
                self.repeated_verdicts,
                self.not_delivered,
                self.expired_in_doubt
            )?;
            if let Some((resent, refused)) = self.keyed {
                write!(f, " keyed_resent={resent} keyed_refused={refused}")?;
                write!(f, " keyed_given_up={}", self.keyed_given_up)?;
            }
        }
        Ok(())
    }
}

/// The stream workload's part of the summary (`Display`).
fn fmt_streams(c: &crate::oracle::StreamCounts, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    write!(
        f,
        " streams={} stream_bytes={} bytes_stored={} ended={} chunks={} chunks_resent={} \
             chunks_redelivered={} chunks_taken={} chunks_held={} stores={} skipped={} \
             writers_resumed={} readers_resumed={}",
        c.streams,
        c.bytes,
        c.stored,
        c.ended,
        c.chunks,
        c.resent,
        c.redelivered,
        c.taken,
        c.held,
        c.stores,
        c.skipped,
        c.writers_resumed,
        c.readers_resumed
    )?;
    Ok(())
}
