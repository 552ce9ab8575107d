//! The library's integration tests, in one binary: a module per topic, with
//! the helpers they share in `support` (the kit of every package's tests is
//! the crate `blob_mutex_testkit`, named as such). nextest runs each test in
//! a process of its own, named by its module path (`faults::kill::…`).
//! A test that needs a feature is compiled only with it: the `#[cfg]` on its
//! module says which.

mod docs;
mod examples;
mod faults;
#[cfg(feature = "testing")]
mod handover;
mod lease_set;
#[cfg(all(
    feature = "testing",
    feature = "official",
    feature = "sdk-v021",
    feature = "azure_identity",
    feature = "schedule"
))]
mod public_api;
#[cfg(feature = "testing")]
mod quorum;
mod shapes;
#[cfg(all(feature = "testing", feature = "metrics"))]
mod simulation;
mod store;
mod support;
