//! Jobs: submission (a spec becomes a queued job with its tracking run),
//! and the supervisor that places queued jobs with the scheduler crate,
//! has an executor ([`executor::Executor`]) start and stop them, and
//! records how they ended, retrying per their policy. The local executor
//! ([`local`]) runs them on this machine under a shim.

pub mod archive;
pub mod cgroups;
pub mod executor;
pub mod fair;
pub mod local;
pub mod machine;
pub mod shim;
pub mod telemetry;
pub mod templates;
pub mod tree;
pub mod users;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use trainyard_domain::identity::{AuditAction, Owner, User};
use trainyard_domain::job::{CheckedJob, JobSpec, Upload};
use trainyard_domain::{FieldError, JobState};
use trainyard_scheduler as sched;
use trainyard_store::{
    JobChange, JobFollower, JobRecord, NewJob, NewRun, Store, StoreError, now_millis,
};

/// What [`Jobs::remove_node`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NodeRemoval {
    Removed,
    /// No node of that name.
    Missing,
    /// Jobs are starting or running on it: nothing was removed.
    Busy(u64),
    /// It is one of this executor's nodes now: nothing was removed.
    OnExecutor(String),
    /// The executor cannot tell its nodes now (why): nothing was removed.
    ExecutorUnsure(String),
}

impl NodeRemoval {
    /// Why nothing was removed, in words for the admin; None when it was.
    pub fn refusal(&self, node: &str) -> Option<String> {
        match self {
            NodeRemoval::Removed => None,
            NodeRemoval::Missing => Some(format!("there is no node {node}")),
            NodeRemoval::Busy(jobs) => Some(format!(
                "node {node} has {jobs} job(s) starting or running; cancel them or wait for their end, then remove it"
            )),
            NodeRemoval::ExecutorUnsure(why) => Some(format!(
                "the executor cannot tell now whether node {node} is still one of its own ({why}); try again when it can"
            )),
            NodeRemoval::OnExecutor(executor) => Some(format!(
                "node {node} is one of the {executor} executor's nodes now; remove it there first \
                 (for Kubernetes: kubectl delete node {node}), then here"
            )),
        }
    }
}

use executor::{Attempt, EndReason, Ending, Executor, Observation, StartError, Started};

/// What a job asks of one node, for [`Jobs::fits`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub gpus: u32,
    pub cpu_millis: u32,
    pub memory_mib: u64,
}

/// A spec that could not be read.
#[derive(Debug, Clone, PartialEq)]
pub struct SpecError {
    /// Every problem, in words, `field: what` joined by `; `.
    pub message: String,
    /// The fields of the wrong type or name, when the document read.
    pub fields: Vec<FieldError>,
}

impl SpecError {
    fn plain(message: String) -> Self {
        SpecError {
            message,
            fields: Vec::new(),
        }
    }

    fn of(fields: Vec<FieldError>) -> Self {
        let said: Vec<String> = fields
            .iter()
            .map(|f| format!("{}: {}", f.field, f.message))
            .collect();
        SpecError {
            message: said.join("; "),
            fields,
        }
    }
}

/// Fields of the wrong type a spec's answer names at most.
const MAX_TYPE_ERRORS: usize = 16;

/// Reads a job spec from YAML or JSON. A field of the wrong type is
/// reported with its path (`resources.gpus`), and so is every other one:
/// those of the wrong type, then what the check finds wrong in the rest.
pub fn parse_spec(yaml: bool, body: &[u8]) -> Result<JobSpec, SpecError> {
    let value = read_document(yaml, body, "name, command, resources …")?;
    let (spec, mut wrong) = typed::<JobSpec>(value);
    match spec {
        Some(spec) if wrong.is_empty() => Ok(spec),
        Some(spec) => {
            // What was left out took its default: not a problem of its own.
            let left_out = |field: &str| {
                wrong
                    .iter()
                    .any(|w| field == w.field || field.starts_with(&format!("{}.", w.field)))
            };
            let more: Vec<FieldError> = match spec.check() {
                Err(errors) => errors.into_iter().filter(|e| !left_out(&e.field)).collect(),
                Ok(_) => Vec::new(),
            };
            wrong.extend(more);
            Err(SpecError::of(wrong))
        }
        None => Err(SpecError::of(wrong)),
    }
}

/// Reads a template from YAML or JSON (JSON is YAML too), fields by path.
pub fn parse_template(body: &[u8]) -> Result<trainyard_domain::template::TemplateSpec, SpecError> {
    let value = read_document(true, body, "title, description, command, parameters …")?;
    match typed(value) {
        (Some(template), wrong) if wrong.is_empty() => Ok(template),
        (_, wrong) => Err(SpecError::of(wrong)),
    }
}

/// A document's mapping of fields, from YAML or JSON.
fn read_document(yaml: bool, body: &[u8], fields: &str) -> Result<serde_json::Value, SpecError> {
    let value: serde_json::Value = if yaml {
        let text = std::str::from_utf8(body)
            .map_err(|_| SpecError::plain("the YAML is not UTF-8 text".to_owned()))?;
        serde_saphyr::from_str(text).map_err(|e| {
            SpecError::plain(format!(
                "not valid YAML: {}",
                trainyard_domain::serde_in_words(&e.to_string())
            ))
        })?
    } else {
        serde_json::from_slice(body).map_err(|e| {
            SpecError::plain(format!(
                "the spec is not valid JSON: {e} (send YAML with Content-Type: application/yaml)"
            ))
        })?
    };
    if !value.is_object() {
        return Err(SpecError::plain(format!(
            "it must be a mapping of fields ({fields})"
        )));
    }
    Ok(value)
}

/// `value` as a `T`. Past a field of the wrong type it goes on without that
/// field (at most [`MAX_TYPE_ERRORS`] times) to name the others: `T` when
/// what is left reads, and each field that did not, by path.
fn typed<T: serde::de::DeserializeOwned>(
    mut value: serde_json::Value,
) -> (Option<T>, Vec<FieldError>) {
    let mut wrong: Vec<FieldError> = Vec::new();
    loop {
        match serde_path_to_error::deserialize::<_, T>(value.clone()) {
            Ok(read) => return (Some(read), wrong),
            Err(e) => {
                let path = e.path().clone();
                let said = e.into_inner().to_string();
                // A field left out that has no default: that field is
                // named already.
                if !wrong.is_empty() && said.starts_with("missing field") {
                    return (None, wrong);
                }
                let field = match path.to_string() {
                    p if p == "." => "spec".to_owned(),
                    p => p,
                };
                wrong.push(FieldError::new(
                    &field,
                    trainyard_domain::serde_in_words(&said),
                ));
                if wrong.len() >= MAX_TYPE_ERRORS || !remove_at(&mut value, &path) {
                    return (None, wrong);
                }
            }
        }
    }
}

/// Takes out the field at `path` (a key of a mapping); false when there is
/// none to take.
fn remove_at(value: &mut serde_json::Value, path: &serde_path_to_error::Path) -> bool {
    use serde_path_to_error::Segment;
    let segments: Vec<&Segment> = path.iter().collect();
    let Some((last, parents)) = segments.split_last() else {
        return false;
    };
    let mut at = value;
    for segment in parents {
        let next = match segment {
            Segment::Map { key } => at.get_mut(key.as_str()),
            Segment::Seq { index } => at.get_mut(*index),
            _ => None,
        };
        match next {
            Some(next) => at = next,
            None => return false,
        }
    }
    match last {
        Segment::Map { key } => at
            .as_object_mut()
            .is_some_and(|fields| fields.remove(key.as_str()).is_some()),
        _ => false,
    }
}

/// Where the job service keeps what jobs start from.
#[derive(Debug, Clone)]
pub struct JobsConfig {
    /// `<data_dir>/jobs`: one folder per job (`<id>/files`) and attempt
    /// (`<id>/<attempt>`, the executor's).
    pub root: PathBuf,
    /// The shipped templates: `<dir>/<slug>/template.yaml` and their files.
    pub templates_dir: PathBuf,
    /// Unpacked project archives (`<dir>/<id>`) and datasets
    /// (`<dir>/datasets/<id>`).
    pub uploads_root: PathBuf,
    /// What one upload may unpack to.
    pub upload_limits: archive::Limits,
    /// Past GPU use counts half this long after (fair share).
    pub usage_half_life: Duration,
    /// How long the checkpoints of a job that did not succeed are kept
    /// for its owner's next job to resume from; zero: none are.
    pub checkpoint_keep: Duration,
    /// The most bytes one person's kept checkpoints hold in all (their
    /// oldest go first); None: no bound but [`MAX_KEPT_PER_PERSON`].
    pub checkpoint_keep_bytes: Option<u64>,
}

