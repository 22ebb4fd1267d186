//! The terminal client as a person sees it: the real `client` binary on a
//! pseudo-terminal, against a real conformance server process. The test
//! types keys into the terminal (Ctrl-C included: the terminal turns it into
//! SIGINT) and reads the screen as a terminal renders it.
//!
//! Every step waits for what the screen should show next; the waits are
//! long, so a loaded machine only makes the test slower.

mod common;

use std::{
    io::{Read as _, Write},
    num::NonZeroU16,
    sync::{Arc, Condvar, Mutex, mpsc},
    time::{Duration, Instant},
};

use common::Server;
use portable_pty::{ChildKiller, CommandBuilder, MasterPty, PtySize, native_pty_system};

/// How long any one thing may take to appear.
const PATIENCE: Duration = Duration::from_secs(90);

const DOWN: &str = "\x1b[B";
const ENTER: &str = "\r";
const CTRL_C: &str = "\x03";

/// What the terminal showed: every distinct screen, in order.
#[derive(Default)]
struct Seen {
    screens: Vec<String>,
    /// The client closed its side (it exited).
    closed: bool,
}

/// The client running on a pseudo-terminal of 40 rows and 120 columns.
struct Terminal {
    seen: Arc<(Mutex<Seen>, Condvar)>,
    /// Screens before this one were looked at already.
    cursor: usize,
    keys: Box<dyn Write + Send>,
    killer: Box<dyn ChildKiller + Send + Sync>,
    exited: mpsc::Receiver<u32>,
    _master: Box<dyn MasterPty + Send>,
}

impl Terminal {
    fn start(args: &[&str]) -> Self {
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: 40,
                cols: 120,
                pixel_width: 0,
                pixel_height: 0,
            })
            .expect("a pseudo-terminal");
        let mut command = CommandBuilder::new(common::bin("client"));
        command.args(args);
        command.env("TERM", "xterm-256color");
        let mut child = pair
            .slave
            .spawn_command(command)
            .expect("the client starts");
        drop(pair.slave);
        let killer = child.clone_killer();
        let (tx, exited) = mpsc::channel();
        std::thread::spawn(move || {
            let status = child.wait().expect("the client is reaped");
            let _ = tx.send(status.exit_code());
        });

        let seen = Arc::new((Mutex::new(Seen::default()), Condvar::new()));
        let mut output = pair.master.try_clone_reader().expect("the pty's output");
        let shared = seen.clone();
        std::thread::spawn(move || {
            let mut screen = vt100::Parser::new(
                NonZeroU16::new(40).unwrap(),
                NonZeroU16::new(120).unwrap(),
                0,
            );
            let mut buf = [0u8; 4096];
            loop {
                let n = output.read(&mut buf).unwrap_or(0);
                let (lock, changed) = &*shared;
                let Ok(mut seen) = lock.lock() else {
                    // The test failed and is unwinding.
                    return;
                };
                if n == 0 {
                    seen.closed = true;
                    changed.notify_all();
                    return;
                }
                screen.process(&buf[..n]);
                let now = screen.screen().contents();
                if seen.screens.last() != Some(&now) {
                    seen.screens.push(now);
                    changed.notify_all();
                }
            }
        });
        let keys = pair.master.take_writer().expect("the pty's input");
        Self {
            seen,
            cursor: 0,
            keys,
            killer,
            exited,
            _master: pair.master,
        }
    }

    /// Waits for a screen (this one or a later one) that shows `text`, and
    /// returns it; later waits look from there on.
    fn expect(&mut self, text: &str) -> String {
        self.expect_times(text, 1)
    }

    /// Waits for a screen (this one or a later one) that shows `text` at
    /// least `times` times, and returns it; later waits look from there on.
    fn expect_times(&mut self, text: &str, times: usize) -> String {
        let deadline = Instant::now() + PATIENCE;
        let (lock, changed) = &*self.seen;
        let mut seen = lock.lock().unwrap();
        loop {
            if let Some(i) = seen.screens[self.cursor..]
                .iter()
                .position(|s| s.matches(text).count() >= times)
            {
                self.cursor += i;
                return seen.screens[self.cursor].clone();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(
                !left.is_zero() && !seen.closed,
                "the screen never showed {text:?}; it shows:\n{}",
                seen.screens.last().map(String::as_str).unwrap_or("")
            );
            seen = changed.wait_timeout(seen, left).unwrap().0;
        }
    }

    /// Types `keys`.
    fn press(&mut self, keys: &str) {
        self.keys.write_all(keys.as_bytes()).unwrap();
        self.keys.flush().unwrap();
    }

    /// Waits for the client to exit; its exit code, and its last screen.
    fn exit(mut self) -> (u32, String) {
        let code = self
            .exited
            .recv_timeout(PATIENCE)
            .expect("the client exits");
        let (lock, changed) = &*self.seen;
        let mut seen = lock.lock().unwrap();
        let deadline = Instant::now() + PATIENCE;
        while !seen.closed && Instant::now() < deadline {
            seen = changed.wait_timeout(seen, PATIENCE).unwrap().0;
        }
        let last = seen.screens.last().cloned().unwrap_or_default();
        drop(seen);
        let _ = self.killer.kill();
        (code, last)
    }

    /// Closes the terminal on the client (SIGHUP), as closing its window
    /// would.
    fn hang_up(mut self) {
        self.killer.kill().expect("SIGHUP");
        self.exited
            .recv_timeout(PATIENCE)
            .expect("the client exits");
    }

    /// The task id the client printed first.
    fn task_id(&mut self) -> String {
        let screen = self.expect("task ");
        screen
            .lines()
            .find_map(|l| l.trim().strip_prefix("task "))
            .expect("a task line")
            .trim()
            .to_owned()
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.killer.kill();
    }
}

