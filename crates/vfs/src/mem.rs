//! A [`FileSystem`] in memory, for tests that drive the engine without a
//! disk: files are byte vectors, ids count up from 1 (the root), and every
//! time comes from the clock it is given, so the same requests give the
//! same answers byte for byte. It follows [`crate::PosixFs`]'s rules
//! (names, dispositions, errors); it has no links and no streams.

use crate::{
    posix::split, CreateAction, DirEntry, Disposition, FileObject, FileStat, FileSystem, FsError,
    FsStat, Handle, Kind, OpenOptions, SetTimes,
};
use smbq_wire::ea::Ea;
use smbq_wire::NtStatus;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

/// FILETIME now (100 ns units since 1601).
pub type Clock = Arc<dyn Fn() -> u64 + Send + Sync>;

const BLOCK: u64 = 4096;
const TOTAL_BLOCKS: u64 = 1 << 20;
const ATTR_READONLY: u32 = 0x01;
const ATTR_DIRECTORY: u32 = 0x10;
const ATTR_ARCHIVE: u32 = 0x20;
const ATTR_NORMAL: u32 = 0x80;

#[derive(Debug)]
struct Node {
    is_dir: bool,
    data: Vec<u8>,
    allocation: u64,
    created: u64,
    accessed: u64,
    written: u64,
    changed: u64,
    /// Stored FILE_ATTRIBUTE_* ([`crate::STORED_ATTRIBUTES`]).
    attributes: u32,
    /// Extended attributes by name, in the case they were set.
    eas: BTreeMap<String, Vec<u8>>,
    /// 0 once unlinked (open handles keep it).
    nlink: u32,
}

#[derive(Debug, Default)]
struct Tree {
    /// Share-relative path (components joined by `\`) to node id.
    names: BTreeMap<String, u64>,
    nodes: HashMap<u64, Node>,
    next_id: u64,
}

pub struct MemFs {
    tree: Arc<Mutex<Tree>>,
    read_only: bool,
    clock: Clock,
    cold: Arc<AtomicBool>,
}

impl std::fmt::Debug for MemFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFs").field("read_only", &self.read_only).finish_non_exhaustive()
    }
}

fn status(s: NtStatus) -> FsError {
    FsError::Status(s)
}

fn lock(tree: &Mutex<Tree>) -> MutexGuard<'_, Tree> {
    tree.lock().unwrap_or_else(|p| p.into_inner())
}

impl Tree {
    fn add(&mut self, path: String, is_dir: bool, now: u64) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let node = Node { is_dir, data: Vec::new(), allocation: 0, created: now, accessed: now, written: now, changed: now, attributes: if is_dir { 0 } else { ATTR_ARCHIVE }, eas: BTreeMap::new(), nlink: 1 };
        self.nodes.insert(id, node);
        self.names.insert(path, id);
        id
    }

    /// The node named by `comps`, or why there is none: OBJECT_NAME_NOT_FOUND,
    /// or OBJECT_PATH_NOT_FOUND when its parent is missing or no directory.
    fn find(&self, comps: &[&str]) -> Result<u64, FsError> {
        if let Some(&id) = self.names.get(&comps.join("\\")) {
            return Ok(id);
        }
        let parent = comps.split_last().map_or(&[][..], |(_, p)| p);
        let dir = self.names.get(&parent.join("\\")).and_then(|id| self.nodes.get(id)).is_some_and(|n| n.is_dir);
        Err(status(if dir { NtStatus::OBJECT_NAME_NOT_FOUND } else { NtStatus::OBJECT_PATH_NOT_FOUND }))
    }

    fn node(&self, id: u64) -> Result<&Node, FsError> {
        self.nodes.get(&id).ok_or(status(NtStatus::FILE_CLOSED))
    }

    fn node_mut(&mut self, id: u64) -> Result<&mut Node, FsError> {
        self.nodes.get_mut(&id).ok_or(status(NtStatus::FILE_CLOSED))
    }

    fn stat(&self, id: u64) -> Result<FileStat, FsError> {
        let n = self.node(id)?;
        let size = if n.is_dir { 0 } else { n.data.len() as u64 };
        let attributes = match n.attributes | if n.is_dir { ATTR_DIRECTORY } else { 0 } {
            0 => ATTR_NORMAL,
            a => a,
        };
        Ok(FileStat {
            file_id: id,
            size,
            allocation_size: size.max(n.allocation).div_ceil(BLOCK) * BLOCK,
            creation_time: n.created,
            last_access_time: n.accessed,
            last_write_time: n.written,
            change_time: n.changed,
            attributes,
            nlink: n.nlink,
            is_dir: n.is_dir,
            unix: None,
        })
    }

    /// The names directly below directory `path`, with their ids, in name order.
    fn children(&self, path: &str) -> Vec<(String, u64)> {
        let prefix = if path.is_empty() { String::new() } else { format!("{path}\\") };
        self.names
            .range(prefix.clone()..)
            .take_while(|(k, _)| k.starts_with(&prefix))
            .filter(|(k, _)| !k.is_empty() && !k[prefix.len()..].contains('\\'))
            .map(|(k, &id)| (k[prefix.len()..].to_string(), id))
            .collect()
    }
}

