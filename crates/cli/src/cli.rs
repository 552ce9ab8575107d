//! The command line: commands, flags, and what they turn into.

// The doc comments here are the `--help` text, where Markdown backticks would show.
#![allow(clippy::doc_markdown)]

use std::ffi::OsString;
use std::time::Duration;

use anyhow::Result;
use blob_mutex::{
    azure::Backend, azure::BlobLeaseManager, azure::BlobLeaseSetStore, quorum::QuorumLeaseSetStore,
    quorum::QuorumLeaseStore, BlobSettings, MutexOptions,
};
use clap::builder::BoolishValueParser;
use clap::{ArgAction, Args, Parser, Subcommand};

use crate::child::{BLOB_ENV, CONTAINER_ENV, HOLDER_ENV};
use crate::exit::UsageError;
use crate::exit::TABLE;
use crate::signin::Auth;

mod account;

pub(crate) use account::Account;

const RUN_EXAMPLES: &str = "\
Examples:
  # A cron job that runs on one host only; the others skip it (exit code 3).
  blob-mutex run --container leases --blob nightly --wait 0 -- ./nightly-report.sh

  # The same from every host's cron, at most once per 20 hours across them all
  # (the others exit 0 and say they skipped it).
  blob-mutex run --container leases --blob nightly --once --at-most-every 20h -- ./nightly-report.sh

  # A migration at deploy time, on every host: one runs it, the others exit 0;
  # later runs with the same key skip it at once.
  blob-mutex run --container leases --blob schema --once --done-key migrate-v42 -- ./migrate.sh

  # A daemon that runs on exactly one host and fails over to another.
  blob-mutex run --container leases --blob scheduler --forever -- ./scheduler --serve

  # Signed in with the host's managed identity (Shared Key may be disabled;
  # the identity has Storage Blob Data Contributor on the container).
  blob-mutex run --account-url https://myaccount.blob.core.windows.net/leases \\
    --auth managed-identity --blob scheduler --forever -- ./scheduler

  # On AKS with workload identity (AZURE_CLIENT_ID, AZURE_TENANT_ID and
  # AZURE_FEDERATED_TOKEN_FILE come from the webhook), or with a SAS in a file.
  blob-mutex run --account-url https://myaccount.blob.core.windows.net --auth workload-identity \\
    --container leases --blob nightly -- ./nightly-report.sh
  blob-mutex run --account-url https://myaccount.blob.core.windows.net \\
    --auth sas-file:/run/secrets/leases.sas --container leases --blob nightly -- ./nightly-report.sh

  # On a quorum of storage accounts (one connection string, or account URL
  # and --auth kind, per line):
  # leads while a majority of their leases is held.
  blob-mutex run --accounts-file accounts.txt --container leases --blob scheduler --forever -- ./scheduler

  # Against a local Azurite.
  blob-mutex run --dev --container leases --blob demo -- sh -c 'echo \"epoch $BLOB_MUTEX_EPOCH\"; sleep 30'";

const STATUS_EXAMPLES: &str = "\
Examples:
  blob-mutex status --container leases --blob nightly
  blob-mutex status --container leases --blob nightly --json | jq .holder
  blob-mutex status --container leases --blob nightly >/dev/null && echo held
  # Signed in with Microsoft Entra ID (here: the Azure CLI's `az login`).
  blob-mutex status --account-url https://myaccount.blob.core.windows.net/leases --auth azure-cli --blob nightly
  # A quorum of three accounts: each account's lease, then the majority's view.
  blob-mutex status --accounts-file accounts.txt --container leases --blob nightly";

const SCHEDULE_EXAMPLES: &str = "\
Examples:
  # Every host's crontab line, replaced by one service on every host: the
  # report runs once a night at 02:30 Berlin time, on one of them.
  blob-mutex schedule --container leases --blob nightly --cron '30 2 * * *' --tz Europe/Berlin \\
    -- ./nightly-report.sh

  # Every 10 minutes; a slot whose host died mid-job is run again elsewhere
  # within 5 minutes of its time, and a slot due while a job runs waits.
  blob-mutex schedule --container leases --blob sync --cron '*/10 * * * *' --catch-up 5m \\
    --overlap wait -- sh -c 'echo \"slot $BLOB_MUTEX_SLOT epoch $BLOB_MUTEX_EPOCH\"; ./sync.sh'

  # Against a local Azurite, every 10 seconds (six fields: seconds first).
  blob-mutex schedule --dev --container leases --blob demo --cron '*/10 * * * * *' -- date";

const PARTITIONS_EXAMPLES: &str = "\
Examples:
  blob-mutex partitions --container leases --set ingest
  blob-mutex partitions --container leases --set ingest --json | jq '.partitions[] | {name, owner}'
  blob-mutex partitions --container leases --set ingest >/dev/null || echo 'no such set'";

const BREAK_EXAMPLES: &str = "\
Examples:
  # Free the lease at once; the running leader loses it and stops its command.
  blob-mutex break --container leases --blob nightly
  # Let the leader keep it for up to 10 more seconds.
  blob-mutex break --container leases --blob nightly --period 10s";

