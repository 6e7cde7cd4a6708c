//! The jobs REST API under `/api/trainyard/v1/jobs`: submit a spec (JSON or
//! YAML), list, show with the timeline, cancel, and read the log from a byte
//! offset (what `trainyard logs -f` and the job page poll).

use std::collections::HashMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;
use trainyard_domain::job::{Job, JobEvent, JobSpec};
use trainyard_domain::{FieldError, JobState};
use trainyard_store::StoreError;

use crate::AppState;
use crate::auth::{Caller, Credential, Principal, STREAM_RECHECK};
use trainyard_jobs::SubmitError;
use trainyard_store::{Access, JobRecord, JobsOf};

/// Largest spec body: a spec is a few kilobytes; files go up separately.
pub const MAX_SPEC_BYTES: usize = 256 * 1024;
/// Largest piece of log one request returns.
pub const MAX_LOG_BYTES: u64 = 4 * 1024 * 1024;
pub const MAX_LIST: u64 = 1000;

/// An error of the native API: MLflow's two fields, plus the fields of a
/// spec that were wrong.
#[derive(Debug)]
pub struct JobsError {
    status: StatusCode,
    code: &'static str,
    message: String,
    fields: Vec<FieldError>,
}

impl JobsError {
    pub(crate) fn invalid(message: impl Into<String>, fields: Vec<FieldError>) -> JobsError {
        JobsError {
            status: StatusCode::BAD_REQUEST,
            code: "INVALID_PARAMETER_VALUE",
            message: message.into(),
            fields,
        }
    }
}

impl JobsError {
    pub(crate) fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        JobsError {
            status,
            code,
            message: message.into(),
            fields: Vec::new(),
        }
    }

    pub(crate) fn internal(message: impl Into<String>) -> JobsError {
        JobsError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "INTERNAL_ERROR",
            message: message.into(),
            fields: Vec::new(),
        }
    }
}

impl IntoResponse for JobsError {
    fn into_response(self) -> Response {
        let mut body = json!({ "error_code": self.code, "message": self.message });
        if !self.fields.is_empty() {
            body["fields"] = json!(self.fields);
        }
        (self.status, Json(body)).into_response()
    }
}

/// axum's own refusals (a path or query that does not parse, a body past
/// its limit) are plain text; on Trainyard's API they answer as its other
/// errors do, in JSON, with the same words.
pub async fn json_refusals(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> Response {
    let api = request.uri().path().starts_with("/api/trainyard/");
    let response = next.run(request).await;
    let status = response.status();
    let plain = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|t| t.starts_with("text/plain"));
    if !api || !status.is_client_error() || !plain {
        return response;
    }
    // axum's messages are one line; a longer body is not one of them.
    let Ok(body) = axum::body::to_bytes(response.into_body(), 16 * 1024).await else {
        return JobsError::new(status, "INVALID_PARAMETER_VALUE", "the request was refused")
            .into_response();
    };
    let code = match status {
        StatusCode::NOT_FOUND => "RESOURCE_DOES_NOT_EXIST",
        StatusCode::PAYLOAD_TOO_LARGE => "REQUEST_LIMIT_EXCEEDED",
        StatusCode::METHOD_NOT_ALLOWED => "ENDPOINT_NOT_FOUND",
        _ => "INVALID_PARAMETER_VALUE",
    };
    let message = String::from_utf8_lossy(&body).trim().to_owned();
    JobsError::new(status, code, message).into_response()
}

impl From<StoreError> for JobsError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound(message) => JobsError {
                status: StatusCode::NOT_FOUND,
                code: "RESOURCE_DOES_NOT_EXIST",
                message,
                fields: Vec::new(),
            },
            StoreError::Rejected(message) => JobsError::invalid(message, Vec::new()),
            StoreError::Forbidden(message) => {
                JobsError::new(StatusCode::FORBIDDEN, "PERMISSION_DENIED", message)
            }
            StoreError::Unavailable(message) => JobsError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "TEMPORARILY_UNAVAILABLE",
                message,
            ),
            StoreError::Invalid(e) => JobsError::invalid(e.to_string(), vec![e]),
            StoreError::Conflict { what } => JobsError::new(
                StatusCode::CONFLICT,
                "RESOURCE_ALREADY_EXISTS",
                format!("{what} already exists"),
            ),
            other => {
                tracing::error!(error = %other, "jobs store error");
                JobsError::internal("the server could not read or write its database; see its log")
            }
        }
    }
}

impl From<SubmitError> for JobsError {
    fn from(err: SubmitError) -> Self {
        match err {
            SubmitError::Invalid(fields) => {
                let message = fields
                    .iter()
                    .map(|f| format!("{}: {}", f.field, f.message))
                    .collect::<Vec<_>>()
                    .join("; ");
                JobsError::invalid(message, fields)
            }
            SubmitError::Store(e) => e.into(),
        }
    }
}

/// A small JSON body (at most 4 KiB) as `T`: a 400 saying what to send
/// (`shape`) when it is larger or is not `what`.
pub(crate) fn small_json<T: serde::de::DeserializeOwned>(
    body: &[u8],
    what: &str,
    shape: &str,
) -> Result<T, JobsError> {
    if body.len() > 4096 {
        return Err(JobsError::invalid(
            format!("the body is larger than 4 KiB; send {shape}"),
            Vec::new(),
        ));
    }
    serde_json::from_slice(body).map_err(|e| {
        JobsError::invalid(
            format!("not {what}: {e}; send {shape}"),
            vec![FieldError::new("body", e.to_string())],
        )
    })
}

