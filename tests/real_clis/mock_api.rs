//! A stand-in for the three vendors' model APIs on 127.0.0.1, so that the
//! real agent CLIs run whole turns in tests without credentials or network
//! (PROVIDERS.md, "Running the real CLIs against a loopback API").
//!
//! One server speaks all three dialects, told apart by the path a request
//! goes to: Anthropic Messages SSE (`POST /v1/messages`, claude), the OpenAI
//! Responses stream (`POST /v1/responses`, codex), Gemini
//! `streamGenerateContent` SSE (gemini). Each model request takes the next
//! [`Step`] of the test's script: call the CLI's own file-writing tool,
//! answer, fail with a status, refuse the key, or stall. Every answer reports the script's
//! [`Tokens`] and names its served model, so a test knows exactly what the
//! CLI was told it spent. "Next" is counted over all of a dialect's
//! requests, or, for many CLIs at once, within each conversation
//! ([`StepBy`]).
//!
//! std only: one thread accepts, one thread per connection; every response
//! is written whole with `Connection: close`. Dropping the server stops it,
//! stalled connections included.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the API does with one model request.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Ask the CLI to write `content` to `path` (relative to the project
    /// root, or absolute) with its own tool: claude's `Write`, codex's
    /// `apply_patch` (through its shell tool), gemini's `write_file`. A
    /// [`RESULT`] in `path` becomes the file the conversation's prompt
    /// asks for.
    WriteFile { path: String, content: String },
    /// Ask the CLI to run this shell command with its own tool: claude's
    /// `Bash`, codex's `exec_command`, gemini's `run_shell_command`.
    Shell(String),
    /// Call the CLI's tool `name` with `input` exactly as given (a path
    /// in it is not made absolute): e.g. claude's `Read` and `Edit` with a
    /// path relative to its working directory.
    Tool { name: String, input: Value },
    /// Answer with this text and end the turn.
    Answer(String),
    /// Refuse with this HTTP status and the vendor's error body (for 401,
    /// the body the vendor's API gives a bad key).
    Fail(u16),
    /// Refuse the key as the Gemini API does: 400 `INVALID_ARGUMENT` with
    /// reason `API_KEY_INVALID` (the other dialects answer 401).
    KeyInvalid,
    /// Take the request and never answer.
    Stall,
}

/// What one answer says it spent, in parts that never overlap.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tokens {
    /// Prompt tokens neither read from nor written to a cache.
    pub fresh_input: u64,
    pub cache_read: u64,
    /// Prompt tokens written to a cache (no such count in Gemini's API).
    pub cache_write: u64,
    /// Generated tokens besides reasoning.
    pub output: u64,
    /// Reasoning (thinking) tokens (claude's API counts them as output).
    pub reasoning: u64,
}

impl Tokens {
    fn add(&mut self, t: &Tokens) {
        self.fresh_input += t.fresh_input;
        self.cache_read += t.cache_read;
        self.cache_write += t.cache_write;
        self.output += t.output;
        self.reasoning += t.reasoning;
    }

    /// okstra's `usage` for these tokens as `provider`'s CLI reports them
    /// (the token fields only): what the run must have recorded.
    pub fn expected_usage(&self, provider: &str) -> Value {
        let input = self.fresh_input + self.cache_read + self.cache_write;
        let output = self.output + self.reasoning;
        let mut u = json!({
            "inputTokens": input,
            "cachedInputTokens": self.cache_read,
            "outputTokens": output,
            "totalTokens": input + output,
        });
        match provider {
            "claude" => u["cacheWriteTokens"] = json!(self.cache_write),
            "codex" => {
                u["cacheWriteTokens"] = json!(self.cache_write);
                u["reasoningTokens"] = json!(self.reasoning);
            }
            "gemini" => u["reasoningTokens"] = json!(self.reasoning),
            other => panic!("no such provider {other}"),
        }
        u
    }
}

/// In a [`Step::WriteFile`] path, the file named by the prompt "Write
/// <file> with your file-writing tool." of the conversation asking.
pub const RESULT: &str = "{result}";

/// The prompt's sentence that names the file for [`RESULT`].
const RESULT_ASKED: (&str, &str) = ("Write ", " with your file-writing tool");

/// How a request finds its step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepBy {
    /// The dialect's requests in the order they arrive: one conversation
    /// at a time.
    Arrival,
    /// The model turns the request's own conversation already holds, so
    /// that many CLIs at once each go through the whole script.
    Conversation,
}

