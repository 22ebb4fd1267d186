//! Real MCP 2025-11-25 clients as processes, against the demo server: the
//! MCP Inspector's CLI and `tests/e2e/js/legacy_deploy.mjs` on the
//! official TypeScript SDK client, both run through `.ci/legacy-clients.sh`,
//! which installs them (and Node 22) from the npm registry into
//! `.ci/.tools/legacy/` on first use.
//!
//! Every process started here is killed when its guard drops, and every wait
//! is bounded.

use std::{
    io::Read,
    net::TcpListener,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::OnceLock,
    thread,
    time::{Duration, Instant},
};

use serde_json::Value;

use super::process::{ServerProcess, StoreArgs};

/// `MCP_TASKS_DEMO_PACE` for the demo: `deploy` runs at 1/20 of real time
/// (about 2 s instead of 40 s).
pub const FAST: &str = "0.05";

/// The demo on the SQLite file `demo.db` in `dir`, at [`FAST`], with `args`.
pub fn demo(dir: &Path, args: &[&str]) -> ServerProcess {
    ServerProcess::start_with_env(
        super::bin("demo"),
        &StoreArgs::Sqlite(dir.join("demo.db")),
        args,
        &[("MCP_TASKS_DEMO_PACE", FAST.as_ref())],
        Duration::from_secs(60),
    )
}

/// The demo's store on disk, its WAL included.
pub fn store_bytes(dir: &Path) -> u64 {
    ["demo.db", "demo.db-wal"]
        .iter()
        .filter_map(|f| std::fs::metadata(dir.join(f)).ok())
        .map(|m| m.len())
        .sum()
}

/// The longest any client process may run before the test gives up on it.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(90);

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// Installs the pinned clients once per test process (a no-op when
/// `.ci/.tools/legacy` already has them).
fn installed() {
    static INSTALLED: OnceLock<()> = OnceLock::new();
    INSTALLED.get_or_init(|| {
        let out = Command::new("bash")
            .arg(root().join(".ci/legacy-clients.sh"))
            .arg("--install")
            .current_dir(root())
            .output()
            .expect("bash runs .ci/legacy-clients.sh");
        assert!(
            out.status.success(),
            "installing the legacy clients failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    });
}

/// A port on 127.0.0.1 that was free a moment ago, for a server that must be
/// restarted at the same address.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// The demo serving Streamable HTTP on 127.0.0.1; killed on drop.
pub struct Demo {
    child: Child,
    pub url: String,
}

impl Demo {
    /// Starts the demo at `pace` on `port` (0: any free port) with `store`.
    /// A port just released by a killed server may take a moment to bind
    /// again, so a start that fails is retried for a few seconds.
    pub fn http(store: &Path, port: u16, pace: &str) -> Self {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            match Self::try_http(store, port, pace) {
                Ok(demo) => return demo,
                Err(why) if Instant::now() < deadline => {
                    eprintln!("the demo did not start ({why}); trying again");
                    thread::sleep(Duration::from_millis(200));
                }
                Err(why) => panic!("the demo did not start on port {port}: {why}"),
            }
        }
    }

    fn try_http(store: &Path, port: u16, pace: &str) -> Result<Self, String> {
        let child = Command::new(super::bin("demo"))
            .arg("--addr")
            .arg(format!("127.0.0.1:{port}"))
            .arg("--store")
            .arg(store)
            .env("MCP_TASKS_DEMO_PACE", pace)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("the demo starts");
        let mut demo = Self {
            child,
            url: String::new(),
        };
        (demo.url, _) = super::process::listening(&mut demo.child, Duration::from_secs(10))?;
        Ok(demo)
    }

    /// Kills the process with SIGKILL and waits for it.
    pub fn kill(mut self) {
        self.child.kill().expect("SIGKILL");
        self.child.wait().expect("reaped");
    }
}

impl Drop for Demo {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The command line a client runs to serve the demo over stdio on `store`.
/// It goes through `env` because the SDK's stdio transport hands the server
/// only a few whitelisted variables (`HOME`, `PATH`, ...), so the pace could
/// not be inherited.
pub fn demo_stdio(store: &Path) -> Vec<String> {
    vec![
        "env".to_owned(),
        format!("MCP_TASKS_DEMO_PACE={FAST}"),
        "RUST_LOG=warn".to_owned(),
        super::bin("demo").to_owned(),
        "--stdio".to_owned(),
        "--store".to_owned(),
        store.display().to_string(),
    ]
}

/// How a client process ended.
#[derive(Debug)]
pub struct Run {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Each stdout line, parsed as JSON.
    pub fn json_lines(&self) -> Vec<Value> {
        self.stdout
            .lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| {
                serde_json::from_str(l)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {l}\n{self}"))
            })
            .collect()
    }

    /// The script's events named `name` (`{"event": name, ...}`), in order.
    pub fn events(&self, name: &str) -> Vec<Value> {
        self.json_lines()
            .into_iter()
            .filter(|e| e["event"] == name)
            .collect()
    }

    /// The one event named `name`.
    pub fn event(&self, name: &str) -> Value {
        let mut found = self.events(name);
        assert_eq!(found.len(), 1, "expected one `{name}` event:\n{self}");
        found.remove(0)
    }

    /// Panics (showing the output) unless the process exited 0.
    pub fn ok(self) -> Self {
        assert!(self.status.success(), "the client failed:\n{self}");
        self
    }
}

impl std::fmt::Display for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}\n--- stdout\n{}--- stderr\n{}",
            self.status, self.stdout, self.stderr
        )
    }
}

