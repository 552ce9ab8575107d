//! `blob-mutex status`: show the lease's state and holder, and a
//! schedule's record (see [`slots`]).

mod slots;

use std::borrow::Cow;
use std::fmt::Write as _;

use anyhow::Result;
use blob_mutex::{
    quorum::AccountLease, quorum::Holding, quorum::QuorumLeaseStore, store::LeaseInfo,
    store::LeaseState, store::LeaseStore,
};
use serde::{Serialize, Serializer};

use crate::cli::{StatusArgs, Target};
use crate::exit;

/// Runs `blob-mutex status` and returns its exit code.
pub(crate) async fn status(args: StatusArgs) -> Result<u8> {
    if let Some(quorum) = args.target.quorum()? {
        return quorum_status(&args, &quorum).await;
    }
    let manager = args.target.lease_manager()?;
    let info = manager.inspect_existing().await?;
    let mut view = View::new(&args.target, info.as_ref());
    if info.is_some() {
        let state = manager.read_state().await?;
        let expression =
            slots::expression(args.cron.as_deref(), args.tz.as_deref(), view.advertised);
        let now = info
            .as_ref()
            .and_then(|i| i.storage_time)
            .unwrap_or_else(std::time::SystemTime::now);
        view.schedule = slots::ScheduleView::new(&state, expression.as_ref(), now)?;
        view.last_ran();
    }
    if args.json {
        println!("{}", view.json());
    } else {
        print!("{}", view.table());
    }
    // A schedule's lease is free between slots, as it should be: 3 would
    // say that a healthy schedule is not running.
    Ok(if view.leased || view.schedule.is_some() {
        exit::OK
    } else {
        exit::FREE_OR_NOT_ACQUIRED
    })
}

/// `status` on a quorum: each account's lease, then the majority's view.
async fn quorum_status(args: &StatusArgs, quorum: &QuorumLeaseStore) -> Result<u8> {
    let accounts = quorum.inspect_each().await;
    let answered = accounts.iter().filter(|a| a.lease.is_ok()).count();
    if answered < quorum.majority() {
        let failed = accounts.into_iter().find_map(|a| a.lease.err());
        let why = failed.map_or_else(String::new, |e| format!(": {}", Chain(&e)));
        anyhow::bail!(
            "only {answered} of {} accounts answered, fewer than a majority{why}",
            quorum.len()
        );
    }
    let info = quorum.merged(&accounts);
    let mut view = View::new(&args.target, info.as_ref());
    // While leased, the holder is named only when a majority carries its
    // stamp beside a lease.
    if view.leased && view.state == LeaseState::Leased {
        match quorum.leader(&accounts) {
            Some((holder, epoch)) => view.holder_known(holder, epoch),
            None => view.holder_unknown(),
        }
    }
    if args.json {
        let quorum = QuorumJson {
            view: &view,
            accounts: accounts.iter().map(AccountJson::new).collect(),
        };
        println!(
            "{}",
            serde_json::to_string(&quorum).expect("plain fields serialize")
        );
    } else {
        for account in &accounts {
            println!("{}", account_line(account));
        }
        println!("majority of {} accounts:", quorum.len());
        print!("{}", view.table());
    }
    Ok(if view.leased {
        exit::OK
    } else {
        exit::FREE_OR_NOT_ACQUIRED
    })
}

/// One account's lease on one line: whose lease it holds, in words when
/// the stamp there does not tell.
fn account_line(account: &AccountLease) -> String {
    let stamp = |info: &LeaseInfo| match &info.holder {
        Some(holder) if info.epoch > 0 => format!("holder {holder} epoch {}", info.epoch),
        _ => "never stamped".to_owned(),
    };
    let what = match (&account.lease, &account.holding) {
        (Err(e), _) => format!("unreachable: {}", Chain(e)),
        (Ok(None), _) => "no lease blob yet".to_owned(),
        (Ok(Some(_)), Holding::Term { holder, epoch }) => {
            format!("leased holder {holder} epoch {epoch}")
        }
        (Ok(Some(info)), Holding::Unattributed) => format!(
            "leased, holder unknown: the stamp here ({}) is not the newest term's",
            stamp(info)
        ),
        (Ok(Some(info)), _) => format!("{}, last {}", info.state, stamp(info)),
    };
    format!("account {:<48} {what}", account.account)
}

