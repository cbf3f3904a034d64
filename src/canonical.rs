//! Canonical JSON and digests. Canonical JSON is RFC 8785, the JSON
//! Canonicalization Scheme (JCS): no insignificant whitespace, object keys
//! sorted by their UTF-16 code units, strings with only the escapes JSON
//! requires, numbers as ECMAScript writes an IEEE double. Every digest okstra
//! records is `sha256:<hex>` over this form, so anyone can recompute one with
//! any JCS library, and two equal documents always agree.
//!
//! Numbers: JCS reads every number as a double, so an integer beyond
//! ±(2^53 − 1), the range I-JSON (RFC 7493) keeps exact and JCS input must
//! keep to, is written as the double nearest to it, as every JCS library
//! writes it. okstra's own documents hold only small integers (counts,
//! attempts, seconds); [`first_inexact_integer`] finds one that is not, so a
//! reader can refuse a document whose integers would not survive.
//!
//! Written here rather than taken from a JCS crate: those buffer every key
//! and value in an allocation of its own and parse every key again to sort
//! it, where this writer streams a plan of tens of megabytes into the hash,
//! its jobs written in parallel, within `okstra plan`'s time budget. Numbers
//! go through `ryu-js`, the ECMAScript formatting those crates use too. The
//! tests hold this writer to the RFC's examples and, on random documents, to
//! an independent implementation (`serde_json_canonicalizer`).

use serde_json::{Map, Number, Value};
use sha2::{Digest, Sha256};
use std::cmp::Ordering;

/// The largest integer a double holds exactly together with its
/// neighbours: I-JSON's limit, `2^53 − 1`.
pub const MAX_EXACT_INTEGER: u64 = (1 << 53) - 1;

/// Arrays at least this long are written by several threads: a plan's jobs
/// and inputs number in the thousands, everything else in the tens.
const PARALLEL_ARRAY: usize = 512;

/// Write `value` canonically.
///
/// ```
/// let v = serde_json::json!({"b": [1, 2.5], "a": {"y": true, "x": null}});
/// assert_eq!(
///     okstra::canonical::to_canonical_string(&v),
///     r#"{"a":{"x":null,"y":true},"b":[1,2.5]}"#
/// );
/// ```
pub fn to_canonical_string(value: &Value) -> String {
    let mut out = String::with_capacity(256);
    write_canonical(value, &mut out);
    out
}

/// Where canonical text goes: a string, or straight into a hash (a plan's
/// text is tens of megabytes that need never be held whole).
pub trait Sink {
    fn put(&mut self, s: &str);
}

impl Sink for String {
    fn put(&mut self, s: &str) {
        self.push_str(s);
    }
}

/// Canonical text into sha256, in blocks of about 64 KiB.
struct HashSink {
    sha: Sha256,
    buf: String,
}

impl HashSink {
    const BLOCK: usize = 1 << 16;

    fn new() -> Self {
        HashSink {
            sha: Sha256::new(),
            buf: String::with_capacity(Self::BLOCK + 4096),
        }
    }

    /// `sha256:<hex>` of everything put.
    fn finish(mut self) -> String {
        self.sha.update(&self.buf);
        format!("sha256:{}", hex(&self.sha.finalize()))
    }
}

impl Sink for HashSink {
    fn put(&mut self, s: &str) {
        if s.len() >= Self::BLOCK {
            self.sha.update(&self.buf);
            self.buf.clear();
            self.sha.update(s);
            return;
        }
        self.buf.push_str(s);
        if self.buf.len() >= Self::BLOCK {
            self.sha.update(&self.buf);
            self.buf.clear();
        }
    }
}

/// Put the canonical form of `value` into `out`.
pub fn write_canonical(value: &Value, out: &mut impl Sink) {
    match value {
        Value::Null => out.put("null"),
        Value::Bool(true) => out.put("true"),
        Value::Bool(false) => out.put("false"),
        Value::Number(n) => out.put(&number_to_string(n)),
        Value::String(s) => write_string(s, out),
        Value::Array(items) => write_array(items, out),
        Value::Object(map) => write_object(map.iter(), out),
    }
}

