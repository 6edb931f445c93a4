//! One-way throughput of 1 KB messages, in messages per second: exon's sans-IO core in
//! memory, exon over loopback UDP, TCP, and QUIC (one long stream; one stream per message).
//! Connections are set up once per benchmark; each iteration is a batch of messages, timed
//! until the receiver verified every one exactly once.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use exon_benches::core_pair::MemPair;
use exon_benches::endpoint::DEFAULT_EXON_DATAGRAM;
use exon_benches::message::PAYLOAD;
use exon_benches::one_way::OneWay;
use exon_benches::systems::OneWayKind;

const BATCH: u64 = 10_000;

fn one_way(c: &mut Criterion) {
    let mut g = c.benchmark_group("one_way");
    g.throughput(Throughput::Elements(BATCH))
        .sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3));

    for (name, plain) in [("exon_mem", false), ("exon_mem_plain", true)] {
        let mut pair = MemPair::new(DEFAULT_EXON_DATAGRAM, plain);
        g.bench_function(name, |b| {
            b.iter_custom(|iters| (0..iters).map(|_| pair.run(BATCH)).sum())
        });
    }

    for kind in OneWayKind::ALL {
        let mut flow = OneWay::new(kind, DEFAULT_EXON_DATAGRAM, PAYLOAD);
        g.bench_function(kind.name(), |b| {
            b.iter_custom(|iters| (0..iters).map(|_| flow.run(BATCH)).sum())
        });
    }
    g.finish();
}

criterion_group!(benches, one_way);
criterion_main!(benches);
