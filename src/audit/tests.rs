//! The walk and compare, on real trees in temp dirs: every way a change
//! could hide, each beside a near miss that must pass.

use super::*;
use crate::plan::WritePolicy;
use crate::policy;
use std::fs;
use std::os::unix::fs::{symlink, MetadataExt, PermissionsExt};
use std::process::Command;
use std::time::UNIX_EPOCH;

struct Tree {
    _tmp: tempfile::TempDir,
    root: PathBuf,
    roots: Vec<PathBuf>,
    exclude: Vec<PathBuf>,
}

impl Tree {
    fn new(files: &[&str]) -> Tree {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("proj");
        fs::create_dir(&root).unwrap();
        for f in files {
            write(&root.join(f), "content\n");
        }
        Tree {
            roots: vec![root.clone()],
            root,
            exclude: Vec::new(),
            _tmp: tmp,
        }
    }

    fn opts(&self) -> SnapshotOptions<'_> {
        SnapshotOptions {
            roots: &self.roots,
            project_root: &self.root,
            exclude: &self.exclude,
        }
    }

    fn snap(&self) -> Snapshot {
        snapshot(&self.opts()).unwrap()
    }

    fn compare(&self, before: &Snapshot) -> Changes {
        compare(before, &self.opts()).unwrap().changes
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }
}

fn write(p: &Path, text: &str) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, text).unwrap();
}

/// The same snapshot as if every file were old: no hashes, so compare
/// must rely on stat alone.
fn aged(mut s: Snapshot) -> Snapshot {
    for es in s.dirs.iter_mut() {
        for e in es {
            e.hash = None;
        }
    }
    s
}

fn kinds(c: &Changes) -> Vec<(String, &'static str)> {
    c.changed
        .iter()
        .map(|c| (c.path.clone(), c.kind.as_str()))
        .collect()
}

fn pol(role: &str, allow: &[&str]) -> WritePolicy {
    let mut p = WritePolicy {
        role: role.into(),
        allow: allow.iter().map(|s| s.to_string()).collect(),
        digest: String::new(),
    };
    p.digest = policy::digest_of(&p);
    p
}

fn judge_ok(c: &Changes, own: &WritePolicy) -> AuditResult {
    judge(c, own, std::slice::from_ref(own), &[], true, true)
}

#[test]
fn no_change_means_no_changes_and_equal_digests() {
    let t = Tree::new(&["a.txt", "src/b.rs"]);
    for before in [t.snap(), aged(t.snap())] {
        let c = t.compare(&before);
        assert!(c.changed.is_empty(), "{:?}", c.changed);
        assert_eq!(c.before_digest, c.after_digest);
        let r = judge_ok(&c, &pol("analyst", &["out.md"]));
        assert_eq!(r.status.as_str(), "ok");
        assert_eq!(r.attribution, "none");
    }
}

#[test]
fn snapshot_round_trips_through_json() {
    let t = Tree::new(&["a.txt", "d/e/f.txt"]);
    symlink("a.txt", t.p("ln")).unwrap();
    let s = t.snap();
    let text = serde_json::to_string(&s).unwrap();
    let back: Snapshot = serde_json::from_str(&text).unwrap();
    assert_eq!(back, s);
    assert!(t.compare(&back).changed.is_empty());
}

#[test]
fn file_replaced_by_symlink_to_outside_is_a_type_change_and_a_violation() {
    let t = Tree::new(&["src/a.rs", "secret.txt"]);
    let before = t.snap();
    fs::remove_file(t.p("src/a.rs")).unwrap();
    symlink("../secret.txt", t.p("src/a.rs")).unwrap();
    let c = t.compare(&before);
    assert_eq!(kinds(&c), vec![("src/a.rs".to_string(), "type")]);
    assert_eq!(c.changed[0].target.as_deref(), Some("../secret.txt"));
    assert_eq!(c.changed[0].resolved.as_deref(), Some("secret.txt"));
    // The link's own path is allowed; where it points is not.
    let r = judge_ok(&c, &pol("implementer", &["src/**"]));
    assert_eq!(r.status.as_str(), "contract-failed-unattributed");
    assert_eq!(r.violations, vec!["src/a.rs"]);
    assert!(!r.retry_allowed);
    // An absolute target outside the tree is caught the same way.
    fs::remove_file(t.p("src/a.rs")).unwrap();
    symlink("/etc/passwd", t.p("src/a.rs")).unwrap();
    let c = t.compare(&before);
    assert_eq!(c.changed[0].resolved.as_deref(), Some("/etc/passwd"));
    let r = judge_ok(&c, &pol("implementer", &["src/**"]));
    assert_eq!(r.violations, vec!["src/a.rs"]);
    // A link inside the allowed area to the allowed area is fine.
    fs::remove_file(t.p("src/a.rs")).unwrap();
    symlink("b.rs", t.p("src/a.rs")).unwrap();
    let r = judge_ok(&t.compare(&before), &pol("implementer", &["src/**"]));
    assert_eq!(r.status.as_str(), "ok");
}

