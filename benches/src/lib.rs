//! Benchmark runners of exon, TCP and QUIC, one module per system, under the bench binaries.

pub mod calls;
pub mod compare;
pub mod core_pair;
pub mod durable;
pub mod durable_engine;
pub mod durable_exon;
pub mod durable_table;
pub mod endpoint;
pub mod harness;
pub mod message;
pub mod new_peers;
pub mod one_way;
pub mod peer_memory;
pub mod quic;
pub mod report;
pub mod rpc;
pub mod sharded;
pub mod stats;
pub mod storage;
pub mod streams;
pub mod systems;
pub mod tcp;
pub mod testbed;
pub mod tls;
