//! Path safety (docs/spec-format.md#paths). Every path an input names is judged
//! in three steps, in this order, and nothing looks at a path before the first:
//!
//! 1. its spelling ([`syntax_problem`]): no `\`, no NUL, no empty segment,
//!    nothing blank; a file never ends in `/`, `.` or `..`. A refused path is
//!    never rewritten: a rewrite after the check is how a path escapes.
//! 2. where it lands: `..` folded, then every symlink followed the way the
//!    kernel would ([`real_path`]); the plan records that real path, so two
//!    spellings of one file (one through a symlinked directory) are one path
//!    for every rule. A path that lands outside the project root is refused
//!    unless its field may point outside (an absolute write scope).
//! 3. for write scopes that may lie outside (`worktreePath`,
//!    `auxiliaryRoots`): never `/`, an ancestor of the project root, or
//!    anything under `/proc`, `/sys` or `/dev` ([`too_broad`]).
//!
//! Recorded paths are project-relative with `/` separators, or absolute for a
//! write scope outside the root, and always UTF-8.

use crate::diag::{Code, Diagnostic};
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// What a path field names, which decides what its spelling may be and
/// where it may point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Field {
    /// A file inside the project (prompt, results, completion paths, state
    /// files) or a planned-path glob: no trailing `/`, `.` or `..`.
    File,
    /// A directory inside the project (the reservation root): a trailing `/`
    /// is allowed.
    Dir,
    /// A write scope (`worktreePath`, `auxiliaryRoots`): a directory that may
    /// lie outside the project when given absolute, but is never too broad.
    Scope,
}

/// A path an input named, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// What the plan records: the real path, project-relative and
    /// `/`-separated, or absolute for a write scope outside the root.
    pub display: String,
    /// The same path, absolute.
    pub abs: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathProblem {
    /// The spelling is refused (`path/invalid`); the reason completes
    /// "`<value>` ...".
    Invalid(String),
    /// It lands outside the project root (`path/escapes-root`).
    EscapesRoot { resolved: PathBuf },
    /// A write scope too wide to mean anything (`path/too-broad`); the
    /// reason completes "`<value>` ...".
    TooBroad(String),
}

/// The JSON Schema `pattern` of a file path (jobs schema): the part of
/// [`syntax_problem`] a regular expression without look-around can say, so
/// editors flag it. Segments of anything but `/`, `\` and NUL, an optional
/// leading `/`, and a last segment that is not `.` or `..`.
pub const FILE_PATTERN: &str =
    r"^/?([^/\\\x00]+/)*([^/\\\x00.][^/\\\x00]*|\.[^/\\\x00.][^/\\\x00]*|\.\.[^/\\\x00]+)$";

/// The JSON Schema `pattern` of a directory path: as [`FILE_PATTERN`], with
/// a trailing `/` allowed.
pub const DIR_PATTERN: &str = r"^/?([^/\\\x00]+/)*[^/\\\x00]*$";

/// Why `value`'s spelling is refused as a path of `field`, or `None`. The
/// reason completes a sentence starting "`<value>` ...".
pub fn syntax_problem(value: &str, field: Field) -> Option<String> {
    if value.trim().is_empty() {
        return Some("is blank: name a path".into());
    }
    if value.contains('\\') {
        return Some(
            "holds `\\`: paths are written with `/`, and okstra never rewrites one into the other"
                .into(),
        );
    }
    if value.contains('\0') {
        return Some("holds a NUL byte".into());
    }
    // A leading `/` makes the path absolute; every segment after it must
    // name something.
    let body = value.strip_prefix('/').unwrap_or(value);
    let (dirs, last) = body.rsplit_once('/').unwrap_or(("", body));
    if body.contains('/') && dirs.split('/').any(str::is_empty) {
        return Some("holds an empty segment (`//`)".into());
    }
    if field != Field::File {
        // `dir/` names a directory, as a directory field expects.
        return None;
    }
    match last {
        "" => Some("ends in `/`, which names a directory, where a file is expected".into()),
        "." | ".." => Some(format!(
            "ends in `{last}`, which names a directory, where a file is expected"
        )),
        _ => None,
    }
}

/// Remove `.` and fold `..` without touching the disk.
pub fn normalize(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in path.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other.as_os_str()),
        }
    }
    out
}

/// The kernel's limit on symlinks followed in one lookup (`MAXSYMLINKS`).
const MAX_LINKS: u32 = 40;

/// A symlink loop, or a chain longer than the kernel would follow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Loop;

