//! Logged models, datasets and run inputs/outputs, on SQLite and (with
//! TEST_DATABASE_URL) PostgreSQL.

use crate::test_support::{person, store};
use crate::{ModelFilter, ModelMetricIn, ModelOrder, NewModel, NewRun, Store, StoreError, Viewer};
use trainyard_domain::identity::Owner;
use trainyard_domain::query::{Attribute, Field, Scope, parse_filter, parse_order_by};
use trainyard_domain::tracking::{Dataset, DatasetInput, Point};

fn kv(k: &str, v: &str) -> (String, String) {
    (k.to_owned(), v.to_owned())
}

async fn run_of(store: &Store, experiment_id: i64, user: i64, team: Option<i64>) -> String {
    store
        .create_run(NewRun {
            experiment_id,
            user_id: format!("user{user}"),
            owner_id: Some(user),
            team_id: team,
            ..NewRun::default()
        })
        .await
        .unwrap()
        .info
        .run_id
}

fn input(name: &str, digest: &str, context: &str) -> DatasetInput {
    DatasetInput {
        dataset: Dataset {
            name: name.into(),
            digest: digest.into(),
            source_type: "s3".into(),
            source: format!("{{\"uri\": \"s3://b/{name}\"}}"),
            schema: Some("{}".into()),
            profile: None,
        },
        tags: vec![kv("mlflow.data.context", context)],
    }
}

#[tokio::test]
async fn runs_are_found_by_the_datasets_they_read() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("shapes", None, &[], ana.as_owner())
        .await
        .unwrap();
    let trained = run_of(&store, exp, ana.id, None).await;
    let evaluated = run_of(&store, exp, ana.id, None).await;
    let _bare = run_of(&store, exp, ana.id, None).await;
    store
        .log_run_inputs(
            &trained,
            &[
                input("train", "aa", "training"),
                input("holdout", "bb", "eval"),
            ],
            &[],
        )
        .await
        .unwrap();
    store
        .log_run_inputs(&evaluated, &[input("holdout", "bb", "eval")], &[])
        .await
        .unwrap();
    let found = |filter: &'static str| {
        let store = store.clone();
        async move {
            let expr = parse_filter(filter, Scope::Runs).unwrap();
            let mut ids: Vec<String> = store
                .search_runs(
                    &[exp],
                    expr.as_ref(),
                    &[],
                    trainyard_domain::tracking::ViewType::ActiveOnly,
                    10,
                    0,
                    &Viewer::Everyone,
                )
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.info.run_id)
                .collect();
            ids.sort();
            ids
        }
    };
    let sorted = |mut ids: Vec<&String>| {
        ids.sort();
        ids.into_iter().cloned().collect::<Vec<String>>()
    };
    let both = sorted(vec![&trained, &evaluated]);
    let trained_only = vec![trained.clone()];
    assert_eq!(found("datasets.name = 'train'").await, trained_only);
    assert_eq!(found("dataset.digest = 'aa'").await, trained_only);
    assert_eq!(found("datasets.context = 'eval'").await, both);
    assert_eq!(found("datasets.context = 'training'").await, trained_only);
    assert_eq!(
        found("datasets.name IN ('train', 'nope')").await,
        trained_only
    );
    assert_eq!(found("datasets.name LIKE 'hold%'").await, both);
    assert_eq!(found("datasets.name ILIKE 'TRAIN'").await, trained_only);
    assert_eq!(
        found("datasets.name != 'train'").await,
        both,
        "as MLflow: one of the run's datasets is named otherwise"
    );
    assert_eq!(
        found("datasets.context = 'eval' AND datasets.name = 'train'").await,
        trained_only
    );
    assert!(found("datasets.context = 'tuning'").await.is_empty());
}

#[tokio::test]
async fn datasets_are_kept_once_and_listed_in_the_order_logged() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("shapes", None, &[], ana.as_owner())
        .await
        .unwrap();
    let run = run_of(&store, exp, ana.id, None).await;
    let other = run_of(&store, exp, ana.id, None).await;
    store
        .log_run_inputs(
            &run,
            &[
                input("train", "aa", "training"),
                input("eval", "bb", "eval"),
            ],
            &[],
        )
        .await
        .unwrap();
    // Again, and with another context: the run lists it once, as first given.
    store
        .log_run_inputs(&run, &[input("train", "aa", "other")], &[])
        .await
        .unwrap();
    store
        .log_run_inputs(&other, &[input("train", "aa", "tuning")], &[])
        .await
        .unwrap();
    let io = store.run_io(&[run.clone(), other.clone()]).await.unwrap();
    let names: Vec<&str> = io[&run]
        .datasets
        .iter()
        .map(|d| d.dataset.name.as_str())
        .collect();
    assert_eq!(names, ["train", "eval"]);
    assert_eq!(
        io[&run].datasets[0].tags,
        [kv("mlflow.data.context", "training")]
    );
    assert_eq!(io[&other].datasets.len(), 1);

    let summaries = store
        .search_datasets(&[exp], &Viewer::Everyone)
        .await
        .unwrap();
    let mut seen: Vec<(String, Option<String>)> = summaries
        .iter()
        .map(|s| (s.name.clone(), s.context.clone()))
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("eval".to_owned(), Some("eval".to_owned())),
            ("train".to_owned(), Some("training".to_owned())),
            ("train".to_owned(), Some("tuning".to_owned())),
        ]
    );
    // Someone who may not see the runs sees none of their datasets.
    let stranger = Viewer::Member {
        user_id: ana.id + 1000,
        teams: vec![],
    };
    assert!(
        store
            .search_datasets(&[exp], &stranger)
            .await
            .unwrap()
            .is_empty()
    );

    // A model that does not exist is refused and nothing is recorded.
    let missing = store
        .log_run_inputs(&run, &[input("late", "cc", "x")], &["m-nope".to_owned()])
        .await;
    assert!(
        matches!(missing, Err(StoreError::NotFound(_))),
        "{missing:?}"
    );
    assert_eq!(
        store.run_io(std::slice::from_ref(&run)).await.unwrap()[&run]
            .datasets
            .len(),
        2
    );
}

