//! The simulated network: datagrams put on the links, and the faults of the scenario
//! applied to links and hosts (partitions, holds, MTU drops, restarts).

use bytes::Bytes;
use exon::proto::Frame;
use rand::Rng;

use super::adversary::CAPTURE_WINDOW;
use super::queue::{nanos, What};
use super::Sim;
use crate::faults::FaultKind;
use crate::link::{Decision, LinkState};

impl Sim {
    /// Puts a datagram on the link `from -> to`.
    pub(super) fn route(&mut self, from: usize, to: usize, data: Bytes) {
        if self.sc.adversary.is_some() {
            // The on-path attacker keeps a bounded window of what it saw.
            if self.captured.len() >= CAPTURE_WINDOW {
                let k = self.rng.gen_range(0..self.captured.len());
                self.captured.swap_remove(k);
            }
            self.captured.push((to, data.clone()));
            self.observe(to, &data);
        }
        let l = from * self.hosts.len() + to;
        let now = self.instant();
        let decision = if self.sc.link.shared_queue {
            self.links[l].on_datagram_shared(now, data.len(), &mut self.bottlenecks[to])
        } else {
            self.links[l].on_datagram(now, data.len())
        };
        if self.sc.trace {
            self.trace(from, to, &decision, &data);
        }
        match decision {
            Decision::Drop(_) => {}
            Decision::Hold => self.held[l].push(data),
            Decision::Deliver { at, copy } => {
                if let Some(c) = copy {
                    let t = nanos(c - self.base);
                    self.queue.push(
                        t,
                        What::Datagram {
                            to: to as u32,
                            data: data.clone(),
                        },
                    );
                }
                let t = nanos(at - self.base);
                self.queue.push(
                    t,
                    What::Datagram {
                        to: to as u32,
                        data,
                    },
                );
            }
        }
    }

    /// `--trace`: one line per datagram on stderr (a TOKEN's or FRAG's payload left out).
    fn trace(&self, from: usize, to: usize, decision: &Decision, data: &Bytes) {
        let fate = match decision {
            Decision::Drop(_) => "DROP",
            Decision::Hold => "HOLD",
            Decision::Deliver { copy: Some(_), .. } => "ok+dup",
            Decision::Deliver { .. } => "ok",
        };
        let frames = match exon::proto::Packet::decode(data) {
            Ok(p) => p
                .frames
                .iter()
                .map(|f| match f {
                    Frame::Token { s, r, payload, .. } => {
                        format!("Token {{ s: {s}, r: {r}, len: {} }}", payload.len())
                    }
                    Frame::Frag {
                        s,
                        r,
                        total,
                        offset,
                        data,
                        ..
                    } => format!(
                        "Frag {{ s: {s}, r: {r}, total: {total}, {offset}+{} }}",
                        data.len()
                    ),
                    other => format!("{other:?}"),
                })
                .collect::<Vec<_>>()
                .join(" | "),
            Err(e) => format!("undecodable: {e}"),
        };
        let t = self.now as f64 / 1e9;
        eprintln!("{t:.6} {from}->{to} {fate} {frames}");
    }

    /// Applies fault `k` of the scenario.
    pub(super) fn fault(&mut self, k: usize) {
        let n = self.hosts.len();
        match self.sc.faults[k].kind {
            FaultKind::Partition { a, b, one_way } => {
                self.links[a * n + b].set_state(LinkState::Down);
                if !one_way {
                    self.links[b * n + a].set_state(LinkState::Down);
                }
            }
            FaultKind::Hold { a, b } => {
                self.links[a * n + b].set_state(LinkState::Held);
                self.links[b * n + a].set_state(LinkState::Held);
            }
            FaultKind::Heal { a, b, one_way } => {
                self.heal_link(a * n + b);
                if !one_way {
                    self.heal_link(b * n + a);
                }
            }
            FaultKind::Mtu { a, b, mtu } => {
                for l in [a * n + b, b * n + a] {
                    let mut c = self.links[l].config().clone();
                    c.mtu = mtu;
                    self.links[l].set_config(c);
                }
            }
            FaultKind::Restart {
                node,
                down,
                keep_clock,
            } => self.crash_host(node, down, keep_clock),
        }
    }

    /// Brings link `l` up, and puts back on it what it held.
    pub(super) fn heal_link(&mut self, l: usize) {
        self.links[l].set_state(LinkState::Up);
        let n = self.hosts.len();
        for data in std::mem::take(&mut self.held[l]) {
            self.route(l / n, l % n, data);
        }
    }
}
