//! Safe extraction of uploaded archives (zip, tar, tar.gz). Every entry must
//! land inside the target folder: absolute paths and `..` are refused, and so
//! are links (symbolic or hard), device files and pipes. Sizes and counts are
//! counted while unpacking, never taken from headers. A refused archive
//! leaves nothing behind.

use std::fs::{File, OpenOptions};
use std::io::{Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

/// What one archive may unpack to.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    pub max_bytes: u64,
    pub max_files: u64,
}

/// What an archive unpacked to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Extracted {
    pub files: u64,
    pub bytes: u64,
    /// The files and folders it made (or, packing, wrote): what it costs
    /// the disk in inodes, whatever its bytes.
    pub entries: u64,
}

#[derive(Debug, thiserror::Error)]
pub enum ArchiveError {
    /// The archive breaks a rule; the message names the entry.
    #[error("{0}")]
    Refused(String),
    #[error("could not unpack the archive: {0}")]
    Io(#[from] std::io::Error),
}

fn refuse<T>(message: impl Into<String>) -> Result<T, ArchiveError> {
    Err(ArchiveError::Refused(message.into()))
}

const MAX_PATH_BYTES: usize = 4096;
/// Most names in an entry's path: a job's files are measured down to 128
/// levels (`tree`), and the job's own folders lie above these.
pub const MAX_DEPTH: usize = 64;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Zip,
    Tar,
    TarGz,
}

fn sniff(path: &Path) -> Result<Format, ArchiveError> {
    let mut head = [0u8; 512];
    let mut file = File::open(path)?;
    let mut read = 0;
    while read < head.len() {
        let n = file.read(&mut head[read..])?;
        if n == 0 {
            break;
        }
        read += n;
    }
    let head = &head[..read];
    if head.starts_with(b"PK\x03\x04") || head.starts_with(b"PK\x05\x06") {
        Ok(Format::Zip)
    } else if head.starts_with(&[0x1f, 0x8b]) {
        Ok(Format::TarGz)
    } else if head.len() >= 262 && &head[257..262] == b"ustar" {
        Ok(Format::Tar)
    } else {
        refuse("the upload is not a zip, tar or tar.gz archive")
    }
}

/// An entry's path inside the target, or why it may not be written.
fn inside(name: &Path) -> Result<Option<PathBuf>, ArchiveError> {
    if name.as_os_str().len() > MAX_PATH_BYTES {
        return refuse(format!(
            "an entry's path is longer than {MAX_PATH_BYTES} bytes"
        ));
    }
    let mut out = PathBuf::new();
    for component in name.components() {
        match component {
            Component::Normal(part) => {
                if out.components().count() == MAX_DEPTH {
                    return refuse(format!(
                        "`{}…` is more than {MAX_DEPTH} names deep; archives may not be deeper",
                        out.display()
                            .to_string()
                            .chars()
                            .take(100)
                            .collect::<String>()
                    ));
                }
                out.push(part)
            }
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => {
                return refuse(format!(
                    "`{}` would be written outside the archive's folder",
                    name.display()
                ));
            }
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Unpacks the archive at `archive` into `into`, which must not exist yet.
pub fn extract(archive: &Path, into: &Path, limits: Limits) -> Result<Extracted, ArchiveError> {
    let format = sniff(archive)?;
    std::fs::create_dir(into)?;
    let mut writer = Writer {
        root: into,
        limits,
        done: Extracted {
            files: 0,
            bytes: 0,
            entries: 0,
        },
        last_folder: PathBuf::new(),
    };
    let result = match format {
        Format::Zip => unzip(archive, &mut writer),
        Format::Tar => untar(File::open(archive)?, &mut writer),
        Format::TarGz => untar(
            flate2::read::GzDecoder::new(File::open(archive)?),
            &mut writer,
        ),
    };
    match result {
        Ok(()) => Ok(writer.done),
        Err(e) => {
            let _ = std::fs::remove_dir_all(into);
            Err(e)
        }
    }
}

/// What archivers add beside a folder's files and nobody means to upload.
const JUNK: [&str; 2] = ["__MACOSX", ".DS_Store"];

/// A project packed with its folder (`tar czf proj.tar.gz proj`, GitHub's
/// "Download ZIP", macOS's Compress): when the unpacked `root` holds one
/// folder and nothing else (besides [`JUNK`]), that folder's contents
/// become the top, so `python train.py` and `requirements.txt` are where
/// a job looks. Returns the folder's name if it did. Links are never
/// followed: what is moved was just unpacked, and links are refused.
pub fn lift_single_folder(root: &Path) -> std::io::Result<Option<String>> {
    let mut folder = None;
    for entry in std::fs::read_dir(root)? {
        let entry = entry?;
        let name = entry.file_name();
        if JUNK.iter().any(|j| name == *j) {
            continue;
        }
        if folder.is_some() || !entry.file_type()?.is_dir() {
            return Ok(None);
        }
        folder = Some(name);
    }
    let Some(name) = folder else {
        return Ok(None);
    };
    for junk in JUNK {
        let path = root.join(junk);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path)?,
            Ok(_) => std::fs::remove_file(&path)?,
            Err(_) => {}
        }
    }
    // Out of the way first: it may hold an entry of its own name.
    let aside = root.join(".trainyard-lifting");
    std::fs::rename(root.join(&name), &aside)?;
    for entry in std::fs::read_dir(&aside)? {
        let entry = entry?;
        std::fs::rename(entry.path(), root.join(entry.file_name()))?;
    }
    std::fs::remove_dir(&aside)?;
    Ok(Some(name.to_string_lossy().into_owned()))
}

struct Writer<'a> {
    root: &'a Path,
    limits: Limits,
    done: Extracted,
    /// The folder (under `root`) that [`Writer::folders`] last made or
    /// found: it and every folder it lies in exist, since nothing else
    /// writes here and nothing is removed, so the next entry's path skips
    /// the folders it shares with it (archives list a folder's files
    /// together; each would otherwise cost a `mkdir` and an `lstat` per
    /// name of its path).
    last_folder: PathBuf,
}

