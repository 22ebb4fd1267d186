//! Question keys: never given twice in a task's life (R76); questions
//! asked only of clients that declared what they need (R77).

use std::time::Duration;

use mcp_tasks_runtime::{
    AskError, Elicit, ToolError, ask_user, sample, store::InputCapabilities, task_tool,
    testing::ToolTest,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

const LIMIT: Duration = Duration::from_secs(20);

// ---------------------------------------------------------------------------
// R76: keys are never given twice.

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
            assert!(start.elapsed() < LIMIT);
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
// R77: no question for a capability the client did not declare.

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
    // URL mode alone is stored as no form elicitation.
    assert_eq!(
        caps(json!({"elicitation": {"url": {}}})),
        InputCapabilities::NONE
    );
}
