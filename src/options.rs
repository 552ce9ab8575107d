//! Timing and behaviour options of the election, with their defaults and validation.

use std::time::Duration;

use crate::bounded::DEFAULT_REQUEST_TIMEOUT;
use crate::error::{Error, Result};
use crate::limits::{check_advertised, lease_seconds};

/// Timing and behaviour of a [`BlobDistributedMutex`](crate::BlobDistributedMutex).
///
/// Each option has a getter named for it, which says its default, and a
/// `with_*` setter. [`MutexOptions::validate`] runs when a mutex is made and
/// refuses a combination that could let two leaders overlap, naming the field.
///
/// # The deadline
///
/// A leader's *deadline* is the instant its last successful acquire or renew
/// request was sent, plus `lease_duration`, minus the effective safety margin
/// (`safety_margin + lease_duration × clock_drift`). The server cannot let the
/// lease expire before then. The leader task and its sub-tasks are cancelled
/// at `deadline − stop_grace − STOP_SLACK` at the latest and aborted at
/// `deadline − STOP_SLACK` at the latest, whatever ended the term and
/// whatever the network does ([`STOP_SLACK`] is 0.45 s: time for an abort to
/// take effect and for a fail-stop exit). A process that wakes up after its
/// deadline (it was frozen) stops its tasks at once, with no grace.
#[derive(Debug, Clone)]
pub struct MutexOptions {
    pub(crate) lease_duration: Duration,
    pub(crate) renew_interval: Option<Duration>,
    pub(crate) acquire_retry: Duration,
    pub(crate) acquire_jitter: f64,
    pub(crate) safety_margin: Duration,
    pub(crate) clock_drift: f64,
    pub(crate) request_timeout: Duration,
    pub(crate) stop_grace: Duration,
    pub(crate) failure_backoff: Duration,
    pub(crate) heartbeat_timeout: Option<Duration>,
    pub(crate) fail_stop: bool,
    pub(crate) holder: Option<String>,
    pub(crate) jitter_seed: Option<u64>,
    pub(crate) acquire_timeout: Option<Duration>,
    pub(crate) first_contact_timeout: Option<Duration>,
    pub(crate) priority: Option<i64>,
    pub(crate) advertised: Option<String>,
}

impl Default for MutexOptions {
    fn default() -> Self {
        MutexOptions {
            lease_duration: Duration::from_secs(15),
            renew_interval: None,
            acquire_retry: Duration::from_secs(1),
            acquire_jitter: 0.2,
            safety_margin: Duration::from_secs(1),
            clock_drift: 0.01,
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            stop_grace: Duration::from_secs(3),
            failure_backoff: Duration::from_secs(5),
            heartbeat_timeout: None,
            fail_stop: false,
            holder: None,
            jitter_seed: None,
            acquire_timeout: None,
            first_contact_timeout: Some(DEFAULT_FIRST_CONTACT_TIMEOUT),
            priority: None,
            advertised: None,
        }
    }
}

macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident: $field:ident: $ty:ty = $value:expr;)*) => {
        $(
            $(#[$doc])*
            #[must_use = "options are built by value; use the returned options"]
            pub fn $name(mut self, value: $ty) -> Self {
                self.$field = $value(value);
                self
            }
        )*
    };
}

impl MutexOptions {
    /// How long each lease lasts on the server, in whole seconds from 15 to 60.
    /// Default: 15 s.
    #[must_use]
    pub fn lease_duration(&self) -> Duration {
        self.lease_duration
    }

    /// How often the leader renews. Default: `None`, which means a third of
    /// `lease_duration` (5 s for the default lease).
    #[must_use]
    pub fn renew_interval(&self) -> Option<Duration> {
        self.renew_interval
    }

    /// How long a follower waits between attempts to acquire a lease someone
    /// else holds (before jitter). After a term that did not fail, the
    /// instance waits one whole retry period, `acquire_retry × (1 +
    /// acquire_jitter)`, before it campaigns again, so that a waiting
    /// follower gets its turn first. Default: 1 s.
    #[must_use]
    pub fn acquire_retry(&self) -> Duration {
        self.acquire_retry
    }

    /// The jitter applied to every wait, as a fraction: each wait is drawn
    /// uniformly from `wait × (1 ± acquire_jitter)`. From 0 to 0.9. Default: 0.2.
    #[must_use]
    pub fn acquire_jitter(&self) -> f64 {
        self.acquire_jitter
    }

