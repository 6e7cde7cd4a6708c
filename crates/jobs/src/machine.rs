//! The local executor's set-up on this machine, decided once at the
//! server's start: who jobs run as (`job_uids`), how they are held to their
//! CPUs and memory (`job_limits`), the data folder closed to them, and the
//! GPUs this machine offers. The server reads the settings; what they mean
//! here is the executor's business.

use std::path::{Path, PathBuf};

use crate::cgroups::{self, Hierarchy};
use crate::users::{self, DEFAULT_RANGE, JobUser, UidRange};

/// Who the local executor's jobs run as (`job_uids`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobUids {
    /// A uid of the range per job when the server runs as root, and the
    /// data folder can be laid out for it; otherwise as the server's user.
    Auto,
    /// As the server's own user.
    ServerUser,
    /// A uid of this range per job; the server must run as root.
    Range(UidRange),
}

/// How jobs are held to their CPUs and memory (`job_limits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobLimits {
    /// With a control group per job where the server can make them.
    Auto,
    /// With a control group per job; the server does not start without.
    Cgroup,
    /// Not enforced.
    None,
}

/// The settings the local executor's set-up reads.
#[derive(Debug, Clone)]
pub struct MachineSettings {
    pub job_uids: JobUids,
    pub job_limits: JobLimits,
    /// People sign in (an OpenID Provider is set): jobs never fall back to
    /// the server's own user unless told so by name.
    pub sign_in: bool,
    pub data_dir: PathBuf,
    pub venv_dir: PathBuf,
    /// The SQLite database file, where the database is one.
    pub database_file: Option<PathBuf>,
}

/// The uids jobs will run as, or None for the server's own user (said in
/// the log, louder where people sign in). Without sign-in `auto` falls
/// back to the server's user, with the reason. A range asked for by name,
/// and `auto` where people sign in, stop the start instead (Err, naming
/// `job_uids`): there a job of one person must never read another's files
/// or the database because a folder's mode was off. Only `none`, said on
/// purpose, runs them shared.
pub fn decide_users(settings: &MachineSettings) -> Result<Option<UidRange>, String> {
    let sign_in = settings.sign_in;
    let refuse = |why: &str| {
        format!(
            "job_uids: {why}. With sign-in on, jobs never fall back to the server's own user \
             (they could read the database and everyone's files); mend this, or set \
             job_uids = none to share this server's user among people who trust each other"
        )
    };
    let shared = |why: &str| {
        let text = format!(
            "jobs of the local executor run as this server's own user and can read its data folder (the database, artifacts, other jobs' files): {why}"
        );
        if sign_in {
            tracing::warn!(
                "{text}; with sign-in on, share this machine only among people who trust each other (see docs/jobs.md)"
            );
        } else {
            tracing::info!("{text}");
        }
    };
    let (range, named) = match settings.job_uids {
        JobUids::ServerUser => {
            shared("job_uids = none");
            return Ok(None);
        }
        JobUids::Auto if !users::is_root() => {
            let why = "giving each job a uid of its own needs root";
            if sign_in {
                return Err(refuse(&format!(
                    "{why}, and this server does not run as root"
                )));
            }
            shared(why);
            return Ok(None);
        }
        JobUids::Auto => (DEFAULT_RANGE, false),
        JobUids::Range(range) => (range, true),
    };
    match check_users(settings, range) {
        Ok(()) => {
            tracing::info!(uids = %range, "each running job runs as a uid of its own");
            Ok(Some(range))
        }
        Err(why) if named => Err(format!("job_uids: {why}")),
        Err(why) if sign_in => Err(refuse(&format!("job_uids = auto, and {why}"))),
        Err(why) => {
            shared(&format!("job_uids = auto, and {why}"));
            Ok(None)
        }
    }
}

/// Whether jobs can run as `range` here; Err says why not and what to do.
fn check_users(settings: &MachineSettings, range: UidRange) -> Result<(), String> {
    if !users::is_root() {
        return Err(format!(
            "running jobs as uids {range} needs root; run the server as root, or set job_uids = none"
        ));
    }
    let passwd = std::fs::read_to_string("/etc/passwd").unwrap_or_default();
    if let Some((name, uid)) = users::accounts_in(range, &passwd).first() {
        return Err(format!(
            "uid {uid} of {range} belongs to the account `{name}`; choose a range that no account uses"
        ));
    }
    for (setting, folder) in [
        ("data_dir", &settings.data_dir),
        ("venv_dir", &settings.venv_dir),
    ] {
        let folder = std::path::absolute(folder).map_err(|e| format!("{setting}: {e}"))?;
        if let Some(parent) = folder.parent() {
            users::check_reachable(parent).map_err(|why| {
                format!(
                    "{setting}: {why}, so jobs could not reach their folders; allow it (chmod o+x), choose another {setting}, or set job_uids = none"
                )
            })?;
        }
    }
    Ok(())
}

