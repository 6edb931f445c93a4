//! Memory per peer of exon's core and endpoint, from a counting allocator.
//!
//! The binary installs [`Counting`] as its global allocator.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use exon::proto::{Config, Event, Node, NodeId, Output, Security};

/// Counts the heap bytes live (allocated and not freed); install it with
/// `#[global_allocator]` for [`run`] to measure anything.
pub struct Counting;

static LIVE: AtomicI64 = AtomicI64::new(0);
/// Live bytes allocated (and freed) while [`hub`] runs: the hub node's own.
static HUB_LIVE: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static IN_HUB: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

fn count(delta: i64) {
    LIVE.fetch_add(delta, Ordering::Relaxed);
    if IN_HUB.with(|h| h.get()) {
        HUB_LIVE.fetch_add(delta, Ordering::Relaxed);
    }
}

/// Runs `f` with the hub's allocations counted in [`HUB_LIVE`]. Everything the hub takes in or
/// gives out is made and dropped inside such calls.
fn hub<R>(f: impl FnOnce() -> R) -> R {
    IN_HUB.with(|h| h.set(true));
    let r = f();
    IN_HUB.with(|h| h.set(false));
    r
}

fn hub_live() -> i64 {
    HUB_LIVE.load(Ordering::Relaxed)
}

fn live() -> i64 {
    LIVE.load(Ordering::Relaxed)
}

// SAFETY: every call is forwarded to the system allocator unchanged; only counts are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        count(l.size() as i64);
        // SAFETY: same layout as asked.
        unsafe { System.alloc(l) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        count(-(l.size() as i64));
        // SAFETY: `p` came from `alloc` with this layout.
        unsafe { System.dealloc(p, l) }
    }
    unsafe fn alloc_zeroed(&self, l: Layout) -> *mut u8 {
        count(l.size() as i64);
        // SAFETY: same layout as asked.
        unsafe { System.alloc_zeroed(l) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new: usize) -> *mut u8 {
        count(new as i64 - l.size() as i64);
        // SAFETY: `p` came from `alloc` with layout `l`.
        unsafe { System.realloc(p, l, new) }
    }
}

/// A hub node (index 0) and its peers, passing datagrams in memory.
struct Net {
    nodes: Vec<Node>,
    buf: Vec<u8>,
    now: Instant,
}

const HUB: u64 = 1;
const FIRST: u64 = 100;

impl Net {
    fn new(peers: u64, plain: bool) -> Net {
        let ids: Vec<NodeId> = std::iter::once(HUB)
            .chain(FIRST..FIRST + peers)
            .map(NodeId::from_const)
            .collect();
        let mut cfg = Config::default();
        cfg.mtu.max_datagram_size = 1472;
        // Room for every peer at the hub.
        cfg.limits.max_sender_records = cfg.limits.max_sender_records.max(peers as usize + 16);
        cfg.limits.max_receiver_records = cfg.limits.max_receiver_records.max(peers as usize + 16);
        cfg.keys.cache_size = cfg.keys.cache_size.max(peers as usize + 16);
        let nodes = ids
            .iter()
            .map(|&id| {
                let sec = if plain {
                    Security::InsecurePlaintext
                } else if id.get() == HUB {
                    exon::proto::crypto::insecure_test_security(id, ids.iter().copied())
                } else {
                    exon::proto::crypto::insecure_test_security(id, [NodeId::from_const(HUB)])
                };
                Node::new(id, sec, cfg.clone(), 1).unwrap()
            })
            .collect();
        Net {
            nodes,
            buf: Vec::with_capacity(64 * 1024),
            now: Instant::now(),
        }
    }

    fn index(id: NodeId) -> usize {
        if id.get() == HUB {
            0
        } else {
            (id.get() - FIRST + 1) as usize
        }
    }

    /// A hub and `peers` peers that have exchanged what they owe at start (clocks, keys).
    fn settled(peers: u64, plain: bool) -> Net {
        let mut net = Net::new(peers, plain);
        net.pump(true);
        net
    }

