//! Behaviours: questions with deadlines, timed out by
//! [`Store::time_out`] and found by [`Store::overdue`].

use super::support::*;

/// `pending(key, position)` with a deadline.
fn timed(key: &str, position: u32, deadline_ms: Option<i64>) -> PendingInput {
    PendingInput {
        deadline_ms,
        ..pending(key, position)
    }
}

/// The journal entry of a question at `position` that timed out.
fn marker(position: u32) -> JournalEntry {
    entry(
        position,
        StepKind::Ask,
        &format!("Approval{position}"),
        json!(mcp_tasks_runtime::store::TIMED_OUT),
    )
}

/// Creates working task `id` and parks it on `questions` at `T0 + 1`.
async fn park(store: &Arc<dyn Store>, id: &str, questions: Vec<PendingInput>) -> TaskRecord {
    create(store, &task(id)).await;
    store
        .transition(id, Transition::Park(questions), T0 + 1, None)
        .await
        .unwrap()
        .expect("a working task parks")
}

async fn time_out(store: &Arc<dyn Store>, id: &str, now: i64) -> (usize, bool, TaskRecord) {
    let a = store
        .time_out(id, now)
        .await
        .unwrap()
        .expect("the task exists");
    (a.accepted, a.runnable, a.record)
}

pub(super) async fn park_keeps_deadlines_and_wakes_at_the_earliest(store: Arc<dyn Store>) {
    let questions = vec![
        timed("k1", 10, Some(T0 + 900)),
        timed("k2", 11, None),
        timed("k3", 12, Some(T0 + 500)),
    ];
    let parked = park(&store, "t", questions.clone()).await;
    assert_eq!(parked.status, TaskStatus::InputRequired);
    assert_eq!(parked.pending, questions, "the deadlines are kept");
    assert_eq!(parked.wake_at_ms, Some(T0 + 500), "the earliest deadline");
    assert_eq!(get(&store, "t").await, parked);

    // Questions without deadlines: no wake time.
    let parked = park(&store, "u", vec![timed("k", 10, None)]).await;
    assert_eq!(parked.wake_at_ms, None);
    assert_eq!(get(&store, "u").await, parked);
}

pub(super) async fn time_out_journals_the_marker_and_frees_the_key(store: Arc<dyn Store>) {
    let parked = park(&store, "t", vec![timed("k", 10, Some(T0 + 500))]).await;

    // Before the deadline: nothing changes.
    let (accepted, runnable, record) = time_out(&store, "t", T0 + 499).await;
    assert_eq!((accepted, runnable), (0, false));
    assert_eq!(record, parked);
    assert_eq!(get(&store, "t").await, parked);
    assert_eq!(store.journal("t").await.unwrap(), vec![]);

    // At the deadline: the marker at the question's position, the key gone,
    // the task working and runnable again.
    let (accepted, runnable, record) = time_out(&store, "t", T0 + 500).await;
    assert_eq!((accepted, runnable), (1, true));
    let mut expected = parked.clone();
    expected.status = TaskStatus::Working;
    expected.pending = vec![];
    expected.wake_at_ms = None;
    expected.updated_at_ms = T0 + 500;
    expected.version = parked.version + 1;
    assert_eq!(record, expected);
    assert_eq!(get(&store, "t").await, expected);
    assert!(expected.runnable(T0 + 500) && expected.claimable(T0 + 500));
    assert_eq!(store.journal("t").await.unwrap(), vec![marker(10)]);

    // Done once: a second call changes nothing.
    let (accepted, runnable, record) = time_out(&store, "t", T0 + 600).await;
    assert_eq!((accepted, runnable), (0, false));
    assert_eq!(record, expected);
    assert_eq!(store.journal("t").await.unwrap(), vec![marker(10)]);

    assert_eq!(store.time_out("ghost", T0 + 600).await.unwrap(), None);
}

