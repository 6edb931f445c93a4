//! How a call ends, from what its caller learns: its request's verdict, its reply, its
//! deadline. Sans-IO: the endpoint's calls ([`crate::rpc`]) and the simulator use it alike.

use bytes::Bytes;

use crate::envelope::Outcome;

/// What the caller of one call learns, in the order it learns it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Learned {
    /// The request was acknowledged: the server took it with its reply queued (it was
    /// executed).
    Acknowledged,
    /// The request was given up before any whole copy of it left (or refused by the server
    /// for its size): never delivered.
    NotDelivered,
    /// The request was given up, or its receiver lost its incarnation, after a whole copy
    /// left.
    InDoubt,
    /// The reply came.
    Reply(Outcome, Bytes),
    /// The call's deadline passed (after its request's own deadline, which gives the request
    /// a verdict first).
    Deadline,
}

/// How a call ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// The reply came: the handler's answer, error or panic.
    Reply(Outcome, Bytes),
    /// The request was certainly not executed, and never will be.
    NotExecuted,
    /// The request was executed at most once, maybe not at all.
    InDoubt,
    /// The request was executed; its reply did not come in time.
    NoReply,
}

/// A call in progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CallState {
    acknowledged: bool,
}

impl CallState {
    /// A call whose request was just sent.
    pub fn new() -> CallState {
        CallState::default()
    }

    /// Whether the request was acknowledged (so executed) and the call waits for the reply.
    pub fn is_acknowledged(&self) -> bool {
        self.acknowledged
    }

    /// Learns `l`: the call's end, if this ends it. A reply ends it whatever came before
    /// (an executed request's reply may come before its acknowledgement); a verdict short of
    /// an acknowledgement ends it unless the request was acknowledged already; the deadline
    /// ends an acknowledged call without its reply.
    pub fn learn(&mut self, l: Learned) -> Option<Ended> {
        match l {
            Learned::Reply(o, body) => Some(Ended::Reply(o, body)),
            Learned::Acknowledged => {
                self.acknowledged = true;
                None
            }
            Learned::NotDelivered if !self.acknowledged => Some(Ended::NotExecuted),
            Learned::InDoubt if !self.acknowledged => Some(Ended::InDoubt),
            Learned::NotDelivered | Learned::InDoubt => None,
            Learned::Deadline if self.acknowledged => Some(Ended::NoReply),
            // The request's verdict comes at its deadline: none yet means it is on its way.
            Learned::Deadline => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ending_follows_from_what_was_learned() {
        let reply = || Learned::Reply(Outcome::Answered, Bytes::from_static(b"r"));
        let mut c = CallState::new();
        assert_eq!(
            c.learn(Learned::Deadline),
            None,
            "the verdict decides first"
        );
        assert_eq!(c.learn(Learned::NotDelivered), Some(Ended::NotExecuted));
        let mut c = CallState::new();
        assert_eq!(c.learn(Learned::InDoubt), Some(Ended::InDoubt));
        let mut c = CallState::new();
        assert_eq!(c.learn(Learned::Acknowledged), None);
        assert!(c.is_acknowledged());
        assert_eq!(c.learn(Learned::Deadline), Some(Ended::NoReply));
        let mut c = CallState::new();
        assert_eq!(c.learn(Learned::Acknowledged), None);
        assert!(matches!(c.learn(reply()), Some(Ended::Reply(..))));
        let mut c = CallState::new();
        assert!(
            matches!(c.learn(reply()), Some(Ended::Reply(..))),
            "before the ack too"
        );
    }
}
