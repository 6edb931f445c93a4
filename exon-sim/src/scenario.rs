//! What to simulate: nodes, their configuration, links, workload, faults, and limits.

use std::rc::Rc;
use std::time::Duration;

use exon::proto::{Config, ConfigError, Node};

use crate::faults::Fault;
use crate::link::LinkConfig;
use crate::workload::Workload;

/// A hook run on every node when it is created or restarted (tests use it to switch rules
/// off with `Node::set_rules`).
pub type NodeHook = Rc<dyn Fn(usize, &mut Node)>;

/// A hostile sender that forges REQSLOTS from many made-up node ids, asking for `n` slots
/// each, to test that a victim's state stays bounded (rule 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Hostile {
    /// Index of the node attacked.
    pub victim: usize,
    /// Number of distinct forged source ids (taken above every real node id).
    pub ids: u64,
    /// `n` of each forged REQSLOTS.
    pub n: u64,
    /// Interval between two volleys (one forged datagram per id each).
    pub interval: Duration,
    /// Volleys sent.
    pub volleys: u32,
}

/// What the adversary does on each action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Attack {
    /// Replays a captured datagram to its destination, at any later time.
    Replay,
    /// Delivers a copy of a captured datagram with one bit flipped.
    BitFlip,
    /// In the sender's name, a waiver REQSLOTS whose frontier lies far above every slot
    /// (it would drop the receiver's slots and record).
    Frontier,
    /// In the receiver's name, an ACK for a token seen in flight.
    Ack,
    /// In the receiver's name, a RETRY for a token whose incarnation was seen acknowledged.
    Retry,
    /// In the receiver's name, a DOUBT for a token seen in flight.
    Doubt,
    /// In the sender's name, a TOKEN for an incarnation seen in use.
    Token,
    /// In the sender's name, a STORED that says every slot around one seen in flight is
    /// stored (it would release early tokens the sender never stored), or one whose range
    /// is inverted.
    Stored,
}

impl Attack {
    /// Every attack.
    pub const ALL: &'static [Attack] = &[
        Attack::Replay,
        Attack::BitFlip,
        Attack::Frontier,
        Attack::Ack,
        Attack::Retry,
        Attack::Doubt,
        Attack::Token,
        Attack::Stored,
    ];
}

/// An attacker on the network: it sees every datagram (on-path) but holds no node's secret
/// key. It replays captured datagrams at any later time, flips bits in copies, and forges
/// datagrams in real nodes' names with the frames that would break exactly-once if
/// accepted. From plaintext traffic it reads the real slots and incarnations to aim at;
/// sealed traffic tells it nothing, so it guesses them, and seals with a key of its own.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Adversary {
    /// Interval between two of its actions.
    pub interval: Duration,
    /// Actions taken in all.
    pub actions: u32,
    /// Longest delay before a captured datagram is replayed.
    pub max_replay_delay: Duration,
    /// The attacks it draws from, uniformly.
    pub attacks: &'static [Attack],
}

impl Default for Adversary {
    fn default() -> Self {
        Adversary {
            interval: Duration::from_millis(2),
            actions: 5_000,
            max_replay_delay: Duration::from_secs(5),
            attacks: Attack::ALL,
        }
    }
}

