//! The crate's one error type, [`Error`] (also at the crate root), what
//! caused a storage or transport error ([`Cause`]), and the boxed error a
//! leader task may return ([`BoxError`]).

use std::time::Duration;

/// A boxed error, as returned by a leader task.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in this crate, as kinds a caller can match on.
///
/// No message of this type ever contains an account key, a SAS token or a
/// connection string.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An option or setting is out of range; `field` names it.
    #[error("invalid {field}: {reason}")]
    InvalidOption {
        /// The option or setting that was refused, as spelled in the API.
        field: &'static str,
        /// Why it was refused.
        reason: String,
    },

    /// A connection string could not be used. The text never repeats a secret.
    #[error("invalid connection string: {0}")]
    InvalidConnectionString(String),

    /// Storage refused the credentials (HTTP 401 or 403).
    #[error("authentication failed ({status} {code}): {message}")]
    Authentication {
        /// HTTP status, 401 or 403.
        status: u16,
        /// The `x-ms-error-code`, for example `AuthenticationFailed`.
        code: String,
        /// A short description; never contains a secret.
        message: String,
    },

    /// A token credential could not give a token (for example, the managed
    /// identity endpoint did not answer). Transient: the campaign retries.
    #[error("no token from the credential during {operation}")]
    CredentialUnavailable {
        /// The storage call that needed the token, for example `renew`.
        operation: &'static str,
        /// What the credential said, secrets removed.
        #[source]
        source: Cause,
    },

    /// The lease is no longer ours: broken, changed or taken by someone else.
    #[error("lease lost: {0}")]
    LeaseLost(String),

    /// The endpoint answered with an error status but without Azure
    /// Storage's `x-ms-error-code` header, which the Blob service sends with
    /// every error it answers: it is no storage account (a typo in the
    /// account URL or `BlobEndpoint`, a web server or a proxy in its place).
    /// Fatal: a missing blob or container is not read into such an answer.
    #[error("{operation} was answered {status} without Azure Storage's headers: the endpoint is not a Blob Storage account; check the account URL (BlobEndpoint in a connection string, or --account-url), including its path")]
    NotStorage {
        /// The storage call, for example `inspect`.
        operation: &'static str,
        /// The HTTP status the endpoint answered.
        status: u16,
    },

    /// Storage answered with an error status that is not one of the kinds above.
    #[error("storage error {status} {}: {message}", code.as_deref().unwrap_or("(no code)"))]
    Storage {
        /// HTTP status code.
        status: u16,
        /// The `x-ms-error-code` header, when storage sent one.
        code: Option<String>,
        /// A short description; never contains a secret.
        message: String,
    },

    /// The request did not reach storage or its answer did not come back
    /// (connection refused or reset, DNS, TLS).
    #[error("transport error during {operation}")]
    Transport {
        /// The storage call, for example `acquire`.
        operation: &'static str,
        /// What went wrong, secrets removed, with its own causes.
        #[source]
        source: Cause,
    },

    /// Storage answered in a way this crate cannot use (a body that does not
    /// parse, an acquire answered under another lease id than proposed).
    #[error("unexpected answer to {operation}: {message}")]
    UnexpectedResponse {
        /// The storage call, for example `acquire`.
        operation: &'static str,
        /// What was unexpected.
        message: String,
    },

    /// A storage call did not finish within its time limit.
    #[error("{operation} timed out after {after:?}")]
    Timeout {
        /// The storage call, for example `renew`.
        operation: &'static str,
        /// The limit that ran out.
        after: Duration,
    },

    /// The caller's cancellation token was cancelled.
    #[error("cancelled")]
    Cancelled,

    /// The campaign gave up: this instance did not lead within
    /// [`MutexOptions::acquire_timeout`](crate::MutexOptions::acquire_timeout)
    /// because another instance held the lease.
    #[error("not leader within {after:?}: the lease is held by another instance")]
    NotAcquired {
        /// The acquire timeout that ran out.
        after: Duration,
    },

    /// [`run_task_when_mutex_acquired`](crate::BlobDistributedMutex::run_task_when_mutex_acquired)
    /// was called while a campaign of the same mutex was running. One mutex
    /// runs one campaign at a time; make another mutex for a second one.
    #[error("this mutex is already campaigning; one campaign at a time")]
    AlreadyCampaigning,

    /// The blob's `epoch` metadata is not a number that can be increased
    /// (garbled, or at its largest value), so no fencing token larger than
    /// every earlier one can be issued and this instance does not lead.
    /// An operator repairs it by setting `epoch` to a number larger than any
    /// epoch a downstream system has seen (see the crate docs).
    #[error("the blob's epoch metadata ({found:?}) cannot be increased; set it to a number larger than any epoch used so far")]
    InvalidEpoch {
        /// The value found, cut to 64 characters.
        found: String,
    },

    /// Storage never answered this mutex within
    /// [`MutexOptions::first_contact_timeout`](crate::MutexOptions::first_contact_timeout)
    /// of the campaign's start: every call failed, in a way retrying could
    /// have fixed had storage been down for a while, but more likely a
    /// setting is wrong (a host name that does not resolve, a port nothing
    /// listens on, a credential that cannot get a token, a permission
    /// storage refuses). The message says what to check; `last` is the last
    /// attempt's error. Once storage has answered a mutex, an outage is
    /// retried for as long as it lasts, as ever.
    #[error("storage did not answer for the lease {lease} within {after:?} (first_contact_timeout); check the endpoint (host name, port, account name), the network path to it, and that the credential can get a token and may use the container")]
    FirstContactFailed {
        /// The lease, as its store names it (container and blob, or the
        /// accounts of a quorum).
        lease: String,
        /// The first-contact timeout that ran out.
        after: Duration,
        /// The last attempt's error.
        #[source]
        last: Box<Error>,
    },

    /// The leader task neither stopped within its grace nor could be aborted.
    ///
    /// The lease was not released; it expires on its own. Another instance may
    /// become leader while this task still runs, so the process should exit
    /// (see [`MutexOptions::fail_stop`](crate::MutexOptions::fail_stop)).
    #[error("leader task did not stop after cancellation and abort")]
    TaskNotStopped,

    /// The task of a term led once
    /// ([`run_once`](crate::BlobDistributedMutex::run_once)) ended with no
    /// output: it returned an error (the `source`), panicked, or was aborted
    /// before it returned (no `source`; the report's `failure` says more).
    #[error("the leader task of epoch {} ended with no output ({})", report.epoch, report.reason)]
    TaskFailed {
        /// How the term ended.
        report: Box<crate::ending::TermReport>,
        /// The error the task returned, as it returned it.
        #[source]
        source: Option<BoxError>,
    },

    /// Storage refused a state write (see [`LeaseStore::write_state`](crate::store::LeaseStore::write_state))
    /// because the lease id it carried does not hold the lease any more:
    /// the lease expired, was released, broken, or passed on to another
    /// holder. The write did not land, and no retry with the same lease id
    /// ever will; the bytes stored are the last ones a holder wrote.
    ///
    /// It is told apart from [`Error::LeaseLost`], which the election's own
    /// calls (renew, release, stamp) return, so that a leader task can match
    /// on "my write was fenced off" without reading the term's stop reason.
    #[error("state write refused: {0}")]
    StateWriteRefused(String),

    /// A shape that keeps a record in the lease blob's state found there
    /// something else than its record: a run-once call with completion
    /// options ([`OnceOptions`](crate::OnceOptions)) that finds no
    /// completion record of this version, or a schedule
    /// ([`BlobSchedule`](crate::schedule::BlobSchedule)) that finds no
    /// schedule's record (state another writer keeps, another shape's
    /// record, or a record of a later version). The state is left as it is
    /// and nothing runs. Fatal: the blob holds what it holds until someone
    /// changes it. The text names the lease and what it holds.
    #[error("the lease blob's state is not the record this shape keeps: {0}")]
    StateNotARecord(String),

    /// A run-once call with a [`done_key`](crate::OnceOptions::done_key)
    /// that its completion record does not hold yet found the record too
    /// full to keep it: with the key, the record would pass
    /// [`MAX_STATE_LEN`](crate::store::MAX_STATE_LEN) (16 069 keys of
    /// [`DONE_KEY_MAX`](crate::OnceOptions::DONE_KEY_MAX) bytes fit). The task did not
    /// run, and the record is left as it is: no recorded key is ever
    /// dropped to make room. Keep new keys on another lease blob.
    ///
    /// Not an [`Error::InvalidOption`]: the key is valid, and would be
    /// kept on another blob; what refuses it is what this blob holds.
    #[error("the completion record on {lease} holds {keys} keys in {len} bytes, and with a new key of {} bytes it would pass the state's limit of 4194304 bytes (16 069 keys of the longest length fit): the task did not run, and no key was dropped; keep new keys on another lease blob", key.len())]
    RecordFull {
        /// The lease, as its store names it.
        lease: String,
        /// How many keys the record holds.
        keys: usize,
        /// The record's length in bytes.
        len: usize,
        /// The key that was refused.
        key: String,
    },

    /// The store does not implement this call: one of the optional calls
    /// of [`LeaseStore`](crate::store::LeaseStore), whose default answers this, or
    /// a stamp that advertises a value on a store that keeps none.
    #[error("this lease store does not support {operation}")]
    Unsupported {
        /// The call, for example `write state`.
        operation: &'static str,
    },
}