#[test]
fn write_through_symlinked_directory_is_seen_at_the_real_path() {
    let t = Tree::new(&["real/keep.txt", "allowed/x.txt"]);
    symlink("../real", t.p("allowed/link")).unwrap();
    let before = t.snap();
    write(&t.p("allowed/link/new.txt"), "sneaky");
    write(&t.p("allowed/link/keep.txt"), "changed content");
    let c = t.compare(&before);
    assert_eq!(
        kinds(&c),
        vec![
            ("real/keep.txt".to_string(), "modified"),
            ("real/new.txt".to_string(), "added")
        ]
    );
    let r = judge_ok(&c, &pol("implementer", &["allowed/**"]));
    assert_eq!(r.status.as_str(), "contract-failed-unattributed");
    assert_eq!(r.violations, vec!["real/keep.txt", "real/new.txt"]);
}

#[test]
fn new_symlinked_directory_pointing_outside_is_caught() {
    let t = Tree::new(&["allowed/x.txt"]);
    let before = t.snap();
    let outside = t._tmp.path().join("outside");
    fs::create_dir(&outside).unwrap();
    symlink(&outside, t.p("allowed/escape")).unwrap();
    write(&t.p("allowed/escape/f"), "x");
    let c = t.compare(&before);
    assert_eq!(kinds(&c), vec![("allowed/escape".to_string(), "added")]);
    let r = judge_ok(&c, &pol("implementer", &["allowed/**"]));
    assert_eq!(r.violations, vec!["allowed/escape"]);
}

#[test]
fn dot_dot_in_policy_or_declaration_does_not_widen() {
    let t = Tree::new(&["allowed/a.txt", "etc/passwd"]);
    let before = t.snap();
    write(&t.p("etc/passwd"), "owned");
    let c = t.compare(&before);
    let own = pol(
        "implementer",
        &["allowed/**", "allowed/*/../../etc/**", "../**"],
    );
    let declared = vec![
        "allowed/../../etc/passwd".to_string(),
        "../proj/etc/passwd".to_string(),
    ];
    let r = judge(&c, &own, std::slice::from_ref(&own), &declared, true, true);
    assert_eq!(r.status.as_str(), "contract-failed-unattributed");
    assert_eq!(r.violations, vec!["etc/passwd"]);
    assert!(r.out_of_plan_edits.is_empty());
}

#[test]
fn new_file_in_new_directory() {
    let t = Tree::new(&["a.txt"]);
    let before = t.snap();
    write(&t.p("new/deep/f.txt"), "x");
    let c = t.compare(&before);
    assert_eq!(
        kinds(&c),
        vec![
            ("new".to_string(), "added"),
            ("new/deep".to_string(), "added"),
            ("new/deep/f.txt".to_string(), "added"),
        ]
    );
    let r = judge_ok(&c, &pol("analyst", &["out.md"]));
    assert_eq!(r.violations.len(), 3);
    let r = judge_ok(&c, &pol("verifier", &["new/**"]));
    assert_eq!(r.status.as_str(), "ok", "{r:?} {:?}", c.changed);
}

#[test]
fn deleted_file_and_deleted_directory() {
    let t = Tree::new(&["a.txt", "d/x/y.txt", "d/z.txt"]);
    let before = t.snap();
    fs::remove_file(t.p("a.txt")).unwrap();
    fs::remove_dir_all(t.p("d")).unwrap();
    let c = t.compare(&before);
    assert_eq!(
        kinds(&c),
        vec![
            ("a.txt".to_string(), "deleted"),
            ("d".to_string(), "deleted"),
            ("d/x".to_string(), "deleted"),
            ("d/x/y.txt".to_string(), "deleted"),
            ("d/z.txt".to_string(), "deleted"),
        ]
    );
    // `d/**` covers removing `d` itself.
    let r = judge_ok(&c, &pol("analyst", &["d/**"]));
    assert_eq!(r.violations, vec!["a.txt"]);
}

#[test]
fn made_executable_is_a_mode_change() {
    let t = Tree::new(&["run.sh"]);
    for before in [t.snap(), aged(t.snap())] {
        let mut perm = fs::metadata(t.p("run.sh")).unwrap().permissions();
        perm.set_mode(perm.mode() ^ 0o111);
        fs::set_permissions(t.p("run.sh"), perm).unwrap();
        let c = t.compare(&before);
        assert_eq!(kinds(&c), vec![("run.sh".to_string(), "mode")]);
        let r = judge_ok(&c, &pol("analyst", &["out.md"]));
        assert_eq!(r.violations, vec!["run.sh"]);
        // Put it back for the next round.
        let mut perm = fs::metadata(t.p("run.sh")).unwrap().permissions();
        perm.set_mode(perm.mode() ^ 0o111);
        fs::set_permissions(t.p("run.sh"), perm).unwrap();
    }
}