/// Real paths by absolute lexical path. Planning resolves several paths
/// per job that share their directories; each directory is looked at once.
#[derive(Default)]
struct Resolver {
    known: HashMap<PathBuf, PathBuf>,
}

impl Resolver {
    /// Where the kernel lands `path` (absolute, `..` folded): every symlink
    /// followed, components that do not exist yet kept as written (a file
    /// that does not exist yet lands where its directory really is).
    fn real(&mut self, path: &Path, links: &mut u32) -> Result<PathBuf, Loop> {
        if let Some(hit) = self.known.get(path) {
            return Ok(hit.clone());
        }
        let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
            return Ok(path.to_path_buf());
        };
        let dir = self.real(parent, links)?;
        let here = dir.join(name);
        let out = match std::fs::symlink_metadata(&here) {
            Ok(meta) if meta.file_type().is_symlink() => {
                if *links == 0 {
                    return Err(Loop);
                }
                *links -= 1;
                match std::fs::read_link(&here) {
                    Ok(target) => self.follow(dir, &target, links)?,
                    Err(_) => here,
                }
            }
            _ => here,
        };
        self.known.insert(path.to_path_buf(), out.clone());
        Ok(out)
    }

    /// A symlink's target, read from the real directory `dir` holding it.
    fn follow(&mut self, dir: PathBuf, target: &Path, links: &mut u32) -> Result<PathBuf, Loop> {
        let mut at = dir;
        for c in target.components() {
            match c {
                Component::RootDir => at = PathBuf::from("/"),
                Component::CurDir | Component::Prefix(_) => {}
                // `at` is real, so its lexical parent is its physical one.
                Component::ParentDir => {
                    at.pop();
                }
                Component::Normal(n) => at = self.real(&at.join(n), links)?,
            }
        }
        Ok(at)
    }
}

thread_local! {
    static CACHE: RefCell<Option<Resolver>> = const { RefCell::new(None) };
}

/// Run `f` with real paths memoised per directory. Only for work that does
/// not change the tree while it runs (planning). Nested, `f` has a memo of
/// its own, dropped when it returns, and the outer one is kept meanwhile.
pub fn with_cache<R>(f: impl FnOnce() -> R) -> R {
    let outer = CACHE.with(|c| c.borrow_mut().replace(Resolver::default()));
    let out = f();
    CACHE.with(|c| *c.borrow_mut() = outer);
    out
}

/// Where `path` (absolute) really is: `..` folded, then every symlink
/// followed as the kernel would; what does not exist yet is appended as
/// written. A loop (or more than 40 links) is an error.
pub fn try_real_path(path: &Path) -> Result<PathBuf, Loop> {
    let lexical = normalize(path);
    let mut links = MAX_LINKS;
    CACHE.with(|c| match c.borrow_mut().as_mut() {
        Some(resolver) => resolver.real(&lexical, &mut links),
        None => Resolver::default().real(&lexical, &mut links),
    })
}

/// [`try_real_path`], with a loop left unresolved (for display only).
pub fn real_path(path: &Path) -> PathBuf {
    try_real_path(path).unwrap_or_else(|_| normalize(path))
}

/// The project root as okstra uses it everywhere: absolute, symlinks resolved.
pub fn canonical_root(root: &Path) -> PathBuf {
    let abs = if root.is_absolute() {
        root.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(root)
    };
    real_path(&abs)
}

/// [`canonical_root`] for a root that must be named in a plan: it must be
/// UTF-8, since the plan is JSON and a lossy name is another directory.
pub fn checked_root(root: &Path) -> Result<PathBuf, String> {
    let real = canonical_root(root);
    match real.to_str() {
        Some(_) => Ok(real),
        None => Err(format!(
            "the project root {} is not valid UTF-8; a plan names its root in JSON, and a lossy name would be another directory",
            real.display()
        )),
    }
}

