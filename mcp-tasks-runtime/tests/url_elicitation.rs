//! URL-mode elicitation (`ask_url`; core Elicitation § URL mode): the
//! question's wire shape, the user's action reaching the fn, replay without
//! asking again, the `elicitation.url` gate (tasks ext. § Input Requests),
//! URLs checked when asked, and answers checked before they are taken (core
//! Elicitation, `ElicitResult`).

mod stores;

use std::{sync::Arc, time::Duration};

use mcp_tasks_runtime::{
    Engine, ToolError, confirm,
    engine::{Call, CallMode, CallOutcome},
    question::{AskError, InputCapabilities, ask_url},
    store::{SqliteStore, Store, TaskRecord, TaskStatus},
    task_tool,
    testing::ToolTest,
    tool::Registry,
};
use serde_json::{Map, Value, json};
use stores::until;

const PAGE: &str = "https://registry.example.com/connect?session=abc";

/// Sends the user to the registry's sign-in page under the key `login`.
#[task_tool]
async fn connect() -> Result<String, ToolError> {
    match ask_url("Sign in to the registry.", PAGE).key("login").await {
        Ok(answer) => Ok(format!("{answer:?}")),
        Err(AskError::Unsupported(what)) => Ok(format!("unsupported: {what}")),
        Err(e) => Err(ToolError::new(format!("ask failed: {e}"))),
    }
}

/// Sends the user to `url`; says `invalid` when the URL is refused.
#[task_tool]
async fn connect_to(
    /// Where to send the user.
    url: String,
) -> Result<String, ToolError> {
    match ask_url("Open this page.", url).await {
        Ok(answer) => Ok(format!("{answer:?}")),
        Err(AskError::InvalidRequest(why)) => Ok(format!("invalid: {why}")),
        Err(e) => Err(ToolError::new(format!("ask failed: {e}"))),
    }
}

/// Sends the user to the page, then asks whether to go on.
#[task_tool]
async fn connect_then_go() -> Result<String, ToolError> {
    let login = ask_url("Sign in to the registry.", PAGE)
        .key("login")
        .await?;
    let go = confirm("Go on?").key("go").await?;
    Ok(format!("{login:?} {go}"))
}

/// Waits at most an hour for the user.
#[task_tool]
async fn connect_within_an_hour() -> Result<String, ToolError> {
    match ask_url("Sign in to the registry.", PAGE)
        .timeout(Duration::from_secs(3600))
        .await
    {
        Ok(answer) => Ok(format!("{answer:?}")),
        Err(AskError::TimedOut) => Ok("timed out".into()),
        Err(e) => Err(ToolError::new(format!("ask failed: {e}"))),
    }
}

fn caps(v: Value) -> InputCapabilities {
    serde_json::from_value(v).expect("a capability object")
}

fn obj(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("not an object: {other}"),
    }
}

/// The official 2026-07-28 schema's definition `def`, as a validator.
fn official(def: &str) -> jsonschema::Validator {
    let doc: Value =
        serde_json::from_str(include_str!("../../tests/spec/mcp-2026-07-28.schema.json"))
            .expect("the official schema");
    let schema = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$defs": doc["$defs"],
        "$ref": format!("#/$defs/{def}"),
    });
    jsonschema::draft202012::new(&schema).expect("the official schema compiles")
}

#[tokio::test]
async fn the_question_is_a_url_elicitation() {
    let test = ToolTest::new(connect_tool()).start().await;
    let task = test.call(json!({})).await;
    let q = task.question().await;
    assert_eq!(q.key(), "login");
    assert_eq!(q.message(), Some("Sign in to the registry."));
    assert_eq!(q.url(), Some(PAGE));
    let wire = serde_json::to_value(&q.pending().request).unwrap();
    assert_eq!(
        wire,
        json!({
            "method": "elicitation/create",
            "params": {"mode": "url", "message": "Sign in to the registry.", "url": PAGE},
        })
    );
    for def in ["InputRequest", "ElicitRequest"] {
        let v = official(def);
        let faults: Vec<String> = v.iter_errors(&wire).map(|e| e.to_string()).collect();
        assert!(faults.is_empty(), "{def}: {faults:?}");
    }
    let v = official("ElicitRequestURLParams");
    assert!(v.is_valid(&wire["params"]));
    assert!(
        wire["params"].get("elicitationId").is_none(),
        "none in 2026-07-28"
    );
    // Stored and read back as the same question.
    let back: mcp_tasks_runtime::question::InputRequest = serde_json::from_value(wire).unwrap();
    assert_eq!(back, q.pending().request);
    task.respond("login", json!({"action": "accept"})).await;
    assert_eq!(task.text().await, "Accepted");
}

#[tokio::test]
async fn each_action_reaches_the_fn() {
    let test = ToolTest::new(connect_tool()).start().await;
    for (answer, expected) in [
        (json!({"action": "accept"}), "Accepted"),
        (json!({"action": "accept", "content": {}}), "Accepted"),
        (json!({"action": "decline"}), "Declined"),
        (json!({"action": "cancel"}), "Cancelled"),
    ] {
        let task = test.call(json!({})).await;
        task.respond("login", answer.clone()).await;
        assert_eq!(task.text().await, expected, "{answer}");
    }
    // The kit's decline works too.
    let task = test.call(json!({})).await;
    task.decline("login").await;
    assert_eq!(task.text().await, "Declined");
}

