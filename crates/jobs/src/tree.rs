//! What root does in folders a job could have written: through directory
//! descriptors, never following a link (also not one swapped in half-way),
//! and bounded in depth and entries, so a job's tree can neither send root
//! elsewhere nor exhaust its stack or descriptors.

use std::ffi::{CStr, CString};
use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use rustix::fs::{AtFlags, Dir, FileType, Mode, OFlags};

/// Deepest a walked tree may be: far past any real project or Python
/// environment (site-packages sits about 10 deep), and one descriptor a
/// level.
pub const MAX_DEPTH: usize = 128;

/// Most entries one walk visits: a Python environment with PyTorch holds
/// about 20,000.
pub const MAX_ENTRIES: u64 = 2_000_000;

fn other(message: String) -> io::Error {
    io::Error::other(message)
}

/// A walk that met more than [`MAX_ENTRIES`] entries below `tree`.
fn too_many(tree: &Path) -> io::Error {
    other(format!(
        "{} holds more than {MAX_ENTRIES} entries",
        tree.display()
    ))
}

/// A walk that met folders nested past [`MAX_DEPTH`] below `tree`.
fn too_deep(tree: &Path) -> io::Error {
    other(format!(
        "{} nests folders more than {MAX_DEPTH} deep",
        tree.display()
    ))
}

fn folder_flags() -> OFlags {
    OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC
}

/// Opens a folder; Err (ELOOP or ENOTDIR) when it is a link or no folder.
pub fn open_folder(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::open(path, folder_flags(), Mode::empty())?)
}

fn open_folder_at(parent: impl AsFd, name: &CStr) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        parent,
        name,
        folder_flags(),
        Mode::empty(),
    )?)
}

/// The parent's descriptor and the last component of `path`; the last
/// component itself is never followed by the callers.
fn split(path: &Path) -> io::Result<(OwnedFd, CString)> {
    let name = path
        .file_name()
        .ok_or_else(|| other(format!("{} names no entry", path.display())))?;
    let parent = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    let name = CString::new(name.as_bytes())
        .map_err(|_| other(format!("{} holds a NUL", path.display())))?;
    // The parent is the server's (a job's attempt folder, the environment
    // cache): a link there is refused as well.
    Ok((open_folder(parent)?, name))
}

fn kind_at(parent: impl AsFd, name: &CStr) -> io::Result<FileType> {
    let stat = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    Ok(FileType::from_raw_mode(stat.st_mode))
}

/// An entry's kind; a file with more than one name is refused: the other
/// may lie outside the tree (a hard link made where the kernel allows
/// linking others' files), and its owner must not change.
fn checked_kind(parent: impl AsFd, name: &CStr, tree: &Path) -> io::Result<FileType> {
    let stat = rustix::fs::statat(parent, name, AtFlags::SYMLINK_NOFOLLOW)?;
    let kind = FileType::from_raw_mode(stat.st_mode);
    if kind == FileType::RegularFile && stat.st_nlink > 1 {
        return Err(other(format!(
            "{} holds a file with another name elsewhere (a hard link): {}",
            tree.display(),
            name.to_string_lossy()
        )));
    }
    Ok(kind)
}

fn is_folder(parent: impl AsFd, name: &CStr) -> io::Result<bool> {
    Ok(kind_at(parent, name)? == FileType::Directory)
}

fn is_dot(name: &CStr) -> bool {
    matches!(name.to_bytes(), b"." | b"..")
}

/// Creates `path` as a new file, refusing any entry already there (a link
/// a job left in its place is never followed, nor is a link on the way).
pub fn create_new(path: &Path, mode: u32) -> io::Result<File> {
    let (parent, name) = split(path)?;
    let flags = OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&parent, name.as_c_str(), flags, Mode::from_raw_mode(mode))?;
    Ok(File::from(fd))
}

/// Reads at most `max` bytes of the regular file `path`; a link, a FIFO or
/// a larger file is refused with the reason.
pub fn read_file(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let (parent, name) = split(path)?;
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let fd = rustix::fs::openat(&parent, name.as_c_str(), flags, Mode::empty())?;
    let stat = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
        return Err(other(format!("{} is not a regular file", path.display())));
    }
    if stat.st_size as u64 > max {
        return Err(other(format!(
            "{} is larger than {max} bytes",
            path.display()
        )));
    }
    let mut bytes = Vec::new();
    File::from(fd).take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(other(format!(
            "{} is larger than {max} bytes",
            path.display()
        )));
    }
    Ok(bytes)
}

