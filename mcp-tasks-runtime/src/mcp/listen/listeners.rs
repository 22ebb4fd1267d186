//! The count of open listen streams, per holder, and the signal that ends
//! them all.

use std::{
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use tokio::sync::watch;

/// The open listen streams of a server, and the signal that ends them.
#[derive(Debug)]
pub(in crate::mcp) struct Listeners {
    /// Set to `true` to end every stream gracefully.
    pub(super) closing: watch::Sender<bool>,
    /// Streams whose handler runs.
    open: AtomicUsize,
    /// Wakes whoever waits for `open` and `flushing` to reach zero.
    idle: watch::Sender<()>,
    /// HTTP streams whose handler ended but whose response is still being
    /// written.
    flushing: AtomicUsize,
    /// Open streams by holder, for `Limits::max_listens_per_principal` and
    /// `Limits::max_listens_per_task`.
    held: std::sync::Mutex<std::collections::HashMap<Holder, usize>>,
}

impl Default for Listeners {
    fn default() -> Self {
        Self {
            closing: watch::Sender::new(false),
            open: AtomicUsize::new(0),
            idle: watch::Sender::new(()),
            flushing: AtomicUsize::new(0),
            held: std::sync::Mutex::default(),
        }
    }
}

impl Listeners {
    fn busy(&self) -> bool {
        self.open.load(Ordering::SeqCst) > 0 || self.flushing.load(Ordering::SeqCst) > 0
    }

    /// Counts an HTTP listen response until the returned guard is dropped
    /// (when hyper has written the last of it, or the client went away).
    pub(in crate::mcp) fn flushing(self: &Arc<Self>) -> Counted {
        self.flushing.fetch_add(1, Ordering::SeqCst);
        Counted {
            listeners: self.clone(),
            field: Field::Flushing,
        }
    }

    /// Counts a stream on each of `holders`, unless one of them already
    /// holds its most (then that one and its most, and nothing is counted).
    pub(super) fn opened(
        self: &Arc<Self>,
        holders: Vec<(Holder, usize)>,
    ) -> Result<Counted, (Holder, usize)> {
        let holders = {
            let mut held = self
                .held
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if let Some(full) = holders
                .iter()
                .find(|(h, max)| held.get(h).is_some_and(|n| n >= max))
            {
                return Err(full.clone());
            }
            let holders: Vec<Holder> = holders.into_iter().map(|(h, _)| h).collect();
            for holder in &holders {
                *held.entry(holder.clone()).or_default() += 1;
            }
            holders
        };
        self.open.fetch_add(1, Ordering::SeqCst);
        Ok(Counted {
            listeners: self.clone(),
            field: Field::Open(holders),
        })
    }

    pub(in crate::mcp) fn count(&self) -> usize {
        self.open.load(Ordering::SeqCst)
    }

    /// Ends every stream and waits, up to `within`, for each to send its
    /// final answer.
    pub(in crate::mcp) async fn close(&self, within: Duration) {
        self.closing.send_replace(true);
        let mut idle = self.idle.subscribe();
        let _ = tokio::time::timeout(within, async {
            while self.busy() {
                if idle.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }
}

#[derive(Debug, Clone)]
enum Field {
    /// An open stream, and what it counts on.
    Open(Vec<Holder>),
    Flushing,
}

/// What an open listen stream counts against: its principal's
/// `max_listens_per_principal`, or, without one, the
/// `max_listens_per_task` of each task it follows and, when it follows the
/// tool list, its client address's `max_listens_per_principal` (stdio's
/// one client has none).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) enum Holder {
    Principal(String),
    Task(String),
    Address(Option<std::net::IpAddr>),
}

/// One count in [`Listeners`], given back on drop.
#[derive(Debug)]
pub(in crate::mcp) struct Counted {
    listeners: Arc<Listeners>,
    field: Field,
}

impl Drop for Counted {
    fn drop(&mut self) {
        let counter = match &self.field {
            Field::Open(holders) => {
                let mut held = self
                    .listeners
                    .held
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                for holder in holders {
                    if let Some(n) = held.get_mut(holder) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            held.remove(holder);
                        }
                    }
                }
                &self.listeners.open
            }
            Field::Flushing => &self.listeners.flushing,
        };
        counter.fetch_sub(1, Ordering::SeqCst);
        self.listeners.idle.send_replace(());
    }
}