    /// Time kept in hand between the leader's deadline and the earliest
    /// instant the server could expire the lease. Default: 1 s.
    #[must_use]
    pub fn safety_margin(&self) -> Duration {
        self.safety_margin
    }

    /// The largest rate by which this host's monotonic clock may run slower
    /// than the storage server's, as a fraction; the safety margin grows by
    /// `lease_duration × clock_drift`. From 0 to 0.1. Default: 0.01 (1 %).
    #[must_use]
    pub fn clock_drift(&self) -> f64 {
        self.clock_drift
    }

    /// The longest any single storage request may take. Requests made while
    /// leading are also cut at the deadline. A term's stamp may take 3 s
    /// more when it makes the lease's record anew (a new blob, or one whose
    /// record was lost): the record's first epoch waits one to two seconds
    /// for storage's clock. Default: 3 s.
    #[must_use]
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// How long a cancelled leader task (and its sub-tasks) may take to
    /// finish before it is aborted. The whole grace is given, except when the
    /// deadline is closer. For a [`MutexGuard`](crate::MutexGuard), whose
    /// holder the crate cannot abort: how long the lease is still renewed
    /// while the term waits for the guard's release (it then waits, without
    /// renewing, until shortly before the deadline). Default: 3 s.
    #[must_use]
    pub fn stop_grace(&self) -> Duration {
        self.stop_grace
    }

    /// How long to wait before campaigning again after the leader task
    /// failed, panicked or missed its heartbeat (before jitter). A guard
    /// leads one term and is not affected. Default: 5 s.
    #[must_use]
    pub fn failure_backoff(&self) -> Duration {
        self.failure_backoff
    }

    /// If set, the leader task must call [`Heartbeat::beat`](crate::term::Heartbeat::beat)
    /// at least this often; when it does not, the mutex stops renewing,
    /// cancels the task and steps down. Default: `None` (no watchdog).
    #[must_use]
    pub fn heartbeat_timeout(&self) -> Option<Duration> {
        self.heartbeat_timeout
    }

    /// Exit the process (code [`FAIL_STOP_EXIT_CODE`](crate::term::FAIL_STOP_EXIT_CODE))
    /// when a leader task can neither be stopped nor aborted, before the lease
    /// could expire. Default: `false`, which returns
    /// [`Error::TaskNotStopped`] instead. For a
    /// [`MutexGuard`](crate::MutexGuard): exit when a term that had to end
    /// was not released before the lease could expire (without it, the
    /// lease is left to expire: see the guard's docs).
    #[must_use]
    pub fn fail_stop(&self) -> bool {
        self.fail_stop
    }

    /// This instance's name, written to the blob's `holder` metadata and given
    /// to the leader task. Printable ASCII, 1 to 256 characters.
    /// Default: `None`, which means `<hostname>-<process id>`.
    #[must_use]
    pub fn holder(&self) -> Option<&str> {
        self.holder.as_deref()
    }

    /// Seed for the jitter's random numbers, for reproducible tests.
    /// Default: `None` (seeded from the operating system).
    #[must_use]
    pub fn jitter_seed(&self) -> Option<u64> {
        self.jitter_seed
    }

    /// Give up when this instance has not become leader within this time of
    /// the campaign's start: [`run_task_when_mutex_acquired`](crate::BlobDistributedMutex::run_task_when_mutex_acquired)
    /// returns [`Error::NotAcquired`] when the lease was held by another
    /// instance, or the error of the last attempt when that attempt failed.
    /// At least one complete attempt is made (`Duration::ZERO` makes exactly
    /// one); an attempt is made at the limit itself. Only the first term is
    /// bounded: once it has led, the campaign goes on. Default: `None` (wait
    /// as long as it takes).
    #[must_use]
    pub fn acquire_timeout(&self) -> Option<Duration> {
        self.acquire_timeout
    }

    /// How long a campaign retries before it gives up with
    /// [`Error::FirstContactFailed`] while storage has never answered this
    /// mutex: no acquire attempt has had an answer (the lease acquired, or
    /// held by another instance) since the mutex was made. Before that, a
    /// failure is a setting to fix until proven otherwise (a host that does
    /// not resolve, a credential that cannot get a token, a permission
    /// storage refuses), and a process that retried it for ever would look
    /// healthy and never lead. Once storage has answered, an outage is
    /// retried for as long as it lasts. Counted from the start of each
    /// campaign ([`run_task_when_mutex_acquired`](crate::BlobDistributedMutex::run_task_when_mutex_acquired)),
    /// for a [`BlobLeaseSet`](crate::BlobLeaseSet) from the start of each
    /// `run` on its member lease. At least one complete attempt is made
    /// (`Duration::ZERO` makes exactly one). Default: 30 s; `None` retries
    /// for ever, as a process that must wait out an outage at its start
    /// needs.
    #[must_use]
    pub fn first_contact_timeout(&self) -> Option<Duration> {
        self.first_contact_timeout
    }

