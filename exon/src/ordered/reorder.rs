//! The receiver's side of one ordered flow: holds messages that arrived ahead of their turn
//! and releases them in their sender's order, skipping the numbers given up (gaps).

use std::collections::BTreeMap;

/// What arrived for a number of the flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Arrival<T> {
    /// The message itself; `last` ends the flow.
    Message {
        /// The receiver's handle on it (to hand over, then take).
        item: T,
        /// Whether it is the flow's last.
        last: bool,
    },
    /// Its sender gave it up: a gap, to be taken in its turn.
    Gap(T),
}

/// What to do with an arrival, or with messages it released, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step<T> {
    /// Hand message `seq` to the application (in this order).
    Deliver {
        /// Its number.
        seq: u64,
        /// The receiver's handle on it.
        item: T,
        /// Whether it ends the flow.
        last: bool,
    },
    /// Tell the application that message `seq` was given up by its sender (its gap, `item`,
    /// is taken once the application has learned it).
    Gap {
        /// The number skipped.
        seq: u64,
        /// The gap message.
        item: T,
    },
    /// Not for the application: a late copy of a number already passed (its gap came
    /// first, or the other way round: its sender gave it up, so it was in doubt), or one
    /// after the flow's end. Take it and drop it.
    Discard(T),
    /// A message outside the current run's order: of a run this receiver does not know (it
    /// restarted since the run began, or the run is old), or held from a run a new one
    /// replaced. It is a real message its sender may hear as delivered: hand it to the
    /// application, marked as out of order (a gap of such a run is discarded).
    Stale {
        /// Its number in its own run.
        seq: u64,
        /// The receiver's handle on it.
        item: T,
        /// Whether it is a gap rather than a message.
        gap: bool,
    },
}

/// How many old runs a flow remembers, so that their late messages are not taken for a new
/// run's start.
const RETIRED: usize = 4;

/// One flow's receiver state: its run, the next number due, and the messages held.
///
/// Rules: numbers are released in order, each once; a number whose message and gap both
/// arrive is released once, as whichever came first, and the other is discarded (when the
/// number is released, not before: see [`on_arrival`](Self::on_arrival)); a run's
/// first number is 0 (its sender sends it alone), so a message of an unknown run numbered
/// above 0 is not of the current run (this receiver restarted, or the run is old) and is
/// released as stale, while number 0 of a new run releases what is held of the old one as
/// stale and starts over. No message is dropped unless its sender gave it up.
#[derive(Debug, Clone)]
pub struct Reorder<T> {
    run: Option<u32>,
    next: u64,
    held: BTreeMap<u64, Arrival<T>>,
    /// The second arrival for a number held (its gap, or its message): discarded when the
    /// number is released. At most one per number held.
    shadows: BTreeMap<u64, T>,
    retired: [Option<u32>; RETIRED],
    ended: bool,
    restarts: u64,
}

impl<T> Default for Reorder<T> {
    fn default() -> Self {
        Reorder {
            run: None,
            next: 0,
            held: BTreeMap::new(),
            shadows: BTreeMap::new(),
            retired: [None; RETIRED],
            ended: false,
            restarts: 0,
        }
    }
}

impl<T> Reorder<T> {
    /// A flow nothing has arrived on.
    pub fn new() -> Reorder<T> {
        Reorder::default()
    }

    /// A flow of run `run` whose numbers below `next` were released already.
    pub fn started(run: u32, next: u64) -> Reorder<T> {
        Reorder {
            run: Some(run),
            next,
            ..Reorder::default()
        }
    }

    /// The current run, once a message of one was released.
    pub fn run(&self) -> Option<u32> {
        self.run
    }

    /// The next number due.
    pub fn next(&self) -> u64 {
        self.next
    }

    /// Messages and gaps held ahead of their turn.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Whether the flow's last message was released.
    pub fn is_ended(&self) -> bool {
        self.ended
    }

    /// How many times a new run replaced the current one.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// Drains every held message (its run is over): each comes out [`Step::Stale`].
    pub fn drain(&mut self, out: &mut Vec<Step<T>>) {
        for (seq, a) in std::mem::take(&mut self.held) {
            out.push(stale(seq, a));
        }
        for (_, item) in std::mem::take(&mut self.shadows) {
            out.push(Step::Discard(item));
        }
    }

