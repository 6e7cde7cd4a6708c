//! What one attempt looks like in Kubernetes: a `batch/v1` Job of one pod,
//! pinned to the node Trainyard placed it on, and a Secret (owned by the
//! Job) that holds the attempt's tracking token.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{
    Job, JobSpec, PodFailurePolicy, PodFailurePolicyOnPodConditionsPattern, PodFailurePolicyRule,
};
use k8s_openapi::api::core::v1::{
    Affinity, Capabilities, Container, EmptyDirVolumeSource, EnvVar, EnvVarSource,
    LocalObjectReference, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource,
    PodSecurityContext, PodSpec, PodTemplateSpec, ResourceRequirements, SeccompProfile, Secret,
    SecretKeySelector, SecurityContext, Toleration, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use trainyard_jobs::executor::Attempt;

use crate::KubeSettings;

/// Every object Trainyard makes carries this label.
pub const MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGER: &str = "trainyard";
pub const JOB_LABEL: &str = "trainyard.dev/job";
pub const ATTEMPT_LABEL: &str = "trainyard.dev/attempt";
pub const RUN_ANNOTATION: &str = "trainyard.dev/run";
pub const NAME_ANNOTATION: &str = "trainyard.dev/job-name";
/// On a checkpoint claim: when its job was submitted (base 36 ms), which
/// tells apart the same job id of two Trainyards sharing a namespace.
pub const SUBMITTED_LABEL: &str = "trainyard.dev/submitted";
/// On a checkpoint claim a job took to resume from: the job it was made
/// for first.
pub const RESUMED_FROM_ANNOTATION: &str = "trainyard.dev/resumed-from";
/// The container that runs the job's command.
pub const MAIN: &str = "main";
/// The init container that fetches the job's files.
pub const FILES: &str = "files";
/// Where the job's files are, and its working folder.
pub const WORKSPACE: &str = "/workspace";
/// Where its checkpoints are kept (`TRAINYARD_CHECKPOINT_DIR`).
pub const CHECKPOINTS: &str = "/checkpoints";
/// The one variable that is a secret: it goes in the Secret, never the spec.
pub const TOKEN_VAR: &str = "MLFLOW_TRACKING_TOKEN";
/// The uid and gid jobs run as (images' own root user is refused).
pub const JOB_UID: i64 = 1000;
/// A finished Job is removed by Kubernetes after a day if Trainyard has
/// not removed it first (it does once it recorded the end).
const FINISHED_TTL_SECS: i32 = 24 * 3600;

/// What the main container runs: the job's requirements.txt installed
/// into an environment of its own (over the image's packages, so that a
/// CUDA image's PyTorch is kept), then the job's command (`$1`), as the
/// local executor does.
pub const RUN: &str = r#"set -e
if [ -f requirements.txt ]; then
  echo "trainyard: installing requirements.txt"
  python3 -m venv --system-site-packages /tmp/trainyard-venv
  /tmp/trainyard-venv/bin/python -m pip install --disable-pip-version-check --no-input -r requirements.txt
  PATH="/tmp/trainyard-venv/bin:$PATH"
  export PATH
fi
exec /bin/sh -c "$1"
"#;

/// The Job (and Secret) name of an attempt:
/// `trainyard-<job>-<attempt>-<first 8 characters of its run id>`. The same
/// attempt always gets the same name, so it is never made twice; the run's
/// part (random) keeps apart the Jobs of two Trainyards, or of one
/// reinstalled on a new database, that share a namespace.
pub fn job_name(job: i64, attempt: u32, run: Option<&str>) -> String {
    let mut name = format!("trainyard-{job}-{attempt}");
    let tag: String = run
        .unwrap_or_default()
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .take(8)
        .collect::<String>()
        .to_ascii_lowercase();
    if !tag.is_empty() {
        name.push('-');
        name.push_str(&tag);
    }
    name
}

/// The name of a job's current attempt.
pub fn attempt_name(job: &trainyard_domain::job::Job) -> String {
    job_name(job.id, job.attempt, job.run_id.as_deref())
}

/// The name of a job's checkpoint claim, the same for all its attempts:
/// `trainyard-<job>-<when it was submitted, base 36>-checkpoints`, so that
/// two Trainyards sharing a namespace never share one.
pub fn claim_name(job: &trainyard_domain::job::Job) -> String {
    format!("trainyard-{}-{}-checkpoints", job.id, submitted_tag(job))
}

/// When a job was submitted, in milliseconds, base 36.
fn submitted_tag(job: &trainyard_domain::job::Job) -> String {
    let mut when = job.created_at.unsigned_abs();
    let mut tag = Vec::new();
    loop {
        tag.push(b"0123456789abcdefghijklmnopqrstuvwxyz"[(when % 36) as usize]);
        when /= 36;
        if when == 0 {
            break;
        }
    }
    tag.reverse();
    String::from_utf8_lossy(&tag).into_owned()
}

/// The labels of the checkpoint claim a job holds now: the one made for
/// it, or the one it took to resume from, relabelled as its own.
fn claim_labels(job: &trainyard_domain::job::Job) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (JOB_LABEL.to_owned(), job.id.to_string()),
        (SUBMITTED_LABEL.to_owned(), submitted_tag(job)),
    ])
}

