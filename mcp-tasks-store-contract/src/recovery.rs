//! Behaviours: what is read back after a restart, expiry, listing and sessions.

use super::support::*;

// ---------------------------------------------------------------------------
// Recovery and expiry.

pub(super) async fn unfinished_lists_working_and_input_required(store: Arc<dyn Store>) {
    assert_eq!(store.unfinished().await.unwrap(), vec![]);
    let tasks = vec![
        task("running"),
        with("sleeping", |t| t.wake_at_ms = Some(T0 + 10)),
        with("cancelling", |t| t.cancel_requested = true),
        parked("parked", &["k"]),
        with("completed", |t| t.status = TaskStatus::Completed),
        with("failed", |t| t.status = TaskStatus::Failed),
        with("cancelled", |t| t.status = TaskStatus::Cancelled),
    ];
    for t in &tasks {
        create(&store, t).await;
    }
    let mut got = store.unfinished().await.unwrap();
    got.sort_by(|a, b| a.id.cmp(&b.id));
    let mut expected: Vec<TaskRecord> = tasks
        .into_iter()
        .filter(|t| !t.status.is_terminal())
        .collect();
    expected.sort_by(|a, b| a.id.cmp(&b.id));
    assert_eq!(got, expected);

    // Finishing one removes it from the list.
    changed(&store, "running", Transition::Cancel, T0 + 1).await;
    let ids = sorted(
        store
            .unfinished()
            .await
            .unwrap()
            .into_iter()
            .map(|t| t.id)
            .collect(),
    );
    assert_eq!(ids, ["cancelling", "parked", "sleeping"]);
}

pub(super) async fn purge_deletes_expired_tasks_and_their_journals_only(store: Arc<dyn Store>) {
    let now = T0 + 2_000;
    let tasks = [
        with("expired", |t| t.ttl_ms = Some(500)),
        with("due-now", |t| t.ttl_ms = Some(2_000)), // expires exactly at `now`
        with("due-later", |t| t.ttl_ms = Some(2_001)),
        task("forever"),
        with("finished", |t| {
            t.status = TaskStatus::Completed;
            t.ttl_ms = Some(1_200);
        }),
        with("old-but-long", |t| {
            t.created_at_ms = T0 - 1_000_000;
            t.ttl_ms = Some(1_002_001);
        }),
    ];
    for t in &tasks {
        create(&store, t).await;
        for p in 0..3 {
            store
                .append(&t.id, entry(p, StepKind::Checkpoint, "s", json!(p)), 0)
                .await
                .unwrap();
        }
    }

    assert_eq!(
        store.purge_expired(T0 + 499, usize::MAX).await.unwrap(),
        Vec::<String>::new()
    );
    let purged = sorted(store.purge_expired(now, usize::MAX).await.unwrap());
    assert_eq!(purged, ["due-now", "expired", "finished"]);
    for id in &purged {
        assert_eq!(store.get(id).await.unwrap(), None, "{id}");
        assert_eq!(store.journal(id).await.unwrap(), vec![], "{id}");
    }
    for t in tasks.iter().filter(|t| !purged.contains(&t.id)) {
        assert_eq!(&get(&store, &t.id).await, t);
        assert_eq!(store.journal(&t.id).await.unwrap().len(), 3, "{}", t.id);
    }
    assert_eq!(
        store.purge_expired(now, usize::MAX).await.unwrap(),
        Vec::<String>::new()
    );

    // The journal went with the task: a new task under the same id starts empty.
    create(&store, &task("expired")).await;
    assert_eq!(store.journal("expired").await.unwrap(), vec![]);

    let purged = sorted(store.purge_expired(i64::MAX, usize::MAX).await.unwrap());
    assert_eq!(purged, ["due-later", "old-but-long"]);
    assert!(store.get("forever").await.unwrap().is_some());
}

pub(super) async fn purge_takes_at_most_its_limit_the_earliest_first(store: Arc<dyn Store>) {
    // Created in an order that is not their expiry's.
    for (id, ttl) in [
        ("third", 3_000),
        ("first", 1_000),
        ("later", 9_000),
        ("second", 2_000),
    ] {
        create(&store, &with(id, |t| t.ttl_ms = Some(ttl))).await;
        store
            .append(id, entry(0, StepKind::Checkpoint, "s", json!(0)), 0)
            .await
            .unwrap();
    }
    let now = T0 + 5_000;
    assert_eq!(
        store.purge_expired(now, 2).await.unwrap(),
        ["first", "second"]
    );
    assert_eq!(store.get("first").await.unwrap(), None);
    assert_eq!(store.journal("second").await.unwrap(), vec![]);
    assert!(store.get("third").await.unwrap().is_some());
    assert_eq!(store.purge_expired(now, 2).await.unwrap(), ["third"]);
    assert_eq!(
        store.purge_expired(now, 2).await.unwrap(),
        Vec::<String>::new()
    );
    assert_eq!(store.next_expiry().await.unwrap(), Some(T0 + 9_000));
}