    /// Message or gap number `seq` of run `run` arrived: pushes onto `out` what to do with
    /// it and with the held messages it releases, in order.
    ///
    /// A second arrival for a number held (the gap of a message held, or the message of a
    /// gap held) is kept until the number is released, then discarded: taking it at once
    /// would acknowledge the gap, settling the number at its sender while its message is
    /// still held here, and the sender's window would no longer bound what is held (it
    /// would send more, to be held too). One such arrival is kept per number; an earlier
    /// one is discarded when another comes.
    pub fn on_arrival(&mut self, run: u32, seq: u64, arrival: Arrival<T>, out: &mut Vec<Step<T>>) {
        if self.run != Some(run) {
            if seq != 0 || self.retired.contains(&Some(run)) {
                out.push(stale(seq, arrival));
                return;
            }
            // A new run starts: what is held of the old one will never be released.
            if let Some(old) = self.run {
                self.retired.rotate_right(1);
                self.retired[0] = Some(old);
                self.restarts += 1;
            }
            self.drain(out);
            self.run = Some(run);
            self.next = 0;
            self.ended = false;
        }
        if self.ended || seq < self.next {
            out.push(Step::Discard(item_of(arrival)));
            return;
        }
        if self.held.contains_key(&seq) {
            if let Some(old) = self.shadows.insert(seq, item_of(arrival)) {
                out.push(Step::Discard(old));
            }
            return;
        }
        if seq > self.next {
            self.held.insert(seq, arrival);
            return;
        }
        self.release(seq, arrival, out);
        while !self.ended {
            let Some(a) = self.held.remove(&self.next) else {
                break;
            };
            self.release(self.next, a, out);
        }
        if self.ended {
            for (_, a) in std::mem::take(&mut self.held) {
                out.push(Step::Discard(item_of(a)));
            }
        }
    }

    fn release(&mut self, seq: u64, arrival: Arrival<T>, out: &mut Vec<Step<T>>) {
        self.next = seq + 1;
        out.push(match arrival {
            Arrival::Message { item, last } => {
                self.ended = last;
                Step::Deliver { seq, item, last }
            }
            Arrival::Gap(item) => Step::Gap { seq, item },
        });
        if let Some(item) = self.shadows.remove(&seq) {
            out.push(Step::Discard(item));
        }
    }
}

fn stale<T>(seq: u64, a: Arrival<T>) -> Step<T> {
    let gap = matches!(a, Arrival::Gap(_));
    Step::Stale {
        seq,
        item: item_of(a),
        gap,
    }
}

