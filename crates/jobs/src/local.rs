//! The local executor: attempts run on the server's own machine, each under
//! a job shim (a process of this server's binary) that starts its command,
//! holds it to its deadline and limits, and writes how it ended into the
//! attempt's folder. The handle of an attempt is its shim's process id and
//! start time (`pid:start`), so a reused id is never mistaken for it.
//!
//! Where the server runs as root, each running attempt gets a uid of its
//! own from `job_users`, and a control group under `job_limits`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use trainyard_scheduler as sched;
use trainyard_store::JobRecord;

use crate::executor::{Attempt, Capacity, Ending, Executor, Observation, StartError, Started};
use crate::{cgroups, shim, templates, tree, users};

/// How the local executor is set up.
#[derive(Debug, Clone)]
pub struct LocalConfig {
    /// `<data_dir>/jobs`: one folder per job and attempt (the supervisor's
    /// layout: `<id>/files`, `<id>/<attempt>`).
    pub root: PathBuf,
    /// The program run as `PROGRAM job-shim DIR` (this server's binary).
    pub shim_program: PathBuf,
    /// What jobs get as `MLFLOW_TRACKING_URI`.
    pub tracking_uri: String,
    /// This machine's name, as its node.
    pub node: String,
    /// What this machine offers.
    pub gpus: u32,
    pub cpu_millis: u32,
    pub memory_mib: u64,
    pub stop_grace_secs: u64,
    /// Cached Python environments, one per distinct requirements.txt.
    pub venv_root: PathBuf,
    /// Unpacked project archives and datasets (`<dir>/datasets`), which
    /// jobs' users pass through to their datasets.
    pub uploads_root: PathBuf,
    /// The uids jobs run as, one per running job; None: as the server's
    /// own user. Set only where the server may switch users (root).
    pub job_users: Option<users::UidRange>,
    /// Where each job's control group is made, which holds it to the CPUs
    /// and memory it asked for; None: not enforced.
    pub job_limits: Option<cgroups::Hierarchy>,
    /// Most bytes a running job may hold in its folders (its attempt's
    /// work, home, temporary files and log, and its checkpoints); None: not
    /// measured.
    pub disk_quota_bytes: Option<u64>,
}

/// Most files and folders a running job may hold in its folders.
pub const MAX_JOB_ENTRIES: u64 = 1_000_000;

/// Seconds between measures of a running job's disk use.
const DISK_EVERY_SECS: u64 = 10;

pub struct LocalExecutor {
    config: LocalConfig,
    /// The uid of each running attempt, by job: filled as attempts start
    /// and as the supervisor observes them (so also after a restart),
    /// emptied as they end.
    uids: Mutex<HashMap<i64, u32>>,
    /// Told when a shim ends.
    ended: Arc<tokio::sync::Notify>,
}

/// The message of an attempt whose shim vanished.
const LOST: &str = "lost: its supervising process is gone and left no exit record";

impl LocalExecutor {
    pub fn new(config: LocalConfig) -> LocalExecutor {
        LocalExecutor {
            config,
            uids: Mutex::new(HashMap::new()),
            ended: Arc::new(tokio::sync::Notify::new()),
        }
    }

    pub fn config(&self) -> &LocalConfig {
        &self.config
    }

    fn job_dir(&self, id: i64) -> PathBuf {
        self.config.root.join(id.to_string())
    }

    /// The folder a job's attempts keep their checkpoints in.
    pub fn checkpoint_dir(&self, id: i64) -> PathBuf {
        self.job_dir(id).join("checkpoints")
    }

    /// The folder of one attempt of a job.
    pub fn attempt_dir(&self, id: i64, attempt: u32) -> PathBuf {
        self.job_dir(id).join(attempt.to_string())
    }

    fn log_path(&self, id: i64, attempt: u32) -> PathBuf {
        self.attempt_dir(id, attempt).join(shim::LOG_FILE)
    }

    fn uids(&self) -> std::sync::MutexGuard<'_, HashMap<i64, u32>> {
        self.uids.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Remembers the uid of a running attempt found by observing it.
    fn note_uid(&self, record: &JobRecord) {
        if self.config.job_users.is_none() || self.uids().contains_key(&record.job.id) {
            return;
        }
        let dir = self.attempt_dir(record.job.id, record.job.attempt);
        if let Some(user) = read_launch(&dir).and_then(|l| l.user) {
            self.uids().insert(record.job.id, user.uid);
        }
    }

