//! The executor port: what the supervisor ([`crate::Jobs`]) asks of
//! whatever runs the attempts of jobs, on this machine ([`crate::local`])
//! or elsewhere.
//!
//! The supervisor alone decides (placement, through the scheduler) and
//! records (states, exits, retries, the timeline, queue positions). An
//! executor offers capacity, starts an attempt where it was placed, tells
//! what became of it without recording anything, stops it, and serves its
//! log. The handle of a running attempt is the executor's own, stored by
//! the supervisor as it is given.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use trainyard_scheduler as sched;
use trainyard_store::JobRecord;

pub use crate::cgroups::Usage;
pub use crate::shim::EndReason;

/// What an executor offers now.
#[derive(Debug, Clone, Default)]
pub struct Capacity {
    /// Its nodes with everything they have (not what is free: the
    /// supervisor subtracts its running jobs); those that take nothing new
    /// are not schedulable.
    pub nodes: Vec<sched::Node>,
    /// The same nodes with all they have, where `nodes` has what others
    /// (not Trainyard's jobs) hold taken off; empty: as `nodes`. A job is
    /// refused at submission only if no node could ever hold it. Shared:
    /// an executor keeps it between changes of its nodes.
    pub in_all: Arc<Vec<sched::Node>>,
    /// How many more attempts may start now whatever the nodes hold (the
    /// local executor's free job uids); None: no such bound.
    pub slots: Option<usize>,
    /// What a refusal says of the GPUs on offer, after "asks for N GPUs;":
    /// "this server has 2 (found by NVML …)".
    pub gpus_said: String,
    /// What a refusal calls the place it measured ("this machine").
    pub place: String,
    /// Why nothing more starts when `slots` is 0.
    pub full: String,
}

impl Capacity {
    /// The nodes with all they have.
    pub fn whole(&self) -> &[sched::Node] {
        if self.in_all.is_empty() {
            &self.nodes
        } else {
            &self.in_all
        }
    }

    /// The node with the most of each, for what a job can never get.
    pub fn largest(&self) -> (u32, u32, u64) {
        self.whole().iter().fold((0, 0, 0), |(g, c, m), n| {
            (g.max(n.gpus), c.max(n.cpu_millis), m.max(n.memory_mib))
        })
    }
}

/// One attempt of a job, placed by the supervisor.
#[derive(Debug, Clone)]
pub struct Attempt {
    pub record: JobRecord,
    /// The node it was placed on, by name, and its GPUs there.
    pub node: String,
    pub gpus: Vec<u32>,
    /// The command, hyperparameters filled in.
    pub command: String,
    /// Trainyard's variables for the job: the spec's, the hyperparameters'
    /// (`HP_*`), its run and the run's token. The executor adds what is its
    /// own (the tracking URI its jobs reach, which GPUs, a PATH); these win
    /// over the executor's base, its own win over these.
    pub env: BTreeMap<String, String>,
    /// The job's files (template and project) to start from, if any.
    pub files: Option<PathBuf>,
    /// The datasets it names, with where their files are.
    pub datasets: Vec<(String, PathBuf)>,
    /// When it must be stopped, in milliseconds since the Unix epoch.
    pub deadline_ms: i64,
    /// An ended job whose kept checkpoints this attempt starts from (the
    /// job took them at its submission): the executor moves them into this
    /// job's checkpoints before anything else of the start, unless an
    /// earlier start did.
    pub resume_from: Option<trainyard_domain::job::Job>,
}

/// An attempt the executor runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Started {
    /// What the executor knows it by; stored as given, handed back with the
    /// record to observe and stop it.
    pub handle: String,
    /// For the timeline: "process 1234, as uid 50001".
    pub note: String,
}

/// Why an attempt did not start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StartError {
    /// It cannot start as asked (a refused spec, a missing file): the
    /// attempt fails with this reason.
    Failed(String),
    /// The executor cannot be reached now (its API is away): the job goes
    /// back to the queue as it was and is placed again later.
    Unavailable(String),
    /// It can never start as asked, and another attempt would start
    /// other than asked (the checkpoints it resumes from are gone): the
    /// job fails with this reason, its retries unspent.
    Refused(String),
}

impl From<String> for StartError {
    fn from(message: String) -> StartError {
        StartError::Failed(message)
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StartError::Failed(m) | StartError::Unavailable(m) | StartError::Refused(m) => {
                f.write_str(m)
            }
        }
    }
}

/// How an attempt ended, as its executor saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct Ending {
    pub reason: EndReason,
    pub exit_code: Option<i32>,
    pub signal: Option<i32>,
    /// Why it could not start (`StartFailed`).
    pub message: Option<String>,
    /// It was stopped for going past its memory.
    pub out_of_memory: bool,
    /// What it used, where the executor measures it.
    pub usage: Option<Usage>,
}

