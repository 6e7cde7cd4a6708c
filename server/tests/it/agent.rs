//! Node agents (`trainyard agent`, separate processes) pushing GPU samples
//! to a server: one is cut off for a while and sends what it missed when
//! it is back; node credentials reach their own node's samples only.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use common::{TestServer, request};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};

/// A TCP relay to the server that can be cut (every connection dropped,
/// new ones refused) and restored: a network partition for one agent.
struct Relay {
    addr: std::net::SocketAddr,
    cut: Arc<AtomicBool>,
    live: Arc<std::sync::Mutex<Vec<tokio::task::JoinHandle<()>>>>,
    _task: tokio::task::JoinHandle<()>,
}

impl Relay {
    async fn to(target: std::net::SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cut = Arc::new(AtomicBool::new(false));
        let live = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (c, l) = (cut.clone(), live.clone());
        let task = tokio::spawn(async move {
            loop {
                let Ok((mut inbound, _)) = listener.accept().await else {
                    return;
                };
                if c.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                l.lock().unwrap().push(tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(target).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                }));
            }
        });
        Relay {
            addr,
            cut,
            live,
            _task: task,
        }
    }

    fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        for connection in self.live.lock().unwrap().drain(..) {
            connection.abort();
        }
    }

    fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as i64
}

async fn node_token(server: &TestServer, node: &str) -> String {
    let made = request(
        server.addr,
        "POST",
        &format!("/api/trainyard/v1/nodes/{node}/tokens"),
        &[],
        b"",
    )
    .await;
    assert_eq!(made.status, 201, "{}", made.body);
    made.json()["secret"].as_str().unwrap().to_owned()
}

fn agent(
    server: std::net::SocketAddr,
    node: &str,
    token_file: &std::path::Path,
    spool: &std::path::Path,
) -> tokio::process::Child {
    tokio::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args([
            "agent",
            "--server",
            &format!("http://{server}"),
            "--node",
            node,
        ])
        .arg("--token-file")
        .arg(token_file)
        .arg("--spool")
        .arg(spool)
        .args(["--sample-secs", "1", "--simulated-gpus", "2"])
        .env_remove("TRAINYARD_SERVER")
        .kill_on_drop(true)
        .spawn()
        .unwrap()
}

/// The times of a node's first GPU's raw samples in `[from, now]`.
async fn sample_times(server: &TestServer, node: &str, from: i64) -> Vec<i64> {
    let path = format!(
        "/api/trainyard/v1/nodes/{node}/gpus?from={from}&to={}&points=4000",
        now_ms() + 1000
    );
    let answer = request(server.addr, "GET", &path, &[], b"").await;
    if answer.status != 200 {
        return Vec::new();
    }
    let series = answer.json();
    let gpus = series["gpus"].as_array().cloned().unwrap_or_default();
    let Some(first) = gpus.iter().find(|g| g["index"] == 0) else {
        return Vec::new();
    };
    first["points"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["t_ms"].as_i64().unwrap())
        .collect()
}

async fn wait_for<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    for _ in 0..300 {
        if check().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    panic!("{what}: not after 60 s");
}

