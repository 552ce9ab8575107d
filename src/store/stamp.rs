//! What a new term's stamp carries besides its holder: the floor under its
//! epoch and what the holder advertises (see [`LeaseStore::stamp`]).
//!
//! [`LeaseStore::stamp`]: crate::store::LeaseStore::stamp

use std::time::Duration;

/// How much longer than a request a stamp may take when it makes a lease
/// record anew (a new blob, or one whose record was lost): the record's
/// first epoch stands for the second after the one storage's clock showed
/// at its first read, and is taken once storage's clock has passed that
/// second, so that no two records ever start at the same epoch; the wait
/// is one to two seconds, and a few reads. The mutex gives every stamp its
/// request timeout and this much more, still cut at the term's deadline; a
/// stamp of a record that has an epoch waits for nothing.
pub(crate) const NEW_RECORD_WAIT: Duration = Duration::from_secs(3);

/// How [`LeaseStore::stamp`](crate::store::LeaseStore::stamp) stamps a new term:
/// the epoch is `max(stored + 1, floor)` (rule 8), and `advertised`, when
/// set, is kept beside the holder and epoch for the term (rule 10).
/// [`StampOptions::new()`] (the default) is a plain stamp: no floor, nothing
/// advertised. Options may grow; they are built with the setters.
///
/// ```
/// use blob_mutex::store::StampOptions;
///
/// let options = StampOptions::new().with_floor(8).with_advertised("10.0.0.7:8080");
/// assert_eq!(options.floor(), 8);
/// assert_eq!(options.advertised(), Some("10.0.0.7:8080"));
/// assert_eq!(StampOptions::default().floor(), 0);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct StampOptions {
    floor: u64,
    advertised: Option<String>,
}

impl StampOptions {
    /// No floor (the stored epoch + 1) and nothing advertised: a plain
    /// stamp.
    #[must_use]
    pub fn new() -> StampOptions {
        StampOptions::default()
    }

    /// The least epoch the stamp may return (rule 8 of the contract); 0,
    /// the default, for none. A
    /// quorum stamps every account it holds at the largest epoch a majority
    /// has seen plus one.
    #[must_use]
    pub fn with_floor(mut self, floor: u64) -> StampOptions {
        self.floor = floor;
        self
    }

    /// What the term's holder tells the others of itself, such as the
    /// address at which it takes requests (rule 10 of the contract): at most
    /// [`MAX_ADVERTISED_LEN`](crate::store::MAX_ADVERTISED_LEN) bytes of printable
    /// ASCII, checked by the store before anything is sent. A store that
    /// keeps no advertised value ([`supports_advertised`](crate::store::LeaseStore::supports_advertised)
    /// is `false`) answers such a stamp with
    /// [`Error::Unsupported`](crate::Error::Unsupported).
    #[must_use]
    pub fn with_advertised(mut self, advertised: impl Into<String>) -> StampOptions {
        self.advertised = Some(advertised.into());
        self
    }

    /// The least epoch the stamp may return; 0 for none.
    #[must_use]
    pub fn floor(&self) -> u64 {
        self.floor
    }

    /// What the holder advertises, if anything.
    #[must_use]
    pub fn advertised(&self) -> Option<&str> {
        self.advertised.as_deref()
    }
}