/// Resolve `value`, a path of `field` named by an input, against `root`
/// (already canonical). The spelling is judged first, before anything else
/// looks at the value.
pub fn resolve(root: &Path, value: &str, field: Field) -> Result<Resolved, PathProblem> {
    if let Some(why) = syntax_problem(value, field) {
        return Err(PathProblem::Invalid(why));
    }
    let given = Path::new(value);
    let lexical = normalize(&root.join(given));
    let real = try_real_path(&lexical).map_err(|_| {
        PathProblem::Invalid("resolves through a symlink loop (or more than 40 links)".into())
    })?;
    let outside_allowed = field == Field::Scope && given.is_absolute();
    if outside_allowed {
        // Judged as written and as it lands: `/tmp/x/..` is `/tmp`, and a
        // link may point at `/`.
        for p in [&lexical, &real] {
            if let Some(why) = too_broad(root, p) {
                return Err(PathProblem::TooBroad(why));
            }
        }
    }
    let display = match real.strip_prefix(root) {
        Ok(rel) => text_of(rel),
        Err(_) if outside_allowed => text_of(&real),
        Err(_) => return Err(PathProblem::EscapesRoot { resolved: real }),
    };
    let Some(display) = display else {
        return Err(PathProblem::Invalid(format!(
            "resolves to {}, a name that is not valid UTF-8",
            real.display()
        )));
    };
    // A symlink may land on a name the spelling rules refuse (`a\b`): the
    // plan would record a path that reads as another.
    if let Some(why) = syntax_problem(&display, Field::Dir) {
        return Err(PathProblem::Invalid(format!(
            "resolves to `{display}`, which {why}"
        )));
    }
    Ok(Resolved { abs: real, display })
}

/// Why a write scope at `path` (absolute) is too broad, or `None`.
pub fn too_broad(root: &Path, path: &Path) -> Option<String> {
    if path == Path::new("/") {
        return Some(
            "is `/`: a write scope that wide makes the audit and confinement meaningless".into(),
        );
    }
    if root.starts_with(path) && root != path {
        return Some(format!(
            "is {}, an ancestor of the project root: a write scope that wide makes the audit and confinement meaningless",
            path.display()
        ));
    }
    ["/proc", "/sys", "/dev"]
        .into_iter()
        .find(|sys| path.starts_with(sys))
        .map(|sys| {
            format!(
                "is {}, under {sys}: a kernel interface is never a write scope",
                path.display()
            )
        })
}

/// A path as the plan writes it: UTF-8, `/`-separated (the separator on
/// this platform), `.` for the empty path. `None` when not UTF-8.
fn text_of(p: &Path) -> Option<String> {
    let s = p.to_str()?;
    Some(if s.is_empty() { ".".into() } else { s.into() })
}

/// A path as shown, where it is known to be UTF-8 (the checked root, and
/// paths built from recorded ones); anything else is shown lossily.
pub fn path_text(p: &Path) -> String {
    text_of(p).unwrap_or_else(|| p.to_string_lossy().into_owned())
}

/// Where a recorded path lives on disk.
pub fn abs_of(root: &Path, display: &str) -> PathBuf {
    let p = Path::new(display);
    if p.is_absolute() {
        p.to_path_buf()
    } else {
        root.join(p)
    }
}

/// How a file named on the command line is named in the plan:
/// project-relative when inside, absolute otherwise.
pub fn display_for(root: &Path, path: &Path) -> String {
    let abs = real_path(&command_line_abs(path));
    match abs.strip_prefix(root) {
        Ok(rel) => path_text(rel),
        Err(_) => path_text(&abs),
    }
}

/// [`display_for`] for a file a plan names: `None` when its name is not
/// UTF-8 (a lossy name would be another file at exec).
pub fn checked_display_for(root: &Path, path: &Path) -> Option<String> {
    let abs = real_path(&command_line_abs(path));
    match abs.strip_prefix(root) {
        Ok(rel) => text_of(rel),
        Err(_) => text_of(&abs),
    }
}

/// Where a relative path is taken from (docs/spec-format.md#paths): the project
/// root for a path an input names, the current directory for a file named on
/// the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Base {
    Root,
    CurrentDir,
}

/// The help line of a "does not exist" error: `fix`, then where the path
/// was looked for, always naming the project root in use, since a
/// forgotten `--project-root` reads as a missing file.
pub fn not_found_help(fix: &str, root: &Path, base: Base) -> String {
    match base {
        Base::Root => format!(
            "{fix} (project root: {}; relative paths are resolved from it — pass --project-root if the project is elsewhere)",
            root.display()
        ),
        Base::CurrentDir => format!(
            "{fix} (a file named on the command line is resolved from the current directory, {}; the project root in use is {} — pass --project-root if the project is elsewhere)",
            real_path(&std::env::current_dir().unwrap_or_default()).display(),
            root.display()
        ),
    }
}

/// `d` with [`not_found_help`] for its help, where it says a file does not
/// exist (`input/missing`); any other diagnostic as it is.
pub fn name_root(d: Diagnostic, root: &Path, base: Base) -> Diagnostic {
    if d.code != Code::InputMissing {
        return d;
    }
    let help = not_found_help(d.help.as_deref().unwrap_or("check the path"), root, base);
    d.help(help)
}

