//! The run's error log (docs/exec.md#the-error-log): one JSON record per
//! wrapper failure, appended with a single write of at most 4096 bytes so that
//! concurrent appenders never interleave and readers never see half a record.
//!
//! Writing here is bookkeeping around a dispatch that has already settled, so
//! nothing in this module fails loudly: problems come back as an
//! [`ErrorLogError`], whose text the caller puts on the event.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

use serde_json::{json, Map, Value};

use crate::fsutil;

/// Upper bound on one appended record, newline included.
pub const MAX_RECORD_BYTES: usize = 4096;

/// How much of a worker's log tail goes into `stderrExcerpt` where the start
/// of the attempt's output is not known.
pub const STDERR_TAIL_BYTES: usize = 800;

/// How much of the start of an attempt's output goes into `stderrExcerpt`:
/// a CLI names what it refused first (gemini prints "Unknown arguments: ..."
/// before 4 KB of usage text).
pub const STDERR_HEAD_BYTES: usize = 1024;

/// How much of the end of an attempt's output goes into `stderrExcerpt`
/// beside its head: where the wrapper and the CLI said how it ended.
pub const STDERR_END_BYTES: usize = 2048;

/// Between the head and the tail of an excerpt, where output was left out.
const GAP: &str = "\n…\n";

/// Put in place of the text cut from a shortened string.
const ELLIPSIS: &str = "…";

/// Why a record was not appended to the error log
/// (docs/exec.md#the-error-log): reported on the event, never failing the
/// dispatch.
#[derive(Debug, thiserror::Error)]
pub enum ErrorLogError {
    /// The record is not serialisable JSON.
    #[error("cannot serialise error record: {0}")]
    Serialise(serde_json::Error),
    /// Even shortened, the record's line (newline included) is `bytes`
    /// long, over [`MAX_RECORD_BYTES`].
    #[error(
        "error record is {bytes} bytes even with its text shortened; the limit is {MAX_RECORD_BYTES}"
    )]
    TooLong { bytes: usize },
    /// The line could not be appended to the log at `path`.
    #[error("cannot append to error log {}: {source}", path.display())]
    Append { path: PathBuf, source: io::Error },
}

/// Append `record` to the error log at `path` as one line, shortened to fit
/// [`MAX_RECORD_BYTES`] if need be (see [`fit_record`]).
pub fn append_error(path: &Path, record: Map<String, Value>) -> Result<(), ErrorLogError> {
    let line = fit_record(record)?;
    fsutil::append_line(path, &line).map_err(|source| ErrorLogError::Append {
        path: path.to_path_buf(),
        source,
    })
}

/// Serialise `record` into a line that, with its newline, fits in
/// [`MAX_RECORD_BYTES`].
///
/// An oversized record first loses the middle of `stderrExcerpt` (its start
/// names what a CLI refused, its end is where the failure is), keeping a
/// third of what is left from the head and the rest from the tail, down to
/// nothing; then the longest remaining string fields lose their ends, one at
/// a time. A record that still does not fit (huge keys, or non-string
/// values) is refused rather than split.
pub fn fit_record(mut record: Map<String, Value>) -> Result<String, ErrorLogError> {
    let limit = MAX_RECORD_BYTES - 1;
    let mut line = serialise(&record)?;

    while line.len() > limit {
        let excess = line.len() - limit;
        if !shorten(&mut record, "stderrExcerpt", excess, Keep::Ends) {
            break;
        }
        line = serialise(&record)?;
    }
    while line.len() > limit {
        let excess = line.len() - limit;
        let Some(key) = longest_string(&record) else {
            break;
        };
        if !shorten(&mut record, &key, excess, Keep::Head) {
            break;
        }
        line = serialise(&record)?;
    }

    if line.len() > limit {
        return Err(ErrorLogError::TooLong {
            bytes: line.len() + 1,
        });
    }
    Ok(line)
}

