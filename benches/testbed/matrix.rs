//! The paper's grid.

use crate::netns::Result;

/// Runs the paper's grid.
pub fn run_paper(_a: &crate::Args) -> Result<()> {
    Err("not yet".into())
}
