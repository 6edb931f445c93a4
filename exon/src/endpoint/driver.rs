//! The driver task: owns the node and the socket, and turns commands, datagrams and timers
//! into node inputs, then drains the node's outputs.

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::SocketAddr;
use std::time::Instant;

use bytes::Bytes;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant as TokioInstant};

use super::handle::Command;
use super::Message;
use super::{ClockStore, CloseReport, DatagramSocket, EndpointConfig, EndpointStats, Error};
use crate::proto::{frame, Event, MsgId, Node, NodeId, SendError};

/// A send waiting for queue space.
struct Waiting {
    payload: Bytes,
    ack: oneshot::Sender<bool>,
    reply: oneshot::Sender<Result<MsgId, Error>>,
}

/// What a clock store job gives back: the store, the mark, and whether it was stored.
type StoreDone = (Box<dyn ClockStore>, u64, io::Result<()>);
type StoreJob = JoinHandle<StoreDone>;

/// What woke the driver up.
enum Wake {
    Cmd(Option<Command>),
    Datagram(io::Result<(usize, SocketAddr)>),
    Stored(Result<StoreDone, tokio::task::JoinError>),
    Deliver(Result<mpsc::OwnedPermit<Message>, mpsc::error::SendError<()>>),
    Timer,
    Continue,
}

/// State of the driver task.
pub(crate) struct Driver<S> {
    pub(crate) node: Node,
    pub(crate) socket: S,
    pub(crate) cfg: EndpointConfig,
    pub(crate) peers: HashMap<NodeId, SocketAddr>,
    pub(crate) cmds: mpsc::UnboundedReceiver<Command>,
    pub(crate) deliver: mpsc::Sender<Message>,
    pub(crate) store: Option<Box<dyn ClockStore>>,
    pending: VecDeque<Message>,
    acks: HashMap<MsgId, (NodeId, oneshot::Sender<bool>)>,
    waiters: HashMap<NodeId, VecDeque<Waiting>>,
    store_job: Option<StoreJob>,
    store_want: Option<u64>,
    store_retry_at: Option<Instant>,
    closing: Option<Instant>,
    close_replies: Vec<oneshot::Sender<CloseReport>>,
    cmds_open: bool,
    stalled: bool,
    stats: EndpointStats,
    tx_buf: Vec<u8>,
    rx_buf: Vec<u8>,
}

fn now() -> Instant {
    TokioInstant::now().into_std()
}

impl<S: DatagramSocket> Driver<S> {
    pub(crate) fn new(
        node: Node,
        socket: S,
        cfg: EndpointConfig,
        cmds: mpsc::UnboundedReceiver<Command>,
        deliver: mpsc::Sender<Message>,
        store: Box<dyn ClockStore>,
    ) -> Self {
        let rx_len = cfg.protocol.max_datagram_size + 1;
        Driver {
            node,
            socket,
            cfg,
            peers: HashMap::new(),
            cmds,
            deliver,
            store: Some(store),
            pending: VecDeque::new(),
            acks: HashMap::new(),
            waiters: HashMap::new(),
            store_job: None,
            store_want: None,
            store_retry_at: None,
            closing: None,
            close_replies: Vec::new(),
            cmds_open: true,
            stalled: false,
            stats: EndpointStats::default(),
            tx_buf: Vec::with_capacity(rx_len),
            rx_buf: vec![0; rx_len],
        }
    }

