//! The command's tests, in one binary: `blob-mutex` driven as a separate
//! process, against Azurite (`support` starts it as an operator would; the
//! kit of every package's tests is the crate `blob_mutex_testkit`), and
//! the chaos runs, which run it among their workers. nextest runs each test
//! in a process of its own, named by its module path (`once::…`).

mod chaos;
mod cli;
mod entra;
mod env;
mod guide;
mod health;
mod least_privilege;
mod logs;
mod lost_lease;
mod manual;
mod metrics;
mod once;
mod probes;
mod quorum;
mod schedule;
mod state;
mod support;
mod transport;
