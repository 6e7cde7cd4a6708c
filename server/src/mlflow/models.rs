//! `/logged-models/*`: MLflow 3's logged models (create, get, finalize,
//! delete, search, tags, params), what `mlflow.<flavor>.log_model` and
//! `models:/<model_id>` use. Owned and shared as runs are.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_domain::identity::Via;
use trainyard_domain::query::{Field, Scope, parse_filter, parse_order_by};
use trainyard_store::{Access, ModelOrder, NewModel, Viewer};

use super::experiments::{KeyValue, key_values};
use super::request::Req;
use super::validate::{self, MAX_PARAM_VALUE_LEN, MAX_TAG_VALUE_LEN};
use super::wire::{self, opt_i64, parse_experiment_id, required};
use super::{ApiError, ApiResult, may_change_run};
use crate::AppState;
use crate::auth::{Caller, Principal};

/// Most params or tags one request sets on a model.
const MAX_KEYS_PER_REQUEST: usize = 1000;

/// May the caller change the model? Its owner (or an admin) may; a job's
/// token only a model its own run made.
pub async fn may_change_model(
    state: &AppState,
    principal: &Principal,
    model_id: &str,
) -> Result<(), ApiError> {
    state
        .store
        .logged_model_as(&principal.user, model_id, Access::Change)
        .await?;
    if let Via::RunToken { run_id } = &principal.via {
        let source = state
            .store
            .logged_model_place(model_id)
            .await?
            .and_then(|(_, run)| run);
        let ours = match source.as_deref() {
            Some(source) => super::run_or_child_of(state, run_id, source).await?,
            None => false,
        };
        if !ours {
            return Err(crate::auth::permission_denied(format!(
                "this job's token changes models of its own run and the runs made under it \
                 only, not model {model_id}"
            )));
        }
    }
    Ok(())
}

/// MLflow's rule for model names: not empty, none of `/ : . % " '`.
fn model_name(name: &str) -> Result<(), ApiError> {
    const BAD: [char; 6] = ['/', ':', '.', '%', '"', '\''];
    if name.is_empty() || name.contains(BAD) {
        return Err(ApiError::invalid(format!(
            "Invalid model name ('{name}') provided. Model name must be a non-empty string and cannot contain the following characters: ('/', ':', '.', '%', '\"', \"'\")"
        )));
    }
    let len = name.chars().count();
    if len > 500 {
        return Err(ApiError::invalid(format!(
            "The model name has {len} characters, more than the limit of 500; shorten it"
        )));
    }
    Ok(())
}

fn params(items: Vec<KeyValue>) -> Result<Vec<(String, String)>, ApiError> {
    if items.len() > MAX_KEYS_PER_REQUEST {
        return Err(ApiError::invalid(format!(
            "A request can set at most {MAX_KEYS_PER_REQUEST} params; got {}. Split it up.",
            items.len()
        )));
    }
    let pairs = key_values(items, "params", usize::MAX)?;
    for (key, value) in &pairs {
        validate::value(value, MAX_PARAM_VALUE_LEN, "Param", key)?;
    }
    Ok(pairs)
}

fn tags(items: Vec<KeyValue>) -> Result<Vec<(String, String)>, ApiError> {
    if items.len() > MAX_KEYS_PER_REQUEST {
        return Err(ApiError::invalid(format!(
            "A request can set at most {MAX_KEYS_PER_REQUEST} tags; got {}. Split it up.",
            items.len()
        )));
    }
    key_values(items, "tags", MAX_TAG_VALUE_LEN)
}

#[derive(Deserialize)]
pub struct Create {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    name: Option<String>,
    model_type: Option<String>,
    source_run_id: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    params: Vec<KeyValue>,
    #[serde(default, deserialize_with = "wire::list")]
    tags: Vec<KeyValue>,
}

pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Create>,
) -> ApiResult {
    let experiment_id = parse_experiment_id(&required(req.experiment_id, "experiment_id")?)?;
    if let Some(name) = &req.name {
        model_name(name)?;
    }
    let model_type = req.model_type.unwrap_or_default();
    if model_type.chars().count() > 500 {
        return Err(ApiError::invalid(
            "'model_type' is longer than 500 characters; shorten it",
        ));
    }
    let source_run_id = req.source_run_id.filter(|r| !r.is_empty());
    match &source_run_id {
        Some(run_id) => {
            validate::run_id(run_id)?;
            may_change_run(&state, &principal, run_id).await?;
        }
        None if matches!(principal.via, Via::RunToken { .. }) => {
            return Err(crate::auth::permission_denied(
                "a job's token makes models of its own run only: give source_run_id",
            ));
        }
        None => {}
    }
    state
        .store
        .may_add_runs(&principal.user, experiment_id)
        .await?;
    let model = state
        .store
        .create_logged_model(NewModel {
            experiment_id,
            name: req.name,
            model_type,
            source_run_id,
            owner: principal.user.as_owner(),
            tags: tags(req.tags)?,
            params: params(req.params)?,
        })
        .await?;
    Ok(Json(json!({ "model": wire::logged_model(&model) })))
}

pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(model_id): Path<String>,
) -> ApiResult {
    state
        .store
        .logged_model_as(&principal.user, &model_id, Access::Read)
        .await?;
    let model = state.store.get_logged_model(&model_id).await?;
    Ok(Json(json!({ "model": wire::logged_model(&model) })))
}

#[derive(Deserialize)]
pub struct Finalize {
    status: Option<serde_json::Value>,
}