/// What the API answers, request by request.
#[derive(Debug, Clone)]
pub struct Script {
    pub steps: Vec<Step>,
    /// The model every answer names as the one that served.
    pub served_model: String,
    /// What each answer (not a failure, not a stall) reports.
    pub tokens: Tokens,
    pub step_by: StepBy,
    /// Hold the first step's requests until this many are held, then
    /// answer them all: that many CLIs were running at once. Past
    /// [`GATHER_WITHIN`] the held are answered anyway.
    pub together: Option<usize>,
}

/// How long [`Script::together`] waits for the rest.
pub const GATHER_WITHIN: Duration = Duration::from_secs(90);

/// The requests of one dialect held together (see [`Script::together`]).
#[derive(Default)]
struct Gathering {
    held: usize,
    /// Bumped as the held are let go.
    round: u64,
    /// How many were let go each time.
    sizes: Vec<usize>,
}

impl Gathering {
    /// Let go of every request held here: the round is over.
    fn let_go(&mut self) {
        self.sizes.push(self.held);
        self.held = 0;
        self.round += 1;
    }
}

/// One request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub body: Value,
}

struct Shared {
    root: PathBuf,
    /// The script of each dialect, by the CLI that speaks it.
    scripts: HashMap<&'static str, Script>,
    /// Model requests of each dialect so far (its next step's index).
    next: Mutex<HashMap<&'static str, usize>>,
    gatherings: Mutex<HashMap<&'static str, Gathering>>,
    gathered: Condvar,
    spent: Mutex<HashMap<&'static str, Tokens>>,
    requests: Mutex<Vec<Request>>,
    stop: AtomicBool,
}

pub struct MockApi {
    addr: SocketAddr,
    shared: Arc<Shared>,
    accept: Option<JoinHandle<()>>,
}

impl MockApi {
    /// Start a server for a project at `root` (where the CLI's tool calls
    /// write), answering every dialect as `script` says.
    pub fn start(root: &Path, script: Script) -> MockApi {
        MockApi::per_cli(
            root,
            CLIS.iter().map(|cli| (*cli, script.clone())).collect(),
        )
    }

    /// Start a server with a script of its own for each CLI's dialect
    /// (`claude`, `codex`, `gemini`), so that CLIs of one run answer apart.
    pub fn per_cli(root: &Path, scripts: Vec<(&'static str, Script)>) -> MockApi {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1");
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            root: root.to_path_buf(),
            scripts: scripts.into_iter().collect(),
            next: Mutex::new(HashMap::new()),
            gatherings: Mutex::new(HashMap::new()),
            gathered: Condvar::new(),
            spent: Mutex::new(HashMap::new()),
            requests: Mutex::new(Vec::new()),
            stop: AtomicBool::new(false),
        });
        let s = Arc::clone(&shared);
        let accept = std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.stop.load(Ordering::Relaxed) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                let s = Arc::clone(&s);
                std::thread::spawn(move || serve(&s, conn));
            }
        });
        MockApi {
            addr,
            shared,
            accept: Some(accept),
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// What the answers to `cli` so far reported, summed.
    pub fn spent(&self, cli: &str) -> Tokens {
        self.shared
            .spent
            .lock()
            .unwrap()
            .get(cli)
            .copied()
            .unwrap_or_default()
    }

    /// Every request received, in order.
    pub fn requests(&self) -> Vec<Request> {
        self.shared.requests.lock().unwrap().clone()
    }

    /// How many first requests of `cli` were let go together, each time
    /// (see [`Script::together`]).
    pub fn gathered(&self, cli: &str) -> Vec<usize> {
        self.shared
            .gatherings
            .lock()
            .unwrap()
            .get(cli)
            .map(|g| g.sizes.clone())
            .unwrap_or_default()
    }

    /// Model requests `cli` made (answered, failed or stalled).
    pub fn model_requests(&self, cli: &str) -> usize {
        self.shared
            .next
            .lock()
            .unwrap()
            .get(cli)
            .copied()
            .unwrap_or(0)
    }
}

impl Drop for MockApi {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        // Wake the accepting thread.
        let _ = TcpStream::connect(self.addr);
        if let Some(t) = self.accept.take() {
            let _ = t.join();
        }
    }
}

/// The CLIs, by the dialect each speaks.
const CLIS: [&str; 3] = ["claude", "codex", "gemini"];

/// The vendor a request is for, by its path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Dialect {
    Anthropic,
    OpenAi,
    Gemini,
}