/// Gives the folder `path` and everything below it to `uid`:`gid`. Links
/// are changed themselves, never followed; a tree deeper than
/// [`MAX_DEPTH`] or larger than [`MAX_ENTRIES`] is refused part-way.
pub fn chown_tree(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    walk_owning(path, uid, gid)
}

/// How much more than its blocks hold a copied file may say it holds (a
/// file's last block, and file systems that keep small files inline).
const SPARSE_SLACK: u64 = 1 << 20;

/// What a copy takes from every mode: the write bits of group and others
/// and the set-id and sticky bits, so what a builder made writable for
/// everyone is no longer once the tree is shared.
const STRIPPED: u32 = 0o7022;

fn walk_owning(path: &Path, uid: u32, gid: u32) -> io::Result<()> {
    let owner = Some(rustix::fs::Uid::from_raw(uid));
    let group = Some(rustix::fs::Gid::from_raw(gid));
    let (parent, name) = split(path)?;
    let kind = checked_kind(&parent, &name, path)?;
    rustix::fs::chownat(
        &parent,
        name.as_c_str(),
        owner,
        group,
        AtFlags::SYMLINK_NOFOLLOW,
    )?;
    if kind != FileType::Directory {
        return Ok(());
    }
    let top = open_folder_at(&parent, &name)?;
    let mut stack = vec![Dir::new(top)?];
    let mut seen = 0u64;
    while let Some(dir) = stack.last_mut() {
        let Some(entry) = dir.next() else {
            stack.pop();
            continue;
        };
        let depth = stack.len();
        let Some(dir) = stack.last() else { break };
        let entry = entry?;
        let name = entry.file_name().to_owned();
        if is_dot(&name) {
            continue;
        }
        seen += 1;
        if seen > MAX_ENTRIES {
            return Err(too_many(path));
        }
        let fd = dir.fd()?;
        let kind = checked_kind(fd, &name, path)?;
        rustix::fs::chownat(fd, name.as_c_str(), owner, group, AtFlags::SYMLINK_NOFOLLOW)?;
        if kind == FileType::Directory {
            if depth >= MAX_DEPTH {
                return Err(too_deep(path));
            }
            stack.push(Dir::new(open_folder_at(fd, &name)?)?);
        }
    }
    Ok(())
}

