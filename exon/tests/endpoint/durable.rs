//! Durable endpoints (`Builder::durable`) over real loopback UDP: a receiver restarted in
//! the middle of a stream leaves nothing in doubt and delivers nothing twice unflagged; a
//! sender restarted with messages in flight sends them again under their stable ids; a
//! quiet durable endpoint's journal shrinks back to nothing.

use std::collections::HashMap;
use std::path::Path;
use std::time::Duration;

use exon::endpoint::{Endpoint, Error, ReceiptError};
use exon::NodeId;
use tokio::time::timeout;

use super::common::{cfg, security};

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const LIMIT: Duration = Duration::from_secs(30);

async fn start(id: NodeId, dir: Option<&Path>) -> Endpoint {
    let b = Endpoint::builder(id).security(security(id)).config(cfg());
    let b = match dir {
        Some(d) => b.durable(d),
        None => b,
    };
    b.bind("127.0.0.1:0").await.unwrap()
}

fn num(payload: &[u8]) -> u32 {
    u32::from_be_bytes(payload[..4].try_into().unwrap())
}

/// Unflagged and flagged deliveries per message.
#[derive(Default)]
struct Tally(HashMap<u32, (u32, u32)>);

impl Tally {
    fn see(&mut self, m: &exon::Message) {
        let e = self.0.entry(num(&m.payload)).or_default();
        if m.is_redelivery() {
            e.1 += 1;
        } else {
            e.0 += 1;
        }
    }
}

#[tokio::test]
async fn a_durable_receiver_restarted_mid_stream_leaves_nothing_in_doubt() {
    let dir = tempfile::tempdir().unwrap();
    let n = 2000u32;
    let a = start(A, None).await;
    let mut b = start(B, Some(dir.path())).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let h = a.handle();
    let sender = tokio::spawn(async move {
        let mut rs = Vec::new();
        for i in 0..n {
            rs.push(h.send(B, i.to_be_bytes().to_vec()).await.unwrap());
        }
        let mut out = Vec::new();
        for r in rs {
            out.push(timeout(LIMIT, r).await.expect("verdict in time"));
        }
        out
    });
    let mut tally = Tally::default();
    while tally.0.len() < (n / 3) as usize {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        tally.see(&m);
    }
    // The process dies: no linger, what the application had not taken is gone with it.
    drop(b.close(Duration::ZERO).await);
    drop(b);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut b = start(B, Some(dir.path())).await;
    b.add_peer(A, a.local_addr());
    a.add_peer(B, b.local_addr());
    let outcomes = {
        let reader = async {
            loop {
                let m = b.recv().await.unwrap();
                tally.see(&m);
            }
        };
        tokio::select! {
            o = sender => o.unwrap(),
            _ = reader => unreachable!(),
        }
    };
    let doubt = outcomes
        .iter()
        .filter(|r| **r == Err(ReceiptError::InDoubt))
        .count();
    assert_eq!(doubt, 0, "a durable receiver leaves nothing in doubt");
    assert!(
        outcomes.iter().all(|r| r.is_ok()),
        "every message acknowledged"
    );
    // Each message was handed to the application, unflagged at most once: what was
    // delivered and not taken at the crash comes back flagged (it may have been seen).
    for i in 0..n {
        let (plain, flagged) = tally.0.get(&i).copied().unwrap_or_default();
        assert!(plain <= 1, "message {i} handed out {plain} times unflagged");
        assert!(plain + flagged >= 1, "message {i} never handed out");
    }
    // Quiet, the receiver's journal compacts back to nothing live.
    tokio::time::sleep(Duration::from_millis(1800)).await;
    let stats = b.stats().await.unwrap();
    assert!(stats.journal_commits > 0);
    assert!(
        stats.journal_bytes < 4096,
        "{} bytes left in a quiet journal",
        stats.journal_bytes
    );
}

