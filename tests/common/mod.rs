//! What the crash tests (`durable_kill`, `rpc_kill`) share: reading the line files their
//! node processes keep.

use std::path::Path;

/// The whole lines of a node's file (empty if there is none): a last line a kill cut short
/// (a `write` crossing a page) was never synced, and what it names never happened; the node
/// itself cuts it off at its next start (`open_lines` in `src/bin/node`).
pub fn whole_lines(path: &Path) -> String {
    let mut text = std::fs::read_to_string(path).unwrap_or_default();
    text.truncate(text.rfind('\n').map_or(0, |i| i + 1));
    text
}
