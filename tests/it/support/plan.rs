//! Which requests of a run fail, and how: none (a clean run, which lists
//! the requests it sent), one named request in one way, or each request
//! with a seeded chance. The faulty stores (`faulty.rs`) ask the plan
//! before every request.
// Shared with the tests that need it; not every item is used by each.
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use blob_mutex::Error;
use blob_mutex_testkit::chaos::Rng;
use tokio::time::Instant;

/// How one request fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Way {
    /// Storage refuses it at once with an error it can return (500 or
    /// 503 `ServerBusy`), having done nothing.
    Refused,
    /// It is lost before storage acted: no answer ever comes (the
    /// caller's time limit ends it).
    LostBefore,
    /// Storage acts on it, and its answer is lost.
    LostAfter,
    /// Storage acts on it [`LATE`] after it was sent, past every caller's
    /// time limit, and no answer comes.
    Late,
}

impl Way {
    pub const ALL: [Way; 4] = [Way::Refused, Way::LostBefore, Way::LostAfter, Way::Late];

    pub fn as_str(self) -> &'static str {
        match self {
            Way::Refused => "refused",
            Way::LostBefore => "lost-before",
            Way::LostAfter => "lost-after",
            Way::Late => "late",
        }
    }

    pub fn parse(word: &str) -> Option<Way> {
        Way::ALL.into_iter().find(|w| w.as_str() == word)
    }
}

/// How long a seeded plan fails requests, from the start of its run.
pub const SEEDED_FOR: Duration = Duration::from_secs(60);

/// How long after it was sent a [`Way::Late`] request acts: past the
/// request timeout of every shape (3 s by default), so that its caller
/// has given up on it.
pub const LATE: Duration = Duration::from_secs(4);

/// A request, as a run names it: who sent it (the caller's index), to
/// which account and lease, which call, and how many of the same its
/// caller had sent before. A name that stays the same when the requests
/// of other callers interleave otherwise.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Request {
    pub caller: usize,
    pub account: usize,
    pub key: String,
    pub operation: &'static str,
    pub nth: usize,
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "i{}:a{}:{}:{}:{}",
            self.caller, self.account, self.key, self.operation, self.nth
        )
    }
}

impl std::str::FromStr for Request {
    type Err = String;

    /// Reads what [`Display`](fmt::Display) writes (a key has no `:`);
    /// the call must be one of [`OPERATIONS`].
    fn from_str(text: &str) -> Result<Self, String> {
        let bad = || format!("not a request: {text} (i<caller>:a<account>:<key>:<call>:<n>)");
        let parts: Vec<&str> = text.split(':').collect();
        let [caller, account, key, operation, nth] = parts[..] else {
            return Err(bad());
        };
        let number = |text: &str, prefix: &str| -> Result<usize, String> {
            text.strip_prefix(prefix)
                .and_then(|n| n.parse().ok())
                .ok_or_else(bad)
        };
        Ok(Request {
            caller: number(caller, "i")?,
            account: number(account, "a")?,
            key: key.to_owned(),
            operation: OPERATIONS
                .iter()
                .copied()
                .find(|o| *o == operation)
                .ok_or_else(bad)?,
            nth: number(nth, "")?,
        })
    }
}

/// Every call a faulty store sends, by the name the plan knows it by.
pub const OPERATIONS: &[&str] = &[
    "acquire",
    "renew",
    "release",
    "stamp",
    "inspect",
    "change",
    "advertise",
    "keep advertising",
    "withdraw",
    "list candidates",
    "read state",
    "write state",
    "list",
];

/// One request as the plan saw it: when it was sent, and the way it
/// failed, if it did.
#[derive(Clone, Debug)]
pub struct Sent {
    pub request: Request,
    pub at: Instant,
    pub way: Option<Way>,
}

/// What fails.
enum Rule {
    /// Nothing.
    None,
    /// This one request, this way.
    One(Request, Way),
    /// Each request with this chance, in a way drawn from the seed, and
    /// every request sent within the outage (from, to, since the plan was
    /// made) refused or lost, as drawn.
    Seeded {
        rng: Rng,
        chance: f64,
        outage: (Duration, Duration),
    },
}

