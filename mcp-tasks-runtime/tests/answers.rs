//! Answers to a task's questions: checked against the question's form before
//! they are taken (core MRTR § Error Handling), keys never given twice (tasks
//! ext. § Input Requests: keys), and questions asked only of clients that
//! declared what they need (tasks ext. § Input Requests).
//!
//! The answer-checking scenarios run on each store: memory, a SQLite file and
//! Postgres (`MCP_TASKS_POSTGRES_URL`, or
//! `postgres://postgres@127.0.0.1:5432/postgres`; skipped with a note on
//! stderr when no server answers, unless `CI` is set).

mod stores;

use std::time::Duration;

use mcp_tasks_runtime::{
    Elicit, Engine, ToolError, ask_user,
    engine::{Call, CallMode, CallOutcome},
    question::{AskError, InputCapabilities, sample},
    store::{TaskRecord, TaskStatus},
    task_tool,
    testing::ToolTest,
    tool::Registry,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};
use stores::{Backend, forms, memory, on_schema, postgres_schema, sqlite, until};

/// Whether to roll out.
#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Approval {
    /// Roll it out now?
    approve: bool,
    /// How many replicas.
    replicas: Option<u8>,
}

/// Asks for an approval under the key `approval`.
#[task_tool]
async fn approve() -> Result<String, ToolError> {
    match ask_user::<Approval>("Roll out?").key("approval").await {
        Ok(a) => Ok(format!("approve={} replicas={:?}", a.approve, a.replicas)),
        Err(AskError::Declined) => Ok("declined".into()),
        Err(AskError::Cancelled) => Ok("cancelled".into()),
        Err(e) => Err(ToolError::new(format!("ask failed: {e}"))),
    }
}

/// Asks two questions at once, `first` and `second`.
#[task_tool]
async fn approve_twice() -> Result<String, ToolError> {
    let (a, b) = futures::join!(
        ask_user::<Approval>("First?").key("first").into_future(),
        ask_user::<Approval>("Second?").key("second").into_future(),
    );
    Ok(format!("{} {}", a?.approve, b?.approve))
}

// ---------------------------------------------------------------------------
// Stores.

async fn postgres() -> Option<Backend> {
    on_schema(&postgres_schema("mcp_tasks_answers")).await
}

async fn engine(backend: &Backend) -> Engine {
    let registry = Registry::new()
        .with(approve_tool())
        .and_then(|r| r.with(approve_twice_tool()))
        .expect("a registry");
    Engine::builder_arc(backend.store.clone())
        .registry(registry)
        .start()
        .await
        .expect("start the engine")
}

// ---------------------------------------------------------------------------
// Helpers.

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

async fn start(engine: &Engine, tool: &str) -> String {
    let call = Call::new(tool, Map::new()).capabilities(forms());
    let CallOutcome::Task(r) = engine.call(call).await.expect("create the task") else {
        panic!("a task-capable call with no inline window starts a task");
    };
    r.id.clone()
}

async fn parked(engine: &Engine, id: &str) -> TaskRecord {
    until(engine, id, |r| r.status == TaskStatus::InputRequired).await
}

fn keys(r: &TaskRecord) -> Vec<&str> {
    r.pending.iter().map(|p| p.key.as_str()).collect()
}

/// [`stores::text`] of a result that is no tool error.
fn text(r: &TaskRecord) -> String {
    let result = r.result.as_ref().expect("a result");
    assert_ne!(result.get("isError"), Some(&json!(true)), "{result:?}");
    stores::text(r)
}

// ---------------------------------------------------------------------------
// MRTR § Error Handling: answers are checked against the form.

