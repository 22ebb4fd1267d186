//! Behaviours: every transition, and the version counter that counts them.

use super::support::*;

// ---------------------------------------------------------------------------
// Transitions.

pub(super) async fn status_message(store: Arc<dyn Store>) {
    // Working and parked tasks take messages; the same message again
    // changes nothing.
    for (t, message) in [
        (task("t"), "halfway"),
        (parked("p", &["k"]), "still waiting"),
    ] {
        create(&store, &t).await;
        let say = || Transition::StatusMessage(message.into());
        expect_change(&store, &t.id, say(), T0 + 10, |e| {
            e.status_message = Some(message.into())
        })
        .await;
        expect_no_change(&store, &t.id, say(), T0 + 20).await;
    }
}

pub(super) async fn park_and_sleep(store: Arc<dyn Store>) {
    let t = task("t");
    create(&store, &t).await;

    expect_change(
        &store,
        "t",
        Transition::Sleep {
            wake_at_ms: T0 + 5_000,
        },
        T0 + 1,
        |e| e.wake_at_ms = Some(T0 + 5_000),
    )
    .await;

    // Parking a sleeping task clears its timer.
    let requests = vec![pending("k1", 4), pending("k2", 5)];
    expect_change(
        &store,
        "t",
        Transition::Park(requests.clone()),
        T0 + 2,
        |e| {
            e.status = TaskStatus::InputRequired;
            e.pending = requests;
            e.wake_at_ms = None;
        },
    )
    .await;
}

pub(super) async fn request_cancel_on_a_running_task(store: Arc<dyn Store>) {
    let t = task("t");
    create(&store, &t).await;
    expect_change(&store, "t", Transition::RequestCancel, T0 + 1, |e| {
        e.cancel_requested = true
    })
    .await;
    assert_eq!(get(&store, "t").await.status, TaskStatus::Working);
    // A second request changes nothing.
    expect_no_change(&store, "t", Transition::RequestCancel, T0 + 2).await;
}

pub(super) async fn request_cancel_on_parked_and_sleeping_tasks(store: Arc<dyn Store>) {
    let p = with("parked", |t| {
        t.status = TaskStatus::InputRequired;
        t.pending = vec![pending("k", 1)];
        t.status_message = Some("Waiting".into());
    });
    create(&store, &p).await;
    expect_change(&store, "parked", Transition::RequestCancel, T0 + 1, |e| {
        e.status = TaskStatus::Cancelled;
        e.pending = vec![];
        e.status_message = Some(CANCELLED_MESSAGE.into());
    })
    .await;

    let s = with("sleeping", |t| t.wake_at_ms = Some(T0 + 1_000));
    create(&store, &s).await;
    expect_change(&store, "sleeping", Transition::RequestCancel, T0 + 1, |e| {
        e.status = TaskStatus::Cancelled;
        e.wake_at_ms = None;
        e.status_message = Some(CANCELLED_MESSAGE.into());
    })
    .await;

    for status in TERMINAL {
        create(&store, &with(status.as_str(), |t| t.status = status)).await;
        expect_no_change(&store, status.as_str(), Transition::RequestCancel, T0 + 1).await;
    }

    // A timer that has fired: the task may be running again, so it is only
    // asked to stop.
    let woke = with("woke", |t| t.wake_at_ms = Some(T0));
    create(&store, &woke).await;
    expect_change(&store, "woke", Transition::RequestCancel, T0 + 1, |e| {
        e.cancel_requested = true
    })
    .await;
}

pub(super) async fn park_or_sleep_after_a_cancel_request_cancels(store: Arc<dyn Store>) {
    for (id, change) in [
        ("park", Transition::Park(vec![pending("k", 2)])),
        ("sleep", Transition::Sleep { wake_at_ms: T0 + 9 }),
    ] {
        let t = with(id, |t| t.cancel_requested = true);
        create(&store, &t).await;
        expect_change(&store, id, change, T0 + 4, |e| {
            e.status = TaskStatus::Cancelled;
            e.status_message = Some(CANCELLED_MESSAGE.into());
        })
        .await;
    }
}

