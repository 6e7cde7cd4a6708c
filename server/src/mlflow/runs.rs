//! `/runs/*`: create, update, get, search, delete, restore, and logging of
//! metrics, params and tags (one at a time or in batches, atomically).

use std::collections::HashSet;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::json;
use trainyard_domain::query::{Scope, parse_filter, parse_order_by};
use trainyard_domain::tracking::{Point, RUN_STATUSES};
use trainyard_store::{Access, MetricIn, NewRun, Viewer};

use super::experiments::{KeyValue, key_values, view_type};
use super::may_change_run;
use super::request::Req;
use super::validate::{self, MAX_PARAM_VALUE_LEN, MAX_TAG_VALUE_LEN};
use super::wire::{self, opt_f64, opt_i64, parse_experiment_id, required};
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::Caller;

/// `run_id`, or the older `run_uuid` that clients still send.
#[derive(Deserialize)]
pub struct RunRef {
    run_id: Option<String>,
    run_uuid: Option<String>,
}

impl RunRef {
    fn id(self) -> Result<String, ApiError> {
        let id = required(
            self.run_id.filter(|s| !s.is_empty()).or(self.run_uuid),
            "run_id",
        )?;
        validate::run_id(&id)?;
        Ok(id)
    }
}

#[derive(Deserialize)]
pub struct Create {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    user_id: Option<String>,
    run_name: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    start_time: Option<i64>,
    #[serde(default, deserialize_with = "wire::list")]
    tags: Vec<KeyValue>,
}

pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Create>,
) -> ApiResult {
    let experiment_id = parse_experiment_id(req.experiment_id.as_deref().unwrap_or("0"))?;
    state
        .store
        .may_add_runs(&principal.user, experiment_id)
        .await?;
    let tags = key_values(req.tags, "tags", MAX_TAG_VALUE_LEN)?;
    if let Some(name) = &req.run_name {
        validate::value(name, MAX_TAG_VALUE_LEN, "Run name", "run_name")?;
    }
    let run = state
        .store
        .create_run(NewRun {
            experiment_id,
            // The run's user is the caller (an admin may name another).
            user_id: req
                .user_id
                .filter(|u| !u.is_empty() && principal.user.is_admin)
                .unwrap_or_else(|| principal.user.username.clone()),
            owner_id: Some(principal.user.id),
            team_id: principal.user.primary_team(),
            run_name: req.run_name,
            start_time: req.start_time,
            tags,
        })
        .await?;
    Ok(Json(json!({ "run": wire::run(&run) })))
}

#[derive(Deserialize)]
pub struct Update {
    #[serde(flatten)]
    run: RunRef,
    status: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "opt_i64")]
    end_time: Option<i64>,
    run_name: Option<String>,
}

fn run_status(value: &serde_json::Value) -> Result<&'static str, ApiError> {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if let Ok(n) = text.parse::<usize>()
        && (1..=RUN_STATUSES.len()).contains(&n)
    {
        return Ok(RUN_STATUSES[n - 1]);
    }
    RUN_STATUSES
        .into_iter()
        .find(|s| *s == text)
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "Invalid run status `{text}`; use one of {}",
                RUN_STATUSES.join(", ")
            ))
        })
}

pub async fn update(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Update>,
) -> ApiResult {
    let run_id = req.run.id()?;
    may_change_run(&state, &principal, &run_id).await?;
    let status = req.status.as_ref().map(run_status).transpose()?;
    let info = state
        .store
        .update_run(&run_id, status, req.end_time, req.run_name.as_deref())
        .await?;
    Ok(Json(json!({ "run_info": wire::run_info(&info) })))
}

pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<RunRef>,
) -> ApiResult {
    let run_id = req.id()?;
    state
        .store
        .run_as(&principal.user, &run_id, Access::Read)
        .await?;
    let run = state.store.get_run(&run_id).await?;
    Ok(Json(json!({ "run": wire::run(&run) })))
}

pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<RunRef>,
) -> ApiResult {
    let run_id = req.id()?;
    may_change_run(&state, &principal, &run_id).await?;
    state.store.set_run_deleted(&run_id, true).await?;
    Ok(Json(json!({})))
}

