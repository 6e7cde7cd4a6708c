//! `/registered-models/*` and `/model-versions/*`: MLflow's model registry
//! (`mlflow.register_model`, aliases, `models:/name@alias` and
//! `models:/name/version`, stages for older clients). A registered model is
//! owned by whoever made it and shared with their team, as experiments are.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::json;
use trainyard_domain::query::{
    CmpOp, Expr, Field, Literal, Predicate, Scope, parse_filter, parse_order_by,
};
use trainyard_store::registry::canonical_stage;
use trainyard_store::{Access, NewVersion, Viewer};

use super::experiments::KeyValue;
use super::request::Req;
use super::validate::{self, MAX_TAG_VALUE_LEN};
use super::wire::{self, opt_i64, required};
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::{Caller, Principal};

/// MLflow's rule for registered model names: not blank, no `/` or `:`.
fn model_name(name: Option<String>) -> Result<String, ApiError> {
    let name = required(name.filter(|n| !n.trim().is_empty()), "name")?;
    if name.contains(['/', ':']) {
        return Err(ApiError::invalid(format!(
            "Invalid model name '{name}'. Names cannot contain '/' or ':'."
        )));
    }
    let len = name.chars().count();
    if len > 256 {
        return Err(ApiError::invalid(format!(
            "The registered model name has {len} characters, more than the limit of 256; shorten it"
        )));
    }
    Ok(name)
}

fn version_number(version: Option<serde_json::Value>) -> Result<i64, ApiError> {
    let value = required(version, "version")?;
    let text = match &value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    text.trim()
        .parse::<i64>()
        .ok()
        .filter(|v| (1..=i64::from(i32::MAX)).contains(v))
        .ok_or_else(|| {
            ApiError::invalid(format!(
                "Parameter 'version' must be a positive integer, got '{text}'"
            ))
        })
}

fn alias_name(alias: Option<String>) -> Result<String, ApiError> {
    let alias = required(alias.filter(|a| !a.is_empty()), "alias")?;
    let word = alias
        .chars()
        .all(|c| c.is_alphanumeric() || c == '_' || c == '-');
    if !word || alias.chars().count() > 255 {
        return Err(ApiError::invalid(format!(
            "Invalid alias name: '{alias}'. Names may only contain alphanumerics, underscores (_), and dashes (-), at most 255."
        )));
    }
    let looks_like_version = alias.len() > 1
        && alias.starts_with(['v', 'V'])
        && alias[1..].chars().all(|c| c.is_ascii_digit());
    if alias.eq_ignore_ascii_case("latest") || looks_like_version {
        return Err(ApiError::invalid(format!(
            "Invalid alias name: '{alias}'. 'latest' and v<number> are reserved for versions."
        )));
    }
    Ok(alias)
}

fn tag_pairs(items: Vec<KeyValue>) -> Result<Vec<(String, String)>, ApiError> {
    if items.len() > 1000 {
        return Err(ApiError::invalid("A request can set at most 1000 tags"));
    }
    super::experiments::key_values(items, "tags", MAX_TAG_VALUE_LEN)
}

/// MLflow's prompts are registered models with this tag set to `true`;
/// their events are told to webhooks as prompts' events.
const IS_PROMPT: &str = "mlflow.prompt.is_prompt";
const PROMPT_TYPE: &str = "_mlflow_prompt_type";
const PROMPT_TEXT: &str = "mlflow.prompt.text";

fn says_prompt(tags: &[(String, String)]) -> bool {
    tags.iter()
        .rev()
        .find(|(k, _)| k == IS_PROMPT)
        .is_some_and(|(_, v)| v.eq_ignore_ascii_case("true"))
}

async fn is_prompt(state: &AppState, name: &str) -> bool {
    state
        .store
        .get_registered_model(name)
        .await
        .is_ok_and(|m| says_prompt(&m.tags))
}

/// Tags as a webhook's payload has them, less those `left_out` (MLflow's
/// own prompt keys).
fn tag_object(tags: &[(String, String)], left_out: &[&str]) -> serde_json::Value {
    serde_json::Value::Object(
        tags.iter()
            .filter(|(k, _)| !left_out.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), json!(v)))
            .collect(),
    )
}

/// The event to tell of `name`: `prompt_event` when it is a prompt,
/// `model_event` when not, or none when no active webhook asked for it.
/// The model is looked up only when some webhook wants one of the two.
async fn event_for(
    state: &AppState,
    name: &str,
    prompt_event: &str,
    model_event: Option<&str>,
) -> Option<String> {
    let candidates: Vec<&str> = [Some(prompt_event), model_event]
        .into_iter()
        .flatten()
        .collect();
    let wanted = state.webhooks.wanted(&candidates).await;
    if wanted.is_empty() {
        return None;
    }
    let event = if is_prompt(state, name).await {
        prompt_event
    } else {
        model_event?
    };
    wanted.into_iter().find(|e| e == event)
}

