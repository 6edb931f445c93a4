//! Durable endpoints of several driver shards (`Builder::durable` with
//! `EndpointConfig::shards`): each shard keeps the peers it owns in a journal of its own
//! (`journal/`, `journal-1/`, ...), and a restart recovers each journal into its shard. An
//! endpoint of two shards, restarted in the middle of traffic with peers of both shards,
//! delivers and sends every message exactly once, hands each recovered message out on the
//! shard that owns its peer, and its durable channels go on; its calls are recovered from
//! both journals and their held requests released by their own shards. A directory keeps
//! the number of shards it was used with.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use exon::endpoint::{shard_of, BindError, Deliveries, Endpoint, Kind};
use exon::NodeId;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio::time::timeout;

use super::common::{bind_durable, cfg, stop};
use super::durable_streams::data;
use super::recovered_calls::{serve_slowly, Runs};

const S: NodeId = NodeId::from_const(1);
const SHARDS: usize = 2;
const LIMIT: Duration = Duration::from_secs(30);

/// Sealed security for node `id`, with nodes 1 to 63 in its keyring.
fn security(id: NodeId) -> exon::proto::Security {
    exon::proto::crypto::insecure_test_security(id, (1..64).map(NodeId::from_const))
}

/// Two peers owned by each shard of an endpoint of [`SHARDS`] shards.
fn peers() -> Vec<NodeId> {
    let mut by_shard = vec![Vec::new(); SHARDS];
    for id in 2..64 {
        let p = NodeId::new(id).unwrap();
        let owned = &mut by_shard[shard_of(p, SHARDS)];
        if owned.len() < 2 {
            owned.push(p);
        }
    }
    assert!(by_shard.iter().all(|o| o.len() == 2));
    by_shard.concat()
}

/// A durable endpoint for `id` in `dir` with `shards` driver shards.
async fn durable(id: NodeId, dir: &Path, shards: usize) -> Result<Endpoint, BindError> {
    durable_acking(id, dir, shards, false).await
}

/// As [`durable`], acknowledging after processing (`ack_later`) or at the take.
async fn durable_acking(
    id: NodeId,
    dir: &Path,
    shards: usize,
    ack_later: bool,
) -> Result<Endpoint, BindError> {
    let mut c = cfg()
        .with_shards(shards)
        .with_call_deadline(Duration::from_secs(5));
    c.ack_after_processing = ack_later;
    bind_durable(id, dir, c, security(id)).await
}

fn pair(s: &Endpoint, peer: &exon::endpoint::Handle) {
    s.add_peer(peer.id(), peer.local_addr());
    peer.add_peer(S, s.local_addr());
}

fn item(x: u64) -> Vec<u8> {
    x.to_be_bytes().to_vec()
}

fn num(p: &[u8]) -> u64 {
    u64::from_be_bytes(p[..8].try_into().unwrap())
}

/// Sends items `range` to `to` on channel 0 of `h`, then waits for every receipt (all must
/// be acknowledged). With `tolerant`, stops quietly at the first send refused (the
/// endpoint stopped under it).
fn send_channel(
    h: exon::endpoint::Handle,
    to: NodeId,
    range: std::ops::Range<u64>,
    tolerant: bool,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let ch = h.channel(to, 0).unwrap();
        let mut receipts = Vec::new();
        for x in range {
            match timeout(LIMIT, ch.send(item(x)))
                .await
                .expect("room in time")
            {
                Ok(r) => receipts.push(r),
                Err(e) => {
                    assert!(tolerant, "send {x} to {to}: {e}");
                    return;
                }
            }
        }
        if tolerant {
            return; // the endpoint stops before the verdicts
        }
        for r in receipts {
            let v = timeout(LIMIT, r).await.expect("verdict in time");
            assert!(v.is_ok(), "to {to}: {v:?}");
        }
    })
}

/// What a peer received from S on channel 0: (item, number, redelivery), in order.
type Got = Vec<(u64, u64, bool)>;

