//! The pipeline policy that puts the account key's SAS on every request
//! and keeps the signer on storage's clock: it reads the `Date` of every
//! answer, and sends a request once more, signed on that `Date`, when
//! storage refused it with 403 at a time its token did not cover (see
//! `sas`, "Clock", for why both).

use std::sync::Arc;

use azure_core::http::headers::HeaderName;
use azure_core::http::policies::{Policy, PolicyResult};
use azure_core::http::{AsyncRawResponse, Context, Request, StatusCode};
use time::OffsetDateTime;
use tracing::{debug, warn};

use super::sas::{Signer, Token};

const DATE: HeaderName = HeaderName::from_static("date");

/// An offset from storage's clock past which a refused request says so at
/// `warn`: well under the SAS's start margin of 15 minutes.
const WARN_OFFSET: time::Duration = time::Duration::minutes(1);

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
        let unsigned = request.url().clone();
        let token = self.sign(request)?;
        let response = next[0].send(ctx, request, &next[1..]).await?;
        let Some(date) = date_of(&response) else {
            return Ok(response);
        };
        let offset = self.0.observe(date);
        if response.status() != StatusCode::Forbidden || token.valid_at(date) {
            return Ok(response);
        }
        // Refused at a time the token did not cover: it was signed on a
        // clock that was off. Once more, on storage's.
        let seconds = offset.whole_seconds();
        if offset.abs() > WARN_OFFSET {
            warn!(
                offset_seconds = seconds,
                "this host's clock differs from storage's; signing on storage's clock"
            );
        } else {
            debug!(
                offset_seconds = seconds,
                "a token outside storage's time was refused; signing again"
            );
        }
        *request.url_mut() = unsigned;
        request.body_mut().reset().await?;
        self.sign(request)?;
        let response = next[0].send(ctx, request, &next[1..]).await?;
        if let Some(date) = date_of(&response) {
            self.0.observe(date);
        }
        Ok(response)
    }
}

impl SignWithKey {
    /// Puts the signer's token for `request` on its query.
    fn sign(&self, request: &mut Request) -> azure_core::Result<Token> {
        let token = self.0.token_for(request).map_err(|e| {
            azure_core::Error::with_message(azure_core::error::ErrorKind::Credential, e.to_string())
        })?;
        let url = request.url_mut();
        let query = match url.query() {
            Some(query) if !query.is_empty() => format!("{query}&{}", token.query),
            _ => token.query.to_string(),
        };
        url.set_query(Some(&query));
        Ok(token)
    }
}

