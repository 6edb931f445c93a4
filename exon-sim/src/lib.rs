//! A deterministic network simulator that property-checks exon's exactly-once guarantees:
//! at-most-once, at-least-once after healing, obliviousness after quiescence, and bounded
//! state, under loss, duplication, reordering, partitions and restarts.
//!
//! With [`Scenario::rpc`] the applications call each other (requests and replies in
//! `exon::envelope`s, each call's end decided by `exon::call::CallState`), and the oracle
//! also checks that every call's claimed end is true of what its server executed.
//!
//! With [`Scenario::channels`] the applications send on ordered channels
//! (`exon::ordered`: numbered messages, gaps for those given up, receivers reordering with
//! out-of-order messages left untaken), and the oracle also checks each flow's order, its
//! gaps, the window's bound on what a receiver holds, and that no flow stays blocked.
//!
//! With [`Scenario::streams`] the applications write durable byte streams to each other
//! across crashes, and the oracle checks that each reader's store holds exactly its
//! source's bytes, and at the end all of them.
//!
//! Everything is reproducible from [`Scenario::seed`].
#![warn(missing_docs)]

pub mod channels;
pub mod deafness;
pub mod disk;
pub mod faults;
pub mod journal;
pub mod link;
pub mod oracle;
pub mod report;
pub mod rpc;
pub mod rules_off;
pub mod scenario;
pub mod sim;
pub mod streams;
pub mod workload;

pub use channels::ChannelModel;
pub use deafness::DeafWatch;
pub use disk::DiskModel;
pub use faults::{Fault, FaultKind};
pub use journal::{JournalModel, RestoreModel};
pub use link::{Decision, GilbertElliott, Link, LinkConfig, LinkState};
pub use oracle::{Oracle, Violation, ViolationKind};
pub use report::Report;
pub use rpc::RpcModel;
pub use scenario::{sim_config, Adversary, Attack, Hostile, Scenario, ScenarioError};
pub use sim::Sim;
pub use streams::{StreamKey, StreamModel};
pub use workload::{MsgKey, Pattern, Workload};

/// Seed from the `EXON_SIM_SEED` environment variable, if set and valid.
pub fn seed_from_env() -> Option<u64> {
    std::env::var("EXON_SIM_SEED").ok()?.trim().parse().ok()
}
