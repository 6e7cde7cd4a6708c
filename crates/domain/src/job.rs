//! The job spec: what a user submits (as YAML, JSON or the form), and its
//! validation. Every problem is reported against its field, in words that
//! say what to do; a spec that passes is within every limit.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::{FieldError, MAX_KEY_LEN};

pub const MAX_NAME_LEN: usize = 100;
pub const MAX_COMMAND_LEN: usize = 10_000;
/// The command with its hyperparameters put in: one argument of `sh -c`,
/// which Linux holds to 128 KiB.
pub const MAX_RENDERED_COMMAND_LEN: usize = 100_000;
pub const MAX_IMAGE_LEN: usize = 500;
pub const MAX_GPUS: u32 = 64;
pub const MAX_CPUS: f64 = 256.0;
pub const MAX_MEMORY_MIB: u64 = 4 * 1024 * 1024;
pub const MAX_ENV: usize = 100;
pub const MAX_ENV_VALUE_LEN: usize = 10_000;
pub const MAX_HYPERPARAMETERS: usize = 100;
/// MLflow's limit on param values: hyperparameters are logged as params.
pub const MAX_PARAM_VALUE_LEN: usize = 6_000;
pub const MAX_RUNTIME_SECS: u64 = 30 * 24 * 3600;
pub const DEFAULT_RUNTIME_SECS: u64 = 24 * 3600;
pub const MAX_RETRIES: u32 = 10;
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = -10..=10;
pub const MAX_DATASETS: usize = 20;
pub const MAX_DATASET_NAME_LEN: usize = 100;

/// An upload: a project archive, or a named dataset, unpacked on the server.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Upload {
    pub id: String,
    /// `project` or `dataset`.
    pub kind: String,
    /// The file name of a project, the name of a dataset.
    pub name: String,
    pub files: u64,
    pub bytes: u64,
    /// Its files and folders, unpacked, its own folder included.
    #[serde(default)]
    pub entries: u64,
    pub created_at: i64,
}

/// Dataset names appear in paths (`data/<name>`): letters, digits, `-`,
/// `_` and `.`, not starting with `.`.
pub fn valid_dataset_name(name: &str) -> bool {
    (1..=MAX_DATASET_NAME_LEN).contains(&name.len())
        && !name.starts_with('.')
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Variables Trainyard sets for every job; a spec may not set them.
/// (`NVIDIA_VISIBLE_DEVICES`: NVIDIA's container runtime gives a container
/// the GPUs it names, whatever the job asked for.)
pub const RESERVED_ENV: [&str; 7] = [
    "MLFLOW_TRACKING_URI",
    "MLFLOW_TRACKING_TOKEN",
    "MLFLOW_RUN_ID",
    "MLFLOW_EXPERIMENT_ID",
    "CUDA_VISIBLE_DEVICES",
    "NVIDIA_VISIBLE_DEVICES",
    "TRAINYARD_JOB_ID",
];

/// A job as submitted.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSpec {
    pub name: String,
    /// The experiment its run goes into (created if missing); "Default" if
    /// not given.
    #[serde(default)]
    pub experiment: Option<String>,
    /// A template from the catalog, or
    #[serde(default)]
    pub template: Option<String>,
    /// a shell command, run in the job's folder.
    #[serde(default)]
    pub command: Option<String>,
    /// The container image (Kubernetes executor).
    #[serde(default)]
    pub image: Option<String>,
    /// The template's (or 1 CPU, 4Gi, no GPU) when not given.
    #[serde(default)]
    pub resources: Option<ResourceSpec>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Passed to the command (`{name}` in it, and `HP_<NAME>` variables) and
    /// logged as run params.
    #[serde(default)]
    pub hyperparameters: BTreeMap<String, ParamValue>,
    /// Like `90m`, `2h`, `1h30m`; 24h if not given.
    #[serde(default)]
    pub max_runtime: Option<String>,
    /// Further attempts after a failure or a lost node.
    #[serde(default)]
    pub retries: u32,
    #[serde(default)]
    pub priority: i32,
    /// A project archive uploaded before (its upload id): its files are
    /// unpacked into the job's folder.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub project: Option<String>,
    /// Datasets uploaded before, by name: each is at `data/<name>` in the
    /// job's folder, read-only.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub datasets: Vec<String>,
    /// The team its GPUs count against, by name, for someone in several;
    /// their first team when not given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub team: Option<String>,
    /// False: it never runs on GPUs borrowed beyond its team's quota, so it
    /// is never preempted (it may wait longer).
    #[serde(default = "yes", skip_serializing_if = "is_true")]
    pub preemptible: bool,
    /// An ended job of the same person whose checkpoints this one starts
    /// from: they move into its `TRAINYARD_CHECKPOINT_DIR` at its first
    /// start (see [`KeptCheckpoints`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resume_from: Option<i64>,
}

