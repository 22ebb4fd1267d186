//! The `versioned-digest` example as the replay tests drive it: version 1
//! parks one task on its question and another in a day's durable sleep.

use std::{
    ffi::OsStr,
    time::{Duration, Instant},
};

use serde_json::{Value, json};

use super::{
    bin,
    process::{ServerProcess, StoreArgs},
    raw::{Raw, Reply},
};

/// Every wait here gives up after this long.
const PATIENCE: Duration = Duration::from_secs(30);

/// Version 1 on `store`, with two tasks parked: what [`park_two`] leaves.
pub struct Parked {
    /// Still serving, with its admin address (`--admin`) on.
    pub server: ServerProcess,
    pub admin: String,
    /// The task asking its question.
    pub asked: String,
    /// The task asleep, and its journal's export (three entries).
    pub asleep: String,
    pub slept: Value,
}

/// Starts version 1 on `store` and parks a task on its question and
/// another in a day's durable sleep, each journaled up to where it waits.
pub async fn park_two(store: &StoreArgs) -> Parked {
    let server = ServerProcess::start_with_env(
        bin("versioned-digest"),
        store,
        &["--admin", "127.0.0.1:0"],
        &[("MCP_TASKS_DIGEST_VERSION", OsStr::new("1"))],
        PATIENCE,
    );
    let admin = server.admin().expect("an admin address");
    let mut raw = Raw::new(&server.url);
    let asked = digest(&mut raw, "ops", false).await;
    let asleep = digest(&mut raw, "dev", true).await;
    journaled(&admin, &asked, 2).await;
    let slept = journaled(&admin, &asleep, 3).await;
    Parked {
        server,
        admin,
        asked,
        asleep,
        slept,
    }
}

/// Calls `digest` for `team` as a task; returns its id.
async fn digest(raw: &mut Raw, team: &str, asleep: bool) -> String {
    let params = json!({"name": "digest", "arguments": {"team": team, "asleep": asleep}});
    let Reply { status, body } = raw.send("tools/call", params, true, Some("digest")).await;
    assert_eq!(status, 200, "{body}");
    body["result"]["taskId"]
        .as_str()
        .unwrap_or_else(|| panic!("a task: {body}"))
        .to_owned()
}

/// `GET url`, as JSON, with its HTTP status.
pub async fn get_json(url: &str) -> (u16, Value) {
    let response = reqwest::get(url).await.expect("the admin page answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("JSON"))
}

/// Waits until the admin page's export of task `id` holds `n` entries;
/// returns the export.
async fn journaled(admin: &str, id: &str, n: usize) -> Value {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let (status, export) = get_json(&format!("{admin}tasks/{id}/journal.json")).await;
        assert_eq!(status, 200, "{export}");
        if export["entries"].as_array().map(Vec::len) == Some(n) {
            return export;
        }
        assert!(Instant::now() < deadline, "task {id} is stuck at {export}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}
