//! Ordered channels: a [`Channel`] sends messages that its receiver's application gets in
//! the order sent, exactly once, without making other channels or plain messages wait.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use crate::endpoint::api::error::Error;
use crate::endpoint::api::handle::Handle;
use crate::endpoint::api::receipts::Receipt;
use crate::endpoint::flows::broken::Broken;
use crate::endpoint::flows::out::FlowOut;
use crate::proto::NodeId;

/// The sending end of channel `n` to one peer ([`Handle::channel`]): messages sent on it
/// reach the peer's [`recv`](crate::endpoint::Endpoint::recv) in the order of the sends, each exactly
/// once, as [`Kind::Channel`](crate::endpoint::Kind::Channel) messages with consecutive numbers. A
/// message given up at its deadline does not block the channel: the peer gets a
/// [`Kind::Gap`](crate::endpoint::Kind::Gap) in its place, in order, and its receipt says
/// [`NotDelivered`](crate::endpoint::ReceiptError::NotDelivered) or
/// [`InDoubt`](crate::endpoint::ReceiptError::InDoubt)
/// (in doubt: the message itself may have arrived first, and then the gap is dropped).
///
/// Every `Channel` value for the same peer and number shares one numbering: clones, and
/// values made by later calls to [`Handle::channel`], send on the same channel.
///
/// Flow control: at most [`FlowConfig::channel_window`](crate::endpoint::FlowConfig::channel_window)
/// messages of a channel are without a verdict at once, or the peer's own window if it is
/// smaller (the peer advertises it when the channel's run starts; until then one message at
/// a time); a send beyond waits. A message is acknowledged when the peer's application
/// takes it, so a peer that does not read stops its channels' senders, and the peer holds
/// less than its window of messages per channel.
#[derive(Debug, Clone)]
pub struct Channel {
    handle: Handle,
    out: Arc<FlowOut>,
    number: u16,
}

impl Channel {
    pub(crate) fn new(handle: Handle, out: Arc<FlowOut>, number: u16) -> Channel {
        Channel {
            handle,
            out,
            number,
        }
    }

    /// The peer.
    pub fn peer(&self) -> NodeId {
        self.out.to()
    }

    /// The channel's number.
    pub fn number(&self) -> u16 {
        self.number
    }

    /// The number the next message sent on the channel gets (the peer sees it as
    /// [`Kind::Channel`](crate::endpoint::Kind::Channel)'s `seq`). On a durable endpoint
    /// the numbering goes on across restarts: after one, the messages numbered below this
    /// were accepted before it (stored; those without a verdict are among
    /// [`Endpoint::take_recovered`](crate::endpoint::Endpoint::take_recovered), with
    /// [`RecoveredSend::channel`](crate::endpoint::RecoveredSend::channel), and are being
    /// sent), so an application that numbers its items the same way knows where to go on.
    pub fn next_seq(&self) -> u64 {
        self.out.next_position().0
    }

    /// Sends `payload` on the channel, with the endpoint's
    /// [`default_deadline`](crate::endpoint::EndpointConfig::default_deadline). Waits while the
    /// channel's window is full. The receipt resolves as a [`Handle::send`] receipt does.
    ///
    /// # Cancel safety
    /// Cancel safe: the message is numbered and handed over with no await after, so a send
    /// dropped before it returned sent nothing and took no number.
    pub async fn send(&self, payload: impl Into<Bytes>) -> Result<Receipt, Error> {
        let within = self.handle.default_deadline_any();
        self.send_deadline(payload.into(), within).await
    }

    /// Like [`send`](Self::send), with a deadline `within` from when the message is handed
    /// over (a wait for the window comes before and is not counted). A `within` past what
    /// the clock can represent is no deadline.
    pub async fn send_within(
        &self,
        payload: impl Into<Bytes>,
        within: Duration,
    ) -> Result<Receipt, Error> {
        self.send_deadline(payload.into(), Some(within)).await
    }

    async fn send_deadline(
        &self,
        payload: Bytes,
        within: Option<Duration>,
    ) -> Result<Receipt, Error> {
        let to = self.out.to();
        self.handle.check_len(to, payload.len())?;
        let mut body = Some(payload);
        let (id, rx) = std::future::poll_fn(|cx| {
            match self.out.try_send_message(&mut body, within, cx.waker()) {
                Ok(Some(sent)) => std::task::Poll::Ready(Ok(sent)),
                Ok(None) => std::task::Poll::Pending,
                Err(Broken::Closed | Broken::Reset | Broken::TimedOut) => {
                    std::task::Poll::Ready(Err(Error::Closed))
                }
            }
        })
        .await?;
        Ok(Receipt::from_channel(id, to, rx))
    }
}
