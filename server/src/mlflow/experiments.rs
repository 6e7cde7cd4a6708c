//! `/experiments/*`: create, get, get-by-name, search, update (rename),
//! delete, restore, and experiment tags.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::json;
use trainyard_domain::query::{Scope, parse_filter, parse_order_by};

use super::request::Req;
use super::validate::{self, MAX_EXPERIMENT_TAG_VALUE_LEN};
use super::wire::{self, opt_i64, parse_experiment_id, required};
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::Caller;
use trainyard_store::{Access, Viewer};

#[derive(Deserialize)]
pub struct KeyValue {
    #[serde(default)]
    pub key: Option<String>,
    #[serde(default)]
    pub value: Option<String>,
}

pub fn key_values(
    items: Vec<KeyValue>,
    what: &str,
    limit: usize,
) -> Result<Vec<(String, String)>, ApiError> {
    items
        .into_iter()
        .enumerate()
        .map(|(i, kv)| {
            let key = required(kv.key, &format!("{what}[{i}].key"))?;
            let value = kv.value.unwrap_or_default();
            validate::key(&key, &format!("{what}[{i}].key"))?;
            validate::value(&value, limit, "Tag", &key)?;
            Ok((key, value))
        })
        .collect()
}

fn experiment_name(name: Option<String>, field: &str) -> Result<String, ApiError> {
    let name = required(name, field)?;
    if name.trim().is_empty() {
        return Err(ApiError::invalid(format!(
            "Invalid experiment name: '{name}'"
        )));
    }
    let len = name.chars().count();
    if len > trainyard_domain::MAX_EXPERIMENT_NAME_LEN {
        return Err(ApiError::invalid(format!(
            "'{field}' exceeds the maximum length of {} characters",
            trainyard_domain::MAX_EXPERIMENT_NAME_LEN
        )));
    }
    Ok(name)
}

#[derive(Deserialize)]
pub struct Create {
    name: Option<String>,
    artifact_location: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    tags: Vec<KeyValue>,
}

pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Create>,
) -> ApiResult {
    let name = experiment_name(req.name, "name")?;
    let tags = key_values(req.tags, "tags", MAX_EXPERIMENT_TAG_VALUE_LEN)?;
    if let Some(location) = req.artifact_location.filter(|l| !l.is_empty()) {
        // Artifacts live in the server's data folder, each experiment's at
        // mlflow-artifacts:/<id>; another location would send clients
        // writing to places the server neither owns nor serves.
        return Err(ApiError::invalid(format!(
            "artifact_location `{}` is not supported: Trainyard stores every experiment's artifacts itself \
             (at mlflow-artifacts:/<experiment id>, served by this server); leave artifact_location empty",
            validate::shown(&location)
        )));
    }
    let id = state
        .store
        .create_experiment_with(&name, None, &tags, principal.user.as_owner())
        .await?;
    Ok(Json(json!({ "experiment_id": id.to_string() })))
}

#[derive(Deserialize)]
pub struct ById {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
}

pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<ById>,
) -> ApiResult {
    let id = parse_experiment_id(&required(req.experiment_id, "experiment_id")?)?;
    state
        .store
        .experiment_as(&principal.user, id, Access::Read)
        .await?;
    let experiment = state.store.get_experiment(id).await?;
    Ok(Json(json!({ "experiment": wire::experiment(&experiment) })))
}

#[derive(Deserialize)]
pub struct ByName {
    experiment_name: Option<String>,
}

pub async fn get_by_name(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<ByName>,
) -> ApiResult {
    let name = required(req.experiment_name, "experiment_name")?;
    let experiment = state.store.get_experiment_by_name(&name).await?;
    state
        .store
        .experiment_as(&principal.user, experiment.id, Access::Read)
        .await
        .map_err(|_| {
            ApiError::not_found(format!("Could not find experiment with name '{name}'"))
        })?;
    Ok(Json(json!({ "experiment": wire::experiment(&experiment) })))
}

#[derive(Deserialize)]
pub struct Search {
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    page_token: Option<String>,
    filter: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    order_by: Vec<String>,
    view_type: Option<serde_json::Value>,
}

