use exon::proto::{CongestionControl, NodeId};
use exon_sim::{sim_config, LinkConfig, Pattern, Scenario, Sim, Workload};
use std::time::Duration;
#[test]
fn debug() {
    let loss: f64 = std::env::var("LOSS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.05);
    let rate: u64 = std::env::var("RATE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12_500_000);
    let mut config = sim_config();
    config.congestion = CongestionControl::Bbr;
    config.max_datagram_size = 1472;
    let sc = Scenario {
        seed: 7,
        nodes: 3,
        config,
        link: LinkConfig {
            latency: Duration::from_millis(5),
            loss,
            rate: Some(rate),
            queue_bytes: 125000,
            ..LinkConfig::default()
        },
        workload: Workload {
            pattern: Pattern::Ring,
            messages: 3 * 60000,
            payload_len: 1024,
            interval: Duration::from_millis(1),
            burst: 256,
            max_pending: 4096,
        },
        settle: Duration::from_secs(60),
        ..Scenario::default()
    };
    let mut sim = Sim::new(sc);
    let mut next = Duration::ZERO;
    let mut last = 0;
    while sim.step() {
        if sim.now() >= next {
            next += Duration::from_millis(250);
            for (me, other) in [(0, 1)] {
                let Some(n) = sim.node(me) else { continue };
                let id = sim
                    .node(other)
                    .map(|b| b.id())
                    .unwrap_or(NodeId::from_const(2));
                let a = n.stats().acknowledged;
                println!(
                    "{me} {:?} rate {} path {:?} queued {} lost {} to {} retx {}",
                    sim.now(),
                    (a - last) * 4,
                    n.path(id),
                    n.messages_queued(),
                    n.stats().losses_detected,
                    n.stats().timeouts,
                    n.stats().retransmissions
                );
                last = a;
            }
            if next > Duration::from_secs(4) {
                break;
            }
        }
    }
}
