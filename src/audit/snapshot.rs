//! The recorded state of the audited tree, and its sidecar form.
//!
//! A snapshot is a tree of directory listings: `dirs[i]` holds the sorted
//! entries of one directory, and an entry that is a walked directory points
//! at its own listing by index (`d`). Roots point at theirs. Keeping the
//! tree as indices rather than a map keyed by path keeps a snapshot linear
//! in the number of entries however deep the tree is (a map keyed by path
//! holds every prefix of a deep path once per level), and lets compare walk
//! the old tree beside the new one without building a path per directory.
//!
//! Listings are numbered in preorder (roots in order, entries by name), so
//! the same tree always gives the same document and the same digest.
//!
//! Sidecar format, version 2 (`SNAPSHOT_VERSION`): JSON
//! `{"version", "takenAtNs", "roots": [{"path", "dir"?}], "dirs": [[entry]],
//! "digest"}`; an entry is `{"n": name, "k": "f"|"d"|"l"|"o", "s": size,
//! "m": mtime ns, "c": ctime ns, "i": inode, "p": st_mode, "h"?: sha256 hex,
//! "t"?: symlink target, "d"?: listing index}`. Names, targets and root
//! paths are stored in the escaped form of [`super::name`], which reads back
//! to the exact bytes, so a name that is not UTF-8 survives a resumed exec.
//! Version 1 (names as lossy UTF-8, listings keyed by path) is refused.

use super::error::{AuditError, Step};
use super::name::{self, escaped};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::io;

pub const SNAPSHOT_VERSION: u32 = 2;

/// What one directory entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Kind {
    #[serde(rename = "f")]
    File,
    #[serde(rename = "d")]
    Dir,
    #[serde(rename = "l")]
    Symlink,
    #[serde(rename = "o")]
    Other,
}

/// One `lstat`ed directory entry. Short wire names: a snapshot of a large
/// tree holds one of these per file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Entry {
    /// The name as the directory holds it: bytes, not necessarily UTF-8.
    #[serde(rename = "n", with = "escaped")]
    pub name: Vec<u8>,
    #[serde(rename = "k")]
    pub kind: Kind,
    #[serde(rename = "s")]
    pub size: u64,
    #[serde(rename = "m")]
    pub mtime_ns: i64,
    #[serde(rename = "c")]
    pub ctime_ns: i64,
    #[serde(rename = "i")]
    pub ino: u64,
    #[serde(rename = "p")]
    pub mode: u32,
    /// sha256 of the content, where it was taken.
    #[serde(
        rename = "h",
        default,
        with = "hex_hash",
        skip_serializing_if = "Option::is_none"
    )]
    pub hash: Option<[u8; 32]>,
    /// Symlink target, the bytes stored in the link.
    #[serde(
        rename = "t",
        default,
        with = "escaped::opt",
        skip_serializing_if = "Option::is_none"
    )]
    pub target: Option<Vec<u8>>,
    /// Index in [`Snapshot::dirs`] of this directory's listing, where the
    /// audit walked it (not every directory under `.git` is walked).
    #[serde(rename = "d", default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<u32>,
}

/// A walked root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Root {
    /// Display path: empty for the project root, absolute (escaped) for a
    /// root outside it.
    #[serde(with = "escaped")]
    pub path: Vec<u8>,
    /// Its listing; `None` when the root did not exist.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<u32>,
}

/// The state of the audited tree at one moment. Stored as a sidecar before
/// a stage's first dispatch so a resumed exec compares against it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", try_from = "Unchecked")]
pub struct Snapshot {
    pub version: u32,
    pub taken_at_ns: i64,
    pub roots: Vec<Root>,
    /// Every walked directory's entries, sorted by name bytes.
    pub dirs: Vec<Vec<Entry>>,
    pub digest: String,
}

/// A snapshot as read, before [`Snapshot::check`] vouches for its shape.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Unchecked {
    version: u32,
    taken_at_ns: i64,
    roots: Vec<Root>,
    dirs: Vec<Vec<Entry>>,
    digest: String,
}

