//! Who the local executor's jobs run as (`job_uids`), and the data folder
//! laid out for it: with a uid per job, a job reaches its own folder, the
//! shared datasets and Python environments, and nothing else of the server.

use std::path::Path;

use trainyard_jobs::users::{self, DEFAULT_RANGE, UidRange};

use crate::config::{Config, ConfigError, JobUids, sqlite_path};

/// The uids jobs will run as, or None for the server's own user (said in
/// the log, louder where people sign in). `auto` falls back to the
/// server's user, with the reason, where a range asked for by name stops
/// the start.
pub fn decide(config: &Config) -> Result<Option<UidRange>, ConfigError> {
    let shared = |why: &str| {
        let text = format!(
            "jobs of the local executor run as this server's own user and can read its data folder (the database, artifacts, other jobs' files): {why}"
        );
        if config.auth.oidc.is_some() {
            tracing::warn!(
                "{text}; with sign-in on, share this machine only among people who trust each other (see docs/jobs.md)"
            );
        } else {
            tracing::info!("{text}");
        }
    };
    let (range, named) = match config.job_uids {
        JobUids::ServerUser => {
            shared("job_uids = none");
            return Ok(None);
        }
        JobUids::Auto if !users::is_root() => {
            shared("giving each job a uid of its own needs root");
            return Ok(None);
        }
        JobUids::Auto => (DEFAULT_RANGE, false),
        JobUids::Range(range) => (range, true),
    };
    match check(config, range) {
        Ok(()) => {
            tracing::info!(uids = %range, "each running job runs as a uid of its own");
            Ok(Some(range))
        }
        Err(why) if named => Err(ConfigError(format!("job_uids: {why}"))),
        Err(why) => {
            shared(&format!("job_uids = auto, and {why}"));
            Ok(None)
        }
    }
}

/// Whether jobs can run as `range` here; Err says why not and what to do.
fn check(config: &Config, range: UidRange) -> Result<(), String> {
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
        ("data_dir", &config.data_dir),
        ("venv_dir", &config.venv_dir),
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
/// server's to read. (The jobs service lays out its own folders.)
pub fn close_data_folder(config: &Config) -> Result<(), ConfigError> {
    let fail = |path: &Path, e: std::io::Error| {
        ConfigError(format!(
            "job_uids: cannot close {} to jobs: {e}",
            path.display()
        ))
    };
    users::set_mode(&config.data_dir, 0o711).map_err(|e| fail(&config.data_dir, e))?;
    let artifacts = config.data_dir.join("artifacts");
    std::fs::create_dir_all(&artifacts)
        .and_then(|()| users::set_mode(&artifacts, 0o700))
        .map_err(|e| fail(&artifacts, e))?;
    if let Some(db) = sqlite_path(&config.database_url) {
        for suffix in ["", "-wal", "-shm", "-journal"] {
            let mut name = db.clone().into_os_string();
            name.push(suffix);
            let path = std::path::PathBuf::from(name);
            match users::set_mode(&path, 0o600) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(fail(&path, e)),
            }
        }
    }
    Ok(())
}
