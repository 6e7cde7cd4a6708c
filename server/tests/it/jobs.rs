//! Jobs end to end on the local executor: submit over the REST API, the job
//! runs under its shim with its environment, its log and run are kept, and
//! cancel, max runtime, retries, admission and restarts behave.

use crate::common;

use std::time::Duration;

use common::{
    TestServer, job, last_message, log, post_json, request, run, submit, tar_gz, wait_for,
    wait_longer,
};
use serde_json::{Value, json};

async fn submit_yaml(server: &TestServer, yaml: &str) -> common::Response {
    request(
        server.addr,
        "POST",
        "/api/trainyard/v1/jobs",
        &[("Content-Type", "application/yaml")],
        yaml.as_bytes(),
    )
    .await
}

fn event_kinds(detail: &Value) -> Vec<String> {
    detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["kind"].as_str().unwrap().to_owned())
        .collect()
}

fn pid_alive(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .map(|stat| {
            let state = stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .split_whitespace()
                .next();
            state != Some("Z")
        })
        .unwrap_or(false)
}

#[tokio::test]
async fn a_job_runs_with_its_environment_logs_to_its_run_and_finishes() {
    let server = TestServer::start_with(&[("TRAINYARD_SIMULATED_GPUS", "2")]).await;
    // This machine is a node with its (simulated, without a driver) GPUs.
    let store = trainyard_store::Store::connect(&server.db.url, 1)
        .await
        .unwrap();
    let nodes = store.list_nodes().await.unwrap();
    store.close().await.unwrap();
    assert_eq!(nodes.len(), 1);
    assert_eq!(nodes[0].gpus, 2);
    assert_eq!(nodes[0].state, "ready");
    // The job talks to the tracking server itself, as the mlflow client would.
    let script = r#"
import json, os, urllib.request
print("run", os.environ["MLFLOW_RUN_ID"], "exp", os.environ["MLFLOW_EXPERIMENT_ID"])
print("gpus", os.environ["CUDA_VISIBLE_DEVICES"], "lr", os.environ["HP_LR"])
print("secret", os.environ.get("TRAINYARD_DATABASE_URL", "absent"))
body = json.dumps({"run_id": os.environ["MLFLOW_RUN_ID"], "key": "loss", "value": 0.25, "timestamp": 1, "step": 7}).encode()
req = urllib.request.Request(os.environ["MLFLOW_TRACKING_URI"] + "/api/2.0/mlflow/runs/log-metric", body, {"Content-Type": "application/json"})
print("logged", urllib.request.urlopen(req).status)
"#;
    std::fs::write(server.data_dir.path().join("job.py"), script).unwrap();
    let yaml = format!(
        "name: env check\nexperiment: jobs-test\ncommand: python3 {} --lr {{lr}}\nresources:\n  gpus: 1\n  memory: 64Mi\nhyperparameters:\n  lr: 0.5\n",
        server.data_dir.path().join("job.py").display()
    );
    let answer = submit_yaml(&server, &yaml).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let id = answer.json()["job"]["id"].as_i64().unwrap();
    let detail = wait_for(&server, id, "SUCCEEDED").await;
    let job = &detail["job"];
    assert_eq!(job["exit_code"], 0);
    assert_eq!(job["gpu_indices"], json!([0]));
    let run_id = job["run_id"].as_str().unwrap().to_owned();
    let text = log(&server, id).await;
    assert!(
        text.contains(&format!("run {run_id} exp {}", job["experiment_id"])),
        "{text}"
    );
    assert!(text.contains("gpus 0 lr 0.5"), "{text}");
    assert!(
        text.contains("secret absent"),
        "the server's settings stay out: {text}"
    );
    assert!(text.contains("logged 200"), "{text}");
    assert_eq!(
        event_kinds(&detail),
        ["submitted", "starting", "started", "finished"]
    );

    let run = run(&server, &run_id).await;
    assert_eq!(run["info"]["status"], "FINISHED");
    assert!(run["info"]["end_time"].as_i64().is_some());
    assert_eq!(
        run["data"]["params"],
        json!([{"key": "lr", "value": "0.5"}])
    );
    let tags = run["data"]["tags"].as_array().unwrap();
    assert!(tags.contains(&json!({"key": "trainyard.job_id", "value": id.to_string()})));
    assert_eq!(run["data"]["metrics"][0]["key"], "loss");
    assert_eq!(run["data"]["metrics"][0]["step"], 7);

    // The log reads on from an offset.
    let from = server
        .get(&format!("/api/trainyard/v1/jobs/{id}/logs?offset=4"))
        .await;
    assert_eq!(from.body, text[4..]);
    assert_eq!(from.header("x-log-offset").unwrap(), text.len().to_string());
    assert_eq!(from.header("x-job-state").unwrap(), "SUCCEEDED");
}

