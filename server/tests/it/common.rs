//! Starts the real server on port 0 against a database of its own, and a
//! minimal HTTP/1.1 client. The client is hand-written on purpose: pulling an
//! HTTP client crate into the tests would change the features of crates the
//! server shares with it and force a second build of the whole tree.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use trainyard::config::{self, Overrides};
use trainyard_test_db::TestDb;

pub struct TestServer {
    pub addr: SocketAddr,
    pub db: TestDb,
    pub data_dir: tempfile::TempDir,
    task: AbortOnDrop,
}

/// The server's task, stopped when the test lets go of it.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// The checkout's root. Read from cargo when it runs the test, not built
/// in: checkouts share one build cache (scripts/common.sh), and cargo may
/// take a test binary built in another checkout (CI's clone) as fresh here,
/// with that checkout's path in it.
pub fn workspace_root() -> PathBuf {
    std::env::var_os("CARGO_MANIFEST_DIR")
        .map_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")), PathBuf::from)
        .parent()
        .expect("the server crate lives in the workspace")
        .to_path_buf()
}

/// Uids for one test server's jobs. Servers of one machine must not share
/// uids (a job's end stops every process of its uid), and tests run many
/// servers at once, in this process and in test binaries before it whose
/// jobs may still be ending: each server gets 20 of its own, after this
/// process's ID, for up to 500 servers a process. (With room for 50, the
/// 76th server of this binary could take the uids of the 26th, and one's
/// job ending would kill the other's: a job was once killed at its start.) As the server does, only root
/// runs jobs as other users.
pub fn job_uids() -> String {
    static SERVERS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    if !trainyard_jobs::users::is_root() {
        return "none".to_owned();
    }
    let server = SERVERS.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 500;
    let first = 1_000_000 + (std::process::id() % 10_000) * 10_000 + server * 20;
    format!("{first}-{}", first + 19)
}

/// Where tests cache the Python environments of templates across runs,
/// like a server's: a folder jobs running as other uids can reach (a
/// root's home cannot be passed through).
pub fn job_venvs() -> String {
    if trainyard_jobs::users::is_root() {
        return "/var/cache/trainyard-test/job-venvs".to_owned();
    }
    std::env::var("HOME")
        .map(|home| format!("{home}/.cache/trainyard/job-venvs"))
        .unwrap_or_else(|_| "/tmp/trainyard-job-venvs".to_owned())
}

impl TestServer {
    pub async fn start() -> TestServer {
        Self::start_with(&[]).await
    }

    /// A server with extra `TRAINYARD_*` settings.
    pub async fn start_with(extra: &[(&str, &str)]) -> TestServer {
        let db = TestDb::new().await;
        let data_dir = tempfile::tempdir().unwrap();
        Self::start_in(db, data_dir, extra).await
    }

    /// A server on a database and data folder that may have served before.
    pub async fn start_in(
        db: TestDb,
        data_dir: tempfile::TempDir,
        extra: &[(&str, &str)],
    ) -> TestServer {
        let site_dir = workspace_root().join("target/site");
        let mut vars = vec![
            ("TRAINYARD_LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
            ("TRAINYARD_DATABASE_URL".to_owned(), db.url.clone()),
            (
                "TRAINYARD_DATA_DIR".to_owned(),
                data_dir.path().display().to_string(),
            ),
            (
                "TRAINYARD_SITE_DIR".to_owned(),
                site_dir.display().to_string(),
            ),
            (
                "TRAINYARD_TEMPLATES_DIR".to_owned(),
                workspace_root().join("templates").display().to_string(),
            ),
        ];
        vars.push(("TRAINYARD_JOB_UIDS".to_owned(), job_uids()));
        for (k, v) in extra {
            vars.push(((*k).to_owned(), (*v).to_owned()));
        }
        let mut config = config::load_from(None, &Overrides::default(), &vars).unwrap();
        // Jobs are supervised by the built binary, not by this test program.
        config.job_shim = PathBuf::from(env!("CARGO_BIN_EXE_trainyard"));
        let server = trainyard::Server::bind(&config).await.unwrap();
        let addr = server.local_addr().unwrap();
        let task = AbortOnDrop(tokio::spawn(async move {
            server.run().await.unwrap();
        }));
        TestServer {
            addr,
            db,
            data_dir,
            task,
        }
    }

    /// Stops the server as a crash would (no goodbye to its jobs) and hands
    /// back its database and data folder.
    pub async fn crash(self) -> (TestDb, tempfile::TempDir) {
        let TestServer {
            db, data_dir, task, ..
        } = self;
        let mut task = task;
        task.0.abort();
        let _ = (&mut task.0).await;
        (db, data_dir)
    }

    pub async fn get(&self, path: &str) -> Response {
        request(self.addr, "GET", path, &[], b"").await
    }

    pub async fn post_form(&self, path: &str, body: &str) -> Response {
        request(
            self.addr,
            "POST",
            path,
            &[
                ("Content-Type", "application/x-www-form-urlencoded"),
                ("Accept", "application/json"),
            ],
            body.as_bytes(),
        )
        .await
    }
}

#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", self.body))
    }
}

