//! A schedule's health: the phases of a host that sleeps between slots
//! and campaigns only at one (see [`BlobSchedule::health`]).

use std::sync::Arc;

use tokio::sync::watch;

use super::{mutex_part, quiet_limit, Health, Role};
use crate::engine::leadership::Leadership;
use crate::engine::vitals::{Snapshot, Vitals};
use crate::fleet::{BlobSchedule, Phase};
use crate::options::MutexOptions;
use crate::store::LeaseStore;

impl Health {
    /// The health of a schedule in `phase`, whose slots are terms of a
    /// mutex in `state`.
    fn of_schedule(
        vitals: Arc<Vitals>,
        phase: watch::Receiver<Phase>,
        state: watch::Receiver<Leadership>,
        options: &MutexOptions,
    ) -> Self {
        Health {
            vitals,
            role: Role::Schedule(phase, state),
            quiet_limit: quiet_limit(options),
            guard_grace: options.stop_grace,
        }
    }
}

/// A schedule's part, from its phase and the state of the mutex that runs
/// its slots: ready while it runs, whether it waits for a slot or holds
/// the lease at one; for the leader only while it holds the lease (running
/// the slot due, or recording what became of the slots).
pub(super) fn part(
    phase: Phase,
    state: &Leadership,
    vitals: &Snapshot,
    leader_only: bool,
) -> Result<String, String> {
    match (phase, state) {
        (Phase::Stopped, _) => Err("not running the schedule".to_owned()),
        (Phase::Blocked(holder), _) => Err(format!(
            "a slot is due and the lease is held by {holder}, which is not one of the schedule's hosts: no slot can run"
        )),
        (Phase::Awake, Leadership::Leader { .. }) => mutex_part(state, vitals, leader_only),
        (Phase::Waiting(Some(at)), _) if leader_only => {
            Err(format!("not the leader: waiting for the slot at {at}"))
        }
        _ if leader_only => Err("not the leader".to_owned()),
        (Phase::Waiting(Some(at)), _) => Ok(format!("ready: waiting for the slot at {at}")),
        (Phase::Waiting(None), _) => Ok("ready: no slot comes again".to_owned()),
        (Phase::Awake, _) => Ok("ready: at a slot, not the leader".to_owned()),
    }
}

impl<S: LeaseStore + Clone + 'static> BlobSchedule<S> {
    /// Whether this host's schedule is live and ready, for an
    /// orchestrator's probes (see [`Health`]): read from its looks at the
    /// record and from the terms that run its slots, at no request.
    ///
    /// - Ready while [`run`](Self::run) runs and storage answers: `ready:
    ///   waiting for the slot at T` between slots (T on storage's clock),
    ///   `ready: leader of term N` while this host holds the lease at a
    ///   slot (running the slot's job, or recording the slots missed),
    ///   `ready: at a slot, not the leader` while it reads the record or
    ///   campaigns at a slot another host runs. Storage's answers are those to the
    ///   looks (one at each slot, and after a failed one within 1 to 30 s)
    ///   and to the slot's campaign: a host that sleeps until a slot hears
    ///   nothing meanwhile, and stays ready.
    /// - [`ready_to_lead`](Health::ready_to_lead) passes only while this
    ///   host holds the lease at a slot.
    /// - Live by the mutex's rules, which apply to the terms of the slots
    ///   (a term past its deadline, a task that could not be stopped); the
    ///   bound on a quiet campaign counts only while a slot's campaign
    ///   runs, never during the sleep between slots, however long.
    #[must_use]
    pub fn health(&self) -> Health {
        let mutex = self.mutex();
        Health::of_schedule(mutex.vitals(), self.phase(), mutex.watch(), mutex.options())
    }
}