impl MemFs {
    /// An empty share whose times come from `clock`.
    pub fn new(clock: impl Fn() -> u64 + Send + Sync + 'static) -> MemFs {
        let clock: Clock = Arc::new(clock);
        let mut tree = Tree::default();
        tree.add(String::new(), true, clock());
        MemFs { tree: Arc::new(Mutex::new(tree)), read_only: false, clock, cold: Arc::default() }
    }

    /// Act as a cold page cache from now on (`true`): no read can be had
    /// without waiting ([`FileObject::read_cached`] answers `None`), so
    /// the engine hands every READ to its pool.
    pub fn set_cold(&self, cold: bool) {
        self.cold.store(cold, Ordering::Relaxed);
    }

    fn writable(&self) -> Result<(), FsError> {
        if self.read_only {
            Err(FsError::ReadOnly)
        } else {
            Ok(())
        }
    }
}

impl FileSystem for MemFs {
    fn read_only(&self) -> bool {
        self.read_only
    }

    fn read_only_view(&self) -> Arc<dyn FileSystem> {
        Arc::new(MemFs { tree: Arc::clone(&self.tree), read_only: true, clock: Arc::clone(&self.clock), cold: Arc::clone(&self.cold) })
    }

    fn open(&self, path: &str, opts: &OpenOptions) -> Result<(Handle, CreateAction), FsError> {
        let comps = split(path)?;
        let truncate = matches!(opts.disposition, Disposition::Supersede | Disposition::Overwrite | Disposition::OverwriteIf);
        if opts.kind == Kind::Directory && truncate {
            return Err(status(NtStatus::INVALID_PARAMETER));
        }
        if self.read_only && (opts.write || truncate || opts.disposition == Disposition::Create) {
            return Err(FsError::ReadOnly);
        }
        let now = (self.clock)();
        let mut tree = lock(&self.tree);
        let (id, action) = match tree.find(&comps) {
            Ok(id) => {
                let n = tree.node_mut(id)?;
                match (opts.disposition, opts.kind) {
                    (Disposition::Create, _) => return Err(status(NtStatus::OBJECT_NAME_COLLISION)),
                    (_, Kind::Directory) if !n.is_dir => return Err(status(NtStatus::NOT_A_DIRECTORY)),
                    (_, Kind::NonDirectory) if n.is_dir => return Err(status(NtStatus::FILE_IS_A_DIRECTORY)),
                    _ if truncate && n.is_dir => return Err(status(NtStatus::FILE_IS_A_DIRECTORY)),
                    _ => {}
                }
                if (opts.write || truncate) && n.attributes & ATTR_READONLY != 0 && !n.is_dir {
                    return Err(status(NtStatus::ACCESS_DENIED));
                }
                if truncate {
                    n.data.clear();
                    n.allocation = 0;
                    n.written = now;
                    n.changed = now;
                }
                let action = match opts.disposition {
                    Disposition::Supersede => CreateAction::Superseded,
                    _ if truncate => CreateAction::Overwritten,
                    _ => CreateAction::Opened,
                };
                (id, action)
            }
            Err(FsError::Status(NtStatus::OBJECT_NAME_NOT_FOUND))
                if !matches!(opts.disposition, Disposition::Open | Disposition::Overwrite) =>
            {
                let id = tree.add(comps.join("\\"), opts.kind == Kind::Directory, now);
                let parent = comps.split_last().map_or(String::new(), |(_, p)| p.join("\\"));
                if let Some(p) = tree.names.get(&parent).copied() {
                    let p = tree.node_mut(p)?;
                    p.written = now;
                    p.changed = now;
                }
                (id, CreateAction::Created)
            }
            Err(e) => return Err(e),
        };
        let is_dir = tree.node(id)?.is_dir;
        let file = MemFile { tree: Arc::clone(&self.tree), id, write: opts.write && !self.read_only, clock: Arc::clone(&self.clock), cold: Arc::clone(&self.cold) };
        Ok((Handle::new(comps.join("\\"), is_dir, Arc::new(file)), action))
    }