#[tokio::test]
async fn a_durable_sender_restarted_sends_again_under_its_stable_ids() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let n = 600u32;
    let mut b = start(B, Some(db.path())).await;
    let a = start(A, Some(da.path())).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    // B reads slowly, so that most of A's messages are still in flight at A's crash.
    let mut stored = Vec::new();
    for i in 0..n {
        let mut r = a.send(B, i.to_be_bytes().to_vec()).await.unwrap();
        if i % 50 == 49 {
            stored.push(timeout(LIMIT, r.stored()).await.unwrap().unwrap());
        }
    }
    let mut tally = Tally::default();
    for _ in 0..50 {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        tally.see(&m);
    }
    drop(a.close(Duration::ZERO).await);
    drop(a);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut a = start(A, Some(da.path())).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let recovered: Vec<_> = a.take_recovered().into_iter().map(|r| r.receipt).collect();
    assert!(a.take_recovered().is_empty(), "taken once");
    let ids: Vec<_> = recovered.iter().map(|r| r.id()).collect();
    for id in &stored {
        // Stored before the crash and not yet acknowledged: recovered under its id.
        assert!(ids.contains(id) || tally.0.len() >= n as usize, "{id} lost");
    }
    let bh = b.handle();
    let reader = tokio::spawn(async move {
        while let Some(m) = b.recv().await {
            tally.see(&m);
            if tally.0.len() == n as usize {
                break;
            }
        }
        tally
    });
    for mut r in recovered {
        assert_eq!(r.stored().await, Ok(r.id()));
        let v = match timeout(Duration::from_secs(5), r).await {
            Ok(v) => v,
            Err(_) => {
                let s = a.stats().await.unwrap();
                let t = bh.stats().await.unwrap();
                eprintln!(
                    "B: in {:?} out {:?} delivered {} taken {} journal {} {} {} held_back {}",
                    t.node.frames_in,
                    t.node.frames_out,
                    t.node.delivered,
                    t.node.taken,
                    t.journal_commits,
                    t.journal_writes,
                    t.journal_bytes,
                    t.node.held_back
                );
                panic!(
                    "stuck: A {:?} in {:?} out {:?} sent {} acked {} rec {}",
                    s.node.frames_in,
                    s.node.frames_in,
                    s.node.frames_out,
                    s.node.sent,
                    s.node.acknowledged,
                    s.node.recovered_messages
                );
            }
        };
        assert_eq!(v.map(|_| ()), Ok(()));
    }
    eprintln!(
        "recovered {} stats {:?}",
        ids.len(),
        a.stats().await.map(|s| (
            s.node.sent,
            s.node.acknowledged,
            s.node.recovered_messages,
            s.journal_commits
        ))
    );
    let tally = timeout(LIMIT, reader).await.unwrap().unwrap();
    // Every message stored before the crash got through, unflagged, once.
    assert_eq!(tally.0.len(), n as usize, "every message delivered");
    assert!(tally
        .0
        .values()
        .all(|&(plain, flagged)| plain == 1 && flagged == 0));
    assert_eq!(
        a.send(B, vec![0; 4]).await.map(|_| ()),
        Ok(()),
        "the restarted sender sends"
    );
    let plain = start(NodeId::from_const(3), None).await;
    plain.add_peer(B, a.local_addr());
    let mut r = plain.send(B, vec![]).await.unwrap();
    assert_eq!(r.stored().await, Err(Error::NotDurable));
}