#[tokio::test]
async fn logged_models_are_made_measured_searched_and_deleted() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &["vision"]).await;
    let team = ana.teams[0].id;
    let exp = store
        .create_experiment_with("models", None, &[], ana.as_owner())
        .await
        .unwrap();
    let run = run_of(&store, exp, ana.id, Some(team)).await;
    let mut made = Vec::new();
    for (i, acc) in [0.7, 0.9, 0.8].into_iter().enumerate() {
        let model = store
            .create_logged_model(NewModel {
                experiment_id: exp,
                name: Some(format!("candidate-{i}")),
                source_run_id: Some(run.clone()),
                owner: Owner::new(Some(ana.id), None),
                params: vec![kv("depth", &i.to_string())],
                tags: vec![kv("round", &i.to_string())],
                ..NewModel::default()
            })
            .await
            .unwrap();
        assert_eq!(model.status, "PENDING");
        assert_eq!(
            model.artifact_uri,
            format!(
                "mlflow-artifacts:/{exp}/models/{}/artifacts",
                model.model_id
            )
        );
        store
            .log_model_metrics(
                &run,
                &[ModelMetricIn {
                    model_id: model.model_id.clone(),
                    key: "acc".into(),
                    point: Point {
                        step: 0,
                        timestamp: 1_000 + i as i64,
                        value: acc,
                    },
                    dataset_name: Some("eval".into()),
                    dataset_digest: None,
                }],
            )
            .await
            .unwrap();
        made.push(model.model_id);
        // Creation times must differ for the default order to be the order made.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
    }
    let model = store.get_logged_model(&made[1]).await.unwrap();
    assert_eq!(model.params, [kv("depth", "1")]);
    assert_eq!(model.metrics[0].point.value, 0.9);
    assert_eq!(model.metrics[0].run_id.as_deref(), Some(run.as_str()));

    let search_on =
        |filter: &str, order: Vec<ModelOrder>, datasets: Vec<(String, Option<String>)>| {
            let store = &store;
            let filter = parse_filter(filter, Scope::LoggedModels).unwrap();
            async move {
                store
                    .search_logged_models(
                        &[exp],
                        ModelFilter {
                            expr: filter.as_ref(),
                            datasets: &datasets,
                        },
                        &order,
                        10,
                        0,
                        &Viewer::Everyone,
                    )
                    .await
                    .unwrap()
                    .models
                    .into_iter()
                    .map(|m| m.model_id)
                    .collect::<Vec<_>>()
            }
        };
    let search =
        |filter: &'static str, order: Vec<ModelOrder>| search_on(filter, order, Vec::new());
    let by_acc = ModelOrder {
        field: Field::Metric("acc".into()),
        ascending: false,
        dataset_name: Some("eval".into()),
        dataset_digest: None,
    };
    assert_eq!(
        search("metrics.acc > 0.75", vec![by_acc.clone()]).await,
        [made[1].clone(), made[2].clone()]
    );
    assert_eq!(
        search("", vec![]).await,
        [made[2].clone(), made[1].clone(), made[0].clone()]
    );
    assert_eq!(
        search("params.depth = '0'", vec![]).await,
        [made[0].clone()]
    );
    assert_eq!(
        search("name LIKE 'candidate-%' AND tags.round = '2'", vec![]).await,
        [made[2].clone()]
    );
    let oldest_first = ModelOrder {
        field: Field::Attr(Attribute::CreationTime),
        ascending: true,
        dataset_name: None,
        dataset_digest: None,
    };
    assert_eq!(search("status = 'PENDING'", vec![oldest_first]).await, made);

    // MLflow's `datasets` clause: metric comparisons count only metrics on
    // those datasets; without one, any metric on them makes a match.
    store
        .log_model_metrics(
            &run,
            &[ModelMetricIn {
                model_id: made[0].clone(),
                key: "acc".into(),
                point: Point {
                    step: 1,
                    timestamp: 2_000,
                    value: 0.95,
                },
                dataset_name: Some("test".into()),
                dataset_digest: Some("d1".into()),
            }],
        )
        .await
        .unwrap();
    let on = |name: &str, digest: Option<&str>| vec![(name.to_owned(), digest.map(str::to_owned))];
    assert_eq!(
        search_on("metrics.acc > 0.75", vec![], on("eval", None)).await,
        [made[2].clone(), made[1].clone()]
    );
    assert_eq!(
        search_on("metrics.acc > 0.75", vec![], on("test", Some("d1"))).await,
        [made[0].clone()]
    );
    assert!(
        search_on("metrics.acc > 0.75", vec![], on("test", Some("d2")))
            .await
            .is_empty()
    );
    assert_eq!(
        search_on("", vec![], on("test", None)).await,
        [made[0].clone()]
    );
    assert_eq!(search("metrics.acc > 0.75", vec![]).await.len(), 3);
    assert_eq!(
        search_on("metrics.acc IS NULL", vec![], on("test", None)).await,
        [made[2].clone(), made[1].clone()],
        "no acc on the dataset named, whatever was logged on others"
    );
    assert!(search("metrics.acc IS NULL", vec![]).await.is_empty());

    // The team sees the model; someone outside it does not.
    let teammate = Viewer::Member {
        user_id: ana.id + 1000,
        teams: vec![team],
    };
    let stranger = Viewer::Member {
        user_id: ana.id + 1001,
        teams: vec![team + 1000],
    };
    for (viewer, count) in [(teammate, 3), (stranger, 0)] {
        let found = store
            .search_logged_models(&[exp], ModelFilter::default(), &[], 10, 0, &viewer)
            .await
            .unwrap()
            .models;
        assert_eq!(found.len(), count);
    }

    // Params are write-once; tags last-write-wins; a finalized model is READY.
    store
        .log_logged_model_params(&made[0], &[kv("depth", "0"), kv("width", "8")])
        .await
        .unwrap();
    let changed = store
        .log_logged_model_params(&made[0], &[kv("depth", "5")])
        .await;
    assert!(
        matches!(changed, Err(StoreError::Rejected(_))),
        "{changed:?}"
    );
    store
        .set_logged_model_tags(&made[0], &[kv("round", "first")])
        .await
        .unwrap();
    let finalized = store
        .finalize_logged_model(&made[0], "READY")
        .await
        .unwrap();
    assert_eq!(finalized.status, "READY");
    assert_eq!(finalized.tags, [kv("round", "first")]);
    assert_eq!(finalized.params, [kv("depth", "0"), kv("width", "8")]);

    store
        .log_run_outputs(&run, &[(made[0].clone(), 4)])
        .await
        .unwrap();
    let io = store.run_io(std::slice::from_ref(&run)).await.unwrap();
    assert_eq!(io[&run].model_outputs, [(made[0].clone(), 4)]);

    store.delete_logged_model(&made[2]).await.unwrap();
    assert!(matches!(
        store.get_logged_model(&made[2]).await,
        Err(StoreError::NotFound(_))
    ));
    assert_eq!(search("", vec![]).await, [made[1].clone(), made[0].clone()]);
    assert!(matches!(
        store.delete_logged_model_tag(&made[1], "nope").await,
        Err(StoreError::NotFound(_))
    ));

    // A model of another experiment takes no metrics from this run.
    let elsewhere = store
        .create_experiment_with("elsewhere", None, &[], Owner::default())
        .await
        .unwrap();
    let foreign = store
        .create_logged_model(NewModel {
            experiment_id: elsewhere,
            ..NewModel::default()
        })
        .await
        .unwrap();
    assert!(!foreign.name.is_empty(), "a model without a name gets one");
    let refused = store
        .log_model_metrics(
            &run,
            &[ModelMetricIn {
                model_id: foreign.model_id,
                key: "acc".into(),
                point: Point {
                    step: 0,
                    timestamp: 1,
                    value: 1.0,
                },
                dataset_name: None,
                dataset_digest: None,
            }],
        )
        .await;
    assert!(
        matches!(refused, Err(StoreError::Rejected(_))),
        "{refused:?}"
    );
}

