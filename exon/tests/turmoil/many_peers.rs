//! Many clients (50 hosts) sending to one server through turmoil, with some loss.

use std::time::Duration;

use crate::support::*;
use exon::endpoint::MemoryStore;
use exon::NodeId;

#[test]
fn fifty_hosts_to_one() {
    let hosts = 50u64;
    let n = 40u32;
    let mut sim = sim(300, |b| {
        b.fail_rate(0.05).repair_rate(0.8);
    });
    let log = Log::default();
    server(&mut sim, "server", MemoryStore::starting_at(1), log.clone());
    for h in 1..=hosts {
        let name = format!("client{h}");
        sim.client(name, async move {
            let ep = client(NodeId::from_const(h), "server").await?;
            send_all(&ep, 0..n).await?;
            let report = ep.close(Duration::from_secs(5)).await;
            assert!(report.is_clean(), "{report:?}");
            Ok(())
        });
    }
    run(&mut sim, |_, _| {});
    for h in 1..=hosts {
        assert_exactly_once(&log, NodeId::from_const(h), 0..n);
    }
    assert_eq!(log.lock().unwrap().len(), (hosts as usize) * n as usize);
}
