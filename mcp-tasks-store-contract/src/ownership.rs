//! Behaviours: claims, leases and fencing.

use super::support::*;

const LEASE: i64 = 10_000;

/// A working task nobody holds is claimed once: the first claim wins, and
/// the fence moves on; the claim returns the journal too.
pub(super) async fn claim_takes_a_runnable_task_no_live_lease_holds(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    store
        .append("t", entry(0, StepKind::Checkpoint, "a", json!(1)), 0)
        .await
        .unwrap();
    let (claimed, journal) = claimed(&store, "t", "a", T0, T0 + LEASE).await;
    assert_eq!(claimed.fence, 1);
    assert_eq!(
        claimed.lease,
        Some(Lease {
            owner: "a".into(),
            expires_at_ms: T0 + LEASE
        })
    );
    assert_eq!(journal, [entry(0, StepKind::Checkpoint, "a", json!(1))]);
    assert_eq!(get(&store, "t").await, claimed);
    let claims = async |id: &str, owner: &str, now: i64| {
        let claim = store.claim(id, owner, now, T0 + LEASE).await.unwrap();
        claim.is_some()
    };
    assert!(!claims("t", "b", T0 + 1).await, "a holds it");
    // Parked, asleep, finished and missing tasks are not claimed.
    create(&store, &parked("p", &["k"])).await;
    create(&store, &with("s", |t| t.wake_at_ms = Some(T0 + 5))).await;
    create(&store, &with("f", |t| t.status = TaskStatus::Completed)).await;
    for id in ["p", "s", "f", "gone"] {
        assert!(!claims(id, "a", T0).await, "{id}");
    }
    assert!(claims("s", "a", T0 + 5).await, "due now");
}

/// Once a lease lapses another instance claims the task, and from then on
/// the old holder's writes are refused: its appends report `Fenced` and its
/// transitions change nothing.
pub(super) async fn claim_moves_the_fence_and_refuses_the_old_holder(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    let (a, _) = claimed(&store, "t", "a", T0, T0 + LEASE).await;
    let (b, _) = claimed(&store, "t", "b", T0 + LEASE, T0 + 2 * LEASE).await;
    assert_eq!((a.fence, b.fence), (1, 2));
    let append = |who: &str, fence| {
        let step = entry(0, StepKind::Checkpoint, who, json!(who));
        store.append("t", step, fence)
    };
    assert_eq!(append("a", a.fence).await.unwrap(), Appended::Fenced);
    let done = Transition::Complete(obj(json!({"content": []})));
    assert_eq!(
        store
            .transition("t", done.clone(), T0 + LEASE + 1, Some(a.fence))
            .await
            .unwrap(),
        None
    );
    assert_eq!(get(&store, "t").await.status, TaskStatus::Working);
    assert!(store.journal("t").await.unwrap().is_empty());
    // The new holder writes.
    assert_eq!(append("b", b.fence).await.unwrap(), Appended::Recorded);
    let ended = store
        .transition("t", done, T0 + LEASE + 2, Some(b.fence))
        .await
        .unwrap();
    assert_eq!(ended.map(|r| r.status), Some(TaskStatus::Completed));
    // Unfenced changes (a cancel request) are not a holder's, and pass.
    create(&store, &task("u")).await;
    store.claim("u", "a", T0, T0 + LEASE).await.unwrap();
    let asked = store
        .transition("u", Transition::RequestCancel, T0 + 1, None)
        .await
        .unwrap();
    assert!(asked.is_some_and(|r| r.cancel_requested));
    // A task that is gone is fenced off too.
    let gone = store
        .append("gone", entry(0, StepKind::Checkpoint, "x", json!(0)), 1)
        .await
        .unwrap();
    assert_eq!(gone, Appended::Fenced);
}

/// A journal position keeps its first entry; a second append at it, by the
/// holder, gets the stored entry back to go on with.
pub(super) async fn fenced_append_keeps_the_first_entry_and_says_so(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    let (t, _) = claimed(&store, "t", "a", T0, T0 + LEASE).await;
    let first = entry(3, StepKind::Checkpoint, "build", json!({"id": "b-1"}));
    let again = entry(3, StepKind::Checkpoint, "build", json!({"id": "b-2"}));
    assert_eq!(
        store.append("t", first.clone(), t.fence).await.unwrap(),
        Appended::Recorded
    );
    assert_eq!(
        store.append("t", again, t.fence).await.unwrap(),
        Appended::Kept(first.clone())
    );
    assert_eq!(store.journal("t").await.unwrap(), [first]);
}

