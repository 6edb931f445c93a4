//! The endpoint's parts on their own: clock stores, typed payloads, the lossy socket.

use std::time::Duration;

use exon::endpoint::{
    decode, encode, ClockStore, DatagramSocket, Faults, FileStore, LossySocket, MemoryStore,
    PayloadError,
};
use serde::{Deserialize, Serialize};
use tokio::net::UdpSocket;

#[test]
fn file_store_round_trips_and_replaces_atomically() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("clock");
    let mut s = FileStore::new(&path);
    let start = s.load().unwrap();
    assert!(
        start > 1_000_000_000_000_000,
        "missing file starts from wall-clock micros"
    );
    s.store(42).unwrap();
    let far = start + (1 << 40);
    s.store(far).unwrap();
    assert_eq!(FileStore::new(&path).load().unwrap(), far);
    // A mark below the wall clock (a copy restored from long ago) loads as the wall clock:
    // the node starts above every value the run it replaces used.
    s.store(4242).unwrap();
    let again = FileStore::new(&path).load().unwrap();
    assert!(
        again >= start,
        "{again} < {start}: never below the wall clock"
    );
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["clock"], "temporary files renamed away");
    std::fs::write(&path, "garbage").unwrap();
    assert!(
        FileStore::new(&path).load().is_err(),
        "corrupt store is an error, not 0"
    );
}

#[test]
fn memory_store_clones_share_and_never_go_back() {
    let mut a = MemoryStore::starting_at(10);
    let mut b = a.clone();
    b.store(50).unwrap();
    a.store(20).unwrap();
    assert_eq!(a.load().unwrap(), 50);
    assert!(!a.is_blocking());
    assert!(MemoryStore::new().get() > 1_000_000_000_000_000);
}

#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct Order {
    id: u64,
    items: Vec<String>,
}

#[test]
fn typed_payloads_round_trip_with_typed_errors() {
    let o = Order {
        id: 7,
        items: vec!["a".into(), "b".into()],
    };
    let bytes = encode(&o).unwrap();
    assert_eq!(decode::<Order>(&bytes).unwrap(), o);
    let mut longer = bytes.to_vec();
    longer.push(0);
    assert!(matches!(
        decode::<Order>(&longer),
        Err(PayloadError::TrailingBytes(1))
    ));
    assert!(matches!(
        decode::<Order>(&bytes[..bytes.len() - 1]),
        Err(PayloadError::Decode(_))
    ));
}

#[tokio::test]
async fn lossy_socket_drops_duplicates_and_reorders() {
    let rx = UdpSocket::bind("127.0.0.1:0").await.unwrap();
    let to = rx.local_addr().unwrap();
    let mut faults = Faults::default();
    faults.loss = 0.2;
    faults.duplicate = 0.2;
    faults.reorder = 0.2;
    faults.seed = 3;
    let tx = LossySocket::new(UdpSocket::bind("127.0.0.1:0").await.unwrap(), faults);
    let n = 200u32;
    for i in 0..n {
        DatagramSocket::send_to(&tx, &i.to_be_bytes(), to)
            .await
            .unwrap();
    }
    let mut got = Vec::new();
    let mut buf = [0u8; 16];
    while let Ok(Ok((len, _))) =
        tokio::time::timeout(Duration::from_millis(200), rx.recv_from(&mut buf)).await
    {
        got.push(u32::from_be_bytes(buf[..len].try_into().unwrap()));
    }
    assert!(tx.dropped() > 0 && tx.duplicated() > 0 && tx.reordered() > 0);
    assert!(got.windows(2).any(|w| w[0] > w[1]), "some reordering");
    assert!(got.windows(2).any(|w| w[0] == w[1]), "some duplicates");
    let unique: std::collections::HashSet<_> = got.iter().collect();
    assert!(unique.len() < n as usize, "some loss");
}
