//! Deterministic races (`select`, `select_all`): the winner is journaled and
//! every replay takes the same branch; the losers' questions leave
//! `inputRequests`, their timers are dropped, and a late answer is ignored.
//! Each scenario runs a real engine on the testing kit's clock.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use mcp_tasks_runtime::{
    Elicit, State, ToolError, ask_user, checkpoint,
    durable::{self, Either},
    question::AskError,
    store::{StepKind, TaskStatus},
    task_tool,
    testing::ToolTest,
};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, json};

const HOUR: Duration = Duration::from_secs(3600);

#[derive(Debug, Deserialize, JsonSchema, Elicit)]
struct Go {
    /// Go ahead?
    go: bool,
}

fn said(answer: Result<Go, AskError>) -> String {
    match answer {
        Ok(Go { go }) => format!("go={go}"),
        Err(e) => format!("error: {e}"),
    }
}

/// The first of two people to answer decides; then a follow-up question,
/// so that the race is replayed after it was decided.
#[task_tool]
async fn either_person() -> Result<String, ToolError> {
    let won = match durable::select(
        ask_user::<Go>("Alice: go?").key("alice"),
        ask_user::<Go>("Bob: go?").key("bob"),
    )
    .await
    {
        Either::Left(a) => format!("alice {}", said(a)),
        Either::Right(b) => format!("bob {}", said(b)),
    };
    let more = ask_user::<Go>("Anything else?").key("more").await;
    Ok(format!("{won}; then {}", said(more)))
}

#[tokio::test]
async fn the_first_answer_wins_and_the_other_question_is_withdrawn() {
    let test = ToolTest::new(either_person_tool()).start().await;
    let task = test.call(json!({})).await;
    let keys: Vec<String> = task
        .questions()
        .await
        .iter()
        .map(|q| q.key().to_owned())
        .collect();
    assert_eq!(keys, ["alice", "bob"], "both are asked together");

    task.answer("bob", json!({"go": true})).await;
    // Bob's answer ended the race: Alice's question is gone, and the task
    // asks its follow-up.
    assert_eq!(task.question().await.key(), "more");

    // A late answer to Alice is ignored like one to any unknown key.
    let mut late = Map::new();
    late.insert(
        "alice".into(),
        json!({"action": "accept", "content": {"go": false}}),
    );
    test.engine()
        .update(task.id(), late, None)
        .await
        .expect("tasks/update takes the late answer without complaint");
    assert_eq!(task.question().await.key(), "more");

    task.answer("more", json!({"go": false})).await;
    assert_eq!(task.text().await, "bob go=true; then go=false");

    // The race took a journal position of its own, holding the winner's index.
    let record = task.record().await;
    assert_eq!(record.status, TaskStatus::Completed);
    let journal = test
        .engine()
        .store()
        .journal(task.id())
        .await
        .expect("read the journal");
    let race: Vec<_> = journal
        .iter()
        .filter(|e| e.kind == StepKind::Select)
        .map(|e| e.value.clone())
        .collect();
    assert_eq!(race, [json!(1)], "branch 1 (Bob) won: {journal:?}");
    assert!(
        journal.iter().all(|e| e.name != "Go" || e.position != 0),
        "Alice's question (position 0) has no entry: {journal:?}"
    );
}

/// A question raced against a durable timer, then a step after the race.
#[task_tool]
async fn approve_or_wait() -> Result<String, ToolError> {
    let first = match durable::select(
        ask_user::<Go>("Roll out now?").key("now"),
        durable::sleep(HOUR),
    )
    .await
    {
        Either::Left(a) => format!("answered {}", said(a)),
        Either::Right(()) => "an hour passed".to_owned(),
    };
    let second = ask_user::<Go>("Confirm?").key("confirm").await;
    Ok(format!("{first}; confirm {}", said(second)))
}

#[tokio::test]
async fn a_timer_that_fires_first_wins_and_withdraws_the_question() {
    let test = ToolTest::new(approve_or_wait_tool()).start().await;
    let task = test.call(json!({})).await;
    let q = task.question().await;
    assert_eq!(q.key(), "now");
    assert!(
        q.pending().deadline_ms.is_some(),
        "the question leaves when the timer fires: {:?}",
        q.pending()
    );

    task.advance(HOUR).await;
    assert_eq!(
        task.question().await.key(),
        "confirm",
        "`now` was withdrawn"
    );

    // Answering `now` late changes nothing.
    let mut late = Map::new();
    late.insert(
        "now".into(),
        json!({"action": "accept", "content": {"go": true}}),
    );
    test.engine().update(task.id(), late, None).await.unwrap();

    task.answer("confirm", json!({"go": true})).await;
    assert_eq!(task.text().await, "an hour passed; confirm go=true");
}

