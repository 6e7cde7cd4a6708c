//! The mlflow-artifacts proxy: upload (PUT), download (GET), list and delete
//! run artifacts, stored under `<data_dir>/artifacts/<experiment>/<run>/artifacts/`,
//! logged models' under `<experiment>/models/<model_id>/artifacts/` and
//! traces' (`traces.json`) under `<experiment>/traces/<trace_id>/artifacts/`.
//! A path must name an existing run's or model's artifact folder and may not
//! escape it.

use std::path::{Path, PathBuf};

use axum::Router;
use axum::body::Body;
use axum::extract::{DefaultBodyLimit, Path as UrlPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use futures::StreamExt;
use serde::Deserialize;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tower::ServiceExt;
use tower_http::services::ServeFile;

use super::multipart;
use super::request::Req;
use super::{ApiError, may_change_run};
use crate::AppState;
use crate::auth::{Caller, Principal};

pub fn routes(limit: usize) -> Router<AppState> {
    // Uploads stream to disk and count their own bytes against `limit`.
    let streamed = Router::new()
        .route(
            "/artifacts/{*path}",
            get(download).put(upload).delete(remove),
        )
        .route("/mpu/part/{id}/{number}", put(multipart::part))
        .layer(DefaultBodyLimit::disable());
    // The rest read a JSON body whole: it has the API's bound.
    Router::new()
        .route("/artifacts", get(list))
        .route("/mpu/create/{*path}", post(multipart::create))
        .route("/mpu/complete/{*path}", post(multipart::complete))
        .route("/mpu/abort/{*path}", post(multipart::abort))
        .layer(DefaultBodyLimit::max(super::MAX_JSON_BODY))
        .merge(streamed)
        .layer(axum::Extension(UploadLimit(limit)))
}

#[derive(Clone, Copy)]
pub(super) struct UploadLimit(pub(super) usize);

/// What a request does with the artifacts it names.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Use {
    Read,
    Write,
}

/// Checks a path the client sent and maps it into the artifact root; a
/// write must be allowed on the run.
pub(super) async fn resolve(
    state: &AppState,
    principal: &Principal,
    raw: &str,
    use_: Use,
) -> Result<PathBuf, ApiError> {
    let path = raw.trim_start_matches('/');
    let invalid = || {
        ApiError::invalid(format!(
            "Invalid path `{raw}`: it must stay inside a run's artifact folder"
        ))
    };
    if path.contains('\\') || path.contains('\0') || path.contains('#') {
        return Err(invalid());
    }
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if segments
        .iter()
        .any(|s| *s == "." || *s == ".." || s.contains(':'))
    {
        return Err(invalid());
    }
    if let [experiment, "models", model_id, "artifacts", ..] = segments.as_slice() {
        match use_ {
            Use::Write => super::models::may_change_model(state, principal, model_id).await?,
            Use::Read => {
                state
                    .store
                    .logged_model_as(&principal.user, model_id, trainyard_store::Access::Read)
                    .await?
            }
        }
        let place = state.store.logged_model_place(model_id).await?;
        if place.map(|(e, _)| e.to_string()).as_deref() != Some(*experiment) {
            return Err(ApiError::not_found(format!(
                "Logged model {model_id} does not belong to experiment {experiment}"
            )));
        }
        let mut full = state.artifact_root.clone();
        for segment in segments {
            full.push(segment);
        }
        return Ok(full);
    }
    if let [experiment, "traces", trace_id, "artifacts", ..] = segments.as_slice() {
        let access = match use_ {
            Use::Write => trainyard_store::Access::Change,
            Use::Read => trainyard_store::Access::Read,
        };
        state
            .store
            .trace_as(&principal.user, trace_id, access)
            .await?;
        if use_ == Use::Write {
            super::traces::job_may_write(state, principal, trace_id).await?;
        }
        let (trace_experiment, _) = state.store.trace_place(trace_id).await?;
        if trace_experiment.to_string() != *experiment {
            return Err(ApiError::not_found(format!(
                "Trace {trace_id} does not belong to experiment {experiment}"
            )));
        }
        let mut full = state.artifact_root.clone();
        for segment in segments {
            full.push(segment);
        }
        return Ok(full);
    }
    let (experiment, run, folder) = match segments.as_slice() {
        [experiment, run, folder, ..] => (*experiment, *run, *folder),
        _ => return Err(invalid()),
    };
    if folder != "artifacts" {
        return Err(invalid());
    }
    // Whether the run may be used, before anything about it is told.
    match use_ {
        Use::Write => may_change_run(state, principal, run).await?,
        Use::Read => {
            state
                .store
                .run_as(&principal.user, run, trainyard_store::Access::Read)
                .await?
        }
    }
    let run_experiment = state
        .store
        .run_experiment(run)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("Run with id={run} not found")))?;
    if run_experiment.to_string() != experiment {
        return Err(ApiError::not_found(format!(
            "Run {run} does not belong to experiment {experiment}"
        )));
    }
    let mut full = state.artifact_root.clone();
    for segment in segments {
        full.push(segment);
    }
    Ok(full)
}

