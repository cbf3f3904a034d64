//! Reading TOML and JSON inputs into `serde_json::Value` while remembering
//! where every key and value sits, so that a JSON pointer found by schema or
//! rule checks can be shown as `file:line:column` with the offending line.

use crate::diag::{Code, Diagnostic, Location, SourceText};
use serde_json::{Map, Number, Value};
use std::collections::HashMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;
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

/// A parsed input: its name for messages, its text (shared with every
/// diagnostic that points into it), and an index from JSON pointer to
/// source position.
#[derive(Clone, Debug)]
pub struct SourceFile {
    pub display: String,
    source: Arc<SourceText>,
    /// Where each value and key is. A JSON file's index is built on first
    /// use: most files (thousands of metadata files in a large plan) are
    /// never asked where anything is.
    index: std::cell::OnceCell<Index>,
    format: Format,
}

impl SourceFile {
    fn index(&self) -> &Index {
        self.index.get_or_init(|| match self.format {
            Format::Json => json_index(self.text()),
            // A TOML file's index is made while parsing.
            Format::Toml => Index::default(),
        })
    }

    /// The file's text, as read.
    pub fn text(&self) -> &str {
        self.source.text()
    }

    /// The text and its name, as diagnostics hold it.
    pub fn source(&self) -> &Arc<SourceText> {
        &self.source
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
        let file = Self::read(display, path, format)?;
        Ok((file.value()?, file))
    }

    /// Read a file as text, without parsing it (see [`Self::value`]).
    #[allow(clippy::result_large_err)]
    pub fn read(display: &str, path: &Path, format: Format) -> Result<SourceFile, Diagnostic> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(Diagnostic::new(
                    Code::InputMissing,
                    format!("`{display}` does not exist"),
                )
                .in_file(display)
                .help("check the path"));
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
        Self::text_of(display, bytes, format)
    }

    /// Parse a file's bytes, as [`Self::load`] does once it has read them
    /// (the fuzz targets start here).
    #[allow(clippy::result_large_err)]
    pub fn from_bytes(
        display: &str,
        bytes: Vec<u8>,
        format: Format,
    ) -> Result<(Value, SourceFile), Diagnostic> {
        let file = Self::text_of(display, bytes, format)?;
        Ok((file.value()?, file))
    }

    /// A file's bytes as its text, if they are UTF-8.
    #[allow(clippy::result_large_err)]
    fn text_of(display: &str, bytes: Vec<u8>, format: Format) -> Result<SourceFile, Diagnostic> {
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
        Ok(Self::unparsed(display, text, format))
    }

    fn unparsed(display: &str, text: String, format: Format) -> SourceFile {
        SourceFile {
            display: display.to_string(),
            source: SourceText::new(display, text),
            index: std::cell::OnceCell::new(),
            format,
        }
    }

    /// Parse text already in memory.
    #[allow(clippy::result_large_err)]
    pub fn parse(
        display: &str,
        text: String,
        format: Format,
    ) -> Result<(Value, SourceFile), Diagnostic> {
        let file = Self::unparsed(display, text, format);
        Ok((file.value()?, file))
    }

    /// The format the file is read as.
    pub fn format(&self) -> Format {
        self.format
    }

    /// The file's text as a value; a syntax error (or a value JSON cannot
    /// hold) is the diagnostic.
    #[allow(clippy::result_large_err)]
    pub fn value(&self) -> Result<Value, Diagnostic> {
        let text = self.text();
        let format = self.format;
        let parsed = match format {
            Format::Toml => {
                let mut index = Index::default();
                let parsed = toml_value(text, &mut index);
                if text.len() > MAX_INDEXED {
                    index = Index::default();
                }
                let _ = self.index.set(index);
                parsed
            }
            Format::Json => json_value(text, self.source.line_starts()),
        };
        parsed.map_err(
            |Problem {
                 at,
                 message,
                 syntax,
             }| {
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
                Diagnostic::new(code, format!("{} {what}: {message}", format.name()))
                    .at(self.location_of(at))
                    .help(help)
            },
        )
    }

    /// Location of the value at a JSON pointer (RFC 6901, "" = root), or of
    /// the nearest ancestor present in the file.
    pub fn locate(&self, pointer: &str) -> Location {
        let (node, _) = self.index().find(self.text(), pointer);
        self.location_of(node.as_ref().map(Node::value).unwrap_or(0..0))
    }

    /// Location of the key at a pointer (an unknown key, say); the value's
    /// location where there is no key (array items, the root).
    pub fn locate_key(&self, pointer: &str) -> Location {
        match self.index().find(self.text(), pointer) {
            (Some(node), true) if node.key.is_some() => {
                self.location_of(node.key().unwrap_or(0..0))
            }
            (node, _) => self.location_of(node.as_ref().map(Node::value).unwrap_or(0..0)),
        }
    }

    fn location_of(&self, span: Range<usize>) -> Location {
        Location::span(&self.source, span)
    }
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
/// value, and a node is 40 bytes (offsets are `u32`). In JSON an array or
/// object of at most [`FOLDED`] bytes is one node, its insides scanned
/// again when a pointer goes into it: the index of a minified spec of many
/// small entries is a node per entry, not per value (it was 2.5 times the
/// text). A text of 4 GiB or more gets an empty index: every place falls
/// back to 1:1.
#[derive(Clone, Debug, Default)]
struct Index {
    nodes: Vec<Node>,
    children: Vec<u32>,
    names: String,
    pending: Vec<u32>,
    /// Members of large objects by (object, hash of name), made on the
    /// first lookup: finding each of thousands of members of one object by
    /// a scan of its members was quadratic.
    members: std::cell::OnceCell<HashMap<(u32, u64), u32>>,
}

