//! `exon-sim`: a command-line soak of the Exon protocol in the deterministic simulator.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use exon_sim::{faults, GilbertElliott, LinkConfig, Pattern, Scenario, Sim, Workload};
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressState, ProgressStyle};
use rand::rngs::SmallRng;
use rand::SeedableRng;

/// Traffic patterns.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Traffic {
    /// Node i streams to node i+1.
    Ring,
    /// Every node sends to random other nodes.
    Many,
    /// Request/reply between random pairs (replies come on top of --messages).
    Rpc,
    /// Every node but 0 streams to node 0, node 0 to node 1 (with --shared-queue: senders
    /// competing at one bottleneck).
    Incast,
}

/// Soak-tests Exon in a deterministic network simulator and checks exactly-once:
/// no duplicate, no loss after healing, every node idle at the end, bounded state.
/// Exits 0 only if every check held; the last line is a key=value summary.
#[derive(Debug, Parser)]
#[command(name = "exon-sim", version)]
struct Args {
    /// Number of protocol nodes.
    #[arg(long, default_value_t = 2)]
    nodes: usize,
    /// Messages the applications submit in total.
    #[arg(long, default_value_t = 100_000)]
    messages: u64,
    /// Independent loss probability per datagram and link.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Bursty (Gilbert-Elliott) loss: probability of entering the bad state per datagram.
    #[arg(long, default_value_t = 0.0)]
    burst: f64,
    /// Losses in step with the exchange: every K-th datagram on each link is lost (0: none).
    #[arg(long, default_value_t = 0)]
    drop_every: u32,
    /// Duplication probability per datagram; copies may arrive very late.
    #[arg(long, default_value_t = 0.0)]
    dup: f64,
    /// Largest extra delay of a duplicate, in milliseconds.
    #[arg(long, default_value_t = 5000)]
    dup_delay_ms: u64,
    /// Reordering probability per datagram.
    #[arg(long, default_value_t = 0.0)]
    reorder: f64,
    /// One-way latency in milliseconds.
    #[arg(long, default_value_t = 5)]
    latency_ms: u64,
    /// Jitter in milliseconds (uniform extra delay).
    #[arg(long, default_value_t = 0)]
    jitter_ms: u64,
    /// Link rate limit in bytes per second (0: unlimited).
    #[arg(long, default_value_t = 0)]
    rate: u64,
    /// With --rate: one rate limiter and queue in front of each node, shared by every link
    /// into it (a bottleneck its senders compete for), instead of one per directed link.
    #[arg(long)]
    shared_queue: bool,
    /// With --rate: bytes the rate limiter queues before it drops at the tail (a few
    /// datagrams' worth make it a policer: drops above the rate, no queue to raise the RTT).
    #[arg(long, default_value_t = 256 * 1024)]
    queue_bytes: usize,
    /// Number of partitions or holds (each healed later) during the run.
    #[arg(long, default_value_t = 0)]
    partitions: usize,
    /// Number of node restarts (keeping the stored clock) during the run.
    #[arg(long, default_value_t = 0)]
    restarts: usize,
    /// Restart nodes without their clock (rule 8 broken: expected to violate exactly-once).
    #[arg(long)]
    lose_clock: bool,
    /// Run the nodes in plaintext mode instead of sealing every datagram (rules that
    /// differ between the modes: a restarted sender's request refused, not counted).
    #[arg(long)]
    plaintext: bool,
    /// Print every datagram to stderr, decoded: virtual time, link, fate (ok, DROP,
    /// HOLD) and frames (needs --plaintext; use with --seed).
    #[arg(long)]
    trace: bool,
    /// Traffic pattern.
    #[arg(long, value_enum, default_value_t = Traffic::Ring)]
    traffic: Traffic,
    /// Payload size in bytes (at least 13).
    #[arg(long, default_value_t = 32)]
    payload: usize,
    /// Largest payload: above `--payload`, sizes vary per message (log-uniformly) up to
    /// this, and the larger ones travel in fragments (0: every payload is `--payload`).
    #[arg(long, default_value_t = 0)]
    max_payload: usize,
    /// Seed of every random choice; the same seed replays the same run.
    #[arg(long, env = "EXON_SIM_SEED", default_value_t = 1)]
    seed: u64,
    /// Number of consecutive seeds to run, from --seed.
    #[arg(long, default_value_t = 1)]
    seeds: u64,
    /// Print every node's counters, summed, after each run (to stderr).
    #[arg(long)]
    stats: bool,
    /// Largest extra delay of a reordered datagram, in milliseconds.
    #[arg(long, default_value_t = 20)]
    reorder_max_delay_ms: u64,
    /// The links' MTU: the largest datagram (UDP payload) they carry, in bytes.
    #[arg(long, default_value_t = 1472)]
    link_mtu: usize,
    /// The nodes' datagram ceiling (`Config::mtu.max_datagram_size`), in bytes. Default: the
    /// node default (65507), or with `--no-mtu-discovery` the link MTU.
    #[arg(long)]
    max_datagram: Option<usize>,
    /// Turn path MTU discovery off (`Config::mtu.discovery`): every datagram may be as
    /// large as the ceiling (`--max-datagram`).
    #[arg(long)]
    no_mtu_discovery: bool,
    /// Tell every node at boot that its route to each peer carries this many bytes
    /// (`Node::set_route`, as the driver does from the socket): path MTU discovery probes
    /// it first and never above it. Above `--link-mtu` it models a first hop larger than
    /// the path (the route's size fails, the steps go on below it).
    #[arg(long)]
    route: Option<usize>,
    /// Slots per destination (`Config::flow.window`).
    #[arg(long)]
    window: Option<u64>,
    /// Envelopes asked for ahead (`Config::flow.envelope_target`).
    #[arg(long)]
    envelope_target: Option<u64>,
    /// Envelope low watermark (`Config::flow.envelope_low`).
    #[arg(long)]
    envelope_low: Option<u64>,
    /// Longest a receiver delays an ACK, in milliseconds (`Config::acks.delay`).
    #[arg(long)]
    ack_delay_ms: Option<u64>,
    /// Tokens that make a receiver acknowledge at once (`Config::acks.every`).
    #[arg(long)]
    ack_every: Option<u32>,
    /// Most sender and receiver records per node (`Config::limits.max_sender_records` and
    /// `max_receiver_records`).
    #[arg(long)]
    record_cap: Option<usize>,
    /// Congestion control of every node.
    #[arg(long, value_enum, default_value_t = Congestion::Bbr)]
    congestion: Congestion,
    /// How long applications leave a delivery in their buffer before taking it (and so
    /// before it is acknowledged), in milliseconds.
    #[arg(long, default_value_t = 0)]
    take_delay_ms: u64,
    /// Virtual seconds allowed after the last submission or fault for the run to go quiet
    /// (a slow run still going after that is reported with its messages Lost). Default:
    /// 120 s plus one second per MB of messages (the largest payload counted for each).
    #[arg(long)]
    settle_s: Option<u64>,
    /// Keep each node's clock on a simulated disk whose syncs take this many microseconds:
    /// a crash loses what was not synced, or tears it, and a restarted node recovers its
    /// clock from the records whose checksums hold. Off: clock stores are instant and
    /// survive every crash.
    #[arg(long)]
    disk_sync_us: Option<u64>,
    /// With `--disk-sync-us`: a crash loses every unsynced write whole (no torn writes).
    #[arg(long)]
    no_torn_writes: bool,
    /// Durable mode: every node journals its inbox and outbox on a simulated disk that
    /// survives its crashes (commits take `--disk-sync-us`, default 2000; crashes may tear
    /// the unsynced tail or cut a commit or compaction). The oracle then also checks that
    /// nothing ends in doubt and that every message reported stored is acknowledged once.
    #[arg(long)]
    durable: bool,
    /// Durable mode: a commit compacts the journal once it grew by this many bytes.
    #[arg(long, default_value_t = 16384)]
    compact_after: u64,
    /// Durable mode: probability that a crash falls inside a commit (records may be left
    /// durable that the node was never told of).
    #[arg(long, default_value_t = 0.0)]
    crash_mid_commit: f64,
    /// Durable mode: probability that a crash also changes a byte of a record the journal
    /// had synced (bit rot, a bad sector). The oracle then expects the recovery to report
    /// the journal damaged, and excuses `InDoubt` only for messages to a damaged node.
    #[arg(long, default_value_t = 0.0)]
    damage: f64,
    /// With `--damage`: the journals do not write down damage they find (the defect
    /// `JournalConfig::mark_damage` prevents; a self-test): a crash before the restarted
    /// node's next `Covers` record makes the next opening vouch again for what it took.
    #[arg(long)]
    forget_damage: bool,
    /// Durable mode: probability that a restart brings the host back with a new, empty
    /// journal, its clock kept (its directory lost). Messages to it unsettled then may end
    /// in doubt; nothing may be delivered twice.
    #[arg(long, default_value_t = 0.0)]
    journal_loss: f64,
    /// Durable mode switched on at restarts: every node runs without a journal until its
    /// first restart and comes back durable (a new journal, its clock kept).
    #[arg(long)]
    durable_at_restart: bool,
    /// Durable mode: keyed sends from an outbox. Each application sends under its
    /// message's sequence number (`Node::send_keyed`), keeps the message until its verdict,
    /// and at each restart sends again what it holds no verdict for; the oracle excuses no
    /// message of a restarted sender (each delivered exactly once). Plain messages only,
    /// without deadlines. With a lost or damaged journal the node refuses keyed sends
    /// until their keys are settled (`KeysForgotten`): the application gives its rows to
    /// that destination up in doubt and settles at the highest key it used.
    #[arg(long, requires = "durable", conflicts_with_all = ["rpc", "channels", "deadline_ms"])]
    keyed: bool,
    /// Durable mode: probability that a restart puts back an older copy of the host's
    /// directory (clock and journal, copied at an earlier restart), starting the node from
    /// max(stored clock, wall-clock floor) as `FileStore::load` does. Deliveries to it after
    /// the copy may be repeated (a documented limit, counted); no message may be
    /// acknowledged undelivered.
    #[arg(long, default_value_t = 0.0)]
    restore: f64,
    /// With `--restore`: wall-clock microseconds per microsecond of virtual time (the
    /// floor's pace; 1 is real time, at which the sim's crash loops run the clock ahead of
    /// the floor). 0: no floor.
    #[arg(long, default_value_t = 1000)]
    restore_floor_rate: u64,
    /// With `--restore`: no wall-clock floor (the node restarts from the copy's clock: the
    /// defect `FileStore::load`'s floor fixes). Same as `--restore-floor-rate 0`.
    #[arg(long)]
    no_restore_floor: bool,
    /// With `--restore` and `--deadline-ms`: the application forgets its deadlines at a
    /// restore (messages in flight again whose deadline passed wait for their verdict,
    /// instead of being given up again at once).
    #[arg(long, requires = "deadline_ms")]
    restore_forgets_deadlines: bool,
    /// Durable mode with `--deadline-ms`: probability that a message given up is followed
    /// by crashes of both sides (the sender's within two sync latencies, often before its
    /// `Resolved` record is synced; at most 16 pairs a run).
    #[arg(long, default_value_t = 0.0)]
    abandon_crash: f64,
    /// Request/reply mode: the applications make `--messages` calls (requests and replies
    /// in envelopes, each call ended by `exon::call::CallState`), servers execute each
    /// request and answer it with `Node::reply` after `--take-delay-ms`, and the oracle
    /// checks every call's end. Combines with `--durable`.
    #[arg(long)]
    rpc: bool,
    /// With `--rpc`: nodes 0..N serve and the others call (0: every node both).
    #[arg(long, default_value_t = 1)]
    servers: usize,
    /// With `--rpc`: a caller gives a call up this many milliseconds after its request left.
    #[arg(long, default_value_t = 30_000)]
    call_deadline_ms: u64,
    /// With `--rpc`: requests are given up only at `--deadline-ms` (never without it),
    /// not at their call's deadline as the endpoint's are (the simulator's calls before it
    /// modelled that; for rule tests whose defect needs a request that waits for ever).
    #[arg(long)]
    requests_outlive_calls: bool,
    /// With `--rpc`: a server answers each run of finished requests from one caller in one
    /// `Node::reply_many`, as the endpoint's driver does, not one `Node::reply` each.
    #[arg(long)]
    replies_together: bool,
    /// With `--rpc`: one call in this many fails at its server (0: none).
    #[arg(long, default_value_t = 7)]
    fail_one_in: u64,
    /// With `--rpc`: one submission in this many is a plain message instead of a call
    /// (0: none).
    #[arg(long, default_value_t = 0)]
    message_one_in: u64,
    /// Ordered-channel mode: the applications send `--messages` on this many channels to
    /// each receiver (`exon::ordered`: numbered, gaps for messages given up, receivers
    /// holding out-of-order messages untaken), and the oracle checks every flow's order,
    /// gaps, held bound and end (0: off). Takes precedence over `--rpc`. With `--durable`
    /// the channels are durable (positions kept in journal marks) and survive crashes of
    /// either side.
    #[arg(long, default_value_t = 0)]
    channels: u16,
    /// With `--channels`: messages of one flow unsettled at once.
    #[arg(long, default_value_t = 8)]
    channel_window: u32,
    /// With `--channels`: per-node windows, comma-separated (node `i` uses the
    /// `i % len`-th), instead of `--channel-window` for all: receivers advertise theirs and
    /// senders keep to the smaller.
    #[arg(long, value_delimiter = ',')]
    channel_windows: Vec<u32>,
    /// With `--channels`: one submission in this many is a plain message (0: none).
    #[arg(long, default_value_t = 5)]
    plain_one_in: u64,
    /// With `--channels --durable`: a restarted sender owes no gaps to the numbers from
    /// its mark's base that it no longer holds (as the endpoint at 2b21b29): a number given
    /// up whose gap a crash lost is never filled (try `--deadline-ms 200 --abandon-crash
    /// 0.3`).
    #[arg(long, requires_all = ["channels", "durable"])]
    no_owed_gaps: bool,
    /// With `--channels --durable`: a restarted sender sends the gaps it owes when its
    /// application sends on the channel again, not at the restart (as the endpoint at
    /// 468cc46): one that no longer sends on it leaves its receiver waiting.
    #[arg(long, requires_all = ["channels", "durable"])]
    owed_gaps_when_used: bool,
    /// With `--channels`: how long a receiver's channel holds messages ahead of a number
    /// that has not come before it asks the sender whether the run lives (and drains it
    /// when the sender answers that it is over); 0: never asks (a run whose sender restarted
    /// without a journal stays held).
    #[arg(long, default_value_t = 1000, requires = "channels")]
    stall_query_ms: u64,
    /// Durable byte-stream mode (with `--durable`): every node writes this many streams to
    /// every other node, each `--stream-bytes` long from a seeded source, in writes of
    /// random sizes cut into chunks of at most `--stream-chunk` bytes; readers read in
    /// random sizes and store what they read in their own store (kept across crashes), and
    /// the oracle checks that each store holds exactly the source's bytes, none skipped,
    /// none twice, and at the end all of them and the stream's end (0: off). Replaces the
    /// `--messages` workload; not with `--channels`, `--rpc` or `--deadline-ms`.
    #[arg(long, default_value_t = 0, requires = "durable",
          conflicts_with_all = ["channels", "rpc", "deadline_ms", "keyed"])]
    streams: u16,
    /// With `--streams`: bytes of each stream.
    #[arg(long, default_value_t = 48 << 10)]
    stream_bytes: u64,
    /// With `--streams`: the largest chunk, in bytes (chunks above the path's datagram
    /// size, about 1200 bytes until path MTU discovery grows it, travel in fragments).
    #[arg(long, default_value_t = 1000)]
    stream_chunk: usize,
    /// With `--streams`: the largest write and the largest read, in bytes.
    #[arg(long, default_value_t = 6000)]
    stream_io: usize,
    /// With `--streams`: chunks of one stream unsettled at once.
    #[arg(long, default_value_t = 8)]
    stream_window: u32,
    /// With `--streams`: the longest time a reader takes to store what it read, in
    /// milliseconds (a crash in between loses what it read and did not store).
    #[arg(long, default_value_t = 3)]
    store_delay_ms: u64,
    /// With `--streams`: a chunk read to its end is taken at once, before its bytes are
    /// stored, not when the application reads again (the rule broken: a crash in between
    /// loses bytes).
    #[arg(long, requires = "streams")]
    take_on_read: bool,
    /// Stop a run after this many events (a run that never goes quiet is reported with
    /// what it left undone).
    #[arg(long, default_value_t = 50_000_000)]
    max_events: u64,
    /// Switches these core rules off on every node (comma-separated names of
    /// `exon::proto::Rules`' fields): self-tests of the rules, which the checker should
    /// then catch.
    #[arg(long, value_delimiter = ',')]
    rules_off: Vec<String>,
    /// Every message (with `--rpc`: every request) is given up this many milliseconds
    /// after it was submitted, if not settled by then (`Node::abandon`). Default: never.
    #[arg(long)]
    deadline_ms: Option<u64>,
}

