//! Questions with deadlines through the engine's Rust API, on the memory
//! store and on a SQLite file: questions asked together with one deadline,
//! cancelling a task parked on a timed question, an answer that beats the
//! deadline, and inline rounds that carry the deadline in their journal.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use mcp_tasks_runtime::{
    Elicit, Engine, ToolError, ask_user,
    engine::{Call, CallMode, CallOutcome},
    question::{AskError, InputCapabilities},
    store::{MemoryStore, SqliteStore, StepKind, Store, TaskRecord, TaskStatus},
    task_tool,
    tool::Registry,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

const LIMIT: Duration = Duration::from_secs(20);

#[derive(Deserialize, JsonSchema, Elicit)]
struct Name {
    name: String,
}

#[derive(Deserialize, JsonSchema, Elicit)]
struct Age {
    age: u32,
}

fn outcome(answer: Result<String, AskError>) -> Result<String, ToolError> {
    match answer {
        Ok(v) => Ok(v),
        Err(AskError::TimedOut) => Ok("timed out".into()),
        Err(e) => Err(ToolError::new(e.to_string())),
    }
}

/// Asks for a name with a deadline of `ms` and an age without one, at once.
#[task_tool]
async fn name_and_age(ms: u64) -> Result<String, ToolError> {
    let (name, age) = tokio::join!(
        ask_user::<Name>("Name?")
            .key("name")
            .timeout(Duration::from_millis(ms)),
        ask_user::<Age>("Age?").key("age"),
    );
    Ok(format!(
        "{}; {}",
        outcome(name.map(|n| n.name))?,
        outcome(age.map(|a| a.age.to_string()))?
    ))
}

/// Asks for a name with a deadline of `ms`.
#[task_tool]
async fn timed_name(ms: u64) -> Result<String, ToolError> {
    outcome(
        ask_user::<Name>("Name?")
            .key("name")
            .timeout(Duration::from_millis(ms))
            .await
            .map(|n| n.name),
    )
}

fn registry() -> Registry {
    Registry::new()
        .with(name_and_age_tool())
        .unwrap()
        .with(timed_name_tool())
        .unwrap()
}

fn caps() -> InputCapabilities {
    let mut caps = InputCapabilities::NONE;
    caps.elicitation = true;
    caps
}

fn obj(v: Value) -> Map<String, Value> {
    v.as_object().cloned().expect("an object")
}

async fn engine(store: Arc<dyn Store>) -> Engine {
    Engine::builder_arc(store)
        .registry(registry())
        .scan_interval(Duration::from_millis(100))
        .start()
        .await
        .unwrap()
}

async fn stores() -> Vec<(Arc<dyn Store>, Option<tempfile::TempDir>)> {
    let dir = tempfile::tempdir().unwrap();
    let sqlite = SqliteStore::open(dir.path().join("tasks.db"))
        .await
        .unwrap();
    vec![
        (Arc::new(MemoryStore::new()), None),
        (Arc::new(sqlite), Some(dir)),
    ]
}

async fn create(engine: &Engine, tool: &str, args: Value) -> TaskRecord {
    let call = Call::new(tool, obj(args)).capabilities(caps());
    let CallOutcome::Task(r) = engine.call(call).await.unwrap() else {
        panic!("a task");
    };
    *r
}