#[tokio::test]
async fn a_deadline_works_as_for_any_question() {
    let test = ToolTest::new(connect_within_an_hour_tool()).start().await;
    let task = test.call(json!({})).await;
    assert_eq!(task.question().await.url(), Some(PAGE));
    task.advance(Duration::from_secs(3600)).await;
    assert_eq!(task.text().await, "timed out");
}

fn keys(r: &TaskRecord) -> Vec<&str> {
    r.pending.iter().map(|p| p.key.as_str()).collect()
}

async fn sqlite_engine(path: &std::path::Path) -> Engine {
    let store: Arc<dyn Store> = Arc::new(SqliteStore::open(path).await.expect("open the store"));
    Engine::builder_arc(store)
        .registry(Registry::new().with(connect_then_go_tool()).unwrap())
        .start()
        .await
        .expect("start the engine")
}

/// The answer is journaled: after a restart the task replays past the URL
/// question without asking it again, and the fn sees the same answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_answer_is_journaled_and_not_asked_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tasks.db");
    let everything = caps(json!({"elicitation": {"form": {}, "url": {}}}));

    let first = sqlite_engine(&path).await;
    let call = Call::new("connect_then_go", Map::new()).capabilities(everything);
    let CallOutcome::Task(task) = first.call(call).await.expect("a task") else {
        panic!("a task-capable call starts a task");
    };
    let id = task.id.clone();
    let parked = until(&first, &id, |r| r.status == TaskStatus::InputRequired).await;
    assert_eq!(keys(&parked), ["login"]);
    first
        .update(&id, obj(json!({"login": {"action": "accept"}})), None)
        .await
        .unwrap();
    let parked = until(&first, &id, |r| keys(r) == ["go"]).await;
    assert_eq!(parked.status, TaskStatus::InputRequired);
    first.shutdown().await.unwrap();
    drop(first);

    let second = sqlite_engine(&path).await;
    let r = second.get(&id, None).await.unwrap();
    assert_eq!(keys(&r), ["go"], "the URL question is not asked again");
    let journal = second.store().journal(&id).await.unwrap();
    assert_eq!(journal.len(), 1, "{journal:?}");
    assert_eq!(journal[0].value, json!({"action": "accept"}));
    second
        .update(
            &id,
            obj(json!({"go": {"action": "accept", "content": {"confirm": true}}})),
            None,
        )
        .await
        .unwrap();
    let done = until(&second, &id, |r| r.status.is_terminal()).await;
    assert_eq!(done.status, TaskStatus::Completed, "{done:#?}");
    let text = done.result.as_ref().unwrap()["content"][0]["text"].clone();
    assert_eq!(text, json!("Accepted true"));
    second.shutdown().await.unwrap();
}

/// Tasks extension, input requests: only a client that declared
/// `elicitation.url` gets the question; the others get `Unsupported` at once,
/// as for an undeclared form.
#[tokio::test]
async fn only_clients_with_elicitation_url_are_asked() {
    for declared in [
        json!({}),
        json!({"elicitation": {}}),
        json!({"elicitation": {"form": {}}}),
        json!({"elicitation": {"url": null}}),
        json!({"sampling": {}, "roots": {}}),
    ] {
        let test = ToolTest::new(connect_tool())
            .capabilities(caps(declared.clone()))
            .start()
            .await;
        assert_eq!(
            test.call(json!({})).await.text().await,
            "unsupported: elicitation.url",
            "{declared}"
        );
    }
    for declared in [
        json!({"elicitation": {"url": {}}}),
        json!({"elicitation": {"form": {}, "url": {}}}),
    ] {
        let test = ToolTest::new(connect_tool())
            .capabilities(caps(declared.clone()))
            .start()
            .await;
        let task = test.call(json!({})).await;
        assert_eq!(task.question().await.url(), Some(PAGE), "{declared}");
        task.respond("login", json!({"action": "decline"})).await;
        assert_eq!(task.text().await, "Declined");
    }
}

#[test]
fn url_capabilities_round_trip_and_old_ones_still_parse() {
    // As stored before URL mode: `{}` is form mode only.
    let old = caps(json!({"elicitation": {}, "roots": {}}));
    assert!(old.elicitation && !old.elicitation_url && old.roots);
    assert_eq!(
        serde_json::to_value(old).unwrap(),
        json!({"elicitation": {}, "roots": {}})
    );
    for v in [
        json!({"elicitation": {"url": {}}}),
        json!({"elicitation": {"form": {}, "url": {}}}),
        json!({"elicitation": {"form": {}, "url": {}}, "sampling": {"tools": {}}, "roots": {}}),
    ] {
        let c = caps(v.clone());
        assert!(c.elicitation_url, "{v}");
        assert_eq!(serde_json::to_value(c).unwrap(), v);
    }
    let url_only = caps(json!({"elicitation": {"url": {}}}));
    assert!(!url_only.elicitation, "URL mode alone asks no forms");
    const { assert!(InputCapabilities::ALL.elicitation_url) };
    const { assert!(!InputCapabilities::NONE.elicitation_url) };
}

