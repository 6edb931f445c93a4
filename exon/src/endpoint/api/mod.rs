//! The public API: the handle, delivered messages, receipts, errors, configuration,
//! counters, typed payloads, and the state the handles share with the driver.

pub(crate) mod builder;
pub(crate) mod config;
pub(crate) mod endpoint;
pub(crate) mod error;
pub(crate) mod handle;
pub(crate) mod message;
pub(crate) mod own_line;
#[cfg(feature = "serde")]
pub(crate) mod payload;
pub(crate) mod receipt_slab;
pub(crate) mod receipts;
pub(crate) mod shared;
pub(crate) mod stats;
#[cfg(feature = "serde")]
pub(crate) mod typed;
pub(crate) mod verdict_code;