/// A complete, reproducible simulation setup.
#[derive(Clone)]
pub struct Scenario {
    /// Seeds every random choice (links, workload).
    pub seed: u64,
    /// Number of protocol nodes.
    pub nodes: usize,
    /// Configuration of every node.
    pub config: Config,
    /// Settings of every directed link.
    pub link: LinkConfig,
    /// Who sends what.
    pub workload: Workload,
    /// Faults on a schedule. Every link is healed after the last one.
    pub faults: Vec<Fault>,
    /// A forging attacker, if any.
    pub hostile: Option<Hostile>,
    /// An on-path attacker (replays, bit flips, forgeries), if any.
    pub adversary: Option<Adversary>,
    /// Run the nodes in plaintext mode instead of sealing every datagram (the adversary
    /// then breaks exactly-once: the simulator's self-test shows it).
    pub plaintext: bool,
    /// Print every datagram put on a link to stderr, decoded (plaintext only): virtual
    /// time, link, its fate, and its frames.
    pub trace: bool,
    /// Virtual time allowed after the last submission or fault for the run to go quiet.
    pub settle: Duration,
    /// Hard limit on simulated events.
    pub max_events: u64,
    /// Check obliviousness (every node idle) at the end.
    pub expect_idle: bool,
    /// Run on each node at creation and restart.
    pub node_hook: Option<NodeHook>,
    /// How long each application leaves delivered messages in its buffer before taking
    /// them (and so before they are acknowledged). A restart of its node loses what is
    /// still buffered: the application crashed before reading it. Zero takes every
    /// delivery at once.
    pub take_delay: Duration,
    /// A slow application: it takes at most this many deliveries each time it takes (once
    /// per [`take_delay`](Self::take_delay), which must then be positive), leaving the rest
    /// for the next time, so it consumes at most `take_batch / take_delay` messages a
    /// second. Zero: everything in its buffer each time.
    pub take_batch: usize,
    /// Every message is given up (`Node::abandon`) this long after it was submitted, if
    /// not settled by then. `None`: never.
    pub deadline: Option<Duration>,
    /// Each node keeps its clock on a simulated disk: a store completes a sync latency after
    /// it is asked for, a crash loses what was not synced (or tears it), and a restarted node
    /// recovers its clock from the records whose checksums hold. `None`: stores complete at
    /// once and survive every crash.
    pub disk: Option<crate::DiskModel>,
    /// Durable mode: every node journals its inbox and outbox (`Node::recover`), on a
    /// simulated disk per host that survives its crashes, committed in groups a sync
    /// latency after the first write (see [`JournalModel`](crate::JournalModel)). The oracle
    /// then also checks that nothing ends in doubt, that every message reported stored is
    /// acknowledged whatever crashes, and that each journal replays to nothing at the end.
    /// `None`: nodes keep no journal.
    pub durable: Option<crate::JournalModel>,
    /// Request/reply mode: the applications make calls (`workload.messages` of them)
    /// instead of sending messages, servers execute and answer them with `Node::reply`
    /// after [`take_delay`](Self::take_delay) (the handler's time), and the oracle checks
    /// every call's end (see [`RpcModel`](crate::RpcModel)). `None`: plain messages.
    pub rpc: Option<crate::RpcModel>,
    /// Ordered-channel mode: the applications send their `workload.messages` on ordered
    /// channels (`exon::ordered`), with plain messages mixed in, and the oracle checks
    /// every flow (see [`ChannelModel`](crate::ChannelModel)). Takes precedence over
    /// [`rpc`](Self::rpc); deliveries are taken as the channels release them
    /// ([`take_delay`](Self::take_delay) is not used). `None`: no channels.
    ///
    /// Restarts without [`durable`](Self::durable): a restarted node draws a new run and
    /// loses its reorder buffers, and the oracle excuses the flows of a restarted sender or
    /// receiver from completing. A receiver restarted in the middle of a live sender's run
    /// hands the rest of that run (numbers above 0 of a run it does not know) to the
    /// application out of the order, as the endpoint does (`Kind::Unordered`), and the
    /// oracle checks each is its number's message, once, never one told not delivered
    /// (`Oracle::on_chan_unordered`); the order it owes starts again at number 0 (a gap for
    /// a message 0 delivered before the restart takes the flow up again).
    ///
    /// With [`durable`](Self::durable) the flows are durable as the endpoint's are (rule
    /// `durable_flows`): their positions live in the journal's marks, a restarted host goes
    /// on from them, and the oracle excuses no flow: each is released to its end, in order,
    /// each number's effect once (a flagged redelivery of a number the application had is
    /// allowed: it commits its effect with the number). Not with the faults that lose or
    /// replace a journal (`journal_loss`, `switch_on`, `restore`, `damage`) nor `keyed`.
    pub channels: Option<crate::ChannelModel>,
    /// Byte-stream mode: every node writes [`StreamModel::streams`](crate::StreamModel)
    /// durable streams to every other node, their readers store what they read in their own
    /// store (kept across crashes), and the oracle checks each store holds exactly its
    /// source's prefix and, at the end, the whole source and its end (see
    /// [`StreamModel`](crate::StreamModel)). Needs [`durable`](Self::durable) (a restart
    /// without a journal ends a stream), with its journals kept (no lost, new, restored or
    /// damaged ones, no keyed sends), and no [`deadline`](Self::deadline) (a stream has no
    /// gaps: a chunk given up aborts it). Not with channels or RPC; `workload.messages` and
    /// [`take_delay`](Self::take_delay) are not used. `None`: no streams.
    pub streams: Option<crate::StreamModel>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario")
            .field("seed", &self.seed)
            .field("nodes", &self.nodes)
            .field("link", &self.link)
            .field("workload", &self.workload)
            .field("faults", &self.faults)
            .field("hostile", &self.hostile)
            .field("adversary", &self.adversary)
            .field("plaintext", &self.plaintext)
            .field("trace", &self.trace)
            .field("take_delay", &self.take_delay)
            .field("take_batch", &self.take_batch)
            .field("disk", &self.disk)
            .field("deadline", &self.deadline)
            .field("durable", &self.durable)
            .field("rpc", &self.rpc)
            .field("channels", &self.channels)
            .field("streams", &self.streams)
            .finish_non_exhaustive()
    }
}