fn command_line_abs(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::fs::symlink;

    fn root() -> (tempfile::TempDir, PathBuf) {
        let dir = tempfile::tempdir().unwrap();
        let root = canonical_root(dir.path());
        (dir, root)
    }

    #[test]
    fn spelling_rules_and_their_near_misses() {
        use Field::*;
        for (value, field) in [
            ("a\\b.md", File),
            ("..\\outside\\x.md", File),
            ("a\0b", File),
            ("a//b", File),
            ("//a", Dir),
            ("a/", File),
            ("/", File),
            ("a/.", File),
            ("a/..", File),
            ("..", File),
            ("", File),
            ("  ", Dir),
            ("a//", Dir),
            ("wt\\x", Scope),
        ] {
            assert!(
                syntax_problem(value, field).is_some(),
                "{value:?} {field:?}"
            );
        }
        for (value, field) in [
            ("a/b.md", File),
            ("./a/../b.md", File),
            ("/abs/file", File),
            (".hidden", File),
            ("...", File),
            ("a/", Dir),
            ("/", Scope),
            ("a b/c", File),
            ("src/**/*.rs", File),
        ] {
            assert_eq!(syntax_problem(value, field), None, "{value:?} {field:?}");
        }
    }

    #[test]
    fn the_schema_patterns_never_refuse_what_the_rule_accepts() {
        let file = regex_lite(FILE_PATTERN);
        let dir = regex_lite(DIR_PATTERN);
        let samples = [
            "a/b.md", "a\\b", "a//b", "a/", "/", ".", "..", "a/..", ".x", "...", "/abs/x", "a\0b",
            "src/**", "x/./y", "dir/", "//x", "",
        ];
        for s in samples {
            if file.is_match(s) {
                assert_eq!(syntax_problem(s, Field::File), None, "file {s:?}");
            }
            if dir.is_match(s) && !s.is_empty() {
                assert_eq!(syntax_problem(s, Field::Dir), None, "dir {s:?}");
            }
            // And the pattern flags every spelling problem but blankness.
            if syntax_problem(s, Field::File).is_some() && !s.trim().is_empty() {
                assert!(!file.is_match(s), "file pattern lets {s:?} through");
            }
        }
    }

    /// A pattern as the schema validator reads it.
    struct Pattern(jsonschema::Validator);

    impl Pattern {
        fn is_match(&self, s: &str) -> bool {
            self.0.is_valid(&serde_json::json!(s))
        }
    }

    fn regex_lite(p: &str) -> Pattern {
        let schema = serde_json::json!({"type": "string", "pattern": p});
        Pattern(jsonschema::validator_for(&schema).unwrap())
    }

    #[test]
    fn dotdot_is_folded_and_escape_refused() {
        let (_d, root) = root();
        let ok = resolve(&root, "a/../b/c.md", Field::File).unwrap();
        assert_eq!(ok.display, "b/c.md");
        assert!(matches!(
            resolve(&root, "../outside.md", Field::File),
            Err(PathProblem::EscapesRoot { .. })
        ));
        assert!(matches!(
            resolve(&root, "/etc/passwd", Field::File),
            Err(PathProblem::EscapesRoot { .. })
        ));
        assert!(resolve(&root, "/etc", Field::Scope).is_ok());
        assert!(matches!(
            resolve(&root, "", Field::File),
            Err(PathProblem::Invalid(_))
        ));
    }

    #[test]
    fn backslashes_are_refused_not_rewritten() {
        let (_d, root) = root();
        let got = resolve(&root, "..\\outside\\x.md", Field::File);
        assert!(matches!(got, Err(PathProblem::Invalid(ref why)) if why.contains('\\')));
    }

    #[test]
    fn write_scopes_are_never_too_broad() {
        let (_d, root) = root();
        let parent = root.parent().unwrap().to_str().unwrap().to_string();
        for value in ["/", "/proc/self", "/sys", "/dev/shm/x", &parent, "/tmp/.."] {
            assert!(
                matches!(
                    resolve(&root, value, Field::Scope),
                    Err(PathProblem::TooBroad(_))
                ),
                "{value}"
            );
        }
        // Near misses: a sibling of the root, the root itself, a directory
        // whose name merely starts like one of the kernel's.
        let outside = tempfile::tempdir().unwrap();
        let sibling = outside.path().to_str().unwrap();
        assert!(resolve(&root, sibling, Field::Scope).is_ok());
        assert!(resolve(&root, ".", Field::Scope).is_ok());
        assert!(resolve(&root, "/devices-not-dev", Field::Scope).is_ok());
        // A link to `/` is judged by where it lands.
        symlink("/", outside.path().join("slash")).unwrap();
        let via = format!("{sibling}/slash");
        assert!(matches!(
            resolve(&root, &via, Field::Scope),
            Err(PathProblem::TooBroad(_))
        ));
    }

    #[test]
    fn aliases_through_symlinked_directories_are_one_path() {
        let (_d, root) = root();
        std::fs::create_dir_all(root.join("out")).unwrap();
        symlink(root.join("out"), root.join("alias")).unwrap();
        symlink("out", root.join("rel-alias")).unwrap();
        for value in [
            "out/r.md",
            "alias/r.md",
            "rel-alias/r.md",
            "alias/../out/r.md",
        ] {
            assert_eq!(
                resolve(&root, value, Field::File).unwrap().display,
                "out/r.md",
                "{value}"
            );
        }
        // A link to a file resolves to the file.
        std::fs::write(root.join("out/p.md"), "x").unwrap();
        symlink("out/p.md", root.join("p.md")).unwrap();
        assert_eq!(
            resolve(&root, "p.md", Field::File).unwrap().display,
            "out/p.md"
        );
    }

    #[test]
    fn dangling_links_land_where_they_point() {
        let (_d, root) = root();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path().join("not-yet"), root.join("r.md")).unwrap();
        assert!(matches!(
            resolve(&root, "r.md", Field::File),
            Err(PathProblem::EscapesRoot { .. })
        ));
        symlink("out/later.md", root.join("inside.md")).unwrap();
        assert_eq!(
            resolve(&root, "inside.md", Field::File).unwrap().display,
            "out/later.md"
        );
    }

    #[test]
    fn loops_are_refused() {
        let (_d, root) = root();
        symlink("b", root.join("a")).unwrap();
        symlink("a", root.join("b")).unwrap();
        assert!(matches!(
            resolve(&root, "a/x.md", Field::File),
            Err(PathProblem::Invalid(ref why)) if why.contains("loop")
        ));
    }

    #[test]
    fn a_link_to_a_name_with_a_backslash_is_refused() {
        let (_d, root) = root();
        std::fs::create_dir_all(root.join("we\\ird")).unwrap();
        symlink("we\\ird", root.join("plain")).unwrap();
        assert!(matches!(
            resolve(&root, "plain/x.md", Field::File),
            Err(PathProblem::Invalid(_))
        ));
    }

    #[test]
    fn a_link_to_a_name_that_is_not_utf8_is_refused() {
        use std::os::unix::ffi::OsStrExt;
        let (_d, root) = root();
        let odd = root.join(OsStr::from_bytes(b"odd-\xff"));
        std::fs::create_dir_all(&odd).unwrap();
        symlink(&odd, root.join("plain")).unwrap();
        assert!(matches!(
            resolve(&root, "plain/x.md", Field::File),
            Err(PathProblem::Invalid(ref why)) if why.contains("UTF-8")
        ));
        assert!(checked_root(&odd).is_err());
        assert!(checked_root(&root).is_ok());
    }

    #[test]
    fn the_cache_agrees_with_the_kernel() {
        let (_d, root) = root();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        symlink(outside.path(), root.join("a/link")).unwrap();
        symlink(outside.path().join("secret"), root.join("a/b/file")).unwrap();
        symlink("../b/../link/secret", root.join("a/b/rel")).unwrap();
        for p in [
            "a/b/new.md",
            "a/link/x",
            "a/b/file",
            "a/b/rel",
            "a/none/deeper/x",
            "a",
        ] {
            let plain = real_path(&root.join(p));
            let cached = with_cache(|| (real_path(&root.join(p)), real_path(&root.join(p))));
            assert_eq!(cached.0, plain, "{p}");
            assert_eq!(cached.1, plain, "{p}");
            if let Ok(kernel) = root.join(p).canonicalize() {
                assert_eq!(plain, kernel, "{p}");
            }
        }
    }

    #[test]
    fn symlink_out_of_root_is_refused() {
        let (_d, root) = root();
        let outside = tempfile::tempdir().unwrap();
        symlink(outside.path(), root.join("link")).unwrap();
        assert!(matches!(
            resolve(&root, "link/x.md", Field::File),
            Err(PathProblem::EscapesRoot { .. })
        ));
    }
}