const STATE_EXAMPLES: &str = "\
Examples:
  # Inside the command that `run` started: no flags needed.
  blob-mutex run --container leases --blob nightly -- sh -c \\
    'last=$(blob-mutex state get); ./job.sh --since \"$last\" && date -u +%FT%TZ | blob-mutex state put'

  # Outside: read the state the last leader wrote.
  blob-mutex state get --container leases --blob nightly";

/// Run a command on one host at a time, using an Azure Blob Storage lease.
#[derive(Debug, Parser)]
#[command(name = "blob-mutex", version, after_help = TABLE)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
    /// How the logs on stderr are written: text, or json (one object per
    /// line, for a log shipper; the command's own stdout and stderr lines
    /// are then JSON lines on their streams too). RUST_LOG chooses what is
    /// logged [default: the leader's start and end, warnings and errors].
    #[arg(
        long,
        global = true,
        value_enum,
        value_name = "FORMAT",
        env = "BLOB_MUTEX_LOG_FORMAT",
        default_value_t = crate::logs::LogFormat::Text
    )]
    pub(crate) log_format: crate::logs::LogFormat,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
// Parsed once per process and moved into its command: boxing `run`'s
// arguments would save no memory worth a pointer.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Command {
    /// Run CMD while this host holds the lease, and only then.
    ///
    /// Campaigns for the lease; once leader, starts CMD with BLOB_MUTEX_EPOCH
    /// (the fencing token, larger for every new leader) and BLOB_MUTEX_HOLDER
    /// in its environment. When CMD exits, the lease is released and
    /// blob-mutex exits with CMD's code. If renewals fail, CMD gets SIGTERM,
    /// then SIGKILL shortly before the lease could expire (--grace applies
    /// as far as the lease allows). If the lease is broken or taken, another
    /// host may lead already: CMD gets SIGTERM and, 100 ms later, SIGKILL,
    /// whatever --grace says. Either way blob-mutex exits with code 4 once
    /// CMD's whole process group is gone. SIGINT, SIGTERM and SIGHUP are
    /// forwarded to CMD; the lease is released after CMD has exited (a
    /// second signal kills CMD at once).
    ///
    /// With --once, blob-mutex leads one term and never campaigns again.
    /// With --done-key or --at-most-every as well, it skips CMD (exit code
    /// 0, saying so on stderr) when the completion record in the lease blob
    /// says CMD is not due, and records CMD's success when CMD exits 0 by
    /// itself; exit code 6 when that record could not be written (the
    /// lease was lost first: the next run runs CMD again).
    ///
    /// CMD runs in the process group of a small guard process (this program
    /// again) that kills the whole group with SIGKILL at once when blob-mutex
    /// dies (even by SIGKILL), and when the lease's deadline comes without a
    /// renewal (blob-mutex stopped or frozen), before the lease could expire.
    /// CMD is never started while a process of an earlier CMD's group may
    /// still run: if any survives SIGKILL (by 5 s once the group was sent
    /// it), blob-mutex exits with code 5 without releasing the lease, which
    /// then expires on its own.
    #[command(after_help = format!("{RUN_EXAMPLES}\n\n{TABLE}"))]
    Run(RunArgs),
    /// Run CMD for every slot of a cron schedule, once across all hosts.
    ///
    /// Runs on every host, in place of the hosts' crontabs. At each slot of
    /// --cron (read in --tz), on storage's clock, one host takes the lease
    /// and runs CMD with BLOB_MUTEX_SLOT (the slot's instant, RFC 3339 in
    /// UTC), BLOB_MUTEX_EPOCH (the fencing token) and BLOB_MUTEX_HOLDER in
    /// its environment, as `run` runs it (its own process group, a guard
    /// that kills it before the lease could expire). When CMD exits 0 the
    /// slot is recorded done in the lease blob's state, under the lease;
    /// every host then skips it. CMD failing is retried (--retries) within
    /// --catch-up; a host that dies or freezes mid-job records nothing, and
    /// another host runs the slot again once the lease has expired, if it
    /// is still within --catch-up: a slot runs at least once, and the
    /// epoch fences CMD's writes. A slot nobody ran within --catch-up is
    /// recorded missed. One line is logged per slot's outcome; `status`
    /// shows the record. SIGINT, SIGTERM and SIGHUP stop it: a running CMD
    /// gets the signal (a second one kills it), the lease is released, and
    /// blob-mutex exits with 128 + the signal's number. One storage account
    /// only.
    #[command(after_help = format!("{SCHEDULE_EXAMPLES}\n\n{TABLE}"))]
    Schedule(ScheduleArgs),
    /// Show the lease's state, holder, epoch and acquisition time.
    ///
    /// Exits 0 when the lease is held (leased or breaking), 3 when it is
    /// free. When the blob holds a schedule's record, also its last slots,
    /// each with its outcome and holder (and with --cron, the next slot),
    /// and it exits 0 whether the lease is held or not: a schedule's lease
    /// is free between slots.
    #[command(after_help = format!("{STATUS_EXAMPLES}\n\n{TABLE}"))]
    Status(StatusArgs),
    /// Force the lease free, whoever holds it (for operators).
    ///
    /// Says whose lease it broke. The holder's `run` stops its command and
    /// exits with code 4 (or campaigns again with --forever).
    #[command(after_help = format!("{BREAK_EXAMPLES}\n\n{TABLE}"))]
    Break(BreakArgs),
    /// Read or write the leader state kept in the lease blob.
    ///
    /// `state put` writes under the lease of the `run` that started the
    /// command: storage refuses it (exit code 4) once that lease was lost,
    /// broken or passed on, so a command that was paused past its lease
    /// cannot overwrite the next leader's state. `state get` needs no lease.
    /// Inside the command, the container, blob and lease id come from `run`
    /// (BLOB_MUTEX_CONTAINER, BLOB_MUTEX_BLOB, BLOB_MUTEX_LEASE_ID) and the
    /// account from AZURE_STORAGE_CONNECTION_STRING; the lease id is never
    /// printed. The state is at most 4 MiB.
    #[command(subcommand, after_help = format!("{STATE_EXAMPLES}\n\n{TABLE}"))]
    State(StateCommand),
    /// Show who owns which partition of a lease set, with epochs.
    ///
    /// Lists the set's partitions (by name, with their lease state, owner,
    /// epoch and acquisition time) and its live members (those holding their
    /// member lease) with how many partitions each owns. The owner is shown
    /// only while the partition is leased; the epoch and acquisition time
    /// are those of the partition's last term.
    ///
    /// Exits 0 when the set has any partition or member blob, 3 when it has
    /// none.
    #[command(after_help = format!("{PARTITIONS_EXAMPLES}\n\n{TABLE}"))]
    Partitions(PartitionsArgs),
    /// Print the completion script of SHELL (bash, zsh, fish, elvish or
    /// powershell), made from this command's own definition.
    ///
    /// For example, `blob-mutex completions bash >
    /// /usr/share/bash-completion/completions/blob-mutex`.
    Completions {
        /// The shell to complete in.
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
    /// Print the manual page (roff) of blob-mutex, or of one COMMAND,
    /// made from this help.
    ///
    /// For example, `blob-mutex man run > blob-mutex-run.1`, or
    /// `blob-mutex man | man -l -`.
    Man {
        /// The subcommand whose page to print (run, schedule, status, break,
        /// state, partitions); without one, the page of blob-mutex itself.
        command: Option<String>,
    },
    /// Print the version, the commit it was built from, and the storage
    /// backends and features compiled in.
    ///
    /// For example, `blob-mutex version --json | jq -r .commit`.
    Version {
        /// One JSON object: version, commit, backends, features.
        #[arg(long)]
        json: bool,
    },
    /// Internal: the guard `run` starts with each command (see guard.rs).
    #[command(name = crate::guard::SUBCOMMAND, hide = true)]
    Guard,
}

