//! Shared access signatures signed here from the account key, because the
//! official SDK takes no shared key (a decision of the SDK's authors): the
//! settings that hold a key (`AccountKey=`, `UseDevelopmentStorage=true`)
//! reach storage on this backend through short-lived SAS tokens that a
//! pipeline policy puts on each request.
//!
//! - **Scope:** a service SAS on the settings' container with read, add,
//!   create, write, delete and list (`racwdl`): everything the crate does
//!   on blobs. Creating the container itself is an account-level call; it
//!   alone gets an account SAS that may only create containers (`srt=c`,
//!   `sp=c`).
//! - **Lifetime:** valid from [`SKEW`] before it is signed to
//!   [`VALID_FOR`] after, and signed anew once less than [`RENEW_WHEN`] is
//!   left, so that no request carries a token near its end.
//! - **Clock:** signed on storage's clock, not this host's. Storage checks
//!   `st` and `se` against its own time, so on this host's clock a host
//!   more than [`SKEW`] ahead (or [`VALID_FOR`] behind) would have every
//!   token refused with 403, and 403 is fatal. Every answer's `Date` header
//!   is storage's time; after one, storage's time is that `Date` plus the
//!   monotonic time since it came, so this host's wall clock (and NTP
//!   stepping it) no longer matters, and a cached token that does not
//!   bracket storage's time is signed anew. Before any answer the wall
//!   clock is all there is: a request refused with 403 whose `Date` falls
//!   outside the token it carried is signed again on that `Date` and sent
//!   once more (`sas_policy`), which also covers a monotonic clock that
//!   stood still while the host slept; a 403 with a token valid at
//!   storage's time (a real refusal) is never sent again. So any host
//!   clock error is tolerated, at the cost of one refused request at most.
//!   Learning from `Date` rather than only re-signing on 403 keeps every
//!   later request at one round trip.
//! - **Format:** the string to sign of service version 2020-12-06 and
//!   later ("Create a service SAS" and "Create an account SAS" in the Azure
//!   Storage REST reference), HMAC-SHA256 with the decoded key, base64.
//! - **Secrecy:** the key, the signature and the token appear in no
//!   `Debug`, log line or error.

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use azure_core::credentials::Secret;
use azure_core::http::{Method, Request};
use time::OffsetDateTime;

use crate::error::{Error, Result};

/// The service version the tokens are signed for (`sv`): the newest whose
/// SAS format Azurite 3.35 checks as Azure does.
const SAS_VERSION: &str = "2022-11-02";
/// How long a token is valid after it is signed.
const VALID_FOR: Duration = Duration::from_secs(60 * 60);
/// How early a token starts, for a storage clock behind this host's.
const SKEW: Duration = Duration::from_secs(15 * 60);
/// A token with less than this left is signed anew.
const RENEW_WHEN: Duration = Duration::from_secs(45 * 60);
/// What a container SAS permits: read, add, create, write, delete, list.
const CONTAINER_PERMISSIONS: &str = "racwdl";

/// This host's clock, as the signer reads it: the system's, or a test's.
pub(super) type Clock = Arc<dyn Fn() -> OffsetDateTime + Send + Sync>;

/// A signed token (the query to put on a request) and its validity.
#[derive(Clone)]
pub(super) struct Token {
    pub(super) query: Arc<str>,
    start: OffsetDateTime,
    expiry: OffsetDateTime,
}

impl Token {
    /// Whether storage takes the token at its time `at`.
    pub(super) fn valid_at(&self, at: OffsetDateTime) -> bool {
        self.start <= at && at < self.expiry
    }
}

/// Signs the tokens of one container with the account key, on storage's
/// clock as far as its answers told it.
pub(super) struct Signer {
    account: String,
    container: String,
    key: Secret,
    /// The container token last signed.
    current: Mutex<Option<Token>>,
    /// The `Date` of the latest answer, and this host's monotonic
    /// instant when it came: storage's clock. `None` until one came.
    storage: Mutex<Option<(OffsetDateTime, Instant)>>,
    /// This host's wall clock.
    clock: Clock,
}