pub(super) async fn late_answer_after_a_time_out_is_ignored(store: Arc<dyn Store>) {
    park(&store, "t", vec![timed("k", 10, Some(T0 + 500))]).await;
    time_out(&store, "t", T0 + 500).await;
    let timed_out = get(&store, "t").await;
    let a = answered(&store, "t", json!({"k": accept(true)}), T0 + 501).await;
    assert_eq!((a.accepted, a.runnable), (0, false));
    assert_eq!(get(&store, "t").await, timed_out);
    assert_eq!(store.journal("t").await.unwrap(), vec![marker(10)]);
}

pub(super) async fn answer_before_the_deadline_wins_and_the_timer_then_does_nothing(
    store: Arc<dyn Store>,
) {
    park(&store, "t", vec![timed("k", 10, Some(T0 + 500))]).await;
    let a = answered(&store, "t", json!({"k": accept(true)}), T0 + 100).await;
    assert_eq!((a.accepted, a.runnable), (1, true));
    assert_eq!(a.record.status, TaskStatus::Working);
    assert_eq!(a.record.wake_at_ms, None, "no deadline keeps it asleep");
    assert!(a.record.claimable(T0 + 100));
    let answered = get(&store, "t").await;
    assert_eq!(answered, a.record);

    let (accepted, runnable, record) = time_out(&store, "t", T0 + 500).await;
    assert_eq!((accepted, runnable), (0, false));
    assert_eq!(record, answered);
    assert_eq!(get(&store, "t").await, answered);
    assert_eq!(
        store.journal("t").await.unwrap(),
        vec![entry(10, StepKind::Ask, "Approval10", accept(true))]
    );
    assert_eq!(
        store.overdue(T0 + 500, 10).await.unwrap(),
        Vec::<String>::new()
    );
}

pub(super) async fn questions_asked_together_time_out_one_by_one(store: Arc<dyn Store>) {
    let questions = vec![
        timed("k1", 10, Some(T0 + 100)),
        timed("k2", 11, None),
        timed("k3", 12, Some(T0 + 200)),
    ];
    park(&store, "t", questions).await;

    // k1 times out; the others stay outstanding, and the task waits for
    // the next deadline.
    let (accepted, runnable, record) = time_out(&store, "t", T0 + 150).await;
    assert_eq!((accepted, runnable), (1, false));
    assert_eq!(record.status, TaskStatus::InputRequired);
    let keys: Vec<&str> = record.pending.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(keys, ["k2", "k3"]);
    assert_eq!(record.wake_at_ms, Some(T0 + 200));
    assert_eq!(get(&store, "t").await, record);

    // k2 is answered; k3 still waits.
    let a = answered(&store, "t", json!({"k2": accept(2)}), T0 + 160).await;
    assert_eq!((a.accepted, a.runnable), (1, false));
    assert_eq!(a.record.wake_at_ms, Some(T0 + 200));

    // k3 times out: nothing is left, the task runs again.
    let (accepted, runnable, record) = time_out(&store, "t", T0 + 250).await;
    assert_eq!((accepted, runnable), (1, true));
    assert_eq!(record.status, TaskStatus::Working);
    assert_eq!((record.pending.len(), record.wake_at_ms), (0, None));
    assert_eq!(
        store.journal("t").await.unwrap(),
        vec![
            marker(10),
            entry(11, StepKind::Ask, "Approval11", accept(2)),
            marker(12)
        ]
    );

    // Two deadlines passed at once: both time out together.
    park(
        &store,
        "u",
        vec![
            timed("a", 10, Some(T0 + 100)),
            timed("b", 11, Some(T0 + 200)),
        ],
    )
    .await;
    let (accepted, runnable, _) = time_out(&store, "u", T0 + 300).await;
    assert_eq!((accepted, runnable), (2, true));
    assert_eq!(
        store.journal("u").await.unwrap(),
        vec![marker(10), marker(11)]
    );
}

