//! [`InlineCall`]: a call of a `task = forbidden` tool, run inline.

use super::*;

/// A call run inline ([`StartedTest::call_inline`]): its questions, round
/// by round, and its result.
#[derive(Clone)]
pub struct InlineCall {
    pub(super) engine: Engine,
    pub(super) tool: String,
    pub(super) arguments: Map<String, Value>,
    pub(super) capabilities: InputCapabilities,
    pub(super) principal: Option<String>,
    pub(super) round: Arc<tokio::sync::Mutex<Round>>,
}

debug_fields!(InlineCall |call| tool: call.tool);

/// Where an inline call is: the round's questions and the answers given so
/// far, or its end.
#[derive(Default)]
pub(super) struct Round {
    pub(super) journal: Vec<JournalEntry>,
    pub(super) asked: Vec<PendingInput>,
    pub(super) answers: Map<String, Value>,
    pub(super) ended: Option<ToolOutcome>,
}

impl InlineCall {
    /// Runs a round: the call again with `journal` and `answers`.
    pub(super) async fn run(&self, journal: Vec<JournalEntry>, answers: Map<String, Value>) {
        let call = Call::new(self.tool.clone(), self.arguments.clone())
            .mode(CallMode::Inline)
            .capabilities(self.capabilities)
            .principal(self.principal.clone())
            .resume(journal, answers);
        let next = match self.engine.call(call).await {
            Ok(CallOutcome::Finished(outcome)) => Round {
                ended: Some(outcome),
                ..Round::default()
            },
            Ok(CallOutcome::InputRequired { requests, journal }) => Round {
                journal,
                asked: requests,
                ..Round::default()
            },
            Ok(other) => panic!("`{}` did not run inline: {other:?}", self.tool),
            Err(e) => panic!("`{}` refused the call: {e}", self.tool),
        };
        *self.round.lock().await = next;
    }

    /// The questions of this round.
    ///
    /// # Panics
    ///
    /// When the call has ended.
    pub async fn questions(&self) -> Vec<TestQuestion> {
        let round = self.round.lock().await;
        if let Some(ended) = &round.ended {
            panic!("the call ended without asking: {ended:?}");
        }
        round.asked.iter().cloned().map(TestQuestion).collect()
    }

    /// Answers the question `key` with `response` as the client would send
    /// it (see [`TestTask::respond`]). Once every question of the round is
    /// answered, the call goes on (the next round, as a client's retry).
    ///
    /// # Panics
    ///
    /// When the round does not ask `key`.
    pub async fn respond(&self, key: &str, response: Value) {
        let mut round = self.round.lock().await;
        let keys: Vec<&str> = round.asked.iter().map(|q| q.key.as_str()).collect();
        assert!(
            keys.contains(&key),
            "`{key}` is not a question of this round: {keys:?}"
        );
        round.answers.insert(key.to_owned(), response);
        if round
            .asked
            .iter()
            .all(|q| round.answers.contains_key(&q.key))
        {
            let journal = std::mem::take(&mut round.journal);
            let answers = std::mem::take(&mut round.answers);
            drop(round);
            self.run(journal, answers).await;
        }
    }

    answers_and_output!();

    pub(super) async fn result(&self) -> Map<String, Value> {
        let round = self.round.lock().await;
        match &round.ended {
            Some(Ok(result)) => result.clone(),
            Some(Err(e)) => panic!("the call failed: {e:?}"),
            None => {
                let keys: Vec<&str> = round.asked.iter().map(|q| q.key.as_str()).collect();
                panic!("the call waits on questions {keys:?}: answer them first")
            }
        }
    }
}

pub(super) fn text_of(result: &Map<String, Value>) -> String {
    result
        .get("content")
        .and_then(|c| c.get(0))
        .and_then(|c| c.get("text"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}