#[derive(Deserialize)]
pub struct ListQuery {
    path: Option<String>,
}

async fn list(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(q): Req<ListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let dir = resolve(
        &state,
        &principal,
        q.path.as_deref().unwrap_or(""),
        Use::Read,
    )
    .await?;
    let files = entries(&dir, "", MAX_LISTED).await?;
    let mut out = json!({});
    if !files.is_empty() {
        out["files"] = Value::Array(files);
    }
    Ok(axum::Json(out))
}

/// Most entries one folder listing carries.
const MAX_LISTED: usize = 100_000;

/// The files and folders in `dir`, by name, each path `prefix` + its name
/// (links are told as what they are, never followed); uploads under way
/// are left out. A folder of more than `limit` entries is refused rather
/// than read whole.
async fn entries(dir: &Path, prefix: &str, limit: usize) -> Result<Vec<Value>, ApiError> {
    let mut files = Vec::new();
    if let Ok(mut entries) = tokio::fs::read_dir(dir).await {
        while let Ok(Some(entry)) = entries.next_entry().await {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".upload-") {
                continue;
            }
            if files.len() == limit {
                return Err(ApiError::invalid(format!(
                    "The folder `{prefix}` holds more than {limit} entries, more than one listing carries; list its sub-folders, or download the files you need by path"
                )));
            }
            let Ok(meta) = entry.metadata().await else {
                continue;
            };
            let mut item = json!({ "path": format!("{prefix}{name}"), "is_dir": meta.is_dir() });
            // Every file's size, an empty one's 0, as MLflow's server.
            if meta.is_file() {
                item["file_size"] = json!(meta.len());
            }
            files.push(item);
        }
    }
    files.sort_by(|a, b| a["path"].as_str().cmp(&b["path"].as_str()));
    Ok(files)
}

#[derive(Deserialize)]
pub struct RunListQuery {
    run_id: Option<String>,
    run_uuid: Option<String>,
    path: Option<String>,
}

/// `GET /api/2.0/mlflow/artifacts/list`: MLflow's ListArtifacts, a run's
/// files under `path` with paths from its artifact root (the R client and
/// MLflow's own UI list artifacts this way).
pub(super) async fn list_of_run(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(q): Req<RunListQuery>,
) -> Result<axum::Json<Value>, ApiError> {
    let run_id =
        super::wire::required(q.run_id.or(q.run_uuid).filter(|r| !r.is_empty()), "run_id")?;
    super::validate::run_id(&run_id)?;
    // Nothing of it is told before `resolve` checks that the caller may
    // read the run (a run they may not see is not found, as one that is
    // not there).
    let run = state.store.get_run(&run_id).await?;
    let sub = q.path.unwrap_or_default();
    let sub = sub.trim_matches('/');
    let dir = resolve(
        &state,
        &principal,
        &format!("{}/{run_id}/artifacts/{sub}", run.info.experiment_id),
        Use::Read,
    )
    .await?;
    let prefix = if sub.is_empty() {
        String::new()
    } else {
        format!("{sub}/")
    };
    let mut out = json!({ "root_uri": run.info.artifact_uri });
    let files = entries(&dir, &prefix, MAX_LISTED).await?;
    if !files.is_empty() {
        out["files"] = Value::Array(files);
    }
    Ok(axum::Json(out))
}

async fn download(
    State(state): State<AppState>,
    Caller(principal): Caller,
    UrlPath(path): UrlPath<String>,
    request: Request,
) -> Result<Response, ApiError> {
    let file = resolve(&state, &principal, &path, Use::Read).await?;
    let meta = tokio::fs::metadata(&file)
        .await
        .map_err(|_| ApiError::not_found(format!("No such artifact: '{path}'")))?;
    if meta.is_dir() {
        return Err(ApiError::invalid(format!(
            "'{path}' is a folder; list it instead"
        )));
    }
    let name = file
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut response = ServeFile::new(&file)
        .oneshot(request)
        .await
        .map_err(|e| ApiError::invalid(format!("cannot read '{path}': {e}")))?
        .into_response();
    if let Ok(value) = HeaderValue::from_str(&attachment(&name)) {
        response
            .headers_mut()
            .insert(header::CONTENT_DISPOSITION, value);
    }
    // Artifacts are what jobs and clients wrote, served from the pages'
    // origin: never something the browser runs. As bytes with nosniff, a
    // `.js` artifact cannot be loaded by a `<script>` (nor a `.css` as a
    // style sheet), and opened directly it is sandboxed, with no origin.
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static("sandbox; default-src 'none'"),
    );
    Ok(response)
}