#[tokio::test]
async fn registry_versions_keep_their_numbers_and_aliases_follow_them() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &["vision"]).await;
    let made = store
        .create_registered_model(
            "shapes",
            Some("a classifier"),
            &[kv("task", "cls")],
            ana.as_owner(),
        )
        .await
        .unwrap();
    assert_eq!(made.tags, [kv("task", "cls")]);
    let again = store
        .create_registered_model("shapes", None, &[], ana.as_owner())
        .await;
    assert!(
        matches!(again, Err(StoreError::Conflict { .. })),
        "{again:?}"
    );
    let version = |source: &str| crate::NewVersion {
        source: source.to_owned(),
        storage_location: source.to_owned(),
        user_name: "ana".into(),
        ..crate::NewVersion::default()
    };
    for n in 1..=3 {
        let v = store
            .create_model_version("shapes", version(&format!("runs:/r/{n}")))
            .await
            .unwrap();
        assert_eq!(v.version, n);
    }
    store
        .set_registered_model_alias("shapes", "best", 2)
        .await
        .unwrap();
    assert_eq!(
        store
            .model_version_by_alias("shapes", "best")
            .await
            .unwrap()
            .version,
        2
    );
    store.delete_model_version("shapes", 2).await.unwrap();
    assert!(
        store
            .model_version_by_alias("shapes", "best")
            .await
            .is_err()
    );
    let fourth = store
        .create_model_version("shapes", version("runs:/r/4"))
        .await
        .unwrap();
    assert_eq!(
        fourth.version, 4,
        "a deleted version's number is not given again"
    );
    for latest in ["latest", "LATEST"] {
        assert_eq!(
            store
                .model_version_by_alias("shapes", latest)
                .await
                .unwrap()
                .version,
            4,
            "`latest` is the newest version"
        );
    }
    store
        .create_registered_model("empty", None, &[], ana.as_owner())
        .await
        .unwrap();
    let none = store.model_version_by_alias("empty", "latest").await;
    assert!(matches!(none, Err(StoreError::NotFound(_))), "{none:?}");

    store
        .transition_model_version_stage("shapes", 1, "Production", false)
        .await
        .unwrap();
    store
        .transition_model_version_stage("shapes", 3, "Production", true)
        .await
        .unwrap();
    assert_eq!(
        store.get_model_version("shapes", 1).await.unwrap().stage,
        "Archived"
    );
    let latest = store
        .get_registered_model("shapes")
        .await
        .unwrap()
        .latest_versions;
    let by_stage: Vec<(String, i64)> = latest
        .iter()
        .map(|v| (v.stage.clone(), v.version))
        .collect();
    assert_eq!(
        by_stage,
        [
            ("Archived".to_owned(), 1),
            ("Production".to_owned(), 3),
            ("None".to_owned(), 4)
        ]
    );

    let filter = parse_filter(
        "name = 'shapes' AND tags.hidden != 'true'",
        Scope::RegisteredModels,
    )
    .unwrap();
    let stranger = Viewer::Member {
        user_id: ana.id + 1000,
        teams: vec![],
    };
    for (viewer, count) in [(Viewer::of(&ana), 1), (stranger, 0)] {
        let found = store
            .search_registered_models(filter.as_ref(), &[], 10, 0, &viewer)
            .await
            .unwrap();
        assert_eq!(found.len(), count);
    }
    let versions = parse_filter("version_number >= 3", Scope::ModelVersions).unwrap();
    let found = store
        .search_model_versions(versions.as_ref(), &[], 10, 0, &Viewer::Everyone)
        .await
        .unwrap();
    let mut numbers: Vec<i64> = found.iter().map(|v| v.version).collect();
    numbers.sort();
    assert_eq!(numbers, [3, 4]);

    store
        .rename_registered_model("shapes", "forms")
        .await
        .unwrap();
    assert_eq!(
        store.get_model_version("forms", 4).await.unwrap().name,
        "forms"
    );
    store.delete_registered_model("forms").await.unwrap();
    assert!(matches!(
        store.get_registered_model("forms").await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn a_page_of_the_registry_carries_each_models_own_tags_aliases_and_versions() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &["vision"]).await;
    // More than one chunk of ids (500): tags, aliases and versions are
    // read a chunk at a time, not one model at a time.
    let count = 505;
    for i in 0..count {
        let name = format!("m{i:03}");
        store
            .create_registered_model(&name, None, &[kv("n", &i.to_string())], ana.as_owner())
            .await
            .unwrap();
        for _ in 0..=(i % 2) {
            store
                .create_model_version(
                    &name,
                    crate::NewVersion {
                        source: format!("runs:/r{i}/model"),
                        ..crate::NewVersion::default()
                    },
                )
                .await
                .unwrap();
        }
        let last = 1 + (i % 2) as i64;
        store
            .set_model_version_tag(&name, last, "v", &format!("{i}-{last}"))
            .await
            .unwrap();
        store
            .set_registered_model_alias(&name, &format!("a{i}"), last)
            .await
            .unwrap();
    }
    let models = store
        .search_registered_models(None, &[], 1000, 0, &Viewer::Everyone)
        .await
        .unwrap();
    assert_eq!(models.len(), count);
    for (i, model) in models.iter().enumerate() {
        let last = 1 + (i % 2) as i64;
        assert_eq!(model.name, format!("m{i:03}"));
        assert_eq!(model.tags, [kv("n", &i.to_string())], "{}", model.name);
        assert_eq!(model.aliases, [(format!("a{i}"), last)], "{}", model.name);
        // Both versions are in stage None: the newest only.
        assert_eq!(model.latest_versions.len(), 1, "{}", model.name);
        let newest = &model.latest_versions[0];
        assert_eq!(newest.version, last, "{}", model.name);
        assert_eq!(
            newest.tags,
            [kv("v", &format!("{i}-{last}"))],
            "{}",
            model.name
        );
        assert_eq!(newest.aliases, [format!("a{i}")], "{}", model.name);
    }
    let versions = store
        .search_model_versions(None, &[], 2000, 0, &Viewer::Everyone)
        .await
        .unwrap();
    assert_eq!(versions.len(), count + count / 2);
    for v in &versions {
        let i: usize = v.name[1..].parse().unwrap();
        let last = 1 + (i % 2) as i64;
        if v.version == last {
            assert_eq!(v.tags, [kv("v", &format!("{i}-{last}"))], "{}", v.name);
            assert_eq!(v.aliases, [format!("a{i}")], "{}", v.name);
        } else {
            assert!(v.tags.is_empty() && v.aliases.is_empty(), "{}", v.name);
        }
    }
}

/// The ids of an experiment's traces that a filter finds, newest first.
/// A finished trace of `exp`, at 1 s, that took 5 ms.
fn trace_of(exp: i64, id: &str) -> trainyard_domain::tracking::TraceInfo {
    trainyard_domain::tracking::TraceInfo {
        trace_id: id.into(),
        experiment_id: exp,
        request_time: 1_000,
        execution_time: Some(5),
        state: "OK".into(),
        request_preview: "{}".into(),
        response_preview: String::new(),
        client_request_id: None,
        metadata: Vec::new(),
        tags: Vec::new(),
        assessments: Vec::new(),
    }
}

async fn traces_matching(store: &Store, exp: i64, filter: &str) -> Vec<String> {
    let filter = parse_filter(filter, Scope::Traces).unwrap();
    store
        .search_traces(&[exp], filter.as_ref(), &[], 10, 0, &Viewer::Everyone)
        .await
        .unwrap()
        .traces
        .into_iter()
        .map(|t| t.trace_id)
        .collect()
}

