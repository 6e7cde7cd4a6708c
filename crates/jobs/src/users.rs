//! Job users: each running job of the local executor under a uid of its own,
//! so that it cannot read the server's database, other jobs' files or their
//! tracking tokens, and so that everything it started can be found and
//! stopped when it ends, even processes that left its process group.

use std::fs::Permissions;
use std::io;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The uids jobs run as, one per running job: `FIRST-LAST`, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UidRange {
    pub first: u32,
    pub last: u32,
}

/// What `auto` picks when the server runs as root: past the uids Debian
/// gives people (up to 59999) and below `nobody` (65534), so that it fits
/// the 65,536 uids of a typical user namespace.
pub const DEFAULT_RANGE: UidRange = UidRange {
    first: 60_000,
    last: 60_999,
};

/// The most uids a range may hold.
pub const MAX_RANGE: u32 = 1_000_000;

impl UidRange {
    /// Reads `FIRST-LAST`; the error says what is wrong.
    pub fn parse(text: &str) -> Result<UidRange, String> {
        let (first, last) = text.trim().split_once('-').ok_or_else(|| {
            format!("`{text}` is not a range; write FIRST-LAST, e.g. 60000-60999")
        })?;
        let number = |part: &str| {
            part.trim()
                .parse::<u32>()
                .map_err(|_| format!("`{}` in `{text}` is not a uid", part.trim()))
        };
        let range = UidRange {
            first: number(first)?,
            last: number(last)?,
        };
        if range.first == 0 {
            return Err("the range may not hold uid 0 (root)".to_owned());
        }
        if range.last < range.first {
            return Err(format!("`{text}` ends before it starts"));
        }
        if range.last >= 65_534 && range.first <= 65_534 {
            return Err("the range may not hold uid 65534 (nobody)".to_owned());
        }
        if range.last == u32::MAX {
            return Err("the range may not hold uid 4294967295 (it means \"no uid\")".to_owned());
        }
        if range.count() > MAX_RANGE {
            return Err(format!("`{text}` holds more than {MAX_RANGE} uids"));
        }
        Ok(range)
    }

    /// How many uids, so how many jobs may run at once.
    pub fn count(&self) -> u32 {
        self.last - self.first + 1
    }

    pub fn contains(&self, uid: u32) -> bool {
        (self.first..=self.last).contains(&uid)
    }

    /// The lowest uid of the range that `taken` does not hold.
    pub fn free(&self, taken: &std::collections::HashSet<u32>) -> Option<u32> {
        (self.first..=self.last).find(|uid| !taken.contains(uid))
    }
}

impl std::fmt::Display for UidRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}-{}", self.first, self.last)
    }
}

/// Who a job runs as: the shim switches to it before the command starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobUser {
    pub uid: u32,
    pub gid: u32,
}

impl JobUser {
    /// A job's group is its own too: the number of its uid.
    pub fn new(uid: u32) -> JobUser {
        JobUser { uid, gid: uid }
    }

    /// Makes `command` run as this user, without the server's
    /// supplementary groups (the standard library drops them when root
    /// changes uid).
    pub fn apply(&self, command: &mut Command) {
        command.uid(self.uid).gid(self.gid);
    }
}

/// Whether this process may run jobs as other users.
pub fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// The accounts of `passwd` (the text of /etc/passwd) whose uid is in
/// `range`: a job must never run as a person or a service.
pub fn accounts_in(range: UidRange, passwd: &str) -> Vec<(String, u32)> {
    passwd
        .lines()
        .filter(|line| !line.starts_with('#'))
        .filter_map(|line| {
            let mut fields = line.split(':');
            let name = fields.next()?;
            let uid = fields.nth(1)?.parse::<u32>().ok()?;
            range.contains(uid).then(|| (name.to_owned(), uid))
        })
        .collect()
}

/// Err names the first folder on the way to `path` (itself included) that
/// other users may not pass through (no `x` for others), so a job's user
/// could not reach what lies below it.
pub fn check_reachable(path: &Path) -> Result<(), String> {
    let path = std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))?;
    for folder in path.ancestors() {
        let meta = match std::fs::metadata(folder) {
            Ok(meta) => meta,
            // Made later, by this server, with the right mode.
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            Err(e) => return Err(format!("{}: {e}", folder.display())),
        };
        if meta.is_dir() && meta.mode() & 0o001 == 0 {
            return Err(format!(
                "{} (mode {:o}) cannot be passed through by other users",
                folder.display(),
                meta.mode() & 0o7777
            ));
        }
    }
    Ok(())
}

pub fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    std::fs::set_permissions(path, Permissions::from_mode(mode))
}

