//! MLflow 3's evaluation datasets under `/api/3.0/mlflow/datasets/`:
//! `mlflow.genai.datasets.create_dataset`, `get_dataset`, `search_datasets`,
//! `delete_dataset`, the tags and experiments of a dataset, and its records
//! (`merge_records`, `to_df`, `delete_records`), which
//! `mlflow.genai.evaluate(data=dataset)` reads.
//!
//! Datasets are owned as registered models are: their maker changes them,
//! the maker's team reads them, admins do everything. A job's token reads
//! them (an evaluation in a job reads its data) and writes none.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Map, Value, json};
use trainyard_domain::identity::{Principal, Via};
use trainyard_domain::query::{Scope, parse_filter, parse_order_by};
use trainyard_domain::tracking::{DatasetRecord, EvaluationDataset};
use trainyard_store::eval_datasets::{MAX_DATASET_RECORDS, MAX_RECORD_BYTES, NewRecord};
use trainyard_store::{Access, StoreError, Viewer};

use super::request::{Req, lenient_json};
use super::validate::{MAX_TAG_VALUE_LEN, no_nul};
use super::wire::{self, opt_i64, required};
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::Caller;

/// Largest body of a merge of records: `merge_records` sends them all at
/// once, and an evaluation set of a few thousand questions with their
/// retrieved contexts is several megabytes.
pub const MAX_RECORDS_BODY: usize = 32 << 20;
/// Merges read at once: each may hold a few hundred megabytes while its
/// records are read and checked.
static MERGES: tokio::sync::Semaphore = tokio::sync::Semaphore::const_new(2);
/// Most records one page carries; the page's token goes on.
const MAX_RECORDS_PAGE: i64 = 1000;
/// Most tags one request sets.
const MAX_TAGS: usize = 100;
/// Most experiments one request names.
const MAX_IDS: usize = 1000;
const SOURCE_TYPES: [&str; 5] = ["TRACE", "HUMAN", "DOCUMENT", "CODE", "UNSPECIFIED"];

/// A dataset in MLflow's JSON (`mlflow.entities.EvaluationDataset`):
/// tags, schema and profile as JSON text, as MLflow sends them.
fn dataset_json(d: &EvaluationDataset, experiment_ids: Option<&[i64]>) -> Value {
    let tags: Map<String, Value> = d
        .tags
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let mut out = json!({
        "dataset_id": d.dataset_id,
        "name": d.name,
        "tags": Value::Object(tags).to_string(),
        "digest": d.digest,
        "created_time": d.created_time,
        "last_update_time": d.last_update_time,
    });
    if let Some(schema) = &d.schema {
        out["schema"] = json!(schema);
    }
    if d.num_records > 0 {
        out["profile"] = json!(json!({ "num_records": d.num_records }).to_string());
    }
    if let Some(by) = &d.created_by {
        out["created_by"] = json!(by);
    }
    if let Some(by) = &d.last_updated_by {
        out["last_updated_by"] = json!(by);
    }
    if let Some(ids) = experiment_ids.filter(|ids| !ids.is_empty()) {
        out["experiment_ids"] = ids.iter().map(|i| json!(i.to_string())).collect();
    }
    out
}

/// A record as MLflow's `DatasetRecord.to_dict` writes it.
fn record_json(r: &DatasetRecord) -> Value {
    let parsed = |text: &Option<String>| {
        text.as_deref()
            .and_then(|t| serde_json::from_str::<Value>(t).ok())
    };
    let mut out = json!({
        "dataset_record_id": r.dataset_record_id,
        "dataset_id": r.dataset_id,
        "inputs": serde_json::from_str::<Value>(&r.inputs).unwrap_or_else(|_| json!({})),
        "created_time": r.created_time,
        "last_update_time": r.last_update_time,
    });
    for (field, value) in [
        ("outputs", parsed(&r.outputs)),
        ("expectations", parsed(&r.expectations)),
        ("tags", parsed(&r.tags)),
        ("source", parsed(&r.source)),
    ] {
        if let Some(value) = value {
            out[field] = value;
        }
    }
    for (field, value) in [
        ("source_id", &r.source_id),
        ("source_type", &r.source_type),
        ("created_by", &r.created_by),
        ("last_updated_by", &r.last_updated_by),
    ] {
        if let Some(value) = value {
            out[field] = json!(value);
        }
    }
    out
}