#[tokio::test]
async fn traces_are_found_by_tags_metadata_and_run_and_deleted_by_age() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("agents", None, &[], ana.as_owner())
        .await
        .unwrap();
    let run = run_of(&store, exp, ana.id, None).await;
    for (i, id) in ["tr-a", "tr-b", "tr-c"].into_iter().enumerate() {
        let mut metadata = vec![kv("mlflow.user", "ana")];
        if i == 1 {
            metadata.push(kv("mlflow.sourceRun", &run));
        }
        let saved = store
            .start_trace(
                trainyard_domain::tracking::TraceInfo {
                    trace_id: id.into(),
                    experiment_id: exp,
                    request_time: 1_000 * (i as i64 + 1),
                    execution_time: (i < 2).then_some(5 * (i as i64 + 1)),
                    state: if i == 2 { "ERROR" } else { "OK" }.into(),
                    request_preview: "{}".into(),
                    response_preview: String::new(),
                    client_request_id: Some(format!("req-{i}")),
                    metadata,
                    tags: vec![kv("mlflow.traceName", &format!("step{i}"))],
                    assessments: Vec::new(),
                },
                ana.as_owner(),
            )
            .await
            .unwrap();
        assert!(saved.tags.contains(&kv(
            "mlflow.artifactLocation",
            &format!("mlflow-artifacts:/{exp}/traces/{id}/artifacts")
        )));
    }
    assert_eq!(
        traces_matching(&store, exp, "").await,
        ["tr-c", "tr-b", "tr-a"]
    );
    assert_eq!(
        traces_matching(&store, exp, &format!("attribute.run_id = '{run}'")).await,
        ["tr-b"]
    );
    assert_eq!(
        traces_matching(&store, exp, "trace.status = 'ERROR'").await,
        ["tr-c"]
    );
    assert_eq!(
        traces_matching(&store, exp, "tags.`mlflow.traceName` = 'step0'").await,
        ["tr-a"]
    );
    assert_eq!(
        traces_matching(
            &store,
            exp,
            "metadata.`mlflow.user` = 'ana' AND timestamp_ms > 1500"
        )
        .await,
        ["tr-c", "tr-b"]
    );
    assert_eq!(
        traces_matching(&store, exp, "trace.client_request_id = 'req-1'").await,
        ["tr-b"]
    );
    // Ended at 1,005 and 2,010; tr-c is still under way.
    assert_eq!(
        traces_matching(&store, exp, "trace.end_time_ms > 1005").await,
        ["tr-b"]
    );
    assert_eq!(
        traces_matching(&store, exp, "end_time >= 1005").await,
        ["tr-b", "tr-a"]
    );
    let ordered = |order: &'static str| {
        let store = store.clone();
        async move {
            let order = [parse_order_by(order, Scope::Traces).unwrap()];
            let page = store
                .search_traces(&[exp], None, &order, 10, 0, &Viewer::Everyone)
                .await
                .unwrap();
            page.traces
                .into_iter()
                .map(|t| t.trace_id)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(
        ordered("end_time_ms ASC").await,
        ["tr-a", "tr-b", "tr-c"],
        "under way: last"
    );
    assert_eq!(
        ordered("end_time_ms DESC").await,
        ["tr-b", "tr-a", "tr-c"],
        "under way: last either way"
    );
    // Where its spans are kept is the server's to say: a client's tag
    // would send its readers' tokens to another host.
    for change in [
        store
            .set_trace_tag(
                "tr-a",
                "mlflow.artifactLocation",
                "https://elsewhere.example/t",
            )
            .await,
        store
            .delete_trace_tag("tr-a", "mlflow.artifactLocation")
            .await,
    ] {
        assert!(
            matches!(&change, Err(StoreError::Rejected(m)) if m.contains("set by the server")),
            "{change:?}"
        );
    }
    let again = store.get_trace_info("tr-a").await.unwrap();
    assert!(matches!(
        store.start_trace(again, ana.as_owner()).await,
        Err(StoreError::Conflict { .. })
    ));
    let old = store
        .traces_to_delete(exp, Some(2_000), &[], None, None, 10)
        .await
        .unwrap();
    let ids: Vec<&str> = old.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["tr-a", "tr-b"]);
    assert_eq!(old[0].owner, ana.as_owner());
    // Those of one person only: ana's are these, nobody else has any.
    let of = |user| store.traces_to_delete(exp, Some(2_000), &[], None, Some(user), 10);
    assert_eq!(of(ana.id).await.unwrap(), old);
    assert!(of(ana.id + 1000).await.unwrap().is_empty());
    // Paged: after the first, one at a time.
    let next = store
        .traces_to_delete(
            exp,
            Some(2_000),
            &[],
            Some((old[0].request_time, "tr-a")),
            None,
            1,
        )
        .await
        .unwrap();
    assert_eq!(next, old[1..]);
    let named = store
        .traces_to_delete(exp, None, &["tr-c".to_owned()], None, None, 10)
        .await
        .unwrap();
    assert_eq!(named.len(), 1);
    assert_eq!(store.delete_traces(&[old[0].id.clone()]).await.unwrap(), 1);
    assert_eq!(traces_matching(&store, exp, "").await, ["tr-c", "tr-b"]);
}