    /// Moves datagrams until nothing moves; deliveries are taken (acknowledged) only when
    /// `take` is set. Returns the deliveries seen.
    fn pump(&mut self, take: bool) -> u64 {
        self.pump_for(take, usize::MAX)
    }

    /// [`pump`](Self::pump) for at most `rounds` rounds (a round steps every node once).
    fn pump_for(&mut self, take: bool, rounds: usize) -> u64 {
        let mut delivered = 0;
        for _ in 0..rounds {
            let mut moved = 0;
            for i in 0..self.nodes.len() {
                let (m, d) = self.step(i, take);
                moved += m;
                delivered += d;
            }
            if moved == 0 {
                break;
            }
        }
        delivered
    }

    /// Node `i`'s timers, then its outputs: clock stores, datagrams (into their
    /// destinations) and events; the hub's part counted as the hub's. Returns datagrams
    /// moved and deliveries.
    fn step(&mut self, i: usize, take: bool) -> (u64, u64) {
        let now = self.now;
        let in_hub = |is: bool, f: &mut dyn FnMut()| if is { hub(f) } else { f() };
        let (mut moved, mut delivered) = (0, 0);
        in_hub(i == 0, &mut || {
            let n = &mut self.nodes[i];
            if n.poll_timeout().is_some_and(|t| t <= now) {
                n.handle_timeout(now);
            }
        });
        loop {
            self.buf.clear();
            let (mut tx, mut done) = (None, false);
            // Everything but a datagram's delivery is the node's own: handled (an event
            // dropped) inside its accounting.
            in_hub(i == 0, &mut || {
                let n = &mut self.nodes[i];
                match n.poll_output(now, &mut self.buf) {
                    Output::StoreClock(hw) => n.handle_clock_stored(now, hw),
                    Output::Store(w) => n.handle_stored(now, w.seq),
                    Output::Transmit(t) => tx = Some(t),
                    Output::Event(Event::Delivered { id, .. }) => {
                        delivered += 1;
                        if take {
                            n.handle_taken(now, id);
                        }
                    }
                    Output::Event(_) => {}
                    Output::Timeout(_) => done = true,
                }
            });
            if done {
                break;
            }
            let Some(tx) = tx else { continue };
            moved += 1;
            let dst = Self::index(tx.destination);
            let (buf, nodes) = (&self.buf, &mut self.nodes);
            in_hub(dst == 0, &mut || {
                let d = bytes::BytesMut::from(&buf[..tx.size]);
                nodes[dst].handle_datagram_buf(now, d);
            });
        }
        (moved, delivered)
    }

    /// Advances virtual time by `d`, handling timers on the way.
    fn advance(&mut self, d: Duration) {
        let end = self.now + d;
        while self.now < end {
            let next = self
                .nodes
                .iter_mut()
                .filter_map(|n| n.poll_timeout())
                .min()
                .unwrap_or(end)
                .clamp(self.now + Duration::from_millis(1), end);
            self.now = next;
            self.pump(true);
        }
    }

    /// The hub queues one message of `payload` to each of its `k` peers.
    fn send_to_all(&mut self, k: u64, payload: &Bytes) {
        let now = self.now;
        for p in FIRST..FIRST + k {
            self.nodes[0]
                .send(now, NodeId::from_const(p), payload.clone())
                .unwrap();
        }
    }
}