/// The `Date` of an answer: storage's time when it answered.
fn date_of(response: &AsyncRawResponse) -> Option<OffsetDateTime> {
    let text = response.headers().get_optional_str(&DATE)?;
    azure_core::time::parse_rfc7231(text).ok()
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;

    use azure_core::http::headers::Headers;
    use azure_core::http::{Method, Url};
    use time::format_description::well_known::Rfc3339;

    use super::*;
    use crate::azure::official::sas::Clock;

    /// Azurite's well-known development key: public, and still never printed.
    const KEY: &str =
        "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";

    /// Storage as far as SAS times go: it takes a request whose one token
    /// covers its own time (`now`), refuses it with 403 otherwise, and
    /// sends its time in `Date` either way.
    #[derive(Debug)]
    struct Storage {
        now: OffsetDateTime,
        sent: AtomicUsize,
        refused: AtomicUsize,
    }

    #[async_trait::async_trait]
    impl Policy for Storage {
        async fn send(
            &self,
            _: &Context,
            request: &mut Request,
            _: &[Arc<dyn Policy>],
        ) -> PolicyResult {
            self.sent.fetch_add(1, Ordering::SeqCst);
            let pairs: Vec<(String, String)> = request.url().query_pairs().into_owned().collect();
            let times = |name: &str| -> Vec<OffsetDateTime> {
                pairs
                    .iter()
                    .filter(|(k, _)| k == name)
                    .map(|(_, v)| OffsetDateTime::parse(v, &Rfc3339).unwrap())
                    .collect()
            };
            let (start, expiry) = (times("st"), times("se"));
            assert_eq!((start.len(), expiry.len()), (1, 1), "one token a request");
            let status = if start[0] <= self.now && self.now < expiry[0] {
                StatusCode::Ok
            } else {
                self.refused.fetch_add(1, Ordering::SeqCst);
                StatusCode::Forbidden
            };
            let mut headers = Headers::new();
            headers.insert(DATE, azure_core::time::to_rfc7231(&self.now));
            Ok(AsyncRawResponse::from_bytes(status, headers, Vec::new()))
        }
    }

    fn storage_at(now: &str) -> Arc<Storage> {
        Arc::new(Storage {
            now: OffsetDateTime::parse(now, &Rfc3339).unwrap(),
            sent: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
        })
    }

    /// A signer whose host clock is `skew` (which the test may change)
    /// from `storage`'s.
    fn signer(storage: &Arc<Storage>, skew: &Arc<Mutex<time::Duration>>) -> Arc<Signer> {
        let (now, skew) = (storage.now, skew.clone());
        let clock: Clock = Arc::new(move || now + *skew.lock().unwrap());
        Arc::new(Signer::with_clock("devstoreaccount1", "leases", KEY, clock).unwrap())
    }

    async fn get(policy: &SignWithKey, storage: &Arc<Storage>) -> StatusCode {
        let url =
            Url::parse("http://127.0.0.1:10000/devstoreaccount1/leases/b?comp=lease").unwrap();
        let mut request = Request::new(url, Method::Get);
        let next: Vec<Arc<dyn Policy>> = vec![storage.clone()];
        policy
            .send(&Context::new(), &mut request, &next)
            .await
            .unwrap()
            .status()
    }

    #[tokio::test]
    async fn a_host_clock_off_by_twenty_minutes_costs_one_refusal_then_none() {
        for minutes in [20, -70, 24 * 60] {
            let storage = storage_at("2026-03-01T12:00:00Z");
            let skew = Arc::new(Mutex::new(time::Duration::minutes(minutes)));
            let policy = SignWithKey(signer(&storage, &skew));
            assert_eq!(get(&policy, &storage).await, StatusCode::Ok, "{minutes}");
            assert_eq!(storage.refused.load(Ordering::SeqCst), 1, "{minutes}");
            for _ in 0..3 {
                assert_eq!(get(&policy, &storage).await, StatusCode::Ok);
            }
            assert_eq!(storage.refused.load(Ordering::SeqCst), 1, "{minutes}");
            assert_eq!(storage.sent.load(Ordering::SeqCst), 5, "{minutes}");

            // NTP steps the host clock right: the tokens stay valid.
            *skew.lock().unwrap() = time::Duration::ZERO;
            for _ in 0..3 {
                assert_eq!(get(&policy, &storage).await, StatusCode::Ok);
            }
            assert_eq!(storage.refused.load(Ordering::SeqCst), 1, "{minutes}");
        }
    }

    #[tokio::test]
    async fn a_refusal_at_a_time_the_token_covered_is_not_sent_again() {
        // Storage's time is within the token, yet it refuses (say, a
        // wrong key): one request, the 403 passed on.
        #[derive(Debug)]
        struct Refusing(OffsetDateTime, AtomicUsize);
        #[async_trait::async_trait]
        impl Policy for Refusing {
            async fn send(
                &self,
                _: &Context,
                _: &mut Request,
                _: &[Arc<dyn Policy>],
            ) -> PolicyResult {
                self.1.fetch_add(1, Ordering::SeqCst);
                let mut headers = Headers::new();
                headers.insert(DATE, azure_core::time::to_rfc7231(&self.0));
                Ok(AsyncRawResponse::from_bytes(
                    StatusCode::Forbidden,
                    headers,
                    Vec::new(),
                ))
            }
        }
        let storage = storage_at("2026-03-01T12:00:00Z");
        let skew = Arc::new(Mutex::new(time::Duration::minutes(5)));
        let policy = SignWithKey(signer(&storage, &skew));
        let refusing = Arc::new(Refusing(storage.now, AtomicUsize::new(0)));
        let url = Url::parse("http://127.0.0.1:10000/devstoreaccount1/leases/b").unwrap();
        let mut request = Request::new(url, Method::Get);
        let next: Vec<Arc<dyn Policy>> = vec![refusing.clone()];
        let response = policy
            .send(&Context::new(), &mut request, &next)
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::Forbidden);
        assert_eq!(refusing.1.load(Ordering::SeqCst), 1);
    }
}
