//! The command line on the jobs REST API: `submit`, `jobs`, `logs`, `cancel`
//! and `upload-dataset`, against a server named by `--server` (or
//! `TRAINYARD_SERVER`), with an API token from `--token` (or
//! `TRAINYARD_TOKEN`) when one is given.

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::Value;

/// Where the server is and who is asking.
#[derive(Debug, Clone)]
pub struct Remote {
    pub server: String,
    pub token: Option<String>,
}

/// What went wrong, in words for the terminal.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

type Result<T> = std::result::Result<T, CliError>;

/// How often a followed job is looked at.
const FOLLOW_POLL: Duration = Duration::from_millis(500);

impl Remote {
    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.server.trim_end_matches('/'))
    }

    fn client(&self) -> Result<reqwest::Client> {
        if !(self.server.starts_with("http://") || self.server.starts_with("https://")) {
            return Err(CliError(format!(
                "the server `{}` needs its scheme: http://{0} or https://{0} (--server or TRAINYARD_SERVER)",
                self.server
            )));
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(token) = &self.token {
            let value = reqwest::header::HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| CliError("the token holds characters a header cannot".into()))?;
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        Ok(reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(10))
            .build()?)
    }

    /// Sends a request; a non-2xx answer becomes its error message (and
    /// field errors, one per line).
    async fn send(&self, request: reqwest::RequestBuilder) -> Result<reqwest::Response> {
        let response = request.send().await.map_err(|e| self.unreachable(e))?;
        self.checked(response).await
    }

    fn unreachable(&self, error: reqwest::Error) -> CliError {
        CliError(format!(
            "cannot reach the server at {}: {error} (set --server or TRAINYARD_SERVER)",
            self.server
        ))
    }

    /// A 2xx answer, or its error message (and field errors, one per line).
    async fn checked(&self, response: reqwest::Response) -> Result<reqwest::Response> {
        if response.status().is_success() {
            return Ok(response);
        }
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        let mut message = body["message"]
            .as_str()
            .map(str::to_owned)
            .unwrap_or_else(|| format!("the server answered {status}"));
        if let Some(fields) = body["fields"].as_array()
            && fields.len() > 1
        {
            message = fields
                .iter()
                .map(|f| {
                    format!(
                        "  {}: {}",
                        f["field"].as_str().unwrap_or("?"),
                        f["message"].as_str().unwrap_or("")
                    )
                })
                .collect::<Vec<_>>()
                .join("\n");
            message = format!("the spec has problems:\n{message}");
        }
        Err(CliError(message))
    }

    async fn get_json(&self, path: &str) -> Result<Value> {
        let client = self.client()?;
        Ok(self.send(client.get(self.url(path))).await?.json().await?)
    }
}

/// What `submit`'s flags change of the spec it reads.
pub struct SpecChanges<'a> {
    /// `--dataset NAME`, added to the spec's.
    pub datasets: &'a [String],
    /// `--set KEY=VALUE`, over the spec's hyperparameters.
    pub set: &'a [String],
    /// `--name NAME`, instead of the spec's.
    pub name: Option<&'a str>,
    /// `--resume-from JOB`: start from the checkpoints job JOB left.
    pub resume_from: Option<i64>,
}

impl SpecChanges<'_> {
    /// The spec with the flags' changes: each `--set` value typed as YAML
    /// types it and added to the name (unless `--name` gives one).
    fn apply(&self, spec: &mut trainyard_domain::job::JobSpec) -> Result<()> {
        use trainyard_domain::job::ParamValue;
        for name in self.datasets {
            if !spec.datasets.contains(name) {
                spec.datasets.push(name.clone());
            }
        }
        let mut said = Vec::new();
        for pair in self.set {
            let Some((key, value)) = pair.split_once('=') else {
                return Err(CliError(format!(
                    "--set {pair}: give KEY=VALUE, e.g. --set lr=0.01"
                )));
            };
            let key = key.trim();
            if key.is_empty() {
                return Err(CliError(format!(
                    "--set {pair}: the hyperparameter's name is missing before `=`"
                )));
            }
            spec.hyperparameters
                .insert(key.to_owned(), ParamValue::from_text(value));
            said.push(format!("{key}={value}"));
        }
        if let Some(job) = self.resume_from {
            spec.resume_from = Some(job);
        }
        match self.name {
            Some(name) => spec.name = name.to_owned(),
            None if !said.is_empty() => {
                spec.name = format!("{} {}", spec.name.trim(), said.join(" "));
            }
            None => {}
        }
        Ok(())
    }
}