#[test]
fn rename_out_of_an_allowed_path_is_a_violation() {
    let t = Tree::new(&["allowed/a.txt"]);
    let before = t.snap();
    fs::create_dir(t.p("elsewhere")).unwrap();
    fs::rename(t.p("allowed/a.txt"), t.p("elsewhere/a.txt")).unwrap();
    let c = t.compare(&before);
    assert_eq!(
        kinds(&c),
        vec![
            ("allowed/a.txt".to_string(), "deleted"),
            ("elsewhere".to_string(), "added"),
            ("elsewhere/a.txt".to_string(), "added"),
        ]
    );
    let r = judge_ok(&c, &pol("implementer", &["allowed/**"]));
    assert_eq!(r.status.as_str(), "contract-failed-unattributed");
    assert_eq!(r.violations, vec!["elsewhere", "elsewhere/a.txt"]);
    assert_eq!(r.attribution, "own+unattributed");
}

#[test]
fn same_size_rewrite_with_mtime_put_back_is_caught() {
    let t = Tree::new(&["a.txt"]);
    let md = fs::metadata(t.p("a.txt")).unwrap();
    for before in [t.snap(), aged(t.snap())] {
        write(&t.p("a.txt"), "CONTENT\n");
        set_mtime(&t.p("a.txt"), md.mtime(), md.mtime_nsec());
        let c = t.compare(&before);
        assert_eq!(kinds(&c), vec![("a.txt".to_string(), "modified")]);
        write(&t.p("a.txt"), "content\n");
    }
}

#[test]
fn touched_but_unchanged_file_is_not_a_change_when_hashed() {
    let t = Tree::new(&["a.txt"]);
    let before = t.snap();
    assert!(
        before.listing("").unwrap()[0].hash.is_some(),
        "fresh files are hashed"
    );
    set_mtime(&t.p("a.txt"), 1_000_000, 0);
    assert!(t.compare(&before).changed.is_empty());
    // Without a hash, a moved stat cannot be shown harmless.
    let c = t.compare(&aged(before));
    assert_eq!(kinds(&c), vec![("a.txt".to_string(), "modified")]);
}

fn set_mtime(p: &Path, sec: i64, nsec: i64) {
    let t = UNIX_EPOCH + std::time::Duration::new(sec as u64, nsec as u32);
    let f = fs::File::options().write(true).open(p).unwrap();
    f.set_modified(t).unwrap();
}

#[test]
fn excluded_orchestrator_files_are_invisible() {
    let mut t = Tree::new(&["state/team-state.json"]);
    t.exclude = vec![
        t.p("state/team-state.json"),
        PathBuf::from("state/team-state.json.lock"),
    ];
    let before = t.snap();
    write(&t.p("state/team-state.json"), "{\"changed\":true}");
    write(&t.p("state/team-state.json.lock"), "");
    assert!(t.compare(&before).changed.is_empty());
}

#[test]
fn worktree_outside_the_root_is_walked_with_absolute_paths() {
    let mut t = Tree::new(&["a.txt"]);
    let wt = t._tmp.path().join("wt");
    write(&wt.join("src/lib.rs"), "fn main() {}");
    let wt = fs::canonicalize(wt).unwrap();
    t.roots.push(wt.clone());
    let before = t.snap();
    write(&wt.join("src/lib.rs"), "fn main() { evil() }");
    let c = t.compare(&before);
    let path = format!("{}/src/lib.rs", wt.display());
    assert_eq!(kinds(&c), vec![(path.clone(), "modified")]);
    let own = pol("implementer", &[&format!("{}/**", wt.display())]);
    assert_eq!(judge_ok(&c, &own).status, Outcome::Ok);
    assert_eq!(
        judge_ok(&c, &pol("verifier", &["a.txt"])).violations,
        vec![path]
    );
}