impl Writer<'_> {
    /// Every entry counts, folders too: a small archive must not make
    /// millions of them.
    fn count(&mut self) -> Result<(), ArchiveError> {
        self.done.entries += 1;
        if self.done.entries > self.limits.max_files {
            return refuse(format!(
                "the archive holds more than {} files and folders",
                self.limits.max_files
            ));
        }
        Ok(())
    }

    /// Makes the folder `rel` and those it lies in, each new one counted
    /// as an entry (a folder the archive names is one, and so is every
    /// folder its entries' paths make on the way).
    fn folders(&mut self, rel: &Path) -> Result<(), ArchiveError> {
        let known = rel
            .components()
            .zip(self.last_folder.components())
            .take_while(|(a, b)| a == b)
            .count();
        let mut path = self.root.to_path_buf();
        for (i, part) in rel.components().enumerate() {
            path.push(part);
            if i < known {
                continue;
            }
            match std::fs::create_dir(&path) {
                Ok(()) => self.count()?,
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    // Links are never written, so this is the folder or a
                    // file an earlier entry made.
                    if !std::fs::symlink_metadata(&path)?.is_dir() {
                        return refuse(format!(
                            "`{}` is a file of the archive and also a folder of it",
                            path.strip_prefix(self.root).unwrap_or(&path).display()
                        ));
                    }
                }
                Err(e) => return Err(e.into()),
            }
        }
        rel.clone_into(&mut self.last_folder);
        Ok(())
    }

    fn file(
        &mut self,
        rel: &Path,
        executable: bool,
        data: &mut dyn Read,
    ) -> Result<(), ArchiveError> {
        self.count()?;
        self.done.files += 1;
        if let Some(parent) = rel.parent() {
            self.folders(parent)?;
        }
        let path = self.root.join(rel);
        let mut file = match OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                return refuse(format!("`{}` appears twice in the archive", rel.display()));
            }
            Err(e) => return Err(e.into()),
        };
        let room = self.limits.max_bytes - self.done.bytes;
        let written =
            std::io::copy(&mut data.take(room.saturating_add(1)), &mut file).map_err(|e| {
                ArchiveError::Refused(format!(
                    "`{}` could not be unpacked: {e} (is the archive complete?)",
                    rel.display()
                ))
            })?;
        if written > room {
            return refuse(format!(
                "the archive unpacks to more than {} bytes",
                self.limits.max_bytes
            ));
        }
        self.done.bytes += written;
        file.flush()?;
        if executable {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
        }
        Ok(())
    }
}