/// The stored status of a proto status (`LOGGED_MODEL_READY` or 2).
fn model_status(value: &serde_json::Value) -> Result<&'static str, ApiError> {
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    let found = match text.as_str() {
        "LOGGED_MODEL_PENDING" | "PENDING" | "1" => Some("PENDING"),
        "LOGGED_MODEL_READY" | "READY" | "2" => Some("READY"),
        "LOGGED_MODEL_UPLOAD_FAILED" | "FAILED" | "3" => Some("FAILED"),
        _ => None,
    };
    found.ok_or_else(|| {
        ApiError::invalid(format!(
            "Invalid model status `{text}`; use LOGGED_MODEL_READY or LOGGED_MODEL_UPLOAD_FAILED"
        ))
    })
}

/// `PATCH /logged-models/{id}`: the upload of its artifacts ended.
pub async fn finalize(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(model_id): Path<String>,
    Req(req): Req<Finalize>,
) -> ApiResult {
    let status = model_status(&required(req.status, "status")?)?;
    may_change_model(&state, &principal, &model_id).await?;
    let model = state.store.finalize_logged_model(&model_id, status).await?;
    Ok(Json(json!({ "model": wire::logged_model(&model) })))
}

pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(model_id): Path<String>,
) -> ApiResult {
    may_change_model(&state, &principal, &model_id).await?;
    state.store.delete_logged_model(&model_id).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct Pairs {
    #[serde(default, deserialize_with = "wire::list")]
    tags: Vec<KeyValue>,
    #[serde(default, deserialize_with = "wire::list")]
    params: Vec<KeyValue>,
}

pub async fn set_tags(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(model_id): Path<String>,
    Req(req): Req<Pairs>,
) -> ApiResult {
    let tags = tags(req.tags)?;
    may_change_model(&state, &principal, &model_id).await?;
    state.store.set_logged_model_tags(&model_id, &tags).await?;
    Ok(Json(json!({})))
}

pub async fn delete_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path((model_id, key)): Path<(String, String)>,
) -> ApiResult {
    may_change_model(&state, &principal, &model_id).await?;
    state.store.delete_logged_model_tag(&model_id, &key).await?;
    Ok(Json(json!({})))
}

pub async fn log_params(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(model_id): Path<String>,
    Req(req): Req<Pairs>,
) -> ApiResult {
    let params = params(req.params)?;
    may_change_model(&state, &principal, &model_id).await?;
    state
        .store
        .log_logged_model_params(&model_id, &params)
        .await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct DatasetRef {
    dataset_name: Option<String>,
    dataset_digest: Option<String>,
}

#[derive(Deserialize)]
pub struct OrderBody {
    field_name: Option<String>,
    ascending: Option<bool>,
    dataset_name: Option<String>,
    dataset_digest: Option<String>,
}

#[derive(Deserialize)]
pub struct Search {
    #[serde(default, deserialize_with = "wire::id_list")]
    experiment_ids: Vec<String>,
    filter: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    datasets: Vec<DatasetRef>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    #[serde(default, deserialize_with = "wire::list")]
    order_by: Vec<OrderBody>,
    page_token: Option<String>,
}

pub async fn search(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Search>,
) -> ApiResult {
    let experiment_ids = wire::experiment_ids(&req.experiment_ids, "experiment_ids")?;
    wire::order_by_bound(&req.order_by)?;
    if req.datasets.len() > 100 {
        return Err(ApiError::invalid(
            "The `datasets` clause names at most 100 datasets",
        ));
    }
    let mut datasets = Vec::with_capacity(req.datasets.len());
    for d in req.datasets {
        let Some(name) = d.dataset_name.filter(|n| !n.is_empty()) else {
            return Err(ApiError::invalid(
                "`dataset_name` in the `datasets` clause must be specified.",
            ));
        };
        datasets.push((name, d.dataset_digest.filter(|d| !d.is_empty())));
    }
    let limit = wire::max_results(req.max_results, 100, 1000)?;
    let offset = wire::parse_page_token(req.page_token.as_deref())?;
    let filter = parse_filter(req.filter.as_deref().unwrap_or(""), Scope::LoggedModels)
        .map_err(|e| ApiError::invalid(format!("Invalid filter: {e}")))?;
    let mut order = Vec::with_capacity(req.order_by.len());
    for (i, o) in req.order_by.into_iter().enumerate() {
        let name = required(
            o.field_name.filter(|n| !n.is_empty()),
            &format!("order_by[{i}].field_name"),
        )?;
        let parsed = parse_order_by(&name, Scope::LoggedModels)
            .map_err(|e| ApiError::invalid(format!("Invalid order by field name `{name}`: {e}")))?;
        if matches!(parsed.field, Field::Param(_) | Field::Tag(_)) {
            return Err(ApiError::invalid(format!(
                "Invalid order by field name: {name}. Only metrics are supported."
            )));
        }
        order.push(ModelOrder {
            field: parsed.field,
            ascending: o.ascending.unwrap_or(true),
            dataset_name: o.dataset_name.filter(|n| !n.is_empty()),
            dataset_digest: o.dataset_digest.filter(|d| !d.is_empty()),
        });
    }
    let page = state
        .store
        .search_logged_models(
            &experiment_ids,
            trainyard_store::ModelFilter {
                expr: filter.as_ref(),
                datasets: &datasets,
            },
            &order,
            limit,
            offset,
            &Viewer::of(&principal.user),
        )
        .await?;
    let mut out = json!({});
    if let Some(next) = page.next_offset {
        out["next_page_token"] = json!(wire::page_token(next));
    }
    if !page.models.is_empty() {
        out["models"] = Value::Array(page.models.iter().map(wire::logged_model).collect());
    }
    Ok(Json(out))
}
