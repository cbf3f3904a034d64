//! Reading TOML and JSON inputs into `serde_json::Value` while remembering
//! where every key and value sits, so that a JSON pointer found by schema or
//! rule checks can be shown as `file:line:column` with the offending line.

use crate::diag::{Code, Diagnostic, Location};
use serde_json::{Map, Number, Value};
use std::ops::Range;
use std::path::Path;
use toml::de::{DeTable, DeValue};
use toml::Spanned;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    Toml,
    Json,
}

impl Format {
    /// `.json` is JSON; anything else is read as TOML.
    pub fn for_path(p: &Path) -> Format {
        match p.extension().and_then(|e| e.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("json") => Format::Json,
            _ => Format::Toml,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Format::Toml => "TOML",
            Format::Json => "JSON",
        }
    }
}

/// A parsed input: its name for messages, its text, and an index from JSON
/// pointer to source position.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub display: String,
    pub text: String,
    /// Where each value and key is. A JSON file's index is built on first
    /// use: most files (thousands of metadata files in a large plan) are
    /// never asked where anything is.
    index: std::cell::OnceCell<Index>,
    format: Format,
    line_starts: Vec<usize>,
}

impl SourceFile {
    fn index(&self) -> &Index {
        self.index.get_or_init(|| match self.format {
            Format::Json => json_index(&self.text),
            // A TOML file's index is made while parsing.
            Format::Toml => Index::default(),
        })
    }

