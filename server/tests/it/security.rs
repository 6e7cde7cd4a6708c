//! The adversarial suite: what a hostile request, a hostile job or a
//! stranger on the network tried against the real server (issue 16), one
//! test per attempt. Each failed on the code before its fix. Tests that
//! need jobs on uids of their own run as root (as `make test` does).

use crate::common;

use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use common::{
    Response, TestServer, job, last_message, log, new_run, post_json, request, submit, tar_gz,
    try_request, wait_for,
};
use serde_json::json;
use trainyard_store::{SignIn, Store};

fn mode(path: &std::path::Path) -> u32 {
    std::fs::metadata(path).unwrap().permissions().mode() & 0o777
}

/// About 4,000 `(` once overflowed the parser's stack and aborted the whole
/// server, for any signed-in user or job token.
#[tokio::test]
async fn a_deeply_nested_filter_is_refused_and_the_server_lives_on() {
    let server = TestServer::start().await;
    for filter in [
        "(".repeat(4_000) + "metrics.a > 1" + &")".repeat(4_000),
        "NOT ".repeat(20_000) + "metrics.a > 1",
        "(".repeat(200_000),
    ] {
        let answer = post_json(
            server.addr,
            "/api/2.0/mlflow/runs/search",
            &json!({"experiment_ids": ["0"], "filter": filter}),
        )
        .await;
        assert_eq!(answer.status, 400, "{}", answer.body);
        assert_eq!(answer.json()["error_code"], "INVALID_PARAMETER_VALUE");
        let experiments = post_json(
            server.addr,
            "/api/2.0/mlflow/experiments/search",
            &json!({"filter": filter}),
        )
        .await;
        assert_eq!(experiments.status, 400, "{}", experiments.body);
    }
    let nested = "(".repeat(40) + "metrics.a > 1" + &")".repeat(40);
    let answer = post_json(
        server.addr,
        "/api/2.0/mlflow/runs/search",
        &json!({"experiment_ids": ["0"], "filter": nested}),
    )
    .await;
    assert_eq!(answer.status, 400, "{}", answer.body);
    assert!(answer.json()["message"].as_str().unwrap().contains("nests"));
    // The explorer's query box reads the same grammar.
    let page = server
        .get(&format!("/experiments/0?q={}", "%28".repeat(4_000)))
        .await;
    assert!(page.status < 500, "{}", page.status);
    assert_eq!(server.get("/healthz").await.status, 200, "still serving");
}

/// Made-up request methods once each made a series of their own: 2,000
/// of them made one scrape 167 MB.
#[tokio::test]
async fn request_methods_cannot_grow_the_metrics() {
    let server = TestServer::start().await;
    for i in 0..50 {
        try_request(server.addr, &format!("X-MADE-UP-{i}"), "/healthz", b"").await;
    }
    let metrics = server.get("/metrics").await;
    assert_eq!(metrics.status, 200);
    let methods: std::collections::BTreeSet<&str> = metrics
        .body
        .split("method=\"")
        .skip(1)
        .filter_map(|rest| rest.split('"').next())
        .collect();
    assert!(methods.contains("other"), "{methods:?}");
    assert!(
        methods.iter().all(|m| !m.starts_with("X-MADE-UP")),
        "{methods:?}"
    );
    assert!(methods.len() <= 8, "{methods:?}");
}

/// An artifact is served from the pages' origin: it must never be
/// something a page could run (`<script src=…artifact.js>`).
#[tokio::test]
async fn artifacts_are_served_as_inert_bytes() {
    let server = TestServer::start().await;
    let run = new_run(server.addr, None).await;
    let path = format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/evil.js");
    let put = request(
        server.addr,
        "PUT",
        &path,
        &[("Content-Type", "application/javascript")],
        b"alert(document.cookie)",
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.body);
    let got = server.get(&path).await;
    assert_eq!(got.status, 200);
    assert_eq!(got.body, "alert(document.cookie)");
    assert_eq!(got.header("content-type"), Some("application/octet-stream"));
    assert_eq!(got.header("x-content-type-options"), Some("nosniff"));
    assert!(
        got.header("content-security-policy")
            .is_some_and(|csp| csp.starts_with("sandbox")),
        "{:?}",
        got.headers
    );
}