/// Measures the memory per peer with `k` peers, `payload`-byte messages, sealed or
/// (`plain`) in plaintext mode; prints a table whose last line is `key=value` pairs.
pub fn run(k: u64, payload: usize, plain: bool) {
    let bytes = Bytes::from(vec![0x5a; payload]);
    let mut net = Net::settled(k, plain);
    let hub_id = NodeId::from_const(HUB);

    // Active, sending: one message queued to each peer, its slot request out.
    let base = hub_live();
    let now = net.now;
    hub(|| {
        net.send_to_all(k, &bytes);
        let mut buf = Vec::with_capacity(64 * 1024);
        loop {
            match net.nodes[0].poll_output(now, &mut buf) {
                Output::StoreClock(hw) => net.nodes[0].handle_clock_stored(now, hw),
                Output::Store(w) => net.nodes[0].handle_stored(now, w.seq),
                Output::Transmit(_) => buf.clear(),
                Output::Event(_) => {}
                Output::Timeout(_) => break,
            }
        }
    });
    let active_send = (hub_live() - base) as f64 / k as f64;
    let sender_records = net.nodes[0].sender_records();
    drop(net);

    // Active, receiving: every peer's message delivered at the hub and not taken yet (its
    // receiver record holds the slots, the delivery waits for the application).
    let mut net = Net::settled(k, plain);
    let base = hub_live();
    let now = net.now;
    for i in 1..net.nodes.len() {
        net.nodes[i].send(now, hub_id, bytes.clone()).unwrap();
    }
    let delivered = net.pump_for(false, 100);
    let active_recv = (hub_live() - base) as f64 / k as f64;
    let receiver_records = net.nodes[0].receiver_records();
    drop(net);

    // Every exchange acknowledged, records still held (not idle long enough yet).
    let mut net = Net::settled(k, plain);
    let base = hub_live();
    hub(|| net.send_to_all(k, &bytes));
    net.pump(true);
    let settled = (hub_live() - base) as f64 / k as f64;
    let held = net.nodes[0].sender_records();
    // Idle: past the idle timeout, the records are discarded.
    let idle_after = Config::default().timers.idle_timeout + Duration::from_secs(5);
    net.advance(idle_after);
    let idle = (hub_live() - base) as f64 / k as f64;
    let left = net.nodes[0].sender_records() + net.nodes[0].receiver_records();
    let keys = net.nodes[0].cached_keys();
    drop(net);

    // The endpoint: peers added, nothing sent.
    let endpoint = endpoint_per_peer(k);

    let mode = if plain { "plaintext" } else { "sealed" };
    println!("memory per peer ({mode}, {k} peers, {payload} B payloads)");
    println!("{:<58} {:>12}", "what", "bytes/peer");
    let row = |what: String, bytes: f64| println!("{what:<58} {bytes:>12.0}");
    row(
        format!("core, active sender (1 message queued, {sender_records} S records)"),
        active_send,
    );
    row(
        format!(
            "core, active receiver ({delivered} delivered untaken, {receiver_records} R records)"
        ),
        active_recv,
    );
    row(
        format!("core, exchange acknowledged, records held ({held} S records)"),
        settled,
    );
    row(
        format!("core, idle after {idle_after:?} ({left} records, {keys} cached keys)"),
        idle,
    );
    row(
        "endpoint, peer added (address book, known set)".into(),
        endpoint,
    );
    println!(
        "peers={k} sealed={} active_send_bytes={active_send:.0} active_recv_bytes={active_recv:.0} \
         settled_bytes={settled:.0} idle_bytes={idle:.0} endpoint_peer_bytes={endpoint:.0}",
        !plain
    );
}

/// Live bytes per peer added to an endpoint with `add_peer` (nothing sent).
fn endpoint_per_peer(k: u64) -> f64 {
    crate::harness::runtime(0).block_on(async {
        let ep = exon::Endpoint::builder(NodeId::from_const(HUB))
            .insecure_plaintext()
            .bind("127.0.0.1:0")
            .await
            .unwrap();
        ep.stats().await.unwrap();
        let base = live();
        let addr = "127.0.0.1:9".parse().unwrap();
        for p in FIRST..FIRST + k {
            ep.add_peer(NodeId::from_const(p), addr);
        }
        ep.stats().await.unwrap();
        let per = (live() - base) as f64 / k as f64;
        ep.close(Duration::from_millis(10)).await;
        per
    })
}