fn yes() -> bool {
    true
}

fn is_true(v: &bool) -> bool {
    *v
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    #[serde(default)]
    pub gpus: u32,
    #[serde(default = "one")]
    pub cpus: f64,
    /// Like `8Gi` or `512Mi`.
    #[serde(default = "default_memory")]
    pub memory: String,
}

fn one() -> f64 {
    1.0
}

fn default_memory() -> String {
    "4Gi".to_owned()
}

impl Default for ResourceSpec {
    fn default() -> Self {
        ResourceSpec {
            gpus: 0,
            cpus: one(),
            memory: default_memory(),
        }
    }
}

/// A hyperparameter value as written in the spec.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(
    untagged,
    expecting = "a hyperparameter is a number, true or false, or text (not a list, a mapping or nothing)"
)]
pub enum ParamValue {
    Bool(bool),
    Int(i64),
    Float(f64),
    Text(String),
}

impl ParamValue {
    /// A value given as text (`--set lr=0.01`), typed as YAML types a
    /// plain value: true or false, a whole number, a finite number, else
    /// the text itself.
    pub fn from_text(text: &str) -> ParamValue {
        match text {
            "true" => ParamValue::Bool(true),
            "false" => ParamValue::Bool(false),
            _ => {
                if let Ok(i) = text.parse::<i64>() {
                    ParamValue::Int(i)
                } else if let Ok(x) = text.parse::<f64>()
                    && x.is_finite()
                    && text.bytes().any(|b| b.is_ascii_digit())
                {
                    ParamValue::Float(x)
                } else {
                    ParamValue::Text(text.to_owned())
                }
            }
        }
    }
}

impl std::fmt::Display for ParamValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ParamValue::Bool(b) => write!(f, "{b}"),
            ParamValue::Int(i) => write!(f, "{i}"),
            ParamValue::Float(x) => write!(f, "{x}"),
            ParamValue::Text(s) => f.write_str(s),
        }
    }
}

/// A spec that passed validation, with its sizes in numbers.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedJob {
    pub spec: JobSpec,
    pub cpu_millis: u32,
    pub memory_mib: u64,
    pub max_runtime_secs: u64,
}

/// The checkpoints an ended job left, kept for a while so that another
/// job of its owner's may start from them (`resume_from`): a job that hit
/// its max runtime, was cancelled or failed. A job that succeeded keeps
/// none (its results belong in its run's artifacts).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeptCheckpoints {
    /// The job that left them.
    pub job: i64,
    /// Its owner, by username: the one who may resume from them.
    pub owner: Option<String>,
    /// What they held when the job ended.
    pub bytes: u64,
    /// When they are deleted, in milliseconds since the Unix epoch, unless
    /// a job resumes from them first.
    pub kept_until: i64,
}

