//! Completion records: what a run-once call leaves in the lease's fenced
//! state after its task succeeded, and the options that read it (once per
//! key, at most once per period).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::error::{Error, Result};
use crate::store::{LeaseStore, MAX_STATE_LEN};

/// The first line of a completion record of the current format, naming
/// its version: `at=` (the start of the last successful run), then every
/// key recorded, one `key=` line each.
const HEADER: &str = "blob-mutex record v2";

/// The first line of a record of the first format, still read: one `key=`
/// line (the last key recorded) and `at=` (the end of the last success).
const HEADER_V1: &str = "blob-mutex record v1";

/// What starts any version of a completion record.
const FAMILY: &str = "blob-mutex record ";

/// The longest done key: [`OnceOptions::DONE_KEY_MAX`].
pub(crate) const DONE_KEY_MAX: usize = 256;

/// Options of a [`run_once_with_options`](crate::BlobDistributedMutex::run_once_with_options)
/// call: when set, the call keeps a completion record in the lease's
/// fenced state and skips the task when the record says it is not due.
///
/// With either option set the record owns the lease's state: a state that
/// is not a completion record is refused ([`Error::StateNotARecord`]),
/// never overwritten, and the task must not write state of its own.
///
/// Records are kept by a [`BlobDistributedMutex`](crate::BlobDistributedMutex)'s
/// run-once call on one storage account. A quorum keeps no leader state and
/// refuses them. A lease set keeps none: its partitions are work that goes
/// on while owned and moves with the balancer, not jobs that end, so a
/// record would only leave a "done" partition claimed and renewed with
/// nothing to run. Give each job that ends its own lease blob instead (see
/// the guide's [Choosing a shape](crate::guide::shapes)).
///
/// A record is the content of its lease blob, and lease calls do not
/// change a blob's last-modified time: a lifecycle management rule that
/// deletes blobs not modified for some days deletes the record of a job
/// that has not run since, and the job then runs again. Exclude the lease
/// blobs from such rules (a rule's `prefixMatch` names what it covers).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OnceOptions {
    pub(crate) done_key: Option<String>,
    pub(crate) at_most_every: Option<Duration>,
}

impl OnceOptions {
    /// The longest [`done_key`](Self::done_key), in bytes: 256.
    pub const DONE_KEY_MAX: usize = DONE_KEY_MAX;

    /// Once per key: skip the task when the record says a task with this
    /// key succeeded (a migration's version, say). Every key recorded is
    /// kept, as a migration tool keeps its history: a host still on an
    /// older version, or a rollback, skips an older key after a newer one
    /// ran. The record holds at most [`MAX_STATE_LEN`] bytes, 16 069 keys
    /// of [`DONE_KEY_MAX`](Self::DONE_KEY_MAX) bytes (more of shorter ones); a key that it
    /// could not keep is refused with [`Error::RecordFull`] before the
    /// task runs, and no recorded key is ever dropped to make room. At
    /// most [`DONE_KEY_MAX`](Self::DONE_KEY_MAX) bytes, not empty, no control characters.
    #[must_use]
    pub fn done_key(&self) -> Option<&str> {
        self.done_key.as_deref()
    }

    /// At most once per period, counted from the start of the last
    /// successful run, as a schedule counts: skip the task when that run
    /// started less than this before, on storage's clock (a nightly job
    /// that the cron of every host starts). The start is storage's time
    /// read in the term just before the task ran; a job longer than the
    /// schedule less the period still runs on schedule. Storage's clock
    /// counts whole seconds, so a run may come up to a second early. At
    /// least one second.
    #[must_use]
    pub fn at_most_every(&self) -> Option<Duration> {
        self.at_most_every
    }

    /// Sets [`done_key`](Self::done_key).
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_done_key(mut self, key: impl Into<String>) -> Self {
        self.done_key = Some(key.into());
        self
    }

    /// Sets [`at_most_every`](Self::at_most_every).
    #[must_use = "options are built by value; use the returned options"]
    pub fn with_at_most_every(mut self, period: Duration) -> Self {
        self.at_most_every = Some(period);
        self
    }

    /// Whether a record is kept at all.
    pub(crate) fn records(&self) -> bool {
        self.done_key.is_some() || self.at_most_every.is_some()
    }

