//! The questions a flow's receiver asks its sender about a run (`Envelope::Query`) and
//! their answers (`Envelope::Over`): for flows that hold messages ahead of a number that
//! does not come ([`Stalls`]), and for streams whose writer's node shows another run; a
//! run its sender never had is over (it restarted without a journal).

use std::time::Instant;

use super::{Action, Flows};
use crate::endpoint::flows::broken::Broken;
use crate::endpoint::flows::stalls::Stalls;
use crate::envelope::{Flow, Place};
use crate::ordered::Reorder;
use crate::proto::NodeId;

/// Questions about a stream whose writer showed another run, while the stream stands still
/// (see [`Flows::ask_about_other_runs`]).
const SUSPECT_ASKS: u8 = 3;

impl Flows {
    /// When to look for flows whose run stalled, if any holds messages.
    pub(crate) fn next_stall_look(&self) -> Option<Instant> {
        self.stalls.as_ref().and_then(Stalls::next_look)
    }

    /// Asks the senders of the flows (channels and streams) that held messages ahead of
    /// their turn without moving for a whole interval whether their runs still live (at
    /// most one question per flow and interval).
    pub(crate) fn look_at_stalls(&mut self, now: Instant, actions: &mut Vec<Action>) {
        let Some(stalls) = self.stalls.as_mut() else {
            return;
        };
        let (channels, streams) = (&self.channels, &self.streams);
        let stalled = stalls.look(now, |(from, flow)| {
            let r = match flow {
                Flow::Channel(n) => channels.get(&(from, n)).filter(|r| r.held() > 0),
                Flow::Stream { id, opener_sent } => streams
                    .get(from, &(id, !opener_sent))
                    .filter(|s| s.reorder.held() > 0 || s.asks_left > 0)
                    .map(|s| &s.reorder),
            }?;
            Some((r.run()?, r.next()))
        });
        for ((from, flow), (run, next)) in stalled {
            if let Flow::Stream { id, opener_sent } = flow {
                // A question about a writer's other run (none held) counts down.
                let s = self.streams.get_mut(from, &(id, !opener_sent));
                if let Some(s) = s.filter(|s| s.reorder.held() == 0) {
                    s.asks_left = s.asks_left.saturating_sub(1);
                }
            }
            self.queries += 1;
            // Named as the query's receiver, the flow's sender, sees it.
            let place = Place {
                flow: flow.reversed(),
                run,
                seq: next,
            };
            actions.push(Action::Query { to: from, place });
        }
    }

    /// `from` started a flow in run `run` (a new stream, a channel's new run). If that is
    /// another run than it last started one in, it may have restarted without a journal and
    /// forgotten its streams to here, whose readers would then wait for ever when they hold
    /// nothing (no stall to ask about): the writer of each stream from `from` of another
    /// run is asked about it, at once and at the next looks while the stream stands still,
    /// [`SUSPECT_ASKS`] times at most for a run (the first question may come back in doubt,
    /// sent to slots of the writer's incarnation before its restart). The writer answers
    /// over only for a run it never had ([`on_query`](Self::on_query)): a durable writer
    /// keeps the runs it resumed. Only `from`'s streams are looked at.
    pub(super) fn ask_about_other_runs(
        &mut self,
        now: Instant,
        from: NodeId,
        run: u32,
        actions: &mut Vec<Action>,
    ) {
        let Some(stalls) = self.stalls.as_mut() else {
            return;
        };
        if self.peer_runs.get(&from) == Some(&run) {
            return;
        }
        if self.peer_runs.len() >= self.max_streams {
            self.peer_runs.clear();
        }
        self.peer_runs.insert(from, run);
        for (&(id, mine), s) in self.streams.of_peer_mut(from) {
            let Some(old) = s.reorder.run().filter(|&old| old != run) else {
                continue;
            };
            if s.asked == Some(old) {
                continue;
            }
            // Asked now, and again at the looks while it stands still, twice at most.
            s.asked = Some(old);
            s.asks_left = SUSPECT_ASKS - 1;
            let flow = Flow::Stream {
                id,
                opener_sent: !mine,
            };
            stalls.holds(now, (from, flow));
            self.queries += 1;
            // Named as the writer sees it, as a stalled stream's question.
            let place = Place {
                flow: Flow::Stream {
                    id,
                    opener_sent: mine,
                },
                run: old,
                seq: s.reorder.next(),
            };
            actions.push(Action::Query { to: from, place });
        }
    }