fn item_of<T>(a: Arrival<T>) -> T {
    match a {
        Arrival::Message { item, .. } | Arrival::Gap(item) => item,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn msg(i: u32) -> Arrival<u32> {
        Arrival::Message {
            item: i,
            last: false,
        }
    }

    #[test]
    fn releases_in_order_and_skips_gaps_once() {
        let mut r = Reorder::new();
        let mut out = Vec::new();
        r.on_arrival(5, 0, msg(0), &mut out);
        assert_eq!(
            out,
            vec![Step::Deliver {
                seq: 0,
                item: 0,
                last: false
            }]
        );
        out.clear();
        r.on_arrival(5, 3, msg(3), &mut out);
        r.on_arrival(5, 2, Arrival::Gap(102), &mut out);
        assert!(out.is_empty(), "held until number 1: {out:?}");
        assert_eq!(r.held(), 2);
        r.on_arrival(5, 1, msg(1), &mut out);
        assert_eq!(
            out,
            vec![
                Step::Deliver {
                    seq: 1,
                    item: 1,
                    last: false
                },
                Step::Gap { seq: 2, item: 102 },
                Step::Deliver {
                    seq: 3,
                    item: 3,
                    last: false
                },
            ]
        );
        out.clear();
        // The message given up arrives after its gap: discarded.
        r.on_arrival(5, 2, msg(2), &mut out);
        assert_eq!(out, vec![Step::Discard(2)]);
        out.clear();
        // Held first, then its gap: the gap is discarded once 5 is released.
        r.on_arrival(5, 5, msg(5), &mut out);
        r.on_arrival(5, 5, Arrival::Gap(105), &mut out);
        assert!(out.is_empty(), "{out:?}");
        assert_eq!(r.held(), 1);
        r.on_arrival(5, 4, msg(4), &mut out);
        assert_eq!(
            out,
            vec![
                Step::Deliver {
                    seq: 4,
                    item: 4,
                    last: false
                },
                Step::Deliver {
                    seq: 5,
                    item: 5,
                    last: false
                },
                Step::Discard(105),
            ]
        );
    }

    /// The gap of a message held is not taken (so not acknowledged) before the message is
    /// released: taken at once, it would settle the number at the sender, whose window
    /// would then let more messages out while this one is still held, and the receiver
    /// would hold a window's worth or more (found by the simulator's channel checks:
    /// deadlines in a partition, reordering).
    #[test]
    fn the_gap_of_a_held_message_waits_for_its_release() {
        let mut r = Reorder::new();
        let mut out = Vec::new();
        r.on_arrival(1, 0, msg(0), &mut out);
        out.clear();
        // Window 3: numbers 1, 2, 3 unsettled; 2 and 3 arrive, 1 is lost; the sender
        // gives up all three and sends their gaps; gap 2 arrives first.
        r.on_arrival(1, 2, msg(2), &mut out);
        r.on_arrival(1, 3, msg(3), &mut out);
        r.on_arrival(1, 2, Arrival::Gap(102), &mut out);
        assert!(
            out.is_empty(),
            "gap 2 must stay untaken while 2 is held: {out:?}"
        );
        r.on_arrival(1, 1, Arrival::Gap(101), &mut out);
        assert_eq!(
            out,
            vec![
                Step::Gap { seq: 1, item: 101 },
                Step::Deliver {
                    seq: 2,
                    item: 2,
                    last: false
                },
                Step::Discard(102),
                Step::Deliver {
                    seq: 3,
                    item: 3,
                    last: false
                },
            ]
        );
        // A later arrival for a held number replaces the one kept (discarded at once),
        // and a new run discards what is kept with what is held.
        out.clear();
        r.on_arrival(1, 5, msg(5), &mut out);
        r.on_arrival(1, 5, Arrival::Gap(105), &mut out);
        r.on_arrival(1, 5, Arrival::Gap(205), &mut out);
        assert_eq!(out, vec![Step::Discard(105)]);
        out.clear();
        r.on_arrival(2, 0, msg(20), &mut out);
        assert_eq!(
            out,
            vec![
                Step::Stale {
                    seq: 5,
                    item: 5,
                    gap: false
                },
                Step::Discard(205),
                Step::Deliver {
                    seq: 0,
                    item: 20,
                    last: false
                }
            ]
        );
    }

    #[test]
    fn old_runs_are_stale_and_a_new_run_starts_over() {
        let mut r = Reorder::new();
        let mut out = Vec::new();
        r.on_arrival(1, 3, msg(3), &mut out);
        assert_eq!(
            out,
            vec![Step::Stale {
                seq: 3,
                item: 3,
                gap: false
            }],
            "an unknown run's message above 0"
        );
        out.clear();
        r.on_arrival(1, 0, msg(0), &mut out);
        r.on_arrival(1, 2, msg(2), &mut out);
        out.clear();
        r.on_arrival(2, 0, msg(20), &mut out);
        assert_eq!(
            out,
            vec![
                Step::Stale {
                    seq: 2,
                    item: 2,
                    gap: false
                },
                Step::Deliver {
                    seq: 0,
                    item: 20,
                    last: false
                }
            ]
        );
        assert_eq!(r.restarts(), 1);
        out.clear();
        r.on_arrival(1, 0, msg(9), &mut out);
        assert_eq!(
            out,
            vec![Step::Stale {
                seq: 0,
                item: 9,
                gap: false
            }],
            "a retired run never comes back"
        );
    }

    #[test]
    fn the_last_message_ends_the_flow() {
        let mut r = Reorder::new();
        let mut out = Vec::new();
        r.on_arrival(1, 0, msg(0), &mut out);
        r.on_arrival(1, 2, msg(2), &mut out);
        r.on_arrival(
            1,
            1,
            Arrival::Message {
                item: 1,
                last: true,
            },
            &mut out,
        );
        assert_eq!(
            out,
            vec![
                Step::Deliver {
                    seq: 0,
                    item: 0,
                    last: false
                },
                Step::Deliver {
                    seq: 1,
                    item: 1,
                    last: true
                },
                Step::Discard(2),
            ]
        );
        assert!(r.is_ended() && r.held() == 0);
    }
}
