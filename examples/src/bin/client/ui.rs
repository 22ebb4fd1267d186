//! The terminal: the progress spinner, the lock that gives one prompt at a
//! time the screen, and what Ctrl-C does.
//!
//! Ctrl-C arrives as SIGINT, caught by [`watch_interrupts`] (the prompts see
//! it too: in a prompt, the terminal is raw and the prompt library turns the
//! key into a SIGINT to this process, then returns an `Interrupted` error).
//! On a terminal, the first one asks "Cancel task ID?"; a second one while
//! that is shown cancels at once; once cancelling, one more stops waiting.
//! Without a terminal, the first one cancels at once. What was decided is
//! published as an [`Interrupt`] for the code that follows the task, and as a
//! [`Ui::decided`] for a prompt that was interrupted and waits to know
//! whether to ask again.

use std::{
    sync::{Condvar, Mutex, MutexGuard, PoisonError},
    time::{Duration, Instant},
};

use dialoguer::{Confirm, theme::ColorfulTheme};
use indicatif::{ProgressBar, ProgressStyle};
use nix::sys::termios;
use tokio::{
    signal::unix::{SignalKind, signal},
    sync::watch,
};

/// What Ctrl-C decided so far.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Interrupt {
    /// Nothing: carry on.
    None,
    /// Cancel the task (or stop, before there is one).
    Cancel,
    /// Stop waiting for the cancelled task to end.
    GiveUp,
}

/// The terminal, shared by the code that follows the task, the prompts
/// (on blocking threads) and the Ctrl-C watcher.
#[derive(Debug)]
pub(crate) struct Ui {
    /// Stdin and stderr are a terminal: prompts, and Ctrl-C asks first.
    pub(crate) interactive: bool,
    /// Show a spinner (stderr is a terminal, and no `--json`).
    spinner: bool,
    /// Held by whoever prompts: one prompt on the screen at a time.
    terminal: Mutex<()>,
    screen: Mutex<Screen>,
    decisions: Mutex<Decisions>,
    decided: Condvar,
    interrupt: watch::Sender<Interrupt>,
}

/// The progress display.
#[derive(Debug, Default)]
struct Screen {
    /// The task's id, once there is one.
    task: Option<String>,
    started: Option<Instant>,
    /// The spinner's line: status and status message.
    message: String,
    /// The spinner, while one is drawn.
    bar: Option<ProgressBar>,
    /// How many holds are on: no spinner while any is.
    paused: usize,
    /// A prompt is on the screen: lines wait until it is done.
    prompting: bool,
    /// Lines to print once the prompt is done.
    held: Vec<String>,
    done: bool,
}

