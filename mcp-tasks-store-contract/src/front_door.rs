//! Behaviours of a [`FrontDoorStore`]: single-use tokens and protocol
//! sessions.

use super::support::*;
use mcp_tasks_runtime::store::FrontDoorStore;

/// A token is spent once: the second spend says so, also when several
/// callers spend it at once; records that expired are deleted, so the
/// table does not grow without bound.
pub(super) async fn spend_is_single_use_and_forgets_expired_records(
    store: Arc<dyn FrontDoorStore>,
) {
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

/// A session's state comes back as written, a later write replaces it, and
/// a deleted session is gone.
pub(super) async fn sessions_round_trip_and_are_forgotten(store: Arc<dyn FrontDoorStore>) {
    assert_eq!(store.get_session("s1").await.unwrap(), None);
    let state = json!({"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}});
    store.put_session("s1", state.clone(), T0).await.unwrap();
    store
        .put_session("s2", json!({"other": true}), T0)
        .await
        .unwrap();
    assert_eq!(store.get_session("s1").await.unwrap(), Some(state));
    store
        .put_session("s1", json!({"again": 1}), T0 + 1)
        .await
        .unwrap();
    assert_eq!(
        store.get_session("s1").await.unwrap(),
        Some(json!({"again": 1}))
    );
    store.delete_session("s1").await.unwrap();
    assert_eq!(store.get_session("s1").await.unwrap(), None);
    store.delete_session("s1").await.unwrap();
    assert_eq!(
        store.get_session("s2").await.unwrap(),
        Some(json!({"other": true}))
    );
}

/// The sweep deletes sessions untouched for [`SESSION_TTL`], and no others.
pub(super) async fn purge_sessions_deletes_stale_sessions_only(store: Arc<dyn FrontDoorStore>) {
    let ttl = i64::try_from(SESSION_TTL.as_millis()).unwrap();
    store.put_session("old", json!({}), T0).await.unwrap();
    store.put_session("new", json!({}), T0 + ttl).await.unwrap();
    store.purge_sessions(T0 + ttl + 1).await.unwrap();
    assert_eq!(store.get_session("old").await.unwrap(), None);
    assert_eq!(store.get_session("new").await.unwrap(), Some(json!({})));
}
