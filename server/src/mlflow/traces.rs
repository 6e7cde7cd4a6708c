//! MLflow 3's traces (`@mlflow.trace`, `mlflow.search_traces`): the v3
//! trace API under `/api/3.0/mlflow/traces`, tags and deletion under 2.0.
//! Spans are in each trace's `traces.json` artifact: the client writes it,
//! and spans sent to `/v1/traces` (OTLP, see `otlp.rs`) are merged into
//! it.

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_domain::identity::Via;
use trainyard_domain::query::{Scope, parse_filter, parse_order_by};
use trainyard_domain::tracking::TraceInfo;
use trainyard_store::traces::SOURCE_RUN_METADATA;
use trainyard_store::{Access, Viewer};

use super::request::Req;
use super::validate::{self, MAX_TAG_VALUE_LEN};
use super::wire::{self, opt_i64, parse_experiment_id, required};
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::{Caller, Principal, permission_denied};

/// Longest request or response preview kept, in characters.
const MAX_PREVIEW_CHARS: usize = 65_536;
/// Most tags or metadata entries one trace carries.
const MAX_TRACE_KEYS: usize = 1000;

/// A protobuf JSON timestamp (`2026-12-02T22:38:39.681Z`) in ms.
fn parse_time(text: &str) -> Result<i64, ApiError> {
    chrono::DateTime::parse_from_rfc3339(text.trim())
        .map(|t| t.timestamp_millis())
        .map_err(|_| {
            ApiError::invalid(format!(
                "Invalid 'request_time' `{text}`: use RFC 3339, e.g. 2026-12-02T22:38:39.681Z"
            ))
        })
}

pub(super) fn format_time(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.3fZ").to_string())
        .unwrap_or_default()
}

/// A protobuf JSON duration (`0.023s`) in ms.
fn parse_duration(text: &str) -> Result<i64, ApiError> {
    // A century at most: the end (request time + duration) stays a number
    // the databases can add and compare.
    const MAX_SECS: f64 = 100.0 * 366.0 * 86_400.0;
    text.trim()
        .strip_suffix('s')
        .and_then(|n| n.parse::<f64>().ok())
        .filter(|s| s.is_finite() && (0.0..=MAX_SECS).contains(s))
        .map(|s| (s * 1000.0).round() as i64)
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "Invalid 'execution_duration' `{text}`: use seconds with an s, e.g. 0.023s, at most a century"
            ))
        })
}

pub fn trace_info_json(t: &TraceInfo) -> Value {
    let map = |pairs: &[(String, String)]| -> Value {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(v.clone())))
            .collect::<serde_json::Map<_, _>>()
            .into()
    };
    let mut out = json!({
        "trace_id": t.trace_id,
        "trace_location": {
            "type": "MLFLOW_EXPERIMENT",
            "mlflow_experiment": { "experiment_id": t.experiment_id.to_string() },
        },
        "request_time": format_time(t.request_time),
        "state": t.state,
        "trace_metadata": map(&t.metadata),
        "tags": map(&t.tags),
    });
    // As MLflow's protocol writes them: an empty preview is left out, and
    // the client reads None.
    for (field, text) in [
        ("request_preview", &t.request_preview),
        ("response_preview", &t.response_preview),
    ] {
        if !text.is_empty() {
            out[field] = json!(text);
        }
    }
    if let Some(ms) = t.execution_time {
        out["execution_duration"] = json!(format!("{}s", ms as f64 / 1000.0));
    }
    if let Some(id) = &t.client_request_id {
        out["client_request_id"] = json!(id);
    }
    if !t.assessments.is_empty() {
        out["assessments"] = t
            .assessments
            .iter()
            .map(super::assessments::assessment_json)
            .collect::<Vec<_>>()
            .into();
    }
    out
}

#[derive(Deserialize)]
pub struct ExperimentLocation {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
}

#[derive(Deserialize)]
pub struct Location {
    mlflow_experiment: Option<ExperimentLocation>,
}

