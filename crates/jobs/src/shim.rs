//! The job shim: `trainyard job-shim DIR`, one small process per running job.
//!
//! The server starts the shim in a process group of its own; the shim starts
//! the job's command in another, sends its output to `DIR/output.log`,
//! enforces the deadline, stops the whole group when `DIR/cancel` appears,
//! and writes how the job ended to `DIR/exit.json`. Because the shim, not the
//! server, is the job's parent, a server restart (or crash) loses no job: the
//! new server finds the shim again by its PID and start time and reads the
//! exit file when it appears.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::cgroups::{BuildGroup, Group, JobGroup, Usage};
use crate::tree;
use crate::users::{self, JobUser};

/// What the server writes to `DIR/launch.json` before it starts the shim.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Launch {
    /// Run with `/bin/sh -c` in `cwd`.
    pub command: String,
    pub cwd: PathBuf,
    /// The whole environment of the command: the server's own is not passed
    /// on (it may hold database passwords).
    pub env: BTreeMap<String, String>,
    /// Milliseconds since the Unix epoch after which the job is stopped.
    pub deadline_ms: i64,
    /// Seconds between SIGTERM and SIGKILL when stopping.
    pub stop_grace_secs: u64,
    /// Where Python environments are cached. When set and `cwd` holds a
    /// `requirements.txt`, the command runs in an environment with them
    /// installed, made once per distinct file (and Python).
    #[serde(default)]
    pub venv_root: Option<PathBuf>,
    /// The server's variables that an environment's build gets: PATH
    /// (where its Python is looked for; `/usr/local/bin:/usr/bin:/bin`
    /// when missing) and, when jobs run as the server's user, HOME. Never
    /// the job's `env`, which its submitter sets: environments are shared.
    #[serde(default)]
    pub venv_env: BTreeMap<String, String>,
    /// Who the command (and its environment's installation) runs as; None:
    /// as the shim itself. The shim stays root: it stops every process of
    /// this user when the job ends, closes the job's folder and clears
    /// what the user left in the shared temporary folders.
    #[serde(default)]
    pub user: Option<JobUser>,
    /// The control group that holds the job to its CPUs and memory; None:
    /// not enforced.
    #[serde(default)]
    pub cgroup: Option<JobGroup>,
    /// The control group its Python environment's build runs in, when it
    /// builds one; None: not enforced.
    #[serde(default)]
    pub env_build: Option<BuildGroup>,
    /// The longest its Python environment's build may take, in seconds;
    /// past it the job fails saying so.
    #[serde(default = "default_build_secs")]
    pub env_build_secs: u64,
    /// What the job may hold on disk in its folders; None: not measured.
    #[serde(default)]
    pub disk: Option<DiskLimit>,
}

/// The disk a job may hold: measured every `every_secs` while it runs
/// (as the kubelet measures a pod's ephemeral storage), and the job stopped
/// past it. Its folders are its own (work, home, temporary files, log,
/// checkpoints); the shared Python environments are not counted.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiskLimit {
    pub folders: Vec<PathBuf>,
    pub max_bytes: u64,
    /// Files and folders it may hold, whatever their size.
    pub max_entries: u64,
    /// Seconds between measures.
    pub every_secs: u64,
}

/// Why the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EndReason {
    /// It ended by itself (exit code or a signal it got elsewhere).
    Exited,
    /// It ran past its deadline and was stopped.
    Timeout,
    /// Someone cancelled it.
    Cancelled,
    /// It could not be started at all.
    StartFailed,
    /// Its node went away or it was evicted (Kubernetes): through no fault
    /// of its own, so it runs again without spending a retry.
    Disrupted,
    /// It held more on disk than it may, and was stopped (the message says
    /// how much).
    DiskLimit,
}

/// What the shim writes to `DIR/exit.json` when the command has ended.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Exit {
    pub reason: EndReason,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    pub finished_ms: i64,
    /// Set for `StartFailed` and `DiskLimit`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// What it used, where its control group tells.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

pub const LAUNCH_FILE: &str = "launch.json";
pub const EXIT_FILE: &str = "exit.json";
pub const CANCEL_FILE: &str = "cancel";
pub const LOG_FILE: &str = "output.log";
/// The shim's PID and start time, written as it starts, so a server that
/// stopped before recording them finds the shim all the same.
pub const PID_FILE: &str = "shim.json";

const POLL: Duration = Duration::from_millis(50);

pub fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// Reads `DIR/exit.json`, if the shim has written it.
pub fn read_exit(dir: &Path) -> Option<Exit> {
    let text = std::fs::read_to_string(dir.join(EXIT_FILE)).ok()?;
    serde_json::from_str(&text).ok()
}

/// Reads `DIR/shim.json`: (PID, start time).
pub fn read_pid_file(dir: &Path) -> Option<(i32, i64)> {
    let text = std::fs::read_to_string(dir.join(PID_FILE)).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    Some((value["pid"].as_i64()? as i32, value["start"].as_i64()?))
}

fn write_pid_file(dir: &Path) -> std::io::Result<()> {
    let pid = std::process::id() as i32;
    let start = process_start(pid).unwrap_or(0);
    let tmp = dir.join(".shim.json.tmp");
    std::fs::write(
        &tmp,
        serde_json::json!({"pid": pid, "start": start}).to_string(),
    )?;
    std::fs::rename(tmp, dir.join(PID_FILE))
}

/// The shim's main: supervises one job and returns when it has ended.
pub fn main(dir: &Path) -> ExitCode {
    if let Err(e) = write_pid_file(dir) {
        eprintln!(
            "job-shim: cannot write {}: {e}",
            dir.join(PID_FILE).display()
        );
    }
    let exit = match std::fs::read_to_string(dir.join(LAUNCH_FILE))
        .map_err(|e| format!("cannot read {}: {e}", dir.join(LAUNCH_FILE).display()))
        .and_then(|text| {
            serde_json::from_str::<Launch>(&text)
                .map_err(|e| format!("{LAUNCH_FILE} is not valid: {e}"))
        }) {
        Ok(launch) => match launch.user {
            Some(user) => {
                // What the job and its environment make is readable by the
                // other jobs that share it (an environment), whatever the
                // server's umask.
                // SAFETY: umask cannot fail.
                unsafe { libc::umask(0o022) };
                // SysV shared memory, semaphores and message queues of its
                // own: another job's cannot be read, and what it makes goes
                // with it.
                // SAFETY: unshare changes this process's namespaces only.
                if unsafe { libc::unshare(libc::CLONE_NEWIPC) } != 0 {
                    eprintln!(
                        "job-shim: no IPC namespace of its own ({}); the job's IPC objects are removed at its end",
                        std::io::Error::last_os_error()
                    );
                }
                // A job lost earlier may have left something running as this uid.
                let exit = match users::kill_all(user.uid) {
                    Ok(()) => supervise(dir, &launch),
                    Err(e) => {
                        start_failed(format!("cannot stop what uid {} still runs: {e}", user.uid))
                    }
                };
                clean_up(dir, user);
                exit
            }
            None => supervise(dir, &launch),
        },
        Err(message) => start_failed(message),
    };
    match write_exit(dir, &exit) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!(
                "job-shim: cannot write {}: {e}",
                dir.join(EXIT_FILE).display()
            );
            ExitCode::FAILURE
        }
    }
}

/// After a job that ran as `user`: nothing of it runs on, its folder is
/// closed to the next job that gets the uid, and so is what it left in
/// /tmp. Best effort: a failure is written to the shim's own log.
fn clean_up(dir: &Path, user: JobUser) {
    if let Err(e) = users::kill_all(user.uid) {
        eprintln!("job-shim: {e}");
    }
    if let Err(e) = users::set_mode(dir, 0o700) {
        eprintln!("job-shim: cannot close {}: {e}", dir.display());
    }
    users::remove_left_behind(user.uid);
    users::remove_ipc_of(user.uid);
}

/// Closes every descriptor above stderr that this process inherited: the
/// server may hold some without close-on-exec (a library's), and a job
/// must not read through them. Called first thing in the shim's process;
/// what the shim opens itself is close-on-exec.
pub fn close_inherited_descriptors() {
    // SAFETY: closes descriptors of this process alone, before it opened
    // any of its own.
    let closed = unsafe { libc::syscall(libc::SYS_close_range, 3u32, u32::MAX, 0u32) };
    if closed == 0 {
        return;
    }
    // Kernels before 5.9: the list in /proc, read whole before closing.
    let open: Vec<i32> = std::fs::read_dir("/proc/self/fd")
        .map(|entries| {
            entries
                .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
                .filter(|fd| *fd > 2)
                .collect()
        })
        .unwrap_or_default();
    for fd in open {
        // SAFETY: as above; the listing's own descriptor is closed already.
        unsafe { libc::close(fd) };
    }
}