/// Group commit with a delay: the records of many sends gather into few syncs, and none is
/// reported stored before the delay has passed.
#[tokio::test]
async fn a_commit_delay_gathers_records_into_few_syncs() {
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let journal = exon::durable::JournalConfig {
        commit_delay: Duration::from_millis(300),
        ..Default::default()
    };
    let a = Endpoint::builder(A)
        .security(security(A))
        .config(cfg())
        .durable_with(da.path(), journal)
        .bind("127.0.0.1:0")
        .await
        .unwrap();
    let mut b = start(B, Some(db.path())).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let t = std::time::Instant::now();
    let mut receipts = Vec::new();
    for i in 0..50u32 {
        receipts.push(a.send(B, i.to_be_bytes().to_vec()).await.unwrap());
    }
    let last = receipts.last_mut().unwrap();
    timeout(LIMIT, last.stored()).await.unwrap().unwrap();
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "stored before the delay"
    );
    let s = a.stats().await.unwrap();
    assert!(
        s.journal_commits <= 2,
        "{} syncs for 50 sends",
        s.journal_commits
    );
    assert!(s.journal_writes >= 50);
    tokio::spawn(async move { while b.recv().await.is_some() {} });
    for r in receipts {
        assert!(timeout(LIMIT, r).await.unwrap().is_ok());
    }
}

/// Issue 42, item 1, over loopback: a durable receiver hands M to its application (which
/// does not acknowledge it before the process dies), then restarts with its journal
/// directory deleted and its clock kept. The new journal covers nothing from before it:
/// the sender hears DOUBT and reports M in doubt, and M is never delivered again. With
/// `journal_covers_incarnations` off, the journal answers LOST and M comes twice.
#[tokio::test]
async fn a_durable_receiver_whose_journal_was_deleted_leaves_in_doubt_what_it_delivered() {
    for rule in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let a = start(A, None).await;
        let bind_b = || {
            let mut rules = exon::proto::Rules::ALL;
            rules.journal_covers_incarnations = rule;
            let c = cfg().with_ack_after_processing(true).with_rules(rules);
            Endpoint::builder(B)
                .security(security(B))
                .config(c)
                .durable(dir.path())
                .bind("127.0.0.1:0")
        };
        let mut b = bind_b().await.unwrap();
        a.add_peer(B, b.local_addr());
        b.add_peer(A, a.local_addr());
        let receipt = a.send(B, b"M".to_vec()).await.unwrap();
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        assert_eq!(&m.payload[..], b"M");
        drop(m);
        drop(b.close(Duration::ZERO).await);
        drop(b);
        std::fs::remove_dir_all(dir.path().join("journal")).unwrap();
        let mut b = bind_b().await.unwrap();
        b.add_peer(A, a.local_addr());
        a.add_peer(B, b.local_addr());
        if rule {
            let verdict = timeout(LIMIT, receipt).await.unwrap();
            assert!(matches!(verdict, Err(ReceiptError::InDoubt)), "{verdict:?}");
            let again = timeout(Duration::from_millis(500), b.recv()).await;
            assert!(again.is_err(), "M delivered once");
        } else {
            // LOST for a slot the new journal never saw: M is sent and delivered again.
            let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
            assert_eq!(&m.payload[..], b"M", "rule off: M delivered twice");
            m.ack();
            assert!(timeout(LIMIT, receipt).await.unwrap().is_ok());
        }
    }
}

/// Issue 42, item 5, over loopback: one byte changed in the middle of a durable receiver's
/// journal (synced records after it) is damage, not a torn write: the endpoint says so
/// (`journal_damaged`), and the messages it held come back flagged or not at all, never
/// unflagged twice.
#[tokio::test]
async fn a_byte_changed_inside_a_synced_journal_is_reported_damaged() {
    let dir = tempfile::tempdir().unwrap();
    let a = start(A, None).await;
    let bind_b = || {
        Endpoint::builder(B)
            .security(security(B))
            .config(cfg().with_ack_after_processing(true))
            .durable(dir.path())
            .bind("127.0.0.1:0")
    };
    let mut b = bind_b().await.unwrap();
    assert!(!b.journal_damaged());
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    for i in 0..20u32 {
        drop(a.send(B, vec![i as u8; 200]).await.unwrap());
    }
    for _ in 0..20 {
        // Handed over (journalled), never acknowledged: every record stays live.
        drop(timeout(LIMIT, b.recv()).await.unwrap().unwrap());
    }
    drop(b.close(Duration::ZERO).await);
    drop(b);
    let seg = std::fs::read_dir(dir.path().join("journal"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "log"))
        .expect("a segment");
    let mut bytes = std::fs::read(&seg).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x40;
    std::fs::write(&seg, &bytes).unwrap();
    let b = bind_b().await.unwrap();
    assert!(b.journal_damaged(), "damage in synced records is reported");
}