impl fmt::Debug for Signer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Signer")
            .field("account", &self.account)
            .field("container", &self.container)
            .finish_non_exhaustive()
    }
}

impl Signer {
    /// A signer for `container` of `account` with the base64 account `key`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidConnectionString`] when the key is not base64.
    pub(super) fn new(account: &str, container: &str, key: &str) -> Result<Self> {
        Self::with_clock(account, container, key, Arc::new(OffsetDateTime::now_utc))
    }

    /// A signer that reads this host's time from `clock`.
    pub(super) fn with_clock(
        account: &str,
        container: &str,
        key: &str,
        clock: Clock,
    ) -> Result<Self> {
        let signer = Signer {
            account: account.to_owned(),
            container: container.to_owned(),
            key: Secret::new(key.to_owned()),
            current: Mutex::new(None),
            storage: Mutex::new(None),
            clock,
        };
        signer.sign("")?;
        Ok(signer)
    }

    /// Storage's time now, as far as its answers told it; this host's
    /// wall clock before any answer came.
    pub(super) fn storage_now(&self) -> OffsetDateTime {
        match *self.storage.lock().unwrap_or_else(PoisonError::into_inner) {
            Some((date, at)) => date + at.elapsed(),
            None => (self.clock)(),
        }
    }

    /// Learns storage's clock from the `Date` of an answer received now,
    /// and returns how far it is from this host's wall clock.
    pub(super) fn observe(&self, date: OffsetDateTime) -> time::Duration {
        *self.storage.lock().unwrap_or_else(PoisonError::into_inner) = Some((date, Instant::now()));
        date - (self.clock)()
    }

    /// The container token in force at storage's time `now`, signed anew
    /// when less than [`RENEW_WHEN`] of it is left or when it does not
    /// start yet (it was signed on a clock that was ahead).
    fn container_token(&self, now: OffsetDateTime) -> Result<Token> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(token) = current.as_ref() {
            if token.start <= now && token.expiry - now > RENEW_WHEN {
                return Ok(token.clone());
            }
        }
        let (start, expiry) = (now - SKEW, now + VALID_FOR);
        let token = Token {
            query: self.container_sas(start, expiry)?.into(),
            start,
            expiry,
        };
        *current = Some(token.clone());
        Ok(token)
    }

    /// A service SAS on the container, valid from `start` to `expiry`.
    fn container_sas(&self, start: OffsetDateTime, expiry: OffsetDateTime) -> Result<String> {
        let (start, expiry) = (timestamp(start), timestamp(expiry));
        let resource = format!("/blob/{}/{}", self.account, self.container);
        let to_sign = container_string_to_sign(CONTAINER_PERMISSIONS, &start, &expiry, &resource);
        Ok(format!(
            "sv={SAS_VERSION}&sr=c&sp={CONTAINER_PERMISSIONS}&st={}&se={}&sig={}",
            encode(&start),
            encode(&expiry),
            encode(&self.sign(&to_sign)?)
        ))
    }

    /// An account SAS that may only create containers, valid from `start`
    /// to `expiry`.
    fn create_container_sas(
        &self,
        start: OffsetDateTime,
        expiry: OffsetDateTime,
    ) -> Result<String> {
        let (start, expiry) = (timestamp(start), timestamp(expiry));
        let to_sign = account_string_to_sign(&self.account, "c", "c", &start, &expiry);
        Ok(format!(
            "sv={SAS_VERSION}&ss=b&srt=c&sp=c&st={}&se={}&sig={}",
            encode(&start),
            encode(&expiry),
            encode(&self.sign(&to_sign)?)
        ))
    }

    fn sign(&self, to_sign: &str) -> Result<String> {
        azure_core::hmac::hmac_sha256(to_sign, &self.key).map_err(|_| {
            Error::InvalidConnectionString("AccountKey is not a valid base64 key".to_owned())
        })
    }

    /// The token for `request` at storage's time: the container token, or
    /// for the Create Container call the account token that may only do
    /// that.
    pub(super) fn token_for(&self, request: &Request) -> Result<Token> {
        let now = self.storage_now();
        if is_create_container(request) {
            let (start, expiry) = (now - SKEW, now + VALID_FOR);
            return Ok(Token {
                query: self.create_container_sas(start, expiry)?.into(),
                start,
                expiry,
            });
        }
        self.container_token(now)
    }
}

