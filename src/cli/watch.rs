//! `okstra watch`: a live view of a run, from another terminal
//! (docs/cli.md#okstra-watch). The terminal view where there is one; a
//! plain table, printed again as the run changes, where there is not.

use super::status::locate;
use super::{report, Ended};
use okstra::diag::{Code, Diagnostic, Diagnostics, ExitStatus, Format};
use okstra::watch::changes::Changes;
use okstra::watch::ui::{self, Frameset, Key, Screen};
use okstra::watch::{view, RunFiles, Source};
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::time::{Duration, Instant};

#[derive(clap::Args, Debug)]
pub struct WatchArgs {
    /// The run manifest.
    #[arg(long, value_name = "M")]
    pub manifest: PathBuf,
    /// The project root the manifest's paths are relative to.
    #[arg(long, default_value = ".", value_name = "R")]
    pub project_root: PathBuf,
    /// Print the plain table once and exit.
    #[arg(long)]
    pub once: bool,
    /// Print plain tables as the run changes, even on a terminal that has
    /// cursor control (the default where stdout is not a terminal or
    /// TERM=dumb).
    #[arg(long)]
    pub plain: bool,
    /// Draw N frames of the terminal view (80×24) in memory and report the
    /// time per frame (benches/watch.sh).
    #[arg(long, hide = true, value_name = "N")]
    pub bench_redraws: Option<usize>,
}

/// What wakes the watch up.
enum Wake {
    /// Files changed (their paths).
    Files(Vec<PathBuf>),
    Key(Key),
    /// The terminal was resized.
    Redraw,
}

pub fn watch(args: &WatchArgs) -> Ended {
    let (task, mut source) = match open(args) {
        Ok(found) => found,
        Err(d) => return Ok(report(&Diagnostics::from(d), Format::Text)),
    };
    if let Some(frames) = args.bench_redraws {
        return bench(&task, &mut source, frames);
    }
    if args.once {
        out!("{}", plain(&task, &mut source))?;
        return Ok(ExitStatus::Success);
    }
    let dumb = std::env::var_os("TERM").is_some_and(|t| t == "dumb");
    if args.plain || dumb || !std::io::stdout().is_terminal() {
        return plain_loop(&task, &mut source);
    }
    match live(&task, &mut source) {
        Ok(()) => Ok(ExitStatus::Success),
        Err(d) => Ok(report(&Diagnostics::from(d), Format::Text)),
    }
}

/// The run the manifest names, read as far as it goes now: its task key
/// and its source.
fn open(args: &WatchArgs) -> Result<(String, Source), Diagnostic> {
    let run = locate(&args.manifest, &args.project_root)?;
    let task = okstra::model::str_of(&run.manifest, "taskKey").to_string();
    let events = match okstra::model::str_of(&run.manifest, "leadEventsPath") {
        // Where `okstra plan` puts it when the manifest says nothing
        // (src/compile/mod.rs, `or_sibling`): beside team-state.
        "" => run
            .path
            .parent()
            .unwrap_or(Path::new(""))
            .join("lead-events.jsonl"),
        path => okstra::paths::abs_of(&run.root, path),
    };
    let files = RunFiles {
        root: run.root,
        team_state: run.path,
        events,
    };
    let mut source = Source::new(files);
    refresh(&mut source)?;
    source.read_all_sidecars();
    Ok((task, source))
}

/// Read what the run wrote since the last look. A run that can no longer
/// be read (team-state unparseable, the events log unreadable) ends the
/// watch with `exec/state`: never a view that stopped moving in silence.
fn refresh(source: &mut Source) -> Result<(), Diagnostic> {
    source.refresh().map_err(|e| {
        Diagnostic::new(Code::ExecState, format!("cannot read the run: {e}"))
            .in_file(source.files.team_state.display().to_string())
    })
}

fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// The plain table of the run now.
fn plain(task: &str, source: &mut Source) -> String {
    let exec = source.exec_running();
    let Source { model, files, .. } = source;
    let mut log = |job: &okstra::watch::Job| {
        job.prompt
            .as_deref()
            .map(|p| okstra::watch::source::last_line(&files.log_of(p)))
            .unwrap_or_default()
    };
    view::plain(task, model, now(), exec, &mut log)
}

/// Watch the run's files; each change (and each key, where the terminal
/// gives them) wakes the receiver.
/// `None` where inotify is not to be had (its limit reached): the clock
/// still refreshes the view once a second.
fn wake_on_changes(source: &Source) -> (Option<Changes>, mpsc::Sender<Wake>, mpsc::Receiver<Wake>) {
    let (tx, rx) = mpsc::channel();
    let files = tx.clone();
    let mut changes = Changes::start(move |paths| {
        let _ = files.send(Wake::Files(paths));
    })
    .ok();
    watch_dirs(&mut changes, source);
    (changes, tx, rx)
}

/// Watch the directories the run now has files in.
fn watch_dirs(changes: &mut Option<Changes>, source: &Source) {
    if let Some(c) = changes.as_mut() {
        c.watch(source.dirs().iter().map(PathBuf::as_path));
    }
}

/// Take in what woke the watch, and whatever else came within 50 ms
/// (changes come in bursts): the keys pressed meanwhile.
fn settle(first: Wake, rx: &mpsc::Receiver<Wake>, source: &mut Source) -> Vec<Key> {
    let mut keys = Vec::new();
    let until = Instant::now() + Duration::from_millis(50);
    let mut next = Some(first);
    while let Some(wake) = next {
        match wake {
            Wake::Files(paths) => {
                for p in paths {
                    if p.to_string_lossy().ends_with(".status.json") {
                        source.read_sidecar(&p);
                    }
                }
            }
            Wake::Key(k) => {
                keys.push(k);
                // A key is answered at once.
                break;
            }
            Wake::Redraw => {}
        }
        next = rx
            .recv_timeout(until.saturating_duration_since(Instant::now()))
            .ok();
    }
    keys
}

/// Print the plain table as the run changes, at most once a second, until
/// every job settled and no exec holds the run (or SIGINT).
fn plain_loop(task: &str, source: &mut Source) -> Ended {
    let (mut changes, _tx, rx) = wake_on_changes(source);
    let mut last = String::new();
    let mut printed = Instant::now() - Duration::from_secs(1);
    loop {
        if let Err(d) = refresh(source) {
            return Ok(report(&Diagnostics::from(d), Format::Text));
        }
        watch_dirs(&mut changes, source);
        let table = plain(task, source);
        let done = !source.exec_running() && source.model.totals().settled();
        if table != last && (done || printed.elapsed() >= Duration::from_secs(1)) {
            let stamp = humantime::format_rfc3339_seconds(std::time::SystemTime::now());
            out!(
                "{}── {stamp}\n{table}",
                if last.is_empty() { "" } else { "\n" }
            )?;
            last = table;
            printed = Instant::now();
        }
        if done {
            return Ok(ExitStatus::Success);
        }
        let wait = Duration::from_secs(1).saturating_sub(printed.elapsed());
        if let Ok(wake) = rx.recv_timeout(wait.max(Duration::from_millis(200))) {
            settle(wake, &rx, source);
        }
    }
}

/// Restores the terminal when dropped: on every way out of [`live`].
struct Restore;

impl Drop for Restore {
    fn drop(&mut self) {
        ratatui::restore();
    }
}

