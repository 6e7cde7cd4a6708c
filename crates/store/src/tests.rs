//! Store tests; each runs on SQLite, and on PostgreSQL when TEST_DATABASE_URL is set.

use super::*;
use sea_orm::{ActiveModelTrait, Set};
use trainyard_domain::identity::Owner;
use trainyard_test_db::TestDb;

/// A queued job of `owner` with a run in `experiment`, as a submission
/// makes one: `spec` is the job's spec as JSON (a name and a command at
/// least).
fn new_job(spec: &str, owner: i64, experiment: i64) -> NewJob {
    NewJob {
        spec: serde_json::from_str(spec).expect("the test's job spec parses"),
        owner_id: Some(owner),
        team_id: None,
        cpu_millis: 1000,
        memory_mib: 1024,
        max_runtime_secs: 60,
        run: NewRun {
            experiment_id: experiment,
            user_id: "t".to_owned(),
            owner_id: Some(owner),
            team_id: None,
            run_name: None,
            start_time: None,
            tags: Vec::new(),
        },
        params: Vec::new(),
        tags: Vec::new(),
        submitted: "queued".to_owned(),
    }
}

async fn migrated(db: &TestDb) -> Store {
    let store = Store::connect(&db.url, 4).await.expect("connect");
    let applied = store.migrate().await.expect("migrate");
    assert_eq!(applied, Store::known_migrations());
    store
}

#[tokio::test]
async fn migrations_apply_once_and_readiness_follows() {
    let db = TestDb::new().await;
    let store = Store::connect(&db.url, 2).await.unwrap();
    assert_eq!(
        store.readiness().await.unwrap(),
        Readiness::Pending(Store::known_migrations())
    );
    assert_eq!(store.migrate().await.unwrap(), Store::known_migrations());
    assert_eq!(store.readiness().await.unwrap(), Readiness::Ready);
    assert!(
        store.migrate().await.unwrap().is_empty(),
        "second run applies nothing"
    );
    assert_eq!(store.engine() == Engine::Postgres, db.is_postgres());
}