/// `status --json` on a quorum: the majority's view, then each account's.
#[derive(Serialize)]
struct QuorumJson<'a> {
    #[serde(flatten)]
    view: &'a View<'a>,
    accounts: Vec<AccountJson<'a>>,
}

/// One account's lease as a JSON object: `holder` and `epoch` of the lease
/// it holds (null when not leased, or when the lease cannot be attributed:
/// `lease` says which), and the stamp it carries (`last_holder`,
/// `last_epoch`).
#[derive(Serialize)]
struct AccountJson<'a> {
    account: &'a str,
    state: Option<&'static str>,
    lease: Option<&'static str>,
    holder: Option<&'a str>,
    epoch: Option<u64>,
    last_holder: Option<&'a str>,
    last_epoch: Option<u64>,
    error: Option<String>,
}

impl<'a> AccountJson<'a> {
    fn new(account: &'a AccountLease) -> Self {
        let info = account.lease.as_ref().ok().and_then(Option::as_ref);
        let (lease, holder, epoch) = match &account.holding {
            Holding::Term { holder, epoch } => (Some("term"), Some(holder.as_str()), Some(*epoch)),
            Holding::Unattributed => (Some("unattributed"), None, None),
            _ => (None, None, None),
        };
        AccountJson {
            account: &account.account,
            state: info.map(|i| i.state.as_str()),
            lease,
            holder,
            epoch,
            last_holder: info.and_then(|i| i.holder.as_deref()),
            last_epoch: info.map(|i| i.epoch),
            error: account.lease.as_ref().err().map(|e| Chain(e).to_string()),
        }
    }
}

/// An error with its causes, on one line.
struct Chain<'a>(&'a blob_mutex::Error);

impl std::fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = std::error::Error::source(self.0);
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// What `status` shows, for people and for scripts (`--json`: these
/// fields, in this order).
#[derive(Serialize)]
struct View<'a> {
    container: &'a str,
    blob: &'a str,
    exists: bool,
    #[serde(serialize_with = "state_name")]
    state: LeaseState,
    /// Held by someone: leased, or breaking and not yet free.
    leased: bool,
    /// `fixed` or `infinite` while leased.
    duration: Option<&'static str>,
    /// While free, the last holder: on a schedule's blob, the host that
    /// ran the last slot (see [`View::last_ran`]).
    holder: Option<Cow<'a, str>>,
    /// `None` while leased with no holder a majority agrees on.
    epoch: Option<u64>,
    /// To the millisecond (see [`millis`]).
    acquired_at: Option<String>,
    /// What the holder advertised with its stamp.
    advertised: Option<&'a str>,
    /// The schedule's record, when the blob holds one (left out otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    schedule: Option<slots::ScheduleView>,
}

impl<'a> View<'a> {
    fn new(target: &'a Target, info: Option<&'a LeaseInfo>) -> Self {
        View {
            container: &target.container,
            blob: &target.blob,
            exists: info.is_some(),
            state: info.map_or(LeaseState::Available, |i| i.state),
            leased: info.is_some_and(|i| !i.state.is_free()),
            duration: info.and_then(|i| i.infinite).map(|infinite| {
                if infinite {
                    "infinite"
                } else {
                    "fixed"
                }
            }),
            holder: info.and_then(|i| i.holder.as_deref()).map(Cow::Borrowed),
            epoch: Some(info.map_or(0, |i| i.epoch)),
            acquired_at: info.and_then(|i| i.acquired_at.as_deref()).map(millis),
            advertised: info.and_then(|i| i.advertised.as_deref()),
            schedule: None,
        }
    }

    /// The holder and epoch a majority of a quorum's accounts agrees on.
    /// What was advertised is shown when it came with that term's stamp.
    fn holder_known(&mut self, holder: &'a str, epoch: u64) {
        if self.epoch != Some(epoch) {
            self.advertised = None;
        }
        self.holder = Some(Cow::Borrowed(holder));
        self.epoch = Some(epoch);
    }

