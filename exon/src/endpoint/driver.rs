//! The driver task: owns the node and the socket; each turn it takes every input that is
//! ready (queued commands, a batch of datagrams, a due timer), then drains the node's outputs.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap, HashSet, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc::error::TryRecvError;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{Instant as TokioInstant, Sleep};

use bytes::BytesMut;

use super::cookies::Cookies;
use super::handle::{Command, Outgoing};
use super::io::RxBufs;
use super::peers::PeerBook;
use super::receipts::Ack;
use super::seqmap::SeqMap;
use super::shared::{CloseOnDrop, Shared};
use super::trace::Warnings;
use super::{ClockStore, CloseReport, DatagramSocket, EndpointConfig, EndpointStats, Message};
use crate::proto::{DeliveryId, MsgId, Node, NodeId};

/// Commands taken per turn at most, so that datagrams and timers are never starved.
const COMMAND_BUDGET: usize = 1024;

/// What a clock store job gives back: the store, the mark, and whether it was stored.
type StoreDone = (Box<dyn ClockStore>, u64, io::Result<()>);
type StoreJob = JoinHandle<StoreDone>;

/// What woke the driver up.
enum Wake {
    Cmd(Option<Command>),
    Datagrams(io::Result<usize>),
    Stored(Result<StoreDone, tokio::task::JoinError>),
    Deliver(Result<mpsc::OwnedPermit<Message>, mpsc::error::SendError<()>>),
    Forwarded(Option<Forward>),
    Taken,
    Timer,
    Continue,
}

/// The driver's ends of the channels to the handles and the application.
pub(crate) struct Channels {
    pub(crate) cmds: mpsc::UnboundedReceiver<Command>,
    pub(crate) deliver: mpsc::Sender<Message>,
    pub(crate) shared: Arc<Shared>,
    /// The links to the other shards of a sharded endpoint.
    pub(crate) route: Option<Route>,
}

/// Datagrams a shard received for peers another shard owns, with their source addresses.
pub(crate) type Forward = Vec<(BytesMut, SocketAddr)>;

/// Batches of forwarded datagrams a shard's queue holds at most; more are dropped (as the
/// network may drop them), so a flood aimed at one shard cannot grow memory.
pub(crate) const FORWARD_QUEUE: usize = 64;

/// One shard's links to the others: datagrams whose source another shard owns go there.
pub(crate) struct Route {
    /// This shard's index.
    me: usize,
    /// Queues into every shard (`None` for this one).
    to: Vec<Option<mpsc::Sender<Forward>>>,
    /// Datagrams gathered for each shard during one receive batch.
    gathered: Vec<Forward>,
    /// Datagrams the other shards forward to this one.
    from: mpsc::Receiver<Forward>,
    /// False once every other shard has stopped (nothing more can come).
    from_open: bool,
}

impl Route {
    /// The links of `n` shards to each other, one [`Route`] per shard, in order.
    pub(crate) fn mesh(n: usize) -> Vec<Route> {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel(FORWARD_QUEUE)).unzip();
        rxs.into_iter()
            .enumerate()
            .map(|(me, from)| Route {
                me,
                to: txs
                    .iter()
                    .enumerate()
                    .map(|(i, tx)| (i != me).then(|| tx.clone()))
                    .collect(),
                gathered: (0..n).map(|_| Vec::new()).collect(),
                from,
                from_open: true,
            })
            .collect()
    }

    /// The shard that owns the source of `datagram`, when it is another one. A datagram
    /// whose header does not decode stays (the local node rejects and counts it).
    fn owner_elsewhere(&self, datagram: &[u8]) -> Option<usize> {
        let (h, _) = crate::proto::Header::decode_prefix(datagram).ok()?;
        let owner = super::handle::shard_of(h.src, self.to.len());
        (owner != self.me).then_some(owner)
    }
}

/// A message in the core, not yet acknowledged.
pub(crate) struct Unacked {
    /// The endpoint's id of the message (its receipt's).
    pub(crate) id: MsgId,
    pub(crate) to: NodeId,
    pub(crate) ack: Ack,
}

