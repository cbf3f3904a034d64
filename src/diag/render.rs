//! The rustc-like text form of a diagnostic, drawn by `annotate-snippets`:
//! the `error[CODE]: message` title, the `--> file:line:column` origin, the
//! offending line with carets under the span (aligned under wide characters,
//! as the crate measures them), secondary labels in the same or other files,
//! and ANSI colour when asked for.
//!
//! Two things are done here rather than by the crate:
//! - Only a window of at most [`WINDOW`] columns of a long line is handed
//!   over, so a minified file renders readably and each diagnostic costs the
//!   same whatever the line's length. The crate then counts columns from
//!   the window's start, so the origin's column is put back to the line's.
//! - The `= worker:` and `= help:` notes. The crate draws a `|` spacer
//!   line between a snippet and its notes (rustc's layout); okstra's
//!   documented text (docs/, snapshots) has none, so the notes are
//!   appended in the crate's own styles instead.

use super::{Diagnostic, Location, SourceText};
use annotate_snippets::renderer::{Style, DEFAULT_EMPHASIS_STYLE, DEFAULT_LINE_NUM_STYLE};
use annotate_snippets::{
    normalize_untrusted_str, AnnotationKind, Group, Level, Origin, Renderer, Snippet,
};
use std::fmt::Write as _;
use std::ops::Range;
use std::sync::Arc;
use unicode_width::UnicodeWidthChar;

/// The most columns of a source line shown.
pub const WINDOW: usize = 120;
/// Columns kept before the span when a line is cut on the left.
const LEFT_CONTEXT: usize = 40;
const ELLIPSIS: &str = "...";

/// One snippet to draw: a (windowed) line and the spans marked on it.
struct Part {
    source: Arc<SourceText>,
    file: String,
    line: usize,
    text: String,
    marks: Vec<Mark>,
    /// The column the crate will print for this part's origin, and the
    /// column of the line it stands for (they differ when cut on the left).
    shown_column: usize,
    column: usize,
}

struct Mark {
    span: Range<usize>,
    primary: bool,
    label: String,
}

pub(super) fn render(d: &Diagnostic, color: bool) -> String {
    let title = Level::ERROR.primary_title(&*d.message).id(d.code.as_str());
    let mut parts: Vec<Part> = Vec::new();
    let mut origins: Vec<String> = Vec::new();
    let mut located = d.location.iter().map(|l| (l, "", true)).collect::<Vec<_>>();
    located.extend(d.labels.iter().map(|l| (&l.location, &*l.text, false)));
    for (loc, label, primary) in located {
        match part_for(loc, label, primary, &mut parts) {
            Some(part) => parts.push(part),
            None if loc.source().is_none() => {
                origins.push(normalize_untrusted_str(loc.file_name()))
            }
            None => {}
        }
    }
    let gutter = parts
        .iter()
        .map(|p| p.line.to_string().len())
        .max()
        .unwrap_or(0);

    let mut group = Group::with_title(title);
    // A primary location without a span (a whole file) comes first, as the
    // `-->` line; file-only secondary labels follow the snippets.
    let file_first = d.location.as_ref().is_some_and(|l| l.source().is_none());
    let mut origins = origins.into_iter();
    if file_first {
        if let Some(o) = origins.next() {
            group = group.element(Origin::path(o));
        }
    }
    for part in &parts {
        let mut snippet = Snippet::source(part.text.as_str())
            .line_start(part.line)
            .path(part.file.as_str());
        for m in &part.marks {
            let kind = if m.primary {
                AnnotationKind::Primary
            } else {
                AnnotationKind::Context
            };
            let mut a = kind.span(m.span.clone());
            if !m.label.is_empty() {
                a = a.label(m.label.as_str());
            }
            snippet = snippet.annotation(a);
        }
        group = group.element(snippet);
    }
    for o in origins {
        group = group.element(Origin::path(o));
    }

    let renderer = if color {
        Renderer::styled()
    } else {
        Renderer::plain()
    }
    // Lines are already cut to WINDOW columns: the crate is not to cut
    // them again (a narrower terminal wraps them).
    .term_width(1 << 16);
    let mut out = renderer.render(&[group]);
    fix_columns(&mut out, &renderer, d, &parts);
    out.push('\n');
    let pad = " ".repeat(gutter);
    if let Some(worker) = &d.worker {
        note(&mut out, &pad, "worker", worker, color);
    }
    if let Some(help) = &d.help {
        note(&mut out, &pad, "help", help, color);
    }
    out
}

/// The `error: N problems found` line.
pub(super) fn render_summary(text: &str, color: bool) -> String {
    let renderer = if color {
        Renderer::styled()
    } else {
        Renderer::plain()
    };
    let mut out = renderer.render(&[Group::with_title(Level::ERROR.primary_title(text))]);
    out.push('\n');
    out
}

