//! The admin address (`--admin`), on a real server process (the
//! `fleet-fixture`): `/metrics` after a scripted workload, series by series,
//! and the tasks page as headless Chromium renders it (Debian's `chromium`,
//! installed by `.ci/run`), paged, with a screenshot under `target/`; the
//! address's `Host`/`Origin` checks and its token; and the modes of the
//! store's files.

mod common;

use std::{
    path::{Path, PathBuf},
    process::Command,
    time::{Duration, Instant},
};

use common::{
    Client, call, http_client,
    process::{ServerProcess, StoreArgs},
    task_id, update,
};
use rmcp::model::{CancelTaskParams, DetailedTask, GetTaskParams, TaskStatus};
use serde_json::json;

/// Starts the fixture with `--admin` on a fresh store; returns it and the
/// admin address's base URL (`http://127.0.0.1:PORT/`).
fn start(dir: &Path) -> (ServerProcess, String) {
    start_with(dir, &[], &[])
}

/// [`start`] with more arguments and environment variables.
fn start_with(
    dir: &Path,
    args: &[&str],
    env: &[(&str, &std::ffi::OsStr)],
) -> (ServerProcess, String) {
    let args = [&["--admin", "127.0.0.1:0"], args].concat();
    let server = ServerProcess::start_with_env(
        common::bin("fleet-fixture"),
        &StoreArgs::Sqlite(dir.join("tasks.db")),
        &args,
        env,
        Duration::from_secs(60),
    );
    let admin = server.admin().expect("an admin address");
    (server, admin)
}

/// `tasks/get`, counted.
struct Poller<'a> {
    client: &'a Client,
    polls: u64,
}