/// A job as the API and the pages show it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Job {
    pub id: i64,
    pub name: String,
    pub state: crate::JobState,
    pub experiment_id: Option<i64>,
    pub run_id: Option<String>,
    pub template: Option<String>,
    pub priority: i32,
    pub gpus: u32,
    pub cpu_millis: u32,
    pub memory_mib: u64,
    pub max_runtime_secs: u64,
    /// Further attempts allowed after a failure.
    pub retries: u32,
    /// 0 for the first attempt.
    pub attempt: u32,
    /// The GPUs it holds while it runs (`CUDA_VISIBLE_DEVICES`).
    pub gpu_indices: Vec<u32>,
    /// The GPUs its attempt really got, where its node said so and they
    /// differ from Trainyard's pick: on Kubernetes the kubelet's device
    /// plugin chooses, and the node agent reads its choice from the
    /// kubelet's pod-resources API. See [`Job::gpus_held`].
    #[serde(default)]
    pub gpu_devices: Option<Vec<u32>>,
    /// The node its attempt was placed on, by name, from its start on
    /// (kept after it ends).
    #[serde(default)]
    pub node: Option<String>,
    /// The Kubernetes pod of its attempt, once there is one (kept after it
    /// ends); none on the local executor.
    #[serde(default)]
    pub pod: Option<String>,
    pub exit_code: Option<i32>,
    /// 1-based place in the queue while QUEUED.
    pub queue_position: Option<u32>,
    /// Why it is not running yet, in words.
    pub pending_reason: Option<String>,
    pub cancel_requested: bool,
    /// Milliseconds since the Unix epoch.
    pub created_at: i64,
    pub queued_at: Option<i64>,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub spec: JobSpec,
    /// The team its GPUs count against, by name.
    #[serde(default)]
    pub team: Option<String>,
    /// Who submitted it, by username (none for jobs from before sign-in).
    #[serde(default)]
    pub owner: Option<String>,
    /// Runs on GPUs borrowed beyond its team's quota: may be preempted.
    #[serde(default)]
    pub borrowed: bool,
}

impl Job {
    /// The node's GPUs its attempt holds: those its node reported, else
    /// Trainyard's pick.
    pub fn gpus_held(&self) -> &[u32] {
        self.gpu_devices.as_deref().unwrap_or(&self.gpu_indices)
    }
}

/// One entry of a job's timeline.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobEvent {
    pub time: i64,
    /// `submitted`, `started`, `finished`, `retried`, `cancel`, `lost` …
    pub kind: String,
    pub message: String,
}

/// Reads a size with a unit: `Ki Mi Gi Ti` (powers of 1024) or `K M G T`
/// (powers of 1000), as Kubernetes writes them. Returns MiB, rounded up.
pub fn parse_memory(text: &str) -> Result<u64, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let bytes_per: f64 = match unit {
        "Ki" => 1024.0,
        "Mi" => 1024.0 * 1024.0,
        "Gi" => 1024.0 * 1024.0 * 1024.0,
        "Ti" => 1024.0 * 1024.0 * 1024.0 * 1024.0,
        "K" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        _ => {
            return Err(format!(
                "`{text}` is not a size; write a number and a unit, like 8Gi or 512Mi"
            ));
        }
    };
    let value: f64 = number.parse().map_err(|_| {
        format!("`{text}` is not a size; write a number and a unit, like 8Gi or 512Mi")
    })?;
    Ok((value * bytes_per / (1024.0 * 1024.0)).ceil() as u64)
}

/// Reads a duration like `45s`, `90m`, `2h`, `1d` or `1h30m`. Returns seconds.
pub fn parse_duration(text: &str) -> Result<u64, String> {
    let bad = || format!("`{text}` is not a duration; write it like 90m, 2h or 1h30m");
    let text_trimmed = text.trim();
    if text_trimmed.is_empty() {
        return Err(bad());
    }
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in text_trimmed.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit = match c {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            _ => return Err(bad()),
        };
        let n: u64 = number.parse().map_err(|_| bad())?;
        total = n
            .checked_mul(unit)
            .and_then(|v| total.checked_add(v))
            .ok_or_else(bad)?;
        number.clear();
    }
    if !number.is_empty() {
        return Err(bad());
    }
    Ok(total)
}