impl Command {
    /// Settles the container and signs in to the accounts given by URL,
    /// before the command does anything (`state` signs in on its own).
    pub(crate) async fn sign_in(&mut self) -> Result<()> {
        match self {
            Command::Run(args) => args.target.sign_in().await,
            Command::Schedule(args) => args.target.sign_in().await,
            Command::Status(args) => args.target.sign_in().await,
            Command::Break(args) => args.target.sign_in().await,
            Command::Partitions(args) => args.target.sign_in().await,
            Command::State(_)
            | Command::Guard
            | Command::Completions { .. }
            | Command::Man { .. }
            | Command::Version { .. } => Ok(()),
        }
    }
}

/// Where the lease blob is and how to reach it.
#[derive(Debug, Args)]
pub(crate) struct Target {
    #[command(flatten)]
    account: Account,
    /// The container of the lease blob (run creates it when missing); may
    /// be left out when --account-url is a container's URL.
    #[arg(long = "container", short = 'c', value_name = "CONTAINER", env = CONTAINER_ENV)]
    container_flag: Option<String>,
    /// The container: --container's or --account-url's (see [`Target::sign_in`]).
    #[arg(skip)]
    pub(crate) container: String,
    /// The lease blob (run creates it, empty, when missing).
    #[arg(long, short = 'b', env = BLOB_ENV)]
    pub(crate) blob: String,
}

impl Target {
    /// The storage backend the account is reached with.
    pub(crate) fn backend(&self) -> blob_mutex::azure::Backend {
        self.account.backend()
    }

    /// Settles the container and signs in to the accounts given by URL
    /// (see [`Account::sign_in`]): before anything else.
    pub(crate) async fn sign_in(&mut self) -> Result<()> {
        self.account.read_environment(env_var)?;
        self.container = self.account.container(self.container_flag.as_deref())?;
        self.account.sign_in().await
    }

