//! Behaviours: creating and reading tasks, and their journals.

use super::support::*;

// ---------------------------------------------------------------------------
// Create and get.

pub(super) async fn create_get_round_trip(store: Arc<dyn Store>) {
    let full = full_task("full");
    create(&store, &full).await;
    assert_eq!(store.get("full").await.unwrap(), Some(full));

    let plain = task("plain");
    create(&store, &plain).await;
    assert_eq!(store.get("plain").await.unwrap(), Some(plain));

    for status in ALL_STATUSES {
        let t = with(status.as_str(), |t| {
            t.status = status;
            t.created_at_ms = -5; // before 1970 is still a time
            t.updated_at_ms = i64::MAX;
            t.ttl_ms = Some(0);
        });
        create(&store, &t).await;
        assert_eq!(get(&store, status.as_str()).await, t);
    }

    assert_eq!(store.get("missing").await.unwrap(), None);
    assert_eq!(store.get("").await.unwrap(), None);
}

pub(super) async fn create_refuses_an_existing_id(store: Arc<dyn Store>) {
    let first = task("dup");
    create(&store, &first).await;
    let e = entry(0, StepKind::Checkpoint, "a", json!(1));
    store.append("dup", e.clone(), 0).await.unwrap();

    let second = with("dup", |t| t.tool = "other".into());
    let message = store_error(store.create(second).await);
    assert!(message.contains("dup"), "{message}");

    assert_eq!(get(&store, "dup").await, first);
    assert_eq!(store.journal("dup").await.unwrap(), vec![e]);
}

pub(super) async fn concurrent_creates_fail_only_the_duplicate(store: Arc<dyn Store>) {
    create(&store, &task("taken")).await;
    let mut calls = Vec::new();
    for i in 0..100 {
        let id = if i == 50 {
            "taken".to_owned()
        } else {
            format!("new-{i}")
        };
        let store = store.clone();
        calls.push(tokio::spawn(async move {
            (
                id.clone(),
                store.create(with(&id, |t| t.tool = "mine".into())).await,
            )
        }));
    }
    let mut failed = Vec::new();
    for call in calls {
        let (id, r) = call.await.unwrap();
        if r.is_err() {
            failed.push(id);
        }
    }
    assert_eq!(failed, ["taken"]);
    assert_eq!(get(&store, "taken").await.tool, "deploy");
    for i in (0..100).filter(|i| *i != 50) {
        assert_eq!(get(&store, &format!("new-{i}")).await.tool, "mine");
    }
}

// ---------------------------------------------------------------------------
// Journal.

pub(super) async fn journal_is_ordered_and_keeps_the_first_entry(store: Arc<dyn Store>) {
    create(&store, &task("a")).await;
    create(&store, &task("b")).await;
    let e2 = entry(2, StepKind::Sleep, "sleep", json!(T0 + 10));
    let e0 = entry(0, StepKind::Checkpoint, "fetch", json!({"rows": [1, 2, 3]}));
    let e1 = entry(1, StepKind::Ask, "Approval", json!({"action": "accept"}));
    for e in [&e2, &e0, &e1] {
        store.append("a", e.clone(), 0).await.unwrap();
    }
    assert_eq!(
        store.journal("a").await.unwrap(),
        vec![e0.clone(), e1.clone(), e2.clone()]
    );

    // A replayed step records again at the same position: the first stays.
    store
        .append(
            "a",
            entry(1, StepKind::Checkpoint, "other", json!("second")),
            0,
        )
        .await
        .unwrap();
    assert_eq!(
        store.journal("a").await.unwrap(),
        vec![e0.clone(), e1.clone(), e2.clone()]
    );

    // Every kind, every JSON shape and the largest position round-trip.
    let kinds = [
        StepKind::Checkpoint,
        StepKind::Ask,
        StepKind::Sample,
        StepKind::Roots,
        StepKind::Now,
        StepKind::Uuid,
        StepKind::Sleep,
    ];
    let values = [
        json!(null),
        json!(false),
        json!(-1.5),
        json!("ü ✓"),
        json!([]),
        json!({"k": [null]}),
        json!(u64::MAX),
    ];
    let mut expected = vec![e0, e1, e2];
    for (i, (kind, value)) in kinds.into_iter().zip(values).enumerate() {
        let e = entry(3 + i as u32, kind, &format!("step {i}"), value);
        store.append("a", e.clone(), 0).await.unwrap();
        expected.push(e);
    }
    let last = entry(u32::MAX, StepKind::Uuid, "id", json!("0f0e"));
    store.append("a", last.clone(), 0).await.unwrap();
    expected.push(last);
    assert_eq!(store.journal("a").await.unwrap(), expected);

    // Journals do not mix.
    let b0 = entry(0, StepKind::Now, "now", json!(T0));
    store.append("b", b0.clone(), 0).await.unwrap();
    assert_eq!(store.journal("b").await.unwrap(), vec![b0]);
    assert_eq!(store.journal("a").await.unwrap(), expected);
}

pub(super) async fn journal_of_a_missing_task(store: Arc<dyn Store>) {
    assert_eq!(store.journal("ghost").await.unwrap(), vec![]);
    // An append for a task that is gone is dropped, not an error.
    store
        .append("ghost", entry(0, StepKind::Checkpoint, "x", json!(1)), 0)
        .await
        .unwrap();
    assert_eq!(store.journal("ghost").await.unwrap(), vec![]);
    create(&store, &task("ghost")).await;
    assert_eq!(store.journal("ghost").await.unwrap(), vec![]);
}