/// Every kind of answer that does not fit is refused alike: the key stays
/// outstanding, the task stays `input_required`, the status message names
/// what was wrong, and `update` still succeeds. Then an answer that fits
/// is taken and the task completes.
async fn bad_answers_leave_the_question_open(backend: Backend) {
    let engine = engine(&backend).await;
    let id = start(&engine, "approve").await;
    let first = parked(&engine, &id).await;
    assert_eq!(keys(&first), ["approval"]);
    let bad = [
        (
            json!({"action": "accept", "content": {"approve": "yes"}}),
            "`approve`",
        ),
        (
            json!({"action": "accept", "content": {"approve": true, "replicas": 300}}),
            "`replicas`",
        ),
        (json!({"action": "accept", "content": {}}), "\"approve\""),
        (json!({"action": "accept"}), "\"approve\""),
        (json!({"action": "accept", "content": "yes"}), "`content`"),
        (json!({"action": "maybe"}), "`action`"),
        (json!({"content": {"approve": true}}), "`action`"),
        (json!("yes"), "JSON object"),
        (json!(true), "JSON object"),
        (json!(null), "JSON object"),
    ];
    for (answer, names) in bad {
        engine
            .update(&id, obj(json!({"approval": answer})), None)
            .await
            .unwrap_or_else(|e| panic!("{answer}: update failed: {e}"));
        let r = engine.get(&id, None).await.unwrap();
        assert_eq!(r.status, TaskStatus::InputRequired, "{answer}: {r:#?}");
        assert_eq!(
            keys(&r),
            ["approval"],
            "{answer}: the key stays outstanding"
        );
        assert_eq!(r.pending, first.pending, "{answer}: the same question");
        let message = r.status_message.clone().unwrap_or_default();
        assert!(
            message.contains("`approval`") && message.contains(names),
            "{answer}: the message names the key and {names}: {message}"
        );
        assert!(r.version > first.version, "watchers hear of the message");
    }
    assert!(
        engine.store().journal(&id).await.unwrap().is_empty(),
        "nothing was journaled"
    );
    // A key that is not outstanding (ignored by `tasks/update`) is still
    // ignored, whatever its shape.
    let before = engine.get(&id, None).await.unwrap();
    engine
        .update(&id, obj(json!({"unknown-key": {"ignored": true}})), None)
        .await
        .expect("an unknown key is acked");
    assert_eq!(engine.get(&id, None).await.unwrap(), before);

    let good = json!({"action": "accept", "content": {"approve": true, "replicas": 3, "extra": "ignored"}});
    engine
        .update(&id, obj(json!({"approval": good})), None)
        .await
        .expect("update");
    let done = until(&engine, &id, |r| r.status.is_terminal()).await;
    assert_eq!(text(&done), "approve=true replicas=Some(3)");
}

/// Decline and cancel are taken as before: the tool sees them.
async fn decline_and_cancel_are_taken(backend: Backend) {
    let engine = engine(&backend).await;
    for (action, expected) in [("decline", "declined"), ("cancel", "cancelled")] {
        let id = start(&engine, "approve").await;
        parked(&engine, &id).await;
        // A decline needs no content, and content that does not fit is
        // ignored.
        let answer = json!({"action": action, "content": {"approve": "no"}});
        engine
            .update(&id, obj(json!({"approval": answer})), None)
            .await
            .expect("update");
        let done = until(&engine, &id, |r| r.status.is_terminal()).await;
        assert_eq!(text(&done), expected);
    }
}

/// Of two answers in one update, the one that fits is taken and the other
/// is refused; a later answer that fits clears the refusal's message.
async fn one_good_one_bad(backend: Backend) {
    let engine = engine(&backend).await;
    let id = start(&engine, "approve_twice").await;
    until(&engine, &id, |r| r.pending.len() == 2).await;
    let answers = json!({
        "first": {"action": "accept", "content": {"approve": true}},
        "second": {"action": "accept", "content": {"approve": 1}},
    });
    engine
        .update(&id, obj(answers), None)
        .await
        .expect("update");
    let r = engine.get(&id, None).await.unwrap();
    assert_eq!(r.status, TaskStatus::InputRequired);
    assert_eq!(keys(&r), ["second"]);
    let message = r.status_message.unwrap_or_default();
    assert!(
        message.contains("`second`")
            && message.contains("`approve`")
            && !message.contains("`first`"),
        "{message}"
    );

    let answers = json!({"second": {"action": "accept", "content": {"approve": false}}});
    engine
        .update(&id, obj(answers), None)
        .await
        .expect("update");
    let done = until(&engine, &id, |r| r.status.is_terminal()).await;
    assert_eq!(text(&done), "true false");
    let message = done.status_message.unwrap_or_default();
    assert!(!message.contains("not accepted"), "{message}");
}

/// Right after a good answer follows a refused one, the message says the
/// answer was taken (while the task runs on).
async fn a_good_answer_replaces_the_refusal(backend: Backend) {
    let engine = engine(&backend).await;
    let id = start(&engine, "approve_twice").await;
    until(&engine, &id, |r| r.pending.len() == 2).await;
    let bad = json!({"first": {"action": "accept", "content": {}}});
    engine.update(&id, obj(bad), None).await.expect("update");
    let r = engine.get(&id, None).await.unwrap();
    assert!(
        r.status_message
            .unwrap_or_default()
            .contains("`first` was not accepted")
    );
    let good = json!({"first": {"action": "accept", "content": {"approve": true}}});
    engine.update(&id, obj(good), None).await.expect("update");
    let r = engine.get(&id, None).await.unwrap();
    assert_eq!(keys(&r), ["second"]);
    assert_eq!(
        r.status_message.as_deref(),
        Some("The answer to `first` was accepted.")
    );
}