/// A job's token reads datasets; this holds beside the gate, which lets it
/// write none.
fn not_a_job(principal: &Principal) -> Result<(), ApiError> {
    if matches!(principal.via, Via::RunToken { .. }) {
        return Err(crate::auth::permission_denied(
            "a job's token reads evaluation datasets but does not change them; change them with your own token",
        ));
    }
    Ok(())
}

/// A dataset id as we make them (`d-` and hex) or a client might give:
/// anything else names no dataset, and is said so.
fn dataset_id(id: &str) -> Result<(), ApiError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        Ok(())
    } else {
        Err(ApiError::not_found(format!(
            "Evaluation dataset with id '{id}' not found"
        )))
    }
}

/// Tags as MLflow's client sends them: a JSON object as text. Strings are
/// kept, other values as their JSON text; null values are left out.
fn tags_of(text: Option<&str>, field: &str) -> Result<Vec<(String, String)>, ApiError> {
    let Some(text) = text.filter(|t| !t.trim().is_empty()) else {
        return Ok(Vec::new());
    };
    let Ok(Value::Object(map)) = lenient_json(text.as_bytes()) else {
        return Err(ApiError::invalid(format!(
            "'{field}' must be a JSON object of tag names and values, e.g. {{\"stage\": \"draft\"}}"
        )));
    };
    if map.len() > MAX_TAGS {
        return Err(ApiError::invalid(format!(
            "'{field}' holds {} tags; set at most {MAX_TAGS} at once",
            map.len()
        )));
    }
    let mut out = Vec::new();
    for (key, value) in map {
        let value = match value {
            Value::Null => continue,
            Value::String(s) => s,
            other => other.to_string(),
        };
        if key.trim().is_empty() || key.chars().count() > 250 {
            return Err(ApiError::invalid(format!(
                "'{field}' has a tag name that is empty or longer than 250 characters"
            )));
        }
        if value.chars().count() > MAX_TAG_VALUE_LEN {
            return Err(ApiError::invalid(format!(
                "'{field}': the value of tag '{key}' is longer than {MAX_TAG_VALUE_LEN} characters"
            )));
        }
        no_nul(&key, field)?;
        no_nul(&value, field)?;
        out.push((key, value));
    }
    Ok(out)
}

/// Experiment ids as the client sends them (strings), each one the caller
/// may add to (their own, or Default), as for runs.
async fn experiments(
    state: &AppState,
    principal: &Principal,
    ids: &[String],
    field: &str,
) -> Result<Vec<i64>, ApiError> {
    if ids.len() > MAX_IDS {
        return Err(ApiError::invalid(format!(
            "'{field}' names {} experiments; name at most {MAX_IDS} at once",
            ids.len()
        )));
    }
    let mut out = Vec::with_capacity(ids.len());
    for id in ids {
        let id = wire::parse_experiment_id(id)?;
        // An admin passes the access check unread: the experiment must
        // still be there.
        state.store.experiment_owner(id).await?;
        state.store.may_add_runs(&principal.user, id).await?;
        if !out.contains(&id) {
            out.push(id);
        }
    }
    Ok(out)
}

#[derive(Deserialize)]
pub struct Create {
    name: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    experiment_ids: Vec<String>,
    tags: Option<String>,
}

/// `POST /api/3.0/mlflow/datasets/create`.
pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Create>,
) -> ApiResult {
    not_a_job(&principal)?;
    let name = required(req.name.filter(|n| !n.trim().is_empty()), "name")?;
    if name.chars().count() > 255 {
        return Err(ApiError::invalid(
            "'name' is longer than 255 characters; shorten it",
        ));
    }
    no_nul(&name, "name")?;
    let tags = tags_of(req.tags.as_deref(), "tags")?;
    let experiment_ids =
        experiments(&state, &principal, &req.experiment_ids, "experiment_ids").await?;
    let user = &principal.user;
    let made = state
        .store
        .create_dataset(
            &name,
            &tags,
            &experiment_ids,
            user.as_owner(),
            &user.username,
        )
        .await?;
    Ok(Json(
        json!({ "dataset": dataset_json(&made, Some(&experiment_ids)) }),
    ))
}

/// `GET /api/3.0/mlflow/datasets/{id}`.
pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    dataset_id(&id)?;
    state
        .store
        .dataset_as(&principal.user, &id, Access::Read)
        .await?;
    let found = state.store.get_dataset(&id).await?;
    Ok(Json(json!({ "dataset": dataset_json(&found, None) })))
}

