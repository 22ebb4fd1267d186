//! Behaviours: the tool version recorded with each task, and a run giving
//! up a task it does not serve.

use super::support::*;

const LEASE: i64 = 10_000;

/// A task keeps the version of the tool that created it (1 unless set),
/// through every read and every change.
pub(super) async fn tool_version_is_kept_and_defaults_to_one(store: Arc<dyn Store>) {
    let fresh = TaskRecord::new("fresh", "deploy", T0);
    assert_eq!(fresh.tool_version, 1, "a new record is version 1");
    create(&store, &fresh).await;
    assert_eq!(get(&store, "fresh").await.tool_version, 1);
    for version in [2, 7, u32::MAX] {
        let id = format!("v{version}");
        create(&store, &with(&id, |t| t.tool_version = version)).await;
        assert_eq!(get(&store, &id).await.tool_version, version, "read back");
    }
    let unfinished = store.unfinished().await.unwrap();
    let mut versions: Vec<u32> = unfinished.iter().map(|t| t.tool_version).collect();
    versions.sort_unstable();
    assert_eq!(versions, [1, 2, 7, u32::MAX], "unfinished() carries it");
    let page = store.list_all(None, 10).await.unwrap();
    assert_eq!(page.len(), 4);
    assert!(
        page.iter().all(|t| t.tool_version
            == if t.id == "fresh" {
                1
            } else {
                t.id[1..].parse().unwrap()
            }),
        "list_all() carries it"
    );

    // A claim, a park, an answer and the end leave it as it was.
    let (claimed, _) = store
        .claim("v7", "a", T0, T0 + LEASE)
        .await
        .unwrap()
        .expect("claimable");
    assert_eq!(claimed.tool_version, 7);
    let parked = store
        .transition(
            "v7",
            Transition::Park(vec![pending("k", 0)]),
            T0 + 1,
            Some(claimed.fence),
        )
        .await
        .unwrap()
        .expect("parked");
    assert_eq!(parked.tool_version, 7);
    let answered = answered(&store, "v7", json!({"k": accept("yes")}), T0 + 2).await;
    assert_eq!(answered.record.tool_version, 7);
    let done = store
        .transition(
            "v7",
            Transition::Complete(obj(json!({"content": []}))),
            T0 + 3,
            None,
        )
        .await
        .unwrap()
        .expect("completed");
    assert_eq!((done.status, done.tool_version), (TaskStatus::Completed, 7));
    assert_eq!(get(&store, "v7").await.tool_version, 7);
}

/// `Transition::Release` gives up the lease of one working task held by a
/// run, as that run (its fence): the task is claimable again at once, by
/// anyone, and nothing else changes. Refused for a stale fence, a task no
/// lease holds, and a parked task.
pub(super) async fn release_gives_up_one_held_working_task(store: Arc<dyn Store>) {
    for id in ["mine", "other"] {
        create(&store, &task(id)).await;
    }
    let (held, _) = store
        .claim("mine", "a", T0, T0 + LEASE)
        .await
        .unwrap()
        .expect("claimable");
    store.claim("other", "a", T0, T0 + LEASE).await.unwrap();
    assert!(store.claimable(T0 + 1, 10).await.unwrap().is_empty());

    let stale = held.fence - 1;
    let refused = store
        .transition("mine", Transition::Release, T0 + 1, Some(stale))
        .await
        .unwrap();
    assert_eq!(refused, None, "a stale fence releases nothing");

    let released = store
        .transition("mine", Transition::Release, T0 + 1, Some(held.fence))
        .await
        .unwrap()
        .expect("released");
    assert_eq!(released.lease, None);
    assert_eq!(released.status, TaskStatus::Working);
    assert_eq!(
        released.fence, held.fence,
        "the fence moves only at a claim"
    );
    assert_eq!(released.version, held.version + 1);
    assert_eq!(get(&store, "mine").await, released);
    assert!(get(&store, "other").await.lease.is_some(), "only that task");
    assert_eq!(store.claimable(T0 + 1, 10).await.unwrap(), ["mine"]);

    let again = store
        .transition("mine", Transition::Release, T0 + 2, Some(held.fence))
        .await
        .unwrap();
    assert_eq!(again, None, "a task no lease holds has nothing to give up");

    create(&store, &parked("waiting", &["k"])).await;
    let refused = store
        .transition("waiting", Transition::Release, T0 + 2, None)
        .await
        .unwrap();
    assert_eq!(refused, None, "a parked task is not released");
    let (taken, _) = store
        .claim("mine", "b", T0 + 2, T0 + LEASE)
        .await
        .unwrap()
        .expect("another instance claims it");
    assert_eq!(taken.fence, held.fence + 1);
}