    /// Read and parse a file.
    // A Diagnostic is the error type every loader returns; boxing it here
    // alone would only make callers unbox.
    #[allow(clippy::result_large_err)]
    pub fn load(
        display: &str,
        path: &Path,
        format: Format,
    ) -> Result<(Value, SourceFile), Diagnostic> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Diagnostic::new(
                    Code::InputMissing,
                    format!("`{display}` does not exist"),
                )
                .in_file(display)
                .help("check the path; relative paths are taken from the project root"));
            }
            Err(e) => {
                return Err(Diagnostic::new(
                    Code::InputUnreadable,
                    format!("cannot read `{display}`: {e}"),
                )
                .in_file(display)
                .help("check that the file is a readable regular file"));
            }
        };
        let text = String::from_utf8(bytes).map_err(|e| {
            Diagnostic::new(
                Code::InputUnreadable,
                format!(
                    "`{display}` is not UTF-8 text (invalid byte at offset {})",
                    e.utf8_error().valid_up_to()
                ),
            )
            .in_file(display)
            .help(format!("save the file as UTF-8 {}", format.name()))
        })?;
        Self::parse(display, text, format)
    }

    /// Parse text already in memory.
    #[allow(clippy::result_large_err)]
    pub fn parse(
        display: &str,
        text: String,
        format: Format,
    ) -> Result<(Value, SourceFile), Diagnostic> {
        let mut file = SourceFile {
            display: display.to_string(),
            line_starts: line_starts(&text),
            text: String::new(),
            index: std::cell::OnceCell::new(),
            format,
        };
        let parsed = match format {
            Format::Toml => {
                let mut index = Index::default();
                let parsed = toml_value(&text, &mut index);
                let _ = file.index.set(index);
                parsed
            }
            Format::Json => json_value(&text, &file.line_starts),
        };
        file.text = text;
        match parsed {
            Ok(value) => Ok((value, file)),
            Err(Problem {
                at,
                message,
                syntax,
            }) => {
                let (code, help) = if syntax {
                    let help = if message.contains("duplicate key") {
                        "a key may be given only once per table; remove or rename one".to_string()
                    } else {
                        format!("fix the {} syntax at the marked position", format.name())
                    };
                    (Code::InputSyntax, help)
                } else {
                    (
                        Code::InputInvalid,
                        "use a value JSON can represent".to_string(),
                    )
                };
                let what = if syntax {
                    "syntax error"
                } else {
                    "unusable value"
                };
                Err(
                    Diagnostic::new(code, format!("{} {what}: {message}", format.name()))
                        .at(file.location_of(at))
                        .help(help),
                )
            }
        }
    }

    /// Location of the value at a JSON pointer (RFC 6901, "" = root), or of
    /// the nearest ancestor present in the file.
    pub fn locate(&self, pointer: &str) -> Location {
        let (node, _) = self.index().find(&self.text, pointer);
        self.location_of(node.map(|n| n.value.clone()).unwrap_or(0..0))
    }

    /// Location of the key at a pointer (an unknown key, say); the value's
    /// location where there is no key (array items, the root).
    pub fn locate_key(&self, pointer: &str) -> Location {
        match self.index().find(&self.text, pointer) {
            (Some(node), true) if node.key.is_some() => {
                self.location_of(node.key.clone().unwrap_or(0..0))
            }
            (node, _) => self.location_of(node.map(|n| n.value.clone()).unwrap_or(0..0)),
        }
    }

    fn location_of(&self, span: Range<usize>) -> Location {
        let text = &self.text;
        let start = floor_char_boundary(text, span.start.min(text.len()));
        let line_idx = match self.line_starts.binary_search(&start) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let line_start = self.line_starts[line_idx];
        let line_end = text[line_start..]
            .find('\n')
            .map(|i| line_start + i)
            .unwrap_or(text.len());
        let line_text = text[line_start..line_end].trim_end_matches('\r');
        let column = text[line_start..start].chars().count() + 1;
        let end = floor_char_boundary(text, span.end.clamp(start, line_start + line_text.len()));
        let width = text[start..end].chars().count().max(1);
        Location {
            file: self.display.clone(),
            line: Some(line_idx + 1),
            column: Some(column),
            source_line: Some(line_text.to_string()),
            width,
        }
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    while i > 0 && !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn line_starts(text: &str) -> Vec<usize> {
    let mut v = vec![0];
    v.extend(
        text.bytes()
            .enumerate()
            .filter(|(_, b)| *b == b'\n')
            .map(|(i, _)| i + 1),
    );
    v
}

/// Why a text could not be turned into a value, and where.
struct Problem {
    at: Range<usize>,
    message: String,
    syntax: bool,
}

/// Where each value of the document sits, as a tree mirroring the value:
/// nodes in a flat vector, each container's children contiguous in
/// `children`, object member names as ranges into the text (or, when the
/// name had escapes, into `names`). Building it allocates almost nothing per
/// value, which keeps a 10,000-worker spec cheap.
#[derive(Clone, Debug, Default)]
struct Index {
    nodes: Vec<Node>,
    children: Vec<usize>,
    names: String,
    pending: Vec<usize>,
}

#[derive(Clone, Debug)]
struct Node {
    value: Range<usize>,
    key: Option<Range<usize>>,
    name: Name,
    kids: Range<usize>,
    is_array: bool,
}

#[derive(Clone, Debug)]
enum Name {
    None,
    Text(Range<usize>),
    Own(Range<usize>),
}

impl Index {
    /// Adds a node; its children are the nodes `close` collects after it.
    fn open(&mut self, value: Range<usize>, key: Option<Range<usize>>, name: Name) -> usize {
        let id = self.nodes.len();
        self.nodes.push(Node {
            value,
            key,
            name,
            kids: 0..0,
            is_array: false,
        });
        id
    }

    fn close(&mut self, id: usize, mark: usize, end: Option<usize>, is_array: bool) {
        let start = self.children.len();
        self.children.extend(self.pending.drain(mark..));
        let node = &mut self.nodes[id];
        node.kids = start..self.children.len();
        node.is_array = is_array;
        if let Some(end) = end {
            node.value.end = end;
        }
    }

    /// A member name: a range of `text` when `name` is a slice of it, else a
    /// copy.
    fn name(&mut self, text: &str, name: &str) -> Name {
        let base = text.as_ptr() as usize;
        let at = name.as_ptr() as usize;
        if at >= base && at + name.len() <= base + text.len() {
            Name::Text(at - base..at - base + name.len())
        } else {
            let start = self.names.len();
            self.names.push_str(name);
            Name::Own(start..self.names.len())
        }
    }

    fn name_of<'a>(&'a self, text: &'a str, node: &Node) -> &'a str {
        match &node.name {
            Name::None => "",
            Name::Text(r) => &text[r.clone()],
            Name::Own(r) => &self.names[r.clone()],
        }
    }

    /// The node at `pointer`, or its nearest ancestor in the file, and
    /// whether the node is the one asked for.
    fn find<'a>(&'a self, text: &str, pointer: &str) -> (Option<&'a Node>, bool) {
        let Some(mut node) = self.nodes.first() else {
            return (None, false);
        };
        if pointer.is_empty() {
            return (Some(node), true);
        }
        for raw in pointer.strip_prefix('/').unwrap_or(pointer).split('/') {
            let token: std::borrow::Cow<'_, str> = if raw.contains('~') {
                raw.replace("~1", "/").replace("~0", "~").into()
            } else {
                raw.into()
            };
            let kids = &self.children[node.kids.clone()];
            let next = if node.is_array {
                token.parse::<usize>().ok().and_then(|i| kids.get(i))
            } else {
                // The last of duplicate JSON keys wins, as in serde_json.
                kids.iter()
                    .rev()
                    .find(|&&k| self.name_of(text, &self.nodes[k]) == token)
            };
            match next {
                Some(&k) => node = &self.nodes[k],
                None => return (Some(node), false),
            }
        }
        (Some(node), true)
    }
}