/// The live processes (zombies do not count) whose real or effective uid
/// is `uid`.
pub fn processes_of(uid: u32) -> Vec<i32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(status) = std::fs::read_to_string(format!("/proc/{pid}/status")) else {
                return false;
            };
            let field = |name: &str| {
                status
                    .lines()
                    .find_map(|line| line.strip_prefix(name))
                    .map(str::trim)
                    .unwrap_or("")
                    .to_owned()
            };
            let zombie = field("State:").starts_with('Z');
            let uids: Vec<u32> = field("Uid:")
                .split_whitespace()
                .take(2)
                .filter_map(|u| u.parse().ok())
                .collect();
            !zombie && uids.contains(&uid)
        })
        .collect()
}

/// Stops every process of `uid`: whatever a job started, also what left
/// its process group or session. `kill(-1)` sent as that uid reaches
/// exactly its processes; it is repeated until none is left, so a process
/// that was forking at that moment is caught on the next round.
pub fn kill_all(uid: u32) -> io::Result<()> {
    for _ in 0..100 {
        if processes_of(uid).is_empty() {
            return Ok(());
        }
        let mut command = Command::new("/bin/true");
        JobUser::new(uid).apply(&mut command);
        // SAFETY: the closure runs in the forked child, after it became
        // `uid`; it calls only kill and _exit, which are async-signal-safe,
        // and never returns, so nothing is executed.
        unsafe {
            command.pre_exec(|| {
                libc::kill(-1, libc::SIGKILL);
                libc::_exit(0);
            });
        }
        command.spawn()?.wait()?;
        std::thread::sleep(Duration::from_millis(20));
    }
    match processes_of(uid).len() {
        0 => Ok(()),
        left => Err(io::Error::other(format!(
            "{left} processes of uid {uid} survived 100 rounds of SIGKILL"
        ))),
    }
}

/// Removes what `uid` left at the top of the folders every user may write
/// (a job that wrote `/tmp/x` despite its own TMPDIR), so that the next job
/// with this uid does not find it.
pub fn remove_left_behind(uid: u32) {
    for shared in ["/tmp", "/var/tmp", "/dev/shm", "/dev/mqueue"] {
        let Ok(entries) = std::fs::read_dir(shared) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else {
                continue;
            };
            if meta.uid() != uid {
                continue;
            }
            // Through descriptors: links are removed, never followed, and
            // a tree nested 100,000 deep is removed too.
            if let Err(e) = crate::tree::remove_tree(&path) {
                eprintln!("cannot remove {}: {e}", path.display());
            }
        }
    }
}

/// Removes the SysV shared memory segments, message queues and semaphore
/// sets that `uid` owns in this IPC namespace, so the next job with the
/// uid does not find them. Best effort.
pub fn remove_ipc_of(uid: u32) {
    for (kind, id_column) in [("shm", "shmid"), ("msg", "msqid"), ("sem", "semid")] {
        let Ok(table) = std::fs::read_to_string(format!("/proc/sysvipc/{kind}")) else {
            continue;
        };
        for id in ipc_ids_of(&table, id_column, uid) {
            // SAFETY: IPC_RMID on an id read from the kernel's own table;
            // one that is gone already gives EINVAL.
            unsafe {
                match kind {
                    "shm" => libc::shmctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                    "msg" => libc::msgctl(id, libc::IPC_RMID, std::ptr::null_mut()),
                    _ => libc::semctl(id, 0, libc::IPC_RMID),
                };
            }
        }
    }
}