/// Keyed sends from an outbox (`Handle::send_keyed`): A's application sends 200 rows, stops
/// (close, no wait) after noting the verdicts of the first 100 only, and at its restart
/// sends again every row it has no verdict for. Rows the journal had accepted are refused
/// with `KeyNotAbove` (those not resolved come back from `take_recovered` with their keys);
/// the others are accepted. B's application receives each row once. Sending keyed on an
/// endpoint that is not durable is refused.
#[tokio::test]
async fn an_outbox_sent_again_after_a_restart_delivers_each_row_once() {
    use exon::proto::SendError;
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let n = 200u64;
    let mut b = start(B, Some(db.path())).await;
    let a = start(A, Some(da.path())).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let (bh, b_addr) = (b.handle(), b.local_addr());
    let reader = tokio::spawn(async move {
        let mut tally = Tally::default();
        while tally.0.len() < n as usize {
            let Some(m) = b.recv().await else { break };
            tally.see(&m);
        }
        tally
    });
    let mut noted = Vec::new();
    let mut receipts = Vec::new();
    for key in 1..=n {
        let r = a
            .send_keyed(B, key, (key as u32).to_be_bytes().to_vec())
            .await;
        receipts.push((key, r.unwrap()));
    }
    // Every row is on stable storage (the last one's record is synced after the others').
    let (_, last) = receipts.last_mut().unwrap();
    timeout(LIMIT, last.stored()).await.unwrap().unwrap();
    for (key, r) in receipts.drain(..100) {
        timeout(LIMIT, r).await.unwrap().unwrap();
        noted.push(key);
    }
    drop(a.close(Duration::ZERO).await);
    drop(a);
    drop(receipts);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let mut a = start(A, Some(da.path())).await;
    a.add_peer(B, b_addr);
    bh.add_peer(A, a.local_addr());
    let recovered = a.take_recovered();
    assert!(recovered.iter().all(|r| r.key.is_some()), "keys recovered");
    let (mut refused, mut accepted) = (0, Vec::new());
    for key in (1..=n).filter(|k| !noted.contains(k)) {
        match a
            .send_keyed(B, key, (key as u32).to_be_bytes().to_vec())
            .await
        {
            Err(Error::Send(SendError::KeyNotAbove {
                key: k, highest, ..
            })) => {
                assert_eq!((k, highest), (key, n));
                refused += 1;
            }
            Ok(r) => accepted.push(r),
            Err(e) => panic!("row {key}: {e}"),
        }
    }
    assert_eq!(
        refused,
        n as usize - 100,
        "every row was stored before the restart"
    );
    for r in recovered {
        timeout(LIMIT, r.receipt).await.unwrap().unwrap();
    }
    for r in accepted {
        timeout(LIMIT, r).await.unwrap().unwrap();
    }
    let tally = timeout(LIMIT, reader).await.unwrap().unwrap();
    assert_eq!(tally.0.len(), n as usize, "every row delivered");
    assert!(
        tally.0.values().all(|&(plain, _)| plain == 1),
        "each row once"
    );
    let plain = start(NodeId::from_const(3), None).await;
    plain.add_peer(B, b_addr);
    let r = plain.send_keyed(B, 1, vec![0; 4]).await.map(|_| ());
    assert_eq!(r, Err(Error::Send(SendError::NotDurable)));
}