pub(super) async fn overdue_lists_parked_tasks_past_their_deadline(store: Arc<dyn Store>) {
    park(&store, "late", vec![timed("k", 10, Some(T0 + 300))]).await;
    park(&store, "later", vec![timed("k", 10, Some(T0 + 400))]).await;
    park(&store, "early", vec![timed("k", 10, Some(T0 + 200))]).await;
    park(&store, "not-yet", vec![timed("k", 10, Some(T0 + 9_000))]).await;
    park(&store, "untimed", vec![timed("k", 10, None)]).await;
    // A sleeping task is the claim scan's, not this one's.
    create(&store, &task("asleep")).await;
    store
        .transition("asleep", Transition::Sleep { wake_at_ms: T0 }, T0, None)
        .await
        .unwrap();
    park(&store, "cancelled", vec![timed("k", 10, Some(T0 + 100))]).await;
    store
        .transition("cancelled", Transition::RequestCancel, T0 + 2, None)
        .await
        .unwrap();

    assert_eq!(
        store.overdue(T0 + 1_000, 10).await.unwrap(),
        ["early", "late", "later"],
        "the earliest deadline first"
    );
    assert_eq!(
        store.overdue(T0 + 1_000, 2).await.unwrap(),
        ["early", "late"]
    );
    assert_eq!(
        store.overdue(T0 + 300, 10).await.unwrap(),
        ["early", "late"]
    );
    assert_eq!(
        store.overdue(T0 + 199, 10).await.unwrap(),
        Vec::<String>::new()
    );

    time_out(&store, "early", T0 + 1_000).await;
    assert_eq!(
        store.overdue(T0 + 1_000, 10).await.unwrap(),
        ["late", "later"],
        "timed out: no longer overdue"
    );
}

pub(super) async fn a_client_cannot_forge_a_time_out(store: Arc<dyn Store>) {
    park(&store, "t", vec![timed("k", 10, Some(T0 + 500))]).await;
    let parked = get(&store, "t").await;
    // The marker is not a JSON object: as an answer, it is ignored.
    let a = answered(
        &store,
        "t",
        json!({"k": mcp_tasks_runtime::store::TIMED_OUT}),
        T0 + 1,
    )
    .await;
    assert_eq!((a.accepted, a.runnable), (0, false));
    assert_eq!(get(&store, "t").await, parked);
    assert_eq!(store.journal("t").await.unwrap(), vec![]);
}

pub(super) async fn cancel_ends_a_task_parked_on_a_timed_question(store: Arc<dyn Store>) {
    park(&store, "t", vec![timed("k", 10, Some(T0 + 500))]).await;
    let cancelled = changed(&store, "t", Transition::RequestCancel, T0 + 2).await;
    assert_eq!(cancelled.status, TaskStatus::Cancelled);
    assert_eq!((cancelled.pending.len(), cancelled.wake_at_ms), (0, None));
    let (accepted, runnable, record) = time_out(&store, "t", T0 + 500).await;
    assert_eq!((accepted, runnable), (0, false));
    assert_eq!(record, cancelled);
    assert_eq!(store.journal("t").await.unwrap(), vec![]);
}

pub(super) async fn racing_answers_and_time_outs_journal_exactly_one(store: Arc<dyn Store>) {
    for round in 0..20 {
        let id = format!("t{round}");
        park(&store, &id, vec![timed("k", 10, Some(T0 + 500))]).await;
        let answering = {
            let (store, id) = (store.clone(), id.clone());
            tokio::spawn(async move {
                answered(&store, &id, json!({"k": accept(round)}), T0 + 500).await
            })
        };
        let timing_out = {
            let (store, id) = (store.clone(), id.clone());
            tokio::spawn(async move { store.time_out(&id, T0 + 500).await.unwrap().unwrap() })
        };
        let (answered, timed_out) = (answering.await.unwrap(), timing_out.await.unwrap());
        assert_eq!(
            answered.accepted + timed_out.accepted,
            1,
            "round {round}: exactly one wins"
        );
        let winner = if answered.accepted == 1 {
            entry(10, StepKind::Ask, "Approval10", accept(round))
        } else {
            marker(10)
        };
        assert_eq!(store.journal(&id).await.unwrap(), vec![winner]);
        let t = get(&store, &id).await;
        assert_eq!(
            (t.status, t.pending.len(), t.version),
            (TaskStatus::Working, 0, 2)
        );
    }
}