/// The snippet for `loc`, or `None` when it joined an earlier part (a label
/// on the same short line) or has no span.
fn part_for(loc: &Location, label: &str, primary: bool, parts: &mut [Part]) -> Option<Part> {
    let source = loc.source()?;
    let r = loc.resolve()?;
    let file = normalize_untrusted_str(source.name());
    if r.line_text.len() <= WINDOW {
        // Marks on one short line share its snippet, as rustc draws them.
        if let Some(p) = parts
            .iter_mut()
            .find(|p| Arc::ptr_eq(&p.source, source) && p.line == r.line)
        {
            p.marks.push(Mark {
                span: r.span_in_line.clone(),
                primary,
                label: label.to_string(),
            });
            return None;
        }
    }
    let (text, span) = window(r.line_text, r.span_in_line.clone());
    let shown_column = text[..span.start].chars().count() + 1;
    Some(Part {
        source: Arc::clone(source),
        file,
        line: r.line,
        text,
        marks: vec![Mark {
            span,
            primary,
            label: label.to_string(),
        }],
        shown_column,
        column: r.column,
    })
}

/// At most [`WINDOW`] columns of `line` around `span`, with `...` where the
/// line was cut, and the span within that text (cut at the window's end).
fn window(line: &str, span: Range<usize>) -> (String, Range<usize>) {
    if line.len() <= WINDOW {
        return (line.to_string(), span);
    }
    let budget = WINDOW - 2 * ELLIPSIS.len();
    // Some context before the span, then as much after as fits; a span near
    // the end gives its unused room back to the left.
    let mut left = back(line, span.start, LEFT_CONTEXT.min(budget));
    let (mut right, used) = forward(line, left, budget);
    if right == line.len() && used < budget {
        left = back(line, left, budget - used);
    }
    if right < span.start {
        right = span.start;
    }
    let mut text = String::with_capacity(right - left + 2 * ELLIPSIS.len());
    if left > 0 {
        text.push_str(ELLIPSIS);
    }
    let offset = text.len();
    text.push_str(&line[left..right]);
    if right < line.len() {
        text.push_str(ELLIPSIS);
    }
    let start = span.start - left + offset;
    let end = span.end.min(right).max(span.start) - left + offset;
    (text, start..end)
}

/// The byte index reached walking back from `from` over at most `columns`.
fn back(line: &str, from: usize, columns: usize) -> usize {
    let mut used = 0;
    let mut at = from;
    for (i, c) in line[..from].char_indices().rev() {
        used += columns_of(c);
        if used > columns {
            break;
        }
        at = i;
    }
    at
}

/// The byte index reached walking forward from `from` over at most
/// `columns`, and the columns used.
fn forward(line: &str, from: usize, columns: usize) -> (usize, usize) {
    let mut used = 0;
    for (i, c) in line[from..].char_indices() {
        let w = columns_of(c);
        if used + w > columns {
            return (from + i, used);
        }
        used += w;
    }
    (line.len(), used)
}

/// Columns a character takes once drawn (the crate draws a tab as 4). A
/// zero-width character counts as one, so that a window is also at most
/// [`WINDOW`] characters, however many combining marks a line holds.
fn columns_of(c: char) -> usize {
    match c {
        '\t' => 4,
        c => c.width().unwrap_or(1).max(1),
    }
}

/// The crate prints each snippet's origin column counted from the start of
/// the text it was given; where that text is a window of a longer line, put
/// the line's own column back. Origins are found in order after the title.
fn fix_columns(out: &mut String, renderer: &Renderer, d: &Diagnostic, parts: &[Part]) {
    if parts.iter().all(|p| p.shown_column == p.column) {
        return;
    }
    let title = renderer.render(&[Group::with_title(
        Level::ERROR.primary_title(&*d.message).id(d.code.as_str()),
    )]);
    let mut cursor = if out.starts_with(&title) {
        title.len()
    } else {
        0
    };
    for p in parts {
        let shown = format!("{}:{}:{}", p.file, p.line, p.shown_column);
        let Some(at) = out[cursor..].find(&shown).map(|i| cursor + i) else {
            continue;
        };
        let real = format!("{}:{}:{}", p.file, p.line, p.column);
        out.replace_range(at..at + shown.len(), &real);
        cursor = at + real.len();
    }
}

/// ` = name: text`, in the crate's styles for a note.
fn note(out: &mut String, pad: &str, name: &str, text: &str, color: bool) {
    let text = normalize_untrusted_str(text);
    let (eq, bold) = if color {
        (DEFAULT_LINE_NUM_STYLE, DEFAULT_EMPHASIS_STYLE)
    } else {
        (Style::new(), Style::new())
    };
    let _ = write!(out, "{pad} {eq}= {eq:#}{bold}{name}{bold:#}: ");
    let indent = " ".repeat(pad.len() + 3 + name.len() + 2);
    for (i, line) in text.lines().enumerate() {
        if i > 0 {
            out.push('\n');
            out.push_str(&indent);
        }
        out.push_str(line);
    }
    out.push('\n');
}
