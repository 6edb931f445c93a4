//! Channels whose runs stall at their receiver, as the endpoint handles them
//! (`ChannelModel::stall_query_after`, the endpoint's `FlowConfig::stall_query_after`): a
//! receiver whose channel held messages ahead of a number that did not come over a whole
//! interval asks the sender whether the run lives (`Envelope::query`, one question at a time
//! per channel); the sender answers that it is over (`Envelope::over`) only if it never had
//! the run (it restarted without a journal); the receiver then hands what it held of the
//! run over out of order (`Kind::Unordered`, which the oracle checks) and forgets it.

use exon::envelope::{Envelope, Flow, Place};
use exon::ordered::Reorder;
use exon::proto::DeliveryId;

use super::ids::node_id;
use super::queue::{nanos, What};
use super::Sim;
use crate::oracle::FlowKey;

impl Sim {
    /// Node `i`'s channel `key` (sender, number) holds messages ahead of their turn: looked
    /// at from now on, every interval while some channel holds.
    pub(super) fn chan_holding(&mut self, i: usize, key: (usize, u16)) {
        let Some(every) = self.sc.channels.as_ref().and_then(|m| m.stall_query_after) else {
            return;
        };
        self.hosts[i].chans.standing.entry(key).or_insert(None);
        self.schedule_look(i, every);
    }

    /// Node `i` looks at its holding channels `every` from now, unless a look is scheduled.
    fn schedule_look(&mut self, i: usize, every: std::time::Duration) {
        let h = &mut self.hosts[i];
        if h.chans.look_scheduled {
            return;
        }
        h.chans.look_scheduled = true;
        let look = What::ChanLook {
            node: i as u32,
            boot: h.restarts,
        };
        self.queue.push(self.now + nanos(every), look);
    }

    /// Node `i` looks at its channels holding messages: the senders of those that stood
    /// still since the last look (and have no question outstanding) are asked about their
    /// runs.
    pub(super) fn chan_look(&mut self, i: usize, boot: u32) {
        let Some(every) = self.sc.channels.as_ref().and_then(|m| m.stall_query_after) else {
            return;
        };
        let h = &mut self.hosts[i];
        if h.restarts != boot || h.node.is_none() {
            return; // crashed since: its channel state is gone
        }
        h.chans.look_scheduled = false;
        let mut ask = Vec::new();
        let recv = &h.chans.recv;
        let asking = &h.chans.asking;
        h.chans.standing.retain(|key, last| {
            let Some(now_at) = recv
                .get(key)
                .filter(|r| r.held() > 0)
                .and_then(|r| Some((r.run()?, r.next())))
            else {
                return false;
            };
            if *last == Some(now_at) && !asking.contains(key) {
                ask.push((*key, now_at));
            }
            *last = Some(now_at);
            true
        });
        for ((from, ch), (run, seq)) in ask {
            let place = Place {
                flow: Flow::Channel(ch),
                run,
                seq,
            };
            if let Some(id) = self.chan_note(i, from, Envelope::query(place)) {
                let h = &mut self.hosts[i];
                h.chans.asking.insert((from, ch));
                h.chans.query_ids.insert(id, (from, ch));
                // Given up at the next look, as the endpoint's: a sender that cannot be
                // reached (gone, or its records full) has one question at a time.
                let give_up = What::GiveUp {
                    node: i as u32,
                    to: from as u32,
                    id,
                    boot: h.restarts,
                    seq: u64::MAX,
                };
                self.queue.push(self.now + nanos(every), give_up);
            }
        }
        if !self.hosts[i].chans.standing.is_empty() {
            self.schedule_look(i, every);
        }
    }

    /// Node `i`, the sender of channel `place.flow` to `from`, is asked about run
    /// `place.run` (delivery `id`, taken): it answers that the run is over if it never had
    /// it (not its flow's run, nor its boot's).
    pub(super) fn chan_query(&mut self, i: usize, from: usize, place: Place, id: DeliveryId) {
        self.chan_take_note(i, id);
        let Flow::Channel(ch) = place.flow else {
            return;
        };
        let c = &self.hosts[i].chans;
        let had = match c.send.get(&(from, ch)) {
            Some(num) => num.run() == place.run,
            None => c.run == place.run,
        };
        if !had {
            self.chan_note(i, from, Envelope::over(place));
        }
    }

    /// Node `i`, the receiver of channel `place.flow` from `from`, hears that run
    /// `place.run` is over (delivery `id`, taken): what it holds of the run is handed over
    /// out of order, and the run forgotten.
    pub(super) fn chan_over(&mut self, i: usize, from: usize, place: Place, id: DeliveryId) {
        self.chan_take_note(i, id);
        let Flow::Channel(ch) = place.flow else {
            return;
        };
        let Some(r) = self.hosts[i].chans.recv.get_mut(&(from, ch)) else {
            return;
        };
        if r.run() != Some(place.run) {
            return;
        }
        let mut out = Vec::new();
        r.drain(&mut out);
        *r = Reorder::new();
        self.hosts[i].chans.standing.remove(&(from, ch));
        let flow = FlowKey {
            from: from as u32,
            to: i as u32,
            run: place.run,
            channel: ch,
        };
        // Every step of a drain is stale: messages out of the order, gaps dropped.
        self.chan_release_stale(i, flow, out);
    }

    /// Node `i` sends `to` a note of its channel application (a question or an answer about
    /// a run): its id, whose verdict matters to nobody.
    fn chan_note(&mut self, i: usize, to: usize, payload: exon::proto::Payload) -> Option<u64> {
        let now = self.instant();
        let h = &mut self.hosts[i];
        let node = h.node.as_mut()?;
        let id = node.send_reported(now, node_id(to), payload).ok()?;
        h.chans.adverts.insert(id.0);
        h.chan_own.insert(id.0);
        self.last_activity = self.last_activity.max(self.now);
        Some(id.0)
    }

    /// Node `i`'s application takes a note delivered to it.
    fn chan_take_note(&mut self, i: usize, id: DeliveryId) {
        let now = self.instant();
        if let Some(node) = self.hosts[i].node.as_mut() {
            node.handle_taken(now, id);
        }
    }
}
