//! Mutation audit at scale, next to `git status --porcelain` on the same
//! warm tree in the same run. `cargo bench --bench audit` (release build).
//!
//! For each size it generates `files` files in `dirs` directories, commits
//! them to a fresh git repository, waits until they are no longer racily
//! clean, warms the page cache, then takes the median of several rounds of:
//! no change (snapshot, compare, git status) and ten changed files (snapshot,
//! change, compare, git status). A third series chains the compares the way
//! a pipeline whose executor reuses each compare's walk as the next stage's
//! baseline would: ten changed files, then one compare against the previous
//! round's after walk, no snapshot.

use okstra::audit::{self, SnapshotOptions};
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const ROUNDS: usize = 7;

fn main() {
    let sizes: Vec<(usize, usize)> = match std::env::var("OKSTRA_BENCH_SIZES") {
        Ok(s) => s
            .split(',')
            .filter_map(|p| {
                let (f, d) = p.split_once('/')?;
                Some((f.parse().ok()?, d.parse().ok()?))
            })
            .collect(),
        Err(_) => vec![(10_000, 100), (100_000, 1_000)],
    };
    println!(
        "machine: {} cores, {}",
        std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(0),
        cpu_model()
    );
    println!("git: {}", git_version());
    println!("rounds: {ROUNDS} (median shown)\n");
    println!("| tree | case | okstra snapshot | okstra compare | okstra snapshot + compare | git status --porcelain | (snapshot + compare) / git | compare / git |");
    println!("| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: |");
    for (files, dirs) in sizes {
        run(files, dirs);
    }
}

fn run(files: usize, dirs: usize) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("proj");
    let t = Instant::now();
    generate(&root, files, dirs);
    git(&root, &["init", "-q", "-b", "main"]);
    // A commit of 100k new objects would start `git gc --auto` in the
    // background, repacking .git while the rounds run: a change the audit
    // rightly reports, and a competitor for the two cores.
    git(&root, &["config", "gc.auto", "0"]);
    git(&root, &["config", "maintenance.auto", "false"]);
    git(&root, &["add", "-A"]);
    git(&root, &["commit", "-qm", "tree"]);
    // The new files' writeback must not overlap the timed rounds: at 100k
    // files the kernel's flusher otherwise competes for the two cores during
    // the first rounds (and the no-change case, timed first, paid for it).
    let synced = Command::new("sync")
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    assert!(synced, "sync failed");
    let ready = Instant::now();
    eprintln!(
        "generated, committed and synced {files} files in {:?}",
        t.elapsed()
    );
    // Past the racy window: the steady state, where stat alone decides.
    if let Some(rest) = Duration::from_millis(2500).checked_sub(ready.elapsed()) {
        std::thread::sleep(rest);
    }
    let roots = vec![root.clone()];
    let opts = SnapshotOptions {
        roots: &roots,
        project_root: &root,
        exclude: &[],
    };
    // Warm both sides.
    for _ in 0..2 {
        git_status(&root);
        let s = audit::snapshot(&opts).unwrap();
        audit::compare(&s, &opts).unwrap();
    }

    let label = format!("{}k files / {} dirs", files / 1000, dirs);
    let mut nc = Times::default();
    for _ in 0..ROUNDS {
        let (s, ts) = timed(|| audit::snapshot(&opts).unwrap());
        let (c, tc) = timed(|| audit::compare(&s, &opts).unwrap());
        assert!(c.changes.changed.is_empty(), "{:?}", c.changes.changed);
        let (out, tg) = timed(|| git_status(&root));
        assert!(out.is_empty(), "{out}");
        nc.push(ts, tc, tg);
    }
    nc.print(&label, "no change");

    let mut ch = Times::default();
    let mut sidecar = (Duration::ZERO, Duration::ZERO, 0usize);
    for round in 0..ROUNDS {
        let (s, ts) = timed(|| audit::snapshot(&opts).unwrap());
        if round == 0 {
            let (text, tw) = timed(|| s.to_json());
            let (_, tr) = timed(|| audit::Snapshot::from_json(&text).unwrap());
            sidecar = (tw, tr, text.len());
        }
        let changed = change_ten(&root, files, dirs, round);
        let (c, tc) = timed(|| audit::compare(&s, &opts).unwrap());
        assert_eq!(c.changes.changed.len(), 10, "{:?}", c.changes.changed);
        let (out, tg) = timed(|| git_status(&root));
        assert_eq!(out.lines().count(), 10, "{out}");
        ch.push(ts, tc, tg);
        for p in changed {
            git(&root, &["checkout", "-q", "--", &p]);
        }
    }
    ch.print(&label, "10 files changed");

    // Chained: each stage's baseline is the previous compare's after walk.
    let mut chained = Times::default();
    let mut base = audit::snapshot(&opts).unwrap();
    for round in 0..ROUNDS {
        let changed = change_ten(&root, files, dirs, round + ROUNDS);
        let (c, tc) = timed(|| audit::compare(&base, &opts).unwrap());
        assert_eq!(c.changes.changed.len(), 10, "{:?}", c.changes.changed);
        let (out, tg) = timed(|| git_status(&root));
        assert_eq!(out.lines().count(), 10, "{out}");
        chained.push(Duration::ZERO, tc, tg);
        base = c.after;
        for p in changed {
            git(&root, &["checkout", "-q", "--", &p]);
        }
        // The checkout is a change too: the next round's baseline is the
        // tree after it, as a stage that follows would see it.
        base = audit::compare(&base, &opts).unwrap().after;
    }
    chained.print_chained(&label, "10 files changed, chained");
    eprintln!(
        "{label}: snapshot sidecar {} KiB, write JSON {:.1} ms, read JSON {:.1} ms",
        sidecar.2 / 1024,
        ms(sidecar.0),
        ms(sidecar.1)
    );
}