/// Fields that are wrong, as one 400 naming each.
pub(crate) fn field_errors(fields: Vec<FieldError>) -> JobsError {
    SubmitError::Invalid(fields).into()
}

/// Reads a spec as YAML when the content type says so, JSON otherwise.
pub fn parse_spec(content_type: Option<&str>, body: &[u8]) -> Result<JobSpec, JobsError> {
    let yaml = content_type.is_some_and(|t| t.contains("yaml"));
    trainyard_jobs::parse_spec(yaml, body).map_err(|e| JobsError::invalid(e.message, e.fields))
}

fn spec_too_large() -> JobsError {
    JobsError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "REQUEST_LIMIT_EXCEEDED",
        message: format!(
            "the spec is larger than {MAX_SPEC_BYTES} bytes; send files as uploads, not in the spec"
        ),
        fields: Vec::new(),
    }
}

/// The job, if the caller may use it so (see `Store::job_as`).
async fn job_as(
    state: &AppState,
    principal: &Principal,
    id: i64,
    access: Access,
) -> Result<JobRecord, JobsError> {
    let record = state.store.job_as(&principal.user, id, access).await?;
    // A job's token reaches its own job only, not its owner's others.
    if let trainyard_domain::identity::Via::RunToken { run_id } = &principal.via
        && record.job.run_id.as_deref() != Some(run_id.as_str())
    {
        return Err(JobsError::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            format!("a job's token reaches its own job only, not job {id}"),
        ));
    }
    Ok(record)
}

pub(crate) fn admin_only(principal: &Principal, what: &str) -> Result<(), JobsError> {
    if principal.user.is_admin {
        Ok(())
    } else {
        Err(JobsError::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            format!("only admins may {what}"),
        ))
    }
}

/// Whose jobs a list shows: `mine` (the default), or `all` the caller may
/// see (their teams' too; everyone's for admins).
fn jobs_of(principal: &Principal, scope: Option<&str>) -> Result<JobsOf, JobsError> {
    match scope.unwrap_or("mine") {
        "mine" => Ok(JobsOf::for_user(&principal.user, false)),
        "all" => Ok(JobsOf::for_user(&principal.user, true)),
        other => Err(JobsError::invalid(
            format!("scope: `{other}` is not a scope; use mine or all"),
            Vec::new(),
        )),
    }
}

/// `POST /api/trainyard/v1/jobs`
pub async fn submit(
    State(state): State<AppState>,
    Caller(principal): Caller,
    headers: HeaderMap,
    body: Bytes,
) -> Result<(StatusCode, Json<JobAnswer>), JobsError> {
    if body.len() > MAX_SPEC_BYTES {
        return Err(spec_too_large());
    }
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok());
    let spec = parse_spec(content_type, &body)?;
    let record = state.jobs.submit(spec, &principal.user).await?;
    Ok((StatusCode::CREATED, Json(JobAnswer { job: record.job })))
}

#[derive(Serialize)]
pub struct JobAnswer {
    pub job: Job,
}

#[derive(Serialize)]
pub struct JobDetail {
    pub job: Job,
    pub events: Vec<JobEvent>,
    /// The checkpoints it left, while they are kept for a job to resume
    /// from (`resume_from`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub checkpoints: Option<trainyard_domain::job::KeptCheckpoints>,
}

#[derive(Serialize)]
pub struct JobList {
    pub jobs: Vec<Job>,
}

#[derive(Deserialize)]
pub struct ListQuery {
    /// Comma-separated states, e.g. `QUEUED,RUNNING`.
    state: Option<String>,
    limit: Option<u64>,
    /// `mine` (the default) or `all`.
    scope: Option<String>,
}

/// `GET /api/trainyard/v1/jobs?state=QUEUED,RUNNING&limit=100&scope=mine`,
/// newest first.
pub async fn list(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Query(q): Query<ListQuery>,
) -> Result<Json<JobList>, JobsError> {
    let mut states = Vec::new();
    for name in q.state.as_deref().unwrap_or("").split(',') {
        let name = name.trim();
        if name.is_empty() {
            continue;
        }
        let parsed = JobState::parse(&name.to_ascii_uppercase()).ok_or_else(|| {
            let known: Vec<&str> = JobState::ALL.iter().map(|s| s.as_str()).collect();
            JobsError::invalid(
                format!(
                    "state: `{name}` is not a job state; use {}",
                    known.join(", ")
                ),
                Vec::new(),
            )
        })?;
        states.push(parsed);
    }
    let limit = q.limit.unwrap_or(100);
    if limit == 0 || limit > MAX_LIST {
        return Err(JobsError::invalid(
            format!("limit: give 1 to {MAX_LIST}"),
            Vec::new(),
        ));
    }
    let whose = jobs_of(&principal, q.scope.as_deref())?;
    let jobs = state.jobs.store().find_jobs(&states, limit, &whose).await?;
    Ok(Json(JobList {
        jobs: jobs.into_iter().map(|r| r.job).collect(),
    }))
}

/// `GET /api/trainyard/v1/jobs/{id}`
pub async fn show(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
) -> Result<Json<JobDetail>, JobsError> {
    let record = job_as(&state, &principal, id, Access::Read).await?;
    let events = state.jobs.store().job_events(id).await?;
    let checkpoints = state.jobs.store().kept_checkpoints(id).await?;
    Ok(Json(JobDetail {
        job: record.job,
        events,
        checkpoints,
    }))
}