#[tokio::test]
async fn an_answer_before_the_timer_wins_and_the_timer_is_dropped() {
    let test = ToolTest::new(approve_or_wait_tool()).start().await;
    let task = test.call(json!({})).await;
    task.answer("now", json!({"go": false})).await;
    let q = task.question().await;
    assert_eq!(q.key(), "confirm");
    assert_eq!(
        task.record().await.wake_at_ms,
        None,
        "the loser's timer is not kept"
    );
    // Far past the hour, the replay after `confirm` still takes the answer.
    task.advance(3 * HOUR).await;
    task.answer("confirm", json!({"go": true})).await;
    assert_eq!(
        task.text().await,
        "answered go=false; confirm go=true",
        "the replay took the journaled branch, though the timer is due by now"
    );
}

/// A question with a deadline of its own, raced against a longer timer.
#[task_tool]
async fn own_deadline_first() -> Result<String, ToolError> {
    Ok(
        match durable::select(
            ask_user::<Go>("Quick?").timeout(Duration::from_secs(60)),
            durable::sleep(HOUR),
        )
        .await
        {
            Either::Left(a) => format!("question: {}", said(a)),
            Either::Right(()) => "timer".to_owned(),
        },
    )
}

#[tokio::test]
async fn a_question_whose_own_deadline_comes_first_wins_as_timed_out() {
    let test = ToolTest::new(own_deadline_first_tool()).start().await;
    let task = test.call(json!({})).await;
    task.question().await;
    task.advance(Duration::from_secs(61)).await;
    assert_eq!(
        task.text().await,
        "question: error: the question timed out before it was answered"
    );
}

/// Two checkpoints raced: the one listed first runs and wins, the other
/// waits for it and never starts, and a replay after a question neither
/// runs them again nor changes the winner. (The winner does not depend on
/// how long the work or the store takes: race pieces of work inside one
/// checkpoint.)
/// How many times the raced closures ran.
struct Runs(Arc<AtomicUsize>);

#[task_tool]
async fn fastest_mirror(runs: State<Runs>) -> Result<String, ToolError> {
    let runs: &Runs = &runs;
    let runs = &runs.0;
    let won = durable::select(
        checkpoint("primary", || async {
            runs.fetch_add(1, Ordering::SeqCst);
            // Still working when the other branch is first polled.
            tokio::task::yield_now().await;
            Ok("primary".to_owned())
        }),
        checkpoint("mirror", || async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok("mirror".to_owned())
        }),
    )
    .await;
    let name = match won {
        Either::Left(r) | Either::Right(r) => r?,
    };
    let ok = ask_user::<Go>("Use it?").await;
    Ok(format!("{name} {}", said(ok)))
}

#[tokio::test]
async fn raced_checkpoints_run_the_first_listed_alone_and_never_again() {
    let runs = Arc::new(AtomicUsize::new(0));
    let test = ToolTest::new(fastest_mirror_tool())
        .state(Runs(runs.clone()))
        .start()
        .await;
    let task = test.call(json!({})).await;
    let q = task.question().await;
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the first listed ran; the other waited for it and lost"
    );
    task.answer(q.key(), json!({"go": true})).await;
    assert_eq!(task.text().await, "primary go=true");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the replay after the answer ran neither closure"
    );
}

/// The first of several reviewers to answer decides.
#[task_tool]
async fn reviewers(names: Vec<String>) -> Result<String, ToolError> {
    let (i, answer) = durable::select_all(
        names
            .iter()
            .map(|n| ask_user::<Go>(format!("{n}?")).key(n.as_str())),
    )
    .await;
    Ok(format!("{} {}", names[i], said(answer)))
}

#[tokio::test]
async fn select_all_takes_the_first_of_many_answers() {
    let test = ToolTest::new(reviewers_tool()).start().await;
    let task = test.call(json!({"names": ["ann", "ben", "cy"]})).await;
    assert_eq!(task.questions().await.len(), 3);
    // Two answers in one update: the first in key order (`ben`) ends the
    // race; `cy`'s is ignored.
    let mut both = Map::new();
    both.insert("ben".into(), json!({"action": "decline"}));
    both.insert(
        "cy".into(),
        json!({"action": "accept", "content": {"go": true}}),
    );
    test.engine().update(task.id(), both, None).await.unwrap();
    assert_eq!(
        task.text().await,
        "ben error: the user declined the request"
    );
}

/// A branch that reaches a second journaled step after it first waited.
#[task_tool]
async fn two_steps_in_a_branch() -> Result<String, ToolError> {
    let branch = async {
        let first = ask_user::<Go>("First?").key("first").await;
        let second = ask_user::<Go>("Second?").key("second").await;
        format!("{} {}", said(first), said(second))
    };
    Ok(match durable::select(branch, durable::sleep(HOUR)).await {
        Either::Left(s) => s,
        Either::Right(()) => "timer".into(),
    })
}

