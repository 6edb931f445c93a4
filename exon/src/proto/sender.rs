//! The sender-side half-connection record (S record): envelopes, tokens and queued messages
//! for one destination.

use std::collections::VecDeque;
use std::time::Instant;

use bytes::Bytes;

use super::rtt::Rtt;
use super::tokens::Tokens;
use super::{Config, MsgId};

/// A message waiting for an envelope.
#[derive(Debug)]
pub(crate) struct Queued {
    pub id: MsgId,
    pub payload: Bytes,
}

/// A token: the sender's obligation to get `payload` delivered into slot `s` of receiver
/// incarnation `rck`, kept until acknowledged. The token keeps the incarnation it was made
/// under, whatever the record's `rck` becomes later (rule 3 of `docs/algorithm.md`).
#[derive(Debug)]
pub(crate) struct Token {
    /// The receiver incarnation this token's slot belongs to.
    pub rck: u64,
    pub payload: Bytes,
    pub id: MsgId,
    /// When it was last put on the wire (`None`: never yet).
    pub sent_at: Option<Instant>,
    /// How many times it was put on the wire.
    pub sends: u32,
    /// Waiting in `to_send`.
    pub queued: bool,
}

impl Token {
    /// The incarnation this token goes out under: its own (rule 3), or, with that rule
    /// switched off for the checker's self-test, whatever the record holds now.
    pub fn incarnation(&self, record_rck: Option<u64>, keep_own: bool) -> u64 {
        if keep_own {
            self.rck
        } else {
            record_rck.unwrap_or(self.rck)
        }
    }
}

/// Sender-side record for one destination, as in the paper's type `S`.
///
/// Envelopes are the range `env_start .. sck`, all under incarnation `rck`: slots the
/// receiver granted that no token uses yet. `sck` is the next slot number to ask for.
#[derive(Debug)]
pub(crate) struct SRecord {
    /// Sender clock: next slot number to request (one past the last envelope).
    pub sck: u64,
    /// Receiver incarnation the envelopes belong to (`None` before the first SLOTS).
    pub rck: Option<u64>,
    /// First envelope; envelopes are `env_start .. sck`.
    pub env_start: u64,
    /// Messages waiting for an envelope.
    pub queue: VecDeque<Queued>,
    /// Tokens by slot number.
    pub tokens: Tokens,
    /// Slot numbers of tokens waiting to be (re)transmitted, oldest first.
    pub to_send: VecDeque<u64>,
    /// An outstanding REQSLOTS at `s = sck`: the largest `n` asked for.
    pub req_n: Option<u64>,
    /// When the outstanding REQSLOTS was last sent, and whether it was sent more than once.
    pub req_sent_at: Option<Instant>,
    pub req_retransmitted: bool,
    /// A REQSLOTS must go out in the next datagram to this peer.
    pub req_due: bool,
    /// Test-only: a frontier frozen before the token that triggered the request was recorded
    /// (the defect rule 2 corrects).
    pub frontier_override: Option<u64>,
    /// Round-trip estimate and backoff for this destination.
    pub rtt: Rtt,
    /// Retransmission timer for tokens (armed while tokens are in flight).
    pub rto_at: Option<Instant>,
    /// When the record became idle (no message queued, no token).
    pub idle_since: Option<Instant>,
    /// The deadline this record armed in the node's timer queue.
    pub armed: Option<Instant>,
    /// Payload bytes queued or in tokens.
    pub bytes: usize,
    /// Timer jitter, a fraction of 2^16 (re-drawn by the node at every timeout): stretches
    /// timeouts by up to a quarter so that peers' retransmissions do not phase-lock.
    pub jitter: u16,
    /// The last few incarnations the receiver acknowledged tokens of: it delivered into
    /// them, so it never evicted them unused (a RETRY for one of them is refused).
    pub proven: [u64; PROVEN_KEPT],
    proven_next: usize,
}

/// Incarnations remembered as proven per sender record.
const PROVEN_KEPT: usize = 4;

impl SRecord {
    /// Notes that the receiver acknowledged a token of incarnation `r`.
    pub fn note_proven(&mut self, r: u64) {
        if !self.proven.contains(&r) {
            self.proven[self.proven_next] = r;
            self.proven_next = (self.proven_next + 1) % PROVEN_KEPT;
        }
    }

    /// A record for a destination with no state: `sck` starts at the node clock.
    pub fn new(ck: u64, now: Instant) -> Self {
        SRecord {
            sck: ck,
            rck: None,
            env_start: ck,
            queue: VecDeque::new(),
            tokens: Tokens::default(),
            to_send: VecDeque::new(),
            req_n: None,
            req_sent_at: None,
            req_retransmitted: false,
            req_due: false,
            frontier_override: None,
            rtt: Rtt::new(),
            rto_at: None,
            idle_since: Some(now),
            armed: None,
            bytes: 0,
            jitter: 0,
            // u64::MAX is never an incarnation (they are at most 2^62 - 1).
            proven: [u64::MAX; PROVEN_KEPT],
            proven_next: 0,
        }
    }