/// A run's name is the page's title, which the framework writes into the
/// HTML unescaped: a name must not end the title and start markup.
#[tokio::test]
async fn a_run_name_cannot_break_out_of_the_page_title() {
    let server = TestServer::start().await;
    let name = "</title><script>alert(1)</script> & co";
    let id = new_run(server.addr, Some(name)).await;
    let page = server.get(&format!("/experiments/0/runs/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(
        page.body.contains("run-name"),
        "the run's page: {}",
        page.body
    );
    assert!(!page.body.contains("<script>alert(1)"), "{}", page.body);
    // The title is set once the run is read, streamed or in the browser
    // (end2end/tests/security.spec.ts); wherever it is written it is inert.
    let expected = "\u{2039}/title>\u{2039}script>alert(1)\u{2039}/script> \u{FF06} co · Trainyard";
    assert_eq!(trainyard_app::inert_title(name) + " · Trainyard", expected);
    if let Some(at) = page.body.find("<title>") {
        assert!(
            page.body[at..].starts_with(&format!("<title>{expected}</title>")),
            "{}",
            page.body
        );
    }
}

/// A description is Markdown made HTML on the server: what anyone wrote in
/// it can make no markup of its own, nor a link that runs something.
#[tokio::test]
async fn a_run_description_cannot_put_markup_in_its_page() {
    let server = TestServer::start().await;
    let id = new_run(server.addr, Some("described")).await;
    let note = "**Fine** tuned.\n\n<script>alert(1)</script>\n<img src=x onerror=alert(2)> [x](javascript:alert(3))";
    let set = post_json(
        server.addr,
        "/api/2.0/mlflow/runs/set-tag",
        &json!({"run_id": id, "key": "mlflow.note.content", "value": note}),
    )
    .await;
    assert_eq!(set.status, 200, "{}", set.body);
    let page = server.get(&format!("/experiments/0/runs/{id}")).await;
    assert_eq!(page.status, 200);
    assert!(page.body.contains("<strong>Fine</strong>"), "{}", page.body);
    assert!(
        page.body.contains("&lt;script&gt;alert(1)"),
        "{}",
        page.body
    );
    for markup in ["<script>alert(1)", "<img src=x", "href=\"javascript:"] {
        assert!(!page.body.contains(markup), "{markup}: {}", page.body);
    }
}

/// An upload on its way was readable by running jobs (a folder 0755 and
/// files 0644); and a queued job's files too, until its launch, and for
/// good when it was cancelled while it waited.
#[tokio::test]
async fn uploads_and_queued_jobs_files_are_closed_from_their_creation() {
    let server = TestServer::start_with(&[("TRAINYARD_SIMULATED_GPUS", "1")]).await;
    let archive = tar_gz(&[
        ("train.py", "print('secret plan')\n"),
        (".env", "KEY=hunter2\n"),
    ]);
    let upload = request(
        server.addr,
        "POST",
        "/api/trainyard/v1/uploads?kind=project&name=p.tar.gz",
        &[("Content-Type", "application/gzip")],
        &archive,
    )
    .await;
    assert_eq!(upload.status, 201, "{}", upload.body);
    let project = upload.json()["upload"]["id"].as_str().unwrap().to_owned();
    let incoming = server.data_dir.path().join("uploads").join(".incoming");
    assert_eq!(mode(&incoming), 0o700);
    // One job holds the only GPU, so the next waits with its files.
    let holder = submit(
        &server,
        json!({"name": "holder", "command": "sleep 60", "resources": {"gpus": 1, "memory": "64Mi"}}),
    )
    .await;
    wait_for(&server, holder, "RUNNING").await;
    let waiting = submit(
        &server,
        json!({"name": "waits", "command": "python3 train.py", "project": project,
               "resources": {"gpus": 1, "memory": "64Mi"}}),
    )
    .await;
    let folder = server
        .data_dir
        .path()
        .join("jobs")
        .join(waiting.to_string());
    for _ in 0..100 {
        if folder.join("files.ready").exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(folder.join("files").join(".env").exists());
    assert_eq!(job(&server, waiting).await["job"]["state"], "QUEUED");
    assert_eq!(mode(&folder), 0o700, "the waiting job's folder");
    assert_eq!(mode(&folder.join("files")), 0o700, "its files");
    for id in [waiting, holder] {
        let cancel = post_json(
            server.addr,
            &format!("/api/trainyard/v1/jobs/{id}/cancel"),
            &json!({}),
        )
        .await;
        assert_eq!(cancel.status, 200, "{}", cancel.body);
    }
    wait_for(&server, waiting, "CANCELLED").await;
    assert_eq!(mode(&folder), 0o700, "closed for good once cancelled");
}

fn is_root() -> bool {
    trainyard_jobs::users::is_root()
}

/// As root, jobs run as uids of their own. One job's SysV shared memory
/// was readable by the next job of the same uid; and jobs inherited the
/// server's descriptors that were not close-on-exec.
#[tokio::test]
async fn a_job_inherits_no_descriptor_and_leaves_no_ipc_object() {
    if !is_root() {
        eprintln!("skipped: jobs on uids of their own need root");
        return;
    }
    // A descriptor of the server's process without close-on-exec, as a
    // library might leave one.
    let secret = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(secret.path(), "the server's").unwrap();
    let path = std::ffi::CString::new(secret.path().as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a plain open of a file this test owns; closed below.
    let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDONLY) };
    assert!(fd > 2);
    let server = TestServer::start().await;
    let command = format!(
        "[ -L /proc/$$/fd/{fd} ] && echo inherited || echo not-inherited; \
         ipcmk -M 4096 -p 0666 && ipcs -m | grep -c 0x || true"
    );
    let id = submit(&server, json!({"name": "ipc", "command": command})).await;
    let detail = wait_for(&server, id, "SUCCEEDED").await;
    // SAFETY: the descriptor opened above.
    unsafe { libc::close(fd) };
    let text = log(&server, id).await;
    assert!(text.contains("not-inherited"), "{text}\n{detail}");
    assert!(text.contains("Shared memory id"), "ipcmk ran: {text}");
    // The segment was made in the job's own IPC namespace (or removed at
    // its end): none of a job uid is left in the server's.
    let table = std::fs::read_to_string("/proc/sysvipc/shm").unwrap();
    let uid_at = table
        .lines()
        .next()
        .unwrap()
        .split_whitespace()
        .position(|c| c == "uid")
        .unwrap();
    // Test servers' job uids start at 1,000,000 (common::job_uids).
    let left: Vec<&str> = table
        .lines()
        .skip(1)
        .filter(|line| {
            line.split_whitespace()
                .nth(uid_at)
                .and_then(|u| u.parse::<u32>().ok())
                .is_some_and(|u| u >= 1_000_000)
        })
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// Signing in with a session or token made a stream that outlived the
/// credential: a revoked token kept reading a job's log for as long as the
/// job ran.
#[tokio::test]
async fn a_stream_ends_when_its_token_is_revoked() {
    let server = TestServer::start_with(&[
        ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
        ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
    ])
    .await;
    let store = Store::connect(&server.db.url, 1).await.unwrap();
    let dave = store
        .sign_in(SignIn {
            subject: "sub-dave".into(),
            username: "dave".into(),
            display_name: "Dave".into(),
            email: None,
            is_admin: false,
            groups: vec!["vision".into()],
        })
        .await
        .unwrap();
    let token = store.create_api_token(dave.id, "t", None).await.unwrap();
    let bearer = format!("Bearer {}", token.secret);
    let headers = [
        ("Authorization", bearer.as_str()),
        ("Content-Type", "application/json"),
    ];
    let spec = json!({"name": "long", "command": "echo started; sleep 60", "max_runtime": "2m"});
    let submitted = request(
        server.addr,
        "POST",
        "/api/trainyard/v1/jobs",
        &headers,
        spec.to_string().as_bytes(),
    )
    .await;
    assert_eq!(submitted.status, 201, "{}", submitted.body);
    let id = submitted.json()["job"]["id"].as_i64().unwrap();
    // The stream, read as it comes: its first event shows it was let in.
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    let head = format!(
        "GET /api/trainyard/v1/jobs/{id}/logs/stream HTTP/1.1\r\nHost: {}\r\n\
         Authorization: {bearer}\r\nConnection: close\r\n\r\n",
        server.addr
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut received = Vec::new();
    let mut buffer = [0u8; 4096];
    while !String::from_utf8_lossy(&received).contains("data: started") {
        let n = tokio::time::timeout(Duration::from_secs(60), stream.read(&mut buffer))
            .await
            .expect("the job's first line streamed")
            .unwrap();
        assert!(n > 0, "{}", String::from_utf8_lossy(&received));
        received.extend_from_slice(&buffer[..n]);
    }
    assert!(String::from_utf8_lossy(&received).starts_with("HTTP/1.1 200"));
    store.end_sessions_of(dave.id).await.unwrap();
    // Ends within a recheck or two (the job itself runs a minute more).
    tokio::time::timeout(Duration::from_secs(40), stream.read_to_end(&mut received))
        .await
        .expect("the stream ended after its token was revoked")
        .unwrap();
    let text = String::from_utf8_lossy(&received);
    assert!(
        !text.contains("event: end"),
        "ended by the revocation: {text}"
    );
    let state = store.get_job(id).await.unwrap().job.state;
    assert!(!state.is_terminal(), "the job still runs: {state:?}");
    let admin = store
        .sign_in(SignIn {
            subject: "sub-root".into(),
            username: "root".into(),
            display_name: "Root".into(),
            email: None,
            is_admin: true,
            groups: vec![],
        })
        .await
        .unwrap();
    let admin_token = store.create_api_token(admin.id, "t", None).await.unwrap();
    let cancel = request(
        server.addr,
        "POST",
        &format!("/api/trainyard/v1/jobs/{id}/cancel"),
        &[
            ("Authorization", &format!("Bearer {}", admin_token.secret)),
            ("Content-Type", "application/json"),
        ],
        b"{}",
    )
    .await;
    assert_eq!(cancel.status, 200, "{}", cancel.body);
    for _ in 0..300 {
        if store.get_job(id).await.unwrap().job.state.is_terminal() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    store.close().await.unwrap();
}

/// `POST`s `archive` (a tar.gz) as a project named `name`.
fn upload_project(
    addr: std::net::SocketAddr,
    name: &str,
    archive: Vec<u8>,
) -> impl std::future::Future<Output = Response> + use<> {
    let path = format!("/api/trainyard/v1/uploads?kind=project&name={name}");
    async move {
        request(
            addr,
            "POST",
            &path,
            &[("Content-Type", "application/gzip")],
            &archive,
        )
        .await
    }
}

/// One person's uploads and artifacts once had no bound but the disk.
#[tokio::test]
async fn uploads_and_artifacts_are_held_to_each_persons_quota() {
    let server = TestServer::start_with(&[
        ("TRAINYARD_UPLOAD_QUOTA_BYTES", "3000"),
        ("TRAINYARD_ARTIFACT_QUOTA_BYTES", "1000"),
    ])
    .await;
    let addr = server.addr;
    let send = |name: &str, bytes: usize| {
        let file = format!("{name}.txt");
        upload_project(addr, name, tar_gz(&[(&file, &"x".repeat(bytes))]))
    };
    let first = send("first", 2_000).await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.json()["reused"], false);
    let first_id = first.json()["upload"]["id"].as_str().unwrap().to_owned();
    // The same archive again (a job submitted again) is that upload, and
    // takes no more room.
    let same = send("first", 2_000).await;
    assert_eq!(same.status, 200, "{}", same.body);
    assert_eq!(same.json()["reused"], true);
    assert_eq!(same.json()["upload"]["id"], first_id.as_str());
    // Unpacked it would pass the quota: refused, and nothing of it kept.
    let second = send("second", 2_000).await;
    assert_eq!(second.status, 507, "{}", second.body);
    let message = second.json()["message"].as_str().unwrap().to_owned();
    assert!(message.contains("upload_quota_bytes"), "{message}");
    assert!(
        message.contains("hold 2.0 KiB, and this one adds 2.0 KiB: past the 2.9 KiB"),
        "{message}"
    );
    assert!(
        message.contains("DELETE /api/trainyard/v1/uploads/ID"),
        "{message}"
    );
    let listed = server.get("/api/trainyard/v1/uploads").await.json();
    assert_eq!(listed["uploads"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["used_bytes"], 2_000);
    assert_eq!(listed["quota_bytes"], 3_000);
    // Deleting frees the room.
    let deleted = request(
        server.addr,
        "DELETE",
        &format!("/api/trainyard/v1/uploads/{first_id}"),
        &[],
        b"",
    )
    .await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    assert!(
        !server
            .data_dir
            .path()
            .join("uploads")
            .join(&first_id)
            .exists()
    );
    assert_eq!(send("again", 2_000).await.status, 201);

    let run = new_run(server.addr, None).await;
    let put = |name: &str, bytes: usize| {
        let path = format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/{name}");
        async move { request(addr, "PUT", &path, &[], "y".repeat(bytes).as_bytes()).await }
    };
    assert_eq!(put("a.bin", 600).await.status, 200);
    let over = put("b.bin", 600).await;
    assert_eq!(over.status, 507, "{}", over.body);
    assert!(over.body.contains("artifact_quota_bytes"), "{}", over.body);
    assert!(
        !server
            .data_dir
            .path()
            .join(format!("artifacts/0/{run}/artifacts/b.bin"))
            .exists(),
        "nothing of a refused artifact is kept"
    );
    // Replacing a file frees what it held; removing one frees its room.
    assert_eq!(put("a.bin", 900).await.status, 200);
    let removed = request(
        server.addr,
        "DELETE",
        &format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/a.bin"),
        &[],
        b"",
    )
    .await;
    assert_eq!(removed.status, 200, "{}", removed.body);
    assert_eq!(put("b.bin", 600).await.status, 200);
    // Freed by another process (or by hand): the server's own count says
    // 600 bytes are used, but a write is refused only on a count taken
    // from disk.
    std::fs::remove_file(
        server
            .data_dir
            .path()
            .join(format!("artifacts/0/{run}/artifacts/b.bin")),
    )
    .unwrap();
    assert_eq!(put("c.bin", 600).await.status, 200);
    assert_eq!(put("d.bin", 600).await.status, 507);
}

/// A run deleted forever while one of its artifacts was being uploaded:
/// the removal of its folder went under the upload, which then failed or
/// left its file in a folder no run owned. The purge now waits for the
/// owner's turn, which the upload holds while it writes.
#[tokio::test]
async fn a_purge_waits_for_an_upload_in_flight_to_its_run() {
    let server = TestServer::start_with(&[("TRAINYARD_ARTIFACT_QUOTA_BYTES", "100000")]).await;
    let addr = server.addr;
    let run = new_run(addr, Some("uploading")).await;
    let folder = server.data_dir.path().join(format!("artifacts/0/{run}"));
    // Half of the body sent, the rest held back.
    let mut upload = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "PUT /api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/model.bin HTTP/1.1\r\n\
         Host: {addr}\r\nContent-Length: 2000\r\nConnection: close\r\n\r\n"
    );
    upload.write_all(head.as_bytes()).await.unwrap();
    upload.write_all(&[b'w'; 1000]).await.unwrap();
    // Writing: its file is beside the target, in the owner's turn.
    let writing = || {
        std::fs::read_dir(folder.join("artifacts")).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with(".upload-"))
        })
    };
    for _ in 0..600 {
        if writing() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(writing(), "the upload never began to write");
    let deleted = post_json(addr, "/api/2.0/mlflow/runs/delete", &json!({"run_id": run})).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    let purge = {
        let server_addr = addr;
        let run = run.clone();
        tokio::spawn(async move {
            request(
                server_addr,
                "POST",
                "/api/purge_run_page",
                &[
                    ("Content-Type", "application/x-www-form-urlencoded"),
                    ("Accept", "application/json"),
                ],
                format!("run_id={run}").as_bytes(),
            )
            .await
        })
    };
    // The rest of the body: the upload ends whole, then the purge goes on.
    tokio::time::sleep(Duration::from_millis(300)).await;
    upload.write_all(&[b'w'; 1000]).await.unwrap();
    let mut answer = Vec::new();
    upload.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let purged = purge.await.unwrap();
    assert!(purged.status < 400, "{}: {}", purged.status, purged.body);
    assert!(!folder.exists(), "nothing of the run is left");
    let storage = server.get("/api/trainyard/v1/storage").await.json();
    assert_eq!(storage["artifact_bytes"], 0, "{storage}");
}

/// Deleted runs' artifacts counted against the quota with no way out but
/// an admin: a run deleted forever takes its files and records with it,
/// and its owner has the room again at once; an active run is refused.
#[tokio::test]
async fn a_run_deleted_forever_gives_its_artifacts_room_back() {
    let server = TestServer::start_with(&[("TRAINYARD_ARTIFACT_QUOTA_BYTES", "1000")]).await;
    let addr = server.addr;
    let put = |run: &str, name: &str, bytes: usize| {
        let path = format!("/api/2.0/mlflow-artifacts/artifacts/0/{run}/artifacts/{name}");
        async move { request(addr, "PUT", &path, &[], "y".repeat(bytes).as_bytes()).await }
    };
    let old = new_run(addr, Some("old")).await;
    let new = new_run(addr, Some("new")).await;
    assert_eq!(put(&old, "model.bin", 900).await.status, 200);
    assert_eq!(put(&new, "model.bin", 200).await.status, 507);
    let folder = server.data_dir.path().join(format!("artifacts/0/{old}"));
    assert!(folder.join("artifacts/model.bin").exists());

    let active = server
        .post_form("/api/purge_run_page", &format!("run_id={old}"))
        .await;
    assert_eq!(active.status, 400, "{}", active.body);
    assert!(active.body.contains("is not deleted"), "{}", active.body);
    let deleted = post_json(addr, "/api/2.0/mlflow/runs/delete", &json!({"run_id": old})).await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    // Deleted, it still holds its room.
    assert_eq!(put(&new, "model.bin", 200).await.status, 507);
    let purged = server
        .post_form("/api/purge_run_page", &format!("run_id={old}"))
        .await;
    assert!(purged.status < 400, "{}", purged.body);
    assert!(!folder.exists(), "its folder goes");
    let gone = server
        .get(&format!("/api/2.0/mlflow/runs/get?run_id={old}"))
        .await;
    assert_eq!(gone.status, 404, "{}", gone.body);
    assert_eq!(
        server
            .get(&format!(
                "/api/2.0/mlflow-artifacts/artifacts/0/{old}/artifacts/model.bin"
            ))
            .await
            .status,
        404
    );
    // At once, not when a count falls due.
    assert_eq!(put(&new, "model.bin", 200).await.status, 200);

    // An experiment's deleted runs, all at once; the active one stays.
    let spare = new_run(addr, Some("spare")).await;
    assert_eq!(put(&spare, "a.txt", 300).await.status, 200);
    let deleted = post_json(
        addr,
        "/api/2.0/mlflow/runs/delete",
        &json!({"run_id": spare}),
    )
    .await;
    assert_eq!(deleted.status, 200, "{}", deleted.body);
    // The usage page's storage says what deleted runs hold, and where.
    let storage = server.get("/api/trainyard/v1/storage").await;
    assert_eq!(storage.status, 200, "{}", storage.body);
    let storage = storage.json();
    assert_eq!(storage["artifact_bytes"], 500, "{storage}");
    assert_eq!(storage["artifact_quota_bytes"], 1000, "{storage}");
    assert_eq!(
        storage["deleted"],
        json!([{"experiment_id": 0, "experiment": "Default", "runs": 1, "bytes": 300}])
    );
    let all = server
        .post_form("/api/purge_deleted_runs", "experiment_id=0")
        .await;
    assert_eq!(all.status, 200, "{}", all.body);
    assert!(
        all.body.contains("Deleted 1 run forever, freeing 300 B"),
        "{}",
        all.body
    );
    assert_eq!(
        server
            .get(&format!("/api/2.0/mlflow/runs/get?run_id={spare}"))
            .await
            .status,
        404
    );
    let kept = server
        .get(&format!("/api/2.0/mlflow/runs/get?run_id={new}"))
        .await;
    assert_eq!(kept.status, 200, "{}", kept.body);
    let storage = server.get("/api/trainyard/v1/storage").await.json();
    assert_eq!(storage["artifact_bytes"], 200, "{storage}");
    assert_eq!(storage["deleted"], json!([]), "{storage}");
    assert!(
        server
            .data_dir
            .path()
            .join(format!("artifacts/0/{new}/artifacts/model.bin"))
            .exists()
    );
}

/// Files and folders hold no bytes when empty, but each is an inode of the
/// server's disk: one person's uploads are bounded in count too.
#[tokio::test]
async fn uploads_are_held_to_each_persons_count_of_files_and_folders() {
    let server = TestServer::start_with(&[("TRAINYARD_UPLOAD_QUOTA_ENTRIES", "50")]).await;
    let addr = server.addr;
    // `n` empty files in a folder of their own, 0 bytes.
    let send = |name: &str, n: usize| {
        let names: Vec<String> = (0..n).map(|i| format!("{name}/f{i}")).collect();
        let files: Vec<(&str, &str)> = names.iter().map(|f| (f.as_str(), "")).collect();
        upload_project(addr, name, tar_gz(&files))
    };
    // 29 files, their folder and the upload's own: 31.
    let first = send("first", 29).await;
    assert_eq!(first.status, 201, "{}", first.body);
    assert_eq!(first.json()["upload"]["entries"], 31, "{}", first.body);
    assert_eq!(first.json()["upload"]["bytes"], 0, "{}", first.body);
    // Unpacked it would pass the quota: refused, and nothing of it kept.
    let second = send("second", 29).await;
    assert_eq!(second.status, 507, "{}", second.body);
    let message = second.json()["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains(
            "your uploads hold 31 files and folders, and this one adds 31: past the 50 each person may keep (upload_quota_entries)"
        ),
        "{message}"
    );
    let listed = server.get("/api/trainyard/v1/uploads").await.json();
    assert_eq!(listed["uploads"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(listed["used_entries"], 31, "{listed}");
    assert_eq!(listed["quota_entries"], 50, "{listed}");
    let kept: Vec<_> = std::fs::read_dir(server.data_dir.path().join("uploads"))
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            name.len() == 32 && name.chars().all(|c| c.is_ascii_hexdigit())
        })
        .collect();
    assert_eq!(kept.len(), 1, "only the first upload's folder is kept");
    // What fits still fits, to the quota exactly; an empty archive takes
    // an inode too, so once full nothing more is received.
    assert_eq!(send("third", 16).await.status, 201);
    let empty = send("fourth", 0).await;
    assert_eq!(empty.status, 201, "{}", empty.body);
    assert_eq!(empty.json()["upload"]["entries"], 1, "{}", empty.body);
    let full = send("fifth", 0).await;
    assert_eq!(full.status, 507, "{}", full.body);
    assert!(
        full.body.contains(
            "your uploads hold 50 files and folders, and 50 is the most each person may keep"
        ),
        "{}",
        full.body
    );
}

