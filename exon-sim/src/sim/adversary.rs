//! The simulated attackers: an on-path adversary that replays, alters and forges
//! datagrams (aimed at what it saw in plaintext), and a hostile flood of made-up sources.

use bytes::Bytes;
use exon::proto::{Frame, NodeId};
use rand::rngs::SmallRng;
use rand::Rng;

use super::host::Host;
use super::ids::node_id;
use super::queue::{nanos, What};
use super::Sim;
use crate::scenario::Attack;

/// Observations the adversary keeps (the latest).
const SEEN_WINDOW: usize = 256;

/// Keeps the latest `SEEN_WINDOW` observations.
fn remember<T: PartialEq>(v: &mut Vec<T>, x: T) {
    if v.contains(&x) {
        return;
    }
    if v.len() >= SEEN_WINDOW {
        v.remove(0);
    }
    v.push(x);
}

/// Datagrams the adversary keeps for replay.
pub(super) const CAPTURE_WINDOW: usize = 4096;

impl Sim {
    /// One action of the on-path adversary: a replay, a bit-flipped copy, or a forgery.
    pub(super) fn adversary(&mut self, left: u32) {
        let Some(a) = self.sc.adversary else { return };
        let lat = nanos(self.sc.link.latency);
        let attack = a.attacks[self.rng.gen_range(0..a.attacks.len())];
        match attack {
            Attack::Replay | Attack::BitFlip if !self.captured.is_empty() => {
                let k = self.rng.gen_range(0..self.captured.len());
                let (to, data) = self.captured[k].clone();
                if attack == Attack::Replay {
                    let at = self.now + self.rng.gen_range(0..=nanos(a.max_replay_delay));
                    self.queue.push(
                        at,
                        What::Datagram {
                            to: to as u32,
                            data,
                        },
                    );
                } else {
                    let mut v = data.to_vec();
                    let bit = self.rng.gen_range(0..v.len() * 8);
                    v[bit / 8] ^= 1 << (bit % 8);
                    let data = Bytes::from(v);
                    self.queue.push(
                        self.now + lat,
                        What::Datagram {
                            to: to as u32,
                            data,
                        },
                    );
                }
            }
            Attack::Replay | Attack::BitFlip => {}
            _ => {
                if let Some((to, data)) = self.forge(attack) {
                    // Later than the honest datagram it answers would arrive.
                    let at = self.now + 2 * lat;
                    self.queue.push(
                        at,
                        What::Datagram {
                            to: to as u32,
                            data,
                        },
                    );
                }
            }
        }
        if left > 1 {
            self.last_activity = self.last_activity.max(self.now);
            self.queue
                .push(self.now + nanos(a.interval), What::Adversary(left - 1));
        }
    }

    /// What the adversary learned from one datagram on the wire (plaintext only): TOKENs
    /// in flight as (sender, receiver, slot, incarnation), and incarnations acknowledged.
    pub(super) fn observe(&mut self, to: usize, data: &Bytes) {
        let Ok(p) = exon::proto::Packet::decode(data) else {
            return; // sealed: nothing to read
        };
        let from = (p.header.src.get() as usize).wrapping_sub(1);
        for f in &p.frames {
            match f {
                Frame::Token { s, r, .. } | Frame::EarlyToken { s, r, .. } => {
                    remember(&mut self.seen_tokens, (from, to, *s, *r));
                }
                Frame::Ack { r, .. } => {
                    // `from` is the receiver that acknowledged, `to` the sender.
                    remember(&mut self.seen_acked, (to, from, *r));
                }
                _ => {}
            }
        }
    }