/// Issue 44, item 4, at the endpoint: a durable sender's deadline verdict reaches its
/// receipt (once its `Resolved` record is stored), and after a restart a verdict the
/// journal stored and never recorded as reported comes back on a settled receipt from
/// `take_recovered`, with its id.
#[tokio::test]
async fn durable_verdicts_reach_receipts_once_stored_and_after_a_restart() {
    use exon::durable::{FsBackend, Journal, JournalConfig};
    use exon::proto::journal::{Entry, Outcome, Write};
    use exon::proto::MsgId;
    let dir = tempfile::tempdir().unwrap();
    let a = start(A, Some(dir.path())).await;
    // B never answers: the message is given up at its deadline.
    a.add_peer(B, "127.0.0.1:9".parse().unwrap());
    let r = a
        .handle()
        .send_within(B, &b"late"[..], Duration::from_millis(100))
        .await
        .unwrap();
    let v = timeout(LIMIT, r).await.unwrap();
    assert!(
        matches!(v, Err(ReceiptError::NotDelivered | ReceiptError::InDoubt)),
        "{v:?}"
    );
    drop(a);
    // A journal holding a verdict stored and not reported (a crash came in between).
    let other = tempfile::tempdir().unwrap();
    let backend = FsBackend::open(other.path().join("journal")).unwrap();
    let (mut j, _, _) = Journal::open(backend, JournalConfig::default()).unwrap();
    let entry = Entry::Resolved {
        id: MsgId(77),
        verdict: Some((B, Outcome::Acknowledged)),
    };
    j.append(&Write { seq: 1, entry }).unwrap();
    j.commit().unwrap();
    drop(j);
    let mut a = start(A, Some(other.path())).await;
    let rec = a.take_recovered();
    assert_eq!(rec.len(), 1);
    let s = rec.into_iter().next().unwrap();
    assert!(s.settled && s.payload.is_empty() && s.to == B);
    assert_eq!(s.receipt.id(), MsgId(77));
    assert_eq!(timeout(LIMIT, s.receipt).await.unwrap(), Ok(MsgId(77)));
}

/// Keyed batches (`Handle::send_keyed_batch`): rows 1-10 in one batch, then rows 6-15 in
/// another (as an outbox sends again what it holds no verdict for): rows 6-10 are refused
/// one by one with `KeyNotAbove`, rows 11-15 are sent; each row is delivered once.
#[tokio::test]
async fn a_keyed_batch_refuses_the_rows_already_accepted_and_sends_the_rest() {
    use exon::proto::SendError;
    let (da, db) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut b = start(B, Some(db.path())).await;
    let a = start(A, Some(da.path())).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let reader = tokio::spawn(async move {
        let mut tally = Tally::default();
        while tally.0.len() < 15 {
            let Some(m) = b.recv().await else { break };
            tally.see(&m);
        }
        tally
    });
    let rows = |keys: std::ops::RangeInclusive<u32>| keys.map(|k| k.to_be_bytes().to_vec());
    let first = a.send_keyed_batch(B, 1, rows(1..=10)).await.unwrap();
    let v = timeout(LIMIT, first).await.unwrap();
    assert!(v.all_acknowledged(), "{v:?}");
    let again = a.send_keyed_batch(B, 6, rows(6..=15)).await.unwrap();
    let v = timeout(LIMIT, again).await.unwrap();
    for (i, r) in v.iter().enumerate() {
        let key = 6 + i as u64;
        if key <= 10 {
            let refused = ReceiptError::Refused(Error::Send(SendError::KeyNotAbove {
                to: B,
                key,
                highest: 10,
            }));
            assert_eq!(r, Err(refused), "row {key}");
        } else {
            assert!(r.is_ok(), "row {key}: {r:?}");
        }
    }
    let tally = timeout(LIMIT, reader).await.unwrap().unwrap();
    assert_eq!(tally.0.len(), 15);
    assert!(
        tally.0.values().all(|&(plain, _)| plain == 1),
        "each row once"
    );
}

