//! How the local executor holds each job to the CPUs and memory its spec
//! asks for (`job_limits`): a control group per job, found and prepared
//! here once, at the server's start.

use trainyard_jobs::cgroups::{self, Hierarchy};
use trainyard_jobs::users::{self, JobUser, UidRange};

use crate::config::{Config, ConfigError, JobLimits};

/// Where job groups are made, or None where limits are not enforced (said
/// in the log). `auto` falls back to none with the reason; `cgroup` stops
/// the start instead. `job_users`: the uids jobs run as, with which joining
/// a group is tried.
pub fn decide(
    config: &Config,
    job_users: Option<UidRange>,
) -> Result<Option<Hierarchy>, ConfigError> {
    let named = match config.job_limits {
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
    match find().and_then(|hierarchy| {
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
        Err(why) if named => Err(ConfigError(format!("job_limits: {why}"))),
        Err(why) => {
            tracing::warn!("jobs are not held to their CPUs and memory (job_limits = auto): {why}");
            Ok(None)
        }
    }
}

fn find() -> Result<Hierarchy, String> {
    let read =
        |path: &str| std::fs::read_to_string(path).map_err(|e| format!("cannot read {path}: {e}"));
    let own = read("/proc/self/cgroup")?;
    let mounts = read("/proc/self/mountinfo")?;
    let located = cgroups::locate(&own, &mounts, cgroups::v2_controllers)?;
    cgroups::prepare(located)
}
