//! A channel whose sender crashed and came back without a journal: its receiver held
//! messages of the old run ahead of a number that never comes (the old sender forgot it).
//! Asked about the stalled run (`FlowConfig::stall_query_after`), the new sender says it is
//! over, and the receiver hands what it held over out of order (`Kind::Unordered`), each
//! once. Without the question they stay held for good.

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use exon::endpoint::{DatagramSocket, Endpoint, EndpointConfig, Kind};
use exon::proto::Security;
use exon::NodeId;
use tokio::net::UdpSocket;
use tokio::time::timeout;

use super::common::cfg;

const A: NodeId = NodeId::from_const(1);
const B: NodeId = NodeId::from_const(2);
const CHANNEL: u16 = 6;
/// The payload of number 1, which never arrives.
pub(super) const MISSING: &[u8] = b"number one, never to arrive";
const LIMIT: Duration = Duration::from_secs(20);

/// Loopback, dropping every datagram that carries [`MISSING`] (plaintext: payloads travel
/// in the clear), until `.1` if given.
pub(super) struct Dropping(pub(super) UdpSocket, pub(super) Option<std::time::Instant>);

impl DatagramSocket for Dropping {
    async fn send_to(&self, buf: &[u8], target: SocketAddr) -> io::Result<usize> {
        let dropping = self.1.is_none_or(|until| std::time::Instant::now() < until);
        if dropping && buf.windows(MISSING.len()).any(|w| w == MISSING) {
            return Ok(buf.len());
        }
        self.0.send_to(buf, target).await
    }

    async fn recv_from(&self, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
        self.0.recv_from(buf).await
    }

    fn local_addr(&self) -> io::Result<SocketAddr> {
        self.0.local_addr()
    }
}

pub(super) async fn bind<S: DatagramSocket>(
    id: NodeId,
    socket: S,
    config: EndpointConfig,
) -> Endpoint {
    Endpoint::builder(id)
        .security(Security::InsecurePlaintext)
        .config(config)
        .with_socket(socket)
        .unwrap()
}

/// A sender that will crash: told when its messages are sent, and when to crash.
pub(super) struct Crashing {
    sent: tokio::sync::oneshot::Receiver<()>,
    kill: std::sync::mpsc::Sender<()>,
    thread: std::thread::JoinHandle<()>,
}

impl Crashing {
    /// Once A's messages are sent and have had time to arrive (and wait, behind the one
    /// lost), A crashes: returns when it is gone.
    pub(super) async fn crash(self) {
        timeout(LIMIT, self.sent).await.unwrap().unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        self.kill.send(()).unwrap();
        let thread = self.thread;
        tokio::task::spawn_blocking(move || thread.join().unwrap())
            .await
            .unwrap();
    }
}

/// Node A on a thread and runtime of its own, its peer B at `b`: `work` sends (every
/// datagram carrying [`MISSING`] is lost) and returns what it keeps; A then runs (sending
/// `MISSING` again, in vain) until told to crash, and stops as a crash does: its runtime
/// dropped mid-flight, no close, no destructor of what `work` kept.
pub(super) fn crashing<F, Fut, T>(b: SocketAddr, work: F) -> Crashing
where
    F: FnOnce(Endpoint) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T>,
    T: 'static,
{
    let (sent_tx, sent_rx) = tokio::sync::oneshot::channel();
    let (kill_tx, kill_rx) = std::sync::mpsc::channel::<()>();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            let sock = Dropping(UdpSocket::bind("127.0.0.1:0").await.unwrap(), None);
            let a = bind(A, sock, cfg()).await;
            a.add_peer(B, b);
            let kept = work(a).await;
            sent_tx.send(()).unwrap();
            tokio::task::spawn_blocking(move || kill_rx.recv())
                .await
                .ok();
            std::mem::forget(kept);
        });
        drop(rt);
    });
    Crashing {
        sent: sent_rx,
        kill: kill_tx,
        thread,
    }
}

/// A sends numbers 0 (and waits for its acknowledgement), 1 (never arrives), 2 and 3 on
/// the channel to B at `b`, then crashes when told.
fn crashing_sender(b: SocketAddr) -> Crashing {
    crashing(b, |a| async move {
        let ch = a.handle().channel(B, CHANNEL).unwrap();
        let first = ch.send(&b"number zero"[..]).await.unwrap();
        timeout(LIMIT, first).await.unwrap().unwrap();
        for body in [MISSING, &b"number two"[..], &b"number three"[..]] {
            drop(ch.send(body).await.unwrap());
        }
        (a, ch)
    })
}

/// A sends numbers 0 to 3 on the channel to `b`, whose application gets 0 (taken, so
/// acknowledged) while 2 and 3 wait held behind 1, and crashes.
async fn a_sends_then_crashes(b: &mut Endpoint) {
    let a = crashing_sender(b.local_addr());
    let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
    assert_eq!(&m.payload[..], b"number zero");
    assert!(matches!(m.kind(), Kind::Channel { seq: 0, .. }));
    a.crash().await;
}