    /// Checks the options.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] naming `done_key` (empty, longer than
    /// [`DONE_KEY_MAX`](Self::DONE_KEY_MAX) bytes, or with a control character) or
    /// `at_most_every` (shorter than a second: storage's clock counts
    /// seconds).
    pub fn validate(&self) -> Result<()> {
        if let Some(key) = &self.done_key {
            if key.is_empty() || key.len() > DONE_KEY_MAX {
                return Err(Error::invalid(
                    "done_key",
                    format!("must be 1 to {DONE_KEY_MAX} bytes"),
                ));
            }
            if key.chars().any(char::is_control) {
                return Err(Error::invalid(
                    "done_key",
                    "must not contain control characters",
                ));
            }
        }
        if self
            .at_most_every
            .is_some_and(|p| p < Duration::from_secs(1))
        {
            return Err(Error::invalid("at_most_every", "must be at least 1 s"));
        }
        Ok(())
    }
}

/// Why a run-once call did not run its task.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SkipReason {
    /// The record says a task with this key succeeded.
    Done {
        /// The key.
        key: String,
    },
    /// The last successful run started less than
    /// [`at_most_every`](OnceOptions::at_most_every) ago on storage's clock.
    TooSoon {
        /// When the last successful run started (storage's clock; in a
        /// record written before the period counted from the start, when
        /// it ended).
        last: SystemTime,
        /// Storage's clock when the record was read.
        now: SystemTime,
        /// The period.
        period: Duration,
    },
}

impl fmt::Display for SkipReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SkipReason::Done { key } => write!(f, "the record says key {key:?} is done"),
            SkipReason::TooSoon { last, now, period } => {
                let age = now.duration_since(*last).unwrap_or_default();
                write!(
                    f,
                    "the last successful run started {} s ago on storage's clock, \
                     less than the period of {} s",
                    age.as_secs(),
                    period.as_secs()
                )
            }
        }
    }
}

/// One completion record, as stored.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) struct Record {
    /// Every key recorded, oldest first.
    pub(crate) keys: Vec<String>,
    /// Storage's clock, in Unix seconds, when the last successful run
    /// started (in a record of the first format, when it ended), if known.
    pub(crate) at: Option<u64>,
}

/// The longest `at=` line: its prefix, a `u64` of 20 digits, and the end of line.
const AT_LINE_MAX: usize = "at=".len() + 20 + 1;

/// What a `key=` line adds to a record besides the key.
const KEY_LINE_EXTRA: usize = "key=".len() + 1;

impl Record {
    /// The record's bytes, in the current format: its header, the `at=`
    /// line, then a `key=` line per key, oldest first.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let mut text = format!("{HEADER}\n");
        if let Some(at) = self.at {
            text.push_str("at=");
            text.push_str(&at.to_string());
            text.push('\n');
        }
        for key in &self.keys {
            text.push_str("key=");
            text.push_str(key);
            text.push('\n');
        }
        text.into_bytes()
    }

    /// The record in `state`, of either format: `None` for an empty state.
    ///
    /// # Errors
    ///
    /// [`Error::StateNotARecord`] for any other content, a record of a
    /// later version included.
    pub(crate) fn parse(lease: &str, state: &[u8]) -> Result<Option<Record>> {
        if state.is_empty() {
            return Ok(None);
        }
        let refuse = |what: &str| Error::StateNotARecord(format!("{lease}: {what}"));
        let text = std::str::from_utf8(state).map_err(|_| refuse("not text"))?;
        let mut lines = text.lines();
        match lines.next() {
            Some(HEADER | HEADER_V1) => {}
            Some(line) if line.starts_with(FAMILY) => {
                return Err(refuse("a record of another version"));
            }
            Some(line) if line.starts_with("blob-mutex schedule v") => {
                return Err(refuse(
                    "it holds a schedule's record (`blob-mutex schedule`), not a completion record",
                ));
            }
            _ => return Err(refuse("not a completion record")),
        }
        let mut record = Record::default();
        let mut seen = std::collections::HashSet::new();
        for line in lines {
            if let Some(key) = line.strip_prefix("key=") {
                if seen.insert(key) {
                    record.keys.push(key.to_owned());
                }
            } else if let Some(at) = line.strip_prefix("at=") {
                record.at = Some(at.parse().map_err(|_| refuse("a malformed at= line"))?);
            } else if !line.is_empty() {
                return Err(refuse("an unknown line"));
            }
        }
        Ok(Some(record))
    }

    /// Whether `key` is recorded.
    pub(crate) fn holds(&self, key: &str) -> bool {
        self.keys.iter().any(|k| k == key)
    }

    /// The record's length with `key` added and its `at=` line at its
    /// longest: what must fit in [`MAX_STATE_LEN`] for the key to be kept,
    /// whatever the time.
    fn len_with(&self, key: &str) -> usize {
        let keys: usize = self.keys.iter().map(|k| k.len() + KEY_LINE_EXTRA).sum();
        HEADER.len() + 1 + AT_LINE_MAX + keys + key.len() + KEY_LINE_EXTRA
    }

    /// Refuses `key`, not recorded yet, when the record could not keep it.
    fn check_room(&self, lease: &str, key: &str) -> Result<()> {
        if self.holds(key) || self.len_with(key) <= MAX_STATE_LEN {
            return Ok(());
        }
        Err(Error::RecordFull {
            lease: lease.to_owned(),
            keys: self.keys.len(),
            len: self.to_bytes().len(),
            key: key.to_owned(),
        })
    }

    /// The record after a success with `key` whose run started at `at`.
    /// Whether this record holds a success recorded with `key` and `at`
    /// (see [`after_success`](Self::after_success)): the key, and the
    /// start.
    pub(crate) fn has_success(&self, key: Option<&str>, at: Option<u64>) -> bool {
        key.is_none_or(|key| self.holds(key)) && (at.is_none() || self.at == at)
    }

    pub(crate) fn after_success(mut self, key: Option<&str>, at: Option<u64>) -> Record {
        if let Some(key) = key {
            if !self.holds(key) {
                self.keys.push(key.to_owned());
            }
        }
        self.at = at.or(self.at);
        self
    }
}

