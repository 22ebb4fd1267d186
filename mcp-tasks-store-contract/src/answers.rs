//! Behaviours: answers to a parked task's questions.

use super::support::*;

pub(super) async fn answer_ignores_unknown_keys(store: Arc<dyn Store>) {
    let t = parked("t", &["k1", "k2"]);
    create(&store, &t).await;
    let a = answered(&store, "t", json!({"nope": {"action": "accept"}}), T0 + 5).await;
    assert_eq!(a.accepted, 0);
    assert!(!a.runnable);
    assert_eq!(a.record, t);
    assert_eq!(get(&store, "t").await, t);
    assert_eq!(store.journal("t").await.unwrap(), vec![]);

    assert_eq!(
        store
            .answer("ghost", obj(json!({"k1": {"action": "accept"}})), T0)
            .await
            .unwrap(),
        None
    );
}

pub(super) async fn partial_then_full_answer(store: Arc<dyn Store>) {
    let t = parked("t", &["k1", "k2"]);
    create(&store, &t).await;
    let v1 = json!({"action": "accept", "content": {"approve": true}});
    let a = answered(
        &store,
        "t",
        json!({"k1": v1, "unknown": {"action": "accept"}}),
        T0 + 5,
    )
    .await;
    // What an answer returns, and the task it leaves stored.
    let check = async |a: Answered, counts: (usize, bool), expected: &TaskRecord| {
        assert_eq!((a.accepted, a.runnable), counts);
        assert_eq!(&a.record, expected);
        assert_eq!(&get(&store, "t").await, expected);
    };
    let mut expected = t.clone();
    expected.pending = vec![pending("k2", 11)];
    expected.updated_at_ms = T0 + 5;
    expected.version = 1;
    check(a, (1, false), &expected).await;
    let j1 = entry(10, StepKind::Ask, "Approval10", v1);
    assert_eq!(store.journal("t").await.unwrap(), vec![j1.clone()]);

    let v2 = json!({"action": "decline"});
    let a = answered(&store, "t", json!({"k2": v2}), T0 + 6).await;
    expected.pending = vec![];
    expected.status = TaskStatus::Working;
    expected.updated_at_ms = T0 + 6;
    expected.version = 2;
    check(a, (1, true), &expected).await;
    let j2 = entry(11, StepKind::Ask, "Approval11", v2);
    assert_eq!(
        store.journal("t").await.unwrap(),
        vec![j1.clone(), j2.clone()]
    );

    // The key is answered: a late duplicate is ignored.
    let a = answered(&store, "t", json!({"k1": {"action": "cancel"}}), T0 + 7).await;
    assert_eq!((a.accepted, a.runnable), (0, false));
    assert_eq!(get(&store, "t").await, expected);
    assert_eq!(store.journal("t").await.unwrap(), vec![j1, j2]);
}

pub(super) async fn answer_on_working_or_terminal_task_is_ignored(store: Arc<dyn Store>) {
    let mut ids = vec![];
    for status in [
        TaskStatus::Working,
        TaskStatus::Completed,
        TaskStatus::Failed,
        TaskStatus::Cancelled,
    ] {
        // Even with a request on record, only `input_required` takes answers.
        let t = with(status.as_str(), |t| {
            t.status = status;
            t.pending = vec![pending("k", 1)];
        });
        create(&store, &t).await;
        let a = answered(
            &store,
            status.as_str(),
            json!({"k": {"action": "accept"}}),
            T0 + 1,
        )
        .await;
        assert_eq!((a.accepted, a.runnable), (0, false), "{status:?}");
        assert_eq!(a.record, t);
        assert_eq!(get(&store, status.as_str()).await, t);
        assert_eq!(store.journal(status.as_str()).await.unwrap(), vec![]);
        ids.push(status.as_str());
    }
    assert_eq!(ids.len(), 4);
}

pub(super) async fn concurrent_answers_to_one_key_accept_exactly_one(store: Arc<dyn Store>) {
    create(&store, &parked("t", &["k"])).await;
    let calls: Vec<_> = (0..100)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move {
                let a = answered(&store, "t", json!({"k": accept(i)}), T0 + 1).await;
                (i, a)
            })
        })
        .collect();
    let mut winners = vec![];
    for call in calls {
        let (i, a) = call.await.unwrap();
        match a.accepted {
            0 => assert!(!a.runnable),
            1 => {
                assert!(a.runnable);
                winners.push(i);
            }
            n => panic!("{n} responses accepted for one key"),
        }
    }
    assert_eq!(winners.len(), 1, "winners: {winners:?}");
    assert_eq!(
        store.journal("t").await.unwrap(),
        vec![entry(10, StepKind::Ask, "Approval10", accept(winners[0]))]
    );
    let t = get(&store, "t").await;
    assert_eq!(t.status, TaskStatus::Working);
    assert!(t.pending.is_empty());
    assert_eq!(t.version, 1, "only the accepted answer counts");
}

pub(super) async fn concurrent_answers_to_different_keys_all_land(store: Arc<dyn Store>) {
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    create(&store, &parked("t", &key_refs)).await;
    let calls: Vec<_> = keys
        .iter()
        .cloned()
        .map(|k| {
            let store = store.clone();
            tokio::spawn(async move {
                let response = json!({ k.clone(): accept(&k) });
                answered(&store, "t", response, T0 + 1).await
            })
        })
        .collect();
    let mut runnable = 0;
    for call in calls {
        let a = call.await.unwrap();
        assert_eq!(a.accepted, 1);
        runnable += usize::from(a.runnable);
    }
    assert_eq!(
        runnable, 1,
        "exactly the last answer makes the task runnable"
    );
    let journal = store.journal("t").await.unwrap();
    let expected: Vec<JournalEntry> = (0..20)
        .map(|i| {
            entry(
                10 + i,
                StepKind::Ask,
                &format!("Approval{}", 10 + i),
                accept(format!("k{i}")),
            )
        })
        .collect();
    assert_eq!(journal, expected);
    let t = get(&store, "t").await;
    assert_eq!(t.status, TaskStatus::Working);
    assert_eq!(t.version, 20, "one version per accepted answer");
}