    /// `from`, the receiver of this endpoint's flow `place.flow`, asks whether run
    /// `place.run` still lives: the answer is that it is over if this endpoint never had
    /// it (an earlier run of this endpoint's did); else none (it lives: its missing
    /// numbers are being sent, and the receiver asks again if they do not come).
    pub(crate) fn on_query(&mut self, from: NodeId, place: Place, actions: &mut Vec<Action>) {
        let had = match place.flow {
            Flow::Channel(n) => self.shared.has_channel_run(from, n, place.run),
            Flow::Stream { id, opener_sent } => self
                .shared
                .has_stream_run((from, id, !opener_sent), place.run),
        };
        if !had {
            let place = Place {
                flow: place.flow.reversed(),
                ..place
            };
            actions.push(Action::Over { to: from, place });
        }
    }

    /// `from`, the sender of flow `place.flow`, says its run `place.run` is over. A
    /// channel: what this receiver holds of it is handed over out of order, and the run
    /// forgotten (a late message of it is then of a run not known here, released out of
    /// order too). A stream: it cannot go on (its missing chunks never come), so it breaks
    /// as at a reset and what it held is taken.
    pub(crate) fn on_over(&mut self, from: NodeId, place: Place, actions: &mut Vec<Action>) {
        let n = match place.flow {
            Flow::Channel(n) => n,
            Flow::Stream { id, opener_sent } => {
                let Some(s) = self.streams.get(from, &(id, !opener_sent)) else {
                    return;
                };
                if s.reorder.run() != Some(place.run) {
                    return;
                }
                self.overs += 1;
                s.out.break_with(Broken::Reset);
                self.forget(from, id, !opener_sent, actions);
                return;
            }
        };
        let Some(r) = self.channels.get_mut(&(from, n)) else {
            return;
        };
        if r.run() != Some(place.run) {
            return;
        }
        self.overs += 1;
        r.drain(&mut self.steps);
        *r = Reorder::new();
        // Every step of a drain is stale: messages out of the order, gaps taken.
        self.channel_actions(from, n, actions);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::sync::Arc;

    use bytes::Bytes;
    use tokio::sync::mpsc;

    use super::super::tests::{arrive, flows, kinds, t0, PEER};
    use super::super::{Held, OrderedShared};
    use super::*;
    use crate::endpoint::api::shared::Shared;
    use crate::endpoint::driver::outgoing::Submit;
    use crate::endpoint::flows::config::FlowConfig;
    use crate::endpoint::flows::resume::{self, ResumedStream};
    use crate::endpoint::flows::stream_in::StreamIn;
    use crate::ordered::Arrival;
    use crate::proto::{DeliveryId, Rules};

    /// A channel holding messages ahead of a number that does not come is asked about
    /// once it stood still a whole interval (not before), and drained out of order when its
    /// sender says the run is over; the run is forgotten, so a late message of it is
    /// released out of order too. An answer about another run changes nothing.
    #[test]
    fn a_stalled_run_is_asked_about_and_drained_once_its_sender_says_it_is_over() {
        let mut f = flows(8);
        let every = FlowConfig::default()
            .stall_query_after
            .expect("on by default");
        assert_eq!(kinds(&arrive(&mut f, 7, 0)), ["window", "message"]);
        assert!(arrive(&mut f, 7, 2).is_empty() && arrive(&mut f, 7, 3).is_empty());
        let mut actions = Vec::new();
        f.look_at_stalls(t0() + every / 2, &mut actions);
        f.look_at_stalls(t0() + every, &mut actions);
        assert!(actions.is_empty(), "not a whole interval seen yet");
        f.look_at_stalls(t0() + 2 * every, &mut actions);
        let place = |run, seq| Place {
            flow: Flow::Channel(3),
            run,
            seq,
        };
        assert!(
            matches!(actions[..], [Action::Query { to: PEER, place: p }] if p == place(7, 1)),
            "{:?}",
            kinds(&actions)
        );
        actions.clear();
        f.on_over(PEER, place(8, 1), &mut actions);
        assert!(actions.is_empty(), "another run: nothing");
        f.on_over(PEER, place(7, 1), &mut actions);
        assert_eq!(kinds(&actions), ["stale", "stale"]);
        assert_eq!((f.overs, f.queries, f.stale), (1, 1, 2));
        assert_eq!(f.channels[&(PEER, 3)].run(), None, "the run is forgotten");
        assert_eq!(kinds(&arrive(&mut f, 7, 1)), ["stale", "reset"]);
        actions.clear();
        f.look_at_stalls(t0() + 4 * every, &mut actions);
        assert!(actions.is_empty(), "nothing held: nothing asked");
    }

    /// As a channel's sender, this endpoint calls a run over only if it never had it: its
    /// own run (no channel made yet) lives.
    #[test]
    fn a_sender_calls_over_only_a_run_it_never_had() {
        let mut f = flows(8);
        let own = f.shared.run();
        let mut actions = Vec::new();
        let place = |run| Place {
            flow: Flow::Channel(3),
            run,
            seq: 4,
        };
        f.on_query(PEER, place(own), &mut actions);
        assert!(actions.is_empty(), "its own run lives");
        f.on_query(PEER, place(own.wrapping_add(1)), &mut actions);
        assert_eq!(kinds(&actions), ["over"]);
    }

    /// A durable sender's channel recovered from its journal and not made again yet still
    /// has its run (its messages are being sent again): asked, it does not call it over.
    #[test]
    fn a_durable_senders_recovered_run_lives_before_its_channel_is_made_again() {
        let recovered = 0x5eed_u32;
        let resumed = HashMap::from([((PEER, 3), resumed_out(recovered))]);
        let config = FlowConfig::default();
        let shared =
            OrderedShared::new_durable(mpsc::channel(1).0, config, Rules::ALL, Some(resumed), 64);
        let mut f = Flows::new(shared);
        let place = |run| Place {
            flow: Flow::Channel(3),
            run,
            seq: 4,
        };
        let mut actions = Vec::new();
        f.on_query(PEER, place(recovered), &mut actions);
        assert!(actions.is_empty(), "its recovered run lives");
        f.on_query(PEER, place(recovered ^ 1), &mut actions);
        assert_eq!(kinds(&actions), ["over"]);
    }

    /// A flow's sending side as a durable endpoint's journal recovers it, in run `run`.
    fn resumed_out(run: u32) -> resume::ResumedOut {
        let pos = crate::ordered::position::SendPosition {
            run,
            next: 9,
            offset: 0,
            peer_window: None,
            ended: false,
            base: 9,
        };
        resume::ResumedOut {
            resume: crate::endpoint::flows::out::Resume {
                pos,
                unsettled: Vec::new(),
                chunks: Vec::new(),
            },
            pending: Arc::default(),
        }
    }

    /// As a stream's writer, this endpoint calls a run over only if it never had it: its
    /// own run, and (durable mode) the run of a stream its journal recovered, live.
    #[test]
    fn a_writer_calls_over_only_a_stream_run_it_never_had() {
        let recovered = 0x5eed_u32;
        let shared = OrderedShared::new_durable(
            mpsc::channel(1).0,
            FlowConfig::default(),
            Rules::ALL,
            Some(HashMap::new()),
            64,
        );
        // A stream this endpoint opened before its restart, recovered with its run.
        let streams = HashMap::from([(
            (PEER, 11, true),
            ResumedStream {
                out: Some(resumed_out(recovered)),
                recv: None,
            },
        )]);
        let (tx, _rx) = crate::endpoint::driver::mailbox::mailbox();
        let driver = || -> Box<dyn Submit> { Box::new(tx.downgrade()) };
        let parts = shared.make_streams(streams, driver, &Arc::new(Shared::for_test()));
        assert_eq!(parts.len(), 1);
        let own = shared.run();
        let mut f = Flows::new(shared);
        // Named as the writer (the query's receiver) sees it: it opened stream 11.
        let place = |id, run| Place {
            flow: Flow::Stream {
                id,
                opener_sent: false,
            },
            run,
            seq: 4,
        };
        let mut actions = Vec::new();
        f.on_query(PEER, place(11, recovered), &mut actions);
        f.on_query(PEER, place(12, own), &mut actions);
        assert!(actions.is_empty(), "its recovered run and its own live");
        f.on_query(PEER, place(12, recovered), &mut actions);
        f.on_query(PEER, place(11, own ^ recovered ^ 1), &mut actions);
        let overs: Vec<Flow> = actions
            .iter()
            .map(|a| match a {
                Action::Over { place, .. } => place.flow,
                _ => panic!("not an over"),
            })
            .collect();
        // Named back as the reader sees it: the writer opened it.
        let read = |id| Flow::Stream {
            id,
            opener_sent: true,
        };
        assert_eq!(overs, [read(12), read(11)]);
    }

    /// A chunk of stream `id` from the peer (`opener_sent`: it opened the stream), number 0
    /// of run `run`, at `t`: what the flows say to do.
    fn chunk(f: &mut Flows, id: u64, run: u32, opener_sent: bool, t: Instant) -> Vec<Action> {
        let place = Place {
            flow: Flow::Stream { id, opener_sent },
            run,
            seq: 0,
        };
        let item = Held {
            id: DeliveryId::for_test(PEER, id),
            body: Bytes::from_static(b"c"),
        };
        let mut actions = Vec::new();
        let arrival = Arrival::Message { item, last: false };
        assert!(f.on_ordered(t, PEER, place, arrival, &mut actions).is_ok());
        actions
    }

    /// Registers stream `id`, opened by this endpoint to the peer.
    fn open(f: &mut Flows, id: u64) {
        let (out, _tx, _rx) = crate::endpoint::flows::out::tests::stream_of(None, 1000);
        let inbox = Arc::new(StreamIn::new(Arc::new(Shared::for_test())));
        f.register(PEER, id, out, inbox);
    }

    /// Flows with stream 4, opened here, on which the peer wrote in run 7 (nothing held).
    fn with_idle_stream() -> Flows {
        let mut f = flows(8);
        open(&mut f, 4);
        // Its window is told to the writer, whose run starts.
        assert_eq!(kinds(&chunk(&mut f, 4, 7, false, t0())), ["window"]);
        f
    }

    /// The question about run 7 of stream 4, named as its writer sees it (this endpoint
    /// opened it), at the next number due.
    fn is_the_question_about_stream_4(a: &Action) -> bool {
        let named = Flow::Stream {
            id: 4,
            opener_sent: true,
        };
        matches!(a, Action::Query { place, .. } if (place.flow, place.run, place.seq) == (named, 7, 1))
    }

    /// A stream from a peer that then starts a flow in another run (it may have restarted
    /// and forgotten the stream) is asked about, though it holds nothing: at once and at
    /// the looks while it stands still, three times in all; the peer's later flows in the
    /// same run ask nothing more.
    #[test]
    fn a_writers_other_run_has_its_idle_streams_asked_about_three_times() {
        let mut f = with_idle_stream();
        // The peer opens a stream in run 9: asked about run 7 of stream 4 at once.
        let actions = chunk(&mut f, 5, 9, true, t0());
        assert_eq!(kinds(&actions), ["query", "stream"]);
        assert!(is_the_question_about_stream_4(&actions[0]));
        // Another stream in run 9 asks nothing more.
        assert_eq!(kinds(&chunk(&mut f, 6, 9, true, t0())), ["stream"]);
        let every = FlowConfig::default().stall_query_after.unwrap();
        let mut asked = 1;
        for k in 1..8 {
            let mut actions = Vec::new();
            f.look_at_stalls(t0() + k * every, &mut actions);
            asked += kinds(&actions).iter().filter(|k| **k == "query").count();
        }
        assert_eq!(asked, 3);
        assert_eq!(f.next_stall_look(), None, "no more looks");
    }

    /// The other run shows as well when the peer writes, in it, on another stream this
    /// endpoint opened, or starts a channel's run in it.
    #[test]
    fn a_writers_other_run_shows_on_a_stream_opened_here_and_on_a_channel() {
        let mut f = with_idle_stream();
        open(&mut f, 8);
        let actions = chunk(&mut f, 8, 9, false, t0());
        assert_eq!(kinds(&actions), ["window", "query"]);
        assert!(is_the_question_about_stream_4(&actions[1]));
        let mut f = with_idle_stream();
        let actions = arrive(&mut f, 9, 0);
        assert_eq!(kinds(&actions), ["window", "message", "query"]);
        assert!(is_the_question_about_stream_4(&actions[2]));
    }

    /// Without the question (`stall_query_after: None`), a stalled run is never asked
    /// about: what it holds stays held.
    #[test]
    fn without_the_question_a_stalled_run_stays_held() {
        let config = FlowConfig {
            channel_window: 8,
            stall_query_after: None,
            ..FlowConfig::default()
        };
        let mut f = Flows::new(OrderedShared::new(mpsc::channel(1).0, config, Rules::ALL));
        arrive(&mut f, 7, 0);
        arrive(&mut f, 7, 2);
        let mut actions = Vec::new();
        for k in 1..10 {
            f.look_at_stalls(t0() + std::time::Duration::from_secs(k * 10), &mut actions);
        }
        assert!(actions.is_empty());
        assert_eq!(f.next_stall_look(), None);
        assert_eq!(f.channels[&(PEER, 3)].held(), 1);
    }
}
