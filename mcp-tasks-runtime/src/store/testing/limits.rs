//! Behaviours: what the server's limits read (a principal's unfinished
//! tasks).

use super::support::*;

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