/// The answers to Ctrl-C so far.
#[derive(Debug, Default)]
struct Decisions {
    /// How many "Cancel task?" questions were answered.
    answered: u64,
    cancelling: bool,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Ui {
    pub(crate) fn new(interactive: bool, spinner: bool) -> Self {
        Self {
            interactive,
            spinner,
            terminal: Mutex::new(()),
            screen: Mutex::new(Screen::default()),
            decisions: Mutex::new(Decisions::default()),
            decided: Condvar::new(),
            interrupt: watch::Sender::new(Interrupt::None),
        }
    }

    /// What Ctrl-C decided, as it changes.
    pub(crate) fn interrupts(&self) -> watch::Receiver<Interrupt> {
        self.interrupt.subscribe()
    }

    /// Names the task and starts showing its progress.
    pub(crate) fn start_progress(&self, id: &str) {
        let mut screen = lock(&self.screen);
        screen.task = Some(id.to_owned());
        screen.started = Some(Instant::now());
        screen.message = "following".to_owned();
        self.print(&mut screen, format!("task {id}"));
        self.draw(&mut screen);
    }

    /// One state of the task: a line that stays, and the spinner's message.
    pub(crate) fn show(&self, status: &str, message: Option<&str>) {
        let mut screen = lock(&self.screen);
        let elapsed = screen
            .started
            .map_or(Duration::ZERO, |started| started.elapsed());
        let text = match message {
            Some(message) => format!("{status}: {message}"),
            None => status.to_owned(),
        };
        self.print(
            &mut screen,
            format!("  [{:>6.1}s] {text}", elapsed.as_secs_f64()),
        );
        screen.message = text;
        if let Some(bar) = &screen.bar {
            bar.set_message(screen.message.clone());
        }
    }

    /// A line about what the client does (cancelling, ...).
    pub(crate) fn note(&self, line: &str) {
        let mut screen = lock(&self.screen);
        self.print(&mut screen, format!("  {line}"));
    }

    /// Stops the spinner for good; prints what was held back.
    pub(crate) fn finish_progress(&self) {
        let mut screen = lock(&self.screen);
        screen.done = true;
        if let Some(bar) = screen.bar.take() {
            bar.finish_and_clear();
        }
        for line in std::mem::take(&mut screen.held) {
            eprintln!("{line}");
        }
    }

    /// Prints a line above the spinner, or holds it while a prompt has the
    /// screen.
    fn print(&self, screen: &mut Screen, line: String) {
        match &screen.bar {
            Some(bar) => bar.println(line),
            None if screen.prompting => screen.held.push(line),
            None => eprintln!("{line}"),
        }
    }

    /// Draws the spinner, when there should be one.
    fn draw(&self, screen: &mut Screen) {
        if !self.spinner || screen.paused > 0 || screen.done || screen.bar.is_some() {
            return;
        }
        let Some(started) = screen.started else {
            return;
        };
        let style = ProgressStyle::with_template("{spinner:.cyan} {elapsed:>4} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_spinner());
        let bar = ProgressBar::new_spinner()
            .with_style(style)
            .with_elapsed(started.elapsed())
            .with_message(screen.message.clone());
        bar.enable_steady_tick(Duration::from_millis(120));
        screen.bar = Some(bar);
    }

    /// Runs `prompt` with the screen to itself: one prompt at a time, no
    /// spinner meanwhile. Blocks: call it from a blocking thread.
    pub(crate) fn prompt<T>(&self, prompt: impl FnOnce() -> T) -> T {
        let _terminal = lock(&self.terminal);
        let _held = self.hold();
        lock(&self.screen).prompting = true;
        let keys = self.interactive.then(keys_to_the_prompt).flatten();
        let out = prompt();
        if let Some(mode) = keys {
            let _ = termios::tcsetattr(std::io::stdin(), termios::SetArg::TCSANOW, &mode);
        }
        // A prompt left by an error may leave the cursor hidden.
        let _ = dialoguer::console::Term::stderr().show_cursor();
        let mut screen = lock(&self.screen);
        screen.prompting = false;
        for line in std::mem::take(&mut screen.held) {
            eprintln!("{line}");
        }
        out
    }

    /// No spinner until the guard drops (the fields of one form), and lines
    /// held back meanwhile.
    pub(crate) fn hold(&self) -> Hold<'_> {
        let mut screen = lock(&self.screen);
        screen.paused += 1;
        if let Some(bar) = screen.bar.take() {
            bar.finish_and_clear();
        }
        for line in std::mem::take(&mut screen.held) {
            eprintln!("{line}");
        }
        Hold(self)
    }

    /// How many Ctrl-C questions were answered so far; see [`Ui::decided`].
    pub(crate) fn answered(&self) -> u64 {
        lock(&self.decisions).answered
    }

    /// For a prompt that Ctrl-C interrupted (`answered` read before): waits
    /// until the Ctrl-C is decided; `true` when the task is being cancelled,
    /// `false` to ask again.
    pub(crate) fn decided(&self, answered: u64) -> bool {
        let decisions = lock(&self.decisions);
        let decisions = self
            .decided
            .wait_while(decisions, |d| !d.cancelling && d.answered == answered)
            .unwrap_or_else(PoisonError::into_inner);
        decisions.cancelling
    }

    /// Whether the task is being cancelled.
    pub(crate) fn cancelling(&self) -> bool {
        lock(&self.decisions).cancelling
    }

    fn cancel(&self) {
        lock(&self.decisions).cancelling = true;
        self.decided.notify_all();
        self.interrupt.send_replace(Interrupt::Cancel);
    }

    fn carry_on(&self) {
        lock(&self.decisions).answered += 1;
        self.decided.notify_all();
    }

    /// "Cancel task ID?" (blocking).
    fn confirm_cancel(&self) -> Answer {
        self.prompt(|| {
            if self.cancelling() {
                return Answer::Yes;
            }
            let question = match &lock(&self.screen).task {
                Some(id) => format!("Cancel task {id}?"),
                None => "Stop before the task starts?".to_owned(),
            };
            match Confirm::with_theme(&ColorfulTheme::default())
                .with_prompt(question)
                .default(false)
                .interact_opt()
            {
                Ok(Some(true)) => Answer::Yes,
                // Esc or `q`: as no.
                Ok(Some(false) | None) => Answer::No,
                Err(e) if is_interrupt(&e) => Answer::Interrupted,
                // The terminal is gone: nobody is left to say no.
                Err(_) => Answer::Yes,
            }
        })
    }
}

/// Keeps the spinner away; see [`Ui::hold`].
#[derive(Debug)]
pub(crate) struct Hold<'a>(&'a Ui);

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        let ui = self.0;
        let mut screen = lock(&ui.screen);
        screen.paused -= 1;
        if screen.paused == 0 {
            for line in std::mem::take(&mut screen.held) {
                eprintln!("{line}");
            }
            ui.draw(&mut screen);
        }
    }
}

