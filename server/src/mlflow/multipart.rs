//! The mlflow-artifacts multipart upload (`mpu/create`, `mpu/complete`,
//! `mpu/abort`), which the mlflow client uses for a large artifact when
//! `MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD` is set: it asks for one URL per
//! part, PUTs the parts to those URLs from several threads (without its
//! credentials, as it would to S3; the server writes one part of an upload
//! at a time), then completes.
//!
//! A part URL carries the upload's id, 32 random bytes, which only the
//! creator learns: it is the part's credential. Parts are kept under
//! `<artifact_root>/.multipart/<id>/` until the upload completes (the parts
//! are joined into the artifact with the artifact's limits and its owner's
//! quota), is aborted, or is 24 hours old. Each person has at most
//! [`MAX_OPEN_UPLOADS`] open, and one upload's parts together hold at most
//! `artifact_max_bytes`, the most a single artifact may.

use std::path::{Path, PathBuf};

use axum::extract::{OriginalUri, Path as UrlPath, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{StreamExt, TryStreamExt};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;

use super::artifacts::{UploadLimit, Use, io_error, resolve, run_owner, store_file};
use super::request::Req;
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::Caller;

/// Parts one upload may have (S3's bound).
pub const MAX_PARTS: i64 = 10_000;

/// Uploads one person may have open at once.
pub const MAX_OPEN_UPLOADS: usize = 8;

/// How long an upload waits for its parts and its completion.
pub const UPLOAD_LIFETIME_MS: i64 = 24 * 3600 * 1000;

/// Where the parts of open uploads wait.
fn uploads_root(state: &AppState) -> PathBuf {
    state.artifact_root.join(".multipart")
}

/// What is kept of an open upload, beside its parts.
#[derive(Serialize, Deserialize)]
struct Record {
    /// The person who created it: only they complete or abort it.
    user_id: i64,
    /// The artifact it makes, as the client names it.
    path: String,
    num_parts: i64,
    created_ms: i64,
}

const RECORD: &str = "upload.json";

/// An id is what [`trainyard_store::identity::random_secret`] makes.
fn valid_id(id: &str) -> bool {
    id.len() == 43
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
}

fn no_such_upload(id: &str) -> ApiError {
    ApiError::not_found(format!(
        "No multipart upload {id}: it was completed, aborted, or is more than 24 hours old; \
         upload the file again"
    ))
}

async fn read_record(dir: &Path, id: &str) -> Result<Record, ApiError> {
    let bytes = match tokio::fs::read(dir.join(RECORD)).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(no_such_upload(id)),
        Err(e) => return Err(io_error(e)),
    };
    let record: Record = serde_json::from_slice(&bytes).map_err(ApiError::internal)?;
    if trainyard_store::now_millis() - record.created_ms > UPLOAD_LIFETIME_MS {
        return Err(no_such_upload(id));
    }
    Ok(record)
}

/// The file name the client gives (its local path): the last component.
fn file_name(local: &str) -> Result<&str, ApiError> {
    let name = local.rsplit(['/', '\\']).next().unwrap_or_default();
    if name.is_empty() || name == "." || name == ".." {
        return Err(ApiError::invalid(format!(
            "Invalid path `{local}`: it must name a file"
        )));
    }
    Ok(name)
}

/// Where the client reached this server, for the part URLs: the Host it
/// sent (with the proxy's scheme when one says, else the public URL's),
/// else the public URL.
fn origin(state: &AppState, headers: &HeaderMap) -> String {
    let public = &state.auth.config.public_url;
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    match host {
        Some(host) if !host.is_empty() && !host.contains(['/', '\\', '@', ' ']) => {
            // The proxy's word, else the public URL's: a capability never
            // goes back over plain HTTP where people use HTTPS.
            let scheme = headers
                .get("x-forwarded-proto")
                .and_then(|v| v.to_str().ok())
                .filter(|s| matches!(*s, "http" | "https"))
                .unwrap_or(public.scheme());
            format!("{scheme}://{host}")
        }
        _ => public.origin().ascii_serialization(),
    }
}

#[derive(Deserialize)]
pub struct Create {
    path: Option<String>,
    #[serde(default, deserialize_with = "super::wire::opt_i64")]
    num_parts: Option<i64>,
}

