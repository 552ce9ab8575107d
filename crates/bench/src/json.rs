//! The results file: `serde_json` values, built by the few helpers below so
//! that every number is written alike.

use std::collections::BTreeMap;

use blob_mutex_testkit::proxy::Kind;
use serde_json::{Map, Value};

use crate::stats::Stats;

/// A value of the results file.
pub(crate) type Json = Value;

/// A measured number, rounded to six decimals (a microsecond when it is
/// seconds); `null` when it is not finite (a figure that could not be
/// taken).
pub(crate) fn num(value: f64) -> Json {
    if value.is_finite() {
        Value::from((value * 1e6).round() / 1e6)
    } else {
        Value::Null
    }
}

/// A whole number.
pub(crate) fn int(value: u64) -> Json {
    Value::from(value)
}

/// A count.
pub(crate) fn count(n: usize) -> Json {
    Value::from(n)
}

/// A string.
pub(crate) fn str(s: impl Into<String>) -> Json {
    Value::String(s.into())
}

/// An object (written with its keys sorted, as `serde_json` keeps them).
pub(crate) fn obj<K: Into<String>>(fields: impl IntoIterator<Item = (K, Json)>) -> Json {
    Value::Object(
        fields
            .into_iter()
            .map(|(k, v)| (k.into(), v))
            .collect::<Map<_, _>>(),
    )
}

/// Measured numbers, each as [`num`] writes it.
pub(crate) fn nums(values: &[f64]) -> Json {
    Value::Array(values.iter().copied().map(num).collect())
}

/// A sample's statistics.
pub(crate) fn stats(s: &Stats) -> Json {
    obj([
        ("n", count(s.n)),
        ("min", num(s.min)),
        ("median", num(s.median)),
        ("mean", num(s.mean)),
        ("p95", num(s.p95)),
        ("p99", num(s.p99)),
        ("max", num(s.max)),
    ])
}

/// The value as indented text, with a final newline.
pub(crate) fn to_text(value: &Json) -> String {
    let mut text = serde_json::to_string_pretty(value).expect("a Value always serializes");
    text.push('\n');
    text
}

/// Requests counted by kind, as an object keyed by kind name.
pub(crate) fn counts_json(counts: &BTreeMap<Kind, usize>) -> Json {
    obj(counts.iter().map(|(k, n)| (k.name(), count(*n))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_rounded_to_six_decimals_and_what_is_not_finite_is_null() {
        let value = obj([
            ("name", str("a \"b\"\n\u{1}")),
            ("samples", nums(&[0.123_456_789, f64::NAN])),
            ("ok", Value::Bool(true)),
            ("list", Value::Array(vec![obj([("n", count(2))])])),
            ("first", int(1)),
        ]);
        assert_eq!(
            to_text(&value),
            "{\n  \"first\": 1,\n  \"list\": [\n    {\n      \"n\": 2\n    }\n  ],\n  \
             \"name\": \"a \\\"b\\\"\\n\\u0001\",\n  \"ok\": true,\n  \"samples\": [\n    0.123457,\n    null\n  ]\n}\n"
        );
    }
}
