//! Names git accepts: branch names okstra makes from task and state keys,
//! and the trailer block its commits carry. Pure: no git is run here.

use sha2::{Digest, Sha256};
use std::fmt::Write;

/// Longest component [`ref_component`] returns before it shortens one: a
/// loose ref is a file, and file names stop at 255 bytes.
const MAX_COMPONENT: usize = 120;

/// Whether git would accept `name` as a branch (`refs/heads/<name>`), by the
/// rules of `git check-ref-format --branch`: no empty, `.`-led or
/// `.lock`-ended component, no `..`, `@{`, control character, space or any
/// of `~^:?*[\`, not `@`, `HEAD`, `-`-led or `.`-ended.
pub fn branch_name_ok(name: &str) -> bool {
    if name.is_empty() || name == "@" || name == "HEAD" || name.starts_with('-') {
        return false;
    }
    if name.ends_with('.') || name.contains("..") || name.contains("@{") {
        return false;
    }
    let bad_char = |c: char| {
        c.is_ascii_control() || matches!(c, ' ' | '~' | '^' | ':' | '?' | '*' | '[' | '\\')
    };
    if name.chars().any(bad_char) {
        return false;
    }
    name.split('/')
        .all(|c| !c.is_empty() && !c.starts_with('.') && !c.ends_with(".lock"))
}

/// `s` as one component of a ref name (and of a file name), the same `s`
/// always giving the same component and two different ones never the same.
///
/// ASCII letters, digits, `-`, `_` and `.` stay; every other byte of the
/// UTF-8 text (`/` and `%` included) becomes `%XX` (upper-case hex), as does
/// a `.` that would lead the component, follow another `.`, end it, or
/// start a `.lock` ending, and a leading `-`. Decoding `%XX` gives `s` back.
/// An empty `s` is `%`. A component longer than 120 bytes keeps its first
/// 100 bytes and ends `%%` and 16 hex digits of the SHA-256 of `s` (`%%`
/// never appears otherwise).
pub fn ref_component(s: &str) -> String {
    if s.is_empty() {
        return "%".to_string();
    }
    let bytes = s.as_bytes();
    let mut out = String::with_capacity(s.len());
    for (i, &b) in bytes.iter().enumerate() {
        let keep = match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'_' => true,
            b'-' => i > 0,
            b'.' => {
                i > 0
                    && i + 1 < bytes.len()
                    && bytes[i - 1] != b'.'
                    && !bytes[i..].eq_ignore_ascii_case(b".lock")
            }
            _ => false,
        };
        if keep {
            out.push(b as char);
        } else {
            let _ = write!(out, "%{b:02X}");
        }
    }
    if out.len() > MAX_COMPONENT {
        let mut cut = 100;
        // Never split a %XX.
        while out.as_bytes()[..cut]
            .iter()
            .rev()
            .take(2)
            .any(|&b| b == b'%')
        {
            cut -= 1;
        }
        let digest = Sha256::digest(s.as_bytes());
        out.truncate(cut);
        out.push_str("%%");
        for b in &digest[..8] {
            let _ = write!(out, "{b:02x}");
        }
    }
    out
}

/// A trailer block: one `Key: value` line per pair, in order, each ending
/// in a newline. Keys keep only ASCII letters, digits and `-` (anything else
/// becomes `-`); a value's line breaks become spaces, so every pair stays
/// one trailer. Put it after a blank line at the end of a message (see
/// [`message_with_trailers`]) for git to read it as trailers.
pub fn trailers(pairs: &[(&str, &str)]) -> String {
    let mut out = String::new();
    for (key, value) in pairs {
        let key: String = key
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let value = value.replace(['\r', '\n'], " ");
        let _ = writeln!(out, "{key}: {}", value.trim());
    }
    out
}

/// A commit message: `subject` (its first line only), a blank line, then
/// the trailer block of `pairs`.
pub fn message_with_trailers(subject: &str, pairs: &[(&str, &str)]) -> String {
    let subject = subject.lines().next().unwrap_or("").trim();
    let subject = if subject.is_empty() {
        "okstra"
    } else {
        subject
    };
    format!("{subject}\n\n{}", trailers(pairs))
}