/// `POST /mlflow-artifacts/mpu/create/<artifact folder>`.
pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    UrlPath(folder): UrlPath<String>,
    Req(req): Req<Create>,
) -> ApiResult {
    let local = super::wire::required(req.path, "path")?;
    let path = format!("{}/{}", folder.trim_end_matches('/'), file_name(&local)?);
    resolve(&state, &principal, &path, Use::Write).await?;
    let num_parts = req.num_parts.unwrap_or(1);
    if !(1..=MAX_PARTS).contains(&num_parts) {
        return Err(ApiError::invalid(format!(
            "num_parts must be between 1 and {MAX_PARTS}; got {num_parts}"
        )));
    }
    let root = uploads_root(&state);
    // One creation at a time: the count and the new upload stay true
    // together (two at once would both see room for one).
    static CREATES: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _creating = CREATES.lock().await;
    let open = sweep(&root, principal.user.id).await?;
    if open >= MAX_OPEN_UPLOADS {
        return Err(ApiError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "RESOURCE_EXHAUSTED",
            message: format!(
                "You have {open} multipart uploads open, the most one person may; \
                 complete or abort one (they also end 24 hours after they start)"
            ),
        });
    }
    let id = trainyard_store::identity::random_secret();
    let dir = root.join(&id);
    {
        use std::os::unix::fs::DirBuilderExt;
        let (root, dir) = (root.clone(), dir.clone());
        tokio::task::spawn_blocking(move || {
            std::fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(&root)?;
            std::fs::DirBuilder::new().mode(0o700).create(&dir)
        })
        .await
        .map_err(ApiError::internal)?
        .map_err(io_error)?;
    }
    let record = Record {
        user_id: principal.user.id,
        path,
        num_parts,
        created_ms: trainyard_store::now_millis(),
    };
    let bytes = serde_json::to_vec(&record).map_err(ApiError::internal)?;
    // Written beside and renamed: a sweep never reads half a record.
    let temp = dir.join(".upload.json");
    tokio::fs::write(&temp, bytes).await.map_err(io_error)?;
    tokio::fs::rename(&temp, dir.join(RECORD))
        .await
        .map_err(io_error)?;
    // The parts go where the client sent this: /api/… or /ajax-api/….
    let prefix = uri.path().split("/mpu/create/").next().unwrap_or_default();
    let base = format!("{}{prefix}/mpu/part/{id}", origin(&state, &headers));
    let credentials: Vec<Value> = (1..=num_parts)
        .map(|n| json!({"url": format!("{base}/{n}"), "part_number": n, "headers": {}}))
        .collect();
    Ok(axum::Json(
        json!({"upload_id": id, "credentials": credentials}),
    ))
}

/// Removes uploads past their lifetime; Ok is how many `user_id` has open.
async fn sweep(root: &Path, user_id: i64) -> Result<usize, ApiError> {
    let mut entries = match tokio::fs::read_dir(root).await {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(io_error(e)),
    };
    let mut open = 0;
    while let Some(entry) = entries.next_entry().await.map_err(io_error)? {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !valid_id(&name) {
            continue;
        }
        match read_record(&entry.path(), &name).await {
            Ok(record) => open += usize::from(record.user_id == user_id),
            // Being made right now: its record comes in a moment.
            Err(_) if is_recent(&entry).await => {}
            // Past its lifetime, or never finished being made.
            Err(_) => {
                if let Err(e) = tokio::fs::remove_dir_all(entry.path()).await {
                    tracing::warn!(error = %e, upload = %name, "cannot remove an expired multipart upload");
                }
            }
        }
    }
    Ok(open)
}

/// Whether a folder was made in the last minute.
async fn is_recent(entry: &tokio::fs::DirEntry) -> bool {
    entry
        .metadata()
        .await
        .ok()
        .and_then(|m| m.modified().ok())
        .and_then(|t| t.elapsed().ok())
        .is_some_and(|age| age < std::time::Duration::from_secs(60))
}