fn write_array(items: &[Value], out: &mut impl Sink) {
    out.put("[");
    if items.len() >= PARALLEL_ARRAY {
        use rayon::prelude::*;
        let parts: Vec<String> = items.par_iter().map(to_canonical_string).collect();
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                out.put(",");
            }
            out.put(part);
        }
    } else {
        for (i, v) in items.iter().enumerate() {
            if i > 0 {
                out.put(",");
            }
            write_canonical(v, out);
        }
    }
    out.put("]");
}

fn write_object<'a>(
    entries: impl Iterator<Item = (&'a String, &'a Value)> + Clone,
    out: &mut impl Sink,
) {
    out.put("{");
    // A map iterates in UTF-8 byte order, which is UTF-16 order unless a key
    // holds a character from U+E000 up: then, and only then, sort.
    if entries
        .clone()
        .is_sorted_by(|a, b| utf16_cmp(a.0, b.0) != Ordering::Greater)
    {
        write_members(entries, out);
    } else {
        let mut sorted: Vec<_> = entries.collect();
        sorted.sort_by(|a, b| utf16_cmp(a.0, b.0));
        write_members(sorted.into_iter(), out);
    }
    out.put("}");
}

fn write_members<'a>(entries: impl Iterator<Item = (&'a String, &'a Value)>, out: &mut impl Sink) {
    for (i, (k, v)) in entries.enumerate() {
        if i > 0 {
            out.put(",");
        }
        write_string(k, out);
        out.put(":");
        write_canonical(v, out);
    }
}

/// Order two strings by their UTF-16 code units (RFC 8785 §3.2.3).
///
/// UTF-8 byte order is code point order, and the two orders part only where
/// a character from U+E000 to U+FFFF meets one above U+FFFF, whose leading
/// surrogate (U+D800 to U+DBFF) sorts first. So the first differing
/// characters decide, compared as UTF-16.
pub fn utf16_cmp(a: &str, b: &str) -> Ordering {
    let Some(at) = a.bytes().zip(b.bytes()).position(|(x, y)| x != y) else {
        return a.len().cmp(&b.len());
    };
    let (x, y) = (a.as_bytes()[at], b.as_bytes()[at]);
    if x.is_ascii() && y.is_ascii() {
        return x.cmp(&y);
    }
    // The strings agree before `at`, so they share its character boundary.
    let start = (0..=at).rev().find(|&i| a.is_char_boundary(i)).unwrap_or(0);
    let units = |s: &str| {
        s[start..].chars().next().map(|c| {
            let mut buf = [0u16; 2];
            let units = c.encode_utf16(&mut buf);
            (units[0], units.get(1).copied())
        })
    };
    units(a).cmp(&units(b))
}

/// A string with the escapes RFC 8785 §3.2.2.2 prescribes: `\"`, `\\`, the
/// short forms `\b \t \n \f \r`, `\u00xx` (lowercase hex) for the other
/// controls, and every other character as itself.
fn write_string(s: &str, out: &mut impl Sink) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.put("\"");
    let mut start = 0;
    for (i, &b) in s.as_bytes().iter().enumerate() {
        let short = match b {
            b'"' => "\\\"",
            b'\\' => "\\\\",
            b'\x08' => "\\b",
            b'\t' => "\\t",
            b'\n' => "\\n",
            b'\x0c' => "\\f",
            b'\r' => "\\r",
            0..=0x1f => "",
            _ => continue,
        };
        out.put(&s[start..i]);
        if short.is_empty() {
            let hex = [
                b'\\',
                b'u',
                b'0',
                b'0',
                HEX[usize::from(b >> 4)],
                HEX[usize::from(b & 0xf)],
            ];
            out.put(std::str::from_utf8(&hex).unwrap_or_default());
        } else {
            out.put(short);
        }
        start = i + 1;
    }
    out.put(&s[start..]);
    out.put("\"");
}

/// A number as RFC 8785 §3.2.2.3 writes it: the ECMAScript form of the
/// double it denotes. An integer a double holds exactly is its digits.
pub fn number_to_string(n: &Number) -> String {
    const EXACT: u64 = 1 << 53;
    if let Some(u) = n.as_u64().filter(|u| *u <= EXACT) {
        u.to_string()
    } else if let Some(i) = n.as_i64().filter(|i| i.unsigned_abs() <= EXACT) {
        i.to_string()
    } else {
        // Beyond 2^53 an integer becomes its nearest double, as any JCS
        // implementation reads it (`as` rounds to nearest, ties to even).
        double_to_string(n.as_f64().unwrap_or(f64::NAN))
    }
}