#[tokio::test]
async fn undoing_the_executor_handles_gives_running_jobs_their_pids_back() {
    use sea_orm::{ConnectionTrait, Statement};
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let owner = store.local_admin().await.unwrap();
    let experiment = store
        .create_experiment("handles", owner.as_owner())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for handle in ["4242:987654321", "trainyard-7-0-abcdef12"] {
        let job = store
            .create_job(new_job(
                r#"{"name": "j", "command": "x"}"#,
                owner.id,
                experiment,
            ))
            .await
            .unwrap();
        store
            .move_job(
                job.job.id,
                &[JobState::Queued],
                JobState::Running,
                JobChange {
                    handle: Some(Some(handle.to_owned())),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        ids.push(job.job.id);
    }
    // Down past migration 7 (and every one after it).
    let known = Store::known_migrations();
    let seventh = known
        .iter()
        .position(|m| m == "m20261201_000007_executor_handles")
        .unwrap();
    Migrator::down(store.connection(), Some((known.len() - seventh) as u32))
        .await
        .unwrap();
    let backend = store.connection().get_database_backend();
    let pids: Vec<(Option<i64>, Option<i64>)> = {
        let mut out = Vec::new();
        for id in &ids {
            let row = store
                .connection()
                .query_one_raw(Statement::from_string(
                    backend,
                    format!(
                        "SELECT CAST(pid AS BIGINT) AS pid, pid_start FROM jobs WHERE id = {id}"
                    ),
                ))
                .await
                .unwrap()
                .unwrap();
            out.push((
                row.try_get::<Option<i64>>("", "pid").unwrap(),
                row.try_get::<Option<i64>>("", "pid_start").unwrap(),
            ));
        }
        out
    };
    assert_eq!(pids, vec![(Some(4242), Some(987654321)), (None, None)]);
    // And up again: the local one's handle is back.
    store.migrate().await.unwrap();
    assert_eq!(
        store.get_job(ids[0]).await.unwrap().handle.as_deref(),
        Some("4242:987654321")
    );
}

#[tokio::test]
async fn overview_counts_what_is_stored() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let empty = store.overview(&Viewer::Everyone).await.unwrap();
    assert_eq!(
        empty.experiments, 1,
        "MLflow's Default experiment exists from the start"
    );
    assert_eq!(empty.jobs_total(), 0);
    assert_eq!(empty.jobs_by_state.len(), JobState::ALL.len());

    let first = store
        .create_experiment("mnist", Owner::default())
        .await
        .unwrap();
    store
        .create_experiment("cifar", Owner::default())
        .await
        .unwrap();
    let now = now_millis();
    for (i, status) in ["RUNNING", "FINISHED", "RUNNING"].into_iter().enumerate() {
        run::ActiveModel {
            id: Set(format!("{i:032x}")),
            experiment_id: Set(first),
            name: Set(format!("run-{i}")),
            user_id: Set(None),
            status: Set(status.to_owned()),
            start_time: Set(now + i as i64),
            end_time: Set(None),
            lifecycle_stage: Set("active".to_owned()),
            artifact_uri: Set(String::new()),
            user_name: Set("alice".to_owned()),
            team_id: Set(None),
        }
        .insert(store.connection())
        .await
        .unwrap();
    }
    for (i, state) in [JobState::Queued, JobState::Queued, JobState::Running]
        .into_iter()
        .enumerate()
    {
        job::ActiveModel {
            name: Set(format!("job-{i}")),
            state: Set(state.as_str().to_owned()),
            spec: Set(format!(r#"{{"name": "job-{i}", "command": "true"}}"#)),
            gpus: Set(1),
            created_at: Set(now + i as i64),
            ..Default::default()
        }
        .insert(store.connection())
        .await
        .unwrap();
    }

    let overview = store.overview(&Viewer::Everyone).await.unwrap();
    assert_eq!(overview.experiments, 3);
    assert_eq!(overview.runs, 3);
    assert_eq!(overview.active_runs, 2);
    assert_eq!(overview.jobs_total(), 3);
    let queued = overview
        .jobs_by_state
        .iter()
        .find(|(s, _)| *s == JobState::Queued);
    assert_eq!(queued, Some(&(JobState::Queued, 2)));

    let experiments = store
        .list_experiments(&Viewer::Everyone, false)
        .await
        .unwrap();
    let mnist = experiments.iter().find(|e| e.name == "mnist").unwrap();
    assert_eq!(mnist.runs, 3);
    assert_eq!(
        experiments[0].name, "mnist",
        "the one with the newest run comes first"
    );
    let jobs = store.find_jobs(&[], 10, &JobsOf::Everyone).await.unwrap();
    assert_eq!(jobs.len(), 3);
    assert_eq!(jobs[0].job.name, "job-2");
    assert_eq!(jobs[0].job.state, JobState::Running);
}

#[tokio::test]
async fn experiment_names_are_unique_and_validated() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let id = store
        .create_experiment("  sweep  ", Owner::default())
        .await
        .unwrap();
    let saved = experiment::Entity::find_by_id(id)
        .one(store.connection())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(saved.name, "sweep");
    assert_eq!(saved.artifact_location, format!("mlflow-artifacts:/{id}"));
    match store.create_experiment("sweep", Owner::default()).await {
        Err(StoreError::Conflict { what }) => assert!(what.contains("sweep")),
        other => panic!("expected a conflict, got {other:?}"),
    }
    match store.create_experiment("", Owner::default()).await {
        Err(StoreError::Invalid(e)) => assert_eq!(e.field, "name"),
        other => panic!("expected a field error, got {other:?}"),
    }
    assert_eq!(
        store
            .list_experiments(&Viewer::Everyone, false)
            .await
            .unwrap()
            .len(),
        2,
        "Default and sweep"
    );
}

#[tokio::test]
async fn nodes_are_listed_with_their_gpu_counts() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let node = node::ActiveModel {
        name: Set("gpu-01".to_owned()),
        state: Set("ready".to_owned()),
        labels: Set("{}".to_owned()),
        created_at: Set(now_millis()),
        ..Default::default()
    }
    .insert(store.connection())
    .await
    .unwrap();
    for index in 0..2 {
        gpu::ActiveModel {
            node_id: Set(node.id),
            index: Set(index),
            uuid: Set(format!("GPU-{index}")),
            name: Set("NVIDIA H100".to_owned()),
            memory_total_bytes: Set(80 << 30),
            ..Default::default()
        }
        .insert(store.connection())
        .await
        .unwrap();
    }
    let nodes = store.list_nodes().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].gpus, 2);
    assert_eq!(store.overview(&Viewer::Everyone).await.unwrap().gpus, 2);
}

