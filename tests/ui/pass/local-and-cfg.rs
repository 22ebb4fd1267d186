//! Tools inside a fn body, behind `#[cfg]`, and deprecated ones.

use mcp_tasks_runtime::task_tool;

#[cfg(any())]
#[task_tool]
async fn never_built() {}

#[cfg(all())]
#[task_tool]
async fn always_built() {}

// A `#[cfg]` after the attribute is seen by the macro, which repeats it on the
// items it generates.
#[task_tool]
#[cfg(any())]
async fn never_built_either() {}

#[task_tool]
#[cfg(all())]
async fn built_too() {}

#[deprecated = "use something else"]
#[task_tool]
async fn old() {}

fn main() {
    #[derive(serde::Serialize, schemars::JsonSchema)]
    struct Local {
        n: u32,
    }

    #[task_tool]
    async fn inner() -> Local {
        Local { n: 1 }
    }

    assert!(inner_tool().output_schema().is_some());
    assert_eq!(always_built_tool().name(), "always_built");
    assert_eq!(built_too_tool().name(), "built_too");
    let _ = old_tool();
}