// ---------------------------------------------------------------- TOML

fn toml_value(text: &str, index: &mut Index) -> Result<Value, Problem> {
    let root = DeTable::parse(text).map_err(|e| Problem {
        at: e.span().unwrap_or(0..0),
        message: e.message().trim().to_string(),
        syntax: true,
    })?;
    let id = index.open(0..0, None, Name::None);
    toml_table(text, root.get_ref(), id, index)
}

fn toml_table(
    text: &str,
    table: &DeTable<'_>,
    id: usize,
    index: &mut Index,
) -> Result<Value, Problem> {
    let mark = index.pending.len();
    let mut map = Map::new();
    for (key, value) in table.iter() {
        let name = index.name(text, key.get_ref());
        let child = index.open(value.span(), Some(key.span()), name);
        index.pending.push(child);
        let v = toml_item(text, value, child, index)?;
        map.insert(key.get_ref().to_string(), v);
    }
    index.close(id, mark, None, false);
    Ok(Value::Object(map))
}

fn toml_item(
    text: &str,
    item: &Spanned<DeValue<'_>>,
    id: usize,
    index: &mut Index,
) -> Result<Value, Problem> {
    let invalid = |message: String| Problem {
        at: item.span(),
        message,
        syntax: false,
    };
    Ok(match item.get_ref() {
        DeValue::String(s) => Value::String(s.to_string()),
        DeValue::Integer(i) => {
            let digits = i.as_str();
            match i64::from_str_radix(digits, i.radix()) {
                Ok(n) => Value::from(n),
                Err(_) => match u64::from_str_radix(digits, i.radix()) {
                    Ok(n) => Value::from(n),
                    Err(_) => return Err(invalid(format!("integer `{i}` is out of range"))),
                },
            }
        }
        DeValue::Float(f) => {
            let n = f
                .as_str()
                .replace('_', "")
                .parse::<f64>()
                .ok()
                .and_then(Number::from_f64)
                .ok_or_else(|| invalid(format!("float `{f}` has no JSON equivalent")))?;
            Value::Number(n)
        }
        DeValue::Boolean(b) => Value::Bool(*b),
        DeValue::Datetime(d) => Value::String(d.to_string()),
        DeValue::Array(items) => {
            let mark = index.pending.len();
            let mut out = Vec::with_capacity(items.len());
            for it in items.iter() {
                let child = index.open(it.span(), None, Name::None);
                index.pending.push(child);
                out.push(toml_item(text, it, child, index)?);
            }
            index.close(id, mark, None, true);
            Value::Array(out)
        }
        DeValue::Table(t) => toml_table(text, t, id, index)?,
    })
}

// ---------------------------------------------------------------- JSON

fn json_value(text: &str, line_starts: &[usize]) -> Result<Value, Problem> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        // serde_json counts columns in bytes from 1; turn it into an offset.
        let line = e.line().max(1);
        let start = line_starts.get(line - 1).copied().unwrap_or(text.len());
        let at = (start + e.column().saturating_sub(1)).min(text.len());
        let full = e.to_string();
        let message = match full.rfind(" at line ") {
            Some(cut) => full[..cut].to_string(),
            None => full,
        };
        Problem {
            at: at..at + 1,
            message,
            syntax: true,
        }
    })?;
    Ok(value)
}

/// The positions of every key and value of JSON text serde_json accepted.
fn json_index(text: &str) -> Index {
    let mut index = Index::default();
    let mut scanner = Scanner {
        bytes: text.as_bytes(),
        text,
        pos: 0,
        index: &mut index,
    };
    scanner.value(None, Name::None);
    index
}

/// Walks text serde_json already accepted, recording where each value and key
/// is. It trusts the text to be valid JSON.
struct Scanner<'a, 'm> {
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
    index: &'m mut Index,
}