    /// The library's settings for this blob.
    pub(crate) fn settings(&self) -> Result<BlobSettings> {
        self.account.settings(&self.container, &self.blob)
    }

    /// A quorum store for this blob when several accounts were given.
    pub(crate) fn quorum(&self) -> Result<Option<QuorumLeaseStore>> {
        self.account.quorum(&self.container, &self.blob)
    }

    /// A lease manager for this blob, for `status` and `break`.
    pub(crate) fn lease_manager(&self) -> Result<BlobLeaseManager> {
        Ok(BlobLeaseManager::new(&self.settings()?)?.with_request_timeout(self.request_timeout()))
    }

    /// The request timeout to use: the flag's value or the library's default.
    pub(crate) fn request_timeout(&self) -> Duration {
        self.account.request_timeout()
    }

    /// What `blob-mutex state get/put` in the command needs to find this
    /// blob with no flags: the container, the blob, and the account as `run`
    /// was given it (a connection string given as a flag is passed in the
    /// environment, never on a command line).
    pub(crate) fn command_env(&self) -> Vec<(&'static str, String)> {
        let mut env = vec![
            (CONTAINER_ENV, self.container.clone()),
            (BLOB_ENV, self.blob.clone()),
        ];
        env.extend(self.account.command_env());
        env
    }

    /// `container/blob`, for messages.
    pub(crate) fn name(&self) -> String {
        format!("{}/{}", self.container, self.blob)
    }
}

/// Where a lease set is and how to reach it.
#[derive(Debug, Args)]
pub(crate) struct SetTarget {
    #[command(flatten)]
    account: Account,
    /// The container of the lease set; may be left out when --account-url
    /// is a container's URL.
    #[arg(long = "container", short = 'c', value_name = "CONTAINER", env = CONTAINER_ENV)]
    container_flag: Option<String>,
    /// The container: --container's or --account-url's (see [`SetTarget::sign_in`]).
    #[arg(skip)]
    pub(crate) container: String,
    /// The lease set: the prefix of its blobs, SET/members/HOLDER and
    /// SET/partitions/NAME.
    #[arg(long, short = 's', env = "BLOB_MUTEX_SET")]
    pub(crate) set: String,
}

impl SetTarget {
    /// Settles the container and signs in to the accounts given by URL
    /// (see [`Account::sign_in`]): before anything else.
    pub(crate) async fn sign_in(&mut self) -> Result<()> {
        self.account.read_environment(env_var)?;
        self.container = self.account.container(self.container_flag.as_deref())?;
        self.account.sign_in().await
    }

    /// The store of this set's leases on a quorum, when several accounts
    /// were given.
    pub(crate) fn quorum_store(&self) -> Result<Option<QuorumLeaseSetStore>> {
        let settings = self
            .account
            .quorum_settings(&self.container, &self.set)
            .map_err(as_set)?;
        let Some(settings) = settings else {
            return Ok(None);
        };
        Ok(Some(
            QuorumLeaseSetStore::from_settings(&settings)?
                .with_request_timeout(self.account.request_timeout()),
        ))
    }

    /// The store of this set's leases.
    pub(crate) fn store(&self) -> Result<BlobLeaseSetStore> {
        let settings = self
            .account
            .settings(&self.container, &self.set)
            .map_err(as_set)?;
        Ok(BlobLeaseSetStore::new(&settings)?.with_request_timeout(self.account.request_timeout()))
    }
}

/// An error about the settings' blob name, as one about `--set`: the
/// set's name is the blob name of its settings.
fn as_set(error: anyhow::Error) -> anyhow::Error {
    match error.downcast::<blob_mutex::Error>() {
        Ok(blob_mutex::Error::InvalidOption {
            field: "blob",
            reason,
        }) => blob_mutex::Error::InvalidOption {
            field: "set",
            reason,
        }
        .into(),
        Ok(other) => other.into(),
        Err(error) => error,
    }
}

