//! What the tests of this binary share beyond the kit: one store that
//! forwards to another, with the calls a test changes overridden
//! (`forward`); the lines a subscriber wrote (`lines`); the faulty stores, the cells and the promises of the
//! in-process fault matrix.
// Each test module uses a part of it.
#![allow(dead_code, unreachable_pub)]

#[cfg(feature = "testing")]
pub mod faulty;
pub mod forward;
pub mod lines;
#[cfg(all(feature = "testing", feature = "metrics"))]
pub mod matrix;
#[cfg(feature = "testing")]
pub mod plan;
#[cfg(all(feature = "testing", feature = "metrics"))]
pub mod promises;

/// The name libtest and nextest know a test of this binary by, for a test
/// that runs itself again in a child process: the path of its module
/// (`module_path!()`, less the crate's name) and the test's own name.
pub fn test_path(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_crate, module)) => format!("{module}::{test}"),
        None => test.to_owned(),
    }
}