/// `DELETE /api/3.0/mlflow/datasets/{id}`: with its records. One already
/// gone is no error, as in MLflow.
pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    not_a_job(&principal)?;
    dataset_id(&id)?;
    match state
        .store
        .dataset_as(&principal.user, &id, Access::Change)
        .await
    {
        Err(StoreError::NotFound(_)) => return Ok(Json(json!({}))),
        other => other?,
    }
    state.store.delete_dataset(&id).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct Search {
    #[serde(default, deserialize_with = "wire::list")]
    experiment_ids: Vec<String>,
    filter_string: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    #[serde(default, deserialize_with = "wire::list")]
    order_by: Vec<String>,
    page_token: Option<String>,
}

/// `POST|GET /api/3.0/mlflow/datasets/search`: `name`, `created_time`,
/// `last_update_time`, `created_by`, `last_updated_by` and `tags.*`, newest
/// first unless ordered otherwise.
pub async fn search(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Search>,
) -> ApiResult {
    let limit = wire::max_results(req.max_results, 1000, 1000)?;
    let offset = wire::parse_page_token(req.page_token.as_deref())?;
    let filter = parse_filter(
        req.filter_string.as_deref().unwrap_or(""),
        Scope::EvaluationDatasets,
    )
    .map_err(|e| ApiError::invalid(format!("Invalid filter_string: {e}")))?;
    wire::order_by_bound(&req.order_by)?;
    let order = req
        .order_by
        .iter()
        .map(|o| {
            parse_order_by(o, Scope::EvaluationDatasets)
                .map_err(|e| ApiError::invalid(format!("Invalid order_by `{o}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    if req.experiment_ids.len() > MAX_IDS {
        return Err(ApiError::invalid(format!(
            "'experiment_ids' names {} experiments; name at most {MAX_IDS}",
            req.experiment_ids.len()
        )));
    }
    let viewer = Viewer::of(&principal.user);
    let named = req
        .experiment_ids
        .iter()
        .map(|id| wire::parse_experiment_id(id))
        .collect::<Result<Vec<_>, _>>()?;
    // An experiment the caller may not read shows them nothing, not
    // whether a dataset of theirs is shown there.
    let readable = state.store.readable_experiments(&named, &viewer).await?;
    let experiment_ids: Vec<i64> = named.into_iter().filter(|e| readable.contains(e)).collect();
    if !req.experiment_ids.is_empty() && experiment_ids.is_empty() {
        return Ok(Json(json!({})));
    }
    let found = state
        .store
        .search_eval_datasets(
            &experiment_ids,
            filter.as_ref(),
            &order,
            limit + 1,
            offset,
            &viewer,
        )
        .await?;
    Ok(Json(wire::page(found, limit, offset, "datasets", |d| {
        dataset_json(d, None)
    })))
}

#[derive(Deserialize)]
pub struct SetTags {
    tags: Option<String>,
}

/// `PATCH /api/3.0/mlflow/datasets/{id}/tags`: sets the tags given, keeps
/// the others.
pub async fn set_tags(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    Req(req): Req<SetTags>,
) -> ApiResult {
    not_a_job(&principal)?;
    dataset_id(&id)?;
    let tags = tags_of(Some(&required(req.tags, "tags")?), "tags")?;
    state
        .store
        .dataset_as(&principal.user, &id, Access::Change)
        .await?;
    state.store.set_dataset_tags(&id, &tags).await?;
    Ok(Json(json!({})))
}

/// `DELETE /api/3.0/mlflow/datasets/{id}/tags/{key}`: one that is not
/// there is no error.
pub async fn delete_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path((id, key)): Path<(String, String)>,
) -> ApiResult {
    not_a_job(&principal)?;
    dataset_id(&id)?;
    no_nul(&key, "key")?;
    state
        .store
        .dataset_as(&principal.user, &id, Access::Change)
        .await?;
    state.store.delete_dataset_tag(&id, &key).await?;
    Ok(Json(json!({})))
}

/// `GET /api/3.0/mlflow/datasets/{id}/experiment-ids`: those the caller may
/// see.
pub async fn experiment_ids(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    dataset_id(&id)?;
    state
        .store
        .dataset_as(&principal.user, &id, Access::Read)
        .await?;
    let linked = state.store.dataset_experiment_ids(&id).await?;
    let readable = state
        .store
        .readable_experiments(&linked, &Viewer::of(&principal.user))
        .await?;
    let shown: Vec<String> = linked
        .iter()
        .filter(|e| readable.contains(e))
        .map(i64::to_string)
        .collect();
    Ok(Json(json!({ "experiment_ids": shown })))
}

#[derive(Deserialize)]
pub struct Experiments {
    #[serde(default, deserialize_with = "wire::list")]
    experiment_ids: Vec<String>,
}

/// `POST /api/3.0/mlflow/datasets/{id}/add-experiments`.
pub async fn add_experiments(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    Req(req): Req<Experiments>,
) -> ApiResult {
    not_a_job(&principal)?;
    dataset_id(&id)?;
    state
        .store
        .dataset_as(&principal.user, &id, Access::Change)
        .await?;
    let ids = experiments(&state, &principal, &req.experiment_ids, "experiment_ids").await?;
    let changed = state.store.add_dataset_experiments(&id, &ids).await?;
    Ok(Json(json!({ "dataset": dataset_json(&changed, None) })))
}

/// `POST /api/3.0/mlflow/datasets/{id}/remove-experiments`: one the
/// dataset is not in is no error.
pub async fn remove_experiments(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    Req(req): Req<Experiments>,
) -> ApiResult {
    not_a_job(&principal)?;
    dataset_id(&id)?;
    state
        .store
        .dataset_as(&principal.user, &id, Access::Change)
        .await?;
    if req.experiment_ids.len() > MAX_IDS {
        return Err(ApiError::invalid(format!(
            "'experiment_ids' names {} experiments; name at most {MAX_IDS} at once",
            req.experiment_ids.len()
        )));
    }
    let ids = req
        .experiment_ids
        .iter()
        .map(|e| wire::parse_experiment_id(e))
        .collect::<Result<Vec<_>, _>>()?;
    let changed = state.store.remove_dataset_experiments(&id, &ids).await?;
    Ok(Json(json!({ "dataset": dataset_json(&changed, None) })))
}

#[derive(Deserialize)]
pub struct Upsert {
    records: Option<String>,
}

/// Does a JSON value hold a NUL character, in a string or a key?
fn holds_nul(value: &Value) -> bool {
    match value {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(map) => map.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)),
        _ => false,
    }
}

/// A merge's list of records, read one by one: refused at the first that
/// is not an object, and past [`MAX_DATASET_RECORDS`], before the rest is
/// read (a list of millions of tiny values would otherwise fill memory).
#[derive(Debug)]
struct RecordList(Vec<Map<String, Value>>);

impl<'de> serde::Deserialize<'de> for RecordList {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = RecordList;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON list of record objects")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<RecordList, A::Error> {
                let mut out = Vec::new();
                loop {
                    if out.len() as i64 == MAX_DATASET_RECORDS {
                        if seq.next_element::<serde::de::IgnoredAny>()?.is_some() {
                            return Err(serde::de::Error::custom(format!(
                                "it holds more than {MAX_DATASET_RECORDS} records, all one dataset may hold"
                            )));
                        }
                        break;
                    }
                    match seq.next_element::<Value>()? {
                        Some(Value::Object(map)) => out.push(map),
                        Some(_) => {
                            return Err(serde::de::Error::custom(format!(
                                "records[{}] must be a JSON object with 'inputs' and optionally 'outputs', 'expectations', 'tags' and 'source'",
                                out.len()
                            )));
                        }
                        None => break,
                    }
                }
                Ok(RecordList(out))
            }
        }
        d.deserialize_seq(Visit)
    }
}