/// Timing of the election; unset flags keep the library's defaults.
#[derive(Debug, Args)]
pub(crate) struct LeaseArgs {
    /// How long each lease lasts on the server, 15s to 60s [default: 15s].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_positive_duration, env = "BLOB_MUTEX_LEASE_DURATION")]
    lease_duration: Option<Duration>,
    /// How often the leader renews [default: a third of --lease-duration].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_positive_duration, env = "BLOB_MUTEX_RENEW_INTERVAL")]
    renew_interval: Option<Duration>,
    /// How long to wait between attempts while another host leads [default: 1s].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_positive_duration, env = "BLOB_MUTEX_ACQUIRE_RETRY")]
    acquire_retry: Option<Duration>,
    /// How long CMD has to exit after SIGTERM; SIGKILL comes a little
    /// earlier (by a quarter of it, at most 1s), so that CMD is gone before
    /// the lease could expire. Not after a broken or taken lease: SIGKILL
    /// then comes 100 ms after SIGTERM [default: 3s].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_positive_duration, env = "BLOB_MUTEX_GRACE")]
    grace: Option<Duration>,
    /// This host's name in the blob's metadata [default: <hostname>-<pid>-<6 random hex digits>].
    #[arg(long, value_name = "NAME", env = HOLDER_ENV)]
    holder: Option<String>,
    /// What this host tells the others while it leads, written beside its
    /// name at each term's stamp: where to reach it, for example
    /// 10.0.0.7:8080. Printable ASCII, at most 256 bytes. Shown by
    /// `status` and `partitions` (text and JSON), so that a follower's
    /// script can find the leader with `status --json | jq -r .advertised`.
    /// [default: none]
    #[arg(long, value_name = "VALUE", env = "BLOB_MUTEX_ADVERTISE")]
    advertise: Option<String>,
    /// Give up (exit code 1, saying what to check) when storage has not
    /// answered once within this time of the start: a host name that does
    /// not resolve, a credential that cannot get a token, a refused
    /// permission are settings to fix, not outages to wait out. Once
    /// storage has answered, an outage is retried for as long as it lasts.
    /// 0 makes one attempt; `never` retries for ever [default: 30s].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION|never", value_parser = parse_bound, env = "BLOB_MUTEX_FIRST_CONTACT_TIMEOUT")]
    first_contact_timeout: Option<Bound>,
}

/// A time limit, or none (`never`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Bound(Option<Duration>);

/// `never`, or a duration as [`parse_duration`] reads it.
fn parse_bound(text: &str) -> Result<Bound, String> {
    if text.trim() == "never" {
        return Ok(Bound(None));
    }
    parse_duration(text).map(|d| Bound(Some(d)))
}

impl LeaseArgs {
    /// The library's options: its defaults, overridden by the flags given.
    /// The library validates them when the mutex is made.
    pub(crate) fn options(&self, request_timeout: Duration) -> MutexOptions {
        let mut options = MutexOptions::default().with_request_timeout(request_timeout);
        if let Some(d) = self.lease_duration {
            options = options.with_lease_duration(d);
        }
        if let Some(d) = self.renew_interval {
            options = options.with_renew_interval(d);
        }
        if let Some(d) = self.acquire_retry {
            options = options.with_acquire_retry(d);
        }
        if let Some(d) = self.grace {
            options = options.with_stop_grace(d);
        }
        if let Some(holder) = &self.holder {
            options = options.with_holder(holder.clone());
        }
        if let Some(value) = &self.advertise {
            options = options.with_advertised(value.clone());
        }
        if let Some(Bound(limit)) = self.first_contact_timeout {
            options = options.with_first_contact_timeout(limit);
        }
        options
    }
}

