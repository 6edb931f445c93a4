//! Assembling datagrams: `poll_transmit` packs everything owed to one peer (verdicts, SLOTS,
//! waivers, REQSLOTS, TOKENs) into one datagram, serving peers round-robin.

use std::time::Instant;

use super::crypto::TAG_LEN;
use super::frame::{
    frame_type, put_path, put_reqslots, put_slots, put_token, put_verdict, reqslots_len, slots_len,
    token_len, Header, FLAG_ACK_NOW,
};
use super::timer::Side;
use super::{Event, Node, NodeId, Transmit};

impl Node {
    /// Output: an event for the application, if any.
    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Output: appends the next datagram to `buf` and says where it goes, or returns `None`
    /// when nothing is waiting. Each call serves the next peer in round-robin order, packing
    /// every frame owed to it (ACKs, SLOTS, REQSLOTS, TOKENs) up to `max_datagram_size`.
    ///
    /// A sealed node seals each datagram before returning it; it sends nothing until its
    /// clock is stored far enough to take a nonce epoch from it.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut Vec<u8>) -> Option<Transmit> {
        self.outbox.release_due(now);
        loop {
            if !self.take_epoch_if_needed() {
                return None;
            }
            let peer = self.outbox.ready.pop_front()?;
            let mut out = self.outbox.peers.remove(&peer).unwrap_or_default();
            out.ready = false;
            let start = buf.len();
            let mut header = Header::new(self.id, peer);
            let mut limit = start + self.cfg.max_datagram_size;
            if let Some(sealer) = &mut self.sealer {
                header.seal = sealer.next_seal_header();
                limit -= TAG_LEN;
            }
            header.encode(buf);
            let header_end = buf.len();
            let room = |buf: &Vec<u8>| limit - buf.len();

            for (slot, ty) in [
                (&mut out.response, frame_type::RESPONSE),
                (&mut out.challenge, frame_type::CHALLENGE),
            ] {
                if let Some(token) = *slot {
                    put_path(buf, ty, token);
                    *slot = None;
                    if ty == frame_type::CHALLENGE {
                        self.stats.frames_out.challenge += 1;
                    } else {
                        self.stats.frames_out.response += 1;
                    }
                }
            }

            for (v, r, set) in &mut out.acks {
                while !set.is_empty() {
                    let k = put_verdict(buf, *v, *r, set.ranges(), room(buf));
                    if k == 0 {
                        break;
                    }
                    set.pop_front_ranges(k);
                    self.stats.frames_out.count_verdict(*v);
                }
            }
            out.acks.retain(|(_, _, set)| !set.is_empty());
            if out.acks.is_empty() {
                out.ack_at = None;
            }
            if let Some((s, r, n)) = out.grant {
                if slots_len(s, r, n) <= room(buf) {
                    put_slots(buf, s, r, n);
                    self.stats.frames_out.slots += 1;
                    out.grant = None;
                }
            }
            if let Some((s, r)) = out.probe {
                if slots_len(s, r, 0) <= room(buf) {
                    put_slots(buf, s, r, 0);
                    self.stats.frames_out.slots += 1;
                    out.probe = None;
                }
            }
            if let Some(s) = out.waive {
                if reqslots_len(s, 0, s) <= room(buf) {
                    put_reqslots(buf, s, 0, s);
                    self.stats.frames_out.reqslots += 1;
                    out.waive = None;
                }
            }
            let tokens_before = self.stats.frames_out.token;
            let sender_left = self.write_sender_frames(now, peer, buf, limit);
            if !sender_left && self.stats.frames_out.token > tokens_before {
                // The last datagram of this burst: ask for the ACK without delay.
                buf[start + 3] |= FLAG_ACK_NOW;
            }
            if !out.is_empty() || sender_left {
                out.ready = true;
                self.outbox.peers.insert(peer, out);
                self.outbox.ready.push_back(peer);
            }
            if buf.len() == header_end {
                buf.truncate(start);
                if sender_left {
                    // Cannot happen (a token always fits in an empty datagram); never spin.
                    debug_assert!(false, "nothing fit in an empty datagram");
                    self.outbox.peers.remove(&peer);
                    self.outbox.ready.retain(|p| *p != peer);
                }
                continue;
            }
            if let (Some(sealer), Some(sh)) = (&mut self.sealer, header.seal) {
                let (senders, receivers) = (&self.senders, &self.receivers);
                let pinned = |p: NodeId| senders.contains_key(&p) || receivers.contains_key(&p);
                if !sealer.seal(peer, sh.seq, buf, start, header_end, pinned) {
                    // No key for this peer (removed from the keyring): what was in the
                    // datagram is repaired like a loss, and counted.
                    buf.truncate(start);
                    self.stats.unsealable += 1;
                    continue;
                }
            }
            let size = buf.len() - start;
            self.stats.datagrams_out += 1;
            self.stats.bytes_out += size as u64;
            return Some(Transmit {
                destination: peer,
                size,
            });
        }
    }

    /// A sealed node with no nonce epoch left takes the next clock value as its epoch.
    /// Returns false when that value is not yet covered by the stored clock.
    fn take_epoch_if_needed(&mut self) -> bool {
        if !self.sealer.as_ref().is_some_and(|s| s.needs_epoch()) {
            return true;
        }
        if !self.reserve_clock(self.ck + 1) {
            return false;
        }
        let epoch = self.ck;
        self.ck += 1;
        if let Some(s) = &mut self.sealer {
            s.start_epoch(epoch);
        }
        true
    }

    /// Writes the S record's REQSLOTS and TOKENs for `peer`. Returns whether more remain.
    fn write_sender_frames(
        &mut self,
        now: Instant,
        peer: NodeId,
        buf: &mut Vec<u8>,
        limit: usize,
    ) -> bool {
        let cfg = &self.cfg;
        let Some(rec) = self.senders.get_mut(&peer) else {
            return false;
        };
        if rec.req_due {
            let (s, n, l) = (rec.sck, rec.req_n.unwrap_or(0), rec.frontier());
            if reqslots_len(s, n, l) <= limit - buf.len() {
                put_reqslots(buf, s, n, l);
                self.stats.frames_out.reqslots += 1;
                rec.req_due = false;
                rec.req_sent_at = Some(now);
                rec.frontier_override = None;
            }
        }
        let keep_own = self.rules.token_keeps_incarnation;
        let mut wrote = false;
        while let Some(&s) = rec.to_send.front() {
            let Some(tok) = rec.tokens.get_mut(s) else {
                rec.to_send.pop_front();
                continue;
            };
            let r = tok.incarnation(rec.rck, keep_own);
            if token_len(s, r, tok.payload.len()) > limit - buf.len() {
                break;
            }
            put_token(buf, s, r, &tok.payload);
            if tok.sends > 0 {
                self.stats.retransmissions += 1;
            }
            tok.sends = tok.sends.saturating_add(1);
            tok.sent_at = Some(now);
            tok.queued = false;
            rec.to_send.pop_front();
            self.stats.frames_out.token += 1;
            wrote = true;
        }
        if wrote {
            let expiry = now + rec.rto(cfg);
            rec.rto_at = Some(rec.rto_at.map_or(expiry, |t| t.min(expiry)));
        }
        let left = rec.req_due || !rec.to_send.is_empty();
        let want = rec.deadline(cfg);
        self.timers.arm(&mut rec.armed, want, Side::Sender, peer);
        left
    }
}