#[tokio::test]
async fn a_missing_folder_is_reported_against_database_url() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite://{}/missing/sub/x.db", dir.path().display());
    let err = Store::connect(&url, 1).await.unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with("database_url: cannot open"), "{text}");
}

#[test]
fn urls_are_checked_and_redacted() {
    assert_eq!(Engine::from_url("sqlite://x.db").unwrap(), Engine::Sqlite);
    assert_eq!(
        Engine::from_url("postgres://u@h/db").unwrap(),
        Engine::Postgres
    );
    assert!(
        Engine::from_url("mysql://h/db")
            .unwrap_err()
            .to_string()
            .contains("`mysql`")
    );
    assert!(
        Engine::from_url("trainyard.db")
            .unwrap_err()
            .to_string()
            .contains("not a URL")
    );
    assert_eq!(
        redact("postgres://u:secret@h:5432/db"),
        "postgres://u:***@h:5432/db"
    );
    assert_eq!(redact("sqlite:///tmp/x.db"), "sqlite:///tmp/x.db");
}

/// A node is removed with its GPUs only when nothing runs on it; an ended
/// job keeps its record without the node.
#[tokio::test]
async fn a_node_is_removed_only_when_nothing_runs_on_it() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let owner = store.local_admin().await.unwrap();
    let experiment = store
        .create_experiment("nodes", owner.as_owner())
        .await
        .unwrap();
    let gpu = crate::GpuInfo {
        index: 0,
        uuid: "GPU-busy-0".to_owned(),
        name: "A100".to_owned(),
        memory_total_bytes: 1,
    };
    let node_id = store.register_node("busy", &[gpu]).await.unwrap();
    let job = store
        .create_job(new_job(
            r#"{"name": "j", "command": "x"}"#,
            owner.id,
            experiment,
        ))
        .await
        .unwrap()
        .job
        .id;
    let to = |from: JobState, to: JobState, change: JobChange| {
        let store = &store;
        async move { store.move_job(job, &[from], to, change).await.unwrap() }
    };
    assert!(
        to(
            JobState::Queued,
            JobState::Running,
            JobChange {
                node_id: Some(Some(node_id)),
                node: Some(Some("busy".to_owned())),
                ..Default::default()
            },
        )
        .await
    );
    assert_eq!(
        store.remove_node("busy").await.unwrap(),
        crate::NodeRemoval::Busy(1)
    );
    assert_eq!(store.gpu_inventory().await.unwrap().len(), 1);
    assert!(to(JobState::Running, JobState::Succeeded, JobChange::default()).await);
    assert_eq!(
        store.remove_node("busy").await.unwrap(),
        crate::NodeRemoval::Removed
    );
    assert!(store.gpu_inventory().await.unwrap().is_empty());
    assert_eq!(
        store.get_job(job).await.unwrap().job.state,
        JobState::Succeeded
    );
    assert_eq!(
        store.remove_node("busy").await.unwrap(),
        crate::NodeRemoval::Missing
    );
}