/// `blob-mutex run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    #[command(flatten)]
    pub(crate) lease: LeaseArgs,
    /// Give up when not leader within this time: exit code 3 when another
    /// instance holds the lease, 1 (naming the error) when the last attempt
    /// failed, for example storage unreachable. 0 makes exactly one attempt.
    /// With --forever, bounds only the first term. With --done-key or
    /// --at-most-every, a host that gives up waiting exits 3 without
    /// knowing whether CMD ran elsewhere: set it longer than CMD takes, or
    /// leave it out. [default: wait as long as it takes]
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_duration, env = "BLOB_MUTEX_WAIT")]
    pub(crate) wait: Option<Duration>,
    /// Run until stopped by a signal: after CMD exits or the lease is lost,
    /// release, campaign again and restart CMD (after a 5s back-off when CMD
    /// failed), never while a process of the old CMD's group may still run.
    /// Not with --once.
    #[arg(long, env = "BLOB_MUTEX_FOREVER", value_parser = BoolishValueParser::new())]
    pub(crate) forever: bool,
    /// Lead one term only: campaign, run CMD once, release, and exit with
    /// CMD's code (or 4 when the lease was lost). Never campaigns again,
    /// whatever happens in the term. Needed by --done-key and
    /// --at-most-every. Not with --forever.
    #[arg(long, env = "BLOB_MUTEX_ONCE", value_parser = BoolishValueParser::new())]
    pub(crate) once: bool,
    /// With --once: run CMD once per KEY across all hosts. After CMD exits 0
    /// by itself, the key is recorded in the lease blob's state, under the
    /// term's lease (storage refuses the write once the lease is gone). A
    /// later `run --once --done-key KEY` on any host then exits 0 without
    /// running CMD, saying so on stderr. CMD failing, stopped, or the host
    /// dying before the record leaves none: the next run runs CMD again.
    /// Every key recorded is kept (a host on an older version, or a
    /// rollback, skips an older key after a newer one ran): 16069 keys of
    /// 256 bytes fit in the blob's 4 MiB of state, more of shorter ones; a
    /// new key that would not fit is refused with exit code 1 before CMD
    /// runs, and no key is ever dropped. 1 to 256 bytes, no control
    /// characters. The record owns the blob's state: CMD gets no
    /// BLOB_MUTEX_LEASE_ID (no `state put`). One storage account only.
    #[arg(long, value_name = "KEY", env = "BLOB_MUTEX_DONE_KEY")]
    pub(crate) done_key: Option<String>,
    /// With --once: run CMD at most once per DURATION across all hosts (a
    /// job that every host's cron starts), counted from the start of the
    /// last successful run, as a schedule counts. After CMD exits 0 by
    /// itself, the time it started (storage's, read just before CMD) is
    /// recorded in the lease blob's state; a run less than DURATION after
    /// that start, on any host, exits 0 without running CMD, saying so on
    /// stderr. Measured on storage's clock (in whole seconds), never the
    /// host's. At least 1s; choose it a little shorter than the schedule
    /// (20h for a daily job): however long CMD takes, the next day's run is
    /// due. With --done-key, skips when either says so. One storage account
    /// only.
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_duration, env = "BLOB_MUTEX_AT_MOST_EVERY")]
    pub(crate) at_most_every: Option<Duration>,
    /// This host's priority as a preferred successor, any integer. While
    /// another host leads, this one advertises itself beside the lease; a
    /// leader with a lower priority stops its command and hands the lease
    /// over (Change Lease). Equal priorities never hand over. Set it on
    /// every host of the service (for a rolling upgrade: old version 0, new
    /// version 1). [default: none, takes no part]
    #[arg(
        long,
        value_name = "N",
        allow_negative_numbers = true,
        env = "BLOB_MUTEX_PRIORITY"
    )]
    pub(crate) priority: Option<i64>,
    /// Serve, on this address only (for example 127.0.0.1:9898): the
    /// metrics in the Prometheus text format on /metrics; /livez for a
    /// liveness probe (503 only for a leader not stopped by its deadline or
    /// an election making no progress; never on a follower, never because
    /// storage is down; a command that survives SIGKILL ends the run with
    /// exit code 5 instead) and /healthz, its alias; /readyz for a
    /// readiness probe (503 when storage has failed every request of the
    /// campaign for 10 s; with ?leader also on a follower); /leader, who
    /// leads as this instance last saw it, as JSON (holder, epoch, since,
    /// advertised; a follower inspects the lease once per renew interval
    /// for it). GET and HEAD only; a client has 500 ms
    /// to send its request; at most 64 connections at a time (a quarter of
    /// the open-files limit when lower), the oldest idle one closed for a
    /// new one. [default: off]
    #[arg(long, value_name = "ADDR", env = "BLOB_MUTEX_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// Lead with no command: hold the lease until a signal stops `run`
    /// (exit code 0, the lease released) or the lease is lost (exit code 4;
    /// with --forever, campaign again). For a sidecar that only tells
    /// whether, and who, leads: /readyz?leader and /leader of
    /// --metrics-addr. Not with CMD or --once.
    #[arg(
        long,
        env = "BLOB_MUTEX_HOLD",
        value_parser = BoolishValueParser::new(),
        conflicts_with_all = ["command", "once"]
    )]
    pub(crate) hold: bool,
    /// The command to run, and its arguments, after `--`.
    #[arg(last = true, required_unless_present = "hold", value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// `blob-mutex schedule`.
#[derive(Debug, Args)]
pub(crate) struct ScheduleArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    #[command(flatten)]
    pub(crate) lease: LeaseArgs,
    /// The cron expression: five fields (minute, hour, day of month, month,
    /// day of week) or six with seconds first; @daily and the like too.
    #[arg(long, value_name = "EXPR", env = "BLOB_MUTEX_CRON")]
    pub(crate) cron: String,
    /// The IANA time zone the expression is read in, spelled as the tz
    /// database spells it, for example Europe/Berlin (europe/berlin is
    /// refused, naming that spelling). Daylight-saving changes: in a gap, a
    /// job at a fixed time runs at the first valid time after it; in a
    /// repeated hour, it runs once, and a job of wildcards or steps runs on
    /// both passes [default: UTC].
    #[arg(long, value_name = "ZONE", env = "BLOB_MUTEX_TZ")]
    pub(crate) tz: Option<String>,
    /// How long after its time, on storage's clock, a slot not done is
    /// still run or retried; past it, it is recorded missed and never runs.
    /// A slot whose host died is run again only within it: choose it longer
    /// than CMD's run plus the lease plus a minute (Azure may hold a lease
    /// that expired unreleased that long). At least 1s [default: 1m].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_duration, env = "BLOB_MUTEX_CATCH_UP")]
    pub(crate) catch_up: Option<Duration>,
    /// A slot that comes due while CMD still runs: skip (recorded skipped,
    /// never run late) or wait (run after it, if still within --catch-up).
    /// Never two CMDs at once either way [default: skip].
    #[arg(long, value_enum, value_name = "POLICY", env = "BLOB_MUTEX_OVERLAP")]
    pub(crate) overlap: Option<OverlapArg>,
    /// How many times a slot whose CMD failed (exited non-zero) is run
    /// again, within --catch-up: 10s after the failure, then doubling
    /// [default: 2].
    #[arg(
        long,
        value_name = "N",
        allow_hyphen_values = true,
        env = "BLOB_MUTEX_RETRIES"
    )]
    pub(crate) retries: Option<u32>,
    /// How long a slot's CMD may run: past it, CMD is stopped as a term's
    /// end stops it (SIGTERM, then SIGKILL after --grace), and the run is a
    /// failed attempt, retried as --retries says, whose line says so
    /// [default: none].
    #[arg(long, value_name = "DURATION", allow_hyphen_values = true, value_parser = parse_positive_duration, env = "BLOB_MUTEX_TIMEOUT")]
    pub(crate) timeout: Option<Duration>,
    /// Serve, on this address only (for example 127.0.0.1:9898), as `run`
    /// does: /metrics (the slots' outcomes among them); /livez and /healthz
    /// (503 only for a slot's term not stopped by its deadline); /readyz
    /// (ready while the schedule runs and its looks at the record get
    /// answers, between slots too; with ?leader only while this host holds
    /// the lease at a slot); /leader, the host that holds it. [default: off]
    #[arg(long, value_name = "ADDR", env = "BLOB_MUTEX_METRICS_ADDR")]
    pub(crate) metrics_addr: Option<std::net::SocketAddr>,
    /// The command to run for each slot, and its arguments, after `--`.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

