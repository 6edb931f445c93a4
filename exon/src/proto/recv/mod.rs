//! The receiving side: the R record of each source (its slots), reassembly of fragmented
//! messages, deliveries held until taken (and their count per source), early deliveries held
//! until their sender stored them, pinned receive buffers and eviction under pressure.

pub(crate) mod assembler;
pub(crate) mod bufpool;
pub(crate) mod delivery;
pub(crate) mod eviction;
pub(crate) mod pins;
pub(crate) mod record;
pub(crate) mod unproven;
pub(crate) mod unstored;
pub(crate) mod untaken;