/// Why a stored snapshot cannot be used: another version, or a tree that
/// does not hold together. Refused, never followed nor replaced by a fresh
/// one (docs/audit.md#the-audit-fails-closed).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BrokenSnapshot {
    /// Written by an okstra of another sidecar version.
    #[error("snapshot version {0} (this okstra reads version {SNAPSHOT_VERSION})")]
    Version(u32),
    /// A listing referenced out of range, backwards, or twice.
    #[error("snapshot listing {0} is out of place")]
    OutOfPlace(u32),
    /// A listing whose names are not in strictly increasing byte order.
    #[error("snapshot listing {0} is not sorted")]
    Unsorted(usize),
    /// A listing holding an empty name, or one with `/` or NUL in it.
    #[error("snapshot listing {0} holds an impossible name")]
    ImpossibleName(usize),
    /// A listing where an entry that is not a directory points at a listing.
    #[error("snapshot listing {0}: a non-directory has a listing")]
    NonDirectoryListed(usize),
}

impl TryFrom<Unchecked> for Snapshot {
    type Error = BrokenSnapshot;

    fn try_from(u: Unchecked) -> Result<Self, BrokenSnapshot> {
        let s = Snapshot {
            version: u.version,
            taken_at_ns: u.taken_at_ns,
            roots: u.roots,
            dirs: u.dirs,
            digest: u.digest,
        };
        s.check()?;
        Ok(s)
    }
}

impl Snapshot {
    /// Read a stored sidecar. A sidecar of another version, or one whose
    /// tree does not hold together, is an error, never a fresh start: a
    /// resumed exec that took a new snapshot instead would miss whatever the
    /// stage's workers already changed.
    pub fn from_json(bytes: &[u8]) -> Result<Snapshot, AuditError> {
        serde_json::from_slice(bytes).map_err(|e| {
            AuditError::new(
                Step::Snapshot,
                "snapshot sidecar",
                io::Error::new(io::ErrorKind::InvalidData, e),
            )
        })
    }

    /// Read a stored sidecar as [`Self::from_json`] does, from `reader`,
    /// with the sha256 (hex) of the bytes read. They are digested as they
    /// are parsed: the digest is of exactly the bytes the snapshot came
    /// from (a second read could meet another file), and memory holds the
    /// snapshot, not the file as well. A sidecar that does not parse is
    /// still read to its end, so its digest is the whole file's. `Err`: the
    /// file could not be read.
    pub fn read_digested(
        reader: impl io::Read,
    ) -> io::Result<(String, Result<Snapshot, AuditError>)> {
        let digesting = Digesting {
            inner: reader,
            sha: Sha256::new(),
        };
        // serde reads a byte at a time: the buffer keeps that off the file
        // and hands the digest whole blocks.
        let mut input = io::BufReader::with_capacity(64 * 1024, digesting);
        let parsed = match serde_json::from_reader(&mut input) {
            Ok(s) => Ok(s),
            Err(e) if e.is_io() => return Err(e.into()),
            Err(e) => {
                io::copy(&mut input, &mut io::sink())?;
                Err(AuditError::new(
                    Step::Snapshot,
                    "snapshot sidecar",
                    io::Error::new(io::ErrorKind::InvalidData, e),
                ))
            }
        };
        Ok((hex(&input.into_inner().sha.finalize()), parsed))
    }

    pub fn to_json(&self) -> Vec<u8> {
        // Serialising plain data into memory cannot fail.
        serde_json::to_vec(self).unwrap_or_default()
    }

    /// Compare indexes listings by the numbers stored here; a broken
    /// sidecar must be refused, not followed out of bounds or round a loop.
    /// Listings are in preorder, so every reference points forward, and
    /// each listing belongs to one entry or root.
    pub(crate) fn check(&self) -> Result<(), BrokenSnapshot> {
        if self.version != SNAPSHOT_VERSION {
            return Err(BrokenSnapshot::Version(self.version));
        }
        let mut owned = vec![false; self.dirs.len()];
        let mut claim = |d: u32, after: Option<usize>| {
            let i = d as usize;
            if i >= owned.len() || owned[i] || after.is_some_and(|p| i <= p) {
                return Err(BrokenSnapshot::OutOfPlace(d));
            }
            owned[i] = true;
            Ok(())
        };
        for r in &self.roots {
            if let Some(d) = r.dir {
                claim(d, None)?;
            }
        }
        for (i, entries) in self.dirs.iter().enumerate() {
            for pair in entries.windows(2) {
                if pair[0].name >= pair[1].name {
                    return Err(BrokenSnapshot::Unsorted(i));
                }
            }
            for e in entries {
                if e.name.is_empty() || e.name.contains(&b'/') || e.name.contains(&0) {
                    return Err(BrokenSnapshot::ImpossibleName(i));
                }
                if let Some(d) = e.dir {
                    if e.kind != Kind::Dir {
                        return Err(BrokenSnapshot::NonDirectoryListed(i));
                    }
                    claim(d, Some(i))?;
                }
            }
        }
        Ok(())
    }