impl Dialect {
    fn cli(self) -> &'static str {
        match self {
            Dialect::Anthropic => "claude",
            Dialect::OpenAi => "codex",
            Dialect::Gemini => "gemini",
        }
    }
}

fn dialect(path: &str) -> Option<Dialect> {
    let path = path.split('?').next().unwrap_or(path);
    if path == "/v1/messages" {
        Some(Dialect::Anthropic)
    } else if path == "/v1/responses" {
        Some(Dialect::OpenAi)
    } else if path.starts_with("/v1beta/models/") && path.ends_with(":streamGenerateContent") {
        Some(Dialect::Gemini)
    } else {
        None
    }
}

fn serve(s: &Shared, conn: TcpStream) {
    let _ = conn.set_read_timeout(Some(Duration::from_secs(30)));
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    let Some(req) = read_request(&mut reader) else {
        return;
    };
    s.requests.lock().unwrap().push(req.clone());
    let Some(dialect) = dialect(&req.path).filter(|_| req.method == "POST") else {
        respond(
            &mut out,
            404,
            "application/json",
            br#"{"error":"not here"}"#,
        );
        return;
    };
    let cli = dialect.cli();
    let Some(script) = s.scripts.get(cli) else {
        respond(
            &mut out,
            404,
            "application/json",
            br#"{"error":"no script"}"#,
        );
        return;
    };
    let index = {
        let mut next = s.next.lock().unwrap();
        let n = next.entry(cli).or_insert(0);
        *n += 1;
        match script.step_by {
            StepBy::Arrival => *n - 1,
            StepBy::Conversation => model_turns(dialect, &req.body),
        }
    };
    if let (0, Some(n)) = (index, script.together) {
        gather(s, cli, n);
    }
    let step = script
        .steps
        .get(index)
        .cloned()
        .unwrap_or_else(|| Step::Answer("done".into()));
    let step = match step {
        Step::WriteFile { path, content } if path.contains(RESULT) => {
            let Some(file) = asked_result(dialect, &req.body) else {
                let body = error_body(dialect, 400);
                respond(&mut out, 400, "application/json", body.as_bytes());
                return;
            };
            Step::WriteFile {
                path: path.replace(RESULT, &file),
                content,
            }
        }
        step => step,
    };
    match step {
        Step::Stall => {
            while !s.stop.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Step::Fail(status) => {
            let body = error_body(dialect, status);
            respond(&mut out, status, "application/json", body.as_bytes());
        }
        Step::KeyInvalid if dialect == Dialect::Gemini => {
            let body = json!({"error": {"code": 400, "message": "API key not valid. Please pass a valid API key.",
                "status": "INVALID_ARGUMENT", "details": [{"@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID", "domain": "googleapis.com"}]}});
            respond(
                &mut out,
                400,
                "application/json",
                body.to_string().as_bytes(),
            );
        }
        Step::KeyInvalid => {
            let body = error_body(dialect, 401);
            respond(&mut out, 401, "application/json", body.as_bytes());
        }
        Step::Answer(_) | Step::WriteFile { .. } | Step::Shell(_) | Step::Tool { .. } => {
            let body = answer(s, script, dialect, &step);
            s.spent
                .lock()
                .unwrap()
                .entry(cli)
                .or_default()
                .add(&script.tokens);
            respond(&mut out, 200, "text/event-stream", body.as_bytes());
        }
    }
}

/// Wait until `n` requests of `cli` wait here, or [`GATHER_WITHIN`] has
/// passed; the last to come lets them all go.
fn gather(s: &Shared, cli: &'static str, n: usize) {
    let deadline = Instant::now() + GATHER_WITHIN;
    let mut all = s.gatherings.lock().unwrap();
    let g = all.entry(cli).or_default();
    g.held += 1;
    let round = g.round;
    if g.held >= n {
        g.let_go();
        s.gathered.notify_all();
        return;
    }
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        all = s.gathered.wait_timeout(all, left).unwrap().0;
        let g = all.get_mut(cli).expect("the gathering");
        if g.round != round {
            return;
        }
        if left.is_zero() {
            // The rest never came: let go of those here.
            g.let_go();
            s.gathered.notify_all();
            return;
        }
    }
}

