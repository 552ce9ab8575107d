//! The shapes users hold: the mutex's elections, who leads, the guard, locks
//! by name, run once and its completion records, sub-tasks, a dropped
//! campaign, the spans their logs are written in, and a fleet's schedule
//! over a simulated month.

#[cfg(feature = "testing")]
mod completion_records;
mod dropped_campaign;
#[cfg(all(feature = "testing", feature = "metrics"))]
mod dropped_campaign_reported;
mod election;
#[cfg(feature = "testing")]
mod guard;
mod guard_azurite;
mod guard_ends;
#[cfg(feature = "testing")]
mod leader;
mod leader_azurite;
#[cfg(feature = "testing")]
mod locks;
mod locks_azurite;
#[cfg(feature = "testing")]
mod log_spans;
#[cfg(feature = "testing")]
mod run_once;
#[cfg(all(feature = "testing", feature = "schedule"))]
mod schedule_month;
mod sub_tasks;