/// Admin rights and teams are read on every request: a token made while
/// its person was an admin loses the rights once a sign-in says they are
/// no longer in the admin group, and all of it ends when an admin ends
/// their sessions.
#[tokio::test]
async fn a_token_follows_its_persons_rights_as_the_provider_last_said() {
    let server = TestServer::start_with(&[
        ("TRAINYARD_OIDC_ISSUER_URL", "http://127.0.0.1:9"),
        ("TRAINYARD_OIDC_CLIENT_ID", "trainyard"),
    ])
    .await;
    let store = Store::connect(&server.db.url, 1).await.unwrap();
    let sign_in = |admin: bool| SignIn {
        subject: "sub-erin".into(),
        username: "erin".into(),
        display_name: "Erin".into(),
        email: None,
        is_admin: admin,
        groups: if admin {
            vec!["gpu-admins".into()]
        } else {
            vec![]
        },
    };
    let erin = store.sign_in(sign_in(true)).await.unwrap();
    let token = store.create_api_token(erin.id, "t", None).await.unwrap();
    let bearer = format!("Bearer {}", token.secret);
    let write_template = || async {
        request(
            server.addr,
            "PUT",
            "/api/trainyard/v1/templates/probe",
            &[
                ("Authorization", &bearer),
                ("Content-Type", "application/yaml"),
            ],
            b"title: [",
        )
        .await
        .status
    };
    assert_eq!(
        write_template().await,
        400,
        "an admin's: the body is checked"
    );
    store.sign_in(sign_in(false)).await.unwrap();
    assert_eq!(write_template().await, 403, "no longer an admin's");
    store.end_sessions_of(erin.id).await.unwrap();
    assert_eq!(write_template().await, 401, "revoked with her sessions");
    store.close().await.unwrap();
}