/// `--overlap`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum OverlapArg {
    /// Record it as skipped.
    Skip,
    /// Run it once CMD has ended.
    Wait,
}

/// `blob-mutex status`.
#[derive(Debug, Args)]
pub(crate) struct StatusArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// Print one JSON object instead of a table: container, blob, exists,
    /// state, leased, duration, holder, epoch, acquired_at; on a quorum,
    /// also accounts (account, state, holder, epoch, error per account);
    /// with a schedule's record, also schedule (slots: slot, outcome,
    /// attempts, epoch, holder, retry_at; next).
    #[arg(long)]
    pub(crate) json: bool,
    /// The schedule's cron expression, to show its next slot after
    /// storage's clock (with the record's slots) [default: the expression
    /// and zone the schedule's last term advertised, when it did].
    #[arg(long, value_name = "EXPR", env = "BLOB_MUTEX_CRON")]
    pub(crate) cron: Option<String>,
    /// The time zone of --cron [default: UTC].
    #[arg(long, value_name = "ZONE", env = "BLOB_MUTEX_TZ", requires = "cron")]
    pub(crate) tz: Option<String>,
}

/// `blob-mutex break`.
#[derive(Debug, Args)]
pub(crate) struct BreakArgs {
    #[command(flatten)]
    pub(crate) target: Target,
    /// How long the current holder may keep the lease, in whole seconds,
    /// 0s to 60s [default: 0s].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_break_period)]
    pub(crate) period: Option<Duration>,
}

/// `blob-mutex state get|put`.
#[derive(Debug, Subcommand)]
pub(crate) enum StateCommand {
    /// Print the leader state (the bytes last written) to standard output,
    /// or to --output. Prints nothing when no leader has written yet.
    Get(StateGetArgs),
    /// Replace the leader state with the bytes of --input (standard input
    /// by default), under the lease of the `run` that started this command.
    Put(StatePutArgs),
}

/// Where the state is: as [`Target`], with the container and blob also
/// taken from what `run` gives its command.
#[derive(Debug, Args)]
pub(crate) struct StateTarget {
    /// Storage connection string (never printed), or from
    /// AZURE_STORAGE_CONNECTION_STRING when neither this flag nor
    /// --account-url is given. The leader state lives in one account: a
    /// quorum of several is refused.
    #[arg(long, value_name = "STRING", action = ArgAction::Append)]
    connection_string: Vec<String>,
    /// The storage account by URL, signed in to with --auth (inside run's
    /// command, the one run was given), as for `run`.
    #[arg(long, value_name = "URL", requires = "auth")]
    account_url: Option<String>,
    /// How to sign in to --account-url, as for `run` (inside run's
    /// command, the way run was given).
    #[arg(long, value_name = "KIND")]
    auth: Option<Auth>,
    /// The client id of the user-assigned managed identity or of the
    /// application, as for `run`.
    #[arg(long, value_name = "ID", env = "AZURE_CLIENT_ID")]
    client_id: Option<String>,
    /// Use Azurite's default account at http://127.0.0.1:10000 (ignores any
    /// connection string).
    #[arg(long)]
    dev: bool,
    /// The container of the lease blob.
    #[arg(long, short = 'c', env = CONTAINER_ENV)]
    container: String,
    /// The lease blob.
    #[arg(long, short = 'b', env = BLOB_ENV)]
    blob: String,
    /// The longest the storage requests may take [default: 3s].
    #[arg(long, allow_hyphen_values = true, value_name = "DURATION", value_parser = parse_duration)]
    request_timeout: Option<Duration>,
    /// The storage backend, official or sdk-v021 (inside run's command, the
    /// one run was given) [default: official].
    #[arg(long, env = Backend::ENV, value_name = "BACKEND", value_parser = parse_backend)]
    backend: Option<Backend>,
}

