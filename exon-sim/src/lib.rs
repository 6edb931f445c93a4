//! exon-sim