/// One record of a merge, checked: what is wrong is named with the
/// record's place in the list.
fn new_record(i: usize, mut fields: Map<String, Value>) -> Result<NewRecord, ApiError> {
    let at = |field: &str| format!("records[{i}].{field}");
    let size = Value::Object(fields.clone()).to_string().len() as i64;
    if size > MAX_RECORD_BYTES {
        return Err(ApiError::invalid(format!(
            "records[{i}] is {size} bytes of JSON, more than the {MAX_RECORD_BYTES} one record may hold; keep long documents in artifacts and refer to them"
        )));
    }
    if fields.iter().any(|(k, v)| k.contains('\0') || holds_nul(v)) {
        return Err(ApiError::invalid(format!(
            "records[{i}] holds a NUL character, which cannot be stored; remove it"
        )));
    }
    let object = |fields: &mut Map<String, Value>, name: &str| match fields.remove(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Object(map)) => Ok(Some(map)),
        Some(_) => Err(ApiError::invalid(format!(
            "'{}' must be a JSON object (field names and values)",
            at(name)
        ))),
    };
    let inputs = object(&mut fields, "inputs")?.ok_or_else(|| {
        ApiError::invalid(format!(
            "'{}' is required: the record's inputs as a JSON object, e.g. {{\"question\": \"...\"}}",
            at("inputs")
        ))
    })?;
    let expectations = object(&mut fields, "expectations")?;
    let tags = object(&mut fields, "tags")?;
    let source = match fields.remove("source") {
        None | Some(Value::Null) => None,
        Some(Value::Object(mut source)) => {
            let kind = match source.remove("source_type") {
                Some(Value::String(kind)) => kind.to_ascii_uppercase(),
                _ => {
                    return Err(ApiError::invalid(format!(
                        "'{}' must name one of {}",
                        at("source.source_type"),
                        SOURCE_TYPES.join(", ")
                    )));
                }
            };
            let kind = if kind == "SOURCE_TYPE_UNSPECIFIED" {
                "UNSPECIFIED".to_owned()
            } else {
                kind
            };
            if !SOURCE_TYPES.contains(&kind.as_str()) {
                return Err(ApiError::invalid(format!(
                    "'{}' is `{kind}`; use one of {}",
                    at("source.source_type"),
                    SOURCE_TYPES.join(", ")
                )));
            }
            let data = match source.remove("source_data") {
                None | Some(Value::Null) => Map::new(),
                Some(Value::Object(data)) => data,
                Some(_) => {
                    return Err(ApiError::invalid(format!(
                        "'{}' must be a JSON object",
                        at("source.source_data")
                    )));
                }
            };
            if let Some(other) = source.keys().next() {
                return Err(ApiError::invalid(format!(
                    "'{}' has a field `{other}`; a source has source_type and source_data",
                    at("source")
                )));
            }
            Some(json!({ "source_type": kind, "source_data": data }))
        }
        Some(_) => {
            return Err(ApiError::invalid(format!(
                "'{}' must be a JSON object: {{\"source_type\": \"HUMAN\", \"source_data\": {{...}}}}",
                at("source")
            )));
        }
    };
    Ok(NewRecord {
        inputs,
        outputs: fields.remove("outputs"),
        expectations,
        tags,
        source,
    })
}