    /// The driver loop: runs until closed (explicitly, or all handles dropped and linger over).
    pub(crate) async fn run(mut self) {
        tracing::info!(id = %self.node.id(), "endpoint driver started");
        loop {
            let t = now();
            self.clock_store(t);
            let more = self.flush(t).await;
            self.hand_over();
            if let Some(report) = self.try_finish(t) {
                tracing::info!(
                    id = %self.node.id(),
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
            self.on_wake(wake, now());
        }
    }

    /// Waits for the next input.
    async fn wait(&mut self, more: bool) -> Wake {
        let deadline = [self.node.poll_timeout(), self.closing, self.store_retry_at]
            .into_iter()
            .flatten()
            .min();
        let timer = deadline.map(TokioInstant::from_std);
        let reading = self.pending.is_empty();
        let permit = (!reading).then(|| self.deliver.clone().reserve_owned());
        let store_job = &mut self.store_job;
        tokio::select! {
            biased;
            c = self.cmds.recv(), if self.cmds_open => Wake::Cmd(c),
            r = async { store_job.as_mut().expect("guarded").await }, if store_job.is_some() => {
                Wake::Stored(r)
            }
            p = async { permit.expect("guarded").await }, if !reading => Wake::Deliver(p),
            r = self.socket.recv_from(&mut self.rx_buf), if reading => Wake::Datagram(r),
            _ = async { sleep_until(timer.expect("guarded")).await }, if timer.is_some() => {
                Wake::Timer
            }
            _ = std::future::ready(()), if more => Wake::Continue,
        }
    }

    fn on_wake(&mut self, wake: Wake, t: Instant) {
        match wake {
            Wake::Cmd(Some(c)) => self.on_command(c, t),
            Wake::Cmd(None) => {
                self.cmds_open = false;
                if self.closing.is_none() {
                    tracing::debug!("all handles dropped: lingering");
                    self.start_close(t + self.cfg.linger);
                }
            }
            Wake::Datagram(Ok((n, from))) => self.on_datagram(t, n, from),
            Wake::Datagram(Err(e)) => {
                // ICMP errors (ConnectionRefused and friends) are reported here on some
                // systems: they say nothing reliable, and UDP goes on.
                self.stats.recv_errors += 1;
                tracing::debug!(error = %e, "socket receive error (ignored)");
            }
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
                if let Some(m) = self.pending.pop_front() {
                    permit.send(m);
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

    fn on_command(&mut self, c: Command, t: Instant) {
        match c {
            Command::Send {
                to,
                payload,
                wait,
                ack,
                reply,
            } => {
                if self.closing.is_some() {
                    let _ = reply.send(Err(Error::Closed));
                    return;
                }
                let queued = self.waiters.get(&to).is_some_and(|w| !w.is_empty());
                let full = queued || self.node.is_full(to, payload.len());
                if full && wait && payload.len() <= self.node.config().max_payload() {
                    self.waiters.entry(to).or_default().push_back(Waiting {
                        payload,
                        ack,
                        reply,
                    });
                    return;
                }
                if queued {
                    let _ = reply.send(Err(SendError::QueueFull(to).into()));
                    return;
                }
                self.admit(t, to, payload, ack, reply);
            }
            Command::AddPeer(id, addr) => {
                tracing::debug!(peer = %id, %addr, "peer address set");
                self.peers.insert(id, addr);
            }
            Command::Stats(reply) => {
                let _ = reply.send(self.stats());
            }
            Command::Close { timeout, reply } => {
                self.close_replies.push(reply);
                let deadline = t + timeout;
                match self.closing {
                    Some(d) if d <= deadline => {}
                    _ => self.start_close(deadline),
                }
            }
        }
    }

    fn admit(
        &mut self,
        t: Instant,
        to: NodeId,
        payload: Bytes,
        ack: oneshot::Sender<bool>,
        reply: oneshot::Sender<Result<MsgId, Error>>,
    ) {
        match self.node.send(t, to, payload) {
            Ok(id) => {
                if !self.peers.contains_key(&to) {
                    tracing::warn!(peer = %to, "sending to a peer with no known address");
                }
                self.acks.insert(id, (to, ack));
                let _ = reply.send(Ok(id));
            }
            Err(e) => {
                let _ = reply.send(Err(e.into()));
            }
        }
    }

    /// Admits waiting sends while there is room.
    fn admit_waiters(&mut self, t: Instant) {
        let peers: Vec<NodeId> = self.waiters.keys().copied().collect();
        for to in peers {
            while let Some(w) = self.waiters.get_mut(&to).and_then(|q| q.front()) {
                if self.node.is_full(to, w.payload.len()) {
                    break;
                }
                let Some(w) = self.waiters.get_mut(&to).and_then(|q| q.pop_front()) else {
                    break;
                };
                self.admit(t, to, w.payload, w.ack, w.reply);
            }
            if self.waiters.get(&to).is_some_and(|q| q.is_empty()) {
                self.waiters.remove(&to);
            }
        }
    }

    fn start_close(&mut self, deadline: Instant) {
        tracing::info!(
            id = %self.node.id(),
            outstanding = self.acks.len(),
            "endpoint closing"
        );
        self.closing = Some(deadline);
        for (_, q) in self.waiters.drain() {
            for w in q {
                let _ = w.reply.send(Err(Error::Closed));
            }
        }
    }

    /// The report, if the endpoint is done: closing, and all acknowledged and handed over, or
    /// the deadline passed.
    fn try_finish(&mut self, t: Instant) -> Option<CloseReport> {
        let deadline = self.closing?;
        if self.deliver.is_closed() {
            self.pending.clear();
        }
        let done = self.acks.is_empty() && self.pending.is_empty();
        if !done && t < deadline {
            return None;
        }
        let mut unacknowledged: Vec<(NodeId, MsgId)> =
            self.acks.iter().map(|(id, (to, _))| (*to, *id)).collect();
        unacknowledged.sort_by_key(|(_, id)| *id);
        Some(CloseReport {
            unacknowledged,
            undelivered: self.pending.len(),
            stats: self.stats(),
        })
    }

    fn stats(&self) -> EndpointStats {
        EndpointStats {
            node: *self.node.stats(),
            ..self.stats
        }
    }

    fn on_datagram(&mut self, t: Instant, n: usize, from: SocketAddr) {
        let data = Bytes::copy_from_slice(&self.rx_buf[..n]);
        let src = frame::validate(&data, self.node.config().max_payload())
            .ok()
            .map(|(h, _)| h.src);
        let rejects = self.node.stats().rejects.total();
        self.node.handle_datagram(t, data);
        let Some(src) = src else { return };
        if self.node.stats().rejects.total() != rejects {
            return;
        }
        if self.peers.get(&src) != Some(&from) {
            tracing::debug!(peer = %src, addr = %from, "peer address learned");
            self.stats.address_updates += 1;
            self.peers.insert(src, from);
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

    /// Sends up to the budget of datagrams and takes the node's events. Returns whether
    /// datagrams are left to send.
    async fn flush(&mut self, t: Instant) -> bool {
        let mut sent = 0;
        let mut more = false;
        loop {
            if sent >= self.cfg.transmit_budget {
                more = true;
                break;
            }
            self.tx_buf.clear();
            let Some(tx) = self.node.poll_transmit(t, &mut self.tx_buf) else {
                break;
            };
            sent += 1;
            let Some(addr) = self.peers.get(&tx.destination).copied() else {
                self.stats.unknown_peer_drops += 1;
                tracing::trace!(peer = %tx.destination, "no address: datagram dropped");
                continue;
            };
            let start = self.tx_buf.len() - tx.size;
            if let Err(e) = self.socket.send_to(&self.tx_buf[start..], addr).await {
                self.stats.send_errors += 1;
                tracing::debug!(error = %e, %addr, "socket send error (ignored)");
            }
        }
        let mut acked = false;
        while let Some(e) = self.node.poll_event() {
            match e {
                Event::Delivered { from, payload } => {
                    self.pending.push_back(Message { from, payload });
                }
                Event::Acknowledged { id, .. } => {
                    acked = true;
                    if let Some((_, ack)) = self.acks.remove(&id) {
                        let _ = ack.send(true);
                    }
                }
                Event::InDoubt { id, to } => {
                    // Settled, though not acknowledged: frees room like an acknowledgement.
                    acked = true;
                    tracing::warn!(peer = %to, ?id, "receiver lost the message's incarnation: in doubt");
                    if let Some((_, ack)) = self.acks.remove(&id) {
                        let _ = ack.send(false);
                    }
                }
            }
        }
        if acked && !self.waiters.is_empty() {
            self.admit_waiters(t);
            more = true;
        }
        more
    }

    /// Hands delivered messages to the application while the buffer has room.
    fn hand_over(&mut self) {
        if self.pending.is_empty() {
            self.stalled = false;
        }
        while let Some(m) = self.pending.pop_front() {
            match self.deliver.try_send(m) {
                Ok(()) => {}
                Err(mpsc::error::TrySendError::Full(m)) => {
                    self.pending.push_front(m);
                    if !self.stalled {
                        self.stalled = true;
                        self.stats.delivery_stalls += 1;
                    }
                    tracing::trace!("delivery buffer full: socket reads paused");
                    break;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => {
                    if self.closing.is_none() {
                        tracing::warn!("delivery receiver dropped: message discarded");
                    }
                }
            }
        }
    }
}