/// Closes what is the server's alone: the data folder can be passed
/// through but not listed, and the database and artifacts are the
/// server's to read. (The executor lays out its own folders.)
pub fn close_data_folder(settings: &MachineSettings) -> Result<(), String> {
    let fail = |path: &Path, e: std::io::Error| {
        format!("job_uids: cannot close {} to jobs: {e}", path.display())
    };
    let data_dir = &settings.data_dir;
    users::set_mode(data_dir, 0o711).map_err(|e| fail(data_dir, e))?;
    let artifacts = data_dir.join("artifacts");
    std::fs::create_dir_all(&artifacts)
        .and_then(|()| users::set_mode(&artifacts, 0o700))
        .map_err(|e| fail(&artifacts, e))?;
    if let Some(db) = &settings.database_file {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = db.clone().into_os_string();
            name.push(suffix);
            let path = PathBuf::from(name);
            match users::set_mode(&path, 0o600) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(fail(&path, e)),
            }
        }
    }
    Ok(())
}

/// Where job groups are made, or None where limits are not enforced (said
/// in the log). `auto` falls back to none with the reason; `cgroup` stops
/// the start instead (Err, naming `job_limits`). `job_users`: the uids jobs
/// run as, with which joining a group is tried.
pub fn decide_limits(
    settings: &MachineSettings,
    job_users: Option<UidRange>,
) -> Result<Option<Hierarchy>, String> {
    let named = match settings.job_limits {
        JobLimits::None => {
            tracing::info!("job_limits = none: jobs are not held to their CPUs and memory");
            return Ok(None);
        }
        JobLimits::Auto if !users::is_root() => {
            tracing::info!(
                "jobs are not held to their CPUs and memory: making control groups needs root (job_limits = auto)"
            );
            return Ok(None);
        }
        JobLimits::Auto => false,
        JobLimits::Cgroup => true,
    };
    let user = job_users.map(|range| JobUser::new(range.first));
    match find_hierarchy().and_then(|hierarchy| {
        cgroups::check_join(&hierarchy, user)?;
        Ok(hierarchy)
    }) {
        Ok(hierarchy) => {
            tracing::info!(
                cgroups = %hierarchy.describe(),
                "each job is held to its CPUs and memory by a control group of its own"
            );
            Ok(Some(hierarchy))
        }
        Err(why) if named => Err(format!("job_limits: {why}")),
        Err(why) => {
            tracing::warn!("jobs are not held to their CPUs and memory (job_limits = auto): {why}");
            Ok(None)
        }
    }
}

fn find_hierarchy() -> Result<Hierarchy, String> {
    let read =
        |path: &str| std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"));
    let own = read("/proc/self/cgroup")?;
    let mounts = read("/proc/self/mountinfo")?;
    let located = cgroups::locate(&own, &mounts, cgroups::v2_controllers)?;
    cgroups::prepare(located)
}

/// This machine's GPUs, as jobs will see them: NVML's where a driver
/// answers, else `simulated` ones (said in the log, with each GPU).
pub fn gpus(simulated: u32, node: &str) -> trainyard_nvml::Inventory {
    let inventory = trainyard_nvml::discover(simulated, node);
    match inventory.source {
        trainyard_nvml::Source::Nvml => {
            tracing::info!(gpus = inventory.gpus.len(), node = %node, "GPUs found by NVML")
        }
        trainyard_nvml::Source::Simulated => tracing::info!(
            gpus = inventory.gpus.len(),
            node = %node,
            why = inventory.note.as_deref().unwrap_or(""),
            "offering simulated GPUs (simulated_gpus)"
        ),
    }
    for gpu in &inventory.gpus {
        tracing::info!(
            index = gpu.index,
            uuid = %gpu.uuid,
            name = %gpu.name,
            memory = %trainyard_domain::format_bytes(gpu.memory_total_bytes),
            "GPU"
        );
    }
    inventory
}

/// This machine's name, as its node: the kernel's hostname, else `local`.
pub fn node_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_owned())
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "local".to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(data_dir: &Path, sign_in: bool) -> MachineSettings {
        MachineSettings {
            job_uids: JobUids::Auto,
            job_limits: JobLimits::None,
            sign_in,
            data_dir: data_dir.to_path_buf(),
            venv_dir: data_dir.join("venvs"),
            database_file: None,
        }
    }

    /// A data folder that other uids cannot reach: as root, `auto` cannot
    /// give jobs uids of their own there; as anyone else it never can.
    #[test]
    fn auto_never_falls_back_to_the_servers_user_where_people_sign_in() {
        let closed = tempfile::tempdir().unwrap();
        users::set_mode(closed.path(), 0o700).unwrap();
        let data = closed.path().join("data");
        let error = decide_users(&settings(&data, true)).unwrap_err();
        assert!(error.starts_with("job_uids: "), "{error}");
        assert!(error.contains("sign-in"), "{error}");
        assert!(
            error.contains("job_uids = none"),
            "the fix is named: {error}"
        );
        // Without sign-in the one person using it is told, and it starts.
        assert_eq!(decide_users(&settings(&data, false)).unwrap(), None);
    }

    #[test]
    fn limits_said_none_are_none() {
        let dir = tempfile::tempdir().unwrap();
        assert!(
            decide_limits(&settings(dir.path(), false), None)
                .unwrap()
                .is_none()
        );
    }
}