/// What a client connects to: the demo's URL, or the command line that
/// serves it over stdio.
#[derive(Debug, Clone)]
pub enum Target {
    Http(String),
    Stdio(Vec<String>),
}

impl Target {
    /// `args` with the target where the clients expect it: a URL first, a
    /// server command last, after `--` (options after it would be the
    /// server's).
    fn around(&self, args: &[&str]) -> Vec<String> {
        let args = args.iter().map(|a| (*a).to_owned());
        match self {
            Self::Http(url) => std::iter::once(url.clone()).chain(args).collect(),
            Self::Stdio(command) => args
                .chain(std::iter::once("--".to_owned()))
                .chain(command.iter().cloned())
                .collect(),
        }
    }
}

/// Runs `legacy_deploy.mjs MODE` against `target` with `options`.
pub fn deploy(mode: &str, target: &Target, options: &[&str]) -> Run {
    // The script's own deadline, inside ours.
    let mut args = vec!["--timeout", "60000"];
    args.extend_from_slice(options);
    let mut full = vec!["deploy".to_owned(), mode.to_owned()];
    full.extend(target.around(&args));
    legacy_clients(&full)
}

/// Runs the Inspector's CLI (`--cli --format json -q`) against `target` with
/// `args`.
pub fn inspector(target: &Target, args: &[&str]) -> Run {
    let mut full = target.around(args);
    full.insert(0, "inspector".to_owned());
    legacy_clients(&full)
}

/// Runs `.ci/legacy-clients.sh ARGS` in its own process group, reading its
/// output as it comes; on timeout the whole group (the client and any server
/// it spawned over stdio) is killed.
fn legacy_clients(args: &[String]) -> Run {
    installed();
    let mut child = {
        use std::os::unix::process::CommandExt;
        Command::new("bash")
            .arg(root().join(".ci/legacy-clients.sh"))
            .args(args)
            .current_dir(root())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()
            .expect("bash runs .ci/legacy-clients.sh")
    };
    let group = Group(child.id());
    let read = |mut r: Box<dyn Read + Send>| {
        thread::spawn(move || {
            let mut s = String::new();
            let _ = r.read_to_string(&mut s);
            s
        })
    };
    let stdout = read(Box::new(child.stdout.take().expect("piped")));
    let stderr = read(Box::new(child.stderr.take().expect("piped")));
    let deadline = Instant::now() + CLIENT_TIMEOUT;
    let status = loop {
        if let Some(status) = child.try_wait().expect("try_wait") {
            break status;
        }
        if Instant::now() >= deadline {
            drop(group);
            let _ = child.wait();
            panic!(
                "`legacy-clients.sh {}` did not finish within {CLIENT_TIMEOUT:?}",
                args.join(" ")
            );
        }
        thread::sleep(Duration::from_millis(20));
    };
    drop(group);
    Run {
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// A process group of our own; SIGKILLed on drop (a no-op once its
/// processes are gone).
struct Group(u32);

impl Drop for Group {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-KILL", "--", &format!("-{}", self.0)])
            .stderr(Stdio::null())
            .status();
    }
}