/// Congestion controllers.
#[derive(Debug, Clone, Copy, ValueEnum)]
enum Congestion {
    /// BBR-style, the default.
    Bbr,
    /// NewReno.
    NewReno,
    /// None: the receiver's slots only.
    Off,
}

/// The settle time of a run: `--settle-s`, or 120 s plus one second per MB of messages.
fn settle(a: &Args) -> Duration {
    if let Some(s) = a.settle_s {
        return Duration::from_secs(s);
    }
    let largest = a.payload.max(a.max_payload) as u64;
    Duration::from_secs(120 + a.messages.saturating_mul(largest) / 1_000_000)
}

/// The node configuration the options describe.
fn node_config(a: &Args) -> exon::proto::Config {
    let mut c = exon_sim::sim_config();
    if let Some(v) = a.max_datagram {
        c.mtu.max_datagram_size = v;
    } else if a.no_mtu_discovery {
        c.mtu.max_datagram_size = a.link_mtu;
    }
    c.mtu.discovery = !a.no_mtu_discovery;
    if let Some(v) = a.window {
        c.flow.window = v;
    }
    if let Some(v) = a.envelope_target {
        c.flow.envelope_target = v;
    }
    if let Some(v) = a.envelope_low {
        c.flow.envelope_low = v;
    }
    if let Some(v) = a.ack_delay_ms {
        c.acks.delay = Duration::from_millis(v);
    }
    if let Some(v) = a.ack_every {
        c.acks.every = v;
    }
    if let Some(v) = a.record_cap {
        c.limits.max_sender_records = v;
        c.limits.max_receiver_records = v;
    }
    c.flow.congestion = match a.congestion {
        Congestion::Bbr => exon::proto::CongestionControl::Bbr,
        Congestion::NewReno => exon::proto::CongestionControl::NewReno,
        Congestion::Off => exon::proto::CongestionControl::Off,
    };
    c
}