#[derive(Deserialize)]
pub struct InfoBody {
    trace_id: Option<String>,
    trace_location: Option<Location>,
    request_time: Option<String>,
    execution_duration: Option<String>,
    state: Option<String>,
    #[serde(default)]
    trace_metadata: BTreeMap<String, String>,
    #[serde(default)]
    tags: BTreeMap<String, String>,
    request_preview: Option<String>,
    response_preview: Option<String>,
    client_request_id: Option<String>,
}

#[derive(Deserialize)]
pub struct TraceBody {
    trace_info: Option<InfoBody>,
}

#[derive(Deserialize)]
pub struct Start {
    trace: Option<TraceBody>,
}

fn preview(text: Option<String>) -> String {
    let text = text.unwrap_or_default();
    if text.chars().count() <= MAX_PREVIEW_CHARS {
        text
    } else {
        text.chars().take(MAX_PREVIEW_CHARS).collect()
    }
}

fn pairs(map: BTreeMap<String, String>, what: &str) -> Result<Vec<(String, String)>, ApiError> {
    pairs_of(map, "A trace", what, MAX_TRACE_KEYS)
}

/// Key-value pairs that `owner` ("A trace") carries, checked: at most
/// `limit`, keys of 1 to 250 characters, values within the tag bound.
pub(super) fn pairs_of(
    map: BTreeMap<String, String>,
    owner: &str,
    what: &str,
    limit: usize,
) -> Result<Vec<(String, String)>, ApiError> {
    if map.len() > limit {
        return Err(ApiError::invalid(format!(
            "{owner} can carry at most {limit} {what}; got {}",
            map.len()
        )));
    }
    for (key, value) in &map {
        if key.contains('\0') || value.contains('\0') {
            return Err(ApiError::invalid(format!(
                "{owner}'s {what} `{}` holds a NUL character, which cannot be stored; remove it",
                key.replace('\0', "\\0")
            )));
        }
        if key.is_empty() || key.chars().count() > 250 {
            return Err(ApiError::invalid(format!(
                "Invalid {what} key `{key}`: 1 to 250 characters"
            )));
        }
        validate::value(value, MAX_TAG_VALUE_LEN, what, key)?;
    }
    Ok(map.into_iter().collect())
}