/// ECMAScript's Number::toString for a finite double, which is how RFC 8785
/// writes every number: the shortest digits that read back as the same
/// double, the closest of them, and of two equally close the even one (Rust's
/// own `{:e}` rounds that tie up, so the `ryu-js` crate, written to the
/// ECMAScript rule, does it), in plain notation from 1e-6 up to 1e21.
pub fn double_to_string(f: f64) -> String {
    if f == 0.0 || !f.is_finite() {
        // Both zeros are "0"; JSON has no other non-finite value to write.
        return "0".into();
    }
    ryu_js::Buffer::new().format_finite(f).to_string()
}

/// The first integer in `value` beyond ±(2^53 − 1), with the JSON pointer to
/// it: a number canonical JSON would not keep exact.
pub fn first_inexact_integer(value: &Value) -> Option<(String, Number)> {
    // The pointer is built on the way out, only for the number found.
    fn walk(value: &Value) -> Option<(Vec<String>, Number)> {
        match value {
            Value::Number(n) if !n.is_f64() => {
                let exact = n.as_u64().is_some_and(|u| u <= MAX_EXACT_INTEGER)
                    || n.as_i64()
                        .is_some_and(|i| i.unsigned_abs() <= MAX_EXACT_INTEGER);
                (!exact).then(|| (Vec::new(), n.clone()))
            }
            Value::Array(items) => items.iter().enumerate().find_map(|(i, v)| {
                walk(v).map(|(mut at, n)| {
                    at.push(i.to_string());
                    (at, n)
                })
            }),
            Value::Object(map) => map.iter().find_map(|(k, v)| {
                walk(v).map(|(mut at, n)| {
                    at.push(k.replace('~', "~0").replace('/', "~1"));
                    (at, n)
                })
            }),
            _ => None,
        }
    }
    walk(value).map(|(at, n)| {
        let pointer = at.iter().rev().fold(String::new(), |p, s| p + "/" + s);
        (pointer, n)
    })
}

/// Lowercase hex sha256 of some bytes.
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