/// One part of an upload is written at a time, so that the parts together
/// stay within one artifact's limit (the parts of different uploads go on
/// side by side).
fn upload_turn(id: &str) -> std::sync::Arc<tokio::sync::Mutex<()>> {
    use std::collections::HashMap;
    use std::sync::{Arc, LazyLock, Mutex};
    static TURNS: LazyLock<Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
        LazyLock::new(Default::default);
    let mut turns = TURNS.lock().unwrap_or_else(|e| e.into_inner());
    // Turns nobody holds or waits for are dropped as new ones come.
    turns.retain(|_, turn| Arc::strong_count(turn) > 1);
    turns.entry(id.to_owned()).or_default().clone()
}

/// `PUT /mlflow-artifacts/mpu/part/<upload id>/<part number>`: the URL
/// is the credential.
pub async fn part(
    State(state): State<AppState>,
    axum::Extension(UploadLimit(limit)): axum::Extension<UploadLimit>,
    UrlPath((id, number)): UrlPath<(String, String)>,
    body: axum::body::Body,
) -> Result<Response, ApiError> {
    if !valid_id(&id) {
        return Err(no_such_upload(&id));
    }
    let dir = uploads_root(&state).join(&id);
    let record = read_record(&dir, &id).await?;
    let number: i64 = number
        .parse()
        .ok()
        .filter(|n| (1..=record.num_parts).contains(n))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "Invalid part number `{number}`: this upload has parts 1 to {}",
                record.num_parts
            ))
        })?;
    let turn = upload_turn(&id);
    let _turn = turn.lock().await;
    // Completed or aborted while this one waited.
    read_record(&dir, &id).await?;
    // The other parts and this one together: no more than one artifact.
    let mut others = 0u64;
    let mut entries = tokio::fs::read_dir(&dir).await.map_err(io_error)?;
    while let Some(entry) = entries.next_entry().await.map_err(io_error)? {
        let name = entry.file_name();
        if name.to_str() != Some(&format!("part-{number}"))
            && name.to_string_lossy().starts_with("part-")
        {
            others += entry.metadata().await.map_err(io_error)?.len();
        }
    }
    let room = (limit as u64).saturating_sub(others);
    let temp = dir.join(format!(
        "part-{number}.{}",
        &trainyard_store::identity::random_secret()[..12]
    ));
    let written = write_part(&temp, body, room).await;
    let written = match written {
        Ok(written) => written,
        Err(e) => {
            let _ = tokio::fs::remove_file(&temp).await;
            return Err(e);
        }
    };
    tokio::fs::rename(&temp, dir.join(format!("part-{number}")))
        .await
        .map_err(io_error)?;
    let etag =
        HeaderValue::from_str(&format!("\"{number}-{written}\"")).map_err(ApiError::internal)?;
    Ok((StatusCode::OK, [(header::ETAG, etag)]).into_response())
}

async fn write_part(temp: &Path, body: axum::body::Body, room: u64) -> Result<u64, ApiError> {
    let mut file = tokio::fs::File::create(temp).await.map_err(io_error)?;
    let mut stream = body.into_data_stream();
    let mut written = 0u64;
    while let Some(chunk) = stream.next().await {
        let chunk =
            chunk.map_err(|e| ApiError::invalid(format!("the upload was interrupted: {e}")))?;
        written += chunk.len() as u64;
        if written > room {
            return Err(ApiError {
                status: StatusCode::PAYLOAD_TOO_LARGE,
                code: "REQUEST_LIMIT_EXCEEDED",
                message: "the parts of this upload pass the most one artifact may hold \
                          (artifact_max_bytes); upload fewer or smaller parts"
                    .to_owned(),
            });
        }
        file.write_all(&chunk).await.map_err(io_error)?;
    }
    file.sync_all().await.map_err(io_error)?;
    Ok(written)
}

#[derive(Deserialize)]
pub struct PartIn {
    #[serde(default, deserialize_with = "super::wire::opt_i64")]
    part_number: Option<i64>,
}

#[derive(Deserialize)]
pub struct Complete {
    path: Option<String>,
    upload_id: Option<String>,
    #[serde(default)]
    parts: Vec<PartIn>,
}