/// How many model turns the conversation a request carries already holds
/// (each CLI sends its whole conversation every time): claude's
/// `assistant` messages; codex's model output items (`message`s of the
/// assistant, `function_call`s, `reasoning`) in `input`; gemini's `model`
/// contents.
fn model_turns(dialect: Dialect, body: &Value) -> usize {
    let items = |key: &str| body[key].as_array().map(Vec::as_slice).unwrap_or_default();
    match dialect {
        Dialect::Anthropic => items("messages")
            .iter()
            .filter(|m| m["role"] == "assistant")
            .count(),
        // One model answer may be several items (reasoning, then a call):
        // count the runs of them between the CLI's own items.
        Dialect::OpenAi => {
            let from_model = |i: &Value| match i["type"].as_str() {
                Some("function_call" | "reasoning" | "custom_tool_call") => true,
                Some("message") | None => i["role"] == "assistant",
                _ => false,
            };
            let mut turns = 0;
            let mut inside = false;
            for i in items("input") {
                let m = from_model(i);
                if m && !inside {
                    turns += 1;
                }
                inside = m;
            }
            turns
        }
        Dialect::Gemini => items("contents")
            .iter()
            .filter(|c| c["role"] == "model")
            .count(),
    }
}

/// The file a request's conversation asks for in the words of
/// [`RESULT_ASKED`]: the first such sentence in its text.
fn asked_result(dialect: Dialect, body: &Value) -> Option<String> {
    let mut texts = Vec::new();
    collect_strings(
        match dialect {
            Dialect::Anthropic => &body["messages"],
            Dialect::OpenAi => &body["input"],
            Dialect::Gemini => &body["contents"],
        },
        &mut texts,
    );
    let (before, after) = RESULT_ASKED;
    texts.iter().find_map(|t| {
        t.match_indices(before).find_map(|(at, _)| {
            let rest = &t[at + before.len()..];
            let end = rest.find(after)?;
            let file = &rest[..end];
            (!file.is_empty() && !file.contains(char::is_whitespace)).then(|| file.to_string())
        })
    })
}

/// Every string in `v`, depth first.
fn collect_strings<'a>(v: &'a Value, out: &mut Vec<&'a str>) {
    match v {
        Value::String(s) => out.push(s),
        Value::Array(a) => a.iter().for_each(|v| collect_strings(v, out)),
        Value::Object(o) => o.values().for_each(|v| collect_strings(v, out)),
        _ => {}
    }
}

/// Read one HTTP/1.1 request: its line, headers and body (by
/// `Content-Length`, or chunked).
fn read_request(r: &mut BufReader<TcpStream>) -> Option<Request> {
    let mut line = String::new();
    r.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut length = 0usize;
    let mut chunked = false;
    loop {
        let mut h = String::new();
        if r.read_line(&mut h).ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        let (name, value) = h.split_once(':')?;
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => length = value.trim().parse().ok()?,
            "transfer-encoding" => chunked = value.to_ascii_lowercase().contains("chunked"),
            _ => {}
        }
    }
    let mut body = Vec::new();
    if chunked {
        loop {
            let mut size = String::new();
            r.read_line(&mut size).ok()?;
            let n = usize::from_str_radix(size.trim().split(';').next()?, 16).ok()?;
            let mut chunk = vec![0; n + 2];
            r.read_exact(&mut chunk).ok()?;
            if n == 0 {
                break;
            }
            body.extend_from_slice(&chunk[..n]);
        }
    } else {
        body.resize(length, 0);
        r.read_exact(&mut body).ok()?;
    }
    Some(Request {
        method,
        path,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    })
}

fn respond(out: &mut TcpStream, status: u16, content_type: &str, body: &[u8]) {
    let head = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        if status == 200 { "OK" } else { "Error" },
        body.len()
    );
    let _ = out.write_all(head.as_bytes());
    let _ = out.write_all(body);
    let _ = out.flush();
}

fn error_body(dialect: Dialect, status: u16) -> String {
    if status == 401 {
        return key_refused_body(dialect);
    }
    let message = format!("the mock API refuses this request (HTTP {status})");
    match dialect {
        Dialect::Anthropic => {
            json!({"type": "error", "error": {"type": "invalid_request_error", "message": message}})
        }
        Dialect::OpenAi => {
            json!({"error": {"type": "invalid_request_error", "message": message, "code": null}})
        }
        Dialect::Gemini => {
            json!({"error": {"code": status, "message": message, "status": "INVALID_ARGUMENT"}})
        }
    }
    .to_string()
}

