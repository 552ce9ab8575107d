//! The results file, written without a JSON dependency.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use blob_mutex_testkit::proxy::Kind;

use crate::stats::Stats;

/// A JSON value. Numbers are written rounded to six decimals (a microsecond
/// when they are seconds), and `NaN` as `null`.
pub(crate) enum Json {
    Num(f64),
    Int(u64),
    Bool(bool),
    Str(String),
    Arr(Vec<Json>),
    Obj(Vec<(String, Json)>),
}

impl Json {
    pub(crate) fn obj<'a>(fields: impl IntoIterator<Item = (&'a str, Json)>) -> Json {
        Json::Obj(fields.into_iter().map(|(k, v)| (k.to_owned(), v)).collect())
    }

    pub(crate) fn count(n: usize) -> Json {
        Json::Int(n as u64)
    }

    pub(crate) fn str(s: impl Into<String>) -> Json {
        Json::Str(s.into())
    }

    pub(crate) fn nums(values: &[f64]) -> Json {
        Json::Arr(values.iter().map(|v| Json::Num(*v)).collect())
    }

    pub(crate) fn stats(s: &Stats) -> Json {
        Json::obj([
            ("n", Json::count(s.n)),
            ("min", Json::Num(s.min)),
            ("median", Json::Num(s.median)),
            ("mean", Json::Num(s.mean)),
            ("p95", Json::Num(s.p95)),
            ("p99", Json::Num(s.p99)),
            ("max", Json::Num(s.max)),
        ])
    }

    /// The value as indented text, with a final newline.
    pub(crate) fn to_text(&self) -> String {
        let mut out = String::new();
        self.write(&mut out, 0);
        out.push('\n');
        out
    }

    fn write(&self, out: &mut String, indent: usize) {
        let pad = |out: &mut String, n: usize| out.extend(std::iter::repeat_n(' ', n));
        match self {
            Json::Num(v) if v.is_finite() => {
                let _ = write!(out, "{}", (v * 1e6).round() / 1e6);
            }
            Json::Num(_) => out.push_str("null"),
            Json::Int(v) => {
                let _ = write!(out, "{v}");
            }
            Json::Bool(b) => {
                let _ = write!(out, "{b}");
            }
            Json::Str(s) => {
                out.push('"');
                for c in s.chars() {
                    match c {
                        '"' => out.push_str("\\\""),
                        '\\' => out.push_str("\\\\"),
                        '\n' => out.push_str("\\n"),
                        c if u32::from(c) < 0x20 => {
                            let _ = write!(out, "\\u{:04x}", u32::from(c));
                        }
                        c => out.push(c),
                    }
                }
                out.push('"');
            }
            Json::Arr(items)
                if items
                    .iter()
                    .all(|i| matches!(i, Json::Num(_) | Json::Int(_))) =>
            {
                out.push('[');
                for (i, item) in items.iter().enumerate() {
                    if i > 0 {
                        out.push_str(", ");
                    }
                    item.write(out, indent);
                }
                out.push(']');
            }
            Json::Arr(items) => {
                out.push_str("[\n");
                for (i, item) in items.iter().enumerate() {
                    pad(out, indent + 2);
                    item.write(out, indent + 2);
                    out.push_str(if i + 1 < items.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push(']');
            }
            Json::Obj(fields) => {
                out.push_str("{\n");
                for (i, (key, value)) in fields.iter().enumerate() {
                    pad(out, indent + 2);
                    Json::Str(key.clone()).write(out, indent + 2);
                    out.push_str(": ");
                    value.write(out, indent + 2);
                    out.push_str(if i + 1 < fields.len() { ",\n" } else { "\n" });
                }
                pad(out, indent);
                out.push('}');
            }
        }
    }
}

/// Requests counted by kind, as an object keyed by kind name.
pub(crate) fn counts_json(counts: &BTreeMap<Kind, usize>) -> Json {
    Json::obj(counts.iter().map(|(k, n)| (k.name(), Json::count(*n))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_nested_values() {
        let value = Json::obj([
            ("name", Json::str("a \"b\"\n\u{1}")),
            ("samples", Json::nums(&[0.123_456_789, f64::NAN])),
            ("ok", Json::Bool(true)),
            ("list", Json::Arr(vec![Json::obj([("n", Json::count(2))])])),
        ]);
        assert_eq!(
            value.to_text(),
            "{\n  \"name\": \"a \\\"b\\\"\\n\\u0001\",\n  \"samples\": [0.123457, null],\n  \
             \"ok\": true,\n  \"list\": [\n    {\n      \"n\": 2\n    }\n  ]\n}\n"
        );
    }
}