impl Error {
    /// Whether retrying the same call later may succeed: time-outs, transport
    /// errors, and storage answers 408, 429, 500, 502, 503 and 504.
    #[must_use]
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport { .. }
            | Error::Timeout { .. }
            | Error::CredentialUnavailable { .. } => true,
            Error::Storage { status, .. } => matches!(status, 408 | 429 | 500 | 502 | 503 | 504),
            _ => false,
        }
    }

    /// Whether the error can never go away by retrying with the same settings:
    /// invalid options or connection strings, authentication failures (401,
    /// 403), an epoch that cannot be increased, a call the store does not
    /// support, a lease blob whose state is not the record a shape keeps
    /// ([`Error::StateNotARecord`]), and HTTP 400 (a request
    /// storage will never accept); also [`Error::FirstContactFailed`], which
    /// comes only after retrying for the first-contact timeout. A credential
    /// that could not give a token is not fatal: token endpoints have hiccups.
    #[must_use]
    pub fn is_fatal(&self) -> bool {
        match self {
            Error::InvalidOption { .. }
            | Error::InvalidConnectionString(_)
            | Error::Authentication { .. }
            | Error::InvalidEpoch { .. }
            | Error::Unsupported { .. }
            | Error::FirstContactFailed { .. }
            | Error::StateNotARecord(_)
            | Error::NotStorage { .. } => true,
            Error::Storage { status, .. } => *status == 400,
            _ => false,
        }
    }

    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidOption {
            field,
            reason: reason.into(),
        }
    }
}

