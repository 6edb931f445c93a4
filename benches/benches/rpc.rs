//! Request/reply throughput (1 KB request, 1 KB reply) with 1, 10 and 100 concurrent
//! callers, in requests per second: exon, TCP with every caller multiplexed over one
//! connection, QUIC with one bidirectional stream per request. Connections are set up once
//! per benchmark; each iteration is a batch of requests, each reply verified.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use exon_benches::endpoint::DEFAULT_EXON_DATAGRAM;
use exon_benches::message::PAYLOAD;
use exon_benches::rpc::Rpc;
use exon_benches::systems::RpcKind;

fn rpc(c: &mut Criterion) {
    for (callers, batch) in [(1u64, 1_000u64), (10, 2_000), (100, 5_000)] {
        let mut g = c.benchmark_group(format!("rpc/{callers}_callers"));
        g.throughput(Throughput::Elements(batch))
            .sampling_mode(SamplingMode::Flat)
            .sample_size(10)
            .warm_up_time(Duration::from_secs(1))
            .measurement_time(Duration::from_secs(3));
        for kind in RpcKind::ALL {
            let mut rpc = Rpc::new(kind, DEFAULT_EXON_DATAGRAM, PAYLOAD);
            g.bench_function(kind.name(), |b| {
                b.iter_custom(|iters| (0..iters).map(|_| rpc.run(batch, callers).0).sum())
            });
        }
        g.finish();
    }
}

criterion_group!(benches, rpc);
criterion_main!(benches);