/// `DELETE /api/trainyard/v1/jobs/{id}/checkpoints`: deletes the
/// checkpoints an ended job keeps for a job to resume from (its owner, or
/// an admin), so that their room is free at once.
pub async fn delete_checkpoints(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
) -> Result<StatusCode, JobsError> {
    let record = job_as(&state, &principal, id, Access::Change).await?;
    if state
        .jobs
        .delete_checkpoints(&record, &principal.user)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(JobsError::new(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            format!(
                "job {id} keeps no checkpoints (it has not ended, succeeded, saved none, or they were deleted, expired or resumed from)"
            ),
        ))
    }
}

/// `DELETE /api/trainyard/v1/jobs/{id}`: deletes an ended job for good
/// (its owner, or an admin): its record, timeline, logs, files and the
/// checkpoints it keeps. Its runs stay in their experiment.
pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
) -> Result<StatusCode, JobsError> {
    let record = job_as(&state, &principal, id, Access::Change).await?;
    state.jobs.delete_job(&record, &principal.user).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// What one archive of a job's inputs may hold.
const INPUT_LIMITS: trainyard_jobs::archive::Limits = trainyard_jobs::archive::Limits {
    max_bytes: 1 << 40,
    max_files: 10_000_000,
};

/// `GET /api/trainyard/v1/jobs/{id}/files`: what every attempt of the job
/// starts from (its template's and project's files as at submission), as a
/// tar archive; one without entries when it has none. Its owner (or an
/// admin) may fetch it, not their teammates (a project is its owner's
/// alone), and so may the job itself with its token (`trainyard job-files`).
pub async fn files(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
) -> Result<Response, JobsError> {
    let record = job_as(&state, &principal, id, Access::Change).await?;
    if !state.jobs.files_ready(&record.job) {
        return Err(JobsError::new(
            StatusCode::CONFLICT,
            "INVALID_STATE",
            format!("job {id}'s files are still being copied; ask again in a moment"),
        ));
    }
    tar_response(
        principal.user.id,
        state.jobs.files_dir(id),
        format!("job-{id}-files.tar"),
    )
}

/// `GET /api/trainyard/v1/jobs/{id}/datasets/{name}`: a dataset the job
/// names, as a tar archive.
pub async fn dataset_of_job(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path((id, name)): Path<(i64, String)>,
) -> Result<Response, JobsError> {
    let record = job_as(&state, &principal, id, Access::Change).await?;
    let missing = || {
        JobsError::new(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            format!(
                "job {id} names no dataset `{name}` (it names: {})",
                record.job.spec.datasets.join(", ")
            ),
        )
    };
    if !record.job.spec.datasets.contains(&name) {
        return Err(missing());
    }
    let upload = state.store.dataset(&name).await?.ok_or_else(missing)?;
    tar_response(
        principal.user.id,
        state.jobs.upload_dir(&upload),
        format!("dataset-{name}.tar"),
    )
}

/// Archives sent at once, server-wide: each holds a blocking thread while
/// its reader takes it in.
const MAX_ARCHIVE_SENDS: usize = 8;
/// Of those, one person's (their jobs' included): nobody's slow readers
/// keep the others' pods from starting.
const MAX_ARCHIVE_SENDS_EACH: usize = MAX_ARCHIVE_SENDS / 2;

/// A person's share of the archive sends, given back when dropped.
struct PersonsSend(i64);

impl PersonsSend {
    fn sends() -> std::sync::MutexGuard<'static, HashMap<i64, usize>> {
        static SENDS: std::sync::LazyLock<std::sync::Mutex<HashMap<i64, usize>>> =
            std::sync::LazyLock::new(Default::default);
        SENDS.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn take(person: i64) -> Option<PersonsSend> {
        let mut sends = Self::sends();
        let held = sends.entry(person).or_default();
        if *held >= MAX_ARCHIVE_SENDS_EACH {
            return None;
        }
        *held += 1;
        Some(PersonsSend(person))
    }
}

impl Drop for PersonsSend {
    fn drop(&mut self) {
        let mut sends = Self::sends();
        if let Some(held) = sends.get_mut(&self.0) {
            *held -= 1;
            if *held == 0 {
                sends.remove(&self.0);
            }
        }
    }
}
/// How long a reader may take in nothing before its archive is dropped.
const ARCHIVE_STALL: std::time::Duration = std::time::Duration::from_secs(60);

fn archive_sends() -> &'static std::sync::Arc<tokio::sync::Semaphore> {
    static SENDS: std::sync::OnceLock<std::sync::Arc<tokio::sync::Semaphore>> =
        std::sync::OnceLock::new();
    SENDS.get_or_init(|| std::sync::Arc::new(tokio::sync::Semaphore::new(MAX_ARCHIVE_SENDS)))
}

