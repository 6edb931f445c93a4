//! The sending side: the S record of each destination, its tokens and fragments, and what
//! paces and recovers them (loss detection, RTT, congestion control, pacing, MTU discovery,
//! silence and liveness of destinations).

pub(crate) mod answers;
pub mod congestion;
pub(crate) mod credit;
pub(crate) mod flight;
pub(crate) mod fragments;
pub(crate) mod held_rate;
pub(crate) mod liveness;
pub(crate) mod loss;
pub(crate) mod mtud;
pub(crate) mod pacing;
pub(crate) mod record;
pub(crate) mod recovery;
pub(crate) mod request;
pub(crate) mod routes;
pub(crate) mod rtt;
pub(crate) mod sent;
pub(crate) mod silence;
pub(crate) mod timers;
pub(crate) mod token;
pub(crate) mod tokens;
pub(crate) mod transmit;
