//! The experiment explorer through its server functions, its pages as the
//! server renders them (what a browser without JavaScript gets), the chart
//! download endpoint and the live push of run changes.

use crate::common;

use std::time::Duration;

use common::{TestServer, post_json, request};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

async fn mlflow(server: &TestServer, path: &str, body: Value) -> Value {
    let answer = post_json(server.addr, &format!("/api/2.0/mlflow/{path}"), &body).await;
    assert_eq!(answer.status, 200, "{path}: {}", answer.body);
    answer.json()
}

async fn new_run(server: &TestServer, experiment: &str, name: &str) -> String {
    let run = mlflow(
        server,
        "runs/create",
        json!({"experiment_id": experiment, "run_name": name, "start_time": 1_000}),
    )
    .await;
    run["run"]["info"]["run_id"].as_str().unwrap().to_owned()
}

async fn server_fn(server: &TestServer, name: &str, body: Value) -> common::Response {
    post_json(server.addr, &format!("/api/{name}"), &body).await
}

#[tokio::test]
async fn experiments_are_renamed_archived_and_restored() {
    let server = TestServer::start().await;
    let id = server
        .post_form("/api/create_experiment", "name=sweep")
        .await
        .json()
        .as_i64()
        .unwrap();
    new_run(&server, &id.to_string(), "a").await;

    let renamed = server
        .post_form("/api/rename_experiment", &format!("id={id}&name=sweep%202"))
        .await;
    assert_eq!(renamed.status, 200, "{}", renamed.body);
    let empty = server
        .post_form("/api/rename_experiment", &format!("id={id}&name=%20"))
        .await;
    assert_eq!(empty.status, 400);
    assert_eq!(empty.json()["Invalid"]["field"], "name");

    let archived = server
        .post_form("/api/archive_experiment", &format!("id={id}&archived=true"))
        .await;
    assert_eq!(archived.status, 200, "{}", archived.body);
    let active = server.post_form("/api/list_experiments", "").await.json();
    assert!(
        active.as_array().unwrap().iter().all(|e| e["id"] != id),
        "{active}"
    );
    let gone = server
        .post_form("/api/list_experiments", "archived=true")
        .await
        .json();
    assert_eq!(gone[0]["name"], "sweep 2");
    assert_eq!(gone[0]["runs"], 1, "its runs were archived with it");
    let page = server.get("/experiments?archived=1").await;
    assert!(page.body.contains("sweep 2") && page.body.contains("Restore"));

    let restored = server
        .post_form(
            "/api/archive_experiment",
            &format!("id={id}&archived=false"),
        )
        .await;
    assert_eq!(restored.status, 200);
    let active = server.post_form("/api/list_experiments", "").await.json();
    let back = active
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["id"] == id)
        .expect("restored");
    assert_eq!(back["runs"], 1);

    let default = server
        .post_form("/api/archive_experiment", "id=0&archived=true")
        .await;
    assert_eq!(default.status, 400, "{}", default.body);
}

/// 250 runs: lr cycles through three values, loss is the run's number.
async fn seeded(server: &TestServer) -> (i64, Vec<String>) {
    let id = server
        .post_form("/api/create_experiment", "name=grid")
        .await
        .json()
        .as_i64()
        .unwrap();
    let mut ids = Vec::new();
    for i in 0..250 {
        let run = new_run(server, &id.to_string(), &format!("run-{i:03}")).await;
        let lr = ["0.1", "0.01", "0.001"][i % 3];
        mlflow(
            server,
            "runs/log-batch",
            json!({
                "run_id": run,
                "params": [{"key": "lr", "value": lr}, {"key": "seed", "value": "7"}],
                "metrics": [{"key": "loss", "value": i as f64, "timestamp": 2_000, "step": 1}],
                "tags": [{"key": "team", "value": "vision"}],
            }),
        )
        .await;
        ids.push(run);
    }
    (id, ids)
}

