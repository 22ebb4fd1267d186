//! Example servers as processes, for the fleet tests and the benchmarks:
//! each on 127.0.0.1 in a process group of its own, killed when dropped.

use std::{
    collections::HashMap,
    io::{BufRead as _, BufReader},
    os::unix::process::CommandExt as _,
    path::{Path, PathBuf},
    process::{Child, Command, ExitStatus, Stdio},
    sync::{Mutex, OnceLock, mpsc},
    thread,
    time::{Duration, Instant},
};

/// The path of `name`, a binary of the `mcp-tasks-examples` package or the
/// gateway (`mcp-tasks-gateway`).
///
/// Cargo tells a test only where its own package's binaries are, so the
/// first call in a process builds those binaries
/// (`cargo build -p mcp-tasks-examples -p mcp-tasks-gateway --bins`) into the target directory
/// and profile this test was built in; a build with nothing to do takes a
/// fraction of a second.
pub fn bin(name: &str) -> &'static str {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    static PATHS: Mutex<Option<HashMap<String, &'static str>>> = Mutex::new(None);
    let dir = DIR.get_or_init(build_examples);
    let mut paths = PATHS.lock().unwrap();
    paths
        .get_or_insert_default()
        .entry(name.to_owned())
        .or_insert_with(|| {
            let path = dir.join(name);
            assert!(path.is_file(), "no binary {name} at {}", path.display());
            let path = path.into_os_string().into_string().expect("a UTF-8 path");
            Box::leak(path.into_boxed_str())
        })
}

/// Builds the examples' binaries and the gateway's beside this test's executable
/// (`<target>/<profile>/deps/<test>`), and returns `<target>/<profile>`.
fn build_examples() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its executable");
    let dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from <target>/<profile>/deps");
    let target = dir.parent().expect("<target>/<profile>");
    let profile = match dir.file_name().and_then(|n| n.to_str()) {
        Some("debug") => "dev",
        Some(other) => other,
        None => panic!("no profile in {}", dir.display()),
    };
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let out = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "-p",
            "mcp-tasks-examples",
            "-p",
            "mcp-tasks-gateway",
        ])
        .arg("--bins")
        .args(["--profile", profile, "--target-dir"])
        .arg(target)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo runs");
    assert!(
        out.status.success(),
        "building the examples failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_owned()
}

/// Waits at most `within` for the first line `child` writes on its piped
/// stdout, the one that says where it listens; returns the `http://` URL in
/// it, and the line. Its stdout is read on after that line, so that the
/// process never blocks on a full pipe.
pub fn listening(child: &mut Child, within: Duration) -> Result<(String, String), String> {
    let stdout = child.stdout.take().ok_or("stdout is not piped")?;
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let mut lines = BufReader::new(stdout).lines();
        let _ = tx.send(lines.next());
        for _ in lines {}
    });
    let line = match rx.recv_timeout(within) {
        Ok(Some(Ok(line))) => line,
        other => return Err(format!("no line on stdout within {within:?}: {other:?}")),
    };
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .ok_or_else(|| format!("no URL in {line:?}"))?
        .to_owned();
    Ok((url, line))
}

/// `bin --stdio` on the store `store` (`RUST_LOG=error`), its stdin and
/// stdout piped, its stderr as `stderr` says.
pub fn stdio_server(bin: &str, store: &Path, stderr: Stdio) -> Child {
    Command::new(bin)
        .arg("--stdio")
        .arg("--store")
        .arg(store)
        .env("RUST_LOG", "error")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("the server starts")
}

/// The arguments that make a server instance `name` of a fleet, with its
/// `lease` and `scan` interval.
pub fn instance_args(name: &str, lease: Duration, scan: Duration) -> Vec<String> {
    vec![
        "--instance".to_owned(),
        name.to_owned(),
        "--lease".to_owned(),
        format!("{}ms", lease.as_millis()),
        "--scan-interval".to_owned(),
        format!("{}ms", scan.as_millis()),
    ]
}

/// Where a server keeps its tasks.
#[derive(Debug, Clone)]
pub enum StoreArgs {
    Sqlite(PathBuf),
    Postgres {
        url: String,
        schema: String,
    },
    /// No store argument: a server that keeps its tasks in memory.
    Memory,
}