/// `trainyard submit SPEC [--file ARCHIVE] [--dataset NAME]... [--set
/// KEY=VALUE]... [--name NAME] [--resume-from JOB] [--follow]`
pub async fn submit(
    remote: &Remote,
    spec_file: &Path,
    project: Option<&Path>,
    changes: &SpecChanges<'_>,
    follow: bool,
) -> Result<ExitCode> {
    let text = std::fs::read(spec_file)
        .map_err(|e| CliError(format!("cannot read {}: {e}", spec_file.display())))?;
    let json = spec_file.extension().is_some_and(|e| e == "json");
    let mut spec = trainyard_jobs::parse_spec(!json, &text)
        .map_err(|e| CliError(format!("{}: {}", spec_file.display(), e.message)))?;
    changes.apply(&mut spec)?;
    // What the server would refuse of the spec itself is said before an
    // archive is sent for it (whose upload then names the project).
    let mut checked = spec.clone();
    if project.is_some() {
        checked.project = None;
    }
    if let Err(errors) = checked.check() {
        let said: Vec<String> = errors
            .iter()
            .map(|e| format!("{}: {}", e.field, e.message))
            .collect();
        return Err(CliError(format!(
            "{}: {}",
            spec_file.display(),
            said.join("; ")
        )));
    }
    let mut uploaded = None;
    if let Some(archive) = project {
        if let Some(named) = &spec.project {
            eprintln!(
                "--file {} replaces the spec's project {named}",
                archive.display()
            );
        }
        let (upload, reused) = upload(remote, archive, "project", &file_name(archive)).await?;
        spec.project = upload["id"].as_str().map(str::to_owned);
        // One sent before belongs to the jobs that used it too.
        if !reused {
            uploaded = spec.project.clone();
        }
    }
    let client = remote.client()?;
    let sent = client
        .post(remote.url("/api/trainyard/v1/jobs"))
        .json(&spec)
        .send()
        .await
        .map_err(|e| remote.unreachable(e))?;
    // The archive sent for a job the server refused (4xx: nothing was
    // made) is not kept against the person's quota.
    if sent.status().is_client_error()
        && let Some(id) = uploaded
    {
        let path = format!("/api/trainyard/v1/uploads/{id}");
        if remote.send(client.delete(remote.url(&path))).await.is_ok() {
            eprintln!("removed the project uploaded for it ({id})");
        }
    }
    let answer: Value = remote.checked(sent).await?.json().await?;
    let id = answer["job"]["id"]
        .as_i64()
        .ok_or_else(|| CliError("the server's answer has no job id".into()))?;
    eprintln!("submitted job {id}: {}", remote.url(&format!("/jobs/{id}")));
    if !follow {
        println!("{id}");
        return Ok(ExitCode::SUCCESS);
    }
    follow_logs(remote, id).await
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| "upload".to_owned())
}