/// JSON arrays and objects of at most this many bytes are indexed as one
/// node (see [`Index`]): finding a place inside one scans at most this much.
const FOLDED: usize = 1024;

/// Objects with more members than this are looked up through a hash.
const SCANNED_MEMBERS: usize = 16;

fn name_hash(name: &str) -> u64 {
    use std::hash::{BuildHasher, BuildHasherDefault};
    BuildHasherDefault::<std::collections::hash_map::DefaultHasher>::default().hash_one(name)
}

/// The largest text an index covers.
const MAX_INDEXED: usize = u32::MAX as usize;

#[derive(Clone, Copy, Debug, Default)]
struct Span32 {
    start: u32,
    end: u32,
}

impl Span32 {
    fn of(r: &Range<usize>) -> Span32 {
        let cut = |i: usize| u32::try_from(i).unwrap_or(u32::MAX);
        Span32 {
            start: cut(r.start),
            end: cut(r.end),
        }
    }

    fn range(self) -> Range<usize> {
        self.start as usize..self.end as usize
    }
}

#[derive(Clone, Copy, Debug)]
struct Node {
    value: Span32,
    /// The member's key as written (quotes included), if any.
    key: Option<Span32>,
    /// The member's name: into the text, or into `names` when `own_name`.
    name: Span32,
    kids: Span32,
    is_array: bool,
    own_name: bool,
    /// A JSON container indexed without its insides.
    folded: bool,
}

impl Node {
    fn value(&self) -> Range<usize> {
        self.value.range()
    }

    fn key(&self) -> Option<Range<usize>> {
        self.key.map(Span32::range)
    }
}

enum Name {
    None,
    Text(Range<usize>),
    Own(Range<usize>),
}

impl Index {
    /// Adds a node; its children are the nodes `close` collects after it.
    fn open(&mut self, value: Range<usize>, key: Option<Range<usize>>, name: Name) -> u32 {
        let id = self.nodes.len() as u32;
        let (name, own_name) = match name {
            Name::None => (Span32::default(), false),
            Name::Text(r) => (Span32::of(&r), false),
            Name::Own(r) => (Span32::of(&r), true),
        };
        self.nodes.push(Node {
            value: Span32::of(&value),
            key: key.as_ref().map(Span32::of),
            name,
            kids: Span32::default(),
            is_array: false,
            own_name,
            folded: false,
        });
        id
    }

