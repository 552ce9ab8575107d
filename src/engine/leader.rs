//! Who leads, as an instance last saw it: [`Leader`], and the watch that a
//! mutex keeps of it ([`LeaderWatch`]).
//!
//! The leader fills the watch itself when its term starts and empties it
//! when the term ends. A follower fills it from its polls: while somebody
//! holds a receiver, a campaign whose acquire attempt found the lease held
//! inspects the lease, at most once per renew interval. Nobody watching,
//! nothing is sent.
//!
//! Two rules keep a follower from naming a leader whose lease is gone:
//! - a poll that finds the lease not leased empties the watch, and marks
//!   that term as ended: a lease seen leased again with the same epoch is
//!   a new holder that has not stamped its term yet, shown as nobody until
//!   it has;
//! - a value no poll has confirmed for a lease duration is dropped (storage
//!   did not answer, so the lease may have expired meanwhile).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use time::format_description::well_known::Rfc3339;
use time::OffsetDateTime;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::error::Result;
use crate::store::{LeaseInfo, LeaseState};

/// The leader of a lease, as an instance last saw it: the holder of the
/// current term, its epoch, when it began, and what it advertised.
///
/// Given by [`BlobDistributedMutex::leader`](crate::BlobDistributedMutex::leader)
/// and, per partition, by [`BlobLeaseSet::owners`](crate::BlobLeaseSet::owners).
/// It is what storage said at the last look, not a promise: the leader may
/// have stepped down since (see the guide's section on forwarding to the
/// leader for how stale it can be). Safety never rests on it: the leader's
/// own [`LeaderContext`](crate::LeaderContext) and its fencing token do.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Leader {
    /// The leader's holder name.
    pub holder: String,
    /// The epoch (fencing token) of its term.
    pub epoch: u64,
    /// When its term began, by the clock of the host that stamped it; `None`
    /// when the stamp carries no readable time.
    pub since: Option<SystemTime>,
    /// What the leader advertised with its stamp
    /// ([`MutexOptions::advertised`](crate::MutexOptions::advertised)):
    /// where to reach it, say. `None` when it advertised nothing.
    pub advertised: Option<String>,
}

impl Leader {
    /// The leader that a lease's information names: the last term's holder,
    /// while the lease is leased and the term was stamped. `None` for a
    /// lease that is free, breaking, or leased with no stamp yet.
    #[must_use]
    pub fn from_info(info: &LeaseInfo) -> Option<Leader> {
        if info.state != LeaseState::Leased || info.epoch == 0 {
            return None;
        }
        Some(Leader {
            holder: info.holder.clone()?,
            epoch: info.epoch,
            since: info.acquired_at.as_deref().and_then(parse_time),
            advertised: info.advertised.clone(),
        })
    }
}

/// An RFC 3339 time as a `SystemTime`; `None` when it does not parse.
pub(crate) fn parse_time(text: &str) -> Option<SystemTime> {
    OffsetDateTime::parse(text.trim(), &Rfc3339)
        .ok()
        .map(SystemTime::from)
}

/// A mutex's view of who leads: the watch its
/// [`leader`](crate::BlobDistributedMutex::leader) hands out, and what the
/// polls that fill it remember.
pub(crate) struct LeaderWatch {
    sender: watch::Sender<Option<Leader>>,
    me: String,
    advertised: Option<String>,
    poll: Mutex<Polls>,
}

#[derive(Debug, Default)]
struct Polls {
    /// When the last poll was sent.
    sent: Option<Instant>,
    /// When the last poll that storage answered was sent.
    confirmed: Option<Instant>,
    /// The largest epoch of a term seen to have ended: a lease leased at
    /// this epoch or below is a term not stamped yet.
    ended: u64,
}

impl LeaderWatch {
    /// The watch of a mutex whose holder is `me`, advertising `advertised`.
    pub(crate) fn new(me: &str, advertised: Option<&str>) -> Self {
        LeaderWatch {
            sender: watch::channel(None).0,
            me: me.to_owned(),
            advertised: advertised.map(str::to_owned),
            poll: Mutex::new(Polls::default()),
        }
    }

