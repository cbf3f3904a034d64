//! File names as the audit sees them: bytes. A name on Linux is any byte
//! string without `/` or NUL, UTF-8 or not, so the walk compares and stores
//! names as bytes, and turns them into text in exactly one way, [`escape`],
//! for display (reasons, `changedPaths`) and for the snapshot sidecar.
//!
//! The convention: `\` is written `\\`; a byte that is not part of valid
//! UTF-8, and each byte of a character that could mislead a reader of a
//! reason or a log line (control characters, C1 controls, bidirectional
//! overrides, zero-width characters), is written `\xNN` (lowercase hex);
//! everything else is the character itself. So a plain name reads as itself,
//! and [`unescape`] gives back the exact bytes of any escaped name.
//!
//! Policies never hold `\` (docs/spec-format.md#paths refuses it), so an
//! escaped name can only be allowed by a wildcard that covers it, never by
//! accident of a literal.

use serde::de::{self, Deserializer, Visitor};
use serde::Serializer;
use std::borrow::Cow;
use std::fmt;

/// The display and sidecar form of `bytes` (see the module docs).
pub fn escape(bytes: &[u8]) -> Cow<'_, str> {
    if bytes
        .iter()
        .all(|&b| (0x20..0x7f).contains(&b) && b != b'\\')
    {
        // Printable ASCII without `\`: the common case, no copy.
        return Cow::Borrowed(std::str::from_utf8(bytes).unwrap_or_default());
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    escape_into(&mut out, bytes);
    Cow::Owned(out)
}

/// Append the escaped form of `bytes` to `out`.
pub fn escape_into(out: &mut String, bytes: &[u8]) {
    for chunk in bytes.utf8_chunks() {
        for c in chunk.valid().chars() {
            if c == '\\' {
                out.push_str("\\\\");
            } else if misleading(c) {
                let mut buf = [0u8; 4];
                for b in c.encode_utf8(&mut buf).bytes() {
                    push_hex(out, b);
                }
            } else {
                out.push(c);
            }
        }
        for &b in chunk.invalid() {
            push_hex(out, b);
        }
    }
}

/// Characters shown as their bytes: they would otherwise break a line,
/// reorder the text around them, or hide in it.
fn misleading(c: char) -> bool {
    c.is_control()
        || matches!(c,
            '\u{200b}'..='\u{200f}'
            | '\u{202a}'..='\u{202e}'
            | '\u{2066}'..='\u{2069}'
            | '\u{feff}')
}

fn push_hex(out: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push('\\');
    out.push('x');
    out.push(HEX[usize::from(b >> 4)] as char);
    out.push(HEX[usize::from(b & 0xf)] as char);
}

/// The bytes an [`escape`]d string stands for; `None` for a string no
/// escape produces (a lone `\`, `\x` without two hex digits, `\` before any
/// other character).
pub fn unescape(s: &str) -> Option<Vec<u8>> {
    if !s.contains('\\') {
        return Some(s.as_bytes().to_vec());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        match b.get(i + 1) {
            Some(b'\\') => {
                out.push(b'\\');
                i += 2;
            }
            Some(b'x') => {
                let hi = hex_value(*b.get(i + 2)?)?;
                let lo = hex_value(*b.get(i + 3)?)?;
                out.push(hi << 4 | lo);
                i += 4;
            }
            _ => return None,
        }
    }
    Some(out)
}

fn hex_value(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// `#[serde(with = "escaped")]` for a byte name: stored as its escaped
/// string, read back to the same bytes.
pub mod escaped {
    use super::*;

    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&escape(bytes))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        d.deserialize_str(EscapedVisitor)
    }

    /// The same for an optional name (a symlink's target).
    pub mod opt {
        use super::*;

        pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
            match bytes {
                Some(b) => s.serialize_some(&*escape(b)),
                None => s.serialize_none(),
            }
        }

        pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
            d.deserialize_option(OptVisitor)
        }

        struct OptVisitor;

        impl<'de> Visitor<'de> for OptVisitor {
            type Value = Option<Vec<u8>>;

            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("an escaped name or null")
            }

            fn visit_none<E: de::Error>(self) -> Result<Self::Value, E> {
                Ok(None)
            }

            fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
                d.deserialize_str(EscapedVisitor).map(Some)
            }
        }
    }

    struct EscapedVisitor;

    impl Visitor<'_> for EscapedVisitor {
        type Value = Vec<u8>;

        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("an escaped name")
        }

        fn visit_str<E: de::Error>(self, v: &str) -> Result<Self::Value, E> {
            unescape(v).ok_or_else(|| E::custom(format!("malformed escape in `{v}`")))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn plain_names_read_as_themselves() {
        for n in ["a.txt", "src", "with space", "ünïcödé", "日本語", ".git"] {
            assert_eq!(escape(n.as_bytes()), n);
        }
        assert!(matches!(escape(b"a.txt"), Cow::Borrowed(_)));
    }

    #[test]
    fn what_gets_escaped() {
        assert_eq!(escape(b"bad\xffname"), "bad\\xffname");
        assert_eq!(escape(b"a\\b"), "a\\\\b");
        assert_eq!(escape(b"line\nbreak\t"), "line\\x0abreak\\x09");
        assert_eq!(escape(b"del\x7f"), "del\\x7f");
        // A truncated multi-byte character: each byte on its own.
        assert_eq!(escape(b"\xe6\x97"), "\\xe6\\x97");
        // A right-to-left override would reorder the reason around it.
        assert_eq!(escape("x\u{202e}y".as_bytes()), "x\\xe2\\x80\\xaey");
        // The escape of a backslash-x is not mistaken for an escaped byte.
        assert_eq!(escape(b"\\xff"), "\\\\xff");
        assert_ne!(escape(b"\\xff"), escape(b"\xff"));
    }

    #[test]
    fn malformed_escapes_are_refused() {
        for s in ["\\", "a\\", "\\x", "\\x1", "\\xg0", "\\n", "\\u{41}"] {
            assert_eq!(unescape(s), None, "{s}");
        }
        assert_eq!(unescape("\\xFF").as_deref(), Some(&b"\xff"[..]));
    }

    proptest! {
        #[test]
        fn escape_round_trips_every_byte_string(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let e = escape(&bytes);
            prop_assert_eq!(unescape(&e), Some(bytes.clone()));
            // No escape introduces a separator or a line break.
            prop_assert_eq!(e.matches('/').count(), bytes.iter().filter(|&&b| b == b'/').count());
            prop_assert!(!e.contains('\n'));
        }

        #[test]
        fn escape_is_injective(a in proptest::collection::vec(any::<u8>(), 0..16),
                               b in proptest::collection::vec(any::<u8>(), 0..16)) {
            prop_assert_eq!(a == b, escape(&a) == escape(&b));
        }

        #[test]
        fn escape_distributes_over_slash(a in proptest::collection::vec(any::<u8>(), 0..16),
                                         b in proptest::collection::vec(any::<u8>(), 0..16)) {
            // Display paths are built by joining escaped names with `/`.
            let mut joined = a.clone();
            joined.push(b'/');
            joined.extend(&b);
            prop_assert_eq!(escape(&joined).into_owned(), format!("{}/{}", escape(&a), escape(&b)));
        }
    }
}