/// `append_unhurried` is an `append`: as the holder it records an entry and
/// keeps the first at a position; a stale fence or a task that is gone
/// writes nothing.
pub(super) async fn unhurried_append_is_an_append(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    let (a, _) = claimed(&store, "t", "a", T0, T0 + LEASE).await;
    let first = entry(0, StepKind::Sleep, "sleep", json!(T0 + 50));
    let again = entry(0, StepKind::Sleep, "sleep", json!(T0 + 60));
    assert_eq!(
        store
            .append_unhurried("t", first.clone(), a.fence)
            .await
            .unwrap(),
        Appended::Recorded
    );
    assert_eq!(
        store.append_unhurried("t", again, a.fence).await.unwrap(),
        Appended::Kept(first.clone())
    );
    let (b, _) = claimed(&store, "t", "b", T0 + LEASE, T0 + 2 * LEASE).await;
    assert!(b.fence > a.fence);
    let stale = entry(1, StepKind::Sleep, "sleep", json!(T0 + 70));
    assert_eq!(
        store.append_unhurried("t", stale, a.fence).await.unwrap(),
        Appended::Fenced
    );
    assert_eq!(
        store
            .append_unhurried("gone", entry(0, StepKind::Sleep, "sleep", json!(T0)), 1)
            .await
            .unwrap(),
        Appended::Fenced
    );
    assert_eq!(store.journal("t").await.unwrap(), [first]);
}

/// `transition_journaled` lands its entries with the change, as the
/// holder: a stale fence writes neither, and a taken position keeps the
/// entry already there.
pub(super) async fn journaled_transition_lands_entries_with_the_change(store: Arc<dyn Store>) {
    create(&store, &task("t")).await;
    let (t, _) = claimed(&store, "t", "a", T0, T0 + LEASE).await;
    let kept = entry(0, StepKind::Checkpoint, "build", json!({"id": "b-1"}));
    assert_eq!(
        store.append("t", kept.clone(), t.fence).await.unwrap(),
        Appended::Recorded
    );
    let clash = entry(0, StepKind::Sleep, "sleep", json!(T0 + 1));
    let sleep = entry(1, StepKind::Sleep, "sleep", json!(T0 + 5_000));
    let change = Transition::Sleep {
        wake_at_ms: T0 + 5_000,
    };
    let stale = store
        .transition_journaled(
            "t",
            vec![sleep.clone()],
            change.clone(),
            T0 + 1,
            t.fence + 1,
        )
        .await
        .unwrap();
    assert!(stale.is_none(), "a stale fence changes nothing");
    assert_eq!(
        store.journal("t").await.unwrap(),
        std::slice::from_ref(&kept)
    );
    assert_eq!(get(&store, "t").await.status, TaskStatus::Working);

    let slept = store
        .transition_journaled("t", vec![clash, sleep.clone()], change, T0 + 1, t.fence)
        .await
        .unwrap()
        .expect("the holder's change applies");
    assert_eq!(slept.lease, None, "asleep, the task is held by no one");
    assert_eq!(get(&store, "t").await.lease, None);
    assert_eq!(store.journal("t").await.unwrap(), [kept, sleep]);
}