/// A peer's reader: takes `n` messages from S, pausing after `pause_after` until `go`.
fn read_peer(
    mut e: Endpoint,
    n: u64,
    pause_after: u64,
    mut go: watch::Receiver<bool>,
) -> JoinHandle<(Endpoint, Got)> {
    tokio::spawn(async move {
        let mut got = Vec::new();
        while (got.len() as u64) < n {
            if got.len() as u64 == pause_after {
                go.wait_for(|g| *g).await.unwrap();
            }
            let m = timeout(LIMIT, e.recv()).await.expect("in time").unwrap();
            let Kind::Channel { channel: 0, seq } = m.kind() else {
                panic!("not channel 0: {:?}", m.kind());
            };
            got.push((num(&m.payload), seq, m.is_redelivery()));
        }
        (e, got)
    })
}

/// What S took: per (peer, item), (unflagged, flagged) counts, and the messages that came
/// on a shard that does not own their sender.
#[derive(Default)]
struct Tally {
    seen: HashMap<(NodeId, u64), (u32, u32)>,
    flagged_on: [u32; SHARDS],
    misplaced: Vec<(NodeId, u64, usize)>,
}

/// Takes S's deliveries on `shard` until every peer that shard owns has sent all `n`
/// items.
fn read_shard(
    shard: usize,
    mut d: Deliveries,
    peers: Vec<NodeId>,
    n: u64,
    tally: Arc<Mutex<Tally>>,
) -> JoinHandle<()> {
    tokio::spawn(async move {
        let owned: Vec<NodeId> = peers
            .into_iter()
            .filter(|&p| shard_of(p, SHARDS) == shard)
            .collect();
        let done = |t: &Tally| {
            owned
                .iter()
                .all(|&p| (0..n).all(|x| t.seen.contains_key(&(p, x))))
        };
        while !done(&tally.lock().unwrap()) {
            let m = timeout(LIMIT, d.recv()).await.expect("in time").unwrap();
            let x = num(&m.payload);
            let mut t = tally.lock().unwrap();
            m.ack();
            if shard_of(m.from, SHARDS) != shard {
                t.misplaced.push((m.from, x, shard));
            }
            let e = t.seen.entry((m.from, x)).or_default();
            if m.is_redelivery() {
                e.1 += 1;
                t.flagged_on[shard] += 1;
            } else {
                e.0 += 1;
            }
        }
    })
}