    /// This instance's priority as a preferred successor; any integer.
    /// With a priority set, the instance takes part in planned handovers:
    /// while it waits for the lease it advertises itself as a candidate
    /// beside the lease (holder, priority and the lease id its acquire
    /// attempts propose, on a record the store times out when the instance
    /// dies), and while it leads it lists the candidates once per renew
    /// interval. A leader that sees a live candidate with a strictly higher
    /// priority stops its term ([`StopReason::Handover`](crate::term::StopReason::Handover):
    /// cancel, grace, abort, as for any stop) and then changes the lease to
    /// the candidate's proposed id (Change Lease) instead of releasing it,
    /// so that no third instance can take it in between. Equal priorities
    /// never hand over.
    ///
    /// Default: `None`: the instance takes no part, sends exactly the
    /// requests it sent without the option, and is never handed over to.
    /// Every instance of a service that uses priorities should set one (for
    /// a rolling upgrade: the old version 0, the new one 1). The store must
    /// support candidates ([`LeaseStore::supports_candidates`](crate::store::LeaseStore::supports_candidates));
    /// otherwise making the mutex fails with [`Error::Unsupported`].
    /// A [`BlobLeaseSet`](crate::BlobLeaseSet)'s partitions ignore it. A
    /// [`MutexGuard`](crate::MutexGuard) is handed over only once its
    /// holder released it.
    #[must_use]
    pub fn priority(&self) -> Option<i64> {
        self.priority
    }

    /// What this instance tells the others of itself while it leads: an
    /// address at which it takes requests, say (`10.0.0.7:8080`,
    /// `https://worker-3.internal`), or any short string. Written with the
    /// holder and epoch at each term's stamp, in the same request, and read
    /// back by every follower's [`leader`](crate::BlobDistributedMutex::leader)
    /// watch, by a lease set's [`owners`](crate::BlobLeaseSet::owners) and
    /// by `blob-mutex status`. Printable ASCII, 1 to
    /// [`MAX_ADVERTISED_LEN`](crate::store::MAX_ADVERTISED_LEN) (256) bytes, no
    /// space at either end. The store must support it
    /// ([`LeaseStore::supports_advertised`](crate::store::LeaseStore::supports_advertised));
    /// otherwise making the mutex fails with [`Error::Unsupported`].
    /// Default: `None`: the stamp carries nothing more, and removes what an
    /// earlier term advertised.
    #[must_use]
    pub fn advertised(&self) -> Option<&str> {
        self.advertised.as_deref()
    }

    setters! {
        /// Sets [`lease_duration`](Self::lease_duration).
        with_lease_duration: lease_duration: Duration = std::convert::identity;
        /// Sets [`renew_interval`](Self::renew_interval).
        with_renew_interval: renew_interval: Duration = Some;
        /// Sets [`acquire_retry`](Self::acquire_retry).
        with_acquire_retry: acquire_retry: Duration = std::convert::identity;
        /// Sets [`acquire_jitter`](Self::acquire_jitter).
        with_acquire_jitter: acquire_jitter: f64 = std::convert::identity;
        /// Sets [`safety_margin`](Self::safety_margin).
        with_safety_margin: safety_margin: Duration = std::convert::identity;
        /// Sets [`clock_drift`](Self::clock_drift).
        with_clock_drift: clock_drift: f64 = std::convert::identity;
        /// Sets [`request_timeout`](Self::request_timeout).
        with_request_timeout: request_timeout: Duration = std::convert::identity;
        /// Sets [`stop_grace`](Self::stop_grace).
        with_stop_grace: stop_grace: Duration = std::convert::identity;
        /// Sets [`failure_backoff`](Self::failure_backoff).
        with_failure_backoff: failure_backoff: Duration = std::convert::identity;
        /// Sets [`heartbeat_timeout`](Self::heartbeat_timeout).
        with_heartbeat_timeout: heartbeat_timeout: Duration = Some;
        /// Sets [`fail_stop`](Self::fail_stop).
        with_fail_stop: fail_stop: bool = std::convert::identity;
        /// Sets [`holder`](Self::holder).
        with_holder: holder: String = Some;
        /// Sets [`jitter_seed`](Self::jitter_seed).
        with_jitter_seed: jitter_seed: u64 = Some;
        /// Sets [`acquire_timeout`](Self::acquire_timeout).
        with_acquire_timeout: acquire_timeout: Duration = Some;
        /// Sets [`first_contact_timeout`](Self::first_contact_timeout);
        /// `None` retries for ever.
        with_first_contact_timeout: first_contact_timeout: Option<Duration> = std::convert::identity;
        /// Sets [`priority`](Self::priority).
        with_priority: priority: i64 = Some;
        /// Sets [`advertised`](Self::advertised).
        with_advertised: advertised: String = Some;
    }