    /// An attempt's end: the job's folder is closed, then its uid freed.
    /// The next job given the uid must not pass through to what this one
    /// keeps while it waits for another attempt (its checkpoints are still
    /// the old uid's until that attempt starts).
    fn release_uid(&self, job: i64) {
        if self.config.job_users.is_some() {
            let folder = self.job_dir(job);
            if let Err(error) = users::set_mode(&folder, 0o700)
                && error.kind() != std::io::ErrorKind::NotFound
            {
                tracing::warn!(job, %error, "could not close the job's folder");
            }
        }
        self.uids().remove(&job);
    }

    /// The control group of a job's attempt, when limits are enforced. Its
    /// name holds a hash of the jobs folder: servers that share a machine
    /// (and so a parent group) never share a job's group.
    fn job_group(&self, job: &trainyard_domain::job::Job) -> Option<cgroups::JobGroup> {
        let hierarchy = self.config.job_limits.clone()?;
        Some(cgroups::JobGroup {
            hierarchy,
            name: cgroups::group_name(&self.instance(), job.id, job.attempt),
            limits: cgroups::Limits {
                memory_bytes: job.memory_mib.saturating_mul(1 << 20),
                cpu_millis: job.cpu_millis,
                tasks: cgroups::TASKS_MAX,
            },
        })
    }

    /// The control group a job's Python environment is built in, when
    /// limits are enforced: the job's memory and tasks (its own group is
    /// empty meanwhile), and of the CPUs a share of what all builds get
    /// together, a quarter of the machine's (at least one), whoever asks for
    /// the environment first.
    fn build_group(&self, job: &trainyard_domain::job::Job) -> Option<cgroups::BuildGroup> {
        let hierarchy = self.config.job_limits.clone()?;
        let machine = self.config.cpu_millis.max(1000);
        Some(cgroups::BuildGroup {
            hierarchy,
            shared: format!("trainyard-{}-builds", self.instance()),
            cpu_millis: (machine / 4).max(1000),
            name: format!("job-{}.{}", job.id, job.attempt),
            memory_bytes: job.memory_mib.saturating_mul(1 << 20),
            tasks: cgroups::TASKS_MAX,
        })
    }

    /// What tells this server's control groups apart from those of others
    /// on the machine: a hash of its jobs folder.
    fn instance(&self) -> String {
        use sha2::{Digest, Sha256};
        let root =
            std::path::absolute(&self.config.root).unwrap_or_else(|_| self.config.root.clone());
        let digest = Sha256::digest(root.as_os_str().as_encoded_bytes());
        hex::encode(&digest[..4])
    }