/// Why a [`Scenario`] cannot run.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScenarioError {
    /// Fewer than two nodes.
    #[error("need at least 2 nodes, got {0}")]
    TooFewNodes(usize),
    /// The workload's payloads are above the nodes' `max_message_size`: every send would
    /// be refused and the run would never end.
    #[error(
        "payload of {len} bytes is above the maximum of {max} bytes \
         (max_message_size); use a smaller payload"
    )]
    PayloadTooLarge {
        /// The payload size asked for.
        len: usize,
        /// The largest message the node configuration accepts.
        max: usize,
    },
    /// The node configuration is invalid.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// Two modes that do not go together.
    #[error("{0}")]
    Unsupported(&'static str),
}

impl Scenario {
    /// The largest message the workload sends, in bytes: its largest payload, in an
    /// envelope for RPC and channels, or a stream's largest chunk in its envelope.
    pub fn largest_message(&self) -> usize {
        let mut largest = self.workload.payload_len.max(self.workload.max_payload_len);
        if self.rpc.is_some() || self.channels.is_some() {
            largest += exon::envelope::MAX_OVERHEAD;
        }
        if let Some(m) = &self.streams {
            largest = largest.max(m.chunk.saturating_add(exon::envelope::MAX_OVERHEAD));
        }
        largest
    }

