//! Storage: the clock store (the node clock's high-water mark) and its jobs, the journal's
//! jobs (durable mode) and the line of their syncs, and durable mode's bind and recovery.

pub(crate) mod clock_jobs;
pub(crate) mod clock_store;
pub(crate) mod durable;
pub(crate) mod journal_jobs;
pub(crate) mod sync_line;