pub(super) async fn next_expiry_is_the_earliest_deadline(store: Arc<dyn Store>) {
    assert_eq!(store.next_expiry().await.unwrap(), None);
    create(&store, &task("forever")).await;
    assert_eq!(store.next_expiry().await.unwrap(), None);

    create(&store, &with("b", |t| t.ttl_ms = Some(5_000))).await;
    assert_eq!(store.next_expiry().await.unwrap(), Some(T0 + 5_000));
    create(&store, &with("a", |t| t.ttl_ms = Some(3_000))).await;
    create(&store, &with("c", |t| t.ttl_ms = Some(4_000))).await;
    // Finished tasks expire too.
    create(
        &store,
        &with("d", |t| {
            t.status = TaskStatus::Failed;
            t.created_at_ms = T0 + 3_000;
            t.ttl_ms = Some(500);
        }),
    )
    .await;
    assert_eq!(store.next_expiry().await.unwrap(), Some(T0 + 3_000));

    assert_eq!(
        store.purge_expired(T0 + 3_000, usize::MAX).await.unwrap(),
        ["a"]
    );
    assert_eq!(store.next_expiry().await.unwrap(), Some(T0 + 3_500));
    assert_eq!(
        sorted(store.purge_expired(T0 + 10_000, usize::MAX).await.unwrap()),
        ["b", "c", "d"]
    );
    assert_eq!(store.next_expiry().await.unwrap(), None);
}

/// A call that began inline carries on as a task: the task and the journal it
/// starts from land together, and a duplicate id leaves no partial journal.
pub(super) async fn create_with_journal_lands_task_and_journal_together(store: Arc<dyn Store>) {
    let journal = vec![
        entry(
            0,
            StepKind::Ask,
            "Name",
            json!({"action": "accept", "content": {"name": "Ada"}}),
        ),
        entry(1, StepKind::Checkpoint, "build", json!({"id": 7})),
    ];
    store
        .create_with_journal(task("handed-off"), journal.clone())
        .await
        .unwrap();
    assert_eq!(
        store.get("handed-off").await.unwrap(),
        Some(task("handed-off"))
    );
    assert_eq!(store.journal("handed-off").await.unwrap(), journal);

    let err = store
        .create_with_journal(
            task("handed-off"),
            vec![entry(2, StepKind::Now, "now", json!(1))],
        )
        .await;
    assert!(err.is_err(), "a second task with the same id is refused");
    assert_eq!(store.journal("handed-off").await.unwrap(), journal);
}

// ---------------------------------------------------------------------------
// Listing and sessions.

/// `list` pages through one principal's tasks (finished ones included),
/// oldest first, ties broken by id; other principals' tasks never show.
pub(super) async fn list_all_pages_every_task_in_creation_order(store: Arc<dyn Store>) {
    for t in [
        owned("c", Some("alice"), T0 + 2),
        owned("a", None, T0 + 1),
        owned("b", Some("bob"), T0 + 1),
        owned("d", Some("alice"), T0 + 3),
    ] {
        create(&store, &t).await;
    }
    store
        .transition(
            "b",
            Transition::Fail(mcp_tasks_runtime::tool::RpcError::internal("x")),
            T0 + 5,
            None,
        )
        .await
        .unwrap();
    let ids = |page: &[TaskRecord]| page.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    let first = store.list_all(None, 3).await.unwrap();
    assert_eq!(
        ids(&first),
        ["a", "b", "c"],
        "every principal, oldest first"
    );
    assert_eq!(
        first[1].status,
        TaskStatus::Failed,
        "finished tasks are listed"
    );
    let rest = store
        .list_all(Some(&ListCursor::after(&first[2])), 3)
        .await
        .unwrap();
    assert_eq!(ids(&rest), ["d"]);
    let end = ListCursor::after(&rest[0]);
    assert!(store.list_all(Some(&end), 3).await.unwrap().is_empty());
}