/// A URL that is not an absolute http(s) URL, or that carries
/// credentials, is refused when asked: nothing is sent.
#[tokio::test]
async fn a_bad_url_is_refused_when_asked() {
    let test = ToolTest::new(connect_to_tool()).start().await;
    for url in [
        "",
        "not a url",
        "/relative/path",
        "registry.example.com/connect",
        "ftp://registry.example.com/connect",
        "javascript:alert(1)",
        "file:///etc/passwd",
        "data:text/html,hi",
        "mailto:ops@example.com",
        "http://",
        "https://user:secret@registry.example.com/connect",
        "https://user@registry.example.com/connect",
    ] {
        let task = test.call(json!({"url": url})).await;
        let text = task.text().await;
        assert!(text.starts_with("invalid: "), "{url:?}: {text}");
        assert!(
            !text.contains("secret"),
            "the URL's credentials are not repeated: {text}"
        );
        assert!(
            task.record().await.pending.is_empty(),
            "{url:?}: nothing asked"
        );
    }
    for url in [
        "http://127.0.0.1:8080/consent",
        "https://registry.example.com/connect?state=xyz#top",
    ] {
        let task = test.call(json!({"url": url})).await;
        assert_eq!(task.question().await.url(), Some(url));
        task.respond(task.question().await.key(), json!({"action": "accept"}))
            .await;
        assert_eq!(task.text().await, "Accepted");
    }
}

/// Core Elicitation, `ElicitResult`: an answer that is not an action alone is
/// refused like a bad form answer: the key stays outstanding, nothing is
/// journaled, and the status message says why. Then a good answer is taken.
#[tokio::test]
async fn a_bad_answer_is_refused_and_the_key_stays_outstanding() {
    let test = ToolTest::new(connect_tool()).start().await;
    let task = test.call(json!({})).await;
    let first = task.questions().await;
    let engine = test.engine();
    for (answer, names) in [
        (json!({"action": "maybe"}), "`action`"),
        (json!({}), "`action`"),
        (
            json!({"action": "accept", "content": {"token": "s3cret"}}),
            "`content`",
        ),
        (json!({"action": "accept", "content": "yes"}), "`content`"),
        (json!("accept"), "JSON object"),
        (json!(null), "JSON object"),
    ] {
        engine
            .update(task.id(), obj(json!({"login": answer})), None)
            .await
            .unwrap_or_else(|e| panic!("{answer}: update failed: {e}"));
        let r = task.record().await;
        assert_eq!(r.status, TaskStatus::InputRequired, "{answer}");
        assert_eq!(keys(&r), ["login"], "{answer}: the key stays outstanding");
        assert_eq!(
            r.pending,
            first
                .iter()
                .map(|q| q.pending().clone())
                .collect::<Vec<_>>()
        );
        let message = r.status_message.clone().unwrap_or_default();
        assert!(
            message.contains("`login`") && message.contains(names),
            "{answer}: {message}"
        );
        assert!(!message.contains("s3cret"), "{message}");
    }
    assert!(engine.store().journal(task.id()).await.unwrap().is_empty());
    task.respond("login", json!({"action": "cancel"})).await;
    assert_eq!(task.text().await, "Cancelled");
}

/// Inline (MRTR) rounds: a bad answer is not taken; the same URL question
/// comes back under the same key, its message saying what was wrong, and
/// the URL unchanged.
#[tokio::test]
async fn an_inline_bad_answer_is_asked_again() {
    let engine = Engine::builder(mcp_tasks_runtime::store::MemoryStore::new())
        .registry(Registry::new().with(connect_tool()).unwrap())
        .start()
        .await
        .unwrap();
    let call = || {
        Call::new("connect", Map::new())
            .capabilities(caps(json!({"elicitation": {"url": {}}})))
            .mode(CallMode::Inline)
    };
    let CallOutcome::InputRequired { requests, journal } = engine.call(call()).await.unwrap()
    else {
        panic!("an inline call asks");
    };
    assert_eq!(requests[0].key, "login");
    let bad = json!({"action": "accept", "content": {"token": "x"}});
    let retry = call().resume(journal.clone(), obj(json!({"login": bad})));
    let CallOutcome::InputRequired { requests, .. } = engine.call(retry).await.unwrap() else {
        panic!("the question is asked again");
    };
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].key, "login", "the same key");
    let params = requests[0].request.params();
    let message = params["message"].as_str().unwrap();
    assert!(
        message.contains("not accepted")
            && message.contains("`content`")
            && message.ends_with("Sign in to the registry."),
        "{message}"
    );
    assert_eq!(params["url"], PAGE);
    assert_eq!(params["mode"], "url");
    let retry = call().resume(journal, obj(json!({"login": {"action": "cancel"}})));
    let CallOutcome::Finished(outcome) = engine.call(retry).await.unwrap() else {
        panic!("a good answer finishes the call");
    };
    assert!(format!("{outcome:?}").contains("Cancelled"), "{outcome:?}");
}
