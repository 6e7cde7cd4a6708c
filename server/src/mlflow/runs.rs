//! `/runs/*`: create, update, get, search, delete, restore, and logging of
//! metrics, params and tags (one at a time or in batches, atomically).

use std::collections::HashSet;

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::json;
use trainyard_domain::query::{Scope, parse_filter, parse_order_by};
use trainyard_domain::tracking::{Dataset, DatasetInput, Point, RUN_STATUSES};
use trainyard_store::{Access, MetricIn, ModelMetricIn, NewRun, Viewer};

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
    if let crate::auth::Via::RunToken { run_id: own } = &principal.via {
        child_of_jobs_run(&state, own, experiment_id, &tags).await?;
    }
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

/// A job's token does not move runs: which run one was made under is
/// what lets the token write to it.
fn keeps_parent(principal: &crate::auth::Principal, key: &str) -> Result<(), ApiError> {
    if key == "mlflow.parentRunId" && matches!(principal.via, crate::auth::Via::RunToken { .. }) {
        return Err(crate::auth::permission_denied(
            "a job's token does not set or remove mlflow.parentRunId: a run is placed under the \
             job's run when it is made",
        ));
    }
    Ok(())
}

/// A job's token makes runs only under its own run, in its experiment
/// (`mlflow.start_run(nested=True)` in the job: a sweep's trials, a grid
/// search's candidates), one level down; what it may write to then.
async fn child_of_jobs_run(
    state: &AppState,
    own: &str,
    experiment_id: i64,
    tags: &[(String, String)],
) -> Result<(), ApiError> {
    let parent = tags
        .iter()
        .rev()
        .find(|(k, _)| k == "mlflow.parentRunId")
        .map(|(_, v)| v.as_str());
    let own_experiment = state.store.run_experiment(own).await?;
    if parent == Some(own) && own_experiment == Some(experiment_id) {
        return Ok(());
    }
    Err(crate::auth::permission_denied(format!(
        "a job's token makes runs only under its own run ({own}, which mlflow.start_run() \
         resumes in the job): start them with mlflow.start_run(nested=True) inside it, in \
         its experiment ({})",
        own_experiment.map_or_else(|| "unknown".to_owned(), |e| e.to_string())
    )))
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
    let io = state.store.run_io(std::slice::from_ref(&run_id)).await?;
    Ok(Json(
        json!({ "run": wire::run_with_io(&run, io.get(&run_id)) }),
    ))
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
    let experiment_ids = wire::experiment_ids(&req.experiment_ids, "experiment_ids")?;
    let limit = wire::max_results(req.max_results, 1000, 50_000)?;
    let offset = wire::parse_page_token(req.page_token.as_deref())?;
    let filter = parse_filter(req.filter.as_deref().unwrap_or(""), Scope::Runs)
        .map_err(|e| ApiError::invalid(format!("Invalid filter: {e}")))?;
    wire::order_by_bound(&req.order_by)?;
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
    let ids: Vec<String> = runs.iter().map(|r| r.info.run_id.clone()).collect();
    let io = state.store.run_io(&ids).await?;
    Ok(Json(wire::page(runs, limit, offset, "runs", |r| {
        wire::run_with_io(r, io.get(&r.info.run_id))
    })))
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
    /// MLflow 3: the logged model the metric measures, and on which dataset.
    model_id: Option<String>,
    dataset_name: Option<String>,
    dataset_digest: Option<String>,
}

/// Checks that the caller may add metrics to each model named.
async fn may_measure_models(
    state: &AppState,
    principal: &crate::auth::Principal,
    metrics: &[ModelMetricIn],
) -> Result<(), ApiError> {
    let mut ids: Vec<&str> = metrics.iter().map(|m| m.model_id.as_str()).collect();
    ids.sort_unstable();
    ids.dedup();
    for id in ids {
        super::models::may_change_model(state, principal, id).await?;
    }
    Ok(())
}