impl Scanner<'_, '_> {
    fn ws(&mut self) {
        while let Some(b' ' | b'\t' | b'\n' | b'\r') = self.bytes.get(self.pos) {
            self.pos += 1;
        }
    }

    /// Skips a string starting at the opening quote; returns whether it held
    /// an escape.
    fn string(&mut self) -> bool {
        let mut escaped = false;
        self.pos += 1;
        while let Some(&b) = self.bytes.get(self.pos) {
            match b {
                b'\\' => {
                    escaped = true;
                    self.pos += 2;
                }
                b'"' => {
                    self.pos += 1;
                    return escaped;
                }
                _ => self.pos += 1,
            }
        }
        escaped
    }

    fn value(&mut self, key: Option<Range<usize>>, name: Name) -> usize {
        self.ws();
        let start = self.pos;
        let id = self.index.open(start..start, key, name);
        let mark = self.index.pending.len();
        let mut is_array = false;
        match self.bytes.get(self.pos) {
            Some(b'{') => {
                self.pos += 1;
                loop {
                    self.ws();
                    match self.bytes.get(self.pos) {
                        Some(b'}') => {
                            self.pos += 1;
                            break;
                        }
                        Some(b',') => {
                            self.pos += 1;
                            continue;
                        }
                        Some(b'"') => {}
                        _ => break,
                    }
                    let key_start = self.pos;
                    let escaped = self.string();
                    let key_span = key_start..self.pos;
                    let name = if escaped {
                        let decoded: String =
                            serde_json::from_str(&self.text[key_span.clone()]).unwrap_or_default();
                        self.index.name(self.text, &decoded)
                    } else {
                        Name::Text(key_span.start + 1..key_span.end - 1)
                    };
                    self.ws();
                    if self.bytes.get(self.pos) == Some(&b':') {
                        self.pos += 1;
                    }
                    let child = self.value(Some(key_span), name);
                    self.index.pending.push(child);
                }
            }
            Some(b'[') => {
                is_array = true;
                self.pos += 1;
                loop {
                    self.ws();
                    match self.bytes.get(self.pos) {
                        Some(b']') => {
                            self.pos += 1;
                            break;
                        }
                        Some(b',') => {
                            self.pos += 1;
                            continue;
                        }
                        None => break,
                        _ => {}
                    }
                    let child = self.value(None, Name::None);
                    self.index.pending.push(child);
                }
            }
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                while let Some(&b) = self.bytes.get(self.pos) {
                    if matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') {
                        break;
                    }
                    self.pos += 1;
                }
            }
            None => {}
        }
        self.index.close(id, mark, Some(self.pos), is_array);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toml(text: &str) -> (Value, SourceFile) {
        SourceFile::parse("spec.toml", text.to_string(), Format::Toml).unwrap()
    }

    fn json(text: &str) -> (Value, SourceFile) {
        SourceFile::parse("spec.json", text.to_string(), Format::Json).unwrap()
    }

    fn at(loc: &Location) -> (usize, usize, usize) {
        (loc.line.unwrap(), loc.column.unwrap(), loc.width)
    }

    const SPEC: &str = r#"#:schema ./schemas/jobs.schema.json
[defaults]
idleTimeoutSeconds = 30
env.MODE = "fast"

[[workers]]
workerId = "a"
promptPath = "a.md"

[[workers]]
workerId = "b"
command = ["sh", "-c", "true"]

[[workers]]
workerId = "c"
[workers.env]
X = "1"