    /// The job's whole environment: a few of the server's own variables
    /// (never its secrets), Trainyard's for the job, and where its GPUs and
    /// the tracking server are.
    fn environment(&self, attempt: &Attempt) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        for name in [
            "PATH", "HOME", "LANG", "LC_ALL", "TZ", "TMPDIR", "USER", "LOGNAME",
        ] {
            if let Ok(value) = std::env::var(name) {
                env.insert(name.to_owned(), value);
            }
        }
        env.entry("PATH".to_owned())
            .or_insert_with(|| "/usr/local/bin:/usr/bin:/bin".to_owned());
        env.extend(attempt.env.clone());
        let gpu_list = attempt
            .gpus
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(",");
        // An empty list hides every GPU from CUDA: a CPU job stays off them.
        env.insert("CUDA_VISIBLE_DEVICES".to_owned(), gpu_list);
        // The indices are NVML's, in PCI bus order; CUDA's own default
        // order (fastest first) could name another card.
        env.insert("CUDA_DEVICE_ORDER".to_owned(), "PCI_BUS_ID".to_owned());
        env.insert(
            "MLFLOW_TRACKING_URI".to_owned(),
            self.config.tracking_uri.clone(),
        );
        env
    }

    /// What an environment's build gets of the server's variables: the
    /// server's, never the spec's, as environments are shared. HOME only
    /// where jobs run as the server's user (a pyenv Python finds itself
    /// through it); a job user's build gets an empty one.
    fn venv_env(&self, job_user: bool) -> BTreeMap<String, String> {
        let mut env = BTreeMap::new();
        if let Ok(path) = std::env::var("PATH") {
            let path = if job_user {
                reachable_path(&path)
            } else {
                path
            };
            env.insert("PATH".to_owned(), path);
        }
        if !job_user && let Ok(home) = std::env::var("HOME") {
            env.insert("HOME".to_owned(), home);
        }
        env
    }

    /// Takes a free job uid for an attempt, or says that none is left.
    fn take_uid(&self, job: i64) -> Result<Option<users::JobUser>, String> {
        let Some(range) = self.config.job_users else {
            return Ok(None);
        };
        let mut uids = self.uids();
        let taken: HashSet<u32> = uids.values().copied().collect();
        let uid = range.free(&taken).ok_or_else(|| full(range))?;
        uids.insert(job, uid);
        Ok(Some(users::JobUser::new(uid)))
    }

    /// Lays out the attempt's folders, writes the launch file and starts
    /// the shim; returns its PID and start time.
    async fn spawn_shim(
        &self,
        attempt: &Attempt,
        user: Option<users::JobUser>,
    ) -> Result<(i32, i64), String> {
        let job = &attempt.record.job;
        let dir = self.attempt_dir(job.id, job.attempt);
        let work = dir.join("work");
        tokio::fs::create_dir_all(&work)
            .await
            .map_err(|e| format!("cannot create {}: {e}", work.display()))?;
        // Kept across the job's attempts: a preempted or retried attempt
        // resumes from what the last one saved, and a job that resumes
        // another's starts from what that one left.
        let checkpoints = self.checkpoint_dir(job.id);
        tokio::fs::create_dir_all(&checkpoints)
            .await
            .map_err(|e| format!("cannot create {}: {e}", checkpoints.display()))?;
        if let Some(user) = user {
            // Before its folders open to job users: the work folder is
            // closed while the job's files are copied in, and the
            // checkpoints (an earlier attempt's uid's, or root's while kept)
            // become this attempt's uid's alone.
            let (to, kept) = (work.clone(), checkpoints.clone());
            tokio::task::spawn_blocking(move || {
                users::set_mode(&to, 0o700)?;
                tree::chown_tree(&kept, user.uid, user.gid)?;
                users::set_mode(&kept, 0o700)
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot give the job its checkpoints: {e}"))?;
            // What earlier attempts wrote is no one's now: it goes, so that
            // retries do not each hold a quota's worth (their logs stay).
            let earlier: Vec<PathBuf> = (0..job.attempt)
                .flat_map(|a| {
                    let dir = self.attempt_dir(job.id, a);
                    ["work", "home", "tmp"].map(|name| dir.join(name))
                })
                .collect();
            tokio::task::spawn_blocking(move || {
                for path in earlier {
                    if let Err(error) = tree::remove_tree(&path) {
                        tracing::warn!(%error, path = %path.display(), "could not remove what an earlier attempt left");
                    }
                }
            })
            .await
            .map_err(|e| e.to_string())?;
            if let Some(files) = attempt.files.as_ref().filter(|f| f.is_dir()) {
                // The project's files are copied into the work folder; the
                // originals are not for other jobs passing through.
                users::set_mode(files, 0o700)
                    .map_err(|e| format!("cannot close {}: {e}", files.display()))?;
            }
            // The job's user passes through to its own folders, and reads
            // nothing else here: the files below are the server's (0600).
            for folder in [&self.job_dir(job.id), &dir] {
                users::set_mode(folder, 0o711)
                    .map_err(|e| format!("cannot open {} to the job: {e}", folder.display()))?;
            }
        }
        if let Some(files) = attempt.files.clone().filter(|f| f.is_dir()) {
            let to = work.clone();
            tokio::task::spawn_blocking(move || templates::copy_tree(&files, &to))
                .await
                .map_err(|e| e.to_string())?
                .map_err(|e| format!("cannot copy the job's files into its folder: {e}"))?;
        }
        for (name, source) in &attempt.datasets {
            let data = work.join("data");
            tokio::fs::create_dir_all(&data)
                .await
                .map_err(|e| format!("cannot create {}: {e}", data.display()))?;
            tokio::fs::symlink(source, data.join(name))
                .await
                .map_err(|e| format!("cannot link the dataset `{name}`: {e}"))?;
        }
        let mut env = self.environment(attempt);
        env.insert(
            "TRAINYARD_CHECKPOINT_DIR".to_owned(),
            checkpoints.display().to_string(),
        );
        if let Some(user) = user {
            // A home and a temporary folder of its own: the server's are
            // not the job's to read or write.
            let to = work.clone();
            let folders = [dir.join("home"), dir.join("tmp")];
            let made = folders.clone();
            tokio::task::spawn_blocking(move || {
                for folder in &made {
                    std::fs::create_dir_all(folder)?;
                    users::set_mode(folder, 0o700)?;
                }
                // (The checkpoints were given to it above.)
                for path in made.iter().chain([&to]) {
                    tree::chown_tree(path, user.uid, user.gid)?;
                }
                users::set_mode(&to, 0o700)?;
                Ok::<_, std::io::Error>(())
            })
            .await
            .map_err(|e| e.to_string())?
            .map_err(|e| format!("cannot give the job its folders: {e}"))?;
            // Folders it cannot pass through would only fail its lookups
            // (a root's ~/.cargo/bin, a pyenv shim): it gets the others.
            if let Some(path) = env.get("PATH") {
                env.insert("PATH".to_owned(), reachable_path(path));
            }
            let [home, tmp] = folders;
            env.insert("HOME".to_owned(), home.display().to_string());
            env.insert("TMPDIR".to_owned(), tmp.display().to_string());
            for name in ["USER", "LOGNAME"] {
                env.insert(name.to_owned(), format!("trainyard-job-{}", job.id));
            }
        }
        let launch = shim::Launch {
            command: attempt.command.clone(),
            cwd: work,
            env,
            deadline_ms: attempt.deadline_ms,
            stop_grace_secs: self.config.stop_grace_secs,
            venv_root: Some(self.config.venv_root.clone()),
            venv_env: self.venv_env(user.is_some()),
            user,
            cgroup: self.job_group(job),
            env_build: self.build_group(job),
            env_build_secs: shim::MAX_BUILD_SECS,
            disk: self
                .config
                .disk_quota_bytes
                .map(|max_bytes| shim::DiskLimit {
                    folders: vec![dir.clone(), checkpoints.clone()],
                    max_bytes,
                    max_entries: MAX_JOB_ENTRIES,
                    every_secs: DISK_EVERY_SECS,
                }),
        };
        let launch_json = serde_json::to_vec_pretty(&launch).map_err(|e| e.to_string())?;
        // It holds the job's token: the server's alone to read.
        crate::write_private(&dir.join(shim::LAUNCH_FILE), &launch_json)
            .map_err(|e| format!("cannot write the launch file: {e}"))?;
        let shim_log = crate::private_file(&dir.join("shim.log"))
            .map_err(|e| format!("cannot create the shim log: {e}"))?;
        let shim_err = shim_log.try_clone().map_err(|e| e.to_string())?;
        let mut child = tokio::process::Command::new(&self.config.shim_program)
            .arg("job-shim")
            .arg(&dir)
            .stdin(std::process::Stdio::null())
            .stdout(shim_log)
            .stderr(shim_err)
            // Nothing of the server's environment (its database URL): a job
            // that runs as the server's user could read the shim's.
            .env_clear()
            // Its own group: a Ctrl-C to the server does not reach the job.
            .process_group(0)
            .spawn()
            .map_err(|e| {
                format!(
                    "cannot start the job shim {}: {e}",
                    self.config.shim_program.display()
                )
            })?;
        let pid = child.id().ok_or("the job shim exited at once")? as i32;
        let pid_start = shim::process_start(pid).ok_or("the job shim exited at once")?;
        // Reap it when it ends, and have the supervisor look at once.
        let ended = self.ended.clone();
        tokio::spawn(async move {
            let _ = child.wait().await;
            ended.notify_one();
        });
        Ok((pid, pid_start))
    }

    /// What the shim would have done at the end of an attempt whose shim
    /// vanished: its control group removed, its uid's processes and files
    /// gone, its folder closed.
    async fn clean_up_lost(&self, record: &JobRecord) {
        let dir = self.attempt_dir(record.job.id, record.job.attempt);
        let launch = read_launch(&dir);
        let groups = launch.as_ref().map(|l| {
            let build = l.env_build.as_ref().map(cgroups::BuildGroup::own);
            l.cgroup.iter().cloned().chain(build).collect::<Vec<_>>()
        });
        for spec in groups.unwrap_or_default() {
            // Its environment's build may have been under way.
            let group = cgroups::Group::existing(&spec);
            if let Ok(Err(error)) = tokio::task::spawn_blocking(move || group.remove()).await {
                tracing::warn!(job = record.job.id, %error, "could not remove the lost job's control group");
            }
        }
        if let Some(build) = launch.as_ref().and_then(|l| l.env_build.as_ref()) {
            cgroups::Group::remove_shared_build_group(build);
        }
        if let Some(user) = launch.and_then(|l| l.user) {
            let closed = tokio::task::spawn_blocking(move || {
                users::kill_all(user.uid)?;
                users::remove_left_behind(user.uid);
                users::remove_ipc_of(user.uid);
                users::set_mode(&dir, 0o700)
            })
            .await;
            if let Ok(Err(error)) = closed {
                tracing::warn!(job = record.job.id, %error, "could not clean up after the lost job");
            }
        }
    }
}

#[async_trait::async_trait]
impl Executor for LocalExecutor {
    fn kind(&self) -> &'static str {
        "local"
    }

    /// With job users: lays out the folders jobs reach so that a job's
    /// user may pass through to its own folder and the shared datasets and
    /// Python environments, and read nothing else: the folders of jobs that
    /// ended, project uploads and uploads in progress are closed (0700).
    /// Err names a folder on the way that other users cannot pass through.
    async fn prepare(&self, active: &[JobRecord]) -> Result<(), String> {
        if self.config.job_users.is_none() {
            return Ok(());
        }
        let active: HashSet<String> = active.iter().map(|r| r.job.id.to_string()).collect();
        let config = self.config.clone();
        tokio::task::spawn_blocking(move || {
            let datasets = config.uploads_root.join("datasets");
            for (folder, mode) in [
                (&config.root, 0o711),
                (&config.uploads_root, 0o711),
                (&datasets, 0o711),
                (&config.venv_root, 0o711),
            ] {
                std::fs::create_dir_all(folder)
                    .and_then(|()| users::set_mode(folder, mode))
                    .map_err(|e| format!("{}: {e}", folder.display()))?;
                users::check_reachable(folder)?;
            }
            let close_all_but = |folder: &Path, keep: &dyn Fn(&str) -> bool| {
                let entries =
                    std::fs::read_dir(folder).map_err(|e| format!("{}: {e}", folder.display()))?;
                for entry in entries.flatten() {
                    let name = entry.file_name().to_string_lossy().into_owned();
                    if !keep(&name) && entry.file_type().is_ok_and(|t| t.is_dir()) {
                        users::set_mode(&entry.path(), 0o700)
                            .map_err(|e| format!("{}: {e}", entry.path().display()))?;
                    }
                }
                Ok::<_, String>(())
            };
            close_all_but(&config.root, &|name| active.contains(name))?;
            close_all_but(&config.uploads_root, &|name| name == "datasets")?;
            Ok(())
        })
        .await
        .map_err(|e| e.to_string())?
    }

    async fn capacity(&self) -> Result<Capacity, String> {
        let c = &self.config;
        let slots = c
            .job_users
            .map(|range| (range.count() as usize).saturating_sub(self.uids().len()));
        Ok(Capacity {
            nodes: vec![sched::Node {
                id: 0,
                name: c.node.clone(),
                gpus: c.gpus,
                cpu_millis: c.cpu_millis,
                memory_mib: c.memory_mib,
                schedulable: true,
            }],
            in_all: Default::default(),
            slots,
            gpus_said: format!(
                "this server has {} (found by NVML, or set by simulated_gpus)",
                c.gpus
            ),
            place: "this machine".to_owned(),
            full: c.job_users.map(full).unwrap_or_default(),
        })
    }

    async fn start(&self, attempt: Attempt) -> Result<Started, StartError> {
        let job = attempt.record.job.id;
        if let Some(from) = attempt.resume_from.as_ref().map(|origin| origin.id) {
            // First: taken, they are this job's, even when this try fails
            // and another starts it (which finds them moved).
            let (source, target) = (self.checkpoint_dir(from), self.checkpoint_dir(job));
            tokio::task::spawn_blocking(move || move_checkpoints(&source, &target))
                .await
                .map_err(|e| StartError::Failed(e.to_string()))?
                .map_err(|e| {
                    StartError::Refused(format!("cannot take job {from}'s checkpoints: {e}"))
                })?;
        }
        let user = self.take_uid(job)?;
        match self.spawn_shim(&attempt, user).await {
            Ok((pid, start)) => {
                // Admins see in the timeline whose files and processes are the job's.
                let note = match user {
                    Some(u) => format!("process {pid}, as uid {}", u.uid),
                    None => format!("process {pid}"),
                };
                Ok(Started {
                    handle: format!("{pid}:{start}"),
                    note,
                })
            }
            Err(message) => {
                self.release_uid(job);
                Err(StartError::Failed(message))
            }
        }
    }

    async fn observe(&self, record: &JobRecord) -> Observation {
        let job = &record.job;
        let dir = self.attempt_dir(job.id, job.attempt);
        if let Some(exit) = shim::read_exit(&dir) {
            self.release_uid(job.id);
            return Observation::Ended(ending(exit));
        }
        let alive = match record.handle.as_deref().and_then(parse_handle) {
            Some((pid, start)) => shim::process_alive(pid, start),
            // Starting without a handle: the server stopped while starting
            // it. The shim says who it is in its folder.
            None => match shim::read_pid_file(&dir) {
                Some((pid, start)) if shim::process_alive(pid, start) => {
                    self.note_uid(record);
                    return Observation::Adopted(Started {
                        handle: format!("{pid}:{start}"),
                        note: format!("process {pid}, found again after a restart"),
                    });
                }
                _ => false,
            },
        };
        if !alive {
            self.release_uid(job.id);
            // It may have written its exit file just now.
            if let Some(exit) = shim::read_exit(&dir) {
                return Observation::Ended(ending(exit));
            }
            tracing::warn!(
                job = job.id,
                "job lost: its shim is gone without an exit record"
            );
            self.clean_up_lost(record).await;
            return Observation::Lost(LOST.to_owned());
        }
        self.note_uid(record);
        Observation::Running
    }

    async fn stop(&self, record: &JobRecord) -> Result<(), String> {
        let dir = self.attempt_dir(record.job.id, record.job.attempt);
        let cancel = dir.join(shim::CANCEL_FILE);
        if cancel.exists() {
            return Ok(());
        }
        tokio::fs::write(&cancel, b"")
            .await
            .map_err(|e| format!("cannot pass the cancel on to the job: {e}"))
    }

    async fn changed(&self) {
        self.ended.notified().await
    }

    async fn retire(&self, record: &JobRecord, keep: bool) -> Option<u64> {
        // Ended for good: no job user passes through its folder again.
        self.release_uid(record.job.id);
        let (job, attempts) = (record.job.id, record.job.attempt);
        let checkpoints = self.checkpoint_dir(job);
        let kept = if keep {
            let measured = checkpoints.clone();
            let users = self.config.job_users.is_some();
            tokio::task::spawn_blocking(move || {
                let (bytes, seen) = tree::file_bytes(std::slice::from_ref(&measured), MAX_JOB_ENTRIES);
                if seen == 0 {
                    return None;
                }
                // Root's while kept: the uid that wrote them soon runs
                // someone else's job, which must not reach them when the
                // job that resumes opens its folder.
                if users && let Err(error) = tree::chown_tree(&measured, 0, 0) {
                    tracing::warn!(%error, path = %measured.display(), "could not take the kept checkpoints from their job's uid; they are not kept");
                    return None;
                }
                Some(bytes)
            })
            .await
            .ok()
            .flatten()
        } else {
            None
        };
        if self.config.job_users.is_some() {
            // What its users wrote is theirs no longer to reach: it goes,
            // so that ended jobs do not fill the disk. Logs and exit
            // records stay, and the checkpoints it keeps for a while (in
            // its folder, closed to every job user).
            let mut gone = Vec::new();
            if kept.is_none() {
                gone.push(checkpoints);
            }
            for attempt in 0..=attempts {
                let dir = self.attempt_dir(job, attempt);
                gone.extend(["work", "home", "tmp"].map(|name| dir.join(name)));
            }
            tokio::task::spawn_blocking(move || {
                for path in gone {
                    if let Err(error) = tree::remove_tree(&path) {
                        tracing::warn!(job, %error, path = %path.display(), "could not remove what the job left");
                    }
                }
            });
        }
        kept
    }

    fn keeps_checkpoints(&self) -> bool {
        true
    }

    async fn holds_checkpoints(&self, job: &trainyard_domain::job::Job) -> Result<bool, String> {
        let checkpoints = self.checkpoint_dir(job.id);
        tokio::task::spawn_blocking(move || {
            std::fs::symlink_metadata(&checkpoints).is_ok_and(|m| m.is_dir())
                && std::fs::read_dir(&checkpoints).is_ok_and(|mut d| d.next().is_some())
        })
        .await
        .map_err(|e| e.to_string())
    }

    async fn drop_checkpoints(&self, job: &trainyard_domain::job::Job) -> bool {
        let (job, checkpoints) = (job.id, self.checkpoint_dir(job.id));
        match tokio::task::spawn_blocking(move || tree::remove_tree(&checkpoints)).await {
            Ok(Ok(())) => true,
            Ok(Err(error)) => {
                tracing::warn!(job, %error, "could not remove the job's kept checkpoints");
                false
            }
            Err(_) => false,
        }
    }

    async fn read_log(
        &self,
        job: i64,
        attempt: u32,
        offset: u64,
        limit: u64,
    ) -> std::io::Result<(Vec<u8>, u64)> {
        read_from(&self.log_path(job, attempt), offset, limit).await
    }

    async fn log_tail(&self, job: i64, attempt: u32, max: u64) -> std::io::Result<(String, u64)> {
        read_tail(&self.log_path(job, attempt), max).await
    }
}