pub(super) async fn finishing_transitions(store: Arc<dyn Store>) {
    // Each finish from a running, a parked and a sleeping task.
    let starts = [
        task("run"),
        parked("park", &["k"]),
        with("sleep", |t| t.wake_at_ms = Some(T0 + 50)),
    ];
    let result = obj(json!({"content": [{"type": "text", "text": "done"}], "isError": false}));
    // A failure's message becomes the status message.
    let error = RpcError::internal("it broke").with_data(json!({"step": 2}));
    let ends = [
        (
            "complete",
            Transition::Complete(result.clone()),
            COMPLETED_MESSAGE,
        ),
        ("fail", Transition::Fail(error.clone()), "it broke"),
        ("cancel", Transition::Cancel, CANCELLED_MESSAGE),
    ];
    for start in &starts {
        for (end, change, message) in &ends {
            let id = format!("{}-{end}", start.id);
            let t = TaskRecord {
                id: id.clone(),
                status_message: Some("working on it".into()),
                ..start.clone()
            };
            create(&store, &t).await;
            expect_change(&store, &id, change.clone(), T0 + 7, |e| {
                e.status = match change {
                    Transition::Complete(_) => TaskStatus::Completed,
                    Transition::Fail(_) => TaskStatus::Failed,
                    _ => TaskStatus::Cancelled,
                };
                e.status_message = Some((*message).into());
                e.result = matches!(change, Transition::Complete(_)).then(|| result.clone());
                e.error = matches!(change, Transition::Fail(_)).then(|| error.clone());
                e.pending = vec![];
                e.wake_at_ms = None;
            })
            .await;
        }
    }
}

pub(super) async fn terminal_states_never_change(store: Arc<dyn Store>) {
    for status in TERMINAL {
        let t = with(status.as_str(), |t| {
            t.status = status;
            t.status_message = Some("final".into());
            t.result = Some(obj(json!({"content": []})));
        });
        create(&store, &t).await;
        for change in every_transition() {
            expect_no_change(&store, status.as_str(), change, T0 + 100).await;
        }
        assert_eq!(get(&store, status.as_str()).await, t);
    }
    // A task that reached a terminal state through the store stays there.
    create(&store, &task("done")).await;
    changed(
        &store,
        "done",
        Transition::Complete(obj(json!({"content": []}))),
        T0 + 1,
    )
    .await;
    for change in every_transition() {
        expect_no_change(&store, "done", change, T0 + 100).await;
    }
}

pub(super) async fn updated_at_never_goes_back(store: Arc<dyn Store>) {
    let t = with("t", |t| t.updated_at_ms = T0 + 1_000);
    create(&store, &t).await;
    expect_change(
        &store,
        "t",
        Transition::StatusMessage("clock skew".into()),
        T0,
        |e| {
            e.status_message = Some("clock skew".into());
            e.updated_at_ms = T0 + 1_000;
        },
    )
    .await;
}

pub(super) async fn transition_of_a_missing_task(store: Arc<dyn Store>) {
    for change in every_transition() {
        assert_eq!(
            store.transition("ghost", change, T0, None).await.unwrap(),
            None
        );
    }
    assert_eq!(store.get("ghost").await.unwrap(), None);
}

// ---------------------------------------------------------------------------
// The version counter.

/// A new task is at version 0, and a store keeps it there until a change.
pub(super) async fn version_starts_at_zero(store: Arc<dyn Store>) {
    let t = TaskRecord::new("fresh", "deploy", T0);
    assert_eq!(t.version, 0);
    create(&store, &t).await;
    assert_eq!(get(&store, "fresh").await.version, 0);
    let listed = store.unfinished().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].version, 0);
}

/// The store keeps the version it is given and the one a change makes.
pub(super) async fn version_survives_a_round_trip(store: Arc<dyn Store>) {
    for version in [1, 41, i64::MAX as u64] {
        let id = format!("v{version}");
        create(&store, &with(&id, |t| t.version = version)).await;
        assert_eq!(get(&store, &id).await.version, version);
    }
    create(&store, &with("moved", |t| t.version = 7)).await;
    let after = changed(
        &store,
        "moved",
        Transition::StatusMessage("on".into()),
        T0 + 1,
    )
    .await;
    assert_eq!(after.version, 8);
    assert_eq!(get(&store, "moved").await.version, 8);
    let mut waiting = parked("answered", &["k"]);
    waiting.version = 3;
    create(&store, &waiting).await;
    let a = answered(&store, "answered", json!({"k": accept(1)}), T0 + 1).await;
    assert_eq!(a.record.version, 4);
    assert_eq!(get(&store, "answered").await.version, 4);
}

