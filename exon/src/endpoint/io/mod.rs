//! Socket I/O: the datagram socket trait, the batched socket (GSO sends, GRO and `recvmmsg`
//! receives), the lossy wrapper, IP families, and the driver's inbound and outbound sides.

pub(crate) mod batch;
pub(crate) mod family;
pub(crate) mod inbound;
pub(crate) mod lossy;
pub(crate) mod outbound;
pub(crate) mod route;
pub(crate) mod socket;