    /// The renew interval in force: [`renew_interval`](Self::renew_interval),
    /// or a third of the lease duration.
    #[must_use]
    pub fn effective_renew_interval(&self) -> Duration {
        self.renew_interval.unwrap_or(self.lease_duration / 3)
    }

    /// The margin in force: `safety_margin + lease_duration × clock_drift`.
    #[must_use]
    pub fn effective_safety_margin(&self) -> Duration {
        // Saturating: `validate` refuses what this would saturate, and no
        // option value may panic before it is refused.
        let drift = self.clock_drift.clamp(0.0, 1.0);
        let drift = if drift.is_nan() { 1.0 } else { drift };
        self.safety_margin
            .saturating_add(self.lease_duration.mul_f64(drift))
    }

    /// Checks every option and their combination.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming the first field that is out of range:
    /// a lease duration that is not a whole number of seconds from 15 to 60,
    /// a zero duration or one over an hour, a jitter or drift out of range,
    /// an invalid holder, or a renew interval so long that
    /// `renew_interval + stop_grace + ` [`STOP_SLACK`] does not fit in
    /// `lease_duration − effective safety margin`. That inequality is what
    /// lets a task that stops renewing be cancelled, given its whole grace,
    /// aborted, and (with `fail_stop`) the process exit, all before the
    /// deadline.
    pub fn validate(&self) -> Result<()> {
        let lease = self.lease_duration;
        lease_seconds(lease)?;
        for (field, value) in [
            ("acquire_retry", Some(self.acquire_retry)),
            ("safety_margin", Some(self.safety_margin)),
            ("request_timeout", Some(self.request_timeout)),
            ("stop_grace", Some(self.stop_grace)),
            ("failure_backoff", Some(self.failure_backoff)),
            ("renew_interval", self.renew_interval),
            ("heartbeat_timeout", self.heartbeat_timeout),
            ("acquire_timeout", self.acquire_timeout),
            ("first_contact_timeout", self.first_contact_timeout),
        ] {
            let Some(value) = value else { continue };
            if value.is_zero() && !matches!(field, "acquire_timeout" | "first_contact_timeout") {
                return Err(Error::invalid(field, "must be greater than zero"));
            }
            if value > MAX_DURATION {
                return Err(Error::invalid(
                    field,
                    format!("must be at most {MAX_DURATION:?}, got {value:?}"),
                ));
            }
        }
        if self.acquire_retry > Duration::from_secs(300) {
            return Err(Error::invalid("acquire_retry", "must be at most 300 s"));
        }
        if !(0.0..=0.9).contains(&self.acquire_jitter) {
            return Err(Error::invalid(
                "acquire_jitter",
                format!(
                    "must be a fraction from 0 to 0.9, got {}",
                    self.acquire_jitter
                ),
            ));
        }
        if !(0.0..=0.1).contains(&self.clock_drift) {
            return Err(Error::invalid(
                "clock_drift",
                format!("must be a fraction from 0 to 0.1, got {}", self.clock_drift),
            ));
        }
        let margin = self.effective_safety_margin();
        let usable = lease.checked_sub(margin).unwrap_or_default();
        if usable < Duration::from_secs(1) {
            return Err(Error::invalid(
                "safety_margin",
                format!(
                    "leaves less than 1 s of the {lease:?} lease (effective margin {margin:?})"
                ),
            ));
        }
        let renew = self.effective_renew_interval();
        if renew + self.stop_grace + STOP_SLACK >= usable {
            return Err(Error::invalid(
                "renew_interval",
                format!(
                    "renew_interval ({renew:?}) + stop_grace ({:?}) + {STOP_SLACK:?} for the \
                     abort and fail-stop must be shorter than lease_duration - effective \
                     safety margin ({usable:?})",
                    self.stop_grace
                ),
            ));
        }
        if let Some(holder) = &self.holder {
            validate_holder(holder)?;
        }
        if let Some(advertised) = &self.advertised {
            check_advertised(advertised)?;
        }
        Ok(())
    }