[[workers]]
workerId = "d"
attempt = 0
"#;

    #[test]
    fn format_by_extension() {
        assert_eq!(Format::for_path(Path::new("a/b.json")), Format::Json);
        assert_eq!(Format::for_path(Path::new("a/b.JSON")), Format::Json);
        assert_eq!(Format::for_path(Path::new("a/b.toml")), Format::Toml);
        assert_eq!(Format::for_path(Path::new("spec")), Format::Toml);
    }

    #[test]
    fn toml_values_and_positions() {
        let (v, f) = toml(SPEC);
        assert_eq!(v["workers"][3]["attempt"], 0);
        assert_eq!(v["defaults"]["env"]["MODE"], "fast");
        assert_eq!(v["workers"][2]["env"]["X"], "1");
        assert_eq!(at(&f.locate("/workers/3/attempt")), (21, 11, 1));
        assert_eq!(at(&f.locate_key("/workers/3/attempt")), (21, 1, 7));
        assert_eq!(f.locate("/workers/3").line, Some(19));
        assert_eq!(f.locate("/workers/0").line, Some(6));
        assert_eq!(at(&f.locate("/workers/1/command/2")), (12, 24, 6));
        assert_eq!(f.locate("/workers/2/env/X").line, Some(17));
        assert_eq!(at(&f.locate_key("/defaults/env/MODE")), (4, 5, 4));
        assert_eq!(f.locate("/defaults/idleTimeoutSeconds").line, Some(3));
        let loc = f.locate("/workers/3/attempt");
        assert_eq!(loc.file, "spec.toml");
        assert_eq!(loc.source_line.as_deref(), Some("attempt = 0"));
    }

    #[test]
    fn missing_pointers_fall_back_to_the_nearest_ancestor() {
        let (_, f) = toml(SPEC);
        assert_eq!(f.locate("/workers/3/role").line, Some(19));
        assert_eq!(f.locate_key("/workers/3/role").line, Some(19));
        assert_eq!(f.locate("/workers/9/role").line, Some(6));
        let root = f.locate("/nope");
        assert_eq!((root.line, root.column), (Some(1), Some(1)));
        assert!(root.width >= 1);
        let (_, f) = json("{\n  \"workers\": [\n    {\"role\": \"r\"}\n  ]\n}\n");
        assert_eq!(at(&f.locate("/workers/0/promptPath")), (3, 5, 13));
        assert_eq!(at(&f.locate("")), (1, 1, 1));
    }

    #[test]
    fn json_values_and_positions() {
        let text = "{\n  \"workers\": [\n    {\"workerId\": \"a\", \"attempt\": 0},\n    {\"a~b/c\": [1, 2.5, true, null], \"esc\\\"aped\": {\"k\": \"v\"}}\n  ]\n}";
        let (v, f) = json(text);
        assert_eq!(v["workers"][0]["attempt"], 0);
        assert_eq!(at(&f.locate("/workers/0/attempt")), (3, 34, 1));
        assert_eq!(at(&f.locate_key("/workers/0/attempt")), (3, 23, 9));
        assert_eq!(at(&f.locate("/workers/1/a~0b~1c/3")), (4, 30, 4));
        assert_eq!(at(&f.locate("/workers/1/esc\"aped/k")), (4, 56, 3));
        assert_eq!(f.locate("/workers").line, Some(2));
        assert_eq!(f.locate("/workers/1").width, 56);
    }

    #[test]
    fn columns_count_characters_on_unicode_lines() {
        let (_, f) = toml("\"名前\" = \"値\"\nrole = \"é\" # ü\nx = 1\n");
        assert_eq!(at(&f.locate_key("/名前")), (1, 1, 4));
        assert_eq!(at(&f.locate("/名前")), (1, 8, 3));
        assert_eq!(at(&f.locate("/x")), (3, 5, 1));
        let (_, f) = json("{\"ключ\": \"значение\", \"n\": 1}");
        assert_eq!(at(&f.locate("/ключ")), (1, 10, 10));
        assert_eq!(at(&f.locate("/n")), (1, 27, 1));
    }

    #[test]
    fn syntax_errors_point_at_the_problem() {
        let err = SourceFile::parse("s.toml", "a = 1\nb = \n".into(), Format::Toml).unwrap_err();
        assert_eq!(err.code, Code::InputSyntax);
        let loc = err.location.clone().unwrap();
        assert_eq!(loc.file, "s.toml");
        assert_eq!(loc.line, Some(2));
        assert!(err.help.is_some());
        assert!(
            err.message.starts_with("TOML syntax error"),
            "{}",
            err.message
        );

        let err = SourceFile::parse(
            "s.json",
            "{\n  \"a\": 1,\n  \"é\": x\n}".into(),
            Format::Json,
        )
        .unwrap_err();
        assert_eq!(err.code, Code::InputSyntax);
        let loc = err.location.clone().unwrap();
        assert_eq!((loc.line, loc.column), (Some(3), Some(8)));
        assert_eq!(loc.source_line.as_deref(), Some("  \"é\": x"));
        assert!(!err.message.contains("at line"), "{}", err.message);

        let err = SourceFile::parse("s.toml", "a = 1\na = 2\n".into(), Format::Toml).unwrap_err();
        assert_eq!(err.location.unwrap().line, Some(2));
        let err = SourceFile::parse("s.toml", "a = nan\n".into(), Format::Toml).unwrap_err();
        assert_eq!(err.code, Code::InputInvalid);
    }

    #[test]
    fn load_reports_missing_files() {
        let dir = tempfile::tempdir().unwrap();
        let err =
            SourceFile::load("nope.toml", &dir.path().join("nope.toml"), Format::Toml).unwrap_err();
        assert_eq!(err.code, Code::InputMissing);
        let err = SourceFile::load("dir", dir.path(), Format::Toml).unwrap_err();
        assert_eq!(err.code, Code::InputUnreadable);
        let p = dir.path().join("x.json");
        std::fs::write(&p, "{\"a\": [1]}").unwrap();
        let (v, f) = SourceFile::load("x.json", &p, Format::for_path(&p)).unwrap();
        assert_eq!(v["a"][0], 1);
        assert_eq!(f.locate("/a/0").column, Some(8));
    }

    /// Every pointer of a generated document, in TOML and JSON, locates to a
    /// line holding its key (or, for array items, its value).
    #[test]
    fn every_pointer_locates_to_its_line() {
        use proptest::prelude::*;
        let key = "[a-z][a-zA-Z0-9_]{0,8}";
        let scalar = prop_oneof![
            any::<i32>().prop_map(|n| toml::Value::Integer(n.into())),
            "[a-z é/~]{0,6}".prop_map(toml::Value::String),
            any::<bool>().prop_map(toml::Value::Boolean),
        ];
        let row = proptest::collection::btree_map(key, scalar, 1..5);
        let doc = proptest::collection::vec(row, 1..6);
        proptest!(ProptestConfig::with_cases(64), |(rows in doc)| {
            let mut root = toml::Table::new();
            let workers: Vec<toml::Value> = rows
                .iter()
                .map(|r| toml::Value::Table(r.clone().into_iter().collect()))
                .collect();
            root.insert("workers".into(), toml::Value::Array(workers));
            let toml_text = toml::to_string(&root).unwrap();
            let json_text = serde_json::to_string_pretty(&root).unwrap();
            for (text, format) in [(toml_text, Format::Toml), (json_text, Format::Json)] {
                let (value, f) = SourceFile::parse("g", text.clone(), format).unwrap();
                for (i, r) in rows.iter().enumerate() {
                    for k in r.keys() {
                        let ptr = format!("/workers/{i}/{k}");
                        prop_assert!(value.pointer(&ptr).is_some());
                        let line = f.locate(&ptr).source_line.unwrap();
                        prop_assert!(line.contains(k.as_str()), "{ptr} -> {line:?} in\n{text}");
                        let kline = f.locate_key(&ptr).source_line.unwrap();
                        prop_assert_eq!(&kline, &line);
                    }
                }
            }
        });
    }
}