impl Poller<'_> {
    async fn until(&mut self, id: &str, done: impl Fn(&DetailedTask) -> bool) -> DetailedTask {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            self.polls += 1;
            let t = self
                .client
                .peer()
                .get_task(GetTaskParams::new(id.to_owned()))
                .await
                .expect("tasks/get")
                .task;
            if done(&t) {
                return t;
            }
            assert!(Instant::now() < deadline, "task never got there: {t:?}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// The value of one series (`name{labels}` exactly as rendered, labels in
/// the exporter's order), or `None` when it is not rendered.
fn series(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

async fn scrape(admin: &str) -> String {
    let response = reqwest::get(format!("{admin}metrics"))
        .await
        .expect("GET /metrics");
    assert_eq!(response.status(), 200);
    let kind = response.headers()["content-type"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(kind.starts_with("text/plain"), "{kind}");
    response.text().await.expect("the metrics' text")
}

async fn parked(client: &Client, tag: &str, poller: &mut Poller<'_>) -> String {
    let id = task_id(
        client
            .call_tool_once(call(
                "approve_then_steps",
                json!({"tag": tag, "steps": 2, "step_ms": 5}),
            ))
            .await
            .expect("tools/call"),
    );
    poller
        .until(&id, |t| t.status() == TaskStatus::InputRequired)
        .await;
    id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_scripted_workload() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, admin) = start(dir.path());
    let client = http_client(&_server.url, true).await;
    let mut poller = Poller {
        client: &client,
        polls: 0,
    };

    // Parked, answered, two checkpoints, completed.
    let answered = parked(&client, "a", &mut poller).await;
    update(
        &client,
        &answered,
        json!({"approval": {"action": "accept", "content": {"approve": true}}}),
    )
    .await;
    let done = poller.until(&answered, |t| t.status().is_terminal()).await;
    assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
    // Parked, then cancelled.
    let cancelled = parked(&client, "b", &mut poller).await;
    client
        .peer()
        .cancel_task(CancelTaskParams::new(cancelled.clone()))
        .await
        .expect("tasks/cancel");
    let end = poller.until(&cancelled, |t| t.status().is_terminal()).await;
    assert_eq!(end.status(), TaskStatus::Cancelled, "{end:?}");
    // Left parked, and one asleep for an hour.
    parked(&client, "c", &mut poller).await;
    let asleep = task_id(
        client
            .call_tool_once(call("nap", json!({"seconds": 3600})))
            .await
            .expect("tools/call"),
    );

    // What a run records after its end is stored (its gauge, the finished
    // counter) and the nap's timer can land just after the client has seen
    // the state it waited for: scrape until the series settle.
    let expect = [
        (r#"mcp_tasks_created_total{tool="approve_then_steps"}"#, 3.0),
        (r#"mcp_tasks_created_total{tool="nap"}"#, 1.0),
        (
            r#"mcp_tasks_finished_total{tool="approve_then_steps",status="completed"}"#,
            1.0,
        ),
        (
            r#"mcp_tasks_finished_total{tool="approve_then_steps",status="cancelled"}"#,
            1.0,
        ),
        ("mcp_tasks_polls_total", poller.polls as f64),
        ("mcp_tasks_updates_total", 1.0),
        ("mcp_tasks_cancels_total", 1.0),
        ("mcp_tasks_expired_total", 0.0),
        // The answered task's resumed run replays its question.
        ("mcp_tasks_replayed_steps_total", 1.0),
        ("mcp_tasks_nondeterminism_failures_total", 0.0),
        ("mcp_tasks_store_retries_total", 0.0),
        ("mcp_tasks_running", 0.0),
        ("mcp_tasks_queued", 0.0),
        ("mcp_tasks_parked", 1.0),
        ("mcp_tasks_sleeping", 1.0),
        (
            r#"mcp_tasks_step_duration_seconds_count{tool="approve_then_steps"}"#,
            2.0,
        ),
        (
            r#"mcp_tasks_time_to_result_seconds_count{tool="approve_then_steps",status="completed"}"#,
            1.0,
        ),
        (
            r#"mcp_tasks_time_to_result_seconds_count{tool="approve_then_steps",status="cancelled"}"#,
            1.0,
        ),
        (
            r#"mcp_tasks_input_wait_seconds_count{tool="approve_then_steps"}"#,
            1.0,
        ),
    ];
    let deadline = Instant::now() + Duration::from_secs(30);
    let text = loop {
        let text = scrape(&admin).await;
        let wrong: Vec<String> = expect
            .iter()
            .filter_map(|(name, want)| {
                let got = series(&text, name);
                (got != Some(*want)).then(|| format!("{name}: want {want}, got {got:?}"))
            })
            .collect();
        if wrong.is_empty() {
            break text;
        }
        assert!(Instant::now() < deadline, "{}\n\n{text}", wrong.join("\n"));
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    // Histograms have buckets; no label names a task or a principal.
    assert!(
        text.contains("mcp_tasks_step_duration_seconds_bucket{tool=\"approve_then_steps\",le=")
    );
    for id in [&answered, &cancelled, &asleep] {
        assert!(!text.contains(id.as_str()), "a task id in the metrics");
    }
    // The SQLite store's writes, timed as their callers wait, and its
    // commits: at least one per created task, each commit carrying at least
    // one write, in buckets fine enough for a disk's flush.
    let writes = series(&text, "mcp_tasks_sqlite_write_seconds_count").expect("write count");
    let commits = series(&text, "mcp_tasks_sqlite_commit_seconds_count").expect("commit count");
    assert!(
        writes >= 4.0,
        "{writes} writes for 4 created tasks\n\n{text}"
    );
    assert!(
        (1.0..=writes).contains(&commits),
        "{commits} commits for {writes} writes\n\n{text}"
    );
    for name in [
        "mcp_tasks_sqlite_write_seconds",
        "mcp_tasks_sqlite_commit_seconds",
    ] {
        assert!(
            text.contains(&format!("{name}_bucket{{le=\"0.0001\"}}")),
            "{name} has a 100 µs bucket\n\n{text}"
        );
    }
}

/// Whether this test can load the page: Debian's `chromium` is installed.
/// Without it the test says `SKIPPED` and passes, so that `cargo test` works
/// on a fresh machine, unless `CI` is set (`.ci/run` installs it), where a
/// missing browser fails the test.
fn chromium_here() -> bool {
    if Command::new("chromium").arg("--version").output().is_ok() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "chromium is missing (Debian's `chromium` package; .ci/run installs it)"
    );
    eprintln!(
        "SKIPPED: the admin page in a browser: chromium is not installed (apt-get install chromium)"
    );
    false
}

/// Runs `chromium --headless` with `args` on `url`; returns its stdout.
fn chromium(args: &[&str], url: &str) -> String {
    let profile = tempfile::tempdir().unwrap();
    let out = Command::new("chromium")
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.path().display()))
        .args(args)
        .arg(url)
        .output()
        .expect("chromium runs (Debian's `chromium` package; .ci/run installs it)");
    assert!(
        out.status.success(),
        "chromium failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_page_lists_tasks_and_shows_a_timeline_in_chromium() {
    if !chromium_here() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // Two tasks a page: the three below take two pages of `?all=1`.
    let (server, admin) = start_with(dir.path(), &["--admin-page-size", "2"], &[]);
    let client = http_client(&server.url, true).await;
    let mut poller = Poller {
        client: &client,
        polls: 0,
    };
    let waiting = parked(&client, "page", &mut poller).await;
    let finished = task_id(
        client
            .call_tool_once(call(
                "steps",
                json!({"tag": "done", "steps": 3, "step_ms": 1}),
            ))
            .await
            .expect("tools/call"),
    );
    let done = poller.until(&finished, |t| t.status().is_terminal()).await;
    assert_eq!(done.status(), TaskStatus::Completed, "{done:?}");
    let asleep = task_id(
        client
            .call_tool_once(call("nap", json!({"seconds": 3600})))
            .await
            .expect("tools/call"),
    );

    // The list: unfinished tasks of every caller, with counts per status.
    let dom = tokio::task::spawn_blocking({
        let admin = admin.clone();
        move || chromium(&["--dump-dom"], &admin)
    })
    .await
    .unwrap();
    assert!(dom.contains("<table id=\"tasks\">"), "{dom}");
    assert!(
        dom.contains(&format!("href=\"/tasks/{waiting}\"")),
        "the parked task is listed: {dom}"
    );
    assert!(
        !dom.contains(&finished),
        "a finished task is not in the default list"
    );
    assert!(
        dom.contains(&format!("href=\"/tasks/{asleep}\"")),
        "the sleeping task is listed: {dom}"
    );
    for (status, n) in [("working", 1), ("input_required", 1), ("completed", 0)] {
        assert!(
            dom.contains(&format!(
                "data-status=\"{status}\">{status} <span class=\"n\">{n}</span>"
            )),
            "{n} {status}: {dom}"
        );
    }
    assert!(!dom.contains("id=\"next\""), "one page: {dom}");
    // `?all=1`: every task, the finished one too, two a page, oldest first:
    // the first page and its link to the next, which shows the third.
    let dom = tokio::task::spawn_blocking({
        let url = format!("{admin}?all=1");
        move || chromium(&["--dump-dom"], &url)
    })
    .await
    .unwrap();
    for id in [&waiting, &finished] {
        assert!(
            dom.contains(&format!("href=\"/tasks/{id}\"")),
            "{id}: {dom}"
        );
    }
    assert!(
        !dom.contains(&asleep),
        "the third task is on the next page: {dom}"
    );
    assert!(
        dom.contains("data-status=\"completed\">completed <span class=\"n\">1</span>"),
        "{dom}"
    );
    assert!(dom.contains("2 shown of 3"), "{dom}");
    assert!(!dom.contains("id=\"previous\""), "the first page: {dom}");
    let next = dom
        .split("id=\"next\" rel=\"next\" href=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no link to the next page: {dom}"))
        .replace("&amp;", "&");
    let dom = tokio::task::spawn_blocking({
        let url = format!("{}{}", admin.trim_end_matches('/'), next);
        move || chromium(&["--dump-dom"], &url)
    })
    .await
    .unwrap();
    assert!(
        dom.contains(&format!("href=\"/tasks/{asleep}\"")),
        "the next page shows the third task: {dom}"
    );
    for id in [&waiting, &finished] {
        assert!(
            !dom.contains(id.as_str()),
            "{id} is on the first page: {dom}"
        );
    }
    assert!(dom.contains("1 shown of 3"), "{dom}");
    assert!(!dom.contains("id=\"next\""), "the last page: {dom}");
    assert!(dom.contains("id=\"previous\""), "a way back: {dom}");
    // The timeline of the finished task: its three checkpoints in order.
    let dom = tokio::task::spawn_blocking({
        let url = format!("{admin}tasks/{finished}");
        move || chromium(&["--dump-dom"], &url)
    })
    .await
    .unwrap();
    let journal = dom
        .split("<ol class=\"timeline\" id=\"journal\">")
        .nth(1)
        .unwrap_or_else(|| panic!("no journal in {dom}"));
    let names: Vec<&str> = journal
        .split("<span class=\"name\">")
        .skip(1)
        .filter_map(|s| s.split('<').next())
        .collect();
    assert_eq!(names, ["step-0", "step-1", "step-2"], "{dom}");
    assert!(dom.contains("<span class=\"badge completed\">completed</span>"));
    // The parked task's page names its question.
    let dom = tokio::task::spawn_blocking({
        let url = format!("{admin}tasks/{waiting}");
        move || chromium(&["--dump-dom"], &url)
    })
    .await
    .unwrap();
    assert!(
        dom.contains("<table id=\"questions\">") && dom.contains("Go ahead?"),
        "{dom}"
    );

    // Screenshots of the list and of a timeline, for a person to look at.
    for (file, url) in [
        ("admin.png", admin.clone()),
        ("admin-task.png", format!("{admin}tasks/{finished}")),
    ] {
        let shot = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(file);
        let _ = std::fs::remove_file(&shot);
        tokio::task::spawn_blocking({
            let arg = format!("--screenshot={}", shot.display());
            move || chromium(&[&arg, "--window-size=1200,560"], &url)
        })
        .await
        .unwrap();
        let png = std::fs::read(&shot).expect("the screenshot was saved");
        assert!(
            png.starts_with(b"\x89PNG") && png.len() > 10_000,
            "{} bytes",
            png.len()
        );
    }
}

/// A GET on the admin address with these headers.
async fn send(url: &str, headers: &[(&str, &str)]) -> reqwest::Response {
    let mut request = reqwest::Client::new().get(url);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.send().await.expect("GET")
}

/// [`send`]: the status and body.
async fn get(url: &str, headers: &[(&str, &str)]) -> (u16, String) {
    let response = send(url, headers).await;
    let status = response.status().as_u16();
    (status, response.text().await.expect("a body"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_address_answers_loopback_names_only() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, admin) = start(dir.path());
    let port = admin
        .trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .to_owned();
    for path in ["", "metrics", "tasks/nope"] {
        let url = format!("{admin}{path}");
        // A name rebound to 127.0.0.1, or any other: 403, as the MCP
        // endpoint answers.
        for host in ["evil.example", &format!("evil.example:{port}"), "10.0.0.1"] {
            let (status, body) = get(&url, &[("host", host)]).await;
            assert_eq!(status, 403, "{url} with Host {host}: {body}");
            assert!(body.contains("Host"), "{body}");
        }
        // A page of another origin, even with a loopback Host.
        for origin in ["http://evil.example", "https://evil.example:8443", "null"] {
            let (status, body) = get(&url, &[("origin", origin)]).await;
            assert_eq!(status, 403, "{url} with Origin {origin}: {body}");
            assert!(body.contains("Origin"), "{body}");
        }
        // Loopback names are served.
        let ok = if path == "tasks/nope" { 404 } else { 200 };
        for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
            let origin = format!("http://{host}");
            let (status, body) = get(&url, &[("host", &host), ("origin", &origin)]).await;
            assert_eq!(status, ok, "{url} with Host {host}: {body}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_the_admin_address_answers_only_requests_that_carry_it() {
    let dir = tempfile::tempdir().unwrap();
    let token = "admin-token-0123456789";
    // From the environment, as an operator keeps it out of `ps`.
    let (_server, admin) = start_with(
        dir.path(),
        &[],
        &[("MCP_TASKS_ADMIN_TOKEN", std::ffi::OsStr::new(token))],
    );
    use base64::Engine as _;
    let basic = |user: &str, password: &str| {
        let pair = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        format!("Basic {pair}")
    };
    let wrong = [
        None,
        Some("Bearer admin-token-0123456788".to_owned()),
        Some("Bearer admin-token-012345678".to_owned()),
        Some(format!("Bearer {token}x")),
        Some("Bearer ".to_owned()),
        Some(format!("Token {token}")),
        Some(basic("ops", "nope")),
    ];
    for path in ["", "metrics", "tasks/nope"] {
        let url = format!("{admin}{path}");
        for authorization in &wrong {
            let headers: Vec<(&str, &str)> = authorization
                .iter()
                .map(|a| ("authorization", a.as_str()))
                .collect();
            let response = send(&url, &headers).await;
            assert_eq!(response.status(), 401, "{url} with {authorization:?}");
            let challenges: Vec<&str> = response
                .headers()
                .get_all("www-authenticate")
                .iter()
                .map(|v| v.to_str().unwrap())
                .collect();
            assert!(
                challenges.iter().any(|c| c.starts_with("Bearer ")),
                "{challenges:?}"
            );
            // The same body whatever was wrong.
            assert_eq!(response.text().await.unwrap(), "Unauthorized\n");
        }
        let ok = if path == "tasks/nope" { 404 } else { 200 };
        let bearer = format!("Bearer {token}");
        let (status, body) = get(&url, &[("authorization", &bearer)]).await;
        assert_eq!(status, ok, "{url} with the token: {body}");
        // A browser's Basic credentials, the token as the password.
        let (status, body) = get(&url, &[("authorization", &basic("ops", token))]).await;
        assert_eq!(status, ok, "{url} with the token in Basic: {body}");
        // The token does not stand in for a loopback Host.
        let (status, _) = get(
            &url,
            &[("authorization", &bearer), ("host", "evil.example")],
        )
        .await;
        assert_eq!(status, 403, "{url}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_files_are_the_owners_only_under_umask_022() {
    use std::os::unix::fs::PermissionsExt as _;
    // The usual umask, which leaves new files world-readable (0644).
    nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o022));
    let dir = tempfile::tempdir().unwrap();
    let (server, _admin) = start(dir.path());
    // A task written, so that the WAL holds something.
    let client = http_client(&server.url, true).await;
    task_id(
        client
            .call_tool_once(call("nap", json!({"seconds": 3600})))
            .await
            .expect("tools/call"),
    );
    for file in ["tasks.db", "tasks.db-wal", "tasks.db-shm"] {
        let mode = std::fs::metadata(dir.path().join(file))
            .unwrap_or_else(|e| panic!("{file}: {e}"))
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{file}: {:o}", mode & 0o777);
    }
    drop(server);
    // A file the operator opened up keeps its mode.
    let db = dir.path().join("tasks.db");
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o640)).unwrap();
    let _again = start(dir.path());
    let mode = std::fs::metadata(&db).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o640, "{:o}", mode & 0o777);
}

/// Runs the fixture with `args` (and a fresh store) until it exits, at most
/// 60 s; returns whether it succeeded and its stderr.
fn run_to_exit(dir: &Path, args: &[&str]) -> (bool, String) {
    let mut child = Command::new(common::bin("fleet-fixture"))
        .args(["--addr", "127.0.0.1:0", "--store"])
        .arg(dir.join("tasks.db"))
        .args(args)
        .env("RUST_LOG", "error")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("the fixture starts");
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().expect("try_wait").is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?}: still running after 60 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let out = child.wait_with_output().expect("its stderr");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// An admin address off loopback without a token is refused before
/// anything is bound, naming the options that allow it; with the explicit
/// allowance the fixture goes on to bind it. The address is a
/// documentation one (192.0.2.1, TEST-NET-1) that no interface here has,
/// so that nothing ever listens off loopback: binding it fails.
#[test]
fn an_admin_address_off_loopback_without_a_token_is_refused_unless_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let (ok, stderr) = run_to_exit(dir.path(), &["--admin", "192.0.2.1:9"]);
    assert!(!ok, "{stderr}");
    assert!(
        stderr.contains("the admin address 192.0.2.1:9 is not a loopback address")
            && stderr.contains("--admin-token")
            && stderr.contains("--admin-allow-remote-without-token"),
        "{stderr}"
    );
    // Allowed: the check passes, and the bind is what fails here.
    let (ok, stderr) = run_to_exit(
        dir.path(),
        &[
            "--admin",
            "192.0.2.1:9",
            "--admin-allow-remote-without-token",
        ],
    );
    assert!(!ok, "{stderr}");
    assert!(!stderr.contains("not a loopback address"), "{stderr}");
    assert!(
        stderr.contains("AddrNotAvailable") || stderr.contains("assign requested address"),
        "{stderr}"
    );
    // A token is enough.
    let (ok, stderr) = run_to_exit(
        dir.path(),
        &["--admin", "192.0.2.1:9", "--admin-token", "t0ken-t0ken"],
    );
    assert!(
        !ok && !stderr.contains("not a loopback address"),
        "{stderr}"
    );
}

/// Every answer of the admin address, whatever its status, tells the
/// browser not to sniff it, not to let another site frame it, and not to
/// name its URL (which carries a task id) in a `Referer`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_admin_answer_carries_nosniff_and_frame_headers() {
    let dir = tempfile::tempdir().unwrap();
    let token = "admin-token-0123456789";
    let (_server, admin) = start_with(
        dir.path(),
        &[],
        &[("MCP_TASKS_ADMIN_TOKEN", std::ffi::OsStr::new(token))],
    );
    let bearer = format!("Bearer {token}");
    type Case<'a> = (&'a str, Vec<(&'a str, &'a str)>, u16);
    let cases: [Case<'_>; 6] = [
        ("", vec![("authorization", &bearer)], 200),
        ("metrics", vec![("authorization", &bearer)], 200),
        ("tasks/nope", vec![("authorization", &bearer)], 404),
        (
            "tasks/nope/journal.json",
            vec![("authorization", &bearer)],
            404,
        ),
        ("", vec![], 401),
        (
            "",
            vec![("authorization", &bearer), ("host", "evil.example")],
            403,
        ),
    ];
    for (path, headers, status) in cases {
        let response = send(&format!("{admin}{path}"), &headers).await;
        assert_eq!(response.status(), status, "/{path} {headers:?}");
        let h = response.headers();
        let value = |name: &str| h.get(name).map(|v| v.to_str().unwrap().to_owned());
        assert_eq!(value("x-content-type-options").as_deref(), Some("nosniff"));
        assert_eq!(
            value("content-security-policy").as_deref(),
            Some("frame-ancestors 'none'"),
            "/{path}"
        );
        assert_eq!(value("x-frame-options").as_deref(), Some("DENY"));
        assert_eq!(value("referrer-policy").as_deref(), Some("no-referrer"));
    }
}