async fn until(engine: &Engine, id: &str, pred: impl Fn(&TaskRecord) -> bool) -> TaskRecord {
    let start = Instant::now();
    loop {
        let r = engine.get(id, None).await.unwrap();
        if pred(&r) {
            return r;
        }
        assert!(start.elapsed() < LIMIT, "stuck: {r:#?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn text(r: &TaskRecord) -> String {
    assert_eq!(r.status, TaskStatus::Completed, "{r:#?}");
    r.result.as_ref().unwrap()["content"][0]["text"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn keys(r: &TaskRecord) -> Vec<&str> {
    r.pending.iter().map(|p| p.key.as_str()).collect()
}

#[tokio::test]
async fn questions_asked_together_one_with_a_deadline() {
    for (store, _dir) in stores().await {
        let engine = engine(store.clone()).await;
        let t = create(&engine, "name_and_age", json!({"ms": 300})).await;
        let parked = until(&engine, &t.id, |r| r.pending.len() == 2).await;
        let deadline = parked.pending.iter().find(|p| p.key == "name").unwrap();
        assert!(deadline.deadline_ms.is_some());
        assert_eq!(parked.wake_at_ms, deadline.deadline_ms);
        let age = parked.pending.iter().find(|p| p.key == "age").unwrap();
        assert_eq!(age.deadline_ms, None);

        // The name times out; the age stays outstanding.
        let r = until(&engine, &t.id, |r| keys(r) == ["age"]).await;
        assert_eq!(r.status, TaskStatus::InputRequired);
        assert_eq!(r.wake_at_ms, None);
        engine
            .update(&t.id, obj(json!({"age": {"action": "accept", "content": {"age": 7}}, "name": {"action": "accept", "content": {"name": "late"}}})), None)
            .await
            .unwrap();
        let done = engine.wait(&t.id, None, LIMIT).await.unwrap();
        assert_eq!(text(&done), "timed out; 7");
    }
}

#[tokio::test]
async fn cancel_ends_a_task_parked_on_a_timed_question() {
    for (store, _dir) in stores().await {
        let engine = engine(store.clone()).await;
        let t = create(&engine, "timed_name", json!({"ms": 200})).await;
        until(&engine, &t.id, |r| r.status == TaskStatus::InputRequired).await;
        engine.cancel(&t.id, None).await.unwrap();
        let r = engine.get(&t.id, None).await.unwrap();
        assert_eq!(r.status, TaskStatus::Cancelled);
        tokio::time::sleep(Duration::from_millis(400)).await;
        let r = engine.get(&t.id, None).await.unwrap();
        assert_eq!(r.status, TaskStatus::Cancelled);
        // Only the deadline is journaled: no time-out, no answer.
        let journal = store.journal(&t.id).await.unwrap();
        assert_eq!(journal.len(), 1, "{journal:?}");
        assert_eq!((journal[0].position, journal[0].kind), (1, StepKind::Sleep));
    }
}

#[tokio::test]
async fn an_answer_before_the_deadline_wins() {
    for (store, _dir) in stores().await {
        let engine = engine(store.clone()).await;
        let t = create(&engine, "timed_name", json!({"ms": 500})).await;
        until(&engine, &t.id, |r| r.status == TaskStatus::InputRequired).await;
        let answer = json!({"name": {"action": "accept", "content": {"name": "Ada"}}});
        engine.update(&t.id, obj(answer), None).await.unwrap();
        let done = engine.wait(&t.id, None, LIMIT).await.unwrap();
        assert_eq!(text(&done), "Ada");
        // The timer fires after the answer and changes nothing.
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(engine.get(&t.id, None).await.unwrap(), done);
        let journal = store.journal(&t.id).await.unwrap();
        assert_eq!(journal[0].value["content"]["name"], "Ada");
    }
}

#[tokio::test]
async fn inline_rounds_carry_the_deadline_in_their_journal() {
    let engine = engine(Arc::new(MemoryStore::new())).await;
    let call = Call::new("timed_name", obj(json!({"ms": 200})))
        .capabilities(caps())
        .mode(CallMode::Inline);
    let CallOutcome::InputRequired { requests, journal } = engine.call(call.clone()).await.unwrap()
    else {
        panic!("an inline question");
    };
    assert_eq!(requests.len(), 1);
    let at = requests[0].deadline_ms.expect("a deadline");
    assert_eq!(journal.len(), 1);
    assert_eq!(
        (journal[0].kind, journal[0].value.as_i64()),
        (StepKind::Sleep, Some(at))
    );

    // A round in time: the answer counts.
    let answer = obj(json!({"name": {"action": "accept", "content": {"name": "Ada"}}}));
    let on_time = call.clone().resume(journal.clone(), answer.clone());
    let CallOutcome::Finished(Ok(result)) = engine.call(on_time).await.unwrap() else {
        panic!("finished");
    };
    assert_eq!(result["content"][0]["text"], "Ada");

    // The same round after the deadline: timed out, the same deadline kept.
    tokio::time::sleep(Duration::from_millis(250)).await;
    let late = call.resume(journal, answer);
    let CallOutcome::Finished(Ok(result)) = engine.call(late).await.unwrap() else {
        panic!("finished");
    };
    assert_eq!(result["content"][0]["text"], "timed out");
}
