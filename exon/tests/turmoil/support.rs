//! Shared pieces of the turmoil tests: a receiving host that logs deliveries, a sending
//! client, and a step loop that applies network actions at given simulated times.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exon::endpoint::{Endpoint, EndpointConfig, MemoryStore};
use exon::proto::Config;
use exon::NodeId;
use turmoil::net::UdpSocket;
use turmoil::Sim;

/// Port every simulated endpoint binds.
pub const PORT: u16 = 9000;
/// The receiving node.
pub const SERVER: NodeId = NodeId::from_const(1000);

/// Deliveries seen by the server: (sender, message number), in order.
pub type Log = Arc<Mutex<Vec<(NodeId, u32)>>>;

/// A configuration with timers suited to simulated runs.
pub fn cfg() -> EndpointConfig {
    EndpointConfig::default().with_protocol({
        let mut conf = Config::default();
        conf.timers.initial_rtt = Duration::from_millis(50);
        conf.timers.probe_interval = Duration::from_millis(200);
        conf.timers.max_probe_interval = Duration::from_secs(2);
        conf.timers.idle_timeout = Duration::from_secs(1);
        conf
    })
}

/// A simulation of `secs` simulated seconds with a fixed seed: 7, or `EXON_TURMOIL_SEED`
/// when set (to sweep seeds by hand: `for s in $(seq 1 20); do EXON_TURMOIL_SEED=$s cargo
/// test -p exon --test turmoil; done`).
pub fn sim(secs: u64, f: impl FnOnce(&mut turmoil::Builder)) -> Sim<'static> {
    let seed = std::env::var("EXON_TURMOIL_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(7);
    sim_seeded(secs, seed, f)
}

/// As [`sim`], with the seed `seed` whatever the environment says.
pub fn sim_seeded(secs: u64, seed: u64, f: impl FnOnce(&mut turmoil::Builder)) -> Sim<'static> {
    let mut b = turmoil::Builder::new();
    b.simulation_duration(Duration::from_secs(secs));
    f(&mut b);
    use rand::SeedableRng;
    b.build_with_rng(Box::new(rand::rngs::SmallRng::seed_from_u64(seed)))
}

/// Adds host `name` running the server endpoint on `store`, logging every delivery.
pub fn server(sim: &mut Sim<'static>, name: &'static str, store: MemoryStore, log: Log) {
    sim.host(name, move || {
        let (store, log) = (store.clone(), log.clone());
        async move {
            let socket = UdpSocket::bind(("0.0.0.0", PORT)).await?;
            let mut ep = Endpoint::builder(SERVER)
                .security(security(SERVER))
                .config(cfg())
                .clock_store(store)
                .with_socket(socket)?;
            while let Some(m) = ep.recv().await {
                // A message is its number, then (large messages) that number's low byte
                // repeated: anything else arrived altered or in part.
                let n = u32::from_be_bytes(m.payload[..4].try_into()?);
                assert!(
                    m.payload[4..].iter().all(|b| *b == n as u8),
                    "message {n} altered"
                );
                log.lock().unwrap().push((m.from, n));
            }
            Ok(())
        }
    });
}

/// Starts an endpoint with id `id` on `PORT`, its clock in memory from 1, knowing no peer.
pub async fn endpoint(id: NodeId) -> Result<Endpoint, Box<dyn std::error::Error>> {
    let socket = UdpSocket::bind(("0.0.0.0", PORT)).await?;
    Ok(Endpoint::builder(id)
        .security(security(id))
        .config(cfg())
        .clock_store(MemoryStore::starting_at(1))
        .with_socket(socket)?)
}

/// Starts a client endpoint with id `id` that knows the server host `server`.
pub async fn client(id: NodeId, server: &str) -> Result<Endpoint, Box<dyn std::error::Error>> {
    client_with(id, server, cfg()).await
}

/// [`client`] with configuration `config`.
pub async fn client_with(
    id: NodeId,
    server: &str,
    config: EndpointConfig,
) -> Result<Endpoint, Box<dyn std::error::Error>> {
    let socket = UdpSocket::bind(("0.0.0.0", PORT)).await?;
    let ep = Endpoint::builder(id)
        .security(security(id))
        .config(config)
        .clock_store(MemoryStore::starting_at(1))
        .with_socket(socket)?;
    ep.add_peer(SERVER, SocketAddr::new(turmoil::lookup(server), PORT));
    Ok(ep)
}