/// What each vendor's API answers a bad key with, 401.
fn key_refused_body(dialect: Dialect) -> String {
    match dialect {
        Dialect::Anthropic => json!({"type": "error", "request_id": "req_mock",
            "error": {"type": "authentication_error", "message": "invalid x-api-key"}}),
        Dialect::OpenAi => json!({"error": {"type": "invalid_request_error", "param": null,
            "code": "invalid_api_key",
            "message": "Incorrect API key provided: mock-key. You can find your API key at https://platform.openai.com/account/api-keys."}}),
        Dialect::Gemini => json!({"error": {"code": 401, "status": "UNAUTHENTICATED",
            "message": "Request had invalid authentication credentials."}}),
    }
    .to_string()
}

/// An answer (a tool call or text) as `dialect`'s stream.
fn answer(s: &Shared, script: &Script, dialect: Dialect, step: &Step) -> String {
    let n = s.requests.lock().unwrap().len();
    let t = &script.tokens;
    let model = &script.served_model;
    // An absolute path replaces the root (`Path::join`).
    let abs = |p: &str| s.root.join(p).display().to_string();
    match dialect {
        Dialect::Anthropic => {
            let ev = |name: &str, data: Value| format!("event: {name}\ndata: {data}\n\n");
            let mut out = ev(
                "message_start",
                json!({"type": "message_start", "message": {
                    "id": format!("msg_mock_{n}"), "type": "message", "role": "assistant",
                    "model": model, "content": [], "stop_reason": null, "stop_sequence": null,
                    "usage": {"input_tokens": t.fresh_input, "cache_creation_input_tokens": t.cache_write,
                              "cache_read_input_tokens": t.cache_read, "output_tokens": 1}}}),
            );
            let stop = match step {
                Step::WriteFile { path, content } => {
                    out += &ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block":
                               {"type": "tool_use", "id": format!("toolu_mock_{n}"), "name": "Write", "input": {}}}),
                    );
                    let input = json!({"file_path": abs(path), "content": content}).to_string();
                    out += &ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input}}),
                    );
                    "tool_use"
                }
                Step::Shell(command) => {
                    out += &ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block":
                               {"type": "tool_use", "id": format!("toolu_mock_{n}"), "name": "Bash", "input": {}}}),
                    );
                    let input = json!({"command": command, "description": "run it"}).to_string();
                    out += &ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input}}),
                    );
                    "tool_use"
                }
                Step::Tool { name, input } => {
                    out += &ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block":
                               {"type": "tool_use", "id": format!("toolu_mock_{n}"), "name": name, "input": {}}}),
                    );
                    out += &ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": input.to_string()}}),
                    );
                    "tool_use"
                }
                Step::Answer(text) => {
                    out += &ev(
                        "content_block_start",
                        json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                    );
                    out += &ev(
                        "content_block_delta",
                        json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}}),
                    );
                    "end_turn"
                }
                _ => unreachable!("only answers are streamed"),
            };
            out += &ev(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": 0}),
            );
            out += &ev(
                "message_delta",
                json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null},
                       "usage": {"output_tokens": t.output + t.reasoning}}),
            );
            out + &ev("message_stop", json!({"type": "message_stop"}))
        }
        Dialect::OpenAi => {
            let ev = |data: Value| {
                format!(
                    "event: {}\ndata: {data}\n\n",
                    data["type"].as_str().unwrap_or("")
                )
            };
            let id = format!("resp_mock_{n}");
            let item = match step {
                Step::WriteFile { path, content } => {
                    let added: String = content.lines().map(|l| format!("+{l}\n")).collect();
                    let cmd = format!(
                        "apply_patch <<'PATCH'\n*** Begin Patch\n*** Add File: {path}\n{added}*** End Patch\nPATCH\n"
                    );
                    json!({"type": "function_call", "id": format!("fc_mock_{n}"), "call_id": format!("call_mock_{n}"),
                           "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string()})
                }
                Step::Shell(cmd) => {
                    json!({"type": "function_call", "id": format!("fc_mock_{n}"), "call_id": format!("call_mock_{n}"),
                           "name": "exec_command", "arguments": json!({"cmd": cmd}).to_string()})
                }
                Step::Tool { name, input } => {
                    json!({"type": "function_call", "id": format!("fc_mock_{n}"), "call_id": format!("call_mock_{n}"),
                           "name": name, "arguments": input.to_string()})
                }
                Step::Answer(text) => {
                    json!({"type": "message", "role": "assistant", "id": format!("msg_mock_{n}"),
                                             "content": [{"type": "output_text", "text": text}]})
                }
                _ => unreachable!("only answers are streamed"),
            };
            let input = t.fresh_input + t.cache_read + t.cache_write;
            let output = t.output + t.reasoning;
            ev(json!({"type": "response.created", "response": {"id": id, "model": model}}))
                + &ev(json!({"type": "response.output_item.done", "output_index": 0, "item": item}))
                + &ev(
                    json!({"type": "response.completed", "response": {"id": id, "model": model, "usage": {
                    "input_tokens": input,
                    "input_tokens_details": {"cached_tokens": t.cache_read, "cache_write_tokens": t.cache_write},
                    "output_tokens": output,
                    "output_tokens_details": {"reasoning_tokens": t.reasoning},
                    "total_tokens": input + output}}}),
                )
        }
        Dialect::Gemini => {
            assert_eq!(t.cache_write, 0, "Gemini's API has no cache-write count");
            let parts = match step {
                Step::WriteFile { path, content } => {
                    json!([{"functionCall": {"name": "write_file", "args": {"file_path": abs(path), "content": content}}}])
                }
                Step::Shell(command) => {
                    json!([{"functionCall": {"name": "run_shell_command", "args": {"command": command}}}])
                }
                Step::Tool { name, input } => {
                    json!([{"functionCall": {"name": name, "args": input}}])
                }
                Step::Answer(text) => json!([{"text": text}]),
                _ => unreachable!("only answers are streamed"),
            };
            let prompt = t.fresh_input + t.cache_read;
            let chunk = json!({
                "candidates": [{"content": {"parts": parts, "role": "model"}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": prompt, "cachedContentTokenCount": t.cache_read,
                                  "candidatesTokenCount": t.output, "thoughtsTokenCount": t.reasoning,
                                  "totalTokenCount": prompt + t.output + t.reasoning},
                "modelVersion": model,
                "responseId": format!("mock-{n}"),
            });
            format!("data: {chunk}\r\n\r\n")
        }
    }
}

// ---------------------------------------------------------------------------
// A conversation's step and its result, from bodies shaped as each CLI
// sends them (claude 2.1.197, codex 0.171, gemini 0.61).
// ---------------------------------------------------------------------------

#[test]
fn a_conversation_counts_its_own_model_turns() {
    let claude = json!({"messages": [
        {"role": "user", "content": [{"type": "text", "text": "<system-reminder>...</system-reminder>"},
                                     {"type": "text", "text": "Write out/a.md with your file-writing tool."}]},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "Write", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]},
    ]});
    assert_eq!(model_turns(Dialect::Anthropic, &claude), 1);
    // codex sends its whole input each time (no `previous_response_id`);
    // one answer's reasoning and call are one turn.
    let codex = json!({"input": [
        {"type": "message", "role": "developer", "content": [{"type": "input_text", "text": "You are"}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Write out/b.md with your file-writing tool.\n"}]},
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "ok"},
    ]});
    assert_eq!(model_turns(Dialect::OpenAi, &codex), 2);
    let gemini = json!({"contents": [
        {"role": "user", "parts": [{"text": "context"}, {"text": "Write out/c.md with your file-writing tool."}]},
        {"role": "model", "parts": [{"functionCall": {"name": "write_file", "args": {}}}]},
        {"role": "user", "parts": [{"functionResponse": {"name": "write_file", "response": {}}}]},
    ]});
    assert_eq!(model_turns(Dialect::Gemini, &gemini), 1);
    assert_eq!(
        asked_result(Dialect::Anthropic, &claude).as_deref(),
        Some("out/a.md")
    );
    assert_eq!(
        asked_result(Dialect::OpenAi, &codex).as_deref(),
        Some("out/b.md")
    );
    assert_eq!(
        asked_result(Dialect::Gemini, &gemini).as_deref(),
        Some("out/c.md")
    );
    // A first request: no turn yet.
    assert_eq!(
        model_turns(
            Dialect::Anthropic,
            &json!({"messages": [claude["messages"][0]]})
        ),
        0
    );
}

#[test]
fn no_result_is_asked_without_the_sentence() {
    let body = json!({"messages": [{"role": "user", "content": "Write the report with your file-writing tool."}]});
    assert_eq!(asked_result(Dialect::Anthropic, &body), None);
    let body = json!({"messages": [{"role": "user", "content": "Write it down. Write out/x.md with your file-writing tool."}]});
    assert_eq!(
        asked_result(Dialect::Anthropic, &body).as_deref(),
        Some("out/x.md")
    );
}
