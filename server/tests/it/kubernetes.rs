//! The Kubernetes executor on the test cluster of end2end/k8s: a real
//! kube-apiserver, controller manager and scheduler, with kwok playing the
//! kubelets of GPU nodes. `end2end/k8s/executor.sh` starts the cluster,
//! gives the server the chart's RBAC through a ServiceAccount token, and
//! runs these (they are ignored by a plain `cargo test`, which has no
//! cluster).
//!
//! kwok runs no containers: a pod "runs" for the job's `FAKE_RUN_SECONDS`
//! and ends with `FAKE_EXIT_CODE` (OOMKilled with `FAKE_OOM=true`), or
//! succeeds (end2end/k8s/kwok-stages.yaml); its log is served from a file
//! through the real pods/log path.

use crate::common;

use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use common::{TestServer, last_message, post_json, submit, wait_for, wait_longer};
use serde_json::{Value, json};

const NEEDS: &str = "needs the test cluster: run end2end/k8s/executor.sh";

struct Cluster {
    /// The server's own account: the chart's RBAC, through a token.
    kubeconfig: String,
    /// The cluster admin, for what tests do to the cluster.
    admin: String,
    kubectl: String,
    dir: String,
    namespaces: u32,
}

fn cluster() -> Cluster {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} unset: {NEEDS}"));
    Cluster {
        kubeconfig: var("TEST_KUBECONFIG"),
        admin: var("TEST_KUBE_ADMIN_KUBECONFIG"),
        kubectl: var("TEST_KUBECTL"),
        dir: var("TEST_K8S_DIR"),
        namespaces: var("TEST_KUBE_NAMESPACES").parse().unwrap(),
    }
}

/// A namespace of its own for each test server (job ids start again at 1
/// with each database), from the first; the last is the API outage's,
/// which runs in a test program of its own.
fn namespace() -> String {
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    let count = cluster().namespaces;
    assert!(
        n + 1 < count,
        "more test servers than test namespaces ({count})"
    );
    format!("trainyard-test-{}", n + 1)
}

fn last_namespace() -> String {
    format!("trainyard-test-{}", cluster().namespaces)
}

/// The Job of a job's only attempt so far.
fn job_of(namespace: &str, id: i64) -> String {
    let names = jobs_of(namespace, id);
    assert_eq!(names.len(), 1, "{names:?}");
    names[0].clone()
}

/// kubectl as `kubeconfig`: whether it succeeded, and what it printed.
fn kubectl_as(kubeconfig: &str, args: &[&str]) -> (bool, String) {
    let c = cluster();
    let out = Command::new(&c.kubectl)
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(args)
        .output()
        .expect("kubectl runs");
    let mut text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.push_str(&String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

/// kubectl as the cluster's admin; panics if it fails.
fn kubectl(args: &[&str]) -> String {
    let (ok, text) = kubectl_as(&cluster().admin, args);
    assert!(ok, "kubectl {args:?}: {text}");
    text
}

fn kubectl_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["-o", "json"]);
    serde_json::from_str(&kubectl(&all)).unwrap()
}

fn exists(namespace: &str, kind: &str, name: &str) -> bool {
    let (ok, text) = kubectl_as(&cluster().admin, &["-n", namespace, "get", kind, name]);
    assert!(ok || text.contains("NotFound"), "{text}");
    ok
}

/// The Kubernetes Jobs of a Trainyard job, by name.
fn jobs_of(namespace: &str, id: i64) -> Vec<String> {
    let list = kubectl_json(&[
        "-n",
        namespace,
        "get",
        "jobs",
        "-l",
        &format!("trainyard.dev/job={id}"),
    ]);
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|j| j["metadata"]["name"].as_str().unwrap().to_owned())
        .collect()
}

async fn until(what: &str, seconds: u64, mut check: impl FnMut() -> bool) {
    for _ in 0..seconds * 5 {
        if check() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what}: not within {seconds} s");
}

fn settings(namespace: &str, pool: &str) -> Vec<(String, String)> {
    let c = cluster();
    [
        ("TRAINYARD_EXECUTOR", "kubernetes"),
        ("TRAINYARD_KUBE_CONFIG", c.kubeconfig.as_str()),
        ("TRAINYARD_KUBE_NAMESPACE", namespace),
        (
            "TRAINYARD_KUBE_NODE_SELECTOR",
            &format!("trainyard.dev/pool={pool}"),
        ),
        ("TRAINYARD_KUBE_TOLERATIONS", ""),
        ("TRAINYARD_KUBE_IMAGE", "trainyard/fake-trainer:1"),
        ("TRAINYARD_KUBE_TRAINYARD_IMAGE", "trainyard/server:test"),
        (
            "TRAINYARD_KUBE_TRACKING_URL",
            "http://trainyard.trainyard.svc:3000",
        ),
        ("TRAINYARD_JOB_STOP_GRACE_SECS", "1"),
        ("TRAINYARD_KUBE_IMAGE_PULL_TIMEOUT_SECS", "4"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_owned(), v.to_owned()))
    .collect()
}

fn as_refs(pairs: &[(String, String)]) -> Vec<(&str, &str)> {
    pairs
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect()
}

async fn server(namespace: &str, pool: &str) -> TestServer {
    TestServer::start_with(&as_refs(&settings(namespace, pool))).await
}