/// `summaries` pages through the tasks a filter keeps, forwards and
/// backwards by cursor, without their arguments; `count_tasks` counts the
/// same tasks per status.
pub(super) async fn summaries_page_a_filter_both_ways_and_count_tasks_counts_it(
    store: Arc<dyn Store>,
) {
    let at = |id: &str, principal: Option<&str>, tool: &str, ms: i64| TaskRecord {
        tool: tool.to_owned(),
        updated_at_ms: ms,
        ..owned(id, principal, ms)
    };
    for t in [
        at("e", Some("alice"), "deploy", T0 + 5),
        at("a", Some("alice"), "deploy", T0 + 1),
        at("b", None, "deploy", T0 + 1),
        at("c", Some("alice"), "build", T0 + 3),
        at("d", Some("alice"), "deploy", T0 + 4),
        TaskRecord {
            wake_at_ms: Some(T0 + 60_000),
            ..owned("f", Some("alice"), T0 + 6)
        },
    ] {
        create(&store, &t).await;
    }
    store
        .transition(
            "d",
            Transition::Complete(obj(json!({"ok": true}))),
            T0 + 7,
            None,
        )
        .await
        .unwrap();
    let ids = |page: &[TaskSummary]| page.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    let cursor = |t: &TaskSummary| ListCursor {
        created_at_ms: t.created_at_ms,
        id: t.id.clone(),
    };

    // Every task, two at a time, forwards then back.
    let all = TaskFilter::default();
    let first = store.summaries(&all, None, 2).await.unwrap();
    assert_eq!(ids(&first), ["a", "b"], "oldest first, ties by id");
    let after = PageFrom::After(cursor(&first[1]));
    let second = store.summaries(&all, Some(&after), 2).await.unwrap();
    assert_eq!(ids(&second), ["c", "d"]);
    assert_eq!(second[1].status, TaskStatus::Completed, "finished ones too");
    let before = PageFrom::Before(cursor(&second[0]));
    let back = store.summaries(&all, Some(&before), 2).await.unwrap();
    assert_eq!(ids(&back), ["a", "b"], "the page before, oldest first");
    let before = PageFrom::Before(cursor(&first[1]));
    let back = store.summaries(&all, Some(&before), 2).await.unwrap();
    assert_eq!(ids(&back), ["a"], "a short first page backwards");
    let last = PageFrom::After(ListCursor {
        created_at_ms: T0 + 6,
        id: "f".into(),
    });
    assert!(
        store
            .summaries(&all, Some(&last), 2)
            .await
            .unwrap()
            .is_empty()
    );

    // What a summary carries.
    let f = &store.summaries(&all, Some(&after), 10).await.unwrap()[3];
    assert_eq!(f.id, "f");
    assert_eq!(f.principal.as_deref(), Some("alice"));
    assert_eq!(f.tool, "deploy");
    assert!(f.is_asleep(), "{f:?}");

    // Filters: a principal, no principal, a tool, statuses; together.
    let alices = TaskFilter::default().principal(Some("alice"));
    let page = store.summaries(&alices, None, 10).await.unwrap();
    assert_eq!(ids(&page), ["a", "c", "d", "e", "f"]);
    let nobodys = TaskFilter::default().principal(None);
    assert_eq!(
        ids(&store.summaries(&nobodys, None, 10).await.unwrap()),
        ["b"]
    );
    let open_deploys = TaskFilter::default()
        .principal(Some("alice"))
        .tool("deploy")
        .statuses([TaskStatus::Working, TaskStatus::InputRequired]);
    let page = store.summaries(&open_deploys, None, 2).await.unwrap();
    assert_eq!(ids(&page), ["a", "e"]);
    let next = PageFrom::After(cursor(&page[1]));
    let page = store
        .summaries(&open_deploys, Some(&next), 2)
        .await
        .unwrap();
    assert_eq!(ids(&page), ["f"]);

    // Counts of the same filters.
    let counts = store.count_tasks(&all).await.unwrap();
    assert_eq!(counts.total(), 6);
    assert_eq!(counts.of(TaskStatus::Working), 5);
    assert_eq!(counts.of(TaskStatus::Completed), 1);
    assert_eq!(counts.of(TaskStatus::Failed), 0);
    assert_eq!(counts.asleep, 1);
    let counts = store.count_tasks(&open_deploys).await.unwrap();
    assert_eq!((counts.total(), counts.asleep), (3, 1));
    let counts = store.count_tasks(&nobodys).await.unwrap();
    assert_eq!((counts.of(TaskStatus::Working), counts.total()), (1, 1));
}

pub(super) async fn list_pages_a_principals_tasks_in_creation_order(store: Arc<dyn Store>) {
    for (id, at) in [("c", T0 + 2), ("a", T0 + 1), ("b", T0 + 1), ("d", T0 + 3)] {
        create(&store, &owned(id, Some("alice"), at)).await;
    }
    create(&store, &with("bobs", |t| t.principal = Some("bob".into()))).await;
    create(&store, &task("anon")).await;
    store
        .transition("a", Transition::Cancel, T0 + 5, None)
        .await
        .unwrap();

    let ids = |page: &[TaskRecord]| page.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    let first = store.list(Some("alice"), None, 3).await.unwrap();
    assert_eq!(ids(&first), ["a", "b", "c"]);
    assert_eq!(
        first[0].status,
        TaskStatus::Cancelled,
        "finished tasks are listed"
    );
    let cursor = ListCursor::after(&first[2]);
    let rest = store.list(Some("alice"), Some(&cursor), 3).await.unwrap();
    assert_eq!(ids(&rest), ["d"]);
    let end = ListCursor::after(&rest[0]);
    assert!(
        store
            .list(Some("alice"), Some(&end), 3)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        ids(&store.list(Some("bob"), None, 10).await.unwrap()),
        ["bobs"]
    );
    assert_eq!(ids(&store.list(None, None, 10).await.unwrap()), ["anon"]);
    assert!(
        store
            .list(Some("carol"), None, 10)
            .await
            .unwrap()
            .is_empty()
    );
}
