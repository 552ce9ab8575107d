//! The crate's errors as far as the schedule's decision files name them
//! (`crate::error::{Error, Result}`): an option refused, a state that is
//! not a record.

use std::fmt;

/// The two errors the schedule's files make.
#[derive(Debug)]
pub(crate) enum Error {
    InvalidOption { field: &'static str, reason: String },
    StateNotARecord(String),
}

impl Error {
    pub(crate) fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidOption {
            field,
            reason: reason.into(),
        }
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Error::InvalidOption { field, reason } => write!(f, "invalid {field}: {reason}"),
            Error::StateNotARecord(what) => write!(f, "not a schedule's record: {what}"),
        }
    }
}

pub(crate) type Result<T> = std::result::Result<T, Error>;