async fn upload(
    State(state): State<AppState>,
    Caller(principal): Caller,
    axum::Extension(UploadLimit(limit)): axum::Extension<UploadLimit>,
    UrlPath(path): UrlPath<String>,
    headers: axum::http::HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    // What the client says it sends (the mlflow client says), else a byte.
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
        .unwrap_or(1);
    let target = resolve(&state, &principal, &path, Use::Write).await?;
    let owner = run_owner(&state, &path).await?;
    store_file(
        &state,
        owner,
        &target,
        &path,
        declared,
        limit,
        body.into_data_stream(),
    )
    .await?;
    index_if_trace_file(&state, &path).await;
    Ok((StatusCode::OK, axum::Json(json!({}))).into_response())
}

/// Writes what `body` streams as the artifact `target` (named `path` to
/// the client), at most `limit` bytes and what the owner's quota leaves,
/// beside it first and then renamed into place; Ok is the bytes written.
pub(super) async fn store_file<S, E>(
    state: &AppState,
    owner: Option<i64>,
    target: &Path,
    path: &str,
    declared: u64,
    limit: usize,
    body: S,
) -> Result<usize, ApiError>
where
    S: futures::Stream<Item = Result<axum::body::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let parent = target
        .parent()
        .map(Path::to_path_buf)
        .ok_or_else(|| ApiError::invalid("empty artifact path"))?;
    let file_name = target
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    // One write or removal of the owner's at a time: the check, the write
    // and the count stay true together.
    let _turn = match owner {
        Some(owner) => Some(state.artifact_usage.turn(owner).await),
        None => None,
    };
    // Its run may have been deleted forever while this waited: its
    // folder is not made again. (A trace's file may come before its
    // trace's record; models and traces are not deleted forever here.)
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if owner.is_some()
        && let [_, run, "artifacts", ..] = segments.as_slice()
        && !matches!(*run, "models" | "traces")
    {
        state.store.run_owner(run).await?;
    }
    tokio::fs::create_dir_all(&parent).await.map_err(io_error)?;
    if tokio::fs::metadata(target).await.is_ok_and(|m| m.is_dir()) {
        return Err(ApiError::invalid(format!(
            "'{path}' is a folder; it cannot be overwritten by a file"
        )));
    }
    let replaced = tokio::fs::metadata(target).await.map_or(0, |m| m.len());
    // The room the owner's quota leaves: what this file replaces is freed.
    let quota = match (state.artifact_quota_bytes, owner) {
        (Some(quota), Some(owner)) => {
            let usage = &state.artifact_usage;
            let mut used = usage
                .used(&state.store, &state.artifact_root, owner)
                .await?;
            let refuses =
                |used: u64| used.saturating_add(declared) > quota.saturating_add(replaced);
            if refuses(used) && usage.may_recount(owner) {
                // A refusal is never made on a count that may have drifted
                // (files removed by another process or by hand): count
                // from disk first.
                usage.forget(owner);
                used = usage
                    .used(&state.store, &state.artifact_root, owner)
                    .await?;
                if refuses(used) {
                    usage.refused(owner);
                }
            }
            Some((
                quota,
                used,
                quota.saturating_add(replaced).saturating_sub(used),
            ))
        }
        _ => None,
    };
    let over_quota = |(quota, used, _): (u64, u64, u64)| {
        crate::quota::exhausted(
            "the artifacts of the runs of this run's owner",
            crate::quota::Unit::Bytes,
            used,
            None,
            quota,
            "artifact_quota_bytes",
            "deleted runs still hold theirs until deleted forever (the experiment's Deleted runs → Delete them all forever); delete artifacts no longer needed (DELETE on the artifact's path), or ask an admin to raise the quota",
        )
    };
    let room = quota.map_or(usize::MAX, |(_, _, room)| {
        usize::try_from(room).unwrap_or(usize::MAX)
    });
    if room == 0 {
        return Err(over_quota(quota.expect("room is bounded by a quota")));
    }
    // Write beside the target, then rename: a reader never sees half a file,
    // and a failed upload leaves the previous version in place.
    let temp = parent.join(format!(".upload-{}-{file_name}", uuid_like()));
    let result = write_limited(&temp, body, limit.min(room)).await;
    let written = match result {
        Ok(written) => written,
        Err(err) => {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(match quota {
                Some(q) if room < limit && err.status == StatusCode::PAYLOAD_TOO_LARGE => {
                    // Counted from disk again before the next write of
                    // theirs (this one did not say its size).
                    if let Some(owner) = owner {
                        state.artifact_usage.forget(owner);
                    }
                    over_quota(q)
                }
                _ => err,
            });
        }
    };
    // A trace's spans: those the file holds stay beside those written now
    // (the spans that other processes of the trace sent to /v1/traces).
    let written = match trace_file(path) {
        Some((experiment, trace_id)) => {
            match merge_trace_file(state, experiment, trace_id, &temp, written).await {
                Ok(merged) if merged <= room => merged,
                Ok(_) => {
                    let _ = tokio::fs::remove_file(&temp).await;
                    return Err(over_quota(quota.expect("room is bounded by a quota")));
                }
                Err(err) => {
                    let _ = tokio::fs::remove_file(&temp).await;
                    return Err(err);
                }
            }
        }
        None => written,
    };
    tokio::fs::rename(&temp, target).await.map_err(io_error)?;
    if let Some(owner) = owner {
        state
            .artifact_usage
            .add(owner, written as i64 - replaced as i64);
    }
    Ok(written)
}