pub fn view_type(
    value: Option<&serde_json::Value>,
) -> Result<trainyard_domain::tracking::ViewType, ApiError> {
    use trainyard_domain::tracking::ViewType;
    let Some(value) = value else {
        return Ok(ViewType::ActiveOnly);
    };
    let text = match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    match text.as_str() {
        "ACTIVE_ONLY" | "1" | "" => Ok(ViewType::ActiveOnly),
        "DELETED_ONLY" | "2" => Ok(ViewType::DeletedOnly),
        "ALL" | "3" => Ok(ViewType::All),
        other => Err(ApiError::invalid(format!(
            "Invalid view type `{other}`; use ACTIVE_ONLY, DELETED_ONLY or ALL"
        ))),
    }
}

pub async fn search(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Search>,
) -> ApiResult {
    let limit = wire::max_results(req.max_results, 1000, 50_000)?;
    let offset = wire::parse_page_token(req.page_token.as_deref())?;
    let filter = parse_filter(req.filter.as_deref().unwrap_or(""), Scope::Experiments)
        .map_err(|e| ApiError::invalid(format!("Invalid filter: {e}")))?;
    wire::order_by_bound(&req.order_by)?;
    let order = req
        .order_by
        .iter()
        .map(|o| parse_order_by(o, Scope::Experiments))
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| ApiError::invalid(format!("Invalid order_by: {e}")))?;
    let view = view_type(req.view_type.as_ref())?;
    let found = state
        .store
        .search_experiments(
            filter.as_ref(),
            &order,
            view,
            limit + 1,
            offset,
            &Viewer::of(&principal.user),
        )
        .await?;
    Ok(Json(wire::page(
        found,
        limit,
        offset,
        "experiments",
        wire::experiment,
    )))
}

#[derive(Deserialize)]
pub struct Update {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    new_name: Option<String>,
}

pub async fn update(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Update>,
) -> ApiResult {
    let id = parse_experiment_id(&required(req.experiment_id, "experiment_id")?)?;
    state
        .store
        .experiment_as(&principal.user, id, Access::Change)
        .await?;
    let name = experiment_name(req.new_name, "new_name")?;
    state.store.rename_experiment(id, &name).await?;
    Ok(Json(json!({})))
}

pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<ById>,
) -> ApiResult {
    let id = parse_experiment_id(&required(req.experiment_id, "experiment_id")?)?;
    state
        .store
        .experiment_as(&principal.user, id, Access::Change)
        .await?;
    state.store.set_experiment_deleted(id, true).await?;
    Ok(Json(json!({})))
}

pub async fn restore(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<ById>,
) -> ApiResult {
    let id = parse_experiment_id(&required(req.experiment_id, "experiment_id")?)?;
    state
        .store
        .experiment_as(&principal.user, id, Access::Change)
        .await?;
    state.store.set_experiment_deleted(id, false).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct Tag {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    key: Option<String>,
    value: Option<String>,
}

pub async fn set_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Tag>,
) -> ApiResult {
    let id = parse_experiment_id(&required(req.experiment_id, "experiment_id")?)?;
    state
        .store
        .experiment_as(&principal.user, id, Access::Change)
        .await?;
    let key = required(req.key, "key")?;
    validate::key(&key, "key")?;
    let value = req.value.unwrap_or_default();
    validate::value(&value, MAX_EXPERIMENT_TAG_VALUE_LEN, "Tag", &key)?;
    state.store.set_experiment_tag(id, &key, &value).await?;
    Ok(Json(json!({})))
}

pub async fn delete_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Tag>,
) -> ApiResult {
    let id = parse_experiment_id(&required(req.experiment_id, "experiment_id")?)?;
    state
        .store
        .experiment_as(&principal.user, id, Access::Change)
        .await?;
    let key = required(req.key, "key")?;
    state.store.delete_experiment_tag(id, &key).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct SearchDatasets {
    #[serde(default, deserialize_with = "wire::id_list")]
    experiment_ids: Vec<String>,
}

/// `experiments/search-datasets`: the datasets the experiments' runs used,
/// each with the context it was used in (at most 1,000, as MLflow).
pub async fn search_datasets(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<SearchDatasets>,
) -> ApiResult {
    let experiment_ids = wire::experiment_ids(&req.experiment_ids, "experiment_ids")?;
    let found = state
        .store
        .search_datasets(&experiment_ids, &Viewer::of(&principal.user))
        .await?;
    let mut out = json!({});
    if !found.is_empty() {
        out["dataset_summaries"] = found.iter().map(wire::dataset_summary).collect();
    }
    Ok(Json(out))
}
