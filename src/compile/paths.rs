//! Path safety: every path an input names resolves inside the project root
//! (after `..` and symlinks), except fields documented to allow absolute
//! paths outside it. Paths are shown project-relative with `/` separators.

use std::cell::RefCell;
use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};

/// A path an input named, resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    /// What the plan records: project-relative (normalised, `/`-separated),
    /// or absolute when the field allows a path outside the root.
    pub display: String,
    /// The absolute path on disk (lexically normalised).
    pub abs: PathBuf,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathProblem {
    Empty,
    EscapesRoot { resolved: PathBuf },
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

/// Resolve symlinks of the longest existing ancestor and append the rest, so
/// a path that does not exist yet (a result file) is still judged by where it
/// would land.
pub fn real_path(path: &Path) -> PathBuf {
    if CACHE.with(|c| c.borrow().is_some()) {
        return normalize(&cached_real(path));
    }
    uncached_real(path)
}

fn uncached_real(path: &Path) -> PathBuf {
    let mut existing = path.to_path_buf();
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        if let Ok(real) = existing.canonicalize() {
            let mut out = real;
            for part in rest.iter().rev() {
                out.push(part);
            }
            return normalize(&out);
        }
        match (existing.file_name(), existing.parent()) {
            (Some(name), Some(parent)) => {
                rest.push(name.to_os_string());
                existing = parent.to_path_buf();
            }
            _ => return normalize(path),
        }
    }
}

thread_local! {
    static CACHE: RefCell<Option<HashMap<PathBuf, PathBuf>>> = const { RefCell::new(None) };
}

/// Run `f` with `real_path` memoised per path. Planning resolves several
/// paths per job that share their directories; resolving each directory once
/// turns thousands of `canonicalize` walks into one `lstat` per path. Only
/// for work that does not change the tree while it runs.
pub fn with_cache<R>(f: impl FnOnce() -> R) -> R {
    CACHE.with(|c| *c.borrow_mut() = Some(HashMap::new()));
    let out = f();
    CACHE.with(|c| *c.borrow_mut() = None);
    out
}

fn cached_real(path: &Path) -> PathBuf {
    if let Some(hit) = CACHE.with(|c| c.borrow().as_ref().and_then(|m| m.get(path).cloned())) {
        return hit;
    }
    let via_parent = |path: &Path| match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => Some(cached_real(parent).join(name)),
        _ => None,
    };
    let real = match std::fs::symlink_metadata(path) {
        // A symlink is resolved by the kernel; anything else (or nothing yet)
        // lands where its directory really is.
        Ok(meta) if meta.file_type().is_symlink() => uncached_real(path),
        _ => via_parent(path).unwrap_or_else(|| uncached_real(path)),
    };
    CACHE.with(|c| {
        if let Some(m) = c.borrow_mut().as_mut() {
            m.insert(path.to_path_buf(), real.clone());
        }
    });
    real
}

/// The project root as okstra uses it everywhere: absolute, symlinks resolved.
pub fn canonical_root(root: &Path) -> PathBuf {
    let abs = if root.is_absolute() {
        root.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(root)
    };
    real_path(&normalize(&abs))
}

/// Resolve `value` against `root` (already canonical). With `allow_outside`,
/// an absolute path outside the root is accepted as is.
pub fn resolve(root: &Path, value: &str, allow_outside: bool) -> Result<Resolved, PathProblem> {
    if value.trim().is_empty() {
        return Err(PathProblem::Empty);
    }
    let given = Path::new(value);
    let joined = if given.is_absolute() {
        given.to_path_buf()
    } else {
        root.join(given)
    };
    let lexical = normalize(&joined);
    let real = real_path(&lexical);
    if let Ok(rel) = real.strip_prefix(root) {
        // Inside (after symlinks). Record the lexical form the user wrote
        // when it is also inside, so the plan reads like the spec.
        let shown = lexical.strip_prefix(root).unwrap_or(rel);
        return Ok(Resolved {
            display: to_slash(shown),
            abs: root.join(shown),
        });
    }
    if allow_outside && given.is_absolute() {
        return Ok(Resolved {
            display: to_slash(&real),
            abs: real,
        });
    }
    Err(PathProblem::EscapesRoot { resolved: real })
}

pub fn to_slash(p: &Path) -> String {
    let s = p.to_string_lossy().replace('\\', "/");
    if s.is_empty() {
        ".".into()
    } else {
        s
    }
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

/// How a file outside the project (a CLI argument) is named in the plan:
/// project-relative when inside, absolute otherwise.
pub fn display_for(root: &Path, path: &Path) -> String {
    let abs = real_path(&normalize(&if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().unwrap_or_default().join(path)
    }));
    match abs.strip_prefix(root) {
        Ok(rel) => to_slash(rel),
        Err(_) => to_slash(&abs),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dotdot_is_folded_and_escape_refused() {
        let dir = tempfile::tempdir().unwrap();
        let root = canonical_root(dir.path());
        let ok = resolve(&root, "a/../b/c.md", false).unwrap();
        assert_eq!(ok.display, "b/c.md");
        assert!(matches!(
            resolve(&root, "../outside.md", false),
            Err(PathProblem::EscapesRoot { .. })
        ));
        assert!(matches!(
            resolve(&root, "/etc/passwd", false),
            Err(PathProblem::EscapesRoot { .. })
        ));
        assert!(resolve(&root, "/etc", true).is_ok());
        assert_eq!(resolve(&root, "", false), Err(PathProblem::Empty));
    }

    #[test]
    fn the_cache_agrees_with_the_kernel() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = canonical_root(dir.path());
        std::fs::create_dir_all(root.join("a/b")).unwrap();
        std::fs::write(outside.path().join("secret"), "x").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.join("a/link")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret"), root.join("a/b/file")).unwrap();
        for p in ["a/b/new.md", "a/link/x", "a/b/file", "a/none/deeper/x", "a"] {
            let plain = real_path(&root.join(p));
            let cached = with_cache(|| (real_path(&root.join(p)), real_path(&root.join(p))));
            assert_eq!(cached.0, plain, "{p}");
            assert_eq!(cached.1, plain, "{p}");
        }
    }

    #[test]
    fn symlink_out_of_root_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        let root = canonical_root(dir.path());
        std::os::unix::fs::symlink(outside.path(), root.join("link")).unwrap();
        assert!(matches!(
            resolve(&root, "link/x.md", false),
            Err(PathProblem::EscapesRoot { .. })
        ));
    }
}