/// Copies the folder `from` to the new folder `to` (which must not exist),
/// as this process's own: fresh files, folders and links, so nothing that
/// holds a descriptor or a mapping of an old file (a builder may have
/// passed one to a process of another uid before it was stopped) can
/// change the copy. Modes lose the bits in [`STRIPPED`]; modification
/// times are kept (Python checks its compiled files against them). Links
/// are copied as links, never followed; a file with two names, a FIFO, a
/// socket or a device is refused, as is a tree past [`MAX_DEPTH`] or
/// [`MAX_ENTRIES`]. On an error `to` is left part-way, for the caller to
/// remove.
pub fn copy_tree(from: &Path, to: &Path) -> io::Result<()> {
    let (from_parent, from_name) = split(from)?;
    let (to_parent, to_name) = split(to)?;
    let top = open_folder_at(&from_parent, &from_name)?;
    let mode = |stat: &rustix::fs::Stat| Mode::from_raw_mode(stat.st_mode & 0o7777 & !STRIPPED);
    let top_stat = rustix::fs::fstat(&top)?;
    rustix::fs::mkdirat(&to_parent, to_name.as_c_str(), Mode::RWXU)?;
    let copy_top = open_folder_at(&to_parent, &to_name)?;
    rustix::fs::fchmod(&copy_top, mode(&top_stat))?;
    let mut stack = vec![(Dir::new(top)?, copy_top)];
    let mut seen = 0u64;
    while let Some((dir, _)) = stack.last_mut() {
        let Some(entry) = dir.next() else {
            stack.pop();
            continue;
        };
        let depth = stack.len();
        let Some((dir, copy)) = stack.last() else {
            break;
        };
        let entry = entry?;
        let name = entry.file_name().to_owned();
        if is_dot(&name) {
            continue;
        }
        seen += 1;
        if seen > MAX_ENTRIES {
            return Err(too_many(from));
        }
        let fd = dir.fd()?;
        let stat = rustix::fs::statat(fd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW)?;
        match FileType::from_raw_mode(stat.st_mode) {
            FileType::Directory => {
                if depth >= MAX_DEPTH {
                    return Err(too_deep(from));
                }
                let child = open_folder_at(fd, &name)?;
                rustix::fs::mkdirat(copy, name.as_c_str(), Mode::RWXU)?;
                let child_copy = open_folder_at(copy, &name)?;
                rustix::fs::fchmod(&child_copy, mode(&rustix::fs::fstat(&child)?))?;
                stack.push((Dir::new(child)?, child_copy));
            }
            FileType::RegularFile => {
                let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
                let source = rustix::fs::openat(fd, name.as_c_str(), flags, Mode::empty())?;
                // What was opened, not what was looked at: it may have been
                // swapped meanwhile.
                let stat = rustix::fs::fstat(&source)?;
                if FileType::from_raw_mode(stat.st_mode) != FileType::RegularFile {
                    return Err(other(format!(
                        "{} changed while it was copied: {}",
                        from.display(),
                        name.to_string_lossy()
                    )));
                }
                if stat.st_nlink > 1 {
                    return Err(other(format!(
                        "{} holds a file with another name elsewhere (a hard link): {}",
                        from.display(),
                        name.to_string_lossy()
                    )));
                }
                // A sparse file would be written out in full by the copy:
                // root could fill the disk with what took the builder none.
                let size = stat.st_size.max(0) as u64;
                let held = (stat.st_blocks.max(0) as u64).saturating_mul(512);
                if size > held.saturating_add(SPARSE_SLACK) {
                    return Err(other(format!(
                        "{} holds a sparse file ({size} bytes in {held} on disk): {}",
                        from.display(),
                        name.to_string_lossy()
                    )));
                }
                let flags = OFlags::WRONLY
                    | OFlags::CREATE
                    | OFlags::EXCL
                    | OFlags::NOFOLLOW
                    | OFlags::CLOEXEC;
                let target =
                    rustix::fs::openat(copy, name.as_c_str(), flags, Mode::RUSR | Mode::WUSR)?;
                let mut target = File::from(target);
                // Its size when looked at: a file still growing (through a
                // descriptor passed on) cannot keep the copy going.
                io::copy(&mut File::from(source).take(size), &mut target)?;
                rustix::fs::fchmod(&target, mode(&stat))?;
                let at = |sec: i64, nsec: u64| rustix::fs::Timespec {
                    tv_sec: sec,
                    tv_nsec: nsec as _,
                };
                rustix::fs::futimens(
                    &target,
                    &rustix::fs::Timestamps {
                        last_access: at(stat.st_atime, stat.st_atime_nsec as u64),
                        last_modification: at(stat.st_mtime, stat.st_mtime_nsec as u64),
                    },
                )?;
            }
            FileType::Symlink => {
                let link = rustix::fs::readlinkat(fd, name.as_c_str(), Vec::new())?;
                rustix::fs::symlinkat(link.as_c_str(), copy, name.as_c_str())?;
            }
            _ => {
                return Err(other(format!(
                    "{} holds {}, which is no file, folder or link",
                    from.display(),
                    name.to_string_lossy()
                )));
            }
        }
    }
    Ok(())
}