/// The experiment and trace of a trace's `traces.json` at `path`.
fn trace_file(path: &str) -> Option<(i64, &str)> {
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    match segments.as_slice() {
        [experiment, "traces", trace_id, "artifacts", "traces.json"] => {
            Some((experiment.parse().ok()?, *trace_id))
        }
        _ => None,
    }
}

/// A trace's spans, kept for search once its `traces.json` at `path` is
/// written (after the owner's write turn: their next write need not wait).
pub(super) async fn index_if_trace_file(state: &AppState, path: &str) {
    if let Some((experiment, trace_id)) = trace_file(path)
        && let Err(e) = super::traces::index_spans(
            &state.store,
            &state.artifact_root,
            experiment,
            trace_id,
            false,
        )
        .await
    {
        tracing::warn!(trace = %trace_id, error = %e, "could not keep a trace's spans for search");
    }
}

/// A trace's `traces.json` about to be written (`temp`, `written` bytes)
/// with the spans of the one in place that it lacks, written back into
/// `temp`; Ok is its size then. A file past the bounds of a trace's spans
/// (bytes or JSON values), or not `{"spans": [...]}`, is replaced as it is.
async fn merge_trace_file(
    state: &AppState,
    experiment: i64,
    trace_id: &str,
    temp: &Path,
    written: usize,
) -> Result<usize, ApiError> {
    use trainyard_domain::explorer::{MAX_JSON_VALUES, MAX_TRACE_FILE, json_values};
    if written as u64 > MAX_TRACE_FILE {
        return Ok(written);
    }
    let existing = match trainyard_app::explorer::models::read_trace_file(
        &state.artifact_root,
        experiment,
        trace_id,
    )
    .await
    {
        Ok(Some(bytes)) => bytes,
        _ => return Ok(written),
    };
    let incoming = tokio::fs::read(temp).await.map_err(io_error)?;
    if json_values(&incoming) > MAX_JSON_VALUES {
        return Ok(written);
    }
    // Parsed off the async threads: two files of up to 16 MiB.
    let merged = tokio::task::spawn_blocking(move || {
        let existing = serde_json::from_slice(&existing).ok()?;
        let incoming = serde_json::from_slice(&incoming).ok()?;
        super::otlp::merge_spans(existing, incoming).and_then(|v| serde_json::to_vec(&v).ok())
    })
    .await
    .map_err(ApiError::internal)?;
    let Some(merged) = merged else {
        return Ok(written);
    };
    if merged.len() as u64 > MAX_TRACE_FILE {
        return Err(super::otlp::full(trace_id));
    }
    let mut file = tokio::fs::File::create(temp).await.map_err(io_error)?;
    file.write_all(&merged).await.map_err(io_error)?;
    file.sync_all().await.map_err(io_error)?;
    Ok(merged.len())
}

/// The account a run's (or a model's) artifacts count against: its owner.
pub(super) async fn run_owner(state: &AppState, path: &str) -> Result<Option<i64>, ApiError> {
    // `resolve` checked the path: experiment, run, "artifacts", … or
    // experiment, "models", model, "artifacts", …
    let segments: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    if let [_, "models", model_id, ..] = segments.as_slice() {
        return Ok(state.store.logged_model_owner(model_id).await?.user_id);
    }
    if let [_, "traces", trace_id, ..] = segments.as_slice() {
        return Ok(state.store.trace_place(trace_id).await?.1.user_id);
    }
    let run = segments.get(1).copied().unwrap_or_default();
    Ok(state.store.run_owner(run).await?.user_id)
}

