//! A request acknowledged with 200 is durable, and a batch is all or nothing:
//! the server is killed with SIGKILL in the middle of ingest, restarted on the
//! same database, and every acknowledged point must be there.

use crate::common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::json;
use trainyard_test_db::TestDb;

const BATCH: i64 = 200;

fn start(db: &TestDb, data: &std::path::Path) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("TRAINYARD_LISTEN", "127.0.0.1:0")
        .env("TRAINYARD_DATA_DIR", data)
        .env("TRAINYARD_DATABASE_URL", &db.url)
        .env("TRAINYARD_SITE_DIR", "/nonexistent-site")
        .env("TRAINYARD_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("Trainyard is running at http://")
        .unwrap_or_else(|| panic!("unexpected: {line}"))
        .parse()
        .unwrap();
    (child, addr)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn acknowledged_points_survive_sigkill() {
    let db = TestDb::new().await;
    let data = tempfile::tempdir().unwrap();
    let (mut child, addr) = start(&db, data.path());
    let run = common::post_json(
        addr,
        "/api/2.0/mlflow/runs/create",
        &json!({"experiment_id": "0"}),
    )
    .await;
    let run_id = run.json()["run"]["info"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // Four writers log batches of 200 points (steps first..first+199) until
    // the server dies; each remembers the batches it saw acknowledged.
    let mut writers = Vec::new();
    for writer in 0..4i64 {
        let run_id = run_id.clone();
        writers.push(tokio::spawn(async move {
            let mut acknowledged = Vec::new();
            for n in 0.. {
                let first = (writer * 1_000_000) + n * BATCH;
                let metrics: Vec<_> = (first..first + BATCH)
                    .map(|step| json!({"key": "loss", "value": step as f64, "timestamp": 1_000 + step, "step": step}))
                    .collect();
                let body = json!({"run_id": run_id, "metrics": metrics}).to_string();
                let attempt = tokio::time::timeout(
                    Duration::from_secs(5),
                    common::try_request(addr, "POST", "/api/2.0/mlflow/runs/log-batch", body.as_bytes()),
                )
                .await;
                match attempt {
                    Ok(Some(200)) => acknowledged.push(first),
                    _ => break,
                }
            }
            acknowledged
        }));
    }
    let started = Instant::now();
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let killed = Command::new("kill")
        .args(["-KILL", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    child.wait().unwrap();
    let mut acknowledged = Vec::new();
    for w in writers {
        acknowledged.extend(w.await.unwrap());
    }
    assert!(
        acknowledged.len() >= 4,
        "ingest ran for {:?} but only {} batches were acknowledged",
        started.elapsed(),
        acknowledged.len()
    );

    eprintln!(
        "{} batches of {BATCH} points acknowledged before SIGKILL",
        acknowledged.len()
    );
    let (mut child, addr) = start(&db, data.path());
    // Page by page, as the mlflow client reads it.
    let mut steps = BTreeSet::new();
    let mut token = String::new();
    for page in 0.. {
        assert!(page < 1_000, "get-history kept answering with a next page");
        let history = common::request(
            addr,
            "GET",
            &format!(
                "/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key=loss&max_results=25000&page_token={token}"
            ),
            &[],
            b"",
        )
        .await
        .json();
        if let Some(points) = history["metrics"].as_array() {
            steps.extend(points.iter().filter_map(|m| m["step"].as_i64()));
        }
        match history["next_page_token"].as_str() {
            Some(next) => {
                token = next
                    .replace('+', "%2B")
                    .replace('/', "%2F")
                    .replace('=', "%3D")
            }
            None => break,
        }
    }
    for first in &acknowledged {
        for step in *first..*first + BATCH {
            assert!(steps.contains(&step), "acknowledged step {step} was lost");
        }
    }
    // No torn batches: every stored batch is whole.
    for step in &steps {
        let first = step - (step % 1_000_000) % BATCH;
        assert!(
            (first..first + BATCH).all(|s| steps.contains(&s)),
            "batch starting at {first} is partly stored"
        );
    }
    let _ = child.kill();
    let _ = child.wait();
}