    /// Between a schedule's slots the lease is free, and its last term is
    /// most often that of a host that found the slot done and gave the
    /// lease back: the last holder shown is the host that ran the last
    /// slot instead, with its term's epoch, and the acquisition time only
    /// when that term is the lease's last.
    fn last_ran(&mut self) {
        if self.leased {
            return;
        }
        let Some((holder, epoch)) = self
            .schedule
            .as_ref()
            .and_then(slots::ScheduleView::last_run)
            .map(|(holder, epoch)| (holder.to_owned(), epoch))
        else {
            return;
        };
        if self.epoch != Some(epoch) {
            self.acquired_at = None;
        }
        self.holder = Some(Cow::Owned(holder));
        self.epoch = Some(epoch);
    }

    /// Leased on a majority of a quorum's accounts, with no majority
    /// agreeing on the holder and epoch.
    fn holder_unknown(&mut self) {
        self.holder = None;
        self.epoch = None;
        self.advertised = None;
    }

    /// A small table; when the lease is free, the holder is the last one.
    fn table(&self) -> String {
        let mut state = self.state.as_str().to_owned();
        if let Some(duration) = self.duration {
            let _ = write!(state, " ({duration})");
        }
        if !self.exists {
            state.push_str(" (no lease blob yet)");
        }
        let holder_label = if self.leased { "holder" } else { "last holder" };
        let rows = [
            ("blob", format!("{}/{}", self.container, self.blob)),
            ("state", state),
            (holder_label, self.holder_text()),
            (
                "epoch",
                self.epoch
                    .map_or_else(|| "unknown".to_owned(), |e| e.to_string()),
            ),
            (
                "acquired at",
                self.acquired_at.as_deref().unwrap_or("-").to_owned(),
            ),
            ("advertised", self.advertised.unwrap_or("-").to_owned()),
        ];
        let mut out = String::new();
        for (label, value) in rows {
            let _ = writeln!(out, "{label:<12} {value}");
        }
        if let Some(schedule) = &self.schedule {
            out.push_str(&schedule.rows());
        }
        out
    }

    fn holder_text(&self) -> String {
        match (&self.holder, self.epoch) {
            (Some(holder), _) => holder.to_string(),
            (None, None) => {
                "unknown: no majority of the accounts carries one holder and epoch".to_owned()
            }
            (None, Some(_)) => "-".to_owned(),
        }
    }

    /// One JSON object on one line.
    fn json(&self) -> String {
        serde_json::to_string(self).expect("plain fields serialize")
    }
}

/// A term's acquisition time (the stamp's `acquired_at`, RFC 3339, which
/// the stamp writes to the nanosecond) in UTC to the millisecond, as the
/// docs show it: `2025-01-14T02:00:03.512Z`. A value that is no instant
/// is shown as it is.
pub(crate) fn millis(acquired_at: &str) -> String {
    acquired_at.parse::<jiff::Timestamp>().map_or_else(
        |_| acquired_at.to_owned(),
        |at| at.strftime("%Y-%m-%dT%H:%M:%S%.3fZ").to_string(),
    )
}