/// Whether `request` is Create Container: `PUT …/container?restype=container`
/// with no `comp`.
fn is_create_container(request: &Request) -> bool {
    let url = request.url();
    request.method() == Method::Put
        && url
            .query_pairs()
            .any(|(k, v)| k == "restype" && v == "container")
        && !url.query_pairs().any(|(k, _)| k == "comp")
}

/// The string to sign of a service SAS on a container (version 2020-12-06
/// and later): permissions, start, expiry, canonicalized resource,
/// identifier, IP, protocol, version, resource (`c`), snapshot time,
/// encryption scope, then the five response-header overrides.
fn container_string_to_sign(
    permissions: &str,
    start: &str,
    expiry: &str,
    resource: &str,
) -> String {
    [
        permissions,
        start,
        expiry,
        resource,
        "",
        "",
        "",
        SAS_VERSION,
        "c",
        "",
        "",
        "",
        "",
        "",
        "",
        "",
    ]
    .join("\n")
}

/// The string to sign of an account SAS for the blob service (version
/// 2020-12-06 and later): account, permissions, services (`b`), resource
/// types, start, expiry, IP, protocol, version, encryption scope, and an
/// empty last line.
fn account_string_to_sign(
    account: &str,
    permissions: &str,
    resource_types: &str,
    start: &str,
    expiry: &str,
) -> String {
    [
        account,
        permissions,
        "b",
        resource_types,
        start,
        expiry,
        "",
        "",
        SAS_VERSION,
        "",
        "",
    ]
    .join("\n")
}

/// `2026-11-24T06:03:45Z`: UTC to the second, as SAS times are written.
fn timestamp(at: OffsetDateTime) -> String {
    let at = at.to_offset(time::UtcOffset::UTC);
    format!(
        "{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z",
        at.year(),
        u8::from(at.month()),
        at.day(),
        at.hour(),
        at.minute(),
        at.second()
    )
}

