//! Job limits: each job of the local executor in a control group of its
//! own, so that it gets the CPUs and memory its spec asked for and no more.
//! A job past its memory is stopped by the kernel (and its end says so),
//! a job past its CPUs is slowed down, and a fork bomb meets a ceiling.
//!
//! Both cgroup versions are handled through the files of cgroupfs:
//! - v2 (one tree, what current distributions mount): the job groups are
//!   children of the server's own group. Because a v2 group that hands its
//!   controllers down may hold no processes itself, the server first moves
//!   into a leaf of its own, `trainyard-server`, when it is alone in its
//!   group (as a service with `Delegate=yes` is).
//! - v1 (a tree per controller): the job groups are children of the
//!   server's group in the memory, cpu and pids trees.
//!
//! The shim (root) makes the job's group and writes its limits; the job's
//! processes join it before they exec, through descriptors the shim opened,
//! so that nothing the job runs is ever outside it.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde::{Deserialize, Serialize};

/// The most tasks (processes and threads) one job may have at once: room
/// for data-loader workers with a thread per core each, a ceiling for a
/// fork bomb.
pub const TASKS_MAX: u64 = 8192;

/// The period of the CPU bandwidth limit, in microseconds (the kernel's
/// default).
const CPU_PERIOD_US: u64 = 100_000;

/// Where the groups of jobs are made, found once at the server's start.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "version", rename_all = "snake_case")]
pub enum Hierarchy {
    /// cgroup v2: job groups are made in `parent`, which hands memory, cpu
    /// and pids down to its children.
    V2 { parent: PathBuf },
    /// cgroup v1: job groups are made in `memory`, `cpu` and (where the
    /// controller is mounted) `pids`.
    V1 {
        memory: PathBuf,
        cpu: PathBuf,
        pids: Option<PathBuf>,
    },
}

impl Hierarchy {
    /// In words, for the server's log.
    pub fn describe(&self) -> String {
        match self {
            Hierarchy::V2 { parent } => format!("cgroup v2 under {}", parent.display()),
            Hierarchy::V1 { memory, cpu, pids } => format!(
                "cgroup v1 under {} and {}{}",
                memory.display(),
                cpu.display(),
                pids.as_ref()
                    .map(|p| format!(" and {}", p.display()))
                    .unwrap_or_default()
            ),
        }
    }

    /// The folders of a job group named `name`, one per tree.
    pub(crate) fn dirs(&self, name: &str) -> Vec<PathBuf> {
        match self {
            Hierarchy::V2 { parent } => vec![parent.join(name)],
            Hierarchy::V1 { memory, cpu, pids } => [Some(memory), Some(cpu), pids.as_ref()]
                .into_iter()
                .flatten()
                .map(|tree| tree.join(name))
                .collect(),
        }
    }
}

/// What one job may use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Limits {
    pub memory_bytes: u64,
    /// Thousandths of a CPU.
    pub cpu_millis: u32,
    pub tasks: u64,
}

/// What the launch file says of a job's group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct JobGroup {
    pub hierarchy: Hierarchy,
    /// The group's folder name in each tree.
    pub name: String,
    pub limits: Limits,
}

/// What the launch file says of the group a Python environment's build runs
/// in. An environment is shared by every job of the same requirements, so
/// its build must not run at its first submitter's pace (one that asked for
/// a hundredth of a CPU would have made every other job of the same
/// requirements wait on its build): it runs in a group of its own, with the
/// memory and tasks of the job that builds it (what the scheduler set aside
/// for that job, whose own group is empty meanwhile) and no CPU limit of its
/// own, inside a group that all builds of the server share, which holds
/// them to `cpu_millis` together and to nothing else.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BuildGroup {
    pub hierarchy: Hierarchy,
    /// The folder name, in each tree, of the group all builds share.
    pub shared: String,
    /// Thousandths of a CPU, for all builds together.
    pub cpu_millis: u32,
    /// This build's group, inside the shared one.
    pub name: String,
    pub memory_bytes: u64,
    pub tasks: u64,
}

