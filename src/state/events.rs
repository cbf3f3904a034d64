//! The lead event log: one JSON object a line, each with `type` and `ts`
//! first, then the facts of the event (docs/exec.md#what-is-written-when).

use std::io;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

use crate::fsutil;

/// An append-only JSON-lines event file, kept open between appends.
#[derive(Debug)]
pub struct EventLog {
    file: fsutil::Appender,
}

impl EventLog {
    pub fn new(path: impl Into<PathBuf>) -> Self {
        EventLog {
            file: fsutil::Appender::new(path),
        }
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }

    /// Append one event stamped now. `type` and `ts` are written first; a
    /// `type` or `ts` among `fields` is dropped in their favour.
    pub fn append(&mut self, event_type: &str, fields: Map<String, Value>) -> io::Result<()> {
        self.file
            .append(&event_line(event_type, &crate::clock::now(), fields))
    }
}

/// Serialise an event with `type` and `ts` leading, whatever the map's own
/// key order.
fn event_line(event_type: &str, ts: &str, fields: Map<String, Value>) -> String {
    let mut line = String::from("{\"type\":");
    line.push_str(&Value::from(event_type).to_string());
    line.push_str(",\"ts\":");
    line.push_str(&Value::from(ts).to_string());
    for (key, value) in fields {
        if key == "type" || key == "ts" {
            continue;
        }
        line.push(',');
        line.push_str(&Value::from(key).to_string());
        line.push(':');
        line.push_str(&value.to_string());
    }
    line.push('}');
    line
}

/// Every event in the file at `path`, in order. A missing file holds none.
///
/// Lines that are not whole JSON objects are skipped: a writer killed
/// mid-append leaves a torn last line (later fenced off by the next append),
/// and losing that one record must not cost the rest.
pub fn read_all(path: &Path) -> io::Result<Vec<Value>> {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    Ok(bytes
        .split(|&b| b == b'\n')
        .filter_map(|line| serde_json::from_slice::<Value>(line).ok())
        .filter(Value::is_object)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn fields(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap()
    }

    #[test]
    fn type_and_ts_lead_each_line() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = EventLog::new(dir.path().join("run/lead-events.jsonl"));
        log.append(
            "worker-dispatched",
            fields(
                json!({"attempt": 1, "workerId": "codex", "type": "spoofed", "a\"b": "q\"uote"}),
            ),
        )
        .unwrap();
        log.append("worker-failed", Map::new()).unwrap();

        let text = std::fs::read_to_string(log.path()).unwrap();
        let lines: Vec<_> = text.lines().collect();
        assert_eq!(lines.len(), 2);
        assert!(
            lines[0].starts_with("{\"type\":\"worker-dispatched\",\"ts\":\""),
            "{}",
            lines[0]
        );

        let events = read_all(log.path()).unwrap();
        assert_eq!(events[0]["type"], "worker-dispatched");
        assert_eq!(events[0]["attempt"], 1);
        assert_eq!(events[0]["a\"b"], "q\"uote");
        assert_eq!(events[1]["type"], "worker-failed");
        let ts = events[1]["ts"].as_str().unwrap();
        assert!(humantime::parse_rfc3339(ts).is_ok(), "{ts}");
    }

    #[test]
    fn torn_lines_are_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        assert!(read_all(&path).unwrap().is_empty());

        let mut log = EventLog::new(&path);
        log.append("one", Map::new()).unwrap();
        // A writer died mid-line.
        let mut bytes = std::fs::read(&path).unwrap();
        bytes.extend_from_slice(b"{\"type\":\"two\",\"ts\":\"20");
        std::fs::write(&path, &bytes).unwrap();
        assert_eq!(read_all(&path).unwrap().len(), 1);

        // The next append is not swallowed by the fragment.
        log.append("three", Map::new()).unwrap();
        let types: Vec<_> = read_all(&path)
            .unwrap()
            .iter()
            .map(|e| e["type"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(types, ["one", "three"]);
    }
}