/// Tells webhooks of a tag set (to `value`) or deleted, on a version or on
/// a prompt; MLflow tells no one of a model's own tags.
async fn tag_event(
    state: &AppState,
    name: &str,
    version: Option<i64>,
    key: &str,
    value: Option<&str>,
) {
    let action = if value.is_some() { "set" } else { "deleted" };
    let (prompt_event, model_event) = match version {
        Some(_) => (
            format!("prompt_version_tag.{action}"),
            Some(format!("model_version_tag.{action}")),
        ),
        None => (format!("prompt_tag.{action}"), None),
    };
    let Some(event) = event_for(state, name, &prompt_event, model_event.as_deref()).await else {
        return;
    };
    let mut data = json!({ "name": name, "key": key });
    if let Some(v) = version {
        data["version"] = json!(v.to_string());
    }
    if let Some(value) = value {
        data["value"] = json!(value);
    }
    state.webhooks.emit(&event, data).await;
}

/// Tells webhooks of an alias set (to `version`) or deleted.
async fn alias_event(state: &AppState, name: &str, alias: &str, version: Option<i64>) {
    let action = if version.is_some() {
        "created"
    } else {
        "deleted"
    };
    let prompt_event = format!("prompt_alias.{action}");
    let model_event = format!("model_version_alias.{action}");
    let Some(event) = event_for(state, name, &prompt_event, Some(&model_event)).await else {
        return;
    };
    let mut data = json!({ "name": name, "alias": alias });
    if let Some(v) = version {
        data["version"] = json!(v.to_string());
    }
    state.webhooks.emit(&event, data).await;
}

async fn may(
    state: &AppState,
    principal: &Principal,
    name: &str,
    access: Access,
) -> Result<(), ApiError> {
    Ok(state
        .store
        .registered_model_as(&principal.user, name, access)
        .await?)
}

#[derive(Deserialize)]
pub struct Named {
    name: Option<String>,
    new_name: Option<String>,
    description: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    tags: Vec<KeyValue>,
    key: Option<String>,
    value: Option<String>,
    alias: Option<String>,
    version: Option<serde_json::Value>,
    #[serde(default, deserialize_with = "wire::list")]
    stages: Vec<String>,
}

pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    let tags = tag_pairs(req.tags)?;
    let model = state
        .store
        .create_registered_model(
            &name,
            req.description.as_deref(),
            &tags,
            principal.user.as_owner(),
        )
        .await?;
    let prompt = says_prompt(&tags);
    let event = if prompt {
        "prompt.created"
    } else {
        "registered_model.created"
    };
    let data = json!({
        "name": name,
        "tags": tag_object(&tags, if prompt { &[IS_PROMPT, PROMPT_TYPE] } else { &[] }),
        "description": req.description.unwrap_or_default(),
    });
    state.webhooks.emit(event, data).await;
    Ok(Json(
        json!({ "registered_model": wire::registered_model(&model) }),
    ))
}

pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    may(&state, &principal, &name, Access::Read).await?;
    let model = state.store.get_registered_model(&name).await?;
    Ok(Json(
        json!({ "registered_model": wire::registered_model(&model) }),
    ))
}

pub async fn update(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    may(&state, &principal, &name, Access::Change).await?;
    let model = state
        .store
        .update_registered_model(&name, req.description.as_deref().unwrap_or(""))
        .await?;
    Ok(Json(
        json!({ "registered_model": wire::registered_model(&model) }),
    ))
}

pub async fn rename(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    let new_name = model_name(req.new_name)
        .map_err(|e| ApiError::invalid(e.message.replace("'name'", "'new_name'")))?;
    may(&state, &principal, &name, Access::Change).await?;
    let model = state
        .store
        .rename_registered_model(&name, &new_name)
        .await?;
    Ok(Json(
        json!({ "registered_model": wire::registered_model(&model) }),
    ))
}

pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    may(&state, &principal, &name, Access::Change).await?;
    state.store.delete_registered_model(&name).await?;
    Ok(Json(json!({})))
}

pub async fn set_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(mut req): Req<Named>,
) -> ApiResult {
    req.version = None;
    set_tag_of(state, principal, req).await
}

pub async fn set_version_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    version_number(req.version.clone())?;
    set_tag_of(state, principal, req).await
}