/// What B's application got after A's crash and restart, within `wait`, and B's count of
/// runs drained.
async fn after_a_restart(query: Option<Duration>, wait: Duration) -> (Vec<(Kind, Vec<u8>)>, u64) {
    let mut config = cfg();
    config.flows.stall_query_after = query;
    let mut b = bind(B, UdpSocket::bind("127.0.0.1:0").await.unwrap(), config).await;
    a_sends_then_crashes(&mut b).await;
    // A comes back without a journal, and sends nothing more on the channel.
    let a = bind(A, UdpSocket::bind("127.0.0.1:0").await.unwrap(), cfg()).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    let mut got = Vec::new();
    let until = tokio::time::Instant::now() + wait;
    while let Ok(Some(m)) = tokio::time::timeout_at(until, b.recv()).await {
        got.push((m.kind(), m.payload.to_vec()));
        if got.len() == 2 {
            break;
        }
    }
    let overs = b.stats().await.unwrap().runs_over;
    (got, overs)
}

#[tokio::test]
async fn a_run_its_restarted_sender_forgot_is_drained_when_the_sender_says_it_is_over() {
    let (got, overs) = after_a_restart(Some(Duration::from_millis(200)), LIMIT).await;
    let payloads: Vec<&[u8]> = got.iter().map(|(_, p)| &p[..]).collect();
    assert_eq!(payloads, [&b"number two"[..], &b"number three"[..]]);
    for ((kind, _), seq) in got.iter().zip([2, 3]) {
        assert!(
            matches!(kind, Kind::Unordered { channel: CHANNEL, seq: s } if *s == seq),
            "{kind:?}"
        );
    }
    assert_eq!(overs, 1);
}

#[tokio::test]
async fn without_the_question_what_the_forgotten_run_left_stays_held() {
    let (got, overs) = after_a_restart(None, Duration::from_secs(2)).await;
    assert!(got.is_empty(), "{got:?}");
    assert_eq!(overs, 0);
}

/// A (sending) and B (asking every 50 ms), live: every datagram of A's that carries
/// [`MISSING`] is lost for 1.5 s (thirty of B's intervals), so B asks A about its run.
pub(super) async fn live_pair() -> (Endpoint, Endpoint) {
    let mut config = cfg();
    config.flows.stall_query_after = Some(Duration::from_millis(50));
    let b = bind(B, UdpSocket::bind("127.0.0.1:0").await.unwrap(), config).await;
    let until = std::time::Instant::now() + Duration::from_millis(1500);
    let sock = Dropping(UdpSocket::bind("127.0.0.1:0").await.unwrap(), Some(until));
    let a = bind(A, sock, cfg()).await;
    a.add_peer(B, b.local_addr());
    b.add_peer(A, a.local_addr());
    (a, b)
}

/// A live sender is asked about its stalled run again and again, and never says it is
/// over: when its missing number finally arrives, the channel goes on in order, nothing
/// handed over out of it.
#[tokio::test]
async fn a_live_senders_stalled_run_is_asked_about_and_kept_in_order() {
    let (a, mut b) = live_pair().await;
    let ch = a.handle().channel(B, CHANNEL).unwrap();
    let sender = tokio::spawn(async move {
        let first = ch.send(&b"number zero"[..]).await.unwrap();
        timeout(LIMIT, first).await.unwrap().unwrap();
        let mut receipts = Vec::new();
        for body in [MISSING, &b"number two"[..], &b"number three"[..]] {
            receipts.push(ch.send(body).await.unwrap());
        }
        for r in receipts {
            timeout(LIMIT, r).await.unwrap().unwrap();
        }
    });
    for seq in 0..4 {
        let m = timeout(LIMIT, b.recv()).await.unwrap().unwrap();
        assert!(
            matches!(m.kind(), Kind::Channel { channel: CHANNEL, seq: s } if s == seq),
            "number {seq}: {:?}",
            m.kind()
        );
    }
    timeout(LIMIT, sender).await.unwrap().unwrap();
    let stats = b.stats().await.unwrap();
    assert!(stats.run_queries >= 2, "asked {} times", stats.run_queries);
    assert_eq!((stats.runs_over, stats.unordered), (0, 0));
}

/// A sender that never comes back is asked one question at a time: each is given up by the
/// next look, so the questions to it never pile up.
#[tokio::test]
async fn questions_to_a_sender_that_never_answers_do_not_pile_up() {
    let mut config = cfg();
    config.flows.stall_query_after = Some(Duration::from_millis(50));
    let mut b = bind(B, UdpSocket::bind("127.0.0.1:0").await.unwrap(), config).await;
    a_sends_then_crashes(&mut b).await;
    // Twenty looks with nobody to answer.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let asked = b.stats().await.unwrap().run_queries;
    assert!(asked >= 5, "asked {asked} times");
    let report = b.close(Duration::from_millis(100)).await;
    assert!(
        report.unacknowledged.len() <= 2,
        "{} of {asked} questions (and the window's advert) left unacknowledged",
        report.unacknowledged.len()
    );
}
