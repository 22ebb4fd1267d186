//! A helper calls a helper, through a `use`, which reads the clock.

use mcp_tasks_runtime::task_tool;

use crate::clock::stamp;

#[task_tool]
async fn report() -> String {
    format_report()
}

fn format_report() -> String {
    format!("at {}", stamp())
}

mod clock {
    use std::time::{SystemTime, UNIX_EPOCH};

    pub(crate) fn stamp() -> u64 {
        Rolling::next()
    }

    struct Rolling;

    impl Rolling {
        fn next() -> u64 {
            UNIX_EPOCH.elapsed().map_or(0, |d| d.as_secs())
                + SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
        }
    }
}