/// A follower of the job writes is told each job written after it began
/// (created, moved, cancelled, filed under a team), not a move that did
/// not happen, everything once a node's removal cleared its jobs' node; a
/// second follower is told the same, and one dropped is no longer told.
#[tokio::test]
async fn followers_are_told_which_jobs_were_written() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let owner = store.local_admin().await.unwrap();
    let experiment = store
        .create_experiment("follow", owner.as_owner())
        .await
        .unwrap();
    let new_job = || new_job(r#"{"name": "j", "command": "x"}"#, owner.id, experiment);
    let before = store.create_job(new_job()).await.unwrap().job.id;
    let follower = store.follow_jobs();
    let ids = |changes: crate::JobChanges| {
        assert!(!changes.all);
        changes.ids.into_iter().collect::<Vec<_>>()
    };
    assert_eq!(
        ids(follower.take()),
        Vec::<i64>::new(),
        "{before} came before"
    );

    let a = store.create_job(new_job()).await.unwrap().job.id;
    let b = store.create_job(new_job()).await.unwrap().job.id;
    let other = store.follow_jobs();
    assert_eq!(ids(follower.take()), vec![a, b]);
    assert_eq!(ids(follower.take()), Vec::<i64>::new(), "taken once");

    // A move that happened is told; one from a state the job is not in is not.
    let moved = store
        .move_jobs(vec![
            (
                a,
                &[JobState::Queued][..],
                JobState::Running,
                JobChange::default(),
            ),
            (
                b,
                &[JobState::Running][..],
                JobState::Failed,
                JobChange::default(),
            ),
        ])
        .await
        .unwrap();
    assert_eq!(moved, vec![true, false]);
    store.request_cancel(a, None).await.unwrap();
    store.request_cancel(b, Some("root")).await.unwrap();
    let team = store
        .create_team(
            "follow-team",
            &trainyard_domain::teams::TeamPolicyChange::default(),
        )
        .await
        .unwrap()
        .id;
    store
        .set_job_team(before, Some(team), "filed under follow-team")
        .await
        .unwrap();
    assert_eq!(ids(follower.take()), vec![before, a, b]);
    assert_eq!(ids(other.take()), vec![before, a, b], "a second follower");

    // The store's rows say the same as what it told.
    let read = store.jobs_by_id(&[b, a, before, 999_999]).await.unwrap();
    let states: Vec<_> = read.iter().map(|r| (r.job.id, r.job.state)).collect();
    assert_eq!(
        states,
        vec![
            (before, JobState::Queued),
            (a, JobState::Running),
            (b, JobState::Cancelled)
        ]
    );
    assert!(read[1].job.cancel_requested);
    assert_eq!(read[0].team_id, Some(team));

    drop(other);
    store.register_node("gone", &[]).await.unwrap();
    assert_eq!(
        store.remove_node("gone").await.unwrap(),
        crate::NodeRemoval::Removed
    );
    let changes = follower.take();
    assert!(changes.all && changes.ids.is_empty(), "{changes:?}");
    assert_eq!(store.job_writes.followers(), 1, "the dropped one went");
    store.close().await.unwrap();
}

