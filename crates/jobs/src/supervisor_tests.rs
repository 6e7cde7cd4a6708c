//! The supervisor against a fake executor, in-process: no processes, no
//! cluster. The fake starts nothing; each test says what became of an
//! attempt, and checks what the supervisor recorded.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use trainyard_domain::JobState;
use trainyard_domain::identity::User;
use trainyard_domain::tracking::RunInfo;
use trainyard_scheduler as sched;
use trainyard_store::{JobRecord, Store};
use trainyard_test_db::TestDb;

use crate::executor::{
    Attempt, Capacity, EndReason, Ending, Executor, Observation, StartError, Started, Usage,
};
use crate::{Jobs, JobsConfig, SubmitError, archive, parse_spec};

/// An executor that remembers what it was asked and answers what the test
/// set.
#[derive(Default)]
struct Fake {
    nodes: Mutex<Vec<sched::Node>>,
    /// The nodes with all they have, where others hold some of `nodes`.
    in_all: Mutex<Vec<sched::Node>>,
    /// Capacity cannot be told (the API is away).
    away: Mutex<bool>,
    slots: Mutex<Option<usize>>,
    started: Mutex<Vec<Attempt>>,
    /// What observing a job's attempt says; Running where unset.
    fate: Mutex<HashMap<i64, Observation>>,
    refuse_start: Mutex<Option<StartError>>,
    stopped: Mutex<Vec<i64>>,
    retired: Mutex<Vec<i64>>,
    /// The pod of each handle, where the test made one.
    pods: Mutex<HashMap<String, String>>,
    /// What each job's checkpoints hold, where the test said they hold
    /// something: moved to the job that resumes from them.
    checkpoints: Mutex<HashMap<i64, u64>>,
    /// Deleting checkpoints fails (a disk error, the API away).
    drop_fails: Mutex<bool>,
}

fn node(id: u32, name: &str, gpus: u32) -> sched::Node {
    sched::Node {
        id,
        name: name.to_owned(),
        gpus,
        cpu_millis: 64_000,
        memory_mib: 512 * 1024,
        schedulable: true,
    }
}

impl Fake {
    fn set_fate(&self, job: i64, observation: Observation) {
        self.fate.lock().unwrap().insert(job, observation);
    }

    fn started(&self) -> Vec<Attempt> {
        self.started.lock().unwrap().clone()
    }
}

#[async_trait::async_trait]
impl Executor for Fake {
    fn kind(&self) -> &'static str {
        "fake"
    }

    async fn prepare(&self, _active: &[JobRecord]) -> Result<(), String> {
        Ok(())
    }

    async fn capacity(&self) -> Result<Capacity, String> {
        if *self.away.lock().unwrap() {
            return Err("the API is away".to_owned());
        }
        Ok(Capacity {
            nodes: self.nodes.lock().unwrap().clone(),
            in_all: Arc::new(self.in_all.lock().unwrap().clone()),
            slots: *self.slots.lock().unwrap(),
            gpus_said: "the largest node has 8".to_owned(),
            place: "the largest node".to_owned(),
            full: "no room".to_owned(),
        })
    }

    async fn start(&self, attempt: Attempt) -> Result<Started, StartError> {
        if let Some(why) = self.refuse_start.lock().unwrap().clone() {
            return Err(why);
        }
        let handle = format!(
            "job-{}-{}",
            attempt.record.job.id, attempt.record.job.attempt
        );
        if let Some(from) = attempt.resume_from.as_ref().map(|origin| origin.id) {
            let mut held = self.checkpoints.lock().unwrap();
            let job = attempt.record.job.id;
            // Moved at an earlier start: where they should be.
            if !held.contains_key(&job) {
                let bytes = held
                    .remove(&from)
                    .ok_or_else(|| StartError::Refused(format!("job {from} kept nothing")))?;
                held.insert(job, bytes);
            }
        }
        self.started.lock().unwrap().push(attempt);
        Ok(Started {
            handle: handle.clone(),
            note: format!("as {handle}"),
        })
    }

    async fn observe(&self, record: &JobRecord) -> Observation {
        self.fate
            .lock()
            .unwrap()
            .remove(&record.job.id)
            .unwrap_or(Observation::Running)
    }

    fn pod(&self, record: &JobRecord) -> Option<String> {
        let handle = record.handle.as_deref()?;
        self.pods.lock().unwrap().get(handle).cloned()
    }

    async fn stop(&self, record: &JobRecord) -> Result<(), String> {
        self.stopped.lock().unwrap().push(record.job.id);
        Ok(())
    }

    async fn retire(&self, record: &JobRecord, keep: bool) -> Option<u64> {
        self.retired.lock().unwrap().push(record.job.id);
        let held = self
            .checkpoints
            .lock()
            .unwrap()
            .get(&record.job.id)
            .copied();
        if !keep {
            self.checkpoints.lock().unwrap().remove(&record.job.id);
        }
        held.filter(|_| keep)
    }

    fn keeps_checkpoints(&self) -> bool {
        true
    }

    async fn holds_checkpoints(&self, job: &trainyard_domain::job::Job) -> Result<bool, String> {
        Ok(self.checkpoints.lock().unwrap().contains_key(&job.id))
    }

    async fn drop_checkpoints(&self, job: &trainyard_domain::job::Job) -> bool {
        if *self.drop_fails.lock().unwrap() {
            return false;
        }
        self.checkpoints.lock().unwrap().remove(&job.id);
        true
    }

    async fn read_log(
        &self,
        _job: i64,
        _attempt: u32,
        _offset: u64,
        _limit: u64,
    ) -> std::io::Result<(Vec<u8>, u64)> {
        Ok((Vec::new(), 0))
    }

    async fn log_tail(
        &self,
        _job: i64,
        _attempt: u32,
        _max: u64,
    ) -> std::io::Result<(String, u64)> {
        Ok((String::new(), 0))
    }
}

fn config(dir: &std::path::Path) -> JobsConfig {
    JobsConfig {
        root: dir.join("jobs"),
        templates_dir: dir.join("templates"),
        uploads_root: dir.join("uploads"),
        upload_limits: archive::Limits {
            max_bytes: 1 << 20,
            max_files: 100,
        },
        usage_half_life: std::time::Duration::from_secs(7 * 24 * 3600),
        checkpoint_keep: std::time::Duration::from_secs(3600),
        checkpoint_keep_bytes: Some(1_000),
    }
}

struct Setup {
    jobs: Jobs,
    fake: Arc<Fake>,
    user: User,
    _db: TestDb,
    _dir: tempfile::TempDir,
}

/// Someone signed in, in no team and no admin.
async fn person(store: &Store, name: &str) -> User {
    store
        .sign_in(trainyard_store::SignIn {
            subject: format!("sub-{name}"),
            username: name.to_owned(),
            display_name: String::new(),
            email: None,
            is_admin: false,
            groups: Vec::new(),
        })
        .await
        .unwrap()
}

async fn setup(nodes: Vec<sched::Node>) -> Setup {
    let db = TestDb::new().await;
    let store = Store::connect(&db.url, 4).await.unwrap();
    store.migrate().await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let fake = Arc::new(Fake::default());
    *fake.nodes.lock().unwrap() = nodes;
    let jobs = Jobs::new(store.clone(), config(dir.path()), fake.clone());
    let user = store.local_admin().await.unwrap();
    Setup {
        jobs,
        fake,
        user,
        _db: db,
        _dir: dir,
    }
}

