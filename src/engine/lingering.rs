//! Tasks of ended terms that may still run: a task that could be neither
//! stopped nor aborted, or the tasks of a term whose future was dropped
//! (aborted, but not yet seen to end). While one may run, nothing is claimed
//! again by the mutex or the lease set that owned it: a second leader task
//! beside a stuck one, in the same process, would be two leaders.

use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::Duration;

use tokio_util::task::TaskTracker;

use crate::error::{Error, Result};

/// The tasks of earlier terms that had not ended when their term was over.
#[derive(Debug, Default)]
pub(crate) struct Lingering(Mutex<Vec<TaskTracker>>);

impl Lingering {
    fn lock(&self) -> MutexGuard<'_, Vec<TaskTracker>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Keeps `tasks` (closed, so that waiting for them ends once they have
    /// all ended) until they have ended.
    pub(crate) fn add(&self, tasks: TaskTracker) {
        tasks.close();
        let mut lingering = self.lock();
        lingering.retain(|t| !t.is_empty());
        if !tasks.is_empty() {
            lingering.push(tasks);
        }
    }

    /// Waits up to `limit` for every lingering task to end (an aborted task
    /// ends at its next await); [`Error::TaskNotStopped`] if one still runs
    /// then.
    pub(crate) async fn settle(&self, limit: Duration) -> Result<()> {
        let waiting: Vec<TaskTracker> = {
            let mut lingering = self.lock();
            lingering.retain(|t| !t.is_empty());
            lingering.clone()
        };
        if waiting.is_empty() {
            return Ok(());
        }
        let all = async {
            for tasks in &waiting {
                tasks.wait().await;
            }
        };
        tokio::time::timeout(limit, all)
            .await
            .map_err(|_| Error::TaskNotStopped)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn nothing_lingering_settles_at_once() {
        Lingering::default().settle(Duration::ZERO).await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_that_ends_within_the_limit_settles() {
        let tracker = TaskTracker::new();
        tracker.spawn(tokio::time::sleep(Duration::from_millis(50)));
        let lingering = Lingering::default();
        lingering.add(tracker);
        lingering.settle(Duration::from_millis(100)).await.unwrap();
        // Ended ones are forgotten.
        assert!(lingering.lock().iter().all(TaskTracker::is_empty));
    }

    #[tokio::test(start_paused = true)]
    async fn a_task_still_running_after_the_limit_refuses() {
        let tracker = TaskTracker::new();
        tracker.spawn(std::future::pending::<()>());
        let lingering = Lingering::default();
        lingering.add(tracker);
        let err = lingering
            .settle(Duration::from_millis(100))
            .await
            .unwrap_err();
        assert!(matches!(err, Error::TaskNotStopped), "{err:?}");
    }
}
