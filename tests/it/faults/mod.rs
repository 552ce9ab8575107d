//! Faults: the in-process matrix (scenario × mode), its multi-process half,
//! and each fault on its own (a killed, frozen or cut-off leader, slow,
//! failing or stopped storage, a foreign client, a stuck task), with the
//! fault proxy and the checkers of histories.

mod chaos_checker;
mod foreign;
mod frozen;
mod handover;
mod history;
mod kill;
mod lease_set;
#[cfg(all(feature = "testing", feature = "metrics"))]
mod matrix;
mod matrix_process;
mod network_cut;
mod proxy;
mod quorum;
mod slow_storage;
mod state;
mod storage_down;
mod stuck_task;
mod transient;
mod watchdog;