/// Lowercase hex sha256 of what `reader` yields, read in blocks: memory
/// does not grow with the input.
pub fn sha256_hex_of(mut reader: impl std::io::Read) -> std::io::Result<String> {
    let mut sha = Sha256::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        match reader.read(&mut buf) {
            Ok(0) => return Ok(hex(&sha.finalize())),
            Ok(n) => sha.update(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// `sha256:<hex>` of the canonical JSON of `value`: the same for any key
/// order or whitespace.
///
/// ```
/// use okstra::canonical::digest;
/// let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": 2}"#).unwrap();
/// let b: serde_json::Value = serde_json::from_str(r#"{ "a":2,"b":1.0 }"#).unwrap();
/// assert_eq!(digest(&a), digest(&b));
/// assert!(digest(&a).starts_with("sha256:"));
/// ```
pub fn digest(value: &Value) -> String {
    let mut sink = HashSink::new();
    write_canonical(value, &mut sink);
    sink.finish()
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
    let mut sink = HashSink::new();
    match value {
        Value::Object(map) => write_object(without(map, key), &mut sink),
        other => write_canonical(other, &mut sink),
    }
    sink.finish()
}

fn without<'a>(
    map: &'a Map<String, Value>,
    key: &'a str,
) -> impl Iterator<Item = (&'a String, &'a Value)> + Clone {
    map.iter().filter(move |(k, _)| k.as_str() != key)
}

/// Lowercase hex of some bytes.
pub fn hex(bytes: &[u8]) -> String {
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

    fn canon(text: &str) -> String {
        to_canonical_string(&serde_json::from_str(text).expect("test JSON"))
    }

    /// RFC 8785 Appendix B: IEEE doubles (as bits) and their canonical text.
    #[test]
    fn numbers_as_rfc_8785_appendix_b_writes_them() {
        let table: &[(u64, &str)] = &[
            (0x0000000000000000, "0"),
            (0x8000000000000000, "0"), // minus zero
            (0x0000000000000001, "5e-324"),
            (0x8000000000000001, "-5e-324"),
            (0x7fefffffffffffff, "1.7976931348623157e+308"),
            (0xffefffffffffffff, "-1.7976931348623157e+308"),
            (0x4340000000000000, "9007199254740992"),
            (0xc340000000000000, "-9007199254740992"),
            (0x4430000000000000, "295147905179352830000"),
            (0x44b52d02c7e14af5, "9.999999999999997e+22"),
            (0x44b52d02c7e14af6, "1e+23"),
            (0x44b52d02c7e14af7, "1.0000000000000001e+23"),
            (0x444b1ae4d6e2ef4e, "999999999999999700000"),
            (0x444b1ae4d6e2ef4f, "999999999999999900000"),
            (0x444b1ae4d6e2ef50, "1e+21"),
            (0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"),
            (0x3eb0c6f7a0b5ed8d, "0.000001"),
            (0x41b3de4355555553, "333333333.3333332"),
            (0x41b3de4355555554, "333333333.33333325"),
            (0x41b3de4355555555, "333333333.3333333"),
            (0x41b3de4355555556, "333333333.3333334"),
            (0x41b3de4355555557, "333333333.33333343"),
            (0xbecbf647612f3696, "-0.0000033333333333333333"),
            (0x43143ff3c1cb0959, "1424953923781206.2"), // round to even
        ];
        for &(bits, want) in table {
            let f = f64::from_bits(bits);
            assert_eq!(double_to_string(f), want, "{bits:016x}");
            if let Some(n) = Number::from_f64(f) {
                assert_eq!(to_canonical_string(&Value::Number(n)), want, "{bits:016x}");
            }
        }
    }

    #[test]
    fn numbers_as_json_text_reads_them() {
        for (text, want) in [
            ("1e30", "1e+30"),
            ("4.50", "4.5"),
            ("2e-3", "0.002"),
            ("1e-7", "1e-7"),
            ("0.000001", "0.000001"),
            ("-0", "0"),
            ("-0.0", "0"),
            ("1.0", "1"),
            ("100", "100"),
            ("1e21", "1e+21"),
            ("1e20", "100000000000000000000"),
            ("123456789012345680000", "123456789012345680000"),
            ("0.1", "0.1"),
            ("-1.5e-9", "-1.5e-9"),
            ("333333333.33333329", "333333333.3333333"),
            ("0.000000000000000000000000001", "1e-27"),
        ] {
            assert_eq!(canon(text), want, "{text}");
        }
    }

    /// An integer is its digits while a double holds it exactly (up to
    /// 2^53); beyond, it is the nearest double, as JCS reads every number.
    #[test]
    fn integers_keep_their_digits_up_to_2_pow_53() {
        assert_eq!(canon("9007199254740991"), "9007199254740991");
        assert_eq!(canon("-9007199254740991"), "-9007199254740991");
        assert_eq!(canon("9007199254740992"), "9007199254740992");
        assert_eq!(canon("9007199254740993"), "9007199254740992");
        assert_eq!(canon(&u64::MAX.to_string()), "18446744073709552000");
        assert_eq!(canon(&i64::MIN.to_string()), "-9223372036854776000");
        // 2^60 is a double, but its shortest digits are not all of its own.
        assert_eq!(canon("1152921504606846976"), "1152921504606847000");
    }

    #[test]
    fn first_inexact_integer_points_at_it() {
        let v = json!({"a": [1, {"x/y": 9007199254740992_u64}], "b": 2});
        let (at, n) = first_inexact_integer(&v).expect("found");
        assert_eq!(at, "/a/1/x~1y");
        assert_eq!(n.to_string(), "9007199254740992");
        let v = json!({"a": [MAX_EXACT_INTEGER, -9007199254740991_i64, 1.5e300]});
        assert_eq!(first_inexact_integer(&v), None);
        assert_eq!(
            first_inexact_integer(&json!(i64::MIN)).map(|(at, _)| at),
            Some(String::new())
        );
    }

    /// RFC 8785 §3.2.2, with the expected bytes of §3.2.4.
    #[test]
    fn the_rfc_8785_example_document() {
        let input = r#"{
          "numbers": [333333333.33333329, 1E30, 4.50,
                      2e-3, 0.000000000000000000000000001],
          "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
          "literals": [null, true, false]
        }"#;
        let want: Vec<u8> = "7b 22 6c 69 74 65 72 61 6c 73 22 3a 5b 6e 75 6c 6c 2c 74 72 \
             75 65 2c 66 61 6c 73 65 5d 2c 22 6e 75 6d 62 65 72 73 22 3a \
             5b 33 33 33 33 33 33 33 33 33 2e 33 33 33 33 33 33 33 2c 31 \
             65 2b 33 30 2c 34 2e 35 2c 30 2e 30 30 32 2c 31 65 2d 32 37 \
             5d 2c 22 73 74 72 69 6e 67 22 3a 22 e2 82 ac 24 5c 75 30 30 \
             30 66 5c 6e 41 27 42 5c 22 5c 5c 5c 5c 5c 22 2f 22 7d"
            .split_whitespace()
            .map(|h| u8::from_str_radix(h, 16).expect("hex"))
            .collect();
        let got = canon(input);
        assert_eq!(got.as_bytes(), want);
        assert_eq!(
            got,
            r#"{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}"#
        );
    }

    /// RFC 8785 §3.2.3: keys sort by UTF-16 code units, so U+1F600 (a
    /// surrogate pair, D83D DE00) sorts before U+FB33.
    #[test]
    fn the_rfc_8785_sorting_example() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "1": "One",
          "\ud83d\ude00": "Emoji: Grinning Face",
          "\u0080": "Control",
          "\u00f6": "Latin Small Letter O With Diaeresis"
        }"#;
        assert_eq!(
            canon(input),
            "{\"\\r\":\"Carriage Return\",\"1\":\"One\",\"\u{80}\":\"Control\",\
             \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
             \"\u{1f600}\":\"Emoji: Grinning Face\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
    }

    /// `weird.json` of the RFC's reference test data: escapes in keys, DEL
    /// as itself, and `</script>` untouched.
    #[test]
    fn the_reference_weird_document() {
        let input = r#"{
          "\u20ac": "Euro Sign",
          "\r": "Carriage Return",
          "\u000a": "Newline",
          "1": "One",
          "\u0080": "Control\u007f",
          "\ud83d\ude02": "Smiley",
          "\u00f6": "Latin Small Letter O With Diaeresis",
          "\ufb33": "Hebrew Letter Dalet With Dagesh",
          "</script>": "Browser Challenge"
        }"#;
        assert_eq!(
            canon(input),
            "{\"\\n\":\"Newline\",\"\\r\":\"Carriage Return\",\"1\":\"One\",\
             \"</script>\":\"Browser Challenge\",\"\u{80}\":\"Control\u{7f}\",\
             \"\u{f6}\":\"Latin Small Letter O With Diaeresis\",\"\u{20ac}\":\"Euro Sign\",\
             \"\u{1f602}\":\"Smiley\",\"\u{fb33}\":\"Hebrew Letter Dalet With Dagesh\"}"
        );
    }

    #[test]
    fn string_escapes() {
        let all_controls: String = (0u8..0x20).map(char::from).collect();
        assert_eq!(
            to_canonical_string(&json!(all_controls)),
            "\"\\u0000\\u0001\\u0002\\u0003\\u0004\\u0005\\u0006\\u0007\
             \\b\\t\\n\\u000b\\f\\r\\u000e\\u000f\
             \\u0010\\u0011\\u0012\\u0013\\u0014\\u0015\\u0016\\u0017\
             \\u0018\\u0019\\u001a\\u001b\\u001c\\u001d\\u001e\\u001f\""
        );
        // Only `"` and `\` besides; `/`, DEL, U+2028 and non-ASCII as themselves.
        assert_eq!(
            canon(r#""\"\\\/\u007f\u2028\u20ac\ud83d\ude00é""#),
            "\"\\\"\\\\/\u{7f}\u{2028}\u{20ac}\u{1f600}é\""
        );
    }

    #[test]
    fn keys_sorted_and_no_whitespace() {
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

    #[test]
    fn long_arrays_are_written_as_short_ones() {
        // Past PARALLEL_ARRAY the elements are written by several threads.
        let v = json!({"x": (0..PARALLEL_ARRAY * 3)
            .map(|i| json!({"i": i, "s": format!("\u{1f600}{i}"), "\u{fb33}": i, "\u{1f600}": 0}))
            .collect::<Vec<_>>()});
        let want = serde_json_canonicalizer::to_string(&v).expect("reference");
        assert_eq!(to_canonical_string(&v), want);
        assert_eq!(
            digest(&v),
            format!("sha256:{}", sha256_hex(want.as_bytes()))
        );
    }

    #[test]
    fn digests_stream_past_the_hash_block() {
        let big = "x".repeat(HashSink::BLOCK * 2 + 7);
        let v = json!([big.clone(), "a", big]);
        assert_eq!(
            digest(&v),
            format!("sha256:{}", sha256_hex(to_canonical_string(&v).as_bytes()))
        );
    }

    /// Keys drawn to cross the places UTF-8 and UTF-16 orders part: ASCII,
    /// Latin-1, just below and above the surrogates, the private use area,
    /// U+FB33, U+FFFF and astral characters.
    fn arb_key() -> impl Strategy<Value = String> {
        let ch = prop_oneof![
            Just('a'),
            Just('B'),
            Just('\r'),
            Just('\u{80}'),
            Just('\u{f6}'),
            Just('\u{20ac}'),
            Just('\u{d7ff}'),
            Just('\u{e000}'),
            Just('\u{fb33}'),
            Just('\u{ffff}'),
            Just('\u{10000}'),
            Just('\u{1f600}'),
            Just('\u{10ffff}'),
            any::<char>(),
        ];
        prop::collection::vec(ch, 0..4).prop_map(|cs| cs.into_iter().collect())
    }

    fn arb_number() -> impl Strategy<Value = Value> {
        prop_oneof![
            (-(MAX_EXACT_INTEGER as i64)..=MAX_EXACT_INTEGER as i64).prop_map(|n| json!(n)),
            any::<i64>().prop_map(|n| json!(n)),
            any::<u64>().prop_map(|n| json!(n)),
            any::<u64>().prop_filter_map("finite", |bits| Number::from_f64(f64::from_bits(bits))
                .map(Value::Number)),
            any::<f64>().prop_filter_map("finite", |f| Number::from_f64(f).map(Value::Number)),
        ]
    }

    fn arb_json() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            arb_number(),
            arb_key().prop_map(Value::String),
            ".{0,8}".prop_map(Value::String),
        ];
        leaf.prop_recursive(4, 64, 8, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
                prop::collection::btree_map(arb_key(), inner, 0..6)
                    .prop_map(|m| Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// The independent implementation agrees byte for byte, except
        /// where it rounds integers beyond 2^53 by a second route.
        #[test]
        fn agrees_with_an_independent_jcs_implementation(v in arb_json()) {
            let want = serde_json_canonicalizer::to_string(&v).expect("reference");
            prop_assert_eq!(to_canonical_string(&v), want);
        }

        /// A double's text reads back as the same double, in no more
        /// digits than Rust's own shortest form (which differs only in how
        /// it breaks a tie).
        #[test]
        fn doubles_read_back_and_are_shortest(bits in any::<u64>()) {
            let f = f64::from_bits(bits);
            prop_assume!(f.is_finite() && f != 0.0);
            let text = double_to_string(f);
            prop_assert_eq!(text.parse::<f64>().ok(), Some(f));
            let digits = |s: &str| {
                let mantissa = s.split(['e', 'E']).next().unwrap_or("");
                mantissa.trim_start_matches(['-', '0', '.']).replace('.', "").trim_end_matches('0').len()
            };
            prop_assert!(digits(&text) <= digits(&format!("{f:e}")), "{} vs {:e}", text, f);
        }

        #[test]
        fn utf16_order_is_the_order_of_code_units(a in arb_key(), b in arb_key()) {
            prop_assert_eq!(utf16_cmp(&a, &b), a.encode_utf16().cmp(b.encode_utf16()));
        }

        #[test]
        fn canonical_form_round_trips_to_the_same_document(v in arb_json()) {
            prop_assume!(first_inexact_integer(&v).is_none());
            let text = to_canonical_string(&v);
            let back: Value = serde_json::from_str(&text).unwrap();
            prop_assert_eq!(to_canonical_string(&back), text);
        }

        #[test]
        fn digest_ignores_key_order_and_whitespace(v in arb_json()) {
            // Pretty printing and reparsing changes layout, never the digest.
            let pretty = serde_json::to_string_pretty(&v).unwrap();
            let reparsed: Value = serde_json::from_str(&pretty).unwrap();
            prop_assert_eq!(digest(&reparsed), digest(&v));
            prop_assert_eq!(
                digest(&v),
                format!("sha256:{}", sha256_hex(to_canonical_string(&v).as_bytes()))
            );
        }
    }
}