/// A job could fill the machine's disk: its folders were held to no limit,
/// and what it wrote stayed after it ended.
#[tokio::test]
async fn a_job_past_its_disk_quota_is_stopped_and_its_files_go_at_its_end() {
    let server = TestServer::start_with(&[("TRAINYARD_JOB_DISK_QUOTA_BYTES", "4000000")]).await;
    let id = submit(
        &server,
        json!({"name": "filler", "retries": 2,
               "command": "head -c 3000000 /dev/urandom > big; \
                           head -c 2000000 /dev/urandom > \"$TRAINYARD_CHECKPOINT_DIR/step-1\"; \
                           echo written; sleep 120"}),
    )
    .await;
    let failed = wait_for(&server, id, "FAILED").await;
    let message = last_message(&failed);
    assert!(
        message.starts_with("stopped: its files took ")
            && message.contains("on disk, past its limit of 3.8 MiB (job_disk_quota_bytes)"),
        "{message}"
    );
    assert_eq!(failed["job"]["attempt"], 0, "no retry: {failed}");
    assert!(log(&server, id).await.contains("written"));
    let folder = server.data_dir.path().join(format!("jobs/{id}"));
    // Its checkpoints are kept for a job to resume from, until deleted.
    assert_eq!(failed["checkpoints"]["bytes"], 2_000_000, "{failed}");
    if is_root() {
        // Its users' files go once it ended for good; its log stays, and
        // its checkpoints in a folder no job user passes through.
        for _ in 0..100 {
            if !folder.join("0/work").exists() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert!(!folder.join("0/work").exists());
        assert!(folder.join("0/output.log").exists());
        assert!(folder.join("checkpoints/step-1").exists());
        assert_eq!(mode(&folder), 0o700);
        assert_eq!(
            std::os::unix::fs::MetadataExt::uid(&std::fs::metadata(&folder).unwrap()),
            0
        );
    }
    let path = format!("/api/trainyard/v1/jobs/{id}/checkpoints");
    let deleted = request(server.addr, "DELETE", &path, &[], b"").await;
    assert_eq!(deleted.status, 204, "{}", deleted.body);
    assert!(!folder.join("checkpoints").exists());
    assert!(job(&server, id).await.get("checkpoints").is_none());
    let again = request(server.addr, "DELETE", &path, &[], b"").await;
    assert_eq!(again.status, 404, "{}", again.body);
}

/// The mlflow client's multipart upload: part URLs that are their own
/// credential, parts in any order, joined in the order the completion
/// lists; bounded by the artifact size limit; its parts gone once it
/// completes or is aborted.
#[tokio::test]
async fn a_multipart_upload_joins_its_parts_within_the_artifact_limit() {
    let server = TestServer::start_with(&[("TRAINYARD_ARTIFACT_MAX_BYTES", "3000")]).await;
    let addr = server.addr;
    let run = new_run(addr, None).await;
    let folder = format!("0/{run}/artifacts/ckpt");
    let created = post_json(
        addr,
        &format!("/api/2.0/mlflow-artifacts/mpu/create/{folder}"),
        &json!({"path": "/home/ana/out/model.bin", "num_parts": 3}),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.body);
    let created = created.json();
    let id = created["upload_id"].as_str().unwrap().to_owned();
    let urls: Vec<String> = created["credentials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["url"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(urls.len(), 3);
    assert!(
        urls[2].starts_with(&format!(
            "http://{addr}/api/2.0/mlflow-artifacts/mpu/part/{id}/3"
        )),
        "{urls:?}"
    );
    let put_part = |url: &str, body: Vec<u8>| {
        let path = url.split_once(&addr.to_string()).unwrap().1.to_owned();
        async move { request(addr, "PUT", &path, &[], &body).await }
    };
    // No credentials but the URL: parts in any order, one sent twice.
    for (n, byte) in [(3, b'c'), (1, b'a'), (2, b'x'), (2, b'b')] {
        let put = put_part(&urls[n - 1], vec![byte; 900]).await;
        assert_eq!(put.status, 200, "{}", put.body);
    }
    let forged = format!("/api/2.0/mlflow-artifacts/mpu/part/{}/1", "A".repeat(43));
    assert_eq!(request(addr, "PUT", &forged, &[], b"z").await.status, 404);
    let fourth = format!("{}4", urls[0].strip_suffix('1').unwrap());
    let beyond = put_part(&fourth, vec![b'z'; 10]).await;
    assert_eq!(beyond.status, 400, "{}", beyond.body);
    // Together the parts may not pass one artifact's limit.
    let too_much = put_part(&urls[0], vec![b'a'; 1300]).await;
    assert_eq!(too_much.status, 413, "{}", too_much.body);
    let complete = |parts: serde_json::Value| {
        let folder = folder.clone();
        let id = id.clone();
        async move {
            post_json(
                addr,
                &format!("/api/2.0/mlflow-artifacts/mpu/complete/{folder}"),
                &json!({"path": "/home/ana/out/model.bin", "upload_id": id, "parts": parts}),
            )
            .await
        }
    };
    let unordered = complete(json!([{"part_number": 2}, {"part_number": 1}])).await;
    assert_eq!(unordered.status, 400, "{}", unordered.body);
    let done = complete(json!([
        {"part_number": 1, "etag": "x"},
        {"part_number": 2, "etag": "x"},
        {"part_number": 3, "etag": "x"}
    ]))
    .await;
    assert_eq!(done.status, 200, "{}", done.body);
    let file = server
        .get(&format!(
            "/api/2.0/mlflow-artifacts/artifacts/{folder}/model.bin"
        ))
        .await;
    assert_eq!(file.status, 200);
    let expected: String = ["a", "b", "c"].iter().map(|c| c.repeat(900)).collect();
    assert_eq!(file.body, expected);
    let parts = server.data_dir.path().join("artifacts/.multipart");
    assert_eq!(
        std::fs::read_dir(&parts).unwrap().count(),
        0,
        "its parts are gone"
    );
    // Once done, its URLs take nothing more.
    assert_eq!(put_part(&urls[0], vec![b'a'; 10]).await.status, 404);
    // An aborted upload leaves nothing.
    let again = post_json(
        addr,
        &format!("/api/2.0/mlflow-artifacts/mpu/create/{folder}"),
        &json!({"path": "model.bin", "num_parts": 1}),
    )
    .await
    .json();
    let url = again["credentials"][0]["url"].as_str().unwrap().to_owned();
    assert_eq!(put_part(&url, vec![b'q'; 10]).await.status, 200);
    let aborted = post_json(
        addr,
        &format!("/api/2.0/mlflow-artifacts/mpu/abort/{folder}"),
        &json!({"path": "model.bin", "upload_id": again["upload_id"]}),
    )
    .await;
    assert_eq!(aborted.status, 200, "{}", aborted.body);
    assert_eq!(std::fs::read_dir(&parts).unwrap().count(), 0);
}

/// The uids a job's attempts ran as, from its timeline ("as uid N").
fn uids_of(detail: &serde_json::Value) -> Vec<u32> {
    detail["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|e| {
            let message = e["message"].as_str()?;
            let (_, after) = message.split_once("as uid ")?;
            after
                .split(|c: char| !c.is_ascii_digit())
                .next()?
                .parse()
                .ok()
        })
        .collect()
}

/// A job waiting for its next attempt kept its folder open and its
/// checkpoints owned by the uid its last attempt ran as: the next job
/// given that uid read (or could rewrite) them.
#[tokio::test]
async fn a_waiting_jobs_checkpoints_are_closed_to_the_next_job_of_its_uid() {
    if !is_root() {
        return;
    }
    let server = TestServer::start_with(&[("TRAINYARD_SIMULATED_GPUS", "1")]).await;
    let one_gpu = json!({"gpus": 1, "cpus": 0.1, "memory": "64Mi"});
    let first = submit(
        &server,
        json!({"name": "resumable", "retries": 1, "resources": one_gpu,
               "command": "if [ -e \"$TRAINYARD_CHECKPOINT_DIR/secret\" ]; then echo resumed; \
                           else echo s3cret > \"$TRAINYARD_CHECKPOINT_DIR/secret\"; sleep 3; exit 1; fi"}),
    )
    .await;
    wait_for(&server, first, "RUNNING").await;
    // Queued behind it, and first in line (its priority) once the GPU is
    // free: it runs while the first job waits for its retry.
    let secret = server
        .data_dir
        .path()
        .join(format!("jobs/{first}/checkpoints/secret"));
    let prying = submit(
        &server,
        json!({"name": "prying", "priority": 10, "resources": one_gpu,
               "command": format!("cat {s} || echo refused; (echo x > {s}) || echo unwritable", s = secret.display())}),
    )
    .await;
    let pried = wait_for(&server, prying, "SUCCEEDED").await;
    let resumed = wait_for(&server, first, "SUCCEEDED").await;
    let (first_uids, prying_uids) = (uids_of(&resumed), uids_of(&pried));
    assert_eq!(first_uids.len(), 2, "{resumed}");
    assert_eq!(
        prying_uids,
        [first_uids[0]],
        "the second job ran as the uid the first job's first attempt had"
    );
    let said = log(&server, prying).await;
    assert!(
        !said.contains("s3cret") && said.contains("refused") && said.contains("unwritable"),
        "{said}"
    );
    assert!(log(&server, first).await.contains("resumed"));
}

/// Bounds that requests lacked: the multipart upload's JSON calls read
/// bodies of any size; a search's lists joined or compared without end; a
/// page token or a trace's duration past what the databases add; a trace
/// tag that sent its readers' tokens to another host.
#[tokio::test]
async fn mlflow_requests_are_held_to_their_bounds() {
    use base64::Engine;
    let server = TestServer::start().await;
    let addr = server.addr;
    let run = new_run(addr, None).await;
    // 5 MiB of JSON to the upload's creation: refused, not read whole.
    let padding = "x".repeat(5 << 20);
    let created = request(
        addr,
        "POST",
        &format!("/api/2.0/mlflow-artifacts/mpu/create/0/{run}/artifacts"),
        &[("Content-Type", "application/json")],
        json!({"path": "big.bin", "num_parts": 1, "pad": padding})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(created.status, 413, "{}", created.body);
    // The same creation, small, still works.
    let created = post_json(
        addr,
        &format!("/api/2.0/mlflow-artifacts/mpu/create/0/{run}/artifacts"),
        &json!({"path": "big.bin", "num_parts": 1}),
    )
    .await;
    assert_eq!(created.status, 200, "{}", created.body);

    let search = |body: serde_json::Value| async move {
        post_json(addr, "/api/2.0/mlflow/runs/search", &body).await
    };
    let orders: Vec<String> = (0..11).map(|i| format!("metrics.m{i}")).collect();
    let refused = search(json!({"experiment_ids": ["0"], "order_by": orders})).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("'order_by' lists 11 fields"),
        "{}",
        refused.body
    );
    let ok = search(json!({"experiment_ids": ["0"], "order_by": orders[..10]})).await;
    assert_eq!(ok.status, 200, "{}", ok.body);
    // The mlflow client's `search_all_experiments` names every experiment:
    // 40,000 (past SQLite's 32,766 binds in one statement) are searched.
    let many: Vec<String> = (0..40_000).map(|i| i.to_string()).collect();
    let searched = search(json!({"experiment_ids": many})).await;
    assert_eq!(searched.status, 200, "{}", searched.body);
    let too_many: Vec<String> = (0..100_001).map(|i| i.to_string()).collect();
    let refused = search(json!({"experiment_ids": too_many})).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(refused.body.contains("at most 100000"), "{}", refused.body);
    let token =
        base64::engine::general_purpose::STANDARD.encode(r#"{"offset": 18446744073709551615}"#);
    let refused = search(json!({"experiment_ids": ["0"], "page_token": token})).await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("Invalid page token"),
        "{}",
        refused.body
    );

    let trace = |id: &str, duration: &str| {
        let body = json!({"trace": {"trace_info": {
            "trace_id": id,
            "trace_location": {"type": "MLFLOW_EXPERIMENT", "mlflow_experiment": {"experiment_id": "0"}},
            "request_time": "2026-12-06T10:00:00.000Z",
            "execution_duration": duration,
            "state": "OK",
        }}});
        async move { post_json(addr, "/api/3.0/mlflow/traces", &body).await }
    };
    let refused = trace("tr-long", "1e300s").await;
    assert_eq!(refused.status, 400, "{}", refused.body);
    assert!(
        refused.body.contains("execution_duration"),
        "{}",
        refused.body
    );
    let made = trace("tr-short", "0.5s").await;
    assert_eq!(made.status, 200, "{}", made.body);
    let location = request(
        addr,
        "PATCH",
        "/api/2.0/mlflow/traces/tr-short/tags",
        &[("Content-Type", "application/json")],
        json!({"key": "mlflow.artifactLocation", "value": "https://elsewhere.example/t"})
            .to_string()
            .as_bytes(),
    )
    .await;
    assert_eq!(location.status, 400, "{}", location.body);
    let kept = server.get("/api/3.0/mlflow/traces/tr-short").await;
    assert_eq!(
        kept.json()["trace"]["trace_info"]["tags"]["mlflow.artifactLocation"],
        "mlflow-artifacts:/0/traces/tr-short/artifacts"
    );
}