/// State of the driver task.
pub(crate) struct Driver<S> {
    pub(crate) node: Node,
    pub(crate) socket: S,
    pub(crate) cfg: EndpointConfig,
    pub(crate) peers: PeerBook,
    /// Peers whose candidate address is owed a challenge (each at most once: the book
    /// says when).
    pub(crate) challenges_due: Vec<NodeId>,
    /// When the address book is next pruned of peers gone idle.
    next_prune: Instant,
    pub(crate) cmds: mpsc::UnboundedReceiver<Command>,
    pub(crate) deliver: mpsc::Sender<Message>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) store: Option<Box<dyn ClockStore>>,
    /// Delivered messages not yet in the delivery channel (it was full).
    pub(crate) pending: VecDeque<(Message, DeliveryId)>,
    /// The deliveries in the channel, in its order: the first `Shared::taken` of all those
    /// ever put in were taken by the application.
    handed: VecDeque<DeliveryId>,
    /// Takes already reported to the node.
    taken_seen: u64,
    /// Deliveries discarded because the receiving end was dropped (never acknowledged).
    discarded: usize,
    /// Reused for the application's acknowledgements (ack-after-processing mode).
    acked_scratch: Vec<DeliveryId>,
    /// Messages in the core by the core's id.
    pub(crate) acks: SeqMap<Unacked>,
    /// Sends waiting for room in the core, per destination (each such destination is in
    /// `blocked`).
    pub(crate) waiters: HashMap<NodeId, VecDeque<Outgoing>, foldhash::fast::RandomState>,
    /// Deadlines of messages in the core: (deadline, core id, destination), earliest first
    /// (entries of settled messages are skipped, and pruned when they pile up).
    pub(crate) deadlines: BinaryHeap<Reverse<(Instant, MsgId, NodeId)>>,
    /// Destinations whose queue is full, as published in `shared`.
    pub(crate) blocked: HashSet<NodeId, foldhash::fast::RandomState>,
    /// Send credits taken from the channel this turn, returned at the end of the turn.
    pub(crate) credits_taken: usize,
    pub(crate) closing: Option<Instant>,
    pub(crate) close_replies: Vec<oneshot::Sender<CloseReport>>,
    pub(crate) stats: EndpointStats,
    pub(crate) tx_buf: Vec<u8>,
    pub(crate) rx: RxBufs,
    /// Receive buffers filled so far: each one's key for the node (`set_receive_buffer`).
    pub(crate) rx_buffers: u64,
    /// The cookie exchange under load (`cookies.rs`).
    pub(crate) cookies: Cookies,
    /// Rate limits of the warnings that can come at message rate.
    pub(crate) warnings: Warnings,
    store_job: Option<StoreJob>,
    store_want: Option<u64>,
    store_retry_at: Option<Instant>,
    cmds_open: bool,
    stalled: bool,
    sleep: Pin<Box<Sleep>>,
    sleep_at: Option<Instant>,
    /// The other shards of a sharded endpoint.
    route: Option<Route>,
    _close_on_drop: CloseOnDrop,
}

/// How often the address book is swept for peers gone idle.
const PRUNE_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// How long a candidate address has to answer its first challenge (then twice as long,
/// and so on): a few round trips at the configured initial estimate.
fn candidate_wait(cfg: &EndpointConfig) -> Duration {
    (cfg.protocol.initial_rtt * 3).max(Duration::from_millis(10))
}

fn now() -> Instant {
    TokioInstant::now().into_std()
}