/// Streams an archive to the server, showing progress on a terminal: the
/// upload, and whether it is one kept from before (the same project).
async fn upload(remote: &Remote, archive: &Path, kind: &str, name: &str) -> Result<(Value, bool)> {
    use futures::StreamExt;
    let file = tokio::fs::File::open(archive)
        .await
        .map_err(|e| CliError(format!("cannot read {}: {e}", archive.display())))?;
    let meta = file.metadata().await?;
    if meta.is_dir() {
        return Err(CliError(format!(
            "{0} is a folder: send it as an archive, e.g. `tar czf {1}.tar.gz -C {0} .` then `--file {1}.tar.gz` (or a zip)",
            archive.display(),
            file_name(archive)
        )));
    }
    let total = meta.len();
    // A project sent before, unchanged, is not sent again.
    if kind == "project" {
        let digest = file_sha256(archive).await?;
        let kept = remote
            .get_json(&format!("/api/trainyard/v1/uploads?sha256={digest}"))
            .await?;
        // A server that says the digest back has looked it up; one before
        // this query lists every upload, which is no answer.
        let looked_up = kept["sha256"].as_str() == Some(digest.as_str());
        if looked_up && let Some(upload) = kept["uploads"].as_array().and_then(|list| list.first())
        {
            eprintln!(
                "{} is unchanged since upload {}: it runs from that one",
                archive.display(),
                upload["id"].as_str().unwrap_or("?")
            );
            return Ok((upload.clone(), true));
        }
    }
    let shown = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let mut sent: u64 = 0;
    let label = archive.display().to_string();
    let stream = tokio_util::io::ReaderStream::new(file).map(move |chunk| {
        if let Ok(bytes) = &chunk {
            sent += bytes.len() as u64;
            if shown {
                let percent = (sent * 100).checked_div(total).unwrap_or(100);
                eprint!(
                    "\ruploading {label}: {percent}% of {}",
                    trainyard_domain::format_bytes(total)
                );
                let _ = std::io::stderr().flush();
            }
        }
        chunk
    });
    let client = remote.client()?;
    let request = client
        .post(remote.url("/api/trainyard/v1/uploads"))
        .query(&[("kind", kind), ("name", name)])
        .header(reqwest::header::CONTENT_LENGTH, total)
        .body(reqwest::Body::wrap_stream(stream));
    let result = remote.send(request).await;
    if shown {
        eprintln!();
    }
    let answer: Value = result?.json().await?;
    let upload = answer["upload"].clone();
    let reused = answer["reused"].as_bool().unwrap_or(false);
    if reused {
        eprintln!(
            "{} is unchanged since upload {}: it runs from that one",
            archive.display(),
            upload["id"].as_str().unwrap_or("?")
        );
    } else {
        eprintln!(
            "uploaded {}: {} files, {} unpacked",
            archive.display(),
            upload["files"],
            trainyard_domain::format_bytes(upload["bytes"].as_u64().unwrap_or(0))
        );
    }
    Ok((upload, reused))
}

/// A file's SHA-256 in lowercase hex, read a MiB at a time.
async fn file_sha256(path: &Path) -> Result<String> {
    use sha2::Digest;
    use std::io::Read;
    let path = path.to_path_buf();
    tokio::task::spawn_blocking(move || -> Result<String> {
        let mut file = std::fs::File::open(&path)
            .map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
        let mut hasher = sha2::Sha256::new();
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = file
                .read(&mut buf)
                .map_err(|e| CliError(format!("cannot read {}: {e}", path.display())))?;
            if n == 0 {
                break;
            }
            hasher.update(&buf[..n]);
        }
        Ok(hex::encode(hasher.finalize()))
    })
    .await
    .map_err(|e| CliError(format!("the archive's SHA-256 could not be read: {e}")))?
}

/// `trainyard upload-dataset NAME ARCHIVE`
pub async fn upload_dataset(remote: &Remote, name: &str, archive: &Path) -> Result<ExitCode> {
    let (upload, _) = upload(remote, archive, "dataset", name).await?;
    println!("{}", upload["name"].as_str().unwrap_or(name));
    Ok(ExitCode::SUCCESS)
}

