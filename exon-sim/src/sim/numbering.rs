//! A channel sender's numbering of one flow: the real `exon::ordered::Sequencer`, or a plain
//! counter when the checker's self-tests switch its rules off; made new at a run's start or,
//! for a durable flow after a restart, resumed from the position its journal mark kept.

use std::collections::BTreeMap;

use exon::ordered::position::SendPosition;
use exon::ordered::{Sequencer, Settled, Window};

use crate::channels::ChannelModel;

/// A sender's numbering of one flow: the real `Sequencer`, or, with the first-message-alone
/// rule switched off, a plain counter (bounded by the window unless that rule is off too).
pub(super) enum Numbering {
    Real(Sequencer),
    Loose {
        run: u32,
        next: u64,
        /// Unsettled numbers and their bytes (0 for a gap).
        unsettled: BTreeMap<u64, usize>,
        window: Option<u32>,
    },
}

/// The window a sender of `node` keeps to on its own (open with the window rule off).
fn own_window(m: &ChannelModel, node: usize) -> Window {
    if m.window_rule {
        m.window_of(node)
    } else {
        Window {
            messages: u32::MAX,
            bytes: usize::MAX,
        }
    }
}

impl Numbering {
    /// The numbering of node `node`'s flow of run `run`.
    pub(super) fn new(m: &ChannelModel, node: usize, run: u32) -> Numbering {
        let own = own_window(m, node);
        if !m.first_alone {
            Numbering::Loose {
                run,
                next: 0,
                unsettled: BTreeMap::new(),
                window: m.window_rule.then_some(own.messages),
            }
        } else if m.advertise && m.window_rule {
            Numbering::Real(Sequencer::new(run, own).expect_peer_window())
        } else {
            Numbering::Real(Sequencer::new(run, own))
        }
    }

    /// A durable flow of node `node` after a restart, as the endpoint resumes it
    /// (`FlowOut::with_durable`): where its mark says it stood, with `unsettled` its
    /// messages and gaps recovered without a verdict (number and bytes, 0 for a gap). The
    /// receiver's window is the one the mark kept, or (advertisements off) its own.
    pub(super) fn resume(
        m: &ChannelModel,
        node: usize,
        pos: SendPosition,
        unsettled: &[(u64, usize)],
    ) -> Numbering {
        let own = own_window(m, node);
        if !m.first_alone {
            return Numbering::Loose {
                run: pos.run,
                next: pos.next,
                unsettled: unsettled
                    .iter()
                    .copied()
                    .filter(|&(s, _)| s < pos.next)
                    .collect(),
                window: m.window_rule.then_some(own.messages),
            };
        }
        let awaits = m.advertise && m.window_rule;
        let peer = pos.peer_window.or((!awaits).then_some(own));
        let unsettled = unsettled.iter().copied();
        Numbering::Real(Sequencer::resume(pos.run, pos.next, own, peer, unsettled))
    }

    /// The flow's run.
    pub(super) fn run(&self) -> u32 {
        match self {
            Numbering::Real(s) => s.run(),
            Numbering::Loose { run, .. } => *run,
        }
    }

    /// Where the flow stands once number `seq` is given out, as a durable flow keeps it
    /// with that message (`FlowOut::position`): the receiver's window only where the
    /// sender waits for it to be advertised, and the lowest number without a verdict.
    pub(super) fn position(&self, seq: u64, m: &ChannelModel) -> SendPosition {
        let peer_window = match self {
            Numbering::Real(s) if m.advertise && m.window_rule => s.peer_window(),
            _ => None,
        };
        SendPosition {
            run: self.run(),
            next: seq + 1,
            offset: 0,
            peer_window,
            ended: false,
            base: self.lowest_unsettled().unwrap_or(seq),
        }
    }

    /// The lowest number unsettled, if any (`Sequencer::lowest_unsettled`).
    fn lowest_unsettled(&self) -> Option<u64> {
        match self {
            Numbering::Real(s) => s.lowest_unsettled(),
            Numbering::Loose { unsettled, .. } => unsettled.keys().next().copied(),
        }
    }

    /// The receiver advertised its window for run `run`.
    pub(super) fn on_peer_window(&mut self, run: u32, w: Window) {
        if let Numbering::Real(s) = self {
            if s.run() == run && s.peer_window().is_none() {
                s.on_peer_window(w);
            }
        }
    }

    pub(super) fn assign(&mut self, len: usize) -> Option<u64> {
        match self {
            Numbering::Real(s) => s.assign(len, false),
            Numbering::Loose {
                next,
                unsettled,
                window,
                ..
            } => {
                if window.is_some_and(|w| unsettled.len() >= w as usize) {
                    return None;
                }
                let seq = *next;
                *next += 1;
                unsettled.insert(seq, len);
                Some(seq)
            }
        }
    }

    pub(super) fn unassign(&mut self, seq: u64) {
        match self {
            Numbering::Real(s) => s.unassign(seq),
            Numbering::Loose {
                next, unsettled, ..
            } => {
                if seq + 1 == *next && unsettled.remove(&seq).is_some() {
                    *next = seq;
                }
            }
        }
    }

    pub(super) fn on_verdict(&mut self, seq: u64, delivered: bool) -> Settled {
        match self {
            Numbering::Real(s) => s.on_verdict(seq, delivered),
            Numbering::Loose { unsettled, .. } => {
                if !unsettled.contains_key(&seq) {
                    Settled::Unknown
                } else if delivered {
                    unsettled.remove(&seq);
                    Settled::Done
                } else {
                    Settled::SendGap
                }
            }
        }
    }

    pub(super) fn on_gap(&mut self, seq: u64) {
        match self {
            Numbering::Real(s) => s.on_gap(seq),
            Numbering::Loose { unsettled, .. } => {
                unsettled.remove(&seq);
            }
        }
    }
}