/// S (two shards, durable) and four durable peers, two owned by each shard, exchange on
/// durable channels both ways; S stops (as a crash would) with messages from every peer
/// delivered and not taken, and messages to every peer unacknowledged, and restarts on its
/// directory. Every message is handed to each side's application exactly once (S's untaken
/// ones flagged, on the shard that owns their sender), S's recovered messages go again to
/// peers of both shards from their own shards, and the channels go on in order.
#[tokio::test]
async fn a_two_shard_durable_endpoint_restarted_mid_traffic_keeps_exactly_once() {
    let n = 200u64;
    let peers = peers();
    let sdir = tempfile::tempdir().unwrap();
    let pdirs: Vec<_> = peers.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    let mut s = durable_acking(S, sdir.path(), SHARDS, true).await.unwrap();
    assert_eq!(s.shards(), SHARDS);
    let (go_tx, go) = watch::channel(false);
    let mut handles = Vec::new();
    let mut readers = Vec::new();
    let mut sent_by_peers = Vec::new();
    for (&p, dir) in peers.iter().zip(&pdirs) {
        let e = durable(p, dir.path(), 1).await.unwrap();
        pair(&s, &e.handle());
        handles.push(e.handle());
        sent_by_peers.push(send_channel(e.handle(), S, 0..n, false));
        readers.push(read_peer(e, n, n / 4, go.clone()));
    }
    let mut first_run = Vec::new();
    for &p in &peers {
        first_run.push(send_channel(s.handle(), p, 0..n, true));
    }
    // S processes (acknowledges) the first quarter of each peer's items, takes more without
    // acknowledging them, and waits until every item is delivered (the rest untaken) and
    // every one of its own sends is made.
    let tally = Arc::new(Mutex::new(Tally::default()));
    let mut unprocessed = Vec::new();
    while peers.iter().any(|&p| {
        let t = tally.lock().unwrap();
        (0..n / 4).any(|x| !t.seen.contains_key(&(p, x)))
    }) {
        let m = timeout(LIMIT, s.recv()).await.expect("in time").unwrap();
        let x = num(&m.payload);
        if x < n / 4 {
            tally.lock().unwrap().seen.entry((m.from, x)).or_default().0 += 1;
            m.ack();
        } else {
            unprocessed.push(m);
        }
    }
    timeout(LIMIT, async {
        while s.stats().await.unwrap().node.delivered < peers.len() as u64 * n {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("every item delivered to S");
    for t in first_run {
        t.await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    stop(s).await;
    drop(unprocessed);

    let mut s = durable_acking(S, sdir.path(), SHARDS, true).await.unwrap();
    let on_disk = |name: &str| sdir.path().join(name).exists();
    assert!(on_disk("journal") && on_disk("journal-1") && !on_disk("journal-2"));
    let recorded = std::fs::read_to_string(sdir.path().join("shards")).unwrap();
    assert_eq!(recorded.trim(), "2");
    for h in &handles {
        pair(&s, h);
    }
    // S's messages without a verdict: recovered from both journals, on their channels.
    let recovered: Vec<_> = s
        .take_recovered()
        .into_iter()
        .filter(|r| !r.settled)
        .collect();
    let mut recovered_on = [0; SHARDS];
    for r in &recovered {
        assert_eq!(r.channel.map(|c| c.0), Some(0), "a channel message");
        recovered_on[shard_of(r.to, SHARDS)] += 1;
    }
    assert!(
        recovered_on.iter().all(|&k| k > 0),
        "messages recovered for peers of both shards: {recovered_on:?}"
    );
    // Each channel goes on from where its journal left it.
    let mut second_run = Vec::new();
    for &p in &peers {
        let next = s.channel(p, 0).unwrap().next_seq();
        assert!(
            (n / 4..=n).contains(&next),
            "channel to {p} resumes at {next}"
        );
        second_run.push(send_channel(s.handle(), p, next..n, false));
    }
    let (h, deliveries) = s.into_deliveries();
    assert_eq!(deliveries.len(), SHARDS);
    let shard_readers: Vec<_> = deliveries
        .into_iter()
        .enumerate()
        .map(|(i, d)| read_shard(i, d, peers.clone(), n, tally.clone()))
        .collect();
    go_tx.send(true).unwrap();
    for r in recovered {
        let v = timeout(LIMIT, r.receipt)
            .await
            .expect("recovered verdict in time");
        assert!(v.is_ok(), "a recovered message: {v:?}");
    }
    for t in second_run.into_iter().chain(sent_by_peers) {
        t.await.unwrap();
    }
    for t in shard_readers {
        t.await.unwrap();
    }
    // S took every item of every peer once unflagged at most, at least once; what it had
    // not taken came back flagged, on both shards, each on its sender's shard.
    let t = std::mem::take(&mut *tally.lock().unwrap());
    assert!(
        t.misplaced.is_empty(),
        "on another shard: {:?}",
        t.misplaced
    );
    for &p in &peers {
        for x in 0..n {
            let (plain, flagged) = t.seen.get(&(p, x)).copied().unwrap_or_default();
            assert!(plain <= 1, "{p} item {x} taken {plain} times unflagged");
            assert!(plain + flagged >= 1, "{p} item {x} never taken");
        }
    }
    assert!(
        t.flagged_on.iter().all(|&k| k > 0),
        "redeliveries on both shards: {:?}",
        t.flagged_on
    );
    // Every peer got S's items once each, in order, with their numbers.
    for r in readers {
        let (e, got) = r.await.unwrap();
        let want: Got = (0..n).map(|x| (x, x, false)).collect();
        assert_eq!(got, want, "at {}", e.id());
        stop(e).await;
    }
    drop(h.close(Duration::ZERO).await);
}

/// S (two shards, durable) writes a durable stream to a peer of each shard and stops
/// mid-stream; restarted, it gets both streams back (one from each shard's journal), goes
/// on writing each where its journal says, and each peer reads exactly the bytes written.
#[tokio::test]
async fn a_two_shard_durable_endpoint_gets_back_the_streams_of_both_shards() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let whole = data(512 << 10);
    let peers: Vec<NodeId> = peers().into_iter().step_by(2).collect();
    assert_ne!(shard_of(peers[0], SHARDS), shard_of(peers[1], SHARDS));
    let sdir = tempfile::tempdir().unwrap();
    let pdirs: Vec<_> = peers.iter().map(|_| tempfile::tempdir().unwrap()).collect();
    let s = durable(S, sdir.path(), SHARDS).await.unwrap();
    let mut handles = Vec::new();
    let mut readers = Vec::new();
    for (&p, dir) in peers.iter().zip(&pdirs) {
        let mut e = durable(p, dir.path(), 1).await.unwrap();
        pair(&s, &e.handle());
        handles.push(e.handle());
        let mut w = s.open_stream(p).unwrap();
        let first = whole[..256 << 10].to_vec();
        tokio::spawn(async move {
            // Until S stops under it.
            let _ = w.write_all(&first).await;
            let _ = w.flush().await;
            std::future::pending::<()>().await;
            drop(w);
        });
        let len = whole.len();
        readers.push(tokio::spawn(async move {
            let mut r = timeout(LIMIT, e.accept_stream()).await.unwrap().unwrap();
            let mut got = Vec::new();
            let mut buf = vec![0u8; 7000];
            while got.len() < len {
                let k = timeout(LIMIT, r.read(&mut buf))
                    .await
                    .expect("in time")
                    .unwrap();
                assert!(k > 0, "ended after {} bytes", got.len());
                got.extend_from_slice(&buf[..k]);
            }
            // Read to the end, and kept open until the writer is done: a stream dropped
            // with its own half open resets, and that reset (a message of its own, not
            // ordered with the ACK of the writer's end) may reach the writer first.
            let k = timeout(LIMIT, r.read(&mut buf)).await.expect("end in time");
            assert_eq!(k.unwrap(), 0, "bytes past the end");
            (e, got, r)
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop(s).await;
    let mut s = durable(S, sdir.path(), SHARDS).await.unwrap();
    for h in &handles {
        pair(&s, h);
    }
    let streams = s.take_recovered_streams();
    let mut to: Vec<NodeId> = streams.iter().map(|w| w.peer()).collect();
    to.sort();
    assert_eq!(to, peers, "a stream from each shard's journal");
    let mut writers = Vec::new();
    for mut w in streams {
        assert!(w.is_opener());
        let from = w.write_offset() as usize;
        assert!(from <= 256 << 10, "{from}");
        let rest = whole[from..].to_vec();
        writers.push(tokio::spawn(async move {
            w.write_all(&rest).await.unwrap();
            w.shutdown().await.unwrap();
            timeout(LIMIT, w.finished()).await.unwrap().unwrap();
        }));
    }
    for w in writers {
        timeout(LIMIT, w).await.unwrap().unwrap();
    }
    let mut open = Vec::new();
    for r in readers {
        let (e, got, r) = timeout(LIMIT, r).await.unwrap().unwrap();
        open.push(r);
        assert!(
            got == whole,
            "bytes exact at {}: {} of {}",
            e.id(),
            got.len(),
            whole.len()
        );
        stop(e).await;
    }
    stop(s).await;
}

/// A durable caller of two shards calls servers owned by both shards, stops while its
/// requests are in the servers' slow handlers, and restarts: the calls come back from both
/// journals, each gets its reply once and each request ran once. Then, quiet, its journals
/// shrink to nothing live: each call's held request was released by the shard whose node
/// holds it (were they all released by one shard, the other's would stay).
#[tokio::test]
async fn a_two_shard_durable_caller_recovers_its_calls_and_releases_them_per_shard() {
    let n = 10u64;
    let servers = peers();
    let cdir = tempfile::tempdir().unwrap();
    let mut ends = Vec::new();
    let mut runs = Vec::new();
    for &id in &servers {
        let e = Endpoint::builder(id)
            .security(security(id))
            .config(cfg())
            .bind("127.0.0.1:0")
            .await
            .unwrap();
        runs.push(Arc::new(Runs::default()));
        serve_slowly(&e, runs[runs.len() - 1].clone());
        ends.push(e);
    }
    let caller = durable(S, cdir.path(), SHARDS).await.unwrap();
    for e in &ends {
        pair(&caller, &e.handle());
    }
    for &to in &servers {
        for x in 0..n {
            let h = caller.handle();
            tokio::spawn(async move { drop(h.call(to, item(x)).await) });
        }
    }
    // Every request is in its server's slow handler: the caller stops.
    let began = || {
        runs.iter()
            .map(|r| r.began.load(Ordering::SeqCst))
            .sum::<usize>()
    };
    timeout(LIMIT, async {
        while began() < servers.len() * n as usize {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await
    .expect("every request reaches its handler");
    stop(caller).await;
    let mut caller = durable(S, cdir.path(), SHARDS).await.unwrap();
    for e in &ends {
        pair(&caller, &e.handle());
    }
    let calls = caller.take_recovered_calls();
    let mut per_shard = [0; SHARDS];
    let mut replies = Vec::new();
    for c in calls {
        per_shard[shard_of(c.to, SHARDS)] += 1;
        let (to, x) = (c.to, num(&c.request));
        replies.push(tokio::spawn(async move { (to, x, c.reply.await) }));
    }
    assert_eq!(
        per_shard,
        [2 * n; SHARDS],
        "every call recovered, from both journals"
    );
    for r in replies {
        let (to, x, reply) = timeout(LIMIT, r).await.unwrap().unwrap();
        let reply = reply.unwrap_or_else(|e| panic!("call {x} to {to}: {e:?}"));
        assert_eq!(num(&reply), x * x);
    }
    // New calls, on both shards, complete too.
    for &to in &servers {
        let y = caller.call(to, item(1000)).await.unwrap();
        assert_eq!(num(&y), 1_000_000);
    }
    for r in &runs {
        let done = r.done.lock().unwrap().clone();
        assert_eq!(done.len() as u64, n + 1, "{done:?}");
        assert!(done.values().all(|&k| k == 1), "each ran once: {done:?}");
    }
    // Quiet: every held request released, every journal compacted to nothing live.
    let quiet = timeout(Duration::from_secs(10), async {
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let b = caller.stats().await.unwrap().journal_bytes;
            if b < 256 * SHARDS as u64 {
                return b;
            }
        }
    })
    .await;
    assert!(quiet.is_ok(), "held requests left in a journal");
    stop(caller).await;
    for e in ends {
        stop(e).await;
    }
}

/// A durable directory is bound with the number of shards it was used with: each journal
/// holds the peers its shard owned, and which shard owns a peer changes with the number.
#[tokio::test]
async fn a_durable_directory_keeps_its_number_of_shards() {
    let changed = |r: Result<Endpoint, BindError>| match r {
        Err(BindError::DurableShardsChanged { recorded, asked }) => (recorded, asked),
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("bound with another number of shards"),
    };
    // A directory of one shard (the layout it always had: `journal/`, no `shards` file).
    let one = tempfile::tempdir().unwrap();
    stop(durable(S, one.path(), 1).await.unwrap()).await;
    assert!(!one.path().join("shards").exists());
    assert!(!one.path().join("journal-1").exists());
    assert_eq!(changed(durable(S, one.path(), 2).await), (1, 2));
    stop(durable(S, one.path(), 1).await.unwrap()).await;
    // A directory of three.
    let three = tempfile::tempdir().unwrap();
    stop(durable(S, three.path(), 3).await.unwrap()).await;
    for j in ["journal", "journal-1", "journal-2"] {
        assert!(three.path().join(j).is_dir(), "{j}");
    }
    assert_eq!(changed(durable(S, three.path(), 1).await), (3, 1));
    assert_eq!(changed(durable(S, three.path(), 2).await), (3, 2));
    // Its `shards` file lost: the journals say how many there were.
    std::fs::remove_file(three.path().join("shards")).unwrap();
    assert_eq!(changed(durable(S, three.path(), 2).await), (3, 2));
    stop(durable(S, three.path(), 3).await.unwrap()).await;
    assert!(three.path().join("shards").exists(), "recorded again");
    // A directory not made yet, the clock kept elsewhere: made, with its journals.
    for shards in [1, 2] {
        let dir = one.path().join(format!("new-{shards}"));
        let e = Endpoint::builder(S)
            .security(security(S))
            .config(cfg().with_shards(shards))
            .clock_store(exon::endpoint::MemoryStore::new())
            .durable(&dir)
            .bind("127.0.0.1:0")
            .await
            .unwrap();
        stop(e).await;
        assert!(dir
            .join(format!("journal{}", ["", "-1"][shards - 1]))
            .is_dir());
    }
}
