//! Which SDK the settings name: [`Backend`], chosen once from the settings,
//! a flag or the environment.

use std::fmt;
use std::str::FromStr;

use crate::error::{Error, Result};

/// A storage backend: the SDK through which the lease calls reach Azure.
///
/// The same word names the backend's module, the prefix of its types, its
/// feature and its value on the command line and in
/// [`Backend::ENV`]: `official` (feature `official`) and `sdk-v021`
/// (feature `sdk-v021`).
/// Both keep the same records and give the same answers: instances on
/// different backends can share one lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Backend {
    /// Microsoft's official Azure SDK for Rust (`azure_core` and
    /// `azure_storage_blob` 1.x). The default when its feature `official`
    /// is on (it is by default).
    Official,
    /// The frozen `azure_storage_blobs` 0.21 crates, fully supported
    /// (feature `sdk-v021`).
    SdkV021,
}

impl Backend {
    /// The environment variable [`Backend::from_env`] reads, and the
    /// `blob-mutex` command's `--backend` falls back to.
    pub const ENV: &'static str = "BLOB_MUTEX_BACKEND";

    /// Every backend, built in or not.
    pub const ALL: [Backend; 2] = [Backend::Official, Backend::SdkV021];

    /// The backend's name: `official` or `sdk-v021`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Backend::Official => "official",
            Backend::SdkV021 => "sdk-v021",
        }
    }

    /// The crate feature that builds this backend in.
    #[must_use]
    pub fn feature(self) -> &'static str {
        self.as_str()
    }

    /// Whether this build of the crate has the backend (its feature is on).
    #[must_use]
    pub fn is_built_in(self) -> bool {
        match self {
            Backend::Official => cfg!(feature = "official"),
            Backend::SdkV021 => cfg!(feature = "sdk-v021"),
        }
    }

    /// The backend named by [`Backend::ENV`] (`BLOB_MUTEX_BACKEND`); the
    /// default when it is unset or empty.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidOption`] (field `backend`) when it names no backend.
    pub fn from_env() -> Result<Backend> {
        match std::env::var(Self::ENV) {
            Ok(value) if !value.trim().is_empty() => value.parse(),
            _ => Ok(Backend::default()),
        }
    }

    /// Refuses a backend this build does not have, naming the feature.
    pub(crate) fn check_built_in(self) -> Result<()> {
        if self.is_built_in() {
            Ok(())
        } else {
            Err(Error::invalid(
                "backend",
                format!(
                    "the backend {self} is not built in: turn on the crate feature `{}`",
                    self.feature()
                ),
            ))
        }
    }
}

impl Default for Backend {
    /// [`Backend::Official`] when its feature is on (the default), else
    /// [`Backend::SdkV021`] when that one is, else `Official`.
    fn default() -> Self {
        if cfg!(feature = "official") || !cfg!(feature = "sdk-v021") {
            Backend::Official
        } else {
            Backend::SdkV021
        }
    }
}

impl fmt::Display for Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Backend {
    type Err = Error;

    /// `official` or `sdk-v021`, without regard to case.
    fn from_str(s: &str) -> Result<Self> {
        let s = s.trim();
        Backend::ALL
            .into_iter()
            .find(|backend| backend.as_str().eq_ignore_ascii_case(s))
            .ok_or_else(|| {
                let shown = if s.len() <= 20 && s.chars().all(|c| c.is_ascii_graphic()) {
                    s
                } else {
                    "(unreadable)"
                };
                Error::invalid(
                    "backend",
                    format!("{shown:?} is no backend: official or sdk-v021"),
                )
            })
    }
}