#[derive(Default)]
struct Times {
    snap: Vec<Duration>,
    cmp: Vec<Duration>,
    both: Vec<Duration>,
    git: Vec<Duration>,
}

impl Times {
    fn push(&mut self, s: Duration, c: Duration, g: Duration) {
        self.snap.push(s);
        self.cmp.push(c);
        self.both.push(s + c);
        self.git.push(g);
    }

    fn print(&mut self, tree: &str, case: &str) {
        let s = median(&mut self.snap);
        let c = median(&mut self.cmp);
        let b = median(&mut self.both);
        let g = median(&mut self.git);
        println!(
            "| {tree} | {case} | {:.1} ms | {:.1} ms | {:.1} ms | {:.1} ms | {:.2}x | {:.2}x |",
            ms(s),
            ms(c),
            ms(b),
            ms(g),
            ms(b) / ms(g),
            ms(c) / ms(g)
        );
    }
}

impl Times {
    fn print_chained(&mut self, tree: &str, case: &str) {
        let c = median(&mut self.cmp);
        let g = median(&mut self.git);
        println!(
            "| {tree} | {case} | - | {:.1} ms | {:.1} ms | {:.1} ms | {:.2}x | {:.2}x |",
            ms(c),
            ms(c),
            ms(g),
            ms(c) / ms(g),
            ms(c) / ms(g)
        );
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let t = Instant::now();
    let v = f();
    (v, t.elapsed())
}

fn generate(root: &Path, files: usize, dirs: usize) {
    let per = files / dirs;
    for d in 0..dirs {
        let dir = root.join(format!("d{d:04}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..per {
            fs::write(
                dir.join(format!("f{f:04}.txt")),
                format!("file {f} of directory {d}\n"),
            )
            .unwrap();
        }
    }
}

/// Change ten files spread over the tree, the way one worker might.
fn change_ten(root: &Path, files: usize, dirs: usize, round: usize) -> Vec<String> {
    let per = files / dirs;
    (0..10)
        .map(|i| {
            let d = (i * dirs / 10 + round) % dirs;
            let f = (i * 7 + round) % per;
            let rel = format!("d{d:04}/f{f:04}.txt");
            let p: PathBuf = root.join(&rel);
            let mut text = fs::read_to_string(&p).unwrap();
            text.push_str("edited by a worker\n");
            fs::write(&p, text).unwrap();
            rel
        })
        .collect()
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=bench",
            "-c",
            "user.email=bench@example.invalid",
        ])
        .args(["-c", "commit.gpgsign=false"])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn git_status(dir: &Path) -> String {
    let out = Command::new("git")
        .args(["status", "--porcelain"])
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn git_version() -> String {
    Command::new("git")
        .arg("--version")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}

fn cpu_model() -> String {
    fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown cpu".into())
}