/// A lease state as storage names it (serde hands it by reference).
#[allow(clippy::trivially_copy_pass_by_ref)]
fn state_name<S: Serializer>(state: &LeaseState, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(state.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A view of `container/blob` as `status` would make it.
    fn view(holder: Option<&str>, epoch: Option<u64>) -> View<'_> {
        let holder = holder.map(Cow::Borrowed);
        View {
            container: "lea\"ses",
            blob: "a/b\nc",
            exists: true,
            state: LeaseState::Leased,
            leased: true,
            duration: Some("fixed"),
            holder,
            epoch,
            acquired_at: Some("2026-11-28T17:31:25Z".to_owned()),
            advertised: None,
            schedule: None,
        }
    }

    #[test]
    fn the_json_is_one_object_with_its_fields_in_order_and_nulls_for_the_unknown() {
        assert_eq!(
            view(Some("web-1"), Some(1_926_458_291_034_112)).json(),
            r#"{"container":"lea\"ses","blob":"a/b\nc","exists":true,"state":"leased","leased":true,"duration":"fixed","holder":"web-1","epoch":1926458291034112,"acquired_at":"2026-11-28T17:31:25Z","advertised":null}"#
        );
        assert_eq!(
            view(None, None).json(),
            r#"{"container":"lea\"ses","blob":"a/b\nc","exists":true,"state":"leased","leased":true,"duration":"fixed","holder":null,"epoch":null,"acquired_at":"2026-11-28T17:31:25Z","advertised":null}"#
        );
    }

    /// A schedule's lease, free between slots, last stamped by a host that
    /// found its slot done: the last holder shown is the host that ran the
    /// last slot (the highest epoch of the record's runs), with that
    /// term's epoch, and no acquisition time of another term's.
    #[test]
    fn a_free_schedule_lease_shows_the_host_that_ran_the_last_slot_as_its_last_holder() {
        let record = b"blob-mutex schedule v1\n\
            slot=2026-11-28T02:30:00Z done attempts=1 epoch=7 retry=- holder=web-1\n\
            slot=2026-11-28T02:30:10Z skipped attempts=0 epoch=0 retry=- holder=\n\
            slot=2026-11-28T02:30:20Z failed attempts=1 epoch=8 retry=- holder=web-2\n";
        let now = std::time::SystemTime::UNIX_EPOCH;
        for (stamped, acquired) in [(9, "-"), (8, "2026-11-28T17:31:25Z")] {
            let mut free = view(Some("web-3"), Some(stamped));
            (free.state, free.leased) = (LeaseState::Available, false);
            free.schedule = slots::ScheduleView::new(record, None, now).unwrap();
            free.last_ran();
            let table = free.table();
            assert!(
                table.contains(&format!(
                    "last holder  web-2\nepoch        8\nacquired at  {acquired}\n"
                )),
                "{table}"
            );
        }
        // Held: the holder is the lease's.
        let mut held = view(Some("web-3"), Some(9));
        held.schedule = slots::ScheduleView::new(record, None, now).unwrap();
        held.last_ran();
        assert!(held.table().contains("holder       web-3\n"));
    }

    /// Milliseconds, whatever the stamp kept (cut, never rounded up: never
    /// later than the acquisition), in UTC; anything else as it is.
    #[test]
    fn the_acquisition_time_is_shown_to_the_millisecond_in_utc() {
        for (stamped, shown) in [
            ("2026-12-02T16:46:31.065705969Z", "2026-12-02T16:46:31.065Z"),
            ("2026-12-02T16:46:31.9999Z", "2026-12-02T16:46:31.999Z"),
            ("2026-12-02T16:46:31Z", "2026-12-02T16:46:31.000Z"),
            ("2026-12-02T17:46:31.5+01:00", "2026-12-02T16:46:31.500Z"),
            ("yesterday", "yesterday"),
        ] {
            assert_eq!(millis(stamped), shown, "{stamped}");
        }
    }

    #[test]
    fn a_quorums_json_is_the_majoritys_view_then_each_account() {
        let view = view(Some("web-1"), Some(7));
        let quorum = QuorumJson {
            view: &view,
            accounts: vec![AccountJson {
                account: "https://a.blob.core.windows.net",
                state: Some("leased"),
                lease: Some("term"),
                holder: Some("web-1"),
                epoch: Some(7),
                last_holder: Some("web-1"),
                last_epoch: Some(7),
                error: None,
            }],
        };
        assert_eq!(
            serde_json::to_string(&quorum).unwrap(),
            r#"{"container":"lea\"ses","blob":"a/b\nc","exists":true,"state":"leased","leased":true,"duration":"fixed","holder":"web-1","epoch":7,"acquired_at":"2026-11-28T17:31:25Z","advertised":null,"accounts":[{"account":"https://a.blob.core.windows.net","state":"leased","lease":"term","holder":"web-1","epoch":7,"last_holder":"web-1","last_epoch":7,"error":null}]}"#
        );
    }
}