fn serialise(record: &Map<String, Value>) -> Result<String, ErrorLogError> {
    serde_json::to_string(record).map_err(ErrorLogError::Serialise)
}

#[derive(Clone, Copy)]
enum Keep {
    Head,
    /// A third of what stays from the head, the rest from the tail.
    Ends,
}

/// Cut the string under `key` so its JSON form is at least `excess` bytes
/// shorter, marking the cut with an ellipsis. Returns false when there is
/// nothing left to cut.
fn shorten(record: &mut Map<String, Value>, key: &str, excess: usize, keep: Keep) -> bool {
    let Some(Value::String(text)) = record.get_mut(key) else {
        return false;
    };
    if text.is_empty() {
        return false;
    }
    // Count in escaped bytes, so a string full of quotes or control
    // characters is not cut far more than needed.
    let need = excess + ELLIPSIS.len();
    let mut cut = 0;
    let boundary = match keep {
        Keep::Ends => {
            // What stays (in escaped bytes) is split: a third from the head,
            // the rest from the tail.
            let total: usize = text.chars().map(escaped_len).sum();
            let keep = total.saturating_sub(need);
            let mut used = 0;
            let mut head_end = 0;
            for (at, c) in text.char_indices() {
                if used + escaped_len(c) > keep / 3 {
                    break;
                }
                used += escaped_len(c);
                head_end = at + c.len_utf8();
            }
            let mut tail_used = 0;
            let mut tail_start = text.len();
            for (at, c) in text[head_end..].char_indices().rev() {
                if used + tail_used + escaped_len(c) > keep {
                    break;
                }
                tail_used += escaped_len(c);
                tail_start = head_end + at;
            }
            (keep > 0).then(|| format!("{}{ELLIPSIS}{}", &text[..head_end], &text[tail_start..]))
        }
        Keep::Head => text
            .char_indices()
            .rev()
            .find_map(|(at, c)| {
                cut += escaped_len(c);
                (cut >= need).then_some(at)
            })
            .filter(|&at| at > 0)
            .map(|at| format!("{}{ELLIPSIS}", &text[..at])),
    };
    let shortened = boundary.unwrap_or_default();
    // Guarantee progress whatever the arithmetic above did.
    *text = if shortened.len() < text.len() {
        shortened
    } else {
        String::new()
    };
    true
}

/// Bytes `c` takes inside a JSON string as serde_json writes it.
fn escaped_len(c: char) -> usize {
    match c {
        '"' | '\\' | '\n' | '\r' | '\t' | '\u{8}' | '\u{c}' => 2,
        c if (c as u32) < 0x20 => 6,
        c => c.len_utf8(),
    }
}

/// The key of the longest non-empty top-level string field.
fn longest_string(record: &Map<String, Value>) -> Option<String> {
    record
        .iter()
        .filter_map(|(key, value)| Some((key, value.as_str()?.len())))
        .filter(|&(_, len)| len > 0)
        .max_by_key(|&(_, len)| len)
        .map(|(key, _)| key.clone())
}

/// The `agent` value for a worker: `report-writer` as itself, any other
/// worker as `<workerId>-worker`.
pub fn agent_name(worker_id: &str) -> String {
    if worker_id == "report-writer" {
        worker_id.to_string()
    } else {
        format!("{worker_id}-worker")
    }
}

/// One wrapper failure, as the error log records it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ErrorRecord {
    pub task_key: String,
    pub phase: String,
    /// See [`agent_name`].
    pub agent: String,
    pub agent_role: String,
    pub model: String,
    pub command: String,
    /// 124 for a timeout.
    pub exit_code: i64,
    /// From the wrapper's status sidecar, when it said.
    pub duration_ms: Option<i64>,
    /// `attempt N: ...`
    pub message: String,
    /// The tail of the worker's log; see [`log_tail`].
    pub stderr_excerpt: Option<String>,
    /// The v2 identity fields, for v2 jobs.
    pub identity: Option<Map<String, Value>>,
}

