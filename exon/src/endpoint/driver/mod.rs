//! The driver task: owns the node and the socket; each turn it takes every input that is
//! ready (queued commands, a slice of a batch of datagrams, a due timer), then drains the
//! node's outputs.
//!
//! A turn that took datagrams and handed deliveries on ends by yielding to the runtime, so
//! that the tasks it woke (receivers, callers, servers) run first. When they answer, the
//! next turns take received batches in slices ([`Turns`]): a turn stops once it has
//! something for the application and `inbound::TURN_BYTES` are in, and the answers are
//! taken at the start of the next turn and leave before more input is read. Request/reply
//! then flows as a pipeline of small bursts rather than one batch bouncing between two
//! idle sides.
//!
//! Each concern has a part of its own: [`Inbound`] (receive), [`Outbound`] (transmit),
//! [`Sends`] (the handles' sends), [`Handover`] (deliveries), [`ClockJobs`] (the clock
//! store) and [`Paths`] (peer addresses); the driver ties them together, and
//! [`Driver::drain`] is the one place that takes the node's outputs.
//!
//! The driver's share of the node's events (each delivery opened by its envelope: a
//! message, a request, a reply, a piece of an ordered flow) is in `events.rs`; its share of
//! ordered flows (hand-overs, windows, resets, accepted streams) in `ordered.rs`.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use mailbox::{MailboxRx, TryRecvError, WeakMailboxTx};
use tokio::sync::oneshot;
use tokio::time::{Instant as TokioInstant, Sleep};

pub(crate) mod command;
pub(crate) mod delivery_queue;
mod events;
pub(crate) mod graveyard;
pub(crate) mod handover;
pub(crate) mod mailbox;
mod ordered;
pub(crate) mod outgoing;
pub(crate) mod sends;
pub(crate) mod seqmap;
pub(crate) mod trace;
pub(crate) mod turns;

use crate::endpoint::api::config::EndpointConfig;
use crate::endpoint::api::message::Message;
use crate::endpoint::api::shared::{CloseOnDrop, Shared};
use crate::endpoint::api::stats::{CloseReport, EndpointStats};
use crate::endpoint::driver::delivery_queue::DeliveryTx;
use crate::endpoint::driver::handover::Handover;
use crate::endpoint::driver::sends::Sends;
use crate::endpoint::driver::trace::{peer_span, Throttle};
use crate::endpoint::driver::turns::Turns;
use crate::endpoint::flows::at_driver::{Action, Flows, OrderedShared};
use crate::endpoint::io::family::Reach;
use crate::endpoint::io::inbound::Inbound;
use crate::endpoint::io::outbound::Outbound;
use crate::endpoint::io::socket::DatagramSocket;
use crate::endpoint::paths::book::NoRoute;
use crate::endpoint::paths::Paths;
use crate::endpoint::shards::route::{Forward, Route};
use crate::endpoint::storage::clock_jobs::{ClockJobs, StoreDone};
use crate::endpoint::storage::clock_store::ClockStore;
use crate::endpoint::storage::journal_jobs::{JournalEvent, JournalJobs};
use crate::proto::{Event, Node};
use crate::rpc::calls::Calls;
use crate::rpc::queue::Requests;
use command::Command;
use outgoing::Outgoing;

/// Commands taken per turn at most, so that datagrams and timers are never starved.
const COMMAND_BUDGET: usize = 1024;

/// What woke the driver up.
enum Wake {
    /// Commands wait (`true`), or every handle is gone (`false`).
    Cmd(bool),
    Datagrams(std::io::Result<usize>),
    Stored(Result<StoreDone, tokio::task::JoinError>),
    Journalled(JournalEvent),
    Deliver,
    Forwarded(Option<Forward>),
    Taken,
    /// Buffers of the last batch of datagrams wait to be taken.
    Pending,
    Timer,
    Continue,
}

/// The driver's ends of the channels to the handles and the application.
pub(crate) struct Channels {
    cmds: MailboxRx<Command>,
    /// The driver's own command mailbox, for the flows it makes (weak: handles keep it).
    cmds_self: WeakMailboxTx<Command>,
    deliver: DeliveryTx<Message>,
    shared: Arc<Shared>,
    /// The endpoint's calls in flight and ordered flows (one for every shard).
    calls: Arc<Calls>,
    ordered: Arc<OrderedShared>,
    /// The links to the other shards of a sharded endpoint.
    route: Option<Route>,
}

