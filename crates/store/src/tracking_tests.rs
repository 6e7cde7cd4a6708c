//! Tracking store tests, on SQLite and (with TEST_DATABASE_URL) PostgreSQL.

use crate::test_support::store;
use crate::{MetricIn, NewRun, Store, StoreError, Viewer};
use trainyard_domain::identity::Owner;
use trainyard_domain::query::{Scope, parse_filter, parse_order_by};
use trainyard_domain::tracking::{Point, ViewType};

fn metric(key: &str, step: i64, timestamp: i64, value: f64) -> MetricIn {
    MetricIn {
        key: key.to_owned(),
        point: Point {
            step,
            timestamp,
            value,
        },
    }
}

fn kv(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

async fn new_run(store: &Store, experiment_id: i64, name: &str) -> String {
    store
        .create_run(NewRun {
            experiment_id,
            user_id: "alice".into(),
            run_name: Some(name.into()),
            ..NewRun::default()
        })
        .await
        .unwrap()
        .info
        .run_id
}

#[tokio::test]
async fn runs_follow_mlflow_rules() {
    let (_db, store) = store().await;
    let default = store.get_experiment(0).await.unwrap();
    assert_eq!(default.name, "Default");
    let exp = store
        .create_experiment_with("vision", None, &[kv("team", "cv")], Owner::default())
        .await
        .unwrap();
    let experiment = store.get_experiment_by_name("vision").await.unwrap();
    assert_eq!(
        experiment.artifact_location,
        format!("mlflow-artifacts:/{exp}")
    );
    assert_eq!(experiment.tags, vec![kv("team", "cv")]);

    let run = store
        .create_run(NewRun {
            experiment_id: exp,
            owner_id: None,
            team_id: None,
            user_id: "alice".into(),
            tags: vec![kv("mlflow.source.type", "LOCAL")],
            ..NewRun::default()
        })
        .await
        .unwrap();
    let id = run.info.run_id.clone();
    assert_eq!(id.len(), 32);
    assert_eq!(run.info.status, "RUNNING");
    assert_eq!(
        run.info.artifact_uri,
        format!("mlflow-artifacts:/{exp}/{id}/artifacts")
    );
    assert!(
        run.tags.contains(&kv("mlflow.runName", &run.info.run_name)),
        "{:?}",
        run.tags
    );

    store
        .log_batch(
            &id,
            &[
                metric("loss", 0, 10, 1.0),
                metric("loss", 2, 12, 0.5),
                metric("loss", 1, 30, 0.7),
                metric("odd", 0, 1, f64::NAN),
            ],
            &[kv("lr", "0.01")],
            &[kv("stage", "a"), kv("stage", "b")],
        )
        .await
        .unwrap();
    // The same param value again is fine; another value is refused, and the
    // whole batch with it: its metric is not stored.
    store
        .log_batch(&id, &[], &[kv("lr", "0.01")], &[])
        .await
        .unwrap();
    let refused = store
        .log_batch(&id, &[metric("loss", 9, 99, 0.1)], &[kv("lr", "0.1")], &[])
        .await
        .unwrap_err();
    assert!(
        matches!(&refused, StoreError::Rejected(m) if m.contains("Changing param values is not allowed")),
        "{refused}"
    );

    let run = store.get_run(&id).await.unwrap();
    let loss = run.metrics.iter().find(|m| m.key == "loss").unwrap();
    assert_eq!(
        (loss.point.step, loss.point.value),
        (2, 0.5),
        "latest = highest step"
    );
    assert!(
        run.metrics
            .iter()
            .find(|m| m.key == "odd")
            .unwrap()
            .point
            .value
            .is_nan()
    );
    assert_eq!(run.params, vec![kv("lr", "0.01")]);
    assert!(run.tags.contains(&kv("stage", "b")), "last write wins");
    let history = store.metric_history(&id, "loss").await.unwrap();
    assert_eq!(
        history.iter().map(|p| p.step).collect::<Vec<_>>(),
        vec![0, 2, 1]
    );

    let info = store
        .update_run(&id, Some("FINISHED"), Some(100), Some("renamed"))
        .await
        .unwrap();
    assert_eq!(
        (info.status.as_str(), info.end_time, info.run_name.as_str()),
        ("FINISHED", Some(100), "renamed")
    );
    assert!(
        store
            .get_run(&id)
            .await
            .unwrap()
            .tags
            .contains(&kv("mlflow.runName", "renamed"))
    );

    store.delete_run_tag(&id, "stage").await.unwrap();
    assert!(matches!(
        store.delete_run_tag(&id, "stage").await,
        Err(StoreError::NotFound(_))
    ));
    store.set_run_deleted(&id, true).await.unwrap();
    let refused = store
        .log_batch(&id, &[metric("x", 0, 0, 1.0)], &[], &[])
        .await
        .unwrap_err();
    assert!(
        refused
            .to_string()
            .contains("must be in the 'active' state"),
        "{refused}"
    );
    assert!(matches!(
        store.get_run("0123").await,
        Err(StoreError::NotFound(_))
    ));
}

/// Points of one step and timestamp: as MLflow, the run's latest value is
/// the largest of them, NaN lowest, whether they come in one batch or one
/// after another, in any order.
#[tokio::test]
async fn a_tie_of_step_and_time_keeps_the_largest_value_as_latest() {
    let (_db, store) = store().await;
    let exp = store
        .create_experiment_with("ties", None, &[], Owner::default())
        .await
        .unwrap();
    let id = new_run(&store, exp, "ties").await;
    let one_at_a_time = [
        ("a", vec![3.0, 1.0]),
        ("b", vec![1.0, 3.0]),
        ("c", vec![3.0, 1.0]),
        ("e", vec![3.0, f64::NAN]),
        ("f", vec![f64::NAN, 3.0]),
        ("g", vec![f64::NAN]),
    ];
    for (key, values) in &one_at_a_time {
        for v in values {
            store
                .log_batch(&id, &[metric(key, 0, 100, *v)], &[], &[])
                .await
                .unwrap();
        }
    }
    store
        .log_batch(
            &id,
            &[
                metric("batch", 0, 100, 3.0),
                metric("batch", 0, 100, 1.0),
                metric("batch_nan", 0, 100, 2.0),
                metric("batch_nan", 0, 100, f64::NAN),
            ],
            &[],
            &[],
        )
        .await
        .unwrap();
    // A later time still wins over a larger value.
    store
        .log_batch(&id, &[metric("a", 0, 101, -5.0)], &[], &[])
        .await
        .unwrap();
    let run = store.get_run(&id).await.unwrap();
    let latest = |key: &str| {
        run.metrics
            .iter()
            .find(|m| m.key == key)
            .unwrap()
            .point
            .value
    };
    assert_eq!(latest("a"), -5.0);
    assert_eq!(latest("b"), 3.0);
    assert_eq!(latest("c"), 3.0);
    assert_eq!(latest("e"), 3.0);
    assert_eq!(latest("f"), 3.0);
    assert!(latest("g").is_nan());
    assert_eq!(latest("batch"), 3.0);
    assert_eq!(latest("batch_nan"), 2.0);
}

/// A job's end ends the runs it left running under its run, in its
/// experiment; finished ones, others' and those elsewhere stay as they are.
#[tokio::test]
async fn a_runs_unended_children_end_with_it() {
    let (_db, store) = store().await;
    let exp = store
        .create_experiment_with("sweep", None, &[], Owner::default())
        .await
        .unwrap();
    let other = store
        .create_experiment_with("elsewhere", None, &[], Owner::default())
        .await
        .unwrap();
    let parent = new_run(&store, exp, "job").await;
    let child = |experiment_id: i64, parent: &str| NewRun {
        experiment_id,
        user_id: "alice".into(),
        tags: vec![kv("mlflow.parentRunId", parent)],
        ..NewRun::default()
    };
    let mut ids = Vec::new();
    for new in [
        child(exp, &parent),
        child(exp, &parent),
        child(other, &parent),
        child(exp, "someone-elses"),
    ] {
        ids.push(store.create_run(new).await.unwrap().info.run_id);
    }
    store
        .update_run(&ids[1], Some("FAILED"), Some(5), None)
        .await
        .unwrap();
    assert_eq!(
        store.end_child_runs(&parent, "KILLED", 42).await.unwrap(),
        1
    );
    let mut states = Vec::new();
    for id in &ids {
        let info = store.get_run(id).await.unwrap().info;
        states.push((info.status, info.end_time));
    }
    assert_eq!(
        states,
        [
            ("KILLED".to_owned(), Some(42)),
            ("FAILED".to_owned(), Some(5)),
            ("RUNNING".to_owned(), None),
            ("RUNNING".to_owned(), None),
        ]
    );
}

#[tokio::test]
async fn deleting_an_experiment_deletes_its_runs() {
    let (_db, store) = store().await;
    let exp = store
        .create_experiment_with("temp", None, &[], Owner::default())
        .await
        .unwrap();
    let run = new_run(&store, exp, "r").await;
    store.set_experiment_deleted(exp, true).await.unwrap();
    assert_eq!(
        store.get_run(&run).await.unwrap().info.lifecycle_stage,
        "deleted"
    );
    assert!(
        store
            .create_run(NewRun {
                experiment_id: exp,
                owner_id: None,
                team_id: None,
                ..NewRun::default()
            })
            .await
            .is_err()
    );
    assert!(matches!(
        store.set_experiment_deleted(exp, true).await,
        Err(StoreError::NotFound(_))
    ));
    store.set_experiment_deleted(exp, false).await.unwrap();
    assert_eq!(
        store.get_run(&run).await.unwrap().info.lifecycle_stage,
        "active"
    );
    assert!(matches!(
        store
            .create_experiment_with("temp", None, &[], Owner::default())
            .await,
        Err(StoreError::Conflict { .. })
    ));
}

/// On PostgreSQL, where writes run side by side: a deletion of an
/// experiment waits for a run being made in it, and archives it too; a run
/// made after the deletion is refused. (SQLite runs one write at a time.)
#[tokio::test]
async fn an_experiment_deleted_while_a_run_is_made_in_it_archives_that_run() {
    let (_db, store) = store().await;
    if store.engine() != crate::Engine::Postgres {
        return;
    }
    let exp = store
        .create_experiment_with("racing", None, &[], Owner::default())
        .await
        .unwrap();
    let txn = store.begin_write().await.unwrap();
    let run = store
        .insert_run_in(
            &txn,
            NewRun {
                experiment_id: exp,
                user_id: "alice".into(),
                ..NewRun::default()
            },
            "RUNNING",
        )
        .await
        .unwrap();
    let deleting = tokio::spawn({
        let store = store.clone();
        async move { store.set_experiment_deleted(exp, true).await }
    });
    // The deletion is seen waiting for a lock in this test's database
    // (one that did not wait ends, and is never seen so).
    let waiting = "SELECT COUNT(*) AS n FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid \
                   WHERE NOT l.granted AND a.datname = current_database()";
    let mut seen = false;
    for _ in 0..600 {
        let row = sea_orm::ConnectionTrait::query_one_raw(
            store.connection(),
            sea_orm::Statement::from_string(sea_orm::DbBackend::Postgres, waiting),
        )
        .await
        .unwrap()
        .unwrap();
        if row.try_get::<i64>("", "n").unwrap() > 0 || deleting.is_finished() {
            seen = !deleting.is_finished();
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(seen, "the deletion did not wait for the run being made");
    txn.commit().await.unwrap();
    deleting.await.unwrap().unwrap();
    assert_eq!(
        store.get_run(&run).await.unwrap().info.lifecycle_stage,
        "deleted"
    );
    let after = store
        .create_run(NewRun {
            experiment_id: exp,
            ..NewRun::default()
        })
        .await;
    assert!(matches!(after, Err(StoreError::Rejected(_))), "{after:?}");
}

/// Sorted by a param, numbers go as numbers (32, 64, 128), then text,
/// then runs without it, whichever the direction.
#[tokio::test]
async fn runs_sort_by_a_param_as_numbers_then_text() {
    let (_db, store) = store().await;
    let exp = store
        .create_experiment_with("batch sizes", None, &[], Owner::default())
        .await
        .unwrap();
    // `1e999` is no number either engine can hold: text, on both.
    for bs in ["128", "32", "large", "64", "1e3", "1e999"] {
        let id = new_run(&store, exp, &format!("bs-{bs}")).await;
        store
            .log_batch(&id, &[], &[kv("bs", bs)], &[])
            .await
            .unwrap();
    }
    new_run(&store, exp, "without").await;
    let sorted = |order: &'static str| {
        let store = store.clone();
        async move {
            store
                .search_runs(
                    &[exp],
                    None,
                    &[parse_order_by(order, Scope::Runs).unwrap()],
                    ViewType::ActiveOnly,
                    100,
                    0,
                    &Viewer::Everyone,
                )
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.info.run_name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        sorted("params.bs ASC").await,
        [
            "bs-32", "bs-64", "bs-128", "bs-1e3", "bs-1e999", "bs-large", "without"
        ]
    );
    assert_eq!(
        sorted("params.bs DESC").await,
        [
            "bs-1e3", "bs-128", "bs-64", "bs-32", "bs-large", "bs-1e999", "without"
        ]
    );
    // Compared with a number, the same values are numbers (and `1e999`
    // fails no query on PostgreSQL).
    let filter = parse_filter("params.bs > 50", Scope::Runs).unwrap();
    let over: Vec<_> = store
        .search_runs(
            &[exp],
            filter.as_ref(),
            &[parse_order_by("params.bs", Scope::Runs).unwrap()],
            ViewType::ActiveOnly,
            100,
            0,
            &Viewer::Everyone,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.info.run_name)
        .collect();
    assert_eq!(over, ["bs-64", "bs-128", "bs-1e3"]);
}

#[tokio::test]
async fn search_runs_with_or_parentheses_ranges_and_order() {
    let (_db, store) = store().await;
    let exp = store
        .create_experiment_with("sweep", None, &[], Owner::default())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for (i, (lr, acc, model)) in [
        ("0.001", 0.91, "cnn"),
        ("0.01", 0.85, "cnn"),
        ("0.1", 0.60, "mlp"),
        ("big", f64::NAN, "mlp"),
    ]
    .into_iter()
    .enumerate()
    {
        let id = new_run(&store, exp, &format!("run-{i}")).await;
        store
            .log_batch(
                &id,
                &[metric("acc", 1, 1, acc)],
                &[kv("lr", lr), kv("model", model)],
                &[kv("team", if i % 2 == 0 { "a" } else { "b" })],
            )
            .await
            .unwrap();
        ids.push(id);
    }
    let _no_metrics = new_run(&store, exp, "bare").await;

    let search = |filter: &'static str, order: &'static [&'static str]| {
        let store = store.clone();
        async move {
            let expr = parse_filter(filter, Scope::Runs).unwrap();
            let order: Vec<_> = order
                .iter()
                .map(|o| parse_order_by(o, Scope::Runs).unwrap())
                .collect();
            store
                .search_runs(
                    &[exp],
                    expr.as_ref(),
                    &order,
                    ViewType::ActiveOnly,
                    100,
                    0,
                    &Viewer::Everyone,
                )
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.info.run_name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        search("metrics.acc > 0.8", &["metrics.acc DESC"]).await,
        ["run-0", "run-1"]
    );
    assert_eq!(
        search(
            "params.model = 'mlp' OR (metrics.acc >= 0.9 AND tags.team = 'a')",
            &["attributes.run_name"]
        )
        .await,
        ["run-0", "run-2", "run-3"]
    );
    assert_eq!(
        search("params.lr < 0.05", &["params.lr ASC"]).await,
        ["run-0", "run-1"],
        "params compare as numbers"
    );
    assert_eq!(
        search("metrics.acc BETWEEN 0.6 AND 0.86", &["metrics.acc"]).await,
        ["run-2", "run-1"]
    );
    assert_eq!(
        search(
            "tags.team NOT IN ('a') AND metrics.acc IS NOT NULL",
            &["run_name"]
        )
        .await,
        ["run-1", "run-3"]
    );
    assert_eq!(search("metrics.acc IS NULL", &[]).await, ["bare"]);
    assert_eq!(
        search("metrics.acc != 0.85", &["run_name"]).await,
        ["run-0", "run-2", "run-3"],
        "NaN differs from any number; a run without the metric does not match"
    );
    assert_eq!(
        search("metrics.acc != 0.85 AND tags.team = 'a'", &["run_name"]).await,
        ["run-0", "run-2"]
    );
    assert_eq!(
        search("run_name LIKE 'run-%'", &["run_name DESC"]).await,
        ["run-3", "run-2", "run-1", "run-0"]
    );
    assert_eq!(
        search("run_name LIKE 'RUN-%'", &[]).await.len(),
        0,
        "LIKE is case-sensitive"
    );
    assert_eq!(search("run_name ILIKE 'RUN-%'", &[]).await.len(), 4);
    // Runs without the metric sort last whichever the direction; NaN after numbers.
    let asc = search("", &["metrics.acc ASC"]).await;
    assert_eq!(asc, ["run-2", "run-1", "run-0", "run-3", "bare"]);
    let desc = search("", &["metrics.acc DESC"]).await;
    assert_eq!(desc, ["run-0", "run-1", "run-2", "run-3", "bare"]);
    let page = store
        .search_runs(
            &[exp],
            None,
            &[],
            ViewType::ActiveOnly,
            2,
            4,
            &Viewer::Everyone,
        )
        .await
        .unwrap();
    assert_eq!(page.len(), 1, "offset paging");
    let id_filter = format!("run_id IN ('{}', '{}')", ids[0], ids[2]);
    let expr = parse_filter(&id_filter, Scope::Runs).unwrap();
    assert_eq!(
        store
            .search_runs(
                &[exp],
                expr.as_ref(),
                &[],
                ViewType::ActiveOnly,
                10,
                0,
                &Viewer::Everyone
            )
            .await
            .unwrap()
            .len(),
        2
    );
}

#[tokio::test]
async fn search_experiments_filters_and_orders() {
    let (_db, store) = store().await;
    for (name, team) in [
        ("mnist-a", "vision"),
        ("mnist-b", "vision"),
        ("bert", "nlp"),
    ] {
        store
            .create_experiment_with(name, None, &[kv("team", team)], Owner::default())
            .await
            .unwrap();
    }
    let names = |filter: &'static str, view: ViewType| {
        let store = store.clone();
        async move {
            let expr = parse_filter(filter, Scope::Experiments).unwrap();
            let order = [parse_order_by("name ASC", Scope::Experiments).unwrap()];
            store
                .search_experiments(expr.as_ref(), &order, view, 100, 0, &Viewer::Everyone)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.name)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        names("name LIKE 'mnist%'", ViewType::ActiveOnly).await,
        ["mnist-a", "mnist-b"]
    );
    assert_eq!(
        names(
            "tags.team = 'nlp' OR name = 'Default'",
            ViewType::ActiveOnly
        )
        .await,
        ["Default", "bert"]
    );
    let bert = store.get_experiment_by_name("bert").await.unwrap();
    store.set_experiment_deleted(bert.id, true).await.unwrap();
    assert_eq!(names("", ViewType::DeletedOnly).await, ["bert"]);
    assert_eq!(names("", ViewType::All).await.len(), 4);
    let expr = parse_filter(
        &format!("experiment_id = '{}'", bert.id),
        Scope::Experiments,
    )
    .unwrap();
    assert_eq!(
        store
            .search_experiments(expr.as_ref(), &[], ViewType::All, 10, 0, &Viewer::Everyone)
            .await
            .unwrap()[0]
            .name,
        "bert"
    );
    store
        .rename_experiment(
            store.get_experiment_by_name("mnist-a").await.unwrap().id,
            "mnist-c",
        )
        .await
        .unwrap();
    assert!(store.get_experiment_by_name("mnist-c").await.is_ok());
    assert!(matches!(
        store.get_experiment_by_name("mnist-a").await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn the_default_experiment_is_dated_when_created() {
    let before = crate::now_millis();
    let (_db, store) = store().await;
    let default = store.get_experiment(0).await.unwrap();
    assert!(
        default.creation_time >= before - 1000,
        "{}",
        default.creation_time
    );
    assert_eq!(default.creation_time, default.last_update_time);
}

#[tokio::test]
async fn runs_are_counted_keyed_and_followed() {
    let (_db, store) = store().await;
    let exp = store
        .create_experiment_with("counted", None, &[], Owner::default())
        .await
        .unwrap();
    let mut changes = store.run_changes();
    let mut ids = Vec::new();
    for i in 0..5 {
        let id = new_run(&store, exp, &format!("r{i}")).await;
        let lr = if i % 2 == 0 { "0.1" } else { "0.01" };
        store
            .log_batch(
                &id,
                &[metric("loss", 0, 1, i as f64)],
                &[kv("lr", lr)],
                &[kv("team", "cv")],
            )
            .await
            .unwrap();
        ids.push(id);
    }
    // Each logged batch told the followers which run changed.
    for id in &ids {
        assert_eq!(&*changes.try_recv().unwrap(), id.as_str());
    }
    assert!(
        changes.try_recv().is_err(),
        "creating a run is no change to follow"
    );
    store
        .update_run(&ids[0], Some("FINISHED"), Some(5), None)
        .await
        .unwrap();
    assert_eq!(&*changes.try_recv().unwrap(), ids[0].as_str());

    let everything = store
        .count_runs(&[exp], None, ViewType::ActiveOnly, &Viewer::Everyone)
        .await
        .unwrap();
    assert_eq!(everything, 5);
    let filter = parse_filter("params.lr = '0.1' OR metrics.loss >= 3", Scope::Runs)
        .unwrap()
        .unwrap();
    let matched = store
        .count_runs(
            &[exp],
            Some(&filter),
            ViewType::ActiveOnly,
            &Viewer::Everyone,
        )
        .await
        .unwrap();
    assert_eq!(matched, 4, "r0, r2, r4 by lr and r3 by loss");
    let stranger = Viewer::Member {
        user_id: 999,
        teams: vec![],
    };
    assert_eq!(
        store
            .count_runs(&[exp], None, ViewType::ActiveOnly, &stranger)
            .await
            .unwrap(),
        0,
        "runs the viewer may not see are not counted"
    );

    assert_eq!(
        store
            .params_that_differ_first(exp, &stranger, 10)
            .await
            .unwrap(),
        Vec::<String>::new()
    );
    let keys = store.run_keys(exp, &Viewer::Everyone, 10).await.unwrap();
    assert_eq!(keys.metrics, ["loss"]);
    assert_eq!(keys.params, ["lr"]);
    assert!(keys.tags.contains(&"team".to_owned()));
    assert!(
        store
            .run_keys(exp, &stranger, 10)
            .await
            .unwrap()
            .params
            .is_empty()
    );
}

#[tokio::test]
async fn the_params_that_tell_runs_apart_come_first() {
    let (_db, store) = store().await;
    let exp = store
        .create_experiment_with("apart", None, &[], Owner::default())
        .await
        .unwrap();
    for (i, optimizer) in ["adam", "sgd", "adam"].into_iter().enumerate() {
        let id = new_run(&store, exp, &format!("r{i}")).await;
        let params = [
            kv("a_seed", "0"),
            kv("b_epochs", "10"),
            kv("optimizer", optimizer),
            kv("model", &format!("resnet{}", 18 + i)),
        ];
        store.log_batch(&id, &[], &params, &[]).await.unwrap();
    }
    let keys = store
        .params_that_differ_first(exp, &Viewer::Everyone, 3)
        .await
        .unwrap();
    assert_eq!(keys, ["model", "optimizer", "a_seed"]);
}

#[tokio::test]
async fn someones_latest_runs_are_theirs_newest_first_with_experiment_names() {
    let (_db, store) = store().await;
    let exp = store
        .create_experiment_with("recent", None, &[], Owner::default())
        .await
        .unwrap();
    let run_of = |owner: i64, name: &str, start: i64| NewRun {
        experiment_id: exp,
        user_id: "someone".into(),
        owner_id: Some(owner),
        run_name: Some(name.into()),
        start_time: Some(start),
        ..NewRun::default()
    };
    let person = |name: &str| crate::SignIn {
        subject: format!("sub-{name}"),
        username: name.to_owned(),
        display_name: name.to_owned(),
        email: None,
        is_admin: false,
        groups: Vec::new(),
    };
    let me = store.sign_in(person("me")).await.unwrap().id;
    let other = store.sign_in(person("other")).await.unwrap().id;
    let mut ids = Vec::new();
    for (owner, name, start) in [
        (me, "old", 1_000),
        (me, "new", 3_000),
        (other, "theirs", 4_000),
        (me, "newest", 5_000),
        (me, "deleted", 6_000),
    ] {
        ids.push(
            store
                .create_run(run_of(owner, name, start))
                .await
                .unwrap()
                .info
                .run_id,
        );
    }
    store.set_run_deleted(&ids[4], true).await.unwrap();
    let recent = store.recent_runs(me, 8).await.unwrap();
    let names: Vec<&str> = recent.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names,
        ["newest", "new", "old"],
        "theirs and deleted ones left out"
    );
    assert!(
        recent
            .iter()
            .all(|r| r.experiment == "recent" && r.experiment_id == exp)
    );
    assert_eq!(store.recent_runs(me, 2).await.unwrap().len(), 2);
}

#[tokio::test]
async fn logged_models_are_recorded_in_the_runs_history_tag() {
    use crate::tracking::LOGGED_MODELS_TAG;
    use serde_json::{Value, json};
    let (_db, store) = store().await;
    let run = new_run(&store, 0, "fit").await;
    let model = |path: &str| match json!({
        "run_id": run, "artifact_path": path, "utc_time_created": "2026-12-06 08:00:00.000000",
        "model_uuid": "m-1", "mlflow_version": "3.17.2", "signature": {"inputs": "[]"},
        "flavors": {"sklearn": {"pickled_model": "model.pkl", "config": {"x": 1}}, "python_function": {"loader_module": "mlflow.sklearn"}},
    }) {
        Value::Object(model) => model,
        _ => unreachable!(),
    };
    let history = async |store: &Store| {
        let run = store.get_run(&run).await.unwrap();
        let (_, text) = run
            .tags
            .into_iter()
            .find(|(k, _)| k == LOGGED_MODELS_TAG)
            .unwrap();
        serde_json::from_str::<Value>(&text).unwrap()
    };
    store
        .record_logged_model(&run, &model("first"), 65_536)
        .await
        .unwrap();
    store
        .record_logged_model(&run, &model("second"), 65_536)
        .await
        .unwrap();
    // What MLflow keeps of each: no version, signature or flavor config.
    assert_eq!(
        history(&store).await,
        json!([
            {"run_id": run, "artifact_path": "first", "utc_time_created": "2026-12-06 08:00:00.000000", "model_uuid": "m-1",
             "flavors": {"sklearn": {"pickled_model": "model.pkl"}, "python_function": {"loader_module": "mlflow.sklearn"}}},
            {"run_id": run, "artifact_path": "second", "utc_time_created": "2026-12-06 08:00:00.000000", "model_uuid": "m-1",
             "flavors": {"sklearn": {"pickled_model": "model.pkl"}, "python_function": {"loader_module": "mlflow.sklearn"}}},
        ])
    );
    // Past the tag's bound: refused, the history as it was.
    let err = store
        .record_logged_model(&run, &model("third"), 600)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Rejected(m) if m.contains("longer than 600 characters")),
        "{err:?}"
    );
    assert_eq!(history(&store).await.as_array().unwrap().len(), 2);
    // A tag that is not a list is not overwritten.
    store
        .log_batch(&run, &[], &[], &[kv(LOGGED_MODELS_TAG, "not json")])
        .await
        .unwrap();
    let err = store
        .record_logged_model(&run, &model("third"), 65_536)
        .await
        .unwrap_err();
    assert!(
        matches!(&err, StoreError::Rejected(m) if m.contains("not a JSON list")),
        "{err:?}"
    );
    // Only active runs; unknown ones are not found.
    store.set_run_deleted(&run, true).await.unwrap();
    assert!(matches!(
        store.record_logged_model(&run, &model("x"), 65_536).await,
        Err(StoreError::Rejected(_))
    ));
    assert!(matches!(
        store.record_logged_model("nope", &model("x"), 65_536).await,
        Err(StoreError::NotFound(_))
    ));
}
