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
//! - **Lifetime:** valid from [`SKEW`] before it is signed (clocks differ)
//!   to [`VALID_FOR`] after, and signed anew once less than [`RENEW_WHEN`]
//!   is left, so that no request carries a token near its end.
//! - **Format:** the string to sign of service version 2020-12-06 and
//!   later ("Create a service SAS" and "Create an account SAS" in the Azure
//!   Storage REST reference), HMAC-SHA256 with the decoded key, base64.
//! - **Secrecy:** the key, the signature and the token appear in no
//!   `Debug`, log line or error.

use std::fmt::{self, Write as _};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use azure_core::credentials::Secret;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{Context, Method, Request};
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

/// Signs the tokens of one container with the account key.
pub(super) struct Signer {
    account: String,
    container: String,
    key: Secret,
    /// The container token last signed, and when it expires.
    current: Mutex<Option<(OffsetDateTime, Arc<str>)>>,
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
        let signer = Signer {
            account: account.to_owned(),
            container: container.to_owned(),
            key: Secret::new(key.to_owned()),
            current: Mutex::new(None),
        };
        signer.sign("")?;
        Ok(signer)
    }

    /// The container token in force at `now`, signed anew when less than
    /// [`RENEW_WHEN`] of it is left.
    fn container_token(&self, now: OffsetDateTime) -> Result<Arc<str>> {
        let mut current = self.current.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((expiry, token)) = current.as_ref() {
            if *expiry - now > RENEW_WHEN {
                return Ok(token.clone());
            }
        }
        let expiry = now + VALID_FOR;
        let token: Arc<str> = self.container_sas(now - SKEW, expiry)?.into();
        *current = Some((expiry, token.clone()));
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

    /// The token for `request` at `now`: the container token, or for the
    /// Create Container call the account token that may only do that.
    fn token_for(&self, request: &Request, now: OffsetDateTime) -> Result<Arc<str>> {
        if is_create_container(request) {
            return Ok(self
                .create_container_sas(now - SKEW, now + VALID_FOR)?
                .into());
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

/// The pipeline policy that puts the signer's token on every request.
#[derive(Debug)]
pub(super) struct SignWithKey(pub(super) Arc<Signer>);

#[async_trait::async_trait]
impl Policy for SignWithKey {
    async fn send(
        &self,
        ctx: &Context,
        request: &mut Request,
        next: &[Arc<dyn Policy>],
    ) -> PolicyResult {
        let token = self
            .0
            .token_for(request, OffsetDateTime::now_utc())
            .map_err(|e| {
                azure_core::Error::with_message(
                    azure_core::error::ErrorKind::Credential,
                    e.to_string(),
                )
            })?;
        let url = request.url_mut();
        let query = match url.query() {
            Some(query) if !query.is_empty() => format!("{query}&{token}"),
            _ => token.to_string(),
        };
        url.set_query(Some(&query));
        next[0].send(ctx, request, &next[1..]).await
    }
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
        let first = signer.container_token(start).unwrap();
        let later = start + VALID_FOR.saturating_sub(RENEW_WHEN) - Duration::from_secs(1);
        assert!(Arc::ptr_eq(&first, &signer.container_token(later).unwrap()));
        let renewed = signer
            .container_token(later + Duration::from_secs(2))
            .unwrap();
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
}
