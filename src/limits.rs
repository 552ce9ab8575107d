//! What a lease and its records may hold, as every store takes it and the
//! options check it before any store sees it: the lease duration Azure
//! takes, and the form of an advertised value.

use std::time::Duration;

use crate::error::{Error, Result};

/// The largest leader state, in bytes (4 MiB), that
/// [`LeaseStore::write_state`](crate::store::LeaseStore::write_state) accepts. A single Put Blob takes far more;
/// the limit keeps every write one request that fits in a renew interval.
pub const MAX_STATE_LEN: usize = 4 * 1024 * 1024;

/// The longest value, in bytes, that an instance may advertise with its
/// stamp ([`MutexOptions::advertised`](crate::MutexOptions::advertised)):
/// it travels as blob metadata, in a request header, on every stamp and
/// every listing of a set.
pub const MAX_ADVERTISED_LEN: usize = 256;

/// A fixed lease duration in whole seconds from 15 to 60, as Azure takes it.
/// Checked before any duration reaches the SDK, whose `From<Duration>` for
/// its lease duration casts to `u8` and wraps anything over 255 s.
pub(crate) fn lease_seconds(duration: Duration) -> Result<u8> {
    match u8::try_from(duration.as_secs()) {
        Ok(s @ 15..=60) if duration.subsec_nanos() == 0 => Ok(s),
        _ => Err(Error::invalid(
            "lease_duration",
            format!("must be whole seconds from 15 to 60, got {duration:?}"),
        )),
    }
}

/// Refuses an advertised value that is empty, longer than
/// [`MAX_ADVERTISED_LEN`], not printable ASCII (it is an HTTP header value
/// on Azure), or with spaces at either end (which storage would trim, so
/// that followers would read another value than the one written).
pub(crate) fn check_advertised(value: &str) -> Result<()> {
    if value.is_empty() || value.len() > MAX_ADVERTISED_LEN {
        return Err(Error::invalid(
            "advertised",
            format!(
                "must be 1 to {MAX_ADVERTISED_LEN} bytes long, got {}",
                value.len()
            ),
        ));
    }
    if !value.bytes().all(|b| (0x20..0x7f).contains(&b)) {
        return Err(Error::invalid(
            "advertised",
            "must be printable ASCII (it is stored as blob metadata, an HTTP header value)",
        ));
    }
    if value.starts_with(' ') || value.ends_with(' ') {
        return Err(Error::invalid(
            "advertised",
            "must not start or end with a space (storage would trim it)",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod state_len_tests {
    use super::MAX_STATE_LEN;
    use crate::error::Error;

    #[test]
    fn a_full_record_names_the_states_limit_as_it_is() {
        let full = Error::RecordFull {
            lease: "jobs/nightly".into(),
            keys: 3,
            len: 90,
            key: "v4".into(),
        };
        assert!(
            full.to_string()
                .contains(&format!("limit of {MAX_STATE_LEN} bytes")),
            "{full}"
        );
    }
}