/// Moves an ended job's checkpoint folder to `target` (in a job folder of
/// the server's): a link in its place is refused, never followed, and so
/// is a `target` that already holds something. Moved before (an earlier
/// start of the same attempt, or an earlier attempt), it is where it
/// should be. Its files are given to the attempt's user after, as every
/// attempt's checkpoints are.
fn move_checkpoints(source: &Path, target: &Path) -> std::io::Result<()> {
    let meta = match std::fs::symlink_metadata(source) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return match std::fs::symlink_metadata(target) {
                Ok(moved) if moved.is_dir() => Ok(()),
                _ => Err(std::io::Error::new(
                    e.kind(),
                    "they are gone from its folder",
                )),
            };
        }
        Err(e) => return Err(e),
    };
    if !meta.is_dir() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            "they are not a folder",
        ));
    }
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)?;
    }
    // An empty folder made by an earlier try goes; one that holds files
    // (or a link) is refused by the rename.
    match std::fs::remove_dir(target) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e),
    }
    std::fs::rename(source, target)
}

/// What a refusal to start more says when every job uid is taken.
fn full(range: users::UidRange) -> String {
    format!(
        "all {} job uids ({range}) are in use; widen job_uids to run more jobs at once",
        range.count()
    )
}

/// `pid:start` back into its parts.
fn parse_handle(handle: &str) -> Option<(i32, i64)> {
    let (pid, start) = handle.split_once(':')?;
    Some((pid.parse().ok()?, start.parse().ok()?))
}