/// Sends `request` (a whole HTTP/1.1 request) to the server at `url` on a
/// connection of its own; returns the status and the body.
async fn raw(url: &str, request: String) -> (u16, String) {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let authority = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), stream.read_to_end(&mut answer))
        .await
        .expect("an answer within 30 s")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status line: {answer}"));
    let body = answer.split("\r\n\r\n").nth(1).unwrap_or("").to_owned();
    (status, body)
}

/// A request with two `Host` headers (the first a loopback name the
/// checks accept) gets 400 naming the duplicate, on the admin address and
/// on the MCP endpoint; the same request with one `Host` is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_two_host_headers_is_refused_on_both_addresses() {
    let dir = tempfile::tempdir().unwrap();
    let (server, admin) = start(dir.path());
    let host = |url: &str| {
        url.trim_start_matches("http://")
            .split('/')
            .next()
            .unwrap()
            .to_owned()
    };
    let (admin_host, mcp_host) = (host(&admin), host(&server.url));
    let page = |hosts: &str| format!("GET / HTTP/1.1\r\n{hosts}Connection: close\r\n\r\n");
    let one = format!("Host: {admin_host}\r\n");
    let two = format!("Host: {admin_host}\r\nHost: evil.example\r\n");
    assert_eq!(raw(&admin, page(&one)).await.0, 200);
    let (status, body) = raw(&admin, page(&two)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("duplicate Host"), "{body}");

    let list = r#"{"jsonrpc":"2.0","id":1,"method":"tools/list","params":{"_meta":{
        "io.modelcontextprotocol/protocolVersion":"2026-07-28",
        "io.modelcontextprotocol/clientCapabilities":{}}}}"#;
    let post = |hosts: &str| {
        format!(
            "POST /mcp HTTP/1.1\r\n{hosts}Content-Type: application/json\r\n\
             Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: 2026-07-28\r\n\
             Mcp-Method: tools/list\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{list}",
            list.len()
        )
    };
    let one = format!("Host: {mcp_host}\r\n");
    let two = format!("Host: {mcp_host}\r\nHost: evil.example\r\n");
    let (status, body) = raw(&server.url, post(&one)).await;
    assert_eq!(status, 200, "{body}");
    let (status, body) = raw(&server.url, post(&two)).await;
    assert_eq!(status, 400, "{body}");
    assert!(body.contains("duplicate Host"), "{body}");
}