/// `versions` reads the stored version of each task asked for that exists
/// (duplicates and missing ids are no trouble), and moves with each change.
pub(super) async fn versions_reads_each_existing_tasks_version(store: Arc<dyn Store>) {
    create(&store, &task("a")).await;
    create(&store, &task("b")).await;
    changed(&store, "b", Transition::StatusMessage("moved".into()), T0).await;
    let ids = ["a", "b", "missing", "b", "it's \"quoted\""].map(str::to_owned);
    let mut read = store.versions(&ids).await.unwrap();
    read.sort();
    read.dedup();
    assert_eq!(read, vec![("a".to_owned(), 0), ("b".to_owned(), 1)]);
    assert!(store.versions(&[]).await.unwrap().is_empty());
    changed(&store, "a", Transition::Cancel, T0).await;
    assert_eq!(
        store.versions(&["a".to_owned()]).await.unwrap(),
        vec![("a".to_owned(), 1)]
    );
}

/// `unfinished_among` names the tasks asked for that exist and are
/// `working` or `input_required` (duplicates and missing ids are no
/// trouble), and leaves out those that ended.
pub(super) async fn unfinished_among_names_the_open_tasks_asked_for(store: Arc<dyn Store>) {
    create(&store, &task("working")).await;
    create(&store, &parked("parked", &["k"])).await;
    create(&store, &task("ended")).await;
    create(&store, &task("not asked")).await;
    changed(&store, "ended", Transition::Cancel, T0).await;
    let ids = ["working", "parked", "ended", "missing", "parked"].map(str::to_owned);
    let mut open = store.unfinished_among(&ids).await.unwrap();
    open.sort();
    open.dedup();
    assert_eq!(open, ["parked", "working"]);
    assert!(store.unfinished_among(&[]).await.unwrap().is_empty());
}

/// Each change is one version; an answer that accepts several responses at
/// once is one change.
pub(super) async fn version_counts_each_change_once(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    let changes = [
        Transition::StatusMessage("1".into()),
        Transition::Sleep { wake_at_ms: T0 + 1 },
        Transition::StatusMessage("2".into()),
        Transition::Park(vec![pending("a", 1), pending("b", 2), pending("c", 3)]),
    ];
    for (i, change) in changes.into_iter().enumerate() {
        let after = changed(&store, "t", change, T0).await;
        assert_eq!(after.version, i as u64 + 1);
    }
    let a = answered(&store, "t", json!({"a": accept(1), "b": accept(2)}), T0).await;
    assert_eq!((a.accepted, a.record.version), (2, 5));
    let a = answered(&store, "t", json!({"c": accept(3)}), T0).await;
    assert_eq!((a.accepted, a.runnable, a.record.version), (1, true, 6));
    let done = changed(&store, "t", Transition::Cancel, T0).await;
    assert_eq!(done.version, 7);
    assert_eq!(get(&store, "t").await.version, 7);
}

/// A change that is refused, and an answer that accepts nothing, leave the
/// version where it was.
pub(super) async fn refused_changes_leave_the_version(store: Arc<dyn Store>) {
    create(&store, &with("t", |t| t.version = 5)).await;
    changed(&store, "t", Transition::StatusMessage("same".into()), T0).await;
    changed(&store, "t", Transition::RequestCancel, T0).await;
    // The same message again, a second cancel request.
    for change in [
        Transition::StatusMessage("same".into()),
        Transition::RequestCancel,
    ] {
        assert_eq!(store.transition("t", change, T0, None).await.unwrap(), None);
    }
    assert_eq!(get(&store, "t").await.version, 7);

    // Answers to a task that is not waiting, or to keys it is not waiting on.
    let a = answered(&store, "t", json!({"k": accept(1)}), T0).await;
    assert_eq!((a.accepted, a.record.version), (0, 7));
    let mut waiting = parked("p", &["k"]);
    waiting.version = 2;
    create(&store, &waiting).await;
    let a = answered(
        &store,
        "p",
        json!({"other": accept(1), "k": "not an object"}),
        T0,
    )
    .await;
    assert_eq!((a.accepted, a.record.version), (0, 2));
    assert_eq!(get(&store, "p").await.version, 2);

    // A terminal task refuses everything.
    changed(&store, "t", Transition::Cancel, T0).await;
    for change in every_transition() {
        assert_eq!(store.transition("t", change, T0, None).await.unwrap(), None);
    }
    assert_eq!(get(&store, "t").await.version, 8);
}