/// The caller's open upload of `folder`/<name of `local`>.
async fn own_upload(
    state: &AppState,
    principal: &crate::auth::Principal,
    folder: &str,
    local: Option<String>,
    id: Option<String>,
) -> Result<(String, PathBuf, PathBuf, Record), ApiError> {
    let local = super::wire::required(local, "path")?;
    let id = super::wire::required(id, "upload_id")?;
    let path = format!("{}/{}", folder.trim_end_matches('/'), file_name(&local)?);
    let target = resolve(state, principal, &path, Use::Write).await?;
    if !valid_id(&id) {
        return Err(no_such_upload(&id));
    }
    let dir = uploads_root(state).join(&id);
    let record = read_record(&dir, &id).await?;
    if record.user_id != principal.user.id || record.path != path {
        return Err(no_such_upload(&id));
    }
    Ok((path, target, dir, record))
}

/// `POST /mlflow-artifacts/mpu/complete/<artifact folder>`: the parts,
/// in the order given, become the artifact.
pub async fn complete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    axum::Extension(UploadLimit(limit)): axum::Extension<UploadLimit>,
    UrlPath(folder): UrlPath<String>,
    Req(req): Req<Complete>,
) -> ApiResult {
    let (path, target, dir, record) =
        own_upload(&state, &principal, &folder, req.path, req.upload_id).await?;
    let turn = upload_turn(&dir.file_name().unwrap_or_default().to_string_lossy());
    let _turn = turn.lock().await;
    if req.parts.is_empty() {
        return Err(ApiError::invalid(
            "parts must list the uploaded parts (part_number and etag), in order",
        ));
    }
    let mut files = Vec::with_capacity(req.parts.len());
    let mut total = 0u64;
    let mut last = 0;
    for part in &req.parts {
        let number = super::wire::required(part.part_number, "parts.part_number")?;
        if number <= last || number > record.num_parts {
            return Err(ApiError::invalid(format!(
                "parts must be listed once each, in ascending order, from 1 to {}; \
                 part {number} is out of order",
                record.num_parts
            )));
        }
        last = number;
        let file = dir.join(format!("part-{number}"));
        match tokio::fs::metadata(&file).await {
            Ok(meta) => total += meta.len(),
            Err(_) => {
                return Err(ApiError::invalid(format!(
                    "part {number} was not uploaded; PUT it to its URL first"
                )));
            }
        }
        files.push(file);
    }
    let owner = run_owner(&state, &path).await?;
    let joined = futures::stream::iter(files)
        .then(|file| async move {
            tokio::fs::File::open(file)
                .await
                .map(tokio_util::io::ReaderStream::new)
        })
        .try_flatten();
    store_file(
        &state,
        owner,
        &target,
        &path,
        total,
        limit,
        Box::pin(joined),
    )
    .await?;
    super::artifacts::index_if_trace_file(&state, &path).await;
    tokio::fs::remove_dir_all(&dir).await.map_err(io_error)?;
    Ok(axum::Json(json!({})))
}

#[derive(Deserialize)]
pub struct Abort {
    path: Option<String>,
    upload_id: Option<String>,
}

/// `POST /mlflow-artifacts/mpu/abort/<artifact folder>`: its parts go.
pub async fn abort(
    State(state): State<AppState>,
    Caller(principal): Caller,
    UrlPath(folder): UrlPath<String>,
    Req(req): Req<Abort>,
) -> ApiResult {
    let (_, _, dir, _) = own_upload(&state, &principal, &folder, req.path, req.upload_id).await?;
    let turn = upload_turn(&dir.file_name().unwrap_or_default().to_string_lossy());
    let _turn = turn.lock().await;
    tokio::fs::remove_dir_all(&dir).await.map_err(io_error)?;
    Ok(axum::Json(json!({})))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_file_names_are_checked() {
        assert!(valid_id(&trainyard_store::identity::random_secret()));
        assert!(!valid_id("../../etc"));
        assert!(!valid_id(&"a".repeat(42)));
        assert_eq!(file_name("/tmp/x/model.bin").unwrap(), "model.bin");
        assert_eq!(file_name("C:\\data\\w.pt").unwrap(), "w.pt");
        assert!(file_name("/tmp/x/").is_err());
        assert!(file_name("..").is_err());
    }
}