/// Removes `path` and everything below it, however deep: links are removed,
/// never followed, and a folder at [`MAX_DEPTH`] is first moved up to the
/// top of the tree, so the descriptors held stay bounded. A missing `path`
/// is no error.
pub fn remove_tree(path: &Path) -> io::Result<()> {
    let (parent, name) = match split(path) {
        Ok(split) => split,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    match is_folder(&parent, &name) {
        Ok(true) => {}
        Ok(false) => {
            return Ok(rustix::fs::unlinkat(
                &parent,
                name.as_c_str(),
                AtFlags::empty(),
            )?);
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    let top = open_folder_at(&parent, &name)?;
    let mut moved = 0u64;
    let mut removed = 0u64;
    // Each pass empties the top as far as MAX_DEPTH and lifts what lies
    // deeper to the top for the next pass.
    loop {
        let mut stack: Vec<(Dir, CString)> = vec![(
            Dir::new(rustix::fs::openat(
                &top,
                c".",
                folder_flags(),
                Mode::empty(),
            )?)?,
            CString::default(),
        )];
        let mut lifted = false;
        while let Some((dir, _)) = stack.last_mut() {
            let Some(entry) = dir.next() else {
                let (done, its_name) = stack.pop().expect("the loop saw an entry");
                drop(done);
                if let Some((above, _)) = stack.last() {
                    rustix::fs::unlinkat(above.fd()?, its_name.as_c_str(), AtFlags::REMOVEDIR)?;
                }
                continue;
            };
            let depth = stack.len();
            let Some((dir, _)) = stack.last() else { break };
            let entry = entry?;
            let name = entry.file_name().to_owned();
            if is_dot(&name) {
                continue;
            }
            removed += 1;
            if removed > MAX_ENTRIES.saturating_mul(8) {
                return Err(other(format!(
                    "{} still holds entries after {removed} removals; is something writing to it?",
                    path.display()
                )));
            }
            let fd = dir.fd()?;
            let folder = match is_folder(fd, &name) {
                Ok(folder) => folder,
                // Gone meanwhile: nothing to remove.
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(e),
            };
            if !folder {
                match rustix::fs::unlinkat(fd, name.as_c_str(), AtFlags::empty()) {
                    Ok(()) | Err(rustix::io::Errno::NOENT) => {}
                    // Swapped for a folder meanwhile: the next pass takes it.
                    Err(rustix::io::Errno::ISDIR) => lifted = true,
                    Err(e) => return Err(e.into()),
                }
            } else if depth < MAX_DEPTH {
                let child = open_folder_at(fd, &name)?;
                stack.push((Dir::new(child)?, name));
            } else {
                // A name nothing holds: the job may have used any.
                loop {
                    moved += 1;
                    let new_name = CString::new(format!(".trainyard-lifted-{moved}"))
                        .expect("no NUL in a number");
                    match rustix::fs::renameat_with(
                        fd,
                        name.as_c_str(),
                        &top,
                        new_name.as_c_str(),
                        rustix::fs::RenameFlags::NOREPLACE,
                    ) {
                        Err(rustix::io::Errno::EXIST) => continue,
                        done => break done?,
                    }
                }
                lifted = true;
            }
        }
        if !lifted {
            break;
        }
    }
    drop(top);
    rustix::fs::unlinkat(&parent, name.as_c_str(), AtFlags::REMOVEDIR)?;
    Ok(())
}

/// What a set of trees holds on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DiskUse {
    /// Blocks allocated, in bytes (as `du` counts: a sparse file counts
    /// what it holds, a file with several names once).
    pub bytes: u64,
    /// Entries of every kind, folders included.
    pub entries: u64,
}

/// Why a measure was cut short: the trees are past what a job may hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TooMuch {
    /// More than the entries allowed.
    Entries(u64),
    /// Folders nested deeper than [`MAX_DEPTH`].
    Depth,
}

/// The most entries [`file_bytes`] counts.
pub const MAX_COUNTED: u64 = 10_000_000;

/// The bytes of the regular files below each of `paths` (a file: its own
/// length), links not followed, at most `max_entries` entries in all:
/// what a quota counts (lengths, not blocks). With the entries seen: more
/// than `max_entries` when it stopped at that bound.
pub fn file_bytes(paths: &[PathBuf], max_entries: u64) -> (u64, u64) {
    let mut total = 0u64;
    let mut seen = 0u64;
    let mut folders = Vec::new();
    for path in paths {
        match std::fs::symlink_metadata(path) {
            Ok(meta) if meta.is_dir() => folders.push(path.clone()),
            Ok(meta) if meta.is_file() => total += meta.len(),
            _ => {}
        }
    }
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(&folder) else {
            continue;
        };
        for entry in entries.flatten() {
            seen += 1;
            if seen > max_entries {
                return (total, seen);
            }
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                folders.push(entry.path());
            } else if kind.is_file() {
                total += entry.metadata().map_or(0, |m| m.len());
            }
        }
    }
    (total, seen)
}

