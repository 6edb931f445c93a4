use std::rc::Rc;
use std::time::Duration;
use exon::proto::Rules;
use exon_sim::*;

fn base(seed: u64) -> Scenario {
    Scenario { seed, workload: Workload { messages: 2000, ..Workload::default() }, settle: Duration::from_secs(60), ..Scenario::default() }
}

fn with(mut sc: Scenario, f: fn(&mut Rules)) -> Scenario {
    let mut r = Rules::ALL; f(&mut r);
    sc.node_hook = Some(Rc::new(move |_, n: &mut exon::proto::Node| n.set_rules(r)));
    sc
}

fn lossy(seed: u64) -> Scenario {
    let mut sc = base(seed);
    sc.link.loss = 0.2; sc.link.dup = 0.2; sc.link.reorder = 0.2;
    sc.link.dup_max_delay = Duration::from_secs(10);
    sc
}

fn explore(name: &str, make: &dyn Fn(u64) -> Scenario) {
    for seed in 0..30 {
        let r = Sim::new(make(seed)).run();
        if !r.ok() {
            println!("{name}: seed {seed} events {} {:?}", r.events, r.violations.iter().take(3).map(|v| v.to_string()).collect::<Vec<_>>());
            return;
        }
    }
    println!("{name}: no failure");
}


fn sparse(seed: u64) -> Scenario {
    let mut sc = lossy(seed);
    sc.config.envelope_target = 4; sc.config.envelope_low = 0;
    sc.link.loss = 0.3; sc.link.dup = 0.5; sc.link.dup_max_delay = Duration::from_secs(2);
    sc.workload.burst = 4; sc.workload.interval = Duration::from_millis(30); sc.workload.messages = 1000;
    sc
}

fn restarts(mut sc: Scenario, keep_clock: bool) -> Scenario {
    sc.faults = (0..6).map(|k| Fault { at: Duration::from_millis(100 + 150 * k), kind: FaultKind::Restart { node: (k % 2) as usize, down: Duration::from_millis(5), keep_clock } }).collect();
    sc
}

#[test]
fn explore_all() {
    explore("none-sparse", &|s| sparse(s));
    explore("none-sparse-restarts", &|s| restarts(sparse(s), true));
    explore("r1", &|s| { let mut sc = base(s); sc.workload.messages = 2; with(sc, |r| r.first_send_requests_slots = false) });
    explore("r3", &|s| with(sparse(s), |r| r.token_keeps_incarnation = false));
    explore("r4", &|s| with(sparse(s), |r| r.ack_without_record = false));
    explore("r4-restart", &|s| with(restarts(lossy(s), true), |r| r.ack_without_record = false));
    explore("r8", &|s| restarts(sparse(s), false));
    explore("r8-lossy", &|s| restarts(lossy(s), false));
}