/// `POST /api/3.0/mlflow/datasets/{id}/records`: merges records, as
/// `merge_records` sends them (a JSON list as text).
pub async fn upsert_records(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    Req(req): Req<Upsert, MAX_RECORDS_BODY>,
) -> ApiResult {
    not_a_job(&principal)?;
    dataset_id(&id)?;
    let text = required(req.records, "records")?;
    state
        .store
        .dataset_as(&principal.user, &id, Access::Change)
        .await?;
    let _turn = MERGES
        .acquire()
        .await
        .map_err(|e| ApiError::internal(format!("the merge queue is closed: {e}")))?;
    let parsed = serde_json::from_str::<RecordList>(&text).or_else(|first| {
        // Python's json writes NaN and Infinity bare (a DataFrame's empty
        // cells): read them as MLflow's string forms, as for other bodies.
        super::request::quote_non_finite(text.as_bytes())
            .and_then(|fixed| serde_json::from_slice::<RecordList>(&fixed).ok())
            .ok_or(first)
    });
    let list = match parsed {
        Ok(RecordList(list)) => list,
        Err(e) if e.is_data() => {
            return Err(ApiError::invalid(format!("'records': {e}")));
        }
        Err(e) => {
            return Err(ApiError::invalid(format!(
                "'records' is not valid JSON: {e}; send a JSON list of records, e.g. [{{\"inputs\": {{\"question\": \"...\"}}}}]"
            )));
        }
    };
    drop(text);
    let records = list
        .into_iter()
        .enumerate()
        .map(|(i, v)| new_record(i, v))
        .collect::<Result<Vec<_>, _>>()?;
    let (inserted, updated) = state
        .store
        .upsert_dataset_records(&id, &records, &principal.user.username)
        .await?;
    Ok(Json(
        json!({ "inserted_count": inserted, "updated_count": updated }),
    ))
}

#[derive(Deserialize)]
pub struct Records {
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    page_token: Option<String>,
}

