//! Completion records: what a run-once call leaves in the lease's fenced
//! state after its task succeeded, and the options that read it (once per
//! key, at most once per period).

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::engine::leadership::LeaderContext;
use crate::error::{Error, Result};
use crate::store::LeaseStore;

/// The first line of a completion record, naming its version.
const HEADER: &str = "blob-mutex record v1";

/// What starts any version of a completion record.
const FAMILY: &str = "blob-mutex record ";

/// The longest [`done_key`](OnceOptions::done_key), in bytes.
pub const DONE_KEY_MAX: usize = 256;

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
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OnceOptions {
    /// Once per key: skip the task when the record says a task with this
    /// key succeeded (a migration's version, say). At most
    /// [`DONE_KEY_MAX`] bytes, not empty, no control characters.
    pub done_key: Option<String>,
    /// At most once per period: skip the task when the record's last
    /// success is younger than this on storage's clock (a nightly job that
    /// the cron of every host starts). At least one second.
    pub at_most_every: Option<Duration>,
}

impl OnceOptions {
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
    /// [`DONE_KEY_MAX`] bytes, or with a control character) or
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
    /// The record's last success is younger than
    /// [`at_most_every`](OnceOptions::at_most_every) on storage's clock.
    TooSoon {
        /// When the last success was recorded (storage's clock).
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
                    "the last success is {} s old on storage's clock, younger than {} s",
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
    /// The key of the last success, if it had one.
    pub(crate) key: Option<String>,
    /// Storage's clock at the last success, in Unix seconds, if known.
    pub(crate) at: Option<u64>,
}

impl Record {
    /// The record's bytes: its header, then `key=` and `at=` lines.
    pub(crate) fn to_bytes(&self) -> Vec<u8> {
        let key = self.key.as_ref().map(|k| format!("key={k}\n"));
        let at = self.at.map(|at| format!("at={at}\n"));
        format!(
            "{HEADER}\n{}{}",
            key.unwrap_or_default(),
            at.unwrap_or_default()
        )
        .into_bytes()
    }

    /// The record in `state`: `None` for an empty state.
    ///
    /// # Errors
    ///
    /// [`Error::StateNotARecord`] for any other content, a record of
    /// another version included.
    pub(crate) fn parse(lease: &str, state: &[u8]) -> Result<Option<Record>> {
        if state.is_empty() {
            return Ok(None);
        }
        let refuse = |what: &str| Error::StateNotARecord(format!("{lease}: {what}"));
        let text = std::str::from_utf8(state).map_err(|_| refuse("not text"))?;
        let mut lines = text.lines();
        match lines.next() {
            Some(HEADER) => {}
            Some(line) if line.starts_with(FAMILY) => {
                return Err(refuse("a record of another version"));
            }
            _ => return Err(refuse("not a completion record")),
        }
        let mut record = Record::default();
        for line in lines {
            if let Some(key) = line.strip_prefix("key=") {
                record.key = Some(key.to_owned());
            } else if let Some(at) = line.strip_prefix("at=") {
                record.at = Some(at.parse().map_err(|_| refuse("a malformed at= line"))?);
            } else if !line.is_empty() {
                return Err(refuse("an unknown line"));
            }
        }
        Ok(Some(record))
    }
}

/// Unix seconds of `time` (0 before 1970).
fn unix_seconds(time: SystemTime) -> u64 {
    time.duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs()
}

/// Storage's clock now, from an inspection.
async fn storage_time<S: LeaseStore>(store: &S) -> Result<Option<SystemTime>> {
    Ok(store.inspect().await?.and_then(|info| info.storage_time))
}

/// Whether the task is due: `Some(reason)` when the record in `state`
/// (the lease's state, as just read) says it is not. Reads need no lease,
/// so a follower asks too.
///
/// # Errors
///
/// A failed inspection; [`Error::StateNotARecord`];
/// [`Error::Unsupported`] with `at_most_every` on a store that does not
/// report storage's clock.
pub(crate) async fn skip_reason<S: LeaseStore>(
    store: &S,
    state: &[u8],
    options: &OnceOptions,
) -> Result<Option<SkipReason>> {
    let Some(record) = Record::parse(&store.name(), state)? else {
        return Ok(None);
    };
    if let (Some(key), Some(done)) = (&options.done_key, &record.key) {
        if key == done {
            return Ok(Some(SkipReason::Done { key: key.clone() }));
        }
    }
    let Some(period) = options.at_most_every else {
        return Ok(None);
    };
    let Some(now) = storage_time(store).await? else {
        return Err(no_clock());
    };
    let Some(at) = record.at else {
        return Ok(None);
    };
    let last = UNIX_EPOCH + Duration::from_secs(at);
    // A clock that went back since the record counts as no time passed.
    let age = now.duration_since(last).unwrap_or_default();
    Ok((age < period).then_some(SkipReason::TooSoon { last, now, period }))
}

/// Writes the record of a success through the term's fenced state, timed
/// by an inspection just before.
///
/// # Errors
///
/// [`Error::StateWriteRefused`] when the lease is gone (nothing landed);
/// a failed inspection or write; [`Error::Unsupported`] with
/// `at_most_every` on a store that does not report storage's clock.
pub(crate) async fn record_success<S: LeaseStore>(
    store: &S,
    ctx: &LeaderContext,
    options: &OnceOptions,
) -> Result<()> {
    let now = storage_time(store).await?;
    if now.is_none() && options.at_most_every.is_some() {
        return Err(no_clock());
    }
    let record = Record {
        key: options.done_key.clone(),
        at: now.map(unix_seconds),
    };
    ctx.write_state(record.to_bytes()).await
}

fn no_clock() -> Error {
    Error::Unsupported {
        operation: "at_most_every: this store does not report storage's clock",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written() {
        let record = Record {
            key: Some("v42".into()),
            at: Some(1_700_000_000),
        };
        let bytes = record.to_bytes();
        assert_eq!(
            bytes,
            b"blob-mutex record v1\nkey=v42\nat=1700000000\n".to_vec()
        );
        assert_eq!(Record::parse("l", &bytes).unwrap(), Some(record));
        assert_eq!(Record::parse("l", b"").unwrap(), None);
    }

    #[test]
    fn other_content_is_refused() {
        for state in [
            &b"42"[..],
            b"blob-mutex record v2\nkey=a\n",
            b"blob-mutex record v1\nat=soon\n",
            b"blob-mutex record v1\nwho=me\n",
            b"\xff",
        ] {
            let refused = Record::parse("l", state);
            assert!(
                matches!(refused, Err(Error::StateNotARecord(_))),
                "{state:?}: {refused:?}"
            );
        }
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