fn git(dir: &Path, args: &[&str]) {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn git_internals_are_summarised_and_a_commit_shows() {
    let t = Tree::new(&["a.txt"]);
    git(&t.root, &["init", "-q", "-b", "main"]);
    git(&t.root, &["add", "."]);
    git(&t.root, &["commit", "-qm", "one"]);
    let before = t.snap();
    assert!(before.entry(".git/HEAD").is_some());
    assert!(before.entry(".git/refs/heads/main").is_some());
    // The index, logs and the object store are not walked.
    assert!(before.entry(".git/index").is_none());
    assert!(before.entry(".git/logs").is_none());
    let objects: Vec<&[u8]> = before
        .listing(".git/objects")
        .unwrap()
        .iter()
        .map(|e| e.name.as_slice())
        .collect();
    assert_eq!(objects, [&b"info"[..]]);
    // git status refreshes the index: not a change.
    git(&t.root, &["status", "--porcelain"]);
    assert!(t.compare(&before).changed.is_empty());
    // Tracked content: seen in the work tree. A commit: seen in refs.
    write(&t.p("a.txt"), "new content\n");
    git(&t.root, &["commit", "-qam", "two"]);
    let c = t.compare(&before);
    assert_eq!(
        kinds(&c),
        vec![
            (".git/refs/heads/main".to_string(), "modified"),
            ("a.txt".to_string(), "modified"),
        ]
    );
}

impl Tree {
    fn try_compare(&self, before: &Snapshot) -> Result<Compared, AuditError> {
        compare(before, &self.opts())
    }
}

fn os(bytes: &[u8]) -> &std::ffi::OsStr {
    use std::os::unix::ffi::OsStrExt;
    std::ffi::OsStr::from_bytes(bytes)
}

// ---- names that are not UTF-8 --------------------------------------------

#[test]
fn a_name_that_is_not_utf8_is_audited_and_shown_escaped() {
    let t = Tree::new(&["src/a.rs"]);
    let before = t.snap();
    fs::write(t.root.join(os(b"bad\xffname")), "x").unwrap();
    fs::write(t.root.join("src").join(os(b"ok\xfe.rs")), "x").unwrap();
    let c = t.compare(&before);
    assert_eq!(
        kinds(&c),
        vec![
            ("bad\\xffname".to_string(), "added"),
            ("src/ok\\xfe.rs".to_string(), "added"),
        ]
    );
    // Outside the policy it is a violation, named; inside a glob it is not.
    let r = judge_ok(&c, &pol("implementer", &["src/**"]));
    assert_eq!(r.status, Outcome::ContractFailedUnattributed);
    assert_eq!(r.violations, vec!["bad\\xffname"]);
    // Escaping never makes a literal match by accident.
    let r = judge_ok(&c, &pol("implementer", &["src/**", "bad?name"]));
    assert_eq!(r.violations, vec!["bad\\xffname"]);
}

#[test]
fn a_name_that_is_not_utf8_survives_the_sidecar_byte_for_byte() {
    let t = Tree::new(&["a.txt"]);
    fs::write(t.root.join(os(b"caf\xe9")), "x").unwrap();
    fs::write(t.root.join(os(b"back\\slash")), "x").unwrap();
    symlink(os(b"tar\xffget"), t.root.join("ln")).unwrap();
    let s = t.snap();
    let text = s.to_json();
    let back = Snapshot::from_json(&text).unwrap();
    assert_eq!(back, s);
    let names: Vec<&[u8]> = back.dirs[0].iter().map(|e| e.name.as_slice()).collect();
    assert_eq!(
        names,
        [&b"a.txt"[..], b"back\\slash", b"caf\xe9", b"ln"],
        "sorted by bytes"
    );
    assert_eq!(
        back.entry("ln").unwrap().target.as_deref(),
        Some(&b"tar\xffget"[..])
    );
    assert!(back.entry("caf\\xe9").is_some());
    assert!(t.compare(&back).changed.is_empty());
    // Touch the file behind the escaped name: still found by the round trip.
    fs::write(t.root.join(os(b"caf\xe9")), "changed").unwrap();
    assert_eq!(
        kinds(&t.compare(&back)),
        vec![("caf\\xe9".to_string(), "modified")]
    );
}

#[test]
fn a_directory_whose_name_is_not_utf8_is_walked() {
    let t = Tree::new(&["a.txt"]);
    let dir = t.root.join(os(b"d\x80ir"));
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("inside.txt"), "old").unwrap();
    let before = t.snap();
    assert!(before.entry("d\\x80ir/inside.txt").is_some());
    // Near miss: unchanged, nothing to report.
    assert!(t.compare(&before).changed.is_empty());
    fs::write(dir.join("inside.txt"), "new content").unwrap();
    fs::write(dir.join(os(b"n\xffew")), "x").unwrap();
    let c = t.compare(&before);
    assert_eq!(
        kinds(&c),
        vec![
            ("d\\x80ir/inside.txt".to_string(), "modified"),
            ("d\\x80ir/n\\xffew".to_string(), "added"),
        ]
    );
}

// ---- depth and path length -------------------------------------------------

