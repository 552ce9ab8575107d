//! `blob-mutex status`: show the lease's state and holder.

use std::fmt::Write as _;

use anyhow::Result;
use blob_mutex::{
    quorum::AccountLease, quorum::Holding, quorum::QuorumLeaseStore, store::LeaseInfo,
    store::LeaseState,
};

use crate::cli::{StatusArgs, Target};
use crate::exit;

/// Runs `blob-mutex status` and returns its exit code.
pub(crate) async fn status(args: StatusArgs) -> Result<u8> {
    if let Some(quorum) = args.target.quorum()? {
        return quorum_status(&args, &quorum).await;
    }
    let info = args.target.lease_manager()?.inspect_existing().await?;
    let view = View::new(&args.target, info.as_ref());
    if args.json {
        println!("{}", view.json());
    } else {
        print!("{}", view.table());
    }
    Ok(if view.leased {
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
        let each: Vec<String> = accounts.iter().map(account_json).collect();
        let merged = view.json();
        let merged = merged.strip_suffix('}').unwrap_or(&merged);
        println!("{merged},\"accounts\":[{}]}}", each.join(","));
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

/// One account's lease as a JSON object: `holder` and `epoch` of the lease
/// it holds (null when not leased, or when the lease cannot be attributed:
/// `lease` says which), and the stamp it carries (`last_holder`,
/// `last_epoch`).
fn account_json(account: &AccountLease) -> String {
    let text = |value: Option<&str>| value.map_or_else(|| "null".to_owned(), json_string);
    let number = |value: Option<u64>| value.map_or_else(|| "null".to_owned(), |n| n.to_string());
    let info = account.lease.as_ref().ok().and_then(Option::as_ref);
    let (lease, holder, epoch) = match &account.holding {
        Holding::Term { holder, epoch } => (Some("term"), Some(holder.as_str()), Some(*epoch)),
        Holding::Unattributed => (Some("unattributed"), None, None),
        _ => (None, None, None),
    };
    let error = account.lease.as_ref().err().map(|e| Chain(e).to_string());
    format!(
        "{{\"account\":{},\"state\":{},\"lease\":{},\"holder\":{},\"epoch\":{},\
         \"last_holder\":{},\"last_epoch\":{},\"error\":{}}}",
        json_string(&account.account),
        text(info.map(|i| i.state.as_str())),
        text(lease),
        text(holder),
        number(epoch),
        text(info.and_then(|i| i.holder.as_deref())),
        number(info.map(|i| i.epoch)),
        text(error.as_deref()),
    )
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

/// What `status` shows, for people and for scripts.
struct View<'a> {
    container: &'a str,
    blob: &'a str,
    exists: bool,
    state: LeaseState,
    /// Held by someone: leased, or breaking and not yet free.
    leased: bool,
    /// `fixed` or `infinite` while leased.
    duration: Option<&'static str>,
    holder: Option<&'a str>,
    /// `None` while leased with no holder a majority agrees on.
    epoch: Option<u64>,
    acquired_at: Option<&'a str>,
    /// What the holder advertised with its stamp.
    advertised: Option<&'a str>,
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
            holder: info.and_then(|i| i.holder.as_deref()),
            epoch: Some(info.map_or(0, |i| i.epoch)),
            acquired_at: info.and_then(|i| i.acquired_at.as_deref()),
            advertised: info.and_then(|i| i.advertised.as_deref()),
        }
    }

    /// The holder and epoch a majority of a quorum's accounts agrees on.
    /// What was advertised is shown when it came with that term's stamp.
    fn holder_known(&mut self, holder: &'a str, epoch: u64) {
        if self.epoch != Some(epoch) {
            self.advertised = None;
        }
        self.holder = Some(holder);
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
            ("acquired at", self.acquired_at.unwrap_or("-").to_owned()),
            ("advertised", self.advertised.unwrap_or("-").to_owned()),
        ];
        let mut out = String::new();
        for (label, value) in rows {
            let _ = writeln!(out, "{label:<12} {value}");
        }
        out
    }

    fn holder_text(&self) -> String {
        match (self.holder, self.epoch) {
            (Some(holder), _) => holder.to_owned(),
            (None, None) => {
                "unknown: no majority of the accounts carries one holder and epoch".to_owned()
            }
            (None, Some(_)) => "-".to_owned(),
        }
    }

    /// One JSON object on one line.
    fn json(&self) -> String {
        let text = |value: Option<&str>| value.map_or_else(|| "null".to_owned(), json_string);
        format!(
            "{{\"container\":{},\"blob\":{},\"exists\":{},\"state\":{},\"leased\":{},\
             \"duration\":{},\"holder\":{},\"epoch\":{},\"acquired_at\":{},\"advertised\":{}}}",
            json_string(self.container),
            json_string(self.blob),
            self.exists,
            json_string(self.state.as_str()),
            self.leased,
            text(self.duration),
            text(self.holder),
            self.epoch
                .map_or_else(|| "null".to_owned(), |e| e.to_string()),
            text(self.acquired_at),
            text(self.advertised),
        )
    }
}

/// A JSON string literal: quotes, backslashes and control characters escaped.
pub(crate) fn json_string(value: &str) -> String {
    let mut out = String::with_capacity(value.len() + 2);
    out.push('"');
    for c in value.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if u32::from(c) < 0x20 || c == '\u{2028}' || c == '\u{2029}' => {
                let _ = write!(out, "\\u{:04x}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::json_string;

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("plain"), r#""plain""#);
        assert_eq!(json_string(r#"a"b\c"#), r#""a\"b\\c""#);
        assert_eq!(json_string("l1\nl2\t\u{1}"), r#""l1\nl2\t\u0001""#);
        assert_eq!(json_string("naïve"), "\"naïve\"");
    }
}