    /// The pause before campaigning again after a term that did not fail:
    /// one whole follower retry period (`acquire_retry × (1 + acquire_jitter)`),
    /// so that a follower polling at `acquire_retry` gets its turn first.
    pub(crate) fn pause_after_term(&self) -> Duration {
        self.acquire_retry.mul_f64(1.0 + self.acquire_jitter)
    }
}

/// The default [`MutexOptions::first_contact_timeout`]: 30 s.
pub(crate) const DEFAULT_FIRST_CONTACT_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest value any duration option may take.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(3600);

/// How long an aborted task may take to unwind before it counts as stuck.
pub(crate) const ABORT_WAIT: Duration = Duration::from_millis(250);

/// How long before the deadline the fail-stop watcher exits the process.
pub(crate) const FAIL_STOP_SLACK: Duration = Duration::from_millis(200);

/// How long before the term's tasks would be aborted the crate's own
/// requests in them (a schedule's or run-once's record) give up, so that
/// the task returns by itself and says what it left undone.
pub(crate) const OWN_STOP: Duration = Duration::from_millis(200);

/// The time the stop sequence needs before the deadline on top of
/// `stop_grace`: the abort's wait, and the fail-stop exit's slack.
pub const STOP_SLACK: Duration = ABORT_WAIT.saturating_add(FAIL_STOP_SLACK);

/// A holder name is stored as blob metadata, so it must be a valid HTTP
/// header value: printable ASCII.
pub(crate) fn validate_holder(holder: &str) -> Result<()> {
    if holder.is_empty() || holder.len() > 256 {
        return Err(Error::invalid("holder", "must be 1 to 256 characters long"));
    }
    if !holder.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(Error::invalid("holder", "must be printable ASCII"));
    }
    Ok(())
}

