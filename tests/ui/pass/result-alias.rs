//! A `Result<T>` alias (anyhow-style) works: `T` is the output, the alias's
//! error type the tool error.

use std::fmt;

use mcp_tasks_runtime::task_tool;

#[derive(Debug)]
struct MyErr(String);

impl fmt::Display for MyErr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

type Result<T> = std::result::Result<T, MyErr>;

mod errors {
    pub type Result<T, E = super::MyErr> = std::result::Result<T, E>;
}

#[task_tool]
async fn checked(n: u32) -> Result<u32> {
    if n > 10 {
        Err(MyErr("too big".into()))
    } else {
        Ok(n)
    }
}

#[task_tool]
async fn boxed_error() -> std::result::Result<String, Box<dyn std::error::Error + Send + Sync>> {
    Ok("fine".into())
}

#[task_tool]
async fn qualified() -> errors::Result<String> {
    Ok("fine".into())
}

fn main() {
    assert_eq!(checked_tool().name(), "checked");
    assert_eq!(boxed_error_tool().name(), "boxed_error");
    assert_eq!(qualified_tool().name(), "qualified");
}
