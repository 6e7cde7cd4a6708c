//! GPU telemetry against the real server: the local executor's node samples
//! its simulated GPUs, which follow the jobs that hold them; admins see every
//! GPU (overview, heatmap, a node's charts, `/metrics` in DCGM's names), and
//! a job's owner sees its GPUs while others get 404.

use crate::common;

use std::time::Duration;

use common::{Response, TestServer, request};
use serde_json::{Value, json};
use trainyard_store::{SignIn, Store};

async fn token(store: &Store, name: &str, admin: bool) -> String {
    let user = store
        .sign_in(SignIn {
            subject: format!("sub-{name}"),
            username: name.to_owned(),
            display_name: name.to_owned(),
            email: None,
            is_admin: admin,
            groups: vec![format!("team-{name}")],
        })
        .await
        .unwrap();
    let token = store.create_api_token(user.id, "test", None).await.unwrap();
    format!("Bearer {}", token.secret)
}

async fn get(server: &TestServer, path: &str, auth: &str) -> Response {
    request(server.addr, "GET", path, &[("Authorization", auth)], b"").await
}

async fn job_state(server: &TestServer, id: i64, auth: &str) -> Value {
    let answer = get(server, &format!("/api/trainyard/v1/jobs/{id}"), auth).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["job"].clone()
}

