//! Behaviours: what the server's limits read and write (single-use tokens,
//! a principal's unfinished tasks).

use super::support::*;

/// A token is spent once: the second spend says so, also when several
/// callers spend it at once; records that expired are deleted, so the
/// table does not grow without bound.
pub(super) async fn spend_is_single_use_and_forgets_expired_records(store: Arc<dyn Store>) {
    assert!(store.spend("a", T0 + 1_000, T0).await.unwrap());
    assert!(!store.spend("a", T0 + 1_000, T0 + 1).await.unwrap());
    assert!(store.spend("b", T0 + 5_000, T0 + 2).await.unwrap());
    // At T0 + 1_000, a's record expires and is deleted: a spend of `a`
    // after its expiry is new to the store (the server refuses an expired
    // state for its age before it gets here).
    assert!(store.spend("a", T0 + 9_000, T0 + 1_000).await.unwrap());
    assert!(!store.spend("b", T0 + 5_000, T0 + 1_000).await.unwrap());
    // Many callers at once: exactly one wins.
    let spends = (0..16).map(|_| {
        let store = store.clone();
        tokio::spawn(async move { store.spend("c", T0 + 5_000, T0 + 3).await.unwrap() })
    });
    let won = futures::future::join_all(spends)
        .await
        .into_iter()
        .filter(|r| *r.as_ref().unwrap())
        .count();
    assert_eq!(won, 1, "exactly one concurrent spend wins");
}

/// `count_unfinished` counts a principal's working and parked tasks, not
/// its finished ones nor another principal's; `None` counts the tasks
/// created without one.
pub(super) async fn count_unfinished_counts_a_principals_open_tasks(store: Arc<dyn Store>) {
    let owned = |id: &str, who: Option<&str>, status: TaskStatus| {
        with(id, |t| {
            t.principal = who.map(str::to_owned);
            t.status = status;
        })
    };
    for t in [
        owned("a1", Some("alice"), TaskStatus::Working),
        owned("a2", Some("alice"), TaskStatus::InputRequired),
        owned("a3", Some("alice"), TaskStatus::Completed),
        owned("a4", Some("alice"), TaskStatus::Cancelled),
        owned("b1", Some("bob"), TaskStatus::Working),
        owned("n1", None, TaskStatus::Working),
        owned("n2", None, TaskStatus::Failed),
    ] {
        store.create(t).await.unwrap();
    }
    assert_eq!(store.count_unfinished(Some("alice")).await.unwrap(), 2);
    assert_eq!(store.count_unfinished(Some("bob")).await.unwrap(), 1);
    assert_eq!(store.count_unfinished(None).await.unwrap(), 1);
    assert_eq!(store.count_unfinished(Some("carol")).await.unwrap(), 0);
    store
        .transition("a1", Transition::Cancel, T0 + 1, None)
        .await
        .unwrap();
    assert_eq!(store.count_unfinished(Some("alice")).await.unwrap(), 1);
}