impl<S: DatagramSocket> Driver<S> {
    pub(crate) fn new(
        node: Node,
        socket: S,
        cfg: EndpointConfig,
        ch: Channels,
        store: Box<dyn ClockStore>,
    ) -> Self {
        // Receive up to the UDP maximum whatever our own datagram size: peers configured
        // with larger datagrams are understood.
        let rx = RxBufs::new(crate::proto::MAX_DATAGRAM_SIZE, socket.max_recv_segments());
        #[allow(unused_mut)]
        let mut peers = PeerBook::new(
            cfg.protocol.max_sender_records + cfg.protocol.max_receiver_records + 1024,
            candidate_wait(&cfg),
        );
        #[cfg(feature = "rule-switches")]
        peers.set_moves_need_an_answer(cfg.moves_need_an_answer);
        Driver {
            node,
            socket,
            peers,
            challenges_due: Vec::new(),
            next_prune: now(),
            cmds: ch.cmds,
            deliver: ch.deliver,
            _close_on_drop: CloseOnDrop(ch.shared.clone()),
            shared: ch.shared,
            store: Some(store),
            pending: VecDeque::new(),
            handed: VecDeque::new(),
            taken_seen: 0,
            discarded: 0,
            acked_scratch: Vec::new(),
            acks: SeqMap::default(),
            waiters: HashMap::default(),
            deadlines: BinaryHeap::new(),
            blocked: HashSet::default(),
            credits_taken: 0,
            closing: None,
            close_replies: Vec::new(),
            stats: EndpointStats::default(),
            tx_buf: Vec::with_capacity(cfg.protocol.max_datagram_size),
            rx,
            rx_buffers: 0,
            cookies: Cookies::new(),
            warnings: Warnings::default(),
            store_job: None,
            store_want: None,
            store_retry_at: None,
            cmds_open: true,
            stalled: false,
            sleep: Box::pin(tokio::time::sleep(Duration::ZERO)),
            sleep_at: None,
            route: ch.route,
            cfg,
        }
    }

    /// The driver loop: runs until closed (explicitly, or all handles dropped and linger over).
    pub(crate) async fn run(mut self) {
        tracing::info!("endpoint driver started");
        loop {
            let t = now();
            self.clock_store(t);
            if self.closing.is_some() {
                // No delayed ACK may be left behind when the driver stops.
                self.node.release_verdicts();
            }
            let more = self.flush(t).await;
            self.hand_over();
            if let Some(report) = self.try_finish(t) {
                tracing::info!(
                    unacknowledged = report.unacknowledged.len(),
                    undelivered = report.undelivered,
                    "endpoint closed"
                );
                for r in self.close_replies.drain(..) {
                    let _ = r.send(report.clone());
                }
                return;
            }
            let wake = self.wait(more).await;
            let t = now();
            let got_datagrams = matches!(wake, Wake::Datagrams(_));
            self.on_wake(wake, t);
            self.take_ready(t, got_datagrams);
        }
    }

