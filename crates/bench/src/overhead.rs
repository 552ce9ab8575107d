//! Section `overhead`: the crate's acquire and renew against the same
//! request made with the bare SDK client, interleaved on the same Azurite
//! (without a proxy).

use blob_mutex::store::LeaseStore;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use anyhow::{ensure, Result};
use azure_core_v021::prelude::{LeaseDuration, ProposedLeaseId};
use azure_core_v021::RetryOptions;
use azure_storage::{CloudLocation, StorageCredentials};
use azure_storage_blobs::prelude::{BlobClient, ClientBuilder};
use blob_mutex::{azure::Backend, azure::BlobLeaseManager, store::Acquire, store::LeaseId};
use blob_mutex_testkit::azurite::{unique_container, Azurite, ACCOUNT, DEV_KEY};

use crate::json::{self, Json};
use crate::report::{ms, percent, Report};
use crate::stats::stats;
use crate::Config;

/// Pairs timed and thrown away before the measured ones.
const WARMUP: usize = 50;

/// The lease the set-up takes and the acquires ask for, in seconds.
const LEASE_SECS: u8 = 15;

/// The operations compared, each against a blob in the state it needs.
#[derive(Clone, Copy)]
enum Op {
    /// Acquire again the lease we hold (idempotent; 201).
    AcquireOwn,
    /// Acquire a lease held under another id (409).
    AcquireHeld,
    /// Renew the lease we hold (200).
    Renew,
}

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::AcquireOwn => "acquire (201, lease ours)",
            Op::AcquireHeld => "acquire (409, held by another)",
            Op::Renew => "renew (200)",
        }
    }
}

/// The crate's and the bare SDK's clients of both blobs.
struct Clients {
    own_crate: BlobLeaseManager,
    held_crate: BlobLeaseManager,
    own_bare: BlobClient,
    held_bare: BlobClient,
    ours: LeaseId,
    theirs: LeaseId,
    /// `ours` as the SDK's type.
    ours_sdk: azure_core_v021::request_options::LeaseId,
}

impl Clients {
    /// Clients of two new blobs, each leased: "own" under `ours`, "held"
    /// under `theirs`.
    async fn set_up(azurite: &Azurite) -> Result<Clients> {
        let container = unique_container("bench-overhead");
        let manager = |blob: &str| -> Result<BlobLeaseManager> {
            // The 0.21 backend, to compare like with like.
            let settings = azurite.settings(&container, blob);
            Ok(BlobLeaseManager::new(
                &settings.with_backend(Backend::SdkV021),
            )?)
        };
        let bare = |blob: &str| -> BlobClient {
            let location = CloudLocation::Custom {
                account: ACCOUNT.to_owned(),
                uri: azurite.endpoint.clone(),
            };
            ClientBuilder::with_location(
                location,
                StorageCredentials::access_key(ACCOUNT, DEV_KEY.to_owned()),
            )
            .retry(RetryOptions::none())
            .blob_client(&container, blob)
        };
        let ours = LeaseId::new();
        let clients = Clients {
            own_crate: manager("own")?,
            held_crate: manager("held")?,
            own_bare: bare("own"),
            held_bare: bare("held"),
            ours,
            theirs: LeaseId::new(),
            ours_sdk: azure_core_v021::request_options::LeaseId::from(uuid::Uuid::parse_str(
                &ours.to_string(),
            )?),
        };
        let lease = Duration::from_secs(LEASE_SECS.into());
        ensure!(
            clients.own_crate.acquire(ours, lease).await? == Acquire::Acquired,
            "set-up acquire"
        );
        ensure!(
            clients.held_crate.acquire(clients.theirs, lease).await? == Acquire::Acquired,
            "set-up acquire"
        );
        Ok(clients)
    }

    async fn with_crate(&self, op: Op) -> Result<()> {
        let lease = Duration::from_secs(LEASE_SECS.into());
        match op {
            Op::AcquireOwn => ensure!(
                self.own_crate.acquire(self.ours, lease).await? == Acquire::Acquired,
                "crate acquire"
            ),
            Op::AcquireHeld => ensure!(
                self.held_crate.acquire(self.ours, lease).await? == Acquire::Held,
                "crate held"
            ),
            Op::Renew => self.own_crate.renew(self.ours).await?,
        }
        Ok(())
    }

    async fn with_bare_sdk(&self, op: Op) -> Result<()> {
        let id = self.ours_sdk;
        let acquire = |client: &BlobClient| {
            client
                .acquire_lease(LeaseDuration::Seconds(LEASE_SECS))
                .proposed_lease_id(ProposedLeaseId::from(id))
        };
        match op {
            Op::AcquireOwn => ensure!(
                acquire(&self.own_bare).await?.lease_id == id,
                "bare acquire"
            ),
            Op::AcquireHeld => ensure!(acquire(&self.held_bare).await.is_err(), "bare held"),
            Op::Renew => ensure!(
                self.own_bare.blob_lease_client(id).renew().await?.lease_id == id,
                "bare renew"
            ),
        }
        Ok(())
    }