/// The channel workload the arguments ask for (`--channels`), if any.
fn channel_model(a: &Args) -> Option<exon_sim::ChannelModel> {
    (a.channels > 0).then(|| exon_sim::ChannelModel {
        channels: a.channels,
        window: a.channel_window,
        windows: a.channel_windows.clone(),
        plain_one_in: a.plain_one_in,
        owed_gaps: !a.no_owed_gaps,
        owed_gaps_at_restart: !a.owed_gaps_when_used,
        stall_query_after: (a.stall_query_ms > 0).then(|| Duration::from_millis(a.stall_query_ms)),
        ..exon_sim::ChannelModel::default()
    })
}

/// The byte-stream workload the options describe (`--streams`).
fn stream_model(a: &Args) -> Option<exon_sim::StreamModel> {
    (a.streams > 0).then(|| exon_sim::StreamModel {
        streams: a.streams,
        bytes: a.stream_bytes,
        chunk: a.stream_chunk,
        max_write: a.stream_io,
        max_read: a.stream_io,
        store_delay: Duration::from_millis(a.store_delay_ms),
        window: a.stream_window,
        deferred_take: !a.take_on_read,
        ..exon_sim::StreamModel::default()
    })
}

fn scenario(a: &Args, seed: u64) -> Scenario {
    let link = LinkConfig {
        latency: Duration::from_millis(a.latency_ms),
        jitter: Duration::from_millis(a.jitter_ms),
        loss: a.loss,
        burst: (a.burst > 0.0).then_some(GilbertElliott {
            p_good_to_bad: a.burst,
            p_bad_to_good: 0.3,
            loss_bad: 0.7,
        }),
        drop_every: (a.drop_every > 0).then_some(a.drop_every),
        dup: a.dup,
        dup_max_delay: Duration::from_millis(a.dup_delay_ms),
        reorder: a.reorder,
        reorder_max_delay: Duration::from_millis(a.reorder_max_delay_ms),
        mtu: a.link_mtu,
        rate: (a.rate > 0).then_some(a.rate),
        shared_queue: a.shared_queue,
        queue_bytes: a.queue_bytes,
    };
    let pattern = match a.traffic {
        Traffic::Ring => Pattern::Ring,
        Traffic::Many => Pattern::ManyToMany,
        Traffic::Rpc => Pattern::Rpc,
        Traffic::Incast => Pattern::Incast,
    };
    let workload = Workload {
        pattern,
        messages: a.messages,
        payload_len: a.payload.max(exon_sim::workload::ID_LEN),
        max_payload_len: a.max_payload,
        ..Workload::default()
    };
    // Faults spread over roughly the time the traffic takes at the default pace.
    let per_node = a.messages / a.nodes.max(1) as u64;
    let span = Duration::from_millis((per_node / workload.burst as u64).max(200) + 500);
    let mut rng = SmallRng::seed_from_u64(seed.wrapping_mul(31) ^ 0xfa);
    let mut faults = faults::random_schedule(&mut rng, a.nodes, span, a.partitions, a.restarts);
    for f in &mut faults {
        if let exon_sim::FaultKind::Restart { keep_clock, .. } = &mut f.kind {
            *keep_clock = !a.lose_clock;
        }
    }
    Scenario {
        seed,
        nodes: a.nodes,
        config: node_config(a),
        link,
        workload,
        faults,
        settle: settle(a),
        take_delay: Duration::from_millis(a.take_delay_ms),
        disk: a.disk_sync_us.map(|us| exon_sim::DiskModel {
            sync_latency: Duration::from_micros(us),
            torn_writes: !a.no_torn_writes,
        }),
        durable: a.durable.then(|| exon_sim::JournalModel {
            compact_after: a.compact_after,
            crash_mid_commit: a.crash_mid_commit,
            damage: a.damage,
            forget_damage: a.forget_damage,
            journal_loss: a.journal_loss,
            switch_on: a.durable_at_restart,
            restore: (a.restore > 0.0).then_some(exon_sim::RestoreModel {
                probability: a.restore,
                floor_rate: if a.no_restore_floor {
                    0
                } else {
                    a.restore_floor_rate
                },
                forgets_deadlines: a.restore_forgets_deadlines,
            }),
            abandon_crash: a.abandon_crash,
            keyed: a.keyed,
            ..exon_sim::JournalModel::default()
        }),
        deadline: a.deadline_ms.map(Duration::from_millis),
        rpc: a.rpc.then(|| exon_sim::RpcModel {
            servers: a.servers,
            call_deadline: Duration::from_millis(a.call_deadline_ms),
            requests_outlive_calls: a.requests_outlive_calls,
            replies_together: a.replies_together,
            fail_one_in: a.fail_one_in,
            message_one_in: a.message_one_in,
        }),
        channels: channel_model(a),
        max_events: a.max_events,
        streams: stream_model(a),
        node_hook: node_hook(&a.rules_off, a.route, a.nodes),
        plaintext: a.plaintext,
        trace: a.trace,
        ..Scenario::default()
    }
}