/// A deleted run is deleted for good with what hangs off it, and its job
/// keeps its record; an active run, one a job still runs as, and one a
/// registered version is made of are refused and left whole.
#[tokio::test]
async fn a_deleted_run_is_purged_with_what_hangs_off_it() {
    use sea_orm::{ConnectionTrait, Statement};
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let owner = store.local_admin().await.unwrap();
    let experiment = store
        .create_experiment("gc", owner.as_owner())
        .await
        .unwrap();
    let job = store
        .create_job(new_job(
            r#"{"name": "j", "command": "x"}"#,
            owner.id,
            experiment,
        ))
        .await
        .unwrap()
        .job;
    let run_id = job.run_id.clone().unwrap();
    let kept_run = store.get_job(job.id).await.unwrap().job.run_id.unwrap();
    assert_eq!(kept_run, run_id);
    let point = trainyard_domain::tracking::Point {
        step: 0,
        timestamp: 1,
        value: 0.5,
    };
    store
        .log_batch(
            &run_id,
            &[MetricIn {
                key: "loss".to_owned(),
                point,
            }],
            &[("lr".to_owned(), "0.1".to_owned())],
            &[("note".to_owned(), "x".to_owned())],
        )
        .await
        .unwrap();
    store.create_run_token(owner.id, &run_id).await.unwrap();
    let other = store
        .create_run(NewRun {
            experiment_id: experiment,
            user_id: "t".to_owned(),
            owner_id: Some(owner.id),
            ..NewRun::default()
        })
        .await
        .unwrap()
        .info
        .run_id;
    store
        .log_batch(&other, &[], &[("lr".to_owned(), "0.2".to_owned())], &[])
        .await
        .unwrap();
    let refused = |r: Result<i64, StoreError>| match r {
        Err(StoreError::Rejected(why)) => why,
        other => panic!("not refused: {other:?}"),
    };
    assert!(refused(store.purge_run(&run_id).await).contains("is not deleted"));
    store.set_run_deleted(&run_id, true).await.unwrap();
    let why = refused(store.purge_run(&run_id).await);
    assert!(why.contains(&format!("job {} still runs", job.id)), "{why}");
    store
        .move_job(
            job.id,
            &[JobState::Queued],
            JobState::Cancelled,
            JobChange::default(),
        )
        .await
        .unwrap();
    store
        .create_registered_model("net", None, &[], owner.as_owner())
        .await
        .unwrap();
    let made_of_it = registry::NewVersion {
        source: format!("runs:/{run_id}/model"),
        storage_location: format!("mlflow-artifacts:/{experiment}/{run_id}/artifacts/model"),
        run_id: Some(run_id.clone()),
        ..Default::default()
    };
    store.create_model_version("net", made_of_it).await.unwrap();
    // A version of a logged model only names the run.
    store
        .create_model_version(
            "net",
            registry::NewVersion {
                source: "models:/m-1".to_owned(),
                storage_location: format!("mlflow-artifacts:/{experiment}/models/m-1/artifacts"),
                run_id: Some(run_id.clone()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let why = refused(store.purge_run(&run_id).await);
    assert!(
        why.contains("version 1 of the registered model net"),
        "{why}"
    );
    assert_eq!(
        store.get_run(&run_id).await.unwrap().info.lifecycle_stage,
        "deleted",
        "a refusal changes nothing"
    );
    store.delete_model_version("net", 1).await.unwrap();
    // Registered by the path of its files, naming no run: refused too.
    store
        .create_model_version(
            "net",
            registry::NewVersion {
                source: format!("mlflow-artifacts:/{experiment}/{run_id}/artifacts/model"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let why = refused(store.purge_run(&run_id).await);
    assert!(
        why.contains("version 3 of the registered model net"),
        "{why}"
    );
    store.delete_model_version("net", 3).await.unwrap();
    // Someone else's deleted runs are not theirs to list.
    assert!(
        store
            .deleted_runs(experiment, Some(owner.id + 1000), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store
            .deleted_runs(experiment, Some(owner.id), 10)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        store.deleted_runs(experiment, None, 10).await.unwrap(),
        vec![(
            run_id.clone(),
            store.get_run(&run_id).await.unwrap().info.run_name
        )]
    );
    assert_eq!(store.purge_run(&run_id).await.unwrap(), experiment);
    assert!(matches!(
        store.get_run(&run_id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.purge_run(&run_id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(
        store
            .deleted_runs(experiment, None, 10)
            .await
            .unwrap()
            .is_empty()
    );
    let backend = store.connection().get_database_backend();
    for table in [
        "params",
        "tags",
        "metric_chunks",
        "latest_metrics",
        "api_tokens",
    ] {
        let count = |run: &str| {
            let sql = format!("SELECT COUNT(*) AS n FROM {table} WHERE run_id = '{run}'");
            let conn = store.connection().clone();
            async move {
                let row = conn
                    .query_one_raw(Statement::from_string(backend, sql))
                    .await
                    .unwrap()
                    .unwrap();
                row.try_get::<i64>("", "n").unwrap()
            }
        };
        assert_eq!(
            count(&run_id).await,
            0,
            "{table} keeps rows of the purged run"
        );
    }
    // The other run is whole, and the job is there without its run.
    assert_eq!(store.get_run(&other).await.unwrap().params.len(), 1);
    let ended = store.get_job(job.id).await.unwrap().job;
    assert_eq!(ended.state, JobState::Cancelled);
    assert_eq!(ended.run_id, None);
    assert_eq!(
        store.get_model_version("net", 2).await.unwrap().run_id,
        Some(run_id),
        "the logged model's version keeps the id it was made with"
    );
}

/// The audit trail lists newest first, pages with `before`, narrows by
/// action and person, and cuts long texts to what the table holds.
#[tokio::test]
async fn the_audit_trail_pages_and_narrows() {
    use crate::audit::AuditQuery;
    use trainyard_domain::identity::AuditAction;
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let admin = store.local_admin().await.unwrap();
    store
        .audit(
            &admin,
            AuditAction::TeamCreated,
            "team vision",
            "2 guaranteed GPUs, share 1",
        )
        .await;
    store
        .audit(
            &admin,
            AuditAction::NodeDrained,
            &"n".repeat(300),
            "driver update",
        )
        .await;
    store
        .audit(
            &admin,
            AuditAction::TeamChanged,
            "team vision",
            "4 guaranteed GPUs, share 1",
        )
        .await;
    let all = store
        .audit_events(&AuditQuery::default(), 10)
        .await
        .unwrap();
    let actions: Vec<&str> = all.iter().map(|e| e.action.as_str()).collect();
    assert_eq!(actions, ["team.change", "node.drain", "team.create"]);
    assert!(all.iter().all(|e| e.actor == admin.username));
    assert_eq!(all[1].target.chars().count(), 250);
    assert!(all[0].time >= all[2].time);
    let older = store
        .audit_events(
            &AuditQuery {
                before: Some(all[0].id),
                ..Default::default()
            },
            1,
        )
        .await
        .unwrap();
    assert_eq!(older.len(), 1);
    assert_eq!(older[0].id, all[1].id);
    let teams = store
        .audit_events(
            &AuditQuery {
                action: Some(AuditAction::TeamCreated),
                ..Default::default()
            },
            10,
        )
        .await
        .unwrap();
    assert_eq!(teams.len(), 1);
    assert_eq!(teams[0].detail, "2 guaranteed GPUs, share 1");
    let nobody = store
        .audit_events(
            &AuditQuery {
                actor: Some("someone-else".to_owned()),
                ..Default::default()
            },
            10,
        )
        .await
        .unwrap();
    assert!(nobody.is_empty());
}

/// Kept checkpoints are listed by owner, found by job, expire in order,
/// and are taken by one job alone, which holds them until it ends: hidden,
/// never expired nor deleted under it, kept again if it lets them go.
/// `n` queued jobs of the local admin, in a new experiment `experiment`.
async fn queued_jobs(
    store: &Store,
    experiment: &str,
    n: usize,
) -> (trainyard_domain::identity::User, Vec<JobRecord>) {
    let owner = store.local_admin().await.unwrap();
    let experiment = store
        .create_experiment(experiment, owner.as_owner())
        .await
        .unwrap();
    let mut jobs = Vec::new();
    for _ in 0..n {
        let job = new_job(r#"{"name": "j", "command": "x"}"#, owner.id, experiment);
        jobs.push(store.create_job(job).await.unwrap());
    }
    (owner, jobs)
}

#[tokio::test]
async fn kept_checkpoints_are_listed_expire_and_are_taken_by_one_job() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let (owner, jobs) = queued_jobs(&store, "resume", 5).await;
    let jobs: Vec<i64> = jobs.iter().map(|j| j.job.id).collect();
    let (claimant, other) = (jobs[3], jobs[4]);
    let far = now_millis() + 3_600_000;
    store
        .keep_checkpoints(jobs[0], Some(owner.id), 3 << 30, far + 2)
        .await
        .unwrap();
    store
        .keep_checkpoints(jobs[1], Some(owner.id), 10, far + 1)
        .await
        .unwrap();
    store
        .keep_checkpoints(jobs[2], None, 1, 1_000)
        .await
        .unwrap();
    let first = store.kept_checkpoints(jobs[0]).await.unwrap().unwrap();
    assert_eq!(first.bytes, 3 << 30);
    assert_eq!(first.kept_until, far + 2);
    assert_eq!(first.owner.as_deref(), Some(owner.username.as_str()));
    let listed = |store: &Store| {
        let store = store.clone();
        async move {
            store
                .kept_checkpoints_of(owner.id)
                .await
                .unwrap()
                .iter()
                .map(|k| k.job)
                .collect::<Vec<i64>>()
        }
    };
    assert_eq!(
        listed(&store).await,
        [jobs[1], jobs[0]],
        "the first to go first"
    );
    assert!(
        store
            .kept_checkpoints_of(owner.id + 1000)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.expired_checkpoints(999, 10).await.unwrap(),
        Vec::<i64>::new()
    );
    assert_eq!(
        store.expired_checkpoints(1_000, 10).await.unwrap(),
        [jobs[2]]
    );

    // Taken by one job: once, hidden, neither expired nor deleted.
    assert!(
        !store.claim_checkpoints(jobs[2], claimant).await.unwrap(),
        "expired"
    );
    assert!(store.claim_checkpoints(jobs[0], claimant).await.unwrap());
    assert!(
        !store.claim_checkpoints(jobs[0], other).await.unwrap(),
        "taken once"
    );
    assert_eq!(store.claimed_by(claimant).await.unwrap(), Some(jobs[0]));
    assert_eq!(store.claimed_by(other).await.unwrap(), None);
    assert_eq!(store.kept_checkpoints(jobs[0]).await.unwrap(), None);
    assert_eq!(listed(&store).await, [jobs[1]]);
    assert_eq!(
        store.expired_checkpoints(far + 10, 10).await.unwrap(),
        [jobs[2], jobs[1]],
        "not under the job that holds them"
    );
    assert!(!store.take_checkpoints(jobs[0]).await.unwrap());
    // Counted for the person's bound all the same.
    assert_eq!(
        store.kept_checkpoints_held_by(owner.id).await.unwrap(),
        (2, (3 << 30) + 10)
    );
    // Let go (cancelled in the queue): kept again.
    store.unclaim_checkpoints(jobs[0], claimant).await.unwrap();
    assert_eq!(listed(&store).await, [jobs[1], jobs[0]]);
    // Held by a job that ended: theirs to expire (its server stopped
    // before it let them go).
    assert!(store.claim_checkpoints(jobs[0], claimant).await.unwrap());
    store
        .move_job(
            claimant,
            &[JobState::Queued],
            JobState::Cancelled,
            JobChange::default(),
        )
        .await
        .unwrap();
    assert_eq!(
        store.expired_checkpoints(far + 10, 10).await.unwrap(),
        [jobs[2], jobs[1], jobs[0]]
    );
    assert_eq!(
        store.claims_of_ended_jobs(10).await.unwrap(),
        [(jobs[0], claimant)]
    );
    // An ended job takes nothing.
    assert!(!store.claim_checkpoints(jobs[1], claimant).await.unwrap());
    // Kept anew (a job's own, again): no job holds them.
    store
        .keep_checkpoints(jobs[0], Some(owner.id), 5, far + 3)
        .await
        .unwrap();
    assert!(store.claims_of_ended_jobs(10).await.unwrap().is_empty());
    assert_eq!(
        store
            .kept_checkpoints(jobs[0])
            .await
            .unwrap()
            .unwrap()
            .bytes,
        5
    );
    assert!(store.take_checkpoints(jobs[0]).await.unwrap());
    assert!(
        !store.take_checkpoints(jobs[0]).await.unwrap(),
        "taken once"
    );
    // Moved into the job that took them: their row goes at its end.
    assert!(store.claim_checkpoints(jobs[1], other).await.unwrap());
    store.drop_claimed(jobs[1], claimant).await.unwrap();
    assert_eq!(
        store.claimed_by(other).await.unwrap(),
        Some(jobs[1]),
        "not another's"
    );
    store.drop_claimed(jobs[1], other).await.unwrap();
    assert_eq!(store.claimed_by(other).await.unwrap(), None);
    assert_eq!(
        store.expired_checkpoints(far + 10, 10).await.unwrap(),
        [jobs[2]]
    );
}

/// An ended job is deleted with its timeline and the record of the
/// checkpoints it keeps; not one that has not ended, nor one whose
/// checkpoints a waiting job took. Its run stays.
#[tokio::test]
async fn an_ended_job_is_deleted_with_its_timeline_unless_a_job_resumes_from_it() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let (owner, jobs) = queued_jobs(&store, "deleted", 3).await;
    let (ended, waiting, other) = (jobs[0].job.id, jobs[1].job.id, jobs[2].job.id);
    assert!(!store.delete_job(ended).await.unwrap(), "queued");
    for id in [ended, other] {
        store
            .move_job(
                id,
                &[JobState::Queued],
                JobState::Failed,
                JobChange::default(),
            )
            .await
            .unwrap();
    }
    store.add_job_event(ended, "note", "said").await.unwrap();
    let far = now_millis() + 3_600_000;
    store
        .keep_checkpoints(ended, Some(owner.id), 10, far)
        .await
        .unwrap();
    assert!(store.claim_checkpoints(ended, waiting).await.unwrap());
    assert_eq!(store.checkpoints_taker(ended).await.unwrap(), Some(waiting));
    assert!(!store.delete_job(ended).await.unwrap(), "resumed from");
    store.unclaim_checkpoints(ended, waiting).await.unwrap();
    assert_eq!(store.checkpoints_taker(ended).await.unwrap(), None);
    assert!(store.delete_job(ended).await.unwrap());
    assert!(matches!(
        store.get_job(ended).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.job_events(ended).await.unwrap().is_empty());
    assert_eq!(store.kept_checkpoints(ended).await.unwrap(), None);
    assert!(!store.take_checkpoints(ended).await.unwrap());
    assert!(!store.delete_job(ended).await.unwrap(), "gone already");
    // Its run stays; the others are untouched.
    let run = jobs[0].job.run_id.as_deref().unwrap();
    assert!(store.get_run(run).await.is_ok());
    assert_eq!(
        store.get_job(other).await.unwrap().job.state,
        JobState::Failed
    );
    assert_eq!(
        store.get_job(waiting).await.unwrap().job.state,
        JobState::Queued
    );
}
