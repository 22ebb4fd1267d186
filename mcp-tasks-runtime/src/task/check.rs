//! The replay check's mode of a run: the journal replayed with no step run
//! live (what [`replay::check`](crate::replay::check) runs each task in).

use std::sync::Arc;

use crate::journal::{JournalEntry, StepKind};

use super::context::{Run, TaskCtx};

impl TaskCtx {
    /// A context that replays `run`'s journal and runs nothing live: the
    /// first step past the journal stops the run ([`Exit::Replayed`](super::drive::Exit::Replayed)), and
    /// nothing is written anywhere. What the replay check runs a task in.
    pub(crate) fn check(run: Run) -> Arc<Self> {
        Self::with_mode(run, true, false)
    }

    /// What a replay check found once its run stopped: where the code and
    /// the journal differ (the position, the entry recorded there, the step
    /// asked for), and the first position the run did not get to.
    pub(crate) fn checked(&self) -> (Option<(u32, JournalEntry, StepKind, String)>, u32) {
        let s = self.lock();
        (s.diverged.clone(), s.next)
    }

    /// The journal the run started from (what a replay check compares
    /// with), by position.
    pub(crate) fn recorded_after(&self, position: u32) -> Option<JournalEntry> {
        self.lock()
            .journal
            .range(position..)
            .next()
            .map(|(_, e)| e.clone())
    }
}