    /// The entry at a display path (`a/b.txt`, or absolute under a root
    /// outside the project), names escaped as in `changedPaths`.
    pub fn entry(&self, path: &str) -> Option<&Entry> {
        let (mut dir, rest) = self.locate(path)?;
        let mut parts = rest.split('/').filter(|p| !p.is_empty()).peekable();
        while let Some(part) = parts.next() {
            let name = name::unescape(part)?;
            let entries = self.dirs.get(dir as usize)?;
            let i = entries
                .binary_search_by(|e| e.name.as_slice().cmp(&name))
                .ok()?;
            if parts.peek().is_none() {
                return Some(&entries[i]);
            }
            dir = entries[i].dir?;
        }
        None
    }

    /// The entries of the directory at a display path (`""` for the
    /// project root).
    pub fn listing(&self, path: &str) -> Option<&[Entry]> {
        let (root, rest) = self.locate(path)?;
        let d = if rest.trim_matches('/').is_empty() {
            root
        } else {
            self.entry(path)?.dir?
        };
        self.dirs.get(d as usize).map(Vec::as_slice)
    }

    /// The root holding a display path, and the path below it.
    fn locate<'p>(&self, path: &'p str) -> Option<(u32, &'p str)> {
        self.roots
            .iter()
            .filter_map(|r| {
                let disp = name::escape(&r.path);
                let rest = if disp.is_empty() {
                    (!path.starts_with('/')).then_some(path)?
                } else {
                    let rest = path.strip_prefix(disp.as_ref())?;
                    (rest.is_empty() || rest.starts_with('/')).then_some(rest)?
                };
                Some((r.dir?, rest, disp.len()))
            })
            .max_by_key(|(_, _, len)| *len)
            .map(|(d, rest, _)| (d, rest))
    }
}

/// A reader that digests what passes through it.
struct Digesting<R> {
    inner: R,
    sha: Sha256,
}

impl<R: io::Read> io::Read for Digesting<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.sha.update(&buf[..n]);
        Ok(n)
    }
}

/// Renumber listings into preorder (roots in order, entries by name) and
/// drop any listing no root reaches. The walk numbers listings in the order
/// its threads reach them; the stored form must not depend on that.
pub(crate) fn into_preorder(
    roots: &mut [Root],
    mut dirs: Vec<Option<Vec<Entry>>>,
) -> Vec<Vec<Entry>> {
    let mut order: Vec<u32> = Vec::with_capacity(dirs.len());
    let mut new_index = vec![u32::MAX; dirs.len()];
    let mut stack: Vec<u32> = roots.iter().rev().filter_map(|r| r.dir).collect();
    while let Some(d) = stack.pop() {
        let Some(entries) = dirs.get(d as usize).and_then(Option::as_ref) else {
            continue;
        };
        new_index[d as usize] = order.len() as u32;
        order.push(d);
        stack.extend(entries.iter().rev().filter_map(|e| e.dir));
    }
    for r in roots.iter_mut() {
        r.dir = r.dir.map(|d| new_index[d as usize]);
    }
    order
        .into_iter()
        .map(|d| {
            let mut entries = dirs[d as usize].take().unwrap_or_default();
            for e in &mut entries {
                e.dir = e.dir.map(|c| new_index[c as usize]);
            }
            entries
        })
        .collect()
}

/// sha256 over every listing, in preorder: one hash per listing (in
/// parallel), then one over those and the roots.
pub(crate) fn tree_digest(roots: &[Root], dirs: &[Vec<Entry>]) -> String {
    let per_dir: Vec<[u8; 32]> = dirs
        .par_iter()
        .map(|entries| {
            let mut h = Sha256::new();
            for e in entries {
                h.update((e.name.len() as u64).to_le_bytes());
                h.update(&e.name);
                h.update([e.kind as u8]);
                h.update(e.size.to_le_bytes());
                h.update(e.mtime_ns.to_le_bytes());
                h.update(e.ctime_ns.to_le_bytes());
                h.update(e.ino.to_le_bytes());
                h.update(e.mode.to_le_bytes());
                match &e.hash {
                    Some(x) => {
                        h.update([1u8]);
                        h.update(x);
                    }
                    None => h.update([0u8]),
                }
                match &e.target {
                    Some(t) => {
                        h.update([1u8]);
                        h.update((t.len() as u64).to_le_bytes());
                        h.update(t);
                    }
                    None => h.update([0u8]),
                }
                h.update(e.dir.map_or(u64::MAX, u64::from).to_le_bytes());
            }
            h.finalize().into()
        })
        .collect();
    let mut h = Sha256::new();
    for r in roots {
        h.update((r.path.len() as u64).to_le_bytes());
        h.update(&r.path);
        h.update(r.dir.map_or(u64::MAX, u64::from).to_le_bytes());
    }
    for d in &per_dir {
        h.update(d);
    }
    format!("sha256:{}", hex(&h.finalize()))
}