fn untar(reader: impl Read, writer: &mut Writer<'_>) -> Result<(), ArchiveError> {
    use tar::EntryType;
    let damaged = |e: std::io::Error| ArchiveError::Refused(format!("the archive is damaged: {e}"));
    let mut archive = tar::Archive::new(reader);
    for entry in archive.entries().map_err(damaged)? {
        let mut entry = entry.map_err(damaged)?;
        let name = entry.path().map_err(damaged)?.into_owned();
        let kind = entry.header().entry_type();
        match kind {
            EntryType::XGlobalHeader | EntryType::XHeader => continue,
            EntryType::Symlink | EntryType::Link => {
                let target = entry
                    .link_name()
                    .ok()
                    .flatten()
                    .map(|t| t.display().to_string())
                    .unwrap_or_default();
                return refuse(format!(
                    "`{}` is a link (to `{target}`); archives may not hold links",
                    name.display()
                ));
            }
            EntryType::Char | EntryType::Block | EntryType::Fifo => {
                return refuse(format!(
                    "`{}` is a device file or a pipe; archives may hold only files and folders",
                    name.display()
                ));
            }
            _ => {}
        }
        let Some(rel) = inside(&name)? else {
            continue;
        };
        match kind {
            EntryType::Directory => writer.folders(&rel)?,
            EntryType::Regular | EntryType::Continuous => {
                let executable = entry.header().mode().is_ok_and(|m| m & 0o100 != 0);
                writer.file(&rel, executable, &mut entry)?;
            }
            other => {
                return refuse(format!(
                    "`{}` is of a kind archives may not hold here ({other:?})",
                    name.display()
                ));
            }
        }
    }
    Ok(())
}

fn unzip(path: &Path, writer: &mut Writer<'_>) -> Result<(), ArchiveError> {
    let mut archive = zip::ZipArchive::new(File::open(path)?)
        .map_err(|e| ArchiveError::Refused(format!("the zip archive cannot be read: {e}")))?;
    for i in 0..archive.len() {
        let mut entry = archive
            .by_index(i)
            .map_err(|e| ArchiveError::Refused(format!("a zip entry cannot be read: {e}")))?;
        let name = entry.name().to_owned();
        if entry.is_symlink() {
            return refuse(format!("`{name}` is a link; archives may not hold links"));
        }
        let mode = entry.unix_mode().unwrap_or(0);
        let file_type = mode & 0o170000;
        if file_type != 0 && file_type != 0o100000 && file_type != 0o040000 {
            return refuse(format!(
                "`{name}` is a device file or a pipe; archives may hold only files and folders"
            ));
        }
        let Some(enclosed) = entry.enclosed_name() else {
            return refuse(format!(
                "`{name}` would be written outside the archive's folder"
            ));
        };
        let Some(rel) = inside(&enclosed)? else {
            continue;
        };
        if entry.is_dir() {
            writer.folders(&rel)?;
        } else {
            writer.file(&rel, mode & 0o100 != 0, &mut entry)?;
        }
    }
    Ok(())
}

/// Most folder levels [`pack`] goes down.
const PACK_MAX_DEPTH: usize = 128;

/// Writes the folder `dir` as a tar archive: its folders and regular files,
/// never what a link points to (links and special files are left out), at
/// most `limits` of files and bytes (Err past them). A folder that does not
/// exist packs as an empty archive (its root entry alone).
///
/// An archive that fails midway is left without its end (the two zero
/// blocks a whole archive ends with).
pub fn pack(dir: &Path, out: impl Write, limits: Limits) -> Result<Extracted, ArchiveError> {
    let open = std::rc::Rc::new(std::cell::Cell::new(true));
    let gate = Gate {
        inner: out,
        open: open.clone(),
    };
    let result = pack_into(dir, gate, limits, &open);
    if result.is_err() {
        // What the builder writes as it is dropped (the end) goes nowhere.
        open.set(false);
    }
    result
}

/// A writer that refuses everything once closed.
struct Gate<W> {
    inner: W,
    open: std::rc::Rc<std::cell::Cell<bool>>,
}

impl<W: Write> Write for Gate<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.open.get() {
            return Err(std::io::Error::other("the archive failed"));
        }
        self.inner.write(buf)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

