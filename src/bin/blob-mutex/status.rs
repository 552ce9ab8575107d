//! `blob-mutex status`: show the lease's state and holder.

use std::fmt::Write as _;

use anyhow::Result;
use blob_mutex::{AccountLease, LeaseInfo, LeaseState, QuorumLeaseStore};

use crate::cli::{StatusArgs, Target};
use crate::exit;

/// Runs `blob-mutex status` and returns its exit code.
pub(crate) async fn status(args: StatusArgs) -> Result<u8> {
    if let Some(quorum) = args.target.quorum()? {
        return quorum_status(&args, &quorum).await;
    }
    let info = args.target.lease_manager()?.inspect().await?;
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
    let view = View::new(&args.target, info.as_ref());
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

/// One account's lease on one line.
fn account_line(account: &AccountLease) -> String {
    let what = match &account.lease {
        Ok(Some(info)) => format!(
            "{} holder {} epoch {}",
            info.state,
            info.holder.as_deref().unwrap_or("-"),
            info.epoch
        ),
        Ok(None) => "no lease blob yet".to_owned(),
        Err(e) => format!("unreachable: {}", Chain(e)),
    };
    format!("account {:<48} {what}", account.account)
}

/// One account's lease as a JSON object.
fn account_json(account: &AccountLease) -> String {
    let text = |value: Option<&str>| value.map_or_else(|| "null".to_owned(), json_string);
    let (state, holder, epoch, error) = match &account.lease {
        Ok(Some(info)) => (
            Some(info.state.as_str()),
            info.holder.clone(),
            info.epoch,
            None,
        ),
        Ok(None) => (None, None, 0, None),
        Err(e) => (None, None, 0, Some(Chain(e).to_string())),
    };
    format!(
        "{{\"account\":{},\"state\":{},\"holder\":{},\"epoch\":{epoch},\"error\":{}}}",
        json_string(&account.account),
        text(state),
        text(holder.as_deref()),
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
    epoch: u64,
    acquired_at: Option<&'a str>,
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
            epoch: info.map_or(0, |i| i.epoch),
            acquired_at: info.and_then(|i| i.acquired_at.as_deref()),
        }
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
            (holder_label, self.holder.unwrap_or("-").to_owned()),
            ("epoch", self.epoch.to_string()),
            ("acquired at", self.acquired_at.unwrap_or("-").to_owned()),
        ];
        let mut out = String::new();
        for (label, value) in rows {
            let _ = writeln!(out, "{label:<12} {value}");
        }
        out
    }

    /// One JSON object on one line.
    fn json(&self) -> String {
        let text = |value: Option<&str>| value.map_or_else(|| "null".to_owned(), json_string);
        format!(
            "{{\"container\":{},\"blob\":{},\"exists\":{},\"state\":{},\"leased\":{},\
             \"duration\":{},\"holder\":{},\"epoch\":{},\"acquired_at\":{}}}",
            json_string(self.container),
            json_string(self.blob),
            self.exists,
            json_string(self.state.as_str()),
            self.leased,
            text(self.duration),
            text(self.holder),
            self.epoch,
            text(self.acquired_at),
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