impl Ending {
    /// An end for `reason`, nothing else said.
    pub fn of(reason: EndReason) -> Ending {
        Ending {
            reason,
            exit_code: None,
            signal: None,
            message: None,
            out_of_memory: false,
            usage: None,
        }
    }
}

/// What became of a started attempt.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// It runs (or is still being set up) under the handle on record.
    Running,
    /// It was started but waits, and why, in the executor's words (no node
    /// takes its pod yet, its image cannot be pulled).
    Waiting(String),
    /// It runs under a handle the record lacks: the server stopped while
    /// starting it. It is adopted, never started twice.
    Adopted(Started),
    Ended(Ending),
    /// It is gone and left no word of how it ended; the executor has
    /// released what it held for it.
    Lost(String),
}

/// Runs attempts. Object-safe, so the server picks one at start-up.
#[async_trait::async_trait]
pub trait Executor: Send + Sync + 'static {
    /// `local`, `kubernetes`.
    fn kind(&self) -> &'static str;

    /// Makes ready what the executor needs once, at the server's start;
    /// `active`: the jobs that wait or run.
    async fn prepare(&self, active: &[JobRecord]) -> Result<(), String>;

    /// Its nodes and what else bounds new attempts. Err: it cannot tell now
    /// (its API is away); nothing new starts, nothing is lost.
    async fn capacity(&self) -> Result<Capacity, String>;

    /// What no attempt can ever exceed, for the refusals at submission:
    /// [`Capacity::whole`] and the words of `gpus_said` and `place`; the
    /// rest may be left out. By default `capacity`; an executor whose
    /// capacity walks the cluster's pods answers from what it keeps, so
    /// that a submission does not cost a walk of the cluster.
    async fn limits(&self) -> Result<Capacity, String> {
        self.capacity().await
    }

    /// Starts an attempt; Err says why it could not: for the job's end, or
    /// to try again later. Starting an attempt that was started before
    /// (the server stopped in between) finds it rather than making another.
    async fn start(&self, attempt: Attempt) -> Result<Started, StartError>;

    /// What became of an attempt in STARTING or RUNNING. Records nothing.
    async fn observe(&self, record: &JobRecord) -> Observation;

    /// The name of what runs an attempt where the executor has one beside
    /// its handle (a Kubernetes Job's pod), once it exists: shown with the
    /// node. Records nothing.
    fn pod(&self, _record: &JobRecord) -> Option<String> {
        None
    }

    /// The namespace its pods run in, where it has pods: a node agent's
    /// word on which pod holds which GPU counts for pods there only.
    fn pod_namespace(&self) -> Option<&str> {
        None
    }

    /// Asks a running attempt to stop (a cancel): it is given the stop
    /// grace, then killed, and is observed as ended. Repeating it is harmless.
    async fn stop(&self, record: &JobRecord) -> Result<(), String>;

    /// Completes when an attempt may have changed (a process ended, a
    /// watch event), so that the supervisor looks at once rather than at
    /// its next tick.
    async fn changed(&self) {
        std::future::pending::<()>().await
    }

    /// A job ended for good: nothing of it runs again. `keep`: its
    /// checkpoints stay for another job to resume from, where the executor
    /// keeps them ([`Executor::keeps_checkpoints`]); Some: what they hold,
    /// when it kept some.
    async fn retire(&self, record: &JobRecord, keep: bool) -> Option<u64>;

    /// Whether it keeps an ended job's checkpoints for another to resume
    /// from.
    fn keeps_checkpoints(&self) -> bool {
        false
    }

    /// Why it keeps none, for someone who asked to resume (where
    /// [`Executor::keeps_checkpoints`] is false).
    fn keeps_no_checkpoints_because(&self) -> String {
        format!("not on its {} executor", self.kind())
    }

    /// Whether job `job`'s own checkpoints hold anything now (a job that
    /// resumed has them from its first start on); Err where it cannot be
    /// told now (the API is away).
    async fn holds_checkpoints(&self, _job: &trainyard_domain::job::Job) -> Result<bool, String> {
        Ok(false)
    }

    /// Deletes what an ended job's checkpoints kept (expired, or deleted
    /// by their owner): true once nothing of them is left. Repeating it is
    /// harmless.
    async fn drop_checkpoints(&self, _job: &trainyard_domain::job::Job) -> bool {
        true
    }

    /// Up to `limit` bytes of an attempt's log from `offset`, and the log's
    /// size. A log not yet written reads as empty.
    async fn read_log(
        &self,
        job: i64,
        attempt: u32,
        offset: u64,
        limit: u64,
    ) -> std::io::Result<(Vec<u8>, u64)>;

    /// The last `max` bytes of an attempt's log (from a line start where
    /// one is near) as text, and the log's size.
    async fn log_tail(&self, job: i64, attempt: u32, max: u64) -> std::io::Result<(String, u64)>;
}