/// The metric a run logs, and the model metric it also is when it names a
/// model (the key is copied only then: a batch holds up to 1,000 points).
fn metric_in(m: MetricBody, path: &str) -> Result<(MetricIn, Option<ModelMetricIn>), ApiError> {
    let key = required(m.key, &format!("{path}key"))?;
    validate::key(&key, &format!("{path}name"))?;
    let value = required(m.value, &format!("{path}value"))?;
    let timestamp = required(m.timestamp, &format!("{path}timestamp"))?;
    if timestamp < 0 {
        return Err(ApiError::invalid(format!(
            "Invalid value {timestamp} for parameter 'timestamp' supplied: metric '{key}'. Timestamp must be a nonnegative long (64-bit integer)"
        )));
    }
    let logged = MetricIn {
        key,
        point: Point {
            step: m.step.unwrap_or(0),
            timestamp,
            value,
        },
    };
    let for_model = m
        .model_id
        .filter(|id| !id.is_empty())
        .map(|model_id| ModelMetricIn {
            model_id,
            key: logged.key.clone(),
            point: logged.point,
            dataset_name: m.dataset_name.filter(|n| !n.is_empty()),
            dataset_digest: m.dataset_digest.filter(|d| !d.is_empty()),
        });
    Ok((logged, for_model))
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
    let (metric, for_model) = metric_in(req.metric, "")?;
    let for_models: Vec<ModelMetricIn> = for_model.into_iter().collect();
    may_measure_models(&state, &principal, &for_models).await?;
    state.store.log_batch(&run_id, &[metric], &[], &[]).await?;
    state.store.log_model_metrics(&run_id, &for_models).await?;
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
    keeps_parent(&principal, &tag.0)?;
    state.store.log_batch(&run_id, &[], &[], &[tag]).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct LogModel {
    #[serde(flatten)]
    run: RunRef,
    model_json: Option<String>,
}

/// `POST /runs/log-model`: what `mlflow.<flavor>.log_model` records of a
/// model logged in a run, in the run's `mlflow.log-model.history` tag.
pub async fn log_model(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LogModel>,
) -> ApiResult {
    let run_id = req.run.id()?;
    let text = required(req.model_json, "model_json")?;
    // What the run's tag can hold at most, checked before it is parsed.
    if text.len() > MAX_TAG_VALUE_LEN {
        return Err(ApiError::invalid(format!(
            "model_json is {} bytes; a run's history of models (tag mlflow.log-model.history) holds at most {MAX_TAG_VALUE_LEN}",
            text.len()
        )));
    }
    let model = match serde_json::from_str(&text) {
        Ok(serde_json::Value::Object(model)) => model,
        _ => {
            return Err(ApiError::invalid(
                "Malformed model info: model_json must be a JSON object (the model's MLmodel as a dict)",
            ));
        }
    };
    let missing: Vec<&str> = ["artifact_path", "flavors", "utc_time_created", "run_id"]
        .into_iter()
        .filter(|key| !model.contains_key(*key))
        .collect();
    if !missing.is_empty() {
        return Err(ApiError::invalid(format!(
            "Model json is missing mandatory fields: {}",
            missing.join(", ")
        )));
    }
    may_change_run(&state, &principal, &run_id).await?;
    state
        .store
        .record_logged_model(&run_id, &model, MAX_TAG_VALUE_LEN)
        .await?;
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
    keeps_parent(&principal, &key)?;
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
    let mut metrics = Vec::with_capacity(req.metrics.len());
    let mut for_models: Vec<ModelMetricIn> = Vec::new();
    for (i, m) in req.metrics.into_iter().enumerate() {
        let (logged, for_model) = metric_in(m, &format!("metrics[{i}]."))?;
        metrics.push(logged);
        for_models.extend(for_model);
    }
    may_measure_models(&state, &principal, &for_models).await?;
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
    for (key, _) in &tags {
        keeps_parent(&principal, key)?;
    }
    state
        .store
        .log_batch(&run_id, &metrics, &params, &tags)
        .await?;
    state.store.log_model_metrics(&run_id, &for_models).await?;
    Ok(Json(json!({})))
}

/// Most datasets or models one `log-inputs` or `outputs` request records.
const MAX_IO_PER_REQUEST: usize = 1000;

#[derive(Deserialize)]
pub struct DatasetBody {
    name: Option<String>,
    digest: Option<String>,
    source_type: Option<String>,
    source: Option<String>,
    schema: Option<String>,
    profile: Option<String>,
}

#[derive(Deserialize)]
pub struct DatasetInputBody {
    dataset: Option<DatasetBody>,
    #[serde(default, deserialize_with = "wire::list")]
    tags: Vec<KeyValue>,
}

#[derive(Deserialize)]
pub struct ModelRef {
    model_id: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    step: Option<i64>,
}

#[derive(Deserialize)]
pub struct LogInputs {
    run_id: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    datasets: Vec<DatasetInputBody>,
    #[serde(default, deserialize_with = "wire::list")]
    models: Vec<ModelRef>,
}

/// A text field of a dataset: required or not, within MLflow's limit.
fn dataset_field(
    value: Option<String>,
    path: &str,
    limit: usize,
    required_: bool,
) -> Result<Option<String>, ApiError> {
    let value = match value {
        Some(v) if !v.is_empty() || !required_ => v,
        _ if required_ => {
            return Err(ApiError::invalid(format!(
                "Missing value for required parameter '{path}'. Give each dataset a name, digest, source_type and source."
            )));
        }
        _ => return Ok(None),
    };
    let len = value.chars().count();
    if len > limit {
        return Err(ApiError::invalid(format!(
            "'{path}' has {len} characters, more than the limit of {limit}; shorten it"
        )));
    }
    Ok(Some(value))
}

fn dataset_input(body: DatasetInputBody, i: usize) -> Result<DatasetInput, ApiError> {
    let at = |field: &str| format!("datasets[{i}].dataset.{field}");
    let d = body.dataset.ok_or_else(|| {
        ApiError::invalid(format!(
            "Missing value for required parameter 'datasets[{i}].dataset'."
        ))
    })?;
    let need = |v: Option<String>, field: &str, limit: usize| -> Result<String, ApiError> {
        Ok(dataset_field(v, &at(field), limit, true)?.unwrap_or_default())
    };
    let dataset = Dataset {
        name: need(d.name, "name", 500)?,
        digest: need(d.digest, "digest", 36)?,
        source_type: need(d.source_type, "source_type", 36)?,
        source: need(d.source, "source", 65_535)?,
        schema: dataset_field(d.schema, &at("schema"), 1_048_575, false)?,
        profile: dataset_field(d.profile, &at("profile"), 1_048_575, false)?,
    };
    let mut tags = Vec::with_capacity(body.tags.len());
    for (j, kv) in body.tags.into_iter().enumerate() {
        let key = dataset_field(kv.key, &format!("datasets[{i}].tags[{j}].key"), 255, true)?
            .unwrap_or_default();
        let value = dataset_field(
            kv.value,
            &format!("datasets[{i}].tags[{j}].value"),
            500,
            false,
        )?
        .unwrap_or_default();
        tags.push((key, value));
    }
    Ok(DatasetInput { dataset, tags })
}

fn model_ids(models: Vec<ModelRef>, what: &str) -> Result<Vec<(String, i64)>, ApiError> {
    if models.len() > MAX_IO_PER_REQUEST {
        return Err(ApiError::invalid(format!(
            "A request can name at most {MAX_IO_PER_REQUEST} models; got {}. Split it up.",
            models.len()
        )));
    }
    models
        .into_iter()
        .enumerate()
        .map(|(i, m)| {
            let id = required(
                m.model_id.filter(|id| !id.is_empty()),
                &format!("{what}[{i}].model_id"),
            )?;
            Ok((id, m.step.unwrap_or(0)))
        })
        .collect()
}

/// `runs/log-inputs`: datasets (with their context tags) and models a run read.
pub async fn log_inputs(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LogInputs>,
) -> ApiResult {
    let run_id = RunRef {
        run_id: req.run_id,
        run_uuid: None,
    }
    .id()?;
    may_change_run(&state, &principal, &run_id).await?;
    if req.datasets.len() > MAX_IO_PER_REQUEST {
        return Err(ApiError::invalid(format!(
            "A request can log at most {MAX_IO_PER_REQUEST} datasets; got {}. Split it up.",
            req.datasets.len()
        )));
    }
    let datasets = req
        .datasets
        .into_iter()
        .enumerate()
        .map(|(i, d)| dataset_input(d, i))
        .collect::<Result<Vec<_>, _>>()?;
    let models: Vec<String> = model_ids(req.models, "models")?
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    for id in &models {
        state
            .store
            .logged_model_as(&principal.user, id, Access::Read)
            .await?;
    }
    state
        .store
        .log_run_inputs(&run_id, &datasets, &models)
        .await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct LogOutputs {
    run_id: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    models: Vec<ModelRef>,
}

/// `runs/outputs`: the models a run wrote, each at a step.
pub async fn log_outputs(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<LogOutputs>,
) -> ApiResult {
    let run_id = RunRef {
        run_id: req.run_id,
        run_uuid: None,
    }
    .id()?;
    may_change_run(&state, &principal, &run_id).await?;
    let models = model_ids(req.models, "models")?;
    for (id, _) in &models {
        super::models::may_change_model(&state, &principal, id).await?;
    }
    state.store.log_run_outputs(&run_id, &models).await?;
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
