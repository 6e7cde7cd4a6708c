//! Fair share on the real server, local executor, simulated GPUs: teams'
//! quotas set by an admin, a team within its quota taking borrowed GPUs
//! back (the borrowed job stopped, requeued without spending a retry, and
//! resuming from its checkpoint), the queue ordered by usage and priority,
//! and the usage each person may see.

use crate::common;

use std::time::Duration;

use common::{Response, TestServer, request};
use serde_json::{Value, json};
use trainyard_store::{GpuSpan, SignIn, Store};

/// Someone signed in, with an API token; their account id.
async fn person(store: &Store, name: &str, groups: &[&str], admin: bool) -> (String, i64) {
    let user = store
        .sign_in(SignIn {
            subject: format!("sub-{name}"),
            username: name.to_owned(),
            display_name: name.to_uppercase(),
            email: None,
            is_admin: admin,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
        .await
        .unwrap();
    let token = store.create_api_token(user.id, "test", None).await.unwrap();
    (format!("Bearer {}", token.secret), user.id)
}

async fn call(server: &TestServer, method: &str, path: &str, auth: &str, body: &Value) -> Response {
    let text = if body.is_null() {
        String::new()
    } else {
        body.to_string()
    };
    let headers = [
        ("Content-Type", "application/json"),
        ("Authorization", auth),
    ];
    request(server.addr, method, path, &headers, text.as_bytes()).await
}

async fn submit_as(server: &TestServer, auth: &str, spec: Value) -> i64 {
    let answer = call(server, "POST", "/api/trainyard/v1/jobs", auth, &spec).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    answer.json()["job"]["id"].as_i64().unwrap()
}

async fn job_as(server: &TestServer, auth: &str, id: i64) -> Value {
    let answer = call(
        server,
        "GET",
        &format!("/api/trainyard/v1/jobs/{id}"),
        auth,
        &Value::Null,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()
}

/// Polls until `check` holds for the job (the test fails after `seconds`).
async fn wait_until(
    server: &TestServer,
    auth: &str,
    id: i64,
    seconds: u64,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    for _ in 0..seconds * 10 {
        let detail = job_as(server, auth, id).await;
        if check(&detail) {
            return detail;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("job {id}: never {what}: {}", job_as(server, auth, id).await);
}

async fn log_of(server: &TestServer, auth: &str, id: i64, attempt: u32) -> String {
    let answer = call(
        server,
        "GET",
        &format!("/api/trainyard/v1/jobs/{id}/logs?attempt={attempt}"),
        auth,
        &Value::Null,
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body
}

fn state(detail: &Value) -> &str {
    detail["job"]["state"].as_str().unwrap_or_default()
}

fn sleeper(name: &str) -> Value {
    json!({"name": name, "command": "sleep 600",
           "resources": {"gpus": 1, "cpus": 0.1, "memory": "64Mi"}})
}

/// The id of a team by name, from the admin's list.
async fn team_id(server: &TestServer, admin: &str, name: &str) -> i64 {
    let teams = call(
        server,
        "GET",
        "/api/trainyard/v1/teams",
        admin,
        &Value::Null,
    )
    .await;
    assert_eq!(teams.status, 200, "{}", teams.body);
    teams
        .json()
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == name)
        .unwrap()["id"]
        .as_i64()
        .unwrap()
}

#[tokio::test]
async fn a_team_within_its_quota_takes_borrowed_gpus_back_and_the_preempted_job_resumes() {
    // People first, in the database before the server runs (a second
    // writer beside a running server's SQLite may find it busy).
    let db = trainyard_test_db::TestDb::new().await;
    let store = Store::connect(&db.url, 1).await.unwrap();
    store.migrate().await.unwrap();
    let (ada, _) = person(&store, "ada", &["vision"], false).await;
    let (carol, _) = person(&store, "carol", &["nlp"], false).await;
    let (admin, _) = person(&store, "root", &["gpu-admins"], true).await;
    store.close().await.unwrap();
    let venvs = common::job_venvs();
    let server = TestServer::start_in(
        db,
        tempfile::tempdir().unwrap(),
        &[
            ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
            ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
            ("TRAINYARD_SIMULATED_GPUS", "4"),
            ("TRAINYARD_VENV_DIR", venvs.as_str()),
            // Room for the demo to finish its epoch and save under a loaded
            // machine (twice it was killed first at the 10 s default).
            ("TRAINYARD_JOB_STOP_GRACE_SECS", "60"),
        ],
    )
    .await;

    // Quotas: admins only, checked field by field.
    let vision = team_id(&server, &admin, "vision").await;
    let nlp = team_id(&server, &admin, "nlp").await;
    let path = |id: i64| format!("/api/trainyard/v1/teams/{id}");
    let refused = call(
        &server,
        "PUT",
        &path(vision),
        &ada,
        &json!({"quota_gpus": 4}),
    )
    .await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let bad = call(
        &server,
        "PUT",
        &path(vision),
        &admin,
        &json!({"quota_gpus": 2, "share": 0}),
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["fields"][0]["field"], "share");
    for id in [vision, nlp] {
        let set = call(&server, "PUT", &path(id), &admin, &json!({"quota_gpus": 2})).await;
        assert_eq!(set.status, 200, "{}", set.body);
        assert_eq!(set.json()["quota_gpus"], 2);
        assert_eq!(set.json()["share"], 1.0);
    }
    // A job that may not be preempted must fit in its team's guarantee.
    let never = call(
        &server,
        "POST",
        "/api/trainyard/v1/jobs",
        &ada,
        &json!({"name": "x", "command": "true", "preemptible": false,
                "resources": {"gpus": 3, "cpus": 0.1, "memory": "64Mi"}}),
    )
    .await;
    assert_eq!(never.status, 400, "{}", never.body);
    assert_eq!(never.json()["fields"][0]["field"], "preemptible");
    assert!(
        never
            .body
            .contains("team vision is guaranteed 2 and the job asks for 3"),
        "{}",
        never.body
    );
    // Someone sees their own teams only.
    let mine = call(
        &server,
        "GET",
        "/api/trainyard/v1/teams",
        &ada,
        &Value::Null,
    )
    .await
    .json();
    assert_eq!(mine.as_array().unwrap().len(), 1);
    assert_eq!(mine[0]["name"], "vision");
    // A job counts against one of its submitter's teams.
    let wrong = call(
        &server,
        "POST",
        "/api/trainyard/v1/jobs",
        &ada,
        &json!({"name": "x", "command": "true", "team": "nlp"}),
    )
    .await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    assert_eq!(wrong.json()["fields"][0]["field"], "team");

    // Team vision borrows all 4 GPUs: three sleepers, and the CPU demo
    // (lowest priority, so the first to give its GPU back) that keeps
    // checkpoints.
    let mut own = Vec::new();
    for n in 0..3 {
        own.push(submit_as(&server, &ada, sleeper(&format!("sleeper {n}"))).await);
        wait_until(&server, &ada, own[n], 60, "running", |d| {
            state(d) == "RUNNING"
        })
        .await;
    }
    let demo = submit_as(
        &server,
        &ada,
        json!({"name": "resumable", "template": "cpu-demo", "priority": -1,
               "resources": {"gpus": 1, "cpus": 1, "memory": "1Gi"},
               "hyperparameters": {"epochs": 100000, "delay": 0.05}}),
    )
    .await;
    // The first run on a machine installs mlflow and numpy.
    wait_until(&server, &ada, demo, 600, "running", |d| {
        state(d) == "RUNNING"
    })
    .await;
    let detail = job_as(&server, &ada, demo).await;
    assert_eq!(detail["job"]["team"], "vision");
    let first_run = detail["job"]["run_id"].as_str().unwrap().to_owned();
    let mut trained = false;
    for _ in 0..600 {
        if log_of(&server, &ada, demo, 0).await.contains("epoch 30/") {
            trained = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        trained,
        "the demo trains: {}",
        log_of(&server, &ada, demo, 0).await
    );
    let borrowed: Vec<bool> = {
        let mut flags = Vec::new();
        for id in own.iter().chain([&demo]) {
            flags.push(
                job_as(&server, &ada, *id).await["job"]["borrowed"]
                    .as_bool()
                    .unwrap(),
            );
        }
        flags
    };
    assert_eq!(
        borrowed,
        vec![false, false, true, true],
        "the first two fill the quota"
    );
    let teams = call(
        &server,
        "GET",
        "/api/trainyard/v1/teams",
        &admin,
        &Value::Null,
    )
    .await
    .json();
    let vision_now = teams
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "vision")
        .unwrap()
        .clone();
    assert_eq!(
        (
            vision_now["gpus_in_use"].as_u64(),
            vision_now["gpus_borrowed"].as_u64()
        ),
        (Some(4), Some(2))
    );

    // Team nlp, within its quota, needs 1 GPU: the demo gives its back.
    let needs = submit_as(&server, &carol, sleeper("carol's")).await;
    let requeued = wait_until(&server, &ada, demo, 60, "requeued", |d| {
        state(d) == "QUEUED" && d["job"]["attempt"] == 1
    })
    .await;
    assert_eq!(requeued["job"]["retries"], 1, "no retry was spent");
    let events = requeued["events"].as_array().unwrap();
    let why =
        format!("preempted: team nlp is within its quota of 2 GPUs and needs 1 (job {needs})");
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "preempting" && e["message"] == why.as_str()),
        "{events:?}"
    );
    assert!(
        events.iter().any(|e| e["kind"] == "requeued"
            && e["message"]
                .as_str()
                .unwrap()
                .contains("without spending a retry")),
        "{events:?}"
    );
    let first = log_of(&server, &ada, demo, 0).await;
    let saved: u64 = first
        .lines()
        .find_map(|l| l.strip_prefix("stopping: saved the checkpoint after epoch "))
        .unwrap_or_else(|| panic!("the demo saved on SIGTERM: {first}\nevents: {events:?}"))
        .trim()
        .parse()
        .unwrap();
    wait_until(&server, &carol, needs, 60, "running", |d| {
        state(d) == "RUNNING"
    })
    .await;
    // Its first run ended KILLED, saying why; the next attempt has its own.
    let run = call(
        &server,
        "GET",
        &format!("/api/2.0/mlflow/runs/get?run_id={first_run}"),
        &ada,
        &Value::Null,
    )
    .await;
    assert_eq!(run.status, 200, "{}", run.body);
    let run = run.json()["run"].clone();
    assert_eq!(run["info"]["status"], "KILLED");
    let tags = run["data"]["tags"].as_array().unwrap();
    assert!(
        tags.iter()
            .any(|t| t["key"] == "trainyard.preempted" && t["value"] == why.as_str()),
        "{tags:?}"
    );
    assert_ne!(requeued["job"]["run_id"], first_run.as_str());
    let waiting = wait_until(&server, &ada, demo, 30, "told why it waits", |d| {
        d["job"]["pending_reason"].as_str().is_some()
    })
    .await;
    assert_eq!(
        waiting["job"]["pending_reason"],
        "team vision: 3 of 2 guaranteed GPUs in use; waiting for idle GPUs to borrow"
    );

    // Room returns: the demo runs again and resumes after the epoch it saved.
    let cancel = call(
        &server,
        "POST",
        &format!("/api/trainyard/v1/jobs/{}/cancel", own[0]),
        &ada,
        &Value::Null,
    )
    .await;
    assert!(cancel.status < 300, "{}", cancel.body);
    wait_until(&server, &ada, demo, 120, "running again", |d| {
        state(d) == "RUNNING"
    })
    .await;
    let resumed = format!("resumed from the checkpoint after epoch {saved}");
    let mut second = String::new();
    for _ in 0..600 {
        second = log_of(&server, &ada, demo, 1).await;
        if second.contains(&format!("epoch {}/", saved + 1)) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(second.contains(&resumed), "{second}");
    assert!(
        second.contains(&format!("epoch {}/100000", saved + 1)),
        "{second}"
    );
    assert!(
        !second.contains("epoch 1/100000"),
        "it did not start over: {second}"
    );

    // Usage: GPU-hours by day; carol sees hers and nlp's, not ada's.
    let hers = call(
        &server,
        "GET",
        "/api/trainyard/v1/usage?period=day",
        &carol,
        &Value::Null,
    )
    .await;
    assert_eq!(hers.status, 200, "{}", hers.body);
    let rows = hers.json();
    assert!(!rows.as_array().unwrap().is_empty(), "{rows}");
    assert!(
        rows.as_array()
            .unwrap()
            .iter()
            .all(|r| r["user"] == "carol" && r["team"] == "nlp"),
        "{rows}"
    );
    let all = call(
        &server,
        "GET",
        "/api/trainyard/v1/usage?period=month&format=csv",
        &admin,
        &Value::Null,
    )
    .await;
    assert_eq!(all.status, 200, "{}", all.body);
    assert!(
        all.body.starts_with("period_start,team,person,gpu_hours\n"),
        "{}",
        all.body
    );
    assert!(all.body.contains(",vision,ada,"), "{}", all.body);
    let bad = call(
        &server,
        "GET",
        "/api/trainyard/v1/usage?period=year",
        &carol,
        &Value::Null,
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    for id in own.iter().chain([&demo]) {
        call(
            &server,
            "POST",
            &format!("/api/trainyard/v1/jobs/{id}/cancel"),
            &ada,
            &Value::Null,
        )
        .await;
    }
    call(
        &server,
        "POST",
        &format!("/api/trainyard/v1/jobs/{needs}/cancel"),
        &carol,
        &Value::Null,
    )
    .await;
    for id in own.iter().chain([&demo]) {
        wait_until(&server, &ada, *id, 60, "ended", |d| state(d) == "CANCELLED").await;
    }
}

#[tokio::test]
async fn the_queue_goes_by_priority_then_by_usage() {
    // People and their past use, in the database before the server reads it.
    let db = trainyard_test_db::TestDb::new().await;
    let store = Store::connect(&db.url, 1).await.unwrap();
    store.migrate().await.unwrap();
    let (ada, ada_id) = person(&store, "ada", &["vision"], false).await;
    let (bob, _) = person(&store, "bob", &["vision"], false).await;
    let (carol, _) = person(&store, "carol", &["nlp"], false).await;
    let (root, _) = person(&store, "root", &["vision"], true).await;
    let vision = store
        .team_policies()
        .await
        .unwrap()
        .into_iter()
        .find(|t| t.name == "vision")
        .unwrap()
        .id;
    let now = trainyard_store::now_millis();
    store
        .add_gpu_usage(&[GpuSpan {
            team_id: vision,
            user_id: ada_id,
            from_ms: now - 20 * 3_600_000,
            to_ms: now - 10 * 3_600_000,
            gpus: 8,
        }])
        .await
        .unwrap();
    store.close().await.unwrap();
    let server = TestServer::start_in(
        db,
        tempfile::tempdir().unwrap(),
        &[
            ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
            ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
            ("TRAINYARD_SIMULATED_GPUS", "4"),
        ],
    )
    .await;

    // Every GPU busy; ada (80 GPU-hours yesterday) asks before bob (none).
    let all_four = submit_as(
        &server,
        &carol,
        json!({"name": "big", "command": "sleep 600", "resources": {"gpus": 4, "cpus": 0.1, "memory": "64Mi"}}),
    )
    .await;
    wait_until(&server, &carol, all_four, 60, "running", |d| {
        state(d) == "RUNNING"
    })
    .await;
    let heavy = submit_as(&server, &ada, sleeper("ada's")).await;
    let light = submit_as(&server, &bob, sleeper("bob's")).await;
    let position = |d: &Value| d["job"]["queue_position"].as_u64();
    wait_until(&server, &bob, light, 30, "first in the queue", |d| {
        position(d) == Some(1)
    })
    .await;
    let d = wait_until(&server, &ada, heavy, 30, "second", |d| {
        position(d) == Some(2)
    })
    .await;
    assert_eq!(
        d["job"]["pending_reason"], "no node has 1 free GPU; largest free block is 0",
        "no quotas: plain fair share"
    );
    // A priority above 0 would pass fair share: admins only give one.
    let urgent = json!({"name": "urgent", "command": "sleep 600", "priority": 5,
                        "resources": {"gpus": 1, "cpus": 0.1, "memory": "64Mi"}});
    let refused = call(&server, "POST", "/api/trainyard/v1/jobs", &ada, &urgent).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("priority") && refused.body.contains("admins"),
        "{}",
        refused.body
    );
    // A higher priority still goes first.
    let urgent = submit_as(&server, &root, urgent).await;
    wait_until(&server, &root, urgent, 30, "first", |d| {
        position(d) == Some(1)
    })
    .await;
    wait_until(&server, &bob, light, 30, "second", |d| {
        position(d) == Some(2)
    })
    .await;
    // Nothing starves: bob's 4-GPU job (behind ada's urgent one and bob's
    // own) holds the GPUs that free up; ada's later job does not take them.
    let wide = submit_as(
        &server,
        &bob,
        json!({"name": "wide", "command": "sleep 600",
               "resources": {"gpus": 4, "cpus": 0.1, "memory": "64Mi"}}),
    )
    .await;
    wait_until(&server, &bob, wide, 30, "third", |d| position(d) == Some(3)).await;
    wait_until(&server, &ada, heavy, 30, "fourth", |d| {
        position(d) == Some(4)
    })
    .await;
    call(
        &server,
        "POST",
        &format!("/api/trainyard/v1/jobs/{all_four}/cancel"),
        &carol,
        &Value::Null,
    )
    .await;
    wait_until(&server, &root, urgent, 60, "running", |d| {
        state(d) == "RUNNING"
    })
    .await;
    wait_until(&server, &bob, light, 60, "running", |d| {
        state(d) == "RUNNING"
    })
    .await;
    let held = format!("is kept for job {wide}, which is ahead in the queue");
    wait_until(&server, &ada, heavy, 30, "held back", |d| {
        d["job"]["pending_reason"]
            .as_str()
            .is_some_and(|r| r.ends_with(&held))
    })
    .await;
    assert_eq!(state(&job_as(&server, &bob, wide).await), "QUEUED");
    for (id, who) in [(urgent, &root), (light, &bob)] {
        call(
            &server,
            "POST",
            &format!("/api/trainyard/v1/jobs/{id}/cancel"),
            who,
            &Value::Null,
        )
        .await;
    }
    wait_until(&server, &bob, wide, 60, "running", |d| {
        state(d) == "RUNNING"
    })
    .await;
    assert_eq!(state(&job_as(&server, &ada, heavy).await), "QUEUED");
    for (id, who) in [(heavy, &ada), (wide, &bob)] {
        call(
            &server,
            "POST",
            &format!("/api/trainyard/v1/jobs/{id}/cancel"),
            who,
            &Value::Null,
        )
        .await;
    }
}

#[tokio::test]
async fn admins_make_teams_ahead_and_jobs_move_between_teams() {
    let db = trainyard_test_db::TestDb::new().await;
    let store = Store::connect(&db.url, 1).await.unwrap();
    store.migrate().await.unwrap();
    let (ada, _) = person(&store, "ada", &["vision", "nlp"], false).await;
    let (bob, _) = person(&store, "bob", &["nlp"], false).await;
    let (admin, _) = person(&store, "root", &["gpu-admins"], true).await;
    store.close().await.unwrap();
    let server = TestServer::start_in(
        db,
        tempfile::tempdir().unwrap(),
        &[
            ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
            ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
            ("TRAINYARD_SIMULATED_GPUS", "1"),
        ],
    )
    .await;
    let teams = "/api/trainyard/v1/teams";

    // A team made before its group's first member signs in, with its quota.
    let refused = call(&server, "POST", teams, &ada, &json!({"name": "robotics"})).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let made = call(
        &server,
        "POST",
        teams,
        &admin,
        &json!({"name": " robotics ", "quota_gpus": 1, "share": 1.5}),
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    let made = made.json();
    assert_eq!(made["name"], "robotics", "trimmed");
    assert_eq!(made["quota_gpus"], 1);
    assert_eq!(made["share"], 1.5);
    assert_eq!(made["members"], 0);
    assert_eq!(team_id(&server, &admin, "robotics").await, made["id"]);
    let again = call(&server, "POST", teams, &admin, &json!({"name": "robotics"})).await;
    assert_eq!(again.status, 409, "{}", again.body);
    assert!(
        again.body.contains("team `robotics` already exists"),
        "{}",
        again.body
    );
    for (body, field) in [
        (json!({"name": "  "}), "name"),
        (json!({"name": "a\nb"}), "name"),
        (json!({"name": "x".repeat(251)}), "name"),
        (
            json!({"name": "big", "quota_gpus": 1_000_000}),
            "quota_gpus",
        ),
        (json!({"name": "odd", "share": -1}), "share"),
    ] {
        let bad = call(&server, "POST", teams, &admin, &body).await;
        assert_eq!(bad.status, 400, "{body}: {}", bad.body);
        assert_eq!(bad.json()["fields"][0]["field"], field, "{}", bad.body);
    }
    let unknown = call(&server, "POST", teams, &admin, &json!({"title": "x"})).await;
    assert_eq!(unknown.status, 400, "{}", unknown.body);

    // Ada files a running job under vision, then moves it to her other team.
    let id = submit_as(
        &server,
        &ada,
        json!({"name": "misfiled", "command": "sleep 600", "team": "vision",
               "resources": {"gpus": 1, "cpus": 0.1, "memory": "64Mi"}}),
    )
    .await;
    wait_until(&server, &ada, id, 60, "running", |d| {
        d["job"]["state"] == "RUNNING"
    })
    .await;
    let path = format!("/api/trainyard/v1/jobs/{id}/team");
    let moved = call(&server, "PUT", &path, &ada, &json!({"team": "nlp"})).await;
    assert_eq!(moved.status, 200, "{}", moved.body);
    assert_eq!(moved.json()["job"]["team"], "nlp");
    let detail = job_as(&server, &ada, id).await;
    assert_eq!(detail["job"]["team"], "nlp");
    let events: Vec<String> = detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}: {}",
                e["kind"].as_str().unwrap(),
                e["message"].as_str().unwrap()
            )
        })
        .collect();
    assert!(
        events
            .iter()
            .any(|e| e == "team: moved from vision to nlp by ada"),
        "{events:?}"
    );
    // Its run is filed under the team too: bob, of nlp, reads it now.
    let run_id = detail["job"]["run_id"].as_str().unwrap();
    let run = call(
        &server,
        "GET",
        &format!("/api/2.0/mlflow/runs/get?run_id={run_id}"),
        &bob,
        &Value::Null,
    )
    .await;
    assert_eq!(run.status, 200, "{}", run.body);
    // Not to a team she is not in, nor to one that does not exist; a
    // teammate may read the job but not move it.
    let not_hers = call(&server, "PUT", &path, &ada, &json!({"team": "robotics"})).await;
    assert_eq!(not_hers.status, 400, "{}", not_hers.body);
    assert_eq!(not_hers.json()["fields"][0]["field"], "team");
    assert!(not_hers.body.contains("yours: "), "{}", not_hers.body);
    let nowhere = call(&server, "PUT", &path, &admin, &json!({"team": "nobody"})).await;
    assert_eq!(nowhere.status, 400, "{}", nowhere.body);
    assert!(
        nowhere.body.contains("there is no team `nobody`"),
        "{}",
        nowhere.body
    );
    let teammate = call(&server, "PUT", &path, &bob, &json!({"team": "nlp"})).await;
    assert_eq!(teammate.status, 403, "{}", teammate.body);
    // An admin files it under any team; the queue sees it there.
    let by_admin = call(&server, "PUT", &path, &admin, &json!({"team": "robotics"})).await;
    assert_eq!(by_admin.status, 200, "{}", by_admin.body);
    let listed = call(&server, "GET", teams, &admin, &Value::Null)
        .await
        .json();
    let robotics = listed
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "robotics")
        .unwrap()
        .clone();
    assert_eq!(robotics["gpus_in_use"], 1, "{listed}");
    // Once it has ended it stays where it ran.
    let cancel = call(
        &server,
        "POST",
        &format!("/api/trainyard/v1/jobs/{id}/cancel"),
        &ada,
        &json!({}),
    )
    .await;
    assert_eq!(cancel.status, 200, "{}", cancel.body);
    wait_until(&server, &ada, id, 60, "cancelled", |d| {
        d["job"]["state"] == "CANCELLED"
    })
    .await;
    // Each team it ran for is charged the part it ran for it; before, the
    // team it ended under took the whole attempt.
    let usage = call(
        &server,
        "GET",
        "/api/trainyard/v1/usage?period=day",
        &admin,
        &Value::Null,
    )
    .await;
    assert_eq!(usage.status, 200, "{}", usage.body);
    let rows = usage.json();
    let mut charged: Vec<&str> = rows
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["user"] == "ada" && r["gpu_hours"].as_f64().unwrap() > 0.0)
        .map(|r| r["team"].as_str().unwrap())
        .collect();
    charged.sort();
    assert_eq!(charged, ["nlp", "robotics", "vision"], "{}", usage.body);
    let late = call(&server, "PUT", &path, &admin, &json!({"team": "nlp"})).await;
    assert_eq!(late.status, 400, "{}", late.body);
    assert!(late.body.contains("has already ended"), "{}", late.body);
    // Her retry is filed under a team of hers, not under robotics, which
    // she is not in (it would lend her its guarantee, and show it her run).
    let retried = call(
        &server,
        "POST",
        &format!("/api/trainyard/v1/jobs/{id}/retry"),
        &ada,
        &json!({}),
    )
    .await;
    assert_eq!(retried.status, 201, "{}", retried.body);
    let retried = retried.json()["job"]["id"].as_i64().unwrap();
    let detail = job_as(&server, &ada, retried).await;
    let team = &detail["job"]["team"];
    assert!(team == "vision" || team == "nlp", "{detail}");
}