/// One request on a fresh connection (`Connection: close`), body read to the end.
pub async fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Response {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: {addr}\r\n"));
    }
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(body).await.unwrap();
    let mut raw = Vec::new();
    // A server that never finishes its answer fails the test with what it
    // sent so far, rather than hanging the whole run.
    let read = tokio::time::timeout(ANSWER_TIMEOUT, stream.read_to_end(&mut raw)).await;
    match read {
        Ok(result) => {
            result.unwrap();
        }
        Err(_) => panic!(
            "{method} {path}: no complete answer after {ANSWER_TIMEOUT:?}; received so far: {}",
            String::from_utf8_lossy(&raw)
        ),
    }
    parse_response(&raw)
}

/// Longest a test waits for one answer (streams included).
const ANSWER_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// POSTs a JSON body.
pub async fn post_json(addr: SocketAddr, path: &str, body: &serde_json::Value) -> Response {
    request(
        addr,
        "POST",
        path,
        &[("Content-Type", "application/json")],
        body.to_string().as_bytes(),
    )
    .await
}

/// Like [`request`] with a JSON body, but a dead server is an answer (None)
/// rather than a panic; returns the status.
pub async fn try_request(addr: SocketAddr, method: &str, path: &str, body: &[u8]) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await.ok()?;
    stream.write_all(body).await.ok()?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw).await.ok()?;
    let line = raw.split(|b| *b == b'\r').next()?;
    String::from_utf8_lossy(line)
        .split(' ')
        .nth(1)?
        .parse()
        .ok()
}

fn parse_response(raw: &[u8]) -> Response {
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a complete response head");
    let head = String::from_utf8_lossy(&raw[..split]);
    let mut lines = head.split("\r\n");
    let status_line = lines.next().unwrap();
    let status = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status code");
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let chunked = headers
        .iter()
        .any(|(k, v)| k.eq_ignore_ascii_case("transfer-encoding") && v.contains("chunked"));
    if chunked {
        body = dechunk(&body);
    }
    Response {
        status,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    }
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(eol) = data.windows(2).position(|w| w == b"\r\n") {
        let size_text = String::from_utf8_lossy(&data[..eol]);
        let size =
            usize::from_str_radix(size_text.split(';').next().unwrap().trim(), 16).unwrap_or(0);
        if size == 0 {
            break;
        }
        let start = eol + 2;
        out.extend_from_slice(&data[start..start + size]);
        data = &data[start + size + 2..];
    }
    out
}

/// A tar.gz of (path, content) files.
pub fn tar_gz(files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(Vec::new());
    for (path, content) in files {
        let mut header = tar::Header::new_gnu();
        header.set_size(content.len() as u64);
        header.set_mode(0o644);
        header.set_cksum();
        builder
            .append_data(&mut header, path, content.as_bytes())
            .unwrap();
    }
    let tar = builder.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).unwrap();
    gz.finish().unwrap()
}

/// Submits a job spec as JSON; the new job's id.
pub async fn submit(server: &TestServer, spec: serde_json::Value) -> i64 {
    let answer = post_json(server.addr, "/api/trainyard/v1/jobs", &spec).await;
    assert_eq!(answer.status, 201, "{}", answer.body);
    answer.json()["job"]["id"].as_i64().unwrap()
}

/// A job with its timeline.
pub async fn job(server: &TestServer, id: i64) -> serde_json::Value {
    let answer = server.get(&format!("/api/trainyard/v1/jobs/{id}")).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()
}

/// Polls until the job is in `state` (the test fails after a minute).
pub async fn wait_for(server: &TestServer, id: i64, state: &str) -> serde_json::Value {
    wait_longer(server, id, state, 60).await
}

pub async fn wait_longer(
    server: &TestServer,
    id: i64,
    state: &str,
    seconds: u64,
) -> serde_json::Value {
    for _ in 0..seconds * 10 {
        let detail = job(server, id).await;
        if detail["job"]["state"] == state {
            return detail;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("job {id} never reached {state}: {}", job(server, id).await);
}

/// The token a job's first attempt was given (from its launch file; the
/// local executor's layout).
pub fn job_token(server: &TestServer, id: i64) -> String {
    let launch = server
        .data_dir
        .path()
        .join(format!("jobs/{id}/0/launch.json"));
    let launch: serde_json::Value =
        serde_json::from_slice(&std::fs::read(launch).unwrap()).unwrap();
    launch["env"]["MLFLOW_TRACKING_TOKEN"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// The current attempt's log.
pub async fn log(server: &TestServer, id: i64) -> String {
    let answer = server
        .get(&format!("/api/trainyard/v1/jobs/{id}/logs"))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.body
}

/// A new run in the Default experiment, named `name` when given; its id.
pub async fn new_run(addr: SocketAddr, name: Option<&str>) -> String {
    let mut body = serde_json::json!({"experiment_id": "0"});
    if let Some(name) = name {
        body["run_name"] = name.into();
    }
    let answer = post_json(addr, "/api/2.0/mlflow/runs/create", &body).await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["run"]["info"]["run_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

/// A run as `runs/get` answers it.
pub async fn run(server: &TestServer, run_id: &str) -> serde_json::Value {
    let answer = server
        .get(&format!("/api/2.0/mlflow/runs/get?run_id={run_id}"))
        .await;
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["run"].clone()
}

/// The message of a job's newest timeline entry (its end, once it ended).
pub fn last_message(detail: &serde_json::Value) -> String {
    let events = detail["events"].as_array().unwrap();
    events.last().unwrap()["message"]
        .as_str()
        .unwrap()
        .to_owned()
}