async fn run_status(server: &TestServer, detail: &Value) -> String {
    let run_id = detail["job"]["run_id"].as_str().unwrap();
    common::run(server, run_id).await["info"]["status"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn timeline(detail: &Value) -> Vec<String> {
    detail["events"]
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
        .collect()
}

/// The job once its second attempt runs, within `seconds`; Null if not.
async fn second_attempt_running(server: &TestServer, id: i64, seconds: u64) -> Value {
    for _ in 0..seconds * 10 {
        let detail = common::job(server, id).await;
        if detail["job"]["state"] == "RUNNING" && detail["job"]["attempt"] == 1 {
            return detail;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Value::Null
}

async fn cancel(server: &TestServer, id: i64) {
    let answer = post_json(
        server.addr,
        &format!("/api/trainyard/v1/jobs/{id}/cancel"),
        &json!({}),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn a_job_becomes_a_pinned_hardened_kubernetes_job_and_its_log_is_kept() {
    let ns = namespace();
    let s = server(&ns, "default").await;
    let id = submit(
        &s,
        json!({
            "name": "on-kubernetes",
            "command": "python train.py --epochs 3",
            "resources": {"gpus": 2, "cpus": 4, "memory": "16Gi"},
            "env": {"FAKE_RUN_SECONDS": "4", "WANDB_MODE": "offline"},
            "max_runtime": "1h",
        }),
    )
    .await;
    let running = wait_for(&s, id, "RUNNING").await;
    let node = running["job"]["node"].as_str().unwrap().to_owned();
    assert!(node.starts_with("gpu-node-"), "{running}");
    let name = job_of(&ns, id);
    let run_id = running["job"]["run_id"].as_str().unwrap();
    assert_eq!(name, format!("trainyard-{id}-0-{}", &run_id[..8]));

    let job = kubectl_json(&["-n", &ns, "get", "job", &name]);
    let labels = &job["metadata"]["labels"];
    assert_eq!(labels["app.kubernetes.io/managed-by"], "trainyard");
    assert_eq!(labels["trainyard.dev/attempt"], "0");
    assert_eq!(
        job["metadata"]["annotations"]["trainyard.dev/run"],
        running["job"]["run_id"]
    );
    let spec = &job["spec"];
    assert_eq!(spec["backoffLimit"], 0, "Trainyard retries, not Kubernetes");
    let deadline = spec["activeDeadlineSeconds"].as_i64().unwrap();
    assert!((3500..=3600).contains(&deadline), "{deadline}");
    let rule = &spec["podFailurePolicy"]["rules"][0];
    assert_eq!(rule["action"], "FailJob");
    assert_eq!(rule["onPodConditions"][0]["type"], "DisruptionTarget");
    let pod = &spec["template"]["spec"];
    let term = &pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
        [0]["matchFields"][0];
    assert_eq!(term["key"], "metadata.name");
    assert_eq!(
        term["values"],
        json!([node]),
        "pinned where Trainyard placed it"
    );
    assert_eq!(pod["automountServiceAccountToken"], false);
    assert_eq!(pod["restartPolicy"], "Never");
    assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
    assert_eq!(
        pod["securityContext"]["seccompProfile"]["type"],
        "RuntimeDefault"
    );
    let main = &pod["containers"][0];
    assert_eq!(main["name"], "main");
    assert_eq!(main["image"], "trainyard/fake-trainer:1");
    assert_eq!(main["command"][4], "python train.py --epochs 3");
    assert!(pod["initContainers"].is_null(), "no files to fetch: {pod}");
    let security = &main["securityContext"];
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    let limits = &main["resources"]["limits"];
    assert_eq!(limits["nvidia.com/gpu"], "2");
    assert_eq!(limits["cpu"], "4");
    assert_eq!(limits["memory"], "16Gi");
    // Its disk is held to job_disk_quota_bytes (100 GiB by default), by the
    // kubelet, without being asked for: Trainyard does not place by disk.
    assert_eq!(limits["ephemeral-storage"], "100Gi");
    let requests = &main["resources"]["requests"];
    assert_eq!(requests["ephemeral-storage"], "0");
    for key in ["nvidia.com/gpu", "cpu", "memory"] {
        assert_eq!(requests[key], limits[key], "{key}");
    }
    let volumes = pod["volumes"].as_array().unwrap();
    let volume = |n: &str| volumes.iter().find(|v| v["name"] == n).cloned().unwrap();
    assert_eq!(volume("workspace")["emptyDir"]["sizeLimit"], "100Gi");
    // Without a checkpoint storage class, checkpoints last the attempt.
    assert!(volume("checkpoints")["emptyDir"].is_object(), "{volumes:?}");
    let mounts = main["volumeMounts"].as_array().unwrap();
    assert!(
        mounts
            .iter()
            .any(|m| m["name"] == "checkpoints" && m["mountPath"] == "/checkpoints"),
        "{mounts:?}"
    );
    let env = main["env"].as_array().unwrap();
    let var = |n: &str| env.iter().find(|e| e["name"] == n).cloned();
    assert_eq!(var("WANDB_MODE").unwrap()["value"], "offline");
    // Its GPUs are the device plugin's to name.
    assert!(var("NVIDIA_VISIBLE_DEVICES").is_none(), "{env:?}");
    assert_eq!(
        var("MLFLOW_TRACKING_URI").unwrap()["value"],
        "http://trainyard.trainyard.svc:3000"
    );
    assert_eq!(var("TRAINYARD_JOB_ID").unwrap()["value"], id.to_string());
    assert_eq!(
        var("TRAINYARD_CHECKPOINT_DIR").unwrap()["value"],
        "/checkpoints"
    );
    // The token is in the Secret, never in the spec.
    let token = var("MLFLOW_TRACKING_TOKEN").unwrap();
    assert!(token.get("value").is_none(), "{token}");
    assert_eq!(token["valueFrom"]["secretKeyRef"]["name"], name);
    let secret = kubectl_json(&["-n", &ns, "get", "secret", &name]);
    let owner = &secret["metadata"]["ownerReferences"][0];
    assert_eq!(owner["kind"], "Job");
    assert_eq!(owner["uid"], job["metadata"]["uid"]);
    assert!(secret["data"]["MLFLOW_TRACKING_TOKEN"].is_string());
    // kube-scheduler agreed with the placement.
    let pods = kubectl_json(&["-n", &ns, "get", "pods", "-l", &format!("job-name={name}")]);
    assert_eq!(pods["items"][0]["spec"]["nodeName"], node.as_str());
    let pod_name = pods["items"][0]["metadata"]["name"].as_str().unwrap();

    let done = wait_for(&s, id, "SUCCEEDED").await;
    assert_eq!(done["job"]["exit_code"], 0);
    // Where it ran, kept after the end: the node and its pod.
    assert_eq!(done["job"]["node"], node.as_str());
    assert_eq!(done["job"]["pod"], pod_name, "{done}");
    // And so says the command line.
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args(["jobs", "--server", &format!("http://{}", s.addr)])
        .env_remove("TRAINYARD_TOKEN")
        .output()
        .await
        .unwrap();
    let listed = String::from_utf8_lossy(&out.stdout);
    let row = listed
        .lines()
        .find(|l| l.contains("on-kubernetes"))
        .unwrap();
    assert!(
        row.trim_end()
            .ends_with(&format!("{node} · pod {pod_name}")),
        "{listed}"
    );
    assert_eq!(run_status(&s, &done).await, "FINISHED");
    // The pod's log, read through pods/log, is the job's log.
    let mut log = String::new();
    for _ in 0..50 {
        log = common::log(&s, id).await;
        if log.contains("epoch 3") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        log.contains(
            "kwok: epoch 1 loss=0.912\nkwok: epoch 2 loss=0.431\nkwok: epoch 3 loss=0.207\n"
        ),
        "{log:?}"
    );
    // The finished Job goes, and its Secret with it; the log stays.
    until("the finished Job removed", 60, || {
        !exists(&ns, "job", &name)
    })
    .await;
    until("its Secret removed with it", 60, || {
        !exists(&ns, "secret", &name)
    })
    .await;
    assert!(common::log(&s, id).await.contains("epoch 2"));
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn a_failing_pod_fails_the_job_with_its_exit_code_and_oom_is_said_in_words() {
    let ns = namespace();
    let s = server(&ns, "default").await;
    let failing = submit(
        &s,
        json!({"name": "exits-3", "command": "python train.py",
               "env": {"FAKE_RUN_SECONDS": "1", "FAKE_EXIT_CODE": "3"}}),
    )
    .await;
    let oom = submit(
        &s,
        json!({"name": "too-big", "command": "python train.py",
               "resources": {"memory": "2Gi"},
               "env": {"FAKE_RUN_SECONDS": "1", "FAKE_EXIT_CODE": "137", "FAKE_OOM": "true"}}),
    )
    .await;
    let failed = wait_for(&s, failing, "FAILED").await;
    assert_eq!(failed["job"]["exit_code"], 3);
    assert_eq!(last_message(&failed), "exited with code 3");
    assert_eq!(run_status(&s, &failed).await, "FAILED");
    let oom = wait_for(&s, oom, "FAILED").await;
    assert_eq!(oom["job"]["exit_code"], 137);
    let message = last_message(&oom);
    assert!(
        message.starts_with("out of memory: it reached its limit of 2.0 GiB (resources.memory)"),
        "{message}"
    );
}

/// Polls job `id` until it FAILED (the test fails after 120 s): its
/// detail then, and the checkpoint claim each of its attempts' Jobs,
/// seen while it was there, mounted (by attempt).
async fn mounted_until_failed(
    s: &TestServer,
    ns: &str,
    id: i64,
) -> (std::collections::BTreeMap<String, Option<Value>>, Value) {
    let mut mounted = std::collections::BTreeMap::new();
    let mut looks = 0;
    loop {
        looks += 1;
        assert!(looks < 600, "not FAILED within 120 s: {mounted:?}");
        let jobs = kubectl_json(&[
            "-n",
            ns,
            "get",
            "jobs",
            "-l",
            &format!("trainyard.dev/job={id}"),
        ]);
        for job in jobs["items"].as_array().unwrap() {
            let claim = job["spec"]["template"]["spec"]["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == "checkpoints")
                .map(|v| v["persistentVolumeClaim"]["claimName"].clone());
            mounted.insert(
                job["metadata"]["labels"]["trainyard.dev/attempt"].to_string(),
                claim,
            );
        }
        let detail = common::job(s, id).await;
        if detail["job"]["state"] == "FAILED" {
            return (mounted, detail);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn every_attempt_mounts_the_jobs_checkpoint_claim_which_a_job_resumes_from() {
    let ns = namespace();
    let mut with_claims = settings(&ns, "default");
    // executor.sh makes the class, with volumes made ahead (no provisioner).
    with_claims.push((
        "TRAINYARD_KUBE_CHECKPOINT_STORAGE_CLASS".into(),
        "trainyard-checkpoints".into(),
    ));
    with_claims.push(("TRAINYARD_KUBE_CHECKPOINT_GIB".into(), "1".into()));
    let s = TestServer::start_with(&as_refs(&with_claims)).await;
    let id = submit(
        &s,
        json!({"name": "resumes", "command": "python train.py", "retries": 1,
               "env": {"FAKE_RUN_SECONDS": "2", "FAKE_EXIT_CODE": "3"}}),
    )
    .await;
    // The claim is made at the first start and bound to a volume; the pod
    // runs with it.
    let mut claim = Value::Null;
    until("the job's checkpoint claim bound", 60, || {
        let claims = kubectl_json(&[
            "-n",
            &ns,
            "get",
            "pvc",
            "-l",
            &format!("trainyard.dev/job={id}"),
        ]);
        claim = claims["items"][0].clone();
        claim["status"]["phase"] == "Bound"
    })
    .await;
    let claim_name = claim["metadata"]["name"].as_str().unwrap().to_owned();
    assert!(
        claim_name.starts_with(&format!("trainyard-{id}-")) && claim_name.ends_with("-checkpoints"),
        "{claim_name}"
    );
    assert_eq!(claim["spec"]["storageClassName"], "trainyard-checkpoints");
    assert_eq!(claim["spec"]["resources"]["requests"]["storage"], "1Gi");
    assert_eq!(
        claim["metadata"]["labels"]["app.kubernetes.io/managed-by"],
        "trainyard"
    );
    // Both attempts fail (exit 3): each attempt's Job, seen while it is
    // there, mounts the same claim.
    let (mounted, failed) = mounted_until_failed(&s, &ns, id).await;
    assert_eq!(failed["job"]["attempt"], 1, "{failed}");
    assert_eq!(mounted.len(), 2, "{mounted:?}");
    for claim in mounted.values() {
        assert_eq!(claim.as_ref().unwrap(), claim_name.as_str(), "{mounted:?}");
    }
    // Failed for good: its claim is kept for a job to resume from, as
    // large as its volume.
    assert_eq!(failed["checkpoints"]["bytes"], 1u64 << 30, "{failed}");
    assert!(exists(&ns, "pvc", &claim_name));
    let resume = format!("/api/trainyard/v1/jobs/{id}/retry?resume=true");
    let answer = post_json(s.addr, &resume, &json!({})).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    let next = answer.json()["job"]["id"].as_i64().unwrap();
    // Its attempts mount the same claim, relabelled as its own.
    let (claims, ended) = mounted_until_failed(&s, &ns, next).await;
    assert!(!claims.is_empty(), "{ended}");
    assert!(
        claims
            .values()
            .all(|c| c.as_ref().and_then(Value::as_str) == Some(claim_name.as_str())),
        "{claims:?}"
    );
    let claim = kubectl_json(&["-n", &ns, "get", "pvc", &claim_name]);
    assert_eq!(
        claim["metadata"]["labels"]["trainyard.dev/job"],
        next.to_string()
    );
    assert_eq!(
        claim["metadata"]["annotations"]["trainyard.dev/resumed-from"],
        id.to_string()
    );
    // Kept now as the second job's; the first keeps none.
    assert_eq!(ended["checkpoints"]["bytes"], 1u64 << 30, "{ended}");
    assert!(common::job(&s, id).await.get("checkpoints").is_none());
    // Deleted by their owner: the claim goes.
    let path = format!("/api/trainyard/v1/jobs/{next}/checkpoints");
    let deleted = common::request(s.addr, "DELETE", &path, &[], b"").await;
    assert!(deleted.status < 300, "{}", deleted.body);
    until("the checkpoint claim deleted", 60, || {
        !exists(&ns, "pvc", &claim_name)
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn cancel_deletes_the_job_and_max_runtime_stops_it() {
    let ns = namespace();
    let s = server(&ns, "default").await;
    let long = submit(
        &s,
        json!({"name": "long", "command": "sleep 600", "env": {"FAKE_RUN_SECONDS": "600"}}),
    )
    .await;
    let limited = submit(
        &s,
        json!({"name": "limited", "command": "sleep 600", "max_runtime": "3s",
               "env": {"FAKE_RUN_SECONDS": "600"}}),
    )
    .await;
    wait_for(&s, long, "RUNNING").await;
    // Without GPUs, NVIDIA's runtime is told to give it none (a CUDA
    // image names them all).
    let job = kubectl_json(&["-n", &ns, "get", "job", &job_of(&ns, long)]);
    let env = job["spec"]["template"]["spec"]["containers"][0]["env"].clone();
    let devices = env
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "NVIDIA_VISIBLE_DEVICES");
    assert_eq!(devices.unwrap()["value"], "void", "{env}");
    cancel(&s, long).await;
    let cancelled = wait_for(&s, long, "CANCELLED").await;
    assert_eq!(run_status(&s, &cancelled).await, "KILLED");
    assert!(
        jobs_of(&ns, long).is_empty(),
        "the Job is deleted on cancel"
    );

    let stopped = wait_for(&s, limited, "FAILED").await;
    let message = last_message(&stopped);
    assert!(
        message.starts_with("stopped after its max runtime of 3 s"),
        "{message}"
    );
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn what_no_node_can_hold_is_refused_and_others_pods_make_jobs_wait() {
    let ns = namespace();
    // Pool "busy": one node, six of whose GPUs another team's pod holds.
    let s = server(&ns, "busy").await;
    let answer = post_json(
        s.addr,
        "/api/trainyard/v1/jobs",
        &json!({"name": "nine", "command": "x", "resources": {"gpus": 9}}),
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(
        answer.body.contains("asks for 9 GPUs; the largest of the cluster's 1 node with trainyard.dev/pool=busy has 8 (nvidia.com/gpu)"),
        "{}",
        answer.body
    );
    let pod = json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "another-teams-pod", "namespace": "default"},
        "spec": {
            "nodeSelector": {"trainyard.dev/pool": "busy"},
            "containers": [{"name": "c", "image": "x",
                            "resources": {"limits": {"nvidia.com/gpu": "6"}}}]
        }
    });
    let file = s.data_dir.path().join("pod.json");
    std::fs::write(&file, pod.to_string()).unwrap();
    kubectl(&["apply", "-f", file.to_str().unwrap()]);
    until("the other team's pod Running", 30, || {
        kubectl(&[
            "-n",
            "default",
            "get",
            "pod",
            "another-teams-pod",
            "-o",
            "jsonpath={.status.phase}",
        ]) == "Running"
    })
    .await;
    // The two GPUs left go to a job of ours; the admins' view of the node
    // says who holds what.
    let two = submit(
        &s,
        json!({"name": "two", "command": "x", "resources": {"gpus": 2},
               "env": {"FAKE_RUN_SECONDS": "600"}}),
    )
    .await;
    wait_for(&s, two, "RUNNING").await;
    let answer = s.get("/api/trainyard/v1/nodes").await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    let view: Value = serde_json::from_str(&answer.body).unwrap();
    assert_eq!(view["executor"], "kubernetes", "{view}");
    let nodes = view["nodes"].as_array().unwrap();
    assert_eq!(nodes.len(), 1, "{view}");
    assert_eq!(
        nodes[0],
        json!({"name": "busy-node-0001", "takes_jobs": true, "gpus": 8, "used": 2,
               "others": 6, "free": 0, "jobs": [two]}),
        "{view}"
    );
    // Four GPUs: the node has 8, but none free of the other pod and ours.
    let id = submit(
        &s,
        json!({"name": "four", "command": "x", "resources": {"gpus": 4},
               "env": {"FAKE_RUN_SECONDS": "1"}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let waiting = common::job(&s, id).await;
    assert_eq!(waiting["job"]["state"], "QUEUED", "{waiting}");
    assert!(waiting["job"]["pending_reason"].is_string(), "{waiting}");
    cancel(&s, two).await;
    kubectl(&[
        "-n",
        "default",
        "delete",
        "pod",
        "another-teams-pod",
        "--wait=true",
    ]);
    wait_longer(&s, id, "SUCCEEDED", 90).await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn an_evicted_attempt_runs_again_on_another_node_without_spending_a_retry() {
    let ns = namespace();
    let s = server(&ns, "evict").await;
    let id = submit(
        &s,
        json!({"name": "evicted", "command": "x", "retries": 0,
               "resources": {"gpus": 8}, "env": {"FAKE_RUN_SECONDS": "600"}}),
    )
    .await;
    let first = wait_for(&s, id, "RUNNING").await;
    let node = first["job"]["node"].as_str().unwrap().to_owned();
    kubectl(&[
        "taint",
        "node",
        &node,
        "trainyard.dev/broken=true:NoExecute",
    ]);
    let result = second_attempt_running(&s, id, 60).await;
    kubectl(&["taint", "node", &node, "trainyard.dev/broken-"]);
    assert!(!result.is_null(), "{}", common::job(&s, id).await);
    assert_ne!(result["job"]["node"], node.as_str());
    assert_eq!(
        result["job"]["retries"], 1,
        "the disruption added an attempt"
    );
    let events = timeline(&result);
    assert!(
        events.iter().any(
            |e| e.starts_with(&format!("requeued: disrupted: on node {node}, "))
                && e.ends_with("queued again in its place, without spending a retry (attempt 2)")
        ),
        "{events:?}"
    );
    assert_eq!(run_status(&s, &first).await, "KILLED");
    cancel(&s, id).await;
    wait_for(&s, id, "CANCELLED").await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn a_deleted_nodes_attempt_runs_again_on_another_node_without_spending_a_retry() {
    let ns = namespace();
    let s = server(&ns, "gone").await;
    let id = submit(
        &s,
        json!({"name": "orphaned", "command": "x", "retries": 0,
               "resources": {"gpus": 8}, "env": {"FAKE_RUN_SECONDS": "600"}}),
    )
    .await;
    let first = wait_for(&s, id, "RUNNING").await;
    let node = first["job"]["node"].as_str().unwrap().to_owned();
    let first_job = job_of(&ns, id);
    kubectl(&["delete", "node", &node, "--wait=false"]);
    // Well before Kubernetes' pod garbage collector would tell (40 s on).
    let moved = second_attempt_running(&s, id, 30).await;
    assert!(!moved.is_null(), "{}", common::job(&s, id).await);
    assert_ne!(moved["job"]["node"], node.as_str());
    assert_eq!(moved["job"]["retries"], 1, "the lost node added an attempt");
    let events = timeline(&moved);
    assert!(
        events.iter().any(|e| e
            == &format!(
                "requeued: disrupted: on node {node}, which was deleted from the cluster; queued again in its place, without spending a retry (attempt 2)"
            )),
        "{events:?}"
    );
    assert_eq!(run_status(&s, &first).await, "KILLED");
    // The lost attempt's Job is removed; the new one stays.
    until("the lost attempt's Job removed", 60, || {
        !exists(&ns, "job", &first_job)
    })
    .await;
    assert_eq!(jobs_of(&ns, id).len(), 1);
    cancel(&s, id).await;
    wait_for(&s, id, "CANCELLED").await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn an_image_that_cannot_be_pulled_fails_the_attempt_and_frees_its_gpus() {
    let ns = namespace();
    let s = server(&ns, "default").await;
    let id = submit(
        &s,
        json!({"name": "unpullable", "command": "x", "retries": 0,
               "image": "registry.invalid/missing:1", "resources": {"gpus": 1}}),
    )
    .await;
    let detail = wait_longer(&s, id, "FAILED", 90).await;
    let message = last_message(&detail);
    assert!(
        message.starts_with("could not start: its image could not be pulled (tried for ")
            && message.contains(
                "ImagePullBackOff: Back-off pulling image \"registry.invalid/missing:1\""
            )
            && message.ends_with("check the job's image and the image pull secrets"),
        "{message}"
    );
    // While the kubelet tried, the job said why it waited.
    let events = timeline(&detail);
    assert!(
        events
            .iter()
            .any(|e| e.starts_with("waiting: ImagePullBackOff: Back-off pulling image")),
        "{events:?}"
    );
    assert_eq!(run_status(&s, &detail).await, "FAILED");
    until("the failed attempt's Job removed", 60, || {
        jobs_of(&ns, id).is_empty()
    })
    .await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn a_restarted_server_adopts_what_runs_and_never_makes_a_second_job() {
    let ns = namespace();
    let s = server(&ns, "default").await;
    let id = submit(
        &s,
        json!({"name": "survives", "command": "x", "env": {"FAKE_RUN_SECONDS": "8"}}),
    )
    .await;
    let running = wait_for(&s, id, "RUNNING").await;
    let run_id = running["job"]["run_id"].as_str().unwrap().to_owned();
    let (db, data) = s.crash().await;
    let again = TestServer::start_in(db, data, &as_refs(&settings(&ns, "default"))).await;
    let done = wait_longer(&again, id, "SUCCEEDED", 60).await;
    assert_eq!(done["job"]["attempt"], 0, "{done}");
    let kinds: Vec<String> = timeline(&done);
    assert_eq!(
        kinds.iter().filter(|e| e.starts_with("started:")).count(),
        1,
        "{kinds:?}"
    );
    let log = common::log(&again, id).await;
    assert_eq!(log.matches("epoch 1 loss").count(), 1, "{log:?}");
    // One Job for its one attempt, ever (removed now that it ended).
    let created: Vec<String> = kubectl(&[
        "-n",
        &ns,
        "get",
        "events",
        "--field-selector",
        "reason=SuccessfulCreate,involvedObject.kind=Job",
        "-o",
        "jsonpath={range .items[*]}{.involvedObject.name}{\"\\n\"}{end}",
    ])
    .lines()
    .filter(|l| l.starts_with(&format!("trainyard-{id}-")))
    .map(str::to_owned)
    .collect();
    assert_eq!(created, vec![format!("trainyard-{id}-0-{}", &run_id[..8])]);
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn the_servers_account_may_do_what_jobs_need_and_no_more() {
    let c = cluster();
    let ns = namespace();
    let can = |args: &[&str]| {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        // The answer; kubectl may add a warning line after it.
        let (_, text) = kubectl_as(&c.kubeconfig, &all);
        text.lines().next().unwrap_or_default().trim().to_owned()
    };
    for allowed in [
        ["create", "jobs.batch"],
        ["delete", "jobs.batch"],
        ["watch", "pods"],
        ["get", "pods/log"],
        ["create", "secrets"],
        ["create", "persistentvolumeclaims"],
        ["get", "persistentvolumeclaims"],
        ["list", "persistentvolumeclaims"],
        ["patch", "persistentvolumeclaims"],
        ["delete", "persistentvolumeclaims"],
    ] {
        assert_eq!(
            can(&[allowed[0], allowed[1], "-n", &ns]),
            "yes",
            "{allowed:?}"
        );
    }
    assert_eq!(can(&["list", "nodes"]), "yes");
    for refused in [
        vec!["get", "secrets", "-n", &ns],
        vec!["create", "pods", "-n", &ns],
        vec!["create", "jobs.batch", "-n", "default"],
        vec!["delete", "nodes"],
        vec!["patch", "nodes"],
        vec!["create", "pods/exec", "-n", &ns],
        vec!["create", "persistentvolumes"],
        vec!["list", "persistentvolumeclaims", "-n", "default"],
        vec!["update", "persistentvolumeclaims", "-n", &ns],
    ] {
        assert_eq!(can(&refused), "no", "{refused:?}");
    }
    // A refused verb is refused by the API itself.
    let (ok, text) = kubectl_as(&c.kubeconfig, &["-n", &ns, "get", "secrets"]);
    assert!(!ok && text.contains("Forbidden"), "{text}");
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn api_outage_of_30_seconds_loses_nothing() {
    let c = cluster();
    let ns = last_namespace();
    let s = server(&ns, "default").await;
    let running = submit(
        &s,
        json!({"name": "through-it", "command": "x", "env": {"FAKE_RUN_SECONDS": "20"}}),
    )
    .await;
    wait_for(&s, running, "RUNNING").await;
    let outage = std::thread::spawn({
        let script = format!("{}/api-outage.sh", c.dir);
        move || Command::new(script).arg("30").status().unwrap()
    });
    tokio::time::sleep(Duration::from_secs(5)).await;
    // Submitted while the API is away: it waits, it is not refused or lost.
    let later = submit(
        &s,
        json!({"name": "while-away", "command": "x", "env": {"FAKE_RUN_SECONDS": "2"}}),
    )
    .await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = common::job(&s, running).await;
    assert_eq!(during["job"]["state"], "RUNNING", "{during}");
    let waiting = common::job(&s, later).await;
    assert_eq!(waiting["job"]["state"], "QUEUED", "{waiting}");
    let status = tokio::task::spawn_blocking(move || outage.join().unwrap())
        .await
        .unwrap();
    assert!(status.success(), "api-outage.sh failed");
    for id in [running, later] {
        let done = wait_longer(&s, id, "SUCCEEDED", 120).await;
        assert_eq!(done["job"]["attempt"], 0, "{done}");
    }
    assert!(common::log(&s, running).await.contains("epoch 3"));
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn a_template_jobs_files_are_fetched_by_an_init_container_with_its_token() {
    let ns = namespace();
    let s = server(&ns, "default").await;
    let id = submit(
        &s,
        json!({"name": "demo", "template": "cpu-demo", "hyperparameters": {"epochs": 3}}),
    )
    .await;
    wait_for(&s, id, "RUNNING").await;
    let job = kubectl_json(&["-n", &ns, "get", "job", &job_of(&ns, id)]);
    let pod = &job["spec"]["template"]["spec"];
    let init = &pod["initContainers"][0];
    assert_eq!(init["name"], "files");
    assert_eq!(init["image"], "trainyard/server:test");
    assert_eq!(
        init["command"],
        json!(["trainyard", "job-files", "--into", "/workspace"])
    );
    let env = init["env"].as_array().unwrap();
    let token = env
        .iter()
        .find(|e| e["name"] == "MLFLOW_TRACKING_TOKEN")
        .unwrap();
    assert!(token.get("value").is_none(), "{token}");
    assert!(
        env.iter()
            .any(|e| e["name"] == "TRAINYARD_JOB_ID"
                && e["value"].as_str() == Some(&*id.to_string()))
    );
    assert_eq!(init["securityContext"]["allowPrivilegeEscalation"], false);
    // Both containers share the workspace; the command runs in it.
    assert_eq!(init["volumeMounts"][0]["mountPath"], "/workspace");
    let main = &pod["containers"][0];
    assert_eq!(main["workingDir"], "/workspace");
    assert_eq!(
        main["command"][4],
        "python train.py --epochs 3 --lr 0.05 --hidden 64 --noise 0.15 --seed 0 --delay 0.1"
    );
    assert_eq!(main["resources"]["limits"]["memory"], "1Gi");
    assert!(main["resources"]["limits"].get("nvidia.com/gpu").is_none());
    wait_for(&s, id, "SUCCEEDED").await;
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn a_namespace_the_account_may_not_use_stops_the_start_with_the_fix() {
    let db = trainyard_test_db::TestDb::new().await;
    let data = tempfile::tempdir().unwrap();
    let mut vars = settings("default", "default");
    vars.extend([
        ("TRAINYARD_LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
        ("TRAINYARD_DATABASE_URL".to_owned(), db.url.clone()),
        (
            "TRAINYARD_DATA_DIR".to_owned(),
            data.path().display().to_string(),
        ),
        (
            "TRAINYARD_TEMPLATES_DIR".to_owned(),
            common::workspace_root()
                .join("templates")
                .display()
                .to_string(),
        ),
    ]);
    let config = trainyard::config::load_from(None, &Default::default(), &vars).unwrap();
    let error = match trainyard::Server::bind(&config).await {
        Ok(_) => panic!("the server started in a namespace its account may not use"),
        Err(error) => error.to_string(),
    };
    assert!(
        error.contains("the Kubernetes account may not list Jobs in namespace default")
            && error.contains("helm/trainyard/templates/rbac.yaml"),
        "{error}"
    );
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn another_installs_pods_in_the_namespace_are_not_taken_for_ours() {
    let ns = namespace();
    // A Job left by an earlier install on another database: the same job
    // id and attempt, its own run, still running.
    let earlier = json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": "trainyard-1-0-0ld1n5ta", "namespace": ns,
                     "labels": {"app.kubernetes.io/managed-by": "trainyard",
                                "trainyard.dev/job": "1", "trainyard.dev/attempt": "0"}},
        "spec": {"backoffLimit": 0, "template": {
            "metadata": {"labels": {"app.kubernetes.io/managed-by": "trainyard",
                                    "trainyard.dev/job": "1", "trainyard.dev/attempt": "0"}},
            "spec": {"restartPolicy": "Never",
                     "nodeSelector": {"trainyard.dev/pool": "default"},
                     "containers": [{"name": "main", "image": "x",
                                     "env": [{"name": "FAKE_RUN_SECONDS", "value": "600"}]}]}}}
    });
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("earlier.json");
    std::fs::write(&file, earlier.to_string()).unwrap();
    kubectl(&["apply", "-f", file.to_str().unwrap()]);
    until("the earlier install's pod Running", 30, || {
        kubectl(&[
            "-n",
            &ns,
            "get",
            "pods",
            "-l",
            "job-name=trainyard-1-0-0ld1n5ta",
            "-o",
            "jsonpath={.items[*].status.phase}",
        ]) == "Running"
    })
    .await;
    let s = server(&ns, "default").await;
    let id = submit(
        &s,
        json!({"name": "mine", "command": "x", "env": {"FAKE_RUN_SECONDS": "2"}}),
    )
    .await;
    assert_eq!(id, 1);
    let done = wait_for(&s, id, "SUCCEEDED").await;
    assert_eq!(done["job"]["attempt"], 0);
    tokio::time::sleep(Duration::from_secs(3)).await;
    let log = common::log(&s, id).await;
    assert_eq!(log.matches("epoch 1 loss").count(), 1, "{log:?}");
    // The earlier install's Job is left alone.
    assert!(exists(&ns, "job", "trainyard-1-0-0ld1n5ta"));
    kubectl(&[
        "-n",
        &ns,
        "delete",
        "job",
        "trainyard-1-0-0ld1n5ta",
        "--cascade=foreground",
        "--wait=false",
    ]);
}

/// The chart's agents (end2end/k8s/executor.sh installs its agent.yaml,
/// on the one node of pool `agents`).
const AGENT_NAMESPACE: &str = "trainyard";
const AGENT_ACCOUNT: &str = "trainyard-trainyard-agent";

/// A token of `account` for `audience`, bound to `pod` where given, as the
/// kubelet makes it for a projected volume.
fn token_of(account: &str, audience: Option<&str>, pod: Option<&str>) -> String {
    let mut args = vec![
        "-n",
        AGENT_NAMESPACE,
        "create",
        "token",
        account,
        "--duration",
        "10m",
    ];
    if let Some(audience) = audience {
        args.extend(["--audience", audience]);
    }
    if let Some(pod) = pod {
        args.extend(["--bound-object-kind", "Pod", "--bound-object-name", pod]);
    }
    kubectl(&args).trim().to_owned()
}

async fn agent_call(s: &TestServer, path: &str, token: &str, body: &Value) -> common::Response {
    common::request(
        s.addr,
        "POST",
        path,
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

#[tokio::test]
#[ignore = "needs the test cluster: run end2end/k8s/executor.sh"]
async fn an_agent_signs_in_for_its_node_only_and_says_which_gpus_the_kubelet_gave_each_pod() {
    // The DaemonSet's pod on the agents' node, as the chart makes it.
    let mut pod = (String::new(), String::new());
    until("the agent DaemonSet's pod scheduled", 60, || {
        let list = kubectl_json(&[
            "-n",
            AGENT_NAMESPACE,
            "get",
            "pods",
            "-l",
            "app.kubernetes.io/name=trainyard-agent",
        ]);
        let found = list["items"].as_array().and_then(|items| {
            items.iter().find_map(|p| {
                Some((
                    p["metadata"]["name"].as_str()?.to_owned(),
                    p["spec"]["nodeName"].as_str()?.to_owned(),
                ))
            })
        });
        match found {
            Some(found) => {
                pod = found;
                true
            }
            None => false,
        }
    })
    .await;
    let (pod, node) = pod;
    assert!(node.starts_with("agent-node-"), "{node}");
    // The chart gives the server's account this right, and only with the
    // agents.
    let (_, can) = kubectl_as(
        &cluster().kubeconfig,
        &[
            "auth",
            "can-i",
            "create",
            "tokenreviews.authentication.k8s.io",
        ],
    );
    assert_eq!(
        can.lines().next().unwrap_or_default().trim(),
        "yes",
        "{can}"
    );

    let mut settings = settings(&namespace(), "agents");
    settings.push((
        "TRAINYARD_KUBE_AGENT_ACCOUNT".to_owned(),
        format!("{AGENT_NAMESPACE}/{AGENT_ACCOUNT}"),
    ));
    let s = TestServer::start_with(&as_refs(&settings)).await;
    let register = |node: &str| json!({"node": node, "gpus": [{"index": 0, "uuid": "GPU-agent-k8s-0", "name": "Simulated H100", "memory_total_bytes": 85_899_345_920u64}]});

    // The kubelet's token: this account, for Trainyard, bound to the pod.
    let token = token_of(AGENT_ACCOUNT, Some("trainyard-agent"), Some(&pod));
    let answer = agent_call(
        &s,
        "/api/trainyard/v1/agent/register",
        &token,
        &register(&node),
    )
    .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["node"], node.as_str());
    // Its node only, and the agent API only.
    let other = agent_call(
        &s,
        "/api/trainyard/v1/agent/register",
        &token,
        &register("gpu-node-1"),
    )
    .await;
    assert_eq!(other.status, 403, "{}", other.body);
    let jobs = common::request(
        s.addr,
        "GET",
        "/api/trainyard/v1/jobs",
        &[("Authorization", &format!("Bearer {token}"))],
        b"",
    )
    .await;
    assert_eq!(jobs.status, 403, "{}", jobs.body);

    // Tokens that are not an agent's of this node are refused.
    for (what, refused) in [
        (
            "for the API server",
            token_of(AGENT_ACCOUNT, None, Some(&pod)),
        ),
        (
            "bound to no pod",
            token_of(AGENT_ACCOUNT, Some("trainyard-agent"), None),
        ),
        (
            "of another account",
            token_of("default", Some("trainyard-agent"), None),
        ),
    ] {
        let answer = agent_call(
            &s,
            "/api/trainyard/v1/agent/register",
            &refused,
            &register(&node),
        )
        .await;
        assert_eq!(answer.status, 401, "{what}: {}", answer.body);
    }

    // The node's kubelet pod-resources socket: the kubelet's own server,
    // which hands out the node's 8 GPUs from the last one down (Trainyard
    // picks from the first).
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("kubelet.sock");
    let uuids: Vec<String> = (0..8)
        .map(|i| format!("GPU-simulated-{node}-{i}"))
        .collect();
    let pod_resources = std::env::var("TEST_POD_RESOURCES")
        .unwrap_or_else(|_| panic!("TEST_POD_RESOURCES unset: {NEEDS}"));
    let _kubelet = tokio::process::Command::new(pod_resources)
        .args(["-kubeconfig", &cluster().admin, "-node", &node, "-gpus"])
        .arg(uuids.join(","))
        .arg("-socket")
        .arg(&socket)
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    until("the pod-resources socket", 60, || socket.exists()).await;

    // The agent itself, reading the token from a file as the chart mounts
    // it, sends its node's samples.
    let token_file = dir.path().join("token");
    std::fs::write(&token_file, &token).unwrap();
    let _agent = tokio::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args([
            "agent",
            "--server",
            &format!("http://{}", s.addr),
            "--node",
            &node,
        ])
        .arg("--token-file")
        .arg(&token_file)
        .arg("--spool")
        .arg(dir.path().join("spool"))
        .args(["--sample-secs", "1", "--simulated-gpus", "8"])
        .arg("--pod-resources-socket")
        .arg(&socket)
        .env_remove("TRAINYARD_SERVER")
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let path = format!("/api/trainyard/v1/nodes/{node}/gpus?window=1h");
    let mut points = 0;
    for _ in 0..150 {
        let answer = common::request(s.addr, "GET", &path, &[], b"").await;
        if answer.status == 200 {
            points = answer.json()["gpus"]
                .as_array()
                .map(|gpus| {
                    gpus.iter()
                        .map(|g| g["points"].as_array().map_or(0, Vec::len))
                        .sum::<usize>()
                })
                .unwrap_or(0);
            if points >= 4 {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        points >= 4,
        "the agent's samples did not arrive ({points} points)"
    );

    // A job of one GPU: Trainyard picks GPU 0, the kubelet gives its pod
    // GPU 7, and the agent says so. The job holds GPU 7 from then on: in
    // its record, its chart, the admin overview, and the simulated GPUs
    // (which follow what the server says is held).
    let id = submit(
        &s,
        json!({"name": "on-7", "command": "sleep 600", "resources": {"gpus": 1},
               "env": {"FAKE_RUN_SECONDS": "600"}}),
    )
    .await;
    let running = wait_for(&s, id, "RUNNING").await;
    assert_eq!(running["job"]["node"], node.as_str());
    assert_eq!(running["job"]["gpu_indices"], json!([0]), "{running}");
    let mut detail = running;
    for _ in 0..150 {
        detail = common::job(&s, id).await;
        if detail["job"]["gpu_devices"] == json!([7]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(detail["job"]["gpu_devices"], json!([7]), "{detail}");
    let window = s.get(&format!("/api/trainyard/v1/jobs/{id}/gpus")).await;
    assert_eq!(window.status, 200, "{}", window.body);
    let charted: Vec<u64> = window.json()["gpus"]
        .as_array()
        .unwrap()
        .iter()
        .map(|g| g["index"].as_u64().unwrap())
        .collect();
    assert_eq!(charted, [7]);
    let gpu = |overview: &Value, index: u64| {
        overview["nodes"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|n| n["name"] == node.as_str())
            .flat_map(|n| n["gpus"].as_array().unwrap().clone())
            .find(|g| g["index"] == index)
            .unwrap_or_else(|| panic!("no GPU {index} of {node}: {overview}"))
    };
    let mut overview = Value::Null;
    for _ in 0..150 {
        overview = s.get("/api/trainyard/v1/gpus").await.json();
        let util = |index| gpu(&overview, index)["latest"]["gpu_util"].as_u64();
        if util(7).is_some_and(|u| u >= 50) && util(0).is_some_and(|u| u < 20) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(gpu(&overview, 7)["job"], id, "{overview}");
    assert_eq!(gpu(&overview, 0)["job"], Value::Null, "{overview}");
    let util = |index| {
        gpu(&overview, index)["latest"]["gpu_util"]
            .as_u64()
            .unwrap()
    };
    assert!(util(7) >= 50 && util(0) < 20, "{overview}");

    // A second: Trainyard picks GPU 1 (0 is the first job's, as it counts),
    // the kubelet gives 6; each job is found by its pod.
    let second = submit(
        &s,
        json!({"name": "on-6", "command": "sleep 600", "resources": {"gpus": 1},
               "env": {"FAKE_RUN_SECONDS": "600"}}),
    )
    .await;
    let running = wait_for(&s, second, "RUNNING").await;
    assert_eq!(running["job"]["gpu_indices"], json!([1]), "{running}");
    let mut detail = running;
    for _ in 0..150 {
        detail = common::job(&s, second).await;
        if detail["job"]["gpu_devices"] == json!([6]) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert_eq!(detail["job"]["gpu_devices"], json!([6]), "{detail}");
    let overview = s.get("/api/trainyard/v1/gpus").await.json();
    assert_eq!(gpu(&overview, 6)["job"], second, "{overview}");
    assert_eq!(gpu(&overview, 7)["job"], id, "{overview}");
    for free in [0, 1] {
        assert_eq!(gpu(&overview, free)["job"], Value::Null, "{overview}");
    }
    for job in [id, second] {
        cancel(&s, job).await;
        wait_for(&s, job, "CANCELLED").await;
    }
}
