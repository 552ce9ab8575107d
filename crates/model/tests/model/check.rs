//! Runs the checker on a configuration and reads its answer: the figures,
//! whether every reachable state was explored, and counterexamples as
//! readable traces.

use std::time::{Duration, Instant};

use std::fmt::Debug;
use std::hash::Hash;

use stateright::{Checker, HasDiscoveries, Model, Path, Representative};

/// A model whose steps say what happened, for readable traces.
pub(crate) trait Traced:
    Model<
        State: Representative + Hash + Debug + Clone + Eq + Send + Sync + 'static,
        Action: Debug + Clone + Eq + Hash + Send + Sync + 'static,
    > + Clone
    + Send
    + Sync
    + 'static
{
    /// Applies `action`, and says what happened.
    fn apply(&self, state: &Self::State, action: Self::Action) -> Option<(Self::State, String)>;
    /// The tick of `state`.
    fn tick(state: &Self::State) -> u8;
    /// Whether a step is worth a line of the trace (the ticks in which
    /// nothing was written are left out).
    fn shown(action: &Self::Action, log: &str) -> bool;
}

/// A property that failed, and the path to the state where it did.
type Failure<M> = (
    &'static str,
    Path<<M as Model>::State, <M as Model>::Action>,
);

/// What one run of the checker found.
pub(crate) struct Report<M: Traced> {
    model: M,
    /// States visited, and the distinct ones among them.
    pub(crate) states: usize,
    pub(crate) unique: usize,
    pub(crate) elapsed: Duration,
    /// Every reachable state was explored.
    pub(crate) done: bool,
    failures: Vec<Failure<M>>,
    examples: Vec<&'static str>,
}

/// Explores every reachable state of `model` breadth first on two threads,
/// and stops at the first counterexample: with `until`, once that property
/// fails; without, once any property that must always hold fails (a defect
/// may make the states endless, as a host that takes term after term at
/// one instant does, each at a new epoch, and its counterexample is what
/// the test reports).
pub(crate) fn check<M: Traced>(model: M, until: Option<&'static str>) -> Report<M> {
    let start = Instant::now();
    let stop = until.map_or(HasDiscoveries::AnyFailures, |property| {
        HasDiscoveries::AnyOf([property].into())
    });
    let builder = model
        .clone()
        .checker()
        .threads(2)
        .symmetry()
        .finish_when(stop);
    let checker = builder.spawn_bfs().join();
    let mut failures = Vec::new();
    let mut examples = Vec::new();
    for property in model.properties() {
        let Some(path) = checker.discovery(property.name) else {
            continue;
        };
        if property.expectation.discovery_is_failure() {
            failures.push((property.name, path));
        } else {
            examples.push(property.name);
        }
    }
    Report {
        states: checker.state_count(),
        unique: checker.unique_state_count(),
        elapsed: start.elapsed(),
        done: checker.is_done(),
        failures,
        examples,
        model,
    }
}

impl<M: Traced> Report<M> {
    /// Prints the figures (run with `--nocapture` to see them).
    pub(crate) fn print(&self, name: &str) {
        println!(
            "{name}: {} states ({} distinct) in {:.1} s, {}",
            self.states,
            self.unique,
            self.elapsed.as_secs_f64(),
            if !self.failures.is_empty() {
                "stopped at a counterexample"
            } else if self.done {
                "every reachable state explored"
            } else {
                "NOT complete"
            }
        );
    }

    /// No property failed, every reachable state was explored, and the
    /// examples (a leader at all, an owner at all) were found.
    pub(crate) fn assert_complete_and_safe(&self) {
        for (name, path) in &self.failures {
            println!("{name} fails:");
            for line in trace(&self.model, path) {
                println!("  {line}");
            }
        }
        assert!(
            self.failures.is_empty(),
            "properties failed: {:?}",
            self.failures.iter().map(|(n, _)| n).collect::<Vec<_>>()
        );
        assert!(self.done, "the checker did not explore every state");
        let expected = self
            .model
            .properties()
            .iter()
            .filter(|p| !p.expectation.discovery_is_failure())
            .count();
        assert_eq!(
            self.examples.len(),
            expected,
            "an example was not found (found: {:?}): the model is vacuous",
            self.examples
        );
    }

    /// The counterexample to `property`, which must have been found.
    pub(crate) fn found(self, property: &str) -> Found {
        let found: Vec<&str> = self.failures.iter().map(|(n, _)| *n).collect();
        let Some((_, path)) = self.failures.iter().find(|(name, _)| *name == property) else {
            panic!("{property} not found (found: {found:?})");
        };
        Found {
            property: property.to_owned(),
            trace: trace(&self.model, path),
            states: self.unique,
            elapsed: self.elapsed,
        }
    }
}

/// A counterexample.
pub(crate) struct Found {
    pub(crate) property: String,
    /// What happened, one step a line.
    pub(crate) trace: Vec<String>,
    /// Distinct states explored before it was found.
    pub(crate) states: usize,
    pub(crate) elapsed: Duration,
}

impl Found {
    /// Prints the counterexample.
    pub(crate) fn print(&self, name: &str) {
        println!(
            "{name}: \"{}\" fails after {} steps ({} states, {:.1} s):",
            self.property,
            self.trace.len(),
            self.states,
            self.elapsed.as_secs_f64()
        );
        for line in &self.trace {
            println!("  {line}");
        }
    }
}

/// The steps of `path`, each as what happened at which tick (the ticks are
/// left out, but for the writes of the leaders' work at their end).
fn trace<M: Traced>(model: &M, path: &Path<M::State, M::Action>) -> Vec<String> {
    let mut lines = Vec::new();
    for (state, action) in path.clone().into_vec() {
        let Some(action) = action else { continue };
        let Some((_, log)) = model.apply(&state, action.clone()) else {
            continue;
        };
        if !M::shown(&action, &log) {
            continue;
        }
        lines.push(format!("t={}: {log}", M::tick(&state)));
    }
    lines
}