macro_rules! on_every_store {
    ($($name:ident),* $(,)?) => {
        $(
            mod $name {
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn memory() {
                    super::$name(super::memory().await.unwrap()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn sqlite() {
                    super::$name(super::sqlite().await.unwrap()).await;
                }

                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn postgres() {
                    if let Some(backend) = super::postgres().await {
                        super::$name(backend).await;
                    }
                }
            }
        )*
    };
}

on_every_store!(
    bad_answers_leave_the_question_open,
    decline_and_cancel_are_taken,
    one_good_one_bad,
    a_good_answer_replaces_the_refusal,
);

/// Inline (MRTR) rounds: an answer that does not fit is not taken; the same
/// question comes back under the same key, its message saying what was wrong.
#[tokio::test]
async fn inline_bad_answers_are_asked_again() {
    let engine = engine(&memory().await.unwrap()).await;
    let call = || {
        Call::new("approve", Map::new())
            .capabilities(forms())
            .mode(CallMode::Inline)
    };
    let CallOutcome::InputRequired { requests, journal } = engine.call(call()).await.unwrap()
    else {
        panic!("an inline call asks");
    };
    assert_eq!(requests[0].key, "approval");
    for bad in [
        json!({"action": "accept", "content": {"approve": "yes"}}),
        json!("yes"),
    ] {
        let retry = call().resume(journal.clone(), obj(json!({"approval": bad})));
        let CallOutcome::InputRequired { requests, .. } = engine.call(retry).await.unwrap() else {
            panic!("{bad}: the question is asked again");
        };
        assert_eq!(requests.len(), 1);
        assert_eq!(requests[0].key, "approval", "the same key");
        let params = requests[0].request.params();
        let message = params["message"].as_str().unwrap();
        assert!(
            message.contains("not accepted") && message.ends_with("Roll out?"),
            "{bad}: {message}"
        );
        assert_eq!(
            params["requestedSchema"],
            requests[0].request.params()["requestedSchema"]
        );
    }
    let good = json!({"action": "accept", "content": {"approve": true}});
    let retry = call().resume(journal, obj(json!({"approval": good})));
    let CallOutcome::Finished(outcome) = engine.call(retry).await.unwrap() else {
        panic!("a good answer finishes the call");
    };
    assert!(
        format!("{outcome:?}").contains("approve=true"),
        "{outcome:?}"
    );
}

// ---------------------------------------------------------------------------
// Tasks extension, input request keys: keys are never given twice.

/// A name.
#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Name {
    /// The name.
    name: String,
}

/// Names its first question as the generator would name the second.
#[task_tool]
async fn custom_then_generated() -> Result<String, ToolError> {
    let a: Name = ask_user("first").key("ask-1").await?;
    let b: Name = ask_user("second").await?;
    Ok(format!("{} {}", a.name, b.name))
}

/// Lets the generator name the first question, then names the second the
/// same, then names the third what the second became.
#[task_tool]
async fn generated_then_custom() -> Result<String, ToolError> {
    let a: Name = ask_user("first").await?;
    let b: Name = ask_user("second").key("ask-0").await?;
    let c: Name = ask_user("third").key("ask-0-1").await?;
    Ok(format!("{} {} {}", a.name, b.name, c.name))
}

/// A key, the key with the position appended, then the key again.
#[task_tool]
async fn custom_thrice() -> Result<String, ToolError> {
    let a: Name = ask_user("first").key("x").await?;
    let b: Name = ask_user("second").key("x-2").await?;
    let c: Name = ask_user("third").key("x").await?;
    Ok(format!("{} {} {}", a.name, b.name, c.name))
}

/// Answers each question in turn with its key as the name; returns the keys.
async fn keys_asked(test: ToolTest, n: usize) -> (Vec<String>, String) {
    let task = test.start().await.call(json!({})).await;
    let mut seen = Vec::new();
    for _ in 0..n {
        let key = task.question().await.key().to_owned();
        task.answer(&key, json!({"name": key})).await;
        // Wait until this question is gone before looking for the next.
        let start = tokio::time::Instant::now();
        loop {
            let r = task.record().await;
            if r.status.is_terminal() || r.pending.iter().all(|p| p.key != key) {
                break;
            }
            assert!(start.elapsed() < stores::LIMIT);
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
        seen.push(key);
    }
    (seen, task.text().await)
}

#[tokio::test]
async fn a_generated_key_avoids_an_earlier_custom_key() {
    let (keys, text) = keys_asked(ToolTest::new(custom_then_generated_tool()), 2).await;
    // The second question is at position 1: the generator's `ask-1` is
    // taken, so it gets the position appended.
    assert_eq!(keys, ["ask-1", "ask-1-1"]);
    assert_eq!(text, keys.join(" "));
}

#[tokio::test]
async fn a_custom_key_avoids_an_earlier_generated_key() {
    let (keys, text) = keys_asked(ToolTest::new(generated_then_custom_tool()), 3).await;
    assert_eq!(keys, ["ask-0", "ask-0-1", "ask-0-1-2"]);
    assert_eq!(text, keys.join(" "));
}

#[tokio::test]
async fn a_custom_key_used_twice_gets_a_fresh_one() {
    let (keys, text) = keys_asked(ToolTest::new(custom_thrice_tool()), 3).await;
    // `x` and `x-2` (the third question's position appended) are taken:
    // a counter follows.
    assert_eq!(keys, ["x", "x-2", "x-2-2"]);
    assert_eq!(text, keys.join(" "));
}

// ---------------------------------------------------------------------------
// Tasks extension, input requests: no question for a capability the client
// did not declare.

/// Asks a form; says `unsupported` when the client cannot answer one.
#[task_tool]
async fn form_or_not() -> Result<String, ToolError> {
    match ask_user::<Name>("Your name?").await {
        Ok(n) => Ok(n.name),
        Err(AskError::Unsupported(what)) => Ok(format!("unsupported: {what}")),
        Err(e) => Err(e.into()),
    }
}

/// Samples with a tool; says `unsupported` when the client cannot.
#[task_tool]
async fn sample_with_tools() -> Result<String, ToolError> {
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": "Weather?"}}],
        "maxTokens": 50,
        "tools": [{"name": "weather", "inputSchema": {"type": "object"}}],
    });
    match sample(params).await {
        Ok(_) => Ok("sampled".into()),
        Err(AskError::Unsupported(what)) => Ok(format!("unsupported: {what}")),
        Err(e) => Err(e.into()),
    }
}