    /// The retransmission timeout, with this record's jitter.
    pub fn rto(&self, cfg: &Config) -> std::time::Duration {
        let rto = self.rtt.rto(cfg);
        super::timer::stretch(rto, self.jitter)
    }

    /// Number of envelopes ready.
    pub fn envelopes(&self) -> u64 {
        self.sck - self.env_start
    }

    /// Takes the next envelope.
    pub fn take_envelope(&mut self) -> Option<u64> {
        (self.env_start < self.sck).then(|| {
            self.env_start += 1;
            self.env_start - 1
        })
    }

    /// The collection frontier `l`: the receiver may drop every slot below it. It never
    /// passes a token that exists (tokens are recorded before any REQSLOTS is written), nor an
    /// envelope (rule 2).
    pub fn frontier(&self) -> u64 {
        if let Some(l) = self.frontier_override {
            return l;
        }
        match self.tokens.first_slot() {
            Some(s) => s.min(self.env_start),
            None => self.env_start,
        }
    }

    /// How many slots to ask for now: enough for `N` envelopes plus every queued message, but
    /// never more than the window allows (`n = N + |msg| - |env|`, capped).
    pub fn wanted_slots(&self, cfg: &Config) -> u64 {
        let env = self.envelopes();
        let held = env + self.tokens.len() as u64;
        let want = (cfg.envelope_target + self.queue.len() as u64).saturating_sub(env);
        want.min(cfg.window.saturating_sub(held))
    }

    /// Whether it is time to ask for slots: messages wait, or envelopes fell below the low
    /// watermark.
    pub fn needs_slots(&self, cfg: &Config) -> bool {
        !self.queue.is_empty() || self.envelopes() < cfg.envelope_low
    }

    /// Turns an envelope into a token for `msg`; the caller schedules its transmission.
    pub fn make_token(&mut self, slot: u64, rck: u64, msg: Queued) {
        let tok = Token {
            rck,
            payload: msg.payload,
            id: msg.id,
            sent_at: None,
            sends: 0,
            queued: true,
        };
        self.tokens.insert(slot, tok);
        self.to_send.push_back(slot);
        self.idle_since = None;
    }

    /// Turns as many queued messages into tokens as there are envelopes. Returns how many.
    pub fn fill_envelopes(&mut self) -> usize {
        let Some(rck) = self.rck else { return 0 };
        let mut made = 0;
        while !self.queue.is_empty() {
            let Some(slot) = self.take_envelope() else {
                break;
            };
            let Some(msg) = self.queue.pop_front() else {
                break;
            };
            self.make_token(slot, rck, msg);
            made += 1;
        }
        made
    }

    /// True when the record has neither a queued message nor a token.
    pub fn is_quiet(&self) -> bool {
        self.queue.is_empty() && self.tokens.is_empty()
    }

    /// Marks the record idle from `now` if it has become quiet.
    pub fn note_if_idle(&mut self, now: Instant) {
        if self.is_quiet() && self.idle_since.is_none() {
            self.idle_since = Some(now);
        }
    }

    /// When this record next needs `on_timeout`.
    pub fn deadline(&self, cfg: &Config) -> Option<Instant> {
        // A re-send waiting to be written needs no timer until it is written.
        let req = match (self.req_n, self.req_sent_at, self.req_due) {
            (Some(_), Some(t), false) => Some(t + self.rto(cfg)),
            _ => None,
        };
        let idle = self
            .idle_since
            .filter(|_| self.is_quiet())
            .map(|t| t + cfg.idle_timeout);
        [self.rto_at, req, idle].into_iter().flatten().min()
    }

    /// Queues for retransmission every token whose timeout expired, re-arms the token timer,
    /// and backs off if anything was due. Returns how many tokens were queued.
    pub fn expire_tokens(&mut self, now: Instant, cfg: &Config) -> u64 {
        let Some(at) = self.rto_at else { return 0 };
        if at > now {
            return 0;
        }
        let rto = self.rto(cfg);
        let mut due = 0;
        let mut next: Option<Instant> = None;
        for (s, tok) in self.tokens.iter_mut() {
            let Some(sent) = tok.sent_at else { continue };
            if tok.queued {
                continue;
            }
            let expiry = sent + rto;
            if expiry <= now {
                tok.queued = true;
                self.to_send.push_back(s);
                due += 1;
            } else {
                next = Some(next.map_or(expiry, |n| n.min(expiry)));
            }
        }
        if due > 0 {
            self.rtt.on_timeout();
        }
        // Tokens queued now get a fresh timer when they are written.
        self.rto_at = next;
        due
    }
}