#[tokio::test]
async fn a_branch_that_takes_a_second_step_fails_with_the_fix() {
    let test = ToolTest::new(two_steps_in_a_branch_tool()).start().await;
    let task = test.call(json!({})).await;
    task.answer("first", json!({"go": true})).await;
    let record = task.finish().await;
    assert_eq!(record.status, TaskStatus::Failed);
    let error = record.error.expect("the failure says why").message;
    assert!(
        error.contains("was reached by a branch of `select` as a second step of the branch")
            && error.contains("after the `select`"),
        "{error}"
    );
}

#[tokio::test]
async fn outside_a_task_select_returns_the_first_to_finish() {
    let out = durable::select(
        async {
            tokio::time::sleep(Duration::from_millis(50)).await;
            1
        },
        async { 2 },
    )
    .await;
    assert!(matches!(out, Either::Right(2)));
    let (i, v) = durable::select_all(vec![
        Box::pin(std::future::pending::<u8>())
            as std::pin::Pin<Box<dyn Future<Output = u8> + Send>>,
        Box::pin(async { 7 }),
    ])
    .await;
    assert_eq!((i, v), (1, 7));
}

/// How many times the closure of `question_or_step`'s checkpoint started.
static BUSY_STARTS: AtomicUsize = AtomicUsize::new(0);

/// A question raced against a checkpoint with `tokio::select!` (the race
/// `select` exists for), its branches polled in the order `order` names:
/// `step` first, `question` first, or `random` (tokio's default). The
/// checkpoint is still at work when first polled, as real work is. The
/// macro refuses `tokio::select!` in a body; this test opts out to show what
/// the runtime does with it anyway.
#[task_tool(allow_nondeterminism)]
async fn question_or_step(order: String) -> Result<String, ToolError> {
    let question = ask_user::<Go>("Go?").key("go");
    let step = checkpoint("busy", || async {
        BUSY_STARTS.fetch_add(1, Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(1_u32)
    });
    let won = match order.as_str() {
        "step" => tokio::select! {
            biased;
            n = step => format!("step {}", n?),
            go = question => format!("question {}", said(go)),
        },
        "question" => tokio::select! {
            biased;
            go = question => format!("question {}", said(go)),
            n = step => format!("step {}", n?),
        },
        _ => tokio::select! {
            n = step => format!("step {}", n?),
            go = question => format!("question {}", said(go)),
        },
    };
    // The fn goes on after the race.
    checkpoint("after", || async { Ok(won) }).await
}

#[tokio::test]
async fn a_question_raced_by_tokio_select_fails_the_task_in_every_poll_order() {
    let test = ToolTest::new(question_or_step_tool()).start().await;
    for order in ["step", "question", "random"] {
        for run in 0..100 {
            let starts = BUSY_STARTS.load(Ordering::SeqCst);
            let task = test.call(json!({"order": order})).await;
            // It fails without asking; a run that parked instead is
            // answered, and must fail then without starting the step again.
            let mut record = task.record().await;
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while !record.status.is_terminal() {
                assert!(
                    record.status != TaskStatus::InputRequired,
                    "{order} first, run {run}: the task parked on the question instead of failing"
                );
                assert!(std::time::Instant::now() < deadline, "{record:?}");
                tokio::time::sleep(Duration::from_millis(1)).await;
                record = task.record().await;
            }
            assert_eq!(
                record.status,
                TaskStatus::Failed,
                "{order} first, run {run}: {record:?}"
            );
            let error = record.error.expect("the failure says why").message;
            assert!(
                error.contains("was dropped before it finished")
                    && error.contains("`mcp_tasks_runtime::durable::select` or `select_all`"),
                "{order} first, run {run}: {error}"
            );
            assert_eq!(
                BUSY_STARTS.load(Ordering::SeqCst) - starts,
                1,
                "{order} first, run {run}: the checkpoint's closure started once"
            );
        }
    }
}

/// The idempotency keys of two steps, and what `step_key` says outside one.
#[task_tool]
async fn keyed() -> Result<Vec<String>, ToolError> {
    let first = checkpoint("first", || async {
        Ok(mcp_tasks_runtime::durable::step_key().map(|k| k.to_string()))
    })
    .await?;
    // Parks, so that the second step runs in a replay of the first.
    let _ = ask_user::<Go>("Go on?").key("on").await;
    let second = checkpoint("second", || async {
        let key = mcp_tasks_runtime::durable::step_key().expect("inside a step");
        Ok(format!("{}:{}", key.task_id(), key.position()))
    })
    .await?;
    let outside = mcp_tasks_runtime::durable::step_key().map(|k| k.to_string());
    Ok(vec![
        first.unwrap_or_default(),
        second,
        outside.unwrap_or_else(|| "none".into()),
    ])
}

#[tokio::test]
async fn each_step_has_a_key_made_of_its_task_and_position() {
    let test = ToolTest::new(keyed_tool()).start().await;
    let task = test.call(json!({})).await;
    task.answer("on", json!({"go": true})).await;
    let keys: Vec<String> = serde_json::from_str(&task.text().await).expect("a list");
    let id = task.id();
    assert_eq!(keys, [format!("{id}:0"), format!("{id}:2"), "none".into()]);
}