/// The ids in a `/proc/sysvipc` table that `uid` owns or created (an
/// owner may hand an object to another uid; its creator stays).
fn ipc_ids_of(table: &str, id_column: &str, uid: u32) -> Vec<i32> {
    let mut lines = table.lines();
    let Some(header) = lines.next() else {
        return Vec::new();
    };
    let columns: Vec<&str> = header.split_whitespace().collect();
    let at = |name: &str| columns.iter().position(|c| *c == name);
    let (Some(id_at), Some(uid_at), Some(cuid_at)) = (at(id_column), at("uid"), at("cuid")) else {
        return Vec::new();
    };
    lines
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let is = |at: usize| fields.get(at).and_then(|f| f.parse::<u32>().ok()) == Some(uid);
            (is(uid_at) || is(cuid_at)).then(|| fields.get(id_at)?.parse().ok())?
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_read_and_bad_ones_refused_with_the_reason() {
        assert_eq!(
            UidRange::parse(" 60000-60999 "),
            Ok(UidRange {
                first: 60_000,
                last: 60_999
            })
        );
        assert_eq!(UidRange::parse("70000-70000").unwrap().count(), 1);
        let error = |text| UidRange::parse(text).unwrap_err();
        assert!(error("60000").contains("FIRST-LAST"));
        assert!(error("0-10").contains("root"));
        assert!(error("60000-50000").contains("ends before it starts"));
        assert!(error("65000-66000").contains("nobody"));
        assert!(error("a-10").contains("`a`"));
        assert!(error("100000-2000000").contains("more than"));
    }

    #[test]
    fn ipc_objects_are_found_by_their_owner() {
        let table = "       key      shmid perms       size  cpid  lpid nattch   uid   gid  cuid  cgid\n\
                     0x00000000          5   666       4096   100   100      0 60001 60001 60001 60001\n\
                     0x0000abcd          9   600       4096   100   100      0     0     0     0     0\n\
                     0x0000abce         11   666       4096   100   100      0     0     0 60001 60001\n";
        assert_eq!(
            ipc_ids_of(table, "shmid", 60_001),
            [5, 11],
            "owned, or made and given away"
        );
        assert_eq!(ipc_ids_of(table, "shmid", 0), [9, 11]);
        assert!(ipc_ids_of(table, "shmid", 7).is_empty());
        assert!(ipc_ids_of("", "shmid", 0).is_empty());
    }

    /// Needs root. A segment a job's uid made in this namespace is gone
    /// after the clean-up, and root's own is kept.
    #[test]
    fn a_uids_shared_memory_is_removed() {
        if !is_root() {
            eprintln!("skipped: switching uids needs root");
            return;
        }
        let uid = 64_994;
        let made = |as_uid: Option<u32>| {
            let mut command = Command::new("ipcmk");
            command.args(["-M", "4096", "-p", "0666"]);
            if let Some(uid) = as_uid {
                JobUser::new(uid).apply(&mut command);
            }
            let out = command.output().expect("ipcmk (util-linux) runs");
            assert!(out.status.success(), "{out:?}");
            String::from_utf8_lossy(&out.stdout)
                .rsplit(' ')
                .next()
                .and_then(|id| id.trim().parse::<i32>().ok())
                .expect("ipcmk prints the id")
        };
        let theirs = made(Some(uid));
        let roots = made(None);
        let table = || std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
        assert!(ipc_ids_of(&table(), "shmid", uid).contains(&theirs));
        remove_ipc_of(uid);
        assert!(ipc_ids_of(&table(), "shmid", uid).is_empty());
        assert!(ipc_ids_of(&table(), "shmid", 0).contains(&roots));
        // SAFETY: removes the segment this test made.
        unsafe { libc::shmctl(roots, libc::IPC_RMID, std::ptr::null_mut()) };
    }

    #[test]
    fn the_lowest_free_uid_is_given() {
        let range = UidRange::parse("100-102").unwrap();
        let mut taken = std::collections::HashSet::from([100]);
        assert_eq!(range.free(&taken), Some(101));
        taken.extend([101, 102]);
        assert_eq!(range.free(&taken), None);
    }

    #[test]
    fn accounts_inside_a_range_are_found() {
        let passwd = "root:x:0:0:root:/root:/bin/bash\n\
                      # a comment\n\
                      ana:x:60001:60001:Ana:/home/ana:/bin/bash\n\
                      nobody:x:65534:65534:nobody:/:/usr/sbin/nologin\n";
        let range = UidRange::parse("60000-60999").unwrap();
        assert_eq!(accounts_in(range, passwd), vec![("ana".to_owned(), 60001)]);
        assert!(accounts_in(UidRange::parse("1-10").unwrap(), passwd).is_empty());
    }

    #[test]
    fn a_closed_folder_on_the_way_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let closed = dir.path().join("closed");
        std::fs::create_dir_all(closed.join("inner")).unwrap();
        set_mode(dir.path(), 0o755).unwrap();
        set_mode(&closed, 0o700).unwrap();
        let error = check_reachable(&closed.join("inner").join("not-yet")).unwrap_err();
        assert!(error.contains(&closed.display().to_string()), "{error}");
        assert!(error.contains("700"), "{error}");
        set_mode(&closed, 0o711).unwrap();
        assert_eq!(check_reachable(&closed.join("inner")), Ok(()));
    }

    /// Needs root, as the server does to run jobs as other users.
    #[test]
    fn every_process_of_a_uid_is_stopped_also_one_that_left_its_group() {
        if !is_root() {
            eprintln!("skipped: switching uids needs root");
            return;
        }
        let uid = 64_990;
        let mut command = Command::new("/bin/sh");
        command.arg("-c").arg("setsid sleep 60 & sleep 60 & wait");
        JobUser::new(uid).apply(&mut command);
        let mut child = command.spawn().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while processes_of(uid).len() < 3 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(processes_of(uid).len(), 3, "sh and two sleeps run as {uid}");
        kill_all(uid).unwrap();
        let _ = child.wait();
        assert!(processes_of(uid).is_empty());
        assert!(
            !processes_of(0).is_empty(),
            "root's processes (this test) live on"
        );
    }
}
