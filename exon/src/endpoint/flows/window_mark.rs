//! Durable mode: a flow's sender keeps its receiver's window in the flow's mark once it
//! learns it ([`Rules::mark_flow_window`](crate::proto::Rules::mark_flow_window)), so that
//! after a restart the flow goes on with it (its receiver advertises it only when a run
//! starts): with the take of the window's advert, and in each later position of the run.

use crate::ordered::position::SendPosition;
use crate::ordered::Window;
use crate::proto::journal::Mark;
use crate::proto::{Node, NodeId};

/// Durable mode: `mark`, a flow's position kept with a new message to `to`, with the
/// receiver's window the flow's mark knows if it knows none ([`SendPosition::keep_window`],
/// [`Rules::mark_flow_window`](crate::proto::Rules::mark_flow_window)).
pub(crate) fn keep_window(node: &Node, to: NodeId, mark: Mark) -> Mark {
    if !node.rules().mark_flow_window {
        return mark;
    }
    let kept = node.mark(to, mark.lane).map(|v| &v[..]);
    match SendPosition::keep_window(&mark.value, kept) {
        Some(value) => Mark {
            lane: mark.lane,
            value,
        },
        None => mark,
    }
}

/// Durable mode: the mark to keep with the take of a window's advert for the flow whose
/// sending mark is `(from, lane)`, of run `run`: its position with the window, if it did
/// not know it (`None`: a plain take).
pub(crate) fn window_mark(
    node: &Node,
    (from, lane): (NodeId, u64),
    run: u32,
    window: Window,
) -> Option<Mark> {
    let kept = node.mark(from, lane)?;
    let value = SendPosition::learnt_window(kept, run, window)?;
    Some(Mark { lane, value })
}
