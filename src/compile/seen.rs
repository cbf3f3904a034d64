//! The problems a compile has reported, so that one found twice is reported
//! once: the same code at the same place (file, line, column, pointer) with
//! the same message, whichever worker or hint it names.
//!
//! A problem is remembered by a hash of what makes it the same, with the
//! index of the diagnostic that reported it; two problems whose hashes
//! collide are told apart by comparing the diagnostics themselves, so a
//! collision never hides a problem. That costs a few words per problem: a
//! spec refused for a hundred thousand problems once spent more on the
//! text of these keys than on the diagnostics.

use crate::diag::{Code, Diagnostic, Diagnostics};
use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, RandomState};

#[derive(Default)]
pub struct Seen {
    hasher: RandomState,
    /// Hash -> the first diagnostic with it.
    first: HashMap<u64, u32>,
    /// Hash -> later diagnostics with it that are other problems (rare).
    others: HashMap<u64, Vec<u32>>,
}

/// What makes two diagnostics the same problem.
#[derive(Hash, PartialEq, Eq)]
struct Key<'a> {
    code: Code,
    file: &'a str,
    line_column: Option<(usize, usize)>,
    pointer: &'a str,
    message: &'a str,
}

impl<'a> Key<'a> {
    fn of(d: &'a Diagnostic) -> Key<'a> {
        let loc = d.location.as_ref();
        Key {
            code: d.code,
            file: loc.map(|l| l.file_name()).unwrap_or(""),
            line_column: loc.and_then(|l| l.resolve()).map(|r| (r.line, r.column)),
            pointer: d.pointer.as_deref().unwrap_or(""),
            message: &d.message,
        }
    }
}

impl Seen {
    /// Whether `d` is a problem none of `reported` is; if so, it is
    /// remembered as the next one `reported` will hold.
    pub fn first_time(&mut self, reported: &Diagnostics, d: &Diagnostic) -> bool {
        let key = Key::of(d);
        let hash = self.hasher.hash_one(&key);
        let index = u32::try_from(reported.len()).unwrap_or(u32::MAX);
        let Some(&first) = self.first.get(&hash) else {
            self.first.insert(hash, index);
            return true;
        };
        let same = |i: &u32| reported.get(*i as usize).is_some_and(|r| Key::of(r) == key);
        if same(&first) || self.others.get(&hash).is_some_and(|o| o.iter().any(same)) {
            return false;
        }
        self.others.entry(hash).or_default().push(index);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diag::{Location, SourceText};

    /// Pushes through `seen` as `Ctx::push` does; returns what was kept.
    fn keep(all: Vec<Diagnostic>) -> Vec<Diagnostic> {
        let mut seen = Seen::default();
        let mut out = Diagnostics::default();
        for d in all {
            if seen.first_time(&out, &d) {
                out.push(d);
            }
        }
        out.into_iter().collect()
    }

    #[test]
    fn a_problem_found_twice_is_kept_once_whatever_worker_or_hint_it_names() {
        let src = SourceText::new("s.json", "{\"a\": 1, \"b\": 2}".to_string());
        let at = |from: usize| Location::span(&src, from..from + 1);
        let d =
            |code, message: &str, from| Diagnostic::new(code, message).at(at(from)).pointer("/a");
        let kept = keep(vec![
            d(Code::SchemaViolation, "x", 6).worker("w1").help("h1"),
            d(Code::SchemaViolation, "x", 6).worker("w2").help("h2"),
            // Another code, message, column or pointer is another problem.
            d(Code::PathInvalid, "x", 6),
            d(Code::SchemaViolation, "y", 6),
            d(Code::SchemaViolation, "x", 14),
            d(Code::SchemaViolation, "x", 6).pointer("/b"),
            Diagnostic::new(Code::SchemaViolation, "x").in_file("s.json"),
            Diagnostic::new(Code::SchemaViolation, "x").in_file("s.json"),
            Diagnostic::new(Code::SchemaViolation, "x"),
        ]);
        let workers: Vec<_> = kept.iter().map(|d| d.worker.as_deref()).collect();
        assert_eq!(kept.len(), 7, "{kept:#?}");
        assert_eq!(workers[0], Some("w1"));
    }

    #[test]
    fn colliding_hashes_are_told_apart() {
        let mut seen = Seen::default();
        let mut out = Diagnostics::default();
        let a = Diagnostic::new(Code::SchemaViolation, "a");
        let b = Diagnostic::new(Code::SchemaViolation, "b");
        // Pretend `b` hashed as `a` did.
        assert!(seen.first_time(&out, &a));
        out.push(a.clone());
        let hash = seen.hasher.hash_one(Key::of(&b));
        let first = seen
            .first
            .remove(&seen.hasher.hash_one(Key::of(&a)))
            .unwrap();
        seen.first.insert(hash, first);
        assert!(
            seen.first_time(&out, &b),
            "another problem with the same hash"
        );
        out.push(b.clone());
        assert!(!seen.first_time(&out, &b), "and remembered");
        assert_eq!(seen.others[&hash], [1]);
    }
}