/// Unix seconds of `time` (0 before 1970).
pub(crate) fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Storage's clock now, from an inspection.
pub(crate) async fn storage_time<S: LeaseStore>(store: &S) -> Result<Option<SystemTime>> {
    Ok(store.inspect().await?.and_then(|info| info.storage_time))
}

/// What a completion record says of a call.
#[derive(Debug)]
pub(crate) enum Decision {
    /// The task is not due.
    Skip(SkipReason),
    /// The task is due; the record as read (empty when there was none),
    /// to which its success is added.
    Due(Record),
}

/// Whether the task is due, from the record in `state` (the lease's
/// state, as just read) and storage's clock `now` (needed only with
/// `at_most_every` and a record that has a time). Reads need no lease, so
/// a follower asks too.
///
/// # Errors
///
/// [`Error::StateNotARecord`]; [`Error::RecordFull`] when the task is due
/// and the record could not keep its key; [`Error::Unsupported`] with
/// `at_most_every` when `now` is `None`.
pub(crate) fn decide(
    lease: &str,
    state: &[u8],
    options: &OnceOptions,
    now: Option<SystemTime>,
) -> Result<Decision> {
    let Some(record) = Record::parse(lease, state)? else {
        return Ok(Decision::Due(Record::default()));
    };
    if let Some(key) = options.done_key.as_ref().filter(|key| record.holds(key)) {
        return Ok(Decision::Skip(SkipReason::Done { key: key.clone() }));
    }
    if let (Some(period), Some(at)) = (options.at_most_every, record.at) {
        let now = now.ok_or_else(no_clock)?;
        let last = UNIX_EPOCH + Duration::from_secs(at);
        // A clock that went back since the record counts as no time passed.
        let age = now.duration_since(last).unwrap_or_default();
        if age < period {
            return Ok(Decision::Skip(SkipReason::TooSoon { last, now, period }));
        }
    }
    if let Some(key) = &options.done_key {
        record.check_room(lease, key)?;
    }
    Ok(Decision::Due(record))
}