/// Why an upload was refused.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// The name or kind is wrong (which field, and what to do).
    #[error("{}: {}", .0.field, .0.message)]
    Invalid(FieldError),
    #[error(transparent)]
    Archive(#[from] archive::ArchiveError),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a submission was refused.
#[derive(Debug, thiserror::Error)]
pub enum SubmitError {
    #[error("the job spec has {} problem(s)", .0.len())]
    Invalid(Vec<FieldError>),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Why a node's agent token was not made.
#[derive(Debug, thiserror::Error)]
pub enum NodeTokenError {
    /// The node is this server's own machine, whose GPUs the server
    /// samples itself (the local executor's).
    #[error("{0}")]
    ServersOwn(String),
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// The jobs service, shared by the API and the supervisor loop.
#[derive(Clone)]
pub struct Jobs {
    inner: Arc<Inner>,
}

struct Inner {
    store: Store,
    config: JobsConfig,
    executor: Arc<dyn Executor>,
    wake: tokio::sync::Notify,
    /// Queue positions last written, so a cycle writes only changes.
    positions: Mutex<HashMap<i64, (u32, String)>>,
    /// Why each started attempt waits, as last written to its timeline.
    waiting: Mutex<HashMap<i64, String>>,
    /// How long the last cycle spent looking at jobs and placing them,
    /// before it started any, and whether it left jobs queued.
    pace: Mutex<Pace>,
    /// Decayed GPU-hours per team and person, read from history at the
    /// first cycle and added to as attempts end.
    usage: Mutex<Option<fair::UsageBook>>,
    /// The unfinished jobs, kept between cycles.
    active: tokio::sync::Mutex<ActiveJobs>,
    /// When expired checkpoints were last looked for.
    checkpoints_swept: Mutex<Option<std::time::Instant>>,
    /// A sweep of them runs now.
    sweeping: std::sync::atomic::AtomicBool,
    /// When this service began (ms): a queued job made before it whose
    /// files are not ready was being submitted when the server stopped.
    began: i64,
    /// Jobs this service works on outside the loop now: being submitted
    /// (made, their files not yet ready, whatever the clock said) or run
    /// again (their files being copied), each counted; -1: being deleted,
    /// which waits for none of those and lets none start.
    in_use: Mutex<HashMap<i64, i32>>,
}

/// A job held in use ([`Jobs::hold`]) or alone ([`Jobs::hold_alone`]),
/// until dropped.
struct Held {
    jobs: Jobs,
    id: i64,
}

impl Drop for Held {
    fn drop(&mut self) {
        let mut in_use = self
            .jobs
            .inner
            .in_use
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        if let Some(count) = in_use.get_mut(&self.id) {
            *count -= 1;
            if *count <= 0 {
                in_use.remove(&self.id);
            }
        }
    }
}

/// Runs `work` to its end even if its caller stops waiting (a client that
/// went away mid-request): a submission left half-done would hold its job
/// queued, and what it took, until the server's next start.
async fn detached<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> T {
    match tokio::spawn(work).await {
        Ok(done) => done,
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(error) => panic!("the runtime stopped under a submission: {error}"),
    }
}

/// How often expired checkpoints are looked for.
const CHECKPOINT_SWEEP_EVERY: Duration = Duration::from_secs(60);

/// The most jobs whose checkpoints one person keeps: past it, their
/// oldest go first.
pub const MAX_KEPT_PER_PERSON: usize = 100;

/// The unfinished jobs as the supervisor last read them. A cycle rereads
/// only those the store wrote since the last (the store tells its
/// follower after each commit), so that thousands of running jobs are not
/// read whole from the database many times a second in a burst; all of
/// them are read again every [`ACTIVE_REREAD`], for writes the store is
/// not told of.
struct ActiveJobs {
    follower: JobFollower,
    /// Shared with the cycles that use them, not copied for each.
    records: BTreeMap<i64, Arc<JobRecord>>,
    /// When every unfinished job was last read; None: never, or a read
    /// failed since (what it was told of is then read whole).
    whole: Option<std::time::Instant>,
}

/// The team of jobs filed under none (and user 0: of no account): no
/// guaranteed GPUs, weight 1.
const NO_TEAM: sched::TeamId = 0;
/// Usage older than this many half-lives is not read (it counts < 0.1%).
const USAGE_HALF_LIVES_READ: i64 = 10;
/// How often the supervisor looks at running jobs when nothing wakes it.
const TICK: Duration = Duration::from_millis(500);
/// The least time between the starts of two cycles.
const MIN_CYCLE: Duration = Duration::from_millis(100);
/// How many attempts the supervisor starts at once.
const CONCURRENT_STARTS: usize = 64;
/// With no job queued, cycles that only look at running attempts wait at
/// most this long after the last began (unless it looked for longer).
const CALM_CYCLE: Duration = Duration::from_secs(5);
/// How often a cycle reads every unfinished job rather than those the store
/// says it wrote: for writes it cannot tell of (another process on the same
/// database; a team or person deleted, which clears their jobs' team or
/// owner).
const ACTIVE_REREAD: Duration = Duration::from_secs(10);

/// What the last cycle cost, which sets when the next may begin.
#[derive(Debug, Clone, Copy, Default)]
struct Pace {
    looked: Duration,
    queued: bool,
}

impl Pace {
    /// When the next cycle may begin, after one that began at `began`: a
    /// submission, a cancel or a queued job's chance is taken twice the
    /// time the last cycle spent looking after it began (cycles then use
    /// at most a third of a core); with nothing queued, a watch event or
    /// the tick only has running attempts to look at, and waits ten times
    /// that (capped at [`CALM_CYCLE`]), so that thousands of running jobs
    /// are followed with a tenth of a core, their ends seen within a few
    /// seconds at worst.
    fn next(&self, began: tokio::time::Instant, calm: bool) -> tokio::time::Instant {
        let quick = (self.looked * 2).max(MIN_CYCLE);
        if calm && !self.queued {
            began + (self.looked * 10).min(CALM_CYCLE).max(quick)
        } else {
            began + quick
        }
    }
}

/// A waiting job's reason in words; nodes closed by an admin's drain say
/// why ("gpu-1, the only node it fits on, takes no new jobs now: it is
/// drained (driver update)").
fn reason_text(
    reason: &sched::Reason,
    drains: &HashMap<String, trainyard_domain::NodeDrain>,
) -> String {
    let mut text = reason.to_string();
    if let sched::Reason::Closed { nodes, more, .. } = reason {
        let drained: Vec<&trainyard_domain::NodeDrain> =
            nodes.iter().filter_map(|n| drains.get(n)).collect();
        match drained.as_slice() {
            [] => {}
            [one] if nodes.len() == 1 && *more == 0 => {
                text.push_str(&format!(": it is drained ({})", one.reason));
            }
            _ => {
                let said: Vec<String> = drained
                    .iter()
                    .map(|d| format!("{} ({})", d.node, d.reason))
                    .collect();
                text.push_str(&format!("; drained: {}", said.join(", ")));
            }
        }
    }
    text
}

impl Jobs {
    pub fn new(store: Store, config: JobsConfig, executor: Arc<dyn Executor>) -> Jobs {
        let active = tokio::sync::Mutex::new(ActiveJobs {
            follower: store.follow_jobs(),
            records: BTreeMap::new(),
            whole: None,
        });
        Jobs {
            inner: Arc::new(Inner {
                store,
                config,
                executor,
                wake: tokio::sync::Notify::new(),
                positions: Mutex::new(HashMap::new()),
                waiting: Mutex::new(HashMap::new()),
                pace: Mutex::new(Pace::default()),
                usage: Mutex::new(None),
                checkpoints_swept: Mutex::new(None),
                sweeping: std::sync::atomic::AtomicBool::new(false),
                began: now_millis(),
                in_use: Mutex::new(HashMap::new()),
                active,
            }),
        }
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// The executor that runs the attempts.
    pub fn executor(&self) -> &Arc<dyn Executor> {
        &self.inner.executor
    }

    /// Has the executor make ready what it needs, once, at the start.
    pub async fn prepare(&self) -> Result<(), String> {
        let active = self
            .store()
            .active_jobs()
            .await
            .map_err(|e| e.to_string())?;
        self.inner.executor.prepare(&active).await
    }

    /// Up to `limit` bytes of an attempt's log from `offset`, and the
    /// log's size.
    pub async fn read_log(
        &self,
        id: i64,
        attempt: u32,
        offset: u64,
        limit: u64,
    ) -> std::io::Result<(Vec<u8>, u64)> {
        self.inner
            .executor
            .read_log(id, attempt, offset, limit)
            .await
    }

    /// The last `max` bytes of an attempt's log as text, and its size.
    pub async fn log_tail(
        &self,
        id: i64,
        attempt: u32,
        max: u64,
    ) -> std::io::Result<(String, u64)> {
        self.inner.executor.log_tail(id, attempt, max).await
    }

    pub fn config(&self) -> &JobsConfig {
        &self.inner.config
    }

    /// The folder of a job: its files and its attempts.
    fn job_dir(&self, id: i64) -> PathBuf {
        self.inner.config.root.join(id.to_string())
    }

    /// Where the folders of deleted jobs wait to be removed.
    fn deleted_dir(&self) -> PathBuf {
        self.inner.config.root.join(".deleted")
    }

    /// Makes the supervisor look now (after a submit, a cancel, an exit).
    pub fn wake(&self) {
        self.inner.wake.notify_one();
    }

    /// Checks a spec, creates its run and queues it. A template's command,
    /// resources, image and max runtime apply where the spec does not set
    /// them, and its parameters are checked and defaulted.
    pub async fn submit(&self, spec: JobSpec, owner: &User) -> Result<JobRecord, SubmitError> {
        let (jobs, owner) = (self.clone(), owner.clone());
        detached(async move { jobs.submit_now(spec, &owner).await }).await
    }

    async fn submit_now(&self, spec: JobSpec, owner: &User) -> Result<JobRecord, SubmitError> {
        let mut errors = spec.clone().check().err().unwrap_or_default();
        let template = match &spec.template {
            Some(slug) => match self.store().get_template(slug.trim()).await? {
                Some(template) => Some(template),
                None => {
                    let known: Vec<String> = self
                        .store()
                        .templates()
                        .await?
                        .into_iter()
                        .map(|t| t.slug)
                        .collect();
                    errors.push(FieldError::new(
                        "template",
                        format!(
                            "there is no template `{slug}` in the catalog; it has {}",
                            if known.is_empty() {
                                "none".to_owned()
                            } else {
                                known.join(", ")
                            }
                        ),
                    ));
                    None
                }
            },
            None => None,
        };
        let project = match &spec.project {
            Some(id) => match self.store().project_for(owner, id).await? {
                Some(upload) => Some(upload),
                None => {
                    errors.push(FieldError::new(
                        "project",
                        format!("there is no uploaded project `{id}`; upload the archive first"),
                    ));
                    None
                }
            },
            None => None,
        };
        // A template that runs the submitter's project has nothing to run
        // without one.
        if let Some(t) = template.as_ref().filter(|t| t.spec.project)
            && spec.project.is_none()
        {
            errors.push(FieldError::new(
                "project",
                format!(
                    "the template `{}` runs your project: upload its archive (zip or tar.gz) with the job, with the form's Project, or `trainyard submit --file project.tar.gz`",
                    t.slug
                ),
            ));
        }
        let team_id = match spec.team.as_deref().map(str::trim) {
            None => owner.primary_team(),
            Some(name) => match owner.teams.iter().find(|t| t.name == name) {
                Some(team) => Some(team.id),
                None => {
                    let yours: Vec<&str> = owner.teams.iter().map(|t| t.name.as_str()).collect();
                    errors.push(FieldError::new(
                        "team",
                        if yours.is_empty() {
                            format!("you are in no team, so the job cannot count against `{name}`; leave the team out")
                        } else {
                            format!(
                                "you are not in the team `{name}`; yours: {}",
                                yours.join(", ")
                            )
                        },
                    ));
                    None
                }
            },
        };
        // A priority above 0 goes before fair share: only admins give one
        // (anyone may step back with a negative one).
        if spec.priority > 0 && !owner.is_admin {
            errors.push(FieldError::new(
                "priority",
                format!(
                    "is {}; above 0 only admins may give, since it goes before others' fair share: ask one, or use 0 (or below 0 to let others go first)",
                    spec.priority
                ),
            ));
        }
        let mut datasets = Vec::new();
        for (i, name) in spec.datasets.iter().enumerate() {
            match self.store().dataset(name).await? {
                Some(upload) => datasets.push(upload),
                None => errors.push(FieldError::new(
                    &format!("datasets.{i}"),
                    format!("there is no dataset `{name}`; upload it first"),
                )),
            }
        }
        if let Some(from) = spec.resume_from.filter(|&from| from > 0)
            && let Some(why) = self.cannot_resume(from, owner).await?
        {
            errors.push(FieldError::new("resume_from", why));
        }
        let mut effective = spec.clone();
        if let Some(t) = &template {
            effective.template = None;
            effective.command = Some(t.spec.command.clone());
            effective.resources = spec.resources.clone().or(Some(t.spec.resources.clone()));
            effective.image = spec.image.clone().or(t.spec.image.clone());
            effective.max_runtime = spec.max_runtime.clone().or(t.spec.max_runtime.clone());
            match t.spec.resolve(&spec.hyperparameters) {
                Ok(resolved) => effective.hyperparameters = resolved,
                Err(e) => errors.extend(e),
            }
        }
        if !errors.is_empty() {
            return Err(SubmitError::Invalid(errors));
        }
        let mut checked = effective.check().map_err(SubmitError::Invalid)?;
        if let Some(command) = &checked.spec.command {
            use trainyard_domain::job::MAX_RENDERED_COMMAND_LEN;
            let rendered = render_command(command, &checked.spec.hyperparameters).len();
            if rendered > MAX_RENDERED_COMMAND_LEN {
                return Err(SubmitError::Invalid(vec![FieldError::new(
                    "command",
                    format!(
                        "the command is {rendered} bytes once its hyperparameters are put in, more than {MAX_RENDERED_COMMAND_LEN}; read long values from their HP_<NAME> variables instead of {{name}} in the command"
                    ),
                )]));
            }
        }
        if let Some(why) = self.beyond_guarantee(&checked.spec, team_id, owner).await? {
            return Err(SubmitError::Invalid(vec![FieldError::new(
                "preemptible",
                why,
            )]));
        }
        checked.spec.template = template.as_ref().map(|t| t.slug.clone());
        self.admit(&checked).await.map_err(SubmitError::Invalid)?;
        let store = self.store();
        let experiment_name = checked
            .spec
            .experiment
            .as_deref()
            .map(str::trim)
            .unwrap_or("Default")
            .to_owned();
        let experiment_id = match store.get_experiment_by_name(&experiment_name).await {
            Ok(e) if e.lifecycle_stage == "active" => e.id,
            Ok(_) => {
                return Err(SubmitError::Invalid(vec![FieldError::new(
                    "experiment",
                    format!(
                        "the experiment `{experiment_name}` is deleted; restore it or choose another"
                    ),
                )]));
            }
            Err(StoreError::NotFound(_)) => {
                match store
                    .create_experiment(&experiment_name, owner.as_owner())
                    .await
                {
                    Ok(id) => id,
                    // Created by someone else in between.
                    Err(StoreError::Conflict { .. }) => {
                        store.get_experiment_by_name(&experiment_name).await?.id
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        // The job's runs go into the experiment: it must be the submitter's
        // (or the shared Default).
        if let Err(e) = store.may_add_runs(owner, experiment_id).await {
            return Err(match e {
                StoreError::NotFound(_) | StoreError::Forbidden(_) => {
                    SubmitError::Invalid(vec![FieldError::new(
                        "experiment",
                        format!(
                            "the experiment `{experiment_name}` belongs to someone else; choose another name"
                        ),
                    )])
                }
                other => other.into(),
            });
        }
        let (run, params) = self
            .run_for(
                &checked.spec,
                experiment_id,
                0,
                Owner::new(Some(owner.id), team_id),
            )
            .await?;
        let record = store
            .create_job(NewJob {
                spec: checked.spec.clone(),
                owner_id: Some(owner.id),
                team_id,
                cpu_millis: checked.cpu_millis,
                memory_mib: checked.memory_mib,
                max_runtime_secs: checked.max_runtime_secs,
                run,
                params,
                // Its run says where it went on from, for the explorer.
                tags: checked
                    .spec
                    .resume_from
                    .map(|from| ("trainyard.resumed_from".to_owned(), from.to_string()))
                    .into_iter()
                    .collect(),
                submitted: match checked.spec.resume_from {
                    Some(from) => format!("queued, to resume from the checkpoints of job {from}"),
                    None => "queued".to_owned(),
                },
            })
            .await?;
        let _held = self.hold(record.job.id);
        let files_too = template.is_none() && project.is_none();
        let record = self.take_for(record, files_too).await?;
        if record.job.state.is_terminal() {
            return Ok(record);
        }
        if let Err(message) = self
            .snapshot_files(record.job.id, template.as_ref(), project.as_ref())
            .await
        {
            tracing::warn!(job = record.job.id, %message, "could not copy the job's files");
            self.finish(&record, JobState::Failed, None, &message, false)
                .await?;
            return Ok(self.store().get_job(record.job.id).await?);
        }
        self.wake();
        Ok(record)
    }

    /// The files every attempt of a job starts with (copied into its
    /// working folder): the template's, as they were at submission.
    pub fn files_dir(&self, id: i64) -> PathBuf {
        self.job_dir(id).join("files")
    }

    /// Copies what every attempt starts with into the job's files folder:
    /// the template's files and requirements, then the project's (which win
    /// where both have a file).
    async fn snapshot_files(
        &self,
        id: i64,
        template: Option<&trainyard_domain::template::Template>,
        project: Option<&Upload>,
    ) -> Result<(), String> {
        if template.is_none() && project.is_none() {
            return Ok(());
        }
        let marker = self.files_ready_marker(id);
        let files = self.files_dir(id);
        let template_files = template.map(|t| self.inner.config.templates_dir.join(&t.slug));
        let requirements = template
            .map(|t| t.spec.requirements.clone())
            .unwrap_or_default();
        let project_files = project.map(|p| self.upload_dir(p));
        tokio::task::spawn_blocking(move || {
            private_folder(&files)?;
            if let Some(source) = template_files.filter(|s| s.is_dir()) {
                templates::copy_template_files(&source, &files)?;
            }
            if !requirements.is_empty() {
                std::fs::write(
                    files.join("requirements.txt"),
                    requirements.join("\n") + "\n",
                )?;
            }
            if let Some(source) = project_files {
                templates::copy_tree(&source, &files)?;
            }
            std::fs::write(&marker, b"")?;
            Ok::<_, std::io::Error>(())
        })
        .await
        .map_err(|e| e.to_string())?
        .map_err(|e| format!("could not copy the job's files: {e}"))
    }

    /// Written once a job's files are complete; until then it is not started.
    fn files_ready_marker(&self, id: i64) -> PathBuf {
        self.job_dir(id).join("files.ready")
    }

    /// Holds job `id` in use (being submitted, or run again) until
    /// dropped; None while it is being deleted.
    fn hold(&self, id: i64) -> Option<Held> {
        let mut in_use = self.inner.in_use.lock().unwrap_or_else(|p| p.into_inner());
        let count = in_use.entry(id).or_insert(0);
        if *count < 0 {
            return None;
        }
        *count += 1;
        Some(Held {
            jobs: self.clone(),
            id,
        })
    }

    /// Holds job `id` alone (to delete it) until dropped; None while it is
    /// in use.
    fn hold_alone(&self, id: i64) -> Option<Held> {
        let mut in_use = self.inner.in_use.lock().unwrap_or_else(|p| p.into_inner());
        if in_use.contains_key(&id) {
            return None;
        }
        in_use.insert(id, -1);
        Some(Held {
            jobs: self.clone(),
            id,
        })
    }

    /// Whether a queued job whose files are not ready was left so by a
    /// server that stopped while submitting it: made before this service
    /// began, not being submitted by it, and its marker surely absent
    /// (not merely unreadable, nor under a jobs folder that is not there,
    /// as with a volume not mounted).
    fn left_half_submitted(&self, job: &trainyard_domain::job::Job) -> bool {
        job.created_at < self.inner.began
            && !self
                .inner
                .in_use
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains_key(&job.id)
            && self.inner.config.root.is_dir()
            && std::fs::symlink_metadata(self.files_ready_marker(job.id))
                .is_err_and(|e| e.kind() == std::io::ErrorKind::NotFound)
    }

    /// Whether a queued job may start: its template's or project's files
    /// (if it has any) are all in place.
    pub fn files_ready(&self, job: &trainyard_domain::job::Job) -> bool {
        // One that resumes waits for the checkpoints it takes, too.
        let needs_files = job.spec.template.is_some()
            || job.spec.project.is_some()
            || job.spec.resume_from.is_some();
        !needs_files || self.files_ready_marker(job.id).is_file()
    }

    /// Checks and saves a template the admin `by` wrote (YAML or JSON).
    /// Errors name the field.
    pub async fn save_template(
        &self,
        slug: &str,
        text: &[u8],
        by: &User,
    ) -> Result<trainyard_domain::template::Template, SubmitError> {
        if !templates::valid_slug(slug) {
            return Err(SubmitError::Invalid(vec![FieldError::new(
                "slug",
                "use a-z, 0-9 and -, at most 100 characters, not starting with -",
            )]));
        }
        let spec = parse_template(text).map_err(|e| {
            SubmitError::Invalid(if e.fields.is_empty() {
                vec![FieldError::new("spec", e.message)]
            } else {
                e.fields
            })
        })?;
        spec.check().map_err(SubmitError::Invalid)?;
        let saved = self.store().save_template(slug, &spec).await?;
        self.store()
            .audit(
                by,
                AuditAction::TemplateSaved,
                &format!("template {slug}"),
                &format!("{} bytes", text.len()),
            )
            .await;
        Ok(saved)
    }

    /// Deletes a template for the admin `by`: jobs made from it keep what
    /// they were made with.
    pub async fn delete_template(&self, slug: &str, by: &User) -> Result<(), StoreError> {
        self.store().delete_template(slug).await?;
        self.store()
            .audit(
                by,
                AuditAction::TemplateDeleted,
                &format!("template {slug}"),
                "",
            )
            .await;
        Ok(())
    }

    /// After the admin `by` made (`made`) or changed a team's guarantee or
    /// share: the queue looks again, and the trail keeps it.
    pub async fn team_changed(
        &self,
        by: &User,
        team: &trainyard_domain::teams::TeamPolicy,
        made: bool,
    ) {
        tracing::info!(team = %team.name, quota_gpus = team.quota_gpus, share = team.share, by = %by.username, made, "team policy set");
        self.store()
            .audit(
                by,
                if made {
                    AuditAction::TeamCreated
                } else {
                    AuditAction::TeamChanged
                },
                &format!("team {}", team.name),
                &format!("{} guaranteed GPUs, share {}", team.quota_gpus, team.share),
            )
            .await;
        self.wake();
    }

    /// The project upload of `owner`'s whose archive had this SHA-256 (hex),
    /// if its files are still kept: what the same archive sent again runs
    /// from.
    pub async fn kept_project(
        &self,
        owner: &User,
        digest: &str,
    ) -> Result<Option<Upload>, StoreError> {
        Ok(self
            .store()
            .project_by_digest(owner.id, digest)
            .await?
            .filter(|kept| self.upload_dir(kept).is_dir()))
    }

    /// Where an upload's files are.
    pub fn upload_dir(&self, upload: &Upload) -> PathBuf {
        let root = &self.inner.config.uploads_root;
        if upload.kind == "dataset" {
            root.join("datasets").join(&upload.id)
        } else {
            root.join(&upload.id)
        }
    }

    /// Unpacks an uploaded archive (a file the caller wrote and removes) as
    /// a project, or as a dataset named `name`, and records it. A project
    /// whose archive (by its SHA-256, `digest`) its owner uploaded before
    /// is that upload, unpacked once: true beside it. A new one is found by
    /// its digest only once the caller records it
    /// ([`trainyard_store::Store::set_upload_digest`], past the quota check).
    pub async fn upload(
        &self,
        kind: &str,
        name: &str,
        archive_file: &Path,
        digest: Option<&str>,
        owner: &User,
    ) -> Result<(Upload, bool), UploadError> {
        let name = name.trim();
        let dataset = match kind {
            "project" => false,
            "dataset" => true,
            other => {
                return Err(UploadError::Invalid(FieldError::new(
                    "kind",
                    format!("`{other}` is not an upload kind; use project or dataset"),
                )));
            }
        };
        if dataset && !trainyard_domain::job::valid_dataset_name(name) {
            return Err(UploadError::Invalid(FieldError::new(
                "name",
                "a dataset needs a name of letters, digits, - _ and . (at most 100)",
            )));
        }
        if dataset && self.store().dataset(name).await?.is_some() {
            return Err(StoreError::Conflict {
                what: format!("a dataset named `{name}`"),
            }
            .into());
        }
        if !dataset
            && let Some(digest) = digest
            && let Some(kept) = self.kept_project(owner, digest).await?
        {
            return Ok((kept, true));
        }
        let id = uuid::Uuid::new_v4().simple().to_string();
        let probe = Upload {
            id: id.clone(),
            kind: kind.to_owned(),
            name: String::new(),
            files: 0,
            bytes: 0,
            entries: 0,
            created_at: 0,
        };
        let into = self.upload_dir(&probe);
        let source = archive_file.to_path_buf();
        let record = trainyard_store::NewUpload {
            id,
            kind: kind.to_owned(),
            name: if name.is_empty() { "project" } else { name }
                .chars()
                .take(250)
                .collect(),
            owner_id: Some(owner.id),
            files: 0,
            bytes: 0,
            entries: 0,
        };
        // Its own task: a client that goes away mid-way does not leave a
        // half-recorded upload behind.
        let jobs = self.clone();
        let upload = tokio::spawn(async move { jobs.unpack(source, into, dataset, record).await })
            .await
            .map_err(|e| archive::ArchiveError::Io(std::io::Error::other(e)))??;
        Ok((upload, false))
    }

    /// Removes an upload: its record, then its files. A dataset that a job
    /// still waiting or running names is kept (Rejected, naming the job).
    pub async fn delete_upload(&self, upload: &Upload) -> Result<(), StoreError> {
        if upload.kind == "dataset"
            && self
                .store()
                .active_jobs()
                .await?
                .iter()
                .any(|r| r.job.spec.datasets.contains(&upload.name))
        {
            return Err(StoreError::Rejected(format!(
                "a job that waits or runs reads the dataset `{}`; delete it once no such job is left",
                upload.name
            )));
        }
        self.discard_upload(upload).await
    }

    /// Removes an upload, whatever names it: its record, then its files.
    pub async fn discard_upload(&self, upload: &Upload) -> Result<(), StoreError> {
        self.store().delete_upload(&upload.id).await?;
        let folder = self.upload_dir(upload);
        let removed = tokio::task::spawn_blocking(move || {
            // Datasets are read-only, also for their folders.
            let _ = make_writable(&folder);
            tree::remove_tree(&folder)
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
        if let Err(error) = removed {
            tracing::warn!(upload = %upload.id, %error, "could not remove the upload's files");
        }
        Ok(())
    }

    /// Unpacks and records an upload; on any failure removes what it unpacked.
    async fn unpack(
        &self,
        source: PathBuf,
        into: PathBuf,
        dataset: bool,
        mut record: trainyard_store::NewUpload,
    ) -> Result<Upload, UploadError> {
        let limits = self.inner.config.upload_limits;
        let target = into.clone();
        let unpacked = tokio::task::spawn_blocking(move || {
            if let Some(parent) = target.parent() {
                std::fs::create_dir_all(parent)?;
            }
            let done = archive::extract(&source, &target, limits)?;
            if !dataset && let Some(folder) = archive::lift_single_folder(&target)? {
                tracing::info!(%folder, "the project's one folder is its top");
            }
            if dataset {
                // Shared by every job that names it: nobody writes to it by accident.
                read_only(&target)?;
            } else {
                // Its owner's alone: jobs get a copy in their own folder.
                users::set_mode(&target, 0o700)?;
            }
            Ok::<_, archive::ArchiveError>(done)
        })
        .await
        .map_err(|e| archive::ArchiveError::Io(std::io::Error::other(e)))
        .and_then(|r| r);
        let result = match unpacked {
            Ok(done) => {
                record.files = done.files;
                record.bytes = done.bytes;
                // Its own folder too: an empty archive still takes one.
                record.entries = done.entries + 1;
                self.store()
                    .create_upload(record)
                    .await
                    .map_err(UploadError::from)
            }
            Err(e) => Err(e.into()),
        };
        if result.is_err() && into.exists() {
            let _ = make_writable(&into);
            let _ = std::fs::remove_dir_all(&into);
        }
        result
    }

    /// A spec that could never run here is refused now, not queued
    /// forever. An executor that cannot tell its capacity now refuses
    /// nothing: the job is queued (and the log says why it was not checked).
    async fn admit(&self, checked: &CheckedJob) -> Result<(), Vec<FieldError>> {
        let ask = Ask {
            gpus: checked.spec.resources().gpus,
            cpu_millis: checked.cpu_millis,
            memory_mib: checked.memory_mib,
        };
        self.fits(&[ask]).await.pop().unwrap_or(Ok(()))
    }

    /// Whether jobs asking for these could ever start here, each: a
    /// resource beyond the largest node is an error naming its field and
    /// what the node has (the catalog's cards say so before anyone
    /// submits). The capacity is read once; while the executor cannot tell
    /// it, each is Ok.
    pub async fn fits(&self, asks: &[Ask]) -> Vec<Result<(), Vec<FieldError>>> {
        let capacity = match self.inner.executor.limits().await {
            Ok(capacity) => capacity,
            Err(error) => {
                tracing::warn!(%error, "cannot tell the executor's capacity; nothing is refused for its size");
                return asks.iter().map(|_| Ok(())).collect();
            }
        };
        let (_, cpu_millis, memory_mib) = capacity.largest();
        asks.iter()
            .map(|ask| {
                let mut errors = Vec::new();
                let resources = sched::Resources {
                    gpus: ask.gpus,
                    cpu_millis: 0,
                    memory_mib: 0,
                };
                if sched::admissible(capacity.whole(), &resources).is_err() {
                    errors.push(FieldError::new(
                        "resources.gpus",
                        format!(
                            "asks for {}; {}",
                            sched::gpus_text(ask.gpus, ""),
                            capacity.gpus_said
                        ),
                    ));
                }
                if ask.cpu_millis > cpu_millis {
                    errors.push(FieldError::new(
                        "resources.cpus",
                        format!(
                            "asks for {} CPUs; {} has {}",
                            ask.cpu_millis as f64 / 1000.0,
                            capacity.place,
                            cpu_millis / 1000
                        ),
                    ));
                }
                if ask.memory_mib > memory_mib {
                    errors.push(FieldError::new(
                        "resources.memory",
                        format!(
                            "asks for {} MiB; {} has {} MiB",
                            ask.memory_mib, capacity.place, memory_mib
                        ),
                    ));
                }
                if errors.is_empty() {
                    Ok(())
                } else {
                    Err(errors)
                }
            })
            .collect()
    }

    /// The tracking run of one attempt (SCHEDULED once made), and its
    /// params: the hyperparameters.
    async fn run_for(
        &self,
        spec: &JobSpec,
        experiment_id: i64,
        attempt: u32,
        owner: Owner,
    ) -> Result<(NewRun, Vec<(String, String)>), StoreError> {
        let user_name = match owner.user_id {
            Some(id) => self.store().user(id).await?.map(|u| u.username),
            None => None,
        };
        let name = if attempt == 0 {
            spec.name.trim().to_owned()
        } else {
            format!("{} (attempt {})", spec.name.trim(), attempt + 1)
        };
        let run = NewRun {
            experiment_id,
            user_id: user_name.unwrap_or_else(|| "trainyard".to_owned()),
            owner_id: owner.user_id,
            team_id: owner.team_id,
            run_name: Some(name),
            start_time: None,
            tags: vec![("trainyard.attempt".to_owned(), attempt.to_string())],
        };
        let params = spec
            .hyperparameters
            .iter()
            .map(|(k, v)| (k.clone(), v.to_string()))
            .collect();
        Ok((run, params))
    }

    /// The tracking run of job `job_id`'s further attempt, made SCHEDULED,
    /// tagged with its job as the first attempt's is.
    async fn new_run(
        &self,
        job_id: i64,
        spec: &JobSpec,
        experiment_id: i64,
        attempt: u32,
        owner: Owner,
    ) -> Result<String, StoreError> {
        let (mut run, params) = self.run_for(spec, experiment_id, attempt, owner).await?;
        run.tags
            .push(("trainyard.job_id".to_owned(), job_id.to_string()));
        let run_id = self.store().insert_run(run, "SCHEDULED").await?;
        if !params.is_empty() {
            self.store().log_batch(&run_id, &[], &params, &[]).await?;
        }
        Ok(run_id)
    }

    /// Every team with its quota and weight, the GPUs its jobs hold now
    /// (and how many of them are borrowed), and its decayed usage.
    pub async fn team_policies(
        &self,
    ) -> Result<Vec<trainyard_domain::teams::TeamPolicy>, StoreError> {
        let mut teams = self.store().team_policies().await?;
        let active = self.store().active_jobs().await?;
        let mut held: HashMap<i64, (u32, u32)> = HashMap::new();
        let quotas: HashMap<i64, u32> = teams.iter().map(|t| (t.id, t.quota_gpus)).collect();
        let mut beyond: HashMap<i64, Vec<i64>> = HashMap::new();
        for r in &active {
            match (r.job.state, r.team_id) {
                (JobState::Starting | JobState::Running, Some(team)) => {
                    let entry = held.entry(team).or_default();
                    let gpus = r.job.gpu_indices.len() as u32;
                    entry.0 += gpus;
                    if r.job.borrowed {
                        entry.1 += gpus;
                    }
                }
                (JobState::Queued, Some(team))
                    if !r.job.spec.preemptible
                        && r.job.gpus > quotas.get(&team).copied().unwrap_or(0) =>
                {
                    beyond.entry(team).or_default().push(r.job.id);
                }
                _ => {}
            }
        }
        let now = now_millis();
        let book = self.inner.usage.lock().unwrap_or_else(|p| p.into_inner());
        for t in &mut teams {
            let (in_use, borrowed) = held.get(&t.id).copied().unwrap_or_default();
            t.gpus_in_use = in_use;
            t.gpus_borrowed = borrowed;
            t.decayed_gpu_hours = book.as_ref().map_or(0.0, |b| b.team_hours(t.id, now));
            t.waiting_beyond_guarantee = beyond.remove(&t.id).unwrap_or_default();
        }
        Ok(teams)
    }

    /// GPU-hours by period (UTC), team and person over `[from_ms, to_ms)`:
    /// ended attempts as recorded, and running ones so far. An admin sees
    /// everyone's; anyone else their own and their teams'.
    pub async fn usage_by_period(
        &self,
        viewer: &User,
        from_ms: i64,
        to_ms: i64,
        period: trainyard_domain::teams::UsagePeriod,
    ) -> Result<Vec<trainyard_domain::teams::UsageRow>, StoreError> {
        let team_ids: Vec<i64> = viewer.teams.iter().map(|t| t.id).collect();
        let only = (!viewer.is_admin).then_some((viewer.id, team_ids.as_slice()));
        let days = self.store().gpu_usage_by_day(from_ms, to_ms, only).await?;
        let mut sums: BTreeMap<(i64, Option<String>, Option<String>), f64> = BTreeMap::new();
        for d in days {
            let start = fair::period_start(d.day * fair::DAY_MS, period);
            *sums.entry((start, d.team, d.user)).or_default() += d.gpu_seconds / 3600.0;
        }
        // What running attempts used so far.
        let active = self.store().active_jobs().await?;
        let visible: Vec<&JobRecord> = active
            .iter()
            .filter(|r| matches!(r.job.state, JobState::Starting | JobState::Running))
            .filter(|r| {
                viewer.is_admin
                    || r.owner_id == Some(viewer.id)
                    || r.team_id.is_some_and(|t| viewer.in_team(t))
            })
            .collect();
        if !visible.is_empty() {
            let teams: HashMap<i64, String> = self
                .store()
                .teams()
                .await?
                .into_iter()
                .map(|t| (t.id, t.name))
                .collect();
            let now = now_millis();
            // Each owner's name once, however many jobs they run.
            let mut names: HashMap<i64, Option<String>> = HashMap::new();
            for r in visible {
                let (Some(started), gpus) = (r.charge_start(), r.job.gpu_indices.len()) else {
                    continue;
                };
                let user = match r.owner_id {
                    Some(id) => match names.get(&id) {
                        Some(name) => name.clone(),
                        None => {
                            let name = self.store().user(id).await?.map(|u| u.username);
                            names.insert(id, name.clone());
                            name
                        }
                    },
                    None => None,
                };
                let team = r.team_id.and_then(|t| teams.get(&t).cloned());
                for (day_start, ms) in fair::split_days(started.max(from_ms), now.min(to_ms)) {
                    let start = fair::period_start(day_start, period);
                    *sums.entry((start, team.clone(), user.clone())).or_default() +=
                        gpus as f64 * ms as f64 / 3_600_000.0;
                }
            }
        }
        Ok(sums
            .into_iter()
            .filter(|(_, hours)| *hours > 0.0)
            .map(
                |((period_start, team, user), gpu_hours)| trainyard_domain::teams::UsageRow {
                    period_start,
                    team,
                    user,
                    gpu_hours,
                },
            )
            .collect())
    }

    /// Removes a node that is gone for good: its GPUs, their samples and
    /// its agent tokens. Not one of the executor's own nodes now (they come
    /// back by themselves), nor one where jobs start or run.
    /// `by`: the admin, for the log and the trail.
    pub async fn remove_node(&self, node: &str, by: &User) -> Result<NodeRemoval, StoreError> {
        let executor = self.nodes().await?;
        if let Some(why) = executor.unavailable {
            // It cannot say which nodes are its own now.
            return Ok(NodeRemoval::ExecutorUnsure(why));
        }
        if executor.nodes.iter().any(|n| n.name == node) {
            return Ok(NodeRemoval::OnExecutor(executor.executor));
        }
        let removal = match self.store().remove_node(node).await? {
            trainyard_store::NodeRemoval::Removed => NodeRemoval::Removed,
            trainyard_store::NodeRemoval::Missing => NodeRemoval::Missing,
            trainyard_store::NodeRemoval::Busy(jobs) => NodeRemoval::Busy(jobs),
        };
        if removal == NodeRemoval::Removed {
            tracing::info!(node, admin = %by.username, "node removed");
            self.store()
                .audit(
                    by,
                    AuditAction::NodeRemoved,
                    &format!("node {node}"),
                    "its GPUs, their samples and its agent tokens",
                )
                .await;
        }
        Ok(removal)
    }

    /// Drains `node` for the admin `by`: the scheduler places nothing new
    /// there; with `stop_jobs`, what runs there is stopped and queued again
    /// without spending its retries. A node the executor does not offer
    /// (and that is not drained already) is refused: it names the nodes.
    pub async fn drain_node(
        &self,
        node: &str,
        reason: &str,
        stop_jobs: bool,
        by: &User,
    ) -> Result<trainyard_domain::NodeDrain, StoreError> {
        let reason = reason.trim();
        if reason.is_empty() {
            return Err(FieldError::new(
                "reason",
                "say why the node is drained (people whose jobs wait read it)",
            )
            .into());
        }
        let chars = reason.chars().count();
        if chars > trainyard_domain::MAX_DRAIN_REASON_CHARS || reason.chars().any(char::is_control)
        {
            return Err(FieldError::new(
                "reason",
                format!(
                    "give one line of at most {} characters (this one has {chars})",
                    trainyard_domain::MAX_DRAIN_REASON_CHARS
                ),
            )
            .into());
        }
        let known = match self.inner.executor.capacity().await {
            Ok(capacity) => capacity.whole().iter().any(|n| n.name == node),
            // The executor away: a node's name (as Kubernetes names them)
            // may be drained, as it may have been offered before.
            Err(_) => trainyard_domain::telemetry::check_node_name(node).is_ok(),
        };
        let drained = self
            .store()
            .node_drains()
            .await?
            .iter()
            .any(|d| d.node == node);
        if !known && !drained {
            let nodes = self.nodes().await?;
            let names: Vec<&str> = nodes.nodes.iter().map(|n| n.name.as_str()).collect();
            return Err(StoreError::NotFound(format!(
                "the {} executor has no node named {node:?}; its nodes: {}",
                nodes.executor,
                if names.is_empty() {
                    "none".to_owned()
                } else {
                    names.join(", ")
                }
            )));
        }
        let drain = self
            .store()
            .drain_node(node, reason, stop_jobs, Some(by.id))
            .await?;
        tracing::info!(node, admin = %by.username, reason, stop_jobs, "node drained");
        self.store()
            .audit(
                by,
                AuditAction::NodeDrained,
                &format!("node {node}"),
                &format!(
                    "{reason}{}",
                    if stop_jobs {
                        " (its jobs stopped and queued again)"
                    } else {
                        ""
                    }
                ),
            )
            .await;
        self.wake();
        Ok(drain)
    }

    /// Ends the drain of `node`; false when it was not drained.
    pub async fn resume_node(&self, node: &str, by: &User) -> Result<bool, StoreError> {
        let resumed = self.store().resume_node(node).await?;
        if resumed {
            tracing::info!(node, admin = %by.username, "node resumed");
            self.store()
                .audit(by, AuditAction::NodeResumed, &format!("node {node}"), "")
                .await;
            self.wake();
        }
        Ok(resumed)
    }

    /// Why no agent may stand for `node`, if it is this server's own
    /// machine: on the local executor the server samples its GPUs itself,
    /// and jobs hold them by index; an agent there would register them over
    /// again (as it finds them, under other ids), from under the jobs.
    pub async fn servers_own_node(&self, node: &str) -> Result<Option<String>, StoreError> {
        let nodes = self.nodes().await?;
        Ok((nodes.executor == "local" && nodes.nodes.iter().any(|n| n.name == node)).then(|| {
            format!(
                "node {node} is this server's own machine, whose GPUs the server samples itself; \
                 agents run on other machines, each with its own name (--node)"
            )
        }))
    }

    /// A new agent token for `node`, made by the admin `by` (its secret is
    /// in the answer only), and in the audit trail. Refused for this
    /// server's own machine on the local executor: an agent there would
    /// register its GPUs over again, from under the jobs that hold them.
    pub async fn make_node_token(
        &self,
        by: &User,
        node: &str,
        request: &trainyard_domain::identity::NodeTokenRequest,
    ) -> Result<trainyard_domain::identity::NewApiToken, NodeTokenError> {
        if let Some(why) = self.servers_own_node(node).await? {
            return Err(NodeTokenError::ServersOwn(why));
        }
        let token = self.store().create_node_token(by.id, node, request).await?;
        tracing::info!(node, admin = %by.username, expires_at = ?token.token.expires_at, "node token made");
        self.store()
            .audit(
                by,
                AuditAction::NodeTokenMade,
                &format!("node {node}"),
                &format!(
                    "token {} ({}), {}",
                    token.token.id,
                    token.token.name,
                    token.token.expires_at.map_or_else(
                        || "never expires".to_owned(),
                        |t| format!("expires {}", trainyard_domain::format_utc(t))
                    )
                ),
            )
            .await;
        Ok(token)
    }

    /// Revokes one of `node`'s agent tokens, as the admin `by` asks, and
    /// says so in the audit trail; false if it is not the node's or was
    /// revoked before.
    pub async fn revoke_node_token(
        &self,
        by: &User,
        node: &str,
        id: i64,
    ) -> Result<bool, StoreError> {
        if !self.store().revoke_node_token(node, id).await? {
            return Ok(false);
        }
        tracing::info!(node, id, admin = %by.username, "node token revoked");
        self.store()
            .audit(
                by,
                AuditAction::NodeTokenRevoked,
                &format!("node {node}"),
                &format!("token {id}"),
            )
            .await;
        Ok(true)
    }

    /// The executor's nodes and who holds their GPUs: Trainyard's jobs
    /// (those that start or run), what is not Trainyard's, and what is
    /// free. An executor that cannot tell now says why.
    pub async fn nodes(&self) -> Result<trainyard_domain::ExecutorNodes, StoreError> {
        let active = self.store().active_jobs().await?;
        let mut on: HashMap<String, (u32, Vec<i64>)> = HashMap::new();
        for r in &active {
            if let (JobState::Starting | JobState::Running, Some(node)) =
                (r.job.state, r.job.node.as_deref())
            {
                let entry = on.entry(node.to_owned()).or_default();
                entry.0 += r.job.gpu_indices.len() as u32;
                entry.1.push(r.job.id);
            }
        }
        let executor = self.inner.executor.kind().to_owned();
        let capacity = match self.inner.executor.capacity().await {
            Ok(capacity) => capacity,
            Err(why) => {
                return Ok(trainyard_domain::ExecutorNodes {
                    executor,
                    nodes: Vec::new(),
                    unavailable: Some(why),
                });
            }
        };
        let offered: HashMap<&str, u32> = capacity
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.gpus))
            .collect();
        let mut drains: HashMap<String, trainyard_domain::NodeDrain> = self
            .store()
            .node_drains()
            .await?
            .into_iter()
            .map(|d| (d.node.clone(), d))
            .collect();
        let mut nodes: Vec<trainyard_domain::ExecutorNode> = capacity
            .whole()
            .iter()
            .map(|n| {
                let offered = offered.get(n.name.as_str()).copied().unwrap_or(0);
                let (used, mut jobs) = on.remove(&n.name).unwrap_or_default();
                jobs.sort_unstable();
                let drain = drains.remove(&n.name);
                trainyard_domain::ExecutorNode {
                    name: n.name.clone(),
                    takes_jobs: n.schedulable && drain.is_none(),
                    drain,
                    gpus: n.gpus,
                    used,
                    others: n.gpus.saturating_sub(offered),
                    free: offered.saturating_sub(used),
                    jobs,
                }
            })
            .collect();
        // Drains of nodes the executor does not offer now (gone, or not
        // Ready): listed, so that they can be seen and ended.
        let mut gone: Vec<trainyard_domain::NodeDrain> = drains.into_values().collect();
        gone.sort_by(|a, b| a.node.cmp(&b.node));
        nodes.extend(gone.into_iter().map(|d| trainyard_domain::ExecutorNode {
            name: d.node.clone(),
            takes_jobs: false,
            drain: Some(d),
            gpus: 0,
            used: 0,
            others: 0,
            free: 0,
            jobs: Vec::new(),
        }));
        Ok(trainyard_domain::ExecutorNodes {
            executor,
            nodes,
            unavailable: None,
        })
    }

    /// How many nodes the executor has now and their GPUs, without reading
    /// a job (the home page asks on every load); None while it cannot tell.
    pub async fn node_figures(&self) -> Option<(u64, u64)> {
        let capacity = self.inner.executor.capacity().await.ok()?;
        let nodes = capacity.whole();
        Some((
            nodes.len() as u64,
            nodes.iter().map(|n| u64::from(n.gpus)).sum(),
        ))
    }

    /// Asks a job to stop; the supervisor stops it.
    /// `by`: who asked, when not the job's owner (an admin), for its
    /// timeline.
    pub async fn cancel(&self, id: i64, by: Option<&User>) -> Result<JobRecord, StoreError> {
        // A second press changes nothing, and is not written down again.
        let asked_before = self.store().get_job(id).await?.job.cancel_requested;
        let record = self
            .store()
            .request_cancel(id, by.map(|u| u.username.as_str()))
            .await?;
        if let Some(by) = by.filter(|_| !asked_before) {
            let whose = record.job.owner.as_deref().unwrap_or("nobody");
            self.store()
                .audit(
                    by,
                    AuditAction::JobStopped,
                    &format!("job {id}"),
                    &format!("{}'s job {}", whose, record.job.spec.name),
                )
                .await;
        }
        if record.job.state == JobState::Cancelled {
            if let Some(run_id) = &record.job.run_id {
                self.end_run(run_id, "KILLED").await;
            }
            // Cancelled in the queue: what an earlier attempt left (its
            // folders, a checkpoint claim) goes now; its checkpoints are
            // kept for a while, as its timeline says.
            let kept = self.retire(&record, JobState::Cancelled).await;
            if let Some(said) = kept.strip_prefix("; ") {
                let said = format!("{}{}", said[..1].to_uppercase(), &said[1..]);
                if let Err(error) = self.store().add_job_event(id, "finished", &said).await {
                    tracing::warn!(job = id, %error, "could not say what the job keeps");
                }
            }
        }
        self.wake();
        Ok(record)
    }

    /// Files a job that has not ended under the team `name`, as `by` asks:
    /// an admin may name any team, anyone else one of their own. The queue
    /// counts it against that team from the next cycle; a job that may not
    /// be preempted must fit the team's guarantee, as at submission.
    pub async fn set_team(
        &self,
        record: &JobRecord,
        name: &str,
        by: &User,
    ) -> Result<JobRecord, SubmitError> {
        let name = name.trim();
        let teams = self.store().team_quotas().await?;
        let invalid =
            |message: String| SubmitError::Invalid(vec![FieldError::new("team", message)]);
        let Some(team) = teams.iter().find(|t| t.name == name) else {
            return Err(invalid(format!(
                "there is no team `{name}`; teams appear as their members sign in, or an admin makes them (Admin → Teams)"
            )));
        };
        if !by.is_admin && !by.in_team(team.id) {
            let yours: Vec<&str> = by.teams.iter().map(|t| t.name.as_str()).collect();
            return Err(invalid(if yours.is_empty() {
                format!("you are in no team, so you cannot file the job under `{name}`")
            } else {
                format!(
                    "you are not in the team `{name}`; yours: {}",
                    yours.join(", ")
                )
            }));
        }
        let job = &record.job;
        if job.state.is_terminal() {
            return Err(SubmitError::Store(StoreError::Rejected(format!(
                "job {} has already ended ({}); its GPU time is counted against the team it ran for",
                job.id,
                job.state.label()
            ))));
        }
        if record.team_id == Some(team.id) {
            return Ok(record.clone());
        }
        if !job.spec.preemptible && job.gpus > team.quota_gpus {
            return Err(invalid(format!(
                "the job may not be preempted, so it runs only on its team's guaranteed GPUs: team {name} is guaranteed {} and the job asks for {}",
                team.quota_gpus, job.gpus
            )));
        }
        let from = job.team.as_deref().unwrap_or("no team");
        let event = format!("moved from {from} to {name} by {}", by.username);
        let (moved, charged) = self
            .store()
            .set_job_team(job.id, Some(team.id), &event)
            .await?;
        if let Some(span) = charged {
            self.book_usage(&span);
        }
        tracing::info!(job = job.id, from, to = name, by = %by.username, "job filed under another team");
        self.store()
            .audit(
                by,
                AuditAction::JobMoved,
                &format!("job {}", job.id),
                &format!("from {from} to {name}"),
            )
            .await;
        self.wake();
        Ok(moved)
    }

    /// Why a job that may not be preempted could never run: it runs only
    /// within its team's guarantee, and one that could never fit there is
    /// refused, not queued forever (with no quotas set, every guarantee is
    /// 0). None when it may run.
    async fn beyond_guarantee(
        &self,
        spec: &JobSpec,
        team_id: Option<i64>,
        owner: &User,
    ) -> Result<Option<String>, StoreError> {
        let gpus = spec.resources().gpus;
        if spec.preemptible || gpus == 0 {
            return Ok(None);
        }
        let quota = match team_id {
            Some(id) => self
                .store()
                .team_quotas()
                .await?
                .into_iter()
                .find(|t| t.id == id)
                .map_or(0, |t| t.quota_gpus),
            None => 0,
        };
        if quota >= gpus {
            return Ok(None);
        }
        let team = team_id
            .and_then(|id| owner.teams.iter().find(|t| t.id == id))
            .map_or("a job of no team".to_owned(), |t| {
                format!("team {}", t.name)
            });
        Ok(Some(format!(
            "a job that may not be preempted runs only on its team's guaranteed GPUs: {team} is guaranteed {quota} and the job asks for {gpus}; leave it preemptible, or ask an admin for a guarantee"
        )))
    }

    /// Submits a finished job again, as a new job with the same spec and
    /// files (as they were at its submission), and a new run, under a team
    /// its owner is in now. The old job keeps its history.
    /// `by`: who asked, when not the job's owner (an admin), for the new
    /// job's timeline.
    pub async fn retry(
        &self,
        id: i64,
        by: Option<&str>,
        resume: bool,
    ) -> Result<JobRecord, StoreError> {
        let (jobs, by) = (self.clone(), by.map(str::to_owned));
        detached(async move { jobs.retry_now(id, by.as_deref(), resume).await }).await
    }

    async fn retry_now(
        &self,
        id: i64,
        by: Option<&str>,
        resume: bool,
    ) -> Result<JobRecord, StoreError> {
        // Its files are copied below: it is not deleted meanwhile.
        let Some(_source) = self.hold(id) else {
            return Err(StoreError::NotFound(format!("job {id} is being deleted")));
        };
        let old = self.store().get_job(id).await?;
        if !old.job.state.is_terminal() {
            return Err(StoreError::Rejected(format!(
                "job {id} has not ended ({}); cancel it first, or wait",
                old.job.state.label()
            )));
        }
        let experiment_id = old.job.experiment_id.ok_or_else(|| {
            StoreError::Rejected(format!("job {id} has no experiment left to log to"))
        })?;
        let mut spec = old.job.spec.clone();
        // From scratch, or from what this one left: not from what it
        // resumed from (moved into it, and its own now).
        spec.resume_from = resume.then_some(id);
        // Its datasets are linked at its start: one deleted since would
        // fail it there, after its wait in the queue.
        for name in &spec.datasets {
            if self.store().dataset(name).await?.is_none() {
                return Err(StoreError::Rejected(format!(
                    "job {id} reads the dataset `{name}`, which no longer exists; upload it \
                     again under that name, then retry"
                )));
            }
        }
        // The team as its owner's teams are now: one they left no longer
        // lends them its GPUs (nor sees the new run).
        let mut team_id = old.team_id;
        let owner = match old.owner_id {
            Some(uid) => self.store().user(uid).await?,
            None => None,
        };
        if resume {
            let why = match &owner {
                Some(owner) => self.cannot_resume(id, owner).await?,
                None => Some(format!("job {id} has no owner to resume it")),
            };
            if let Some(why) = why {
                return Err(StoreError::Rejected(why));
            }
        }
        if let Some(owner) = owner {
            if !team_id.is_some_and(|t| owner.in_team(t)) {
                team_id = owner.primary_team();
            }
            if let Some(why) = self.beyond_guarantee(&spec, team_id, &owner).await? {
                return Err(StoreError::Rejected(why));
            }
        }
        let (run, params) = self
            .run_for(&spec, experiment_id, 0, Owner::new(old.owner_id, team_id))
            .await?;
        let record = self
            .store()
            .create_job(NewJob {
                spec,
                owner_id: old.owner_id,
                team_id,
                cpu_millis: old.job.cpu_millis,
                memory_mib: old.job.memory_mib,
                max_runtime_secs: old.job.max_runtime_secs,
                run,
                params,
                tags: std::iter::once(("trainyard.retry_of".to_owned(), id.to_string()))
                    .chain(resume.then(|| ("trainyard.resumed_from".to_owned(), id.to_string())))
                    .collect(),
                submitted: format!(
                    "queued, {} job {id}{}",
                    if resume {
                        "resuming from the checkpoints of"
                    } else {
                        "a retry of"
                    },
                    by.map(|name| format!(" by {name}")).unwrap_or_default()
                ),
            })
            .await?;
        let _held = self.hold(record.job.id);
        // Its files are made ready below, after the checkpoints are taken.
        let record = self.take_for(record, false).await?;
        if record.job.state.is_terminal() {
            return Ok(record);
        }
        let from = self.files_dir(id);
        let to = self.files_dir(record.job.id);
        let marker = self.files_ready_marker(record.job.id);
        let copied = tokio::task::spawn_blocking(move || {
            if from.is_dir() {
                private_folder(&to)?;
                templates::copy_tree(&from, &to)?;
            }
            if let Some(folder) = marker.parent() {
                private_folder(folder)?;
            }
            std::fs::write(&marker, b"")?;
            Ok::<_, std::io::Error>(())
        })
        .await
        .map_err(|e| e.to_string())
        .and_then(|r| r.map_err(|e| e.to_string()));
        if let Err(message) = copied {
            let message = format!("could not copy the job's files: {message}");
            self.finish(&record, JobState::Failed, None, &message, false)
                .await?;
            return self.store().get_job(record.job.id).await;
        }
        self.wake();
        Ok(record)
    }

    /// Schedules and supervises until the task is aborted.
    pub async fn run_forever(self) {
        loop {
            let began = tokio::time::Instant::now();
            if let Err(error) = self.cycle().await {
                tracing::warn!(%error, "job supervisor cycle failed; trying again");
            }
            // What wakes it comes in bursts (a submission each, a watch
            // event per pod): one cycle takes in all that came meanwhile,
            // paced by what the last one cost (see Pace), so that
            // thousands of jobs never keep a core busy with cycles.
            let pace = *self.inner.pace.lock().unwrap_or_else(|p| p.into_inner());
            let woken = tokio::select! {
                _ = self.inner.wake.notified() => true,
                _ = self.inner.executor.changed() => false,
                _ = tokio::time::sleep(TICK) => false,
            };
            if woken {
                tokio::time::sleep_until(pace.next(began, false)).await;
            } else {
                // A submission or a cancel meanwhile is taken sooner.
                tokio::select! {
                    _ = tokio::time::sleep_until(pace.next(began, true)) => {}
                    _ = self.inner.wake.notified() => {
                        tokio::time::sleep_until(pace.next(began, false)).await;
                    }
                }
            }
        }
    }

    /// One look at every unfinished job: ended ones are recorded, cancels
    /// are passed on, queued ones are placed or told why not.
    pub async fn cycle(&self) -> Result<(), StoreError> {
        let began = std::time::Instant::now();
        let active = self.unfinished().await?;
        let read = began.elapsed();
        self.expire_checkpoints();
        // Where started attempts run, as their executors name it (asked
        // before they are observed: one that ended is let go), written
        // for all of them at once.
        let pods: Vec<_> = active
            .iter()
            .filter_map(|record| {
                let from: &'static [JobState] = match record.job.state {
                    JobState::Starting => &[JobState::Starting],
                    JobState::Running => &[JobState::Running],
                    _ => return None,
                };
                let pod = self.inner.executor.pod(record)?;
                (record.job.pod.as_ref() != Some(&pod)).then(|| {
                    let change = JobChange {
                        pod: Some(Some(pod)),
                        ..Default::default()
                    };
                    (record.job.id, from, record.job.state, change)
                })
            })
            .collect();
        self.store().move_jobs(pods).await?;
        let mut running = Vec::new();
        let mut queued = Vec::new();
        let mut orphans = Vec::new();
        for record in active {
            match record.job.state {
                JobState::Queued if self.files_ready(&record.job) => queued.push(record),
                // Its submission stopped with the server that took it: no
                // one will ready it now.
                JobState::Queued if self.left_half_submitted(&record.job) => orphans.push(record),
                JobState::Starting | JobState::Running => {
                    let id = record.job.id;
                    // Stopped for another job: that job takes its room now.
                    let stopped_for_others = record.preempt_reason.is_some();
                    if let Some(record) = self.watch(record).await? {
                        running.push(record);
                    } else if !stopped_for_others
                        && let Ok(again) = self.store().get_job(id).await
                        && again.job.state == JobState::Queued
                        && self.files_ready(&again.job)
                    {
                        // Requeued (its node lost, or retried): it is in
                        // this cycle's queue, in its place, before what its
                        // room would otherwise go to.
                        queued.push(Arc::new(again));
                    }
                }
                _ => {}
            }
        }
        for record in orphans {
            tracing::warn!(
                job = record.job.id,
                "the job was being submitted when the server stopped; it fails"
            );
            self.finish(
                &record,
                JobState::Failed,
                None,
                "the server stopped while this job was being submitted, before its files were in place; submit it again",
                false,
            )
            .await?;
        }
        let observed = began.elapsed();
        // Asked after every running attempt was looked at: what ended
        // meanwhile is free again.
        let capacity = match self.inner.executor.capacity().await {
            Ok(capacity) => capacity,
            Err(error) => {
                // Nothing starts, nothing is lost: the next cycle asks again.
                tracing::warn!(executor = self.inner.executor.kind(), %error, "cannot tell the executor's capacity; nothing starts until it can");
                return Ok(());
            }
        };
        let node_of: HashMap<&str, sched::NodeId> = capacity
            .nodes
            .iter()
            .map(|n| (n.name.as_str(), n.id))
            .collect();
        let only_node = match capacity.nodes.as_slice() {
            [node] => Some(node.id),
            _ => None,
        };
        let now = now_millis();
        let team_rows = self.store().team_quotas().await?;
        let mut teams: Vec<sched::Team> = team_rows
            .iter()
            .filter(|t| t.id > 0 && t.id <= sched::TeamId::MAX as i64)
            .map(|t| sched::Team {
                id: t.id as sched::TeamId,
                name: t.name.clone(),
                quota_gpus: t.quota_gpus,
                share: t.share,
            })
            .collect();
        teams.push(sched::Team {
            id: NO_TEAM,
            name: "(no team)".to_owned(),
            quota_gpus: 0,
            share: 1.0,
        });
        let team_of = |r: &JobRecord| {
            r.team_id
                .filter(|&t| t > 0 && t <= sched::TeamId::MAX as i64)
                .map_or(NO_TEAM, |t| t as sched::TeamId)
        };
        let user_of = |r: &JobRecord| {
            r.owner_id
                .filter(|&u| u > 0 && u <= sched::UserId::MAX as i64)
                .map_or(0, |u| u as sched::UserId)
        };
        let running_now: Vec<sched::RunningJob> = running
            .iter()
            .filter_map(|r| {
                // An attempt on a node the executor no longer offers
                // holds nothing that could be given to another.
                let node = match r.job.node.as_deref() {
                    Some(name) => node_of.get(name).copied().or(only_node),
                    None => only_node,
                }?;
                Some(sched::RunningJob {
                    id: r.job.id as sched::JobId,
                    team: team_of(r),
                    user: user_of(r),
                    priority: r.job.priority,
                    started_at: r.job.started_at.unwrap_or(0),
                    // Stopped at its maximum runtime at the latest.
                    ends_by: r.job.started_at.map(|at| {
                        at.saturating_add((r.job.max_runtime_secs as i64).saturating_mul(1000))
                    }),
                    node,
                    gpus: r.job.gpu_indices.clone(),
                    resources: resources(&r.job),
                    preemptible: r.job.spec.preemptible,
                    preempting: r.preempt_reason.is_some(),
                })
            })
            .collect();
        // What running attempts used so far and is not recorded yet (a
        // move to another team recorded the part before it).
        let charge_start: HashMap<i64, i64> = running
            .iter()
            .filter_map(|r| Some((r.job.id, r.charge_start()?)))
            .collect();
        let so_far: Vec<(i64, i64, u32, i64)> = running_now
            .iter()
            .map(|j| {
                (
                    j.team as i64,
                    j.user as i64,
                    j.gpus.len() as u32,
                    charge_start
                        .get(&(j.id as i64))
                        .copied()
                        .unwrap_or(j.started_at),
                )
            })
            .collect();
        let usage = self.usage(now, &so_far).await?;
        let drains: HashMap<String, trainyard_domain::NodeDrain> = self
            .store()
            .node_drains()
            .await?
            .into_iter()
            .map(|d| (d.node.clone(), d))
            .collect();
        let mut nodes = capacity.nodes.clone();
        for n in &mut nodes {
            if drains.contains_key(&n.name) {
                n.schedulable = false;
            }
        }
        let state = sched::State {
            now,
            nodes,
            teams,
            running: running_now,
            pending: queued
                .iter()
                .map(|r| sched::PendingJob {
                    id: r.job.id as sched::JobId,
                    team: team_of(r),
                    user: user_of(r),
                    priority: r.job.priority,
                    submitted_at: r.job.queued_at.unwrap_or(r.job.created_at),
                    resources: resources(&r.job),
                    borrow: r.job.spec.preemptible,
                    max_runtime_ms: Some((r.job.max_runtime_secs as i64).saturating_mul(1000)),
                })
                .collect(),
            usage,
        };
        let decision = sched::schedule(&state, &sched::Policy::default());
        *self.inner.pace.lock().unwrap_or_else(|p| p.into_inner()) = Pace {
            looked: began.elapsed(),
            queued: !decision.waiting.is_empty(),
        };
        let by_id: HashMap<i64, &JobRecord> = queued.iter().map(|r| (r.job.id, &**r)).collect();
        let nodes: HashMap<sched::NodeId, &sched::Node> =
            capacity.nodes.iter().map(|n| (n.id, n)).collect();
        let mut starts: Vec<_> = decision
            .starts
            .iter()
            .filter_map(|placement| {
                let record = by_id.get(&(placement.job as i64))?;
                let node = nodes.get(&placement.node)?;
                Some(((*record).clone(), (*node).clone(), placement.gpus.clone()))
            })
            .collect();
        if let Some(slots) = capacity.slots
            && starts.len() > slots
        {
            // The rest stay queued and start as running jobs end.
            tracing::warn!(job = starts[slots].0.job.id, "{}", capacity.full);
            starts.truncate(slots);
        }
        let borrowed_now: std::collections::HashSet<sched::JobId> =
            sched::borrowed_jobs(&state.teams, &state.running)
                .into_iter()
                .collect();
        let flags = self.write_borrowed(&running, &borrowed_now).await;
        let mut stops: Vec<(i64, String)> = decision
            .preempt
            .iter()
            .map(|p| (p.job as i64, p.to_string()))
            .collect();
        for r in &running {
            if let Some(drain) = r.job.node.as_deref().and_then(|n| drains.get(n))
                && drain.stop_jobs
                && !stops.iter().any(|(job, _)| *job == r.job.id)
            {
                stops.push((
                    r.job.id,
                    format!(
                        "node {} is drained ({}): the job is stopped and queued again, \
                         its retries untouched",
                        drain.node, drain.reason
                    ),
                ));
            }
        }
        let preempted = self.preempt(&running, stops).await;
        let borrowed_starts: std::collections::HashSet<sched::JobId> = decision
            .starts
            .iter()
            .filter(|p| p.borrowed)
            .map(|p| p.job)
            .collect();
        let placed = starts.len();
        let launching = std::time::Instant::now();
        let launched = self.launch(starts, &borrowed_starts).await;
        // Positions are written even when a start could not be recorded.
        let positions = self.write_positions(&decision.waiting, &drains).await;
        tracing::debug!(
            active = running.len() + queued.len(),
            placed,
            read_ms = read.as_millis() as u64,
            observed_ms = observed.saturating_sub(read).as_millis() as u64,
            looked_ms = launching.duration_since(began).as_millis() as u64,
            launched_ms = launching.elapsed().as_millis() as u64,
            "supervisor cycle"
        );
        flags.and(preempted).and(launched).and(positions)
    }

    /// The unfinished jobs in id order, as the database has them: those
    /// the store wrote since the last call are read again (see
    /// [`ActiveJobs`]).
    async fn unfinished(&self) -> Result<Vec<Arc<JobRecord>>, StoreError> {
        let mut active = self.inner.active.lock().await;
        // Taken before reading: a write that commits meanwhile is told
        // again after, and read at the next call.
        let changes = active.follower.take();
        let whole = changes.all || active.whole.is_none_or(|at| at.elapsed() >= ACTIVE_REREAD);
        if whole {
            let at = std::time::Instant::now();
            let records = match self.store().active_jobs().await {
                Ok(records) => records,
                Err(error) => {
                    active.whole = None;
                    return Err(error);
                }
            };
            active.records = records
                .into_iter()
                .map(|r| (r.job.id, Arc::new(r)))
                .collect();
            active.whole = Some(at);
        } else if !changes.ids.is_empty() {
            let ids: Vec<i64> = changes.ids.into_iter().collect();
            let records = match self.store().jobs_by_id(&ids).await {
                Ok(records) => records,
                Err(error) => {
                    active.whole = None;
                    return Err(error);
                }
            };
            for id in &ids {
                active.records.remove(id);
            }
            for record in records {
                if matches!(
                    record.job.state,
                    JobState::Queued | JobState::Starting | JobState::Running
                ) {
                    active.records.insert(record.job.id, Arc::new(record));
                }
            }
        }
        Ok(active.records.values().cloned().collect())
    }

    /// The scheduler's usage at `now`: decayed history (read at the first
    /// call) and what running attempts used so far.
    async fn usage(
        &self,
        now: i64,
        running: &[(i64, i64, u32, i64)],
    ) -> Result<sched::Usage, StoreError> {
        let half_life = self.inner.config.usage_half_life.as_millis().max(1) as i64;
        let loaded = self
            .inner
            .usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some();
        if !loaded {
            let from = now.saturating_sub(half_life.saturating_mul(USAGE_HALF_LIVES_READ));
            let rows = self.store().gpu_usage_since(from).await?;
            let mut book = fair::UsageBook::new(half_life, now);
            for row in rows {
                // A day's use counts as of its middle.
                let at = row.day * 86_400_000 + 43_200_000;
                book.add(
                    row.team_id,
                    row.user_id,
                    row.gpu_seconds / 3600.0,
                    at.min(now),
                );
            }
            let mut slot = self.inner.usage.lock().unwrap_or_else(|p| p.into_inner());
            if slot.is_none() {
                *slot = Some(book);
            }
        }
        let slot = self.inner.usage.lock().unwrap_or_else(|p| p.into_inner());
        Ok(slot
            .as_ref()
            .map(|book| book.usage(now, running))
            .unwrap_or_default())
    }

    /// Records the GPU time of an attempt that ended (or was stopped):
    /// by the hour in the store, and in the decayed usage. What a move to
    /// another team charged already is not charged again, and a move at
    /// the same moment is charged once (the store guards both).
    async fn account(&self, record: &JobRecord) {
        let job = &record.job;
        let Some(started) = job.started_at else {
            return;
        };
        match self.store().charge_attempt(job.id, started).await {
            Ok(Some(span)) => self.book_usage(&span),
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(job = job.id, %error, "could not record the job's GPU time");
            }
        }
    }

    /// Adds recorded GPU time to the decayed usage, once it is loaded.
    fn book_usage(&self, span: &trainyard_store::GpuSpan) {
        let hours = span.gpus as f64 * (span.to_ms - span.from_ms) as f64 / 3_600_000.0;
        if let Some(book) = self
            .inner
            .usage
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_mut()
        {
            book.add(span.team_id, span.user_id, hours, span.to_ms);
        }
    }

    /// Marks which running attempts are on borrowed GPUs, where that changed.
    async fn write_borrowed(
        &self,
        running: &[Arc<JobRecord>],
        borrowed: &std::collections::HashSet<sched::JobId>,
    ) -> Result<(), StoreError> {
        let moves: Vec<_> = running
            .iter()
            .filter_map(|r| {
                let now = borrowed.contains(&(r.job.id as sched::JobId));
                (r.job.borrowed != now).then(|| {
                    (
                        r.job.id,
                        &[JobState::Starting, JobState::Running][..],
                        r.job.state,
                        JobChange {
                            borrowed: Some(now),
                            event: (!now).then(|| {
                                (
                                    "quota".to_owned(),
                                    "now within its team's quota: it is no longer preempted for others".to_owned(),
                                )
                            }),
                            ..Default::default()
                        },
                    )
                })
            })
            .collect();
        self.store().move_jobs(moves).await.map(|_| ())
    }

    /// Asks attempts to give their GPUs back (borrowed ones for their
    /// owners, those on a node drained with `stop_jobs`): the reason goes
    /// to their timeline, and the executor stops them (SIGTERM, the stop
    /// grace, SIGKILL); once ended they go back to the queue, their retries
    /// untouched.
    async fn preempt(
        &self,
        running: &[Arc<JobRecord>],
        preempt: Vec<(i64, String)>,
    ) -> Result<(), StoreError> {
        let by_id: HashMap<i64, &JobRecord> = running.iter().map(|r| (r.job.id, &**r)).collect();
        let mut first_error = None;
        for (job, reason) in preempt {
            let Some(record) = by_id.get(&job) else {
                continue;
            };
            if record.preempt_reason.is_some() || record.job.cancel_requested {
                continue;
            }
            tracing::info!(job = record.job.id, %reason, "preempting");
            let marked = self
                .store()
                .move_job(
                    record.job.id,
                    &[record.job.state],
                    record.job.state,
                    JobChange {
                        preempt_reason: Some(Some(reason.clone())),
                        event: Some(("preempting".to_owned(), reason)),
                        ..Default::default()
                    },
                )
                .await;
            match marked {
                Ok(true) => {
                    if let Err(error) = self.inner.executor.stop(record).await {
                        tracing::warn!(job = record.job.id, %error, "could not stop the job to preempt it");
                    }
                }
                Ok(false) => {}
                Err(error) => {
                    first_error.get_or_insert(error);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn write_positions(
        &self,
        waiting: &[sched::Waiting],
        drains: &HashMap<String, trainyard_domain::NodeDrain>,
    ) -> Result<(), StoreError> {
        let changed: Vec<(i64, u32, String)> = {
            let mut last = self
                .inner
                .positions
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            let mut changed = Vec::new();
            let mut seen = HashMap::with_capacity(waiting.len());
            for w in waiting {
                let id = w.job as i64;
                let now = (w.position as u32, reason_text(&w.reason, drains));
                if last.get(&id) != Some(&now) {
                    changed.push((id, now.0, now.1.clone()));
                }
                seen.insert(id, now);
            }
            *last = seen;
            changed
        };
        self.store().set_queue_positions(&changed).await
    }

    /// Starts the cycle's placements. They do not overlap, so their starts
    /// run side by side (an executor's start waits on its API: two calls
    /// for a Kubernetes Job), and the store sees three writes for all of
    /// them rather than four for each: placed (STARTING, node and GPUs),
    /// their runs' tokens, and started (RUNNING, with their handles).
    async fn launch(
        &self,
        starts: Vec<(JobRecord, sched::Node, Vec<u32>)>,
        borrowed: &std::collections::HashSet<sched::JobId>,
    ) -> Result<(), StoreError> {
        use futures::StreamExt;
        if starts.is_empty() {
            return Ok(());
        }
        let now = now_millis();
        let moves = starts
            .iter()
            .map(|(record, node, gpus)| {
                let gpu_list = gpus
                    .iter()
                    .map(u32::to_string)
                    .collect::<Vec<_>>()
                    .join(",");
                (
                    record.job.id,
                    &[JobState::Queued][..],
                    JobState::Starting,
                    JobChange {
                        gpu_indices: Some(gpus.clone()),
                        node: Some(Some(node.name.clone())),
                        handle: Some(None),
                        pod: Some(None),
                        started_at: Some(Some(now)),
                        borrowed: Some(borrowed.contains(&(record.job.id as sched::JobId))),
                        event: Some((
                            "starting".into(),
                            match (
                                gpus.is_empty(),
                                borrowed.contains(&(record.job.id as sched::JobId)),
                            ) {
                                (true, _) => format!("placed on {}, no GPU", node.name),
                                (false, false) => {
                                    format!("placed on {}, GPU {gpu_list}", node.name)
                                }
                                (false, true) => format!(
                                    "placed on {}, GPU {gpu_list}: borrowed beyond its team's quota, so it may be preempted",
                                    node.name
                                ),
                            },
                        )),
                        ..Default::default()
                    },
                )
            })
            .collect();
        let moved = self.store().move_jobs(moves).await?;
        // Those cancelled in between are not started.
        let starts: Vec<_> = starts
            .into_iter()
            .zip(moved)
            .filter_map(|(start, moved)| moved.then_some(start))
            .collect();
        // The job's token writes to its run only, and ends with it.
        let wanted: Vec<(i64, String)> = starts
            .iter()
            .filter_map(|(r, _, _)| Some((r.owner_id?, r.job.run_id.clone()?)))
            .collect();
        let mut tokens = match self.store().create_run_tokens(&wanted).await {
            Ok(tokens) => Ok(tokens.into_iter()),
            Err(e) => Err(format!("cannot make the job's tracking token: {e}")),
        };
        let starts: Vec<_> = starts
            .into_iter()
            .map(|(record, node, gpus)| {
                let token = match (&mut tokens, record.owner_id, &record.job.run_id) {
                    (Ok(made), Some(_), Some(_)) => Ok(made.next()),
                    (Ok(_), _, _) => Ok(None),
                    (Err(message), _, _) => Err(message.clone()),
                };
                (record, node, gpus, token)
            })
            .collect();
        let ended: Vec<_> = futures::stream::iter(starts)
            .map(|(record, node, gpus, token)| {
                let jobs = self.clone();
                async move {
                    let started = match token {
                        Ok(token) => match jobs.attempt(&record, &node, &gpus, now, token).await {
                            // The checkpoints it resumes from, which it took
                            // at its submission.
                            Ok(attempt) => match jobs.resume(&record).await {
                                Ok(resume_from) => {
                                    let attempt = Attempt {
                                        resume_from,
                                        ..attempt
                                    };
                                    jobs.inner.executor.start(attempt).await
                                }
                                Err(refused) => Err(refused),
                            },
                            Err(message) => Err(StartError::Failed(message)),
                        },
                        Err(message) => Err(StartError::Failed(message)),
                    };
                    (record, node, gpus, started)
                }
            })
            .buffer_unordered(CONCURRENT_STARTS)
            .collect()
            .await;
        let mut running = Vec::new();
        let mut first_error = None;
        for (record, node, gpus, started) in ended {
            let job = &record.job;
            let outcome = match started {
                Ok(started) => {
                    tracing::info!(job = job.id, node = %node.name, gpus = ?gpus, handle = %started.handle, "job started");
                    running.push((record, started));
                    Ok(())
                }
                Err(StartError::Unavailable(message)) => {
                    self.not_started_now(&record, &message).await
                }
                Err(StartError::Failed(message)) => {
                    tracing::warn!(job = job.id, %message, "job could not start");
                    self.finish(&record, JobState::Failed, None, &message, true)
                        .await
                }
                Err(StartError::Refused(message)) => {
                    tracing::warn!(job = job.id, %message, "job cannot start as asked");
                    self.finish(&record, JobState::Failed, None, &message, false)
                        .await
                }
            };
            if let Err(error) = outcome {
                first_error.get_or_insert(error);
            }
        }
        let marked = self.mark_running(&running).await;
        match first_error {
            Some(error) => Err(error),
            None => marked,
        }
    }

    /// An attempt that could not start now (the executor's API is away):
    /// nothing of it ran, so it goes back to the queue as it was. The
    /// reason goes to its timeline once, not at every try.
    async fn not_started_now(&self, record: &JobRecord, message: &str) -> Result<(), StoreError> {
        let job = &record.job;
        tracing::warn!(job = job.id, %message, "job could not start now; it stays queued");
        let why = format!("could not start: {message}; it will be placed again");
        let new = {
            let mut waiting = self.inner.waiting.lock().unwrap_or_else(|p| p.into_inner());
            waiting.insert(job.id, why.clone()).as_ref() != Some(&why)
        };
        self.store()
            .move_job(
                job.id,
                &[JobState::Starting],
                JobState::Queued,
                JobChange {
                    gpu_indices: Some(Vec::new()),
                    node: Some(None),
                    handle: Some(None),
                    pod: Some(None),
                    started_at: Some(None),
                    event: new.then(|| ("waiting".into(), why)),
                    ..Default::default()
                },
            )
            .await?;
        Ok(())
    }

    /// Why `owner`'s new job cannot resume from job `from`'s checkpoints,
    /// if it cannot.
    async fn cannot_resume(&self, from: i64, owner: &User) -> Result<Option<String>, StoreError> {
        if self.inner.config.checkpoint_keep.is_zero() || !self.inner.executor.keeps_checkpoints() {
            return Ok(Some(format!(
                "this server keeps no checkpoints after a job ends ({}); leave resume_from out and start from scratch",
                if self.inner.executor.keeps_checkpoints() {
                    "checkpoint_keep_hours is 0".to_owned()
                } else {
                    self.inner.executor.keeps_no_checkpoints_because()
                }
            )));
        }
        // Someone else's job is as unknown as one that does not exist.
        let record = match self.store().get_job(from).await {
            Ok(record) if record.owner_id == Some(owner.id) => record,
            Ok(_) | Err(StoreError::NotFound(_)) => {
                return Ok(Some(format!(
                    "you have no job {from}; resume from the checkpoints of a job of your own"
                )));
            }
            Err(error) => return Err(error),
        };
        if self
            .store()
            .kept_checkpoints(from)
            .await?
            .is_some_and(|k| k.kept_until > now_millis())
        {
            return Ok(None);
        }
        Ok(Some(if record.job.state.is_terminal() {
            format!(
                "job {from} keeps no checkpoints: it succeeded, saved none in TRAINYARD_CHECKPOINT_DIR, or they were deleted, expired or taken by another job"
            )
        } else {
            format!(
                "job {from} has not ended; its checkpoints are kept once it ends (cancel it first)"
            )
        }))
    }

    /// The job whose kept checkpoints this attempt starts from: those it
    /// took at its submission (the executor moves them into its own at its
    /// first start; later starts find them there). Refused when it took
    /// none after all: starting without them is not what was asked.
    async fn resume(
        &self,
        record: &JobRecord,
    ) -> Result<Option<trainyard_domain::job::Job>, StartError> {
        let Some(from) = record.job.spec.resume_from else {
            return Ok(None);
        };
        if !self.inner.executor.keeps_checkpoints() {
            // Queued before the server moved to an executor that keeps none.
            return Err(StartError::Refused(format!(
                "the {} executor keeps no checkpoints, so it cannot resume from job {from}'s; submit it again without resuming to start from scratch",
                self.inner.executor.kind()
            )));
        }
        let unreadable = |error: StoreError| {
            StartError::Unavailable(format!(
                "cannot read which checkpoints it resumes from now: {error}"
            ))
        };
        match self.store().claimed_by(record.job.id).await {
            Ok(Some(taken)) => match self.store().get_job(taken).await {
                Ok(origin) => Ok(Some(origin.job)),
                Err(error) => Err(unreadable(error)),
            },
            Ok(None) => Err(StartError::Refused(format!(
                "job {from}'s checkpoints are no longer kept for it, so it cannot resume from them; submit it again without resuming to start from scratch"
            ))),
            Err(error) => Err(unreadable(error)),
        }
    }

    /// The new job `record` takes the checkpoints it resumes from, at its
    /// submission: held for it until it ends. It is not started before
    /// (its files are not ready): `files_too` says that its files are
    /// ready once these are taken. Taken by another job a moment before
    /// (two submissions at once), it fails at once, saying so.
    async fn take_for(&self, record: JobRecord, files_too: bool) -> Result<JobRecord, StoreError> {
        let Some(from) = record.job.spec.resume_from else {
            return Ok(record);
        };
        if self.store().claim_checkpoints(from, record.job.id).await? {
            if files_too {
                let marker = self.files_ready_marker(record.job.id);
                let written = tokio::task::spawn_blocking(move || {
                    if let Some(folder) = marker.parent() {
                        private_folder(folder)?;
                    }
                    std::fs::write(&marker, b"")
                })
                .await
                .map_err(|e| e.to_string())
                .and_then(|r| r.map_err(|e| e.to_string()));
                if let Err(message) = written {
                    let message = format!("could not ready the job: {message}");
                    self.finish(&record, JobState::Failed, None, &message, false)
                        .await?;
                    return self.store().get_job(record.job.id).await;
                }
            }
            return Ok(record);
        }
        let message = format!(
            "job {from}'s checkpoints were taken by another job, or went, as this one was submitted; submit it again without resuming to start from scratch"
        );
        self.finish(&record, JobState::Failed, None, &message, false)
            .await?;
        self.store().get_job(record.job.id).await
    }

    /// What the executor needs to start the job's current attempt.
    async fn attempt(
        &self,
        record: &JobRecord,
        node: &sched::Node,
        gpus: &[u32],
        now: i64,
        token: Option<String>,
    ) -> Result<Attempt, String> {
        let job = &record.job;
        let mut datasets = Vec::new();
        for name in &job.spec.datasets {
            let upload = self
                .store()
                .dataset(name)
                .await
                .map_err(|e| e.to_string())?
                .ok_or_else(|| format!("the dataset `{name}` no longer exists"))?;
            datasets.push((name.clone(), self.upload_dir(&upload)));
        }
        let command = job
            .spec
            .command
            .as_deref()
            .map(|c| render_command(c, &job.spec.hyperparameters))
            .ok_or_else(|| "the job has no command".to_owned())?;
        let files = self.files_dir(job.id);
        Ok(Attempt {
            record: record.clone(),
            node: node.name.clone(),
            gpus: gpus.to_vec(),
            command,
            env: environment(job, token.as_deref()),
            files: files.is_dir().then_some(files),
            datasets,
            deadline_ms: now + (job.max_runtime_secs as i64).saturating_mul(1000),
            resume_from: None,
        })
    }

    /// Moves starting jobs to RUNNING with their executor's handles, and
    /// their runs with them, in two writes.
    async fn mark_running(&self, started: &[(JobRecord, Started)]) -> Result<(), StoreError> {
        let moves = started
            .iter()
            .map(|(record, started)| {
                (
                    record.job.id,
                    &[JobState::Starting][..],
                    JobState::Running,
                    JobChange {
                        handle: Some(Some(started.handle.clone())),
                        event: Some(("started".into(), format!("running ({})", started.note))),
                        ..Default::default()
                    },
                )
            })
            .collect();
        let moved = self.store().move_jobs(moves).await?;
        let runs: Vec<String> = started
            .iter()
            .zip(moved)
            .filter_map(|((record, _), moved)| moved.then(|| record.job.run_id.clone()).flatten())
            .collect();
        if let Err(error) = self.store().start_runs(&runs, now_millis()).await {
            tracing::warn!(%error, "could not mark the jobs' runs RUNNING");
        }
        Ok(())
    }

    /// Asks the executor what became of a started attempt and records it:
    /// Some (the record as it now stands) while it runs, None once it ended.
    /// A cancel request is passed on.
    async fn watch(&self, record: Arc<JobRecord>) -> Result<Option<Arc<JobRecord>>, StoreError> {
        let observed = self.inner.executor.observe(&record).await;
        let why = match &observed {
            Observation::Waiting(why) => Some(why.clone()),
            _ => None,
        };
        self.note_waiting(&record, why).await?;
        match observed {
            Observation::Running | Observation::Waiting(_) => {
                if (record.job.cancel_requested || record.preempt_reason.is_some())
                    && let Err(error) = self.inner.executor.stop(&record).await
                {
                    tracing::warn!(job = record.job.id, %error, "could not stop the job");
                }
                Ok(Some(record))
            }
            Observation::Adopted(started) => {
                self.mark_running(&[((*record).clone(), started)]).await?;
                Ok(Some(Arc::new(self.store().get_job(record.job.id).await?)))
            }
            Observation::Ended(ending) => {
                self.ended(&record, &ending).await?;
                Ok(None)
            }
            Observation::Lost(message) => {
                tracing::warn!(job = record.job.id, %message, "job lost");
                self.finish(&record, JobState::Lost, None, &message, true)
                    .await?;
                Ok(None)
            }
        }
    }

    /// Writes why a started attempt waits to its timeline, once for each
    /// new reason.
    async fn note_waiting(
        &self,
        record: &JobRecord,
        why: Option<String>,
    ) -> Result<(), StoreError> {
        let id = record.job.id;
        let changed = {
            let mut waiting = self.inner.waiting.lock().unwrap_or_else(|p| p.into_inner());
            match why {
                Some(why) if waiting.get(&id) != Some(&why) => {
                    waiting.insert(id, why.clone());
                    Some(why)
                }
                Some(_) => None,
                None => {
                    waiting.remove(&id);
                    None
                }
            }
        };
        if let Some(why) = changed {
            let state = record.job.state;
            self.store()
                .move_job(
                    id,
                    &[state],
                    state,
                    JobChange {
                        event: Some(("waiting".into(), why)),
                        ..Default::default()
                    },
                )
                .await?;
        }
        Ok(())
    }

    async fn ended(&self, record: &JobRecord, exit: &Ending) -> Result<(), StoreError> {
        let job = &record.job;
        if exit.reason == EndReason::Disrupted && !job.cancel_requested {
            let why = exit.message.as_deref().unwrap_or("its node went away");
            return self.requeue_disrupted(record, why).await;
        }
        // Stopped to give its GPUs back (unless it finished meanwhile, or
        // its owner cancelled it too).
        let succeeded = exit.reason == EndReason::Exited && exit.exit_code == Some(0);
        if let Some(reason) = &record.preempt_reason
            && !succeeded
            && !self.cancel_requested(record).await
        {
            return self.requeue_preempted(record, reason).await;
        }
        let code = exit.exit_code.or(exit.signal.map(|signal| 128 + signal));
        let how = match (exit.exit_code, exit.signal) {
            (Some(code), _) => format!("exited with code {code}"),
            (None, Some(signal)) => format!("killed by signal {signal}"),
            (None, None) => "ended".to_owned(),
        };
        let (state, mut message) = match exit.reason {
            EndReason::Exited if exit.exit_code == Some(0) => (JobState::Succeeded, how.clone()),
            EndReason::Exited => (JobState::Failed, how.clone()),
            EndReason::Timeout => (
                JobState::Failed,
                format!(
                    "stopped after its max runtime of {} s ({how})",
                    job.max_runtime_secs
                ),
            ),
            EndReason::Cancelled => (JobState::Cancelled, format!("cancelled ({how})")),
            // Cancelled while its node went away.
            EndReason::Disrupted => (JobState::Cancelled, "cancelled".to_owned()),
            EndReason::StartFailed => (
                JobState::Failed,
                format!(
                    "could not start: {}",
                    exit.message.as_deref().unwrap_or("unknown reason")
                ),
            ),
            EndReason::DiskLimit => (
                JobState::Failed,
                format!(
                    "stopped: {} (job_disk_quota_bytes) ({how}); delete what it no longer needs as it goes (old checkpoints, downloads), keep results as artifacts, or ask an admin for more",
                    exit.message
                        .as_deref()
                        .unwrap_or("its files took more disk than it may")
                ),
            ),
        };
        if exit.out_of_memory && state == JobState::Failed {
            let limit = trainyard_domain::format_bytes(
                exit.usage
                    .map(|u| u.memory_limit_bytes)
                    .unwrap_or(job.memory_mib.saturating_mul(1 << 20)),
            );
            message = match exit.reason {
                EndReason::Exited => format!(
                    "out of memory: it reached its limit of {limit} (resources.memory) and the kernel stopped it ({how}); ask for more memory or make it use less"
                ),
                // A Python environment's build runs in a group of the
                // builds' own, and its start failure says so itself.
                EndReason::StartFailed
                | EndReason::Timeout
                | EndReason::Cancelled
                | EndReason::Disrupted
                | EndReason::DiskLimit => message,
            };
        }
        if let Some(usage) = &exit.usage {
            message.push_str(&usage_summary(usage));
        }
        tracing::info!(job = job.id, state = %state, %message, "job ended");
        // Another attempt would fill the same disk (its checkpoints stay).
        let retryable = exit.reason != EndReason::DiskLimit;
        self.finish(record, state, code, &message, retryable).await
    }

    /// Records the end of an attempt, and queues the next one when the
    /// job failed or was lost and has retries left.
    /// `retryable`: false for failures another attempt cannot mend (the
    /// job's files could not be prepared).
    async fn finish(
        &self,
        record: &JobRecord,
        state: JobState,
        exit_code: Option<i32>,
        message: &str,
        retryable: bool,
    ) -> Result<(), StoreError> {
        let job = &record.job;
        // Queued too: a job whose files could not be prepared ends before it starts.
        let from = [JobState::Queued, JobState::Starting, JobState::Running];
        if job.state != JobState::Queued {
            self.account(record).await;
        }
        let cancelled = self.cancel_requested(record).await;
        let retry = retryable
            && matches!(state, JobState::Failed | JobState::Lost)
            && job.attempt < job.retries
            && !cancelled;
        let run_status = match state {
            JobState::Succeeded => "FINISHED",
            JobState::Cancelled => "KILLED",
            _ => "FAILED",
        };
        if let Some(run_id) = &job.run_id {
            self.end_run(run_id, run_status).await;
        }
        if retry {
            let retries = job.retries;
            return self
                .requeue(
                    record,
                    &from,
                    JobChange {
                        exit_code: Some(exit_code),
                        ..Default::default()
                    },
                    |next| {
                        (
                            "retried".into(),
                            format!(
                                "{message}; retrying (attempt {} of {})",
                                next + 1,
                                retries + 1
                            ),
                        )
                    },
                )
                .await;
        }
        let kept = self.retire(record, state).await;
        self.store()
            .move_job(
                job.id,
                &from,
                state,
                JobChange {
                    exit_code: Some(exit_code),
                    finished_at: Some(Some(now_millis())),
                    event: Some(("finished".into(), format!("{message}{kept}"))),
                    ..Default::default()
                },
            )
            .await?;
        Ok(())
    }

    /// A job ends for good in `state`: the executor releases what it held,
    /// and keeps its checkpoints for a while unless it succeeded (or has
    /// no owner to resume it). What is kept is recorded for its owner,
    /// within what one person may keep, and said (for its timeline: "; its
    /// checkpoints … are kept …"), or nothing.
    async fn retire(&self, record: &JobRecord, state: JobState) -> String {
        let job = record.job.id;
        // The checkpoints it took: its own now, or, never moved (it was
        // cancelled in the queue), kept again for another job.
        match self.store().claimed_by(job).await {
            Ok(Some(from)) => {
                if let Err(error) = self.let_go(from, job).await {
                    tracing::warn!(job, from, %error, "could not let the checkpoints it took go; they go when their time is up");
                }
            }
            Ok(None) => {}
            Err(error) => {
                tracing::warn!(job, %error, "could not read which checkpoints it took; they go when their time is up");
            }
        }
        let keep_for = self.inner.config.checkpoint_keep;
        let keep = state != JobState::Succeeded
            && !keep_for.is_zero()
            && self.inner.executor.keeps_checkpoints()
            && record.owner_id.is_some();
        let Some(bytes) = self.inner.executor.retire(record, keep).await else {
            return String::new();
        };
        let Some(owner) = record.owner_id else {
            return String::new();
        };
        let said = trainyard_domain::format_bytes(bytes);
        let most = self.inner.config.checkpoint_keep_bytes;
        if most.is_some_and(|most| bytes > most) {
            self.inner.executor.drop_checkpoints(&record.job).await;
            return format!(
                "; its checkpoints ({said}) were not kept: they are more than one person may keep ({}, checkpoint_keep_bytes)",
                trainyard_domain::format_bytes(most.unwrap_or_default())
            );
        }
        let went = match self.make_room(owner, bytes).await {
            Ok(went) => went,
            Err(error) => {
                tracing::error!(job, %error, "could not make room for the job's checkpoints; they go");
                self.inner.executor.drop_checkpoints(&record.job).await;
                return String::new();
            }
        };
        let until = now_millis().saturating_add(keep_for.as_millis() as i64);
        match self
            .store()
            .keep_checkpoints(job, Some(owner), bytes, until)
            .await
        {
            Ok(()) => format!(
                "; its checkpoints ({said}) are kept for {} h for a job to resume from{}",
                keep_for.as_secs().div_ceil(3600),
                if went.is_empty() {
                    String::new()
                } else {
                    let jobs: Vec<String> = went.iter().map(|j| format!("#{j}")).collect();
                    format!(
                        " (those of job {} went to make room: one person keeps at most {MAX_KEPT_PER_PERSON} jobs' checkpoints{})",
                        jobs.join(", "),
                        most.map(|m| format!(", {} in all", trainyard_domain::format_bytes(m)))
                            .unwrap_or_default()
                    )
                }
            ),
            Err(error) => {
                // Unrecorded, they could never be resumed nor expire.
                tracing::error!(job, %error, "could not record the job's kept checkpoints; they go");
                self.inner.executor.drop_checkpoints(&record.job).await;
                String::new()
            }
        }
    }

    /// Deletes `owner`'s oldest kept checkpoints (none that a job took)
    /// until `bytes` more fit what one person may keep; the jobs whose
    /// checkpoints went.
    async fn make_room(&self, owner: i64, bytes: u64) -> Result<Vec<i64>, StoreError> {
        // Counted with those jobs took (they come back if those jobs are
        // cancelled); only those no job took may go.
        let (count, total) = self.store().kept_checkpoints_held_by(owner).await?;
        let (mut count, mut total) = (count as usize, total);
        let most = self.inner.config.checkpoint_keep_bytes.unwrap_or(u64::MAX);
        let mut went = Vec::new();
        for old in self.store().kept_checkpoints_of(owner).await? {
            if count < MAX_KEPT_PER_PERSON && total.saturating_add(bytes) <= most {
                break;
            }
            match self.store().get_job(old.job).await {
                Ok(origin) => {
                    if self.delete_kept(&origin.job).await?.is_some() {
                        went.push(old.job);
                    }
                }
                // Deleted meanwhile, and its checkpoints with it.
                Err(StoreError::NotFound(_)) => {}
                Err(error) => return Err(error),
            }
            count = count.saturating_sub(1);
            total = total.saturating_sub(old.bytes);
        }
        Ok(went)
    }

    /// Deletes the checkpoints an ended job keeps, as `by` asks (their
    /// owner, or an admin): Ok(false) when it keeps none (or a job that
    /// resumes from them holds them).
    pub async fn delete_checkpoints(
        &self,
        record: &JobRecord,
        by: &User,
    ) -> Result<bool, StoreError> {
        let job = record.job.id;
        if self.delete_kept(&record.job).await?.is_none() {
            return Ok(false);
        }
        if record.someone_else(by).is_some() {
            let whose = record.job.owner.as_deref().unwrap_or("nobody");
            self.store()
                .audit(
                    by,
                    AuditAction::CheckpointsDeleted,
                    &format!("job {job}"),
                    &format!("{whose}'s job {}", record.job.spec.name),
                )
                .await;
        }
        Ok(true)
    }

    /// Deletes an ended job for good, as `by` asks (its owner, or an
    /// admin): the checkpoints it keeps, its record and timeline, then its
    /// folder (logs, files, what its attempts left). Its runs stay in their
    /// experiment, and its GPU-hours in the usage. Refused, saying why,
    /// while it has not ended or a job that has not ended resumes from its
    /// checkpoints.
    pub async fn delete_job(&self, record: &JobRecord, by: &User) -> Result<(), StoreError> {
        let id = record.job.id;
        if !by.can_change(record.owner()) {
            return Err(StoreError::Forbidden(format!(
                "job {id} is not yours: only its owner or an admin may delete it"
            )));
        }
        let Some(_alone) = self.hold_alone(id) else {
            return Err(StoreError::Unavailable(format!(
                "job {id} is being submitted or run again right now; delete it once that is done"
            )));
        };
        if !record.job.state.is_terminal() {
            return Err(StoreError::Rejected(format!(
                "job {id} has not ended; cancel it first, then delete it"
            )));
        }
        let held = |taker: i64| {
            StoreError::Rejected(format!(
                "job {taker} resumes from job {id}'s checkpoints; delete job {id} once job {taker} has ended, or cancel job {taker}"
            ))
        };
        if let Some(taker) = self.store().checkpoints_taker(id).await? {
            return Err(held(taker));
        }
        // Checkpoints it took and still holds (its server stopped before
        // it let them go): let go now, as at its end, so that the record
        // does not outlive what it says.
        if let Some(from) = self.store().claimed_by(id).await?
            && let Err(error) = self.let_go(from, id).await
        {
            return Err(StoreError::Unavailable(format!(
                "job {id} still holds job {from}'s checkpoints, and they cannot be let go now ({error}); try again in a minute"
            )));
        }
        // Its own go first, as when their owner deletes them: a record
        // goes only once what they hold is gone, so none is left unrecorded.
        // Kept or not, the executor is asked (a claim may outlive a record
        // that was never written).
        let dropped = match self.delete_kept(&record.job).await? {
            Some(dropped) => dropped,
            None => self.inner.executor.drop_checkpoints(&record.job).await,
        };
        if !dropped {
            return Err(StoreError::Unavailable(format!(
                "job {id}'s checkpoints cannot be deleted at the moment; they go within a minute, and the job can be deleted then"
            )));
        }
        if !self.store().delete_job(id).await? {
            // Taken by a submission that came in between.
            return Err(match self.store().checkpoints_taker(id).await? {
                Some(taker) => held(taker),
                None => StoreError::NotFound(format!("job {id} does not exist")),
            });
        }
        // Moved aside at once (what still writes into it, a cleanup or a
        // log follower of its last moments, writes there), then removed;
        // what is left is removed by the sweep.
        let (folder, aside) = (self.job_dir(id), self.deleted_dir().join(id.to_string()));
        let removed = tokio::task::spawn_blocking(move || {
            if let Some(parent) = aside.parent() {
                private_folder(parent)?;
            }
            match std::fs::rename(&folder, &aside) {
                Ok(()) => tree::remove_tree(&aside),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(_) => tree::remove_tree(&folder),
            }
        })
        .await
        .map_err(|e| std::io::Error::other(e.to_string()))
        .and_then(|r| r);
        if let Err(error) = removed {
            tracing::warn!(job = id, %error, "could not remove the folder of a deleted job yet; the sweep removes it");
        }
        if record.someone_else(by).is_some() {
            let whose = record.job.owner.as_deref().unwrap_or("nobody");
            self.store()
                .audit(
                    by,
                    AuditAction::JobDeleted,
                    &format!("job {id}"),
                    &format!("{whose}'s job {}", record.job.spec.name),
                )
                .await;
        }
        Ok(())
    }

    /// Deletes the kept checkpoints whose time is up (but those a job that
    /// has not ended took), and lets go of those that jobs which ended took
    /// (the server stopped before they let go): at most once a minute, one
    /// sweep at a time, beside the loop. A folder goes before its record,
    /// and the record only once the folder is gone, so that nothing is
    /// left behind unrecorded.
    fn expire_checkpoints(&self) {
        {
            let mut last = self
                .inner
                .checkpoints_swept
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            if last.is_some_and(|at| at.elapsed() < CHECKPOINT_SWEEP_EVERY) {
                return;
            }
            if self
                .inner
                .sweeping
                .swap(true, std::sync::atomic::Ordering::AcqRel)
            {
                return;
            }
            *last = Some(std::time::Instant::now());
        }
        let jobs = self.clone();
        tokio::spawn(async move {
            jobs.sweep_checkpoints().await;
            jobs.inner
                .sweeping
                .store(false, std::sync::atomic::Ordering::Release);
        });
    }

    async fn sweep_checkpoints(&self) {
        // Deleted jobs' folders a deletion could not remove whole.
        let deleted = self.deleted_dir();
        let removed = tokio::task::spawn_blocking(move || {
            let Ok(entries) = std::fs::read_dir(&deleted) else {
                return Ok(());
            };
            for entry in entries.flatten().take(100) {
                tree::remove_tree(&entry.path())?;
            }
            Ok::<_, std::io::Error>(())
        })
        .await;
        if let Ok(Err(error)) = removed {
            tracing::warn!(%error, "could not remove a deleted job's folder; trying again later");
        }
        match self.store().claims_of_ended_jobs(100).await {
            Ok(claims) => {
                for (from, by) in claims {
                    if let Err(error) = self.let_go(from, by).await {
                        tracing::warn!(from, by, %error, "could not let go of checkpoints an ended job took; trying again later");
                    }
                }
            }
            Err(error) => {
                tracing::warn!(%error, "could not look for checkpoints ended jobs took; trying again later");
            }
        }
        let expired = match self.store().expired_checkpoints(now_millis(), 100).await {
            Ok(expired) => expired,
            Err(error) => {
                tracing::warn!(%error, "could not look for expired checkpoints; trying again later");
                return;
            }
        };
        for job in expired {
            tracing::info!(job, "kept checkpoints expired; deleting them");
            let record = match self.store().get_job(job).await {
                Ok(record) => record,
                Err(error) => {
                    tracing::warn!(job, %error, "could not read the job whose checkpoints expired; trying again later");
                    continue;
                }
            };
            if !self.inner.executor.drop_checkpoints(&record.job).await {
                continue;
            }
            if let Err(error) = self.store().take_checkpoints(job).await {
                tracing::warn!(job, %error, "could not forget expired checkpoints; trying again later");
            }
        }
    }

    /// Job `by`, which took job `from`'s checkpoints, ended: they are
    /// kept again for another job where they were never moved (it was
    /// cancelled in the queue), else the record of them goes (they are
    /// `by`'s own now).
    /// Where it cannot be told now whether they were moved, the record
    /// stays as it is, for the sweep to try again.
    async fn let_go(&self, from: i64, by: i64) -> Result<(), String> {
        let origin = self
            .store()
            .get_job(from)
            .await
            .map_err(|e| e.to_string())?;
        let freed = if self.inner.executor.holds_checkpoints(&origin.job).await? {
            self.store().unclaim_checkpoints(from, by).await
        } else {
            self.store().drop_claimed(from, by).await
        };
        freed.map_err(|e| e.to_string())
    }

    /// Deletes the checkpoints `job` keeps that no job holds: their record
    /// is marked expired first (no job takes them from then on), then what
    /// they hold goes, then the record. None: it keeps none; Some(false):
    /// what they hold could not be deleted now, and the sweep of expired
    /// ones tries again.
    async fn delete_kept(
        &self,
        job: &trainyard_domain::job::Job,
    ) -> Result<Option<bool>, StoreError> {
        if !self.store().expire_checkpoints_now(job.id).await? {
            return Ok(None);
        }
        if !self.inner.executor.drop_checkpoints(job).await {
            return Ok(Some(false));
        }
        self.store().take_checkpoints(job.id).await?;
        Ok(Some(true))
    }

    /// Whether the job's owner asked it to stop: a cancel may have come
    /// after this cycle read the job, so it looks again.
    async fn cancel_requested(&self, record: &JobRecord) -> bool {
        record.job.cancel_requested
            || self
                .store()
                .get_job(record.job.id)
                .await
                .map(|r| r.job.cancel_requested)
                .unwrap_or(false)
    }

    /// An attempt stopped to give borrowed GPUs back: its run ends KILLED
    /// (tagged with the reason), and the job goes back to the queue with a
    /// new attempt that spends none of its retries (and resumes from its
    /// checkpoints, when it keeps some).
    async fn requeue_preempted(&self, record: &JobRecord, why: &str) -> Result<(), StoreError> {
        let tag = ("trainyard.preempted".to_owned(), why.to_owned());
        self.requeue_unspent(record, why, Some(tag)).await
    }

    /// An attempt ended through no fault of its own (its node was lost,
    /// it was evicted): its run ends KILLED, and the job goes back to the
    /// queue with a new attempt that spends none of its retries.
    async fn requeue_disrupted(&self, record: &JobRecord, why: &str) -> Result<(), StoreError> {
        self.requeue_unspent(record, &format!("disrupted: {why}"), None)
            .await
    }

    /// Ends the attempt's run KILLED (with `tag` on it, when given) and
    /// queues the next attempt with one more retry, so none is spent.
    async fn requeue_unspent(
        &self,
        record: &JobRecord,
        said: &str,
        tag: Option<(String, String)>,
    ) -> Result<(), StoreError> {
        let job = &record.job;
        self.account(record).await;
        if let Some(run_id) = &job.run_id {
            if let Some(tag) = tag
                && let Err(error) = self.store().log_batch(run_id, &[], &[], &[tag]).await
            {
                tracing::warn!(run = %run_id, %error, "could not tag the run with why it ended");
            }
            self.end_run(run_id, "KILLED").await;
        }
        tracing::info!(job = job.id, why = %said, "job requeued without spending a retry");
        self.requeue(
            record,
            &[JobState::Starting, JobState::Running],
            JobChange {
                retries: Some(job.retries.saturating_add(1)),
                // Its place in the queue (and the priority it earned
                // waiting) is kept: it was stopped for others.
                queued_at: Some(job.queued_at.unwrap_or(job.created_at)),
                ..Default::default()
            },
            |next| {
                (
                    "requeued".into(),
                    format!(
                        "{said}; queued again in its place, without spending a retry (attempt {})",
                        next + 1
                    ),
                )
            },
        )
        .await
    }

    /// Puts a job back in the queue for its next attempt, with a new run
    /// (its current run was ended by the caller); `change` adds to what
    /// every requeue changes, `event` gets the next attempt's number.
    async fn requeue(
        &self,
        record: &JobRecord,
        from: &[JobState],
        change: JobChange,
        event: impl FnOnce(u32) -> (String, String),
    ) -> Result<(), StoreError> {
        let job = &record.job;
        let next = job.attempt + 1;
        let run_id = match job.experiment_id {
            Some(experiment) => match self
                .new_run(job.id, &job.spec, experiment, next, record.owner())
                .await
            {
                Ok(run_id) => Some(run_id),
                // Its experiment was archived or deleted under it: the
                // next attempt has nowhere to log, so the job ends here
                // rather than being asked again at every cycle.
                Err(StoreError::Rejected(why) | StoreError::NotFound(why)) => {
                    let (_, said) = event(next);
                    let message = format!(
                        "{said}; but it cannot run again: its experiment takes no new run ({why})"
                    );
                    tracing::warn!(job = job.id, %message, "job ended: no run for its next attempt");
                    let kept = self.retire(record, JobState::Failed).await;
                    let message = format!("{message}{kept}");
                    self.store()
                        .move_job(
                            job.id,
                            from,
                            JobState::Failed,
                            JobChange {
                                exit_code: change.exit_code,
                                finished_at: Some(Some(now_millis())),
                                event: Some(("finished".into(), message)),
                                ..Default::default()
                            },
                        )
                        .await?;
                    return Ok(());
                }
                Err(error) => return Err(error),
            },
            None => None,
        };
        self.store()
            .move_job(
                job.id,
                from,
                JobState::Queued,
                JobChange {
                    gpu_indices: Some(Vec::new()),
                    handle: Some(None),
                    node: Some(None),
                    pod: Some(None),
                    started_at: Some(None),
                    // At the back, unless the caller keeps its place.
                    queued_at: change.queued_at.or(Some(now_millis())),
                    attempt: Some(next),
                    borrowed: Some(false),
                    preempt_reason: Some(None),
                    run_id,
                    event: Some(event(next)),
                    ..change
                },
            )
            .await?;
        Ok(())
    }

    async fn end_run(&self, run_id: &str, status: &str) {
        if let Err(error) = self.store().revoke_run_tokens(run_id).await {
            tracing::warn!(run = run_id, %error, "could not revoke the job's tracking token");
        }
        let now = now_millis();
        if let Err(error) = self.store().end_job_run(run_id, status, now).await {
            tracing::warn!(run = run_id, %error, "could not record the end of the job's run");
        }
        // The runs it made under its own and left running (the job was
        // stopped, or its script never ended them) end with it.
        match self.store().end_child_runs(run_id, status, now).await {
            Ok(0) => {}
            Ok(n) => tracing::info!(run = run_id, runs = n, "ended the job's nested runs"),
            Err(error) => {
                tracing::warn!(run = run_id, %error, "could not end the job's nested runs");
            }
        }
    }
}

/// What a job used, for the end of its timeline: people size their next
/// request by it.
fn usage_summary(usage: &cgroups::Usage) -> String {
    use trainyard_domain::format_bytes;
    let mut parts = Vec::new();
    if let Some(peak) = usage.memory_peak_bytes {
        parts.push(format!(
            "peak memory {} of {}",
            format_bytes(peak),
            format_bytes(usage.memory_limit_bytes)
        ));
    }
    if let Some(usec) = usage.cpu_usec {
        parts.push(format!("CPU time {:.1} s", usec as f64 / 1e6));
    }
    if parts.is_empty() {
        String::new()
    } else {
        format!("; {}", parts.join(", "))
    }
}

/// Makes `path` and whatever is missing on the way to it closed (0700)
/// from their creation on: a job's folder and files are its owner's
/// project (secrets among them) while it waits, and other jobs' users pass
/// through the jobs folder. A job's user is let in only at its launch.
pub fn private_folder(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(path)?;
    users::set_mode(path, 0o700)
}

/// A new file that only its owner may read, from its creation on.
pub(crate) fn private_file(path: &Path) -> std::io::Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
}

pub(crate) fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut file = private_file(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Files 0444, folders 0555, all the way down.
fn read_only(dir: &Path) -> std::io::Result<()> {
    set_modes(dir, 0o444, 0o555)
}

fn make_writable(dir: &Path) -> std::io::Result<()> {
    set_modes(dir, 0o644, 0o755)
}

fn set_modes(dir: &Path, file: u32, folder: u32) -> std::io::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    // Writable while walking, so a half-done pass can always be repeated.
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755))?;
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        if kind.is_dir() {
            set_modes(&entry.path(), file, folder)?;
        } else if kind.is_file() {
            std::fs::set_permissions(entry.path(), std::fs::Permissions::from_mode(file))?;
        }
    }
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(folder))
}

/// Trainyard's variables for a job: the spec's, the hyperparameters'
/// (`HP_*`), its run and the run's token. The executor adds its own.
fn environment(job: &trainyard_domain::job::Job, token: Option<&str>) -> BTreeMap<String, String> {
    let mut env = BTreeMap::new();
    // Python buffers stdout in a pipe or file; live logs need it not to.
    env.insert("PYTHONUNBUFFERED".to_owned(), "1".to_owned());
    for (name, value) in &job.spec.env {
        env.insert(name.clone(), value.clone());
    }
    for (name, value) in &job.spec.hyperparameters {
        env.insert(hp_env_name(name), value.to_string());
    }
    if let Some(run_id) = &job.run_id {
        env.insert("MLFLOW_RUN_ID".to_owned(), run_id.clone());
    }
    if let Some(token) = token {
        env.insert("MLFLOW_TRACKING_TOKEN".to_owned(), token.to_owned());
    }
    if let Some(experiment_id) = job.experiment_id {
        env.insert("MLFLOW_EXPERIMENT_ID".to_owned(), experiment_id.to_string());
    }
    env.insert("TRAINYARD_JOB_ID".to_owned(), job.id.to_string());
    env
}

fn resources(job: &trainyard_domain::job::Job) -> sched::Resources {
    sched::Resources {
        gpus: job.gpus,
        cpu_millis: job.cpu_millis,
        memory_mib: job.memory_mib,
    }
}

/// `HP_` and the name in capitals, other characters as `_`.
pub fn hp_env_name(name: &str) -> String {
    let mut out = String::from("HP_");
    out.extend(name.chars().map(|c| {
        if c.is_ascii_alphanumeric() {
            c.to_ascii_uppercase()
        } else {
            '_'
        }
    }));
    out
}

/// Replaces `{name}` with the hyperparameter's value, quoted for the shell.
/// Braces that name no hyperparameter are left as written, and so are the
/// shell's `${name}` and `\{name}`; doubled, `{{name}}` is written `{name}`
/// (see [`trainyard_domain::job::placeholders`], which the check reads).
pub fn render_command(
    command: &str,
    hyperparameters: &BTreeMap<String, trainyard_domain::job::ParamValue>,
) -> String {
    use trainyard_domain::job::escaped_placeholder;
    let mut out = String::with_capacity(command.len());
    let mut rest = command;
    while let Some(open) = rest.find('{') {
        out.push_str(&rest[..open]);
        if let Some((name, len)) = escaped_placeholder(rest, open) {
            out.push('{');
            out.push_str(name);
            out.push('}');
            rest = &rest[open + len..];
            continue;
        }
        let shells = matches!(out.as_bytes().last(), Some(b'$' | b'\\'));
        let after = &rest[open + 1..];
        match after.find('}') {
            Some(close) if !shells && hyperparameters.contains_key(&after[..close]) => {
                let value = hyperparameters[&after[..close]].to_string();
                out.push_str(&shell_quote(&value));
                rest = &after[close + 1..];
            }
            _ => {
                out.push('{');
                rest = after;
            }
        }
    }
    out.push_str(rest);
    out
}

fn shell_quote(value: &str) -> String {
    if !value.is_empty()
        && value
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.,:/=+@%".contains(c))
    {
        return value.to_owned();
    }
    format!("'{}'", value.replace('\'', "'\\''"))
}

#[cfg(test)]
mod supervisor_tests;

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_domain::job::ParamValue;

    /// A spec nested past any real one is a clear error, not a stack
    /// overflow: serde-saphyr's budget stops YAML at 64 levels, serde_json
    /// at 128.
    #[test]
    fn deeply_nested_specs_are_refused() {
        let deep_yaml = format!("name: {}x{}", "[".repeat(100_000), "]".repeat(100_000));
        let error = parse_spec(true, deep_yaml.as_bytes()).unwrap_err();
        assert!(
            error.message.contains("not valid YAML"),
            "{}",
            error.message
        );
        let deep_json = format!(
            "{{\"name\": {}1{}}}",
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let error = parse_spec(false, deep_json.as_bytes()).unwrap_err();
        assert!(
            error.message.contains("not valid JSON"),
            "{}",
            error.message
        );
        assert!(parse_template(deep_yaml.as_bytes()).is_err());
    }

    #[test]
    fn every_field_of_the_wrong_type_is_named_and_the_rest_checked() {
        let err = parse_spec(
            false,
            br#"{"name": "x", "command": "y", "gpu": 1, "retries": "many",
                 "resources": {"gpus": "two", "memory": "lots"}}"#,
        )
        .unwrap_err();
        let mut fields: Vec<&str> = err.fields.iter().map(|f| f.field.as_str()).collect();
        fields.sort();
        assert_eq!(
            fields,
            ["gpu", "resources.gpus", "resources.memory", "retries"],
            "{}",
            err.message
        );
        assert!(err.message.contains("resources.gpus: "), "{}", err.message);
        assert!(err.message.contains("; "), "{}", err.message);
        // A required field of the wrong type is named once, not again as
        // missing.
        let err = parse_spec(false, br#"{"name": [1], "command": 5}"#).unwrap_err();
        let fields: Vec<&str> = err.fields.iter().map(|f| f.field.as_str()).collect();
        assert_eq!(fields, ["command", "name"], "{}", err.message);
        // A template too.
        let err = parse_template(b"title: [x]\ndescription: 3\ncommand: run\n").unwrap_err();
        assert_eq!(err.fields.len(), 2, "{}", err.message);
    }

    #[test]
    fn hyperparameters_are_substituted_quoted() {
        let hp = BTreeMap::from([
            ("lr".to_owned(), ParamValue::Float(0.001)),
            (
                "name".to_owned(),
                ParamValue::Text("it's; rm -rf /".to_owned()),
            ),
            ("epochs".to_owned(), ParamValue::Int(3)),
        ]);
        assert_eq!(
            render_command(
                "train --lr {lr} --epochs={epochs} --tag {name} {unknown} {",
                &hp
            ),
            "train --lr 0.001 --epochs=3 --tag 'it'\\''s; rm -rf /' {unknown} {"
        );
        // The shell's own and doubled braces are the command's.
        assert_eq!(
            render_command("echo ${lr} \\{lr} {{lr}} {{x}} {lr}", &hp),
            "echo ${lr} \\{lr} {lr} {x} 0.001"
        );
    }

    #[test]
    fn hyperparameter_variables_are_named_in_capitals() {
        assert_eq!(hp_env_name("learning-rate"), "HP_LEARNING_RATE");
        assert_eq!(hp_env_name("lr"), "HP_LR");
    }
}