    /// Checks that the scenario can run: at least two nodes, a valid node configuration, and
    /// payloads that fit in one datagram.
    pub fn validate(&self) -> Result<(), ScenarioError> {
        if self.nodes < 2 {
            return Err(ScenarioError::TooFewNodes(self.nodes));
        }
        self.config.validate()?;
        if self.link.shared_queue && self.link.rate.is_none_or(|r| r == 0) {
            return Err(ScenarioError::Unsupported(
                "a shared queue needs a rate limit (--rate)",
            ));
        }
        if self.trace && !self.plaintext {
            return Err(ScenarioError::Unsupported(
                "--trace decodes datagrams: it needs --plaintext",
            ));
        }
        if self.link.mtu < self.config.mtu.min_datagram_size {
            // Exon's base datagram size must fit every path (docs/wire.md, "Path MTU
            // discovery"): below it nothing is promised, and the run would only stall.
            return Err(ScenarioError::Unsupported(
                "--link-mtu below the nodes' base datagram size (1200): exon needs every \
                 path to carry it",
            ));
        }
        if self.link.drop_every == Some(1) {
            return Err(ScenarioError::Unsupported(
                "--drop-every 1 loses every datagram: nothing could ever arrive",
            ));
        }
        let max = self.config.limits.max_message_size;
        let largest = self.largest_message();
        if largest > max {
            return Err(ScenarioError::PayloadTooLarge { len: largest, max });
        }
        if let Some(m) = &self.streams {
            self.validate_streams(m)?;
        }
        if let Some(d) = self.durable.as_ref().filter(|d| d.keyed) {
            // A journal lost or damaged forgets keys it accepted: the node refuses keyed
            // sends until the application settles them (`KeysForgotten`), and this one
            // gives its rows to that destination up in doubt (`settle_forgotten`). A
            // restored copy, or a node switched to durable mode mid-run, forgets keys
            // undetected (docs/durability.md, the limits): no exactly-once to hold to.
            if d.switch_on || d.restore.is_some() {
                return Err(ScenarioError::Unsupported(
                    "keyed sends need their journals: not with restored journals or durable \
                     mode switched on at a restart (keys forgotten undetected)",
                ));
            }
        }
        if let (Some(_), Some(d)) = (&self.channels, &self.durable) {
            if d.journal_loss > 0.0 || d.switch_on || d.restore.is_some() || d.damage > 0.0 {
                return Err(ScenarioError::Unsupported(
                    "durable channels need their journals: not with lost, new, restored or \
                     damaged journals",
                ));
            }
            if d.keyed {
                return Err(ScenarioError::Unsupported("channels do not send keyed"));
            }
        }
        Ok(())
    }
}

impl Scenario {
    /// The checks of [`validate`](Self::validate) for byte streams.
    fn validate_streams(&self, m: &crate::StreamModel) -> Result<(), ScenarioError> {
        let Some(d) = &self.durable else {
            return Err(ScenarioError::Unsupported("streams need durable mode"));
        };
        if d.journal_loss > 0.0 || d.switch_on || d.restore.is_some() || d.damage > 0.0 || d.keyed {
            return Err(ScenarioError::Unsupported(
                "durable streams need their journals: not with lost, new, restored or damaged \
                 journals, nor keyed sends",
            ));
        }
        if self.deadline.is_some() {
            return Err(ScenarioError::Unsupported(
                "streams have no gaps: no deadlines with streams",
            ));
        }
        if self.channels.is_some() || self.rpc.is_some() {
            return Err(ScenarioError::Unsupported(
                "streams go alone: not with channels or RPC",
            ));
        }
        if m.streams == 0 || m.bytes == 0 {
            return Err(ScenarioError::Unsupported(
                "streams need at least one stream of at least one byte",
            ));
        }
        let max = self.config.limits.max_message_size;
        let len = m.chunk.max(1) + exon::envelope::MAX_OVERHEAD;
        if len > max {
            return Err(ScenarioError::PayloadTooLarge { len, max });
        }
        Ok(())
    }
}

/// A node configuration for simulations: short timers, so runs go quiet soon in virtual
/// time.
pub fn sim_config() -> Config {
    let mut conf = Config::default();
    conf.timers.idle_timeout = Duration::from_millis(500);
    conf.timers.probe_interval = Duration::from_millis(200);
    conf.timers.max_probe_interval = Duration::from_secs(2);
    conf.timers.initial_rtt = Duration::from_millis(20);
    conf.timers.max_rto = Duration::from_secs(1);
    conf
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario {
            seed: 0,
            nodes: 2,
            config: sim_config(),
            link: LinkConfig::default(),
            workload: Workload::default(),
            faults: Vec::new(),
            hostile: None,
            adversary: None,
            plaintext: false,
            trace: false,
            settle: Duration::from_secs(120),
            max_events: 50_000_000,
            expect_idle: true,
            node_hook: None,
            take_delay: Duration::ZERO,
            take_batch: 0,
            deadline: None,
            disk: None,
            durable: None,
            rpc: None,
            channels: None,
            streams: None,
        }
    }
}
