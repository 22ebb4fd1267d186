//! Behaviours: what the server's limits read (a principal's unfinished
//! tasks).

use super::support::*;

/// `count_unfinished` counts a principal's working and parked tasks, not
/// its finished ones nor another principal's; `None` counts the tasks
/// created without one.
pub(super) async fn count_unfinished_counts_a_principals_open_tasks(store: Arc<dyn Store>) {
    for (id, who, status) in [
        ("a1", Some("alice"), TaskStatus::Working),
        ("a2", Some("alice"), TaskStatus::InputRequired),
        ("a3", Some("alice"), TaskStatus::Completed),
        ("a4", Some("alice"), TaskStatus::Cancelled),
        ("b1", Some("bob"), TaskStatus::Working),
        ("n1", None, TaskStatus::Working),
        ("n2", None, TaskStatus::Failed),
    ] {
        create(
            &store,
            &TaskRecord {
                status,
                ..owned(id, who, T0)
            },
        )
        .await;
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