/// The hook that switches `off` off on every node, if any.
fn node_hook(
    off: &[String],
    route: Option<usize>,
    nodes: usize,
) -> Option<exon_sim::scenario::NodeHook> {
    if off.is_empty() && route.is_none() {
        return None;
    }
    let mut rules = exon::proto::Rules::ALL;
    for name in off {
        // Checked at start (`check_rules_off`).
        exon_sim::rules_off::switch_off(&mut rules, name);
    }
    Some(std::rc::Rc::new(move |i, node: &mut exon::proto::Node| {
        node.set_rules(rules);
        if route.is_some() {
            for peer in (0..nodes).filter(|&p| p != i) {
                node.set_route(exon_sim::sim::node_id(peer), route);
            }
        }
    }))
}

/// The names of `--rules-off` that name no rule.
fn unknown_rules(off: &[String]) -> Vec<&str> {
    off.iter()
        .map(String::as_str)
        .filter(|n| !exon_sim::rules_off::RULES.contains(n))
        .collect()
}

/// The time left at the average rate so far, once there is a rate to speak of (indicatif's
/// own estimate starts from a near-zero rate and shows days).
fn honest_eta(state: &ProgressState, w: &mut dyn std::fmt::Write) {
    let (done, elapsed) = (state.pos(), state.elapsed());
    let left = state.len().map(|len| len.saturating_sub(done));
    match left {
        Some(left) if done > 0 && elapsed >= Duration::from_secs(1) => {
            let secs = elapsed.as_secs_f64() * left as f64 / done as f64;
            let _ = write!(w, "eta {:.0} s", secs.ceil());
        }
        _ => {
            let _ = write!(w, "eta (measuring)");
        }
    }
}