async fn bearer(
    server: &TestServer,
    token: &str,
    method: &str,
    path: &str,
    body: &Value,
) -> common::Response {
    request(
        server.addr,
        method,
        path,
        &[
            ("Authorization", &format!("Bearer {token}")),
            ("Content-Type", "application/json"),
        ],
        body.to_string().as_bytes(),
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_agents_push_one_catches_up_after_a_cut_and_node_tokens_stay_in_their_node() {
    let server = TestServer::start().await;
    let started = now_ms();
    let dir = tempfile::tempdir().unwrap();
    let (token_a, token_b) = (
        node_token(&server, "gpu-a").await,
        node_token(&server, "gpu-b").await,
    );
    for (name, token) in [("a", &token_a), ("b", &token_b)] {
        std::fs::write(dir.path().join(format!("token-{name}")), token).unwrap();
    }
    let relay = Relay::to(server.addr).await;
    let _a = agent(
        server.addr,
        "gpu-a",
        &dir.path().join("token-a"),
        &dir.path().join("spool-a"),
    );
    let _b = agent(
        relay.addr,
        "gpu-b",
        &dir.path().join("token-b"),
        &dir.path().join("spool-b"),
    );

    // Both nodes register and report.
    for node in ["gpu-a", "gpu-b"] {
        wait_for(&format!("{node}'s samples"), || async {
            sample_times(&server, node, started).await.len() >= 3
        })
        .await;
    }
    let overview = request(server.addr, "GET", "/api/trainyard/v1/gpus", &[], b"").await;
    assert_eq!(overview.status, 200);
    let text = overview.body;
    for uuid in [
        "GPU-simulated-gpu-a-0",
        "GPU-simulated-gpu-a-1",
        "GPU-simulated-gpu-b-0",
        "GPU-simulated-gpu-b-1",
    ] {
        assert!(text.contains(uuid), "{uuid} missing from {text}");
    }

    // B is cut off for a while; A goes on.
    relay.cut();
    let cut_at = now_ms();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let during = sample_times(&server, "gpu-b", started).await;
    let restored_at = now_ms();
    relay.restore();
    assert!(
        during.iter().all(|&t| t <= cut_at + 1500),
        "gpu-b's samples arrived while it was cut off: {during:?} (cut at {cut_at})"
    );
    let a_during = sample_times(&server, "gpu-a", cut_at + 1000).await;
    assert!(
        !a_during.is_empty(),
        "gpu-a stopped while gpu-b was cut off"
    );

    // Back, B sends what it sampled meanwhile: a sample each second of
    // the gap.
    wait_for("gpu-b's samples of the gap", || async {
        let times = sample_times(&server, "gpu-b", started).await;
        let gap = times
            .iter()
            .filter(|&&t| t > cut_at + 500 && t < restored_at - 500)
            .count();
        gap >= 3 && times.iter().any(|&t| t > restored_at)
    })
    .await;
    let times = sample_times(&server, "gpu-b", started).await;
    let mut sorted = times.clone();
    sorted.sort_unstable();
    sorted.dedup();
    assert_eq!(sorted, times, "one sample per moment, in order");
    let spool: Vec<_> = std::fs::read_dir(dir.path().join("spool-b"))
        .unwrap()
        .filter_map(|e| e.ok())
        .collect();
    assert!(spool.len() <= 1, "the spool empties once sent: {spool:?}");

    // A forged credential is nobody.
    let batch = json!({"readings": [], "xids": []});
    let forged = bearer(
        &server,
        "tyk_forged0000000000000000",
        "POST",
        "/api/trainyard/v1/agent/readings",
        &batch,
    )
    .await;
    assert_eq!(forged.status, 401, "{}", forged.body);

    // A's token cannot register B, nor claim B's GPUs under its own name.
    let as_b = bearer(
        &server,
        &token_a,
        "POST",
        "/api/trainyard/v1/agent/register",
        &json!({"node": "gpu-b", "gpus": []}),
    )
    .await;
    assert_eq!(as_b.status, 403, "{}", as_b.body);
    let steal = bearer(
        &server,
        &token_a,
        "POST",
        "/api/trainyard/v1/agent/register",
        &json!({"node": "gpu-a", "gpus": [
            {"index": 0, "uuid": "GPU-simulated-gpu-b-0", "name": "x", "memory_total_bytes": 1}
        ]}),
    )
    .await;
    assert_eq!(steal.status, 403, "{}", steal.body);
    assert!(steal.body.contains("another node"), "{}", steal.body);
    // A registration far larger than 64 GPUs need is refused unread.
    let huge = bearer(
        &server,
        &token_a,
        "POST",
        "/api/trainyard/v1/agent/register",
        &json!({"node": "gpu-a", "gpus": [], "pad": "x".repeat(300 << 10)}),
    )
    .await;
    assert_eq!(huge.status, 413, "{}", huge.body);

    // B's GPUs in A's batch are not kept.
    let now = now_ms();
    let sample = |uuid: &str| {
        json!({"index": 0, "uuid": uuid, "gpu_util": 100, "mem_util": 0,
            "mem_used_bytes": 0, "mem_total_bytes": 1, "temperature_c": 30,
            "power_mw": 1, "power_limit_mw": 1, "sm_clock_mhz": 1, "mem_clock_mhz": 1,
            "ecc_corrected": null, "ecc_uncorrected": null, "processes": []})
    };
    let foreign = bearer(
        &server,
        &token_a,
        "POST",
        "/api/trainyard/v1/agent/readings",
        &json!({"readings": [{"t_ms": now, "gpus": [sample("GPU-simulated-gpu-b-0")]}]}),
    )
    .await;
    assert_eq!(foreign.status, 200, "{}", foreign.body);
    assert_eq!(foreign.json()["kept"], 0, "{}", foreign.body);

    // Bad input is named.
    let future = bearer(
        &server,
        &token_a,
        "POST",
        "/api/trainyard/v1/agent/readings",
        &json!({"readings": [{"t_ms": now + 3_600_000, "gpus": [sample("GPU-simulated-gpu-a-0")]}]}),
    )
    .await;
    assert_eq!(future.status, 400, "{}", future.body);
    assert_eq!(future.json()["fields"][0]["field"], "readings[0].t_ms");

    // A node's token reaches nothing but the agent API, and the agent API
    // takes nothing but a node's token.
    let elsewhere = bearer(
        &server,
        &token_a,
        "GET",
        "/api/trainyard/v1/gpus",
        &json!({}),
    )
    .await;
    assert_eq!(elsewhere.status, 403, "{}", elsewhere.body);
    let admin = request(
        server.addr,
        "POST",
        "/api/trainyard/v1/agent/readings",
        &[("Content-Type", "application/json")],
        batch.to_string().as_bytes(),
    )
    .await;
    assert_eq!(admin.status, 403, "{}", admin.body);

    // A revoked node token is refused at once.
    let tokens = request(
        server.addr,
        "GET",
        "/api/trainyard/v1/nodes/gpu-a/tokens",
        &[],
        b"",
    )
    .await;
    let id = tokens.json()[0]["id"].as_i64().unwrap();
    let revoked = request(
        server.addr,
        "DELETE",
        &format!("/api/trainyard/v1/nodes/gpu-a/tokens/{id}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(revoked.status, 204, "{}", revoked.body);
    let after = bearer(
        &server,
        &token_a,
        "POST",
        "/api/trainyard/v1/agent/readings",
        &batch,
    )
    .await;
    assert_eq!(after.status, 401, "{}", after.body);

    // A new token written over the file reaches the running agent without
    // a restart (as the kubelet renews a projected ServiceAccount token):
    // what it samples from then on arrives again.
    let rolled_at = now_ms();
    let token_a2 = node_token(&server, "gpu-a").await;
    std::fs::write(dir.path().join("token-a"), &token_a2).unwrap();
    wait_for("gpu-a's samples with the renewed token", || async {
        sample_times(&server, "gpu-a", rolled_at + 500).await.len() >= 2
    })
    .await;

    // Node names are Kubernetes' (DNS-1123).
    let bad = request(
        server.addr,
        "POST",
        "/api/trainyard/v1/nodes/Bad_Node/tokens",
        &[],
        b"",
    )
    .await;
    assert_eq!(bad.status, 400, "{}", bad.body);

    // A token may be asked for with a lifetime; without one it lasts until
    // it is revoked (the tokens above).
    let path = "/api/trainyard/v1/nodes/gpu-a/tokens";
    let json_header = [("Content-Type", "application/json")];
    let dated = request(
        server.addr,
        "POST",
        path,
        &json_header,
        br#"{"expires_in_days": 30}"#,
    )
    .await;
    assert_eq!(dated.status, 201, "{}", dated.body);
    let dated = dated.json();
    let lifetime = dated["token"]["expires_at"].as_i64().unwrap()
        - dated["token"]["created_at"].as_i64().unwrap();
    assert_eq!(lifetime, 30 * 86_400_000);
    let listed = request(server.addr, "GET", path, &[], b"").await.json();
    assert!(
        listed
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t["id"] == dated["token"]["id"] && t["expires_at"].is_i64()),
        "{listed}"
    );
    for (body, says) in [
        (r#"{"expires_in_days": 0}"#, "expires_in_days"),
        (r#"{"expires_in_days": 100000}"#, "expires_in_days"),
        (r#"{"days": 30}"#, "unknown field `days`"),
        ("30", "the body must be empty or"),
    ] {
        let refused = request(server.addr, "POST", path, &json_header, body.as_bytes()).await;
        assert_eq!(refused.status, 400, "{body}: {}", refused.body);
        assert!(refused.body.contains(says), "{body}: {}", refused.body);
    }
}

/// A node gone for good leaves the admin's pages: its GPUs, their samples
/// and its agent tokens go; the executor's own node stays.
#[tokio::test]
async fn an_admin_removes_a_node_with_its_gpus_samples_and_tokens() {
    let server = TestServer::start().await;
    let token = node_token(&server, "gpu-gone").await;
    let registered = bearer(
        &server,
        &token,
        "POST",
        "/api/trainyard/v1/agent/register",
        &json!({"node": "gpu-gone", "gpus": [
            {"index": 0, "uuid": "GPU-gone-0", "name": "A100", "memory_total_bytes": 1}
        ]}),
    )
    .await;
    assert_eq!(registered.status, 200, "{}", registered.body);
    let now = now_ms();
    let batch = json!({"readings": [{"t_ms": now, "gpus": [
        {"index": 0, "uuid": "GPU-gone-0", "gpu_util": 50, "mem_util": 0,
         "mem_used_bytes": 0, "mem_total_bytes": 1, "temperature_c": 30,
         "power_mw": 1, "power_limit_mw": 1, "sm_clock_mhz": 1, "mem_clock_mhz": 1,
         "ecc_corrected": null, "ecc_uncorrected": null, "processes": []}
    ]}]});
    let pushed = bearer(
        &server,
        &token,
        "POST",
        "/api/trainyard/v1/agent/readings",
        &batch,
    )
    .await;
    assert_eq!(pushed.json()["kept"], 1, "{}", pushed.body);
    assert_eq!(sample_times(&server, "gpu-gone", now - 1000).await, [now]);
    let overview = || async {
        request(server.addr, "GET", "/api/trainyard/v1/gpus", &[], b"")
            .await
            .body
    };
    assert!(overview().await.contains("GPU-gone-0"));

    let remove = |node: &'static str| async move {
        request(
            server.addr,
            "DELETE",
            &format!("/api/trainyard/v1/nodes/{node}"),
            &[],
            b"",
        )
        .await
    };
    // The server's own machine is the local executor's: it stays.
    let local = request(server.addr, "GET", "/api/trainyard/v1/nodes", &[], b"").await;
    let own = local.json()["nodes"][0]["name"]
        .as_str()
        .unwrap()
        .to_owned();
    let own_path = format!("/api/trainyard/v1/nodes/{own}");
    let kept = request(server.addr, "DELETE", &own_path, &[], b"").await;
    assert_eq!(kept.status, 409, "{}", kept.body);
    assert!(kept.body.contains("executor's nodes"), "{}", kept.body);
    // Nor does an agent take its GPUs over: the server samples them.
    let agent_there = request(server.addr, "POST", &format!("{own_path}/tokens"), &[], b"").await;
    assert_eq!(agent_there.status, 409, "{}", agent_there.body);
    assert!(
        agent_there.body.contains("own machine"),
        "{}",
        agent_there.body
    );

    let removed = remove("gpu-gone").await;
    assert_eq!(removed.status, 204, "{}", removed.body);
    assert!(!overview().await.contains("GPU-gone-0"));
    assert!(
        sample_times(&server, "gpu-gone", now - 1000)
            .await
            .is_empty()
    );
    // Its agent's token is revoked with it.
    let after = bearer(
        &server,
        &token,
        "POST",
        "/api/trainyard/v1/agent/readings",
        &batch,
    )
    .await;
    assert_eq!(after.status, 401, "{}", after.body);
    assert!(after.body.contains("nodes/NODE/tokens"), "{}", after.body);
    // With a new token its readings are refused as of a node the server
    // does not know (the agent then registers again), not kept nowhere.
    let token = node_token(&server, "gpu-gone").await;
    let unknown = bearer(
        &server,
        &token,
        "POST",
        "/api/trainyard/v1/agent/readings",
        &batch,
    )
    .await;
    assert_eq!(unknown.status, 409, "{}", unknown.body);
    assert_eq!(remove("gpu-gone").await.status, 404);
    assert_eq!(remove("Bad Name!").await.status, 400);
}

#[test]
fn an_agent_with_an_empty_gpu_resource_name_is_refused_with_the_setting_named() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "tyn_0123456789abcdef").unwrap();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_trainyard"))
        .args(["agent", "--server", "http://127.0.0.1:9", "--node", "gpu-1"])
        .arg("--token-file")
        .arg(&token)
        .arg("--spool")
        .arg(dir.path().join("spool"))
        .args(["--simulated-gpus", "1", "--gpu-resource", " "])
        .env_remove("TRAINYARD_SERVER")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // An agent that took it would run on (its server away): stopped after a
    // while rather than left to hang the test.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("--gpu-resource (TRAINYARD_KUBE_GPU_RESOURCE) must not be empty"),
        "{stderr}"
    );
    assert!(!dir.path().join("spool").exists(), "it started: {stderr}");
}