fn valid_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// `{{name}}` at byte `at` of a command: braces the command keeps, written
/// doubled so that they are no placeholder (`xargs -I{{f}} … {{f}}` runs
/// as `xargs -I{f} … {f}`). The name and the length written.
pub fn escaped_placeholder(command: &str, at: usize) -> Option<(&str, usize)> {
    let rest = command.get(at..)?.strip_prefix("{{")?;
    let len = rest.find("}}")?;
    let name = &rest[..len];
    valid_param_name(name).then_some((name, len + 4))
}

/// The `{name}` placeholders of a command that the shell would not take as
/// its own, with whether each is inside double quotes: not inside single
/// quotes (awk's `'{print}'`), not `${VAR}`, not escaped (`\{x}`, or
/// doubled: `{{x}}`), not in a comment (`# see {x}`), and only names that
/// a hyperparameter could have (so not `{}`, `{a,b}` or `{ cmd; }`).
pub fn placeholders(command: &str) -> Vec<(&str, bool)> {
    let bytes = command.as_bytes();
    let (mut single, mut double) = (false, false);
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if !single => i += 1,
            b'\'' if !double => single = !single,
            b'"' if !single => double = !double,
            // A comment, to the end of its line: `# see {paper}`.
            b'#' if !single
                && !double
                && (i == 0
                    || matches!(
                        bytes[i - 1],
                        b' ' | b'\t' | b'\n' | b';' | b'&' | b'|' | b'(' | b')'
                    )) =>
            {
                i = command[i..].find('\n').map_or(bytes.len(), |n| i + n);
            }
            b'{' if !single => {
                if let Some((_, len)) = escaped_placeholder(command, i) {
                    i += len - 1;
                } else if (i == 0 || bytes[i - 1] != b'$')
                    && let Some(len) = command[i + 1..].find('}')
                {
                    let name = &command[i + 1..i + 1 + len];
                    if valid_param_name(name) {
                        out.push((name, double));
                        i += len + 1;
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Why a command's placeholder names no hyperparameter, for the first such:
/// `--lr {lr}` without `lr` would run the braces as written. Inside double
/// quotes (where Python's f-strings live) only once the job has
/// hyperparameters, and so uses placeholders.
fn unknown_placeholder(
    command: &str,
    hyperparameters: &BTreeMap<String, ParamValue>,
) -> Option<String> {
    let (name, _) = placeholders(command).into_iter().find(|(name, quoted)| {
        !hyperparameters.contains_key(*name) && (!quoted || !hyperparameters.is_empty())
    })?;
    let known = if hyperparameters.is_empty() {
        "the job has none".to_owned()
    } else {
        let names: Vec<&str> = hyperparameters.keys().map(String::as_str).collect();
        format!("it has {}", names.join(", "))
    };
    Some(format!(
        "`{{{name}}}` names no hyperparameter ({known}); add `{name}` to hyperparameters, or write its value in the command (or `{{{{{name}}}}}` for braces the command keeps)"
    ))
}

/// Hyperparameter names become `HP_<NAME>` variables and `{name}` in commands.
pub(crate) fn valid_param_name(name: &str) -> bool {
    !name.is_empty() && name.len() <= MAX_KEY_LEN && valid_env_name(name)
}

impl JobSpec {
    /// The resources asked for, or the defaults.
    pub fn resources(&self) -> ResourceSpec {
        self.resources.clone().unwrap_or_default()
    }

    /// Checks every field and returns all the problems, not just the first.
    pub fn check(self) -> Result<CheckedJob, Vec<FieldError>> {
        let mut errors = Vec::new();
        let mut err = |field: &str, message: String| errors.push(FieldError::new(field, message));

        let name = self.name.trim();
        let name_len = name.chars().count();
        if name.is_empty() {
            err("name", "must not be empty; give the job a name".into());
        } else if name_len > MAX_NAME_LEN {
            err(
                "name",
                format!("is {name_len} characters long; the limit is {MAX_NAME_LEN}"),
            );
        } else if name.chars().any(char::is_control) {
            err("name", "must not contain control characters".into());
        }
        if let Some(experiment) = &self.experiment
            && let Err(e) = crate::validate_experiment_name(experiment)
        {
            err("experiment", e.message);
        }
        match (&self.template, &self.command) {
            (None, None) => err(
                "command",
                "give a command to run, or a template from the catalog".into(),
            ),
            (Some(_), Some(_)) => err("command", "give a command or a template, not both".into()),
            (Some(t), None) if t.trim().is_empty() => {
                err("template", "must not be empty".into());
            }
            (None, Some(c)) if c.trim().is_empty() => {
                err("command", "must not be empty".into());
            }
            (None, Some(c)) if c.len() > MAX_COMMAND_LEN => err(
                "command",
                format!("is {} bytes long; the limit is {MAX_COMMAND_LEN}", c.len()),
            ),
            (None, Some(c)) => {
                if let Some(message) = unknown_placeholder(c, &self.hyperparameters) {
                    err("command", message);
                }
            }
            _ => {}
        }
        if let Some(image) = &self.image
            && (image.len() > MAX_IMAGE_LEN || image.chars().any(char::is_whitespace))
        {
            err(
                "image",
                format!(
                    "must be an image reference without spaces, at most {MAX_IMAGE_LEN} characters"
                ),
            );
        }
        let r = &self.resources.clone().unwrap_or_default();
        if r.gpus > MAX_GPUS {
            err(
                "resources.gpus",
                format!("is {}; the limit is {MAX_GPUS}", r.gpus),
            );
        }
        if !(r.cpus.is_finite() && r.cpus > 0.0 && r.cpus <= MAX_CPUS) {
            err(
                "resources.cpus",
                format!("must be more than 0 and at most {MAX_CPUS}"),
            );
        } else if (r.cpus * 1000.0).round() < 1.0 {
            err(
                "resources.cpus",
                format!("is {}; the least is 0.001 (a thousandth of a CPU)", r.cpus),
            );
        }
        let memory_mib = match parse_memory(&r.memory) {
            Ok(0) => {
                err("resources.memory", "must be at least 1Mi".into());
                0
            }
            Ok(m) if m > MAX_MEMORY_MIB => {
                err("resources.memory", "is more than the limit of 4Ti".into());
                0
            }
            Ok(m) => m,
            Err(e) => {
                err("resources.memory", e);
                0
            }
        };
        if self.env.len() > MAX_ENV {
            err(
                "env",
                format!("has {} variables; the limit is {MAX_ENV}", self.env.len()),
            );
        }
        for (key, value) in &self.env {
            let field = format!("env.{key}");
            if !valid_env_name(key) || key.len() > MAX_KEY_LEN {
                err(
                    &field,
                    "is not a variable name: use letters, digits and _, not starting with a digit"
                        .into(),
                );
            } else if RESERVED_ENV.contains(&key.as_str()) {
                err(
                    &field,
                    "is set by Trainyard for every job; remove it".into(),
                );
            } else if value.len() > MAX_ENV_VALUE_LEN {
                err(
                    &field,
                    format!(
                        "is {} bytes long; the limit is {MAX_ENV_VALUE_LEN}",
                        value.len()
                    ),
                );
            }
        }
        if self.hyperparameters.len() > MAX_HYPERPARAMETERS {
            err(
                "hyperparameters",
                format!(
                    "has {} entries; the limit is {MAX_HYPERPARAMETERS}",
                    self.hyperparameters.len()
                ),
            );
        }
        for (key, value) in &self.hyperparameters {
            let field = format!("hyperparameters.{key}");
            if !valid_param_name(key) {
                err(
                    &field,
                    format!(
                        "is not a usable name: use letters, digits and _, at most {MAX_KEY_LEN} characters"
                    ),
                );
            } else if value.to_string().len() > MAX_PARAM_VALUE_LEN {
                err(
                    &field,
                    format!("is longer than MLflow's limit of {MAX_PARAM_VALUE_LEN} characters"),
                );
            } else if let ParamValue::Float(x) = value
                && !x.is_finite()
            {
                err(&field, "must be a finite number".into());
            }
        }
        if let Some(project) = &self.project
            && !(project.len() == 32 && project.chars().all(|c| c.is_ascii_hexdigit()))
        {
            err(
                "project",
                "is not an upload id; upload the archive first (POST /api/trainyard/v1/uploads?kind=project)".into(),
            );
        }
        if let Some(from) = self.resume_from
            && from <= 0
        {
            err(
                "resume_from",
                format!(
                    "`{from}` is not a job id; give the id of an ended job of yours whose checkpoints are kept"
                ),
            );
        }
        if self.datasets.len() > MAX_DATASETS {
            err(
                "datasets",
                format!(
                    "names {} datasets; the limit is {MAX_DATASETS}",
                    self.datasets.len()
                ),
            );
        }
        for (i, name) in self.datasets.iter().enumerate() {
            if !valid_dataset_name(name) {
                err(
                    &format!("datasets.{i}"),
                    format!("`{name}` is not a dataset name: use letters, digits, - _ and ."),
                );
            } else if self.datasets[..i].contains(name) {
                err(&format!("datasets.{i}"), format!("`{name}` is named twice"));
            }
        }
        let max_runtime_secs = match self.max_runtime.as_deref() {
            None => DEFAULT_RUNTIME_SECS,
            Some(text) => match parse_duration(text) {
                Ok(0) => {
                    err("max_runtime", "must be at least 1s".into());
                    0
                }
                Ok(s) if s > MAX_RUNTIME_SECS => {
                    err("max_runtime", "is more than the limit of 30 days".into());
                    0
                }
                Ok(s) => s,
                Err(e) => {
                    err("max_runtime", e);
                    0
                }
            },
        };
        if self.retries > MAX_RETRIES {
            err(
                "retries",
                format!("is {}; the limit is {MAX_RETRIES}", self.retries),
            );
        }
        if !PRIORITY_RANGE.contains(&self.priority) {
            err(
                "priority",
                format!(
                    "is {}; it must be from {} to {}",
                    self.priority,
                    PRIORITY_RANGE.start(),
                    PRIORITY_RANGE.end()
                ),
            );
        }
        if let Some(team) = &self.team {
            let len = team.trim().chars().count();
            if len == 0 || len > 250 {
                err(
                    "team",
                    "give the name of one of your teams (at most 250 characters), or leave it out for your first team".into(),
                );
            }
        }
        if !errors.is_empty() {
            return Err(errors);
        }
        Ok(CheckedJob {
            cpu_millis: (r.cpus * 1000.0).round() as u32,
            memory_mib,
            max_runtime_secs,
            spec: JobSpec {
                name: name.to_owned(),
                ..self
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> JobSpec {
        JobSpec {
            name: "mnist".into(),
            experiment: Some("vision".into()),
            template: None,
            command: Some("python train.py --lr {lr}".into()),
            image: Some("pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime".into()),
            resources: Some(ResourceSpec {
                gpus: 2,
                cpus: 7.5,
                memory: "30Gi".into(),
            }),
            env: BTreeMap::from([("SEED".into(), "1".into())]),
            hyperparameters: BTreeMap::from([
                ("lr".into(), ParamValue::Float(0.001)),
                ("epochs".into(), ParamValue::Int(10)),
            ]),
            max_runtime: Some("1h30m".into()),
            retries: 2,
            priority: 0,
            project: None,
            datasets: Vec::new(),
            team: None,
            preemptible: true,
            resume_from: None,
        }
    }

    fn fields(errors: &[FieldError]) -> Vec<&str> {
        errors.iter().map(|e| e.field.as_str()).collect()
    }

    #[test]
    fn a_good_spec_comes_back_with_its_sizes() {
        let checked = spec().check().unwrap();
        assert_eq!(checked.cpu_millis, 7500);
        assert_eq!(checked.memory_mib, 30 * 1024);
        assert_eq!(checked.max_runtime_secs, 5400);
    }

    #[test]
    fn values_given_as_text_are_typed_as_yaml_types_them() {
        assert_eq!(ParamValue::from_text("true"), ParamValue::Bool(true));
        assert_eq!(ParamValue::from_text("32"), ParamValue::Int(32));
        assert_eq!(ParamValue::from_text("-3"), ParamValue::Int(-3));
        assert_eq!(ParamValue::from_text("1e-3"), ParamValue::Float(0.001));
        assert_eq!(ParamValue::from_text("0.5"), ParamValue::Float(0.5));
        for text in ["adam", "inf", "NaN", "", "1.2.3", "True"] {
            assert_eq!(
                ParamValue::from_text(text),
                ParamValue::Text(text.to_owned()),
                "{text}"
            );
        }
    }

    #[test]
    fn placeholders_are_braces_the_shell_would_not_read_as_its_own() {
        let found = |c: &'static str| placeholders(c);
        assert_eq!(
            found("python t.py --lr {lr} --bs {batch_size}"),
            vec![("lr", false), ("batch_size", false)]
        );
        assert_eq!(found(r#"python -c "print(f'{x}')""#), vec![("x", true)]);
        // Single quotes, ${VAR}, escapes, find's {}, brace expansion and
        // brace groups are the shell's.
        assert!(found("awk '{print}' f; echo ${HOME} \\{lr} {} {a,b} {1..3}").is_empty());
        assert!(found("{ echo a; } && find . -exec rm {} \\;").is_empty());
        assert!(found("echo \"it's {").is_empty());
        // Doubled, braces are the command's own.
        assert!(found("ls | xargs -I{{f}} cp {{f}} out/").is_empty());
        assert_eq!(found("echo {{a}} {b}"), vec![("b", false)]);
        assert_eq!(escaped_placeholder("x {{f}} y", 2), Some(("f", 5)));
        assert_eq!(escaped_placeholder("{{}}", 0), None);
        // A comment is the shell's, to the end of its line; a `#` within a
        // word or in quotes is not a comment.
        assert_eq!(
            found("python t.py # as in {paper}\necho {lr}; # {x}"),
            vec![("lr", false)]
        );
        assert_eq!(
            found("echo a#{b} '#' {c} \"# {d}\""),
            vec![("b", false), ("c", false), ("d", true)]
        );
    }

    #[test]
    fn a_placeholder_that_names_no_hyperparameter_is_refused() {
        let with = |command: &str, params: &[&str]| {
            let mut s = spec();
            s.command = Some(command.into());
            s.hyperparameters = params
                .iter()
                .map(|p| ((*p).to_owned(), ParamValue::Int(1)))
                .collect();
            s.check().err().map(|e| e[0].message.clone())
        };
        let message = with("python train.py --lr {lr}", &[]).unwrap();
        assert!(
            message.contains("`{lr}` names no hyperparameter (the job has none)"),
            "{message}"
        );
        let message = with("python train.py --lr {lr}", &["learning_rate"]).unwrap();
        assert!(message.contains("it has learning_rate"), "{message}");
        assert_eq!(with("python train.py --lr {lr}", &["lr"]), None);
        // An f-string in double quotes is Python's while the job has no
        // hyperparameters, and a placeholder once it has.
        assert_eq!(with(r#"python -c "print(f'{x}')""#, &[]), None);
        assert!(with(r#"python -c "print(f'{x}')""#, &["lr"]).is_some());
        assert_eq!(with("awk '{print}' data.txt", &["lr"]), None);
    }

    #[test]
    fn specs_read_from_json_and_refuse_unknown_fields() {
        let json = r#"{"name": "demo", "template": "cpu-demo",
            "hyperparameters": {"lr": 0.01, "epochs": 3, "optimizer": "adam", "amp": true}}"#;
        let spec: JobSpec = serde_json::from_str(json).unwrap();
        assert_eq!(spec.resources, None);
        assert_eq!(spec.hyperparameters["epochs"], ParamValue::Int(3));
        assert_eq!(spec.hyperparameters["amp"].to_string(), "true");
        assert_eq!(spec.check().unwrap().max_runtime_secs, DEFAULT_RUNTIME_SECS);
        let err = serde_json::from_str::<JobSpec>(r#"{"name": "x", "gpu": 1}"#).unwrap_err();
        assert!(err.to_string().contains("unknown field `gpu`"), "{err}");
    }

    #[test]
    fn every_problem_is_reported_against_its_field() {
        let mut bad = spec();
        bad.name = " ".into();
        bad.template = Some("cpu-demo".into());
        bad.resources = Some(ResourceSpec {
            gpus: 65,
            cpus: 0.0,
            memory: "30 gigs".into(),
        });
        bad.env.insert("CUDA_VISIBLE_DEVICES".into(), "0".into());
        bad.env.insert("1BAD".into(), "x".into());
        bad.hyperparameters
            .insert("bad name".into(), ParamValue::Int(1));
        bad.hyperparameters
            .insert("nan".into(), ParamValue::Float(f64::NAN));
        bad.max_runtime = Some("40d".into());
        bad.retries = 11;
        bad.priority = 99;
        let errors = bad.check().unwrap_err();
        assert_eq!(
            fields(&errors),
            vec![
                "name",
                "command",
                "resources.gpus",
                "resources.cpus",
                "resources.memory",
                "env.1BAD",
                "env.CUDA_VISIBLE_DEVICES",
                "hyperparameters.bad name",
                "hyperparameters.nan",
                "max_runtime",
                "retries",
                "priority",
            ]
        );
        assert_eq!(errors[1].message, "give a command or a template, not both");
        assert_eq!(
            errors[4].message,
            "`30 gigs` is not a size; write a number and a unit, like 8Gi or 512Mi"
        );
        assert_eq!(
            errors[6].message,
            "is set by Trainyard for every job; remove it"
        );
        assert_eq!(errors[11].message, "is 99; it must be from -10 to 10");

        let mut tiny = spec();
        tiny.resources = Some(ResourceSpec {
            cpus: 0.0001,
            ..ResourceSpec::default()
        });
        assert_eq!(
            tiny.check().unwrap_err()[0].message,
            "is 0.0001; the least is 0.001 (a thousandth of a CPU)"
        );
        let listed = serde_json::from_str::<JobSpec>(
            r#"{"name": "x", "command": "y", "hyperparameters": {"lr": [1, 2]}}"#,
        )
        .unwrap_err()
        .to_string();
        assert!(
            listed.contains("a hyperparameter is a number, true or false, or text")
                && !listed.contains("untagged"),
            "{listed}"
        );

        let mut neither = spec();
        neither.command = None;
        assert_eq!(
            neither.check().unwrap_err()[0].message,
            "give a command to run, or a template from the catalog"
        );
    }

    #[test]
    fn sizes_and_durations_read_like_kubernetes_and_go() {
        assert_eq!(parse_memory("512Mi"), Ok(512));
        assert_eq!(parse_memory("8Gi"), Ok(8192));
        assert_eq!(parse_memory("1G"), Ok(954));
        assert_eq!(parse_memory("1.5Gi"), Ok(1536));
        assert!(parse_memory("8").is_err());
        assert!(parse_memory("Gi").is_err());
        assert_eq!(parse_duration("45s"), Ok(45));
        assert_eq!(parse_duration("1h30m"), Ok(5400));
        assert_eq!(parse_duration("2d"), Ok(172_800));
        assert!(parse_duration("90").is_err());
        assert!(parse_duration("h").is_err());
        assert!(parse_duration("").is_err());
        assert!(parse_duration("99999999999999999999d").is_err());
    }
}