    /// Seconds that one crate call and one bare call took, `crate_first`
    /// deciding which goes first.
    async fn pair(&self, op: Op, crate_first: bool) -> Result<(f64, f64)> {
        let timed_crate = async {
            let started = Instant::now();
            self.with_crate(op).await?;
            Ok::<_, anyhow::Error>(started.elapsed().as_secs_f64())
        };
        let timed_bare = async {
            let started = Instant::now();
            self.with_bare_sdk(op).await?;
            Ok::<_, anyhow::Error>(started.elapsed().as_secs_f64())
        };
        if crate_first {
            let c = timed_crate.await?;
            Ok((c, timed_bare.await?))
        } else {
            let b = timed_bare.await?;
            Ok((timed_crate.await?, b))
        }
    }

    /// Times `samples` pairs after [`WARMUP`] pairs, alternating which of
    /// the two goes first so that neither always follows the other; returns
    /// the seconds of the crate's calls and of the bare SDK's.
    async fn time(&self, op: Op, samples: usize) -> Result<(Vec<f64>, Vec<f64>)> {
        let mut crate_times = Vec::with_capacity(samples);
        let mut bare_times = Vec::with_capacity(samples);
        for i in 0..samples + WARMUP {
            let (timed_crate, timed_bare) = self.pair(op, i % 2 == 0).await?;
            if i >= WARMUP {
                crate_times.push(timed_crate);
                bare_times.push(timed_bare);
            }
        }
        Ok((crate_times, bare_times))
    }

    async fn release(&self) {
        let _ = self.own_crate.release(self.ours).await;
        let _ = self.held_crate.release(self.theirs).await;
    }
}

pub(crate) async fn overhead(
    config: &Config,
    azurite: &Azurite,
    report: &mut Report,
) -> Result<()> {
    let clients = Clients::set_up(azurite).await?;
    let samples = config.overhead_samples;
    let mut json = Vec::new();
    let mut rows = String::new();
    let mut summary = Vec::new();
    for op in [Op::AcquireOwn, Op::AcquireHeld, Op::Renew] {
        let (crate_times, bare_times) = clients.time(op, samples).await?;
        let c = stats(&crate_times);
        let b = stats(&bare_times);
        let diffs: Vec<f64> = crate_times
            .iter()
            .zip(&bare_times)
            .map(|(c, b)| c - b)
            .collect();
        let paired = stats(&diffs);
        let ratio = c.median / b.median;
        let p99_ratio = c.p99 / b.p99;
        let label = op.label();
        let _ = writeln!(
            rows,
            "| {label} | {} / {} | {} / {} | {ratio:.3} ({}) | {p99_ratio:.3} | {:+.1} µs |",
            ms(b.median),
            ms(b.p99),
            ms(c.median),
            ms(c.p99),
            percent(ratio - 1.0),
            paired.median * 1e6
        );
        summary.push((label, ratio, p99_ratio));
        json.push(json::obj([
            ("operation", json::str(label)),
            ("samples", json::count(samples)),
            ("bare_sdk_seconds", json::stats(&b)),
            ("crate_seconds", json::stats(&c)),
            ("median_ratio", json::num(ratio)),
            ("p99_ratio", json::num(p99_ratio)),
            ("paired_difference_seconds", json::stats(&paired)),
        ]));
        eprintln!(
            "  {label}: bare {} crate {} ratio {ratio:.3}",
            ms(b.median),
            ms(c.median)
        );
    }
    clients.release().await;

    report.section("overhead", Json::Array(json));
    for (label, ratio, p99_ratio) in summary {
        report.target(
            &format!("crate overhead, {label}"),
            format!(
                "{} at the median, {} at p99",
                percent(ratio - 1.0),
                percent(p99_ratio - 1.0)
            ),
            "≤ 5 % of the bare median".to_owned(),
            Some(ratio - 1.0 <= 0.05),
        );
    }
    let d = &mut report.details;
    let _ = writeln!(d, "### Overhead over the bare SDK\n");
    let _ = writeln!(
        d,
        "`BlobLeaseManager::acquire`/`renew` against the same request made with \
         `azure_storage_blobs` directly (`ClientBuilder::with_location(..).retry(RetryOptions::none())`), \
         on the same Azurite without a proxy, {samples} pairs per operation after {WARMUP} warm-up pairs, \
         alternating which of the two goes first. The paired difference is the median of \
         (crate − bare) over the pairs.\n"
    );
    let _ = writeln!(d, "| operation | bare SDK median / p99 | crate median / p99 | median ratio | p99 ratio | paired difference |");
    let _ = writeln!(d, "|---|---|---|---|---|---|");
    d.push_str(&rows);
    d.push('\n');
    Ok(())
}