/// The shim's exit record in the port's words.
fn ending(exit: shim::Exit) -> Ending {
    Ending {
        reason: exit.reason,
        exit_code: exit.exit_code,
        signal: exit.signal,
        message: exit.message,
        out_of_memory: exit.usage.is_some_and(|u| u.oom_kills > 0),
        usage: exit.usage,
    }
}

/// The folders of a PATH that a job's user can pass through.
pub(crate) fn reachable_path(path: &str) -> String {
    path.split(':')
        .filter(|d| !d.is_empty() && users::check_reachable(Path::new(d)).is_ok())
        .collect::<Vec<_>>()
        .join(":")
}

fn read_launch(dir: &Path) -> Option<shim::Launch> {
    let text = std::fs::read(dir.join(shim::LAUNCH_FILE)).ok()?;
    serde_json::from_slice::<shim::Launch>(&text).ok()
}

/// The last `max` bytes of a log (from a line start where one is near) as
/// text, and the log's size. A log not yet written reads as empty.
pub async fn read_tail(path: &Path, max: u64) -> std::io::Result<(String, u64)> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut file = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((String::new(), 0)),
        Err(e) => return Err(e),
    };
    let size = file.metadata().await?.len();
    let start = size.saturating_sub(max);
    file.seek(std::io::SeekFrom::Start(start)).await?;
    let mut bytes = Vec::with_capacity((size - start) as usize);
    file.take(size - start).read_to_end(&mut bytes).await?;
    let mut text = &bytes[..];
    if start > 0
        && let Some(newline) = text.iter().position(|b| *b == b'\n')
    {
        text = &text[newline + 1..];
    }
    Ok((String::from_utf8_lossy(text).into_owned(), size))
}