/// Rule `forgotten_keys_refused`, over loopback: A sends 20 keyed rows, all acknowledged;
/// its journal directory is deleted while its clock file stays (a disk replaced, a volume
/// not mounted); restarted, A's application sends every row again, as an outbox that had
/// not noted the verdicts does. The endpoint knows its journal is new for a node that ran
/// before: each row is refused with `KeysForgotten`, none is delivered again; once the
/// application settles B's keys (it learnt B holds rows up to 20), row 21 goes. With the
/// rule off every row is delivered a second time.
/// A store of the application's that keeps its mark but cannot say whether it ran before
/// (the trait's default `stored_before`).
#[derive(Clone)]
struct Unsure(exon::endpoint::MemoryStore);

impl exon::endpoint::ClockStore for Unsure {
    fn load(&mut self) -> std::io::Result<u64> {
        self.0.load()
    }
    fn store(&mut self, high_water: u64) -> std::io::Result<()> {
        self.0.store(high_water)
    }
}

/// Any clock store, boxed, as one `Builder::clock_store` takes.
struct Boxed(Box<dyn exon::endpoint::ClockStore>);

impl exon::endpoint::ClockStore for Boxed {
    fn load(&mut self) -> std::io::Result<u64> {
        self.0.load()
    }
    fn store(&mut self, high_water: u64) -> std::io::Result<()> {
        self.0.store(high_water)
    }
    fn is_blocking(&self) -> bool {
        self.0.is_blocking()
    }
    fn stored_before(&mut self) -> std::io::Result<Option<bool>> {
        self.0.stored_before()
    }
}

/// Makes the clock store of each start.
type MakeStore<'a> = Box<dyn Fn() -> Box<dyn exon::endpoint::ClockStore> + 'a>;

#[tokio::test]
async fn a_journal_lost_under_an_external_clock_store_refuses_keyed_rows() {
    use exon::endpoint::{ClockStore, FileStore, MemoryStore};
    use exon::proto::SendError;
    let outside = tempfile::tempdir().unwrap();
    let file = outside.path().join("a.clock");
    let memory = MemoryStore::new();
    let unsure = Unsure(MemoryStore::new());
    let stores: [(&str, MakeStore, bool); 3] = [
        (
            "file",
            Box::new(|| Box::new(FileStore::new(file.clone()))),
            true,
        ),
        ("memory", Box::new(|| Box::new(memory.clone())), true),
        ("unsure", Box::new(|| Box::new(unsure.clone())), false),
    ];
    for (name, store, detects) in stores {
        let da = tempfile::tempdir().unwrap();
        let dir = da.path().join("a");
        let mut b = start(B, None).await;
        let bind_a = |store: Box<dyn ClockStore>| {
            Endpoint::builder(A)
                .security(security(A))
                .config(cfg())
                .clock_store(Boxed(store))
                .durable(&dir)
                .bind("127.0.0.1:0")
        };
        // A first start: nothing stored yet, nothing refused.
        let a = bind_a(store()).await.unwrap();
        a.add_peer(B, b.local_addr());
        b.add_peer(A, a.local_addr());
        let mut tally = Tally::default();
        let mut first = Vec::new();
        for key in 1..=5u64 {
            let r = a.send_keyed(B, key, (key as u32).to_be_bytes().to_vec());
            first.push(r.await.unwrap());
        }
        for _ in 0..5 {
            tally.see(&timeout(LIMIT, b.recv()).await.unwrap().unwrap());
        }
        for r in first {
            timeout(LIMIT, r).await.unwrap().unwrap();
        }
        drop(a.close(Duration::ZERO).await);
        drop(a);
        // The whole directory lost, the clock kept elsewhere.
        std::fs::remove_dir_all(&dir).unwrap();
        let a = bind_a(store()).await.unwrap();
        a.add_peer(B, b.local_addr());
        b.add_peer(A, a.local_addr());
        let again = a.send_keyed(B, 5, 5u32.to_be_bytes().to_vec()).await;
        match again {
            Err(Error::Send(SendError::KeysForgotten { to })) if detects => assert_eq!(to, B),
            Ok(r) if !detects => {
                // The limit a store that cannot tell leaves: the row is accepted again.
                tally.see(&timeout(LIMIT, b.recv()).await.unwrap().unwrap());
                timeout(LIMIT, r).await.unwrap().unwrap();
                assert_eq!(tally.0.get(&5), Some(&(2, 0)), "{name}");
                continue;
            }
            other => panic!("{name}: {:?}", other.map(|_| ())),
        }
        a.settle_keys(B, 5).await.unwrap();
        let r = a.send_keyed(B, 6, 6u32.to_be_bytes().to_vec()).await;
        tally.see(&timeout(LIMIT, b.recv()).await.unwrap().unwrap());
        timeout(LIMIT, r.unwrap()).await.unwrap().unwrap();
        while let Ok(Some(m)) = timeout(Duration::from_millis(200), b.recv()).await {
            tally.see(&m);
        }
        assert_eq!(tally.0.len(), 6, "{name}");
        assert!(
            tally.0.values().all(|&c| c == (1, 0)),
            "{name}: {:?}",
            tally.0
        );
    }
}