#[tokio::test]
async fn a_failed_job_keeps_its_exit_code_and_is_retried_per_its_policy() {
    let server = TestServer::start().await;
    let id = submit(
        &server,
        json!({"name": "flaky", "command": "echo attempt; exit 3", "retries": 1,
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    let first_run = job(&server, id).await["job"]["run_id"].clone();
    let detail = wait_for(&server, id, "FAILED").await;
    assert_eq!(detail["job"]["exit_code"], 3);
    assert_eq!(detail["job"]["attempt"], 1, "one retry");
    let kinds = event_kinds(&detail);
    assert_eq!(
        kinds.iter().filter(|k| *k == "retried").count(),
        1,
        "{kinds:?}"
    );
    assert_eq!(kinds.last().unwrap(), "finished");
    // Each attempt has its run, and both failed.
    let second_run = detail["job"]["run_id"].clone();
    assert_ne!(first_run, second_run);
    for run_id in [first_run, second_run] {
        assert_eq!(
            run(&server, run_id.as_str().unwrap()).await["info"]["status"],
            "FAILED"
        );
    }
    let first_log = server
        .get(&format!("/api/trainyard/v1/jobs/{id}/logs?attempt=0"))
        .await;
    assert_eq!(first_log.body, "attempt\n");

    // Run again: a new job with the same spec and a run of its own.
    let again = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{id}/retry"),
        &json!({}),
    )
    .await;
    assert_eq!(again.status, 201, "{}", again.body);
    let new_id = again.json()["job"]["id"].as_i64().unwrap();
    assert_ne!(new_id, id);
    let redo = wait_for(&server, new_id, "FAILED").await;
    assert_eq!(redo["job"]["spec"], detail["job"]["spec"]);
    assert_eq!(redo["job"]["exit_code"], 3);
    assert_ne!(redo["job"]["run_id"], detail["job"]["run_id"]);
    // Its timeline begins with its submission, as a retry of the first.
    assert_eq!(redo["events"][0]["kind"], "submitted");
    assert!(
        redo["events"][0]["message"]
            .as_str()
            .unwrap()
            .contains(&format!("a retry of job {id}")),
        "{redo}"
    );
}

#[tokio::test]
async fn cancel_stops_a_running_job_with_its_children() {
    let server = TestServer::start_with(&[("TRAINYARD_JOB_STOP_GRACE_SECS", "2")]).await;
    let id = submit(
        &server,
        json!({"name": "long", "command": "sleep 60 & echo $! > child.pid; wait",
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, id, "RUNNING").await;
    let pid_file = server
        .data_dir
        .path()
        .join(format!("jobs/{id}/0/work/child.pid"));
    let mut child = None;
    for _ in 0..100 {
        if let Ok(text) = std::fs::read_to_string(&pid_file)
            && let Ok(pid) = text.trim().parse::<i32>()
        {
            child = Some(pid);
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let child = child.expect("the job wrote its child's pid");
    assert!(pid_alive(child));
    let answer = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{id}/cancel"),
        &json!({}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["job"]["cancel_requested"], true);
    let detail = wait_for(&server, id, "CANCELLED").await;
    assert!(
        !pid_alive(child),
        "the job's child {child} must be stopped too"
    );
    let run_id = detail["job"]["run_id"].as_str().unwrap();
    assert_eq!(run(&server, run_id).await["info"]["status"], "KILLED");
    // A running job is not run again; a finished one cannot be cancelled again.
    let running = submit(
        &server,
        json!({"name": "busy", "command": "sleep 60", "resources": {"memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, running, "RUNNING").await;
    let refused = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{running}/retry"),
        &json!({}),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("has not ended"), "{}", refused.body);
    post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{running}/cancel"),
        &json!({}),
    )
    .await;
    wait_for(&server, running, "CANCELLED").await;
    let again = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{id}/cancel"),
        &json!({}),
    )
    .await;
    assert_eq!(again.status, 400, "{}", again.body);
}

#[tokio::test]
async fn a_job_past_its_max_runtime_is_stopped_and_fails() {
    let server = TestServer::start_with(&[("TRAINYARD_JOB_STOP_GRACE_SECS", "1")]).await;
    let id = submit(
        &server,
        json!({"name": "slow", "command": "sleep 30", "max_runtime": "1s",
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    let detail = wait_for(&server, id, "FAILED").await;
    assert_eq!(detail["job"]["exit_code"], 128 + 15, "stopped by SIGTERM");
    let last = detail["events"].as_array().unwrap().last().unwrap().clone();
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains("max runtime of 1 s"),
        "{last}"
    );
}

/// A job stopped at its max runtime keeps its checkpoints; "Resume" runs
/// it again from them, once; a job that succeeds keeps none, and "Run
/// again" starts from scratch.
#[tokio::test]
async fn a_job_that_ran_out_of_time_is_resumed_from_its_checkpoints() {
    let server = TestServer::start_with(&[("TRAINYARD_JOB_STOP_GRACE_SECS", "1")]).await;
    let command = "if [ -e \"$TRAINYARD_CHECKPOINT_DIR/step\" ]; then \
                   echo \"resumed at step $(cat \"$TRAINYARD_CHECKPOINT_DIR/step\")\"; \
                   echo \"owned by $(stat -c %u \"$TRAINYARD_CHECKPOINT_DIR/step\") as $(id -u)\"; \
                   else echo 41 > \"$TRAINYARD_CHECKPOINT_DIR/step\"; echo saved; sleep 30; fi";
    let first = submit(
        &server,
        json!({"name": "long", "command": command, "max_runtime": "2s",
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    let ended = wait_for(&server, first, "FAILED").await;
    let message = last_message(&ended);
    assert!(
        message.contains("max runtime")
            && message
                .ends_with("; its checkpoints (3 B) are kept for 72 h for a job to resume from"),
        "{message}"
    );
    assert_eq!(ended["checkpoints"]["bytes"], 3, "{ended}");
    let folder = server
        .data_dir
        .path()
        .join(format!("jobs/{first}/checkpoints"));
    assert!(folder.join("step").exists());
    if trainyard_jobs::users::is_root() {
        // Root's while kept: the uid that wrote them runs others' jobs next.
        use std::os::unix::fs::MetadataExt;
        for path in [folder.clone(), folder.join("step")] {
            assert_eq!(std::fs::metadata(&path).unwrap().uid(), 0, "{path:?}");
        }
    }

    let resume = format!("/api/trainyard/v1/jobs/{first}/retry?resume=true");
    let answer = post_json(server.addr, &resume, &json!({})).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let second = answer.json()["job"]["id"].as_i64().unwrap();
    let done = wait_for(&server, second, "SUCCEEDED").await;
    assert_eq!(done["job"]["spec"]["resume_from"], first);
    assert!(log(&server, second).await.contains("resumed at step 41"));
    // Given to the uid the job that resumed runs as.
    let said = log(&server, second).await;
    let owned = said
        .lines()
        .find_map(|l| l.strip_prefix("owned by "))
        .and_then(|rest| rest.split_once(" as "))
        .unwrap_or_else(|| panic!("{said}"));
    assert_eq!(owned.0, owned.1.trim(), "{said}");
    // Taken: the first job keeps none now, and cannot be resumed twice.
    assert!(job(&server, first).await.get("checkpoints").is_none());
    assert!(!folder.exists());
    let again = post_json(server.addr, &resume, &json!({})).await;
    assert_eq!(again.status, 400, "{}", again.body);
    assert!(
        again.body.contains("keeps no checkpoints"),
        "{}",
        again.body
    );
    // It succeeded: nothing is kept, and running it again starts afresh.
    assert!(done.get("checkpoints").is_none(), "{done}");
    let answer = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{second}/retry"),
        &json!({}),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let third = answer.json()["job"]["id"].as_i64().unwrap();
    let fresh = wait_for(&server, third, "FAILED").await;
    assert!(fresh["job"]["spec"].get("resume_from").is_none(), "{fresh}");
    assert!(log(&server, third).await.contains("saved"));
    assert_eq!(fresh["checkpoints"]["bytes"], 3, "its own, kept: {fresh}");
    // From the command line, with the spec's own command.
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.json");
    std::fs::write(
        &spec,
        json!({"name": "from the cli", "command": command, "max_runtime": "30s",
               "resources": {"memory": "64Mi"}})
        .to_string(),
    )
    .unwrap();
    let spec_arg = spec.display().to_string();
    let (code, out, err) = cli(
        &server,
        &[
            "submit",
            &spec_arg,
            "--resume-from",
            &third.to_string(),
            "--follow",
        ],
    )
    .await;
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("resumed at step 41"), "{out}{err}");
    // Asked for, by the spec, from a job that keeps none: refused by field.
    let refused = post_json(
        server.addr,
        "/api/trainyard/v1/jobs",
        &json!({"name": "x", "command": "true", "resume_from": second}),
    )
    .await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("resume_from"), "{}", refused.body);
}

/// An ended job is deleted for good (REST and the command line): its
/// record, log, files and kept checkpoints go, its run stays. Not while it
/// runs, nor while a job that runs resumes from its checkpoints.
#[tokio::test]
async fn an_ended_job_is_deleted_for_good_and_its_run_stays() {
    let server = TestServer::start().await;
    let saves = json!({"name": "saves", "resources": {"memory": "64Mi"},
        "command": "echo 7 > \"$TRAINYARD_CHECKPOINT_DIR/step\"; echo saved; exit 3"});
    let first = submit(&server, saves).await;
    let failed = wait_for(&server, first, "FAILED").await;
    assert_eq!(failed["checkpoints"]["bytes"], 2, "{failed}");
    let folder = server.data_dir.path().join(format!("jobs/{first}"));
    assert!(folder.join("checkpoints/step").exists());
    let delete = |id: i64| {
        let path = format!("/api/trainyard/v1/jobs/{id}");
        let addr = server.addr;
        async move { request(addr, "DELETE", &path, &[], b"").await }
    };
    // Resumed from by a job that runs: not yet.
    let resumes = submit(
        &server,
        json!({"name": "resumes", "command": "sleep 30", "resume_from": first,
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, resumes, "RUNNING").await;
    let refused = delete(first).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains(&format!(
            "job {resumes} resumes from job {first}'s checkpoints"
        )),
        "{}",
        refused.body
    );
    // Running: not yet either.
    let refused = delete(resumes).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("has not ended; cancel it first"),
        "{}",
        refused.body
    );
    // Both ticked on the jobs list: each kept, saying why, and the answer
    // is the list's own (200), not the first refusal's.
    let from_list = server
        .post_form(
            "/api/delete_jobs",
            &format!("ids%5B0%5D={first}&ids%5B3%5D={resumes}&ids%5B4%5D={first}"),
        )
        .await;
    assert_eq!(from_list.status, 200, "{}", from_list.body);
    let answer = from_list.json();
    assert_eq!(answer["deleted"], json!([]), "{answer}");
    let refused = answer["refused"].as_array().unwrap();
    assert_eq!(refused.len(), 2, "each once: {answer}");
    assert_eq!(refused[0][0], first);
    assert!(
        refused[0][1].as_str().unwrap().starts_with(&format!(
            "job {resumes} resumes from job {first}'s checkpoints"
        )),
        "{answer}"
    );
    assert_eq!(refused[1][0], resumes);
    assert!(
        refused[1][1].as_str().unwrap().contains("has not ended"),
        "{answer}"
    );
    // Posted without JavaScript: back to the list, whatever each job's
    // answer was (a status of the call's own would cancel the redirect).
    let referer = format!("http://{}/jobs", server.addr);
    let plain = request(
        server.addr,
        "POST",
        "/api/delete_jobs",
        &[
            ("Content-Type", "application/x-www-form-urlencoded"),
            ("Accept", "text/html"),
            ("Referer", &referer),
        ],
        format!("ids%5B0%5D={resumes}").as_bytes(),
    )
    .await;
    assert_eq!(plain.status, 302, "{}", plain.body);
    assert!(
        plain
            .header("location")
            .is_some_and(|l| l.starts_with(&referer)),
        "{:?}",
        plain.header("location")
    );
    let none = server.post_form("/api/delete_jobs", "").await;
    assert_eq!(none.status, 400, "{}", none.body);
    assert!(
        none.body.contains("choose the jobs to delete"),
        "{}",
        none.body
    );
    let cancel = format!("/api/trainyard/v1/jobs/{resumes}/cancel");
    assert_eq!(
        post_json(server.addr, &cancel, &json!({})).await.status,
        200
    );
    let cancelled = wait_for(&server, resumes, "CANCELLED").await;
    assert_eq!(
        cancelled["checkpoints"]["bytes"], 2,
        "its own now: {cancelled}"
    );

    let run_id = failed["job"]["run_id"].as_str().unwrap();
    let run_page = |run_id: String| {
        let server = &server;
        async move {
            let detail = server
                .post_form("/api/get_run_detail", &format!("run_id={run_id}"))
                .await;
            assert_eq!(detail.status, 200, "{}", detail.body);
            let detail = detail.json();
            (detail["job_id"].as_i64(), detail["job_deleted"] == true)
        }
    };
    assert_eq!(run_page(run_id.to_owned()).await, (Some(first), false));
    // From the list, now that nothing resumes from it; one that does not
    // exist is kept, said so.
    let from_list = server
        .post_form(
            "/api/delete_jobs",
            &format!("ids%5B0%5D={first}&ids%5B1%5D=999999"),
        )
        .await;
    assert_eq!(from_list.status, 200, "{}", from_list.body);
    let answer = from_list.json();
    assert_eq!(answer["deleted"], json!([first]), "{answer}");
    assert_eq!(
        answer["refused"],
        json!([[999999, "job 999999 does not exist"]]),
        "{answer}"
    );
    let gone = server.get(&format!("/api/trainyard/v1/jobs/{first}")).await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert!(!folder.exists());
    assert_eq!(run(&server, run_id).await["info"]["status"], "FAILED");
    // Its run's page says the job was deleted, and links nowhere.
    assert_eq!(run_page(run_id.to_owned()).await, (Some(first), true));
    assert_eq!(delete(first).await.status, 404);

    // The command line deletes each it is given, and says which it could not.
    let (code, stdout, stderr) = cli(&server, &["delete", &resumes.to_string(), "999999"]).await;
    assert_eq!(code, 1, "{stdout}{stderr}");
    assert!(
        stdout.contains(&format!("job {resumes} deleted")),
        "{stdout}"
    );
    assert!(stderr.contains("job 999999: "), "{stderr}");
    let resumed_folder = server.data_dir.path().join(format!("jobs/{resumes}"));
    assert!(!resumed_folder.exists());
    let listed = server.get("/api/trainyard/v1/jobs").await;
    assert!(!listed.body.contains("\"saves\""), "{}", listed.body);
}

#[tokio::test]
async fn specs_that_cannot_run_are_refused_with_their_fields() {
    let server = TestServer::start_with(&[("TRAINYARD_SIMULATED_GPUS", "2")]).await;
    // 20 places for a value of 6,000 characters: 120,000 bytes to `sh -c`.
    let long = format!(
        "name: t\ncommand: echo{}\nhyperparameters:\n  a: {}\n",
        " {a}".repeat(20),
        "x".repeat(6000)
    );
    let cases: [(&str, &str, &str); 10] = [
        (
            &long,
            "command",
            "120024 bytes once its hyperparameters are put in",
        ),
        (
            "name: t\ncommand: x\nenv:\n  NVIDIA_VISIBLE_DEVICES: all\n",
            "env.NVIDIA_VISIBLE_DEVICES",
            "set by Trainyard",
        ),
        (
            "name: t\ntemplate: cpu-demo\nhyperparameters:\n  epochs: 0\n",
            "hyperparameters.epochs",
            "smallest allowed is 1",
        ),
        (
            "name: t\ntemplate: cpu-demo\nhyperparameters:\n  momentum: 0.9\n",
            "hyperparameters.momentum",
            "no such parameter",
        ),
        (
            "name: big\ncommand: x\nresources:\n  gpus: 4\n",
            "resources.gpus",
            "this server has 2",
        ),
        (
            "name: t\ntemplate: no-such\n",
            "template",
            "no template `no-such`",
        ),
        (
            "name: t\ncommand: x\nresources:\n  gpus: many\n",
            "resources.gpus",
            "got the text \"many\"; give a whole number",
        ),
        ("name: t\n", "command", "give a command"),
        (
            "name: t\ncommand: python train.py --lr {lr}\nhyperparameters:\n  learning_rate: 0.1\n",
            "command",
            "`{lr}` names no hyperparameter (it has learning_rate)",
        ),
        (
            "name: t\ncommand: x\nenv:\n  MLFLOW_RUN_ID: mine\n",
            "env.MLFLOW_RUN_ID",
            "set by Trainyard",
        ),
    ];
    for (yaml, field, words) in cases {
        let answer = submit_yaml(&server, yaml).await;
        assert_eq!(answer.status, 400, "{yaml}: {}", answer.body);
        let body = answer.json();
        assert_eq!(body["error_code"], "INVALID_PARAMETER_VALUE");
        let fields = body["fields"].as_array().unwrap();
        assert!(
            fields
                .iter()
                .any(|f| f["field"] == field && f["message"].as_str().unwrap().contains(words)),
            "{yaml}: {body}"
        );
    }
    // Nothing was queued.
    let list = server.get("/api/trainyard/v1/jobs").await.json();
    assert_eq!(list["jobs"], json!([]));
    let too_big = request(
        server.addr,
        "POST",
        "/api/trainyard/v1/jobs",
        &[("Content-Type", "application/json")],
        &vec![b' '; 300 * 1024],
    )
    .await;
    assert_eq!(too_big.status, 413);
}

#[tokio::test]
async fn a_job_waiting_for_a_gpu_shows_its_place_and_reason() {
    let server = TestServer::start_with(&[("TRAINYARD_SIMULATED_GPUS", "1")]).await;
    let spec = |name: &str| json!({"name": name, "command": "sleep 60", "resources": {"gpus": 1, "memory": "64Mi"}});
    let first = submit(&server, spec("first")).await;
    wait_for(&server, first, "RUNNING").await;
    let second = submit(&server, spec("second")).await;
    let mut waiting = Value::Null;
    for _ in 0..100 {
        waiting = job(&server, second).await["job"].clone();
        if waiting["queue_position"].is_u64() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(waiting["state"], "QUEUED");
    assert_eq!(waiting["queue_position"], 1);
    let reason = waiting["pending_reason"].as_str().unwrap();
    assert_eq!(reason, "no node has 1 free GPU; largest free block is 0");

    let queued = server
        .get("/api/trainyard/v1/jobs?state=queued")
        .await
        .json();
    assert_eq!(queued["jobs"].as_array().unwrap().len(), 1);

    // Cancelling the first lets the second start.
    post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{first}/cancel"),
        &json!({}),
    )
    .await;
    wait_for(&server, second, "RUNNING").await;
    post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{second}/cancel"),
        &json!({}),
    )
    .await;
    wait_for(&server, second, "CANCELLED").await;
}

#[tokio::test]
async fn a_restarted_server_finds_its_running_jobs_again() {
    let server = TestServer::start().await;
    let id = submit(
        &server,
        json!({"name": "survivor", "command": "touch started; sleep 2; echo done",
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    let lost = submit(
        &server,
        json!({"name": "orphan", "command": "sleep 60", "resources": {"memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, id, "RUNNING").await;
    let running = wait_for(&server, lost, "RUNNING").await;
    let (db, data_dir) = server.crash().await;

    // While the server is down, the second job's shim and job die without a word.
    let shim_pid = {
        let store = trainyard_store::Store::connect(&db.url, 1).await.unwrap();
        let record = store.get_job(lost).await.unwrap();
        store.close().await.unwrap();
        // The local executor's handle: the shim's `pid:start`.
        let handle = record.handle.unwrap();
        handle.split(':').next().unwrap().parse::<i32>().unwrap()
    };
    assert!(running["job"]["state"] == "RUNNING");
    let shim_stat = std::fs::read_to_string(format!("/proc/{shim_pid}/stat")).unwrap();
    let job_group: i32 = {
        // The job runs in its own group, led by the shim's child: find it
        // (RUNNING is recorded as the shim starts; the shim makes the job's
        // control group before it starts the command).
        let children = format!("/proc/{shim_pid}/task/{shim_pid}/children");
        let mut child = None;
        for _ in 0..200 {
            child = std::fs::read_to_string(&children)
                .unwrap()
                .split_whitespace()
                .next()
                .map(|pid| pid.parse().unwrap());
            if child.is_some() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        child.expect("the shim started the job's command")
    };
    assert!(!shim_stat.is_empty());
    unsafe {
        libc::kill(shim_pid, libc::SIGKILL);
        libc::killpg(job_group, libc::SIGKILL);
    }

    let server = TestServer::start_in(db, data_dir, &[]).await;
    let detail = wait_for(&server, id, "SUCCEEDED").await;
    assert!(log(&server, id).await.contains("done"));
    assert_eq!(detail["job"]["exit_code"], 0);
    let detail = wait_for(&server, lost, "LOST").await;
    let run_id = detail["job"]["run_id"].as_str().unwrap();
    assert_eq!(run(&server, run_id).await["info"]["status"], "FAILED");
}

#[tokio::test]
async fn the_demo_template_trains_and_logs_its_curves() {
    // Environments are cached across runs of the suite, like a server's.
    let venvs = common::job_venvs();
    let server = TestServer::start_with(&[("TRAINYARD_VENV_DIR", venvs.as_str())]).await;
    let catalog = server.get("/api/trainyard/v1/templates").await.json();
    let slugs: Vec<&str> = catalog["templates"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["slug"].as_str().unwrap())
        .collect();
    assert!(slugs.contains(&"cpu-demo"), "{slugs:?}");
    let demo = server
        .get("/api/trainyard/v1/templates/cpu-demo")
        .await
        .json();
    assert_eq!(demo["spec"]["parameters"]["epochs"]["default"], 150);

    let id = submit(
        &server,
        json!({"name": "demo", "experiment": "demo",
               "template": "cpu-demo", "hyperparameters": {"epochs": 25, "delay": 0}}),
    )
    .await;
    let created = job(&server, id).await["job"].clone();
    assert_eq!(
        created["memory_mib"], 1024,
        "the template's resources apply"
    );
    assert_eq!(created["template"], "cpu-demo");
    // The first run of the suite on a machine installs mlflow and numpy.
    let detail = wait_longer(&server, id, "SUCCEEDED", 600).await;
    let text = log(&server, id).await;
    assert!(text.contains("Python environment"), "{text}");
    assert!(text.contains("epoch 25/25"), "{text}");
    let run_id = detail["job"]["run_id"].as_str().unwrap();
    let run = run(&server, run_id).await;
    let params: Vec<(String, String)> = run["data"]["params"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (
                p["key"].as_str().unwrap().to_owned(),
                p["value"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert!(
        params.contains(&("epochs".into(), "25".into())),
        "{params:?}"
    );
    assert!(
        params.contains(&("lr".into(), "0.05".into())),
        "defaults are logged: {params:?}"
    );
    let mut keys: Vec<&str> = run["data"]["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["key"].as_str().unwrap())
        .collect();
    keys.sort();
    assert_eq!(keys, ["accuracy", "loss", "val_accuracy", "val_loss"]);
    let history = server
        .get(&format!(
            "/api/2.0/mlflow/metrics/get-history?run_id={run_id}&metric_key=loss"
        ))
        .await
        .json();
    let losses: Vec<f64> = history["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["value"].as_f64().unwrap())
        .collect();
    assert_eq!(losses.len(), 25);
    assert!(losses[24] < losses[0], "the loss falls: {losses:?}");
}

async fn upload(server: &TestServer, query: &str, body: &[u8]) -> common::Response {
    request(
        server.addr,
        "POST",
        &format!("/api/trainyard/v1/uploads?{query}"),
        &[("Content-Type", "application/gzip")],
        body,
    )
    .await
}

#[tokio::test]
async fn a_job_runs_its_uploaded_project_with_a_dataset() {
    let server = TestServer::start().await;
    let project = tar_gz(&[
        (
            "run.sh",
            "echo \"project says $(cat src/message.txt)\"; cat data/digits/numbers.txt\n",
        ),
        ("src/message.txt", "hello"),
    ]);
    let answer = upload(&server, "kind=project&name=project.tar.gz", &project).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let project_id = answer.json()["upload"]["id"].as_str().unwrap().to_owned();
    assert_eq!(answer.json()["upload"]["files"], 2);

    let dataset = tar_gz(&[("numbers.txt", "1 2 3")]);
    let answer = upload(&server, "kind=dataset&name=digits", &dataset).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let again = upload(&server, "kind=dataset&name=digits", &dataset).await;
    assert_eq!(
        again.status, 409,
        "dataset names are unique: {}",
        again.body
    );
    let list = server.get("/api/trainyard/v1/datasets").await.json();
    assert_eq!(list["datasets"][0]["name"], "digits");

    let id = submit(
        &server,
        json!({"name": "from a project", "command": "sh run.sh", "project": project_id,
               "datasets": ["digits"], "resources": {"memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, id, "SUCCEEDED").await;
    assert_eq!(log(&server, id).await, "project says hello\n1 2 3");

    // A dataset others share is read-only; a job of a user (not root, whom
    // permissions do not stop) cannot change it.
    let dataset_id = list["datasets"][0]["id"].as_str().unwrap();
    let numbers = server
        .data_dir
        .path()
        .join(format!("uploads/datasets/{dataset_id}/numbers.txt"));
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&numbers).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o444);
    if unsafe { libc::geteuid() } != 0 {
        let id = submit(
            &server,
            json!({"name": "vandal", "command": "echo x > data/digits/numbers.txt",
                   "datasets": ["digits"], "resources": {"memory": "64Mi"}}),
        )
        .await;
        let detail = wait_for(&server, id, "FAILED").await;
        assert_ne!(detail["job"]["exit_code"], 0);
        assert_eq!(std::fs::read_to_string(&numbers).unwrap(), "1 2 3");
    }

    // Unknown uploads are field errors.
    let answer = post_json(
        server.addr,
        "/api/trainyard/v1/jobs",
        &json!({"name": "x", "command": "true", "project": "0123456789abcdef0123456789abcdef",
                "datasets": ["nope"]}),
    )
    .await;
    assert_eq!(answer.status, 400);
    let fields: Vec<String> = answer.json()["fields"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["field"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(fields, ["project", "datasets.0"]);
    // A template that runs one's project is refused without one.
    let answer = post_json(
        server.addr,
        "/api/trainyard/v1/jobs",
        &json!({"name": "x", "template": "byo-script"}),
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(
        answer.json()["fields"][0]["field"],
        "project",
        "{}",
        answer.body
    );
    assert!(answer.body.contains("runs your project"), "{}", answer.body);

    // A dataset deleted since: the retry is refused, saying which, rather
    // than queued to fail at its start.
    let deleted = common::request(
        server.addr,
        "DELETE",
        &format!("/api/trainyard/v1/uploads/{dataset_id}"),
        &[],
        b"",
    )
    .await;
    assert!(deleted.status < 300, "{}", deleted.body);
    let retry = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{id}/retry"),
        &json!({}),
    )
    .await;
    assert_eq!(retry.status, 400, "{}", retry.body);
    assert!(
        retry
            .body
            .contains("reads the dataset `digits`, which no longer exists"),
        "{}",
        retry.body
    );
}

/// `trainyard job-files`, as a Kubernetes pod's init container runs it:
/// a process with the job's own token fetches the job's files and
/// datasets from the server, and that token reaches no other job.
#[tokio::test]
async fn a_job_fetches_what_it_starts_from_with_its_own_token() {
    let server = TestServer::start().await;
    let project = tar_gz(&[("run.sh", "echo run\n"), ("src/message.txt", "hello")]);
    let answer = upload(&server, "kind=project&name=project.tar.gz", &project).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let project_id = answer.json()["upload"]["id"].as_str().unwrap().to_owned();
    let dataset = tar_gz(&[("numbers.txt", "1 2 3"), ("more/deep.txt", "deep")]);
    let answer = upload(&server, "kind=dataset&name=digits", &dataset).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let id = submit(
        &server,
        json!({"name": "fetched", "command": "sleep 60", "project": project_id,
               "datasets": ["digits"], "resources": {"memory": "64Mi"}}),
    )
    .await;
    let other = submit(
        &server,
        json!({"name": "another", "command": "sleep 60", "project": project_id,
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, id, "RUNNING").await;
    // The token the job was given.
    let token = common::job_token(&server, id);
    let token = token.as_str();
    let fetch = |job: i64, into: &std::path::Path| {
        tokio::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
            .args(["job-files", "--into"])
            .arg(into)
            .env_clear()
            .env("MLFLOW_TRACKING_URI", format!("http://{}", server.addr))
            .env("MLFLOW_TRACKING_TOKEN", token)
            .env("TRAINYARD_JOB_ID", job.to_string())
            .output()
    };
    let work = tempfile::tempdir().unwrap();
    let into = work.path().join("work");
    let out = fetch(id, &into).await.unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    let read = |path: &str| std::fs::read_to_string(into.join(path)).unwrap();
    assert_eq!(read("run.sh"), "echo run\n");
    assert_eq!(read("src/message.txt"), "hello");
    assert_eq!(read("data/digits/numbers.txt"), "1 2 3");
    assert_eq!(read("data/digits/more/deep.txt"), "deep");
    let mut names: Vec<String> = std::fs::read_dir(&into)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["data", "run.sh", "src"], "nothing left behind");
    assert!(said.contains("dataset digits: 2 files, 9 B"), "{said}");

    // A folder that holds something is refused, and left as it was.
    let out = fetch(id, &into).await.unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("is not empty"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Its token reaches its own job only, even one of the same owner; the
    // refused fetch leaves its folder empty for a second try.
    let elsewhere = work.path().join("other");
    let out = fetch(other, &elsewhere).await.unwrap();
    assert!(!out.status.success());
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("reaches its own job only"), "{said}");
    assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0);
    // And nothing else of the jobs API.
    let denied = request(
        server.addr,
        "GET",
        &format!("/api/trainyard/v1/jobs/{id}/logs"),
        &[("Authorization", &format!("Bearer {token}"))],
        b"",
    )
    .await;
    assert_eq!(denied.status, 403, "{}", denied.body);

    // Its owner may fetch the files too; a dataset the job does not name
    // is not reachable through it.
    let files = server
        .get(&format!("/api/trainyard/v1/jobs/{id}/files"))
        .await;
    assert_eq!(files.status, 200);
    assert_eq!(files.header("content-type"), Some("application/x-tar"));
    let missing = server
        .get(&format!("/api/trainyard/v1/jobs/{other}/datasets/digits"))
        .await;
    assert_eq!(missing.status, 404, "{}", missing.body);
    for job in [id, other] {
        post_json(
            server.addr,
            &format!("/api/trainyard/v1/jobs/{job}/cancel"),
            &json!({}),
        )
        .await;
    }
    wait_for(&server, id, "CANCELLED").await;
}

#[tokio::test]
async fn hostile_and_oversized_uploads_are_refused_and_leave_nothing() {
    let server = TestServer::start_with(&[("TRAINYARD_UPLOAD_MAX_BYTES", "4096")]).await;
    // An entry that climbs out of its folder, written raw (tar::Builder refuses it).
    let mut builder = tar::Builder::new(Vec::new());
    let mut header = tar::Header::new_gnu();
    header.as_old_mut().name[..10].copy_from_slice(b"../escaped");
    header.set_size(1);
    header.set_mode(0o644);
    header.set_cksum();
    builder.append(&header, &b"x"[..]).unwrap();
    let tar = builder.into_inner().unwrap();
    let answer = upload(&server, "kind=project", &tar).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer
            .body
            .contains("would be written outside the archive's folder"),
        "{}",
        answer.body
    );
    let uploads = server.data_dir.path().join("uploads");
    assert!(!uploads.join("escaped").exists());
    let mut left: Vec<_> = std::fs::read_dir(&uploads)
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    // `datasets` is made at start where jobs run as uids of their own.
    if left.contains(&"datasets".to_owned()) {
        assert_eq!(
            std::fs::read_dir(uploads.join("datasets")).unwrap().count(),
            0
        );
        left.retain(|name| name != "datasets");
    }
    assert_eq!(left, [".incoming"], "nothing of the archive is kept");
    assert_eq!(
        std::fs::read_dir(uploads.join(".incoming"))
            .unwrap()
            .count(),
        0,
        "the received file is removed"
    );

    let big = vec![b'x'; 5000];
    let answer = upload(&server, "kind=project", &big).await;
    assert_eq!(answer.status, 413, "{}", answer.body);
    let answer = upload(&server, "kind=dataset&name=../x", &tar_gz(&[("a", "b")])).await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert_eq!(answer.json()["fields"][0]["field"], "name");
    let answer = upload(&server, "kind=project", b"not an archive").await;
    assert_eq!(answer.status, 400);
    assert!(
        answer.body.contains("not a zip, tar or tar.gz"),
        "{}",
        answer.body
    );
}

/// Runs the `trainyard` binary's job commands against `server`.
async fn cli(server: &TestServer, args: &[&str]) -> (i32, String, String) {
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args(args)
        .arg("--server")
        .arg(format!("http://{}", server.addr))
        .env_remove("TRAINYARD_TOKEN")
        .output()
        .await
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// At the upload quota, a job whose project is unchanged is still
/// submitted: the CLI asks for the archive by its SHA-256 and sends
/// nothing. A changed one meets the quota as before.
#[tokio::test]
async fn an_unchanged_project_is_not_sent_again_even_at_the_quota() {
    let server = TestServer::start_with(&[("TRAINYARD_UPLOAD_QUOTA_BYTES", "2000")]).await;
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    std::fs::write(
        &spec,
        "name: at quota\ncommand: wc -c big.txt\nresources: {memory: 64Mi}\n",
    )
    .unwrap();
    let archive = dir.path().join("project.tar.gz");
    std::fs::write(&archive, tar_gz(&[("big.txt", &"x".repeat(2000))])).unwrap();
    let spec_arg = spec.display().to_string();
    let archive_arg = archive.display().to_string();
    let submit_args = ["submit", spec_arg.as_str(), "--file", archive_arg.as_str()];
    let (code, _, stderr) = cli(&server, &submit_args).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stderr.contains("uploaded"), "{stderr}");
    let listed = server.get("/api/trainyard/v1/uploads").await.json();
    assert_eq!(listed["used_bytes"], 2000, "{listed}");
    let kept = listed["uploads"][0]["id"].as_str().unwrap().to_owned();

    let (code, stdout, stderr) = cli(&server, &submit_args).await;
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.contains(&format!("is unchanged since upload {kept}")),
        "{stderr}"
    );
    let second: i64 = stdout.trim().parse().unwrap();
    assert_eq!(
        job(&server, second).await["job"]["spec"]["project"],
        kept.as_str()
    );

    let changed = dir.path().join("changed.tar.gz");
    std::fs::write(&changed, tar_gz(&[("big.txt", "changed")])).unwrap();
    let changed_arg = changed.display().to_string();
    let (code, _, stderr) = cli(&server, &["submit", &spec_arg, "--file", &changed_arg]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("upload_quota_bytes"), "{stderr}");

    // Asked by SHA-256: the project kept from that archive, or none; what
    // is not a SHA-256 is refused naming the field.
    let digest = |bytes: &[u8]| -> String {
        use sha2::Digest;
        hex::encode(sha2::Sha256::digest(bytes))
    };
    let asked = |sha: String| {
        let server = &server;
        async move {
            server
                .get(&format!("/api/trainyard/v1/uploads?sha256={sha}"))
                .await
        }
    };
    let found = asked(digest(&std::fs::read(&archive).unwrap())).await;
    assert_eq!(found.status, 200, "{}", found.body);
    let found = found.json();
    assert_eq!(found["uploads"].as_array().unwrap().len(), 1, "{found}");
    assert_eq!(found["uploads"][0]["id"], kept.as_str());
    assert_eq!(
        found["sha256"].as_str(),
        Some(digest(&std::fs::read(&archive).unwrap()).as_str()),
        "said back, so that a client knows it was looked up"
    );
    let none = asked(digest(b"another archive")).await.json();
    assert_eq!(none["uploads"], json!([]), "{none}");
    let bad = asked("XYZ".to_owned()).await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(bad.json()["fields"][0]["field"], "sha256", "{}", bad.body);
}

#[tokio::test]
async fn the_command_line_submits_follows_lists_and_cancels() {
    let server = TestServer::start().await;
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("job.yaml");
    std::fs::write(
        &spec,
        "name: cli job\ncommand: sh run.sh {who}\nhyperparameters: {who: me}\nresources: {memory: 64Mi}\n",
    )
    .unwrap();
    let archive = dir.path().join("project.tar.gz");
    std::fs::write(
        &archive,
        tar_gz(&[("run.sh", "echo \"from the cli, says $1\"\n")]),
    )
    .unwrap();
    let spec_arg = spec.display().to_string();
    let archive_arg = archive.display().to_string();

    let (code, stdout, stderr) = cli(
        &server,
        &["submit", &spec_arg, "--file", &archive_arg, "--follow"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "from the cli, says me\n");
    assert!(stderr.contains("uploaded"), "{stderr}");
    assert!(stderr.contains("job 1 succeeded, exit code 0"), "{stderr}");

    let (code, stdout, _) = cli(&server, &["jobs"]).await;
    assert_eq!(code, 0);
    assert!(
        stdout.contains("SUCCEEDED") && stdout.contains("cli job"),
        "{stdout}"
    );
    // Where it ran: the local executor's node, named as the job says.
    let node = job(&server, 1).await["job"]["node"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(!node.is_empty());
    let row = stdout.lines().find(|l| l.contains("cli job")).unwrap();
    assert!(row.trim_end().ends_with(&node), "{stdout}");
    // In columns under their heads: the id right-aligned in 6, the state
    // after two spaces.
    let head = stdout.lines().next().unwrap();
    assert!(head.starts_with("    ID  STATE"), "{stdout}");
    assert!(row.starts_with("     1  SUCCEEDED"), "{stdout}");
    // Every job one may see, with whose each is.
    let (code, all, _) = cli(&server, &["jobs", "--all"]).await;
    assert_eq!(code, 0);
    assert!(all.lines().next().unwrap().contains("OWNER"), "{all}");
    assert!(all.contains("cli job"), "{all}");

    // A sweep's job: --set over the spec's hyperparameters, typed as YAML
    // types them and said in its name; the unchanged project is not sent
    // again.
    let (code, stdout, stderr) = cli(
        &server,
        &[
            "submit",
            &spec_arg,
            "--file",
            &archive_arg,
            "--set",
            "who=you",
            "--set",
            "seed=7",
            "--follow",
        ],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "from the cli, says you\n");
    assert!(stderr.contains("is unchanged since upload"), "{stderr}");
    let swept = job(&server, 2).await;
    assert_eq!(swept["job"]["name"], "cli job who=you seed=7", "{swept}");
    assert_eq!(
        swept["job"]["spec"]["hyperparameters"]["seed"], 7,
        "{swept}"
    );
    let (code, _, stderr) = cli(&server, &["submit", &spec_arg, "--set", "lr"]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("--set lr: give KEY=VALUE"), "{stderr}");

    // A spec with problems is refused before anything runs, field by field.
    std::fs::write(&spec, "name: broken\nresources: {gpus: 99}\n").unwrap();
    let (code, _, stderr) = cli(&server, &["submit", &spec_arg]).await;
    assert_eq!(code, 1);
    assert!(stderr.contains("command: give a command"), "{stderr}");
    assert!(stderr.contains("resources.gpus"), "{stderr}");
    let uploads = || async {
        server.get("/api/trainyard/v1/uploads").await.json()["uploads"]
            .as_array()
            .unwrap()
            .len()
    };
    assert_eq!(uploads().await, 1, "nothing was sent for the broken spec");
    // One the server refuses after its project was sent: the project goes,
    // but not one that earlier jobs ran from (the same archive again).
    std::fs::write(
        &spec,
        "name: elsewhere\ncommand: sh run.sh\nteam: nowhere\n",
    )
    .unwrap();
    let (code, _, stderr) = cli(&server, &["submit", &spec_arg, "--file", &archive_arg]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("team"), "{stderr}");
    assert!(stderr.contains("is unchanged since upload"), "{stderr}");
    assert!(!stderr.contains("removed the project"), "{stderr}");
    assert_eq!(uploads().await, 1);
    let changed = dir.path().join("changed.tar.gz");
    std::fs::write(&changed, tar_gz(&[("run.sh", "echo changed\n")])).unwrap();
    let changed_arg = changed.display().to_string();
    let (code, _, stderr) = cli(&server, &["submit", &spec_arg, "--file", &changed_arg]).await;
    assert_eq!(code, 1, "{stderr}");
    assert!(
        stderr.contains("removed the project uploaded for it"),
        "{stderr}"
    );
    assert_eq!(uploads().await, 1);
    // A dataset named by the spec and by --dataset is read once.
    let data = dir.path().join("digits.tar.gz");
    std::fs::write(&data, tar_gz(&[("n.txt", "1 2 3")])).unwrap();
    let data_arg = data.display().to_string();
    let (code, _, stderr) = cli(&server, &["upload-dataset", "digits", &data_arg]).await;
    assert_eq!(code, 0, "{stderr}");
    std::fs::write(
        &spec,
        "name: reads\ncommand: cat data/digits/n.txt\ndatasets: [digits]\nresources: {memory: 64Mi}\n",
    )
    .unwrap();
    let (code, stdout, stderr) = cli(
        &server,
        &["submit", &spec_arg, "--dataset", "digits", "--follow"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "1 2 3");
    // A followed job that fails leaves the command with its exit code.
    std::fs::write(
        &spec,
        "name: fails\ncommand: exit 3\nresources: {memory: 64Mi}\n",
    )
    .unwrap();
    let (code, _, stderr) = cli(&server, &["submit", &spec_arg, "--follow"]).await;
    assert_eq!(code, 3, "{stderr}");
    assert!(stderr.contains("failed, exit code 3"), "{stderr}");
    // Each attempt's whole output, the end of the one before included,
    // then why it ended in the timeline's words.
    std::fs::write(
        &spec,
        "name: retried
command: echo start; sleep 1; echo about to fail; exit 4
retries: 1
resources: {memory: 64Mi}
",
    )
    .unwrap();
    let (code, stdout, stderr) = cli(&server, &["submit", &spec_arg, "--follow"]).await;
    assert_eq!(code, 4, "{stderr}");
    assert_eq!(
        stdout.matches("about to fail").count(),
        2,
        "{stdout}\n{stderr}"
    );
    assert!(stderr.contains("-- attempt 2 --"), "{stderr}");
    let last = stderr.lines().last().unwrap();
    assert!(
        last.contains("failed, exit code 4: ") && last.len() > "failed, exit code 4: ".len() + 8,
        "{stderr}"
    );
    // An earlier attempt's log on its own, counted from 1 as said above.
    let retried = last.split_whitespace().nth(1).unwrap();
    let (code, first, stderr) = cli(&server, &["logs", "--attempt", "1", retried]).await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(first, "start\nabout to fail\n");
    let (code, _, stderr) = cli(&server, &["logs", "--attempt", "3", retried]).await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("has made 2 attempts; give 1 to 2"),
        "{stderr}"
    );
    // A project packed with its folder runs from that folder's top.
    std::fs::write(
        &spec,
        "name: packed\ncommand: sh run.sh\nresources: {memory: 64Mi}\n",
    )
    .unwrap();
    let packed = dir.path().join("packed.tar.gz");
    std::fs::write(
        &packed,
        tar_gz(&[("proj/run.sh", "echo lifted\n"), ("proj/lib/x.txt", "x")]),
    )
    .unwrap();
    let packed_arg = packed.display().to_string();
    let (code, stdout, stderr) = cli(
        &server,
        &["submit", &spec_arg, "--file", &packed_arg, "--follow"],
    )
    .await;
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(stdout, "lifted\n");
    // A folder for --file, and a server without its scheme, are said so.
    let (code, _, stderr) = cli(
        &server,
        &[
            "submit",
            &spec_arg,
            "--file",
            &dir.path().display().to_string(),
        ],
    )
    .await;
    assert_eq!(code, 1);
    assert!(
        stderr.contains("is a folder: send it as an archive"),
        "{stderr}"
    );
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args(["jobs", "--server", &server.addr.to_string()])
        .env_remove("TRAINYARD_TOKEN")
        .output()
        .await
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(said.contains("needs its scheme: http://"), "{said}");

    std::fs::write(
        &spec,
        "name: sleeper\ncommand: sleep 60\nresources: {memory: 64Mi}\n",
    )
    .unwrap();
    let (code, stdout, _) = cli(&server, &["submit", &spec_arg]).await;
    assert_eq!(code, 0);
    let id = stdout.trim().to_owned();
    wait_for(&server, id.parse().unwrap(), "RUNNING").await;
    let (code, stdout, _) = cli(&server, &["cancel", &id]).await;
    assert_eq!(code, 0);
    assert!(stdout.contains(&format!("job {id}")), "{stdout}");
    let (code, _, stderr) = cli(&server, &["logs", "-f", &id]).await;
    assert_eq!(code, 1, "a cancelled job is not a success");
    assert!(stderr.contains("cancelled"), "{stderr}");
}

#[tokio::test]
async fn the_log_stream_ends_even_on_a_cut_off_character() {
    let server = TestServer::start().await;
    // Ends in the first byte of a three-byte character, which never completes.
    let id = submit(
        &server,
        json!({"name": "cut", "command": "printf 'caf\\303\\251 \\342'", "resources": {"memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, id, "SUCCEEDED").await;
    let stream = tokio::time::timeout(
        Duration::from_secs(20),
        server.get(&format!("/api/trainyard/v1/jobs/{id}/logs/stream?offset=0")),
    )
    .await
    .expect("the stream ends once the job has ended and its log is read");
    assert_eq!(stream.header("content-type"), Some("text/event-stream"));
    assert!(
        stream.body.contains("event: log\nid: 6\ndata: café \n"),
        "{}",
        stream.body
    );
    assert!(
        stream.body.contains("event: log\nid: 7\ndata: \u{fffd}\n"),
        "{}",
        stream.body
    );
    let end = stream.body.find("event: end").expect("an end event");
    assert!(end > stream.body.find("id: 7").unwrap(), "{}", stream.body);
    // From an offset, only what follows.
    let rest = server
        .get(&format!("/api/trainyard/v1/jobs/{id}/logs/stream?offset=7"))
        .await;
    assert!(!rest.body.contains("café"), "{}", rest.body);
}

async fn delete_template(server: &TestServer, slug: &str) -> u16 {
    let path = format!("/api/trainyard/v1/templates/{slug}");
    request(server.addr, "DELETE", &path, &[], b"").await.status
}

#[tokio::test]
async fn admins_write_templates_and_jobs_use_them() {
    let server = TestServer::start().await;
    let put = |slug: &str, body: &str| {
        let path = format!("/api/trainyard/v1/templates/{slug}");
        let body = body.to_owned();
        let addr = server.addr;
        async move {
            request(
                addr,
                "PUT",
                &path,
                &[("Content-Type", "application/yaml")],
                body.as_bytes(),
            )
            .await
        }
    };
    let bad = put(
        "greeter",
        "title: Greeter\ndescription: says hello\ncommand: echo {greeting}\nparameters:\n  greeting: {type: choice, choices: [hi, hello], default: hey}\n",
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert_eq!(
        bad.json()["fields"][0]["field"],
        "parameters.greeting.default"
    );

    let good = put(
        "greeter",
        "title: Greeter\ndescription: says hello\ncommand: echo \"{greeting}, $HP_NAME\"\nparameters:\n  greeting: {type: choice, choices: [hi, hello], default: hi}\n  name: {type: string, default: world}\nresources: {memory: 64Mi}\n",
    )
    .await;
    assert_eq!(good.status, 200, "{}", good.body);
    assert_eq!(good.json()["builtin"], false);
    // One that asks more than any node has is said so on its card and its
    // form, before anyone submits it; the others are not.
    let huge = put(
        "huge",
        "title: Huge\ndescription: wants it all\ncommand: echo big\nresources: {gpus: 64, memory: 64Mi}\n",
    )
    .await;
    assert_eq!(huge.status, 200, "{}", huge.body);
    let catalog = server.get("/templates").await.body;
    let card = |slug: &str| {
        let start = catalog.find(&format!(r#"data-template="{slug}""#)).unwrap();
        let end = catalog[start..].find("</li>").unwrap();
        catalog[start..start + end].to_owned()
    };
    assert!(
        card("huge").contains(r#"data-testid="too-big""#),
        "{}",
        card("huge")
    );
    assert!(
        card("huge").contains("asks for 64 GPUs"),
        "{}",
        card("huge")
    );
    assert!(!card("greeter").contains("too-big"), "{}", card("greeter"));
    let form = server.get("/submit?template=huge").await.body;
    let note = form
        .find(r#"data-testid="too-big""#)
        .expect("the form's note");
    assert!(
        form[note..].contains("more than this server has: <!>asks for 64 GPUs"),
        "{form}"
    );
    assert_eq!(delete_template(&server, "huge").await, 204);

    let id = submit(
        &server,
        json!({"name": "hello", "template": "greeter", "hyperparameters": {"greeting": "hello", "name": "you"}}),
    )
    .await;
    wait_for(&server, id, "SUCCEEDED").await;
    assert_eq!(log(&server, id).await, "hello, you\n");

    // Shipped templates are changed in their files.
    let shipped = put("cpu-demo", "title: X\ndescription: x\ncommand: x\n").await;
    assert_eq!(shipped.status, 400);
    assert!(
        shipped.body.contains("is shipped with Trainyard"),
        "{}",
        shipped.body
    );
    assert_eq!(delete_template(&server, "cpu-demo").await, 400);
    assert_eq!(delete_template(&server, "greeter").await, 204);
    assert_eq!(delete_template(&server, "greeter").await, 404);
    let bad_slug = put("Bad_Slug", "title: X\ndescription: x\ncommand: x\n").await;
    assert_eq!(bad_slug.status, 400);
    assert_eq!(bad_slug.json()["fields"][0]["field"], "slug");
}

/// Needs root, as the server does to run jobs as other users.
#[tokio::test]
async fn each_job_runs_as_a_uid_of_its_own_and_reaches_nothing_else() {
    if !trainyard_jobs::users::is_root() {
        eprintln!("skipped: running jobs as other users needs root");
        return;
    }
    let server = TestServer::start().await;
    let data = server.data_dir.path().display().to_string();
    let first = submit(
        &server,
        json!({"name": "holder", "command": "id -u; echo secret > mine.txt; touch ready; sleep 60",
               "max_runtime": "2m"}),
    )
    .await;
    wait_for(&server, first, "RUNNING").await;
    let ready = server
        .data_dir
        .path()
        .join(format!("jobs/{first}/0/work/ready"));
    for _ in 0..100 {
        if ready.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready.exists(), "{}", log(&server, first).await);
    let snoop = r#"
id -u
cat "$DATA/jobs/$OTHER/0/work/mine.txt" || echo "cannot read the other job's files"
cat "$DATA/jobs/$OTHER/0/launch.json" || echo "cannot read the other job's token"
cat "$DATA/jobs/$OTHER/0/output.log" || echo "cannot read the other job's log"
ls "$DATA" || echo "cannot list the data folder"
ls "$DATA/artifacts" || echo "cannot list the artifacts"
head -c 16 "$DB" || echo "cannot read the database"
kill -9 "$(cat "/proc/$OTHER_PID/task/$OTHER_PID/children" 2>/dev/null)" 2>/dev/null || echo "cannot stop the other job"
echo kept > "$HOME/note" && echo "home: $(cat "$HOME/note")"
echo kept > "$TMPDIR/note" && echo "tmp: $(cat "$TMPDIR/note")"
echo kept > note && echo "work: $(cat note)"
"#;
    let holder = job(&server, first).await;
    let other_pid = holder["job"]["pid"].to_string();
    // Here the test's SQLite file lies outside the data folder: what counts
    // is its mode, which the server closed wherever it is.
    let db = server
        .db
        .url
        .strip_prefix("sqlite://")
        .map(|path| path.split('?').next().unwrap_or(path).to_owned());
    if let Some(db) = &db {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(db).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{db}");
    }
    let second = submit(
        &server,
        json!({"name": "snoop", "command": snoop,
               "env": {"DATA": data, "OTHER": first.to_string(), "OTHER_PID": other_pid,
                       "DB": db.clone().unwrap_or_default()}}),
    )
    .await;
    wait_for(&server, second, "SUCCEEDED").await;
    let text = log(&server, second).await;
    let uids: Vec<u32> = [log(&server, first).await, text.clone()]
        .iter()
        .map(|l| l.lines().next().unwrap().trim().parse().unwrap())
        .collect();
    assert_ne!(uids[0], uids[1], "two running jobs, two uids: {text}");
    let started = job(&server, second).await["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "started")
        .map(|e| e["message"].as_str().unwrap().to_owned())
        .unwrap();
    assert!(
        started.ends_with(&format!(", as uid {})", uids[1])),
        "the timeline names the uid: {started}"
    );
    for uid in &uids {
        assert!(
            *uid >= 1_000_000,
            "a uid of the test server's range: {uids:?}"
        );
    }
    for refused in [
        "cannot read the other job's files",
        "cannot read the other job's token",
        "cannot read the other job's log",
        "cannot list the data folder",
        "cannot list the artifacts",
        "cannot stop the other job",
    ] {
        assert!(text.contains(refused), "{refused}: {text}");
    }
    assert!(!text.contains("secret"), "{text}");
    if db.is_some() {
        assert!(text.contains("cannot read the database"), "{text}");
        assert!(!text.contains("SQLite format"), "{text}");
    }
    for kept in ["home: kept", "tmp: kept", "work: kept"] {
        assert!(text.contains(kept), "{kept}: {text}");
    }
    assert_eq!(
        job(&server, first).await["job"]["state"],
        "RUNNING",
        "the other job could not stop it"
    );

    // Cancelled, the holder's processes are all gone and its folder is closed.
    let answer = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{first}/cancel"),
        &json!({}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    wait_for(&server, first, "CANCELLED").await;
    assert!(trainyard_jobs::users::processes_of(uids[0]).is_empty());
    use std::os::unix::fs::PermissionsExt;
    let folder = server.data_dir.path().join(format!("jobs/{first}"));
    let mode = std::fs::metadata(&folder).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o700, "{}", folder.display());
}

/// Needs root, as the server does to make control groups.
#[tokio::test]
async fn each_job_is_held_to_its_memory_and_cpus_and_its_end_tells_what_it_used() {
    use trainyard_jobs::cgroups;
    // As the shim's tests: skipped where no control groups can be made,
    // unless `TEST_CGROUPS_REQUIRED` says this machine has them.
    let required = std::env::var_os("TEST_CGROUPS_REQUIRED").is_some();
    if !trainyard_jobs::users::is_root() {
        assert!(!required, "control groups need root");
        eprintln!("skipped: control groups need root");
        return;
    }
    let own = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    if let Err(why) =
        cgroups::locate(&own, &mounts, cgroups::v2_controllers).and_then(cgroups::prepare)
    {
        assert!(!required, "no control groups: {why}");
        eprintln!("skipped: this machine gives no control groups: {why}");
        return;
    }
    let server = TestServer::start_with(&[("TRAINYARD_JOB_LIMITS", "cgroup")]).await;
    let hog = submit(
        &server,
        json!({"name": "hog", "command": "exec python3 -c \"x = b'x' * (256 << 20); print('survived')\"",
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    let detail = wait_for(&server, hog, "FAILED").await;
    let end = last_message(&detail);
    assert!(
        end.starts_with("out of memory: it reached its limit of 64.0 MiB (resources.memory)"),
        "{end}"
    );
    assert!(end.contains("killed by signal 9"), "{end}");
    assert!(!log(&server, hog).await.contains("survived"));

    let fits = submit(
        &server,
        json!({"name": "fits", "command": "cat /proc/self/cgroup",
               "resources": {"memory": "256Mi", "cpus": 0.5}}),
    )
    .await;
    let detail = wait_for(&server, fits, "SUCCEEDED").await;
    let end = last_message(&detail);
    assert!(end.starts_with("exited with code 0; peak memory "), "{end}");
    assert!(end.contains(" of 256.0 MiB"), "{end}");
    let text = log(&server, fits).await;
    let group = format!("-job-{fits}.0");
    assert!(
        text.lines()
            .any(|l| l.contains(":memory:") && l.ends_with(&group))
            || text
                .lines()
                .any(|l| l.starts_with("0::") && l.ends_with(&group)),
        "the job ran in its own group: {text}"
    );
}

/// A job's inputs are sent a few at a time, server-wide; one person's slow
/// readers once held every turn, and others' pods could not start.
#[tokio::test]
async fn one_persons_slow_downloads_hold_only_their_share_of_the_archive_sends() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start().await;
    // 32 MB that does not compress away: more than the socket and the
    // server's buffers hold, so an unread download keeps its turn.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let text: String = (0..32 << 20)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            char::from(b"0123456789abcdef"[(seed & 15) as usize])
        })
        .collect();
    let answer = upload(
        &server,
        "kind=dataset&name=big",
        &tar_gz(&[("big.txt", &text)]),
    )
    .await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let id = submit(
        &server,
        json!({"name": "reads big", "command": "sleep 60", "datasets": ["big"],
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, id, "RUNNING").await;
    let path = format!("/api/trainyard/v1/jobs/{id}/datasets/big");
    let mut held = Vec::new();
    for _ in 0..4 {
        let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
        let ask = format!(
            "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
            server.addr
        );
        stream.write_all(ask.as_bytes()).await.unwrap();
        let mut head = [0u8; 12];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(&head, b"HTTP/1.1 200", "{}", String::from_utf8_lossy(&head));
        held.push(stream);
    }
    let busy = server.get(&path).await;
    assert_eq!(busy.status, 503, "{}", busy.body);
    assert_eq!(busy.header("retry-after"), Some("2"));
    assert!(
        busy.body
            .contains("4 archives of yours (or your jobs') are being sent already"),
        "{}",
        busy.body
    );
    // The job's own fetch (as a pod's init container makes it) waits its
    // turn, asking again when told, and gets its files once readers leave.
    let token = common::job_token(&server, id);
    let into = tempfile::tempdir().unwrap();
    let fetch = tokio::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args(["job-files", "--into"])
        .arg(into.path().join("work"))
        .env_clear()
        .env("MLFLOW_TRACKING_URI", format!("http://{}", server.addr))
        .env("MLFLOW_TRACKING_TOKEN", token.as_str())
        .env("TRAINYARD_JOB_ID", id.to_string())
        .output();
    let fetched = tokio::spawn(fetch);
    tokio::time::sleep(Duration::from_secs(3)).await;
    drop(held);
    let out = fetched.await.unwrap().unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("the server is busy sending other archives; asking again in"),
        "{said}"
    );
    let got = std::fs::read_to_string(into.path().join("work/data/big/big.txt")).unwrap();
    assert!(got == text, "the dataset arrived whole");
}

/// An experiment whose job has not ended is not deleted under it (the
/// job's next attempt would have nowhere to log, and the queue would trip
/// over it): refused through MLflow's API, naming the job; once the job
/// has ended it can go.
#[tokio::test]
async fn an_experiment_with_a_job_that_has_not_ended_is_not_deleted() {
    let server = TestServer::start().await;
    let id = submit(
        &server,
        json!({"name": "long", "command": "sleep 600", "experiment": "busy",
               "resources": {"memory": "64Mi"}}),
    )
    .await;
    let experiment = job(&server, id).await["job"]["experiment_id"]
        .as_i64()
        .unwrap();
    let addr = server.addr;
    let delete = move || async move {
        post_json(
            addr,
            "/api/2.0/mlflow/experiments/delete",
            &json!({"experiment_id": experiment.to_string()}),
        )
        .await
    };
    let refused = delete().await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused
            .body
            .contains(&format!("has jobs that have not ended ({id})")),
        "{}",
        refused.body
    );
    let cancelled = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{id}/cancel"),
        &json!({}),
    )
    .await;
    assert_eq!(cancelled.status, 200, "{}", cancelled.body);
    wait_for(&server, id, "CANCELLED").await;
    let deleted = delete().await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
}
