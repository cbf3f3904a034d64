//! What the audit reads inside a git directory (docs/audit.md#inside-git).
//!
//! Everything git executes or reads as configuration is walked like any
//! other tree, file by file: `hooks/`, `config`, `config.worktree`, `info/`,
//! `objects/info/` (alternates point the object store elsewhere),
//! `remotes/` and `branches/` (legacy remote configuration), `commondir` and
//! `gitdir` (which redirect a linked worktree's git directory); so are
//! `HEAD`, `packed-refs` and `refs/`, which say what each ref names, so a
//! commit shows as the ref it moved. The same holds for every git directory
//! below `modules/` (a submodule's, at any depth of nesting) and
//! `worktrees/`.
//!
//! Left out: the index (read-only commands such as `git status` rewrite it
//! to refresh stat data, and any content a worker stages came from a work
//! tree file the walk sees), the object store (content-addressed: nothing
//! in it takes effect unless a ref, audited, names it), reflogs, and git's
//! per-operation scratch files (`COMMIT_EDITMSG`, `ORIG_HEAD`,
//! `FETCH_HEAD`, lock files, ...).
//!
//! A `.git` *file* (the `gitdir:` pointer of a submodule or worktree
//! checkout) is an ordinary file and audited as one.

use super::snapshot::Kind;

/// How the walk treats a directory, by where it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Area {
    /// An ordinary directory: every entry is audited.
    Tree,
    /// A git directory: only the entries listed in [`GITDIR_AUDITED`].
    GitDir,
    /// `objects/` of a git directory: only `info/`.
    Objects,
    /// `modules/` of a git directory, or a directory below it that is not a
    /// git directory itself (a submodule named `a/b` lives in
    /// `modules/a/b/`): every entry is audited, and each subdirectory is
    /// looked at again once listed.
    Modules,
    /// `worktrees/` of a git directory: every entry is audited, and each
    /// subdirectory is a linked worktree's git directory.
    Worktrees,
}

/// The entries of a git directory the audit walks.
const GITDIR_AUDITED: [&[u8]; 14] = [
    b"HEAD",
    b"branches",
    b"commondir",
    b"config",
    b"config.worktree",
    b"gitdir",
    b"hooks",
    b"info",
    b"modules",
    b"objects",
    b"packed-refs",
    b"refs",
    b"remotes",
    b"worktrees",
];

impl Area {
    /// Whether an entry called `name` in a directory of this area is
    /// audited. Decided on the name alone, before any `lstat`, so what is
    /// left out costs nothing.
    pub(crate) fn keeps(self, name: &[u8]) -> bool {
        match self {
            Area::Tree | Area::Modules | Area::Worktrees => true,
            Area::GitDir => GITDIR_AUDITED.contains(&name),
            Area::Objects => name == b"info",
        }
    }

    /// The area of the subdirectory `name`.
    pub(crate) fn child(self, name: &[u8]) -> Area {
        match (self, name) {
            (Area::Tree, b".git") => Area::GitDir,
            (Area::GitDir, b"objects") => Area::Objects,
            (Area::GitDir, b"modules") => Area::Modules,
            (Area::GitDir, b"worktrees") => Area::Worktrees,
            (Area::Modules, _) => Area::Modules,
            (Area::Worktrees, _) => Area::GitDir,
            _ => Area::Tree,
        }
    }

    /// A directory under `modules/` is a submodule's git directory when it
    /// looks like one to git: `HEAD`, and `objects/` or a `commondir`.
    /// Decided once its entries are listed (`kind_of` looks one up).
    pub(crate) fn settle(self, kind_of: impl Fn(&[u8]) -> Option<Kind>) -> Area {
        if self != Area::Modules {
            return self;
        }
        let file = |name: &[u8]| kind_of(name).is_some_and(|k| k != Kind::Dir);
        if file(b"HEAD") && (kind_of(b"objects") == Some(Kind::Dir) || file(b"commondir")) {
            Area::GitDir
        } else {
            Area::Modules
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_audited_list_is_sorted_for_review() {
        let mut sorted = GITDIR_AUDITED;
        sorted.sort();
        assert_eq!(sorted, GITDIR_AUDITED);
    }

    #[test]
    fn areas() {
        assert_eq!(Area::Tree.child(b".git"), Area::GitDir);
        assert_eq!(Area::Tree.child(b"src"), Area::Tree);
        for name in [&b"hooks"[..], b"info", b"refs", b"remotes", b"branches"] {
            assert!(Area::GitDir.keeps(name));
            assert_eq!(Area::GitDir.child(name), Area::Tree);
        }
        for name in [
            &b"index"[..],
            b"logs",
            b"COMMIT_EDITMSG",
            b"ORIG_HEAD",
            b"index.lock",
        ] {
            assert!(
                !Area::GitDir.keeps(name),
                "{}",
                String::from_utf8_lossy(name)
            );
        }
        assert!(Area::Objects.keeps(b"info"));
        assert!(!Area::Objects.keeps(b"pack") && !Area::Objects.keeps(b"ab"));
        assert_eq!(Area::Worktrees.child(b"w"), Area::GitDir);
        assert_eq!(Area::Modules.child(b"sub"), Area::Modules);
        let listing = |names: &'static [(&'static [u8], Kind)]| {
            move |n: &[u8]| names.iter().find(|(m, _)| *m == n).map(|(_, k)| *k)
        };
        let gitdir: &[(&[u8], Kind)] = &[(b"HEAD", Kind::File), (b"objects", Kind::Dir)];
        let linked: &[(&[u8], Kind)] = &[(b"HEAD", Kind::File), (b"commondir", Kind::File)];
        let namespace: &[(&[u8], Kind)] = &[(b"x", Kind::Dir), (b"objects", Kind::Dir)];
        assert_eq!(Area::Modules.settle(listing(gitdir)), Area::GitDir);
        assert_eq!(Area::Modules.settle(listing(linked)), Area::GitDir);
        assert_eq!(Area::Modules.settle(listing(namespace)), Area::Modules);
        assert_eq!(Area::Tree.settle(listing(gitdir)), Area::Tree);
        // A work tree inside a hook directory is still a work tree.
        assert_eq!(
            Area::Tree.child(b".git").child(b"hooks").child(b".git"),
            Area::GitDir
        );
    }
}
