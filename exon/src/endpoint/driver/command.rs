//! The handle-to-driver protocol: the [`Command`]s a handle sends to its driver shard.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

use super::mailbox::WeakMailboxTx;
use super::outgoing::{Outgoing, Submit};
use crate::endpoint::api::stats::{CloseReport, EndpointStats};
use crate::endpoint::flows::out::FlowOut;
use crate::endpoint::flows::stream_in::StreamIn;
use crate::proto::{NodeId, PublicKey};
use crate::rpc::queue::RequestTx;
use crate::rpc::request::Request;

/// A command from a handle to the driver task.
pub(crate) enum Command {
    Send(Outgoing),
    /// Several messages, in order, holding `credits` send credits: to one destination
    /// (`send_batch`), or a server's replies to several (no credits).
    SendBatch {
        messages: Vec<Outgoing>,
        credits: usize,
    },
    AddPeer(NodeId, SocketAddr),
    /// Keepalives to a peer whatever waits for it, or no longer (`Handle::keep_reachable`).
    KeepReachable(NodeId, bool),
    AddPeerKey(
        NodeId,
        PublicKey,
        oneshot::Sender<Result<(), crate::proto::crypto::KeyringError>>,
    ),
    Stats(oneshot::Sender<EndpointStats>),
    /// What the sender record of a peer knows of the path to it.
    Path(NodeId, oneshot::Sender<Option<crate::proto::PathStats>>),
    /// Durable mode: the application settles a destination's keys (`Node::settle_keys`).
    SettleKeys {
        to: NodeId,
        floor: u64,
        reply: oneshot::Sender<Result<(), crate::proto::SendError>>,
    },
    /// A server starts: requests go to it.
    Serve(RequestTx),
    /// A request a server stopped without answering: held for the next one.
    Requeue(Request),
    /// A stream this endpoint opened: its peer's chunks go to `inbox`.
    OpenStream {
        peer: NodeId,
        id: u64,
        out: Arc<FlowOut>,
        inbox: Arc<StreamIn>,
    },
    /// The application dropped a stream: its receiving state goes.
    ForgetStream {
        peer: NodeId,
        id: u64,
        mine: bool,
    },
    Close {
        timeout: Duration,
        reply: oneshot::Sender<CloseReport>,
    },
}

/// A driver shard's command mailbox, held weakly by a flow: only its messages go through.
impl Submit for WeakMailboxTx<Command> {
    fn is_open(&self) -> bool {
        self.strong_count() > 0
    }

    fn submit(&self, out: Outgoing) -> bool {
        let Some(cmds) = self.upgrade() else {
            out.disarm();
            return false;
        };
        match cmds.send(Command::Send(out)) {
            Ok(()) => true,
            Err(c) => {
                if let Command::Send(out) = c {
                    out.disarm();
                }
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every send moves a `Command` through the driver's channel, and its moves are copies:
    /// a larger one (a field added inline) costs every message (measured: +80 bytes was
    /// about +300 instructions per message in `memcpy`, one-way on loopback). At 128 bytes
    /// or less a move is eight 16-byte loads and stores inline rather than a call of
    /// `memcpy` (about 29 instructions each, nine moves a send: `Outgoing`'s side, which
    /// few messages have, is boxed for that).
    #[test]
    fn a_send_command_stays_small() {
        let size = std::mem::size_of::<Command>();
        assert!(size <= 128, "Command is {size} bytes");
    }
}
