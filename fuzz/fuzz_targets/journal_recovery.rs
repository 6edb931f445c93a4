//! Arbitrary bytes as a durable node's journal on disk (one or two log segments): opening it
//! never panics nor allocates beyond the bytes, what it recovers a node accepts, and a
//! journal record that decodes re-encodes to the same bytes.
#![no_main]

use std::time::Instant;

use bytes::Bytes;
use exon::durable::{Journal, JournalConfig, MemBackend};
use exon::proto::journal::Entry;
use exon::proto::{Config, Node, NodeId, Security};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let bytes = Bytes::copy_from_slice(data);
    if let Ok(e) = Entry::decode(&bytes) {
        assert_eq!(e.to_bytes(), bytes, "a valid record re-encodes identically");
    }
    let disk = MemBackend::new();
    let cut = data.first().map_or(0, |&b| b as usize).min(data.len());
    disk.put_segment(0, data[..cut].to_vec());
    disk.put_segment(1, data[cut..].to_vec());
    let Ok((_, recovered, _)) = Journal::open(disk, JournalConfig::default()) else {
        return;
    };
    let mut node = Node::new(
        NodeId::from_const(1),
        Security::InsecurePlaintext,
        Config::default(),
        1 << 40,
    )
    .expect("node");
    node.recover(Instant::now(), recovered).expect("a fresh node");
});