/// The default holder name: `<hostname>-<pid>-<suffix>`, the suffix six
/// random hexadecimal digits drawn once per process. The process id alone
/// does not tell processes apart where each runs in a PID namespace of its
/// own (every container's first process is 1), and a host's containers
/// often share its name (`--network host`); candidate records and handovers
/// are keyed by the holder.
pub(crate) fn default_holder() -> String {
    static SUFFIX: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    let suffix = SUFFIX.get_or_init(|| uuid::Uuid::new_v4().simple().to_string()[..6].to_owned());
    let host = std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/proc/sys/kernel/hostname").ok())
        .or_else(|| std::env::var("COMPUTERNAME").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty() && h.bytes().all(|b| (0x21..0x7f).contains(&b)))
        .unwrap_or_else(|| "host".to_owned());
    format!("{host}-{}-{suffix}", std::process::id())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field_of(options: &MutexOptions) -> &'static str {
        match options.validate() {
            Err(Error::InvalidOption { field, .. }) => field,
            other => panic!("expected InvalidOption, got {other:?}"),
        }
    }

    #[test]
    fn defaults_are_valid_and_documented_values() {
        let o = MutexOptions::default();
        o.validate().unwrap();
        assert_eq!(o.lease_duration, Duration::from_secs(15));
        assert_eq!(o.effective_renew_interval(), Duration::from_secs(5));
        assert_eq!(o.acquire_retry, Duration::from_secs(1));
        assert!((o.acquire_jitter - 0.2).abs() < f64::EPSILON);
        assert_eq!(o.effective_safety_margin(), Duration::from_millis(1150));
    }

    #[test]
    fn each_invalid_option_is_rejected_by_name() {
        let d = MutexOptions::default;
        let s = Duration::from_secs;
        let cases: Vec<(MutexOptions, &str)> = vec![
            (d().with_lease_duration(s(14)), "lease_duration"),
            (d().with_lease_duration(s(61)), "lease_duration"),
            (d().with_lease_duration(s(300)), "lease_duration"),
            (
                d().with_lease_duration(Duration::from_millis(15_500)),
                "lease_duration",
            ),
            (d().with_lease_duration(Duration::ZERO), "lease_duration"),
            (d().with_renew_interval(Duration::ZERO), "renew_interval"),
            (d().with_renew_interval(s(14)), "renew_interval"),
            (d().with_renew_interval(s(11)), "renew_interval"),
            (d().with_acquire_retry(Duration::ZERO), "acquire_retry"),
            (d().with_acquire_retry(s(301)), "acquire_retry"),
            (d().with_acquire_jitter(-0.1), "acquire_jitter"),
            (d().with_acquire_jitter(0.95), "acquire_jitter"),
            (d().with_acquire_jitter(f64::NAN), "acquire_jitter"),
            (d().with_safety_margin(Duration::ZERO), "safety_margin"),
            (d().with_safety_margin(s(15)), "safety_margin"),
            (d().with_clock_drift(-0.01), "clock_drift"),
            (d().with_clock_drift(0.5), "clock_drift"),
            (d().with_request_timeout(Duration::ZERO), "request_timeout"),
            (d().with_stop_grace(Duration::ZERO), "stop_grace"),
            (d().with_stop_grace(s(9)), "renew_interval"),
            (d().with_failure_backoff(Duration::ZERO), "failure_backoff"),
            (
                d().with_heartbeat_timeout(Duration::ZERO),
                "heartbeat_timeout",
            ),
            (d().with_holder(String::new()), "holder"),
            (d().with_holder("naïve".into()), "holder"),
            (d().with_holder("a\nb".into()), "holder"),
            (d().with_holder("x".repeat(257)), "holder"),
            (d().with_advertised(String::new()), "advertised"),
            (d().with_advertised("x".repeat(257)), "advertised"),
            (d().with_advertised("a\tb".into()), "advertised"),
        ];
        for (options, field) in cases {
            assert_eq!(field_of(&options), field, "{options:?}");
        }
    }

    #[test]
    fn edges_that_are_valid() {
        let s = Duration::from_secs;
        MutexOptions::default()
            .with_lease_duration(s(60))
            .validate()
            .unwrap();
        MutexOptions::default()
            .with_renew_interval(s(10))
            .validate()
            .unwrap();
        MutexOptions::default()
            .with_acquire_jitter(0.0)
            .validate()
            .unwrap();
        MutexOptions::default()
            .with_clock_drift(0.0)
            .validate()
            .unwrap();
    }

    #[test]
    fn the_stop_timeline_must_fit_between_the_last_renewal_and_the_deadline() {
        // 15 s lease, 1.15 s margin: 13.85 s usable; renew 5 s + slack 0.45 s.
        let fits = Duration::from_millis(13_850 - 5_000 - 450 - 1);
        let o = MutexOptions::default().with_stop_grace(fits);
        o.validate().unwrap();
        let o = o.with_stop_grace(fits + Duration::from_millis(1));
        assert_eq!(field_of(&o), "renew_interval");
    }

    #[test]
    fn no_duration_overflows_or_panics() {
        let huge = Duration::MAX;
        let d = MutexOptions::default;
        let cases: Vec<(MutexOptions, &str)> = vec![
            (d().with_stop_grace(huge), "stop_grace"),
            (d().with_renew_interval(huge), "renew_interval"),
            (d().with_safety_margin(huge), "safety_margin"),
            (d().with_request_timeout(huge), "request_timeout"),
            (d().with_failure_backoff(huge), "failure_backoff"),
            (d().with_heartbeat_timeout(huge), "heartbeat_timeout"),
            (d().with_acquire_retry(huge), "acquire_retry"),
            (d().with_acquire_timeout(huge), "acquire_timeout"),
            (d().with_lease_duration(huge), "lease_duration"),
            (
                d().with_failure_backoff(MAX_DURATION + Duration::from_nanos(1)),
                "failure_backoff",
            ),
        ];
        for (options, field) in cases {
            assert_eq!(field_of(&options), field, "{options:?}");
        }
        d().with_acquire_timeout(Duration::ZERO).validate().unwrap();
        d().with_failure_backoff(MAX_DURATION).validate().unwrap();
    }

    #[test]
    fn default_holder_is_usable_and_the_same_for_the_whole_process() {
        let holder = default_holder();
        validate_holder(&holder).unwrap();
        assert_eq!(holder, default_holder());
        let (rest, suffix) = holder.rsplit_once('-').unwrap();
        assert!(
            suffix.len() == 6 && suffix.bytes().all(|b| b.is_ascii_hexdigit()),
            "{holder}"
        );
        assert!(
            rest.ends_with(&format!("-{}", std::process::id())),
            "{holder}"
        );
    }
}
