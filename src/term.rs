//! A term of leadership, seen from outside: who leads ([`Leader`],
//! [`Leadership`]), the leader task's heartbeat ([`Heartbeat`]), and how a
//! term ended ([`TermReport`], with its [`StopReason`] and [`TaskStop`]).
//!
//! The constants are the timing promises a caller may build on:
//! [`STOP_SLACK`], how long before its lease could expire a term has
//! stopped its task, and [`FAIL_STOP_EXIT_CODE`], the exit code of a
//! process stopped by [`fail_stop`](crate::MutexOptions::with_fail_stop).

pub use crate::ending::{StopReason, TaskStop, TermReport};
pub use crate::engine::fail_stop::FAIL_STOP_EXIT_CODE;
pub use crate::engine::leader::Leader;
pub use crate::engine::leadership::{Heartbeat, Leadership};
pub use crate::options::STOP_SLACK;
