//! `#[allow_nondeterminism]` turns the check off for one statement,
//! expression or match arm, and is removed by the macro.

use std::time::{Duration, Instant, SystemTime};

use mcp_tasks_runtime::{ToolError, checkpoint, durable, task_tool};

#[task_tool]
async fn report() -> Result<String, ToolError> {
    // A statement: the time only feeds a status line.
    #[allow_nondeterminism]
    let started = Instant::now();
    checkpoint("work", || async { Ok(()) }).await?;
    #[allow_nondeterminism]
    durable::status(format!("took {:?}", started.elapsed()));
    // An expression statement.
    #[allow_nondeterminism]
    tokio::time::sleep(Duration::from_millis(1)).await;
    // A block.
    #[allow_nondeterminism]
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    // A match arm.
    let label = match 1 {
        #[allow_nondeterminism]
        1 => format!("{:?}", SystemTime::now()),
        _ => String::new(),
    };
    // Inside a checkpoint, where it is redundant, it is removed too.
    let n: u32 = checkpoint("count", || async {
        #[allow_nondeterminism]
        let n = 1;
        Ok(n)
    })
    .await?;
    Ok(format!("{label} {n}"))
}

fn main() {
    let _ = report_tool();
}