/// A folder as a tar archive, written while it is sent (never whole in
/// memory or on disk). An error midway cuts the body short, without the
/// archive's end: the response fails (`trainyard job-files` says so). At most
/// [`MAX_ARCHIVE_SENDS`] at once, [`MAX_ARCHIVE_SENDS_EACH`] of one
/// `person`'s (503 past them, with Retry-After), and a reader that takes
/// nothing in for [`ARCHIVE_STALL`] loses its archive.
fn tar_response(
    person: i64,
    dir: std::path::PathBuf,
    file_name: String,
) -> Result<Response, JobsError> {
    /// Writes into the response body; waits while the client is behind.
    struct Pipe(
        tokio::sync::mpsc::Sender<std::io::Result<Bytes>>,
        tokio::runtime::Handle,
    );
    impl std::io::Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let piece = Ok(Bytes::copy_from_slice(buf));
            match self
                .1
                .block_on(tokio::time::timeout(ARCHIVE_STALL, self.0.send(piece)))
            {
                Ok(Ok(())) => Ok(buf.len()),
                Ok(Err(_)) => Err(std::io::ErrorKind::BrokenPipe.into()),
                Err(_) => Err(std::io::ErrorKind::TimedOut.into()),
            }
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let busy = |why: String| {
        let mut answer = JobsError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "TEMPORARILY_UNAVAILABLE",
            format!("{why}; ask again in a moment"),
        )
        .into_response();
        answer
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("2"));
        Ok(answer)
    };
    let Some(persons) = PersonsSend::take(person) else {
        return busy(format!(
            "{MAX_ARCHIVE_SENDS_EACH} archives of yours (or your jobs') are being sent already"
        ));
    };
    let Ok(turn) = archive_sends().clone().try_acquire_owned() else {
        return busy(format!(
            "{MAX_ARCHIVE_SENDS} archives are being sent already"
        ));
    };
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    let runtime = tokio::runtime::Handle::current();
    tokio::task::spawn_blocking(move || {
        let _turn = (turn, persons);
        let out = std::io::BufWriter::with_capacity(256 * 1024, Pipe(tx.clone(), runtime.clone()));
        if let Err(error) = trainyard_jobs::archive::pack(&dir, out, INPUT_LIMITS) {
            tracing::warn!(folder = %dir.display(), %error, "could not send a job's inputs");
            let _ = runtime.block_on(tokio::time::timeout(
                ARCHIVE_STALL,
                tx.send(Err(std::io::Error::other(error.to_string()))),
            ));
        }
    });
    let pieces = futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|piece| (piece, rx))
    });
    let body = axum::body::Body::from_stream(pieces);
    Ok((
        [
            (header::CONTENT_TYPE, "application/x-tar".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"{file_name}\""),
            ),
        ],
        body,
    )
        .into_response())
}