    fn close(&mut self, id: u32, mark: usize, end: Option<usize>, is_array: bool) {
        let start = self.children.len();
        self.children.extend(self.pending.drain(mark..));
        let node = &mut self.nodes[id as usize];
        node.kids = Span32::of(&(start..self.children.len()));
        node.is_array = is_array;
        if let Some(end) = end {
            node.value.end = Span32::of(&(end..end)).end;
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
        let within = if node.own_name {
            self.names.as_str()
        } else {
            text
        };
        within.get(node.name.range()).unwrap_or("")
    }

    /// The member of `kids` named `name`; the last of duplicate keys wins,
    /// as in serde_json.
    fn scan(&self, text: &str, kids: &[u32], name: &str) -> Option<u32> {
        kids.iter()
            .rev()
            .find(|&&k| self.name_of(text, &self.nodes[k as usize]) == name)
            .copied()
    }

    fn members(&self, text: &str) -> &HashMap<(u32, u64), u32> {
        self.members.get_or_init(|| {
            let mut map = HashMap::new();
            for (id, node) in self.nodes.iter().enumerate() {
                let kids = self.children.get(node.kids.range()).unwrap_or_default();
                if node.is_array || kids.len() <= SCANNED_MEMBERS {
                    continue;
                }
                // In document order, so the last of duplicate keys wins.
                for &k in kids {
                    let name = self.name_of(text, &self.nodes[k as usize]);
                    map.insert((id as u32, name_hash(name)), k);
                }
            }
            map
        })
    }

    /// The node at `pointer`, or its nearest ancestor in the file, and
    /// whether the node is the one asked for.
    fn find(&self, text: &str, pointer: &str) -> (Option<Node>, bool) {
        let Some(&root) = self.nodes.first() else {
            return (None, false);
        };
        if pointer.is_empty() {
            return (Some(root), true);
        }
        let tokens: Vec<&str> = pointer
            .strip_prefix('/')
            .unwrap_or(pointer)
            .split('/')
            .collect();
        self.find_below(text, 0, &tokens)
    }

    /// [`Self::find`] of `tokens`, from node `id`.
    fn find_below(&self, text: &str, mut id: u32, tokens: &[&str]) -> (Option<Node>, bool) {
        let Some(mut node) = self.nodes.get(id as usize).copied() else {
            return (None, false);
        };
        for (i, raw) in tokens.iter().enumerate() {
            if node.folded {
                let mut inside = json_index_at(text, node.value.start as usize);
                // Its root is this node, as a member of its parent too.
                if let Some(root) = inside.nodes.first_mut() {
                    root.key = node.key;
                }
                return inside.find_below(text, 0, &tokens[i..]);
            }
            let token: std::borrow::Cow<'_, str> = if raw.contains('~') {
                raw.replace("~1", "/").replace("~0", "~").into()
            } else {
                (*raw).into()
            };
            let kids = self.children.get(node.kids.range()).unwrap_or_default();
            let next = if node.is_array {
                token
                    .parse::<usize>()
                    .ok()
                    .and_then(|i| kids.get(i))
                    .copied()
            } else if kids.len() > SCANNED_MEMBERS {
                match self.members(text).get(&(id, name_hash(&token))) {
                    Some(&k) if self.name_of(text, &self.nodes[k as usize]) == token => Some(k),
                    // Another name with the same hash: scan, as for a small object.
                    Some(_) => self.scan(text, kids, &token),
                    None => None,
                }
            } else {
                self.scan(text, kids, &token)
            };
            match next {
                Some(k) => {
                    id = k;
                    node = self.nodes[k as usize];
                }
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
    id: u32,
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
    id: u32,
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

/// The positions of the keys and values of JSON text serde_json accepted,
/// small arrays and objects folded (see [`Index`]).
fn json_index(text: &str) -> Index {
    scan_json(text, 0, true)
}

/// The positions of every key and value of the JSON value starting at byte
/// `start` of `text` (the insides of a folded node).
fn json_index_at(text: &str, start: usize) -> Index {
    scan_json(text, start, false)
}

fn scan_json(text: &str, start: usize, fold: bool) -> Index {
    let mut index = Index::default();
    if text.len() > MAX_INDEXED {
        return index;
    }
    let mut scanner = Scanner {
        bytes: text.as_bytes(),
        text,
        pos: start,
        fold,
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
    /// Whether small arrays and objects are folded into one node.
    fold: bool,
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

    /// Records the value at the cursor (under `key`, named `name`) and all
    /// it holds, folding a small container into one node; its node's id.
    fn value(&mut self, key: Option<Range<usize>>, name: Name) -> u32 {
        self.ws();
        let start = self.pos;
        let id = self.index.open(start..start, key, name);
        let mark = self.index.pending.len();
        let (children, names) = (self.index.children.len(), self.index.names.len());
        let is_array = match self.bytes.get(self.pos) {
            Some(b'{') => {
                self.members();
                false
            }
            Some(b'[') => {
                self.elements();
                true
            }
            Some(b'"') => {
                self.string();
                false
            }
            Some(_) => {
                self.scalar();
                false
            }
            None => false,
        };
        let container = matches!(self.bytes.get(start), Some(b'{' | b'['));
        let folded = self.fold && container && self.pos - start <= FOLDED;
        if folded {
            // Everything recorded since this node opened is its insides.
            self.index.nodes.truncate(id as usize + 1);
            self.index.children.truncate(children);
            self.index.names.truncate(names);
            self.index.pending.truncate(mark);
        }
        self.index.close(id, mark, Some(self.pos), is_array);
        self.index.nodes[id as usize].folded = folded;
        id
    }

    /// Records each member of the object whose `{` is at the cursor, and
    /// moves past its `}`.
    fn members(&mut self) {
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
            let name = self.key_name(&key_span, escaped);
            self.ws();
            if self.bytes.get(self.pos) == Some(&b':') {
                self.pos += 1;
            }
            let child = self.value(Some(key_span), name);
            self.index.pending.push(child);
        }
    }

    /// The name of a key spanning `key_span` (quotes included): the text
    /// between its quotes, or, where it holds an escape, the key decoded.
    fn key_name(&mut self, key_span: &Range<usize>, escaped: bool) -> Name {
        if escaped {
            let decoded: String =
                serde_json::from_str(&self.text[key_span.clone()]).unwrap_or_default();
            self.index.name(self.text, &decoded)
        } else {
            Name::Text(key_span.start + 1..key_span.end - 1)
        }
    }

    /// Records each element of the array whose `[` is at the cursor, and
    /// moves past its `]`.
    fn elements(&mut self) {
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

    /// Skips a number, `true`, `false` or `null` at the cursor.
    fn scalar(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            if matches!(b, b',' | b']' | b'}' | b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.pos += 1;
        }
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
        (
            loc.line().unwrap(),
            loc.column().unwrap(),
            loc.width().unwrap(),
        )
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

    /// The index stays a small multiple of the text: see `Index`.
    #[test]
    fn index_nodes_are_small() {
        assert!(std::mem::size_of::<Node>() <= 40);
    }

    /// Every pointer into a document of small entries (each folded), and
    /// some that are not there, finds the same place as in a full index.
    #[test]
    fn a_folded_index_finds_what_a_full_one_does() {
        let mut workers = Vec::new();
        for i in 0..200 {
            workers.push(serde_json::json!({
                "workerId": format!("w{i}"), "a~b/c": [1, {"d": [true, null]}],
                "esc\"aped": {"k": "v"}, "many": (0..20).map(|n| (format!("k{n}"), Value::from(n))).collect::<Map<String, Value>>()
            }));
        }
        let doc = serde_json::json!({"defaults": {"role": "r"}, "workers": workers});
        for text in [
            serde_json::to_string(&doc).unwrap(),
            serde_json::to_string_pretty(&doc).unwrap(),
        ] {
            let folded = json_index(&text);
            let full = scan_json(&text, 0, false);
            assert!(folded.nodes.len() < full.nodes.len() / 10);
            let mut pointers = vec![String::new(), "/nope".into(), "/workers/999/x".into()];
            fn walk(v: &Value, at: String, out: &mut Vec<String>) {
                out.push(format!("{at}/missing"));
                match v {
                    Value::Object(m) => {
                        for (k, v) in m {
                            walk(
                                v,
                                format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                                out,
                            );
                        }
                    }
                    Value::Array(a) => {
                        for (i, v) in a.iter().enumerate() {
                            walk(v, format!("{at}/{i}"), out);
                        }
                    }
                    _ => {}
                }
                out.push(at);
            }
            walk(&doc, String::new(), &mut pointers);
            let place =
                |(node, found): (Option<Node>, bool)| node.map(|n| (n.value(), n.key(), found));
            for p in &pointers {
                assert_eq!(
                    place(folded.find(&text, p)),
                    place(full.find(&text, p)),
                    "{p}"
                );
            }
        }
    }

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
        assert_eq!(f.locate("/workers/3").line(), Some(19));
        assert_eq!(f.locate("/workers/0").line(), Some(6));
        assert_eq!(at(&f.locate("/workers/1/command/2")), (12, 24, 6));
        assert_eq!(f.locate("/workers/2/env/X").line(), Some(17));
        assert_eq!(at(&f.locate_key("/defaults/env/MODE")), (4, 5, 4));
        assert_eq!(f.locate("/defaults/idleTimeoutSeconds").line(), Some(3));
        let loc = f.locate("/workers/3/attempt");
        assert_eq!(loc.file_name(), "spec.toml");
        assert_eq!(loc.line_text(), Some("attempt = 0"));
    }

    #[test]
    fn missing_pointers_fall_back_to_the_nearest_ancestor() {
        let (_, f) = toml(SPEC);
        assert_eq!(f.locate("/workers/3/role").line(), Some(19));
        assert_eq!(f.locate_key("/workers/3/role").line(), Some(19));
        assert_eq!(f.locate("/workers/9/role").line(), Some(6));
        let root = f.locate("/nope");
        assert_eq!((root.line(), root.column()), (Some(1), Some(1)));
        assert!(root.width().unwrap() >= 1);
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
        assert_eq!(f.locate("/workers").line(), Some(2));
        assert_eq!(f.locate("/workers/1").width(), Some(56));
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
        assert_eq!(loc.file_name(), "s.toml");
        assert_eq!(loc.line(), Some(2));
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
        assert_eq!((loc.line(), loc.column()), (Some(3), Some(8)));
        assert_eq!(loc.line_text(), Some("  \"é\": x"));
        assert!(!err.message.contains("at line"), "{}", err.message);

        let err = SourceFile::parse("s.toml", "a = 1\na = 2\n".into(), Format::Toml).unwrap_err();
        assert_eq!(err.location.unwrap().line(), Some(2));
        let err = SourceFile::parse("s.toml", "a = nan\n".into(), Format::Toml).unwrap_err();
        assert_eq!(err.code, Code::InputInvalid);
    }

    /// Large objects are looked up through a hash: every member found, the
    /// last of duplicates winning, escaped names too, a missing member
    /// falling back to the object.
    #[test]
    fn members_of_large_objects() {
        let mut members: Vec<String> = (0..100).map(|i| format!("\"k{i}\": {i}")).collect();
        members.push("\"k5\": \"again\"".into());
        members.push("\"esc\\\"aped\": 7".into());
        let text = format!("{{\"o\": {{{}}}}}", members.join(", "));
        let (v, f) = json(&text);
        assert_eq!(v["o"]["k5"], "again");
        for i in [0, 1, 17, 99] {
            let at = text.find(&format!("\"k{i}\": {i}")).unwrap() + format!("\"k{i}\": ").len();
            assert_eq!(f.locate(&format!("/o/k{i}")).column(), Some(at + 1), "k{i}");
        }
        let again = text.find("\"again\"").unwrap();
        assert_eq!(f.locate("/o/k5").column(), Some(again + 1));
        let esc = text.find("\"esc").unwrap();
        assert_eq!(f.locate_key("/o/esc\"aped").column(), Some(esc + 1));
        let o = text.find("{\"k0").unwrap();
        assert_eq!(f.locate("/o/nope").column(), Some(o + 1));
        assert_eq!(f.locate("/o/nope/deeper").column(), Some(o + 1));

        let mut toml_text = String::from("[t]\n");
        for i in 0..40 {
            toml_text.push_str(&format!("k{i} = {i}\n"));
        }
        toml_text.push_str("\"q u\" = 1\n");
        let (_, f) = toml(&toml_text);
        assert_eq!(f.locate("/t/k39").line(), Some(41));
        assert_eq!(f.locate_key("/t/q u").line(), Some(42));
        assert_eq!(f.locate("/t/zz").line(), Some(1));
    }

    /// An unterminated string ending in CRLF: the parser's error span
    /// starts in the line break, past the line shown (once a panic).
    #[test]
    fn an_unterminated_string_before_crlf_is_a_located_syntax_error() {
        for (name, text, format) in [
            ("s.toml", "x = \"a\r\n", Format::Toml),
            ("s.toml", "x = \"a\r", Format::Toml),
            ("s.toml", "a = 1\r\nx = \"a\r\nb = 2\r\n", Format::Toml),
            ("s.json", "{\"x\": \"a\r\n", Format::Json),
            ("s.json", "{\"x\": 1,\r\n\r\n", Format::Json),
        ] {
            let err = SourceFile::parse(name, text.into(), format).unwrap_err();
            assert_eq!(err.code, Code::InputSyntax, "{text:?}");
            let loc = err.location.clone().unwrap();
            assert!(loc.line().is_some() && loc.column().is_some(), "{text:?}");
            assert!(!loc.line_text().unwrap().contains('\r'), "{text:?}");
            let shown = err.render_text();
            assert!(shown.contains('^'), "{shown}");
            let json = err.to_json();
            assert_eq!(json["line"].as_u64(), loc.line().map(|l| l as u64));
        }
        let err = SourceFile::parse("s.toml", "x = \"a\r\n".into(), Format::Toml).unwrap_err();
        let loc = err.location.unwrap();
        assert_eq!(
            (loc.line(), loc.column(), loc.line_text()),
            (Some(1), Some(7), Some("x = \"a"))
        );
    }

    /// The near misses: the same lines, terminated, parse.
    #[test]
    fn terminated_strings_before_crlf_parse() {
        let (v, f) = toml("x = \"a\"\r\ny = \"b\"\r\n");
        assert_eq!((v["x"].as_str(), v["y"].as_str()), (Some("a"), Some("b")));
        let loc = f.locate("/y");
        assert_eq!(
            (loc.line(), loc.column(), loc.line_text()),
            (Some(2), Some(5), Some("y = \"b\""))
        );
        let (v, f) = json("{\"x\": \"a\"\r\n}\r\n");
        assert_eq!(v["x"], "a");
        assert_eq!(f.locate("/x").line_text(), Some("{\"x\": \"a\""));
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
        assert_eq!(f.locate("/a/0").column(), Some(8));
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
                        let loc = f.locate(&ptr);
                        let line = loc.line_text().unwrap();
                        prop_assert!(line.contains(k.as_str()), "{ptr} -> {line:?} in\n{text}");
                        let kloc = f.locate_key(&ptr);
                        prop_assert_eq!(kloc.line_text().unwrap(), line);
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
                (
                    e.message.clone(),
                    loc.line().unwrap(),
                    loc.column().unwrap(),
                )
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