impl BuildGroup {
    /// This build's own group, inside the shared one.
    pub fn own(&self) -> JobGroup {
        JobGroup {
            hierarchy: self.hierarchy.clone(),
            name: format!("{}/{}", self.shared, self.name),
            limits: Limits {
                memory_bytes: self.memory_bytes,
                cpu_millis: self.cpu_millis,
                tasks: self.tasks,
            },
        }
    }
}

/// What a job used, read from its group when it ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub memory_limit_bytes: u64,
    /// The most memory it held at once (its page cache included), where the
    /// kernel tells (v1; v2 from Linux 5.19).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memory_peak_bytes: Option<u64>,
    /// Processes the kernel stopped because the job was out of memory.
    pub oom_kills: u64,
    /// CPU time of all its processes, where the kernel tells (v2).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_usec: Option<u64>,
}

/// The group name of a job's attempt. `instance` tells apart the servers
/// (data folders) that share a machine and so a parent group.
pub fn group_name(instance: &str, job: i64, attempt: u32) -> String {
    format!("trainyard-{instance}-job-{job}.{attempt}")
}

/// A job's group, made by the shim.
pub struct Group {
    v2: bool,
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` of each tree, opened by root: the job's processes
    /// write "0" to them (themselves) after they became the job's user.
    procs: Vec<File>,
}

impl Group {
    /// Makes the group (or takes the one a lost attempt left behind, after
    /// stopping what still runs in it) and sets its limits.
    pub fn create(spec: &JobGroup) -> io::Result<Group> {
        Group::make(spec, Some(spec.limits.cpu_millis))
    }

    /// [`Group::create`], with a CPU limit of its own or none (`cpu`).
    fn make(spec: &JobGroup, cpu: Option<u32>) -> io::Result<Group> {
        let v2 = matches!(spec.hierarchy, Hierarchy::V2 { .. });
        let dirs = spec.hierarchy.dirs(&spec.name);
        let mut group = Group {
            v2,
            dirs,
            procs: Vec::new(),
        };
        match group.fill(spec.limits, cpu) {
            Ok(()) => Ok(group),
            Err(e) => {
                // Nothing half made is left behind.
                let _ = group.remove();
                Err(e)
            }
        }
    }

    fn fill(&mut self, limits: Limits, cpu: Option<u32>) -> io::Result<()> {
        for dir in &self.dirs {
            match std::fs::create_dir(dir) {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(context(e, dir)),
            }
        }
        self.kill_all()?;
        self.set_limits(limits)?;
        self.set_cpu(cpu)?;
        for dir in &self.dirs {
            let path = dir.join("cgroup.procs");
            let file = File::options()
                .write(true)
                .open(&path)
                .map_err(|e| context(e, &path))?;
            self.procs.push(file);
        }
        Ok(())
    }

    /// Makes the group of one environment's build (as [`Group::create`],
    /// without a CPU limit of its own) inside the group all builds share,
    /// which is made when missing and given the builds' CPUs. Only CPUs:
    /// what the builds share is never what one build can take from the
    /// others (their memory and tasks are each their own), and a shared
    /// CPU limit may change at any time (the kernel refuses, on v1, a
    /// parent's quota below a child's; the children have none).
    pub fn create_build(spec: &BuildGroup) -> io::Result<Group> {
        let v2 = matches!(spec.hierarchy, Hierarchy::V2 { .. });
        let shared = Group {
            v2,
            dirs: spec.hierarchy.dirs(&spec.shared),
            procs: Vec::new(),
        };
        let attempt = || -> io::Result<Group> {
            for dir in &shared.dirs {
                match std::fs::create_dir(dir) {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(context(e, dir)),
                }
            }
            shared.set_cpu(Some(spec.cpu_millis))?;
            if v2 {
                write(
                    &shared.dirs[0],
                    "cgroup.subtree_control",
                    "+memory +cpu +pids",
                )?;
            }
            Group::make(&spec.own(), None)
        };
        let mut tries = 0;
        loop {
            match attempt() {
                // The last build to end removed the shared group meanwhile
                // (the kernel says ENOENT, or ENODEV while it removes it):
                // made again.
                Err(_) if tries < 3 && !shared.dirs.iter().all(|d| d.is_dir()) => tries += 1,
                made => return made,
            }
        }
    }

    /// Removes the group all builds share once none is left in it. A build
    /// in it (or one just starting) keeps it: the kernel refuses to remove
    /// a group with children.
    pub fn remove_shared_build_group(spec: &BuildGroup) {
        for dir in spec.hierarchy.dirs(&spec.shared) {
            let _ = std::fs::remove_dir(dir);
        }
    }

    /// The group of a job as it is, to look at or to stop (after the shim
    /// that made it is gone).
    pub fn existing(spec: &JobGroup) -> Group {
        Group {
            v2: matches!(spec.hierarchy, Hierarchy::V2 { .. }),
            dirs: spec.hierarchy.dirs(&spec.name),
            procs: Vec::new(),
        }
    }

    /// Memory and tasks; the CPUs are [`Group::set_cpu`]'s.
    fn set_limits(&self, limits: Limits) -> io::Result<()> {
        let memory = limits.memory_bytes.to_string();
        let tasks = limits.tasks.to_string();
        if self.v2 {
            let dir = &self.dirs[0];
            write(dir, "memory.max", &memory)?;
            // No swap: past its memory a job stops, instead of slowing the
            // whole machine down.
            write_if_present(dir, "memory.swap.max", "0")?;
            // One process stopped leaves a half job (a data loader without
            // its trainer): stop all of it.
            write_if_present(dir, "memory.oom.group", "1")?;
            write(dir, "pids.max", &tasks)?;
        } else {
            let [memory_dir, _, rest @ ..] = self.dirs.as_slice() else {
                unreachable!("v1 has a memory and a cpu tree");
            };
            // The limit with swap must stay at or above the one without.
            let _ = write_if_present(memory_dir, "memory.memsw.limit_in_bytes", "-1");
            write(memory_dir, "memory.limit_in_bytes", &memory)?;
            if memory_dir.join("memory.memsw.limit_in_bytes").exists() {
                write(memory_dir, "memory.memsw.limit_in_bytes", &memory)?;
            } else {
                // Without swap accounting: swap as little as the kernel can.
                write_if_present(memory_dir, "memory.swappiness", "0")?;
            }
            if let Some(pids_dir) = rest.first() {
                write(pids_dir, "pids.max", &tasks)?;
            }
        }
        Ok(())
    }

    /// The group's CPU bandwidth: `cpu_millis` thousandths of a CPU, or
    /// None: no limit of its own (its parent's holds).
    fn set_cpu(&self, cpu_millis: Option<u32>) -> io::Result<()> {
        let quota = cpu_millis.map(|millis| (u64::from(millis) * CPU_PERIOD_US / 1000).max(1000));
        if self.v2 {
            let quota = quota.map_or("max".to_owned(), |q| q.to_string());
            write(
                &self.dirs[0],
                "cpu.max",
                &format!("{quota} {CPU_PERIOD_US}"),
            )
        } else {
            let cpu_dir = &self.dirs[1];
            write(cpu_dir, "cpu.cfs_period_us", &CPU_PERIOD_US.to_string())?;
            let quota = quota.map_or("-1".to_owned(), |q| q.to_string());
            write(cpu_dir, "cpu.cfs_quota_us", &quota)
        }
    }

    /// Makes the process `command` starts join this group before it
    /// execs: after it became the job's user, so the descriptors opened by
    /// root are all it needs.
    pub fn join_on_exec(&self, command: &mut Command) {
        let fds: Vec<i32> = self.procs.iter().map(|f| f.as_raw_fd()).collect();
        // SAFETY: the closure runs in the forked child and calls only
        // write(2), which is async-signal-safe; it allocates nothing (the
        // descriptors were collected before the fork).
        unsafe {
            command.pre_exec(move || {
                for &fd in &fds {
                    if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }

    /// The processes in the group.
    pub fn processes(&self) -> Vec<i32> {
        std::fs::read_to_string(self.dirs[0].join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.trim().parse().ok())
            .collect()
    }

    /// Sends `signal` to every process in the group (a SIGTERM before the
    /// SIGKILL, also for what left the job's process group).
    pub fn signal(&self, signal: i32) {
        for pid in self.processes() {
            // SAFETY: kill has no memory effects.
            unsafe { libc::kill(pid, signal) };
        }
    }

    /// Stops everything in the group, also what left the job's process
    /// group or session.
    pub fn kill_all(&self) -> io::Result<()> {
        if self.v2 {
            // One write stops the whole subtree (Linux 5.14 and later).
            let _ = write_if_present(&self.dirs[0], "cgroup.kill", "1");
        }
        for _ in 0..100 {
            let left = self.processes();
            if left.is_empty() {
                return Ok(());
            }
            for pid in left {
                // SAFETY: kill has no memory effects.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        match self.processes().len() {
            0 => Ok(()),
            left => Err(io::Error::other(format!(
                "{left} processes in {} survived 100 rounds of SIGKILL",
                self.dirs[0].display()
            ))),
        }
    }

    fn oom_kills_so_far(&self) -> u64 {
        let (file, key) = if self.v2 {
            ("memory.events", "oom_kill")
        } else {
            ("memory.oom_control", "oom_kill")
        };
        let text = std::fs::read_to_string(self.dirs[0].join(file)).unwrap_or_default();
        keyed(&text, key).unwrap_or(0)
    }

    /// What the job used so far.
    pub fn usage(&self) -> Usage {
        let dir = &self.dirs[0];
        let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
        let number = |name: &str| read(name).trim().parse::<u64>().ok();
        let oom_kills = self.oom_kills_so_far();
        if self.v2 {
            Usage {
                memory_limit_bytes: number("memory.max").unwrap_or(u64::MAX),
                memory_peak_bytes: number("memory.peak"),
                oom_kills,
                cpu_usec: keyed(&read("cpu.stat"), "usage_usec"),
            }
        } else {
            Usage {
                memory_limit_bytes: number("memory.limit_in_bytes").unwrap_or(u64::MAX),
                memory_peak_bytes: number("memory.max_usage_in_bytes"),
                oom_kills,
                cpu_usec: None,
            }
        }
    }

    /// Stops what is left and removes the group's folders. A process that
    /// was killed may take a while to leave (a GPU process while the driver
    /// lets go of its memory): up to a minute is waited for.
    pub fn remove(self) -> io::Result<()> {
        let killed = self.kill_all();
        for dir in &self.dirs {
            let mut tries = 0;
            loop {
                match std::fs::remove_dir(dir) {
                    Ok(()) => break,
                    Err(e) if e.kind() == io::ErrorKind::NotFound => break,
                    // Busy: a process has not left yet.
                    Err(e) if e.kind() == io::ErrorKind::ResourceBusy && tries < 600 => {
                        tries += 1;
                        if tries % 50 == 0 {
                            let _ = self.kill_all();
                        }
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    Err(e) => return Err(context(e, dir)),
                }
            }
        }
        killed
    }
}

/// The number after `key` in a flat-keyed cgroup file (`key value` lines).
fn keyed(text: &str, key: &str) -> Option<u64> {
    text.lines().find_map(|line| {
        let (name, value) = line.split_once(' ')?;
        (name == key).then(|| value.trim().parse().ok())?
    })
}

fn context(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

fn write(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    let path = dir.join(file);
    std::fs::write(&path, value).map_err(|e| {
        io::Error::new(
            e.kind(),
            format!("{}: cannot write `{value}`: {e}", path.display()),
        )
    })
}

/// Writes `file` when the kernel offers it (swap accounting, for one, may
/// be off).
fn write_if_present(dir: &Path, file: &str, value: &str) -> io::Result<()> {
    if dir.join(file).exists() {
        write(dir, file, value)
    } else {
        Ok(())
    }
}

/// Finds where job groups can be made, from the text of /proc/self/cgroup
/// and /proc/self/mountinfo. Nothing is written: [`prepare`] does that.
/// `controllers` reads a v2 tree's `cgroup.controllers` (given its folder).
pub fn locate(
    own: &str,
    mountinfo: &str,
    controllers: impl Fn(&Path) -> Vec<String>,
) -> Result<Located, String> {
    let mounts: Vec<Mount> = mountinfo.lines().filter_map(Mount::parse).collect();
    let own_path = |hierarchy: &str, controller: Option<&str>| -> Option<String> {
        own.lines().find_map(|line| {
            let mut parts = line.splitn(3, ':');
            let id = parts.next()?;
            let controllers = parts.next()?;
            let path = parts.next()?;
            let matches = match controller {
                None => id == hierarchy && controllers.is_empty(),
                Some(c) => controllers.split(',').any(|x| x == c),
            };
            matches.then(|| path.to_owned())
        })
    };
    // v2 when its tree has the memory controller (a pure v2 host).
    if let Some(mount) = mounts.iter().find(|m| m.fstype == "cgroup2")
        && let Some(path) = own_path("0", None)
    {
        let dir = mount.dir_of(&path);
        if let Some(dir) = dir
            && controllers(&mount.point).iter().any(|c| c == "memory")
        {
            return Ok(Located::V2 { own: dir });
        }
    }
    let v1 = |controller: &str| -> Option<PathBuf> {
        let mount = mounts
            .iter()
            .find(|m| m.fstype == "cgroup" && m.options.split(',').any(|o| o == controller))?;
        mount.dir_of(&own_path("", Some(controller))?)
    };
    match (v1("memory"), v1("cpu")) {
        (Some(memory), Some(cpu)) => Ok(Located::V1(Hierarchy::V1 {
            memory,
            cpu,
            pids: v1("pids"),
        })),
        (None, _) => Err(
            "no cgroup tree with the memory controller is mounted (neither v2 nor v1)".to_owned(),
        ),
        (_, None) => Err("no cgroup v1 tree with the cpu controller is mounted".to_owned()),
    }
}

/// What [`locate`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Located {
    /// The server's own v2 group.
    V2 {
        own: PathBuf,
    },
    V1(Hierarchy),
}

/// The controllers a v2 group offers.
pub fn v2_controllers(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect()
}

/// One line of /proc/self/mountinfo, the parts that matter here.
struct Mount {
    /// The folder of the filesystem that is mounted (a cgroup namespace or
    /// a bind mount may show a subtree).
    root: String,
    point: PathBuf,
    fstype: String,
    options: String,
}

impl Mount {
    fn parse(line: &str) -> Option<Mount> {
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let right: Vec<&str> = right.split(' ').collect();
        Some(Mount {
            root: unescape(left.get(3)?),
            point: PathBuf::from(unescape(left.get(4)?)),
            fstype: (*right.first()?).to_owned(),
            options: (*right.get(2)?).to_owned(),
        })
    }

    /// Where the group at `path` (as /proc/self/cgroup names it) is.
    fn dir_of(&self, path: &str) -> Option<PathBuf> {
        let inner = if self.root == "/" {
            path
        } else {
            path.strip_prefix(self.root.as_str())?
        };
        let inner = inner.trim_start_matches('/');
        Some(if inner.is_empty() {
            self.point.clone()
        } else {
            self.point.join(inner)
        })
    }
}

/// mountinfo writes space, tab, newline and backslash as octal escapes.
fn unescape(field: &str) -> String {
    let mut out = String::with_capacity(field.len());
    let mut rest = field;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 4)
            .and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(byte) => {
                out.push(byte as char);
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// The leaf a v2 server moves into, so that its own group may hand its
/// controllers down.
pub const SERVER_LEAF: &str = "trainyard-server";

/// Makes job groups possible in what [`locate`] found, and checks that
/// they are: a v2 server moves into [`SERVER_LEAF`] and hands memory, cpu
/// and pids down; then a test group is made and removed. The error says
/// what is missing and what to do.
pub fn prepare(located: Located) -> Result<Hierarchy, String> {
    let hierarchy = match located {
        Located::V1(hierarchy) => hierarchy,
        Located::V2 { own } => {
            // Already in its leaf (moved there by an earlier start in this
            // process, or started there: systemd's DelegateSubgroup): the
            // jobs' parent is the one above.
            let parent = match own.parent() {
                Some(parent) if own.file_name() == Some(SERVER_LEAF.as_ref()) => {
                    parent.to_path_buf()
                }
                _ => own,
            };
            prepare_v2(&parent)?;
            Hierarchy::V2 { parent }
        }
    };
    let probe = probe_group(&hierarchy);
    let group = Group::create(&probe).map_err(|e| {
        let _ = Group::existing(&probe).remove();
        format!(
            "cannot make a job group: {e}; the server needs to write cgroupfs where it runs \
             (as root, or in a delegated group; a container needs it mounted read-write), \
             or set job_limits = none"
        )
    })?;
    group
        .remove()
        .map_err(|e| format!("cannot remove a job group: {e}"))?;
    Ok(hierarchy)
}

/// A group to try things with, removed again.
fn probe_group(hierarchy: &Hierarchy) -> JobGroup {
    JobGroup {
        hierarchy: hierarchy.clone(),
        // Servers that start at once (tests) each make their own.
        name: format!("trainyard-probe-{}", uuid::Uuid::new_v4().simple()),
        limits: Limits {
            memory_bytes: 64 << 20,
            cpu_millis: 1000,
            tasks: 16,
        },
    }
}

/// Checks that a job's process joins its group as a job's does: after it
/// became `user` (on v2, Linux before 5.16 without the fix for
/// CVE-2021-4197 checks that write with the writer's rights, which a job's
/// uid lacks). The probe prints its own groups, which must name the group.
pub fn check_join(
    hierarchy: &Hierarchy,
    user: Option<crate::users::JobUser>,
) -> Result<(), String> {
    let probe = probe_group(hierarchy);
    let group = Group::create(&probe).map_err(|e| format!("cannot make a job group: {e}"))?;
    let mut command = Command::new("/bin/cat");
    command.arg("/proc/self/cgroup");
    if let Some(user) = user {
        user.apply(&mut command);
    }
    group.join_on_exec(&mut command);
    let output = command.output();
    let removed = group.remove();
    let who = user
        .map(|u| format!(" after switching to uid {}", u.uid))
        .unwrap_or_default();
    match output {
        Ok(output) if output.status.success() => {
            let text = String::from_utf8_lossy(&output.stdout);
            let joined = text
                .lines()
                .any(|l| l.ends_with(&format!("/{}", probe.name)));
            if !joined {
                return Err(format!(
                    "a process that joined the job group {} is not in it: {text}",
                    probe.name
                ));
            }
        }
        Ok(output) => {
            return Err(format!(
                "a probe in a job group failed ({}): {}",
                output.status,
                String::from_utf8_lossy(&output.stderr).trim()
            ));
        }
        Err(e) => {
            return Err(format!(
                "a job's process cannot join its control group{who}: {e}; on cgroup v2 this kernel \
                 checks the write with the job's rights (Linux before 5.16 without the fix for \
                 CVE-2021-4197): update the kernel, or set job_limits = none"
            ));
        }
    }
    removed.map_err(|e| format!("cannot remove a job group: {e}"))
}

fn prepare_v2(own: &Path) -> Result<(), String> {
    let wanted = ["memory", "cpu", "pids"];
    let offered = v2_controllers(own);
    let missing: Vec<&str> = wanted
        .iter()
        .copied()
        .filter(|c| !offered.iter().any(|o| o == c))
        .collect();
    if !missing.is_empty() {
        return Err(format!(
            "the server's cgroup {} does not offer the {} controller(s); run it where they are \
             delegated (systemd: Delegate=yes)",
            own.display(),
            missing.join(", ")
        ));
    }
    let enabled = std::fs::read_to_string(own.join("cgroup.subtree_control")).unwrap_or_default();
    if wanted
        .iter()
        .all(|c| enabled.split_whitespace().any(|e| e == *c))
    {
        return Ok(());
    }
    let enable = wanted.map(|c| format!("+{c}")).join(" ");
    let hand_down = || write(own, "cgroup.subtree_control", &enable);
    match hand_down() {
        Ok(()) => return Ok(()),
        // Not the root, and processes in it: a group that hands controllers
        // down may hold none.
        Err(e) if e.kind() == io::ErrorKind::ResourceBusy => {}
        Err(e) => {
            return Err(format!(
                "cannot hand the controllers down to job groups: {e}"
            ));
        }
    }
    // The server moves into a leaf of its own, when it is alone (a service
    // of its own).
    let me = std::process::id() as i32;
    let others: Vec<i32> = std::fs::read_to_string(own.join("cgroup.procs"))
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|&p| p != me)
        .collect();
    if let Some(other) = others.first() {
        return Err(format!(
            "the server's cgroup {} holds {} other process(es) (e.g. {other}), so it cannot hand \
             its controllers to job groups; run the server as a service of its own (systemd: \
             Delegate=yes) or set job_limits = none",
            own.display(),
            others.len(),
        ));
    }
    let leaf = own.join(SERVER_LEAF);
    match std::fs::create_dir(&leaf) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot make {}: {e}", leaf.display())),
    }
    write(&leaf, "cgroup.procs", &me.to_string())
        .map_err(|e| format!("cannot move the server into its own leaf: {e}"))?;
    hand_down().map_err(|e| format!("cannot hand the controllers down to job groups: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HYBRID_MOUNTS: &str = "\
31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
33 31 0:30 / /sys/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
35 31 0:32 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
39 31 0:36 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn v1_trees_are_found_where_the_server_is() {
        let own = "9:name=systemd:/\n8:pids:/\n4:memory:/sandbox/abc\n1:cpu:/\n0::/\n";
        let located = locate(own, HYBRID_MOUNTS, |_| vec![]).unwrap();
        assert_eq!(
            located,
            Located::V1(Hierarchy::V1 {
                memory: "/sys/fs/cgroup/memory/sandbox/abc".into(),
                cpu: "/sys/fs/cgroup/cpu".into(),
                pids: Some("/sys/fs/cgroup/pids".into()),
            })
        );
    }

    #[test]
    fn a_mount_of_a_subtree_is_followed_and_escapes_are_read() {
        let mounts = "40 31 0:38 /lab /srv/cg\\040tree rw - cgroup cgroup rw,memory\n\
                      41 31 0:39 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n";
        let own = "4:memory:/lab/jobs\n2:cpu,cpuacct:/x\n";
        let Located::V1(Hierarchy::V1 { memory, cpu, pids }) =
            locate(own, mounts, |_| vec![]).unwrap()
        else {
            panic!("v1 expected");
        };
        assert_eq!(memory, PathBuf::from("/srv/cg tree/jobs"));
        assert_eq!(cpu, PathBuf::from("/sys/fs/cgroup/cpu,cpuacct/x"));
        assert_eq!(pids, None);
    }

    #[test]
    fn missing_controllers_are_named() {
        let mounts = "41 31 0:38 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        let error = locate("1:cpu:/\n", mounts, |_| vec![]).unwrap_err();
        assert!(error.contains("memory"), "{error}");
    }

    #[test]
    fn flat_keyed_files_are_read() {
        let events = "low 0\nhigh 0\nmax 3\noom 1\noom_kill 2\noom_group_kill 1\n";
        assert_eq!(keyed(events, "oom_kill"), Some(2));
        assert_eq!(keyed(events, "oom"), Some(1));
        assert_eq!(keyed(events, "absent"), None);
    }

    #[test]
    fn a_v2_tree_with_memory_is_preferred() {
        let own = "4:memory:/sandbox/abc\n1:cpu:/\n0::/system.slice/trainyard.service\n";
        let with_memory = |dir: &Path| {
            assert_eq!(dir, Path::new("/sys/fs/cgroup/unified"));
            vec!["cpu".to_owned(), "memory".to_owned(), "pids".to_owned()]
        };
        assert_eq!(
            locate(own, HYBRID_MOUNTS, with_memory).unwrap(),
            Located::V2 {
                own: "/sys/fs/cgroup/unified/system.slice/trainyard.service".into()
            }
        );
    }
}