/// Samples without tools.
#[task_tool]
async fn sample_plain() -> Result<String, ToolError> {
    let params = json!({
        "messages": [{"role": "user", "content": {"type": "text", "text": "Hi"}}],
        "maxTokens": 50,
    });
    match sample(params).await {
        Ok(_) => Ok("sampled".into()),
        Err(AskError::Unsupported(what)) => Ok(format!("unsupported: {what}")),
        Err(e) => Err(e.into()),
    }
}

fn caps(v: Value) -> InputCapabilities {
    serde_json::from_value(v).expect("a capability object")
}

#[tokio::test]
async fn url_only_elicitation_gets_no_form() {
    let test = ToolTest::new(form_or_not_tool())
        .capabilities(caps(json!({"elicitation": {"url": {}}})))
        .start()
        .await;
    assert_eq!(
        test.call(json!({})).await.text().await,
        "unsupported: elicitation"
    );
    for declared in [
        json!({"elicitation": {}}),
        json!({"elicitation": {"form": {}}}),
    ] {
        let test = ToolTest::new(form_or_not_tool())
            .capabilities(caps(declared.clone()))
            .start()
            .await;
        let task = test.call(json!({})).await;
        let key = task.question().await.key().to_owned();
        task.answer(&key, json!({"name": "Ada"})).await;
        assert_eq!(task.text().await, "Ada", "{declared}");
    }
}

#[tokio::test]
async fn sampling_with_tools_needs_sampling_tools() {
    let test = ToolTest::new(sample_with_tools_tool())
        .capabilities(caps(json!({"sampling": {}})))
        .start()
        .await;
    assert_eq!(
        test.call(json!({})).await.text().await,
        "unsupported: sampling.tools"
    );

    let test = ToolTest::new(sample_plain_tool())
        .capabilities(caps(json!({"sampling": {}})))
        .start()
        .await;
    let task = test.call(json!({})).await;
    task.question().await;

    let test = ToolTest::new(sample_with_tools_tool())
        .capabilities(caps(json!({"sampling": {"tools": {}}})))
        .start()
        .await;
    let task = test.call(json!({})).await;
    let key = task.question().await.key().to_owned();
    let reply =
        json!({"role": "assistant", "content": {"type": "text", "text": "Sunny"}, "model": "m"});
    task.respond(&key, reply).await;
    assert_eq!(task.text().await, "sampled");
}

#[test]
fn capabilities_round_trip_through_the_store_shape() {
    for v in [
        json!({}),
        json!({"elicitation": {}}),
        json!({"sampling": {}}),
        json!({"sampling": {"tools": {}}}),
        json!({"elicitation": {}, "sampling": {"tools": {}}, "roots": {}}),
    ] {
        let c = caps(v.clone());
        assert_eq!(serde_json::to_value(c).unwrap(), v);
        assert_eq!(caps(serde_json::to_value(c).unwrap()), c);
    }
    // URL mode alone is no form elicitation.
    let mut url_only = InputCapabilities::NONE;
    url_only.elicitation_url = true;
    assert_eq!(caps(json!({"elicitation": {"url": {}}})), url_only);
}
