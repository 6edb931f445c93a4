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
    /// The deadline passed before the acknowledgement: the acknowledgement ends the call.
    overdue: bool,
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
    /// ends an acknowledged call without its reply, and a call acknowledged after its
    /// deadline passed ends so at the acknowledgement (its reply has had its time).
    pub fn learn(&mut self, l: Learned) -> Option<Ended> {
        match l {
            Learned::Reply(o, body) => Some(Ended::Reply(o, body)),
            Learned::Acknowledged => {
                self.acknowledged = true;
                self.overdue.then_some(Ended::NoReply)
            }
            Learned::NotDelivered if !self.acknowledged => Some(Ended::NotExecuted),
            Learned::InDoubt if !self.acknowledged => Some(Ended::InDoubt),
            Learned::NotDelivered | Learned::InDoubt => None,
            Learned::Deadline if self.acknowledged => Some(Ended::NoReply),
            // The request's verdict comes at its deadline: none yet means it is on its way.
            Learned::Deadline => {
                self.overdue = true;
                None
            }
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

    /// Found by the simulator (`--drop-every 2 --rpc --restarts 2 --call-deadline-ms 500`,
    /// seed 22): the deadline passed while the request was still on its way, the
    /// acknowledgement came after it, and the server's restart lost the reply: the call
    /// never ended. An acknowledgement after the deadline ends it (no reply in time); a
    /// reply that comes with it still wins.
    #[test]
    fn an_acknowledgement_after_the_deadline_ends_the_call() {
        let mut c = CallState::new();
        assert_eq!(c.learn(Learned::Deadline), None, "still on its way");
        assert_eq!(c.learn(Learned::Acknowledged), Some(Ended::NoReply));
        let mut c = CallState::new();
        assert_eq!(c.learn(Learned::Deadline), None);
        let reply = Learned::Reply(Outcome::Answered, Bytes::from_static(b"r"));
        assert!(matches!(c.learn(reply), Some(Ended::Reply(..))));
        let mut c = CallState::new();
        assert_eq!(c.learn(Learned::Deadline), None);
        assert_eq!(c.learn(Learned::NotDelivered), Some(Ended::NotExecuted));
    }
}