#[tokio::test]
async fn assessments_override_update_and_go_with_their_trace() {
    use crate::assessments::{AssessmentChange, NewAssessment};
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("judged", None, &[], ana.as_owner())
        .await
        .unwrap();
    for id in ["tr-1", "tr-2"] {
        store
            .start_trace(trace_of(exp, id), ana.as_owner())
            .await
            .unwrap();
    }
    let feedback = |name: &str, body: &str| NewAssessment {
        trace_id: "tr-1".into(),
        name: name.into(),
        kind: "feedback".into(),
        body: body.into(),
        source_type: "LLM_JUDGE".into(),
        source_id: "judge".into(),
        rationale: Some("it answered".into()),
        metadata: vec![kv("chunk", "0")],
        ..NewAssessment::default()
    };
    let first = store
        .create_assessment(feedback("relevance", r#"{"value":false}"#))
        .await
        .unwrap();
    assert!(first.assessment_id.starts_with("a-"));
    assert_eq!((first.value.as_str(), first.valid), ("false", true));
    let failed = store
        .create_assessment(feedback(
            "safety",
            r#"{"error":{"error_code":"TIMEOUT","error_message":"judge timed out"}}"#,
        ))
        .await
        .unwrap();
    assert_eq!(failed.error.as_deref(), Some("TIMEOUT: judge timed out"));
    assert_eq!(failed.value, "");

    // A person overrides the judge: the judge's is no longer valid, and is
    // again once the person's is deleted.
    let person_says = store
        .create_assessment(NewAssessment {
            source_type: "HUMAN".into(),
            source_id: "ana".into(),
            overrides: Some(first.assessment_id.clone()),
            ..feedback("relevance", r#"{"value":true}"#)
        })
        .await
        .unwrap();
    let info = store.get_trace_info("tr-1").await.unwrap();
    let valid: Vec<(&str, bool)> = info
        .assessments
        .iter()
        .map(|a| (a.value.as_str(), a.valid))
        .collect();
    assert!(valid.contains(&("false", false)) && valid.contains(&("true", true)));
    assert_eq!(info.assessments.len(), 3);
    // Search sees the verdict that stands, not the one overridden.
    assert_eq!(
        traces_matching(&store, exp, "feedback.relevance = 'true'").await,
        ["tr-1"]
    );
    assert!(
        traces_matching(&store, exp, "feedback.relevance = 'false'")
            .await
            .is_empty()
    );
    assert_eq!(
        traces_matching(&store, exp, "feedback.relevance IS NULL").await,
        ["tr-2"]
    );
    assert_eq!(
        traces_matching(&store, exp, "feedback.relevance IS NOT NULL").await,
        ["tr-1"]
    );
    store
        .create_assessment(NewAssessment {
            trace_id: "tr-2".into(),
            ..feedback("tone", r#"{"value":"calm"}"#)
        })
        .await
        .unwrap();
    assert_eq!(
        traces_matching(&store, exp, "feedback.tone = 'calm'").await,
        ["tr-2"]
    );
    assert!(
        traces_matching(&store, exp, "feedback.tone != 'calm'")
            .await
            .is_empty()
    );
    assert!(
        traces_matching(&store, exp, "expectation.tone = 'calm'")
            .await
            .is_empty()
    );
    let other: Vec<String> = store
        .get_trace_info("tr-2")
        .await
        .unwrap()
        .assessments
        .into_iter()
        .map(|a| a.name)
        .collect();
    assert_eq!(other, ["tone"]);
    // Overriding one of another trace, or one that is not there, is refused.
    for other in [("tr-2", first.assessment_id.as_str()), ("tr-1", "a-none")] {
        let refused = store
            .create_assessment(NewAssessment {
                trace_id: other.0.into(),
                overrides: Some(other.1.into()),
                ..feedback("relevance", r#"{"value":1}"#)
            })
            .await;
        assert!(matches!(refused, Err(StoreError::NotFound(_))), "{other:?}");
    }
    store
        .delete_assessment("tr-1", &person_says.assessment_id)
        .await
        .unwrap();
    assert!(
        store
            .get_assessment("tr-1", &first.assessment_id)
            .await
            .unwrap()
            .valid
    );
    // Deleting again is no error, as in MLflow.
    store
        .delete_assessment("tr-1", &person_says.assessment_id)
        .await
        .unwrap();

    // Updates keep the source and kind, merge metadata, and refuse a value
    // of the other kind.
    let changed = store
        .update_assessment(
            "tr-1",
            &first.assessment_id,
            AssessmentChange {
                name: Some("relevant".into()),
                body: Some(("feedback".into(), r#"{"value":0.5}"#.into())),
                metadata: Some(vec![kv("judge", "v2")]),
                ..AssessmentChange::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(
        (changed.name.as_str(), changed.value.as_str()),
        ("relevant", "0.5")
    );
    assert_eq!(changed.source_type, "LLM_JUDGE");
    assert_eq!(
        traces_matching(&store, exp, "feedback.relevant > 0.4").await,
        ["tr-1"]
    );
    assert!(
        traces_matching(&store, exp, "feedback.relevant >= 0.6")
            .await
            .is_empty()
    );
    assert_eq!(changed.rationale.as_deref(), Some("it answered"));
    assert_eq!(changed.metadata, [kv("chunk", "0"), kv("judge", "v2")]);
    assert!(changed.last_update_time >= changed.create_time);
    let wrong = store
        .update_assessment(
            "tr-1",
            &first.assessment_id,
            AssessmentChange {
                body: Some(("expectation".into(), r#"{"value":"x"}"#.into())),
                ..AssessmentChange::default()
            },
        )
        .await;
    assert!(matches!(wrong, Err(StoreError::Rejected(_))));

    // An empty rationale removes it.
    let cleared = store
        .update_assessment(
            "tr-1",
            &first.assessment_id,
            AssessmentChange {
                rationale: Some(String::new()),
                ..AssessmentChange::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(cleared.rationale, None);

    // A client's own id is kept, and taken once.
    let mine = NewAssessment {
        assessment_id: Some("a-mine".into()),
        kind: "expectation".into(),
        body: r#"{"serialized_value":{"serialization_format":"JSON_FORMAT","value":"{\"k\": [1, 2]}"}}"#.into(),
        ..feedback("expected", "")
    };
    let kept = store.create_assessment(mine.clone()).await.unwrap();
    assert_eq!(kept.assessment_id, "a-mine");
    assert_eq!(kept.value, r#"{"k": [1, 2]}"#);
    assert!(matches!(
        store.create_assessment(mine).await,
        Err(StoreError::Conflict { .. })
    ));

    // They go with their trace.
    store.delete_traces(&["tr-1".to_owned()]).await.unwrap();
    assert!(matches!(
        store.get_assessment("tr-1", "a-mine").await,
        Err(StoreError::NotFound(_))
    ));
}

/// The ids of a page of up to 10 of `exp`'s traces from `offset`, and
/// whether the page was cut short of them by its text budget.
async fn trace_page(store: &Store, exp: i64, offset: u64) -> (Vec<String>, bool) {
    let found = store
        .search_traces(&[exp], None, &[], 10, offset, &Viewer::Everyone)
        .await
        .unwrap();
    let ids = found.traces.iter().map(|t| t.trace_id.clone()).collect();
    (ids, found.cut)
}

fn ids(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

/// Tags count against a search page's text too: a trace may hold 8 Mi
/// characters of them, and a page of 1,000 such traces was gigabytes.
#[tokio::test]
async fn a_trace_search_page_carries_a_bounded_amount_of_tags() {
    use crate::traces::MAX_PAGE_TEXT_CHARS;
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("tagged", None, &[], ana.as_owner())
        .await
        .unwrap();
    // Five traces of more than a fifth of the page's text each.
    let value = "x".repeat(1 << 20);
    let per_trace = (MAX_PAGE_TEXT_CHARS >> 20) / 5 + 1;
    for (i, id) in ["tr-e", "tr-d", "tr-c", "tr-b", "tr-a"]
        .into_iter()
        .enumerate()
    {
        let trace = trainyard_domain::tracking::TraceInfo {
            request_time: 1_000 * (i as i64 + 1),
            ..trace_of(exp, id)
        };
        store.start_trace(trace, ana.as_owner()).await.unwrap();
        for t in 0..per_trace {
            store
                .set_trace_tag(id, &format!("t{t}"), &value)
                .await
                .unwrap();
        }
    }
    assert_eq!(
        trace_page(&store, exp, 0).await,
        (ids(&["tr-a", "tr-b", "tr-c", "tr-d"]), true)
    );
    assert_eq!(trace_page(&store, exp, 4).await, (ids(&["tr-e"]), false));
}

/// A search page ends early rather than carry more assessment text than
/// its budget, and the next page goes on from there.
#[tokio::test]
async fn a_trace_search_page_carries_a_bounded_amount_of_assessments() {
    use crate::assessments::NewAssessment;
    use crate::traces::MAX_PAGE_TEXT_CHARS;
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("heavy", None, &[], ana.as_owner())
        .await
        .unwrap();
    use crate::assessments::MAX_TRACE_ASSESSMENT_CHARS;
    let value = format!(r#"{{"value":"{}"}}"#, "x".repeat(1 << 20));
    // Three traces of more than a third of the page's budget each, within
    // what one trace may hold.
    let per_trace = (MAX_PAGE_TEXT_CHARS as usize >> 20) / 3 + 1;
    assert!((per_trace * value.len()) as i64 <= MAX_TRACE_ASSESSMENT_CHARS);
    let long = |trace: &str| NewAssessment {
        trace_id: trace.into(),
        name: "long".into(),
        kind: "feedback".into(),
        body: value.clone(),
        source_type: "CODE".into(),
        ..NewAssessment::default()
    };
    for (i, id) in ["tr-d", "tr-c", "tr-b", "tr-a"].into_iter().enumerate() {
        let trace = trainyard_domain::tracking::TraceInfo {
            request_time: 1_000 * (i as i64 + 1),
            execution_time: None,
            request_preview: String::new(),
            ..trace_of(exp, id)
        };
        store.start_trace(trace, ana.as_owner()).await.unwrap();
        if id != "tr-d" {
            for _ in 0..per_trace {
                store.create_assessment(long(id)).await.unwrap();
            }
        }
    }
    assert_eq!(
        trace_page(&store, exp, 0).await,
        (ids(&["tr-a", "tr-b"]), true)
    );
    assert_eq!(
        trace_page(&store, exp, 2).await,
        (ids(&["tr-c", "tr-d"]), false)
    );

    // One trace holds a bounded amount: past it, a new one is refused, and
    // so is an update that would grow it.
    let mut made = Vec::new();
    let refused = loop {
        match store.create_assessment(long("tr-d")).await {
            Ok(a) => made.push(a.assessment_id),
            Err(e) => break e,
        }
    };
    assert_eq!(
        made.len() as i64,
        MAX_TRACE_ASSESSMENT_CHARS / value.chars().count() as i64
    );
    assert!(
        matches!(&refused, StoreError::Rejected(why) if why.contains("more than")),
        "{refused:?}"
    );
    let grown = store
        .update_assessment(
            "tr-d",
            &made[0],
            crate::assessments::AssessmentChange {
                rationale: Some("y".repeat(1 << 20)),
                ..Default::default()
            },
        )
        .await;
    assert!(matches!(grown, Err(StoreError::Rejected(_))), "{grown:?}");
}

/// Fills a model's metrics with `n` values of `loss` (steps 1..=n) in one
/// statement, as a long training loop would have logged them.
async fn fill_model_metrics(store: &Store, model_id: &str, n: i64) {
    use sea_orm::ConnectionTrait;
    let backend = store.connection().get_database_backend();
    let mut sql = crate::sql::Sql::new(backend);
    sql.push("INSERT INTO logged_model_metrics (model_id, key, value, timestamp, step) WITH RECURSIVE seq(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM seq WHERE n < ")
        .bind(n)
        .push(") SELECT ")
        .bind(model_id.to_owned())
        .push(", 'loss', 1.0 / n, n, n FROM seq");
    store.connection().execute_raw(sql.build()).await.unwrap();
}

#[tokio::test]
async fn what_one_model_holds_and_what_a_read_carries_are_bounded() {
    use crate::models::{MAX_MODEL_METRICS_READ, MAX_PAGE_MODEL_METRICS};
    use crate::sql::MAX_KEYS_HELD;
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &["vision"]).await;
    let exp = store
        .create_experiment_with("bounds", None, &[], ana.as_owner())
        .await
        .unwrap();
    let new_model = |i: usize| NewModel {
        experiment_id: exp,
        name: Some(format!("m-{i}")),
        owner: Owner::new(Some(ana.id), None),
        ..NewModel::default()
    };
    let model = store
        .create_logged_model(new_model(0))
        .await
        .unwrap()
        .model_id;

    // Tags: a thousand a request, up to the bound; past it the request is
    // refused whole, while changing a tag already held still works.
    for round in 0..MAX_KEYS_HELD / 1000 {
        let tags: Vec<_> = (0..1000)
            .map(|i| kv(&format!("t{round}-{i}"), "v"))
            .collect();
        store.set_logged_model_tags(&model, &tags).await.unwrap();
    }
    let over = store
        .set_logged_model_tags(&model, &[kv("t0-0", "changed"), kv("one-more", "v")])
        .await;
    match over {
        Err(StoreError::Rejected(why)) => {
            assert_eq!(
                why,
                "One logged model holds at most 10,000 tags; this request would make it 10,001: delete some tags first, or keep the rest in an artifact."
            );
        }
        other => panic!("{other:?}"),
    }
    let held = store.get_logged_model(&model).await.unwrap();
    assert_eq!(held.tags.len(), MAX_KEYS_HELD);
    assert!(
        held.tags.contains(&kv("t0-0", "v")),
        "the refused request left nothing"
    );
    store
        .set_logged_model_tags(&model, &[kv("t0-0", "changed")])
        .await
        .unwrap();
    // And what their keys and values hold in all: 128 tags of 65,536
    // four-byte characters fill it (8 Mi characters, 32 MiB); one more
    // character is refused, whole.
    let elsewhere = store
        .create_experiment_with("long tags", None, &[], ana.as_owner())
        .await
        .unwrap();
    let other = store
        .create_logged_model(NewModel {
            experiment_id: elsewhere,
            ..new_model(0)
        })
        .await
        .unwrap()
        .model_id;
    let long = "😀".repeat(65_536 - 4);
    let full: Vec<_> = (0..128).map(|i| kv(&format!("{i:04}"), &long)).collect();
    for half in full.chunks(64) {
        store.set_logged_model_tags(&other, half).await.unwrap();
    }
    match store.set_logged_model_tags(&other, &[kv("x", "")]).await {
        Err(StoreError::Rejected(why)) => assert_eq!(
            why,
            "One logged model's tags hold at most 8,388,608 characters in all (keys and values); this request would make them 8,388,609: delete some tags first, or keep the rest in an artifact."
        ),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.get_logged_model(&other).await.unwrap().tags.len(),
        128
    );
    // A registered model's tags go through the same write: one made with
    // all it may hold takes no new tag, and the refusal leaves nothing.
    let tags: Vec<_> = (0..MAX_KEYS_HELD)
        .map(|i| kv(&format!("r{i}"), "v"))
        .collect();
    store
        .create_registered_model("bounded", None, &tags, ana.as_owner())
        .await
        .unwrap();
    assert!(matches!(
        store
            .set_registered_model_tag("bounded", "one-more", "v")
            .await,
        Err(StoreError::Rejected(_))
    ));
    let registered = store.get_registered_model("bounded").await.unwrap();
    assert_eq!(registered.tags.len(), MAX_KEYS_HELD);

    // Metrics: a read carries each model's newest values, at most the bound.
    fill_model_metrics(&store, &model, MAX_MODEL_METRICS_READ as i64 + 50).await;
    let read = store.get_logged_model(&model).await.unwrap();
    assert_eq!(read.metrics.len(), MAX_MODEL_METRICS_READ);
    let steps: Vec<i64> = read.metrics.iter().map(|m| m.point.step).collect();
    assert_eq!(steps.first(), Some(&51), "the oldest 50 are left out");
    assert_eq!(steps.last(), Some(&(MAX_MODEL_METRICS_READ as i64 + 50)));

    // A page ends early rather than carry more than its bound in all, and
    // the next page goes on from there.
    let per_page = MAX_PAGE_MODEL_METRICS / MAX_MODEL_METRICS_READ;
    for i in 1..=per_page {
        let id = store
            .create_logged_model(new_model(i))
            .await
            .unwrap()
            .model_id;
        fill_model_metrics(&store, &id, MAX_MODEL_METRICS_READ as i64).await;
    }
    let viewer = Viewer::Everyone;
    let first = store
        .search_logged_models(&[exp], ModelFilter::default(), &[], 50, 0, &viewer)
        .await
        .unwrap();
    assert_eq!(first.models.len(), per_page);
    assert_eq!(first.next_offset, Some(per_page as u64));
    let carried: usize = first.models.iter().map(|m| m.metrics.len()).sum();
    assert!(carried <= MAX_PAGE_MODEL_METRICS, "{carried}");
    let rest = store
        .search_logged_models(
            &[exp],
            ModelFilter::default(),
            &[],
            50,
            per_page as u64,
            &viewer,
        )
        .await
        .unwrap();
    assert_eq!(rest.models.len(), 1);
    assert_eq!(rest.next_offset, None);
    let mut all: Vec<String> = first
        .models
        .into_iter()
        .chain(rest.models)
        .map(|m| m.model_id)
        .collect();
    all.sort();
    all.dedup();
    assert_eq!(all.len(), per_page + 1, "every model once");
}

/// A span as MLflow's client writes it in `traces.json`: attributes are
/// JSON text.
fn client_span(
    id: &str,
    name: &str,
    kind: &str,
    status: &str,
    attributes: &[(&str, serde_json::Value)],
) -> serde_json::Value {
    let mut all = serde_json::Map::new();
    all.insert(
        "mlflow.spanType".into(),
        serde_json::Value::String(serde_json::json!(kind).to_string()),
    );
    for (k, v) in attributes {
        all.insert((*k).into(), serde_json::Value::String(v.to_string()));
    }
    serde_json::json!({
        "name": name,
        "span_id": id,
        "parent_span_id": "",
        "start_time_unix_nano": 1_000,
        "end_time_unix_nano": 2_000,
        "status": {"code": format!("STATUS_CODE_{status}"), "message": ""},
        "attributes": all,
    })
}

#[tokio::test]
async fn traces_are_found_by_their_spans_one_span_holding_all_that_and_asks() {
    use crate::spans::search_spans;
    use serde_json::json;
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("spans", None, &[], ana.as_owner())
        .await
        .unwrap();
    for id in ["tr-1", "tr-2", "tr-3", "tr-4"] {
        let info = trainyard_domain::tracking::TraceInfo {
            tags: if id == "tr-2" {
                vec![kv("reviewed", "yes")]
            } else {
                Vec::new()
            },
            ..trace_of(exp, id)
        };
        store.start_trace(info, ana.as_owner()).await.unwrap();
    }
    let unread = store.traces_with_unread_spans("", 10).await.unwrap();
    assert_eq!(
        unread.iter().map(|(id, _)| id.as_str()).collect::<Vec<_>>(),
        ["tr-1", "tr-2", "tr-3", "tr-4"]
    );
    assert!(unread.iter().all(|(_, e)| *e == exp));
    let files = [
        (
            "tr-1",
            vec![
                client_span(
                    "a1",
                    "search_web",
                    "TOOL",
                    "ERROR",
                    &[
                        ("query", json!("test")),
                        ("model", json!("gpt-4")),
                        ("mlflow.spanInputs", json!({"q": "what's MLflow?"})),
                    ],
                ),
                client_span(
                    "a2",
                    "other_tool",
                    "TOOL",
                    "OK",
                    &[("temperature", json!(0.7))],
                ),
            ],
        ),
        (
            "tr-2",
            vec![client_span(
                "b1",
                "search_web",
                "TOOL",
                "OK",
                &[
                    ("query", json!("test2")),
                    ("similarity.threshold", json!(0.8)),
                ],
            )],
        ),
        (
            "tr-3",
            vec![client_span(
                "c1",
                "llm_call",
                "LLM",
                "OK",
                &[
                    ("model", json!("claude-3")),
                    ("mlflow.spanInputs", json!("Tell me about machine learning")),
                ],
            )],
        ),
    ];
    for (id, spans) in &files {
        let kept = search_spans(&json!({ "spans": spans }));
        assert!(!kept.cut);
        assert!(
            store
                .index_trace_spans(id, &kept.spans, false)
                .await
                .unwrap()
        );
    }
    let unread = store.traces_with_unread_spans("", 10).await.unwrap();
    assert_eq!(unread, vec![("tr-4".to_owned(), exp)]);

    let found = |q: &'static str| {
        let store = store.clone();
        async move { traces_matching(&store, exp, q).await }
    };
    assert_eq!(found("span.name = 'search_web'").await, ["tr-1", "tr-2"]);
    // Comparisons of spans joined by AND hold for one span.
    assert_eq!(
        found("span.name = 'search_web' AND span.status = 'OK'").await,
        ["tr-2"]
    );
    assert_eq!(
        found("span.name = 'search_web' AND span.status = 'ERROR'").await,
        ["tr-1"]
    );
    assert_eq!(
        found("span.name = 'other_tool' AND span.status = 'OK'").await,
        ["tr-1"]
    );
    assert!(
        found("span.type = 'LLM' AND span.type = 'TOOL'")
            .await
            .is_empty()
    );
    // `!=` and an inline NOT IN ask for a span that is otherwise; NOT (…)
    // for a trace without one.
    assert_eq!(found("span.type != 'TOOL'").await, ["tr-3"]);
    assert_eq!(found("span.type NOT IN ('TOOL', 'CHAIN')").await, ["tr-3"]);
    assert_eq!(
        found("span.status != 'ERROR'").await,
        ["tr-1", "tr-2", "tr-3"]
    );
    assert_eq!(found("NOT (span.type = 'TOOL')").await, ["tr-3", "tr-4"]);
    assert_eq!(found("span.type IN ('LLM', 'RETRIEVER')").await, ["tr-3"]);
    assert_eq!(found("span.type ILIKE 'llm'").await, ["tr-3"]);
    assert!(found("span.type LIKE 'llm'").await.is_empty());
    assert_eq!(
        found("span.name NOT LIKE 'search%'").await,
        ["tr-1", "tr-3"]
    );
    // Attributes by their value's text, keys with dots as they are.
    assert_eq!(found("span.attributes.model = 'gpt-4'").await, ["tr-1"]);
    assert_eq!(found("span.attributes.temperature = '0.7'").await, ["tr-1"]);
    assert_eq!(
        found("span.attributes.similarity.threshold LIKE '%0.8%'").await,
        ["tr-2"]
    );
    assert_eq!(
        found("span.attributes.query IN ('test2', 'nothing')").await,
        ["tr-2"]
    );
    assert_eq!(found("span.attributes.query != 'test'").await, ["tr-2"]);
    assert!(
        found("span.attributes.nonexistent LIKE '%'")
            .await
            .is_empty()
    );
    // The same span: tr-1's model is on search_web, not on other_tool.
    assert!(
        found("span.name = 'other_tool' AND span.attributes.model = 'gpt-4'")
            .await
            .is_empty()
    );
    // Content and the trace's text, LIKE case-sensitive and ILIKE not.
    assert_eq!(found("span.content LIKE '%gpt-4%'").await, ["tr-1"]);
    assert_eq!(
        found("span.content ILIKE '%MACHINE LEARNING%'").await,
        ["tr-3"]
    );
    assert!(
        found("span.content LIKE '%MACHINE LEARNING%'")
            .await
            .is_empty()
    );
    assert_eq!(
        found("trace.text LIKE \"%what's MLflow?%\"").await,
        ["tr-1"]
    );
    assert_eq!(found("trace.text LIKE '%TOOL%'").await, ["tr-1", "tr-2"]);
    // With the trace's own fields, and OR.
    assert_eq!(
        found("span.type = 'TOOL' AND tags.reviewed = 'yes'").await,
        ["tr-2"]
    );
    assert_eq!(
        found("span.type = 'LLM' OR span.status = 'ERROR'").await,
        ["tr-1", "tr-3"]
    );
    assert_eq!(
        found("trace.text LIKE '%test%' AND span.name = 'other_tool'").await,
        ["tr-1"]
    );

    // A file written again replaces what was kept of the last one.
    let again =
        search_spans(&json!({ "spans": [client_span("c9", "rerank", "RERANKER", "OK", &[])] }));
    assert!(
        store
            .index_trace_spans("tr-3", &again.spans, false)
            .await
            .unwrap()
    );
    // What reads the traces of before leaves a trace already read alone.
    assert!(!store.index_trace_spans("tr-3", &[], true).await.unwrap());
    assert!(found("span.type = 'LLM'").await.is_empty());
    assert_eq!(found("span.type = 'RERANKER'").await, ["tr-3"]);
    // A trace whose file holds no spans is read all the same.
    assert!(store.index_trace_spans("tr-4", &[], true).await.unwrap());
    assert!(
        store
            .traces_with_unread_spans("", 10)
            .await
            .unwrap()
            .is_empty()
    );
    // A trace deleted while its file was read: nothing is kept.
    assert!(
        !store
            .index_trace_spans("tr-gone", &again.spans, false)
            .await
            .unwrap()
    );
    // Deleting traces takes their spans.
    store
        .delete_traces(&["tr-1".into(), "tr-2".into(), "tr-3".into()])
        .await
        .unwrap();
    use sea_orm::ConnectionTrait;
    for table in ["trace_spans", "trace_span_attributes"] {
        let row = store
            .connection()
            .query_one_raw(sea_orm::Statement::from_string(
                store.connection().get_database_backend(),
                format!("SELECT COUNT(*) AS n FROM {table}"),
            ))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(row.try_get::<i64>("", "n").unwrap(), 0, "{table}");
    }
}

#[tokio::test]
async fn spans_make_a_trace_that_the_clients_summary_then_completes() {
    use crate::span_traces::{RootSpan, SpansOfTrace};
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let bo = person(&store, "bo", &[]).await;
    let exp = store
        .create_experiment_with("agents", None, &[], ana.as_owner())
        .await
        .unwrap();
    let id = "tr-0af7651916cd43dd8448eb211c80319c";
    // A child span first: the trace is under way, as long as that span.
    let child = SpansOfTrace {
        trace_id: id.into(),
        start_ms: 2_000,
        end_ms: Some(2_500),
        root: None,
        tags: vec![kv("service.name", "agent")],
        metadata: vec![kv("mlflow.trace.user", "ana@uni")],
        search: Vec::new(),
    };
    assert!(
        store
            .record_spans(exp, ana.as_owner(), None, &child)
            .await
            .unwrap()
            .made
    );
    let info = store.get_trace_info(id).await.unwrap();
    assert_eq!(
        (info.state.as_str(), info.request_time, info.execution_time),
        ("IN_PROGRESS", 2_000, Some(500))
    );
    assert!(info.tags.contains(&kv("service.name", "agent")));
    assert!(info.tags.contains(&kv(
        "mlflow.artifactLocation",
        &format!("mlflow-artifacts:/{exp}/traces/{id}/artifacts")
    )));
    assert_eq!(info.metadata, [kv("mlflow.trace.user", "ana@uni")]);
    assert_eq!(store.trace_place(id).await.unwrap().1, ana.as_owner());
    // The root span: earlier and later than the child, it settles the
    // state, the previews and the name; metadata already there stays.
    let root = SpansOfTrace {
        trace_id: id.into(),
        start_ms: 1_000,
        end_ms: Some(3_000),
        root: Some(RootSpan {
            state: "ERROR".into(),
            request_preview: "{\"q\": 1}".into(),
            response_preview: String::new(),
        }),
        tags: vec![kv("mlflow.traceName", "plan")],
        metadata: vec![kv("mlflow.trace.user", "someone else")],
        search: Vec::new(),
    };
    assert!(
        !store
            .record_spans(exp, ana.as_owner(), None, &root)
            .await
            .unwrap()
            .made
    );
    let info = store.get_trace_info(id).await.unwrap();
    assert_eq!(
        (info.state.as_str(), info.request_time, info.execution_time),
        ("ERROR", 1_000, Some(2_000))
    );
    assert_eq!(
        (
            info.request_preview.as_str(),
            info.response_preview.as_str()
        ),
        ("{\"q\": 1}", "")
    );
    assert_eq!(info.metadata, [kv("mlflow.trace.user", "ana@uni")]);
    assert_eq!(
        traces_matching(
            &store,
            exp,
            "trace.name = 'plan' AND trace.status = 'ERROR'"
        )
        .await,
        [id]
    );
    // Someone else's summary of it is a duplicate; its owner's completes
    // it, and the tags the spans set stay.
    let mut summary = trace_of(exp, id);
    summary.tags = vec![kv("mlflow.traceName", "plan")];
    summary.response_preview = "done".into();
    assert!(matches!(
        store.start_trace(summary.clone(), bo.as_owner()).await,
        Err(StoreError::Conflict { .. })
    ));
    let done = store
        .start_trace(summary.clone(), ana.as_owner())
        .await
        .unwrap();
    assert_eq!(
        (done.state.as_str(), done.request_time, done.execution_time),
        ("OK", 1_000, Some(5))
    );
    assert_eq!(
        (
            done.request_preview.as_str(),
            done.response_preview.as_str()
        ),
        ("{}", "done")
    );
    assert!(done.tags.contains(&kv("service.name", "agent")));
    assert!(matches!(
        store.start_trace(summary, ana.as_owner()).await,
        Err(StoreError::Conflict { .. })
    ));
    // Spans coming after the summary add their tags, and leave its times
    // and state as the client said.
    let late = SpansOfTrace {
        trace_id: id.into(),
        start_ms: 10,
        end_ms: Some(90_000),
        root: Some(RootSpan {
            state: "ERROR".into(),
            ..RootSpan::default()
        }),
        tags: vec![kv("deployment", "eu")],
        metadata: Vec::new(),
        search: Vec::new(),
    };
    store
        .record_spans(exp, ana.as_owner(), None, &late)
        .await
        .unwrap();
    let info = store.get_trace_info(id).await.unwrap();
    assert_eq!(
        (info.state.as_str(), info.request_time, info.execution_time),
        ("OK", 1_000, Some(5))
    );
    assert!(info.tags.contains(&kv("deployment", "eu")));
    // A job's spans file their new trace under its run.
    let run = run_of(&store, exp, ana.id, None).await;
    let other = SpansOfTrace {
        trace_id: "tr-1af7651916cd43dd8448eb211c80319c".into(),
        start_ms: 5,
        ..SpansOfTrace::default()
    };
    store
        .record_spans(exp, ana.as_owner(), Some(&run), &other)
        .await
        .unwrap();
    assert_eq!(
        store.trace_run(&other.trace_id).await.unwrap().as_deref(),
        Some(run.as_str())
    );
    assert_eq!(
        traces_matching(
            &store,
            exp,
            &format!("metadata.`mlflow.sourceRun` = '{run}'")
        )
        .await,
        [other.trace_id.as_str()]
    );
    // Spans of an experiment that is gone make nothing.
    assert!(matches!(
        store
            .record_spans(
                exp + 999,
                ana.as_owner(),
                None,
                &SpansOfTrace {
                    trace_id: "tr-2".into(),
                    ..SpansOfTrace::default()
                }
            )
            .await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn spans_added_a_batch_at_a_time_replace_their_own_and_keep_the_bounds() {
    use crate::span_traces::SpansOfTrace;
    use crate::spans::{MAX_SPANS, SearchSpan, search_spans};
    use serde_json::json;
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("spans", None, &[], ana.as_owner())
        .await
        .unwrap();
    store
        .start_trace(trace_of(exp, "tr-1"), ana.as_owner())
        .await
        .unwrap();
    let batch = |spans: Vec<serde_json::Value>| SpansOfTrace {
        trace_id: "tr-1".into(),
        search: search_spans(&json!({ "spans": spans })).spans,
        ..SpansOfTrace::default()
    };
    let owner = ana.as_owner();
    let add = |spans: SpansOfTrace| {
        let store = store.clone();
        async move {
            store
                .record_spans(exp, owner, None, &spans)
                .await
                .unwrap()
                .cut
        }
    };
    let first = batch(vec![
        client_span("a", "plan", "AGENT", "UNSET", &[]),
        client_span(
            "b",
            "search_web",
            "TOOL",
            "OK",
            &[("engine", json!("duck"))],
        ),
    ]);
    assert!(!add(first).await);
    assert_eq!(
        traces_matching(&store, exp, "span.attributes.engine = 'duck'").await,
        ["tr-1"]
    );
    // The root span again, ended now, and a new one.
    let second = batch(vec![
        client_span("a", "plan", "AGENT", "ERROR", &[]),
        client_span("c", "look_up", "TOOL", "OK", &[]),
    ]);
    assert!(!add(second).await);
    for (filter, found) in [
        ("span.name = 'plan' AND span.status = 'ERROR'", true),
        ("span.name = 'plan' AND span.status = 'UNSET'", false),
        ("span.name = 'search_web'", true),
        ("span.name = 'look_up'", true),
    ] {
        assert_eq!(
            !traces_matching(&store, exp, filter).await.is_empty(),
            found,
            "{filter}"
        );
    }
    // A trace holding as many spans as are kept: a new span is left out
    // (said), one kept already is still replaced.
    let many: Vec<SearchSpan> = (0..MAX_SPANS)
        .map(|i| SearchSpan {
            span_id: format!("s{i}"),
            name: "step".into(),
            span_type: String::new(),
            status: "OK".into(),
            content: String::new(),
            attributes: Vec::new(),
        })
        .collect();
    assert!(store.index_trace_spans("tr-1", &many, false).await.unwrap());
    let over = batch(vec![
        client_span("s0", "first step", "TOOL", "OK", &[]),
        client_span("late", "late", "TOOL", "OK", &[]),
    ]);
    assert!(add(over).await);
    assert_eq!(
        traces_matching(&store, exp, "span.name = 'first step'").await,
        ["tr-1"]
    );
    assert!(
        traces_matching(&store, exp, "span.name = 'late'")
            .await
            .is_empty()
    );
}