    pub(crate) fn subscribe(&self) -> watch::Receiver<Option<Leader>> {
        self.sender.subscribe()
    }

    fn polls(&self) -> std::sync::MutexGuard<'_, Polls> {
        self.poll.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// This instance's term `epoch` has started.
    pub(crate) fn leading(&self, epoch: u64) {
        self.sender.send_replace(Some(Leader {
            holder: self.me.clone(),
            epoch,
            since: Some(SystemTime::now()),
            advertised: self.advertised.clone(),
        }));
        let mut polls = self.polls();
        // The first poll after the term comes at once.
        polls.sent = None;
        polls.confirmed = None;
    }

    /// This instance's term `epoch` has ended.
    pub(crate) fn stepped_down(&self, epoch: u64) {
        let mut polls = self.polls();
        polls.ended = polls.ended.max(epoch);
        self.sender.send_replace(None);
    }

    /// The campaign has ended: nothing will keep the watch up to date, so
    /// it names nobody.
    pub(crate) fn campaign_ended(&self) {
        let mut polls = self.polls();
        polls.sent = None;
        polls.confirmed = None;
        drop(polls);
        self.show(None);
    }

    /// Whether a follower should inspect the lease now: somebody watches,
    /// and no poll was sent within `interval`.
    pub(crate) fn due(&self, now: Instant, interval: Duration) -> bool {
        self.sender.receiver_count() > 0
            && self.polls().sent.is_none_or(|sent| now >= sent + interval)
    }

    /// What a poll sent at `sent` was told.
    pub(crate) fn polled(&self, sent: Instant, answer: &Result<Option<LeaseInfo>>) {
        let mut polls = self.polls();
        polls.sent = Some(sent);
        let Ok(info) = answer else {
            return;
        };
        polls.confirmed = Some(sent);
        let seen = info.as_ref().and_then(Leader::from_info);
        let shown = match seen {
            Some(leader) if leader.epoch > polls.ended => Some(leader),
            Some(_) => None,
            None => {
                // Not leased, or leased with no stamp yet: the last term
                // this lease carries has ended.
                if let Some(info) = info.as_ref().filter(|i| i.state != LeaseState::Leased) {
                    polls.ended = polls.ended.max(info.epoch);
                }
                None
            }
        };
        drop(polls);
        self.show(shown);
    }

    /// Storage could not be asked at `now`: a value that no poll confirmed
    /// within `lease_duration` may name a leader whose lease is gone, and is
    /// dropped.
    pub(crate) fn unanswered(&self, now: Instant, lease_duration: Duration) {
        let polls = self.polls();
        let stale = polls
            .confirmed
            .is_none_or(|confirmed| now >= confirmed + lease_duration);
        drop(polls);
        let following = self
            .sender
            .borrow()
            .as_ref()
            .is_some_and(|leader| leader.holder != self.me);
        if stale && following {
            self.show(None);
        }
    }

