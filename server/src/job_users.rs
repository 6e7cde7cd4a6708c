//! Who the local executor's jobs run as (`job_uids`), and the data folder
//! laid out for it: with a uid per job, a job reaches its own folder, the
//! shared datasets and Python environments, and nothing else of the server.

use std::path::Path;

use trainyard_jobs::users::{self, DEFAULT_RANGE, UidRange};

use crate::config::{Config, ConfigError, JobUids, sqlite_path};

/// The uids jobs will run as, or None for the server's own user (said in
/// the log, louder where people sign in). Without sign-in `auto` falls
/// back to the server's user, with the reason. A range asked for by name,
/// and `auto` where people sign in, stop the start instead: there a job of
/// one person must never read another's files or the database because a
/// folder's mode was off. Only `none`, said on purpose, runs them shared.
pub fn decide(config: &Config) -> Result<Option<UidRange>, ConfigError> {
    let sign_in = config.auth.oidc.is_some();
    let refuse = |why: &str| {
        ConfigError(format!(
            "job_uids: {why}. With sign-in on, jobs never fall back to the server's own user \
             (they could read the database and everyone's files); mend this, or set \
             job_uids = none to share this server's user among people who trust each other"
        ))
    };
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
    match check(config, range) {
        Ok(()) => {
            tracing::info!(uids = %range, "each running job runs as a uid of its own");
            Ok(Some(range))
        }
        Err(why) if named => Err(ConfigError(format!("job_uids: {why}"))),
        Err(why) if sign_in => Err(refuse(&format!("job_uids = auto, and {why}"))),
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Overrides, load_from};

    fn config(data_dir: &Path, sign_in: bool) -> Config {
        let mut vars = vec![
            ("TRAINYARD_JOB_UIDS", "auto".to_owned()),
            ("TRAINYARD_DATA_DIR", data_dir.display().to_string()),
            (
                "TRAINYARD_VENV_DIR",
                data_dir.join("venvs").display().to_string(),
            ),
        ];
        if sign_in {
            vars.push(("TRAINYARD_OIDC_ISSUER_URL", "https://id.example.edu".into()));
            vars.push(("TRAINYARD_OIDC_CLIENT_ID", "trainyard".into()));
        }
        let vars: Vec<(String, String)> =
            vars.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        load_from(None, &Overrides::default(), &vars).unwrap()
    }

    /// A data folder that other uids cannot reach: as root, `auto` cannot
    /// give jobs uids of their own there; as anyone else it never can.
    #[test]
    fn auto_never_falls_back_to_the_servers_user_where_people_sign_in() {
        let closed = tempfile::tempdir().unwrap();
        users::set_mode(closed.path(), 0o700).unwrap();
        let data = closed.path().join("data");
        let error = decide(&config(&data, true)).unwrap_err();
        assert!(error.0.starts_with("job_uids: "), "{error}");
        assert!(error.0.contains("sign-in"), "{error}");
        assert!(
            error.0.contains("job_uids = none"),
            "the fix is named: {error}"
        );
        // Without sign-in the one person using it is told, and it starts.
        assert_eq!(decide(&config(&data, false)).unwrap(), None);
    }
}