/// Measures the trees at `roots` (missing ones hold nothing), never
/// following a link; Ok(Err) when they hold more than `max_entries`
/// entries or nest deeper than [`MAX_DEPTH`], which no job needs. Entries
/// that vanish while it walks are skipped: the job may be deleting them.
pub fn disk_use(roots: &[&Path], max_entries: u64) -> io::Result<Result<DiskUse, TooMuch>> {
    let mut total = DiskUse::default();
    let mut linked = std::collections::HashSet::new();
    let mut count = |stat: &rustix::fs::Stat, total: &mut DiskUse| {
        let kind = FileType::from_raw_mode(stat.st_mode);
        total.entries += 1;
        if kind != FileType::Directory
            && stat.st_nlink > 1
            && !linked.insert((stat.st_dev, stat.st_ino))
        {
            return;
        }
        total.bytes = total
            .bytes
            .saturating_add((stat.st_blocks as u64).saturating_mul(512));
    };
    let gone = |e: &rustix::io::Errno| {
        matches!(
            *e,
            rustix::io::Errno::NOENT | rustix::io::Errno::NOTDIR | rustix::io::Errno::LOOP
        )
    };
    for root in roots {
        let (parent, name) = match split(root) {
            Ok(split) => split,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let stat = match rustix::fs::statat(&parent, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
            Ok(stat) => stat,
            Err(e) if gone(&e) => continue,
            Err(e) => return Err(e.into()),
        };
        count(&stat, &mut total);
        if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
            continue;
        }
        let top = match open_folder_at(&parent, &name) {
            Ok(top) => top,
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(e),
        };
        let mut stack = vec![Dir::new(top)?];
        while let Some(dir) = stack.last_mut() {
            let Some(entry) = dir.next() else {
                stack.pop();
                continue;
            };
            let depth = stack.len();
            let Some(dir) = stack.last() else { break };
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            let name = entry.file_name().to_owned();
            if is_dot(&name) {
                continue;
            }
            let fd = dir.fd()?;
            let stat = match rustix::fs::statat(fd, name.as_c_str(), AtFlags::SYMLINK_NOFOLLOW) {
                Ok(stat) => stat,
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e.into()),
            };
            count(&stat, &mut total);
            if total.entries > max_entries {
                return Ok(Err(TooMuch::Entries(max_entries)));
            }
            if FileType::from_raw_mode(stat.st_mode) != FileType::Directory {
                continue;
            }
            if depth >= MAX_DEPTH {
                return Ok(Err(TooMuch::Depth));
            }
            match rustix::fs::openat(fd, name.as_c_str(), folder_flags(), Mode::empty()) {
                Ok(child) => stack.push(Dir::new(child)?),
                // Swapped for a link or a file, or gone: nothing to go into.
                Err(e) if gone(&e) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(Ok(total))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, symlink};

    /// A chain of `depth` folders below `top`, made through descriptors
    /// (a path that long could not be named at once).
    fn deep_chain(top: &Path, depth: usize) {
        let mut fd = open_folder(top).unwrap();
        for _ in 0..depth {
            rustix::fs::mkdirat(&fd, c"d", Mode::from_raw_mode(0o755)).unwrap();
            fd = open_folder_at(&fd, c"d").unwrap();
        }
        rustix::fs::openat(
            &fd,
            c"leaf",
            OFlags::WRONLY | OFlags::CREATE,
            Mode::from_raw_mode(0o644),
        )
        .unwrap();
    }

    #[test]
    fn a_new_file_never_follows_a_link_left_in_its_place() {
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        let planted = dir.path().join("env").join(".ready");
        std::fs::create_dir(dir.path().join("env")).unwrap();
        symlink(&victim, &planted).unwrap();
        let error = create_new(&planted, 0o644).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists, "{error}");
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        // Nor a link on the way to it.
        let linked = dir.path().join("linked");
        symlink(dir.path().join("env"), &linked).unwrap();
        assert!(create_new(&linked.join("new"), 0o644).is_err());
        assert!(!dir.path().join("env").join("new").exists());
        create_new(&dir.path().join("env").join("new"), 0o600).unwrap();
    }

    #[test]
    fn a_read_refuses_links_and_big_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), b"root only").unwrap();
        symlink(
            dir.path().join("secret"),
            dir.path().join("requirements.txt"),
        )
        .unwrap();
        assert!(read_file(&dir.path().join("requirements.txt"), 100).is_err());
        std::fs::write(dir.path().join("big"), vec![b'x'; 101]).unwrap();
        let error = read_file(&dir.path().join("big"), 100).unwrap_err();
        assert!(error.to_string().contains("larger than 100"), "{error}");
        assert_eq!(
            read_file(&dir.path().join("secret"), 100).unwrap(),
            b"root only"
        );
    }

    #[test]
    fn chown_changes_links_not_their_targets_and_refuses_deep_trees() {
        if !crate::users::is_root() {
            eprintln!("skipped: chown needs root");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"x").unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), b"x").unwrap();
        symlink(&outside, tree.join("a/link")).unwrap();
        symlink(dir.path(), tree.join("a/b/up")).unwrap();
        chown_tree(&tree, 64_991, 64_991).unwrap();
        for path in ["a", "a/b", "a/b/f", "a/link", "a/b/up"] {
            let meta = std::fs::symlink_metadata(tree.join(path)).unwrap();
            assert_eq!(meta.uid(), 64_991, "{path}");
        }
        assert_eq!(std::fs::metadata(&outside).unwrap().uid(), 0);
        assert_eq!(std::fs::metadata(dir.path()).unwrap().uid(), 0);
        // A hard link to a file outside is refused, its owner untouched.
        std::fs::hard_link(&outside, tree.join("a/hard")).unwrap();
        let error = chown_tree(&tree, 64_992, 64_992).unwrap_err();
        assert!(error.to_string().contains("hard link"), "{error}");
        assert_eq!(std::fs::metadata(&outside).unwrap().uid(), 0);
        std::fs::remove_file(tree.join("a/hard")).unwrap();
        let deep = dir.path().join("deep");
        std::fs::create_dir(&deep).unwrap();
        deep_chain(&deep, MAX_DEPTH + 5);
        let error = chown_tree(&deep, 64_991, 64_991).unwrap_err();
        assert!(error.to_string().contains("deep"), "{error}");
    }

    #[test]
    fn a_copy_is_fresh_keeps_links_and_times_and_refuses_what_no_tree_needs() {
        use std::io::Write;
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, b"outside").unwrap();
        let from = dir.path().join("from");
        std::fs::create_dir_all(from.join("lib/pkg")).unwrap();
        std::fs::write(from.join("lib/pkg/mod.py"), b"x = 1\n").unwrap();
        std::fs::set_permissions(from.join("lib"), std::fs::Permissions::from_mode(0o777)).unwrap();
        std::fs::set_permissions(
            from.join("lib/pkg/mod.py"),
            std::fs::Permissions::from_mode(0o4777),
        )
        .unwrap();
        let old = std::time::SystemTime::UNIX_EPOCH + std::time::Duration::new(1_600_000_000, 7);
        File::options()
            .write(true)
            .open(from.join("lib/pkg/mod.py"))
            .unwrap()
            .set_modified(old)
            .unwrap();
        symlink(&outside, from.join("lib/escape")).unwrap();
        symlink("lib", from.join("lib64")).unwrap();
        // A descriptor held on the original, as a process of another uid
        // could hold one the builder passed it.
        let mut held = File::options()
            .write(true)
            .open(from.join("lib/pkg/mod.py"))
            .unwrap();
        let to = dir.path().join("to");
        copy_tree(&from, &to).unwrap();
        held.write_all(b"planted").unwrap();
        assert_eq!(
            std::fs::read(to.join("lib/pkg/mod.py")).unwrap(),
            b"x = 1\n"
        );
        let meta = |p: &str| std::fs::symlink_metadata(to.join(p)).unwrap();
        assert_eq!(meta("lib").permissions().mode() & 0o7777, 0o755);
        assert_eq!(meta("lib/pkg/mod.py").permissions().mode() & 0o7777, 0o755);
        assert_eq!(meta("lib/pkg/mod.py").modified().unwrap(), old);
        assert_ne!(
            meta("lib/pkg/mod.py").ino(),
            std::fs::metadata(from.join("lib/pkg/mod.py"))
                .unwrap()
                .ino()
        );
        assert_eq!(std::fs::read_link(to.join("lib/escape")).unwrap(), outside);
        assert_eq!(
            std::fs::read_link(to.join("lib64")).unwrap(),
            Path::new("lib")
        );
        assert_eq!(std::fs::read(&outside).unwrap(), b"outside");
        // A copy never lands on something already there.
        let error = copy_tree(&from, &to).unwrap_err();
        assert_eq!(error.kind(), io::ErrorKind::AlreadyExists, "{error}");
        // A file with a second name, and a FIFO, are refused.
        std::fs::hard_link(from.join("lib/pkg/mod.py"), dir.path().join("second")).unwrap();
        let error = copy_tree(&from, &dir.path().join("to2")).unwrap_err();
        assert!(error.to_string().contains("hard link"), "{error}");
        std::fs::remove_file(dir.path().join("second")).unwrap();
        let fifo = CString::new(from.join("fifo").as_os_str().as_bytes()).unwrap();
        // SAFETY: a path this test owns.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
        let error = copy_tree(&from, &dir.path().join("to3")).unwrap_err();
        assert!(
            error.to_string().contains("no file, folder or link"),
            "{error}"
        );
        std::fs::remove_file(from.join("fifo")).unwrap();
        // A sparse file: copied out in full it would take what it never held.
        File::create(from.join("huge"))
            .unwrap()
            .set_len(1 << 40)
            .unwrap();
        let error = copy_tree(&from, &dir.path().join("to5")).unwrap_err();
        assert!(error.to_string().contains("sparse"), "{error}");
        std::fs::remove_file(from.join("huge")).unwrap();
        let deep = dir.path().join("deep");
        std::fs::create_dir(&deep).unwrap();
        deep_chain(&deep, MAX_DEPTH + 5);
        let error = copy_tree(&deep, &dir.path().join("to4")).unwrap_err();
        assert!(error.to_string().contains("deep"), "{error}");
    }

    #[test]
    fn remove_takes_trees_of_any_depth_and_never_follows_links() {
        let dir = tempfile::tempdir().unwrap();
        let keep = dir.path().join("keep");
        std::fs::create_dir(&keep).unwrap();
        std::fs::write(keep.join("file"), b"x").unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir(&tree).unwrap();
        symlink(&keep, tree.join("link")).unwrap();
        // Ten thousand levels: no recursion, and one descriptor a level
        // only up to MAX_DEPTH.
        deep_chain(&tree, 10_000);
        remove_tree(&tree).unwrap();
        assert!(!tree.exists());
        assert!(keep.join("file").exists(), "the link's target is untouched");
        // A file, and nothing at all.
        std::fs::write(dir.path().join("f"), b"x").unwrap();
        remove_tree(&dir.path().join("f")).unwrap();
        remove_tree(&dir.path().join("f")).unwrap();
        // A link given as the tree: the link goes, its target stays.
        symlink(&keep, dir.path().join("l")).unwrap();
        remove_tree(&dir.path().join("l")).unwrap();
        assert!(keep.join("file").exists());
    }

    #[test]
    fn disk_use_counts_blocks_once_never_follows_links_and_stops_at_the_bounds() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, vec![7u8; 1 << 20]).unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("a/b")).unwrap();
        std::fs::write(tree.join("a/b/f"), vec![1u8; 256 << 10]).unwrap();
        std::fs::hard_link(tree.join("a/b/f"), tree.join("a/again")).unwrap();
        symlink(&outside, tree.join("a/link")).unwrap();
        symlink(dir.path(), tree.join("up")).unwrap();
        // A sparse file counts what it holds, not what it says.
        let sparse = std::fs::File::create(tree.join("sparse")).unwrap();
        sparse.set_len(1 << 30).unwrap();
        let other = dir.path().join("other");
        std::fs::write(&other, vec![2u8; 64 << 10]).unwrap();
        let missing = dir.path().join("missing");
        let used = disk_use(&[&tree, &other, &missing], 1_000)
            .unwrap()
            .unwrap();
        // tree, a, a/b, a/b/f, a/again, a/link, up, sparse, other.
        assert_eq!(used.entries, 9);
        let data = (256u64 << 10) + (64 << 10);
        assert!(used.bytes >= data, "{used:?}");
        assert!(
            used.bytes < data + (1 << 20),
            "neither the link's target, the second name nor the hole counts: {used:?}"
        );
        assert_eq!(disk_use(&[&tree], 5).unwrap(), Err(TooMuch::Entries(5)));
        let deep = dir.path().join("deep");
        std::fs::create_dir(&deep).unwrap();
        deep_chain(&deep, MAX_DEPTH + 2);
        assert_eq!(disk_use(&[&deep], 1_000).unwrap(), Err(TooMuch::Depth));
    }
}