#[tokio::test]
async fn a_journal_lost_under_a_kept_clock_refuses_keyed_rows_until_settled() {
    use exon::proto::SendError;
    for rule in [true, false] {
        let da = tempfile::tempdir().unwrap();
        let mut b = start(B, None).await;
        let bind_a = || {
            let mut rules = exon::proto::Rules::ALL;
            rules.forgotten_keys_refused = rule;
            Endpoint::builder(A)
                .security(security(A))
                .config(cfg().with_rules(rules))
                .durable(da.path())
                .bind("127.0.0.1:0")
        };
        let a = bind_a().await.unwrap();
        a.add_peer(B, b.local_addr());
        b.add_peer(A, a.local_addr());
        let mut first = Vec::new();
        for key in 1..=20u64 {
            let r = a.send_keyed(B, key, (key as u32).to_be_bytes().to_vec());
            first.push(r.await.unwrap());
        }
        let mut tally = Tally::default();
        for _ in 0..20 {
            tally.see(&timeout(LIMIT, b.recv()).await.unwrap().unwrap());
        }
        for r in first {
            timeout(LIMIT, r).await.unwrap().unwrap();
        }
        drop(a.close(Duration::ZERO).await);
        drop(a);
        std::fs::remove_dir_all(da.path().join("journal")).unwrap();
        let a = bind_a().await.unwrap();
        a.add_peer(B, b.local_addr());
        b.add_peer(A, a.local_addr());
        let mut receipts = Vec::new();
        for key in 1..=20u64 {
            match a
                .send_keyed(B, key, (key as u32).to_be_bytes().to_vec())
                .await
            {
                Err(Error::Send(SendError::KeysForgotten { to })) if rule => assert_eq!(to, B),
                Ok(r) if !rule => receipts.push(r),
                other => panic!("rule {rule}, row {key}: {:?}", other.map(|_| ())),
            }
        }
        if rule {
            a.settle_keys(B, 20).await.unwrap();
            let again = a.send_keyed(B, 20, 20u32.to_be_bytes().to_vec()).await;
            assert!(matches!(
                again,
                Err(Error::Send(SendError::KeyNotAbove { highest: 20, .. }))
            ));
            let r = a.send_keyed(B, 21, 21u32.to_be_bytes().to_vec()).await;
            receipts.push(r.unwrap());
        }
        for _ in 0..receipts.len() {
            tally.see(&timeout(LIMIT, b.recv()).await.unwrap().unwrap());
        }
        for r in receipts {
            timeout(LIMIT, r).await.unwrap().unwrap();
        }
        while let Ok(Some(m)) = timeout(Duration::from_millis(300), b.recv()).await {
            tally.see(&m);
        }
        if rule {
            assert_eq!(tally.0.len(), 21);
            assert!(tally.0.values().all(|&c| c == (1, 0)), "{:?}", tally.0);
        } else {
            assert!(
                (1..=20).all(|k| tally.0.get(&k) == Some(&(2, 0))),
                "rule off: every row twice {:?}",
                tally.0
            );
        }
    }
}