impl ErrorRecord {
    /// The record as the error log's JSON object. Identity fields are added
    /// beside the standard keys and never replace them.
    pub fn to_map(&self) -> Map<String, Value> {
        let Value::Object(mut record) = json!({
            "taskKey": self.task_key,
            "phase": self.phase,
            "agent": self.agent,
            "agentRole": self.agent_role,
            "model": self.model,
            "errorType": "cli-failure",
            "command": self.command,
            "commandKind": "wrapper",
            "exitCode": self.exit_code,
            "durationMs": self.duration_ms,
            "message": self.message,
            "stderrExcerpt": self.stderr_excerpt,
        }) else {
            unreachable!("json! object literal")
        };
        if let Some(identity) = &self.identity {
            for (key, value) in identity {
                record.entry(key.clone()).or_insert_with(|| value.clone());
            }
        }
        record
    }
}

/// An attempt's output for `stderrExcerpt`: where the attempt's part of the
/// log starts (`from`, the wrapper's `logOffset`) is known, its first
/// [`STDERR_HEAD_BYTES`] and last [`STDERR_END_BYTES`] (all of it when that
/// is no more), the gap marked; otherwise the log's last
/// [`STDERR_TAIL_BYTES`] (the start of the log may be an earlier attempt's).
/// Trimmed; `None` if nothing can be read or it holds only whitespace.
pub fn log_excerpt(path: &Path, from: Option<u64>) -> Option<String> {
    let Some(from) = from else {
        return log_tail(path, STDERR_TAIL_BYTES);
    };
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let size = len.saturating_sub(from);
    let mut read = |at: u64, n: u64| -> Option<Vec<u8>> {
        file.seek(SeekFrom::Start(at)).ok()?;
        let mut bytes = Vec::new();
        (&mut file).take(n).read_to_end(&mut bytes).ok()?;
        Some(bytes)
    };
    let (head, end) = (STDERR_HEAD_BYTES as u64, STDERR_END_BYTES as u64);
    let text = if size <= head + end {
        String::from_utf8_lossy(&read(from, size)?).into_owned()
    } else {
        let first = read(from, head)?;
        let last = read(len - end, end)?;
        format!(
            "{}{GAP}{}",
            String::from_utf8_lossy(cut_partial_end(&first)).trim_end(),
            String::from_utf8_lossy(cut_partial_start(&last)).trim_start()
        )
    };
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

/// `bytes` without a character cut in half at its end.
fn cut_partial_end(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes,
        Err(e) if e.error_len().is_none() => &bytes[..e.valid_up_to()],
        Err(_) => bytes,
    }
}

/// `bytes` without the continuation bytes of a character that began before.
fn cut_partial_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|b| (*b & 0b1100_0000) == 0b1000_0000)
        .count();
    &bytes[skip..]
}

