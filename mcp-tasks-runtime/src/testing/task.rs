//! [`TestTask`] and [`TestQuestion`]: a task the test started.

use super::{inline::text_of, *};

/// A task the test started: answer it, move its clock, read its end.
#[derive(Clone)]
pub struct TestTask {
    pub(super) engine: Engine,
    pub(super) id: String,
    pub(super) principal: Option<String>,
    pub(super) settle: Duration,
}

impl fmt::Debug for TestTask {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestTask").field("id", &self.id).finish()
    }
}

/// A question the task is waiting on.
#[derive(Debug, Clone, PartialEq)]
pub struct TestQuestion(pub(super) PendingInput);

impl TestQuestion {
    /// Its key in `inputRequests`.
    pub fn key(&self) -> &str {
        &self.0.key
    }

    /// What a form or URL question asks (`None` for sampling and roots).
    pub fn message(&self) -> Option<&str> {
        match &self.0.request {
            InputRequest::Form(form) => Some(&form.message),
            InputRequest::Url(ask) => Some(&ask.message),
            InputRequest::Sample(_) | InputRequest::ListRoots => None,
        }
    }

    /// The page a URL question ([`ask_url`](crate::question::ask_url)) sends the user
    /// to (`None` for any other question).
    pub fn url(&self) -> Option<&str> {
        match &self.0.request {
            InputRequest::Url(ask) => Some(&ask.url),
            _ => None,
        }
    }

    /// The question as the task stores it.
    pub fn pending(&self) -> &PendingInput {
        &self.0
    }
}

impl TestTask {
    /// The task's id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The task as stored now.
    ///
    /// # Panics
    ///
    /// When the task is gone (expired).
    pub async fn record(&self) -> TaskRecord {
        self.engine
            .get(&self.id, self.principal.as_deref())
            .await
            .unwrap_or_else(|e| panic!("task {} is gone: {e}", self.id))
    }

    /// The task and its journal as exported JSON (what
    /// [`ToolTest::replay_journal`] replays), secrets in clear (see
    /// [`JournalExport::redacted`](crate::replay::JournalExport::redacted)).
    ///
    /// # Panics
    ///
    /// When the task is gone (expired).
    pub async fn export(&self) -> crate::replay::JournalExport {
        crate::replay::JournalExport::read(&**self.engine.store(), &self.id)
            .await
            .unwrap_or_else(|e| panic!("task {} could not be read: {e}", self.id))
            .unwrap_or_else(|| panic!("task {} is gone", self.id))
    }

    /// Waits until the task is parked on questions, and returns them.
    ///
    /// # Panics
    ///
    /// When the task ends instead, or nothing is asked within the settle
    /// timeout ([`ToolTest::settle_timeout`], 10 s by default).
    pub async fn questions(&self) -> Vec<TestQuestion> {
        let r = self
            .until("it asks a question", |r| {
                r.status == TaskStatus::InputRequired || r.status.is_terminal()
            })
            .await;
        assert!(
            r.status == TaskStatus::InputRequired,
            "the task ended without asking: {r:?}"
        );
        r.pending
            .into_iter()
            .filter(PendingInput::is_open)
            .map(TestQuestion)
            .collect()
    }

    /// Answers the question `key` with `response` as the client would send
    /// it (an `ElicitResult`, a `CreateMessageResult`, a `ListRootsResult`),
    /// once the task asks it. A URL question ([`ask_url`](crate::question::ask_url))
    /// is answered with its action alone: `{"action": "accept"}`.
    ///
    /// # Panics
    ///
    /// When the task ends, or parks without asking `key`, first.
    pub async fn respond(&self, key: &str, response: Value) {
        let keys: Vec<String> = self
            .questions()
            .await
            .into_iter()
            .map(|q| q.0.key)
            .collect();
        assert!(
            keys.iter().any(|k| k == key),
            "`{key}` is not an outstanding question: {keys:?}"
        );
        let mut responses = Map::new();
        responses.insert(key.to_owned(), response);
        self.engine
            .update(&self.id, responses, self.principal.as_deref())
            .await
            .unwrap_or_else(|e| panic!("tasks/update failed: {e}"));
    }

    /// Moves the engine's clock `by` ahead: durable timers (`sleep`) and
    /// question deadlines that fall due meanwhile fire now, and the task
    /// runs on. It first waits for the task to settle (asleep on a timer,
    /// parked on a question, or ended), and returns once the task has moved
    /// on from what it was waiting on (or nothing was due).
    ///
    /// # Panics
    ///
    /// When the task is still running after the settle timeout
    /// ([`ToolTest::settle_timeout`], 10 s by default): the message says
    /// so, and names the durable `sleep`, for a tool that waits on a tokio
    /// timer `advance` cannot move.
    pub async fn advance(&self, by: Duration) {
        let before = self
            .until("it waits on a timer or a question, or ends", |r| {
                r.status != TaskStatus::Working || (r.wake_at_ms.is_some() && r.lease.is_none())
            })
            .await;
        self.engine.advance_clock(by);
        let now = self.engine.now_ms();
        if before.wake_at_ms.is_some_and(|at| at <= now) {
            self.until("its timer fires", |r| r.version > before.version)
                .await;
        }
    }

    /// Asks the task to cancel (as `tasks/cancel` does).
    pub async fn cancel(&self) {
        self.engine
            .cancel(&self.id, self.principal.as_deref())
            .await
            .unwrap_or_else(|e| panic!("tasks/cancel failed: {e}"));
    }

    /// Waits until the task ends, and returns it.
    ///
    /// # Panics
    ///
    /// When it has not ended within the settle timeout
    /// ([`ToolTest::settle_timeout`], 10 s by default; parked on a
    /// question, say).
    pub async fn finish(&self) -> TaskRecord {
        self.until("it ends", |r| r.status.is_terminal()).await
    }

    answers_and_output!();

    pub(super) async fn result(&self) -> Map<String, Value> {
        let r = self.finish().await;
        match (r.status, r.result) {
            (TaskStatus::Completed, Some(result)) => result,
            (status, _) => panic!(
                "the task ended {}, not completed: {:?}",
                status.as_str(),
                r.error
            ),
        }
    }

    pub(super) async fn until(&self, what: &str, done: impl Fn(&TaskRecord) -> bool) -> TaskRecord {
        let deadline = tokio::time::Instant::now() + self.settle;
        loop {
            let r = self.record().await;
            if done(&r) {
                return r;
            }
            if tokio::time::Instant::now() >= deadline {
                panic!("{}", stuck(self.settle, what, &r));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}
