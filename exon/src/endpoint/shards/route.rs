//! The links between the driver shards of a sharded endpoint: datagrams a shard received for
//! peers another shard owns are passed to that shard.

use std::net::SocketAddr;

use bytes::BytesMut;
use tokio::sync::mpsc;

use crate::endpoint::api::stats::EndpointStats;
use crate::endpoint::shards::steering::shard_of;

/// Datagrams a shard received for peers another shard owns, with their source addresses.
pub(crate) type Forward = Vec<(BytesMut, SocketAddr)>;

/// Batches of forwarded datagrams a shard's queue holds at most; more are dropped (as the
/// network may drop them), so a flood aimed at one shard cannot grow memory.
pub(crate) const FORWARD_QUEUE: usize = 64;

/// One shard's links to the others: datagrams whose source another shard owns go there.
pub(crate) struct Route {
    /// This shard's index.
    me: usize,
    /// Queues into every shard (`None` for this one).
    to: Vec<Option<mpsc::Sender<Forward>>>,
    /// Datagrams gathered for each shard during one receive batch.
    gathered: Vec<Forward>,
    /// Datagrams the other shards forward to this one.
    from: mpsc::Receiver<Forward>,
    /// False once every other shard has stopped (nothing more can come).
    from_open: bool,
}

impl Route {
    /// The links of `n` shards to each other, one [`Route`] per shard, in order.
    pub(crate) fn mesh(n: usize) -> Vec<Route> {
        let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| mpsc::channel(FORWARD_QUEUE)).unzip();
        rxs.into_iter()
            .enumerate()
            .map(|(me, from)| Route {
                me,
                to: txs
                    .iter()
                    .enumerate()
                    .map(|(i, tx)| (i != me).then(|| tx.clone()))
                    .collect(),
                gathered: (0..n).map(|_| Vec::new()).collect(),
                from,
                from_open: true,
            })
            .collect()
    }

    /// This shard's index.
    pub(crate) fn me(&self) -> usize {
        self.me
    }

    /// The shard that owns the source of `datagram`, when it is another one. A datagram
    /// whose header does not decode stays (the local node rejects and counts it).
    fn owner_elsewhere(&self, datagram: &[u8]) -> Option<usize> {
        let (h, _) = crate::proto::Header::decode_prefix(datagram).ok()?;
        let owner = shard_of(h.src, self.to.len());
        (owner != self.me).then_some(owner)
    }

    /// Keeps `datagram` aside for the shard that owns its source, if that is another one;
    /// returns it otherwise.
    pub(crate) fn keep_elsewhere(
        &mut self,
        datagram: BytesMut,
        from: SocketAddr,
    ) -> Option<BytesMut> {
        match self.owner_elsewhere(&datagram) {
            Some(owner) => {
                self.gathered[owner].push((datagram, from));
                None
            }
            None => Some(datagram),
        }
    }

    /// Hands the datagrams gathered for other shards to them, one batch per shard; a full
    /// queue drops its batch (counted).
    pub(crate) fn flush(&mut self, stats: &mut EndpointStats) {
        for (i, batch) in self.gathered.iter_mut().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let n = batch.len() as u64;
            let Some(tx) = self.to.get(i).and_then(Option::as_ref) else {
                batch.clear();
                continue;
            };
            match tx.try_send(std::mem::take(batch)) {
                Ok(()) => stats.forwarded += n,
                Err(_) => stats.forward_drops += n,
            }
        }
    }

    /// The queue of datagrams forwarded to this shard, while another shard may still send.
    pub(crate) fn incoming(&mut self) -> Option<&mut mpsc::Receiver<Forward>> {
        self.from_open.then_some(&mut self.from)
    }

    /// A batch forwarded to this shard, if one is there now.
    pub(crate) fn try_incoming(&mut self) -> Option<Forward> {
        self.from.try_recv().ok()
    }

    /// Every other shard has stopped.
    pub(crate) fn close_incoming(&mut self) {
        self.from_open = false;
    }
}