fn start_failed(message: String) -> Exit {
    Exit {
        reason: EndReason::StartFailed,
        exit_code: None,
        signal: None,
        finished_ms: now_ms(),
        message: Some(message),
        usage: None,
    }
}

fn write_exit(dir: &Path, exit: &Exit) -> std::io::Result<()> {
    let tmp = dir.join(".exit.json.tmp");
    let mut file = File::create(&tmp)?;
    file.write_all(&serde_json::to_vec(exit).map_err(std::io::Error::other)?)?;
    file.sync_all()?;
    std::fs::rename(&tmp, dir.join(EXIT_FILE))
}

fn supervise(dir: &Path, launch: &Launch) -> Exit {
    // Only the server reads it: the job writes through the descriptor it gets.
    let log = match OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(dir.join(LOG_FILE))
    {
        Ok(log) => log,
        Err(e) => return start_failed(format!("cannot open the log file: {e}")),
    };
    let Some(spec) = &launch.cgroup else {
        return run_job(launch, &log, &watch_of(dir, launch), None);
    };
    let group = match Group::create(spec) {
        Ok(group) => group,
        Err(e) => return start_failed(format!("cannot make the job's control group: {e}")),
    };
    let mut exit = run_job(launch, &log, &watch_of(dir, launch), Some(&group));
    exit.usage = Some(group.usage());
    if let Err(e) = group.remove() {
        eprintln!("job-shim: cannot remove the job's control group: {e}");
    }
    exit
}

fn watch_of(dir: &Path, launch: &Launch) -> Watch {
    Watch {
        cancel: dir.join(CANCEL_FILE),
        deadline_ms: launch.deadline_ms,
        grace_secs: launch.stop_grace_secs,
        disk: launch.disk.clone().map(|limit| DiskWatch {
            next: std::cell::Cell::new(Instant::now() + limit.every()),
            limit,
        }),
    }
}

/// The job's environment (when it has a requirements.txt), then its command.
fn run_job(launch: &Launch, log: &File, watch: &Watch, group: Option<&Group>) -> Exit {
    let mut env = launch.env.clone();
    let requirements = launch.cwd.join("requirements.txt");
    if let Some(root) = &launch.venv_root
        && std::fs::symlink_metadata(&requirements).is_ok()
    {
        // Read as root from the job's folder: a link is refused, not followed.
        let text = match tree::read_file(&requirements, MAX_REQUIREMENTS_BYTES) {
            Ok(text) => text,
            Err(e) => {
                return start_failed(format!(
                    "cannot read requirements.txt: {e}; it must be a plain file of at most {} KiB",
                    MAX_REQUIREMENTS_BYTES / 1024
                ));
            }
        };
        match python_env(launch, root, &text, log, watch) {
            Ok(venv) => {
                let path = env.get("PATH").cloned().unwrap_or_default();
                env.insert(
                    "PATH".to_owned(),
                    format!("{}:{path}", venv.join("bin").display()),
                );
                env.insert("VIRTUAL_ENV".to_owned(), venv.display().to_string());
            }
            Err(exit) => return exit,
        }
    }
    let mut command = Command::new("/bin/sh");
    command
        .arg("-c")
        .arg(&launch.command)
        .current_dir(&launch.cwd)
        .env_clear()
        .envs(&env);
    if let Some(user) = launch.user {
        user.apply(&mut command);
    }
    match run_group(command, log, watch, group) {
        Ok(exit) => exit,
        Err(message) => start_failed(message),
    }
}

impl DiskLimit {
    fn every(&self) -> Duration {
        Duration::from_secs(self.every_secs.max(1))
    }
}

/// When to stop a process group early.
struct Watch {
    cancel: PathBuf,
    deadline_ms: i64,
    grace_secs: u64,
    disk: Option<DiskWatch>,
}

struct DiskWatch {
    limit: DiskLimit,
    /// When to measure next.
    next: std::cell::Cell<Instant>,
}

impl Watch {
    /// Why to stop now, and what to say of it; None: go on.
    fn stop_reason(&self) -> Option<(EndReason, Option<String>)> {
        if self.cancel.exists() {
            Some((EndReason::Cancelled, None))
        } else if now_ms() >= self.deadline_ms {
            Some((EndReason::Timeout, None))
        } else {
            self.over_disk()
                .map(|message| (EndReason::DiskLimit, Some(message)))
        }
    }

    /// What the job holds past its disk limit, when it is due a measure.
    fn over_disk(&self) -> Option<String> {
        let disk = self.disk.as_ref()?;
        if Instant::now() < disk.next.get() {
            return None;
        }
        let limit = &disk.limit;
        let folders: Vec<&Path> = limit.folders.iter().map(PathBuf::as_path).collect();
        let measured = tree::disk_use(&folders, limit.max_entries);
        disk.next.set(Instant::now() + limit.every());
        match measured {
            Ok(Ok(used)) if used.bytes > limit.max_bytes => Some(format!(
                "its files took {} on disk, past its limit of {}",
                trainyard_domain::format_bytes(used.bytes),
                trainyard_domain::format_bytes(limit.max_bytes)
            )),
            Ok(Ok(_)) => None,
            Ok(Err(tree::TooMuch::Entries(max))) => Some(format!(
                "its folders held more than {max} files and folders"
            )),
            Ok(Err(tree::TooMuch::Depth)) => Some(format!(
                "its folders nested more than {} deep",
                tree::MAX_DEPTH
            )),
            // Where the shim is not root, a job could close a folder to it
            // and so hide what it holds: that stops it too.
            Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => Some(format!(
                "its folders hold one that the measure of its disk use may not read ({e}); a job must leave its folders readable to the server"
            )),
            Err(e) => {
                // Not the job's doing as far as is known: it goes on.
                eprintln!("job-shim: cannot measure the job's disk use: {e}");
                None
            }
        }
    }
}

/// Runs `command` in a process group of its own (and in `cgroup`) with its
/// output in `log`, until it ends or `watch` says stop. Err when it could
/// not be started.
fn run_group(
    mut command: Command,
    log: &File,
    watch: &Watch,
    cgroup: Option<&Group>,
) -> Result<Exit, String> {
    let (out, err) = match (log.try_clone(), log.try_clone()) {
        (Ok(out), Ok(err)) => (out, err),
        _ => return Err("cannot share the log file with the command".into()),
    };
    let program = command.get_program().to_string_lossy().into_owned();
    if let Some(cgroup) = cgroup {
        cgroup.join_on_exec(&mut command);
    }
    // The command is gone: anything it left running goes too, also what
    // left its process group.
    let stop_rest = |group: i32| {
        signal_group(group, libc::SIGKILL);
        if let Some(cgroup) = cgroup
            && let Err(e) = cgroup.kill_all()
        {
            eprintln!("job-shim: {e}");
        }
    };
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::from(out))
        .stderr(Stdio::from(err))
        .process_group(0)
        .spawn()
        .map_err(|e| match cgroup {
            Some(_) => format!("cannot start {program} in the job's control group: {e}"),
            None => format!("cannot start {program}: {e}"),
        })?;
    let group = child.id() as i32;
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                stop_rest(group);
                return Ok(Exit {
                    reason: EndReason::Exited,
                    exit_code: status.code(),
                    signal: status.signal(),
                    finished_ms: now_ms(),
                    message: None,
                    usage: None,
                });
            }
            Ok(None) => {}
            Err(e) => {
                stop_rest(group);
                let _ = child.wait();
                return Err(format!("lost track of {program}: {e}"));
            }
        }
        if let Some((reason, message)) = watch.stop_reason() {
            // What left the process group gets its SIGTERM (and grace) too.
            if let Some(cgroup) = cgroup {
                cgroup.signal(libc::SIGTERM);
            }
            let (exit_code, signal) = stop(&mut child, group, watch.grace_secs);
            stop_rest(group);
            return Ok(Exit {
                reason,
                exit_code,
                signal,
                finished_ms: now_ms(),
                message,
                usage: None,
            });
        }
        std::thread::sleep(POLL);
    }
}