/// The label selector of the checkpoint claim `job` holds.
pub fn claim_selector(job: &trainyard_domain::job::Job) -> String {
    claim_labels(job)
        .into_iter()
        .map(|(key, value)| format!("{key}={value}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The merge patch by which `job` takes the checkpoint claim of `from`,
/// which it resumes from: relabelled as its own (its name stays: a claim
/// cannot be renamed, and its volume stays bound to it).
pub fn take_claim_patch(
    job: &trainyard_domain::job::Job,
    from: &trainyard_domain::job::Job,
) -> serde_json::Value {
    serde_json::json!({
        "metadata": {
            "labels": claim_labels(job),
            "annotations": {
                NAME_ANNOTATION: job.name,
                RESUMED_FROM_ANNOTATION: from.id.to_string(),
            },
        }
    })
}

/// A job's checkpoint claim (of `class`, `gib` GiB), made at its first
/// start and kept until it ends for good; labelled as the job's, owned by
/// none of its attempts.
pub fn checkpoint_claim(
    job: &trainyard_domain::job::Job,
    class: &str,
    gib: u64,
) -> PersistentVolumeClaim {
    PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(claim_name(job)),
            labels: Some(claim_labels(job)),
            annotations: Some(BTreeMap::from([(
                NAME_ANNOTATION.to_owned(),
                job.name.clone(),
            )])),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".to_owned()]),
            storage_class_name: Some(class.to_owned()),
            resources: Some(VolumeResourceRequirements {
                requests: Some(quantities(&[("storage", format!("{gib}Gi"))])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// The labels that tie an object to a job's attempt.
pub fn labels(job: i64, attempt: u32) -> BTreeMap<String, String> {
    BTreeMap::from([
        (MANAGED_BY.to_owned(), MANAGER.to_owned()),
        (JOB_LABEL.to_owned(), job.to_string()),
        (ATTEMPT_LABEL.to_owned(), attempt.to_string()),
    ])
}

/// The label selector of everything Trainyard makes.
pub fn managed_selector() -> String {
    format!("{MANAGED_BY}={MANAGER}")
}

/// Whether an object carries the label of everything Trainyard makes.
pub fn is_managed(object: &impl kube::ResourceExt) -> bool {
    object.labels().get(MANAGED_BY).map(String::as_str) == Some(MANAGER)
}

fn hardened() -> SecurityContext {
    SecurityContext {
        run_as_non_root: Some(true),
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            drop: Some(vec!["ALL".to_owned()]),
            add: None,
        }),
        seccomp_profile: Some(SeccompProfile {
            type_: "RuntimeDefault".to_owned(),
            localhost_profile: None,
        }),
        ..Default::default()
    }
}

fn plain(name: &str, value: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: Some(value.to_owned()),
        value_from: None,
    }
}

fn from_secret(name: &str, secret: &str) -> EnvVar {
    EnvVar {
        name: name.to_owned(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: secret.to_owned(),
                key: name.to_owned(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
    }
}

fn quantities(pairs: &[(&str, String)]) -> BTreeMap<String, Quantity> {
    pairs
        .iter()
        .map(|(k, v)| ((*k).to_owned(), Quantity(v.clone())))
        .collect()
}

/// The GPUs NVIDIA's container runtime gives a container.
const NVIDIA_DEVICES_VAR: &str = "NVIDIA_VISIBLE_DEVICES";

/// The Job of an attempt. `now_ms`: when it is made, for the deadline.
///
/// `claim`: the checkpoint claim it mounts (None: a folder of the
/// attempt's own).
pub fn job(settings: &KubeSettings, attempt: &Attempt, now_ms: i64, claim: Option<&str>) -> Job {
    let record = &attempt.record.job;
    let name = attempt_name(record);
    let labels = labels(record.id, record.attempt);
    let mut annotations = BTreeMap::from([(NAME_ANNOTATION.to_owned(), record.name.clone())]);
    if let Some(run) = &record.run_id {
        annotations.insert(RUN_ANNOTATION.to_owned(), run.clone());
    }

    // Trainyard's variables, then the executor's own (which win): where
    // Trainyard is, and the token from the Secret.
    let mut env: Vec<EnvVar> = attempt
        .env
        .iter()
        .filter(|(k, _)| {
            ![TOKEN_VAR, "MLFLOW_TRACKING_URI", NVIDIA_DEVICES_VAR].contains(&k.as_str())
        })
        .map(|(k, v)| plain(k, v))
        .collect();
    env.push(plain("MLFLOW_TRACKING_URI", &settings.tracking_url));
    env.push(plain("HOME", "/tmp"));
    env.push(plain("TRAINYARD_CHECKPOINT_DIR", CHECKPOINTS));
    let has_token = attempt.env.contains_key(TOKEN_VAR);
    if has_token {
        env.push(from_secret(TOKEN_VAR, &name));
    }
    if record.gpus == 0 {
        // NVIDIA's container runtime gives a container the GPUs this names,
        // asked for or not, and CUDA images name all of them: a job without
        // GPUs gets none (with GPUs, the device plugin names its own).
        env.push(plain(NVIDIA_DEVICES_VAR, "void"));
    }

    let gpus = record.gpus.to_string();
    let cpu = format!("{}m", record.cpu_millis.max(1));
    let memory = format!("{}Mi", record.memory_mib.max(1));
    let mut limits = vec![("cpu", cpu.clone()), ("memory", memory.clone())];
    if record.gpus > 0 {
        limits.push((settings.gpu_resource.as_str(), gpus));
    }
    // Requests equal limits: the job gets what it asked for, no more. Its
    // disk is limited but not asked for: Trainyard does not place by disk.
    let mut requests = limits.clone();
    let disk = settings.disk_quota_bytes.map(bytes_quantity);
    if let Some(disk) = &disk {
        limits.push(("ephemeral-storage", disk.clone()));
        requests.push(("ephemeral-storage", "0".to_owned()));
    }
    let workspace = VolumeMount {
        name: "workspace".to_owned(),
        mount_path: WORKSPACE.to_owned(),
        ..Default::default()
    };
    let checkpoints = VolumeMount {
        name: "checkpoints".to_owned(),
        mount_path: CHECKPOINTS.to_owned(),
        ..Default::default()
    };
    let main = Container {
        name: MAIN.to_owned(),
        image: Some(
            record
                .spec
                .image
                .clone()
                .unwrap_or_else(|| settings.image.clone()),
        ),
        command: Some(vec![
            "/bin/sh".to_owned(),
            "-c".to_owned(),
            RUN.to_owned(),
            "trainyard-job".to_owned(),
            attempt.command.clone(),
        ]),
        working_dir: Some(WORKSPACE.to_owned()),
        env: Some(env),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&requests)),
            limits: Some(quantities(&limits)),
            ..Default::default()
        }),
        security_context: Some(hardened()),
        volume_mounts: Some(vec![workspace.clone(), checkpoints]),
        ..Default::default()
    };
    // The job's files and datasets, fetched with its own token by
    // Trainyard's image (`trainyard job-files`).
    let needs_files = attempt.files.is_some() || !attempt.datasets.is_empty();
    let init = (needs_files && has_token).then(|| Container {
        name: FILES.to_owned(),
        image: Some(settings.trainyard_image.clone()),
        command: Some(vec![
            "trainyard".to_owned(),
            "job-files".to_owned(),
            "--into".to_owned(),
            WORKSPACE.to_owned(),
        ]),
        env: Some(vec![
            plain("TRAINYARD_JOB_ID", &record.id.to_string()),
            plain("MLFLOW_TRACKING_URI", &settings.tracking_url),
            from_secret(TOKEN_VAR, &name),
        ]),
        resources: Some(ResourceRequirements {
            requests: Some(quantities(&[
                ("cpu", "100m".to_owned()),
                ("memory", "128Mi".to_owned()),
            ])),
            limits: Some(quantities(&[
                ("cpu", "1".to_owned()),
                ("memory", "512Mi".to_owned()),
            ])),
            ..Default::default()
        }),
        security_context: Some(hardened()),
        volume_mounts: Some(vec![workspace]),
        ..Default::default()
    });

    let deadline_secs = ((attempt.deadline_ms - now_ms) / 1000).max(1);
    let tolerations: Vec<Toleration> = settings.tolerations.clone();
    Job {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            labels: Some(labels.clone()),
            annotations: Some(annotations.clone()),
            ..Default::default()
        },
        spec: Some(JobSpec {
            // Trainyard retries, with a new attempt and run.
            backoff_limit: Some(0),
            active_deadline_seconds: Some(deadline_secs),
            ttl_seconds_after_finished: Some(FINISHED_TTL_SECS),
            // A pod that was disrupted (node lost, evicted, preempted) fails
            // the Job at once, so that Trainyard places the attempt again,
            // on a node that is there, without spending a retry.
            pod_failure_policy: Some(PodFailurePolicy {
                rules: vec![PodFailurePolicyRule {
                    action: "FailJob".to_owned(),
                    on_exit_codes: None,
                    on_pod_conditions: Some(vec![PodFailurePolicyOnPodConditionsPattern {
                        type_: "DisruptionTarget".to_owned(),
                        status: Some("True".to_owned()),
                    }]),
                }],
            }),
            template: PodTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels),
                    annotations: Some(annotations),
                    ..Default::default()
                }),
                spec: Some(PodSpec {
                    restart_policy: Some("Never".to_owned()),
                    automount_service_account_token: Some(false),
                    enable_service_links: Some(false),
                    termination_grace_period_seconds: Some(settings.stop_grace_secs as i64),
                    // Trainyard placed it: kube-scheduler only confirms.
                    affinity: Some(Affinity {
                        node_affinity: Some(NodeAffinity {
                            required_during_scheduling_ignored_during_execution: Some(
                                NodeSelector {
                                    node_selector_terms: vec![NodeSelectorTerm {
                                        match_fields: Some(vec![NodeSelectorRequirement {
                                            key: "metadata.name".to_owned(),
                                            operator: "In".to_owned(),
                                            values: Some(vec![attempt.node.clone()]),
                                        }]),
                                        match_expressions: None,
                                    }],
                                },
                            ),
                            preferred_during_scheduling_ignored_during_execution: None,
                        }),
                        ..Default::default()
                    }),
                    node_selector: (!settings.node_selector.is_empty())
                        .then(|| settings.node_selector.clone()),
                    tolerations: (!tolerations.is_empty()).then_some(tolerations),
                    image_pull_secrets: (!settings.image_pull_secrets.is_empty()).then(|| {
                        settings
                            .image_pull_secrets
                            .iter()
                            .map(|s| LocalObjectReference { name: s.clone() })
                            .collect()
                    }),
                    security_context: Some(PodSecurityContext {
                        run_as_non_root: Some(true),
                        run_as_user: Some(JOB_UID),
                        run_as_group: Some(JOB_UID),
                        fs_group: Some(JOB_UID),
                        // A checkpoint volume already its group's is not walked again.
                        fs_group_change_policy: Some("OnRootMismatch".to_owned()),
                        seccomp_profile: Some(SeccompProfile {
                            type_: "RuntimeDefault".to_owned(),
                            localhost_profile: None,
                        }),
                        ..Default::default()
                    }),
                    volumes: Some(vec![
                        Volume {
                            name: "workspace".to_owned(),
                            empty_dir: Some(EmptyDirVolumeSource {
                                size_limit: disk.map(Quantity),
                                ..Default::default()
                            }),
                            ..Default::default()
                        },
                        checkpoint_volume(claim),
                    ]),
                    init_containers: init.map(|c| vec![c]),
                    containers: vec![main],
                    ..Default::default()
                }),
            },
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Bytes as a quantity in the largest binary unit that holds them whole
/// (as the API would write them back).
fn bytes_quantity(bytes: u64) -> String {
    for (shift, unit) in [(40, "Ti"), (30, "Gi"), (20, "Mi"), (10, "Ki")] {
        if bytes >= 1 << shift && bytes.is_multiple_of(1 << shift) {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

/// The job's claim where it has one, else a folder of the attempt's own.
fn checkpoint_volume(claim: Option<&str>) -> Volume {
    match claim {
        Some(claim) => Volume {
            name: "checkpoints".to_owned(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.to_owned(),
                read_only: Some(false),
            }),
            ..Default::default()
        },
        None => Volume {
            name: "checkpoints".to_owned(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        },
    }
}

/// The Secret of an attempt, owned by its Job (so removed with it).
pub fn secret(
    name: &str,
    owner: OwnerReference,
    token: &str,
    labels: BTreeMap<String, String>,
) -> Secret {
    Secret {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            owner_references: Some(vec![owner]),
            ..Default::default()
        },
        string_data: Some(BTreeMap::from([(TOKEN_VAR.to_owned(), token.to_owned())])),
        type_: Some("Opaque".to_owned()),
        immutable: Some(true),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_that_resumes_takes_the_claim_by_its_labels() {
        let job = |id: i64, created_at: i64| -> trainyard_domain::job::Job {
            serde_json::from_value(serde_json::json!({
                "id": id, "name": format!("job {id}"), "state": "FAILED",
                "priority": 0, "gpus": 1, "cpu_millis": 1000, "memory_mib": 1024,
                "max_runtime_secs": 60, "retries": 0, "attempt": 0, "gpu_indices": [],
                "cancel_requested": false, "created_at": created_at,
                "spec": {"name": format!("job {id}"), "command": "x"},
            }))
            .unwrap()
        };
        let (from, next) = (job(7, 1_700_000_000_000), job(9, 1_700_000_000_001));
        let claim = checkpoint_claim(&from, "fast", 10);
        let labels = claim.metadata.labels.clone().unwrap();
        let selected = |job: &trainyard_domain::job::Job| {
            claim_selector(job).split(',').all(|pair| {
                let (key, value) = pair.split_once('=').unwrap();
                labels.get(key).map(String::as_str) == Some(value)
            })
        };
        assert!(selected(&from));
        // Another server's job 7, submitted at another time, is not it.
        assert!(!selected(&job(7, 1_700_000_000_002)));
        assert!(!selected(&next));
        let patch = take_claim_patch(&next, &from);
        assert_eq!(patch["metadata"]["labels"][JOB_LABEL], "9");
        assert_eq!(
            patch["metadata"]["labels"][SUBMITTED_LABEL],
            submitted_tag(&next)
        );
        assert_eq!(
            patch["metadata"]["annotations"][RESUMED_FROM_ANNOTATION],
            "7"
        );
        assert_eq!(claim.metadata.name.unwrap(), claim_name(&from));
    }
}