/// `GET /api/3.0/mlflow/datasets/{id}/records`: a page of records in the
/// order they were added (at most 1,000, and fewer when they are large).
pub async fn records(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    Req(req): Req<Records>,
) -> ApiResult {
    dataset_id(&id)?;
    let limit = req.max_results.unwrap_or(MAX_RECORDS_PAGE);
    if limit <= 0 {
        return Err(ApiError::invalid(format!(
            "Invalid value {limit} for parameter 'max_results' supplied. It must be a positive integer"
        )));
    }
    let after = req
        .page_token
        .as_deref()
        .filter(|t| !t.is_empty())
        .map(|t| wire::parse_page_token(Some(t)).map(|n| n as i64))
        .transpose()?;
    state
        .store
        .dataset_as(&principal.user, &id, Access::Read)
        .await?;
    let page = state
        .store
        .dataset_records(&id, limit.min(MAX_RECORDS_PAGE) as u64, after)
        .await?;
    let list: Vec<Value> = page.records.iter().map(record_json).collect();
    let mut out = json!({ "records": Value::Array(list).to_string() });
    if let Some(next) = page.next {
        out["next_page_token"] = json!(wire::page_token(next as u64));
    }
    Ok(Json(out))
}

#[derive(Deserialize)]
pub struct DeleteRecords {
    #[serde(default, deserialize_with = "wire::list")]
    dataset_record_ids: Vec<String>,
}

/// `DELETE /api/3.0/mlflow/datasets/{id}/records`: answers how many went.
pub async fn delete_records(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    Req(req): Req<DeleteRecords>,
) -> ApiResult {
    not_a_job(&principal)?;
    dataset_id(&id)?;
    if req.dataset_record_ids.len() as i64 > MAX_DATASET_RECORDS {
        return Err(ApiError::invalid(format!(
            "'dataset_record_ids' names {} records; a dataset holds at most {MAX_DATASET_RECORDS}",
            req.dataset_record_ids.len()
        )));
    }
    if let Some(bad) = req.dataset_record_ids.iter().find(|r| {
        r.is_empty()
            || r.len() > 64
            || !r
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    }) {
        return Err(ApiError::invalid(format!(
            "'dataset_record_ids' holds `{}`, which is not a record id (dr- and hex digits)",
            bad.chars().take(80).collect::<String>()
        )));
    }
    state
        .store
        .dataset_as(&principal.user, &id, Access::Change)
        .await?;
    let deleted = state
        .store
        .delete_dataset_records(&id, &req.dataset_record_ids)
        .await?;
    Ok(Json(json!({ "deleted_count": deleted })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_are_checked_field_by_field() {
        let object = |v: Value| v.as_object().cloned().unwrap();
        let ok = new_record(
            0,
            object(json!({"inputs": {"q": "?"}, "outputs": "a", "source": {"source_type": "trace", "source_data": {"trace_id": "tr-1"}}})),
        )
        .unwrap();
        assert_eq!(ok.source.unwrap()["source_type"], "TRACE");
        assert_eq!(ok.outputs, Some(json!("a")));
        let err = |v: Value| new_record(3, object(v)).unwrap_err().message;
        assert!(err(json!({"outputs": 1})).contains("records[3].inputs"));
        assert!(err(json!({"inputs": [1]})).contains("records[3].inputs"));
        assert!(err(json!({"inputs": {}, "expectations": "x"})).contains("expectations"));
        assert!(err(json!({"inputs": {}, "source": {"source_type": "ROBOT"}})).contains("ROBOT"));
        assert!(
            err(json!({"inputs": {}, "source": {"source_type": "CODE", "x": 1}})).contains("`x`")
        );
        assert!(err(json!({"inputs": {"q": "a\u{0}b"}})).contains("NUL"));
        assert!(err(json!({"inputs": {"a\u{0}": 1}})).contains("NUL"));
        // A backslash and u0000 written out is text, not a NUL.
        assert!(new_record(0, object(json!({"inputs": {"code": "\\u0000"}}))).is_ok());
        let big = "x".repeat(MAX_RECORD_BYTES as usize);
        assert!(err(json!({"inputs": {"q": big}})).contains("bytes"));
    }

    #[test]
    fn record_lists_stop_at_the_first_that_is_not_an_object() {
        let read = |t: &str| serde_json::from_str::<RecordList>(t);
        assert_eq!(read(r#"[{"inputs": {}}, {}]"#).unwrap().0.len(), 2);
        let err = read(r#"[{"inputs": {}}, 0, 0]"#).unwrap_err().to_string();
        assert!(err.contains("records[1]"), "{err}");
        assert!(read("{}").is_err());
    }

    #[test]
    fn tags_come_as_json_text() {
        assert_eq!(
            tags_of(Some(r#"{"a": "1", "b": 2, "c": null}"#), "tags").unwrap(),
            [
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "2".to_owned())
            ]
        );
        assert!(tags_of(Some("[1]"), "tags").is_err());
        assert!(tags_of(None, "tags").unwrap().is_empty());
    }
}