impl Setup {
    /// The server stops and starts again: a new service over the same
    /// database, folders and executor.
    fn restart(&mut self) {
        let store = self.jobs.store().clone();
        self.jobs = Jobs::new(store, config(self._dir.path()), self.fake.clone());
    }

    async fn submit(&self, json: &str) -> i64 {
        let spec = parse_spec(false, json.as_bytes()).unwrap();
        self.jobs.submit(spec, &self.user).await.unwrap().job.id
    }

    async fn job(&self, id: i64) -> JobRecord {
        self.jobs.store().get_job(id).await.unwrap()
    }

    async fn timeline(&self, id: i64) -> Vec<String> {
        self.jobs
            .store()
            .job_events(id)
            .await
            .unwrap()
            .into_iter()
            .map(|e| format!("{}: {}", e.kind, e.message))
            .collect()
    }

    async fn run_status(&self, record: &JobRecord) -> String {
        self.run_info(record).await.status
    }

    async fn run_info(&self, record: &JobRecord) -> RunInfo {
        let run_id = record.job.run_id.as_deref().unwrap();
        self.jobs.store().get_run(run_id).await.unwrap().info
    }
}

fn exited(code: i32) -> Observation {
    Observation::Ended(Ending {
        exit_code: Some(code),
        ..Ending::of(EndReason::Exited)
    })
}

#[tokio::test]
async fn an_attempt_is_placed_started_and_its_end_recorded() {
    let s = setup(vec![node(0, "a", 8), node(1, "b", 8)]).await;
    let id = s
        .submit(
            r#"{"name": "train", "command": "python train.py --lr {lr}",
                "resources": {"gpus": 2}, "hyperparameters": {"lr": 0.5},
                "env": {"SEED": "7"}}"#,
        )
        .await;
    // Its run waits as SCHEDULED, with the hyperparameters as params.
    let queued = s.job(id).await;
    assert_eq!(s.run_status(&queued).await, "SCHEDULED");
    let run = s
        .jobs
        .store()
        .get_run(queued.job.run_id.as_deref().unwrap())
        .await
        .unwrap();
    assert!(
        run.params.iter().any(|(k, v)| k == "lr" && v == "0.5"),
        "{:?}",
        run.params
    );
    s.jobs.cycle().await.unwrap();

    let started = s.fake.started();
    assert_eq!(started.len(), 1);
    let attempt = &started[0];
    assert_eq!(attempt.gpus.len(), 2);
    assert_eq!(attempt.command, "python train.py --lr 0.5");
    assert_eq!(attempt.env["SEED"], "7");
    assert_eq!(attempt.env["HP_LR"], "0.5");
    assert_eq!(attempt.env["TRAINYARD_JOB_ID"], id.to_string());
    assert!(attempt.env.contains_key("MLFLOW_TRACKING_TOKEN"));
    let record = s.job(id).await;
    assert_eq!(record.job.state, JobState::Running);
    assert_eq!(record.handle.as_deref(), Some(&*format!("job-{id}-0")));
    assert_eq!(record.job.node.as_deref(), Some(&*attempt.node));
    assert_eq!(record.job.gpu_indices, attempt.gpus);
    assert_eq!(s.run_status(&record).await, "RUNNING");

    // Observed running: nothing is started twice.
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.fake.started().len(), 1);

    s.fake.set_fate(id, exited(0));
    s.jobs.cycle().await.unwrap();
    let record = s.job(id).await;
    assert_eq!(record.job.state, JobState::Succeeded);
    assert_eq!(record.job.exit_code, Some(0));
    assert_eq!(s.run_status(&record).await, "FINISHED");
    assert_eq!(*s.fake.retired.lock().unwrap(), vec![id]);
    let timeline = s.timeline(id).await;
    assert!(
        timeline
            .iter()
            .any(|e| e == &format!("started: running (as job-{id}-0)")),
        "{timeline:?}"
    );
    assert!(
        timeline.iter().any(|e| e == "finished: exited with code 0"),
        "{timeline:?}"
    );
}

#[tokio::test]
async fn a_failure_is_retried_with_a_new_run_until_the_retries_are_spent() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let id = s
        .submit(r#"{"name": "flaky", "command": "false", "retries": 1}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    let first = s.job(id).await;
    assert_eq!(first.job.pod, None, "no pod yet");
    // Its pod is recorded once the executor has one.
    s.fake
        .pods
        .lock()
        .unwrap()
        .insert(format!("job-{id}-0"), "pod-of-0".to_owned());
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(id).await.job.pod.as_deref(), Some("pod-of-0"));
    s.fake.set_fate(id, exited(3));
    s.jobs.cycle().await.unwrap();
    // Queued again and, its GPU being free, started again in the same
    // look, under a new handle and run; the old attempt's pod is not its.
    let second = s.job(id).await;
    assert_eq!(second.job.attempt, 1);
    assert_eq!(second.job.state, JobState::Running);
    assert_eq!(second.job.pod, None, "not the old attempt's pod");
    assert!(
        s.timeline(id)
            .await
            .iter()
            .any(|e| e.starts_with("retried: exited with code 3")),
        "it was queued again in between"
    );
    assert_ne!(second.job.run_id, first.job.run_id);
    // Its run names its job, as the first attempt's does.
    for record in [&first, &second] {
        let run = s
            .jobs
            .store()
            .get_run(record.job.run_id.as_deref().unwrap())
            .await
            .unwrap();
        assert!(
            run.tags
                .iter()
                .any(|(k, v)| k == "trainyard.job_id" && *v == id.to_string()),
            "{:?}",
            run.tags
        );
    }
    assert_eq!(second.handle.as_deref(), Some(&*format!("job-{id}-1")));
    assert_eq!(s.run_status(&first).await, "FAILED");
    assert_eq!(s.fake.started().len(), 2);

    s.fake.set_fate(id, exited(3));
    s.jobs.cycle().await.unwrap();
    let last = s.job(id).await;
    assert_eq!(last.job.state, JobState::Failed);
    assert_eq!(last.job.exit_code, Some(3));
    assert_eq!(s.fake.started().len(), 2, "no third attempt");
    let timeline = s.timeline(id).await;
    assert!(
        timeline
            .iter()
            .any(|e| e.starts_with("retried: exited with code 3; retrying (attempt 2 of 2)")),
        "{timeline:?}"
    );
}

#[tokio::test]
async fn a_job_past_its_disk_limit_fails_at_once_with_how_much_it_held() {
    let s = setup(vec![node(0, "a", 0)]).await;
    let id = s
        .submit(r#"{"name": "hoarder", "command": "x", "retries": 3}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    s.fake.set_fate(
        id,
        Observation::Ended(Ending {
            signal: Some(15),
            message: Some("its files took 12.0 GiB on disk, past its limit of 10.0 GiB".into()),
            ..Ending::of(EndReason::DiskLimit)
        }),
    );
    s.jobs.cycle().await.unwrap();
    let record = s.job(id).await;
    assert_eq!(
        record.job.state,
        JobState::Failed,
        "no retry: it would fill the disk again"
    );
    assert_eq!(s.fake.started().len(), 1);
    assert_eq!(s.run_status(&record).await, "FAILED");
    let timeline = s.timeline(id).await;
    assert!(
        timeline.iter().any(|e| e.contains(
            "stopped: its files took 12.0 GiB on disk, past its limit of 10.0 GiB (job_disk_quota_bytes) (killed by signal 15); delete what it no longer needs"
        )),
        "{timeline:?}"
    );
}