    fn stat_path(&self, path: &str) -> Result<FileStat, FsError> {
        let comps = split(path)?;
        let tree = lock(&self.tree);
        tree.stat(tree.find(&comps)?)
    }

    fn unlink(&self, path: &str, _is_dir: bool) -> Result<(), FsError> {
        self.writable()?;
        let key = split(path)?.join("\\");
        let mut tree = lock(&self.tree);
        let id = *tree.names.get(&key).ok_or(status(NtStatus::OBJECT_NAME_NOT_FOUND))?;
        if key.is_empty() {
            return Err(status(NtStatus::ACCESS_DENIED));
        }
        if tree.node(id)?.is_dir && !tree.children(&key).is_empty() {
            return Err(status(NtStatus::DIRECTORY_NOT_EMPTY));
        }
        tree.names.remove(&key);
        tree.node_mut(id)?.nlink = 0;
        Ok(())
    }

    fn rename(&self, from: &str, to: &str, replace: bool) -> Result<(), FsError> {
        self.writable()?;
        let (from, to) = (split(from)?, split(to)?);
        let now = (self.clock)();
        let mut tree = lock(&self.tree);
        let id = tree.find(&from)?;
        let (from, to) = (from.join("\\"), to.join("\\"));
        if from.is_empty() || to.is_empty() || to.starts_with(&format!("{from}\\")) {
            return Err(status(NtStatus::ACCESS_DENIED));
        }
        match tree.find(&split(&to)?) {
            Ok(existing) if existing == id => return Ok(()),
            Ok(_) if !replace => return Err(status(NtStatus::OBJECT_NAME_COLLISION)),
            Ok(existing) if tree.node(existing)?.is_dir => return Err(status(NtStatus::ACCESS_DENIED)),
            Ok(existing) => {
                tree.names.remove(&to);
                tree.node_mut(existing)?.nlink = 0;
            }
            Err(FsError::Status(NtStatus::OBJECT_NAME_NOT_FOUND)) => {}
            Err(e) => return Err(e),
        }
        // The name and, for a directory, every name below it.
        let moved: Vec<(String, u64)> = tree
            .names
            .iter()
            .filter(|(k, _)| **k == from || k.starts_with(&format!("{from}\\")))
            .map(|(k, &v)| (k.clone(), v))
            .collect();
        for (k, v) in moved {
            tree.names.remove(&k);
            tree.names.insert(format!("{to}{}", &k[from.len()..]), v);
        }
        tree.node_mut(id)?.changed = now;
        Ok(())
    }

    fn stat_fs(&self) -> Result<FsStat, FsError> {
        let tree = lock(&self.tree);
        let used: u64 = tree.nodes.values().map(|n| (n.data.len() as u64).max(n.allocation).div_ceil(BLOCK)).sum();
        let free = TOTAL_BLOCKS.saturating_sub(used);
        Ok(FsStat { total_blocks: TOTAL_BLOCKS, free_blocks: free, avail_blocks: free, block_size: BLOCK, max_name_len: 255, serial: 0x4D45_4D31, block_refcounting: false })
    }
}

/// An open file or directory of a [`MemFs`].
struct MemFile {
    tree: Arc<Mutex<Tree>>,
    id: u64,
    write: bool,
    clock: Clock,
    cold: Arc<AtomicBool>,
}

