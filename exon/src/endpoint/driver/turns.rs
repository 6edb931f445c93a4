//! When a turn of the driver yields to the application's tasks, and whether the next turns
//! take received datagrams in slices.

/// What the driver's turns did, as far as handing the application work and hearing back.
///
/// A turn that took datagrams and handed deliveries on yields, so that the tasks it woke
/// run before more input is taken. If they answered (a command reached the driver before
/// it next took datagrams), the peer waits on those answers: received batches are then
/// taken in slices, each handed over and answered before the next, so that request/reply
/// flows as a pipeline. A receiver whose application only takes messages keeps taking
/// whole batches.
#[derive(Debug, Default)]
pub(crate) struct Turns {
    /// This turn took received datagrams.
    took: bool,
    /// This turn handed deliveries to the application.
    handed: bool,
    /// The last turn that took datagrams ended by yielding, and no datagram was taken since.
    yielded: bool,
    /// A command was taken since that yield.
    answered: bool,
    /// Received batches are taken in slices.
    slicing: bool,
}

impl Turns {
    /// This turn took received datagrams.
    pub(crate) fn took_datagrams(&mut self) {
        self.took = true;
    }

    /// This turn handed a delivery to the application.
    pub(crate) fn handed(&mut self) {
        self.handed = true;
    }

    /// A command from the application was taken.
    pub(crate) fn command(&mut self) {
        self.answered = true;
    }

    /// The turn is over: whether to yield before the next (it took datagrams and handed
    /// deliveries on).
    pub(crate) fn should_yield(&mut self) -> bool {
        let y = std::mem::take(&mut self.took) & std::mem::take(&mut self.handed);
        if y {
            self.yielded = true;
            self.answered = false;
        }
        y
    }

    /// Datagrams are about to be taken: whether in slices (the application answered what
    /// the last yield let it see; otherwise as before it).
    pub(crate) fn slicing(&mut self) -> bool {
        if std::mem::take(&mut self.yielded) {
            self.slicing = self.answered;
        }
        self.slicing
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One turn: datagrams taken, deliveries handed on or not; returns whether it yields.
    fn turn(t: &mut Turns, delivered: bool) -> bool {
        t.slicing();
        t.took_datagrams();
        if delivered {
            t.handed();
        }
        t.should_yield()
    }

    #[test]
    fn slices_only_while_the_application_answers_what_it_was_handed() {
        let mut t = Turns::default();
        assert!(!t.slicing(), "whole batches at first");
        // A receiver that only takes messages: yields after deliveries, never slices.
        for _ in 0..3 {
            assert!(turn(&mut t, true));
            assert!(!t.slicing());
        }
        // Acknowledgements alone (nothing delivered): no yield.
        assert!(!turn(&mut t, false));
        // A server: it answers after the yield, so the next batches come in slices.
        assert!(turn(&mut t, true));
        t.command();
        assert!(t.slicing());
        assert!(t.slicing(), "until the next yield");
        assert!(turn(&mut t, true));
        t.command();
        assert!(t.slicing());
        // It stops answering: whole batches again.
        assert!(turn(&mut t, true));
        assert!(!t.slicing());
        // Commands taken before the yield do not count as answers.
        t.command();
        assert!(turn(&mut t, true));
        assert!(!t.slicing());
    }

    #[test]
    fn a_turn_without_datagrams_does_not_yield() {
        let mut t = Turns::default();
        t.handed();
        assert!(!t.should_yield());
        // Nor does its delivery carry over to a later turn that takes datagrams.
        t.took_datagrams();
        assert!(!t.should_yield());
    }
}