/// The error for `at_most_every` on a store that reports no clock.
pub(crate) fn no_clock() -> Error {
    Error::Unsupported {
        operation: "at_most_every: this store does not report storage's clock",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_with_every_key_in_order() {
        let record = Record {
            keys: vec!["v1".into(), "v3".into(), "v2=x".into()],
            at: Some(1_700_000_000),
        };
        let bytes = record.to_bytes();
        assert_eq!(
            bytes,
            b"blob-mutex record v2\nat=1700000000\nkey=v1\nkey=v3\nkey=v2=x\n".to_vec()
        );
        assert_eq!(Record::parse("l", &bytes).unwrap(), Some(record));
        assert_eq!(Record::parse("l", b"").unwrap(), None);
    }

    #[test]
    fn a_record_of_the_first_format_reads() {
        let v1 = b"blob-mutex record v1\nkey=v42\nat=1700000000\n";
        let record = Record::parse("l", v1).unwrap().unwrap();
        assert_eq!(
            record,
            Record {
                keys: vec!["v42".into()],
                at: Some(1_700_000_000),
            }
        );
        let after = record.after_success(Some("v43"), Some(1_700_000_100));
        assert_eq!(
            after.to_bytes(),
            b"blob-mutex record v2\nat=1700000100\nkey=v42\nkey=v43\n".to_vec(),
            "written again in the current format, the old key kept"
        );
        let v1_without_key = Record::parse("l", b"blob-mutex record v1\nat=5\n").unwrap();
        assert_eq!(
            v1_without_key,
            Some(Record {
                keys: Vec::new(),
                at: Some(5),
            })
        );
    }

    #[test]
    fn other_content_is_refused() {
        for state in [
            &b"42"[..],
            b"blob-mutex record v3\nkey=a\n",
            b"blob-mutex record v2\nat=soon\n",
            b"blob-mutex record v1\nat=soon\n",
            b"blob-mutex record v2\nwho=me\n",
            b"\xff",
        ] {
            let refused = Record::parse("l", state);
            assert!(
                matches!(refused, Err(Error::StateNotARecord(_))),
                "{state:?}: {refused:?}"
            );
        }
    }

    /// A key of [`DONE_KEY_MAX`] bytes, told apart by `n`.
    fn longest(n: usize) -> String {
        format!("{n:0DONE_KEY_MAX$}")
    }

    #[test]
    fn sixteen_thousand_and_sixty_nine_keys_of_the_longest_length_fit_and_no_more() {
        let mut record = Record {
            keys: (0..16_068).map(longest).collect(),
            at: None,
        };
        record.check_room("l", &longest(16_068)).unwrap();
        record = record.after_success(Some(&longest(16_068)), None);
        let full = record.clone().after_success(None, Some(u64::MAX));
        assert!(full.to_bytes().len() <= MAX_STATE_LEN);
        let refused = record.check_room("l", &longest(16_069));
        assert!(
            matches!(&refused, Err(Error::RecordFull { keys: 16_069, .. })),
            "{refused:?}"
        );
        record
            .check_room("l", &longest(7))
            .expect("a key kept already");
        record
            .check_room("l", "short")
            .expect("a shorter key still fits");
    }

    #[test]
    fn the_period_counts_from_the_recorded_start_and_a_done_key_needs_no_clock() {
        let started = UNIX_EPOCH + Duration::from_secs(1_000);
        let state = Record {
            keys: vec!["v1".into()],
            at: Some(1_000),
        }
        .to_bytes();
        let period = OnceOptions::default().with_at_most_every(Duration::from_secs(25));
        let at = |secs| Some(UNIX_EPOCH + Duration::from_secs(secs));
        assert!(matches!(
            decide("l", &state, &period, at(1_024)),
            Ok(Decision::Skip(SkipReason::TooSoon { last, .. })) if last == started
        ));
        assert!(matches!(
            decide("l", &state, &period, at(1_025)),
            Ok(Decision::Due(_))
        ));
        assert!(matches!(
            decide("l", &state, &period, None),
            Err(Error::Unsupported { .. })
        ));
        let key = OnceOptions::default().with_done_key("v1");
        assert!(matches!(
            decide("l", &state, &key, None),
            Ok(Decision::Skip(SkipReason::Done { .. }))
        ));
    }

    #[test]
    fn options_are_validated() {
        assert!(OnceOptions::default().validate().is_ok());
        for bad in [
            OnceOptions::default().with_done_key(""),
            OnceOptions::default().with_done_key("a\nb"),
            OnceOptions::default().with_done_key("k".repeat(DONE_KEY_MAX + 1)),
            OnceOptions::default().with_at_most_every(Duration::from_millis(999)),
        ] {
            assert!(matches!(bad.validate(), Err(Error::InvalidOption { .. })));
        }
    }
}