fn main() -> ExitCode {
    let a = Args::parse();
    let unknown = unknown_rules(&a.rules_off);
    if !unknown.is_empty() {
        eprintln!(
            "exon-sim: --rules-off: no such rule: {} (the rules: {})",
            unknown.join(", "),
            exon_sim::rules_off::RULES.join(", ")
        );
        return ExitCode::from(2);
    }
    if let Err(e) = scenario(&a, a.seed).validate() {
        eprintln!("exon-sim: {e}");
        return ExitCode::from(2);
    }
    let mut all_ok = true;
    let mut summary = String::new();
    for seed in a.seed..a.seed.saturating_add(a.seeds.max(1)) {
        let wall = Instant::now();
        let mut sim = Sim::new(scenario(&a, seed));
        let bar = ProgressBar::with_draw_target(Some(a.messages), ProgressDrawTarget::stderr());
        bar.set_style(
            ProgressStyle::with_template(
                "{spinner} seed {msg} [{bar:40}] {pos}/{len} delivered ({per_sec}, {honest_eta})",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .with_key("honest_eta", honest_eta)
            .progress_chars("=> "),
        );
        bar.set_message(seed.to_string());
        let mut k = 0u32;
        while sim.step() {
            k = k.wrapping_add(1);
            if k.is_multiple_of(65_536) {
                bar.set_position(sim.oracle().delivered);
            }
        }
        bar.finish_and_clear();
        if a.stats {
            let mut all = exon::proto::Stats::default();
            for s in sim.node_stats() {
                all.merge(s);
            }
            eprintln!("{all:#?}");
        }
        let report = sim.finish();
        let secs = wall.elapsed().as_secs_f64();
        if !report.ok() {
            all_ok = false;
            eprint!("{}", report.describe_failure());
        }
        summary = format!(
            "{report} wall_s={secs:.3} sim_msgs_per_s={:.0}",
            report.delivered as f64 / secs.max(1e-9)
        );
        println!("{summary}");
    }
    if a.seeds > 1 {
        println!("{summary} all_seeds_ok={all_ok}");
    }
    if all_ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