    /// Waits for the next input.
    async fn wait(&mut self, more: bool) -> Wake {
        let given_up = self.deadlines.peek().map(|Reverse((d, _, _))| *d);
        let deadline = [
            self.node.poll_timeout(),
            self.closing,
            self.store_retry_at,
            given_up,
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
        let reading = self.pending.is_empty();
        let permit = (!reading).then(|| self.deliver.clone().reserve_owned());
        let store_job = &mut self.store_job;
        let (rx, socket, sleep) = (&mut self.rx, &self.socket, &mut self.sleep);
        let forwarded = self
            .route
            .as_mut()
            .filter(|r| r.from_open)
            .map(|r| &mut r.from);
        let forwarding = forwarded.is_some();
        let taken = self.shared.taken_notify.notified();
        tokio::select! {
            biased;
            c = self.cmds.recv(), if self.cmds_open => Wake::Cmd(c),
            _ = taken => Wake::Taken,
            r = async { store_job.as_mut().expect("guarded").await }, if store_job.is_some() => {
                Wake::Stored(r)
            }
            p = async { permit.expect("guarded").await }, if !reading => Wake::Deliver(p),
            r = rx.recv(socket), if reading => Wake::Datagrams(r),
            f = async { forwarded.expect("guarded").recv().await }, if reading && forwarding => {
                Wake::Forwarded(f)
            }
            _ = sleep.as_mut(), if deadline.is_some() => Wake::Timer,
            _ = std::future::ready(()), if more => Wake::Continue,
        }
    }

    fn on_wake(&mut self, wake: Wake, t: Instant) {
        match wake {
            Wake::Cmd(Some(c)) => self.on_command(c, t),
            Wake::Cmd(None) => self.on_handles_gone(t),
            Wake::Datagrams(r) => self.on_datagrams(t, r),
            Wake::Stored(Ok((store, hw, res))) => {
                self.store = Some(store);
                self.store_job = None;
                self.on_stored(t, hw, res);
            }
            Wake::Stored(Err(e)) => {
                tracing::error!(error = %e, "clock store task failed");
                self.store_job = None;
            }
            Wake::Deliver(Ok(permit)) => {
                if let Some((m, id)) = self.pending.pop_front() {
                    self.handed.push_back(id);
                    permit.send(m);
                }
            }
            Wake::Taken => self.on_taken(t, self.shared.taken()),
            Wake::Forwarded(Some(f)) => self.on_forwarded(t, f),
            Wake::Forwarded(None) => {
                if let Some(r) = self.route.as_mut() {
                    r.from_open = false;
                }
            }
            Wake::Deliver(Err(_)) => {}
            Wake::Timer => {
                if self.store_retry_at.is_some_and(|r| r <= t) {
                    self.store_retry_at = None;
                }
                self.node.handle_timeout(t);
            }
            Wake::Continue => {}
        }
    }

    /// Takes the other inputs that are ready without waiting: queued commands (up to a
    /// budget), a batch of datagrams (unless one was just taken), a due timer; then returns
    /// the send credits taken.
    fn take_ready(&mut self, t: Instant, got_datagrams: bool) {
        for _ in 0..COMMAND_BUDGET {
            if !self.cmds_open {
                break;
            }
            match self.cmds.try_recv() {
                Ok(c) => self.on_command(c, t),
                Err(TryRecvError::Empty) => break,
                Err(TryRecvError::Disconnected) => self.on_handles_gone(t),
            }
        }
        self.on_taken(t, self.shared.taken());
        if !got_datagrams && self.pending.is_empty() {
            if let Some(r) = self.rx.recv_now(&self.socket) {
                self.on_datagrams(t, r);
            }
        }
        if self.pending.is_empty() {
            if let Some(f) = self.route.as_mut().and_then(|r| r.from.try_recv().ok()) {
                self.on_forwarded(t, f);
            }
        }
        if self.node.poll_timeout().is_some_and(|d| d <= t) {
            self.node.handle_timeout(t);
        }
        if t >= self.next_prune {
            // Learned addresses go some time after the records of their peers.
            let node = &self.node;
            self.peers
                .prune(t, self.cfg.learned_address_ttl, |p| node.has_record(p));
            for p in self.peers.take_pruned() {
                self.shared.forget(p);
            }
            self.next_prune = t + PRUNE_EVERY;
        }
        if self
            .deadlines
            .peek()
            .is_some_and(|Reverse((d, _, _))| *d <= t)
        {
            self.expire_deadlines(t);
        }
        if self.credits_taken > 0 {
            self.shared.credits.add_permits(self.credits_taken);
            self.credits_taken = 0;
        }
    }

    /// Reports to the node the messages the application took since the last call (the
    /// first of `handed`, `taken` in all): their ACKs may leave now.
    fn on_taken(&mut self, t: Instant, taken: u64) {
        let ack_on_take = !self.cfg.ack_after_processing;
        while self.taken_seen < taken {
            let Some(id) = self.handed.pop_front() else {
                break;
            };
            self.taken_seen += 1;
            if ack_on_take {
                self.node.handle_taken(t, id);
            }
        }
        if !ack_on_take {
            let mut acked = std::mem::take(&mut self.acked_scratch);
            self.shared.take_acked(&mut acked);
            for id in acked.drain(..) {
                self.node.handle_taken(t, id);
            }
            self.acked_scratch = acked;
        }
    }

    fn on_handles_gone(&mut self, t: Instant) {
        self.cmds_open = false;
        if self.closing.is_none() {
            tracing::debug!("all handles dropped: lingering");
            self.start_close(t + self.cfg.linger);
        }
    }

    /// The report, if the endpoint is done: closing, and all acknowledged and handed over, or
    /// the deadline passed.
    fn try_finish(&mut self, t: Instant) -> Option<CloseReport> {
        let deadline = self.closing?;
        let done = self.acks.is_empty() && (self.pending.is_empty() || self.deliver.is_closed());
        if !done && t < deadline {
            return None;
        }
        // From here on nothing is taken: what the application did not take is reported.
        let taken = self.shared.stop_taking();
        self.on_taken(t, taken);
        let mut unacknowledged: Vec<(NodeId, MsgId)> =
            self.acks.values().map(|u| (u.to, u.id)).collect();
        unacknowledged.sort_by_key(|(_, id)| *id);
        Some(CloseReport {
            unacknowledged,
            undelivered: self.pending.len() + self.handed.len() + self.discarded,
            stats: self.stats(),
        })
    }

    pub(crate) fn stats(&self) -> EndpointStats {
        EndpointStats {
            node: *self.node.stats(),
            peer_addresses: self.peers.len(),
            cookies: self.cookies.stats,
            shards: 1,
            ..self.stats
        }
    }

    /// Takes datagrams another shard received for peers this one owns.
    fn on_forwarded(&mut self, t: Instant, f: Forward) {
        for (data, from) in f {
            self.on_datagram(t, data, from);
        }
    }

    /// Keeps `datagram` aside for the shard that owns its source, if that is another one;
    /// returns it otherwise.
    pub(crate) fn forward_elsewhere(
        &mut self,
        datagram: BytesMut,
        from: SocketAddr,
    ) -> Option<BytesMut> {
        let Some(route) = self.route.as_mut() else {
            return Some(datagram);
        };
        match route.owner_elsewhere(&datagram) {
            Some(owner) => {
                route.gathered[owner].push((datagram, from));
                None
            }
            None => Some(datagram),
        }
    }

    /// Hands the datagrams gathered for other shards to them, one batch per shard; a full
    /// queue drops its batch (counted).
    pub(crate) fn flush_forwards(&mut self) {
        let Some(route) = self.route.as_mut() else {
            return;
        };
        for (i, batch) in route.gathered.iter_mut().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let n = batch.len() as u64;
            let Some(tx) = route.to.get(i).and_then(Option::as_ref) else {
                batch.clear();
                continue;
            };
            match tx.try_send(std::mem::take(batch)) {
                Ok(()) => self.stats.forwarded += n,
                Err(_) => self.stats.forward_drops += n,
            }
        }
    }