/// `renew` extends the owner's live leases only, and names the tasks it
/// still holds with their versions; a lapsed lease is not revived.
pub(super) async fn renew_extends_live_leases_and_drops_lapsed_ones(store: Arc<dyn Store>) {
    for id in ["a1", "a2", "b1"] {
        create(&store, &task(id)).await;
    }
    store.claim("a1", "a", T0, T0 + LEASE).await.unwrap();
    store.claim("a2", "a", T0, T0 + 100).await.unwrap();
    store.claim("b1", "b", T0, T0 + LEASE).await.unwrap();
    store
        .transition("a1", Transition::StatusMessage("on".into()), T0 + 1, None)
        .await
        .unwrap();
    let mut held = store.renew("a", T0 + 200, T0 + 5 * LEASE).await.unwrap();
    held.sort();
    assert_eq!(held, [("a1".to_owned(), 1)], "a2's lease had lapsed");
    assert_eq!(
        get(&store, "a1").await.lease.unwrap().expires_at_ms,
        T0 + 5 * LEASE
    );
    // A renewal made earlier that lands late (after a claim or a renewal
    // that went further) never shortens a lease: another instance could
    // claim the task while its holder still counts on it.
    store.renew("a", T0 + 200, T0 + LEASE).await.unwrap();
    assert_eq!(
        get(&store, "a1").await.lease.unwrap().expires_at_ms,
        T0 + 5 * LEASE,
        "a late renewal shortened a lease"
    );
    assert_eq!(
        get(&store, "a2").await.lease.unwrap().expires_at_ms,
        T0 + 100
    );
    assert_eq!(
        get(&store, "b1").await.lease.unwrap().expires_at_ms,
        T0 + LEASE
    );
    assert!(
        store
            .renew("nobody", T0, T0 + LEASE)
            .await
            .unwrap()
            .is_empty()
    );
}

/// `release` frees every lease of one instance at once.
pub(super) async fn release_frees_an_instances_tasks(store: Arc<dyn Store>) {
    for id in ["a1", "b1"] {
        create(&store, &task(id)).await;
    }
    store.claim("a1", "a", T0, T0 + LEASE).await.unwrap();
    store.claim("b1", "b", T0, T0 + LEASE).await.unwrap();
    store.release("a").await.unwrap();
    assert_eq!(get(&store, "a1").await.lease, None);
    assert!(get(&store, "b1").await.lease.is_some());
    assert_eq!(store.claimable(T0 + 1, 10).await.unwrap(), ["a1"]);
    let (taken, _) = claimed(&store, "a1", "c", T0 + 1, T0 + LEASE).await;
    assert_eq!(taken.fence, 2);
}

/// `claimable` lists the working tasks that are due and held by no live
/// lease, oldest first, up to the limit.
pub(super) async fn claimable_lists_due_unheld_working_tasks_oldest_first(store: Arc<dyn Store>) {
    let at = |id: &str, ms: i64| with(id, |t| t.created_at_ms = ms);
    create(&store, &at("new", T0 + 3)).await;
    create(&store, &at("old", T0 + 1)).await;
    create(&store, &at("mid", T0 + 2)).await;
    create(
        &store,
        &with("asleep", |t| t.wake_at_ms = Some(T0 + 10 * LEASE)),
    )
    .await;
    create(
        &store,
        &with("awake", |t| {
            t.created_at_ms = T0 + 4;
            t.wake_at_ms = Some(T0 + 5);
        }),
    )
    .await;
    create(&store, &parked("parked", &["k"])).await;
    create(&store, &with("done", |t| t.status = TaskStatus::Failed)).await;
    create(&store, &at("held", T0)).await;
    store.claim("held", "a", T0, T0 + LEASE).await.unwrap();
    assert_eq!(
        store.claimable(T0 + 10, 10).await.unwrap(),
        ["old", "mid", "new", "awake"]
    );
    assert_eq!(store.claimable(T0 + 10, 2).await.unwrap(), ["old", "mid"]);
    // Once the lease lapses, the held task is claimable again.
    assert_eq!(store.claimable(T0 + LEASE, 1).await.unwrap(), ["held"]);
}

/// Parking, sleeping and finishing let go of the lease: such a task holds
/// no instance.
pub(super) async fn park_sleep_and_finish_release_the_lease(store: Arc<dyn Store>) {
    let changes = [
        Transition::Park(vec![pending("k", 1)]),
        Transition::Sleep {
            wake_at_ms: T0 + 100,
        },
        Transition::Complete(obj(json!({"content": []}))),
        Transition::Fail(RpcError::internal("no")),
        Transition::Cancel,
    ];
    for (i, change) in changes.into_iter().enumerate() {
        let id = format!("t{i}");
        create(&store, &task(&id)).await;
        let (t, _) = claimed(&store, &id, "a", T0, T0 + LEASE).await;
        let after = store
            .transition(&id, change, T0 + 1, Some(t.fence))
            .await
            .unwrap();
        assert_eq!(after.map(|r| r.lease), Some(None), "{id}");
        assert_eq!(get(&store, &id).await.lease, None, "{id}");
    }
}