/// An admin drains the machine's node: nothing new starts there and the
/// queue says why; drained again with `stop_jobs`, what runs is stopped and
/// queued again with its retries untouched; resumed, both run.
#[tokio::test]
async fn an_admin_drains_a_node_and_resumes_it() {
    let db = trainyard_test_db::TestDb::new().await;
    let store = Store::connect(&db.url, 1).await.unwrap();
    store.migrate().await.unwrap();
    let (ada, _) = person(&store, "ada", &["vision"], false).await;
    let (admin, _) = person(&store, "root", &["gpu-admins"], true).await;
    store.close().await.unwrap();
    let server = TestServer::start_in(
        db,
        tempfile::tempdir().unwrap(),
        &[
            ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
            ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
            ("TRAINYARD_SIMULATED_GPUS", "2"),
        ],
    )
    .await;
    let listed = call(
        &server,
        "GET",
        "/api/trainyard/v1/nodes",
        &admin,
        &Value::Null,
    )
    .await;
    assert_eq!(listed.status, 200, "{}", listed.body);
    let node = listed.json()["nodes"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let drain_path = format!("/api/trainyard/v1/nodes/{node}/drain");
    let drain = |auth: &str, body: Value| {
        let (auth, path) = (auth.to_owned(), drain_path.clone());
        let server = &server;
        async move { call(server, "PUT", &path, &auth, &body).await }
    };

    // Admins only; the reason is said; the node is one the executor has.
    let refused = drain(&ada, json!({"reason": "mine now"})).await;
    assert_eq!(refused.status, 403, "{}", refused.body);
    let unsaid = drain(&admin, json!({"reason": "  "})).await;
    assert_eq!(unsaid.status, 400, "{}", unsaid.body);
    assert_eq!(unsaid.json()["fields"][0]["field"], "reason");
    let unknown = call(
        &server,
        "PUT",
        "/api/trainyard/v1/nodes/no-such-node/drain",
        &admin,
        &json!({"reason": "x"}),
    )
    .await;
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    assert!(
        unknown.body.contains(&format!("its nodes: {node}")),
        "{}",
        unknown.body
    );

    let mut spec = sleeper("running");
    spec["retries"] = json!(1);
    let running = submit_as(&server, &ada, spec).await;
    wait_until(&server, &ada, running, 60, "running", |d| {
        state(d) == "RUNNING"
    })
    .await;
    let drained = drain(&admin, json!({"reason": "driver update"})).await;
    assert_eq!(drained.status, 200, "{}", drained.body);
    assert_eq!(drained.json()["by"], "root");
    assert_eq!(drained.json()["stop_jobs"], false);
    let shown = call(
        &server,
        "GET",
        "/api/trainyard/v1/nodes",
        &admin,
        &Value::Null,
    )
    .await
    .json();
    assert_eq!(shown["nodes"][0]["takes_jobs"], false);
    assert_eq!(shown["nodes"][0]["drain"]["reason"], "driver update");

    // A GPU is free, but nothing new starts there; the job says why.
    let waiting = submit_as(&server, &ada, sleeper("waiting")).await;
    let detail = wait_until(&server, &ada, waiting, 30, "given a reason", |d| {
        d["job"]["pending_reason"].is_string()
    })
    .await;
    assert_eq!(state(&detail), "QUEUED");
    assert_eq!(
        detail["job"]["pending_reason"],
        format!(
            "{node}, the only node it fits on, takes no new jobs now: it is drained \
             (driver update)"
        )
    );
    assert_eq!(state(&job_as(&server, &ada, running).await), "RUNNING");

    // Drained again, stopping what runs there: requeued, retries untouched.
    let stopping = drain(
        &admin,
        json!({"reason": "GPU 1 fell off the bus", "stop_jobs": true}),
    )
    .await;
    assert_eq!(stopping.status, 200, "{}", stopping.body);
    let requeued = wait_until(&server, &ada, running, 60, "requeued", |d| {
        state(d) == "QUEUED" && d["job"]["attempt"] == 1
    })
    .await;
    // One more allowed for the stop: none of its own was spent.
    assert_eq!(
        requeued["job"]["retries"], 2,
        "no retry was spent: {requeued}"
    );
    let why = format!(
        "node {node} is drained (GPU 1 fell off the bus): the job is stopped and queued \
         again, its retries untouched"
    );
    let events = requeued["events"].as_array().unwrap();
    assert!(
        events
            .iter()
            .any(|e| e["kind"] == "preempting" && e["message"] == why.as_str()),
        "{events:?}"
    );

    // Resumed: both run; a second resume finds no drain.
    assert_eq!(
        call(&server, "DELETE", &drain_path, &ada, &Value::Null)
            .await
            .status,
        403
    );
    let resumed = call(&server, "DELETE", &drain_path, &admin, &Value::Null).await;
    assert_eq!(resumed.status, 204, "{}", resumed.body);
    for id in [running, waiting] {
        wait_until(&server, &ada, id, 60, "running again", |d| {
            state(d) == "RUNNING"
        })
        .await;
    }
    assert_eq!(
        call(
            &server,
            "GET",
            "/api/trainyard/v1/nodes",
            &admin,
            &Value::Null
        )
        .await
        .json()["nodes"][0]["takes_jobs"],
        true
    );
    assert_eq!(
        call(&server, "DELETE", &drain_path, &admin, &Value::Null)
            .await
            .status,
        404
    );
    // An admin stops one of Ada's jobs; she cancels the other.
    let stop = |id: i64, auth: &str| {
        let (auth, path) = (
            auth.to_owned(),
            format!("/api/trainyard/v1/jobs/{id}/cancel"),
        );
        let server = &server;
        async move { call(server, "POST", &path, &auth, &json!({})).await }
    };
    assert_eq!(stop(running, &admin).await.status, 200);
    assert_eq!(stop(waiting, &ada).await.status, 200);

    // The audit trail: what was done to what is not one person's alone,
    // by whom, newest first; admins only, narrowed by action and person.
    let trail = |query: &str, auth: &str| {
        let (auth, path) = (auth.to_owned(), format!("/api/trainyard/v1/audit{query}"));
        let server = &server;
        async move { call(server, "GET", &path, &auth, &Value::Null).await }
    };
    let all = trail("", &admin).await;
    assert_eq!(all.status, 200, "{}", all.body);
    let all = all.json();
    let seen: Vec<(&str, &str, &str, &str)> = all
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["action"].as_str().unwrap(),
                e["actor"].as_str().unwrap(),
                e["target"].as_str().unwrap(),
                e["detail"].as_str().unwrap(),
            )
        })
        .collect();
    let on_node = format!("node {node}");
    assert_eq!(
        seen,
        vec![
            (
                "job.stop",
                "root",
                format!("job {running}").as_str(),
                "ada's job running"
            ),
            ("node.resume", "root", on_node.as_str(), ""),
            (
                "node.drain",
                "root",
                on_node.as_str(),
                "GPU 1 fell off the bus (its jobs stopped and queued again)"
            ),
            ("node.drain", "root", on_node.as_str(), "driver update"),
        ],
        "{all}"
    );
    let drains = trail("?action=node.drain", &admin).await.json();
    assert_eq!(drains.as_array().unwrap().len(), 2, "{drains}");
    let older = trail(&format!("?before={}", all[2]["id"]), &admin)
        .await
        .json();
    assert_eq!(older.as_array().unwrap().len(), 1, "{older}");
    assert_eq!(older[0]["detail"], "driver update");
    let hers = trail("?actor=ada", &admin).await.json();
    assert_eq!(hers, json!([]));
    let wrong = trail("?action=node.explode", &admin).await;
    assert_eq!(wrong.status, 400, "{}", wrong.body);
    assert!(wrong.body.contains("node.drain"), "{}", wrong.body);
    assert_eq!(trail("", &ada).await.status, 403);
}