impl StoreArgs {
    /// The command-line arguments that say so.
    pub fn args(&self) -> Vec<String> {
        match self {
            Self::Postgres { url, schema } => vec![
                "--store".to_owned(),
                url.clone(),
                "--pg-schema".to_owned(),
                schema.clone(),
            ],
            Self::Sqlite(path) => vec!["--store".to_owned(), path.display().to_string()],
            Self::Memory => Vec::new(),
        }
    }
}

/// An example server process on 127.0.0.1, in a process group of its own;
/// the group is killed when this drops.
#[derive(Debug)]
pub struct ServerProcess {
    child: Child,
    /// Where it listens.
    pub url: String,
    /// The line it printed when it started listening.
    pub line: String,
}

impl ServerProcess {
    /// Starts `bin` on `store` with `args` (`--instance`, `--lease`, ...),
    /// and waits at most `within` for the line that says where it listens.
    /// `effects`: the fleet fixture's effects file.
    pub fn start(
        bin: &str,
        store: &StoreArgs,
        args: &[&str],
        effects: Option<&Path>,
        within: Duration,
    ) -> Self {
        let effects = effects.map(|e| ("MCP_TASKS_EFFECTS", e.as_os_str()));
        Self::start_with_env(bin, store, args, effects.as_slice(), within)
    }

    /// [`ServerProcess::start`] with these environment variables set.
    pub fn start_with_env(
        bin: &str,
        store: &StoreArgs,
        args: &[&str],
        env: &[(&str, &std::ffi::OsStr)],
        within: Duration,
    ) -> Self {
        let mut command = Command::new(bin);
        command
            .args(["--addr", "127.0.0.1:0"])
            .args(args)
            .args(store.args())
            .env("RUST_LOG", "error")
            .envs(env.iter().copied());
        Self::spawn(command, within)
    }

    /// Starts `command` (stdin closed, stdout read here, stderr inherited)
    /// in a process group of its own, and waits at most `within` for the
    /// line that says where it listens: its first line, naming an
    /// `http://` URL.
    pub fn spawn(mut command: Command, within: Duration) -> Self {
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .process_group(0);
        let child = command.spawn().expect("the example starts");
        // Dropped on a panic below: the process does not outlive the test.
        let mut server = Self {
            child,
            url: String::new(),
            line: String::new(),
        };
        (server.url, server.line) = listening(&mut server.child, within)
            .unwrap_or_else(|e| panic!("{command:?} did not say where it listens: {e}"));
        server
    }

    /// Its admin address (`--admin`), from the line it printed when it
    /// started.
    pub fn admin(&self) -> Option<String> {
        let (_, admin) = self.line.split_once("admin on ")?;
        Some(admin.trim().to_owned())
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (`STOP`, `CONT`, `KILL`, ...) to the process group.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg("--")
            .arg(format!("-{}", self.child.id()))
            .status()
            .expect("kill runs");
        assert!(status.success(), "kill -{signal} {}", self.child.id());
    }

    /// Sends SIGTERM and waits for the process to exit, or panics after
    /// `within`.
    pub fn terminate(self, within: Duration) -> ExitStatus {
        self.signal("TERM");
        self.wait(within)
    }

    /// Waits for the process to exit, or panics after `within`.
    pub fn wait(mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.child.try_wait().expect("try_wait") {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "{} did not exit within {within:?}",
                self.url
            );
            thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL to the process group, and reap it.
    pub fn kill(mut self) {
        self.signal("KILL");
        self.child.wait().expect("reaped");
    }
}

impl Drop for ServerProcess {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg("--")
                .arg(format!("-{}", self.child.id()))
                .stderr(Stdio::null())
                .status();
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// `.ci/upstreams.sh ARG`'s output lines: the command line of an upstream
/// the gateway's tests run (`everything`, `fixtures`) or the Python of its
/// virtualenv (`python`); it installs them on first use.
pub fn upstreams(arg: &str) -> Vec<String> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let out = Command::new("bash")
        .arg(root.join(".ci/upstreams.sh"))
        .arg(arg)
        .current_dir(&root)
        .output()
        .expect("bash runs .ci/upstreams.sh");
    assert!(
        out.status.success(),
        "`.ci/upstreams.sh {arg}` failed:\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .expect("UTF-8")
        .lines()
        .map(str::to_owned)
        .collect()
}