/// Make `depth` nested directories `d/d/...` under `root` one `mkdirat` at a
/// time (the path is far past PATH_MAX), with `f` at the bottom; the
/// bottom directory's descriptor is returned.
fn make_deep(root: &Path, depth: usize, name: &str) -> rustix::fd::OwnedFd {
    use rustix::fs::{mkdirat, openat, Mode, OFlags, CWD};
    let flags = OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC;
    let mut fd = openat(CWD, root, flags, Mode::empty()).unwrap();
    for _ in 0..depth {
        mkdirat(&fd, name, Mode::from_raw_mode(0o755)).unwrap();
        fd = openat(&fd, name, flags, Mode::empty()).unwrap();
    }
    fd
}

fn write_at(dir: &rustix::fd::OwnedFd, name: &str, text: &str) {
    use rustix::fs::{openat, Mode, OFlags};
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::TRUNC | OFlags::CLOEXEC;
    let fd = openat(dir, name, flags, Mode::from_raw_mode(0o644)).unwrap();
    rustix::io::write(&fd, text.as_bytes()).unwrap();
}

/// `rm -rf`: std's `remove_dir_all` recurses, and a test thread's stack is
/// smaller than 5,000 of its frames.
fn remove_deep(p: &Path) {
    let ok = Command::new("rm").arg("-rf").arg(p).status().unwrap();
    assert!(ok.success());
}

#[test]
fn five_thousand_nested_directories_do_not_crash_and_the_bottom_is_seen() {
    let t = Tree::new(&["a.txt"]);
    fs::create_dir(t.p("deep")).unwrap();
    let bottom = make_deep(&t.p("deep"), 5000, "d");
    write_at(&bottom, "f", "old");
    let before = t.snap();
    let text = before.to_json();
    let back = Snapshot::from_json(&text).unwrap();
    assert!(t.compare(&back).changed.is_empty());
    write_at(&bottom, "f", "new content");
    let c = t.compare(&back);
    let want = format!("deep/{}f", "d/".repeat(5000));
    assert_eq!(kinds(&c), vec![(want.clone(), "modified")]);
    assert!(want.len() > 4096, "past PATH_MAX");
    let r = judge_ok(&c, &pol("analyst", &["out.md"]));
    assert_eq!(r.violations, vec![want]);
    // Near miss: under an allowed directory, however deep, it is allowed.
    assert_eq!(
        judge_ok(&c, &pol("implementer", &["deep/**"])).status,
        Outcome::Ok
    );
    drop(bottom);
    remove_deep(&t.p("deep"));
}

#[test]
fn a_path_past_path_max_under_an_allowed_directory_does_not_hide_an_outside_write() {
    let t = Tree::new(&["src/a.rs", "README.md"]);
    let before = t.snap();
    let long = "x".repeat(250);
    let bottom = make_deep(&t.p("src"), 20, &long);
    write_at(&bottom, "f.rs", "fn f() {}");
    write(&t.p("README.md"), "owned\n");
    let c = t.compare(&before);
    let r = judge_ok(&c, &pol("implementer", &["src/**"]));
    assert_eq!(r.status, Outcome::ContractFailedUnattributed);
    assert_eq!(r.violations, vec!["README.md"]);
    assert!(c
        .changed
        .iter()
        .any(|c| c.path.len() > 5000 && c.path.ends_with("/f.rs")));
    drop(bottom);
    remove_deep(&t.p("src"));
}

// ---- failing closed --------------------------------------------------------

/// The walk as an unprivileged process sees it: `locked/` (mode 000) cannot
/// be opened, and the error names it.
fn check_unreadable(root: &Path) {
    let roots = vec![root.to_path_buf()];
    let opts = SnapshotOptions {
        roots: &roots,
        project_root: root,
        exclude: &[],
    };
    let e = snapshot(&opts).unwrap_err();
    assert_eq!(e.path, "locked", "{e}");
    assert_eq!(e.step, Step::OpenDir);
    assert_eq!(e.source.kind(), std::io::ErrorKind::PermissionDenied, "{e}");
    assert!(e.reason().contains("`locked`"), "{}", e.reason());
}

