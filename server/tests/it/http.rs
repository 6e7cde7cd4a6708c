//! The real server on port 0: pages, server functions and operations endpoints,
//! on SQLite (and on PostgreSQL when TEST_DATABASE_URL is set).

use crate::common;

use common::TestServer;

#[tokio::test]
async fn health_and_readiness() {
    let server = TestServer::start().await;
    let health = server.get("/healthz").await;
    assert_eq!(health.status, 200);
    assert_eq!(health.body, "ok\n");

    let ready = server.get("/readyz").await;
    assert_eq!(ready.status, 200, "{}", ready.body);
    let ready = ready.json();
    assert_eq!(ready["status"], "ready");
    let engine = if server.db.is_postgres() {
        "postgres"
    } else {
        "sqlite"
    };
    assert_eq!(ready["database"], engine);
}

#[tokio::test]
async fn home_page_is_rendered_on_the_server_with_live_figures() {
    let server = TestServer::start().await;
    let page = server.get("/").await;
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    for text in [
        "Trainyard",
        "Experiments",
        "Jobs",
        "Templates",
        "Admin",
        "Overview",
    ] {
        assert!(page.body.contains(text), "the page lacks {text}");
    }
    assert!(page.body.contains(r#"data-testid="figure-experiments""#));
    assert!(
        page.body.contains("/pkg/trainyard.js"),
        "the page loads the wasm bundle"
    );
}

#[tokio::test]
async fn server_functions_round_trip_to_the_database() {
    let server = TestServer::start().await;
    let before = server.post_form("/api/get_overview", "").await;
    assert_eq!(before.status, 200, "{}", before.body);
    assert_eq!(
        before.json()["experiments"],
        1,
        "MLflow's Default experiment"
    );

    let created = server
        .post_form("/api/create_experiment", "name=resnet%20sweep")
        .await;
    assert_eq!(created.status, 200, "{}", created.body);
    assert!(created.json().as_i64().unwrap() > 0);

    let after = server.post_form("/api/get_overview", "").await.json();
    assert_eq!(after["experiments"], 2);
    let list = server.post_form("/api/list_experiments", "").await.json();
    assert_eq!(list[0]["name"], "resnet sweep");
    assert_eq!(list[0]["runs"], 0);

    let page = server.get("/experiments").await;
    assert!(
        page.body.contains("resnet sweep"),
        "the list is rendered on the server"
    );
}

#[tokio::test]
async fn bad_input_to_a_server_function_names_the_field() {
    let server = TestServer::start().await;
    let empty = server
        .post_form("/api/create_experiment", "name=%20%20")
        .await;
    assert_eq!(empty.status, 400, "{}", empty.body);
    let error = empty.json();
    assert_eq!(error["Invalid"]["field"], "name", "{error}");

    server.post_form("/api/create_experiment", "name=dup").await;
    let dup = server
        .post_form("/api/create_experiment", "name=dup")
        .await
        .json();
    assert!(
        dup["Conflict"]
            .as_str()
            .unwrap()
            .contains("`dup` already exists"),
        "{dup}"
    );

    let long = format!("name={}", "x".repeat(501));
    let long = server
        .post_form("/api/create_experiment", &long)
        .await
        .json();
    assert_eq!(long["Invalid"]["field"], "name");
    let list = server.post_form("/api/list_experiments", "").await.json();
    let names: Vec<&str> = list
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| e["name"].as_str())
        .collect();
    assert_eq!(
        names,
        ["dup", "Default"],
        "nothing but the first `dup` was stored"
    );

    // Whatever way a function refuses, its status says what the error is.
    for (path, form, status, variant) in [
        (
            "/api/create_team",
            "name=%20&quota_gpus=&share=",
            400,
            "Fields",
        ),
        (
            "/api/create_team",
            "name=x&quota_gpus=1.5&share=",
            400,
            "Fields",
        ),
        ("/api/revoke_token", "id=424242", 404, "NotFound"),
    ] {
        let refused = server.post_form(path, form).await;
        assert_eq!(refused.status, status, "{path} {form}: {}", refused.body);
        assert!(
            refused.json().get(variant).is_some(),
            "{path} {form}: {}",
            refused.body
        );
    }
}

#[tokio::test]
async fn unknown_pages_get_a_404_page() {
    let server = TestServer::start().await;
    let page = server.get("/no/such/page").await;
    assert_eq!(page.status, 404);
    assert!(page.body.contains("Page not found"));
    assert!(
        page.body.contains("Experiments"),
        "the 404 keeps the navigation"
    );
    // A page of something that is not there says so in its status too,
    // whatever its id's characters; the pages that are there answer 200.
    for path in [
        "/jobs/99999",
        "/jobs/abc",
        "/experiments/99999",
        "/experiments/abc",
        "/experiments/0/runs/0123456789abcdef0123456789abcdef",
        "/experiments/99999/traces",
        "/experiments/0/traces/tr-0123456789abcdef0123456789abcdef",
        "/experiments/99999/datasets",
        "/experiments/0/datasets/d-0123456789abcdef0123456789abcdef",
        "/experiments/99999/scorers",
        "/templates/no-such-template/edit",
        "/admin/gpus/no-such-node",
    ] {
        let page = server.get(path).await;
        assert_eq!(page.status, 404, "{path}: {}", page.body);
        assert!(page.body.contains("Experiments"), "{path}: a whole page");
    }
    for path in [
        "/experiments/0",
        "/experiments/0/traces",
        "/experiments/0/datasets",
        "/experiments/0/scorers",
        "/templates/new",
    ] {
        let page = server.get(path).await;
        assert_eq!(page.status, 200, "{path}: {}", page.body);
    }
}

/// A path or query that does not parse, on Trainyard's own API, is refused
/// in JSON as its other errors are, with axum's words.
#[tokio::test]
async fn the_jobs_api_refuses_what_does_not_parse_in_json() {
    let server = TestServer::start().await;
    for (path, says) in [
        ("/api/trainyard/v1/jobs/abc", "abc"),
        ("/api/trainyard/v1/jobs?limit=-1", "limit"),
    ] {
        let refused = server.get(path).await;
        assert_eq!(refused.status, 400, "{path}: {}", refused.body);
        assert_eq!(
            refused.header("content-type"),
            Some("application/json"),
            "{path}"
        );
        let body = refused.json();
        assert_eq!(body["error_code"], "INVALID_PARAMETER_VALUE", "{path}");
        assert!(
            body["message"].as_str().unwrap().contains(says),
            "{path}: {body}"
        );
    }
}

#[tokio::test]
async fn metrics_count_requests_by_route_and_status() {
    let server = TestServer::start().await;
    server.get("/healthz").await;
    server.get("/healthz").await;
    server.get("/nowhere").await;
    server.get("/experiments").await;
    let metrics = server.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    assert!(
        metrics
            .header("content-type")
            .unwrap()
            .contains("openmetrics-text")
    );
    let text = metrics.body;
    assert!(
        text.contains(
            r#"trainyard_http_requests_total{method="GET",route="/healthz",status="200"} 2"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"trainyard_http_requests_total{method="GET",route="fallback",status="404"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(
            r#"trainyard_http_requests_total{method="GET",route="/experiments",status="200"} 1"#
        ),
        "{text}"
    );
    assert!(
        text.contains(r#"trainyard_http_request_duration_seconds_bucket{le="#)
            || text.contains("trainyard_http_request_duration_seconds_bucket{method=")
    );
    assert!(text.contains(r#"trainyard_db_pool_connections{state="open"}"#));
    assert!(text.contains("trainyard_db_pool_max_connections 8"));
}

#[tokio::test]
async fn series_are_downsampled_on_the_server_with_min_max_bands() {
    let server = TestServer::start().await;
    let json_post = |path: &'static str, body: serde_json::Value| {
        let addr = server.addr;
        async move { common::post_json(addr, path, &body).await }
    };
    let run = json_post(
        "/api/2.0/mlflow/runs/create",
        serde_json::json!({"experiment_id": "0", "start_time": 1_000}),
    )
    .await
    .json();
    let run_id = run["run"]["info"]["run_id"].as_str().unwrap().to_owned();
    for chunk in 0..5 {
        let metrics: Vec<_> = (chunk * 1000..(chunk + 1) * 1000)
            .map(|step| {
                let value = if step == 2_500 { 100.0 } else { (step % 7) as f64 };
                serde_json::json!({"key": "loss", "value": value, "timestamp": 1_000 + step * 10, "step": step})
            })
            .collect();
        let logged = json_post(
            "/api/2.0/mlflow/runs/log-batch",
            serde_json::json!({"run_id": run_id, "metrics": metrics}),
        )
        .await;
        assert_eq!(logged.status, 200, "{}", logged.body);
    }
    let answer = json_post(
        "/api/trainyard/v1/series",
        serde_json::json!({"run_ids": [run_id], "keys": ["loss"], "points": 100}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let series = &answer.json()["series"][0];
    assert_eq!(series["total_points"], 5000);
    assert_eq!(series["x"].as_array().unwrap().len(), 100);
    let max: f64 = series["max"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v.as_f64())
        .fold(0.0, f64::max);
    assert_eq!(
        max, 100.0,
        "the spike survives downsampling in the max band"
    );

    // A zoomed range on relative time gets the full budget for that range.
    let zoom = json_post(
        "/api/trainyard/v1/series",
        serde_json::json!({"run_ids": [run_id], "keys": ["loss"], "points": 50, "x_axis": "relative", "x_min": 0, "x_max": 990}),
    )
    .await
    .json();
    let zoom = &zoom["series"][0];
    assert_eq!(zoom["in_range"], 100);
    assert_eq!(zoom["x"].as_array().unwrap().len(), 50);
    assert_eq!(
        zoom["x"][0], 5.0,
        "relative x: ms since the run started, bucket means"
    );

    let refused = json_post(
        "/api/trainyard/v1/series",
        serde_json::json!({"run_ids": [run_id], "keys": ["loss"], "points": 5000}),
    )
    .await;
    assert_eq!(refused.status, 400);
    assert!(
        refused.json()["message"]
            .as_str()
            .unwrap()
            .contains("points")
    );
}

#[tokio::test]
async fn api_requests_are_authenticated_in_one_place() {
    let server = TestServer::start().await;
    let path = "/api/2.0/mlflow/experiments/get?experiment_id=0";
    let anonymous = server.get(path).await;
    assert_eq!(
        anonymous.status, 200,
        "loopback callers need no credentials yet"
    );
    for auth in ["Bearer not-a-token", "Basic dXNlcjpwYXNz"] {
        let refused =
            common::request(server.addr, "GET", path, &[("Authorization", auth)], b"").await;
        assert_eq!(refused.status, 401, "{auth}");
        assert_eq!(refused.json()["error_code"], "UNAUTHENTICATED");
    }
    let series = common::request(
        server.addr,
        "POST",
        "/api/trainyard/v1/series",
        &[
            ("Authorization", "Bearer x"),
            ("Content-Type", "application/json"),
        ],
        b"{}",
    )
    .await;
    assert_eq!(series.status, 401, "the native API passes the same gate");
}

#[tokio::test]
async fn the_series_endpoint_answers_bad_input_in_mlflow_form() {
    let server = TestServer::start().await;
    let broken = common::request(
        server.addr,
        "POST",
        "/api/trainyard/v1/series",
        &[("Content-Type", "application/json")],
        b"{\"run_ids\": 5",
    )
    .await;
    assert_eq!(broken.status, 400);
    assert_eq!(broken.json()["error_code"], "MALFORMED_REQUEST");
    let wrong = common::post_json(
        server.addr,
        "/api/trainyard/v1/series",
        &serde_json::json!({"run_ids": "not-a-list", "keys": ["loss"]}),
    )
    .await;
    assert_eq!(wrong.status, 400);
    assert_eq!(wrong.json()["error_code"], "INVALID_PARAMETER_VALUE");
}

/// Pages render while other servers of the same process start. Leptos
/// parks, for good, every resource first polled while a route list is
/// walked (a process-wide flag), so a server walks it once per process;
/// and the shell reads the caller in one suspense boundary only. Either
/// fault hung a page now and then, without a byte of answer.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pages_render_while_other_servers_of_the_process_start() {
    let server = std::sync::Arc::new(TestServer::start().await);
    let starting = tokio::spawn(async {
        for _ in 0..16 {
            drop(TestServer::start().await);
        }
    });
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut readers = Vec::new();
    for reader in 0..3 {
        let server = server.clone();
        let done = done.clone();
        let path = ["/experiments", "/", "/jobs"][reader % 3];
        readers.push(tokio::spawn(async move {
            let mut pages = 0;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                let page =
                    tokio::time::timeout(std::time::Duration::from_secs(30), server.get(path))
                        .await
                        .unwrap_or_else(|_| panic!("{path} stalled after {pages} pages"));
                assert_eq!(page.status, 200);
                pages += 1;
            }
        }));
    }
    starting.await.unwrap();
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    for reader in readers {
        reader.await.unwrap();
    }
}

/// Linking a trace to the prompt versions it used: each bad one is named
/// by its place; a link made twice is one; the trace must exist.
#[tokio::test]
async fn bad_prompt_links_are_refused_naming_the_field() {
    use serde_json::json;
    let server = TestServer::start().await;
    let made = common::post_json(
        server.addr,
        "/api/2.0/mlflow/experiments/create",
        &json!({"name": "prompted"}),
    )
    .await;
    let exp = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let trace = common::post_json(
        server.addr,
        "/api/3.0/mlflow/traces",
        &json!({"trace": {"trace_info": {
            "trace_id": "tr-prompted",
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
            "request_time": "2026-12-05T10:00:00.000Z",
            "state": "OK",
        }}}),
    )
    .await;
    assert_eq!(trace.status, 200, "{}", trace.body);
    // No previews given: none written, as MLflow writes none (the client
    // reads None, not '').
    let info = &trace.json()["trace"]["trace_info"];
    assert!(
        info.get("request_preview").is_none() && info.get("response_preview").is_none(),
        "{info}"
    );
    let path = "/api/2.0/mlflow/traces/link-prompts";
    let link = |versions: serde_json::Value| json!({"trace_id": "tr-prompted", "prompt_versions": versions});
    let many: Vec<_> = (0..101)
        .map(|i| json!({"name": "p", "version": i.to_string()}))
        .collect();
    for (body, says) in [
        (json!({"prompt_versions": []}), "'trace_id'"),
        (link(json!([{"version": "1"}])), "prompt_versions[0].name"),
        (
            link(json!([{"name": "a", "version": "1"}, {"name": "a/b", "version": "1"}])),
            "prompt_versions[1].name",
        ),
        (
            link(json!([{"name": "a", "version": "one"}])),
            "prompt_versions[0].version",
        ),
        (link(json!([{"name": "a"}])), "prompt_versions[0].version"),
        (link(json!(many)), "at most 100"),
    ] {
        let refused = common::post_json(server.addr, path, &body).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
    }
    let unknown = common::post_json(
        server.addr,
        path,
        &json!({"trace_id": "tr-nothing", "prompt_versions": [{"name": "a", "version": "1"}]}),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    for _ in 0..2 {
        let linked = common::post_json(
            server.addr,
            path,
            &link(json!([{"name": "greet", "version": 2}, {"name": "greet", "version": "2"}])),
        )
        .await;
        assert_eq!(linked.status, 200, "{}", linked.body);
    }
    let found = common::post_json(
        server.addr,
        "/api/3.0/mlflow/traces/search",
        &json!({"locations": [{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}}], "filter": "prompt = 'greet/2'"}),
    )
    .await;
    assert_eq!(found.status, 200, "{}", found.body);
    assert_eq!(
        found.json()["traces"].as_array().map(Vec::len),
        Some(1),
        "{}",
        found.body
    );
}

/// Registered scorers: what is wrong is named, and what would run in the
/// process of whoever loads a scorer (custom code, a judge's requests sent
/// to a host of the writer's choosing) is refused as MLflow refuses it.
#[tokio::test]
async fn bad_scorers_are_refused_naming_what_is_wrong() {
    use serde_json::json;
    let server = TestServer::start().await;
    let register = "/api/3.0/mlflow/scorers/register";
    let judge = |data: serde_json::Value| json!({"experiment_id": "0", "name": "j", "serialized_scorer": data.to_string()});
    for (body, says) in [
        (
            json!({"name": "j", "serialized_scorer": "{}"}),
            "'experiment_id'",
        ),
        (
            json!({"experiment_id": "0", "serialized_scorer": "{}"}),
            "'name'",
        ),
        (
            json!({"experiment_id": "0", "name": "j"}),
            "'serialized_scorer'",
        ),
        (
            json!({"experiment_id": "0", "name": " ", "serialized_scorer": "{}"}),
            "Scorer name cannot be empty",
        ),
        (
            json!({"experiment_id": "0", "name": "j".repeat(257), "serialized_scorer": "{}"}),
            "longer than 256",
        ),
        (
            json!({"experiment_id": "zero", "name": "j", "serialized_scorer": "{}"}),
            "Invalid experiment ID 'zero'",
        ),
        (
            json!({"experiment_id": "0", "name": "j", "serialized_scorer": "{"}),
            "serialized_scorer must be valid JSON",
        ),
        (
            json!({"experiment_id": "0", "name": "j", "serialized_scorer": "[1]"}),
            "must be a JSON object",
        ),
        (
            json!({"experiment_id": "0", "name": "j", "serialized_scorer": "x".repeat(300_000)}),
            "at most 256 KiB",
        ),
        (
            judge(json!({"name": "j", "call_source": "import os"})),
            "@scorer",
        ),
        (
            judge(json!({"ensemble_scorer_data": {"scorers": [{"call_source": "1"}]}})),
            "@scorer",
        ),
        (
            judge(
                json!({"third_party_scorer_data": {"model": "openai:/gpt-4o",
                "kwargs": {"completion_kwargs": [["api_base", "http://evil"]]}}}),
            ),
            "must not contain 'api_base'",
        ),
        (
            judge(json!({"third_party_scorer_data": {"kwargs": [1]}})),
            "kwargs must be a JSON object",
        ),
        // The client builds `builtin_scorers.<class>(**fields)` as it loads
        // a scorer: a function of that module that takes a base URL would
        // send the reader's API key to the writer's host.
        (
            judge(json!({"builtin_scorer_class": "invoke_judge_model",
                "builtin_scorer_pydantic_data": {"model_uri": "openai:/gpt-4o-mini", "prompt": "hi",
                    "assessment_name": "a"}})),
            "'invoke_judge_model' is not one of MLflow's built-in scorers",
        ),
        (
            judge(json!({"ensemble_scorer_data": {"scorers": [{"builtin_scorer_class": 7}]}})),
            "'7' is not one of",
        ),
        (
            judge(json!({"builtin_scorer_class": "Guidelines",
                "builtin_scorer_pydantic_data": {"guidelines": ["x"], "base_url": "http://evil/v1",
                    "extra_headers": {"Authorization": "Bearer writer"}, "api_key": null}})),
            "must not contain 'base_url', 'extra_headers'",
        ),
        (
            judge(
                json!({"instructions_judge_pydantic_data": {"instructions": "ok?", "model": "openai:/gpt-4o",
                "inference_params": {"api_base": "http://evil", "custom_llm_provider": "openai"}}}),
            ),
            "must not contain 'api_base', 'custom_llm_provider'",
        ),
        (
            judge(json!({"instructions_judge_pydantic_data": {"model": "gateway:/chat"}})),
            "no AI gateway",
        ),
        (
            judge(json!({"builtin_scorer_pydantic_data": {"model": 3}})),
            "Scorer model must be a string",
        ),
    ] {
        let refused = common::post_json(server.addr, register, &body).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.json()["error_code"], "INVALID_PARAMETER_VALUE");
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
    }
    let list = common::request(
        server.addr,
        "GET",
        "/api/3.0/mlflow/scorers/list?experiment_id=0",
        &[],
        b"",
    )
    .await;
    assert_eq!(
        list.json()["scorers"],
        json!([]),
        "nothing refused was kept"
    );
    let unknown = common::post_json(
        server.addr,
        register,
        &json!({"experiment_id": "4242", "name": "j", "serialized_scorer": "{}"}),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    let made = common::post_json(server.addr, register, &judge(json!({"name": "j"}))).await;
    assert_eq!(made.status, 200, "{}", made.body);
    let config = "/api/3.0/mlflow/scorers/online-config";
    for (body, says) in [
        (json!({"experiment_id": "0", "name": "j"}), "'sample_rate'"),
        (
            json!({"experiment_id": "0", "name": "j", "sample_rate": 1.5}),
            "between 0.0 and 1.0, got 1.5",
        ),
        (
            json!({"experiment_id": "0", "name": "j", "sample_rate": "often"}),
            "sample_rate must be a number",
        ),
        (
            json!({"experiment_id": "0", "name": "j", "sample_rate": 0, "filter_string": 3}),
            "'filter_string'",
        ),
        (
            json!({"experiment_id": "0", "name": "j", "sample_rate": 0, "filter_string": "colour = 'red'"}),
            "Invalid filter_string",
        ),
        (
            json!({"experiment_id": "0", "name": "j", "sample_rate": 0.5}),
            "no AI gateway",
        ),
    ] {
        let refused = common::request(
            server.addr,
            "PUT",
            config,
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        )
        .await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
    }
    let stopped = common::request(
        server.addr,
        "PUT",
        config,
        &[("Content-Type", "application/json")],
        json!({"experiment_id": "0", "name": "j", "sample_rate": "0"})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(stopped.status, 200, "{}", stopped.body);
    assert_eq!(stopped.json()["config"]["sample_rate"], 0.0);
    for path in [
        "/api/3.0/mlflow/scorers/get?experiment_id=0&name=j&version=0",
        "/api/3.0/mlflow/scorers/get?experiment_id=0&name=j&version=two",
        "/api/3.0/mlflow/scorers/online-configs",
    ] {
        let refused = common::request(server.addr, "GET", path, &[], b"").await;
        assert_eq!(refused.status, 400, "{path}: {}", refused.body);
    }
    // Scorers of a deleted experiment are neither read nor written, as in
    // MLflow.
    let gone = common::post_json(
        server.addr,
        "/api/2.0/mlflow/experiments/create",
        &json!({"name": "to delete"}),
    )
    .await;
    let gone = gone.json()["experiment_id"].as_str().unwrap().to_owned();
    let kept = common::post_json(
        server.addr,
        register,
        &json!({"experiment_id": gone, "name": "j", "serialized_scorer": "{}"}),
    )
    .await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    let deleted = common::post_json(
        server.addr,
        "/api/2.0/mlflow/experiments/delete",
        &json!({"experiment_id": gone}),
    )
    .await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    for path in [
        format!("/api/3.0/mlflow/scorers/get?experiment_id={gone}&name=j"),
        format!("/api/3.0/mlflow/scorers/versions?experiment_id={gone}&name=j"),
        format!("/api/3.0/mlflow/scorers/list?experiment_id={gone}"),
    ] {
        let refused = common::request(server.addr, "GET", &path, &[], b"").await;
        assert_eq!(refused.status, 400, "{path}: {}", refused.body);
        assert!(refused.body.contains("'active' state"), "{}", refused.body);
    }

    let missing = common::request(
        server.addr,
        "GET",
        "/api/3.0/mlflow/scorers/get?experiment_id=0&name=j&version=9",
        &[],
        b"",
    )
    .await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert!(missing.body.contains("version 9"), "{}", missing.body);
}

/// Evaluation datasets: what is wrong with a request is named (the field,
/// the record's place), nothing of a refused merge is kept, and a merge may
/// be larger than other MLflow requests, up to its own bound.
#[tokio::test]
async fn bad_evaluation_datasets_are_refused_naming_the_field() {
    use serde_json::json;
    let server = TestServer::start().await;
    let create = "/api/3.0/mlflow/datasets/create";
    for (body, says) in [
        (json!({}), "'name'"),
        (json!({"name": "x".repeat(256)}), "255"),
        (json!({"name": "a\u{0}b"}), "NUL"),
        (
            json!({"name": "q", "tags": "[1]"}),
            "'tags' must be a JSON object",
        ),
        (
            json!({"name": "q", "experiment_ids": ["one"]}),
            "Invalid experiment ID 'one'",
        ),
    ] {
        let refused = common::post_json(server.addr, create, &body).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
    }
    let unknown = common::post_json(
        server.addr,
        create,
        &json!({"name": "q", "experiment_ids": ["4242"]}),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);

    let made = common::post_json(server.addr, create, &json!({"name": "questions"})).await;
    assert_eq!(made.status, 200, "{}", made.body);
    let id = made.json()["dataset"]["dataset_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let records = format!("/api/3.0/mlflow/datasets/{id}/records");
    let merge = |list: serde_json::Value| json!({"records": list.to_string()});
    for (body, says) in [
        (json!({}), "'records'"),
        (json!({"records": "[{"}), "'records' is not valid JSON"),
        (
            json!({"records": "{}"}),
            "expected a JSON list of record objects",
        ),
        (
            json!({"records": "[{\"inputs\": {}}, 0, 0]"}),
            "records[1] must be a JSON object",
        ),
        (
            merge(json!([{"inputs": {"q": 1}}, {"outputs": 2}])),
            "records[1].inputs",
        ),
        (
            merge(json!([{"inputs": {"q": 1}, "expectations": [1]}])),
            "records[0].expectations",
        ),
        (
            merge(json!([{"inputs": {"q": 1}, "source": {"source_type": "ROBOT"}}])),
            "records[0].source.source_type",
        ),
        (merge(json!([{"inputs": {"q": "a\u{0}"}}])), "NUL"),
        (
            merge(json!([{"inputs": {"q": "x".repeat((1 << 20) + 1)}}])),
            "more than the 1048576 one record may hold",
        ),
    ] {
        let refused = common::post_json(server.addr, &records, &body).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.json()["error_code"], "INVALID_PARAMETER_VALUE");
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
    }
    // A bad record late in the list keeps the good ones before it out too.
    let page = common::request(server.addr, "GET", &records, &[], b"").await;
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(page.json()["records"], "[]");

    // A merge larger than other requests' 4 MiB goes in whole; one past
    // its own bound is refused, saying the bound.
    let big: Vec<_> = (0..50)
        .map(|i| json!({"inputs": {"i": i, "context": "c".repeat(100_000)}}))
        .collect();
    let body = merge(json!(big));
    assert!(body.to_string().len() > 4 << 20);
    let merged = common::post_json(server.addr, &records, &body).await;
    assert_eq!(merged.status, 200, "{}", merged.body);
    assert_eq!(merged.json()["inserted_count"], 50);
    // Just past the bound: the server reads it all before it answers (a
    // body far past it is cut off unread, and the client's write fails).
    let too_large = common::post_json(
        server.addr,
        &records,
        &json!({"records": "c".repeat(32 << 20)}),
    )
    .await;
    assert_eq!(too_large.status, 413, "{}", too_large.body);
    assert!(
        too_large.body.contains(&(32 << 20).to_string()),
        "{}",
        too_large.body
    );

    // Pages hold at most what was asked; their token goes on; a bad one is named.
    let first = common::request(
        server.addr,
        "GET",
        &format!("{records}?max_results=20"),
        &[],
        b"",
    )
    .await;
    let list: Vec<serde_json::Value> =
        serde_json::from_str(first.json()["records"].as_str().unwrap()).unwrap();
    assert_eq!(list.len(), 20);
    assert_eq!(list[0]["inputs"]["i"], 0);
    let token = first.json()["next_page_token"].as_str().unwrap().to_owned();
    let rest = common::request(
        server.addr,
        "GET",
        &format!("{records}?max_results=100&page_token={token}"),
        &[],
        b"",
    )
    .await;
    let list: Vec<serde_json::Value> =
        serde_json::from_str(rest.json()["records"].as_str().unwrap()).unwrap();
    assert_eq!(list.len(), 30);
    assert_eq!(list[0]["inputs"]["i"], 20);
    assert!(
        rest.json().get("next_page_token").is_none(),
        "{}",
        rest.body
    );
    for query in ["max_results=0", "page_token=nope"] {
        let refused =
            common::request(server.addr, "GET", &format!("{records}?{query}"), &[], b"").await;
        assert_eq!(refused.status, 400, "{query}: {}", refused.body);
    }
    // Ids that name nothing are not found, whatever their characters.
    for path in [
        "/api/3.0/mlflow/datasets/d-nothing",
        "/api/3.0/mlflow/datasets/..%2Fetc",
    ] {
        let missing = common::request(server.addr, "GET", path, &[], b"").await;
        assert_eq!(missing.status, 404, "{path}: {}", missing.body);
    }
    let filter = common::post_json(
        server.addr,
        "/api/3.0/mlflow/datasets/search",
        &json!({"filter_string": "metrics.x > 1"}),
    )
    .await;
    assert_eq!(filter.status, 400, "{}", filter.body);
    assert!(filter.body.contains("filter_string"), "{}", filter.body);
}

/// Assessments of traces: what is wrong with one is named, the field and
/// what to do, and nothing is kept of a refused one.
#[tokio::test]
async fn bad_assessments_are_refused_naming_the_field() {
    use serde_json::json;
    let server = TestServer::start().await;
    let made = common::post_json(
        server.addr,
        "/api/2.0/mlflow/experiments/create",
        &json!({"name": "judged"}),
    )
    .await;
    let exp = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let trace = common::post_json(
        server.addr,
        "/api/3.0/mlflow/traces",
        &json!({"trace": {"trace_info": {
            "trace_id": "tr-judged",
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
            "request_time": "2026-12-05T10:00:00.000Z",
            "state": "OK",
        }}}),
    )
    .await;
    assert_eq!(trace.status, 200, "{}", trace.body);
    let path = "/api/3.0/mlflow/traces/tr-judged/assessments";
    let huge = "x".repeat((1 << 20) + 1);
    for (body, says) in [
        (json!({}), "'assessment'"),
        (
            json!({"assessment": {"feedback": {"value": 1}}}),
            "assessment_name",
        ),
        (
            json!({"assessment": {"assessment_name": "n"}}),
            "assessment.feedback or assessment.expectation",
        ),
        (
            json!({"assessment": {"assessment_name": "n", "feedback": {"value": 1}, "expectation": {"value": 2}}}),
            "not both",
        ),
        (
            json!({"assessment": {"assessment_name": "n", "feedback": 1}}),
            "must be an object",
        ),
        (
            json!({"assessment": {"assessment_name": "n", "feedback": {"value": huge}}}),
            "keep a larger value in an artifact",
        ),
        (
            json!({"assessment": {"assessment_name": "n", "feedback": {"value": 1}, "source": {"source_type": "ROBOT"}}}),
            "source_type",
        ),
        (
            json!({"assessment": {"assessment_name": "n", "feedback": {"value": 1}, "assessment_id": "a/../b"}}),
            "assessment_id",
        ),
        (
            json!({"assessment": {"assessment_name": "n", "issue": {"issue_id": "i"}}}),
            "not supported",
        ),
    ] {
        let refused = common::post_json(server.addr, path, &body).await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert_eq!(refused.json()["error_code"], "INVALID_PARAMETER_VALUE");
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
    }
    // None of them was kept; one of an unknown trace, or overriding an
    // unknown assessment, is not found.
    let info = common::request(
        server.addr,
        "GET",
        "/api/3.0/mlflow/traces/tr-judged",
        &[],
        b"",
    )
    .await;
    assert!(
        info.json()["trace"]["trace_info"]
            .get("assessments")
            .is_none(),
        "{}",
        info.body
    );
    let good = json!({"assessment": {"assessment_name": "n", "feedback": {"value": 1}}});
    let lost = common::post_json(
        server.addr,
        "/api/3.0/mlflow/traces/tr-none/assessments",
        &good,
    )
    .await;
    assert_eq!(lost.status, 404, "{}", lost.body);
    let over = json!({"assessment": {"assessment_name": "n", "feedback": {"value": 1}, "overrides": "a-none"}});
    let lost = common::post_json(server.addr, path, &over).await;
    assert_eq!(lost.status, 404, "{}", lost.body);
    assert_eq!(lost.json()["error_code"], "RESOURCE_DOES_NOT_EXIST");
    // An update must name what it changes, and keep the kind.
    let made = common::post_json(server.addr, path, &good).await;
    assert_eq!(made.status, 200, "{}", made.body);
    let id = made.json()["assessment"]["assessment_id"]
        .as_str()
        .unwrap()
        .to_owned();
    for (body, says) in [
        (json!({"assessment": {"rationale": "r"}}), "update_mask"),
        (
            json!({"assessment": {}, "update_mask": "source"}),
            "cannot be changed",
        ),
        (
            json!({"assessment": {"expectation": {"value": 1}}, "update_mask": "expectation"}),
            "cannot become an expectation",
        ),
    ] {
        let refused = common::request(
            server.addr,
            "PATCH",
            &format!("{path}/{id}"),
            &[("Content-Type", "application/json")],
            body.to_string().as_bytes(),
        )
        .await;
        assert_eq!(refused.status, 400, "{}", refused.body);
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
    }
}

/// PostgreSQL keeps no NUL character in text: one in a trace's tags or an
/// assessment's fields is refused with the reason, never a 500.
#[tokio::test]
async fn nul_characters_in_traces_and_assessments_are_refused() {
    use serde_json::json;
    let server = TestServer::start().await;
    let made = common::post_json(
        server.addr,
        "/api/2.0/mlflow/experiments/create",
        &json!({"name": "nul"}),
    )
    .await;
    let exp = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let trace = |tags: serde_json::Value| {
        json!({"trace": {"trace_info": {
            "trace_id": "tr-nul",
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
            "request_time": "2026-12-05T10:00:00.000Z",
            "state": "OK",
            "tags": tags,
        }}})
    };
    let refused = common::post_json(
        server.addr,
        "/api/3.0/mlflow/traces",
        &trace(json!({"k": "a\u{0}b"})),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("NUL"), "{}", refused.body);
    let made = common::post_json(server.addr, "/api/3.0/mlflow/traces", &trace(json!({}))).await;
    assert_eq!(made.status, 200, "{}", made.body);
    let path = "/api/3.0/mlflow/traces/tr-nul/assessments";
    for assessment in [
        json!({"assessment_name": "a\u{0}", "feedback": {"value": 1}}),
        json!({"assessment_name": "n", "feedback": {"value": 1}, "rationale": "\u{0}"}),
        json!({"assessment_name": "n", "feedback": {"value": 1}, "source": {"source_type": "HUMAN", "source_id": "\u{0}"}}),
        json!({"assessment_name": "n", "feedback": {"value": 1}, "metadata": {"k": "\u{0}"}}),
    ] {
        let refused =
            common::post_json(server.addr, path, &json!({"assessment": assessment})).await;
        assert_eq!(refused.status, 400, "{assessment}: {}", refused.body);
        assert!(refused.body.contains("NUL"), "{}", refused.body);
    }
    // Inside a value (JSON keeps it escaped) it is kept, and comes back.
    let serialized = json!({"serialization_format": "JSON_FORMAT", "value": "\"a\u{0}b\""});
    let kept = common::post_json(
        server.addr,
        path,
        &json!({"assessment": {"assessment_name": "n", "expectation": {"serialized_value": serialized}}}),
    )
    .await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    assert_eq!(
        kept.json()["assessment"]["expectation"]["serialized_value"],
        serialized
    );
}

#[tokio::test]
async fn bad_webhooks_are_refused_naming_what_is_wrong() {
    use serde_json::json;
    let server = TestServer::start().await;
    let hooks = "/api/2.0/mlflow/webhooks";
    let event = json!([{"entity": "MODEL_VERSION", "action": "CREATED"}]);
    let with = |changes: serde_json::Value| {
        let mut body = json!({"name": "ci", "url": "https://8.8.8.8/hook", "events": event});
        for (k, v) in changes.as_object().unwrap() {
            body[k] = v.clone();
        }
        body
    };
    for (body, says) in [
        (
            json!({"url": "https://8.8.8.8/", "events": event}),
            "'name'",
        ),
        (
            with(json!({"name": "-ci"})),
            "Webhook name '-ci' is invalid",
        ),
        (with(json!({"name": "c".repeat(64)})), "is invalid"),
        (json!({"name": "ci", "events": event}), "'url'"),
        (with(json!({"url": "ftp://8.8.8.8/x"})), "scheme: 'ftp'"),
        (
            with(json!({"url": "http://8.8.8.8/x"})),
            "scheme: 'http'. Allowed schemes are: https",
        ),
        (
            with(json!({"url": "https://localhost:9/x"})),
            "not a public address",
        ),
        (
            with(json!({"url": "https://10.0.0.7/x"})),
            "10.0.0.7, which is not a public address",
        ),
        (
            with(json!({"url": "https://[::1]:9/x"})),
            "not a public address",
        ),
        (
            with(json!({"url": "https://ci:pw@8.8.8.8/"})),
            "user name or password",
        ),
        (with(json!({"events": []})), "non-empty"),
        (
            with(json!({"events": [{"entity": "MODEL_VERSION", "action": "DELETED"}]})),
            "Invalid webhook event 'model_version.deleted'",
        ),
        (
            with(json!({"events": [{"entity": "BUDGET_POLICY", "action": "EXCEEDED"}]})),
            "AI gateway",
        ),
        (
            with(json!({"events": [{"entity": "MODEL_VERSION"}]})),
            "'events.action'",
        ),
        (with(json!({"status": "PAUSED"})), "ACTIVE or DISABLED"),
        (
            with(json!({"status": true})),
            "'status' must be one of MLflow's names",
        ),
        (
            with(json!({"name": format!("-{}", "x".repeat(10_000))})),
            "x…' is invalid",
        ),
        (
            with(json!({"description": "d".repeat(5_001)})),
            "limit of 5000",
        ),
        (with(json!({"secret": "s".repeat(1_025)})), "limit of 1024"),
        (with(json!({"secret": "a\u{0}b"})), "'secret'"),
    ] {
        let refused = common::post_json(server.addr, hooks, &body).await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.body);
        assert_eq!(refused.json()["error_code"], "INVALID_PARAMETER_VALUE");
        assert!(refused.body.contains(says), "{says}: {}", refused.body);
    }
    let list = common::request(server.addr, "GET", hooks, &[], b"").await;
    assert_eq!(list.json(), json!({"webhooks": []}), "nothing was made");

    // Events by number, as an older client may send them; doubles kept once.
    let made = common::post_json(
        server.addr,
        hooks,
        &with(json!({"events": [{"entity": 2, "action": 1}, {"entity": "model_version", "action": "created"}],
                     "secret": "k", "status": "DISABLED"})),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let hook = made.json()["webhook"].clone();
    assert_eq!(hook["events"], event);
    assert_eq!(hook["status"], "DISABLED");
    assert!(
        hook.get("secret").is_none(),
        "a secret is never shown: {hook}"
    );
    let id = hook["webhook_id"].as_str().unwrap();
    let one = format!("{hooks}/{id}");

    let refused = common::request(
        server.addr,
        "PATCH",
        &one,
        &[("Content-Type", "application/json")],
        json!({"url": "https://169.254.169.254/latest/meta-data"})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("not a public address"),
        "{}",
        refused.body
    );
    let kept = common::request(server.addr, "GET", &one, &[], b"").await;
    assert_eq!(kept.json()["webhook"]["url"], "https://8.8.8.8/hook");

    let changed = common::request(
        server.addr,
        "PATCH",
        &one,
        &[("Content-Type", "application/json")],
        json!({"status": "ACTIVE", "description": "deploys"})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(changed.status, 200, "{}", changed.body);
    assert_eq!(
        (
            &changed.json()["webhook"]["status"],
            &changed.json()["webhook"]["description"]
        ),
        (&json!("ACTIVE"), &json!("deploys"))
    );

    for path in [
        format!("{hooks}/nope"),
        format!("{hooks}/{}", "x".repeat(100)),
    ] {
        let missing = common::request(server.addr, "GET", &path, &[], b"").await;
        assert_eq!(missing.status, 404, "{}", missing.body);
        assert_eq!(missing.json()["error_code"], "RESOURCE_DOES_NOT_EXIST");
    }
    let gone = common::request(server.addr, "DELETE", &one, &[], b"").await;
    assert_eq!(gone.status, 200, "{}", gone.body);
    let again = common::request(server.addr, "DELETE", &one, &[], b"").await;
    assert_eq!(again.status, 404, "{}", again.body);
}

/// A receiver away when the event happens gets it once it is back, though
/// the server was killed in between: deliveries wait in the database.
#[tokio::test]
async fn a_webhook_event_waits_for_its_receiver_across_a_crash() {
    use serde_json::json;
    use std::sync::{Arc, Mutex};
    let allow = [
        ("TRAINYARD_WEBHOOK_ALLOW_PRIVATE_HOSTS", "true"),
        ("TRAINYARD_WEBHOOK_SCHEMES", "http,https"),
    ];
    let server = TestServer::start_with(&allow).await;
    // A port with nothing listening on it yet.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let made = common::post_json(
        server.addr,
        "/api/2.0/mlflow/webhooks",
        &json!({"name": "deployer", "url": format!("http://127.0.0.1:{port}/hook"),
                "events": [{"entity": "REGISTERED_MODEL", "action": "CREATED"}], "secret": "k"}),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let model = common::post_json(
        server.addr,
        "/api/2.0/mlflow/registered-models/create",
        &json!({"name": "churn", "description": "v2", "tags": [{"key": "team", "value": "nlp"}]}),
    )
    .await;
    assert_eq!(model.status, 200, "{}", model.body);
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let (db, data_dir) = server.crash().await;

    let got: Arc<Mutex<Vec<(String, String)>>> = Default::default();
    let kept = got.clone();
    let receiver = axum::Router::new().route(
        "/hook",
        axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
            let kept = kept.clone();
            async move {
                let id = headers["x-mlflow-delivery-id"].to_str().unwrap().to_owned();
                kept.lock().unwrap().push((id, body));
                "ok"
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
        .await
        .unwrap();
    tokio::spawn(async move { axum::serve(listener, receiver).await.unwrap() });
    let _server = TestServer::start_in(db, data_dir, &allow).await;

    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while got.lock().unwrap().is_empty() && std::time::Instant::now() < deadline {
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    // Taken once: no second try follows.
    tokio::time::sleep(std::time::Duration::from_secs(2)).await;
    let got = got.lock().unwrap();
    assert_eq!(got.len(), 1, "delivered once: {got:?}");
    let body: serde_json::Value = serde_json::from_str(&got[0].1).unwrap();
    assert_eq!(
        (&body["entity"], &body["action"]),
        (&json!("registered_model"), &json!("created"))
    );
    assert_eq!(
        body["data"],
        json!({"name": "churn", "tags": {"team": "nlp"}, "description": "v2"})
    );
}

/// Settings that let webhooks go to a loopback receiver without TLS.
const LOOPBACK_WEBHOOKS: [(&str, &str); 2] = [
    ("TRAINYARD_WEBHOOK_ALLOW_PRIVATE_HOSTS", "true"),
    ("TRAINYARD_WEBHOOK_SCHEMES", "http,https"),
];

/// A server with one webhook that has a (sealed) secret, and its id.
async fn server_with_a_signed_webhook() -> (TestServer, String) {
    use serde_json::json;
    let server = TestServer::start_with(&LOOPBACK_WEBHOOKS).await;
    let made = common::post_json(
        server.addr,
        "/api/2.0/mlflow/webhooks",
        &json!({"name": "deployer", "url": "http://127.0.0.1:9/hook",
                "events": [{"entity": "REGISTERED_MODEL", "action": "CREATED"}], "secret": "k"}),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let id = made.json()["webhook"]["webhook_id"]
        .as_str()
        .unwrap()
        .to_owned();
    (server, id)
}

/// A server that comes back without the key that sealed its secrets (a
/// data folder that did not survive) refuses to start, saying what to do,
/// rather than end every session and fail every signed webhook; after
/// `trainyard forget-secrets` it starts, the webhook turned off.
#[tokio::test]
async fn a_server_without_the_key_that_sealed_its_secrets_refuses_to_start() {
    let allow = LOOPBACK_WEBHOOKS;
    let (server, id) = server_with_a_signed_webhook().await;
    let (db, data_dir) = server.crash().await;
    std::fs::remove_file(data_dir.path().join("secrets.key")).unwrap();

    let vars = vec![
        ("TRAINYARD_LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
        ("TRAINYARD_DATABASE_URL".to_owned(), db.url.clone()),
        (
            "TRAINYARD_DATA_DIR".to_owned(),
            data_dir.path().display().to_string(),
        ),
        ("TRAINYARD_JOB_UIDS".to_owned(), common::job_uids()),
    ];
    let config = trainyard::config::load_from(None, &Default::default(), &vars).unwrap();
    let refused = trainyard::Server::bind(&config).await.err().unwrap();
    let says = refused.to_string();
    assert!(
        says.contains("does not open the secrets sealed in the database")
            && says.contains("trainyard forget-secrets"),
        "{says}"
    );

    let forgot = std::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .arg("forget-secrets")
        .env_clear()
        .envs(vars.iter().cloned())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&forgot.stdout);
    assert!(
        forgot.status.success(),
        "{out} {}",
        String::from_utf8_lossy(&forgot.stderr)
    );
    assert!(out.contains("secrets of 1 webhook(s)"), "{out}");

    let server = TestServer::start_in(db, data_dir, &allow).await;
    let hook = server
        .get(&format!("/api/2.0/mlflow/webhooks/{id}"))
        .await
        .json();
    assert_eq!(hook["webhook"]["status"], "DISABLED", "{hook}");
}

/// `search_traces` by spans: a `traces.json` written through the artifact
/// API is searched at once; one kept before the server searched spans (here
/// put in place behind its back) is read at the next start.
#[tokio::test]
async fn traces_are_found_by_their_spans_written_now_or_kept_from_before() {
    use serde_json::json;
    let server = TestServer::start().await;
    let made = common::post_json(
        server.addr,
        "/api/2.0/mlflow/experiments/create",
        &json!({"name": "span search"}),
    )
    .await;
    assert_eq!(made.status, 200, "{}", made.body);
    let exp = made.json()["experiment_id"].as_str().unwrap().to_owned();
    let spans = |name: &str, kind: &str| {
        json!({"spans": [{
            "name": name,
            "span_id": "0123456789abcdef",
            "parent_span_id": "",
            "start_time_unix_nano": 1_000_000,
            "end_time_unix_nano": 2_000_000,
            "status": {"code": "STATUS_CODE_OK", "message": ""},
            "attributes": {"mlflow.spanType": format!("\"{kind}\""), "mlflow.spanInputs": "{\"question\": \"why\"}"},
        }]})
        .to_string()
    };
    for id in ["tr-now", "tr-before"] {
        let started = common::post_json(
            server.addr,
            "/api/3.0/mlflow/traces",
            &json!({"trace": {"trace_info": {
                "trace_id": id,
                "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
                "request_time": "2026-12-06T10:00:00.000Z",
                "execution_duration": "0.5s",
                "state": "OK",
            }}}),
        )
        .await;
        assert_eq!(started.status, 200, "{}", started.body);
    }
    let uploaded = common::request(
        server.addr,
        "PUT",
        &format!("/api/2.0/mlflow-artifacts/artifacts/{exp}/traces/tr-now/artifacts/traces.json"),
        &[],
        spans("retrieve", "RETRIEVER").as_bytes(),
    )
    .await;
    assert_eq!(uploaded.status, 200, "{}", uploaded.body);
    let (db, data_dir) = server.crash().await;
    let before = data_dir
        .path()
        .join(format!("artifacts/{exp}/traces/tr-before/artifacts"));
    std::fs::create_dir_all(&before).unwrap();
    std::fs::write(before.join("traces.json"), spans("plan", "AGENT")).unwrap();

    let search = |addr, filter: &'static str| {
        let exp = exp.clone();
        async move { traces_found(addr, &exp, filter).await }
    };
    let server = TestServer::start_in(db, data_dir, &[]).await;
    assert_eq!(
        search(server.addr, "span.type = 'RETRIEVER'").await,
        ["tr-now"]
    );
    assert_eq!(
        search(server.addr, "span.name = 'retrieve' AND span.status = 'OK'").await,
        ["tr-now"]
    );
    assert!(
        search(
            server.addr,
            "span.name = 'retrieve' AND span.status = 'ERROR'"
        )
        .await
        .is_empty()
    );
    // Read in the background at start: wait for it, within reason.
    let mut found = Vec::new();
    for _ in 0..300 {
        found = search(server.addr, "span.type = 'AGENT'").await;
        if !found.is_empty() {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(found, ["tr-before"]);
    let mut both = search(server.addr, "trace.text LIKE '%why%'").await;
    both.sort();
    assert_eq!(both, ["tr-before", "tr-now"]);
    let refused = common::post_json(
        server.addr,
        "/api/3.0/mlflow/traces/search",
        &json!({"locations": [{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}}], "filter": "span.duration = '1'"}),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("span.attributes.<key>"),
        "{}",
        refused.body
    );
}

/// Rotating `secrets_key`: started with a new key and the old one as
/// `secrets_key_previous`, the server seals every secret again with the new
/// key, so the next start needs the new key alone.
#[tokio::test]
async fn a_secrets_key_is_rotated_with_the_one_it_replaces() {
    let allow = LOOPBACK_WEBHOOKS;
    let (server, id) = server_with_a_signed_webhook().await;
    let (db, data_dir) = server.crash().await;
    let old = std::fs::read_to_string(data_dir.path().join("secrets.key")).unwrap();
    let new = "5e".repeat(32);
    let rotating = [
        allow[0],
        allow[1],
        ("TRAINYARD_SECRETS_KEY", new.as_str()),
        ("TRAINYARD_SECRETS_KEY_PREVIOUS", old.trim()),
    ];
    let server = TestServer::start_in(db, data_dir, &rotating).await;
    let (db, data_dir) = server.crash().await;
    // The old key gone for good: the new one opens everything.
    std::fs::remove_file(data_dir.path().join("secrets.key")).unwrap();
    let server = TestServer::start_in(db, data_dir, &rotating[..3]).await;
    let hook = server
        .get(&format!("/api/2.0/mlflow/webhooks/{id}"))
        .await
        .json();
    assert_eq!(hook["webhook"]["status"], "ACTIVE", "{hook}");
}

/// `/v1/traces`: spans an OpenTelemetry exporter sends (protobuf, gzip)
/// make a trace, are kept in its `traces.json` as MLflow's client keeps
/// them and are searched; more spans (OTLP/JSON) join them; the client's
/// summary completes the trace, and its own `traces.json` upload keeps the
/// spans it lacks.
#[tokio::test]
async fn spans_sent_over_otlp_make_a_trace_that_the_client_completes() {
    use serde_json::{Value, json};
    use std::io::Write;
    let server = TestServer::start().await;
    let exp = "0";
    let run = common::new_run(server.addr, Some("agent")).await;
    let testdata = common::workspace_root().join("server/src/mlflow/testdata");
    let request = hex_decode(&std::fs::read_to_string(testdata.join("otlp-request.hex")).unwrap());
    let kept: Value =
        serde_json::from_str(&std::fs::read_to_string(testdata.join("otlp-spans.json")).unwrap())
            .unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    gz.write_all(&request).unwrap();
    let gz = gz.finish().unwrap();
    let otlp = |headers: Vec<(&'static str, String)>, body: Vec<u8>| {
        let addr = server.addr;
        async move {
            let headers: Vec<(&str, &str)> =
                headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
            common::request(addr, "POST", "/v1/traces", &headers, &body).await
        }
    };
    let protobuf = || ("Content-Type", "application/x-protobuf".to_owned());

    let refused = otlp(vec![protobuf()], request.clone()).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("x-mlflow-experiment-id"),
        "{}",
        refused.body
    );
    let refused = otlp(
        vec![
            ("Content-Type", "text/plain".into()),
            ("x-mlflow-experiment-id", exp.into()),
        ],
        request.clone(),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("application/x-protobuf"),
        "{}",
        refused.body
    );
    let refused = otlp(
        vec![protobuf(), ("x-mlflow-experiment-id", "424242".into())],
        request.clone(),
    )
    .await;
    assert_eq!(refused.status, 404, "{}", refused.body);

    let sent = otlp(
        vec![
            protobuf(),
            ("Content-Encoding", "gzip".into()),
            ("x-mlflow-experiment-id", exp.into()),
            ("x-mlflow-run-id", run.clone()),
        ],
        gz,
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    assert_eq!(sent.header("content-type"), Some("application/x-protobuf"));
    let id = "tr-0af7651916cd43dd8448eb211c80319c";
    let info = server
        .get(&format!("/api/3.0/mlflow/traces/{id}"))
        .await
        .json();
    let info = &info["trace"]["trace_info"];
    assert_eq!(info["state"], "OK", "{info}");
    assert_eq!(info["tags"]["service.name"], "agent", "{info}");
    assert_eq!(
        info["tags"]["mlflow.artifactLocation"],
        format!("mlflow-artifacts:/{exp}/traces/{id}/artifacts")
    );
    let file =
        format!("/api/2.0/mlflow-artifacts/artifacts/{exp}/traces/{id}/artifacts/traces.json");
    // As MLflow makes them, in the order they started (the request sends
    // the child first, as it ended first).
    let mut kept = kept;
    kept["spans"]
        .as_array_mut()
        .unwrap()
        .sort_by_key(|s| s["start_time_unix_nano"].as_u64());
    assert_eq!(server.get(&file).await.json(), kept);

    let search = |filter: String| async move { traces_found(server.addr, exp, &filter).await };
    assert_eq!(
        search("span.name = 'score' AND span.status = 'ERROR'".into()).await,
        [id]
    );
    assert_eq!(search(format!("run_id = '{run}'")).await, [id]);

    // A child span that ended later, sent as OTLP/JSON with hex ids.
    let tool = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "1111111111111111",
        "parentSpanId": "00f067aa0ba902b7",
        "name": "lookup",
        "startTimeUnixNano": "1765000000300000000",
        "endTimeUnixNano": "1765000000400000000",
        "attributes": [{"key": "mlflow.spanType", "value": {"stringValue": "TOOL"}}],
    }]}]}]});
    let sent = otlp(
        vec![
            ("Content-Type", "application/json".into()),
            ("x-mlflow-experiment-id", exp.into()),
        ],
        tool.to_string().into_bytes(),
    )
    .await;
    assert_eq!(sent.status, 200, "{}", sent.body);
    assert_eq!(sent.json(), json!({}));
    let spans = server.get(&file).await.json();
    let names: Vec<&str> = spans["spans"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["root", "score", "lookup"]);
    assert_eq!(search("span.type = 'TOOL'".into()).await, [id]);

    // The client's summary of the trace completes it.
    let started = common::post_json(
        server.addr,
        "/api/3.0/mlflow/traces",
        &json!({"trace": {"trace_info": {
            "trace_id": id,
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
            "request_time": "2026-12-06T10:00:00.000Z",
            "execution_duration": "0.5s",
            "state": "ERROR",
            "tags": {"mlflow.traceName": "root"},
        }}}),
    )
    .await;
    assert_eq!(started.status, 200, "{}", started.body);
    let info = &started.json()["trace"]["trace_info"];
    assert_eq!(
        (
            &info["state"],
            &info["request_time"],
            &info["tags"]["service.name"]
        ),
        (
            &json!("ERROR"),
            &json!("2026-12-06T10:00:00.000Z"),
            &json!("agent")
        ),
        "{info}"
    );
    // Its upload of traces.json, with the root span alone (ended now),
    // keeps the spans it lacks.
    let mut root = kept["spans"][0].clone();
    assert_eq!(root["name"], "root");
    root["end_time_unix_nano"] = json!(1765000000500000000u64);
    let uploaded = common::request(
        server.addr,
        "PUT",
        &file,
        &[],
        json!({"spans": [root.clone()]}).to_string().as_bytes(),
    )
    .await;
    assert_eq!(uploaded.status, 200, "{}", uploaded.body);
    let spans = server.get(&file).await.json();
    assert_eq!(spans["spans"].as_array().unwrap().len(), 3, "{spans}");
    assert_eq!(spans["spans"][0], root);
    // A second summary of it is a duplicate.
    let again = common::post_json(
        server.addr,
        "/api/3.0/mlflow/traces",
        &json!({"trace": {"trace_info": {
            "trace_id": id,
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}},
            "request_time": "2026-12-06T10:00:00.000Z",
        }}}),
    )
    .await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert_eq!(again.json()["error_code"], "RESOURCE_ALREADY_EXISTS");

    // A batch within the request's bound that a trace's file could not
    // hold (6 MB of quotes, escaped twice as the file keeps them): refused
    // as too much for a trace, and nothing kept.
    let big = json!({"resourceSpans": [{"scopeSpans": [{"spans": [{
        "traceId": "5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e",
        "spanId": "2222222222222222",
        "name": "big",
        "startTimeUnixNano": "1765000000300000000",
        "attributes": [{"key": "quotes", "value": {"stringValue": "\"".repeat(6_000_000)}}],
    }]}]}]});
    let refused = otlp(
        vec![
            ("Content-Type", "application/json".into()),
            ("x-mlflow-experiment-id", exp.into()),
        ],
        big.to_string().into_bytes(),
    )
    .await;
    assert_eq!(refused.status, 413, "{}", refused.body);
    assert!(
        refused.body.contains("start a new trace"),
        "{}",
        refused.body
    );
    let missing = server
        .get("/api/3.0/mlflow/traces/tr-5ca1ab1e5ca1ab1e5ca1ab1e5ca1ab1e")
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);

    // An upload of more JSON values than are parsed (8 MB of zeros, each
    // 32 bytes once parsed) replaces the file as it is, not merged.
    let zeros = format!("{{\"spans\": [{}]}}", "0,".repeat(4_000_000) + "0");
    let uploaded = common::request(server.addr, "PUT", &file, &[], zeros.as_bytes()).await;
    assert_eq!(uploaded.status, 200, "{}", uploaded.body);
    assert_eq!(server.get(&file).await.body.len(), zeros.len());
}