/// `POST /api/trainyard/v1/jobs/{id}/cancel`
pub async fn cancel(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
) -> Result<Json<JobAnswer>, JobsError> {
    let record = job_as(&state, &principal, id, Access::Change).await?;
    let by = record.someone_else(&principal.user);
    let record = state.jobs.cancel(id, by).await?;
    Ok(Json(JobAnswer { job: record.job }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TeamChange {
    team: String,
}

/// `PUT /api/trainyard/v1/jobs/{id}/team` with `{"team": "vision"}`: files a
/// job that has not ended under another team (its owner: one of theirs;
/// an admin: any).
pub async fn set_team(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
    body: axum::body::Bytes,
) -> Result<Json<JobAnswer>, JobsError> {
    let record = job_as(&state, &principal, id, Access::Change).await?;
    let change: TeamChange = small_json(&body, "a team change", r#"{"team": "name"}"#)?;
    let moved = state
        .jobs
        .set_team(&record, &change.team, &principal.user)
        .await?;
    Ok(Json(JobAnswer { job: moved.job }))
}

#[derive(Serialize)]
pub struct TemplateList {
    pub templates: Vec<trainyard_domain::template::Template>,
}

/// `GET /api/trainyard/v1/templates`: the catalog, by title.
pub async fn templates(State(state): State<AppState>) -> Result<Json<TemplateList>, JobsError> {
    Ok(Json(TemplateList {
        templates: state.jobs.store().templates().await?,
    }))
}

/// `GET /api/trainyard/v1/templates/{slug}`
pub async fn template(
    State(state): State<AppState>,
    Path(slug): Path<String>,
) -> Result<Json<trainyard_domain::template::Template>, JobsError> {
    state
        .jobs
        .store()
        .get_template(&slug)
        .await?
        .map(Json)
        .ok_or_else(|| {
            StoreError::NotFound(format!("there is no template `{slug}` in the catalog")).into()
        })
}

/// `POST /api/trainyard/v1/jobs/{id}/retry`: a new job with the same spec
/// and files; answers the new job. `?resume=true`: it starts from the
/// checkpoints this one left (refused, saying why, when none are kept).
pub async fn retry(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
    Query(q): Query<RetryQuery>,
) -> Result<(StatusCode, Json<JobAnswer>), JobsError> {
    let record = job_as(&state, &principal, id, Access::Change).await?;
    let by = record.acted_on_by(&principal.user);
    let record = state.jobs.retry(id, by, q.resume).await?;
    Ok((StatusCode::CREATED, Json(JobAnswer { job: record.job })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryQuery {
    /// `?resume=true`: the new job starts from the checkpoints this one
    /// left (kept for `checkpoint_keep_hours` after it ended).
    #[serde(default)]
    resume: bool,
}

#[derive(Deserialize)]
pub struct LogQuery {
    #[serde(default)]
    offset: u64,
    limit: Option<u64>,
    /// Which attempt (0-based); the current one if not given.
    attempt: Option<u32>,
    /// The whole log as a file to save (`download=1`).
    #[serde(default)]
    download: Option<String>,
}

/// `GET /api/trainyard/v1/jobs/{id}/logs?offset=N`: the log (stdout and
/// stderr, as written) from byte N. `X-Log-Offset` says where to ask next,
/// `X-Job-State` whether more can come.
pub async fn logs(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
    Query(q): Query<LogQuery>,
) -> Result<Response, JobsError> {
    let record = job_as(&state, &principal, id, Access::Read).await?;
    let attempt = q.attempt.unwrap_or(record.job.attempt);
    if attempt > record.job.attempt {
        return Err(JobsError::invalid(
            format!("attempt: job {id} has attempts 0 to {}", record.job.attempt),
            Vec::new(),
        ));
    }
    if q.download.is_some() {
        return download(state.jobs.clone(), id, attempt).await;
    }
    let limit = q.limit.unwrap_or(MAX_LOG_BYTES).clamp(1, MAX_LOG_BYTES);
    let (bytes, size) = state
        .jobs
        .read_log(id, attempt, q.offset, limit)
        .await
        .map_err(log_error)?;
    let next = q.offset.min(size) + bytes.len() as u64;
    let mut response =
        ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], bytes).into_response();
    let headers = response.headers_mut();
    headers.insert("x-log-offset", HeaderValue::from(next));
    headers.insert("x-log-size", HeaderValue::from(size));
    headers.insert(
        "x-job-state",
        HeaderValue::from_static(record.job.state.as_str()),
    );
    Ok(response)
}

/// `GET /api/trainyard/v1/nodes` (admins): the executor's nodes, with
/// their GPUs held by Trainyard's jobs, by others, and free.
pub async fn nodes(
    State(state): State<AppState>,
    Caller(principal): Caller,
) -> Result<Json<trainyard_domain::ExecutorNodes>, JobsError> {
    admin_only(&principal, "see the nodes")?;
    Ok(Json(state.jobs.nodes().await?))
}

/// What `PUT /api/trainyard/v1/nodes/{node}/drain` takes.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct DrainAsked {
    reason: String,
    #[serde(default)]
    stop_jobs: bool,
}

/// `PUT /api/trainyard/v1/nodes/{node}/drain` (admins) with
/// `{"reason": "driver update", "stop_jobs": false}`: the node takes no new
/// jobs; with `stop_jobs`, what runs there is stopped and queued again, its
/// retries untouched. Again on a drained node: the new reason and choice.
pub async fn drain_node(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
    body: Bytes,
) -> Result<Json<trainyard_domain::NodeDrain>, JobsError> {
    admin_only(&principal, "drain nodes")?;
    let asked: DrainAsked =
        small_json(&body, "a drain", r#"{"reason": "why", "stop_jobs": false}"#)?;
    let drain = state
        .jobs
        .drain_node(&node, &asked.reason, asked.stop_jobs, &principal.user)
        .await?;
    Ok(Json(drain))
}

/// `DELETE /api/trainyard/v1/nodes/{node}/drain` (admins): the node takes
/// jobs again.
pub async fn resume_node(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
) -> Result<StatusCode, JobsError> {
    admin_only(&principal, "resume drained nodes")?;
    if state.jobs.resume_node(&node, &principal.user).await? {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(StoreError::NotFound(format!("node {node:?} is not drained")).into())
    }
}

/// `PUT /api/trainyard/v1/templates/{slug}` with the template as YAML or
/// JSON: creates or replaces a template made by an admin.
pub async fn save_template(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(slug): Path<String>,
    body: Bytes,
) -> Result<Json<trainyard_domain::template::Template>, JobsError> {
    admin_only(&principal, "write templates")?;
    if body.len() > MAX_SPEC_BYTES {
        return Err(spec_too_large());
    }
    let template = state
        .jobs
        .save_template(&slug, &body, &principal.user)
        .await?;
    Ok(Json(template))
}

/// `DELETE /api/trainyard/v1/templates/{slug}`
pub async fn delete_template(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(slug): Path<String>,
) -> Result<StatusCode, JobsError> {
    admin_only(&principal, "delete templates")?;
    state.jobs.delete_template(&slug, &principal.user).await?;
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
pub struct UploadQuery {
    /// `project` (the default) or `dataset`.
    kind: Option<String>,
    /// A dataset's name; a project's file name, for people.
    #[serde(default)]
    name: String,
}

#[derive(Serialize)]
pub struct UploadAnswer {
    pub upload: trainyard_domain::job::Upload,
    /// The same project archive was uploaded before: this is that upload
    /// (200, not 201), and nothing more counts against the quota.
    pub reused: bool,
}

/// `POST /api/trainyard/v1/uploads?kind=project|dataset&name=NAME` with the
/// archive (zip, tar or tar.gz) as the body. The body is streamed to a file
/// (413 past `upload_max_bytes`), then unpacked safely: an archive with a path
/// out of its folder, a link, a device file, or more than the limits is
/// refused whole, and nothing of it is kept. A project archive its sender
/// uploaded before (the same SHA-256) is answered 200 with that upload and
/// `reused`, not unpacked again.
pub async fn upload(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Query(q): Query<UploadQuery>,
    headers: HeaderMap,
    body: axum::body::Body,
) -> Result<(StatusCode, Json<UploadAnswer>), JobsError> {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let limit = state.upload_max_bytes;
    let too_large = || JobsError {
        status: StatusCode::PAYLOAD_TOO_LARGE,
        code: "REQUEST_LIMIT_EXCEEDED",
        message: format!(
            "the upload is larger than the limit of {limit} bytes (upload_max_bytes); leave data out of the project, or ask an admin to raise the limit"
        ),
        fields: Vec::new(),
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    // Nothing is received once the person's uploads fill their quota.
    let used = state.store.upload_use_of(principal.user.id).await?;
    if let Some(quota) = state.upload_quota_bytes
        && used.bytes >= quota
    {
        return Err(upload_quota_error(used.bytes, None, quota));
    }
    if let Some(quota) = state.upload_quota_entries
        && used.entries >= quota
    {
        return Err(upload_entries_error(used.entries, None, quota));
    }
    // The server's alone, from the first byte: running jobs pass through
    // the uploads folder, and an archive on its way is somebody's project.
    let incoming = state.data_dir.join("uploads").join(".incoming");
    let folder = incoming.clone();
    tokio::task::spawn_blocking(move || trainyard_jobs::private_folder(&folder))
        .await
        .map_err(|e| io_error(std::io::Error::other(e)))?
        .map_err(io_error)?;
    let temp = incoming.join(uuid::Uuid::new_v4().simple().to_string());
    // Removed however this ends.
    let _cleanup = RemoveOnDrop(temp.clone());
    let mut file = tokio::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temp)
        .await
        .map_err(io_error)?;
    let mut received: u64 = 0;
    let mut digest = sha2::Sha256::default();
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk
            .map_err(|e| JobsError::invalid(format!("the upload was cut off: {e}"), Vec::new()))?;
        received += chunk.len() as u64;
        if received > limit {
            return Err(too_large());
        }
        sha2::Digest::update(&mut digest, &chunk);
        file.write_all(&chunk).await.map_err(io_error)?;
    }
    let digest = hex::encode(sha2::Digest::finalize(digest));
    file.sync_all().await.map_err(io_error)?;
    drop(file);
    let kind = q.kind.as_deref().unwrap_or("project");
    let (upload, reused) = state
        .jobs
        .upload(kind, &q.name, &temp, Some(&digest), &principal.user)
        .await
        .map_err(|e| match e {
            trainyard_jobs::UploadError::Invalid(field) => {
                JobsError::invalid(format!("{}: {}", field.field, field.message), vec![field])
            }
            trainyard_jobs::UploadError::Archive(
                trainyard_jobs::archive::ArchiveError::Refused(why),
            ) => JobsError::invalid(
                format!("the archive was refused: {why}; nothing of it was kept"),
                Vec::new(),
            ),
            trainyard_jobs::UploadError::Archive(e) => JobsError::internal(e.to_string()),
            trainyard_jobs::UploadError::Store(StoreError::Conflict { what }) => JobsError {
                status: StatusCode::CONFLICT,
                code: "RESOURCE_ALREADY_EXISTS",
                message: format!("{what} already exists; choose another name"),
                fields: Vec::new(),
            },
            trainyard_jobs::UploadError::Store(e) => e.into(),
        })?;
    if reused {
        return Ok((StatusCode::OK, Json(UploadAnswer { upload, reused })));
    }
    // What an archive holds is known once it is unpacked and recorded; read
    // again then, uploads that arrived meanwhile count too.
    let used = state.store.upload_use_of(principal.user.id).await?;
    let refusal = match (state.upload_quota_bytes, state.upload_quota_entries) {
        (Some(quota), _) if used.bytes > quota => Some(upload_quota_error(
            used.bytes.saturating_sub(upload.bytes),
            Some(upload.bytes),
            quota,
        )),
        (_, Some(quota)) if used.entries > quota => Some(upload_entries_error(
            used.entries.saturating_sub(upload.entries),
            Some(upload.entries),
            quota,
        )),
        _ => None,
    };
    if let Some(refusal) = refusal {
        state.jobs.discard_upload(&upload).await?;
        return Err(refusal);
    }
    // Kept for good: the same archive sent again is this one from now on
    // (if this fails, it is only sent again in full).
    if upload.kind == "project"
        && let Err(error) = state.store.set_upload_digest(&upload.id, &digest).await
    {
        tracing::warn!(upload = %upload.id, %error, "could not record the upload's digest");
    }
    Ok((StatusCode::CREATED, Json(UploadAnswer { upload, reused })))
}

/// What to do past either upload quota.
const UPLOAD_QUOTA_REMEDY: &str = "delete uploads you no longer need \
    (GET /api/trainyard/v1/uploads lists them, DELETE /api/trainyard/v1/uploads/ID \
    removes one), or ask an admin to raise the quota";

/// 507: one person's uploads would hold more than `upload_quota_bytes`.
fn upload_quota_error(used: u64, adding: Option<u64>, quota: u64) -> JobsError {
    upload_refusal(
        crate::quota::Unit::Bytes,
        used,
        adding,
        quota,
        "upload_quota_bytes",
    )
}

/// 507: one person's uploads would hold more files and folders than
/// `upload_quota_entries` (an archive of empty folders holds no bytes, but
/// every folder is an inode of the server's disk).
fn upload_entries_error(used: u64, adding: Option<u64>, quota: u64) -> JobsError {
    let unit = crate::quota::Unit::Count("files and folders");
    upload_refusal(unit, used, adding, quota, "upload_quota_entries")
}

fn upload_refusal(
    unit: crate::quota::Unit,
    used: u64,
    adding: Option<u64>,
    quota: u64,
    setting: &str,
) -> JobsError {
    let error = crate::quota::exhausted(
        "your uploads",
        unit,
        used,
        adding,
        quota,
        setting,
        UPLOAD_QUOTA_REMEDY,
    );
    JobsError::new(error.status, error.code, error.message)
}

#[derive(Serialize)]
pub struct UploadList {
    pub uploads: Vec<trainyard_domain::job::Upload>,
    /// What they hold, unpacked, and what the quota allows (null: no quota).
    pub used_bytes: u64,
    pub quota_bytes: Option<u64>,
    /// Their files and folders, and what that quota allows (null: none).
    pub used_entries: u64,
    pub quota_entries: Option<u64>,
    /// The SHA-256 asked for, said back: a client trusts `uploads` as the
    /// project of that archive only then (a server before this query
    /// lists every upload).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UploadsQuery {
    /// Only the project kept from an archive with this SHA-256 (hex).
    sha256: Option<String>,
}

/// `GET /api/trainyard/v1/uploads`: the caller's uploads, newest first,
/// with what they hold against the upload quota. With `?sha256=HEX`, only
/// the project kept from an archive of that SHA-256, if any: a client asks
/// before it sends an archive again (`trainyard submit --file` of an
/// unchanged project sends nothing, even at the quota).
pub async fn uploads(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Query(q): Query<UploadsQuery>,
) -> Result<Json<UploadList>, JobsError> {
    let id = principal.user.id;
    let uploads = match q.sha256.as_deref() {
        Some(digest) => {
            if digest.len() != 64
                || !digest
                    .bytes()
                    .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
            {
                let field = FieldError::new(
                    "sha256",
                    "an archive's SHA-256 in 64 lowercase hexadecimal digits (what `sha256sum` prints)",
                );
                return Err(JobsError::invalid(
                    format!("{}: {}", field.field, field.message),
                    vec![field],
                ));
            }
            state
                .jobs
                .kept_project(&principal.user, digest)
                .await?
                .into_iter()
                .collect()
        }
        None => state.store.uploads_of(id).await?,
    };
    let used = state.store.upload_use_of(id).await?;
    Ok(Json(UploadList {
        sha256: q.sha256,
        uploads,
        used_bytes: used.bytes,
        quota_bytes: state.upload_quota_bytes,
        used_entries: used.entries,
        quota_entries: state.upload_quota_entries,
    }))
}

/// `DELETE /api/trainyard/v1/uploads/{id}`: by its owner or an admin; a
/// dataset that a waiting or running job reads is kept (409).
pub async fn delete_upload(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> Result<Json<serde_json::Value>, JobsError> {
    let not_found = || JobsError {
        status: StatusCode::NOT_FOUND,
        code: "RESOURCE_DOES_NOT_EXIST",
        message: format!("no upload {id} of yours"),
        fields: Vec::new(),
    };
    let (upload, owner) = state
        .store
        .upload_with_owner(&id)
        .await?
        .ok_or_else(not_found)?;
    if !principal.user.is_admin && owner != Some(principal.user.id) {
        return Err(not_found());
    }
    state
        .jobs
        .delete_upload(&upload)
        .await
        .map_err(|e| match e {
            StoreError::Rejected(message) => {
                JobsError::new(StatusCode::CONFLICT, "INVALID_STATE", message)
            }
            other => other.into(),
        })?;
    if owner != Some(principal.user.id) {
        state
            .store
            .audit(
                &principal.user,
                trainyard_domain::identity::AuditAction::UploadDeleted,
                &format!("upload {}", upload.id),
                &format!("{} ({}, {} bytes)", upload.name, upload.kind, upload.bytes),
            )
            .await;
    }
    Ok(Json(json!({"deleted": upload.id})))
}

/// A temporary file, removed when the request ends.
struct RemoveOnDrop(std::path::PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

fn io_error(e: std::io::Error) -> JobsError {
    tracing::error!(error = %e, "upload could not be written");
    JobsError::internal(format!("the server could not store the upload: {e}"))
}

#[derive(Serialize)]
pub struct DatasetList {
    pub datasets: Vec<trainyard_domain::job::Upload>,
}

/// `GET /api/trainyard/v1/datasets`
pub async fn datasets(State(state): State<AppState>) -> Result<Json<DatasetList>, JobsError> {
    Ok(Json(DatasetList {
        datasets: state.jobs.store().datasets().await?,
    }))
}

fn log_error(e: std::io::Error) -> JobsError {
    JobsError::internal(format!("could not read the job's log: {e}"))
}

/// The whole log, streamed from the file, as an attachment.
/// The log as it stands now, read through the executor a piece at a time.
async fn download(
    jobs: trainyard_jobs::Jobs,
    id: i64,
    attempt: u32,
) -> Result<Response, JobsError> {
    const PIECE: u64 = 1 << 20;
    let (_, size) = jobs.read_log(id, attempt, 0, 0).await.map_err(log_error)?;
    let pieces = futures::stream::unfold(0u64, move |offset| {
        let jobs = jobs.clone();
        async move {
            if offset >= size {
                return None;
            }
            match jobs
                .read_log(id, attempt, offset, PIECE.min(size - offset))
                .await
            {
                Ok((bytes, _)) if bytes.is_empty() => None,
                Ok((bytes, _)) => {
                    let next = offset + bytes.len() as u64;
                    Some((Ok(axum::body::Bytes::from(bytes)), next))
                }
                Err(e) => Some((Err::<axum::body::Bytes, _>(e), size)),
            }
        }
    });
    let body = axum::body::Body::from_stream(pieces);
    // Numbered from 1, as the job's page says ("Attempt 2 of 3").
    let name = format!(
        "attachment; filename=\"job-{id}-attempt-{}.log\"",
        attempt + 1
    );
    Ok((
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_owned()),
            (header::CONTENT_DISPOSITION, name),
        ],
        body,
    )
        .into_response())
}

#[derive(Deserialize)]
pub struct StreamQuery {
    #[serde(default)]
    offset: u64,
}

/// How often a followed log is looked at for new text.
const FOLLOW_POLL: std::time::Duration = std::time::Duration::from_millis(300);
/// Most text one event carries.
const EVENT_BYTES: u64 = 64 * 1024;

/// `GET /api/trainyard/v1/jobs/{id}/logs/stream?offset=N`: the current
/// attempt's log from byte N as server-sent events. `log` events carry new
/// text (their id is the offset after it); one `end` event follows when the
/// job has ended (or moved on to another attempt) and its log is read out.
pub async fn stream_logs(
    State(state): State<AppState>,
    Caller(principal): Caller,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    Path(id): Path<i64>,
    Query(q): Query<StreamQuery>,
    headers: HeaderMap,
) -> Result<
    axum::response::sse::Sse<
        impl futures::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
    >,
    JobsError,
> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    let record = job_as(&state, &principal, id, Access::Read).await?;
    let attempt = record.job.attempt;
    let jobs = state.jobs.clone();
    // A browser that reconnects says where it got to.
    let start = headers
        .get("last-event-id")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok())
        .unwrap_or(q.offset);
    let credential = Credential::new(&state.auth, peer, headers, &principal);
    let checked = std::time::Instant::now();
    // (offset, finished, last look at the credential): the stream stops
    // after the `end` event, or at once when the caller's session or token
    // is gone or the job is no longer theirs to read.
    let stream = futures::stream::unfold(
        (start, false, checked),
        move |(mut offset, finished, mut checked)| {
            let jobs = jobs.clone();
            let credential = credential.clone();
            async move {
                if finished {
                    return None;
                }
                loop {
                    if checked.elapsed() >= STREAM_RECHECK {
                        let principal = credential.recheck().await?;
                        jobs.store()
                            .job_as(&principal.user, id, Access::Read)
                            .await
                            .ok()?;
                        checked = std::time::Instant::now();
                    }
                    let (bytes, _) = jobs
                        .read_log(id, attempt, offset, EVENT_BYTES)
                        .await
                        .unwrap_or_default();
                    let text = complete_utf8(&bytes);
                    if !text.is_empty() {
                        offset += text.len() as u64;
                        let event = Event::default()
                            .event("log")
                            .id(offset.to_string())
                            .data(String::from_utf8_lossy(text));
                        return Some((Ok(event), (offset, false, checked)));
                    }
                    let ended = match jobs.store().get_job(id).await {
                        Ok(r) => r.job.state.is_terminal() || r.job.attempt != attempt,
                        Err(_) => true,
                    };
                    if ended {
                        // The last lines may have come with the end; a character
                        // cut off for good is sent as it is.
                        let (rest, _) = jobs
                            .read_log(id, attempt, offset, EVENT_BYTES)
                            .await
                            .unwrap_or_default();
                        if rest.is_empty() {
                            let event = Event::default().event("end").data("");
                            return Some((Ok(event), (offset, true, checked)));
                        }
                        offset += rest.len() as u64;
                        let event = Event::default()
                            .event("log")
                            .id(offset.to_string())
                            .data(String::from_utf8_lossy(&rest));
                        return Some((Ok(event), (offset, false, checked)));
                    }
                    tokio::time::sleep(FOLLOW_POLL).await;
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The bytes up to the last whole UTF-8 character: a character cut by a
/// read waits for the next one. Invalid bytes pass (shown as U+FFFD).
fn complete_utf8(bytes: &[u8]) -> &[u8] {
    match std::str::from_utf8(bytes) {
        Ok(_) => bytes,
        Err(e) if e.error_len().is_none() && e.valid_up_to() + 4 > bytes.len() => {
            &bytes[..e.valid_up_to()]
        }
        Err(_) => bytes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A refusal that passes answers 503, for clients to try again; one
    /// of the request itself, 400.
    #[test]
    fn what_cannot_be_done_now_is_told_apart_from_what_cannot_be_done() {
        let now = JobsError::from(StoreError::Unavailable("busy; try again".into()));
        assert_eq!(
            (now.status, now.code, now.message.as_str()),
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "TEMPORARILY_UNAVAILABLE",
                "busy; try again"
            )
        );
        let never = JobsError::from(StoreError::Rejected("not so".into()));
        assert_eq!(
            (never.status, never.code),
            (StatusCode::BAD_REQUEST, "INVALID_PARAMETER_VALUE")
        );
    }

    #[test]
    fn a_character_cut_by_a_read_waits() {
        let text = "héllo".as_bytes();
        assert_eq!(complete_utf8(&text[..2]), b"h");
        assert_eq!(complete_utf8(text), text);
        assert_eq!(complete_utf8(b"a\xffb"), b"a\xffb");
    }

    #[test]
    fn specs_read_from_yaml_and_json_alike() {
        let yaml = b"name: train\ncommand: python train.py --lr {lr}\nresources:\n  gpus: 1\n  memory: 2Gi\nhyperparameters:\n  lr: 0.01\n  layers: 3\n";
        let from_yaml = parse_spec(Some("application/yaml"), yaml).unwrap();
        let json = br#"{"name": "train", "command": "python train.py --lr {lr}", "resources": {"gpus": 1, "memory": "2Gi"}, "hyperparameters": {"lr": 0.01, "layers": 3}}"#;
        let from_json = parse_spec(Some("application/json"), json).unwrap();
        assert_eq!(from_yaml, from_json);
        assert_eq!(from_yaml.resources().gpus, 1);
    }

    #[test]
    fn a_wrong_type_names_its_field() {
        let err = parse_spec(
            Some("application/yaml"),
            b"name: x\ncommand: train\nresources:\n  gpus: many\n",
        )
        .unwrap_err();
        assert_eq!(err.fields[0].field, "resources.gpus");
        assert!(
            err.message.starts_with("resources.gpus: "),
            "{}",
            err.message
        );
    }

    #[test]
    fn unknown_fields_and_non_mappings_are_refused() {
        let err = parse_spec(None, br#"{"name": "x", "command": "y", "gpu": 1}"#).unwrap_err();
        assert!(
            err.message
                .contains("gpu: `gpu` is not a field here; use one of `name`"),
            "{}",
            err.message
        );
        let err = parse_spec(Some("text/yaml"), b"- a\n- b\n").unwrap_err();
        assert!(err.message.contains("mapping"), "{}", err.message);
        let err = parse_spec(None, b"{").unwrap_err();
        assert!(err.message.contains("not valid JSON"), "{}", err.message);
    }
}