#[test]
fn an_unreadable_directory_is_an_error_naming_it() {
    let t = Tree::new(&["open/a.txt", "locked/secret.txt"]);
    fs::set_permissions(t.p("locked"), fs::Permissions::from_mode(0o000)).unwrap();
    if fs::read_dir(t.p("locked")).is_err() {
        check_unreadable(&t.root);
    } else {
        // Root reads anything: run the walk again in a child of this test
        // binary whose capabilities no longer override permissions.
        let out = Command::new("setpriv")
            .arg("--bounding-set=-dac_override,-dac_read_search")
            .arg("--")
            .arg(std::env::current_exe().unwrap())
            .args(["--exact", "audit::tests::unreadable_in_a_child"])
            .args(["--include-ignored", "--test-threads=1"])
            .env("OKSTRA_AUDIT_UNREADABLE_ROOT", &t.root)
            .output()
            .expect("setpriv (util-linux) to drop root's capabilities");
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            out.status.success() && stdout.contains("1 passed"),
            "{stdout}\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    fs::set_permissions(t.p("locked"), fs::Permissions::from_mode(0o755)).unwrap();
}

#[test]
#[ignore = "run by an_unreadable_directory_is_an_error_naming_it, in a child without CAP_DAC_*"]
fn unreadable_in_a_child() {
    let root = std::env::var_os("OKSTRA_AUDIT_UNREADABLE_ROOT").expect("run by its parent test");
    check_unreadable(Path::new(&root));
}

/// Run `f` at a seam point of the walk, for entries named `name` only
/// (names unique to one test), for the lifetime of the guard.
struct Seam(usize);

impl Seam {
    fn at(
        point: walk::seam::Point,
        name: &'static str,
        f: impl Fn() + Send + Sync + 'static,
    ) -> Seam {
        let mut hooks = walk::seam::HOOKS.lock().unwrap();
        hooks.push(Box::new(move |p, n| {
            if p == point && n == name.as_bytes() {
                f()
            }
        }));
        Seam(hooks.len() - 1)
    }
}

impl Drop for Seam {
    fn drop(&mut self) {
        // Leave the slot (indices of other guards stay valid), disarmed.
        let mut hooks = walk::seam::HOOKS.lock().unwrap_or_else(|p| p.into_inner());
        hooks[self.0] = Box::new(|_, _| {});
    }
}

#[test]
fn a_file_that_vanishes_between_listing_and_stat_is_an_error() {
    let t = Tree::new(&["keep.txt", "sub/vanish-7f3a.txt"]);
    let before = t.snap();
    let victim = t.p("sub/vanish-7f3a.txt");
    let _seam = Seam::at(
        walk::seam::Point::BeforeStat,
        "vanish-7f3a.txt",
        move || {
            let _ = fs::remove_file(&victim);
        },
    );
    let e = t.try_compare(&before).unwrap_err();
    assert_eq!(e.path, "sub/vanish-7f3a.txt");
    assert_eq!(e.step, Step::Stat);
    assert!(e.to_string().contains("vanished during the walk"), "{e}");
}

#[test]
fn a_directory_that_vanishes_before_it_is_opened_is_an_error() {
    let t = Tree::new(&["keep.txt", "gone-51c2/x.txt"]);
    let dir = t.p("gone-51c2");
    let _seam = Seam::at(walk::seam::Point::BeforeOpen, "gone-51c2", move || {
        let _ = fs::remove_dir_all(&dir);
    });
    let e = snapshot(&t.opts()).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.step),
        ("gone-51c2", Step::OpenDir),
        "{e}"
    );
    assert!(e.is_not_found());
}

#[test]
fn a_directory_removed_while_it_is_read_is_an_error() {
    let t = Tree::new(&["keep.txt"]);
    fs::create_dir(t.p("empty-9d01")).unwrap();
    let dir = t.p("empty-9d01");
    let _seam = Seam::at(walk::seam::Point::Opened, "empty-9d01", move || {
        let _ = fs::remove_dir(&dir);
    });
    let e = snapshot(&t.opts()).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.step),
        ("empty-9d01", Step::ReadDir),
        "{e}"
    );
}

#[test]
fn a_directory_swapped_before_it_is_opened_is_an_error_not_a_redirect() {
    let t = Tree::new(&["keep.txt", "swap-2b77/x.txt", "other/y.txt"]);
    let (dir, other) = (t.p("swap-2b77"), t.p("other"));
    let _seam = Seam::at(walk::seam::Point::BeforeOpen, "swap-2b77", move || {
        let _ = fs::remove_dir_all(&dir);
        let _ = symlink(&other, &dir);
    });
    let e = snapshot(&t.opts()).unwrap_err();
    assert_eq!(e.path, "swap-2b77", "{e}");
    // Swapped for another real directory: caught by its inode.
    drop(_seam);
    let t = Tree::new(&["keep.txt", "swap-2b78/x.txt"]);
    let dir = t.p("swap-2b78");
    let _seam = Seam::at(walk::seam::Point::BeforeOpen, "swap-2b78", move || {
        let _ = fs::rename(&dir, dir.with_extension("old"));
        let _ = fs::create_dir(&dir);
    });
    let e = snapshot(&t.opts()).unwrap_err();
    assert_eq!(
        (e.path.as_str(), e.step),
        ("swap-2b78", Step::Changed),
        "{e}"
    );
}

