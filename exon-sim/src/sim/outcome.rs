//! The report of a run, made from the simulator's state at its end.

use std::time::Duration;

use super::Sim;
use crate::report::Report;

impl Sim {
    /// The report of the run as it stands: `idle_nodes` idle, `pending_events` left.
    pub(super) fn report(&self, idle_nodes: usize, pending_events: usize) -> Report {
        let o = self.oracle();
        let mut r = Report {
            seed: self.scenario().seed,
            nodes: self.scenario().nodes,
            messages: o.submitted(),
            delivered: o.delivered,
            duplicates: o.duplicates,
            lost: o.lost,
            lost_by_restart: o.lost_by_restart,
            acked: o.acked,
            in_doubt: o.in_doubt,
            not_delivered: o.not_delivered,
            expired_in_doubt: o.expired_in_doubt,
            violation_count: o.violation_count(),
            violations: o.violations().to_vec(),
            violation_kinds: o.violation_kinds().to_vec(),
            idle_nodes,
            pending_events,
            events: self.events(),
            virtual_time: self.now(),
            done_at: self.now().min(Duration::from_nanos(o.last_ack_at)),
            restarts: self.hosts.iter().map(|h| h.restarts).sum(),
            crashes_losing_writes: self.hosts.iter().map(|h| h.crashes_losing_writes).sum(),
            torn_tails_cut: self.hosts.iter().map(|h| h.torn_tails_cut).sum(),
            datagrams: 0,
            link_drops: 0,
            too_big: 0,
            link_dups: 0,
            retransmissions: self.node_stats().map(|s| s.retransmissions).sum(),
            spurious_retransmissions: self.node_stats().map(|s| s.spurious_retransmissions).sum(),
            bad_tags: self.node_stats().map(|s| s.rejects.bad_tag).sum(),
            stored: o.stored,
            redeliveries: o.redeliveries,
            journal_commits: 0,
            compactions: 0,
            journal_bytes_max: 0,
            crashes_mid_commit: 0,
            crashes_mid_compaction: 0,
            journal_torn_bytes: 0,
            journal_damaged: 0,
            journal_damage_injected: 0,
            journals_lost: 0,
            switched_on: 0,
            restored: 0,
            abandon_crashes: 0,
            keyed: self
                .scenario()
                .durable
                .as_ref()
                .filter(|d| d.keyed)
                .map(|_| {
                    let h = self.hosts.iter().map(|h| &h.jstats);
                    h.fold((0, 0), |(a, b), j| {
                        (a + j.keyed_resent, b + j.keyed_refused)
                    })
                }),
            keyed_given_up: self.hosts.iter().map(|h| h.jstats.keyed_given_up).sum(),
            doubt_excused: o.doubt_excused,
            restore_duplicates: o.restore_duplicates,
            restore_redeliveries: o.restore_redeliveries,
            revoked_verdicts: o.revoked_verdicts,
            repeated_verdicts: o.repeated_verdicts,
            rpc: self.scenario().rpc.as_ref().map(|_| o.rpc_counts()),
            channels: self
                .scenario()
                .channels
                .as_ref()
                .map(|_| o.channel_counts()),
            streams: self.scenario().streams.as_ref().map(|_| o.stream_counts()),
        };
        for h in &self.hosts {
            let j = &h.jstats;
            r.journal_commits += j.commits;
            r.compactions += j.compactions + h.journal.as_ref().map_or(0, |j| j.compactions());
            r.journal_bytes_max = r.journal_bytes_max.max(j.bytes_max);
            r.crashes_mid_commit += j.cut_commits;
            r.crashes_mid_compaction += j.cut_compactions;
            r.journal_torn_bytes += j.torn_bytes;
            r.journal_damaged += j.damaged;
            r.journal_damage_injected += j.damage_injected;
            r.journals_lost += j.lost;
            r.switched_on += j.switched_on;
            r.restored += j.restored;
            r.abandon_crashes += j.abandon_crashes;
        }
        for l in self.links() {
            let s = l.stats();
            r.datagrams += s.offered;
            r.link_drops += s.lost + s.burst_lost + s.periodic_lost + s.partitioned + s.queue_drops;
            r.too_big += s.too_big;
            r.link_dups += s.duplicated;
        }
        r
    }
}
