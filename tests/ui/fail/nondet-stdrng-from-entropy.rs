//! A stand-in for `rand` (which this crate does not depend on).

use mcp_tasks_runtime::task_tool;

mod rand {
    pub mod rngs {
        pub struct StdRng;
        impl StdRng {
            pub fn from_entropy() -> Self {
                Self
            }
        }
    }
}

use rand::rngs::StdRng;

#[task_tool]
async fn seeded() {
    let _rng = StdRng::from_entropy();
}

fn main() {}