impl std::fmt::Debug for MemFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemFile").field("id", &self.id).field("write", &self.write).finish_non_exhaustive()
    }
}

impl MemFile {
    /// The node, for a change: ACCESS_DENIED unless opened for writing.
    fn change<R>(&self, f: impl FnOnce(&mut Node, u64) -> R) -> Result<R, FsError> {
        if !self.write {
            return Err(status(NtStatus::ACCESS_DENIED));
        }
        let now = (self.clock)();
        let mut tree = lock(&self.tree);
        let n = tree.node_mut(self.id)?;
        if n.is_dir {
            return Err(status(NtStatus::INVALID_DEVICE_REQUEST));
        }
        Ok(f(n, now))
    }
}

impl FileObject for MemFile {
    fn stat(&self) -> Result<FileStat, FsError> {
        lock(&self.tree).stat(self.id)
    }

    fn read_append(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<usize, FsError> {
        let tree = lock(&self.tree);
        let n = tree.node(self.id)?;
        if n.is_dir {
            return Err(status(NtStatus::INVALID_DEVICE_REQUEST));
        }
        let start = usize::try_from(offset).unwrap_or(usize::MAX).min(n.data.len());
        let got = &n.data[start..(start.saturating_add(len)).min(n.data.len())];
        out.extend_from_slice(got);
        Ok(got.len())
    }

    fn read_cached(&self, out: &mut Vec<u8>, len: usize, offset: u64) -> Result<Option<usize>, FsError> {
        if self.cold.load(Ordering::Relaxed) {
            return Ok(None);
        }
        self.read_append(out, len, offset).map(Some)
    }

    fn write_vectored_at(&self, bufs: &[&[u8]], offset: u64) -> Result<(), FsError> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let start = usize::try_from(offset).map_err(|_| status(NtStatus::DISK_FULL))?;
        let end = start.checked_add(total).filter(|&e| e as u64 <= TOTAL_BLOCKS * BLOCK).ok_or(status(NtStatus::DISK_FULL))?;
        self.change(|n, now| {
            if n.data.len() < end {
                n.data.resize(end, 0);
            }
            let mut at = start;
            for b in bufs {
                n.data[at..at + b.len()].copy_from_slice(b);
                at += b.len();
            }
            n.written = now;
            n.changed = now;
        })
    }

    fn set_len(&self, len: u64) -> Result<(), FsError> {
        let len = usize::try_from(len).ok().filter(|&l| l as u64 <= TOTAL_BLOCKS * BLOCK).ok_or(status(NtStatus::DISK_FULL))?;
        self.change(|n, now| {
            n.data.resize(len, 0);
            n.written = now;
            n.changed = now;
        })
    }

    fn set_allocation(&self, len: u64) -> Result<(), FsError> {
        self.change(|n, now| {
            if (len as usize) < n.data.len() {
                n.data.truncate(len as usize);
                n.written = now;
            }
            n.allocation = len.min(TOTAL_BLOCKS * BLOCK);
            n.changed = now;
        })
    }

    fn set_times(&self, t: &SetTimes) -> Result<(), FsError> {
        let now = (self.clock)();
        let mut tree = lock(&self.tree);
        let n = tree.node_mut(self.id)?;
        if let Some(c) = t.creation_time {
            n.created = c;
        }
        if let Some(a) = t.last_access_time {
            n.accessed = a;
        }
        if let Some(w) = t.last_write_time {
            n.written = w;
        }
        n.changed = now;
        Ok(())
    }

    fn set_attributes(&self, attributes: u32) -> Result<(), FsError> {
        let now = (self.clock)();
        let mut tree = lock(&self.tree);
        let n = tree.node_mut(self.id)?;
        n.attributes = attributes & crate::STORED_ATTRIBUTES;
        n.changed = now;
        Ok(())
    }

    fn eas(&self) -> Result<Vec<Ea>, FsError> {
        let tree = lock(&self.tree);
        let n = tree.node(self.id)?;
        Ok(n.eas.iter().map(|(name, value)| Ea { flags: 0, name: name.clone(), value: value.clone() }).collect())
    }