#[test]
fn a_root_that_is_not_a_directory_is_an_error_and_a_missing_one_is_empty() {
    let mut t = Tree::new(&["a.txt"]);
    let wt = t._tmp.path().join("wt");
    t.roots.push(wt.clone());
    // Missing: nothing in it, and its old contents are reported deleted.
    let before = t.snap();
    assert_eq!(before.roots[1].dir, None);
    write(&wt.join("lib.rs"), "x");
    let before = t.snap();
    fs::remove_dir_all(&wt).unwrap();
    let path = format!(
        "{}/lib.rs",
        fs::canonicalize(t._tmp.path())
            .unwrap()
            .join("wt")
            .display()
    );
    assert_eq!(kinds(&t.compare(&before)), vec![(path, "deleted")]);
    // A file where the worktree was: refused, not skipped.
    fs::write(&wt, "not a dir").unwrap();
    let e = t.try_compare(&before).unwrap_err();
    assert_eq!(e.step, Step::OpenRoot, "{e}");
}

#[test]
fn a_broken_sidecar_is_refused() {
    let t = Tree::new(&["a.txt", "d/b.txt"]);
    let s = t.snap();
    let good: serde_json::Value = serde_json::from_slice(&s.to_json()).unwrap();
    let mut cases = Vec::new();
    let mut v = good.clone();
    v["version"] = 1.into();
    cases.push(("old version", v));
    let mut v = good.clone();
    v["roots"][0]["dir"] = 7.into();
    cases.push(("root out of range", v));
    let mut v = good.clone();
    v["dirs"][0][1]["d"] = 0.into();
    cases.push(("a loop", v));
    let mut v = good.clone();
    v["dirs"][0][0]["n"] = "bad\\q".into();
    cases.push(("malformed escape", v));
    let mut v = good.clone();
    v["dirs"][0][0]["n"] = "b.txt".into();
    v["dirs"][0][1]["n"] = "a.txt".into();
    cases.push(("unsorted", v));
    for (what, v) in cases {
        let e = Snapshot::from_json(&serde_json::to_vec(&v).unwrap()).unwrap_err();
        assert_eq!(e.step, Step::Snapshot, "{what}: {e}");
    }
    assert!(Snapshot::from_json(&serde_json::to_vec(&good).unwrap()).is_ok());
}

// ---- .git ------------------------------------------------------------------

/// A repository with one commit, a submodule's git directory (one nested
/// in it, one under a namespaced name) and a linked worktree.
fn repo() -> Tree {
    let t = Tree::new(&["a.txt"]);
    git(&t.root, &["init", "-q", "-b", "main"]);
    git(&t.root, &["add", "."]);
    git(&t.root, &["commit", "-qm", "one"]);
    for m in ["sub", "sub/modules/inner", "libs/x"] {
        git(
            &t.root,
            &["init", "-q", "--bare", &format!(".git/modules/{m}")],
        );
    }
    git(&t.root, &["worktree", "add", "-q", "--detach", "w"]);
    t
}

#[test]
fn what_git_executes_or_reads_as_configuration_is_audited() {
    let t = repo();
    let before = t.snap();
    let writes = [
        ".git/hooks/pre-commit",
        ".git/config",
        ".git/info/attributes",
        ".git/objects/info/alternates",
        ".git/modules/sub/hooks/post-checkout",
        ".git/modules/sub/config",
        ".git/modules/sub/modules/inner/hooks/pre-push",
        ".git/modules/libs/x/config",
        ".git/worktrees/w/config",
        ".git/worktrees/w/commondir",
    ];
    for w in writes {
        let mut f = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(t.p(w))
            .unwrap();
        std::io::Write::write_all(&mut f, b"[core]\n\tfsmonitor = /tmp/evil\n").unwrap();
    }
    let c = t.compare(&before);
    let r = judge_ok(&c, &pol("implementer", &["a.txt", ".git/refs/**"]));
    assert_eq!(r.status, Outcome::ContractFailedUnattributed);
    for w in writes {
        assert!(
            r.violations.iter().any(|v| v == w),
            "{w} not in {:?}",
            r.violations
        );
    }
}

#[test]
fn a_plain_commit_shows_only_as_its_ref() {
    let t = repo();
    let before = t.snap();
    write(&t.p("a.txt"), "new content\n");
    git(&t.root, &["commit", "-qam", "two"]);
    git(&t.root, &["status", "--porcelain"]);
    let c = t.compare(&before);
    // Index, objects, logs, COMMIT_EDITMSG: not audited.
    assert_eq!(
        kinds(&c),
        vec![
            (".git/refs/heads/main".to_string(), "modified"),
            ("a.txt".to_string(), "modified"),
        ]
    );
    let r = judge_ok(&c, &pol("implementer", &["a.txt", ".git/refs/heads/**"]));
    assert_eq!(r.status, Outcome::Ok, "{r:?}");
}

