//! Canonical JSON and digests. Canonical means: object keys sorted by their
//! UTF-8 bytes, no insignificant whitespace, integers as plain digits, strings
//! escaped as serde_json writes them. Every digest okstra records is
//! `sha256:<hex>` over this form, so two equal documents always agree.

use serde_json::Value;
use sha2::{Digest, Sha256};

/// Write `value` canonically.
///
/// ```
/// let v = serde_json::json!({"b": [1, 2], "a": {"y": true, "x": null}});
/// assert_eq!(
///     okstra::canonical::to_canonical_string(&v),
///     r#"{"a":{"x":null,"y":true},"b":[1,2]}"#
/// );
/// ```
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => write_object(map.iter(), out),
        Value::Array(items) => {
            out.push('[');
            for (i, v) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(v, out);
            }
            out.push(']');
        }
        Value::String(s) => write_string(s, out),
        // Numbers, booleans and null: serde_json's own text is already minimal
        // (integers as plain digits).
        other => out.push_str(&other.to_string()),
    }
}

fn write_object<'a>(entries: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut String) {
    let mut entries: Vec<(&String, &Value)> = entries.collect();
    entries.sort_unstable_by(|a, b| a.0.as_bytes().cmp(b.0.as_bytes()));
    out.push('{');
    for (i, (k, v)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        write_string(k, out);
        out.push(':');
        write_canonical(v, out);
    }
    out.push('}');
}

fn write_string(s: &str, out: &mut String) {
    // serde_json's escaping is the reference; a string never fails to encode.
    out.push_str(&serde_json::to_string(s).unwrap_or_default());
}

/// Lowercase hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// `sha256:<hex>` of the canonical JSON of `value`: the same for any key
/// order or whitespace.
///
/// ```
/// use okstra::canonical::digest;
/// let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": 2}"#).unwrap();
/// let b: serde_json::Value = serde_json::from_str(r#"{ "a":2,"b":1 }"#).unwrap();
/// assert_eq!(digest(&a), digest(&b));
/// assert!(digest(&a).starts_with("sha256:"));
/// ```
pub fn digest(value: &Value) -> String {
    format!(
        "sha256:{}",
        sha256_hex(to_canonical_string(value).as_bytes())
    )
}

/// [`digest`] of an object as if it lacked the top-level `key` (a document
/// that records its own digest), without copying the document.
///
/// ```
/// use okstra::canonical::{digest, digest_without};
/// let with: serde_json::Value = serde_json::json!({"a": 1, "digest": "x"});
/// assert_eq!(digest_without(&with, "digest"), digest(&serde_json::json!({"a": 1})));
/// ```
pub fn digest_without(value: &Value, key: &str) -> String {
    let mut out = String::with_capacity(256);
    match value {
        Value::Object(map) => write_object(map.iter().filter(|(k, _)| k.as_str() != key), &mut out),
        other => write_canonical(other, &mut out),
    }
    format!("sha256:{}", sha256_hex(out.as_bytes()))
}

fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 0xf) as usize] as char);
    }
    s
}

/// True for a string of exactly 64 lowercase hex digits.
pub fn is_sha256_hex(s: &str) -> bool {
    s.len() == 64 && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use serde_json::json;

    #[test]
    fn keys_sorted_by_bytes_and_no_whitespace() {
        let v = json!({"b": 1, "a": [true, null, "x"], "B": {"z": 2, "é": 3, "y": -4}});
        assert_eq!(
            to_canonical_string(&v),
            r#"{"B":{"y":-4,"z":2,"é":3},"a":[true,null,"x"],"b":1}"#
        );
    }

    #[test]
    fn digest_is_prefixed_hex() {
        let d = digest(&json!({}));
        assert_eq!(
            d,
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
        assert!(is_sha256_hex(d.trim_start_matches("sha256:")));
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(|n| json!(n)),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(".{0,6}", inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #[test]
        fn canonical_form_round_trips_to_the_same_value(v in arb_json()) {
            let text = to_canonical_string(&v);
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(&back, &v);
            prop_assert_eq!(to_canonical_string(&back), text);
        }

        #[test]
        fn digest_ignores_key_order_and_whitespace(v in arb_json()) {
            // Pretty printing and reparsing changes layout, never the digest.
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            let reparsed: Value = serde_json::from_str(&pretty).unwrap();
            prop_assert_eq!(digest(&reparsed), digest(&v));
            // Reversing insertion order of every object changes nothing either.
            prop_assert_eq!(digest(&reverse_keys(&v)), digest(&v));
        }

        #[test]
        fn canonical_text_has_no_insignificant_whitespace(v in arb_json()) {
            let text = to_canonical_string(&v);
            let stripped = strip_string_contents(&text);
            prop_assert!(!stripped.contains(' ') && !stripped.contains('\n'));
        }
    }

    fn reverse_keys(v: &Value) -> Value {
        match v {
            Value::Object(m) => {
                let mut out = serde_json::Map::new();
                let mut entries: Vec<_> = m.iter().collect();
                entries.reverse();
                for (k, v) in entries {
                    out.insert(k.clone(), reverse_keys(v));
                }
                Value::Object(out)
            }
            Value::Array(a) => Value::Array(a.iter().map(reverse_keys).collect()),
            other => other.clone(),
        }
    }

    fn strip_string_contents(text: &str) -> String {
        let mut out = String::new();
        let mut in_str = false;
        let mut escaped = false;
        for c in text.chars() {
            if in_str {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == '"' {
                    in_str = false;
                }
                continue;
            }
            if c == '"' {
                in_str = true;
            }
            out.push(c);
        }
        out
    }
}