/// Lowercase hex of some bytes.
pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

/// A content hash as 64 lowercase hex digits in the sidecar.
mod hex_hash {
    use serde::{de, Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(h: &Option<[u8; 32]>, s: S) -> Result<S::Ok, S::Error> {
        match h {
            Some(h) => s.serialize_some(&super::hex(h)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u8; 32]>, D::Error> {
        let Some(text) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        let bytes = text.as_bytes();
        if bytes.len() != 64 {
            return Err(de::Error::custom("a content hash is 64 hex digits"));
        }
        let mut out = [0u8; 32];
        for (i, pair) in bytes.chunks(2).enumerate() {
            let s = std::str::from_utf8(pair).map_err(de::Error::custom)?;
            out[i] = u8::from_str_radix(s, 16).map_err(de::Error::custom)?;
        }
        Ok(Some(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broken_snapshot_reads_as_it_always_did() {
        let said = [
            BrokenSnapshot::Version(1),
            BrokenSnapshot::OutOfPlace(7),
            BrokenSnapshot::Unsorted(0),
            BrokenSnapshot::ImpossibleName(2),
            BrokenSnapshot::NonDirectoryListed(3),
        ]
        .map(|e| e.to_string());
        assert_eq!(
            said,
            [
                "snapshot version 1 (this okstra reads version 2)",
                "snapshot listing 7 is out of place",
                "snapshot listing 0 is not sorted",
                "snapshot listing 2 holds an impossible name",
                "snapshot listing 3: a non-directory has a listing",
            ]
        );
    }

    #[test]
    fn a_sidecar_of_another_version_is_refused_by_its_check() {
        let old = Snapshot {
            version: 1,
            taken_at_ns: 0,
            roots: vec![],
            dirs: vec![],
            digest: String::new(),
        };
        assert_eq!(old.check(), Err(BrokenSnapshot::Version(1)));
        let e = Snapshot::from_json(&old.to_json()).unwrap_err();
        assert!(
            e.to_string()
                .contains("snapshot version 1 (this okstra reads version 2)"),
            "{e}"
        );
    }

    #[test]
    fn a_sidecar_read_back_comes_with_the_digest_of_every_byte_read() {
        let entry = Entry {
            // Not UTF-8: escaped in the file, read back through a reader.
            name: b"a\xffb".to_vec(),
            kind: Kind::File,
            size: 3,
            mtime_ns: 1,
            ctime_ns: 2,
            ino: 3,
            mode: 0o100644,
            hash: Some([7; 32]),
            target: None,
            dir: None,
        };
        let mut roots = vec![Root {
            path: vec![],
            dir: Some(0),
        }];
        let dirs = into_preorder(&mut roots, vec![Some(vec![entry])]);
        let digest = tree_digest(&roots, &dirs);
        let s = Snapshot {
            version: SNAPSHOT_VERSION,
            taken_at_ns: 5,
            roots,
            dirs,
            digest,
        };
        let bytes = s.to_json();
        let (sha, back) = Snapshot::read_digested(&bytes[..]).unwrap();
        assert_eq!(sha, crate::canonical::sha256_hex(&bytes));
        assert_eq!(back.unwrap(), s);
        // A byte the tree digest does not cover: the snapshot still reads,
        // the file's digest tells it changed.
        let text = String::from_utf8(bytes.clone()).unwrap();
        let edited = text.replace("\"takenAtNs\":5", "\"takenAtNs\":6");
        assert_ne!(edited, text);
        let (sha, back) = Snapshot::read_digested(edited.as_bytes()).unwrap();
        assert_eq!(back.unwrap().digest, s.digest);
        assert_ne!(sha, crate::canonical::sha256_hex(&bytes));
        // One that does not parse is read to its end all the same.
        let broken = [&bytes[..10], b"!", &bytes[10..]].concat();
        let (sha, back) = Snapshot::read_digested(&broken[..]).unwrap();
        assert!(back.is_err());
        assert_eq!(sha, crate::canonical::sha256_hex(&broken));
    }
}
