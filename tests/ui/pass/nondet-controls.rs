//! Deterministic bodies compile: ordinary code, the runtime's durable calls
//! written under `durable::`, work inside journaled closures, seeded
//! generators, locals named like refused fns, and opt-outs.

use std::{
    collections::{BTreeMap, HashMap},
    time::Duration,
};

use mcp_tasks_runtime::{
    ToolError, checkpoint,
    durable::{self, Either},
    task_tool,
};

/// A stand-in for rand (which this crate does not depend on): a seeded
/// generator is deterministic.
mod rand {
    pub mod rngs {
        pub struct StdRng(pub u64);
        impl StdRng {
            pub fn seed_from_u64(seed: u64) -> Self {
                Self(seed)
            }
        }
    }
}

use rand::rngs::StdRng;

struct Plan {
    steps: Vec<u32>,
}

impl Plan {
    fn total(&self) -> u32 {
        self.steps.iter().sum()
    }
}

#[task_tool]
async fn controls(items: Vec<u32>) -> Result<String, ToolError> {
    let plan = Plan { steps: items.clone() };
    let sorted: BTreeMap<u32, usize> = items.iter().enumerate().map(|(i, n)| (*n, i)).collect();
    let mut lookup = HashMap::new();
    lookup.insert("total", plan.total());
    let timeout = Duration::from_secs(30);
    let interval = |n: u32| n * 2;
    let doubled = interval(3);
    let seeded = StdRng::seed_from_u64(7).0;
    let id = durable::uuid().await;
    let at = durable::now().await;
    durable::sleep(Duration::from_millis(1)).await;
    let fetched: u64 = checkpoint("fetch", || async {
        tokio::time::sleep(Duration::from_millis(1)).await;
        let started = std::time::Instant::now();
        Ok(started.elapsed().as_millis() as u64 + std::env::var("X").map_or(0, |_| 1))
    })
    .await?;
    let raced = match durable::select(durable::sleep(Duration::from_secs(5)), async { 3 }).await {
        Either::Left(()) => 0,
        Either::Right(n) => n,
    };
    let handle = durable::spawn("side", || async {
        Ok(tokio::spawn(async { 1u32 }).await.unwrap_or(0))
    });
    let side: u32 = handle.await?;
    let first = durable::select_all(vec![durable::sleep(Duration::from_millis(1))]).await;
    #[allow_nondeterminism]
    let started = std::time::Instant::now();
    #[allow_nondeterminism]
    durable::status(format!("{:?}", started.elapsed()));
    Ok(format!(
        "{sorted:?} {timeout:?} {doubled} {seeded} {id} {at:?} {fetched} {raced} {side} {} {}",
        first.0,
        lookup.len()
    ))
}

fn main() {
    let _ = controls_tool();
}