impl Channels {
    pub(crate) fn new(
        cmds: MailboxRx<Command>,
        cmds_self: WeakMailboxTx<Command>,
        deliver: DeliveryTx<Message>,
        shared: Arc<Shared>,
        (calls, ordered): (Arc<Calls>, Arc<OrderedShared>),
        route: Option<Route>,
    ) -> Channels {
        Channels {
            cmds,
            cmds_self,
            deliver,
            shared,
            calls,
            ordered,
            route,
        }
    }
}

/// State of the driver task.
pub(crate) struct Driver<S> {
    node: Node,
    socket: S,
    cfg: EndpointConfig,
    shared: Arc<Shared>,
    /// The endpoint's calls in flight: replies go to them.
    calls: Arc<Calls>,
    /// This driver's shard (0 for an endpoint of one).
    shard: usize,
    cmds: MailboxRx<Command>,
    cmds_open: bool,
    paths: Paths,
    inbound: Inbound,
    outbound: Outbound,
    sends: Sends,
    handover: Handover,
    /// Requests for this endpoint's server.
    requests: Requests,
    /// Ordered channels and streams.
    flows: Flows,
    /// Reused for the flows' actions.
    actions: Vec<Action>,
    /// Replies handed to their calls while the node's events are drained, taken together
    /// after them (`Node::handle_taken_many`: one lookup of their sender's record).
    reply_takes: Vec<crate::proto::DeliveryId>,
    cmds_self: WeakMailboxTx<Command>,
    clock: ClockJobs,
    /// Durable mode: the journal.
    journal: Option<JournalJobs>,
    closing: Option<Instant>,
    close_replies: Vec<oneshot::Sender<CloseReport>>,
    stats: EndpointStats,
    /// Rate limits of the warnings that can come at message rate.
    in_doubt: Throttle,
    receiver_dropped: Throttle,
    sleep: Pin<Box<Sleep>>,
    sleep_at: Option<Instant>,
    /// When turns yield to the application, and whether they take datagrams in slices.
    turns: Turns,
    /// Acknowledged messages' payloads the node handed back, on their way to the
    /// mailbox's graveyard (`graveyard.rs`); reused.
    released: Vec<crate::proto::Payload>,
    /// Buried payloads no send took, on their way to be freed here; reused.
    stale: Vec<crate::proto::Payload>,
    /// When the payloads buried and not yet taken are freed here (`None`: none wait).
    free_buried_at: Option<Instant>,
    _close_on_drop: CloseOnDrop,
}

fn now() -> Instant {
    TokioInstant::now().into_std()
}

impl<S: DatagramSocket> Driver<S> {
    /// A driver for `node` on `socket`, which reaches the peers `reach` says.
    pub(crate) fn new(
        node: Node,
        (socket, reach): (S, Reach),
        cfg: EndpointConfig,
        ch: Channels,
        store: Box<dyn ClockStore>,
        durable: Option<crate::endpoint::storage::durable::DriverJournal>,
    ) -> Self {
        let shard = ch.route.as_ref().map_or(0, Route::me);
        // Receive up to the UDP maximum whatever our own datagram size: peers configured
        // with larger datagrams are understood.
        let inbound = Inbound::new(
            crate::proto::MAX_DATAGRAM_SIZE,
            socket.max_recv_segments(),
            ch.route,
        );
        let outbound = Outbound::new(
            cfg.protocol.mtu.max_datagram_size,
            socket.max_send_segments(),
            reach,
        );
        let mut sends = Sends::new(ch.shared.clone(), ch.calls.clone());
        let mut flows = Flows::new(ch.ordered);
        if durable.is_some() && cfg.rules.durable_flows {
            // Durable channels go on from the positions the journal's marks kept.
            flows.resume(node.marks());
        }
        let journal = durable.map(|d| {
            for (id, to, ack) in d.recovered {
                sends.recovered(id, to, ack);
            }
            d.jobs
        });
        // Acknowledged payloads come back to be freed by the next sends (`graveyard.rs`).
        let mut node = node;
        node.keep_released(true);
        Driver {
            node,
            socket,
            paths: Paths::new(&cfg, now()),
            inbound,
            outbound,
            cmds: ch.cmds,
            cmds_open: true,
            sends,
            journal,
            handover: Handover::new(ch.deliver, cfg.ack_after_processing),
            requests: Requests::default(),
            flows,
            calls: ch.calls,
            shard,
            actions: Vec::new(),
            reply_takes: Vec::new(),
            cmds_self: ch.cmds_self,
            clock: ClockJobs::new(store, cfg.store_retry),
            _close_on_drop: CloseOnDrop::new(ch.shared.clone()),
            shared: ch.shared,
            closing: None,
            close_replies: Vec::new(),
            stats: EndpointStats::default(),
            in_doubt: Throttle::default(),
            receiver_dropped: Throttle::default(),
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            sleep_at: None,
            turns: Turns::default(),
            released: Vec::new(),
            stale: Vec::new(),
            free_buried_at: None,
            cfg,
        }
    }

