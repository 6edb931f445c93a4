//! Shards and steering: which shard owns a peer (and the kernel program that hands each
//! datagram to that shard's socket), and the routes between the shards of one endpoint.

pub(crate) mod route;
pub(crate) mod steering;