/// The plan of one run, and the requests it saw.
pub struct Plan {
    rule: Rule,
    made: Instant,
    counts: BTreeMap<(usize, usize, String, &'static str), usize>,
    sent: Vec<Sent>,
}

impl Default for Plan {
    /// Nothing fails.
    fn default() -> Self {
        Plan {
            rule: Rule::None,
            made: Instant::now(),
            counts: BTreeMap::new(),
            sent: Vec::new(),
        }
    }
}

impl Plan {
    /// Fails `request` in `way`, and nothing else.
    pub fn one(request: Request, way: Way) -> Self {
        Plan {
            rule: Rule::One(request, way),
            ..Plan::default()
        }
    }

    /// Fails each request with `chance`, in a way drawn from `seed`, and
    /// makes storage unreachable for 5 to 25 s, from 5 to 30 s in (drawn
    /// from `seed` too): every request sent meanwhile is refused or lost.
    /// Nothing fails after [`SEEDED_FOR`], so that a run comes to its calm.
    pub fn seeded(seed: u64, chance: f64) -> Self {
        let mut rng = Rng(seed);
        let from = rng.between(Duration::from_secs(5), Duration::from_secs(30));
        let to = from + rng.between(Duration::from_secs(5), Duration::from_secs(25));
        Plan {
            rule: Rule::Seeded {
                rng,
                chance,
                outage: (from, to),
            },
            ..Plan::default()
        }
    }

    /// Counts the plan's time (its outage) from now: when the run it
    /// belongs to starts, on the run's clock.
    pub fn begin(&mut self) {
        self.made = Instant::now();
    }

    /// Counts a request and says whether and how it fails.
    pub fn decide(
        &mut self,
        caller: usize,
        account: usize,
        key: &str,
        operation: &'static str,
    ) -> Option<Way> {
        let count = self
            .counts
            .entry((caller, account, key.to_owned(), operation))
            .or_default();
        let request = Request {
            caller,
            account,
            key: key.to_owned(),
            operation,
            nth: *count,
        };
        *count += 1;
        let way = match &mut self.rule {
            Rule::None => None,
            Rule::One(target, way) => (*target == request).then_some(*way),
            Rule::Seeded {
                rng,
                chance,
                outage: (from, to),
            } => {
                let since = self.made.elapsed();
                if since >= SEEDED_FOR {
                    None
                } else if since >= *from && since < *to {
                    Some(if rng.below(2) == 0 {
                        Way::Refused
                    } else {
                        Way::LostBefore
                    })
                } else {
                    (rng.unit() < *chance)
                        .then(|| Way::ALL[usize::try_from(rng.below(4)).unwrap_or(0)])
                }
            }
        };
        self.sent.push(Sent {
            request,
            at: Instant::now(),
            way,
        });
        way
    }

    /// Every request seen, in the order sent.
    pub fn sent(&self) -> &[Sent] {
        &self.sent
    }
}

/// The error of a [`Way::Refused`] request: 503 `ServerBusy` or 500
/// `InternalError`, alternately.
pub fn refused(nth: usize) -> Error {
    if nth.is_multiple_of(2) {
        Error::Storage {
            status: 503,
            code: Some("ServerBusy".to_owned()),
            message: "The server is busy.".to_owned(),
        }
    } else {
        Error::Storage {
            status: 500,
            code: Some("InternalError".to_owned()),
            message: "The server encountered an internal error.".to_owned(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_reads_back_as_it_is_written() {
        for request in [
            Request {
                caller: 2,
                account: 0,
                key: "mutex".to_owned(),
                operation: "write state",
                nth: 7,
            },
            Request {
                caller: 0,
                account: 1,
                key: "partitions/p0".to_owned(),
                operation: "keep advertising",
                nth: 0,
            },
        ] {
            assert_eq!(request.to_string().parse::<Request>(), Ok(request));
        }
        assert!("i0:a0:mutex:dance:1".parse::<Request>().is_err());
    }
}