    fn show(&self, leader: Option<Leader>) {
        self.sender.send_if_modified(|shown| {
            if *shown == leader {
                return false;
            }
            *shown = leader;
            true
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leased(holder: &str, epoch: u64, advertised: Option<&str>) -> LeaseInfo {
        let mut info = LeaseInfo::new(LeaseState::Leased);
        info.holder = Some(holder.to_owned());
        info.epoch = epoch;
        info.acquired_at = Some("2026-11-24T10:00:00Z".to_owned());
        info.advertised = advertised.map(str::to_owned);
        info
    }

    fn free(epoch: u64) -> LeaseInfo {
        let mut info = LeaseInfo::new(LeaseState::Expired);
        info.holder = Some("gone".to_owned());
        info.epoch = epoch;
        info
    }

    fn shown(watch: &LeaderWatch) -> Option<(String, u64, Option<String>)> {
        watch
            .subscribe()
            .borrow()
            .as_ref()
            .map(|l| (l.holder.clone(), l.epoch, l.advertised.clone()))
    }

    #[test]
    fn a_leased_stamped_lease_names_its_leader_and_when_it_began() {
        let info = leased("a", 3, Some("10.0.0.1:80"));
        let leader = Leader::from_info(&info).unwrap();
        assert_eq!(leader.holder, "a");
        assert_eq!(leader.epoch, 3);
        assert_eq!(leader.advertised.as_deref(), Some("10.0.0.1:80"));
        let since = leader.since.unwrap();
        let expected = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_514_400);
        assert_eq!(since, expected);
        assert_eq!(Leader::from_info(&free(3)), None);
        let mut unstamped = leased("a", 0, None);
        assert_eq!(Leader::from_info(&unstamped), None);
        unstamped.epoch = 1;
        unstamped.acquired_at = Some("yesterday".to_owned());
        assert_eq!(Leader::from_info(&unstamped).unwrap().since, None);
    }

    #[tokio::test(start_paused = true)]
    async fn nobody_watching_means_no_poll_and_a_poll_per_interval_otherwise() {
        let watch = LeaderWatch::new("me", None);
        let interval = Duration::from_secs(5);
        assert!(!watch.due(Instant::now(), interval), "nobody watches");
        let receiver = watch.subscribe();
        assert!(watch.due(Instant::now(), interval));
        watch.polled(Instant::now(), &Ok(Some(leased("a", 1, None))));
        assert!(!watch.due(Instant::now(), interval));
        tokio::time::advance(interval).await;
        assert!(watch.due(Instant::now(), interval));
        drop(receiver);
        assert!(!watch.due(Instant::now(), interval));
    }

    #[tokio::test(start_paused = true)]
    async fn a_lease_seen_free_is_never_shown_again_under_its_old_term() {
        let watch = LeaderWatch::new("me", None);
        let now = Instant::now();
        watch.polled(now, &Ok(Some(leased("a", 4, Some("a:1")))));
        assert_eq!(shown(&watch), Some(("a".into(), 4, Some("a:1".into()))));
        watch.polled(now, &Ok(Some(free(4))));
        assert_eq!(shown(&watch), None);
        // Acquired by b, not stamped yet: the metadata still says a, 4.
        watch.polled(now, &Ok(Some(leased("a", 4, Some("a:1")))));
        assert_eq!(shown(&watch), None);
        watch.polled(now, &Ok(Some(leased("b", 5, None))));
        assert_eq!(shown(&watch), Some(("b".into(), 5, None)));
        watch.polled(now, &Ok(None));
        assert_eq!(shown(&watch), None, "the blob is gone");
    }

    #[tokio::test(start_paused = true)]
    async fn a_value_storage_stopped_confirming_goes_after_a_lease_duration() {
        let watch = LeaderWatch::new("me", None);
        let lease = Duration::from_secs(15);
        watch.polled(Instant::now(), &Ok(Some(leased("a", 2, None))));
        tokio::time::advance(Duration::from_secs(10)).await;
        watch.polled(
            Instant::now(),
            &Err(crate::Error::transport("inspect", "down")),
        );
        watch.unanswered(Instant::now(), lease);
        assert_eq!(shown(&watch).map(|s| s.1), Some(2), "kept within the lease");
        tokio::time::advance(Duration::from_secs(5)).await;
        watch.unanswered(Instant::now(), lease);
        assert_eq!(shown(&watch), None);
    }

    #[tokio::test(start_paused = true)]
    async fn its_own_term_is_shown_from_start_to_end_and_then_seen_ended() {
        let watch = LeaderWatch::new("me", Some("me:9"));
        watch.leading(7);
        assert_eq!(shown(&watch), Some(("me".into(), 7, Some("me:9".into()))));
        watch.unanswered(
            Instant::now() + Duration::from_secs(60),
            Duration::from_secs(15),
        );
        assert_eq!(shown(&watch).map(|s| s.1), Some(7), "its own term stays");
        watch.stepped_down(7);
        assert_eq!(shown(&watch), None);
        watch.polled(Instant::now(), &Ok(Some(leased("b", 8, None))));
        assert_eq!(shown(&watch).map(|s| s.1), Some(8));
        watch.campaign_ended();
        assert_eq!(shown(&watch), None, "nobody keeps it up to date");
        watch.polled(Instant::now(), &Ok(Some(leased("me", 7, Some("me:9")))));
        assert_eq!(shown(&watch), None, "its own ended term, not yet restamped");
    }
}
