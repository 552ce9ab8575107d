//! The names whose guard lives in one provider (and its clones): a second
//! guard of a name waits here, as on a local lock, until the first is
//! released or dropped, whatever became of the first one's lease.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::{Mutex as Gate, OwnedMutexGuard};

/// One gate per name with a guard alive or waited for; a name's entry goes
/// when nobody holds or waits for its gate.
#[derive(Debug, Default, Clone)]
pub(crate) struct LocalNames(Arc<Mutex<HashMap<String, Arc<Gate<()>>>>>);

/// A name held in its provider, given back on drop.
#[derive(Debug)]
pub(crate) struct LocalName {
    held: Option<OwnedMutexGuard<()>>,
    name: String,
    names: LocalNames,
}

impl LocalNames {
    /// Waits until no other guard of `name` lives in this provider.
    ///
    /// Cancellation safe: a dropped wait holds nothing.
    pub(crate) async fn hold(&self, name: &str) -> LocalName {
        let gate = self.gate(name);
        let held = gate.lock_owned().await;
        self.held(name, held)
    }

    /// The name at once, or `None` while another guard of it lives here.
    pub(crate) fn try_hold(&self, name: &str) -> Option<LocalName> {
        let gate = self.gate(name);
        let held = gate.try_lock_owned().ok();
        // A gate nobody else holds or waits for goes with this attempt.
        let Some(held) = held else {
            self.forget_if_unused(name);
            return None;
        };
        Some(self.held(name, held))
    }

    fn held(&self, name: &str, held: OwnedMutexGuard<()>) -> LocalName {
        LocalName {
            held: Some(held),
            name: name.to_owned(),
            names: self.clone(),
        }
    }

    fn gate(&self, name: &str) -> Arc<Gate<()>> {
        let mut names = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        names.entry(name.to_owned()).or_default().clone()
    }

    /// Drops the entry of `name` when only the map refers to its gate.
    fn forget_if_unused(&self, name: &str) {
        let mut names = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if names
            .get(name)
            .is_some_and(|gate| Arc::strong_count(gate) == 1)
        {
            names.remove(name);
        }
    }

    /// How many names have an entry: held, or waited for.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

impl Drop for LocalName {
    fn drop(&mut self) {
        drop(self.held.take());
        self.names.forget_if_unused(&self.name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_name_is_held_once_and_its_entry_goes_with_the_last_holder() {
        let names = LocalNames::default();
        let first = names.hold("a").await;
        assert!(names.try_hold("a").is_none(), "held");
        let other = names.try_hold("b").expect("another name is free");
        let waiting = tokio::spawn({
            let names = names.clone();
            async move { names.hold("a").await }
        });
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "waits while the first lives");
        drop(first);
        let second = waiting.await.unwrap();
        drop((second, other));
        assert_eq!(names.len(), 0, "no entry left behind");
    }
}