/// `POST /api/3.0/mlflow/traces`: a finished trace's summary.
pub async fn start(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Start>,
) -> ApiResult {
    let info = required(req.trace.and_then(|t| t.trace_info), "trace.trace_info")?;
    let trace_id = required(
        info.trace_id.filter(|t| !t.is_empty()),
        "trace_info.trace_id",
    )?;
    let valid_id = trace_id.len() <= 64
        && trace_id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if !valid_id {
        return Err(ApiError::invalid(format!(
            "Invalid trace_id `{trace_id}`: letters, digits, - and _, at most 64"
        )));
    }
    let experiment_id = parse_experiment_id(&required(
        info.trace_location
            .and_then(|l| l.mlflow_experiment)
            .and_then(|e| e.experiment_id),
        "trace_info.trace_location.mlflow_experiment.experiment_id",
    )?)?;
    let request_time = parse_time(&required(info.request_time, "trace_info.request_time")?)?;
    let execution_time = info
        .execution_duration
        .as_deref()
        .map(parse_duration)
        .transpose()?;
    let trace_state = info.state.unwrap_or_else(|| "STATE_UNSPECIFIED".to_owned());
    if !matches!(
        trace_state.as_str(),
        "OK" | "ERROR" | "IN_PROGRESS" | "STATE_UNSPECIFIED"
    ) {
        return Err(ApiError::invalid(format!(
            "Invalid trace state `{trace_state}`: use OK, ERROR or IN_PROGRESS"
        )));
    }
    state
        .store
        .may_add_runs(&principal.user, experiment_id)
        .await?;
    let mut metadata = info.trace_metadata;
    // A job's token files its traces under its own run (those made outside
    // `mlflow.start_run()` too), in that run's experiment.
    if let Via::RunToken { run_id } = &principal.via {
        if let Some(other) = metadata.get(SOURCE_RUN_METADATA).filter(|r| *r != run_id) {
            return Err(permission_denied(format!(
                "a job's token writes the traces of its own run {run_id} only, not of run {other}"
            )));
        }
        if state.store.run_experiment(run_id).await? != Some(experiment_id) {
            return Err(permission_denied(format!(
                "a job's token writes traces to the experiment of its run {run_id} only"
            )));
        }
        // A trace that is already kept (its spans came first, over OTLP)
        // is completed only by the run it is filed under.
        match state.store.trace_place(&trace_id).await {
            Ok(_) => job_may_write(&state, &principal, &trace_id).await?,
            Err(trainyard_store::StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        metadata.insert(SOURCE_RUN_METADATA.to_owned(), run_id.clone());
    }
    let saved = state
        .store
        .start_trace(
            TraceInfo {
                trace_id,
                experiment_id,
                request_time,
                execution_time,
                state: trace_state,
                request_preview: preview(info.request_preview),
                response_preview: preview(info.response_preview),
                client_request_id: info.client_request_id.filter(|c| !c.is_empty()),
                metadata: pairs(metadata, "metadata")?,
                tags: pairs(info.tags, "tags")?,
                assessments: Vec::new(),
            },
            principal.user.as_owner(),
        )
        .await?;
    Ok(Json(
        json!({ "trace": { "trace_info": trace_info_json(&saved) } }),
    ))
}

/// A job's token writes to a trace (its `traces.json`, its assessments)
/// only where the trace is filed under the token's run; anyone else is
/// held to the owner rules alone.
pub(super) async fn job_may_write(
    state: &AppState,
    principal: &Principal,
    trace_id: &str,
) -> Result<(), ApiError> {
    let Via::RunToken { run_id } = &principal.via else {
        return Ok(());
    };
    if state.store.trace_run(trace_id).await?.as_deref() != Some(run_id.as_str()) {
        return Err(permission_denied(format!(
            "a job's token writes to the traces of its own run {run_id} only"
        )));
    }
    Ok(())
}

/// `GET /api/3.0/mlflow/traces/{trace_id}`: one trace's summary.
pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(trace_id): Path<String>,
) -> ApiResult {
    state
        .store
        .trace_as(&principal.user, &trace_id, Access::Read)
        .await?;
    let info = state.store.get_trace_info(&trace_id).await?;
    Ok(Json(
        json!({ "trace": { "trace_info": trace_info_json(&info) } }),
    ))
}

#[derive(Deserialize)]
pub struct Search {
    #[serde(default, deserialize_with = "wire::list")]
    locations: Vec<Location>,
    #[serde(default, deserialize_with = "wire::id_list")]
    experiment_ids: Vec<String>,
    filter: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    #[serde(default, deserialize_with = "wire::list")]
    order_by: Vec<String>,
    page_token: Option<String>,
}

/// `POST /api/3.0/mlflow/traces/search`.
pub async fn search(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Search>,
) -> ApiResult {
    let named: Vec<String> = req
        .locations
        .into_iter()
        .filter_map(|l| l.mlflow_experiment.and_then(|e| e.experiment_id))
        .chain(req.experiment_ids)
        .collect();
    let experiment_ids = wire::experiment_ids(&named, "locations")?;
    let limit = wire::max_results(req.max_results, 100, 1000)?;
    let offset = wire::parse_page_token(req.page_token.as_deref())?;
    let filter = parse_filter(req.filter.as_deref().unwrap_or(""), Scope::Traces)
        .map_err(|e| ApiError::invalid(format!("Invalid filter: {e}")))?;
    wire::order_by_bound(&req.order_by)?;
    let order = req
        .order_by
        .iter()
        .map(|o| {
            parse_order_by(o, Scope::Traces)
                .map_err(|e| ApiError::invalid(format!("Invalid order_by `{o}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let found = state
        .store
        .search_traces(
            &experiment_ids,
            filter.as_ref(),
            &order,
            limit + 1,
            offset,
            &Viewer::of(&principal.user),
        )
        .await?;
    let carried = found.traces.len() as u64;
    let mut page = wire::page(found.traces, limit, offset, "traces", trace_info_json);
    // Ended early on the text its traces carry: the next page goes on
    // from there.
    if found.cut {
        page["next_page_token"] = json!(wire::page_token(offset + carried));
    }
    Ok(Json(page))
}

#[derive(Deserialize)]
pub struct Tag {
    key: Option<String>,
    value: Option<String>,
}

/// `PATCH /api/2.0/mlflow/traces/{id}/tags`.
pub async fn set_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(trace_id): Path<String>,
    Req(req): Req<Tag>,
) -> ApiResult {
    let key = required(req.key.filter(|k| !k.is_empty()), "key")?;
    let value = req.value.unwrap_or_default();
    validate::value(&value, MAX_TAG_VALUE_LEN, "Tag", &key)?;
    if key.chars().count() > 250 {
        return Err(ApiError::invalid("'key' is longer than 250 characters"));
    }
    state
        .store
        .trace_as(&principal.user, &trace_id, Access::Change)
        .await?;
    state.store.set_trace_tag(&trace_id, &key, &value).await?;
    Ok(Json(json!({})))
}

/// `DELETE /api/2.0/mlflow/traces/{id}/tags`.
pub async fn delete_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(trace_id): Path<String>,
    Req(req): Req<Tag>,
) -> ApiResult {
    let key = required(req.key, "key")?;
    state
        .store
        .trace_as(&principal.user, &trace_id, Access::Change)
        .await?;
    state.store.delete_trace_tag(&trace_id, &key).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct Delete {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_timestamp_millis: Option<i64>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_traces: Option<i64>,
    #[serde(default, deserialize_with = "wire::list")]
    request_ids: Vec<String>,
}

/// Traces one page of a deletion reads and deletes.
const DELETE_PAGE: u64 = 1000;

/// `POST /api/2.0/mlflow/traces/delete-traces`: by ids, or older than a time.
pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Delete>,
) -> ApiResult {
    let experiment_id = parse_experiment_id(&required(req.experiment_id, "experiment_id")?)?;
    if req.request_ids.is_empty() == req.max_timestamp_millis.is_none() {
        return Err(ApiError::invalid(
            "Give either request_ids or max_timestamp_millis (with max_traces if you like), not both and not neither",
        ));
    }
    if req.request_ids.len() > 10_000 {
        return Err(ApiError::invalid(
            "A request can delete at most 10000 traces by id; split it up",
        ));
    }
    let named = !req.request_ids.is_empty();
    let mut left = req.max_traces.filter(|n| *n > 0).map(|n| n as u64);
    let mut after: Option<(i64, String)> = None;
    let mut deleted = 0;
    // In pages, oldest first, so an old experiment's thousands of traces
    // are neither held at once nor checked one query each.
    // Named traces (at most 10,000) are one page: all are checked before
    // any is deleted.
    let page_size = if named { 10_000 } else { DELETE_PAGE };
    // By age, only the caller's own traces can go (an admin's: all), so
    // only those are read: a shared experiment may hold millions of others'.
    let only_of = (!named && !principal.user.is_admin).then_some(principal.user.id);
    loop {
        let limit = left.map_or(page_size, |n| n.min(page_size));
        if limit == 0 {
            break;
        }
        let page = state
            .store
            .traces_to_delete(
                experiment_id,
                req.max_timestamp_millis,
                &req.request_ids,
                after.as_ref().map(|(time, id)| (*time, id.as_str())),
                only_of,
                limit,
            )
            .await?;
        let Some(last) = page.last() else { break };
        after = Some((last.request_time, last.id.clone()));
        left = left.map(|n| n.saturating_sub(page.len() as u64));
        // Only what the caller may change: a trace they may not see is
        // passed over as if it did not exist. One they may see but not
        // change is refused when named, and passed over by a deletion by
        // age (a team's experiment holds the others' traces too).
        let mut mine = Vec::with_capacity(page.len());
        for trace in &page {
            if !principal.user.can_read(trace.owner) {
                continue;
            }
            if !principal.user.can_change(trace.owner) {
                if named {
                    return Err(trainyard_store::StoreError::Forbidden(format!(
                        "trace {} is not yours: only its owner or an admin may delete it",
                        trace.id
                    ))
                    .into());
                }
                continue;
            }
            mine.push(trace);
        }
        let ids: Vec<String> = mine.iter().map(|t| t.id.clone()).collect();
        if !ids.is_empty() {
            deleted += state.store.delete_traces(&ids).await?;
        }
        // Their files go with them, and their owners' artifacts are
        // counted again.
        for trace in &mine {
            let folder = state
                .artifact_root
                .join(experiment_id.to_string())
                .join("traces")
                .join(&trace.id);
            match tokio::fs::remove_dir_all(&folder).await {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    tracing::warn!(error = %e, folder = %folder.display(), "cannot remove a deleted trace's files")
                }
            }
            if let Some(owner) = trace.owner.user_id {
                state.artifact_usage.forget(owner);
            }
        }
        if (page.len() as u64) < limit {
            break;
        }
    }
    Ok(Json(json!({ "traces_deleted": deleted })))
}

#[derive(Deserialize)]
pub struct Link {
    #[serde(default, deserialize_with = "wire::list")]
    trace_ids: Vec<String>,
    run_id: Option<String>,
}

/// `POST /api/2.0/mlflow/traces/link-to-run`.
pub async fn link_to_run(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Link>,
) -> ApiResult {
    let run_id = required(req.run_id, "run_id")?;
    validate::run_id(&run_id)?;
    if req.trace_ids.len() > 100 {
        return Err(ApiError::invalid(
            "At most 100 traces can be linked to a run at once",
        ));
    }
    super::may_change_run(&state, &principal, &run_id).await?;
    for id in &req.trace_ids {
        state
            .store
            .trace_as(&principal.user, id, Access::Change)
            .await?;
        job_may_write(&state, &principal, id).await?;
    }
    state
        .store
        .link_traces_to_run(&req.trace_ids, &run_id)
        .await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct PromptRef {
    name: Option<String>,
    version: Option<Value>,
}

#[derive(Deserialize)]
pub struct LinkPrompts {
    trace_id: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    prompt_versions: Vec<PromptRef>,
}

/// Most prompt versions one request links.
const MAX_PROMPT_LINKS: usize = 100;

/// `POST /api/2.0/mlflow/traces/link-prompts`: the prompt versions a trace
/// used (`mlflow.genai.load_prompt` in a traced function), which the client
/// links as it exports the trace; `search_traces` then finds the traces of
/// one (`prompt = "name/version"`).
pub async fn link_prompts(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LinkPrompts>,
) -> ApiResult {
    let trace_id = required(req.trace_id.filter(|t| !t.is_empty()), "trace_id")?;
    if req.prompt_versions.len() > MAX_PROMPT_LINKS {
        return Err(ApiError::invalid(format!(
            "'prompt_versions' holds {}; link at most {MAX_PROMPT_LINKS} at once",
            req.prompt_versions.len()
        )));
    }
    let mut prompts = Vec::with_capacity(req.prompt_versions.len());
    for (i, p) in req.prompt_versions.into_iter().enumerate() {
        let name = p
            .name
            .filter(|n| !n.trim().is_empty())
            .ok_or_else(|| ApiError::invalid(format!("'prompt_versions[{i}].name' is required")))?;
        let version = match p.version {
            Some(Value::String(v)) => v,
            Some(Value::Number(n)) => n.to_string(),
            _ => {
                return Err(ApiError::invalid(format!(
                    "'prompt_versions[{i}].version' is required: the version's number"
                )));
            }
        };
        if name.contains('/') || name.contains('\0') || name.chars().count() > 256 {
            return Err(ApiError::invalid(format!(
                "'prompt_versions[{i}].name' `{name}` is not a prompt's name: at most 256 characters, no '/'"
            )));
        }
        // Versions are numbers: `02` is version 2, as search writes it.
        let Some(number) = version.trim().parse::<u32>().ok().filter(|v| *v > 0) else {
            return Err(ApiError::invalid(format!(
                "'prompt_versions[{i}].version' `{version}` is not a version number"
            )));
        };
        prompts.push(format!("{name}/{number}"));
    }
    state
        .store
        .trace_as(&principal.user, &trace_id, Access::Change)
        .await?;
    job_may_write(&state, &principal, &trace_id).await?;
    state
        .store
        .link_prompts_to_trace(&trace_id, &prompts)
        .await?;
    Ok(Json(json!({})))
}

/// Reads a trace's `traces.json` and keeps its spans for `search_traces`
/// (`span.name = …`, `trace.text LIKE …`). A file too large or not JSON is
/// kept as it is, and its spans are not searchable (said in the log); a
/// missing file holds no spans until it is written. With `if_unread` (the
/// traces kept before spans were searched), a trace already read is left
/// as it is, and one without a file stays unread: a trace started while
/// the server started has its file written later, and one put in place
/// behind the server's back is read at the next start. Ok is whether
/// there was a file.
pub async fn index_spans(
    store: &trainyard_store::Store,
    artifact_root: &std::path::Path,
    experiment_id: i64,
    trace_id: &str,
    if_unread: bool,
) -> Result<bool, trainyard_store::StoreError> {
    use trainyard_app::explorer::models::read_trace_file;
    use trainyard_store::spans::{SearchSpans, search_spans};
    let bytes = match read_trace_file(artifact_root, experiment_id, trace_id).await {
        Ok(Some(bytes)) => Some(bytes),
        Ok(None) => {
            tracing::warn!(
                trace = trace_id,
                "a trace's traces.json is larger than {} MiB or holds more than {} JSON values: its spans are kept but not searched",
                trainyard_domain::explorer::MAX_TRACE_FILE >> 20,
                trainyard_domain::explorer::MAX_JSON_VALUES
            );
            None
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !if_unread {
                store.index_trace_spans(trace_id, &[], false).await?;
            }
            return Ok(false);
        }
        Err(e) => {
            tracing::warn!(trace = trace_id, error = %e, "could not read a trace's traces.json for search");
            None
        }
    };
    let read = match bytes {
        // Parsed off the async threads: up to 16 MiB of the client's JSON.
        Some(bytes) => {
            tokio::task::spawn_blocking(move || match serde_json::from_slice::<Value>(&bytes) {
                Ok(json) => search_spans(&json),
                Err(_) => SearchSpans::default(),
            })
            .await
            .unwrap_or_default()
        }
        None => SearchSpans::default(),
    };
    if read.cut {
        tracing::info!(
            trace = trace_id,
            spans = read.spans.len(),
            "a trace's spans are searched up to the bounds of trainyard_store::spans; the rest is in its traces.json"
        );
    }
    store
        .index_trace_spans(trace_id, &read.spans, if_unread)
        .await?;
    Ok(true)
}

/// Reads the spans of traces kept before the server searched spans: run
/// once at start, in the background, a page at a time.
pub async fn index_unread_spans(store: trainyard_store::Store, artifact_root: std::path::PathBuf) {
    const PAGE: u64 = 200;
    let (mut after, mut read) = (String::new(), 0u64);
    loop {
        let page = match store.traces_with_unread_spans(&after, PAGE).await {
            Ok(page) => page,
            Err(e) => {
                tracing::warn!(error = %e, "could not list the traces whose spans were never read for search");
                return;
            }
        };
        for (trace_id, experiment_id) in &page {
            match index_spans(&store, &artifact_root, *experiment_id, trace_id, true).await {
                Ok(found) => read += u64::from(found),
                Err(e) => {
                    tracing::warn!(trace = %trace_id, error = %e, "could not keep a trace's spans for search");
                }
            }
        }
        match page.last() {
            Some((last, _)) if page.len() as u64 == PAGE => after = last.clone(),
            _ => break,
        }
    }
    if read > 0 {
        tracing::info!(
            traces = read,
            "read the spans of traces kept before spans were searched"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn protobuf_times_and_durations_round_trip() {
        let ms = parse_time("2026-12-02T22:38:39.681Z").unwrap();
        assert_eq!(format_time(ms), "2026-12-02T22:38:39.681Z");
        assert_eq!(parse_time("2026-12-02T23:38:39.681+01:00").unwrap(), ms);
        assert!(parse_time("yesterday").is_err());
        assert_eq!(parse_duration("0.023s").unwrap(), 23);
        assert_eq!(parse_duration("12s").unwrap(), 12_000);
        assert!(parse_duration("-1s").is_err() && parse_duration("5").is_err());
    }
}