/// Streams the body into `temp`; Ok is the bytes written, 413 past `limit`.
async fn write_limited<S, E>(temp: &Path, mut stream: S, limit: usize) -> Result<usize, ApiError>
where
    S: futures::Stream<Item = Result<axum::body::Bytes, E>> + Unpin,
    E: std::fmt::Display,
{
    let mut file = tokio::fs::File::create(temp).await.map_err(io_error)?;
    let mut written = 0usize;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid(format!("the upload was interrupted: {e}")))?;
        written += chunk.len();
        if written > limit {
            return Err(ApiError::too_large(limit));
        }
        file.write_all(&chunk).await.map_err(io_error)?;
    }
    file.sync_all().await.map_err(io_error)?;
    Ok(written)
}

async fn remove(
    State(state): State<AppState>,
    Caller(principal): Caller,
    UrlPath(path): UrlPath<String>,
) -> Result<axum::Json<Value>, ApiError> {
    let target = resolve(&state, &principal, &path, Use::Write).await?;
    let owner = run_owner(&state, &path).await?;
    let _turn = match owner {
        Some(owner) => Some(state.artifact_usage.turn(owner).await),
        None => None,
    };
    let sized = target.clone();
    let freed = tokio::task::spawn_blocking(move || crate::quota::size_of_tree(&sized))
        .await
        .map_err(ApiError::internal)?;
    match tokio::fs::metadata(&target).await {
        Ok(meta) if meta.is_dir() => tokio::fs::remove_dir_all(&target).await.map_err(io_error)?,
        Ok(_) => tokio::fs::remove_file(&target).await.map_err(io_error)?,
        Err(_) => return Ok(axum::Json(json!({}))),
    }
    // Counted once removed, and only what was.
    if let Some(owner) = owner {
        state.artifact_usage.add(owner, -(freed as i64));
    }
    Ok(axum::Json(json!({})))
}

pub(super) fn io_error(err: std::io::Error) -> ApiError {
    tracing::error!(error = %err, "artifact storage error");
    ApiError {
        status: StatusCode::INTERNAL_SERVER_ERROR,
        code: "INTERNAL_ERROR",
        message: format!("artifact storage failed: {err}"),
    }
}

/// `Content-Disposition` for a download named `name`: an ASCII `filename`
/// (other characters as `_`) for old clients, and the name itself in UTF-8
/// as `filename*` (RFC 6266), which browsers and curl prefer.
pub fn attachment(name: &str) -> String {
    let ascii: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let mut encoded = String::with_capacity(name.len() * 3);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"!#$&+-.^_`|~".contains(&b) {
            encoded.push(b as char);
        } else {
            encoded.push_str(&format!("%{b:02X}"));
        }
    }
    format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{encoded}")
}

fn uuid_like() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        trainyard_store::now_millis(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downloads_keep_their_names_in_any_script() {
        assert_eq!(
            super::attachment("model.pkl"),
            "attachment; filename=\"model.pkl\"; filename*=UTF-8''model.pkl"
        );
        assert_eq!(
            super::attachment("résumé \"final\".csv"),
            "attachment; filename=\"r_sum_ _final_.csv\"; filename*=UTF-8''r%C3%A9sum%C3%A9%20%22final%22.csv"
        );
    }

    #[tokio::test]
    async fn a_listing_is_bounded_and_skips_uploads_under_way() {
        let dir = tempfile::tempdir().unwrap();
        for name in ["b.txt", "a.txt", ".upload-x"] {
            std::fs::write(dir.path().join(name), b"x").unwrap();
        }
        std::fs::write(dir.path().join("empty"), b"").unwrap();
        std::fs::create_dir(dir.path().join("sub")).unwrap();
        let listed = entries(dir.path(), "p/", 4).await.unwrap();
        let paths: Vec<&str> = listed.iter().map(|f| f["path"].as_str().unwrap()).collect();
        assert_eq!(paths, ["p/a.txt", "p/b.txt", "p/empty", "p/sub"]);
        assert_eq!(listed[0]["file_size"], 1);
        assert_eq!(listed[2]["file_size"], 0, "an empty file has its size too");
        assert_eq!(listed[3].get("file_size"), None, "a folder has none");
        let over = entries(dir.path(), "p/", 3).await.unwrap_err();
        assert!(
            over.message.contains("more than 3 entries"),
            "{}",
            over.message
        );
    }
}