/// The last `max_bytes` of the file at `path` as text: invalid UTF-8 replaced,
/// a character cut in half at the front dropped, surrounding whitespace
/// trimmed. `None` if the file cannot be read or holds only whitespace.
pub fn log_tail(path: &Path, max_bytes: usize) -> Option<String> {
    let mut file = File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(max_bytes as u64);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::with_capacity(max_bytes.min(len as usize));
    file.take(max_bytes as u64).read_to_end(&mut bytes).ok()?;
    let mut from = 0;
    if start > 0 {
        // Skip UTF-8 continuation bytes of a character that began before
        // the window.
        while from < bytes.len() && from < 3 && (bytes[from] & 0b1100_0000) == 0b1000_0000 {
            from += 1;
        }
    }
    let text = String::from_utf8_lossy(&bytes[from..]);
    let trimmed = text.trim();
    (!trimmed.is_empty()).then(|| trimmed.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn record(stderr: &str, message: &str) -> Map<String, Value> {
        ErrorRecord {
            task_key: "T-1".into(),
            phase: "implement".into(),
            agent: agent_name("codex"),
            agent_role: "worker".into(),
            model: "gpt-5".into(),
            command: "okstra worker --provider codex".into(),
            exit_code: 124,
            duration_ms: Some(1500),
            message: message.into(),
            stderr_excerpt: Some(stderr.into()),
            identity: None,
        }
        .to_map()
    }

    #[test]
    fn builder_uses_the_wire_names() {
        let mut identity = Map::new();
        identity.insert("participantRef".into(), json!("participants/p1"));
        identity.insert("exitCode".into(), json!("not allowed to override"));
        let rec = ErrorRecord {
            agent: agent_name("report-writer"),
            exit_code: 2,
            identity: Some(identity),
            ..ErrorRecord::default()
        }
        .to_map();
        assert_eq!(rec["errorType"], "cli-failure");
        assert_eq!(rec["commandKind"], "wrapper");
        assert_eq!(rec["agent"], "report-writer");
        assert_eq!(rec["exitCode"], 2);
        assert_eq!(rec["durationMs"], Value::Null);
        assert_eq!(rec["participantRef"], "participants/p1");
        assert_eq!(agent_name("claude"), "claude-worker");
    }

    #[test]
    fn small_records_are_written_unchanged() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("run/errors.jsonl");
        append_error(&path, record("boom", "attempt 1: wrapper exited 1")).unwrap();
        append_error(&path, record("again", "attempt 2: wrapper exited 1")).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines.len(), 2);
        assert_eq!(lines[0]["stderrExcerpt"], "boom");
        assert_eq!(lines[1]["message"], "attempt 2: wrapper exited 1");
    }

    #[test]
    fn an_oversized_excerpt_keeps_its_head_and_its_tail() {
        let stderr = format!(
            "THE START {}THE END",
            "noise \"quoted\" \u{1F600} ".repeat(500)
        );
        let line = fit_record(record(&stderr, "attempt 1: failed")).unwrap();
        assert!(line.len() < MAX_RECORD_BYTES, "{}", line.len());
        assert!(
            line.len() > MAX_RECORD_BYTES - 64,
            "cut far too much: {}",
            line.len()
        );
        let back: Value = serde_json::from_str(&line).unwrap();
        let excerpt = back["stderrExcerpt"].as_str().unwrap();
        assert!(excerpt.starts_with("THE START") && excerpt.ends_with("THE END"));
        assert!(excerpt.contains(ELLIPSIS));
        let (head, tail) = excerpt.split_once(ELLIPSIS).unwrap();
        assert!(
            tail.len() > head.len(),
            "the tail keeps more: {} / {}",
            head.len(),
            tail.len()
        );
        assert_eq!(back["message"], "attempt 1: failed");
    }

    #[test]
    fn the_excerpt_is_the_attempts_head_and_tail() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        let earlier = "attempt 1 said this\n";
        let usage = "  --option  some text\n".repeat(400);
        std::fs::write(
            &path,
            format!("{earlier}Unknown arguments: bogus\n{usage}okstra worker: gemini exited 1\n"),
        )
        .unwrap();
        let from = Some(earlier.len() as u64);
        let excerpt = log_excerpt(&path, from).unwrap();
        assert!(excerpt.starts_with("Unknown arguments: bogus"), "{excerpt}");
        assert!(excerpt.ends_with("okstra worker: gemini exited 1"));
        assert!(excerpt.contains(GAP));
        assert!(excerpt.len() <= STDERR_HEAD_BYTES + STDERR_END_BYTES + GAP.len());
        // Fitted into a record, both ends stay.
        let line = fit_record(record(&excerpt, "attempt 2: failed")).unwrap();
        let back: Value = serde_json::from_str(&line).unwrap();
        let kept = back["stderrExcerpt"].as_str().unwrap();
        assert!(kept.starts_with("Unknown arguments: bogus") && kept.ends_with("exited 1"));
        // A short output whole; no offset: the log's tail.
        std::fs::write(&path, format!("{earlier}short\n")).unwrap();
        assert_eq!(log_excerpt(&path, from).as_deref(), Some("short"));
        assert_eq!(
            log_excerpt(&path, None).as_deref(),
            Some("attempt 1 said this\nshort")
        );
        assert_eq!(log_excerpt(&dir.path().join("none"), from), None);
    }

    #[test]
    fn other_strings_give_way_once_the_excerpt_is_gone() {
        let message = format!("attempt 1: {}", "m".repeat(6000));
        let line = fit_record(record(&"s".repeat(6000), &message)).unwrap();
        assert!(line.len() < MAX_RECORD_BYTES);
        let back: Value = serde_json::from_str(&line).unwrap();
        assert_eq!(back["stderrExcerpt"], "");
        let msg = back["message"].as_str().unwrap();
        assert!(msg.starts_with("attempt 1: mmm") && msg.ends_with(ELLIPSIS));
        assert_eq!(back["taskKey"], "T-1");
    }

    #[test]
    fn an_unfittable_record_is_refused_not_split() {
        let mut rec = Map::new();
        rec.insert("numbers".into(), json!(vec![123456789; 1000]));
        assert!(fit_record(rec).is_err());
    }

    #[test]
    fn write_failures_come_back_as_text() {
        let dir = tempfile::tempdir().unwrap();
        // The log path is a directory: appending fails.
        let err = append_error(dir.path(), record("x", "y"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("error log"), "{err}");
    }

    #[test]
    fn an_error_log_error_reads_as_it_always_did() {
        use serde::ser::Error as _;
        let said = [
            ErrorLogError::Serialise(serde_json::Error::custom("key must be a string")),
            ErrorLogError::TooLong { bytes: 12001 },
            ErrorLogError::Append {
                path: "/p/errors.jsonl".into(),
                source: io::Error::from_raw_os_error(21),
            },
        ]
        .map(|e| e.to_string());
        assert_eq!(
            said,
            [
                "cannot serialise error record: key must be a string",
                "error record is 12001 bytes even with its text shortened; the limit is 4096",
                "cannot append to error log /p/errors.jsonl: Is a directory (os error 21)",
            ]
        );
    }

    #[test]
    fn log_tail_takes_the_end_and_trims() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("p.log");
        assert_eq!(log_tail(&path, 800), None);
        std::fs::write(&path, "  \n").unwrap();
        assert_eq!(log_tail(&path, 800), None);
        std::fs::write(&path, "short log\n").unwrap();
        assert_eq!(log_tail(&path, 800).as_deref(), Some("short log"));

        // "é" is two bytes; a window starting inside it drops the fragment
        // rather than showing a replacement character.
        let text = format!("{}é tail \n", "x".repeat(1000));
        std::fs::write(&path, &text).unwrap();
        assert_eq!(log_tail(&path, 8).as_deref(), Some("tail"));
        assert_eq!(log_tail(&path, 9).as_deref(), Some("é tail"));
        assert!(log_tail(&path, 800).unwrap().len() <= 800);
    }

    proptest! {
        #[test]
        fn fitted_records_never_exceed_the_limit(
            stderr in ".{0,3000}",
            message in ".{0,3000}",
            command in "\\PC{0,2000}",
            control in "[\\x00-\\x1f\"\\\\]{0,2000}",
        ) {
            let mut rec = record(&stderr, &message);
            rec.insert("command".into(), json!(command));
            rec.insert("context".into(), json!(control));
            let line = fit_record(rec).unwrap();
            prop_assert!(line.len() < MAX_RECORD_BYTES);
            let back: Value = serde_json::from_str(&line).unwrap();
            prop_assert_eq!(&back["errorType"], "cli-failure");
        }
    }
}