/// `trainyard jobs [--state S]`: newest first.
pub async fn jobs(remote: &Remote, state: Option<&str>, all: bool, limit: u64) -> Result<ExitCode> {
    let mut path = format!("/api/trainyard/v1/jobs?limit={limit}");
    if let Some(state) = state {
        path.push_str(&format!("&state={state}"));
    }
    if all {
        path.push_str("&scope=all");
    }
    let answer = remote.get_json(&path).await?;
    let empty = Vec::new();
    let list = answer["jobs"].as_array().unwrap_or(&empty);
    if list.is_empty() {
        eprintln!("no jobs");
        return Ok(ExitCode::SUCCESS);
    }
    // Whose each is, where the list has others' jobs.
    let owner = |name: &str| {
        if all {
            let name: String = name.chars().take(16).collect();
            format!("{name:<16}  ")
        } else {
            String::new()
        }
    };
    println!(
        "{:>6}  {:<10}  {:>4}  {}{:<32}  WHERE (OR WAITING FOR)",
        "ID",
        "STATE",
        "GPUS",
        owner("OWNER"),
        "NAME"
    );
    for job in list {
        // A waiting job's place and reason; a placed one's node (and pod).
        let waiting = match (
            job["queue_position"].as_u64(),
            job["pending_reason"].as_str(),
            job["node"].as_str(),
            job["pod"].as_str(),
        ) {
            (Some(p), Some(reason), _, _) => format!("#{p} · {reason}"),
            (_, _, Some(node), Some(pod)) => format!("{node} · pod {pod}"),
            (_, _, node, _) => node.unwrap_or("").to_owned(),
        };
        let name: String = job["name"]
            .as_str()
            .unwrap_or("")
            .chars()
            .take(32)
            .collect();
        // As numbers, not JSON values, whose display ignores the widths.
        println!(
            "{:>6}  {:<10}  {:>4}  {}{:<32}  {waiting}",
            job["id"].as_i64().unwrap_or_default(),
            job["state"].as_str().unwrap_or(""),
            job["gpus"].as_u64().unwrap_or_default(),
            owner(job["owner"].as_str().unwrap_or("–")),
            name
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `trainyard cancel ID`
pub async fn cancel(remote: &Remote, id: i64) -> Result<ExitCode> {
    let client = remote.client()?;
    let answer: Value = remote
        .send(
            client
                .post(remote.url(&format!("/api/trainyard/v1/jobs/{id}/cancel")))
                .json(&serde_json::json!({})),
        )
        .await?
        .json()
        .await?;
    let state = answer["job"]["state"].as_str().unwrap_or("?");
    if state == "CANCELLED" {
        println!("job {id} cancelled");
    } else {
        println!("job {id} is stopping ({state})");
    }
    Ok(ExitCode::SUCCESS)
}

/// `trainyard delete ID...`: deletes ended jobs for good, each on its
/// own; exits 1 if any could not be (each says why).
pub async fn delete(remote: &Remote, ids: &[i64]) -> Result<ExitCode> {
    let client = remote.client()?;
    let mut all = true;
    for id in ids {
        let path = format!("/api/trainyard/v1/jobs/{id}");
        match remote.send(client.delete(remote.url(&path))).await {
            Ok(_) => println!("job {id} deleted"),
            Err(CliError(message)) => {
                eprintln!("job {id}: {message}");
                all = false;
            }
        }
    }
    Ok(if all {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}

/// `trainyard logs [-f] [--attempt N] ID`: the log of the latest attempt,
/// or of attempt N (1 is the first); with `-f`, follows it until the job
/// ends, and exits 0 only if it succeeded.
pub async fn logs(
    remote: &Remote,
    id: i64,
    follow: bool,
    attempt: Option<u32>,
) -> Result<ExitCode> {
    if follow {
        return follow_logs(remote, id).await;
    }
    let client = remote.client()?;
    let mut which = String::new();
    if let Some(asked) = attempt {
        let job = remote
            .get_json(&format!("/api/trainyard/v1/jobs/{id}"))
            .await?;
        let attempts = job["job"]["attempt"].as_u64().unwrap_or(0) + 1;
        if u64::from(asked) > attempts {
            return Err(CliError(format!(
                "--attempt {asked}: job {id} has made {attempts} attempt{}; give 1 to {attempts}",
                if attempts == 1 { "" } else { "s" }
            )));
        }
        which = format!("&attempt={}", asked - 1);
    }
    let bytes = remote
        .send(client.get(remote.url(&format!(
            "/api/trainyard/v1/jobs/{id}/logs?download=1{which}"
        ))))
        .await?
        .bytes()
        .await?;
    std::io::stdout().write_all(&bytes)?;
    Ok(ExitCode::SUCCESS)
}

async fn follow_logs(remote: &Remote, id: i64) -> Result<ExitCode> {
    let client = remote.client()?;
    let mut offset: u64 = 0;
    let mut attempt: Option<u64> = None;
    let mut said = String::new();
    loop {
        let detail = remote
            .get_json(&format!("/api/trainyard/v1/jobs/{id}"))
            .await?;
        let job = &detail["job"];
        let state = job["state"].as_str().unwrap_or("").to_owned();
        let this_attempt = job["attempt"].as_u64().unwrap_or(0);
        if let Some(before) = attempt.filter(|a| *a != this_attempt) {
            // The end of the attempt before, written after the last look.
            print_log_from(remote, &client, id, before, offset).await?;
            eprintln!("-- attempt {} --", this_attempt + 1);
            offset = 0;
        }
        attempt = Some(this_attempt);
        let status = match (
            job["queue_position"].as_u64(),
            job["pending_reason"].as_str(),
        ) {
            (Some(p), Some(reason)) if state == "QUEUED" => format!("queued #{p}: {reason}"),
            _ => state.to_lowercase(),
        };
        if status != said {
            eprintln!("[{status}]");
            said = status;
        }
        // Everything written so far, then look again.
        offset = print_log_from(remote, &client, id, this_attempt, offset).await?;
        let ended = matches!(
            state.as_str(),
            "SUCCEEDED" | "FAILED" | "CANCELLED" | "LOST"
        );
        if ended {
            let code = job["exit_code"]
                .as_i64()
                .map(|c| format!(", exit code {c}"))
                .unwrap_or_default();
            // Why, in the timeline's words (out of memory, past its
            // runtime, cancelled by whom), where it did not succeed.
            let why = detail["events"]
                .as_array()
                .and_then(|events| events.last())
                .and_then(|e| e["message"].as_str())
                .filter(|_| state != "SUCCEEDED")
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            eprintln!("job {id} {}{code}{why}", state.to_lowercase());
            return Ok(follow_exit(&state, job["exit_code"].as_i64()));
        }
        tokio::time::sleep(FOLLOW_POLL).await;
    }
}

/// Prints an attempt's log from `offset` to where it ends now; returns
/// that end.
async fn print_log_from(
    remote: &Remote,
    client: &reqwest::Client,
    id: i64,
    attempt: u64,
    mut offset: u64,
) -> Result<u64> {
    loop {
        let response = remote
            .send(client.get(remote.url(&format!(
                "/api/trainyard/v1/jobs/{id}/logs?offset={offset}&attempt={attempt}"
            ))))
            .await?;
        let next: u64 = response
            .headers()
            .get("x-log-offset")
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.parse().ok())
            .unwrap_or(offset);
        let bytes = response.bytes().await?;
        if bytes.is_empty() {
            return Ok(offset);
        }
        std::io::stdout().write_all(&bytes)?;
        std::io::stdout().flush()?;
        offset = next;
    }
}

/// How a followed job's end leaves the command, so that a script can act
/// on it as on the job's own command: 0 when it succeeded, its exit code
/// when it failed with one, 1 for every other end (cancelled, lost, killed
/// by a signal, out of memory, past its runtime).
fn follow_exit(state: &str, exit_code: Option<i64>) -> ExitCode {
    match (state, exit_code) {
        ("SUCCEEDED", _) => ExitCode::SUCCESS,
        ("FAILED", Some(code @ 1..=255)) => ExitCode::from(code as u8),
        _ => ExitCode::FAILURE,
    }
}

/// `trainyard job-files --into DIR`: what a job starts from, fetched with
/// its own token (run where its files are not at hand, as in a Kubernetes
/// pod's init container): its files into DIR, each dataset it names into
/// `DIR/data/<name>`. DIR is made if missing and must hold nothing.
pub async fn job_files(remote: &Remote, job: i64, into: &Path) -> Result<ExitCode> {
    match std::fs::read_dir(into) {
        Ok(mut entries) => {
            if entries.next().is_some() {
                return Err(CliError(format!(
                    "{} is not empty; name an empty or new folder with --into",
                    into.display()
                )));
            }
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => std::fs::create_dir_all(into)
            .map_err(|e| CliError(format!("cannot make {}: {e}", into.display())))?,
        Err(e) => return Err(CliError(format!("cannot read {}: {e}", into.display()))),
    }
    let fetched = fetch_job_inputs(remote, job, into).await;
    if fetched.is_err() {
        // Nothing half-fetched stays: a second try starts from an empty folder.
        if let Ok(entries) = std::fs::read_dir(into) {
            for entry in entries.flatten() {
                let path = entry.path();
                let _ = match entry.file_type() {
                    Ok(kind) if kind.is_dir() => std::fs::remove_dir_all(&path),
                    _ => std::fs::remove_file(&path),
                };
            }
        }
    }
    fetched
}

async fn fetch_job_inputs(remote: &Remote, job: i64, into: &Path) -> Result<ExitCode> {
    let detail = remote
        .get_json(&format!("/api/trainyard/v1/jobs/{job}"))
        .await?;
    let datasets: Vec<String> = detail["job"]["spec"]["datasets"]
        .as_array()
        .map(|names| {
            names
                .iter()
                .filter_map(|n| n.as_str().map(str::to_owned))
                .collect()
        })
        .unwrap_or_default();
    let files = fetch_tar(remote, &format!("/api/trainyard/v1/jobs/{job}/files"), into).await?;
    eprintln!(
        "job {job}: {} files, {}",
        files.files,
        trainyard_domain::format_bytes(files.bytes)
    );
    for name in &datasets {
        if !trainyard_domain::job::valid_dataset_name(name) {
            return Err(CliError(format!(
                "the job names a dataset `{name}` that cannot be a folder name"
            )));
        }
        let data = into.join("data");
        std::fs::create_dir_all(&data)
            .map_err(|e| CliError(format!("cannot make {}: {e}", data.display())))?;
        let path = format!("/api/trainyard/v1/jobs/{job}/datasets/{name}");
        let got = fetch_tar(remote, &path, &data.join(name)).await?;
        eprintln!(
            "dataset {name}: {} files, {}",
            got.files,
            trainyard_domain::format_bytes(got.bytes)
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// Downloads a tar archive into `into` and unpacks it there, checked as an
/// upload is (no links, nothing outside the folder).
async fn fetch_tar(
    remote: &Remote,
    path: &str,
    into: &Path,
) -> Result<trainyard_jobs::archive::Extracted> {
    use tokio::io::AsyncWriteExt;
    let client = remote.client()?;
    // The server sends a few archives at once and says when to ask again
    // (many pods may start together): asked again for up to 10 minutes.
    let patience = std::time::Instant::now() + Duration::from_secs(600);
    let mut pause = Duration::from_secs(1);
    let mut response = loop {
        let answer = client
            .get(remote.url(path))
            .send()
            .await
            .map_err(|e| remote.unreachable(e))?;
        if answer.status() != reqwest::StatusCode::SERVICE_UNAVAILABLE
            || std::time::Instant::now() + pause > patience
        {
            break remote.checked(answer).await?;
        }
        let asked = answer
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .map(Duration::from_secs)
            .unwrap_or_default();
        let wait = pause.max(asked).min(Duration::from_secs(30));
        eprintln!(
            "{path}: the server is busy sending other archives; asking again in {} s",
            wait.as_secs()
        );
        tokio::time::sleep(wait).await;
        pause = (pause * 2).min(Duration::from_secs(30));
    };
    // Written and unpacked inside `into` (which may be a mount point, its
    // parent not ours to write), then moved in place.
    std::fs::create_dir_all(into)
        .map_err(|e| CliError(format!("cannot make {}: {e}", into.display())))?;
    let archive = into.join(format!(".trainyard-download-{}", std::process::id()));
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&archive)
        .await
        .map_err(|e| CliError(format!("cannot write {}: {e}", archive.display())))?;
    let written = async {
        while let Some(piece) = response.chunk().await? {
            file.write_all(&piece).await?;
        }
        file.flush().await?;
        Ok::<_, CliError>(())
    }
    .await;
    if let Err(error) = written {
        let _ = std::fs::remove_file(&archive);
        return Err(error);
    }
    let target = into.to_path_buf();
    let what = path.to_owned();
    // The server's own archive: bounded only to stay within numbers.
    let limits = trainyard_jobs::archive::Limits {
        max_bytes: 1 << 50,
        max_files: 1 << 32,
    };
    tokio::task::spawn_blocking(move || {
        let unpacked = target.join(format!(".trainyard-unpack-{}", std::process::id()));
        let done = trainyard_jobs::archive::extract(&archive, &unpacked, limits);
        let _ = std::fs::remove_file(&archive);
        let done = done.map_err(|e| CliError(format!("{what}: {e}")))?;
        for entry in std::fs::read_dir(&unpacked)? {
            let entry = entry?;
            std::fs::rename(entry.path(), target.join(entry.file_name()))?;
        }
        std::fs::remove_dir(&unpacked)?;
        Ok::<_, CliError>(done)
    })
    .await?
}