/// The ids of the traces of experiment `exp` that `filter` finds.
async fn traces_found(addr: std::net::SocketAddr, exp: &str, filter: &str) -> Vec<String> {
    use serde_json::json;
    let found = common::post_json(
        addr,
        "/api/3.0/mlflow/traces/search",
        &json!({"locations": [{"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": exp}}], "filter": filter}),
    )
    .await;
    assert_eq!(found.status, 200, "{filter}: {}", found.body);
    found.json()["traces"]
        .as_array()
        .map(|all| {
            all.iter()
                .map(|t| t["trace_id"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

fn hex_decode(text: &str) -> Vec<u8> {
    let text = text.trim();
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap())
        .collect()
}

#[tokio::test]
async fn runs_log_model_keeps_a_runs_history_of_models_and_refuses_bad_ones() {
    use serde_json::{Value, json};
    let server = TestServer::start().await;
    let run = common::new_run(server.addr, Some("fit")).await;
    let addr = server.addr;
    let log = |model_json: String| {
        let body = json!({"run_id": run, "model_json": model_json});
        async move { common::post_json(addr, "/api/2.0/mlflow/runs/log-model", &body).await }
    };
    let model = json!({
        "run_id": run, "artifact_path": "model", "utc_time_created": "2026-12-06 08:00:00.000000",
        "model_uuid": "4f1c", "flavors": {"sklearn": {"pickled_model": "model.pkl", "config": {}}},
        "signature": {"inputs": "[]"},
    });
    let kept = log(model.to_string()).await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    assert_eq!(kept.json(), json!({}));
    let tags = common::run(&server, &run).await["data"]["tags"].clone();
    let history = tags
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["key"] == "mlflow.log-model.history")
        .map(|t| serde_json::from_str::<Value>(t["value"].as_str().unwrap()).unwrap());
    assert_eq!(
        history,
        Some(json!([{
            "run_id": run, "artifact_path": "model", "utc_time_created": "2026-12-06 08:00:00.000000",
            "model_uuid": "4f1c", "flavors": {"sklearn": {"pickled_model": "model.pkl"}},
        }]))
    );

    let refused = log("not json".into()).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("Malformed model info"),
        "{}",
        refused.body
    );
    let mut partial = model.clone();
    partial.as_object_mut().unwrap().remove("flavors");
    partial.as_object_mut().unwrap().remove("utc_time_created");
    let refused = log(partial.to_string()).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused
            .body
            .contains("missing mandatory fields: flavors, utc_time_created"),
        "{}",
        refused.body
    );
    let mut long = model.clone();
    long["artifact_path"] = json!("x".repeat(70_000));
    let refused = log(long.to_string()).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("holds at most 65536"),
        "{}",
        refused.body
    );
    let unknown = common::post_json(
        server.addr,
        "/api/2.0/mlflow/runs/log-model",
        &json!({"run_id": "a0a0a0", "model_json": model.to_string()}),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
}