/// Answers `run_job`'s form, whose fields come in name order: the region
/// (an enum: `region`, `region_down` rows down), whether to start (a
/// boolean), and the number of workers (a bounded integer; `too_many` first,
/// which is refused and asked again).
fn answer_form(
    term: &mut Terminal,
    (region_down, region): (usize, &str),
    too_many: &str,
    workers: &str,
) {
    term.expect("Region to run in *");
    for _ in 0..region_down {
        term.press(DOWN);
    }
    term.expect(&format!("❯ {region}"));
    term.press(ENTER);
    term.expect(&format!("Region to run in * · {region}"));
    term.expect("Start the job now? *");
    term.press("y");
    term.expect("Start the job now? * · yes");
    term.expect("Number of workers * (integer, 1 to 8)");
    term.press(too_many);
    term.press(ENTER);
    term.expect("must be at most 8");
    term.press(workers);
    term.press(ENTER);
}

#[test]
fn shows_progress_answers_a_form_and_resumes() {
    let (_dir, server) = Server::fresh();
    let mut term = Terminal::start(&[
        "--url",
        &server.url,
        "run_job",
        r#"{"name":"nightly","seconds":5}"#,
    ]);
    let id = term.task_id();
    term.expect("? How should nightly run?");
    answer_form(&mut term, (1, "US (east)"), "12", "4");
    // The answers were taken: the task says so in its status message, in a
    // line that stays and on the spinner with the time since the start.
    let screen = term.expect("running nightly on 4 workers in us-east");
    assert!(screen.contains("✔ Start the job now? * · yes"), "{screen}");
    assert!(
        screen.contains("Region to run in * · US (east)"),
        "{screen}"
    );
    assert!(screen.contains("Number of workers"), "{screen}");
    let line = screen
        .lines()
        .find(|l| l.contains("running nightly"))
        .unwrap_or_default();
    assert!(
        line.trim_start().starts_with('[') && line.contains("s] "),
        "a status line with the elapsed time: {screen}"
    );

    // The terminal closes; the task goes on, and `--resume` follows it to
    // its result.
    term.hang_up();
    let mut resumed = Terminal::start(&["--url", &server.url, "--resume", &id]);
    assert_eq!(resumed.task_id(), id);
    resumed.expect("completed");
    let (code, screen) = resumed.exit();
    assert_eq!(code, 0, "{screen}");
    assert!(
        screen.contains("run_job(nightly): 4 workers in us-east, done"),
        "{screen}"
    );
}

#[test]
fn ctrl_c_asks_before_cancelling() {
    let (_dir, server) = Server::fresh();
    let mut term = Terminal::start(&[
        "--url",
        &server.url,
        "run_job",
        r#"{"name":"long","seconds":3600}"#,
    ]);
    let id = term.task_id();
    let question = format!("Cancel task {id}? (y/n)");

    // Ctrl-C in a prompt, then no: the field is asked again.
    term.expect("Region to run in *");
    term.press(CTRL_C);
    term.expect(&question);
    term.press("n");
    term.expect_times("carrying on", 1);
    answer_form(&mut term, (0, "Europe (west)"), "9", "2");
    term.expect("running long on 2 workers in eu-west");

    // Ctrl-C, then no: the client carries on following the task.
    term.press(CTRL_C);
    term.expect(&question);
    term.press("n");
    term.expect_times("carrying on", 2);

    // Ctrl-C, then yes: the task is cancelled, and the exit code says so.
    term.press(CTRL_C);
    term.expect(&question);
    term.press("y");
    term.expect("cancelling");
    let (code, screen) = term.exit();
    assert_eq!(code, 3, "{screen}");
    assert!(screen.contains("cancelled"), "{screen}");
}

#[test]
fn a_second_ctrl_c_cancels_at_once() {
    let (_dir, server) = Server::fresh();
    let mut term = Terminal::start(&[
        "--url",
        &server.url,
        "slow_compute",
        r#"{"seconds":3600,"label":"x"}"#,
    ]);
    let id = term.task_id();
    term.expect("working");
    term.press(CTRL_C);
    term.expect(&format!("Cancel task {id}? (y/n)"));
    term.press(CTRL_C);
    let (code, screen) = term.exit();
    assert_eq!(code, 3, "{screen}");
    assert!(screen.contains("cancelled"), "{screen}");
}
