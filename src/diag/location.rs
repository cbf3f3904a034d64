//! Where a diagnostic points: a byte span of a shared source text, or a whole
//! file. A location never copies the text it points into: every diagnostic
//! about one file shares that file's [`SourceText`] by `Arc`, so reporting
//! thousands of problems in one (possibly minified, single-line) file costs
//! a few words each, not a copy of the line each. Line and column are
//! worked out when asked for, in time independent of the line's length.

use std::fmt;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

/// An input's text and its name for messages, with a table of line starts.
pub struct SourceText {
    name: String,
    text: String,
    /// The byte offset of every line's first byte; `[0]` is 0.
    line_starts: Vec<usize>,
    /// `char_marks[i]`: how many characters start before byte
    /// `i * CHAR_MARK_STRIDE`. Built on first need, so that the column of a
    /// span far into a long line costs one stride, not the line.
    char_marks: OnceLock<Vec<usize>>,
}

const CHAR_MARK_STRIDE: usize = 4096;

impl SourceText {
    pub fn new(name: impl Into<String>, text: String) -> Arc<SourceText> {
        let mut line_starts = vec![0];
        line_starts.extend(
            text.bytes()
                .enumerate()
                .filter(|(_, b)| *b == b'\n')
                .map(|(i, _)| i + 1),
        );
        Arc::new(SourceText {
            name: name.into(),
            text,
            line_starts,
            char_marks: OnceLock::new(),
        })
    }

    /// The name shown in messages (a project-relative path, usually).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Byte offsets of every line's first byte.
    pub fn line_starts(&self) -> &[usize] {
        &self.line_starts
    }

    /// The 0-based line holding byte `offset` (a line's `\n` belongs to it).
    pub fn line_index(&self, offset: usize) -> usize {
        match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        }
    }

    /// The bytes of line `index` (0-based), without its `\n` or `\r\n`.
    pub fn line_range(&self, index: usize) -> Range<usize> {
        let start = self.line_starts[index];
        let mut end = self
            .line_starts
            .get(index + 1)
            .map(|next| next - 1)
            .unwrap_or(self.text.len());
        if end > start && self.text.as_bytes()[end - 1] == b'\r' {
            end -= 1;
        }
        start..end
    }

    /// How many characters start in `text[from..to]` (any byte offsets).
    fn chars_between(&self, from: usize, to: usize) -> usize {
        if to - from <= 2 * CHAR_MARK_STRIDE {
            return count_chars(&self.text.as_bytes()[from..to]);
        }
        self.chars_before(to) - self.chars_before(from)
    }

    fn chars_before(&self, offset: usize) -> usize {
        let marks = self.char_marks.get_or_init(|| {
            let mut marks = vec![0];
            let mut total = 0;
            for chunk in self.text.as_bytes().chunks(CHAR_MARK_STRIDE) {
                total += count_chars(chunk);
                marks.push(total);
            }
            marks
        });
        let block = offset / CHAR_MARK_STRIDE;
        let base = block * CHAR_MARK_STRIDE;
        marks[block] + count_chars(&self.text.as_bytes()[base..offset])
    }
}

/// UTF-8 characters starting in `bytes` (every byte but continuation bytes).
fn count_chars(bytes: &[u8]) -> usize {
    bytes.iter().filter(|&&b| (b & 0xC0) != 0x80).count()
}

impl fmt::Debug for SourceText {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SourceText")
            .field("name", &self.name)
            .field("len", &self.text.len())
            .finish()
    }
}

impl PartialEq for SourceText {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self, other) || (self.name == other.name && self.text == other.text)
    }
}

impl Eq for SourceText {}

/// A place in an input.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location(Place);

#[derive(Clone, Debug, PartialEq, Eq)]
enum Place {
    /// A whole file, with no place in it to show.
    File(Box<str>),
    /// A span of a text; `start` is on a character boundary and
    /// `start <= end <= text.len()`. Offsets are `u32`: a place past 4 GiB
    /// into a text is shown as the whole file.
    Span {
        source: Arc<SourceText>,
        start: u32,
        end: u32,
    },
}

/// A located span, resolved to what a reader is shown.
pub(crate) struct Resolved<'a> {
    pub line: usize,
    pub column: usize,
    /// The line's text, without its line break.
    pub line_text: &'a str,
    /// The span within `line_text`, cut at the line's end.
    pub span_in_line: Range<usize>,
}

impl Location {
    /// A whole file.
    pub fn file(name: impl Into<String>) -> Location {
        Location(Place::File(name.into().into()))
    }

    /// The bytes `span` of `source`. Out-of-range or mid-character offsets
    /// are pulled back to the nearest character boundary inside the text,
    /// so any span a parser reports is safe to show.
    pub fn span(source: &Arc<SourceText>, span: Range<usize>) -> Location {
        let text = source.text();
        let start = floor_char_boundary(text, span.start.min(text.len()));
        let end = floor_char_boundary(text, span.end.clamp(start, text.len()));
        match (u32::try_from(start), u32::try_from(end)) {
            (Ok(start), Ok(end)) => Location(Place::Span {
                source: Arc::clone(source),
                start,
                end,
            }),
            _ => Location::file(source.name()),
        }
    }