#[test]
fn a_dot_git_file_is_audited_like_any_file() {
    let t = repo();
    let before = t.snap();
    assert_eq!(before.entry("w/.git").unwrap().kind, Kind::File);
    write(&t.p("w/.git"), "gitdir: /tmp/elsewhere\n");
    let c = t.compare(&before);
    assert_eq!(kinds(&c), vec![("w/.git".to_string(), "modified")]);
}

// ---- okstra's own files ----------------------------------------------------

#[test]
fn a_stale_temporary_beside_an_own_file_is_not_a_change() {
    let mut t = Tree::new(&["run/team-state.json"]);
    t.exclude = vec![t.p("run/team-state.json"), t.p("run/snapshots")];
    let before = t.snap();
    write(&t.p("run/.team-state.json.123.abc.tmp"), "{half a write");
    write(&t.p("run/snapshots/x-stage-1.json"), "{}");
    assert!(t.compare(&before).changed.is_empty());
    // Near misses: not the temporary's shape, or beside no own file.
    write(&t.p("run/.team-state.json.123.abc.tmp.sh"), "evil");
    write(&t.p("run/.notes.md.123.abc.tmp"), "x");
    // A directory of the temporary's name could hide anything below it.
    write(&t.p("run/.team-state.json.456.def.tmp/payload.sh"), "evil");
    assert_eq!(
        kinds(&t.compare(&before)),
        vec![
            ("run/.notes.md.123.abc.tmp".to_string(), "added"),
            ("run/.team-state.json.123.abc.tmp.sh".to_string(), "added"),
            ("run/.team-state.json.456.def.tmp".to_string(), "added"),
            (
                "run/.team-state.json.456.def.tmp/payload.sh".to_string(),
                "added"
            ),
        ]
    );
}

// ---- the after walk as the next baseline -----------------------------------

#[test]
fn the_after_walk_serves_as_the_next_snapshot() {
    let t = Tree::new(&["a.txt", "d/b.txt"]);
    let first = t.snap();
    write(&t.p("d/c.txt"), "stage one wrote this");
    let one = compare(&first, &t.opts()).unwrap();
    assert_eq!(kinds(&one.changes), vec![("d/c.txt".to_string(), "added")]);
    // Nothing ran since: the after walk is the tree, and knows c.txt.
    let two = compare(&one.after, &t.opts()).unwrap();
    assert!(two.changes.changed.is_empty(), "{:?}", two.changes.changed);
    // A same-size rewrite right away is still caught: fresh files carry a
    // hash in the after walk as in a snapshot.
    write(&t.p("d/c.txt"), "stage two wrote THIS");
    let three = compare(&one.after, &t.opts()).unwrap();
    assert_eq!(
        kinds(&three.changes),
        vec![("d/c.txt".to_string(), "modified")]
    );
    // It round-trips as a sidecar like any snapshot.
    assert_eq!(
        Snapshot::from_json(&one.after.to_json()).unwrap(),
        one.after
    );
}

#[test]
fn the_same_tree_gives_the_same_digest() {
    let t = Tree::new(&["a.txt", "d/b.txt", "d/e/f.txt", "z/y.txt"]);
    let a = aged(t.snap());
    let b = aged(t.snap());
    assert_eq!(tree_of(&a), tree_of(&b));
    assert_eq!(
        snapshot::tree_digest(&a.roots, &a.dirs),
        snapshot::tree_digest(&b.roots, &b.dirs)
    );
}

fn tree_of(s: &Snapshot) -> (Vec<Root>, Vec<Vec<Entry>>) {
    (s.roots.clone(), s.dirs.clone())
}

#[test]
fn a_change_list_too_large_to_hold_fails_closed() {
    // A snapshot of 5,000 nested 250-byte names, all gone now: spelled out
    // one path each, the deletions would take some 3 GB.
    let t = Tree::new(&[]);
    let mut before = aged(t.snap());
    let long = vec![b'x'; 250];
    let depth = 5000u32;
    before.dirs = (0..=depth)
        .map(|i| {
            if i == depth {
                return Vec::new();
            }
            vec![Entry {
                name: long.clone(),
                kind: Kind::Dir,
                size: 0,
                mtime_ns: 0,
                ctime_ns: 0,
                ino: u64::from(i) + 1,
                mode: 0o40755,
                hash: None,
                target: None,
                dir: Some(i + 1),
            }]
        })
        .collect();
    let e = t.try_compare(&before).unwrap_err();
    assert_eq!(e.step, Step::Report, "{e}");
    assert!(e.to_string().contains("64 MiB"), "{e}");
}