/// Sends messages `range` to the server, waits for every receipt, and returns.
pub async fn send_all(ep: &Endpoint, range: std::ops::Range<u32>) -> turmoil::Result {
    let mut receipts = Vec::new();
    for i in range {
        receipts.push(ep.send(SERVER, i.to_be_bytes().to_vec()).await?);
    }
    for r in receipts {
        r.await?;
    }
    Ok(())
}

/// Sends messages `range` to the server, message `i` of `size(i)` bytes (at least 4),
/// waits for every receipt, and returns.
pub async fn send_all_sized(
    ep: &Endpoint,
    range: std::ops::Range<u32>,
    size: impl Fn(u32) -> usize,
) -> turmoil::Result {
    let mut receipts = Vec::new();
    for i in range {
        let mut m = i.to_be_bytes().to_vec();
        m.resize(size(i).max(4), i as u8);
        receipts.push(ep.send(SERVER, m).await?);
    }
    for r in receipts {
        r.await?;
    }
    Ok(())
}

/// Steps the simulation to completion, calling `at(elapsed, sim)` after each step.
pub fn run(sim: &mut Sim<'static>, mut at: impl FnMut(Duration, &mut Sim<'static>)) {
    loop {
        let done = sim.step().expect("simulation failed");
        let t = sim.elapsed();
        at(t, sim);
        if done {
            return;
        }
    }
}

/// Checks that `from` delivered exactly the numbers in `expect`, each once.
pub fn assert_exactly_once(log: &Log, from: NodeId, expect: std::ops::Range<u32>) {
    let log = log.lock().unwrap();
    let mut got: Vec<u32> = log
        .iter()
        .filter(|(f, _)| *f == from)
        .map(|e| e.1)
        .collect();
    let total = got.len();
    got.sort_unstable();
    got.dedup();
    assert_eq!(
        total,
        got.len(),
        "{} duplicate deliveries from {from}",
        total - got.len()
    );
    assert_eq!(
        got,
        expect.collect::<Vec<_>>(),
        "missing deliveries from {from}"
    );
}

/// Sealed datagrams with keys derived from the node ids, ids 0-63 and 1000-1063 known.
pub fn security(id: exon::NodeId) -> exon::proto::Security {
    exon::proto::crypto::insecure_test_security(
        id,
        (0..64).chain(1000..1064).map(exon::NodeId::from_const),
    )
}

/// Adds host `nat`: a NAT in front of one inside host (whoever sends to its `PORT`) that
/// relays its datagrams to `server`'s `PORT` from an outside port it changes every `every`
/// (a rebinding: what came to the old outside port after the change is lost, as when a
/// real NAT's mapping times out), and relays the server's datagrams back.
pub fn nat(sim: &mut turmoil::Sim<'static>, server: &'static str, every: Duration) {
    sim.host("nat", move || async move {
        let inside = UdpSocket::bind(("0.0.0.0", PORT)).await?;
        let server = SocketAddr::new(turmoil::lookup(server), PORT);
        let mut port = PORT + 1;
        let mut outside = UdpSocket::bind(("0.0.0.0", port)).await?;
        let mut caller: Option<SocketAddr> = None;
        let mut next = tokio::time::Instant::now() + every;
        let (mut a, mut b) = (vec![0u8; 65536], vec![0u8; 65536]);
        loop {
            tokio::select! {
                r = inside.recv_from(&mut a) => {
                    let (len, from) = r?;
                    caller = Some(from);
                    let _ = outside.send_to(&a[..len], server).await;
                }
                r = outside.recv_from(&mut b) => {
                    let (len, from) = r?;
                    if let (Some(to), true) = (caller, from == server) {
                        let _ = inside.send_to(&b[..len], to).await;
                    }
                }
                _ = tokio::time::sleep_until(next) => {
                    port += 1;
                    outside = UdpSocket::bind(("0.0.0.0", port)).await?;
                    next += every;
                }
            }
        }
    });
}