    /// Stores the clock high-water mark the node asks for.
    fn clock_store(&mut self, t: Instant) {
        while let Some(hw) = self.node.poll_clock_store() {
            self.store_want = Some(self.store_want.map_or(hw, |w| w.max(hw)));
        }
        if self.store_retry_at.is_some() || self.store_job.is_some() {
            return;
        }
        let Some(hw) = self.store_want else { return };
        let Some(mut store) = self.store.take() else {
            return;
        };
        self.store_want = None;
        if store.is_blocking() {
            self.store_job = Some(tokio::task::spawn_blocking(move || {
                let r = store.store(hw);
                (store, hw, r)
            }));
        } else {
            let r = store.store(hw);
            self.store = Some(store);
            self.on_stored(t, hw, r);
        }
    }

    fn on_stored(&mut self, t: Instant, hw: u64, res: io::Result<()>) {
        match res {
            Ok(()) => {
                tracing::debug!(high_water = hw, "clock stored");
                self.node.handle_clock_stored(t, hw);
            }
            Err(e) => {
                tracing::error!(error = %e, high_water = hw, "clock store failed; retrying");
                self.store_want = Some(self.store_want.map_or(hw, |w| w.max(hw)));
                self.store_retry_at = Some(t + self.cfg.store_retry);
            }
        }
    }

    /// Hands delivered messages to the application while the buffer has room.
    fn hand_over(&mut self) {
        if self.pending.is_empty() {
            self.stalled = false;
        }
        while let Some((m, id)) = self.pending.pop_front() {
            match self.deliver.try_send(m) {
                Ok(()) => self.handed.push_back(id),
                Err(mpsc::error::TrySendError::Full(m)) => {
                    self.pending.push_front((m, id));
                    if !self.stalled {
                        self.stalled = true;
                        self.stats.delivery_stalls += 1;
                    }
                    tracing::trace!("delivery buffer full: socket reads paused");
                    break;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    // Never taken, so never acknowledged: its sender does not hear of it
                    // as delivered.
                    self.discarded += 1;
                    if self.closing.is_none() {
                        if let Some(suppressed) = self.warnings.receiver_dropped.allow(now()) {
                            tracing::warn!(
                                id = %self.node.id(),
                                suppressed,
                                "delivery receiver dropped: message discarded unacknowledged"
                            );
                        }
                    }
                }
            }
        }
    }
}