/// The terminal view, until `q` or Ctrl-C.
fn live(task: &str, source: &mut Source) -> Result<(), Diagnostic> {
    let terminal_error = |e: std::io::Error| {
        Diagnostic::new(Code::InputUnreadable, format!("okstra watch: {e}"))
            .help("run it in a terminal, or pass --plain")
    };
    let (mut changes, tx, rx) = wake_on_changes(source);
    // Installs a panic hook that restores the terminal too.
    let mut terminal = ratatui::try_init().map_err(terminal_error)?;
    let _restore = Restore;
    std::thread::spawn(move || read_keys(&tx));
    let mut screen = Screen::default();
    screen.color = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    loop {
        refresh(source)?;
        watch_dirs(&mut changes, source);
        let exec_running = source.exec_running();
        draw(&mut terminal, &mut screen, task, source, exec_running).map_err(terminal_error)?;
        // Once a second at least: the clocks of running jobs move.
        let Ok(wake) = rx.recv_timeout(Duration::from_secs(1)) else {
            continue;
        };
        for key in settle(wake, &rx, source) {
            if !screen.key(key, &source.model) {
                return Ok(());
            }
        }
    }
}

/// One frame of the view on `terminal`.
fn draw<B: ratatui::backend::Backend>(
    terminal: &mut ratatui::Terminal<B>,
    screen: &mut Screen,
    task: &str,
    source: &mut Source,
    exec_running: bool,
) -> Result<(), B::Error> {
    let Source { model, files, .. } = &mut *source;
    terminal
        .draw(|frame| {
            let f = Frameset {
                task,
                model,
                files,
                now: now(),
                exec_running,
            };
            ui::draw(frame, screen, f)
        })
        .map(drop)
}

/// Send the keys the view answers (and resizes) to `tx`, until it is gone.
fn read_keys(tx: &mpsc::Sender<Wake>) {
    use ratatui::crossterm::event::{self, Event, KeyCode, KeyEventKind, KeyModifiers};
    while let Ok(e) = event::read() {
        let wake = match e {
            Event::Key(k) if k.kind != KeyEventKind::Release => {
                let key = match k.code {
                    KeyCode::Char('c') if k.modifiers.contains(KeyModifiers::CONTROL) => Key::Quit,
                    KeyCode::Char('q') => Key::Quit,
                    KeyCode::Up | KeyCode::Char('k') => Key::Up,
                    KeyCode::Down | KeyCode::Char('j') => Key::Down,
                    KeyCode::PageUp => Key::PageUp,
                    KeyCode::PageDown | KeyCode::Char(' ') => Key::PageDown,
                    KeyCode::Home | KeyCode::Char('g') => Key::Home,
                    KeyCode::End | KeyCode::Char('G') => Key::End,
                    KeyCode::Enter | KeyCode::Char('l') => Key::Follow,
                    KeyCode::Esc | KeyCode::Char('h') => Key::Back,
                    _ => continue,
                };
                Wake::Key(key)
            }
            Event::Resize(..) => Wake::Redraw,
            _ => continue,
        };
        if tx.send(wake).is_err() {
            return;
        }
    }
}

/// `--bench-redraws N`: N frames of the 80×24 view drawn in memory,
/// scrolling a page each; the time per frame on stdout.
fn bench(task: &str, source: &mut Source, frames: usize) -> Ended {
    use ratatui::backend::TestBackend;
    let mut terminal = match ratatui::Terminal::new(TestBackend::new(80, 24)) {
        Ok(t) => t,
        Err(e) => panic!("an in-memory terminal: {e}"),
    };
    let mut screen = Screen::default();
    let exec_running = source.exec_running();
    let mut worst = Duration::ZERO;
    let start = Instant::now();
    for _ in 0..frames {
        let t = Instant::now();
        let drawn = draw(&mut terminal, &mut screen, task, source, exec_running);
        if let Err(e) = drawn {
            panic!("drawing in memory: {e}");
        }
        screen.key(Key::PageDown, &source.model);
        worst = worst.max(t.elapsed());
    }
    let each = start.elapsed().as_secs_f64() * 1e3 / frames.max(1) as f64;
    outln!(
        "{} jobs, {frames} frames: {each:.2} ms per frame, worst {:.2} ms",
        source.model.len(),
        worst.as_secs_f64() * 1e3
    )?;
    Ok(ExitStatus::Success)
}