    /// The file's name as shown in messages.
    pub fn file_name(&self) -> &str {
        match &self.0 {
            Place::File(name) => name,
            Place::Span { source, .. } => source.name(),
        }
    }

    /// The byte span, where the location has one.
    pub fn byte_span(&self) -> Option<Range<usize>> {
        match &self.0 {
            Place::File(_) => None,
            Place::Span { start, end, .. } => Some(*start as usize..*end as usize),
        }
    }

    pub fn source(&self) -> Option<&Arc<SourceText>> {
        match &self.0 {
            Place::File(_) => None,
            Place::Span { source, .. } => Some(source),
        }
    }

    /// 1-based line.
    pub fn line(&self) -> Option<usize> {
        self.resolve().map(|r| r.line)
    }

    /// 1-based column, counted in characters.
    pub fn column(&self) -> Option<usize> {
        self.resolve().map(|r| r.column)
    }

    /// The whole line the span starts on, without its line break.
    pub fn line_text(&self) -> Option<&str> {
        self.resolve().map(|r| r.line_text)
    }

    /// The characters the span covers on its first line (at least 1: an
    /// empty span still gets a caret).
    pub fn width(&self) -> Option<usize> {
        self.resolve()
            .map(|r| r.line_text[r.span_in_line].chars().count().max(1))
    }

    pub(crate) fn resolve(&self) -> Option<Resolved<'_>> {
        let Place::Span { source, start, end } = &self.0 else {
            return None;
        };
        let span = *start as usize..*end as usize;
        let index = source.line_index(span.start);
        let line = source.line_range(index);
        // A span may start in the line break itself (a TOML error at the
        // `\r` of `\r\n`): it is shown just past the line's last character.
        let start = span.start.min(line.end);
        let end = span.end.clamp(start, line.end);
        let text = source.text();
        Some(Resolved {
            line: index + 1,
            column: source.chars_between(line.start, start) + 1,
            line_text: &text[line.clone()],
            span_in_line: start - line.start..end - line.start,
        })
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(loc: &Location) -> (usize, usize, usize) {
        (
            loc.line().unwrap(),
            loc.column().unwrap(),
            loc.width().unwrap(),
        )
    }

    #[test]
    fn lines_and_columns() {
        let s = SourceText::new("f", "ab\ncé d\r\n\nlast".to_string());
        assert_eq!(at(&Location::span(&s, 0..2)), (1, 1, 2));
        let d = s.text().find('d').unwrap();
        assert_eq!(at(&Location::span(&s, d..d + 1)), (2, 4, 1));
        assert_eq!(Location::span(&s, d..d).line_text(), Some("cé d"));
        // At the `\r` and the `\n` of a CRLF line: just past its end.
        let cr = s.text().find('\r').unwrap();
        assert_eq!(at(&Location::span(&s, cr..cr + 1)), (2, 5, 1));
        assert_eq!(at(&Location::span(&s, cr + 1..cr + 9)), (2, 5, 1));
        // The empty line and the last line without a line break.
        assert_eq!(at(&Location::span(&s, cr + 2..cr + 2)), (3, 1, 1));
        let len = s.text().len();
        assert_eq!(at(&Location::span(&s, len..len + 5)), (4, 5, 1));
        // Offsets inside a character are pulled back to its start.
        let e = s.text().find('é').unwrap();
        assert_eq!(at(&Location::span(&s, e + 1..e + 2)), (2, 2, 1));
        assert_eq!(Location::file("x").line(), None);
        assert_eq!(Location::file("x").file_name(), "x");
    }

    #[test]
    fn columns_far_into_a_long_line_count_characters() {
        let mut text = String::new();
        for i in 0..5000 {
            text.push_str(if i % 3 == 0 { "é値" } else { "ab" });
        }
        let target = text.len();
        text.push_str("XYZ");
        let expected = text[..target].chars().count() + 1;
        let s = SourceText::new("f", format!("first\n{text}\n"));
        let loc = Location::span(&s, 6 + target..6 + target + 3);
        assert_eq!(at(&loc), (2, expected, 3));
        // Starting mid-stride, in a multi-byte character.
        for from in [6, 7, 6 + 4095, 6 + 4097, 6 + 9000] {
            let from = floor_char_boundary(s.text(), from);
            let want = s.text()[from..6 + target].chars().count();
            assert_eq!(s.chars_between(from, 6 + target), want, "{from}");
        }
    }

    #[test]
    fn every_span_of_an_arbitrary_text_resolves() {
        use proptest::prelude::*;
        proptest!(ProptestConfig::with_cases(256), |(text in "(\\PC|\r|\n){0,40}", a in 0usize..60, b in 0usize..60)| {
            let s = SourceText::new("f", text.clone());
            let loc = Location::span(&s, a.min(b)..a.max(b));
            let r = loc.resolve().unwrap();
            prop_assert!(r.span_in_line.start <= r.span_in_line.end);
            prop_assert!(r.span_in_line.end <= r.line_text.len());
            prop_assert!(!r.line_text.contains('\n'));
            prop_assert!(r.line >= 1 && r.column >= 1);
        });
    }
}