#[tokio::test]
async fn out_of_memory_is_said_in_words() {
    let s = setup(vec![node(0, "a", 0)]).await;
    let id = s
        .submit(r#"{"name": "big", "command": "x", "resources": {"memory": "1Gi"}}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    // Where the executor measures nothing, the limit is the job's own.
    s.fake.set_fate(
        id,
        Observation::Ended(Ending {
            signal: Some(9),
            out_of_memory: true,
            ..Ending::of(EndReason::Exited)
        }),
    );
    s.jobs.cycle().await.unwrap();
    let record = s.job(id).await;
    assert_eq!(record.job.state, JobState::Failed);
    assert_eq!(record.job.exit_code, Some(137));
    let timeline = s.timeline(id).await;
    assert!(
        timeline.iter().any(|e| e.contains(
            "out of memory: it reached its limit of 1.0 GiB (resources.memory) and the kernel stopped it (killed by signal 9)"
        )),
        "{timeline:?}"
    );

    // Measured usage is added to the end of the timeline.
    let id = s.submit(r#"{"name": "measured", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    s.fake.set_fate(
        id,
        Observation::Ended(Ending {
            exit_code: Some(0),
            usage: Some(Usage {
                memory_limit_bytes: 1 << 30,
                memory_peak_bytes: Some(1 << 20),
                oom_kills: 0,
                cpu_usec: Some(2_500_000),
            }),
            ..Ending::of(EndReason::Exited)
        }),
    );
    s.jobs.cycle().await.unwrap();
    let timeline = s.timeline(id).await;
    assert!(
        timeline.iter().any(|e| e.ends_with("CPU time 2.5 s")),
        "{timeline:?}"
    );
}

#[tokio::test]
async fn a_lost_attempt_is_recorded_and_retried() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let id = s
        .submit(r#"{"name": "lost", "command": "x", "retries": 1}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    s.fake
        .set_fate(id, Observation::Lost("lost: its node is gone".to_owned()));
    s.jobs.cycle().await.unwrap();
    // Queued again, and started again in the same look.
    let record = s.job(id).await;
    assert_eq!(record.job.attempt, 1);
    assert_eq!(record.job.state, JobState::Running);
    assert_eq!(s.fake.started().len(), 2);
    let timeline = s.timeline(id).await;
    assert!(
        timeline
            .iter()
            .any(|e| e.starts_with("retried: lost: its node is gone; retrying")),
        "{timeline:?}"
    );
}

#[tokio::test]
async fn a_cancel_is_passed_on_and_its_end_recorded() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let id = s.submit(r#"{"name": "long", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    s.jobs.cancel(id, None).await.unwrap();
    s.jobs.cycle().await.unwrap();
    assert_eq!(*s.fake.stopped.lock().unwrap(), vec![id]);
    assert_eq!(s.job(id).await.job.state, JobState::Running);
    s.fake.set_fate(
        id,
        Observation::Ended(Ending {
            signal: Some(15),
            ..Ending::of(EndReason::Cancelled)
        }),
    );
    s.jobs.cycle().await.unwrap();
    let record = s.job(id).await;
    assert_eq!(record.job.state, JobState::Cancelled);
    assert_eq!(s.run_status(&record).await, "KILLED");
}

#[tokio::test]
async fn an_attempt_found_after_a_restart_is_adopted_not_started_again() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let id = s.submit(r#"{"name": "adopted", "command": "x"}"#).await;
    // The server stopped between placing it and recording its handle.
    let moved = s
        .jobs
        .store()
        .move_job(
            id,
            &[JobState::Queued],
            JobState::Starting,
            trainyard_store::JobChange {
                node: Some(Some("a".to_owned())),
                gpu_indices: Some(vec![0]),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert!(moved);
    s.fake.set_fate(
        id,
        Observation::Adopted(Started {
            handle: "found-1".to_owned(),
            note: "found again".to_owned(),
        }),
    );
    s.jobs.cycle().await.unwrap();
    let record = s.job(id).await;
    assert_eq!(record.job.state, JobState::Running);
    assert_eq!(record.handle.as_deref(), Some("found-1"));
    assert!(s.fake.started().is_empty());

    // Its GPU stays taken: a second one-GPU job waits.
    let other = s
        .submit(r#"{"name": "next", "command": "x", "resources": {"gpus": 1}}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    assert!(s.fake.started().is_empty());
    assert_eq!(s.job(other).await.job.state, JobState::Queued);
}

#[tokio::test]
async fn placement_fills_a_node_before_taking_another() {
    let s = setup(vec![node(0, "a", 8), node(1, "b", 8)]).await;
    let mut ids = Vec::new();
    for _ in 0..4 {
        ids.push(
            s.submit(r#"{"name": "two", "command": "x", "resources": {"gpus": 2}}"#)
                .await,
        );
        s.jobs.cycle().await.unwrap();
    }
    let nodes: Vec<String> = s.fake.started().iter().map(|a| a.node.clone()).collect();
    assert_eq!(nodes.len(), 4);
    assert!(
        nodes.iter().all(|n| n == &nodes[0]),
        "best fit packs one node: {nodes:?}"
    );
    // An 8-GPU job still finds the other node whole.
    let eight = s
        .submit(r#"{"name": "eight", "command": "x", "resources": {"gpus": 8}}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    let record = s.job(eight).await;
    assert_eq!(record.job.state, JobState::Running);
    assert_ne!(record.job.node, Some(nodes[0].clone()));
}

#[tokio::test]
async fn a_run_starts_when_its_job_starts_not_when_it_was_queued() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let id = s
        .submit(r#"{"name": "trains", "command": "x", "resources": {"gpus": 1}}"#)
        .await;
    let waits = s
        .submit(r#"{"name": "waits", "command": "x", "resources": {"gpus": 1}}"#)
        .await;
    let queued = s.run_info(&s.job(id).await).await;
    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    s.jobs.cycle().await.unwrap();

    // Its duration is how long it ran, not its wait in the queue.
    let record = s.job(id).await;
    let started_at = record.job.started_at.unwrap();
    let run = s.run_info(&record).await;
    assert_eq!(run.status, "RUNNING");
    assert!(
        run.start_time >= started_at,
        "{run:?} started at {started_at}"
    );
    assert!(
        run.start_time > queued.start_time,
        "{run:?} queued {queued:?}"
    );

    // One cancelled before it ever ran shows no duration at all.
    s.jobs.cancel(waits, None).await.unwrap();
    let cancelled = s.run_info(&s.job(waits).await).await;
    assert_eq!(cancelled.status, "KILLED");
    assert_eq!(
        cancelled.end_time,
        Some(cancelled.start_time),
        "{cancelled:?}"
    );

    // Its end keeps its start.
    s.fake.set_fate(id, exited(0));
    s.jobs.cycle().await.unwrap();
    let ended = s.run_info(&s.job(id).await).await;
    assert_eq!(ended.status, "FINISHED");
    assert_eq!(ended.start_time, run.start_time);
    assert!(ended.end_time.unwrap() >= run.start_time, "{ended:?}");
}

#[tokio::test]
async fn a_job_cancelled_in_the_queue_is_retired_so_its_leftovers_go() {
    // Cancelled before any cycle placed it, as a preempted job waiting to
    // run again would be.
    let s = setup(vec![node(0, "a", 0)]).await;
    let id = s.submit(r#"{"name": "waits", "command": "x"}"#).await;
    s.jobs.cancel(id, None).await.unwrap();
    assert_eq!(s.job(id).await.job.state, JobState::Cancelled);
    assert_eq!(*s.fake.retired.lock().unwrap(), vec![id]);
}

#[tokio::test]
async fn a_job_no_node_can_hold_is_refused_at_submission() {
    let s = setup(vec![node(0, "a", 8), node(1, "b", 8)]).await;
    let spec = parse_spec(
        false,
        br#"{"name": "nine", "command": "x", "resources": {"gpus": 9}}"#,
    )
    .unwrap();
    match s.jobs.submit(spec, &s.user).await {
        Err(SubmitError::Invalid(errors)) => {
            assert_eq!(errors[0].field, "resources.gpus");
            assert_eq!(errors[0].message, "asks for 9 GPUs; the largest node has 8");
        }
        other => panic!("{:?}", other.map(|r| r.job.id)),
    }
}

#[tokio::test]
async fn while_the_executor_cannot_tell_its_capacity_nothing_starts_and_nothing_is_lost() {
    let s = setup(vec![node(0, "a", 2)]).await;
    let running = s.submit(r#"{"name": "one", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    *s.fake.away.lock().unwrap() = true;
    let waiting = s.submit(r#"{"name": "two", "command": "x"}"#).await;
    for _ in 0..3 {
        s.jobs.cycle().await.unwrap();
    }
    assert_eq!(s.fake.started().len(), 1);
    assert_eq!(s.job(running).await.job.state, JobState::Running);
    assert_eq!(s.job(waiting).await.job.state, JobState::Queued);
    // It comes back: the waiting job starts, the running one is untouched.
    *s.fake.away.lock().unwrap() = false;
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.fake.started().len(), 2);
    assert_eq!(s.job(waiting).await.job.state, JobState::Running);
    assert_eq!(s.job(running).await.job.state, JobState::Running);
}

#[tokio::test]
async fn no_more_start_than_the_executor_has_slots_for() {
    let s = setup(vec![node(0, "a", 8)]).await;
    *s.fake.slots.lock().unwrap() = Some(1);
    let a = s.submit(r#"{"name": "a", "command": "x"}"#).await;
    let b = s.submit(r#"{"name": "b", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.fake.started().len(), 1);
    assert_eq!(s.job(a).await.job.state, JobState::Running);
    assert_eq!(s.job(b).await.job.state, JobState::Queued);
}

#[tokio::test]
async fn an_attempt_the_executor_cannot_start_fails_with_its_reason() {
    let s = setup(vec![node(0, "a", 1)]).await;
    *s.fake.refuse_start.lock().unwrap() =
        Some(StartError::Failed("the image cannot be pulled".to_owned()));
    let id = s.submit(r#"{"name": "bad", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    let record = s.job(id).await;
    assert_eq!(record.job.state, JobState::Failed);
    assert_eq!(s.run_status(&record).await, "FAILED");
    let timeline = s.timeline(id).await;
    assert!(
        timeline
            .iter()
            .any(|e| e == "finished: the image cannot be pulled"),
        "{timeline:?}"
    );
}

#[tokio::test]
async fn an_executor_out_of_reach_at_the_start_puts_the_job_back_unharmed() {
    let s = setup(vec![node(0, "a", 1)]).await;
    *s.fake.refuse_start.lock().unwrap() = Some(StartError::Unavailable(
        "the Kubernetes API cannot be reached".to_owned(),
    ));
    let id = s
        .submit(r#"{"name": "later", "command": "x", "retries": 0}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    s.jobs.cycle().await.unwrap();
    let record = s.job(id).await;
    assert_eq!(record.job.state, JobState::Queued);
    assert_eq!(record.job.attempt, 0);
    assert!(record.job.node.is_none() && record.job.gpu_indices.is_empty());
    let timeline = s.timeline(id).await;
    assert_eq!(
        timeline
            .iter()
            .filter(|e| *e
                == "waiting: could not start: the Kubernetes API cannot be reached; it will be placed again")
            .count(),
        1,
        "said once however often it is tried: {timeline:?}"
    );
    // It comes back: the same attempt starts, with the run it had.
    *s.fake.refuse_start.lock().unwrap() = None;
    s.jobs.cycle().await.unwrap();
    let started = s.job(id).await;
    assert_eq!(started.job.state, JobState::Running);
    assert_eq!(started.job.attempt, 0);
    assert_eq!(started.job.run_id, record.job.run_id);
}

#[tokio::test]
async fn a_disrupted_attempt_runs_again_without_spending_a_retry() {
    let s = setup(vec![node(0, "a", 1), node(1, "b", 1)]).await;
    let id = s
        .submit(r#"{"name": "moved", "command": "x", "retries": 0}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    let first = s.job(id).await;
    assert_eq!(first.job.state, JobState::Running);
    s.fake.set_fate(
        id,
        Observation::Ended(Ending {
            message: Some("node a was deleted".to_owned()),
            ..Ending::of(EndReason::Disrupted)
        }),
    );
    // Queued again, and placed again in the same look.
    s.jobs.cycle().await.unwrap();
    let again = s.job(id).await;
    assert_eq!(again.job.state, JobState::Running, "placed again");
    assert_eq!(again.job.attempt, 1);
    assert_eq!(again.job.retries, 1, "the disruption added an attempt");
    assert_ne!(again.job.run_id, first.job.run_id);
    assert_eq!(s.run_status(&first).await, "KILLED");
    let timeline = s.timeline(id).await;
    assert!(
        timeline.iter().any(|e| e
            == "requeued: disrupted: node a was deleted; queued again in its place, without spending a retry (attempt 2)"),
        "{timeline:?}"
    );
    // A failure after that still has no retry left: it fails.
    s.fake.set_fate(
        id,
        Observation::Ended(Ending {
            exit_code: Some(1),
            ..Ending::of(EndReason::Exited)
        }),
    );
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(id).await.job.state, JobState::Failed);
}

/// A job stopped for others (preempted, drained, its node lost) keeps its
/// place: it goes before what was queued after it, not behind.
#[tokio::test]
async fn a_disrupted_job_keeps_its_place_in_the_queue() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let gpu = r#""resources": {"gpus": 1}"#;
    let first = s
        .submit(&format!(r#"{{"name": "first", "command": "x", {gpu}}}"#))
        .await;
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(first).await.job.state, JobState::Running);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let later = s
        .submit(&format!(r#"{{"name": "later", "command": "x", {gpu}}}"#))
        .await;
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(later).await.job.state, JobState::Queued);
    s.fake.set_fate(
        first,
        Observation::Ended(Ending {
            message: Some("node a was drained".to_owned()),
            ..Ending::of(EndReason::Disrupted)
        }),
    );
    s.jobs.cycle().await.unwrap();
    assert_eq!(
        s.job(first).await.job.state,
        JobState::Running,
        "it went first again"
    );
    assert_eq!(s.job(later).await.job.state, JobState::Queued);
}

#[tokio::test]
async fn why_a_started_attempt_waits_is_written_once_for_each_new_reason() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let id = s.submit(r#"{"name": "pending", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    let why = "0/1 nodes are available: 1 Insufficient nvidia.com/gpu";
    for _ in 0..3 {
        s.fake.set_fate(id, Observation::Waiting(why.to_owned()));
        s.jobs.cycle().await.unwrap();
    }
    s.fake.set_fate(
        id,
        Observation::Waiting("ImagePullBackOff (container main)".to_owned()),
    );
    s.jobs.cycle().await.unwrap();
    let timeline = s.timeline(id).await;
    let waits: Vec<&String> = timeline
        .iter()
        .filter(|e| e.starts_with("waiting: "))
        .collect();
    assert_eq!(
        waits,
        vec![
            &format!("waiting: {why}"),
            &"waiting: ImagePullBackOff (container main)".to_owned()
        ]
    );
    // It still runs, and a cancel reaches it while it waits.
    assert_eq!(s.job(id).await.job.state, JobState::Running);
    s.jobs.cancel(id, None).await.unwrap();
    s.fake.set_fate(id, Observation::Waiting(why.to_owned()));
    s.jobs.cycle().await.unwrap();
    assert_eq!(*s.fake.stopped.lock().unwrap(), vec![id]);
}

#[tokio::test]
async fn the_nodes_say_who_holds_their_gpus() {
    let s = setup(vec![node(0, "a", 6), node(1, "b", 8)]).await;
    // Others hold 2 of a's 8 GPUs; b is cordoned.
    *s.fake.in_all.lock().unwrap() = vec![node(0, "a", 8), {
        let mut b = node(1, "b", 8);
        b.schedulable = false;
        b
    }];
    s.fake.nodes.lock().unwrap()[1].schedulable = false;
    let id = s
        .submit(r#"{"name": "train", "command": "x", "resources": {"gpus": 4}}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(id).await.job.node.as_deref(), Some("a"));

    let view = s.jobs.nodes().await.unwrap();
    assert_eq!(view.executor, "fake");
    assert_eq!(view.unavailable, None);
    // The home page's figures: both nodes with all their GPUs.
    assert_eq!(s.jobs.node_figures().await, Some((2, 16)));
    let a = &view.nodes[0];
    assert_eq!(
        (
            a.name.as_str(),
            a.takes_jobs,
            a.gpus,
            a.used,
            a.others,
            a.free,
            a.jobs.clone()
        ),
        ("a", true, 8, 4, 2, 2, vec![id])
    );
    let b = &view.nodes[1];
    assert_eq!(
        (
            b.name.as_str(),
            b.takes_jobs,
            b.gpus,
            b.used,
            b.others,
            b.free
        ),
        ("b", false, 8, 0, 0, 8)
    );

    *s.fake.away.lock().unwrap() = true;
    let view = s.jobs.nodes().await.unwrap();
    assert!(view.nodes.is_empty());
    assert_eq!(view.unavailable.as_deref(), Some("the API is away"));
    assert_eq!(s.jobs.node_figures().await, None);
}

#[test]
fn cycles_are_paced_by_what_the_last_one_cost_and_slower_with_nothing_queued() {
    use std::time::Duration;
    let began = tokio::time::Instant::now();
    let after = |pace: crate::Pace, calm: bool| pace.next(began, calm) - began;
    let small = crate::Pace {
        looked: Duration::from_millis(2),
        queued: false,
    };
    // A small system: the least time between cycles, however woken.
    assert_eq!(after(small, false), crate::MIN_CYCLE);
    assert_eq!(after(small, true), crate::MIN_CYCLE);
    // Thousands of running jobs (100 ms to look at): twice that when woken
    // by a submission or with jobs queued, ten times with none queued.
    let busy = crate::Pace {
        looked: Duration::from_millis(100),
        queued: false,
    };
    assert_eq!(after(busy, false), Duration::from_millis(200));
    assert_eq!(after(busy, true), Duration::from_millis(1000));
    let waiting = crate::Pace {
        queued: true,
        ..busy
    };
    assert_eq!(after(waiting, true), Duration::from_millis(200));
    // The calm pace is capped, but never quicker than the quick one.
    let slow = crate::Pace {
        looked: Duration::from_millis(1500),
        queued: false,
    };
    assert_eq!(after(slow, true), crate::CALM_CYCLE);
    let slower = crate::Pace {
        looked: Duration::from_secs(4),
        queued: false,
    };
    assert_eq!(after(slower, true), Duration::from_secs(8));
}

/// Admin → GPUs' GPU-hours count every attempt of a job, the disrupted
/// one as the one that runs now, not only the latest.
#[tokio::test]
async fn gpu_hours_count_every_attempt_of_a_job() {
    use trainyard_domain::telemetry::UsageBy;
    let s = setup(vec![node(0, "a", 1), node(1, "b", 1)]).await;
    let id = s
        .submit(r#"{"name": "moved", "command": "x", "resources": {"gpus": 1}}"#)
        .await;
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(id).await.job.state, JobState::Running);
    tokio::time::sleep(std::time::Duration::from_millis(400)).await;
    s.fake.set_fate(
        id,
        Observation::Ended(Ending {
            message: Some("node a was deleted".to_owned()),
            ..Ending::of(EndReason::Disrupted)
        }),
    );
    s.jobs.cycle().await.unwrap();
    let again = s.job(id).await;
    assert_eq!(again.job.state, JobState::Running, "placed again");
    assert_eq!(again.job.attempt, 1);
    let telemetry = crate::telemetry::Telemetry::new(
        s.jobs.store().clone(),
        crate::telemetry::TelemetrySettings {
            sample_every: std::time::Duration::from_secs(10),
            idle_percent: 5.0,
            idle_after: std::time::Duration::from_secs(1800),
        },
    );
    let now = trainyard_store::now_millis();
    let usage = telemetry
        .usage((now - 3_600_000, now), UsageBy::Person, now)
        .await
        .unwrap();
    assert_eq!(usage.rows.len(), 1, "{usage:?}");
    assert_eq!(usage.total.jobs, 1, "{usage:?}");
    let held_ms = usage.total.allocated_hours * 3_600_000.0;
    let latest_ms = (now - again.job.started_at.unwrap()) as f64;
    // The first attempt's 400 ms and more, beside the latest one's.
    assert!(
        held_ms >= latest_ms + 399.0,
        "{held_ms} ms held, the latest attempt {latest_ms} ms: {usage:?}"
    );
    assert!(held_ms < latest_ms + 60_000.0, "{usage:?}");
    // Asked in the very millisecond the latest attempt started, the job is
    // still one of the period's (CI once asked in that millisecond).
    let at_start = again.job.started_at.unwrap();
    let usage = telemetry
        .usage((at_start - 3_600_000, at_start), UsageBy::Person, at_start)
        .await
        .unwrap();
    assert_eq!(usage.total.jobs, 1, "{usage:?}");
}

/// An experiment with a job that has not ended cannot be deleted under it;
/// one deleted all the same (by hand, or by an older server) ends the job
/// at its next retry, once, rather than failing every cycle after.
#[tokio::test]
async fn a_job_whose_experiment_is_gone_ends_instead_of_retrying_forever() {
    use sea_orm::ConnectionTrait;
    let s = setup(vec![node(0, "a", 1)]).await;
    let id = s
        .submit(
            r#"{"name": "orphan", "command": "false", "retries": 2, "experiment": "sweep",
                "resources": {"gpus": 1}}"#,
        )
        .await;
    s.jobs.cycle().await.unwrap();
    let running = s.job(id).await;
    assert_eq!(running.job.state, JobState::Running);
    let experiment = running.job.experiment_id.unwrap();
    let refused = s
        .jobs
        .store()
        .set_experiment_deleted(experiment, true)
        .await
        .unwrap_err()
        .to_string();
    assert!(
        refused.contains(&format!("has jobs that have not ended ({id})")),
        "{refused}"
    );

    s.jobs
        .store()
        .connection()
        .execute_unprepared(&format!(
            "UPDATE experiments SET lifecycle_stage = 'deleted' WHERE id = {experiment}"
        ))
        .await
        .unwrap();
    s.fake.set_fate(id, exited(1));
    s.jobs.cycle().await.unwrap();
    let ended = s.job(id).await;
    assert_eq!(ended.job.state, JobState::Failed);
    assert_eq!(ended.job.exit_code, Some(1));
    assert_eq!(*s.fake.retired.lock().unwrap(), vec![id]);
    let timeline = s.timeline(id).await;
    assert!(
        timeline
            .iter()
            .any(|e| e.contains("cannot run again: its experiment takes no new run")),
        "{timeline:?}"
    );
    // The next cycles have nothing left to do with it.
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.fake.started().len(), 1);
}

/// A guarantee lowered under a queued job that may not be preempted: the
/// team's policy names the job, which could not start before the
/// guarantee is raised again.
#[tokio::test]
async fn a_team_names_its_jobs_waiting_beyond_a_lowered_guarantee() {
    use trainyard_domain::teams::TeamPolicyChange;
    let s = setup(vec![node(0, "a", 4)]).await;
    let ada = s
        .jobs
        .store()
        .sign_in(trainyard_store::SignIn {
            subject: "sub-ada".to_owned(),
            username: "ada".to_owned(),
            display_name: String::new(),
            email: None,
            is_admin: false,
            groups: vec!["vision".to_owned()],
        })
        .await
        .unwrap();
    let vision = ada.teams[0].id;
    let guarantee = |gpus: u32| TeamPolicyChange {
        quota_gpus: Some(gpus),
        share: None,
    };
    s.jobs
        .store()
        .set_team_policy(vision, &guarantee(2))
        .await
        .unwrap();
    // Nothing starts while the executor cannot tell its nodes.
    *s.fake.away.lock().unwrap() = true;
    let strict = parse_spec(
        false,
        br#"{"name": "strict", "command": "true", "preemptible": false, "resources": {"gpus": 2}}"#,
    )
    .unwrap();
    let strict = s.jobs.submit(strict, &ada).await.unwrap().job.id;
    let loose = parse_spec(
        false,
        br#"{"name": "loose", "command": "true", "resources": {"gpus": 2}}"#,
    )
    .unwrap();
    s.jobs.submit(loose, &ada).await.unwrap();
    let waiting = |policies: Vec<trainyard_domain::teams::TeamPolicy>| {
        policies
            .into_iter()
            .find(|t| t.id == vision)
            .unwrap()
            .waiting_beyond_guarantee
    };
    assert!(waiting(s.jobs.team_policies().await.unwrap()).is_empty());
    s.jobs
        .store()
        .set_team_policy(vision, &guarantee(1))
        .await
        .unwrap();
    assert_eq!(
        waiting(s.jobs.team_policies().await.unwrap()),
        vec![strict],
        "the preemptible one borrows, and is not named"
    );
}

/// A job that ran out of time keeps its checkpoints for its owner's next
/// job, which takes them at its start; one that succeeded keeps none, and
/// submissions that cannot resume are told why.
#[tokio::test]
async fn checkpoints_are_kept_past_a_timeout_and_taken_by_the_job_that_resumes() {
    let s = setup(vec![node(0, "a", 2)]).await;
    let timed_out = s.submit(r#"{"name": "long", "command": "x"}"#).await;
    let succeeded = s.submit(r#"{"name": "short", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    s.fake
        .checkpoints
        .lock()
        .unwrap()
        .extend([(timed_out, 500), (succeeded, 70)]);
    s.fake.set_fate(
        timed_out,
        Observation::Ended(Ending::of(EndReason::Timeout)),
    );
    s.fake.set_fate(succeeded, exited(0));
    s.jobs.cycle().await.unwrap();
    let store = s.jobs.store();
    let kept = store.kept_checkpoints(timed_out).await.unwrap().unwrap();
    assert_eq!(kept.bytes, 500);
    assert_eq!(kept.owner.as_deref(), Some(s.user.username.as_str()));
    let timeline = s.timeline(timed_out).await;
    assert!(
        timeline.iter().any(|e| e.starts_with("finished: ")
            && e.ends_with("; its checkpoints (500 B) are kept for 1 h for a job to resume from")),
        "{timeline:?}"
    );
    assert_eq!(store.kept_checkpoints(succeeded).await.unwrap(), None);
    assert!(!s.fake.checkpoints.lock().unwrap().contains_key(&succeeded));

    // What cannot be resumed from is refused at submission, by field.
    let refusal = |json: String| {
        let jobs = s.jobs.clone();
        let user = s.user.clone();
        async move {
            let spec = parse_spec(false, json.as_bytes()).unwrap();
            match jobs.submit(spec, &user).await {
                Err(SubmitError::Invalid(errors)) => {
                    assert_eq!(errors[0].field, "resume_from");
                    errors[0].message.clone()
                }
                other => panic!("not refused: {other:?}"),
            }
        }
    };
    let spec = |from: i64| format!(r#"{{"name": "again", "command": "x", "resume_from": {from}}}"#);
    assert!(
        refusal(spec(succeeded))
            .await
            .contains("keeps no checkpoints")
    );
    assert!(
        refusal(spec(99_999))
            .await
            .contains("you have no job 99999")
    );
    let running = s.submit(r#"{"name": "on", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    assert!(refusal(spec(running)).await.contains("has not ended"));

    // Someone else's: as unknown as a job that does not exist.
    let bob = person(store, "bob").await;
    let theirs = parse_spec(false, spec(timed_out).as_bytes()).unwrap();
    match s.jobs.submit(theirs, &bob).await {
        Err(SubmitError::Invalid(errors)) => {
            assert_eq!(errors[0].field, "resume_from");
            assert!(
                errors[0]
                    .message
                    .contains(&format!("you have no job {timed_out}")),
                "{errors:?}"
            );
        }
        other => panic!("bob resumed from another's checkpoints: {other:?}"),
    }
    let resumed = s.submit(&spec(timed_out)).await;
    s.jobs.cycle().await.unwrap();
    let started = s.fake.started();
    let attempt = started.iter().find(|a| a.record.job.id == resumed).unwrap();
    assert_eq!(attempt.resume_from.as_ref().map(|o| o.id), Some(timed_out));
    let record = s.job(resumed).await;
    assert_eq!(record.job.state, JobState::Running);
    let run = store
        .get_run(record.job.run_id.as_deref().unwrap())
        .await
        .unwrap();
    assert!(
        run.tags
            .iter()
            .any(|(k, v)| k == "trainyard.resumed_from" && *v == timed_out.to_string()),
        "{:?}",
        run.tags
    );
    assert_eq!(s.fake.checkpoints.lock().unwrap().get(&resumed), Some(&500));
    assert_eq!(store.kept_checkpoints(timed_out).await.unwrap(), None);
    assert!(
        refusal(spec(timed_out))
            .await
            .contains("keeps no checkpoints"),
        "taken once"
    );
}

/// Checkpoints a waiting job took are its own: their owner cannot delete
/// them from under it, no second job takes them, and cancelled in the
/// queue it gives them back.
#[tokio::test]
async fn checkpoints_taken_by_a_waiting_job_are_held_for_it_or_given_back() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let store = s.jobs.store();
    let first = s.submit(r#"{"name": "first", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    s.fake.checkpoints.lock().unwrap().insert(first, 9);
    s.jobs.cancel(first, Some(&s.user)).await.unwrap();
    s.fake
        .set_fate(first, Observation::Ended(Ending::of(EndReason::Cancelled)));
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(first).await.job.state, JobState::Cancelled);
    assert!(store.kept_checkpoints(first).await.unwrap().is_some());
    let resume = format!(r#"{{"name": "again", "command": "x", "resume_from": {first}}}"#);
    // Waits behind another job, holding them.
    let blocker = s.submit(r#"{"name": "blocker", "command": "x"}"#).await;
    s.jobs.cycle().await.unwrap();
    let waiting = s.submit(&resume).await;
    assert!(
        !s.jobs
            .delete_checkpoints(&s.job(first).await, &s.user)
            .await
            .unwrap(),
        "held for the waiting job"
    );
    assert!(s.fake.checkpoints.lock().unwrap().contains_key(&first));
    let spec = parse_spec(false, resume.as_bytes()).unwrap();
    match s.jobs.submit(spec, &s.user).await {
        Err(SubmitError::Invalid(errors)) => {
            assert_eq!(errors[0].field, "resume_from");
            assert!(
                errors[0].message.contains("taken by another job"),
                "{errors:?}"
            );
        }
        other => panic!("a second job took them too: {other:?}"),
    }
    // Cancelled in the queue: kept again, and another job takes them.
    s.jobs.cancel(waiting, Some(&s.user)).await.unwrap();
    assert!(store.kept_checkpoints(first).await.unwrap().is_some());
    let said = s.timeline(waiting).await;
    assert!(
        !said.iter().any(|e| e.contains("are kept for")),
        "it kept none of its own: {said:?}"
    );
    let resumed = s
        .submit(&format!(
            r#"{{"name": "again", "command": "x", "retries": 1, "resume_from": {first}}}"#
        ))
        .await;
    s.fake.set_fate(blocker, exited(0));
    s.jobs.cycle().await.unwrap();
    let record = s.job(resumed).await;
    assert_eq!(record.job.state, JobState::Running);
    assert_eq!(s.fake.checkpoints.lock().unwrap().get(&resumed), Some(&9));
    // It fails and is retried: the next attempt finds them in place.
    assert!(!s.fake.checkpoints.lock().unwrap().contains_key(&first));
    s.fake.set_fate(resumed, exited(1));
    s.jobs.cycle().await.unwrap();
    let retried = s.job(resumed).await;
    assert_eq!(retried.job.state, JobState::Running);
    assert_eq!(retried.job.attempt, 1);
    let starts: Vec<Option<i64>> = s
        .fake
        .started()
        .iter()
        .filter(|a| a.record.job.id == resumed)
        .map(|a| a.resume_from.as_ref().map(|origin| origin.id))
        .collect();
    assert_eq!(starts, [Some(first), Some(first)]);
    s.fake.set_fate(resumed, exited(1));
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(resumed).await.job.state, JobState::Failed);
    // Ended: what it left is its own to keep; the record of the first
    // goes (nothing is left to take or delete).
    assert_eq!(store.claimed_by(resumed).await.unwrap(), None);
    assert!(!store.take_checkpoints(first).await.unwrap());
    assert_eq!(
        store
            .kept_checkpoints(resumed)
            .await
            .unwrap()
            .unwrap()
            .bytes,
        9
    );
}

/// One person keeps at most `checkpoint_keep_bytes` (1,000 B here): the
/// oldest go to make room, and a job's that alone is larger is not kept.
#[tokio::test]
async fn one_person_keeps_checkpoints_within_a_bound_the_oldest_going_first() {
    let s = setup(vec![node(0, "a", 3)]).await;
    let store = s.jobs.store();
    let mut ids = Vec::new();
    for name in ["old", "new", "huge"] {
        ids.push(
            s.submit(&format!(r#"{{"name": "{name}", "command": "x"}}"#))
                .await,
        );
    }
    s.jobs.cycle().await.unwrap();
    let [old, new, huge] = ids[..] else {
        unreachable!()
    };
    s.fake
        .checkpoints
        .lock()
        .unwrap()
        .extend([(old, 600), (new, 600), (huge, 5_000)]);
    s.fake.set_fate(old, exited(1));
    s.jobs.cycle().await.unwrap();
    assert!(store.kept_checkpoints(old).await.unwrap().is_some());
    s.fake.set_fate(new, exited(1));
    s.fake.set_fate(huge, exited(1));
    s.jobs.cycle().await.unwrap();
    assert_eq!(
        store.kept_checkpoints(old).await.unwrap(),
        None,
        "made room"
    );
    assert!(!s.fake.checkpoints.lock().unwrap().contains_key(&old));
    assert_eq!(
        store.kept_checkpoints(new).await.unwrap().unwrap().bytes,
        600
    );
    let said = s.timeline(new).await;
    assert!(
        said.iter()
            .any(|e| e.contains(&format!("(those of job #{old} went to make room"))),
        "{said:?}"
    );
    assert_eq!(store.kept_checkpoints(huge).await.unwrap(), None);
    assert!(!s.fake.checkpoints.lock().unwrap().contains_key(&huge));
    let said = s.timeline(huge).await;
    assert!(
        said.iter()
            .any(|e| e.contains("were not kept: they are more than one person may keep")),
        "{said:?}"
    );
}

/// Kept checkpoints past their time go, but not those a waiting job
/// took.
#[tokio::test]
async fn expired_checkpoints_go_but_those_a_waiting_job_took() {
    use sea_orm::ConnectionTrait;
    let s = setup(vec![node(0, "a", 1)]).await;
    let store = s.jobs.store();
    let old = s.submit(r#"{"name": "old", "command": "x"}"#).await;
    let needed = s.submit(r#"{"name": "needed", "command": "x"}"#).await;
    for job in [old, needed] {
        s.jobs.cancel(job, Some(&s.user)).await.unwrap();
        store
            .keep_checkpoints(job, Some(s.user.id), 1, i64::MAX)
            .await
            .unwrap();
        s.fake.checkpoints.lock().unwrap().insert(job, 1);
    }
    // Nothing free to start it on: it waits, holding them.
    *s.fake.slots.lock().unwrap() = Some(0);
    let waiting = s
        .submit(&format!(
            r#"{{"name": "w", "command": "x", "resume_from": {needed}}}"#
        ))
        .await;
    store
        .connection()
        .execute_unprepared("UPDATE kept_checkpoints SET kept_until = 0")
        .await
        .unwrap();
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(waiting).await.job.state, JobState::Queued);
    // Deleted beside the loop.
    for _ in 0..100 {
        if !s.fake.checkpoints.lock().unwrap().contains_key(&old) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(!s.fake.checkpoints.lock().unwrap().contains_key(&old));
    for _ in 0..100 {
        if store.expired_checkpoints(1, 10).await.unwrap().is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    assert!(store.expired_checkpoints(1, 10).await.unwrap().is_empty());
    assert_eq!(store.claimed_by(waiting).await.unwrap(), Some(needed));
    assert!(s.fake.checkpoints.lock().unwrap().contains_key(&needed));
}

/// The server stopped in the middle of a submission, after the job's
/// record and before its files were ready: started again, it fails that
/// job, saying so, and gives back the checkpoints it took. A submission
/// in flight in the new server is left to finish.
#[tokio::test]
async fn a_job_whose_submission_the_server_stopped_in_fails_at_the_next_start() {
    let mut s = setup(vec![node(0, "a", 2)]).await;
    let store = s.jobs.store().clone();
    let mut kept = Vec::new();
    for name in ["first", "second"] {
        let id = s
            .submit(&format!(r#"{{"name": "{name}", "command": "x"}}"#))
            .await;
        s.jobs.cycle().await.unwrap();
        s.fake.checkpoints.lock().unwrap().insert(id, 9);
        s.fake.set_fate(id, exited(1));
        s.jobs.cycle().await.unwrap();
        assert!(store.kept_checkpoints(id).await.unwrap().is_some());
        kept.push(id);
    }
    let resume =
        |from: i64| format!(r#"{{"name": "again", "command": "x", "resume_from": {from}}}"#);
    // Each stopped after the checkpoints were taken, before the job was
    // ready: the marker that says it is ready is not there.
    let cut = s.submit(&resume(kept[0])).await;
    std::fs::remove_file(s.jobs.files_ready_marker(cut)).unwrap();
    s.jobs.cycle().await.unwrap();
    assert_eq!(
        s.job(cut).await.job.state,
        JobState::Queued,
        "the server that takes it may still ready it"
    );
    // Made before the new server began, to the millisecond.
    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    s.restart();
    // Not while the jobs folder is away (a volume not mounted)...
    let root = s._dir.path().join("jobs");
    let away = s._dir.path().join("jobs-away");
    std::fs::rename(&root, &away).unwrap();
    s.jobs.cycle().await.unwrap();
    std::fs::rename(&away, &root).unwrap();
    assert_eq!(
        s.job(cut).await.job.state,
        JobState::Queued,
        "no jobs folder"
    );
    // ...nor while this server works on it, whatever the clock says.
    let held = s.jobs.hold(cut).unwrap();
    s.jobs.cycle().await.unwrap();
    assert_eq!(s.job(cut).await.job.state, JobState::Queued, "in use");
    drop(held);
    let in_flight = s.submit(&resume(kept[1])).await;
    std::fs::remove_file(s.jobs.files_ready_marker(in_flight)).unwrap();
    s.jobs.cycle().await.unwrap();
    let record = s.job(cut).await;
    assert_eq!(record.job.state, JobState::Failed);
    let said = s.timeline(cut).await;
    assert!(
        said.last()
            .unwrap()
            .contains("the server stopped while this job was being submitted"),
        "{said:?}"
    );
    assert_eq!(s.run_status(&record).await, "FAILED");
    assert!(s.fake.started().iter().all(|a| a.record.job.id != cut));
    // Given back: another job may resume from them.
    assert_eq!(store.claimed_by(cut).await.unwrap(), None);
    assert!(store.kept_checkpoints(kept[0]).await.unwrap().is_some());
    // The new server's own submission is left to finish.
    assert_eq!(s.job(in_flight).await.job.state, JobState::Queued);
    assert_eq!(store.claimed_by(in_flight).await.unwrap(), Some(kept[1]));
}

/// An admin deletes someone's ended job: what its checkpoints hold goes
/// with their record, then the job and its folder, and the trail says who
/// did it. Its owner is refused one that has not ended.
#[tokio::test]
async fn an_admin_deletes_someones_ended_job_and_the_trail_says_so() {
    let s = setup(vec![node(0, "a", 1)]).await;
    let store = s.jobs.store().clone();
    let ada = person(&store, "ada").await;
    let spec = parse_spec(false, br#"{"name": "hers", "command": "x"}"#).unwrap();
    let hers = s.jobs.submit(spec, &ada).await.unwrap().job.id;
    s.jobs.cycle().await.unwrap();
    let running = s.job(hers).await;
    let bob = person(&store, "bob").await;
    match s.jobs.delete_job(&running, &bob).await {
        Err(trainyard_store::StoreError::Forbidden(why)) => {
            assert!(why.contains("only its owner or an admin"), "{why}")
        }
        other => panic!("someone else deleted it: {other:?}"),
    }
    match s.jobs.delete_job(&running, &ada).await {
        Err(trainyard_store::StoreError::Rejected(why)) => {
            assert!(why.contains("has not ended; cancel it first"), "{why}")
        }
        other => panic!("deleted while it runs: {other:?}"),
    }
    s.fake.checkpoints.lock().unwrap().insert(hers, 9);
    s.fake.set_fate(hers, exited(1));
    s.jobs.cycle().await.unwrap();
    assert!(store.kept_checkpoints(hers).await.unwrap().is_some());
    let folder = s._dir.path().join(format!("jobs/{hers}"));
    std::fs::create_dir_all(folder.join("0")).unwrap();
    std::fs::write(folder.join("0/output.log"), "log").unwrap();

    // As the API and pages read it: named.
    let ended = store
        .job_as(&s.user, hers, trainyard_store::Access::Change)
        .await
        .unwrap();
    // What they hold cannot be deleted now: the job stays, and so does
    // their record, expired, for the sweep to finish.
    *s.fake.drop_fails.lock().unwrap() = true;
    match s.jobs.delete_job(&ended, &s.user).await {
        Err(trainyard_store::StoreError::Unavailable(why)) => {
            assert!(
                why.contains("checkpoints cannot be deleted at the moment"),
                "{why}"
            )
        }
        other => panic!("deleted, leaving its checkpoints unrecorded: {other:?}"),
    }
    assert!(store.get_job(hers).await.is_ok());
    assert_eq!(
        store
            .expired_checkpoints(trainyard_store::now_millis(), 10)
            .await
            .unwrap(),
        [hers]
    );
    *s.fake.drop_fails.lock().unwrap() = false;
    // Not while it is run again (its files being copied).
    let copying = s.jobs.hold(hers).unwrap();
    match s.jobs.delete_job(&ended, &s.user).await {
        Err(trainyard_store::StoreError::Unavailable(why)) => {
            assert!(why.contains("run again right now"), "{why}")
        }
        other => panic!("deleted under a retry: {other:?}"),
    }
    drop(copying);
    s.jobs.delete_job(&ended, &s.user).await.unwrap();
    assert!(matches!(
        store.get_job(hers).await,
        Err(trainyard_store::StoreError::NotFound(_))
    ));
    assert!(!s.fake.checkpoints.lock().unwrap().contains_key(&hers));
    assert_eq!(store.kept_checkpoints(hers).await.unwrap(), None);
    assert!(!folder.exists());
    let trail = store
        .audit_events(
            &trainyard_store::audit::AuditQuery {
                action: Some(trainyard_domain::identity::AuditAction::JobDeleted),
                ..Default::default()
            },
            10,
        )
        .await
        .unwrap();
    assert_eq!(trail.len(), 1, "{trail:?}");
    assert_eq!(trail[0].actor, s.user.username);
    assert_eq!(trail[0].target, format!("job {hers}"));
    assert_eq!(trail[0].detail, "ada's job hers");
}
