//! Runtimes on their own threads and the batch protocol the loopback runners share.
//!
//! Each runner sets its connections up once, on two OS threads with a tokio runtime each
//! (like two processes; current-thread unless [`WORKER_THREADS`] says otherwise), and is
//! then driven in batches from the calling thread.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc as std_mpsc, Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};

/// How long a batch may take before the run is declared broken (messages lost).
pub const BATCH_DEADLINE: Duration = Duration::from_secs(30);
/// Where every loopback runner binds (an ephemeral port on 127.0.0.1).
pub const LOCALHOST: &str = "127.0.0.1:0";
/// Most messages an exon receiver takes per `recv_many` call.
pub const RECV_MANY: usize = 256;

/// Worker threads of each side's tokio runtime: 0 (the default) for a current-thread
/// runtime, otherwise a multi-thread runtime with that many workers.
pub static WORKER_THREADS: AtomicUsize = AtomicUsize::new(0);

/// Builds a runtime on the current thread for `workers == 0`, else a multi-thread one.
pub fn runtime(workers: usize) -> tokio::runtime::Runtime {
    let mut b = if workers == 0 {
        tokio::runtime::Builder::new_current_thread()
    } else {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(workers);
        b
    };
    b.enable_all().build().expect("runtime")
}

/// Runs `f` on a new OS thread inside a tokio runtime (see [`WORKER_THREADS`]).
pub fn spawn_rt<F, Fut>(name: &str, f: F) -> JoinHandle<()>
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    std::thread::Builder::new()
        .name(name.into())
        .spawn(move || runtime(WORKER_THREADS.load(Ordering::Relaxed)).block_on(f()))
        .expect("thread")
}

/// What the sending thread is asked to do.
pub enum Cmd {
    /// Send messages `start..start + n`.
    Send { start: u64, n: u64 },
    /// Report counters (exon only) and go on.
    Stats(std_mpsc::Sender<String>),
}

/// The receiving side's report channel: it counts verified messages and tells the driving
/// thread when the count reaches the target of the batch in progress.
pub struct Progress {
    target: AtomicU64,
    done: Mutex<std_mpsc::Sender<u64>>,
}

impl Progress {
    /// A progress with no target yet, and the channel its target count is reported on.
    pub fn new() -> (Arc<Progress>, std_mpsc::Receiver<u64>) {
        let (tx, rx) = std_mpsc::channel();
        let p = Progress {
            target: AtomicU64::new(u64::MAX),
            done: Mutex::new(tx),
        };
        (Arc::new(p), rx)
    }

    /// Sets the count the batch in progress is done at.
    pub fn expect(&self, count: u64) {
        self.target.store(count, Ordering::Release);
    }

    /// The receiver has verified `count` messages in all.
    pub fn verified(&self, count: u64) {
        if count == self.target.load(Ordering::Acquire) {
            let _ = self.done.lock().unwrap().send(count);
        }
    }
}

/// The threads of a runner: a receiving thread that runs until its stop signal, and
/// sending threads driven by commands.
pub struct Crew {
    cmds: Vec<mpsc::UnboundedSender<Cmd>>,
    stop: Option<oneshot::Sender<()>>,
    receiver: Option<JoinHandle<()>>,
    senders: Vec<JoinHandle<()>>,
}

impl Crew {
    /// A crew of the `receiver` thread, which `stop` stops, and no senders yet.
    pub fn new(receiver: JoinHandle<()>, stop: oneshot::Sender<()>) -> Crew {
        Crew {
            cmds: Vec::new(),
            stop: Some(stop),
            receiver: Some(receiver),
            senders: Vec::new(),
        }
    }

    /// Adds a sending thread, which takes its commands from `cmds`'s receiver.
    pub fn add_sender(&mut self, cmds: mpsc::UnboundedSender<Cmd>, thread: JoinHandle<()>) {
        self.cmds.push(cmds);
        self.senders.push(thread);
    }

    /// The senders' command channels (none once shut down).
    pub fn cmds(&self) -> &[mpsc::UnboundedSender<Cmd>] {
        &self.cmds
    }

    /// Stops the receiver first (the senders are idle between batches), so that it never
    /// sees a sender's connection go away as an error; then ends the senders' commands and
    /// waits for them.
    pub fn shutdown(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(r) = self.receiver.take() {
            let _ = r.join();
        }
        self.cmds.clear();
        for t in self.senders.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for Crew {
    fn drop(&mut self) {
        self.shutdown();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_crew_stops_its_receiver_then_its_senders() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let o = order.clone();
        let receiver = std::thread::spawn(move || {
            let _ = stop_rx.blocking_recv();
            o.lock().unwrap().push("receiver");
        });
        let mut crew = Crew::new(receiver, stop_tx);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let o = order.clone();
        let sender = std::thread::spawn(move || {
            while rx.blocking_recv().is_some() {}
            o.lock().unwrap().push("sender");
        });
        crew.add_sender(tx, sender);
        assert_eq!(crew.cmds().len(), 1);
        crew.shutdown();
        assert_eq!(*order.lock().unwrap(), ["receiver", "sender"]);
        assert!(crew.cmds().is_empty());
    }
}