/// A tag of the registered model, or of its version when one is named.
async fn set_tag_of(state: AppState, principal: Principal, req: Named) -> ApiResult {
    let name = model_name(req.name)?;
    let key = required(req.key, "key")?;
    validate::key(&key, "key")?;
    let value = req.value.unwrap_or_default();
    validate::value(&value, MAX_TAG_VALUE_LEN, "Tag", &key)?;
    may(&state, &principal, &name, Access::Change).await?;
    let version = req.version.map(|v| version_number(Some(v))).transpose()?;
    match version {
        Some(version) => {
            state
                .store
                .set_model_version_tag(&name, version, &key, &value)
                .await?
        }
        None => {
            state
                .store
                .set_registered_model_tag(&name, &key, &value)
                .await?
        }
    }
    tag_event(&state, &name, version, &key, Some(&value)).await;
    Ok(Json(json!({})))
}

pub async fn delete_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(mut req): Req<Named>,
) -> ApiResult {
    req.version = None;
    delete_tag_of(state, principal, req).await
}

pub async fn delete_version_tag(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    version_number(req.version.clone())?;
    delete_tag_of(state, principal, req).await
}

async fn delete_tag_of(state: AppState, principal: Principal, req: Named) -> ApiResult {
    let name = model_name(req.name)?;
    let key = required(req.key, "key")?;
    may(&state, &principal, &name, Access::Change).await?;
    let version = req.version.map(|v| version_number(Some(v))).transpose()?;
    match version {
        Some(version) => {
            state
                .store
                .delete_model_version_tag(&name, version, &key)
                .await?
        }
        None => state.store.delete_registered_model_tag(&name, &key).await?,
    }
    tag_event(&state, &name, version, &key, None).await;
    Ok(Json(json!({})))
}

pub async fn set_alias(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    let alias = alias_name(req.alias)?;
    let version = version_number(req.version)?;
    may(&state, &principal, &name, Access::Change).await?;
    state
        .store
        .set_registered_model_alias(&name, &alias, version)
        .await?;
    alias_event(&state, &name, &alias, Some(version)).await;
    Ok(Json(json!({})))
}

pub async fn delete_alias(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    let alias = required(req.alias, "alias")?;
    may(&state, &principal, &name, Access::Change).await?;
    state
        .store
        .delete_registered_model_alias(&name, &alias)
        .await?;
    alias_event(&state, &name, &alias, None).await;
    Ok(Json(json!({})))
}

pub async fn get_by_alias(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    let alias = required(req.alias, "alias")?;
    may(&state, &principal, &name, Access::Read).await?;
    let version = state.store.model_version_by_alias(&name, &alias).await?;
    Ok(Json(
        json!({ "model_version": wire::model_version(&version) }),
    ))
}

pub async fn latest_versions(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let name = model_name(req.name)?;
    let mut stages = Vec::with_capacity(req.stages.len());
    for stage in &req.stages {
        stages.push(
            canonical_stage(stage)
                .ok_or_else(|| bad_stage(stage))?
                .to_owned(),
        );
    }
    // Each stage once: a list of thousands of "None" asks for one.
    stages.sort();
    stages.dedup();
    may(&state, &principal, &name, Access::Read).await?;
    let versions = state.store.latest_model_versions(&name, &stages).await?;
    let mut out = json!({});
    if !versions.is_empty() {
        out["model_versions"] = versions.iter().map(wire::model_version).collect();
    }
    Ok(Json(out))
}

fn bad_stage(stage: &str) -> ApiError {
    ApiError::invalid(format!(
        "Invalid Model Version stage: {stage}. Value must be one of None, Staging, Production, Archived."
    ))
}

#[derive(Deserialize)]
pub struct Search {
    filter: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    #[serde(default, deserialize_with = "wire::list")]
    order_by: Vec<String>,
    page_token: Option<String>,
}

fn parsed_search(
    req: &Search,
    scope: Scope,
    default_limit: i64,
    max: i64,
) -> Result<
    (
        Option<trainyard_domain::query::Expr>,
        Vec<trainyard_domain::query::OrderBy>,
        u64,
        u64,
    ),
    ApiError,