    /// A datagram for `attack` and its destination, aimed at what was seen in plaintext,
    /// or guessed; sealed nodes get it sealed under a key the attacker made itself.
    pub(super) fn forge(&mut self, attack: Attack) -> Option<(usize, Bytes)> {
        use exon::proto::frame::{put_reqslots, put_token_last, put_verdict, Verdict};
        let n = self.hosts.len();
        let pick = |rng: &mut SmallRng, v: &[(usize, usize, u64, u64)]| {
            (!v.is_empty()).then(|| v[rng.gen_range(0..v.len())])
        };
        let guess = |rng: &mut SmallRng, hosts: &[Host]| {
            let from = rng.gen_range(0..n);
            let to = (from + rng.gen_range(1..n.max(2))) % n;
            let ck = |i: usize| hosts[i].node.as_ref().map_or(0, |x| x.clock());
            let r = ck(to).saturating_sub(rng.gen_range(1..4));
            let s = ck(from).saturating_sub(rng.gen_range(0..2048));
            (from, to, s, r)
        };
        let verdict = matches!(attack, Attack::Ack | Attack::Retry | Attack::Doubt);
        let seen = if verdict {
            // Verdicts aim at the newest tokens: likely still in flight.
            self.seen_tokens.last().copied()
        } else {
            pick(&mut self.rng, &self.seen_tokens)
        };
        let (snd, rcv, s, r) = match seen {
            Some(t) => t,
            None => guess(&mut self.rng, &self.hosts),
        };
        let mut frames = Vec::new();
        // Values within the clock's range: a node's clock may stand near its end.
        let top = exon::proto::codec::VARINT_MAX;
        let one = std::slice::from_ref(&(s.saturating_sub(32)..(s + 32).min(top))).to_vec();
        // (claimed source, destination)
        let (src, dst) = match attack {
            Attack::Frontier => {
                let far = (s + (1 << 40)).min(top);
                put_reqslots(&mut frames, far, 0, far);
                (snd, rcv)
            }
            Attack::Token => {
                put_token_last(&mut frames, s, r, b"forged");
                (snd, rcv)
            }
            Attack::Stored => {
                let wide = s.saturating_sub(1 << 20)..s.saturating_add(1 << 20).min(top);
                let (from, below) = if self.rng.gen() {
                    (wide.start, wide.end)
                } else {
                    (wide.end, wide.start)
                };
                exon::proto::frame::put_stored(&mut frames, from, below);
                (snd, rcv)
            }
            Attack::Ack => {
                put_verdict(&mut frames, Verdict::Ack, r, &one, 64);
                (rcv, snd)
            }
            Attack::Doubt => {
                put_verdict(&mut frames, Verdict::Doubt, r, &one, 64);
                (rcv, snd)
            }
            Attack::Retry => {
                // Only where the incarnation was seen acknowledged (a RETRY that could be
                // true, for an incarnation never acknowledged, is the protocol's own).
                let acked = self
                    .seen_acked
                    .iter()
                    .any(|&(a, b, x)| (a, b, x) == (snd, rcv, r));
                if !acked && self.sc.plaintext {
                    return None;
                }
                put_verdict(&mut frames, Verdict::Retry, r, &one, 64);
                (rcv, snd)
            }
            Attack::Replay | Attack::BitFlip => return None,
        };
        let mut header = exon::proto::Header::new(node_id(src), node_id(dst));
        let mut buf = Vec::new();
        if self.sc.plaintext {
            header.encode(&mut buf);
            buf.extend_from_slice(&frames);
            return Some((dst, Bytes::from(buf)));
        }
        header.seal = Some(exon::proto::frame::SealHeader {
            seq: exon::proto::crypto::Seq {
                epoch: u64::from(self.rng.gen::<u32>()),
                counter: self.rng.gen(),
            },
            key: None,
            cookie: None,
        });
        header.encode(&mut buf);
        buf.extend_from_slice(&frames);
        // Without the secret key, the best it can do is a tag of its choosing.
        let tag: [u8; 16] = self.rng.gen();
        buf.extend_from_slice(&tag);
        Some((dst, Bytes::from(buf)))
    }

    /// One volley of forged REQSLOTS, one per made-up source id.
    pub(super) fn hostile(&mut self, left: u32) {
        let Some(h) = self.sc.hostile else { return };
        let n = self.hosts.len() as u64;
        let victim = node_id(h.victim);
        for k in 0..h.ids {
            let src = NodeId::from_const(n + 1 + k);
            let mut buf = Vec::new();
            exon::proto::Header::new(src, victim).encode(&mut buf);
            exon::proto::frame::put_reqslots(&mut buf, 1 + k * 7, h.n, 0);
            let t = self.now + nanos(self.sc.link.latency);
            self.queue.push(
                t,
                What::Datagram {
                    to: h.victim as u32,
                    data: Bytes::from(buf),
                },
            );
        }
        if left > 1 {
            self.last_activity = self.last_activity.max(self.now);
            self.queue
                .push(self.now + nanos(h.interval), What::Hostile(left - 1));
        }
    }
}