#[cfg(test)]
mod render_tests {
    use super::*;
    use crate::schema::{validate, SchemaKind};

    /// Schema errors found on a TOML spec point at the offending key.
    #[test]
    fn schema_errors_locate_in_toml() {
        let text = "[[workers]]\nworkerId = \"claude\"\nrole = \"r\"\nresultPath = \"r.md\"\npromptPth = \"p.md\"\n\n[[workers]]\nworkerId = \"codex\"\nrole = \"r\"\npromptPath = \"q.md\"\nresultPath = \"s.md\"\nattempt = true\n";
        let (v, f) = SourceFile::parse("spec.toml", text.into(), Format::Toml).unwrap();
        let errs = validate(SchemaKind::Jobs, &v);
        let shown: Vec<(String, usize, usize)> = errs
            .iter()
            .map(|e| {
                let loc = if e.keyword == "additionalProperties" {
                    f.locate_key(&e.pointer)
                } else {
                    f.locate(&e.pointer)
                };
                (e.message.clone(), loc.line.unwrap(), loc.column.unwrap())
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                ("missing required key `promptPath`".to_string(), 1, 1),
                (
                    "unknown key `promptPth` (did you mean `promptPath`?)".to_string(),
                    5,
                    1
                ),
                (
                    "expected an integer, found boolean `true`".to_string(),
                    12,
                    11
                ),
            ]
        );
        let d = Diagnostic::new(Code::SchemaViolation, &errs[1].message)
            .at(f.locate_key(&errs[1].pointer));
        let text = d.render_text();
        assert!(
            text.contains("5 | promptPth = \"p.md\"\n  | ^^^^^^^^^"),
            "{text}"
        );
    }
}