> {
    let limit = wire::max_results(req.max_results, default_limit, max)?;
    let offset = wire::parse_page_token(req.page_token.as_deref())?;
    let filter = parse_filter(req.filter.as_deref().unwrap_or(""), scope)
        .map_err(|e| ApiError::invalid(format!("Invalid filter: {e}")))?;
    wire::order_by_bound(&req.order_by)?;
    let order = req
        .order_by
        .iter()
        .map(|o| {
            parse_order_by(o, scope)
                .map_err(|e| ApiError::invalid(format!("Invalid order_by `{o}`: {e}")))
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok((filter, order, limit, offset))
}

pub async fn search(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Search>,
) -> ApiResult {
    let (filter, order, limit, offset) = parsed_search(&req, Scope::RegisteredModels, 100, 1000)?;
    let found = state
        .store
        .search_registered_models(
            filter.as_ref(),
            &order,
            limit + 1,
            offset,
            &Viewer::of(&principal.user),
        )
        .await?;
    Ok(Json(wire::page(
        found,
        limit,
        offset,
        "registered_models",
        wire::registered_model,
    )))
}

/// A version search as MLflow's server runs it: prompts' versions are left
/// out unless the filter asks for prompts (`tags.mlflow.prompt.is_prompt =
/// 'true'`, as the client's `search_prompt_versions` does).
fn without_prompts(filter: Option<Expr>) -> Option<Expr> {
    fn asks(expr: &Expr) -> bool {
        match expr {
            Expr::And(all) => all.iter().any(asks),
            Expr::Test(Field::Tag(key), Predicate::Cmp(op, Literal::Str(value)))
                if key == IS_PROMPT =>
            {
                matches!(
                    (op, value.to_ascii_lowercase().as_str()),
                    (CmpOp::Eq, "true") | (CmpOp::Ne, "false")
                )
            }
            _ => false,
        }
    }
    if filter.as_ref().is_some_and(asks) {
        return filter;
    }
    // In the registry a version without the tag differs from 'true'.
    let not_prompt = Expr::Test(
        Field::Tag(IS_PROMPT.to_owned()),
        Predicate::Cmp(CmpOp::Ne, Literal::Str("true".to_owned())),
    );
    Some(match filter {
        Some(Expr::And(mut all)) => {
            all.push(not_prompt);
            Expr::And(all)
        }
        Some(other) => Expr::And(vec![other, not_prompt]),
        None => not_prompt,
    })
}

pub async fn search_versions(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Search>,
) -> ApiResult {
    let (filter, order, limit, offset) =
        parsed_search(&req, Scope::ModelVersions, 10_000, 200_000)?;
    let filter = without_prompts(filter);
    let found = state
        .store
        .search_model_versions(
            filter.as_ref(),
            &order,
            limit + 1,
            offset,
            &Viewer::of(&principal.user),
        )
        .await?;
    Ok(Json(wire::page(
        found,
        limit,
        offset,
        "model_versions",
        wire::model_version,
    )))
}

#[derive(Deserialize)]
pub struct CreateVersion {
    name: Option<String>,
    source: Option<String>,
    run_id: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    tags: Vec<KeyValue>,
    run_link: Option<String>,
    description: Option<String>,
    model_id: Option<String>,
}

/// Where a version's files are, from the URI it is registered from; and its
/// run and logged model, when the source names them.
async fn resolve_source(
    state: &AppState,
    principal: &Principal,
    source: &str,
    run_id: Option<String>,
    model_id: Option<String>,
) -> Result<(String, Option<String>, Option<String>), ApiError> {
    let logged = |id: String| async move {
        state
            .store
            .logged_model_as(&principal.user, &id, Access::Read)
            .await?;
        Ok::<_, ApiError>(state.store.get_logged_model(&id).await?)
    };
    if let Some(rest) = source.strip_prefix("models:/") {
        let rest = rest.trim_end_matches('/');
        if rest.starts_with("m-") && !rest.contains('/') {
            let model = logged(rest.to_owned()).await?;
            let run = run_id.or(model.source_run_id.clone());
            return Ok((model.artifact_uri, run, Some(model.model_id)));
        }
        if let Some((name, version)) = rest.split_once('/')
            && let Ok(version) = version.parse::<i64>()
        {
            may(state, principal, name, Access::Read).await?;
            let from = state.store.get_model_version(name, version).await?;
            return Ok((
                from.storage_location,
                run_id.or(from.run_id),
                model_id.or(from.model_id),
            ));
        }
        return Err(ApiError::invalid(format!(
            "Unable to fetch model from model URI source artifact location '{source}': use models:/<model_id> or models:/<name>/<version>"
        )));
    }
    let run_id = match (run_id, &model_id) {
        (Some(run), _) => Some(run),
        (None, Some(id)) => logged(id.clone()).await?.source_run_id,
        (None, None) => None,
    };
    Ok((source.to_owned(), run_id, model_id))
}

pub async fn create_version(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<CreateVersion>,
) -> ApiResult {
    let name = model_name(req.name)?;
    let source = required(req.source.filter(|s| !s.is_empty()), "source")?;
    if source.chars().count() > 65_536 {
        return Err(ApiError::invalid(
            "'source' is longer than 65536 characters; shorten it",
        ));
    }
    let tags = tag_pairs(req.tags)?;
    let prompt = says_prompt(&tags);
    if let Some(run) = &req.run_id {
        validate::run_id(run)?;
        state
            .store
            .run_as(&principal.user, run, Access::Read)
            .await?;
    }
    may(&state, &principal, &name, Access::Change).await?;
    let (storage_location, run_id, model_id) = resolve_source(
        &state,
        &principal,
        &source,
        req.run_id.filter(|r| !r.is_empty()),
        req.model_id.filter(|m| !m.is_empty()),
    )
    .await?;
    let version = state
        .store
        .create_model_version(
            &name,
            NewVersion {
                source: source.clone(),
                storage_location,
                run_id: run_id.clone(),
                run_link: req.run_link.unwrap_or_default(),
                description: req.description.clone().unwrap_or_default(),
                user_name: principal.user.username.clone(),
                model_id,
                tags: tags.clone(),
            },
        )
        .await?;
    let description = req.description.filter(|d| !d.is_empty());
    let number = version.version.to_string();
    let (event, data) = if prompt {
        let template = tags.iter().rev().find(|(k, _)| k == PROMPT_TEXT);
        let data = json!({
            "name": name, "version": number,
            "template": template.map(|(_, v)| v),
            "tags": tag_object(&tags, &[IS_PROMPT, PROMPT_TYPE, PROMPT_TEXT]),
            "description": description,
        });
        ("prompt_version.created", data)
    } else {
        let data = json!({
            "name": name, "version": number, "source": source, "run_id": run_id,
            "tags": tag_object(&tags, &[]), "description": description,
        });
        ("model_version.created", data)
    };
    state.webhooks.emit(event, data).await;
    Ok(Json(
        json!({ "model_version": wire::model_version(&version) }),
    ))
}

#[derive(Deserialize)]
pub struct VersionRef {
    name: Option<String>,
    version: Option<serde_json::Value>,
    description: Option<String>,
    stage: Option<String>,
    archive_existing_versions: Option<serde_json::Value>,
}

impl VersionRef {
    fn checked(&self) -> Result<(String, i64), ApiError> {
        Ok((
            model_name(self.name.clone())?,
            version_number(self.version.clone())?,
        ))
    }
}

pub async fn get_version(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<VersionRef>,
) -> ApiResult {
    let (name, version) = req.checked()?;
    may(&state, &principal, &name, Access::Read).await?;
    let found = state.store.get_model_version(&name, version).await?;
    Ok(Json(
        json!({ "model_version": wire::model_version(&found) }),
    ))
}

pub async fn download_uri(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<VersionRef>,
) -> ApiResult {
    let (name, version) = req.checked()?;
    may(&state, &principal, &name, Access::Read).await?;
    let found = state.store.get_model_version(&name, version).await?;
    Ok(Json(json!({ "artifact_uri": found.storage_location })))
}

pub async fn update_version(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<VersionRef>,
) -> ApiResult {
    let (name, version) = req.checked()?;
    may(&state, &principal, &name, Access::Change).await?;
    let updated = state
        .store
        .update_model_version(&name, version, req.description.as_deref().unwrap_or(""))
        .await?;
    Ok(Json(
        json!({ "model_version": wire::model_version(&updated) }),
    ))
}

pub async fn delete_version(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<VersionRef>,
) -> ApiResult {
    let (name, version) = req.checked()?;
    may(&state, &principal, &name, Access::Change).await?;
    state.store.delete_model_version(&name, version).await?;
    Ok(Json(json!({})))
}

pub async fn transition_stage(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<VersionRef>,
) -> ApiResult {
    let (name, version) = req.checked()?;
    let asked = required(req.stage.clone(), "stage")?;
    let stage = canonical_stage(&asked).ok_or_else(|| bad_stage(&asked))?;
    let archive = match &req.archive_existing_versions {
        Some(serde_json::Value::Bool(b)) => *b,
        Some(serde_json::Value::String(s)) => s.eq_ignore_ascii_case("true"),
        _ => false,
    };
    may(&state, &principal, &name, Access::Change).await?;
    let moved = state
        .store
        .transition_model_version_stage(&name, version, stage, archive)
        .await?;
    Ok(Json(
        json!({ "model_version": wire::model_version(&moved) }),
    ))
}
