//! The request/reply workload ([`Scenario::rpc`](crate::Scenario::rpc)): which nodes serve
//! and which call, how long a caller waits, which handlers fail, and what each server
//! answers (a pure function of the call, so that the oracle knows the one right answer).

use std::time::Duration;

use exon::envelope::Outcome;

/// How the applications call each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RpcModel {
    /// Nodes `0..servers` serve and the others call; `0` (or every node): every node both
    /// serves and calls.
    pub servers: usize,
    /// A caller gives a call up this long after its request left (`Learned::Deadline`):
    /// an acknowledged call ends without its reply, others end at their request's verdict.
    /// As the endpoint's calls do, the request itself is given up then (or at
    /// [`Scenario::deadline`](crate::Scenario::deadline) if that comes first), unless
    /// [`requests_outlive_calls`](Self::requests_outlive_calls).
    pub call_deadline: Duration,
    /// The requests are given up only at [`Scenario::deadline`](crate::Scenario::deadline)
    /// (never without one), not at their call's deadline: how the simulator made calls
    /// before it modelled the endpoint's, kept for the rule tests whose defect shows
    /// only in a request that waits for ever. An endpoint cannot call this way.
    pub requests_outlive_calls: bool,
    /// A server answers the requests its handlers finished together, each run from one
    /// caller in one [`Node::reply_many`](exon::proto::Node::reply_many) (as the
    /// endpoint's driver hands over a server's replies of one turn), not one
    /// [`Node::reply`](exon::proto::Node::reply) each.
    pub replies_together: bool,
    /// One call in this many fails at its server (`Outcome::Failed`), chosen by the call's
    /// hash; `0`: none.
    pub fail_one_in: u64,
    /// One submission in this many (drawn at random) is a plain message
    /// (`Envelope::message`) to a random other node instead of a call; `0`: none.
    pub message_one_in: u64,
}

impl Default for RpcModel {
    fn default() -> Self {
        RpcModel {
            servers: 1,
            call_deadline: Duration::from_secs(30),
            requests_outlive_calls: false,
            replies_together: false,
            fail_one_in: 7,
            message_one_in: 0,
        }
    }
}

impl RpcModel {
    /// When a request sent now is given up, after `deadline` (the scenario's, for every
    /// message), as its call's: the earlier of that and the call's deadline, unless
    /// requests outlive their calls.
    pub fn request_deadline(&self, deadline: Option<Duration>) -> Option<Duration> {
        if self.requests_outlive_calls {
            return deadline;
        }
        Some(deadline.map_or(self.call_deadline, |d| d.min(self.call_deadline)))
    }

    /// Whether node `i` of `n` serves.
    pub fn serves(&self, i: usize, n: usize) -> bool {
        self.servers == 0 || self.servers >= n || i < self.servers
    }

    /// Whether node `i` of `n` calls.
    pub fn calls(&self, i: usize, n: usize) -> bool {
        self.servers == 0 || self.servers >= n || i >= self.servers
    }

    /// The servers node `i` of `n` may call (never itself).
    pub fn servers_for(&self, i: usize, n: usize) -> Vec<usize> {
        (0..n).filter(|&j| j != i && self.serves(j, n)).collect()
    }

    /// Submissions (calls and plain messages) node `i` of `n` makes, of `total` over all
    /// callers.
    pub fn quota(&self, i: usize, n: usize, total: u64) -> u64 {
        if !self.calls(i, n) || self.servers_for(i, n).is_empty() {
            return 0;
        }
        let callers: Vec<usize> = (0..n)
            .filter(|&j| self.calls(j, n) && !self.servers_for(j, n).is_empty())
            .collect();
        let k = callers.iter().position(|&j| j == i).unwrap_or(0) as u64;
        let c = callers.len().max(1) as u64;
        total / c + u64::from(k < total % c)
    }

    /// How server `server` ends call `call` of `caller` (run `seed`), and the body of its
    /// reply: the one answer the caller may end the call with.
    pub fn answer(&self, seed: u64, server: usize, caller: usize, call: u64) -> (Outcome, Vec<u8>) {
        let h = mix(seed ^ mix((caller as u64) << 32 ^ call));
        let failed = self.fail_one_in > 0 && h.is_multiple_of(self.fail_one_in);
        let outcome = if failed {
            Outcome::Failed
        } else {
            Outcome::Answered
        };
        let word = if failed { "failed" } else { "answer" };
        let body = format!("{word} node{server} to node{caller} call {call}: {h:016x}");
        (outcome, body.into_bytes())
    }
}

/// A 64-bit mix (splitmix64's finaliser).
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles_and_quotas() {
        let m = RpcModel {
            servers: 1,
            ..RpcModel::default()
        };
        assert!(m.serves(0, 3) && !m.calls(0, 3));
        assert!(m.calls(2, 3) && !m.serves(2, 3));
        assert_eq!((0..3).map(|i| m.quota(i, 3, 11)).sum::<u64>(), 11);
        let both = RpcModel {
            servers: 0,
            ..RpcModel::default()
        };
        assert_eq!((0..3).map(|i| both.quota(i, 3, 10)).sum::<u64>(), 10);
        assert_eq!(both.servers_for(1, 3), vec![0, 2]);
    }

    #[test]
    fn some_calls_fail() {
        let m = RpcModel::default();
        let failed = (0..700)
            .filter(|&c| m.answer(1, 0, 1, c).0 == Outcome::Failed)
            .count();
        assert!((50..150).contains(&failed), "{failed}");
        assert_eq!(m.answer(1, 0, 1, 5), m.answer(1, 0, 1, 5));
    }
}