    fn set_eas(&self, eas: &[Ea]) -> Result<(), FsError> {
        let now = (self.clock)();
        let mut tree = lock(&self.tree);
        let n = tree.node_mut(self.id)?;
        for e in eas {
            let name = n.eas.keys().find(|k| k.eq_ignore_ascii_case(&e.name)).cloned().unwrap_or_else(|| e.name.clone());
            if e.value.is_empty() {
                n.eas.remove(&name);
            } else {
                n.eas.insert(name, e.value.clone());
            }
        }
        n.changed = now;
        Ok(())
    }

    fn sync(&self) -> Result<(), FsError> {
        Ok(())
    }

    fn read_dir(&self, path: &str) -> Result<Vec<DirEntry>, FsError> {
        let tree = lock(&self.tree);
        if !tree.node(self.id)?.is_dir {
            return Err(status(NtStatus::INVALID_PARAMETER));
        }
        let key = split(path)?.join("\\");
        let parent = match key.rsplit_once('\\') {
            Some((p, _)) => tree.names.get(p).copied(),
            None if key.is_empty() => Some(self.id),
            None => tree.names.get("").copied(),
        };
        let mut out = vec![DirEntry { name: ".".into(), stat: tree.stat(self.id)? }];
        out.push(DirEntry { name: "..".into(), stat: tree.stat(parent.unwrap_or(self.id))? });
        for (name, id) in tree.children(&key) {
            out.push(DirEntry { name, stat: tree.stat(id)? });
        }
        Ok(out)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU64, Ordering};

    fn fs() -> MemFs {
        let t = Arc::new(AtomicU64::new(130_000_000_000_000_000));
        MemFs::new(move || t.fetch_add(10, Ordering::Relaxed))
    }

    fn opts(disposition: Disposition, kind: Kind, write: bool) -> OpenOptions {
        OpenOptions { disposition, kind, read: true, write }
    }

    fn code(r: Result<impl Sized, FsError>) -> NtStatus {
        match r {
            Ok(_) => NtStatus::SUCCESS,
            Err(e) => e.status(),
        }
    }

    #[test]
    fn dispositions_and_kinds_answer_as_on_disk() {
        let fs = fs();
        let (h, a) = fs.open("d", &opts(Disposition::Create, Kind::Directory, false)).unwrap();
        assert!(h.is_dir && a == CreateAction::Created);
        let (h, a) = fs.open("d\\f", &opts(Disposition::OpenIf, Kind::NonDirectory, true)).unwrap();
        assert_eq!(a, CreateAction::Created);
        h.write_at(b"hello", 0).unwrap();
        assert_eq!(code(fs.open("d\\f", &opts(Disposition::Create, Kind::Any, false))), NtStatus::OBJECT_NAME_COLLISION);
        assert_eq!(code(fs.open("d\\g", &opts(Disposition::Open, Kind::Any, false))), NtStatus::OBJECT_NAME_NOT_FOUND);
        assert_eq!(code(fs.open("x\\g", &opts(Disposition::OpenIf, Kind::Any, false))), NtStatus::OBJECT_PATH_NOT_FOUND);
        assert_eq!(code(fs.open("d\\f", &opts(Disposition::Open, Kind::Directory, false))), NtStatus::NOT_A_DIRECTORY);
        assert_eq!(code(fs.open("d", &opts(Disposition::Open, Kind::NonDirectory, false))), NtStatus::FILE_IS_A_DIRECTORY);
        assert_eq!(code(fs.open("d", &opts(Disposition::Overwrite, Kind::Directory, false))), NtStatus::INVALID_PARAMETER);
        assert_eq!(code(fs.open("d\\..", &opts(Disposition::Open, Kind::Any, false))), NtStatus::OBJECT_NAME_INVALID);
        let (h, a) = fs.open("d\\f", &opts(Disposition::OverwriteIf, Kind::Any, true)).unwrap();
        assert_eq!((a, h.stat().unwrap().size), (CreateAction::Overwritten, 0));
    }