impl Error {
    /// A transport error during `operation`, from a message (redacted here).
    #[must_use]
    pub fn transport(operation: &'static str, message: impl Into<String>) -> Self {
        Error::Transport {
            operation,
            source: Cause::new(message),
        }
    }
}

/// The cause of an error, as text with every secret removed, and its own
/// cause in turn: the chain of a lower-level error (the SDK's, the HTTP
/// client's), kept walkable through [`std::error::Error::source`] without
/// the URLs, keys and signatures those errors may print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    message: String,
    source: Option<Box<Cause>>,
}

impl Cause {
    /// A cause with this message (redacted) and no cause of its own.
    #[must_use]
    pub fn new(message: impl Into<String>) -> Self {
        Cause {
            message: redact(&message.into()),
            source: None,
        }
    }

    /// The chain of `error`, each message redacted.
    #[cfg_attr(not(any(feature = "official", feature = "sdk-v021")), allow(dead_code))] // the backends' errors
    pub(crate) fn of(error: &(dyn std::error::Error + 'static)) -> Self {
        Cause {
            message: redact(&error.to_string()),
            source: error.source().map(|next| Box::new(Cause::of(next))),
        }
    }
}

impl std::fmt::Display for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for Cause {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.source
            .as_deref()
            .map(|cause| cause as &(dyn std::error::Error + 'static))
    }
}

/// An error and its causes on one line (`a: b: c`), for log fields.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// Removes anything that looks like a SAS signature or other secret from a
/// message before it goes into an error or a log line.
pub(crate) fn redact(message: &str) -> String {
    let mut out = String::with_capacity(message.len());
    let mut rest = message;
    while let Some(start) = find_url_query(rest) {
        out.push_str(&rest[..start]);
        let tail = &rest[start..];
        let end = tail
            .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>'))
            .unwrap_or(tail.len());
        out.push_str("?<redacted>");
        rest = &tail[end..];
    }
    out.push_str(rest);
    for key in ["AccountKey=", "SharedAccessSignature=", "sig="] {
        while let Some(at) = out.find(key) {
            let value_start = at + key.len();
            let value_end = out[value_start..]
                .find(|c: char| c == ';' || c == '&' || c.is_whitespace())
                .map_or(out.len(), |i| value_start + i);
            out.replace_range(at..value_end, "<redacted>");
        }
    }
    out
}

/// The byte offset of the `?` that starts the query of a URL in `text`.
fn find_url_query(text: &str) -> Option<usize> {
    let scheme = text.find("http://").or_else(|| text.find("https://"))?;
    let url = &text[scheme..];
    let url_end = url
        .find(|c: char| c.is_whitespace() || matches!(c, ')' | '"' | '\'' | '>'))
        .unwrap_or(url.len());
    if let Some(q) = url[..url_end].find('?') {
        return Some(scheme + q);
    }
    let next = scheme + url_end;
    find_url_query(&text[next..]).map(|i| next + i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redact_removes_sas_query_and_keys() {
        let msg = "error sending request for url (https://acct.blob.core.windows.net/c/b?comp=lease&sig=abc%2Bdef&se=2030)";
        let red = redact(msg);
        assert!(!red.contains("abc"), "{red}");
        assert!(
            red.contains("https://acct.blob.core.windows.net/c/b?<redacted>)"),
            "{red}"
        );

        let red = redact("bad AccountKey=c2VjcmV0; and sig=zzz&x=1");
        assert!(!red.contains("c2VjcmV0") && !red.contains("zzz"), "{red}");
    }

    #[test]
    fn redact_keeps_plain_text() {
        assert_eq!(redact("no secrets here"), "no secrets here");
        assert_eq!(
            redact("see http://127.0.0.1:10000/devstoreaccount1 now"),
            "see http://127.0.0.1:10000/devstoreaccount1 now"
        );
    }

    #[test]
    fn a_cause_keeps_the_chain_without_secrets() {
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("error sending request for url (https://a.blob.core.windows.net/c/b?sig=SECRET)")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let outer = Outer(std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "refused",
        ));
        let error = Error::Transport {
            operation: "renew",
            source: Cause::of(&outer),
        };
        let text = Chain(&error).to_string();
        assert_eq!(
            text,
            "transport error during renew: error sending request for url \
             (https://a.blob.core.windows.net/c/b?<redacted>): refused"
        );
        assert_eq!(
            error.to_string(),
            "transport error during renew",
            "the cause is not repeated"
        );
    }

    #[test]
    fn kinds() {
        assert!(Error::Timeout {
            operation: "renew",
            after: Duration::from_secs(1)
        }
        .is_transient());
        let busy = Error::Storage {
            status: 503,
            code: Some("ServerBusy".into()),
            message: String::new(),
        };
        assert!(busy.is_transient() && !busy.is_fatal());
        let bad = Error::Storage {
            status: 400,
            code: None,
            message: String::new(),
        };
        assert!(bad.is_fatal() && !bad.is_transient());
    }
}
