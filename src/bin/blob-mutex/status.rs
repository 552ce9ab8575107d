//! `blob-mutex status`: show the lease's state and holder.

use std::fmt::Write as _;

use anyhow::Result;
use blob_mutex::{LeaseInfo, LeaseState};

use crate::cli::{StatusArgs, Target};
use crate::exit;

/// Runs `blob-mutex status` and returns its exit code.
pub(crate) async fn status(args: StatusArgs) -> Result<u8> {
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