    #[test]
    fn data_reads_back_and_unlinked_files_stay_open() {
        let fs = fs();
        let (h, _) = fs.open("f", &opts(Disposition::Create, Kind::Any, true)).unwrap();
        h.write_vectored_at(&[b"ab", b"cd"], 2).unwrap();
        let mut out = Vec::new();
        assert_eq!(h.read_append(&mut out, 100, 0).unwrap(), 6);
        assert_eq!(out, b"\0\0abcd");
        let (r, _) = fs.open("f", &opts(Disposition::Open, Kind::Any, false)).unwrap();
        assert_eq!(code(r.write_at(b"x", 0)), NtStatus::ACCESS_DENIED);
        fs.unlink("f", false).unwrap();
        assert_eq!(code(fs.stat_path("f")), NtStatus::OBJECT_NAME_NOT_FOUND);
        assert_eq!(h.stat().unwrap().nlink, 0);
        out.clear();
        assert_eq!(h.read_append(&mut out, 2, 4).unwrap(), 2);
    }

    #[test]
    fn rename_moves_a_directory_with_what_it_holds() {
        let fs = fs();
        fs.open("a", &opts(Disposition::Create, Kind::Directory, false)).unwrap();
        fs.open("a\\f", &opts(Disposition::Create, Kind::Any, true)).unwrap();
        fs.open("g", &opts(Disposition::Create, Kind::Any, true)).unwrap();
        assert_eq!(code(fs.unlink("a", true)), NtStatus::DIRECTORY_NOT_EMPTY);
        assert_eq!(code(fs.rename("g", "a", true)), NtStatus::ACCESS_DENIED);
        assert_eq!(code(fs.rename("a", "g", false)), NtStatus::OBJECT_NAME_COLLISION);
        fs.rename("a", "b", false).unwrap();
        assert!(fs.stat_path("b\\f").is_ok());
        assert_eq!(code(fs.stat_path("a\\f")), NtStatus::OBJECT_PATH_NOT_FOUND);
        let (d, _) = fs.open("b", &opts(Disposition::Open, Kind::Directory, false)).unwrap();
        let names: Vec<String> = d.read_dir().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, [".", "..", "f"]);
        let (root, _) = fs.open("", &opts(Disposition::Open, Kind::Directory, false)).unwrap();
        let names: Vec<String> = root.read_dir().unwrap().into_iter().map(|e| e.name).collect();
        assert_eq!(names, [".", "..", "b", "g"]);
        let ro = fs.read_only_view();
        assert_eq!(code(ro.unlink("g", false)), NtStatus::ACCESS_DENIED);
        assert_eq!(code(ro.open("g", &opts(Disposition::Open, Kind::Any, true))), NtStatus::ACCESS_DENIED);
    }

    #[test]
    fn no_holes_zeroing_writes_zeros_and_nothing_clones() {
        let fs = fs();
        let (h, _) = fs.open("f", &opts(Disposition::Create, Kind::Any, true)).unwrap();
        h.write_at(&[7; 10], 0).unwrap();
        // Zeroing stops at the end of file; deallocating or not, zeros are written.
        h.zero_range(2, 100, true).unwrap();
        let mut out = Vec::new();
        h.read_append(&mut out, 100, 0).unwrap();
        assert_eq!(out, [7, 7, 0, 0, 0, 0, 0, 0, 0, 0]);
        // Data everywhere below the size, clipped by the query.
        assert_eq!(h.allocated_ranges(1, 100, 4).unwrap(), (vec![(1, 9)], false));
        assert_eq!(h.allocated_ranges(1, 100, 0).unwrap(), (vec![], true));
        assert_eq!(h.allocated_ranges(10, 100, 4).unwrap(), (vec![], false));
        assert!(!fs.stat_fs().unwrap().block_refcounting);
        let (g, _) = fs.open("g", &opts(Disposition::Create, Kind::Any, true)).unwrap();
        assert_eq!(code(g.clone_range(&h, 0, 0, 4)), NtStatus::INVALID_DEVICE_REQUEST);
        let (r, _) = fs.open("f", &opts(Disposition::Open, Kind::Any, false)).unwrap();
        assert_eq!(code(r.zero_range(0, 4, false)), NtStatus::ACCESS_DENIED);
    }
}