/// Up to `limit` bytes of a log from `offset`, and the log's size.
pub async fn read_from(path: &Path, offset: u64, limit: u64) -> std::io::Result<(Vec<u8>, u64)> {
    use tokio::io::{AsyncReadExt, AsyncSeekExt};
    let mut file = match tokio::fs::File::open(path).await {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok((Vec::new(), 0)),
        Err(e) => return Err(e),
    };
    let size = file.metadata().await?.len();
    if offset >= size {
        return Ok((Vec::new(), size));
    }
    file.seek(std::io::SeekFrom::Start(offset)).await?;
    let want = (size - offset).min(limit);
    let mut bytes = Vec::with_capacity(want as usize);
    file.take(want).read_to_end(&mut bytes).await?;
    Ok((bytes, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_handle_is_the_process_and_its_start() {
        assert_eq!(parse_handle("1234:987654"), Some((1234, 987654)));
        assert_eq!(parse_handle("gpu-job-7-0"), None);
        assert_eq!(parse_handle("12:x"), None);
    }

    #[test]
    fn kept_checkpoints_move_whole_and_a_link_is_never_followed() {
        let dir = tempfile::tempdir().unwrap();
        let from = dir.path().join("1/checkpoints");
        std::fs::create_dir_all(from.join("epoch-3")).unwrap();
        std::fs::write(from.join("epoch-3/model.pt"), b"weights").unwrap();
        // An empty folder from an earlier try is no obstacle.
        let to = dir.path().join("2/checkpoints");
        std::fs::create_dir_all(&to).unwrap();
        move_checkpoints(&from, &to).unwrap();
        assert_eq!(
            std::fs::read(to.join("epoch-3/model.pt")).unwrap(),
            b"weights"
        );
        assert!(!from.exists());
        // Moved before (an earlier start): where they should be.
        move_checkpoints(&from, &to).unwrap();
        assert_eq!(
            std::fs::read(to.join("epoch-3/model.pt")).unwrap(),
            b"weights"
        );
        // Gone: said so.
        let gone = move_checkpoints(&from, &dir.path().join("3/checkpoints")).unwrap_err();
        assert!(gone.to_string().contains("gone"), "{gone}");
        // A link in their place is refused, and so is a target that holds
        // something (or is a link).
        let secret = dir.path().join("secret");
        std::fs::create_dir_all(&secret).unwrap();
        let linked = dir.path().join("4/checkpoints");
        std::fs::create_dir_all(linked.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&secret, &linked).unwrap();
        assert!(move_checkpoints(&linked, &dir.path().join("5/checkpoints")).is_err());
        assert!(secret.exists() && !dir.path().join("5/checkpoints").exists());
        let other = dir.path().join("6/checkpoints");
        std::fs::create_dir_all(&other).unwrap();
        assert!(
            move_checkpoints(&other, &to).is_err(),
            "the target holds files"
        );
        assert!(
            move_checkpoints(&other, &linked).is_err(),
            "the target is a link"
        );
        assert!(other.is_dir() && secret.read_dir().unwrap().next().is_none());
    }
}