    /// What the driver shares with its handles.
    pub(crate) fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Durable mode: the streams recovered at bind go on (before the driver runs, so
    /// their peers' chunks find them).
    pub(crate) fn resume_streams(
        &mut self,
        streams: &[crate::endpoint::flows::resume::StreamParts],
    ) {
        for p in streams {
            let (out, inbox) = (p.out.clone(), p.inbox.clone());
            self.flows.resume_stream(p.key, out, inbox, p.recv);
        }
    }

    /// The driver loop: runs until closed (explicitly, or all handles dropped and linger over).
    pub(crate) async fn run(mut self) {
        tracing::info!("endpoint driver started");
        loop {
            let t = now();
            if self.closing.is_some() {
                // No delayed ACK may be left behind when the driver stops.
                self.node.release_verdicts();
            }
            self.look_at_stalls(t);
            let more = self.drain(t).await;
            self.hand_over();
            self.bury_released(t);
            self.requests.flush();
            if let Some(report) = self.try_finish(t) {
                tracing::info!(
                    unacknowledged = report.unacknowledged.len(),
                    undelivered = report.undelivered,
                    "endpoint closed"
                );
                // A group commit under way finishes before the driver is gone: a durable
                // endpoint reopened on the same directory finds the journal at rest.
                if let Some(j) = self.journal.as_mut() {
                    j.settle().await;
                }
                for r in self.close_replies.drain(..) {
                    let _ = r.send(report.clone());
                }
                return;
            }
            if self.turns.should_yield() {
                // Let the tasks this turn's datagrams woke (receivers, callers, servers) run
                // first: what they send back is taken, and leaves, before more input.
                tokio::task::yield_now().await;
            }
            let wake = self.wait(more).await;
            let t = now();
            let got_datagrams = matches!(wake, Wake::Datagrams(_) | Wake::Pending);
            self.on_wake(wake, t);
            if self.take_ready(t, got_datagrams) || got_datagrams {
                self.turns.took_datagrams();
            }
        }
    }

    /// Waits for the next input.
    async fn wait(&mut self, more: bool) -> Wake {
        if self.shared.wait_for_takes() != self.handover.taken_read() {
            // Takes came since the last look, without a wake-up (the driver was busy).
            self.shared.done_waiting_for_takes();
            return Wake::Taken;
        }
        let wake = self.wait_for_input(more).await;
        self.shared.done_waiting_for_takes();
        wake
    }

    /// [`wait`](Self::wait), once the application's takes are all seen.
    async fn wait_for_input(&mut self, more: bool) -> Wake {
        let deadline = [
            self.node.poll_timeout(),
            self.closing,
            self.clock.retry_at(),
            self.sends.next_deadline(),
            self.flows.next_stall_look(),
            self.paths.next_answer_at(),
            self.paths.next_keepalive_at(),
            self.journal.as_ref().and_then(|j| j.next_deadline()),
            self.free_buried_at,
        ]
        .into_iter()
        .flatten()
        .min();
        if deadline != self.sleep_at {
            if let Some(d) = deadline {
                self.sleep.as_mut().reset(TokioInstant::from_std(d));
            }
            self.sleep_at = deadline;
        }
        let room = self.handover.room();
        let reading = room.is_none();
        let pending = self.inbound.has_pending();
        let store_job = self.clock.job();
        let storing = store_job.is_some();
        let holds = self.journal.is_some();
        let journal_job = self.journal.as_mut().and_then(|j| j.next_event());
        let journalling = journal_job.is_some();
        let (rx, forwarded) = self.inbound.sources();
        let forwarding = forwarded.is_some();
        let (socket, sleep) = (&self.socket, &mut self.sleep);
        let taken = self.shared.taken_notified();
        // Durable mode: calls that ended release their held requests.
        let ended = self.calls.ended_notified(self.shard);
        tokio::select! {
            biased;
            c = self.cmds.ready(), if self.cmds_open => Wake::Cmd(c),
            _ = taken => Wake::Taken,
            _ = ended, if holds => Wake::Taken,
            r = async { store_job.expect("guarded").await }, if storing => Wake::Stored(r),
            r = async { journal_job.expect("guarded").await }, if journalling => {
                Wake::Journalled(r)
            }
            _ = async { room.expect("guarded").await }, if !reading => Wake::Deliver,
            _ = std::future::ready(()), if reading && pending => Wake::Pending,
            r = rx.recv(socket), if reading && !pending => Wake::Datagrams(r),
            f = async { forwarded.expect("guarded").recv().await }, if reading && forwarding => {
                Wake::Forwarded(f)
            }
            _ = sleep.as_mut(), if deadline.is_some() => Wake::Timer,
            _ = std::future::ready(()), if more => Wake::Continue,
        }
    }

    fn on_wake(&mut self, wake: Wake, t: Instant) {
        match wake {
            // Taken with the other inputs that are ready (`take_ready`).
            Wake::Cmd(true) => {}
            Wake::Cmd(false) => self.on_handles_gone(t),
            Wake::Datagrams(r) => self.on_datagrams(t, r),
            Wake::Pending => self.on_pending(t),
            Wake::Stored(r) => {
                if let Some(hw) = self.clock.on_done(t, r) {
                    self.node.handle_clock_stored(t, hw);
                }
            }
            Wake::Journalled(r) => {
                let through = self.journal.as_mut().and_then(|j| j.on_event(r));
                if let Some(through) = through {
                    self.node.handle_stored(t, through);
                }
            }
            // Room for the pending deliveries: the turn's hand-over moves them.
            Wake::Deliver => {}
            Wake::Taken => self.on_taken(t),
            Wake::Forwarded(Some(f)) => self.on_forwarded(t, f),
            Wake::Forwarded(None) => self.inbound.forwarding_closed(),
            Wake::Timer => {
                self.clock.on_timer(t);
                self.node.handle_timeout(t);
            }
            Wake::Continue => {}
        }
    }

    /// Takes the other inputs that are ready without waiting: queued commands (up to a
    /// budget, consecutive plain sends to one destination handed to the core together), a
    /// batch of datagrams (unless one was just taken), a due timer; then returns the send
    /// credits taken. Returns whether it took datagrams.
    fn take_ready(&mut self, t: Instant, got_datagrams: bool) -> bool {
        let mut budget = COMMAND_BUDGET;
        while budget > 0 && self.cmds_open {
            let queue = match self.cmds.front() {
                Ok(queue) => queue,
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => {
                    self.on_handles_gone(t);
                    break;
                }
            };
            // Consecutive plain sends to one destination go to the core together, from
            // where they wait (no copy into a run of their own).
            let n = self
                .sends
                .send_run(t, queue, budget, &mut self.node, &self.paths);
            if n > 0 {
                self.turns.command();
                budget -= n;
                continue;
            }
            let Some(c) = queue.pop_front() else { break };
            budget -= 1;
            self.turns.command();
            self.on_command(c, t);
        }
        self.on_taken(t);
        let mut took = false;
        if !got_datagrams && self.handover.is_clear() {
            if self.inbound.has_pending() {
                self.on_pending(t);
                took = true;
            } else if let Some(r) = self.inbound.recv_now(&self.socket) {
                self.on_datagrams(t, r);
                took = true;
            }
        }
        if self.handover.is_clear() {
            if let Some(f) = self.inbound.try_forwarded() {
                self.on_forwarded(t, f);
            }
        }
        if self.node.poll_timeout().is_some_and(|d| d <= t) {
            self.node.handle_timeout(t);
        }
        self.paths.prune(t, &self.node, &self.shared);
        let (calls, shard, flows) = (&self.calls, self.shard, &self.flows);
        self.paths
            .watch(t, || calls.take_opened(shard) | (flows.streams() > 0));
        self.sends.expire_deadlines(t, &mut self.node);
        self.sends.return_credits();
        took
    }

    fn on_command(&mut self, c: Command, t: Instant) {
        match c {
            Command::Send(out) if self.journal_failed() => {
                self.sends
                    .refuse(out, crate::endpoint::api::error::Error::Storage);
            }
            Command::SendBatch { messages, credits } if self.journal_failed() => {
                self.sends.refuse_batch(
                    messages,
                    credits,
                    crate::endpoint::api::error::Error::Storage,
                );
            }
            Command::Send(out) => self.sends.on_send(t, out, &mut self.node, &self.paths),
            Command::SendBatch { messages, credits } => {
                let (node, paths) = (&mut self.node, &self.paths);
                self.sends.on_batch(t, messages, credits, node, paths);
            }
            Command::AddPeer(id, addr) => {
                peer_span(id).in_scope(|| tracing::debug!(%addr, "peer address set"));
                self.paths.configure(id, addr);
            }
            Command::KeepReachable(id, on) => self.paths.keep_reachable(id, on),
            Command::AddPeerKey(id, key, reply) => {
                let r = self.node.add_peer_key(id, key);
                peer_span(id).in_scope(|| match &r {
                    Ok(()) => tracing::debug!("peer key set"),
                    Err(e) => tracing::warn!(error = %e, "peer key refused"),
                });
                let _ = reply.send(r);
            }
            Command::Stats(reply) => {
                let _ = reply.send(self.stats());
            }
            Command::Path(peer, reply) => {
                let _ = reply.send(self.node.path(peer));
            }
            Command::SettleKeys { to, floor, reply } => {
                let r = self.node.settle_keys(to, floor);
                peer_span(to).in_scope(|| tracing::info!(floor, ok = r.is_ok(), "keys settled"));
                let _ = reply.send(r);
            }
            Command::Serve(tx) => self.requests.serve(tx),
            Command::OpenStream {
                peer,
                id,
                out,
                inbox,
            } => self.flows.register(peer, id, out, inbox),
            Command::ForgetStream { peer, id, mine } => {
                let mut actions = std::mem::take(&mut self.actions);
                self.flows.forget(peer, id, mine, &mut actions);
                self.run_actions(t, &mut actions);
                self.actions = actions;
            }
            Command::Requeue(r) => self.requests.push(r),
            Command::Close { timeout, reply } => {
                self.close_replies.push(reply);
                let deadline = crate::endpoint::deadline::saturating_after(t, timeout);
                match self.closing {
                    Some(d) if d <= deadline => {}
                    _ => self.start_close(deadline),
                }
            }
        }
    }

    /// Durable mode: whether the journal failed (the endpoint accepts no message).
    fn journal_failed(&self) -> bool {
        self.journal.as_ref().is_some_and(|j| j.failed())
    }

    fn on_handles_gone(&mut self, t: Instant) {
        self.cmds_open = false;
        if self.closing.is_none() {
            tracing::debug!("all handles dropped: lingering");
            self.start_close(crate::endpoint::deadline::saturating_after(
                t,
                self.cfg.linger,
            ));
        }
    }

    fn start_close(&mut self, deadline: Instant) {
        tracing::info!(
            id = %self.node.id(),
            outstanding = self.sends.outstanding(),
            "endpoint closing"
        );
        self.closing = Some(deadline);
        self.shared.close();
        self.sends.close();
    }

    /// Handles a received batch: its first slice now, the rest in the next turns.
    fn on_datagrams(&mut self, t: Instant, r: std::io::Result<usize>) {
        self.inbound.on_batch(r, &mut self.stats);
        self.on_pending(t);
    }

    /// Takes the next buffers of the last batch of datagrams (up to `TURN_BYTES`).
    fn on_pending(&mut self, t: Instant) {
        let slice = self.turns.slicing();
        let (paths, shared) = (&mut self.paths, &self.shared);
        self.inbound.take_pending(
            &mut self.node,
            &mut self.stats,
            |node, stats, data, from| {
                paths.on_datagram(t, node, stats, shared, data, from);
            },
            slice,
        );
    }

    /// Takes datagrams another shard received for peers this one owns.
    fn on_forwarded(&mut self, t: Instant, f: Forward) {
        for (data, from) in f {
            self.on_datagram(t, data, from);
        }
    }

    fn on_datagram(&mut self, t: Instant, data: BytesMut, from: SocketAddr) {
        let (node, stats, shared) = (&mut self.node, &mut self.stats, &self.shared);
        self.paths.on_datagram(t, node, stats, shared, data, from);
    }

    /// Reports to the node the messages the application took (or acknowledged) since the
    /// last call, and (durable mode) the calls with a held request that ended: each
    /// request released, with the take of its reply if it got one.
    fn on_taken(&mut self, t: Instant) {
        let taken = self.shared.taken();
        self.handover
            .on_taken(t, taken, (&mut self.node, &mut self.flows), &self.shared);
        if self.journal.is_some() {
            for ended in self.calls.take_ended(self.shard) {
                match ended.reply {
                    Some(d) => drop(self.node.take_reply(t, d, ended.request)),
                    None => drop(self.node.release(ended.request)),
                }
            }
        }
    }

    /// Drains the node's outputs in the contract's order: the clock marks to store, then
    /// the datagrams (with the challenges and cookie replies owed), up to the budget, then
    /// the events; then admits waiting sends. Returns whether datagrams are left, or new
    /// ones were made.
    async fn drain(&mut self, t: Instant) -> bool {
        while let Some(hw) = self.node.poll_clock_store() {
            self.clock.want(hw);
        }
        if let Some(hw) = self.clock.start(t) {
            self.node.handle_clock_stored(t, hw);
        }
        if let Some(j) = &mut self.journal {
            while let Some(w) = self.node.poll_store() {
                j.want(t, w);
            }
            j.start(t);
        }
        self.paths.tell_routes(&self.socket, &mut self.node);
        let (socket, stats) = (&self.socket, &mut self.stats);
        self.outbound
            .send_challenges(socket, stats, &mut self.node, &mut self.paths, t)
            .await;
        let replies = self.paths.take_cookie_replies();
        self.outbound
            .send_cookie_replies(socket, stats, replies)
            .await;
        self.outbound.begin();
        let mut sent = 0;
        let mut more = false;
        loop {
            if sent >= self.cfg.transmit_budget {
                more = true;
                break;
            }
            // A run of datagrams to one peer, as many as the batch can still take (GSO).
            let max = (self.cfg.transmit_budget - sent).min(self.outbound.room());
            let (start, buf) = self.outbound.buf();
            let Some(run) = self.node.poll_transmit_run(t, buf, max) else {
                break;
            };
            let mut at = start;
            // A validated address is looked up once for the run; any other counts each
            // datagram against its anti-amplification limit.
            let validated = self.paths.validated(run.destination);
            if validated.is_none() {
                self.paths.sending_unvalidated(run.destination, t);
            }
            for size in run.sizes() {
                sent += 1;
                let route = match validated {
                    Some(addr) => Ok(addr),
                    None => self.paths.send_to(run.destination, size),
                };
                match route {
                    Ok(addr) => {
                        self.outbound.push(socket, stats, at, addr, size).await;
                        at += size;
                    }
                    Err(why) => {
                        self.outbound.discard(at, size);
                        if why == NoRoute::Amplification {
                            // Repaired like a loss once the address is validated.
                            stats.amplification_drops += 1;
                        } else {
                            stats.unknown_peer_drops += 1;
                            tracing::trace!(
                                peer = %run.destination,
                                "no address: datagram dropped"
                            );
                        }
                    }
                }
            }
        }
        self.outbound.finish(socket, stats).await;
        self.outbound
            .send_rechallenges(socket, stats, &mut self.node, &mut self.paths)
            .await;
        self.outbound
            .send_answers(socket, stats, &mut self.node, &mut self.paths, t)
            .await;
        let (calls, shard, flows) = (&*self.calls, self.shard, &self.flows);
        let awaited = |out: &mut Vec<_>| {
            calls.awaited(shard, out);
            flows.reading_from(out);
        };
        self.outbound
            .send_keepalives(socket, stats, &mut self.node, &mut self.paths, awaited, t)
            .await;
        while let Some(e) = self.node.poll_event() {
            if matches!(e, Event::Delivered { .. }) {
                self.turns.handed();
            }
            self.on_event(t, e);
        }
        if !self.reply_takes.is_empty() {
            let mut takes = std::mem::take(&mut self.reply_takes);
            self.node.handle_taken_many(t, takes.drain(..));
            self.reply_takes = takes;
        }
        more | self.sends.admit_waiters(t, &mut self.node, &self.paths)
    }

    /// Hands delivered messages to the application while the buffer has room.
    fn hand_over(&mut self) {
        let (closing, throttle, id) = (
            self.closing.is_some(),
            &mut self.receiver_dropped,
            self.node.id(),
        );
        let stall = self.handover.hand_over(|| {
            if closing {
                return;
            }
            if let Some(suppressed) = throttle.allow(now()) {
                tracing::warn!(
                    %id,
                    suppressed,
                    "delivery receiver dropped: message discarded unacknowledged"
                );
            }
        });
        if stall {
            self.stats.delivery_stalls += 1;
        }
    }

    /// The payloads of the messages acknowledged this turn go to the mailbox's graveyard,
    /// for the next sends to free (`graveyard.rs`); larger ones, those it has no room for,
    /// and those no send took within [`KEEP`](graveyard::KEEP) of the first burial (the
    /// driver has a turn by then), are freed here.
    fn bury_released(&mut self, t: Instant) {
        self.node.take_released(&mut self.released);
        let expire = self.free_buried_at.is_some_and(|at| at <= t);
        if self.released.is_empty() && !expire {
            return;
        }
        self.released.retain(|p| p.len() <= graveyard::MAX_DEAD_LEN);
        let waiting = self.cmds.bury(&mut self.released, &mut self.stale, expire);
        self.released.clear();
        self.stale.clear();
        if expire || waiting == 0 {
            self.free_buried_at = None;
        }
        if waiting > 0 {
            self.free_buried_at.get_or_insert(t + graveyard::KEEP);
        }
    }

    /// The report, if the endpoint is done: closing, and all acknowledged and handed over, or
    /// the deadline passed.
    fn try_finish(&mut self, t: Instant) -> Option<CloseReport> {
        let deadline = self.closing?;
        // A durable endpoint also waits for the journal: the acknowledgements of the last
        // messages taken go out only once their takes are stored.
        let journal_done = self.journal_failed() || self.node.journal_backlog() == (0, 0);
        let done = self.sends.all_settled() && self.handover.is_done() && journal_done;
        if !done && t < deadline {
            return None;
        }
        // From here on nothing is taken: what the application did not take is reported.
        let taken = self.shared.stop_taking();
        self.handover
            .on_taken(t, taken, (&mut self.node, &mut self.flows), &self.shared);
        Some(CloseReport {
            unacknowledged: self.sends.unacknowledged(),
            undelivered: self.handover.undelivered() + self.requests.held(),
            stats: self.stats(),
        })
    }

    fn stats(&self) -> EndpointStats {
        EndpointStats {
            node: *self.node.stats(),
            peer_addresses: self.paths.len(),
            cookies: self.paths.cookie_stats(),
            shards: 1,
            journal_commits: self.journal.as_ref().map_or(0, |j| j.commits),
            journal_writes: self.journal.as_ref().map_or(0, |j| j.writes),
            journal_written_bytes: self.journal.as_ref().map_or(0, |j| j.written_bytes),
            journal_bytes: self.journal.as_ref().map_or(0, |j| j.disk_bytes()),
            requests_held: self.requests.held(),
            streams_open: self.flows.streams(),
            beyond_window: self.flows.beyond_window,
            run_queries: self.flows.queries,
            runs_over: self.flows.overs,
            notes_waiting: self.sends.notes().0,
            notes_dropped: self.sends.notes().1,
            stream_resets: self.stats.stream_resets + self.flows.resets,
            ..self.stats
        }
    }
}

impl sends::Run for Command {
    #[inline]
    fn send_mut(&mut self) -> Option<&mut Outgoing> {
        match self {
            Command::Send(out) => Some(out),
            _ => None,
        }
    }
    #[inline]
    fn into_send(self) -> Option<Outgoing> {
        match self {
            Command::Send(out) => Some(out),
            _ => None,
        }
    }
}