/// For as long as a prompt is shown, keys go to it as they are typed, Ctrl-C
/// included: no line editing, no echo, no signals from the terminal. The
/// prompt library switches to that mode only while it reads a key; keys
/// typed in between would otherwise be echoed, or (Ctrl-C) become a SIGINT
/// the prompt never sees while it keeps the screen. Returns the mode to put
/// back.
fn keys_to_the_prompt() -> Option<termios::Termios> {
    let stdin = std::io::stdin();
    let saved = termios::tcgetattr(&stdin).ok()?;
    let mut mode = saved.clone();
    mode.local_flags.remove(
        termios::LocalFlags::ICANON
            | termios::LocalFlags::ECHO
            | termios::LocalFlags::ISIG
            | termios::LocalFlags::IEXTEN,
    );
    mode.control_chars[termios::SpecialCharacterIndices::VMIN as usize] = 1;
    mode.control_chars[termios::SpecialCharacterIndices::VTIME as usize] = 0;
    termios::tcsetattr(&stdin, termios::SetArg::TCSANOW, &mode).ok()?;
    Some(saved)
}

/// An answer to "Cancel task ID?".
#[derive(Debug)]
enum Answer {
    Yes,
    No,
    /// Ctrl-C on the question itself (its SIGINT is on its way).
    Interrupted,
}

/// Whether a prompt ended on Ctrl-C.
pub(crate) fn is_interrupt(e: &dialoguer::Error) -> bool {
    let dialoguer::Error::IO(e) = e;
    e.kind() == std::io::ErrorKind::Interrupted
}

/// Turns Ctrl-C (SIGINT) into decisions, for as long as the client runs.
pub(crate) async fn watch_interrupts(ui: std::sync::Arc<Ui>) {
    let Ok(mut sigint) = signal(SignalKind::interrupt()) else {
        return;
    };
    let mut asking: Option<tokio::task::JoinHandle<Answer>> = None;
    // The SIGINT of a Ctrl-C already acted on (typed on the question, which
    // ended first), still to come.
    let mut expected = false;
    loop {
        tokio::select! {
            got = sigint.recv() => {
                if got.is_none() {
                    return;
                }
                if std::mem::take(&mut expected) {
                    continue;
                }
                if ui.cancelling() {
                    ui.interrupt.send_replace(Interrupt::GiveUp);
                } else if !ui.interactive || asking.is_some() {
                    // Not a terminal, or the second Ctrl-C: at once. (A
                    // question still shown is answered by the exit.)
                    asking = None;
                    ui.cancel();
                } else {
                    let ui = ui.clone();
                    asking = Some(tokio::task::spawn_blocking(move || ui.confirm_cancel()));
                }
            }
            answer = async { asking.as_mut().expect("guarded").await }, if asking.is_some() => {
                asking = None;
                match answer {
                    Ok(Answer::No) => {
                        // Said before an interrupted prompt asks again.
                        ui.note("carrying on");
                        ui.carry_on();
                    }
                    Ok(Answer::Interrupted) => {
                        expected = true;
                        ui.cancel();
                    }
                    Ok(Answer::Yes) | Err(_) => ui.cancel(),
                }
            }
        }
    }
}