fn pack_into<W: Write>(
    dir: &Path,
    out: W,
    limits: Limits,
    open: &std::cell::Cell<bool>,
) -> Result<Extracted, ArchiveError> {
    let mut builder = tar::Builder::new(out);
    builder.follow_symlinks(false);
    let mut root = tar::Header::new_ustar();
    root.set_entry_type(tar::EntryType::Directory);
    root.set_mode(0o755);
    root.set_size(0);
    builder.append_data(&mut root, ".", std::io::empty())?;
    let mut done = Extracted {
        files: 0,
        bytes: 0,
        entries: 0,
    };
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
        && let Err(error) = pack_folder(&mut builder, dir, Path::new(""), 0, limits, &mut done)
    {
        // Closed before the builder is dropped, which would write the end.
        open.set(false);
        return Err(error);
    }
    builder.into_inner()?.flush()?;
    Ok(done)
}

fn pack_folder<W: std::io::Write>(
    builder: &mut tar::Builder<W>,
    dir: &Path,
    rel: &Path,
    depth: usize,
    limits: Limits,
    done: &mut Extracted,
) -> Result<(), ArchiveError> {
    if depth >= PACK_MAX_DEPTH {
        return refuse(format!(
            "`{}` is more than {PACK_MAX_DEPTH} folders deep",
            rel.display()
        ));
    }
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let kind = entry.file_type()?;
        let name = rel.join(entry.file_name());
        if kind.is_dir() {
            done.files += 1;
            done.entries += 1;
            builder.append_dir(&name, entry.path())?;
            pack_folder(builder, &entry.path(), &name, depth + 1, limits, done)?;
        } else if kind.is_file() {
            let mut file = OpenOptions::new()
                .read(true)
                .custom_flags(libc::O_NOFOLLOW)
                .open(entry.path())?;
            let size = file.metadata()?.len();
            done.files += 1;
            done.entries += 1;
            done.bytes += size;
            if done.files > limits.max_files || done.bytes > limits.max_bytes {
                return refuse(format!(
                    "more than {} files or {} bytes to send",
                    limits.max_files, limits.max_bytes
                ));
            }
            builder.append_file(&name, &mut file)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_bytes: 1 << 20,
        max_files: 100,
    };

    /// A tar entry with a raw name, so tests can write what tar::Builder refuses.
    fn tar_entry(
        builder: &mut tar::Builder<Vec<u8>>,
        name: &[u8],
        kind: tar::EntryType,
        data: &[u8],
        link: Option<&str>,
    ) {
        let mut header = tar::Header::new_gnu();
        header.as_old_mut().name[..name.len()].copy_from_slice(name);
        header.set_entry_type(kind);
        header.set_size(data.len() as u64);
        header.set_mode(0o755);
        if let Some(link) = link {
            header.set_link_name(link).unwrap();
        }
        header.set_cksum();
        builder.append(&header, data).unwrap();
    }

    /// (raw name, kind, content, link target)
    type TarEntry<'a> = (&'a [u8], tar::EntryType, &'a [u8], Option<&'a str>);

    fn tar_gz(entries: &[TarEntry<'_>]) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for (name, kind, data, link) in entries {
            tar_entry(&mut builder, name, *kind, data, *link);
        }
        let tar = builder.into_inner().unwrap();
        let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        gz.write_all(&tar).unwrap();
        gz.finish().unwrap()
    }

    fn zip(entries: &[(&str, &[u8])], symlink: Option<(&str, &str)>) -> Vec<u8> {
        let mut writer = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        let options = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Deflated);
        for (name, data) in entries {
            writer.start_file(*name, options).unwrap();
            writer.write_all(data).unwrap();
        }
        if let Some((name, target)) = symlink {
            writer.add_symlink(name, target, options).unwrap();
        }
        writer.finish().unwrap().into_inner()
    }

    /// Extracts `bytes` into a fresh folder; returns the result and the
    /// folder that holds the target (to check nothing leaked beside it).
    fn unpack(bytes: &[u8]) -> (Result<Extracted, ArchiveError>, tempfile::TempDir) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        let archive = dir.path().join("upload");
        std::fs::write(&archive, bytes).unwrap();
        let result = extract(&archive, &dir.path().join("out").join("project"), LIMITS);
        (result, dir)
    }

    fn refused(result: Result<Extracted, ArchiveError>) -> String {
        match result {
            Err(ArchiveError::Refused(message)) => message,
            other => panic!("expected a refusal, got {other:?}"),
        }
    }

    #[test]
    fn a_good_archive_unpacks_with_its_folders_and_exec_bits() {
        use tar::EntryType::{Directory, Regular};
        let bytes = tar_gz(&[
            (b"./src/", Directory, b"", None),
            (b"./src/train.py", Regular, b"print('hi')\n", None),
            (b"run.sh", Regular, b"#!/bin/sh\n", None),
        ]);
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("out")).unwrap();
        let archive = dir.path().join("upload");
        std::fs::write(&archive, &bytes).unwrap();
        let into = dir.path().join("out").join("project");
        let done = extract(&archive, &into, LIMITS).unwrap();
        assert_eq!(
            done,
            Extracted {
                files: 2,
                bytes: 22,
                entries: 3
            }
        );
        assert_eq!(
            std::fs::read_to_string(into.join("src/train.py")).unwrap(),
            "print('hi')\n"
        );
        let mode = std::fs::metadata(into.join("run.sh"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o755);

        let zipped = zip(&[("a/b.txt", b"zip!"), ("c.txt", b"")], None);
        let (result, _dir) = unpack(&zipped);
        assert_eq!(
            result.unwrap(),
            Extracted {
                files: 2,
                bytes: 4,
                entries: 3
            }
        );
    }

    #[test]
    fn paths_that_leave_the_folder_are_refused_and_nothing_is_written() {
        use tar::EntryType::Regular;
        for name in [&b"../evil"[..], b"/tmp/evil", b"a/../../evil"] {
            let bytes = tar_gz(&[
                (b"fine.txt", Regular, b"ok", None),
                (name, Regular, b"x", None),
            ]);
            let dir = tempfile::tempdir().unwrap();
            std::fs::create_dir(dir.path().join("out")).unwrap();
            let archive = dir.path().join("upload");
            std::fs::write(&archive, &bytes).unwrap();
            let into = dir.path().join("out").join("project");
            let message = refused(extract(&archive, &into, LIMITS));
            assert!(
                message.contains("outside the archive's folder"),
                "{message}"
            );
            assert!(!into.exists(), "a refused archive leaves nothing");
            assert!(!dir.path().join("evil").exists());
            assert!(!dir.path().join("out/evil").exists());
        }
        let (result, _dir) = unpack(&zip(&[("../evil", b"x")], None));
        assert!(refused(result).contains("outside"));
    }

    #[test]
    fn links_devices_and_pipes_are_refused() {
        use tar::EntryType::{Char, Fifo, Link, Symlink};
        for (kind, words) in [
            (Symlink, "is a link (to `/etc/passwd`)"),
            (Link, "is a link (to `/etc/passwd`)"),
            (Char, "device file or a pipe"),
            (Fifo, "device file or a pipe"),
        ] {
            let link = matches!(kind, Symlink | Link).then_some("/etc/passwd");
            let (result, _dir) = unpack(&tar_gz(&[(b"x", kind, b"", link)]));
            let message = refused(result);
            assert!(message.contains(words), "{kind:?}: {message}");
        }
        let (result, _dir) = unpack(&zip(&[], Some(("link", "/etc"))));
        assert!(refused(result).contains("is a link"));
    }

    #[test]
    fn bombs_and_floods_stop_at_the_limits() {
        let zeros = vec![0u8; 2 << 20];
        let (result, dir) = unpack(&zip(&[("zeros", &zeros)], None));
        assert!(refused(result).contains("more than 1048576 bytes"));
        assert!(!dir.path().join("out/project").exists());
        let names: Vec<String> = (0..101).map(|i| format!("f{i}")).collect();
        let entries: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b""[..])).collect();
        let (result, _dir) = unpack(&zip(&entries, None));
        assert!(refused(result).contains("more than 100 files and folders"));
        let (result, _dir) = unpack(&tar_gz(&[
            (b"same", tar::EntryType::Regular, b"1", None),
            (b"same", tar::EntryType::Regular, b"2", None),
        ]));
        assert!(refused(result).contains("appears twice"));
    }

    #[test]
    fn other_uploads_are_refused() {
        let (result, _dir) = unpack(b"just some text");
        assert!(refused(result).contains("not a zip, tar or tar.gz"));
    }

    #[test]
    fn a_cut_off_archive_is_refused_not_an_error_of_the_server() {
        let bytes = tar_gz(&[(b"big", tar::EntryType::Regular, &[1u8; 100_000], None)]);
        let (result, dir) = unpack(&bytes[..bytes.len() / 2]);
        let message = refused(result);
        assert!(
            message.contains("could not be unpacked") || message.contains("damaged"),
            "{message}"
        );
        assert!(!dir.path().join("out/project").exists());
    }

    #[test]
    fn folders_made_on_the_way_count_and_depth_is_bounded() {
        // Each file lies 49 folders down: those count as entries too.
        let deep = |top: &str| format!("{top}/{}f", "a/".repeat(48));
        let names: Vec<String> = ["x", "y"].iter().map(|t| deep(t)).collect();
        let two: Vec<(&str, &[u8])> = names.iter().map(|n| (n.as_str(), &b"1"[..])).collect();
        let (result, dir) = unpack(&zip(&two, None));
        // 2 files, each 49 folders down (x or y, then 48 of a).
        assert_eq!(
            result.unwrap(),
            Extracted {
                files: 2,
                bytes: 2,
                entries: 2 + 2 * 49
            }
        );
        assert!(dir.path().join("out/project").join(&names[1]).is_file());
        let third = deep("z");
        let three: Vec<(&str, &[u8])> = names
            .iter()
            .chain([&third])
            .map(|n| (n.as_str(), &b"1"[..]))
            .collect();
        let (result, dir) = unpack(&zip(&three, None));
        assert!(refused(result).contains("more than 100 files and folders"));
        assert!(!dir.path().join("out/project").exists());
        // Past 64 names deep: refused before anything is made.
        let (result, dir) = unpack(&zip(&[(&format!("{}f", "a/".repeat(64)), b"1")], None));
        assert!(refused(result).contains("more than 64 names deep"));
        assert!(!dir.path().join("out/project").exists());
        let deepest = format!("{}f", "a/".repeat(63));
        let (result, dir) = unpack(&zip(&[(&deepest, b"1")], None));
        assert_eq!(
            result.unwrap(),
            Extracted {
                files: 1,
                bytes: 1,
                entries: 64
            }
        );
        assert!(dir.path().join("out/project").join(&deepest).is_file());
        // A file, then a file below it: the archive's fault, said so.
        let (result, _dir) = unpack(&tar_gz(&[
            (b"a", tar::EntryType::Regular, b"1", None),
            (b"a/b", tar::EntryType::Regular, b"2", None),
        ]));
        assert!(refused(result).contains("`a` is a file of the archive and also a folder"));
    }

    #[test]
    fn folders_shared_with_the_last_entry_are_made_once_and_still_checked() {
        use tar::EntryType::{Directory, Regular};
        let (result, dir) = unpack(&tar_gz(&[
            (b"p/q/1", Regular, b"1", None),
            (b"p/r/2", Regular, b"2", None),
            (b"p/q/3", Regular, b"3", None),
            (b"p/q/", Directory, b"", None),
            (b"p/q/s/4", Regular, b"4", None),
        ]));
        // Folders p, p/q, p/r and p/q/s, each counted once, and 4 files.
        assert_eq!(
            result.unwrap(),
            Extracted {
                files: 4,
                bytes: 4,
                entries: 8
            }
        );
        let out = dir.path().join("out/project");
        for (name, data) in [
            ("p/q/1", "1"),
            ("p/r/2", "2"),
            ("p/q/3", "3"),
            ("p/q/s/4", "4"),
        ] {
            assert_eq!(std::fs::read_to_string(out.join(name)).unwrap(), data);
        }
        // A file under a file, after entries in the folder that holds both.
        let (result, _dir) = unpack(&tar_gz(&[
            (b"p/x", Regular, b"1", None),
            (b"p/y/z", Regular, b"2", None),
            (b"p/x/w", Regular, b"3", None),
        ]));
        assert!(refused(result).contains("`p/x` is a file of the archive and also a folder"));
        // And a file where a folder was made.
        let (result, _dir) = unpack(&tar_gz(&[
            (b"p/q/1", Regular, b"1", None),
            (b"p/q", Regular, b"2", None),
        ]));
        assert!(refused(result).contains("`p/q` appears twice"));
    }

    #[test]
    fn folders_count_against_the_limit() {
        use tar::EntryType::Directory;
        let names: Vec<Vec<u8>> = (0..101).map(|i| format!("d{i}/").into_bytes()).collect();
        let entries: Vec<TarEntry<'_>> = names
            .iter()
            .map(|n| (n.as_slice(), Directory, &b""[..], None))
            .collect();
        let (result, _dir) = unpack(&tar_gz(&entries));
        assert!(refused(result).contains("more than 100 files and folders"));
    }

    #[test]
    fn a_project_packed_with_its_folder_is_lifted_to_the_top() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("p");
        std::fs::create_dir_all(root.join("proj/proj")).unwrap();
        std::fs::create_dir_all(root.join("__MACOSX/proj")).unwrap();
        std::fs::write(root.join("proj/train.py"), "print(1)").unwrap();
        std::fs::write(root.join("proj/proj/inner.txt"), "x").unwrap();
        assert_eq!(lift_single_folder(&root).unwrap().as_deref(), Some("proj"));
        assert_eq!(
            std::fs::read_to_string(root.join("train.py")).unwrap(),
            "print(1)"
        );
        assert_eq!(
            std::fs::read_to_string(root.join("proj/inner.txt")).unwrap(),
            "x"
        );
        assert!(!root.join("__MACOSX").exists());
        let mut names: Vec<_> = std::fs::read_dir(&root)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        assert_eq!(names, ["proj", "train.py"]);
        // A top with a file beside the folder, or two folders, stays.
        let flat = dir.path().join("flat");
        std::fs::create_dir_all(flat.join("src")).unwrap();
        std::fs::write(flat.join("train.py"), "").unwrap();
        assert_eq!(lift_single_folder(&flat).unwrap(), None);
        assert!(flat.join("src").is_dir() && flat.join("train.py").is_file());
        let two = dir.path().join("two");
        std::fs::create_dir_all(two.join("a")).unwrap();
        std::fs::create_dir_all(two.join("b")).unwrap();
        assert_eq!(lift_single_folder(&two).unwrap(), None);
        // One file alone is no folder to lift.
        let one = dir.path().join("one");
        std::fs::create_dir_all(&one).unwrap();
        std::fs::write(one.join("train.py"), "").unwrap();
        assert_eq!(lift_single_folder(&one).unwrap(), None);
    }

    #[test]
    fn a_packed_folder_unpacks_the_same_without_its_links() {
        let dir = tempfile::tempdir().unwrap();
        let source = dir.path().join("source");
        std::fs::create_dir_all(source.join("pkg/deep")).unwrap();
        std::fs::write(source.join("train.py"), "print('hi')\n").unwrap();
        std::fs::write(source.join("pkg/deep/data.bin"), vec![7u8; 100_000]).unwrap();
        std::os::unix::fs::symlink("/etc/passwd", source.join("passwd")).unwrap();
        let archive = dir.path().join("out.tar");
        let limits = Limits {
            max_bytes: 1 << 20,
            max_files: 100,
        };
        let packed = pack(&source, File::create(&archive).unwrap(), limits).unwrap();
        assert_eq!(packed.bytes, 100_000 + 12);
        let into = dir.path().join("into");
        extract(&archive, &into, limits).unwrap();
        assert_eq!(
            std::fs::read_to_string(into.join("train.py")).unwrap(),
            "print('hi')\n"
        );
        assert_eq!(
            std::fs::read(into.join("pkg/deep/data.bin")).unwrap().len(),
            100_000
        );
        assert!(std::fs::symlink_metadata(into.join("passwd")).is_err());
        // Limits at the top of their range are no limits, not an overflow.
        let unbounded = Limits {
            max_bytes: u64::MAX,
            max_files: u64::MAX,
        };
        let into = dir.path().join("unbounded");
        assert_eq!(extract(&archive, &into, unbounded).unwrap().bytes, 100_012);

        // Past its limits it stops; a missing folder is an empty archive.
        let small = Limits {
            max_bytes: 1000,
            max_files: 100,
        };
        assert!(pack(&source, std::io::sink(), small).is_err());
        let empty = dir.path().join("empty.tar");
        pack(
            &dir.path().join("none"),
            File::create(&empty).unwrap(),
            limits,
        )
        .unwrap();
        let into = dir.path().join("empty");
        assert_eq!(extract(&empty, &into, limits).unwrap().files, 0);
        assert_eq!(std::fs::read_dir(&into).unwrap().count(), 0);
    }
}