#[tokio::test]
async fn a_jobs_gpus_are_sampled_and_shown_to_its_owner_and_admins() {
    // People first: the server writes samples every second, and a second
    // writer on the same SQLite file would race it.
    let db = trainyard_test_db::TestDb::new().await;
    let store = Store::connect(&db.url, 1).await.unwrap();
    store.migrate().await.unwrap();
    let alice = token(&store, "alice", false).await;
    let carol = token(&store, "carol", false).await;
    let admin = token(&store, "root", true).await;
    store.close().await.unwrap();
    let server = TestServer::start_in(
        db,
        tempfile::tempdir().unwrap(),
        &[
            ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
            ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
            ("TRAINYARD_SIMULATED_GPUS", "2"),
            ("TRAINYARD_GPU_SAMPLE_SECS", "1"),
        ],
    )
    .await;

    let spec = json!({
        "name": "gpu user",
        "command": "sleep 60",
        "resources": {"gpus": 1, "memory": "64Mi"},
        "env": {"SIMULATED_GPU_UTIL": "70"},
    });
    let answer = request(
        server.addr,
        "POST",
        "/api/trainyard/v1/jobs",
        &[
            ("Authorization", &alice),
            ("Content-Type", "application/json"),
        ],
        spec.to_string().as_bytes(),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let id = answer.json()["job"]["id"].as_i64().unwrap();
    let mut job = Value::Null;
    for _ in 0..600 {
        job = job_state(&server, id, &alice).await;
        if job["state"] == "RUNNING" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(job["state"], "RUNNING", "{job}");
    let held = job["gpu_indices"][0].as_u64().unwrap();
    let node = job["node"].as_str().unwrap().to_owned();

    // Samples of the held GPU come in, near what the job asked for.
    let mut series = Value::Null;
    for _ in 0..100 {
        series = get(
            &server,
            &format!("/api/trainyard/v1/jobs/{id}/gpus"),
            &alice,
        )
        .await
        .json();
        if busy_points(&series).len() >= 4 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(series["node"], node);
    let gpus = series["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 1, "{series}");
    assert_eq!(gpus[0]["index"], held);
    // The first samples may precede the sampler's news of the job (a
    // GPU is idle while its job starts, too); from the first busy one on,
    // every sample is the job's.
    let points = busy_points(&series);
    assert!(points.len() >= 4, "{series}");
    for p in points {
        let util = p["gpu_util"].as_f64().unwrap();
        assert!((58.0..=82.0).contains(&util), "{p}");
        assert!(p["mem_used_bytes"].as_u64().unwrap() > 40 << 30, "{p}");
    }
    assert_eq!(series["idle"], false);
    // A zoom reaches no further than the job's life: before it, the GPU
    // was someone else's.
    let started = job["started_at"].as_i64().unwrap();
    let zoomed = get(
        &server,
        &format!(
            "/api/trainyard/v1/jobs/{id}/gpus?from={}&to={}",
            started - 86_400_000,
            started + 3_600_000
        ),
        &alice,
    )
    .await;
    assert_eq!(zoomed.status, 200, "{}", zoomed.body);
    let zoomed = zoomed.json();
    assert_eq!(zoomed["from_ms"], started, "{zoomed}");
    assert!(
        zoomed["to_ms"].as_i64().unwrap() < started + 3_600_000,
        "{zoomed}"
    );
    // A span past what the numbers hold is refused, not wrapped around.
    let wrapped = get(
        &server,
        &format!(
            "/api/trainyard/v1/jobs/{id}/gpus?from={}&to={}",
            i64::MIN,
            i64::MAX
        ),
        &alice,
    )
    .await;
    assert_eq!(wrapped.status, 400, "{}", wrapped.body);

    // Another person learns nothing of the job, not even that it exists.
    let other = get(
        &server,
        &format!("/api/trainyard/v1/jobs/{id}/gpus"),
        &carol,
    )
    .await;
    assert_eq!(other.status, 404, "{}", other.body);
    let chart = get(
        &server,
        &format!("/api/trainyard/v1/jobs/{id}/gpus/chart"),
        &carol,
    )
    .await;
    assert_eq!(chart.status, 404);
    // Its owner gets the chart.
    let chart = get(
        &server,
        &format!("/api/trainyard/v1/jobs/{id}/gpus/chart?quantity=memory"),
        &alice,
    )
    .await;
    assert_eq!(chart.status, 200, "{}", chart.body);
    assert_eq!(chart.header("content-type"), Some("image/svg+xml"));
    assert!(
        chart.body.contains("GPU memory used (GiB)"),
        "{}",
        chart.body
    );
    assert_eq!(chart.body.matches("<polyline").count(), 1);

    // Only admins see every GPU.
    let denied = get(&server, "/api/trainyard/v1/gpus", &alice).await;
    assert_eq!(denied.status, 403, "{}", denied.body);
    let overview = get(&server, "/api/trainyard/v1/gpus", &admin).await;
    assert_eq!(overview.status, 200, "{}", overview.body);
    let overview = overview.json();
    assert_eq!(overview["sample_secs"], 1);
    assert_eq!(overview["idle_percent"], 5.0);
    let nodes = overview["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0]["name"], node);
    let gpus = nodes[0]["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 2);
    for g in gpus {
        let util = g["latest"]["gpu_util"].as_u64().unwrap();
        if g["index"] == held {
            assert_eq!(g["job"], id);
            assert!((58..=82).contains(&util), "{g}");
        } else {
            assert_eq!(g["job"], Value::Null);
            assert_eq!(util, 0, "{g}");
        }
        assert_eq!(g["idle"], false, "not held long enough to judge: {g}");
    }

    // The node's charts and the heatmap, as SVG and PNG.
    let chart = get(
        &server,
        &format!("/api/trainyard/v1/nodes/{node}/gpus/chart?quantity=power&window=1h"),
        &admin,
    )
    .await;
    assert_eq!(chart.status, 200, "{}", chart.body);
    assert!(chart.body.contains("Power draw (W)"));
    assert_eq!(chart.body.matches("<polyline").count(), 2, "a line per GPU");
    let bad = get(
        &server,
        &format!("/api/trainyard/v1/nodes/{node}/gpus/chart?quantity=fan"),
        &admin,
    )
    .await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("quantity"), "{}", bad.body);
    let missing = get(&server, "/api/trainyard/v1/nodes/nowhere/gpus", &admin).await;
    assert_eq!(missing.status, 404);
    let denied = get(
        &server,
        &format!("/api/trainyard/v1/nodes/{node}/gpus"),
        &alice,
    )
    .await;
    assert_eq!(denied.status, 403);
    let heat = get(&server, "/api/trainyard/v1/gpus/heatmap?window=1h", &admin).await;
    assert_eq!(heat.status, 200, "{}", heat.body);
    assert_eq!(heat.header("content-type"), Some("image/svg+xml"));
    assert!(heat.body.contains(&node));
    assert!(heat.body.contains("GPU utilization, 2 GPUs"));
    let png = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/gpus/heatmap?window=24h&format=png",
        &[("Authorization", &admin)],
        b"",
    )
    .await;
    assert_eq!(png.status, 200);
    assert_eq!(png.header("content-type"), Some("image/png"));
    let heat = get(&server, "/api/trainyard/v1/gpus/heatmap?window=2y", &admin).await;
    assert_eq!(heat.status, 400);
    assert!(heat.body.contains("window"), "{}", heat.body);

    // `/metrics` in the DCGM exporter's names, with the job on its GPU.
    let metrics = request(server.addr, "GET", "/metrics", &[], b"").await;
    assert_eq!(metrics.status, 200);
    let line = metrics
        .body
        .lines()
        .find(|l| l.starts_with("DCGM_FI_DEV_GPU_UTIL{") && l.contains(&format!("gpu=\"{held}\"")))
        .unwrap_or_else(|| panic!("{}", metrics.body));
    assert!(line.contains(&format!("Hostname=\"{node}\"")), "{line}");
    assert!(line.contains(&format!("trainyard_job=\"{id}\"")), "{line}");
    assert!(line.contains("modelName=\"Simulated GPU\""), "{line}");
    assert!(metrics.body.contains("# TYPE DCGM_FI_DEV_FB_USED gauge"));
    assert!(metrics.body.contains("trainyard_http_requests_total"));

    // GPU-hours: alice's job holds one GPU from its start until now, and
    // the sampled part of that was busy at about what the job asked for.
    let started = job["started_at"].as_i64().unwrap();
    let usage = get(
        &server,
        "/api/trainyard/v1/gpus/usage?window=1h&by=person",
        &admin,
    )
    .await;
    let elapsed_h = (now_ms() - started) as f64 / 3_600_000.0;
    assert_eq!(usage.status, 200, "{}", usage.body);
    let usage = usage.json();
    let rows = usage["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{usage}");
    let row = &rows[0];
    assert_eq!(row["name"], "alice");
    assert_eq!(row["jobs"], 1);
    let allocated = row["allocated_hours"].as_f64().unwrap();
    let sampled = row["sampled_hours"].as_f64().unwrap();
    let busy = row["busy_hours"].as_f64().unwrap();
    assert!(
        allocated > 0.0 && allocated <= elapsed_h,
        "{row} vs {elapsed_h} h"
    );
    assert!(sampled > 0.0 && sampled <= allocated, "{row}");
    // Samples before the sampler learned of the job read 0 %.
    let ratio = busy / sampled;
    assert!((0.3..=0.85).contains(&ratio), "{row}");
    assert_eq!(usage["total"]["jobs"], 1);
    let by_team = get(&server, "/api/trainyard/v1/gpus/usage?window=1h", &admin)
        .await
        .json();
    assert_eq!(by_team["by"], "team");
    assert_eq!(by_team["rows"][0]["name"], "team-alice", "{by_team}");
    let csv = get(
        &server,
        "/api/trainyard/v1/gpus/usage?window=1h&by=person&format=csv",
        &admin,
    )
    .await;
    assert_eq!(csv.status, 200, "{}", csv.body);
    assert_eq!(csv.header("content-type"), Some("text/csv; charset=utf-8"));
    let lines: Vec<&str> = csv.body.lines().collect();
    assert_eq!(
        lines[0],
        "person,jobs,allocated_gpu_hours,sampled_gpu_hours,busy_gpu_hours,busy_percent"
    );
    assert!(lines[1].starts_with("alice,1,"), "{}", csv.body);
    assert!(lines[2].starts_with("(total),1,"), "{}", csv.body);
    let bad = get(&server, "/api/trainyard/v1/gpus/usage?by=lab", &admin).await;
    assert_eq!(bad.status, 400);
    assert!(bad.body.contains("by"), "{}", bad.body);
    let denied = get(&server, "/api/trainyard/v1/gpus/usage", &alice).await;
    assert_eq!(denied.status, 403);

    let cancel = request(
        server.addr,
        "POST",
        &format!("/api/trainyard/v1/jobs/{id}/cancel"),
        &[
            ("Authorization", &alice),
            ("Content-Type", "application/json"),
        ],
        b"{}",
    )
    .await;
    assert_eq!(cancel.status, 200, "{}", cancel.body);
    for _ in 0..300 {
        if job_state(&server, id, &alice).await["state"] == "CANCELLED" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A finished job's hours stop at its end.
    let allocated = || async {
        get(
            &server,
            "/api/trainyard/v1/gpus/usage?window=1h&by=person",
            &admin,
        )
        .await
        .json()["rows"][0]["allocated_hours"]
            .as_f64()
            .unwrap()
    };
    let first = allocated().await;
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    assert_eq!(allocated().await, first);
}

fn now_ms() -> i64 {
    trainyard_store::now_millis()
}

/// A job's first GPU's samples from its first busy one on.
fn busy_points(series: &Value) -> Vec<Value> {
    let points = series["gpus"][0]["points"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    points
        .into_iter()
        .skip_while(|p| p["gpu_util"].as_f64().is_none_or(|u| u == 0.0))
        .collect()
}