pub async fn restore(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<RunRef>,
) -> ApiResult {
    let run_id = req.id()?;
    may_change_run(&state, &principal, &run_id).await?;
    state.store.set_run_deleted(&run_id, false).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct Search {
    #[serde(default, deserialize_with = "wire::id_list")]
    experiment_ids: Vec<String>,
    filter: Option<String>,
    run_view_type: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    #[serde(default, deserialize_with = "wire::list")]
    order_by: Vec<String>,
    page_token: Option<String>,
}

pub async fn search(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Search>,
) -> ApiResult {
    let experiment_ids = req
        .experiment_ids
        .iter()
        .map(|id| parse_experiment_id(id))
        .collect::<Result<Vec<_>, _>>()?;
    let limit = wire::max_results(req.max_results, 1000, 50_000)?;
    let offset = wire::parse_page_token(req.page_token.as_deref())?;
    let filter = parse_filter(req.filter.as_deref().unwrap_or(""), Scope::Runs)
        .map_err(|e| ApiError::invalid(format!("Invalid filter: {e}")))?;
    let mut order = Vec::with_capacity(req.order_by.len());
    for o in &req.order_by {
        let parsed = parse_order_by(o, Scope::Runs)
            .map_err(|e| ApiError::invalid(format!("Invalid order_by `{o}`: {e}")))?;
        if order
            .iter()
            .any(|p: &trainyard_domain::query::OrderBy| p.field == parsed.field)
        {
            return Err(ApiError::invalid(format!(
                "`order_by` contains duplicate fields: {o}"
            )));
        }
        order.push(parsed);
    }
    let view = view_type(req.run_view_type.as_ref())?;
    let runs = state
        .store
        .search_runs(
            &experiment_ids,
            filter.as_ref(),
            &order,
            view,
            limit + 1,
            offset,
            &Viewer::of(&principal.user),
        )
        .await?;
    Ok(Json(wire::page(runs, limit, offset, "runs", wire::run)))
}

#[derive(Deserialize)]
pub struct MetricBody {
    key: Option<String>,
    #[serde(default, deserialize_with = "opt_f64")]
    value: Option<f64>,
    #[serde(default, deserialize_with = "opt_i64")]
    timestamp: Option<i64>,
    #[serde(default, deserialize_with = "opt_i64")]
    step: Option<i64>,
}

fn metric_in(m: MetricBody, path: &str) -> Result<MetricIn, ApiError> {
    let key = required(m.key, &format!("{path}key"))?;
    validate::key(&key, &format!("{path}name"))?;
    let value = required(m.value, &format!("{path}value"))?;
    let timestamp = required(m.timestamp, &format!("{path}timestamp"))?;
    if timestamp < 0 {
        return Err(ApiError::invalid(format!(
            "Invalid value {timestamp} for parameter 'timestamp' supplied: metric '{key}'. Timestamp must be a nonnegative long (64-bit integer)"
        )));
    }
    Ok(MetricIn {
        key,
        point: Point {
            step: m.step.unwrap_or(0),
            timestamp,
            value,
        },
    })
}

#[derive(Deserialize)]
pub struct LogMetric {
    #[serde(flatten)]
    run: RunRef,
    #[serde(flatten)]
    metric: MetricBody,
}

pub async fn log_metric(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LogMetric>,
) -> ApiResult {
    let run_id = req.run.id()?;
    may_change_run(&state, &principal, &run_id).await?;
    let metric = metric_in(req.metric, "")?;
    state.store.log_batch(&run_id, &[metric], &[], &[]).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct LogKeyValue {
    #[serde(flatten)]
    run: RunRef,
    key: Option<String>,
    value: Option<String>,
}

impl LogKeyValue {
    /// The run, and the key and value checked against `limit`.
    fn checked(self, limit: usize, noun: &str) -> Result<(String, (String, String)), ApiError> {
        let run_id = self.run.id()?;
        let key = required(self.key, "key")?;
        validate::key(&key, "key")?;
        let value = self.value.unwrap_or_default();
        validate::value(&value, limit, noun, &key)?;
        Ok((run_id, (key, value)))
    }
}

pub async fn log_parameter(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LogKeyValue>,
) -> ApiResult {
    let (run_id, param) = req.checked(MAX_PARAM_VALUE_LEN, "Param")?;
    may_change_run(&state, &principal, &run_id).await?;
    state.store.log_batch(&run_id, &[], &[param], &[]).await?;
    Ok(Json(json!({})))
}

pub async fn set_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LogKeyValue>,
) -> ApiResult {
    let (run_id, tag) = req.checked(MAX_TAG_VALUE_LEN, "Tag")?;
    may_change_run(&state, &principal, &run_id).await?;
    state.store.log_batch(&run_id, &[], &[], &[tag]).await?;
    Ok(Json(json!({})))
}

pub async fn delete_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LogKeyValue>,
) -> ApiResult {
    let run_id = req.run.id()?;
    may_change_run(&state, &principal, &run_id).await?;
    let key = required(req.key, "key")?;
    state.store.delete_run_tag(&run_id, &key).await?;
    Ok(Json(json!({})))
}

// No `flatten` here: it would buffer the whole batch before reading it.
#[derive(Deserialize)]
pub struct LogBatch {
    run_id: Option<String>,
    run_uuid: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    metrics: Vec<MetricBody>,
    #[serde(default, deserialize_with = "wire::list")]
    params: Vec<KeyValue>,
    #[serde(default, deserialize_with = "wire::list")]
    tags: Vec<KeyValue>,
}

pub async fn log_batch(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LogBatch>,
) -> ApiResult {
    let run_id = RunRef {
        run_id: req.run_id,
        run_uuid: req.run_uuid,
    }
    .id()?;
    may_change_run(&state, &principal, &run_id).await?;
    validate::batch_limits(req.metrics.len(), req.params.len(), req.tags.len())?;
    let metrics = req
        .metrics
        .into_iter()
        .enumerate()
        .map(|(i, m)| metric_in(m, &format!("metrics[{i}].")))
        .collect::<Result<Vec<_>, _>>()?;
    let params = key_values_with(req.params, "params", MAX_PARAM_VALUE_LEN, "Param")?;
    let mut seen = HashSet::new();
    let duplicates: Vec<&str> = params
        .iter()
        .filter(|(k, _)| !seen.insert(k.as_str()))
        .map(|(k, _)| k.as_str())
        .collect();
    if !duplicates.is_empty() {
        return Err(ApiError::invalid(format!(
            "Duplicate parameter keys have been submitted: {duplicates:?}. Please ensure the request contains only one param value per param key."
        )));
    }
    let tags = key_values(req.tags, "tags", MAX_TAG_VALUE_LEN)?;
    state
        .store
        .log_batch(&run_id, &metrics, &params, &tags)
        .await?;
    Ok(Json(json!({})))
}

fn key_values_with(
    items: Vec<KeyValue>,
    what: &str,
    limit: usize,
    noun: &str,
) -> Result<Vec<(String, String)>, ApiError> {
    let pairs = key_values(items, what, usize::MAX)?;
    for (key, value) in &pairs {
        validate::value(value, limit, noun, key)?;
    }
    Ok(pairs)
}