/// The cached Python environment for a requirements file, made (under a
/// lock, so two jobs never build the same one) when missing, in a control
/// group of the builds' (`build_group`), not the job's: the jobs that wait
/// for it must not wait at its first submitter's pace. Its output goes to
/// the job's log. Err is how the job ends: stopped, or failed to install.
///
/// The environment is shared by every job whose requirements are the same
/// bytes, whoever submitted it, so it is built from those bytes alone: a
/// clean environment (the server's PATH, no PYTHONPATH, PIP_* or user
/// configuration of the submitter's), a folder holding nothing but the
/// requirements file as its working folder and home, and the server's
/// Python. Local paths in the file (`-e .`, `./pkg`) find nothing there.
fn python_env(
    launch: &Launch,
    root: &Path,
    requirements: &[u8],
    log: &File,
    watch: &Watch,
) -> Result<PathBuf, Exit> {
    let server_env = &launch.venv_env;
    let user = launch.user;
    let build_group = launch.env_build.as_ref();
    let fail = |message: String| start_failed(message);
    let path = server_env.get("PATH").map_or(DEFAULT_PATH, String::as_str);
    let python = find_program("python3", path).ok_or_else(|| {
        fail(format!(
            "requirements.txt needs python3, which is not on the server's PATH ({path})"
        ))
    })?;
    let key = env_key(&python, requirements);
    let venv = root.join(&key);
    let build = root.join(format!("{key}.build"));
    std::fs::create_dir_all(root)
        .map_err(|e| fail(format!("cannot create {}: {e}", root.display())))?;
    let lock = File::create(root.join(format!("{key}.lock")))
        .map_err(|e| fail(format!("cannot create the environment lock: {e}")))?;
    let mut say = log;
    // Another job may be building the same environment: wait for it.
    let mut waiting = false;
    loop {
        // SAFETY: flock on a file this function owns.
        if unsafe {
            libc::flock(
                std::os::fd::AsRawFd::as_raw_fd(&lock),
                libc::LOCK_EX | libc::LOCK_NB,
            )
        } == 0
        {
            break;
        }
        if !waiting {
            waiting = true;
            let _ = writeln!(
                say,
                "trainyard: another job is building the Python environment {key}; waiting for it"
            );
        }
        if let Some((reason, message)) = watch.stop_reason() {
            return Err(Exit {
                reason,
                exit_code: None,
                signal: None,
                finished_ms: now_ms(),
                message,
                usage: None,
            });
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    if is_sealed(&venv) {
        let _ = writeln!(say, "trainyard: using the cached Python environment {key}");
        return Ok(venv);
    }
    // What a build that did not finish left (never a sealed environment).
    let discard = |what: &Path| {
        if let Err(e) = tree::remove_tree(what) {
            eprintln!("job-shim: cannot remove {}: {e}", what.display());
        }
    };
    discard(&venv);
    discard(&build);
    discard(&venv.with_extension("sealing"));
    discard(&venv.with_extension("built"));
    let _ = writeln!(
        say,
        "trainyard: creating a Python environment for requirements.txt (cached as {key}); this happens once"
    );
    let made = make_build_folders(&venv, &build, requirements, user)
        .map_err(|e| fail(format!("cannot prepare the environment's build: {e}")));
    if let Err(exit) = made {
        discard(&venv);
        discard(&build);
        return Err(exit);
    }
    let build_dir = build.display().to_string();
    let home = server_env.get("HOME").filter(|_| user.is_none());
    let env: BTreeMap<String, String> = [
        ("PATH", path),
        ("HOME", home.map_or(build_dir.as_str(), String::as_str)),
        ("TMPDIR", build_dir.as_str()),
        ("LANG", "C.UTF-8"),
        ("PYTHONNOUSERSITE", "1"),
        ("PYTHONUNBUFFERED", "1"),
        ("PIP_NO_INPUT", "1"),
        ("PIP_DISABLE_PIP_VERSION_CHECK", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect();
    let mut create = Command::new(&python);
    create.arg("-m").arg("venv").arg(&venv);
    let mut install = Command::new(venv.join("bin").join("pip"));
    install.args(["install", "--no-input", "-r", "requirements.txt"]);
    for command in [&mut create, &mut install] {
        command.current_dir(&build).env_clear().envs(&env);
        if let Some(user) = user {
            user.apply(command);
        }
    }
    let group = match build_group.map(Group::create_build).transpose() {
        Ok(group) => group,
        Err(e) => {
            discard(&venv);
            discard(&build);
            return Err(fail(format!(
                "cannot make the control group of the environment's build: {e}"
            )));
        }
    };
    // The build's own bound, within the job's: a build that hangs (or
    // runs what its requirements' packages run, on the builds' CPUs) ends.
    let build_watch = Watch {
        cancel: watch.cancel.clone(),
        deadline_ms: watch.deadline_ms.min(now_ms().saturating_add(
            i64::try_from(launch.env_build_secs.saturating_mul(1000)).unwrap_or(i64::MAX),
        )),
        grace_secs: watch.grace_secs,
        // The builder is the job's uid and writes the job's log.
        disk: watch.disk.as_ref().map(|disk| DiskWatch {
            limit: disk.limit.clone(),
            next: std::cell::Cell::new(disk.next.get()),
        }),
    };
    let built = build_steps(
        [
            ("python3 -m venv", create),
            ("pip install -r requirements.txt", install),
        ],
        log,
        &build_watch,
        group.as_ref(),
    )
    .map_err(|mut exit| {
        if exit.reason == EndReason::Timeout && build_watch.deadline_ms < watch.deadline_ms {
            exit = fail(format!(
                "building its Python environment took longer than {} and was stopped; see the log for the step it was at",
                in_words(launch.env_build_secs)
            ));
        }
        if let (Some(group), Some(spec)) = (&group, build_group)
            && group.usage().oom_kills > 0
            && let Some(message) = &mut exit.message
        {
            message.push_str(&format!(
                " (out of memory: installing its Python environment reached its limit of {} (resources.memory); ask for more memory)",
                trainyard_domain::format_bytes(spec.memory_bytes)
            ));
        }
        exit
    });
    if let Some(group) = group {
        if let Err(e) = group.remove() {
            eprintln!("job-shim: cannot remove the build's control group: {e}");
        }
        if let Some(spec) = build_group {
            Group::remove_shared_build_group(spec);
        }
    }
    let built = built.and_then(|()| {
        seal(&venv, user).map_err(|e| fail(format!("cannot seal the environment: {e}")))
    });
    if built.is_err()
        && let Some(user) = user
        && let Err(e) = users::kill_all(user.uid)
    {
        // What the builder left running must not write while it is removed.
        eprintln!("job-shim: {e}");
    }
    discard(&build);
    if let Err(exit) = built {
        discard(&venv);
        return Err(exit);
    }
    let _ = writeln!(say, "trainyard: the Python environment is ready");
    Ok(venv)
}

/// The longest a Python environment's build may take: generous for the
/// largest wheels on a slow link, short of a job's days.
pub const MAX_BUILD_SECS: u64 = 2 * 3600;

fn default_build_secs() -> u64 {
    MAX_BUILD_SECS
}

/// Seconds as people say them: 2 hours, 90 minutes, 5 seconds.
fn in_words(secs: u64) -> String {
    let (n, unit) = if secs >= 3600 && secs.is_multiple_of(3600) {
        (secs / 3600, "hour")
    } else if secs >= 60 && secs.is_multiple_of(60) {
        (secs / 60, "minute")
    } else {
        (secs, "second")
    };
    format!("{n} {unit}{}", if n == 1 { "" } else { "s" })
}

/// The longest requirements file read.
const MAX_REQUIREMENTS_BYTES: u64 = 1 << 20;

/// Where Python is looked for when the server gave no PATH.
const DEFAULT_PATH: &str = "/usr/local/bin:/usr/bin:/bin";

/// The build's folders: the environment, and a folder that holds only the
/// requirements and serves as working folder, home and TMPDIR. Both the
/// builder's (the job's user) while it builds.
fn make_build_folders(
    venv: &Path,
    build: &Path,
    requirements: &[u8],
    user: Option<JobUser>,
) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    for folder in [venv, build] {
        std::fs::DirBuilder::new().mode(0o700).create(folder)?;
    }
    let mut file = tree::create_new(&build.join("requirements.txt"), 0o644)?;
    file.write_all(requirements)?;
    if let Some(user) = user {
        for folder in [venv, build] {
            tree::chown_tree(folder, user.uid, user.gid)?;
        }
    }
    // Readable by every job that will use it, once sealed.
    users::set_mode(venv, 0o755)
}

/// Runs the build's commands in turn; Err is how the job ends.
fn build_steps(
    steps: [(&str, Command); 2],
    log: &File,
    watch: &Watch,
    group: Option<&Group>,
) -> Result<(), Exit> {
    for (step, command) in steps {
        let exit = run_group(command, log, watch, group).map_err(start_failed)?;
        if exit.reason == EndReason::Exited && exit.exit_code == Some(0) {
            continue;
        }
        return Err(match exit.reason {
            EndReason::Exited => start_failed(format!(
                "{step} failed ({}); see the log",
                match (exit.exit_code, exit.signal) {
                    (Some(code), _) => format!("exit code {code}"),
                    (None, Some(signal)) => format!("signal {signal}"),
                    _ => "no exit code".to_owned(),
                }
            )),
            _ => exit,
        });
    }
    Ok(())
}

/// Makes the built environment root's (when a job's user built it) and
/// marks it ready. From here on nothing of the builder may change it: its
/// processes are stopped first, nothing it left is followed, and root
/// copies the tree to fresh files that then take its place (the
/// environment's scripts name that path), so a descriptor or a mapping the
/// builder passed to a process of another uid while it ran writes to the
/// old files only, which are then removed.
fn seal(venv: &Path, user: Option<JobUser>) -> std::io::Result<()> {
    let Some(user) = user else {
        // A marker the builder planted (a link, say) is removed, not followed.
        let ready = venv.join(READY_FILE);
        tree::remove_tree(&ready)?;
        return tree::create_new(&ready, 0o644)?.sync_all();
    };
    users::kill_all(user.uid)?;
    // Copied beside, marked there, and renamed into place whole: a seal cut
    // short leaves no environment that looks ready.
    let sealing = venv.with_extension("sealing");
    tree::remove_tree(&sealing)?;
    let copied = tree::copy_tree(venv, &sealing).and_then(|()| {
        let ready = sealing.join(READY_FILE);
        tree::remove_tree(&ready)?;
        tree::create_new(&ready, 0o644)?.sync_all()
    });
    if let Err(e) = copied {
        let _ = tree::remove_tree(&sealing);
        return Err(e);
    }
    let built = venv.with_extension("built");
    tree::remove_tree(&built)?;
    std::fs::rename(venv, &built)?;
    std::fs::rename(&sealing, venv)?;
    tree::remove_tree(&built)
}

/// Whether `venv` is a finished environment: its marker is a plain file,
/// and the environment is this process's own (sealed), not a builder's.
fn is_sealed(venv: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid cannot fail.
    let me = unsafe { libc::geteuid() };
    let own = |path: &Path| {
        std::fs::symlink_metadata(path).is_ok_and(|m| m.uid() == me && !m.file_type().is_symlink())
    };
    own(venv) && own(&venv.join(READY_FILE))
}

const READY_FILE: &str = ".trainyard-ready";

/// Changes whenever what goes into an environment's build changes.
const ENV_KEY_VERSION: &[u8] = b"isolated-build-3\n";

/// The cache key of an environment: the Python it is made from and the
/// requirements, hashed.
fn env_key(python: &Path, requirements: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    // Environments of earlier versions were built with the submitter's
    // environment and files, or sealed in place (where a descriptor the
    // builder passed on could still write them): never reuse one.
    hash.update(ENV_KEY_VERSION);
    hash.update(python.as_os_str().as_encoded_bytes());
    hash.update(b"\n");
    hash.update(requirements);
    let digest = hash.finalize();
    hex::encode(&digest[..10])
}

/// The program's real path on a PATH, links resolved.
fn find_program(name: &str, path: &str) -> Option<PathBuf> {
    path.split(':')
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(dir).join(name))
        .find(|candidate| candidate.is_file())
        .and_then(|found| std::fs::canonicalize(found).ok())
}

/// SIGTERM to the whole group, then SIGKILL after the grace period. The
/// grace is the group's, not only the command's: `sh -c` dies of the TERM
/// at once while the program it started is still saving its checkpoint,
/// so the rest of the group gets the grace too before the KILL.
fn stop(child: &mut Child, group: i32, grace_secs: u64) -> (Option<i32>, Option<i32>) {
    signal_group(group, libc::SIGTERM);
    let until = Instant::now() + Duration::from_secs(grace_secs);
    let mut ended = None;
    while Instant::now() < until {
        if ended.is_none()
            && let Ok(Some(status)) = child.try_wait()
        {
            ended = Some(status);
        }
        if ended.is_some() && !group_alive(group) {
            break;
        }
        std::thread::sleep(POLL);
    }
    signal_group(group, libc::SIGKILL);
    match ended.map(Ok).unwrap_or_else(|| child.wait()) {
        Ok(status) => (status.code(), status.signal()),
        Err(_) => (None, Some(libc::SIGKILL)),
    }
}

/// Whether a process of the group is still there, once those of its
/// members that are this process's children (adopted or not) are reaped.
fn group_alive(group: i32) -> bool {
    // SAFETY: waitpid with WNOHANG only reaps children that have ended, and
    // killpg with signal 0 only asks whether the group has a member.
    unsafe {
        while libc::waitpid(-group, std::ptr::null_mut(), libc::WNOHANG) > 0 {}
        libc::killpg(group, 0) == 0
    }
}

fn signal_group(group: i32, signal: i32) {
    // SAFETY: killpg only sends a signal; a group that is gone gives ESRCH.
    unsafe {
        libc::killpg(group, signal);
    }
}

/// Whether `pid` is alive and started at `start` (clock ticks after boot,
/// field 22 of /proc/PID/stat), so a reused PID is not mistaken for it.
pub fn process_alive(pid: i32, start: i64) -> bool {
    process_start(pid) == Some(start) && !is_zombie(pid)
}

/// A process's start time in clock ticks after boot.
pub fn process_start(pid: i32) -> Option<i64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The name (field 2) is in parentheses and may hold spaces: count from
    // the last `)`. Field 3 is then the first after it; field 22 the 20th.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(19)?.parse().ok()
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|stat| {
            let rest = &stat[stat.rfind(')')? + 1..];
            rest.split_whitespace().next().map(|s| s == "Z")
        })
        .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(dir: &Path, command: &str, deadline_ms: i64) {
        let launch = Launch {
            command: command.to_owned(),
            cwd: dir.to_path_buf(),
            env: BTreeMap::from([
                ("PATH".to_owned(), "/usr/bin:/bin".to_owned()),
                ("GREETING".to_owned(), "hello".to_owned()),
            ]),
            deadline_ms,
            stop_grace_secs: 1,
            venv_root: None,
            venv_env: BTreeMap::new(),
            user: None,
            cgroup: None,
            env_build: None,
            env_build_secs: MAX_BUILD_SECS,
            disk: None,
        };
        write_launch(dir, &launch);
    }

    /// As the server writes it: readable by the server (and shim) alone.
    fn write_launch(dir: &Path, launch: &Launch) {
        std::fs::write(dir.join(LAUNCH_FILE), serde_json::to_vec(launch).unwrap()).unwrap();
        users::set_mode(&dir.join(LAUNCH_FILE), 0o600).unwrap();
    }

    /// A launch in `cwd` with Python environments cached in `cache`, as
    /// the server's own user, without limits.
    fn with_venvs(command: &str, cwd: &Path, cache: &Path) -> Launch {
        Launch {
            command: command.to_owned(),
            cwd: cwd.to_path_buf(),
            env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            deadline_ms: now_ms() + 120_000,
            stop_grace_secs: 1,
            venv_root: Some(cache.to_path_buf()),
            venv_env: BTreeMap::new(),
            user: None,
            cgroup: None,
            env_build: None,
            env_build_secs: MAX_BUILD_SECS,
            disk: None,
        }
    }

    /// Runs the shim on `launch` to its end: how it ended, and the log.
    fn run(dir: &Path, launch: &Launch) -> (Exit, String) {
        write_launch(dir, launch);
        main(dir);
        let exit = read_exit(dir).unwrap();
        let log = std::fs::read_to_string(dir.join(LOG_FILE)).unwrap();
        (exit, log)
    }

    #[test]
    fn runs_the_command_with_its_environment_and_records_the_exit_code() {
        let dir = tempfile::tempdir().unwrap();
        launch(
            dir.path(),
            "echo $GREETING; echo oops >&2; exit 3",
            now_ms() + 60_000,
        );
        assert_eq!(main(dir.path()), ExitCode::SUCCESS);
        let exit = read_exit(dir.path()).unwrap();
        assert_eq!(exit.reason, EndReason::Exited);
        assert_eq!(exit.exit_code, Some(3));
        let log = std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert_eq!(log, "hello\noops\n");
    }

    #[test]
    fn the_server_environment_is_not_passed_on() {
        let dir = tempfile::tempdir().unwrap();
        // SAFETY: this test alone reads the variable, in a child process.
        unsafe { std::env::set_var("SHIM_TEST_SECRET", "hunter2") };
        launch(
            dir.path(),
            "echo \"[$SHIM_TEST_SECRET]\"",
            now_ms() + 60_000,
        );
        main(dir.path());
        let log = std::fs::read_to_string(dir.path().join(LOG_FILE)).unwrap();
        assert_eq!(log, "[]\n");
    }

    #[test]
    fn a_job_past_its_deadline_is_stopped_with_its_children() {
        let dir = tempfile::tempdir().unwrap();
        // A grandchild that ignores nothing and would outlive a plain kill.
        launch(
            dir.path(),
            "sleep 30 & echo $! > grandchild; wait",
            now_ms() + 300,
        );
        main(dir.path());
        let exit = read_exit(dir.path()).unwrap();
        assert_eq!(exit.reason, EndReason::Timeout);
        assert_eq!(exit.signal, Some(libc::SIGTERM));
        let grandchild: i32 = std::fs::read_to_string(dir.path().join("grandchild"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Reaped by init or a zombie at most: never running.
        std::thread::sleep(Duration::from_millis(200));
        let alive = process_start(grandchild).is_some() && !is_zombie(grandchild);
        assert!(!alive, "the grandchild {grandchild} must be stopped too");
    }

    #[test]
    fn a_job_past_its_disk_limit_is_stopped_and_its_end_says_how_much() {
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        let kept = dir.path().join("checkpoints");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::create_dir_all(&kept).unwrap();
        // Within the limit in the work folder, past it with the checkpoint.
        let mut launch = with_venvs(
            "head -c 3000000 /dev/urandom > data; \
             head -c 3000000 /dev/urandom > \"$KEPT/step-1\"; sleep 60",
            &work,
            dir.path(),
        );
        launch.venv_root = None;
        launch
            .env
            .insert("KEPT".to_owned(), kept.display().to_string());
        launch.disk = Some(DiskLimit {
            folders: vec![work.clone(), kept.clone()],
            max_bytes: 5_000_000,
            max_entries: 1_000,
            every_secs: 1,
        });
        let (exit, log) = run(dir.path(), &launch);
        assert_eq!(exit.reason, EndReason::DiskLimit, "{exit:?}: {log}");
        let message = exit.message.unwrap();
        assert!(message.contains("past its limit of 4.8 MiB"), "{message}");
        // Too many files, whatever their size.
        let many = tempfile::tempdir().unwrap();
        launch.cwd = many.path().to_path_buf();
        launch.command = "for i in $(seq 1 50); do : > f$i; done; sleep 60".to_owned();
        launch.disk = Some(DiskLimit {
            folders: vec![many.path().to_path_buf()],
            max_bytes: 1 << 30,
            max_entries: 20,
            every_secs: 1,
        });
        let (exit, log) = run(dir.path(), &launch);
        assert_eq!(exit.reason, EndReason::DiskLimit, "{exit:?}: {log}");
        assert!(exit.message.unwrap().contains("more than 20 files"));
    }

    #[test]
    fn a_cancel_file_stops_the_job_and_a_term_ignoring_one_is_killed() {
        let dir = tempfile::tempdir().unwrap();
        launch(
            dir.path(),
            "trap '' TERM; touch started; sleep 30",
            now_ms() + 60_000,
        );
        let path = dir.path().to_path_buf();
        let shim = std::thread::spawn(move || main(&path));
        while !dir.path().join("started").exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::write(dir.path().join(CANCEL_FILE), b"").unwrap();
        shim.join().unwrap();
        let exit = read_exit(dir.path()).unwrap();
        assert_eq!(exit.reason, EndReason::Cancelled);
        assert_eq!(exit.signal, Some(libc::SIGKILL), "the TERM was ignored");
    }

    #[test]
    fn a_stopped_program_finishes_saving_after_its_shell_is_gone() {
        let dir = tempfile::tempdir().unwrap();
        // The outer shell dies of the TERM at once; the program it started
        // takes half a second to save, then exits.
        launch(
            dir.path(),
            "sh -c 'trap \"sleep 0.5; touch saved; exit 143\" TERM; touch started; \
             while :; do sleep 0.05; done'; echo never",
            now_ms() + 60_000,
        );
        let path = dir.path().to_path_buf();
        let shim = std::thread::spawn(move || main(&path));
        while !dir.path().join("started").exists() {
            std::thread::sleep(Duration::from_millis(10));
        }
        std::fs::write(dir.path().join(CANCEL_FILE), b"").unwrap();
        shim.join().unwrap();
        assert!(dir.path().join("saved").exists(), "killed before it saved");
        assert_eq!(read_exit(dir.path()).unwrap().reason, EndReason::Cancelled);
    }

    #[test]
    fn requirements_get_a_cached_python_environment() {
        let cache = tempfile::tempdir().unwrap();
        let mut logs = Vec::new();
        for _ in 0..2 {
            let dir = tempfile::tempdir().unwrap();
            // Nothing to download: the environment itself is what is tested.
            std::fs::write(dir.path().join("requirements.txt"), "# no packages\n").unwrap();
            let launch = with_venvs(
                "echo \"venv=$VIRTUAL_ENV\"; command -v python",
                dir.path(),
                cache.path(),
            );
            let (exit, log) = run(dir.path(), &launch);
            assert_eq!(exit.exit_code, Some(0), "{exit:?}: {log}");
            logs.push(log);
        }
        let venvs: Vec<_> = std::fs::read_dir(cache.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.path().is_dir())
            .collect();
        assert_eq!(venvs.len(), 1, "one environment for one requirements file");
        let venv = venvs[0].path();
        for log in &logs {
            assert!(log.contains(&format!("venv={}", venv.display())), "{log}");
            assert!(
                log.contains(&format!("{}/bin/python", venv.display())),
                "{log}"
            );
        }
        assert!(
            logs[0].contains("creating a Python environment"),
            "{}",
            logs[0]
        );
        assert!(
            logs[1].contains("using the cached Python environment"),
            "{}",
            logs[1]
        );
    }

    /// A shared environment is built from the requirements' bytes alone:
    /// what its first submitter sets (PYTHONPATH, PIP_*) or ships in the
    /// project (a sitecustomize.py) never runs in the build, so it cannot
    /// plant code that later jobs of other people run.
    #[test]
    fn an_environment_is_built_from_the_requirements_alone() {
        let cache = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let planted = dir.path().join("planted");
        std::fs::write(dir.path().join("requirements.txt"), "# no packages\n").unwrap();
        std::fs::write(
            dir.path().join("sitecustomize.py"),
            format!(
                "open({:?}, 'w').write('ran in the build')\n",
                planted.display().to_string()
            ),
        )
        .unwrap();
        let mut launch = with_venvs("true", dir.path(), cache.path());
        launch.env.extend([
            ("PYTHONPATH".to_owned(), dir.path().display().to_string()),
            (
                "PIP_INDEX_URL".to_owned(),
                "http://127.0.0.1:9/simple".to_owned(),
            ),
        ]);
        let (exit, log) = run(dir.path(), &launch);
        assert_eq!(exit.exit_code, Some(0), "{exit:?}: {log}");
        assert!(log.contains("creating a Python environment"), "{log}");
        assert!(
            !planted.exists(),
            "the project's code ran in the build: {log}"
        );
        // Only the environment and its lock are left; the build's folder is gone.
        let mut names: Vec<String> = std::fs::read_dir(cache.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        names.sort();
        assert_eq!(names.len(), 2, "{names:?}");
        assert!(
            names[1].ends_with(".lock") && !names[0].contains('.'),
            "{names:?}"
        );
    }

    /// A requirements file that is a link is refused, not read by root.
    #[test]
    fn a_linked_requirements_file_is_refused() {
        let cache = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("secret"), "root's\n").unwrap();
        std::os::unix::fs::symlink(
            dir.path().join("secret"),
            dir.path().join("requirements.txt"),
        )
        .unwrap();
        let launch = with_venvs("true", dir.path(), cache.path());
        let (exit, _) = run(dir.path(), &launch);
        assert_eq!(exit.reason, EndReason::StartFailed);
        let message = exit.message.unwrap();
        assert!(message.contains("requirements.txt"), "{message}");
        assert!(message.contains("plain file"), "{message}");
    }

    /// Needs root. Sealing hands the builder's tree to root: a marker or
    /// any link the builder left is never followed (it once truncated the
    /// file a planted `.trainyard-ready` pointed at).
    #[test]
    fn sealing_never_follows_what_the_builder_left() {
        if !users::is_root() {
            eprintln!("skipped: switching uids needs root");
            return;
        }
        use std::os::unix::fs::{MetadataExt, PermissionsExt, lchown, symlink};
        let user = JobUser::new(64_993);
        let dir = tempfile::tempdir().unwrap();
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"root's alone").unwrap();
        users::set_mode(&victim, 0o600).unwrap();
        let venv = dir.path().join("venv");
        std::fs::create_dir_all(venv.join("lib")).unwrap();
        symlink(&victim, venv.join(READY_FILE)).unwrap();
        symlink(&victim, venv.join("lib").join("escape")).unwrap();
        std::fs::write(venv.join("lib").join("site.py"), b"built\n").unwrap();
        tree::chown_tree(&venv, user.uid, user.gid).unwrap();
        // Left open to every uid, for another job to plant a module later.
        users::set_mode(&venv.join("lib"), 0o777).unwrap();
        // A descriptor the builder opened and passed to a process of
        // another uid before it was stopped.
        let mut passed = File::options()
            .write(true)
            .open(venv.join("lib").join("site.py"))
            .unwrap();
        assert!(!is_sealed(&venv), "a builder's tree is not ready");
        seal(&venv, Some(user)).unwrap();
        passed.write_all(b"import evil\n").unwrap();
        assert_eq!(
            std::fs::read(venv.join("lib").join("site.py")).unwrap(),
            b"built\n"
        );
        let site = std::fs::metadata(venv.join("lib").join("site.py")).unwrap();
        assert_eq!((site.uid(), site.permissions().mode() & 0o777), (0, 0o644));
        assert!(
            !venv.with_extension("built").exists(),
            "the builder's tree is gone"
        );
        let lib = std::fs::metadata(venv.join("lib")).unwrap();
        assert_eq!(lib.permissions().mode() & 0o7777, 0o755);
        assert_eq!(std::fs::read(&victim).unwrap(), b"root's alone");
        let meta = std::fs::metadata(&victim).unwrap();
        assert_eq!((meta.uid(), meta.permissions().mode() & 0o777), (0, 0o600));
        let marker = std::fs::symlink_metadata(venv.join(READY_FILE)).unwrap();
        assert!(marker.file_type().is_file());
        assert!(is_sealed(&venv));
        let escape = std::fs::symlink_metadata(venv.join("lib").join("escape")).unwrap();
        assert_eq!(escape.uid(), 0, "the link itself is root's now");
        // A marker that is a link makes nothing ready, even root's own.
        std::fs::remove_file(venv.join(READY_FILE)).unwrap();
        symlink(&victim, venv.join(READY_FILE)).unwrap();
        lchown(venv.join(READY_FILE), Some(0), Some(0)).unwrap();
        assert!(!is_sealed(&venv));
    }

    /// Needs root, as the server does to run jobs as other users.
    #[test]
    fn a_job_user_builds_its_environment_which_is_then_sealed() {
        if !users::is_root() {
            eprintln!("skipped: switching uids needs root");
            return;
        }
        let user = JobUser::new(64_992);
        let cache = tempfile::tempdir().unwrap();
        users::set_mode(cache.path(), 0o711).unwrap();
        let dir = tempfile::tempdir().unwrap();
        users::set_mode(dir.path(), 0o711).unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::fs::write(work.join("requirements.txt"), "# no packages\n").unwrap();
        tree::chown_tree(&work, user.uid, user.gid).unwrap();
        let launch = Launch {
            command: "id -u; touch \"$VIRTUAL_ENV/mine\" || echo sealed".to_owned(),
            cwd: work,
            env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            deadline_ms: now_ms() + 120_000,
            stop_grace_secs: 1,
            venv_root: Some(cache.path().to_path_buf()),
            venv_env: BTreeMap::new(),
            user: Some(user),
            cgroup: None,
            env_build: None,
            env_build_secs: MAX_BUILD_SECS,
            disk: None,
        };
        let (exit, log) = run(dir.path(), &launch);
        assert_eq!(exit.exit_code, Some(0), "{exit:?}: {log}");
        assert!(log.contains("creating a Python environment"), "{log}");
        assert!(log.contains("64992\n"), "{log}");
        assert!(log.ends_with("Permission denied\nsealed\n"), "{log}");
        let venv = std::fs::read_dir(cache.path())
            .unwrap()
            .filter_map(|e| e.ok())
            .find(|e| e.path().is_dir())
            .unwrap()
            .path();
        use std::os::unix::fs::MetadataExt;
        let python = std::fs::symlink_metadata(venv.join("bin/python")).unwrap();
        assert_eq!(python.uid(), 0, "the builder owns nothing of it");
        assert_eq!(std::fs::metadata(&venv).unwrap().mode() & 0o777, 0o755);
    }

    /// Needs root, as the server does to run jobs as other users.
    #[test]
    fn a_job_runs_as_its_user_and_nothing_of_it_outlives_it() {
        if !users::is_root() {
            eprintln!("skipped: switching uids needs root");
            return;
        }
        let user = JobUser::new(64_991);
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir(&work).unwrap();
        std::os::unix::fs::chown(&work, Some(user.uid), Some(user.gid)).unwrap();
        users::set_mode(dir.path(), 0o711).unwrap();
        let launch = Launch {
            command: "id -u; id -g; setsid sleep 60 & echo $! > escaped; \
                      cat ../launch.json || echo no launch file; \
                      touch ../mine || echo no writing beside the work folder; \
                      echo left > /tmp/trainyard-shim-test-64991"
                .to_owned(),
            cwd: work.clone(),
            env: BTreeMap::from([("PATH".to_owned(), "/usr/bin:/bin".to_owned())]),
            deadline_ms: now_ms() + 60_000,
            stop_grace_secs: 1,
            venv_root: None,
            venv_env: BTreeMap::new(),
            user: Some(user),
            cgroup: None,
            env_build: None,
            env_build_secs: MAX_BUILD_SECS,
            disk: None,
        };
        let (exit, log) = run(dir.path(), &launch);
        assert_eq!(exit.exit_code, Some(0), "{log}");
        assert!(log.starts_with("64991\n64991\n"), "{log}");
        assert!(log.contains("no launch file"), "{log}");
        assert!(log.contains("no writing beside"), "{log}");
        let escaped: i32 = std::fs::read_to_string(work.join("escaped"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            process_start(escaped).is_none() || is_zombie(escaped),
            "the process that left the job's group is stopped too"
        );
        assert!(users::processes_of(user.uid).is_empty());
        let mode = std::fs::metadata(dir.path()).unwrap().permissions();
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&mode) & 0o777,
            0o700,
            "the ended job's folder is closed"
        );
        assert!(!Path::new("/tmp/trainyard-shim-test-64991").exists());
    }

    #[test]
    fn a_bad_launch_file_is_reported_not_run() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(LAUNCH_FILE), b"{").unwrap();
        main(dir.path());
        let exit = read_exit(dir.path()).unwrap();
        assert_eq!(exit.reason, EndReason::StartFailed);
        assert!(exit.message.unwrap().contains("launch.json is not valid"));
    }

    #[test]
    fn process_start_times_tell_a_live_process() {
        let me = std::process::id() as i32;
        let start = process_start(me).unwrap();
        assert!(process_alive(me, start));
        assert!(!process_alive(me, start + 1));
    }

    /// Where this machine lets a test make control groups: needs root, as
    /// the server does. Where `TEST_CGROUPS_REQUIRED` is set (`make test` as
    /// root, the cgroup v2 machine), a machine without them fails the test
    /// instead of skipping it.
    fn test_hierarchy() -> Option<crate::cgroups::Hierarchy> {
        use crate::cgroups;
        let required = std::env::var_os("TEST_CGROUPS_REQUIRED").is_some();
        if !users::is_root() {
            assert!(!required, "control groups need root");
            eprintln!("skipped: control groups need root");
            return None;
        }
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        match cgroups::locate(&own, &mounts, cgroups::v2_controllers).and_then(cgroups::prepare) {
            Ok(hierarchy) => Some(hierarchy),
            Err(why) => {
                assert!(!required, "no control groups: {why}");
                eprintln!("skipped: this machine gives no control groups: {why}");
                None
            }
        }
    }

    /// As the server checks at its start: a job's process joins its group
    /// after it became the job's user.
    #[test]
    fn a_job_runs_inside_its_group_as_its_user_as_checked_at_start() {
        let Some(hierarchy) = test_hierarchy() else {
            return;
        };
        crate::cgroups::check_join(&hierarchy, Some(JobUser::new(64_993))).unwrap();
        crate::cgroups::check_join(&hierarchy, None).unwrap();
    }

    #[test]
    fn a_v2_server_hands_controllers_down_from_a_leaf_of_its_own() {
        let Some(crate::cgroups::Hierarchy::V2 { parent }) = test_hierarchy() else {
            eprintln!("skipped: not cgroup v2");
            return;
        };
        // A second start in the same process (a restart under systemd's
        // DelegateSubgroup) finds its leaf and the same parent.
        assert_eq!(
            test_hierarchy(),
            Some(crate::cgroups::Hierarchy::V2 {
                parent: parent.clone()
            })
        );
        let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
        let path = own
            .lines()
            .find_map(|l| l.strip_prefix("0::"))
            .unwrap()
            .to_owned();
        if path == "/" {
            // The root group may hold processes and hand controllers down.
            assert_eq!(parent, Path::new("/sys/fs/cgroup"));
        } else {
            assert!(path.ends_with("/trainyard-server"), "{path}");
            assert!(
                !path.ends_with("/trainyard-server/trainyard-server"),
                "{path}"
            );
            assert_eq!(
                parent.join(crate::cgroups::SERVER_LEAF),
                Path::new("/sys/fs/cgroup").join(path.trim_start_matches('/'))
            );
        }
        let enabled = std::fs::read_to_string(parent.join("cgroup.subtree_control")).unwrap();
        for controller in ["memory", "cpu", "pids"] {
            assert!(
                enabled.split_whitespace().any(|c| c == controller),
                "{enabled}"
            );
        }
    }

    /// A job in a control group of its own.
    struct Limited {
        dir: tempfile::TempDir,
        launch: Launch,
        /// The group's folders, one per tree (the memory tree's first).
        folders: Vec<PathBuf>,
    }

    /// A launch of `command` (given the group's folders) in a control group
    /// with `limits`; None where the machine gives none to a test.
    fn limited(
        name: &str,
        command: impl Fn(&[PathBuf]) -> String,
        limits: crate::cgroups::Limits,
    ) -> Option<Limited> {
        use crate::cgroups::Hierarchy;
        let hierarchy = test_hierarchy()?;
        let dir = tempfile::tempdir().unwrap();
        let name = format!("trainyard-test-{name}-{}", std::process::id());
        let folders: Vec<PathBuf> = match &hierarchy {
            Hierarchy::V2 { parent } => vec![parent.join(&name)],
            Hierarchy::V1 { memory, cpu, pids } => [Some(memory), Some(cpu), pids.as_ref()]
                .into_iter()
                .flatten()
                .map(|tree| tree.join(&name))
                .collect(),
        };
        let launch = Launch {
            command: command(&folders),
            cwd: dir.path().to_path_buf(),
            env: BTreeMap::from([("PATH".to_owned(), std::env::var("PATH").unwrap())]),
            deadline_ms: now_ms() + 120_000,
            stop_grace_secs: 1,
            venv_root: None,
            venv_env: BTreeMap::new(),
            user: None,
            cgroup: Some(JobGroup {
                hierarchy,
                name,
                limits,
            }),
            env_build: None,
            env_build_secs: MAX_BUILD_SECS,
            disk: None,
        };
        Some(Limited {
            dir,
            launch,
            folders,
        })
    }

    /// Gives `job` a requirements file, a cache of environments and a
    /// group of its own for the build, with the job's memory and tasks, in
    /// a group of all builds (named after the job's group) that gets
    /// `cpu_millis`. Returns the build's group and the cache.
    fn building(job: &mut Limited, cpu_millis: u32) -> (BuildGroup, tempfile::TempDir) {
        let spec = job.launch.cgroup.clone().unwrap();
        let build = BuildGroup {
            hierarchy: spec.hierarchy.clone(),
            shared: format!("{}-builds", spec.name),
            cpu_millis,
            name: "job-1.1".to_owned(),
            memory_bytes: spec.limits.memory_bytes,
            tasks: spec.limits.tasks,
        };
        let cache = tempfile::tempdir().unwrap();
        std::fs::write(job.dir.path().join("requirements.txt"), "# no packages\n").unwrap();
        job.launch.venv_root = Some(cache.path().to_path_buf());
        job.launch.env_build = Some(build.clone());
        (build, cache)
    }

    /// A folder on the PATH whose `python3` runs the server's Python on
    /// `code` instead, as a build meets it; kept while the result lives.
    fn python_that_runs(code: &str) -> (tempfile::TempDir, String) {
        let bin = tempfile::tempdir().unwrap();
        let python = bin.path().join("python3");
        let real = find_program("python3", DEFAULT_PATH).unwrap();
        std::fs::write(
            &python,
            format!("#!/bin/sh\nexec {} -c \"{code}\"\n", real.display()),
        )
        .unwrap();
        users::set_mode(&python, 0o755).unwrap();
        let path = format!("{}:{DEFAULT_PATH}", bin.path().display());
        (bin, path)
    }

    /// A shared environment is built in a group of its own, at the builds'
    /// CPUs: a first submitter that asked for a hundredth of a CPU does not
    /// make every job of the same requirements wait at that pace.
    #[test]
    fn an_environment_is_built_at_the_builds_size_not_its_first_submitters() {
        use crate::cgroups::Limits;
        let tiny = Limits {
            memory_bytes: 256 << 20,
            cpu_millis: 10,
            tasks: 64,
        };
        let Some(mut job) = limited("build", |_| "cat /proc/self/cgroup".to_owned(), tiny) else {
            return;
        };
        let spec = job.launch.cgroup.clone().unwrap();
        let (build, _cache) = building(&mut job, 1000);
        let build_dirs = build.hierarchy.dirs(&build.own().name);
        let shared_dirs = build.hierarchy.dirs(&build.shared);
        // The CPUs of all builds, and the build's own (none: its parent's).
        let (quotas, expected) = if build_dirs.len() == 1 {
            let file = |dir: &PathBuf| dir.join("cpu.max");
            (
                [file(&shared_dirs[0]), file(&build_dirs[0])],
                ["100000 100000", "max 100000"],
            )
        } else {
            let file = |dir: &PathBuf| dir.join("cpu.cfs_quota_us");
            (
                [file(&shared_dirs[1]), file(&build_dirs[1])],
                ["100000", "-1"],
            )
        };
        // What the build's group and the job's hold while it builds.
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let watcher = {
            let done = done.clone();
            let procs = build_dirs[0].join("cgroup.procs");
            let job_procs = job.folders[0].join("cgroup.procs");
            std::thread::spawn(move || {
                let mut seen = Vec::new();
                while !done.load(std::sync::atomic::Ordering::Relaxed) {
                    let building = std::fs::read_to_string(&procs).unwrap_or_default();
                    if !building.trim().is_empty() {
                        let quota = |file: &PathBuf| {
                            let text = std::fs::read_to_string(file).unwrap_or_default();
                            text.trim().to_owned()
                        };
                        let job_held = std::fs::read_to_string(&job_procs).unwrap_or_default();
                        seen.push((
                            quota(&quotas[0]),
                            quota(&quotas[1]),
                            job_held.trim().is_empty(),
                        ));
                    }
                    std::thread::sleep(Duration::from_millis(5));
                }
                seen
            })
        };
        let (exit, log) = run(job.dir.path(), &job.launch);
        done.store(true, std::sync::atomic::Ordering::Relaxed);
        let seen = watcher.join().unwrap();
        assert_eq!(exit.exit_code, Some(0), "{exit:?}: {log}");
        assert!(log.contains("creating a Python environment"), "{log}");
        assert!(!seen.is_empty(), "the build ran in its group: {log}");
        for (shared, own, job_empty) in &seen {
            assert_eq!(
                [shared.as_str(), own.as_str()],
                expected,
                "a whole CPU for the builds"
            );
            assert!(job_empty, "nothing in the job's group while it builds");
        }
        // The command itself ran in the job's group; the build's group, and
        // the builds' (it was the only one), are gone.
        let inside = log
            .lines()
            .filter(|l| l.ends_with(&format!("/{}", spec.name)))
            .count();
        assert_eq!(inside, job.folders.len(), "{log}");
        for dir in build_dirs.iter().chain(&shared_dirs).chain(&job.folders) {
            assert!(!dir.exists(), "{} is removed", dir.display());
        }
    }

    #[test]
    fn a_build_past_its_jobs_memory_says_so() {
        use crate::cgroups::Limits;
        let limits = Limits {
            memory_bytes: 64 << 20,
            cpu_millis: 1000,
            tasks: 64,
        };
        let Some(mut job) = limited("build-oom", |_| "echo ran".to_owned(), limits) else {
            return;
        };
        let (build, _cache) = building(&mut job, 1000);
        // The server's Python, as a build that needs 256 MiB meets it.
        let (_bin, path) = python_that_runs("x = b'x' * (256 << 20); print('survived')");
        job.launch.venv_env = BTreeMap::from([("PATH".to_owned(), path)]);
        let (exit, log) = run(job.dir.path(), &job.launch);
        assert_eq!(exit.reason, EndReason::StartFailed, "{log}");
        let message = exit.message.unwrap_or_default();
        assert!(
            message.contains(
                "python3 -m venv failed (signal 9); see the log (out of memory: installing its Python environment reached its limit of 64.0 MiB (resources.memory); ask for more memory)"
            ),
            "{message}"
        );
        assert!(!log.contains("survived") && !log.contains("\nran"), "{log}");
        // The job's own group counted no kill; both build groups are gone.
        assert_eq!(exit.usage.map(|u| u.oom_kills), Some(0));
        for dir in build.hierarchy.dirs(&build.own().name) {
            assert!(!dir.exists(), "{} is removed", dir.display());
        }
    }

    /// The builder is the job's uid and writes the job's log: the job's
    /// disk limit holds while it builds.
    #[test]
    fn a_build_is_held_to_its_jobs_disk_limit() {
        let cache = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        let work = dir.path().join("work");
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("requirements.txt"), "# no packages\n").unwrap();
        let big = work.join("big");
        let (_bin, path) = python_that_runs(&format!(
            "import time; open('{}', 'wb').write(b'x' * 6000000); time.sleep(60)",
            big.display()
        ));
        let mut launch = with_venvs("echo ran", &work, cache.path());
        launch.venv_env = BTreeMap::from([("PATH".to_owned(), path)]);
        launch.disk = Some(DiskLimit {
            folders: vec![work.clone()],
            max_bytes: 5_000_000,
            max_entries: 1_000,
            every_secs: 1,
        });
        let (exit, log) = run(dir.path(), &launch);
        assert_eq!(exit.reason, EndReason::DiskLimit, "{exit:?}: {log}");
        assert!(
            exit.message.unwrap().contains("past its limit of 4.8 MiB"),
            "{log}"
        );
        assert!(!log.contains("\nran"), "{log}");
    }

    /// A build has a bound of its own, short of its job's deadline.
    #[test]
    fn a_build_past_its_time_is_stopped_and_says_so() {
        let cache = tempfile::tempdir().unwrap();
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("requirements.txt"), "# no packages\n").unwrap();
        let (_bin, path) = python_that_runs("import time; time.sleep(60)");
        let mut launch = with_venvs("echo ran", dir.path(), cache.path());
        launch.venv_env = BTreeMap::from([("PATH".to_owned(), path)]);
        launch.env_build_secs = 1;
        let (exit, log) = run(dir.path(), &launch);
        assert_eq!(exit.reason, EndReason::StartFailed, "{log}");
        assert_eq!(
            exit.message.as_deref(),
            Some(
                "building its Python environment took longer than 1 second and was stopped; see the log for the step it was at"
            )
        );
        assert!(!log.contains("\nran"), "{log}");
        assert_eq!(in_words(7200), "2 hours");
        assert_eq!(in_words(90), "90 seconds");
        assert_eq!(in_words(120), "2 minutes");
    }

    #[test]
    fn a_job_past_its_memory_is_stopped_by_the_kernel_and_its_end_says_so() {
        let limits = crate::cgroups::Limits {
            memory_bytes: 64 << 20,
            cpu_millis: 1000,
            tasks: 64,
        };
        // 256 MiB, written, so that it is really held.
        let command = |_: &[PathBuf]| {
            "exec python3 -c \"x = b'x' * (256 << 20); print('survived')\"".to_owned()
        };
        let Some(job) = limited("oom", command, limits) else {
            return;
        };
        let (exit, log) = run(job.dir.path(), &job.launch);
        assert_eq!(exit.reason, EndReason::Exited);
        assert_eq!(exit.signal, Some(libc::SIGKILL), "{log}");
        assert!(!log.contains("survived"), "{log}");
        let usage = exit.usage.expect("a job in a group has its usage read");
        assert!(usage.oom_kills >= 1, "{usage:?}");
        assert_eq!(usage.memory_limit_bytes, 64 << 20);
        if let Some(peak) = usage.memory_peak_bytes {
            assert!(peak <= 64 << 20 && peak > 32 << 20, "{usage:?}");
        }
        for folder in job.folders {
            assert!(!folder.exists(), "{} is removed", folder.display());
        }
    }

    #[test]
    fn a_job_runs_inside_its_cpu_and_task_limits_and_nothing_of_it_outlives_it() {
        let limits = crate::cgroups::Limits {
            memory_bytes: 256 << 20,
            cpu_millis: 250,
            tasks: 16,
        };
        // It shows its CPU quota, leaves a process behind in a session of
        // its own, and asks for more processes than it may have.
        let script = "import os, subprocess, sys, time\n\
                      print('quota', open(sys.argv[1]).read().strip())\n\
                      escaped = subprocess.Popen(['sleep', '60'], start_new_session=True)\n\
                      open('escaped', 'w').write(str(escaped.pid))\n\
                      refused = 0\n\
                      for _ in range(40):\n\
                      \x20   try:\n\
                      \x20       pid = os.fork()\n\
                      \x20   except BlockingIOError:\n\
                      \x20       refused += 1\n\
                      \x20       continue\n\
                      \x20   if pid == 0:\n\
                      \x20       time.sleep(60)\n\
                      \x20       os._exit(0)\n\
                      print('refused', refused)\n";
        let command = |folders: &[PathBuf]| {
            let quota = if folders.len() == 1 {
                folders[0].join("cpu.max")
            } else {
                folders[1].join("cpu.cfs_quota_us")
            };
            format!(
                "cat /proc/self/cgroup; exec python3 -c \"$(cat <<'EOF'\n{script}EOF\n)\" {}",
                quota.display()
            )
        };
        let Some(job) = limited("tasks", command, limits) else {
            return;
        };
        let (exit, log) = run(job.dir.path(), &job.launch);
        assert_eq!(exit.exit_code, Some(0), "{log}");
        let name = &job.launch.cgroup.as_ref().unwrap().name;
        let inside = log
            .lines()
            .filter(|l| l.ends_with(&format!("/{name}")))
            .count();
        assert_eq!(
            inside,
            job.folders.len(),
            "in the group in every tree: {log}"
        );
        let quota = if job.folders.len() == 1 {
            "quota 25000 100000"
        } else {
            "quota 25000"
        };
        assert!(log.contains(quota), "a quarter CPU: {log}");
        let refused: u32 = log
            .lines()
            .find_map(|l| l.strip_prefix("refused "))
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("{log}"));
        assert!(
            refused >= 40 - 16,
            "only 16 tasks fit: {refused} forks refused"
        );
        let escaped: i32 = std::fs::read_to_string(job.dir.path().join("escaped"))
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            !process_alive(escaped, process_start(escaped).unwrap_or(-1)),
            "the escaped process is stopped"
        );
        for folder in job.folders {
            assert!(!folder.exists(), "{} is removed", folder.display());
        }
    }
}