impl StateTarget {
    /// The same place as a [`Target`].
    pub(crate) fn target(&self) -> Target {
        Target {
            account: Account {
                connection_string: self.connection_string.clone(),
                account_url: self.account_url.clone(),
                auth: self.auth.clone(),
                client_id: self.client_id.clone(),
                accounts_file: None,
                dev: self.dev,
                request_timeout: self.request_timeout,
                backend: self.backend,
                signed_in: None,
            },
            container_flag: Some(self.container.clone()),
            container: self.container.clone(),
            blob: self.blob.clone(),
        }
    }
}

/// `blob-mutex state get`.
#[derive(Debug, Args)]
pub(crate) struct StateGetArgs {
    #[command(flatten)]
    pub(crate) target: StateTarget,
    /// Write the state to this file instead of standard output.
    #[arg(long, short = 'o', value_name = "FILE")]
    pub(crate) output: Option<std::path::PathBuf>,
}

/// `blob-mutex state put`.
#[derive(Debug, Args)]
pub(crate) struct StatePutArgs {
    #[command(flatten)]
    pub(crate) target: StateTarget,
    /// Read the state from this file; `-` or none: standard input.
    #[arg(long, short = 'i', value_name = "FILE")]
    pub(crate) input: Option<std::path::PathBuf>,
}

/// `blob-mutex partitions`.
#[derive(Debug, Args)]
pub(crate) struct PartitionsArgs {
    #[command(flatten)]
    pub(crate) target: SetTarget,
    /// Print one JSON object instead of tables: container, set, exists,
    /// partitions (name, state, owner, epoch, acquired_at) and members
    /// (holder, owns).
    #[arg(long)]
    pub(crate) json: bool,
}

/// Parses a duration in `jiff`'s friendly format (`500ms`, `15s`, `1m30s`,
/// `1.5s`, `2h 30m`; ISO 8601's `PT15S` too), or a bare number of seconds.
/// A yes or a no in the variable `name`: 1, true, yes or on; 0, false, no
/// or off (in any case), as clap reads the variable of a switch.
pub(crate) fn parse_switch(name: &str, value: &str) -> Result<bool> {
    match value.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(UsageError(format!(
            "{name} is neither a yes (1, true, yes, on) nor a no (0, false, no, off)"
        ))
        .into()),
    }
}

/// A variable of the process's environment, when it is Unicode.
fn env_var(name: &str) -> Option<String> {
    std::env::var(name).ok()
}

fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let bad = |why: &dyn std::fmt::Display| {
        format!("expected a duration such as 500ms, 15s, 1m30s or 1.5h, got {text:?} ({why})")
    };
    if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) {
        return text.parse().map(Duration::from_secs).map_err(|e| bad(&e));
    }
    let signed: jiff::SignedDuration = text.parse().map_err(|e| bad(&e))?;
    Duration::try_from(signed).map_err(|_| bad(&"a duration cannot be negative"))
}

/// A duration that may not be zero (a lease, an interval, a time limit of
/// every request).
pub(crate) fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    match parse_duration(text)? {
        Duration::ZERO => Err(format!("must be greater than zero, got {:?}", text.trim())),
        positive => Ok(positive),
    }
}

/// A break period: storage takes whole seconds from 0 to 60.
fn parse_break_period(text: &str) -> Result<Duration, String> {
    let period = parse_duration(text)?;
    if period.subsec_nanos() != 0 || period > Duration::from_secs(60) {
        return Err(format!(
            "storage takes whole seconds from 0s to 60s, got {:?}",
            text.trim()
        ));
    }
    Ok(period)
}

/// A backend's name, as `Backend` reads it.
fn parse_backend(text: &str) -> Result<Backend, String> {
    text.parse().map_err(|e: blob_mutex::Error| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("1m30s"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2h 30m"), Ok(Duration::from_secs(9000)));
        assert_eq!(parse_duration(" 20h "), Ok(Duration::from_secs(72_000)));
        for bad in [
            "",
            "s",
            "-1s",
            "1s ago",
            "10 parsecs",
            "1.5",
            "99999999999999999999",
        ] {
            let error = parse_duration(bad).expect_err(bad);
            assert!(error.contains("expected a duration"), "{error}");
        }
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        for zero in ["0", "0s", "0ms"] {
            let error = parse_positive_duration(zero).expect_err(zero);
            assert!(error.contains("greater than zero"), "{error}");
        }
        assert_eq!(parse_positive_duration("1ms"), Ok(Duration::from_millis(1)));
        assert_eq!(parse_break_period("10s"), Ok(Duration::from_secs(10)));
        for bad in ["1.5s", "61s", "500ms"] {
            let error = parse_break_period(bad).expect_err(bad);
            assert!(error.contains("whole seconds"), "{error}");
        }
    }

    #[test]
    fn the_command_line_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }
}