#[tokio::test]
async fn the_runs_table_pages_filters_sorts_and_picks_columns() {
    let server = TestServer::start().await;
    let (id, _) = seeded(&server).await;
    let page = |query: &str, sort: Value, columns: Value, offset: u64| {
        let body = json!({"experiment_id": id, "query": query, "sort": sort, "columns": columns, "offset": offset});
        let server = &server;
        async move { server_fn(server, "list_runs_page", body).await }
    };

    let first = page("", Value::Null, Value::Null, 0).await;
    assert_eq!(first.status, 200, "{}", first.body);
    let first = first.json();
    assert_eq!(first["total"], 250);
    assert_eq!(first["rows"].as_array().unwrap().len(), 100);
    assert_eq!(
        first["columns"],
        json!(["metrics.loss", "params.lr", "params.seed"]),
        "the defaults: the first metrics, then the first params"
    );
    let last = page("", Value::Null, Value::Null, 200).await.json();
    assert_eq!(last["rows"].as_array().unwrap().len(), 50);

    // OR, parentheses, ranges; sorted by a metric, descending.
    let found = page(
        "(params.lr = '0.1' OR params.lr = '0.01') AND metrics.loss BETWEEN 10 AND 19",
        json!("-metrics.loss"),
        json!(["metrics.loss", "tags.team"]),
        0,
    )
    .await;
    assert_eq!(found.status, 200, "{}", found.body);
    let found = found.json();
    let losses: Vec<f64> = found["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["cells"][0]["Num"].as_f64().unwrap())
        .collect();
    // Of 10..=19, those with i % 3 != 2 (lr 0.001): 19 18 16 15 13 12 10.
    assert_eq!(losses, [19.0, 18.0, 16.0, 15.0, 13.0, 12.0, 10.0]);
    assert_eq!(found["total"], 7);
    assert_eq!(found["rows"][0]["cells"][1]["Text"], "vision");

    // A query that does not parse says where.
    let bad = page(
        "metrics.loss < 5 AND (params.lr = ",
        Value::Null,
        Value::Null,
        0,
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    let error = &bad.json()["Query"];
    assert_eq!(error["position"], 34, "{error}");
    let bad_sort = page("", json!("-nonsense"), Value::Null, 0).await;
    assert_eq!(bad_sort.status, 400);
    let bad_column = page("", Value::Null, json!(["loss"]), 0).await;
    assert_eq!(bad_column.json()["Invalid"]["field"], "columns");

    // The page as the server renders it: rows, and the caret under an error.
    let html = server
        .get(&format!(
            "/experiments/{id}?q=params.lr%20%3D%20%270.001%27&sort=-metrics.loss"
        ))
        .await;
    assert_eq!(html.status, 200);
    assert!(html.body.contains("83 runs match"), "250 / 3 rounded down");
    assert!(
        html.body.contains("run-248"),
        "the biggest loss with lr 0.001 comes first"
    );
    assert!(!html.body.contains("run-249"));
    assert!(html.body.contains(r#"aria-sort="descending""#));
    let html = server
        .get(&format!("/experiments/{id}?q=metrics.loss%20%3C%3C%205"))
        .await;
    assert!(
        html.body.contains(r#"data-testid="query-error""#),
        "{}",
        html.body
    );
    assert!(
        html.body.contains("              ^"),
        "a caret under position 14"
    );
}

#[tokio::test]
async fn compare_figures_give_last_min_and_max_with_their_steps() {
    let server = TestServer::start().await;
    let a = new_run(&server, "0", "a").await;
    let b = new_run(&server, "0", "b").await;
    let points = |values: &[f64]| -> Vec<Value> {
        values
            .iter()
            .enumerate()
            .map(|(step, v)| json!({"key": "loss", "value": v, "timestamp": 2_000 + step, "step": step}))
            .collect()
    };
    for (run, values) in [(&a, [0.9, 0.4, 0.7, 0.5]), (&b, [1.2, 1.1, 1.3, 1.0])] {
        mlflow(
            &server,
            "runs/log-batch",
            json!({"run_id": run, "metrics": points(&values)}),
        )
        .await;
    }
    let answer = server_fn(
        &server,
        "metric_figures",
        json!({"run_ids": [a, b], "keys": ["loss", "accuracy"]}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let figures = answer.json();
    let rows: Vec<(String, Value, Value, Value)> = figures
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["run_id"].as_str().unwrap().to_owned(),
                f["last"].clone(),
                f["min"].clone(),
                f["max"].clone(),
            )
        })
        .collect();
    let at = |value: f64, step: i64| json!([{"Num": value}, step]);
    assert_eq!(
        rows,
        [
            (a.clone(), at(0.5, 3), at(0.4, 1), at(0.9, 0)),
            (b.clone(), at(1.0, 3), at(1.0, 3), at(1.3, 2)),
        ],
        "a metric no run logged is left out"
    );

    let none = server_fn(
        &server,
        "metric_figures",
        json!({"run_ids": [], "keys": ["loss"]}),
    )
    .await;
    assert_eq!(none.status, 400);
    assert_eq!(none.json()["Invalid"]["field"], "run_ids");
    let keys: Vec<String> = (0..201).map(|i| format!("m{i}")).collect();
    let many = server_fn(
        &server,
        "metric_figures",
        json!({"run_ids": [a], "keys": keys}),
    )
    .await;
    assert_eq!(many.status, 400);
    assert_eq!(many.json()["Invalid"]["field"], "keys");
    let unknown = server_fn(
        &server,
        "metric_figures",
        json!({"run_ids": ["nope"], "keys": ["loss"]}),
    )
    .await;
    assert_eq!(unknown.status, 200, "{}", unknown.body);
    assert_eq!(
        unknown.json(),
        json!([]),
        "a run that does not exist has no figures"
    );
}

/// Nested runs (a sweep's parent and its trials): the table marks a child
/// and counts a parent's children with the query that lists them; the run
/// page links both ways.
#[tokio::test]
async fn nested_runs_link_to_their_parent_and_count_their_children() {
    let server = TestServer::start().await;
    let parent = new_run(&server, "0", "sweep").await;
    let mut trials = Vec::new();
    for i in 0..3 {
        let trial = new_run(&server, "0", &format!("trial-{i}")).await;
        mlflow(
            &server,
            "runs/set-tag",
            json!({"run_id": trial, "key": "mlflow.parentRunId", "value": parent}),
        )
        .await;
        trials.push(trial);
    }
    // A deleted child is not counted.
    mlflow(&server, "runs/delete", json!({"run_id": trials[2]})).await;
    let page = server_fn(
        &server,
        "list_runs_page",
        json!({"experiment_id": 0, "query": "", "sort": null, "columns": null, "offset": 0}),
    )
    .await
    .json();
    let rows = page["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 3, "{page}");
    let row = |id: &str| rows.iter().find(|r| r["run_id"] == id).unwrap().clone();
    assert_eq!(row(&parent)["children"], 2);
    assert_eq!(row(&parent)["parent_run_id"], Value::Null);
    assert_eq!(row(&trials[0])["parent_run_id"], parent.as_str());
    assert_eq!(row(&trials[0])["children"], 0);
    // The query behind the parent's count lists exactly its children.
    let query = format!("tags.mlflow.parentRunId = '{parent}'");
    let children = server_fn(
        &server,
        "list_runs_page",
        json!({"experiment_id": 0, "query": query, "sort": null, "columns": null, "offset": 0}),
    )
    .await;
    assert_eq!(children.status, 200, "{}", children.body);
    assert_eq!(children.json()["total"], 2);
    let html = server.get("/experiments/0").await;
    assert!(
        html.body.contains(r#"data-testid="children-link""#),
        "{}",
        html.body
    );
    assert!(html.body.contains("+2"), "{}", html.body);
    assert!(html.body.contains(r#"data-testid="parent-link""#));

    let child = server
        .post_form("/api/get_run_detail", &format!("run_id={}", trials[0]))
        .await
        .json();
    assert_eq!(child["parent"]["run_id"], parent.as_str(), "{child}");
    assert_eq!(child["parent"]["name"], "sweep");
    let html = server
        .get(&format!("/experiments/0/runs/{}", trials[0]))
        .await;
    assert!(
        html.body.contains(r#"data-testid="run-parent""#),
        "{}",
        html.body
    );
    assert!(html.body.contains(&format!("/experiments/0/runs/{parent}")));
    let top = server
        .post_form("/api/get_run_detail", &format!("run_id={parent}"))
        .await
        .json();
    assert_eq!(top["children"], 2, "{top}");
    assert_eq!(top["parent"], Value::Null);
    let html = server.get(&format!("/experiments/0/runs/{parent}")).await;
    assert!(
        html.body.contains(r#"data-testid="run-children""#),
        "{}",
        html.body
    );
    assert!(html.body.contains("2 runs"), "{}", html.body);

    // The deleted trial is in the experiment's deleted runs, and comes back.
    let deleted = server_fn(
        &server,
        "list_runs_page",
        json!({"experiment_id": 0, "query": "", "sort": null, "columns": null, "offset": 0, "deleted": true}),
    )
    .await
    .json();
    assert_eq!(deleted["total"], 1, "{deleted}");
    assert_eq!(deleted["rows"][0]["run_id"], trials[2].as_str());
    let html = server.get("/experiments/0?deleted=1").await;
    assert!(html.body.contains("trial-2"), "{}", html.body);
    assert!(
        !html.body.contains("trial-1"),
        "only the deleted: {}",
        html.body
    );
    let gone = server
        .post_form("/api/get_run_detail", &format!("run_id={}", trials[2]))
        .await
        .json();
    assert_eq!(gone["may_restore"], true, "{gone}");
    assert_eq!(gone["may_change"], false);
    let restored = server
        .post_form("/api/restore_run_page", &format!("run_id={}", trials[2]))
        .await;
    assert!(restored.status < 400, "{}", restored.body);
    let back = common::run(&server, &trials[2]).await;
    assert_eq!(back["info"]["lifecycle_stage"], "active", "{back}");
    let top = server
        .post_form("/api/get_run_detail", &format!("run_id={parent}"))
        .await
        .json();
    assert_eq!(top["children"], 3, "counted again: {top}");
}

#[tokio::test]
async fn the_run_page_shows_facts_params_charts_and_artifacts() {
    let server = TestServer::start().await;
    let run = new_run(&server, "0", "baseline").await;
    mlflow(
        &server,
        "runs/log-batch",
        json!({
            "run_id": run,
            "params": [{"key": "optimizer", "value": "adam"}],
            "metrics": [
                {"key": "loss", "value": 0.5, "timestamp": 2_000, "step": 1},
                {"key": "accuracy", "value": 0.75, "timestamp": 2_000, "step": 1}
            ],
            "tags": [{"key": "note", "value": "first try"}],
        }),
    )
    .await;
    let put = request(
        server.addr,
        "PUT",
        &format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/model/weights.bin"),
        &[],
        b"0123456789",
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.body);

    let detail = server
        .post_form("/api/get_run_detail", &format!("run_id={run}"))
        .await;
    assert_eq!(detail.status, 200, "{}", detail.body);
    let detail = detail.json();
    assert_eq!(detail["name"], "baseline");
    assert_eq!(detail["params"], json!([["optimizer", "adam"]]));
    assert_eq!(
        detail["tags"],
        json!([["note", "first try"]]),
        "mlflow.* tags left out"
    );
    assert_eq!(detail["metrics"][0]["key"], "accuracy");
    assert_eq!(
        detail["artifacts"],
        json!([
            {"path": "model", "is_dir": true, "size": 0},
            {"path": "model/weights.bin", "is_dir": false, "size": 10}
        ])
    );

    // An artifact read in place: text whole or its start, not text, links refused.
    let preview = async |path: &str| {
        server
            .post_form(
                "/api/artifact_preview",
                &format!("run_id={run}&path={}", path.replace('/', "%2F")),
            )
            .await
    };
    let weights = preview("model/weights.bin").await;
    assert_eq!(weights.status, 200, "{}", weights.body);
    assert_eq!(
        weights.json(),
        json!({"text": "0123456789", "truncated": false, "size": 10})
    );
    let folder = server
        .data_dir
        .path()
        .join(format!("artifacts/0/{run}/artifacts"));
    std::fs::write(folder.join("blob.bin"), [0u8, 159, 146, 150]).unwrap();
    // One byte, then two-byte characters: the cut at 65,536 bytes falls
    // inside one, which goes.
    std::fs::write(folder.join("long.txt"), format!("a{}", "é".repeat(35_000))).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", folder.join("passwd")).unwrap();
    std::fs::write(folder.join("acc=95% best.txt"), "kept").unwrap();
    assert_eq!(preview("blob.bin").await.json()["text"], Value::Null);
    let long = preview("long.txt").await.json();
    assert_eq!(long["truncated"], true);
    assert_eq!(long["size"], 70_001);
    assert_eq!(long["text"].as_str().unwrap().chars().count(), 1 + 32_767);
    for refused in [
        "passwd",
        "../../../../../etc/passwd",
        "model",
        "model//weights.bin",
        "nope",
    ] {
        let answer = preview(refused).await;
        assert!(
            answer.status == 404 || answer.status == 400,
            "{refused}: {} {}",
            answer.status,
            answer.body
        );
        assert!(!answer.body.contains("root:"), "{refused}");
    }

    let html = server.get(&format!("/experiments/0/runs/{run}")).await;
    assert_eq!(html.status, 200);
    for expected in [
        "baseline",
        "optimizer",
        "first try",
        "weights.bin",
        &format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/model/weights.bin"),
        // Without JavaScript, each chart is the server's drawing.
        &format!("/api/trainyard/v1/chart?key=loss&amp;run={run}"),
        &format!("/api/trainyard/v1/chart?key=accuracy&amp;run={run}"),
    ] {
        assert!(html.body.contains(expected), "missing {expected}");
    }
    // A name with `%`, `=` or a space is linked encoded, and the link
    // downloads it.
    let odd =
        format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/acc%3D95%25%20best.txt");
    assert!(html.body.contains(&odd), "{}", html.body);
    let downloaded = server.get(&odd).await;
    assert_eq!(downloaded.status, 200, "{}", downloaded.body);
    assert_eq!(downloaded.body, "kept");

    let missing = server.post_form("/api/get_run_detail", "run_id=nope").await;
    assert_eq!(missing.status, 404);
}

#[tokio::test]
async fn charts_download_as_svg_and_png_with_groups() {
    let server = TestServer::start().await;
    let mut runs = Vec::new();
    for (i, lr) in ["0.1", "0.1", "0.01"].iter().enumerate() {
        let run = new_run(&server, "0", &format!("r{i}")).await;
        let metrics: Vec<Value> = (0..50)
            .map(|step| json!({"key": "loss", "value": 1.0 / (step + 1 + i) as f64, "timestamp": 1_000 + step, "step": step}))
            .collect();
        mlflow(
            &server,
            "runs/log-batch",
            json!({"run_id": run, "metrics": metrics, "params": [{"key": "lr", "value": lr}]}),
        )
        .await;
        runs.push(run);
    }
    let runs_query: String = runs.iter().map(|r| format!("&run={r}")).collect();

    let svg = server
        .get(&format!(
            "/api/trainyard/v1/chart?key=loss{runs_query}&format=svg"
        ))
        .await;
    assert_eq!(svg.status, 200, "{}", svg.body);
    assert_eq!(svg.header("content-type"), Some("image/svg+xml"));
    assert_eq!(svg.body.matches("<polyline").count(), 3, "a line per run");
    assert!(svg.body.contains("r2"), "the legend names the runs");

    let grouped = server
        .get(&format!(
            "/api/trainyard/v1/chart?key=loss{runs_query}&group=params.lr&log=1&smooth=0.5"
        ))
        .await;
    assert_eq!(grouped.status, 200, "{}", grouped.body);
    assert_eq!(
        grouped.body.matches("<polyline").count(),
        4,
        "two groups, each raw (faint) and smoothed"
    );
    assert!(grouped.body.contains("lr=0.1 (2)"));

    let png = server
        .get(&format!(
            "/api/trainyard/v1/chart?key=loss{runs_query}&format=png&width=400&height=200"
        ))
        .await;
    assert_eq!(png.status, 200);
    assert_eq!(png.header("content-type"), Some("image/png"));
    assert!(png.body.contains("PNG") && png.body.contains("IHDR"));

    for bad in [
        "/api/trainyard/v1/chart?key=loss",
        &format!("/api/trainyard/v1/chart?key=loss{runs_query}&format=gif"),
        &format!("/api/trainyard/v1/chart?key=loss{runs_query}&width=0"),
    ] {
        let answer = server.get(bad).await;
        assert_eq!(answer.status, 400, "{bad}: {}", answer.body);
    }
    let unknown = server
        .get("/api/trainyard/v1/chart?key=loss&run=nope")
        .await;
    assert_eq!(unknown.status, 404);
}

/// Reads a server-sent event stream until `count` events came.
async fn read_events(stream: &mut tokio::net::TcpStream, seen: &mut String, count: usize) {
    let mut buf = [0u8; 4096];
    while seen.matches("event: run").count() < count {
        let n = tokio::time::timeout(Duration::from_secs(30), stream.read(&mut buf))
            .await
            .expect("an event within 30 s")
            .unwrap();
        if n == 0 {
            break;
        }
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
}

#[tokio::test]
async fn a_live_run_pushes_its_changes_until_it_ends() {
    let server = TestServer::start().await;
    let run = new_run(&server, "0", "live").await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "GET /api/trainyard/v1/runs/{run}/events HTTP/1.1\r\nHost: {}\r\nAccept: text/event-stream\r\n\r\n",
        server.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut seen = String::new();
    read_events(&mut stream, &mut seen, 1).await;
    assert!(seen.contains("data: RUNNING 0"), "{seen}");

    mlflow(
        &server,
        "runs/log-batch",
        json!({"run_id": run, "metrics": [{"key": "loss", "value": 1.0, "timestamp": 2_000, "step": 0}]}),
    )
    .await;
    read_events(&mut stream, &mut seen, 2).await;
    assert!(seen.contains("data: RUNNING 1"), "{seen}");

    mlflow(
        &server,
        "runs/update",
        json!({"run_id": run, "status": "FINISHED", "end_time": 3_000}),
    )
    .await;
    read_events(&mut stream, &mut seen, 3).await;
    assert!(seen.contains("data: FINISHED 1"), "{seen}");
}

/// Prompts live in the registry (MLflow's `register_prompt`) but are not
/// models: the Models page leaves them and their versions out.
#[tokio::test]
async fn the_models_page_leaves_prompts_out() {
    let server = TestServer::start().await;
    for (name, tags) in [
        ("classifier", json!([])),
        (
            "summarize",
            json!([{"key": "mlflow.prompt.is_prompt", "value": "true"}]),
        ),
    ] {
        mlflow(
            &server,
            "registered-models/create",
            json!({"name": name, "tags": tags}),
        )
        .await;
    }
    mlflow(
        &server,
        "model-versions/create",
        json!({"name": "classifier", "source": "s3://models/classifier/1"}),
    )
    .await;
    mlflow(
        &server,
        "model-versions/create",
        json!({"name": "summarize", "source": "dummy-source",
               "tags": [{"key": "mlflow.prompt.is_prompt", "value": "true"}]}),
    )
    .await;
    let view = server.post_form("/api/get_models", "").await;
    assert_eq!(view.status, 200, "{}", view.body);
    let view = view.json();
    let names: Vec<&str> = view["registered"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["classifier"], "{view}");
    let versions: Vec<&str> = view["versions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["name"].as_str().unwrap())
        .collect();
    assert_eq!(versions, ["classifier"], "{view}");
}

/// A dataset's page is under an experiment it was added to, and not found
/// under another.
#[tokio::test]
async fn a_dataset_page_is_found_only_under_its_experiments() {
    let server = TestServer::start().await;
    let other = server
        .post_form("/api/create_experiment", "name=elsewhere")
        .await
        .json()
        .as_i64()
        .unwrap();
    let made = post_json(
        server.addr,
        "/api/3.0/mlflow/datasets/create",
        &json!({"name": "questions", "experiment_ids": ["0"]}),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let id = made.json()["dataset"]["dataset_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let page = server.get(&format!("/experiments/0/datasets/{id}")).await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(page.body.contains("questions"));
    let page = server
        .get(&format!("/experiments/{other}/datasets/{id}"))
        .await;
    assert_eq!(page.status, 404, "{}", page.body);
    assert!(
        page.body.contains("not in the experiment elsewhere"),
        "{}",
        page.body
    );
}

/// A trace's page is under its own experiment, and not found under
/// another (whose breadcrumbs it would otherwise have borrowed).
#[tokio::test]
async fn a_trace_page_is_found_only_under_its_experiment() {
    let server = TestServer::start().await;
    let made = post_json(
        server.addr,
        "/api/2.0/mlflow/experiments/create",
        &json!({"name": "traced"}),
    )
    .await;
    let exp = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let trace = post_json(
        server.addr,
        "/api/3.0/mlflow/traces",
        &json!({"trace": {"trace_info": {
            "trace_id": "tr-placed",
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
            "request_time": "2026-12-05T10:00:00.000Z",
            "state": "OK",
        }}}),
    )
    .await;
    assert_eq!(trace.status, 200, "{}", trace.body);
    let page = server
        .get(&format!("/experiments/{exp}/traces/tr-placed"))
        .await;
    assert_eq!(page.status, 200, "{}", page.body);
    let page = server.get("/experiments/0/traces/tr-placed").await;
    assert_eq!(page.status, 404, "{}", page.body);
    assert!(
        page.body.contains(&format!("it is in experiment {exp}")),
        "{}",
        page.body
    );
}

/// The runs table as CSV: every metric and param by default, the table's
/// columns, filter and order when given; every digit logged, names quoted,
/// formulas defused, and a wrong parameter named.
#[tokio::test]
async fn the_runs_table_downloads_as_csv() {
    let server = TestServer::start().await;
    let experiment =
        mlflow(&server, "experiments/create", json!({"name": "csv"})).await["experiment_id"]
            .as_str()
            .unwrap()
            .to_owned();
    let mut ids = Vec::new();
    for (name, lr, loss) in [("a, the first", "0.1", 0.123456789), ("=b", "0.01", 0.5)] {
        let run = new_run(&server, &experiment, name).await;
        mlflow(
            &server,
            "runs/log-batch",
            json!({
                "run_id": run,
                "params": [{"key": "lr", "value": lr}],
                "metrics": [{"key": "loss", "value": loss, "timestamp": 2_000, "step": 0}],
            }),
        )
        .await;
        ids.push(run);
    }
    mlflow(
        &server,
        "runs/update",
        json!({"run_id": ids[0], "status": "FINISHED", "end_time": 3_500}),
    )
    .await;
    let csv = |query: &str| {
        let path = format!("/api/trainyard/v1/experiments/{experiment}/runs.csv{query}");
        let server = &server;
        async move { server.get(&path).await }
    };
    let all = csv("?sort=metrics.loss").await;
    assert_eq!(all.status, 200, "{}", all.body);
    let lines: Vec<&str> = all.body.lines().collect();
    assert_eq!(
        lines[0],
        "run_id,name,status,user,start_time,end_time,duration_s,metrics.loss,params.lr"
    );
    assert_eq!(lines.len(), 3, "{}", all.body);
    assert!(
        lines[1].starts_with(&format!("{},\"a, the first\",FINISHED,", ids[0])),
        "{}",
        lines[1]
    );
    assert!(
        lines[1].ends_with(",2.500,0.123456789,0.1"),
        "every digit logged: {}",
        lines[1]
    );
    assert!(
        lines[2].starts_with(&format!("{},'=b,RUNNING,", ids[1])),
        "a formula is defused: {}",
        lines[2]
    );
    assert!(lines[2].ends_with(",,0.5,0.01"), "{}", lines[2]);

    // The table's filter and columns.
    let chosen = csv("?q=params.lr%20%3D%20%270.01%27&col=params.lr&sel=x").await;
    assert_eq!(chosen.status, 200, "{}", chosen.body);
    let lines: Vec<&str> = chosen.body.lines().collect();
    assert_eq!(lines.len(), 2, "{}", chosen.body);
    assert!(lines[0].ends_with(",duration_s,params.lr"), "{}", lines[0]);
    assert!(lines[1].ends_with(",0.01"), "{}", lines[1]);

    let wrong = csv("?colour=red").await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    assert!(wrong.body.contains("`colour`"), "{}", wrong.body);
    let query = csv("?q=metrics.loss%20%3E%3E%201").await;
    assert_eq!(query.status, 400, "{}", query.body);
    assert_eq!(csv("?").await.status, 200);
    let none = server
        .get("/api/trainyard/v1/experiments/999999/runs.csv")
        .await;
    assert_eq!(none.status, 404, "{}", none.body);
}