/// Percent-encodes everything but the URL's unreserved characters.
fn encode(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 8);
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(char::from(byte));
        } else {
            let _ = write!(out, "%{byte:02X}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use time::format_description::well_known::Iso8601;

    /// Azurite's well-known development key: public, and still never printed.
    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    fn at(text: &str) -> OffsetDateTime {
        OffsetDateTime::parse(text, &Iso8601::DEFAULT).unwrap()
    }

    #[test]
    fn the_container_string_to_sign_is_the_documented_one() {
        let to_sign = container_string_to_sign(
            "racwdl",
            "2026-01-01T00:00:00Z",
            "2026-01-01T01:00:00Z",
            "/blob/devstoreaccount1/leases",
        );
        assert_eq!(
            to_sign,
            "racwdl\n2026-01-01T00:00:00Z\n2026-01-01T01:00:00Z\n/blob/devstoreaccount1/leases\n\n\n\n2022-11-02\nc\n\n\n\n\n\n\n"
        );
        let account = account_string_to_sign(
            "devstoreaccount1",
            "c",
            "c",
            "2026-01-01T00:00:00Z",
            "2026-01-01T01:00:00Z",
        );
        assert_eq!(
            account,
            "devstoreaccount1\nc\nb\nc\n2026-01-01T00:00:00Z\n2026-01-01T01:00:00Z\n\n\n2022-11-02\n\n"
        );
    }

    /// The signature of fixed inputs, computed independently:
    /// `python3 -c 'import hmac,hashlib,base64; print(base64.b64encode(hmac.new(base64.b64decode(KEY), TO_SIGN.encode(), hashlib.sha256).digest()).decode())'`.
    #[test]
    fn a_token_of_fixed_inputs_has_the_known_signature() {
        let signer = Signer::new("devstoreaccount1", "leases", KEY).unwrap();
        let token = signer
            .container_sas(at("2026-01-01T00:00:00Z"), at("2026-01-01T01:00:00Z"))
            .unwrap();
        assert_eq!(
            token,
            format!(
                "sv=2022-11-02&sr=c&sp=racwdl&st=2026-01-01T00%3A00%3A00Z&se=2026-01-01T01%3A00%3A00Z&sig={}",
                encode(CONTAINER_SIGNATURE)
            )
        );
    }

    const CONTAINER_SIGNATURE: &str = "X3OdjiZUXLG46DTmCN7aMnIeNi9K0csWPJSKMxUvQYc=";

    #[test]
    fn a_token_is_reused_until_it_nears_its_end_then_signed_anew() {
        let signer = Signer::new("devstoreaccount1", "leases", KEY).unwrap();
        let start = at("2026-01-01T00:00:00Z");
        let first = signer.container_token(start).unwrap().query;
        let later = start + VALID_FOR.saturating_sub(RENEW_WHEN) - Duration::from_secs(1);
        assert!(Arc::ptr_eq(
            &first,
            &signer.container_token(later).unwrap().query
        ));
        let renewed = signer
            .container_token(later + Duration::from_secs(2))
            .unwrap()
            .query;
        assert_ne!(first, renewed);
        assert!(renewed.contains("se=2026-01-01T01%3A15%3A01Z"), "{renewed}");
    }

    #[test]
    fn a_bad_key_is_refused_without_echoing_it() {
        let err = Signer::new("acct", "leases", "not base64 !!").unwrap_err();
        assert!(matches!(err, Error::InvalidConnectionString(_)), "{err:?}");
        assert!(!err.to_string().contains("not base64 !!"), "{err}");
        let shown = format!("{:?}", Signer::new("acct", "leases", KEY).unwrap());
        assert!(!shown.contains(KEY) && !shown.contains("sig="), "{shown}");
    }

    /// The `st` and `se` of a token's query.
    fn window(token: &Token) -> (String, String) {
        let url = azure_core::http::Url::parse(&format!("http://h/?{}", token.query)).unwrap();
        let pairs: Vec<(String, String)> = url.query_pairs().into_owned().collect();
        let find = |name: &str| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        (find("st"), find("se"))
    }

    #[test]
    fn after_an_answer_tokens_bracket_storage_time_whatever_the_host_clock() {
        let server = at("2026-03-01T12:00:00Z");
        let request = Request::new(
            "http://127.0.0.1:10000/devstoreaccount1/leases/b"
                .parse()
                .unwrap(),
            Method::Get,
        );
        for minutes in [20, -20, 0, 24 * 60, -24 * 60] {
            let host = server + time::Duration::minutes(minutes);
            let signer =
                Signer::with_clock("devstoreaccount1", "leases", KEY, Arc::new(move || host))
                    .unwrap();
            // On the host's clock alone, a clock 20 minutes ahead signs a
            // token that starts after storage's now.
            let blind = signer.token_for(&request).unwrap();
            assert_eq!(
                blind.valid_at(server),
                minutes > -60 && minutes < 15,
                "{minutes}"
            );
            let offset = signer.observe(server);
            assert_eq!(offset, time::Duration::minutes(-minutes));
            let token = signer.token_for(&request).unwrap();
            assert!(token.valid_at(server), "{minutes}");
            let (start, expiry) = window(&token);
            assert_eq!(start, "2026-03-01T11:45:00Z", "{minutes}");
            assert!(
                ["2026-03-01T13:00:00Z", "2026-03-01T13:00:01Z"].contains(&expiry.as_str()),
                "{minutes}: {expiry}"
            );
        }
    }
}
