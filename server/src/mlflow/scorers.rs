//! MLflow 3's scorer registry under `/api/3.0/mlflow/scorers/`:
//! `Scorer.register`, `get_scorer`, `list_scorers`, `list_scorer_versions`,
//! `delete_scorer`, and the online scoring configuration that
//! `scorer.start` and `scorer.stop` set.
//!
//! A scorer is a serialized judge (a built-in scorer, a `make_judge` judge,
//! guidelines) kept by name in an experiment; whoever may read the
//! experiment reads its scorers, and loading one builds the judge in the
//! reader's process. So what could run there is refused, as MLflow's server
//! refuses custom `@scorer` code, and further than it: a built-in scorer
//! class that is not one of MLflow's scorers, and options anywhere in the
//! scorer that would send a judge's requests (and the reader's API key) to
//! a host of the writer's choosing.
//!
//! Who changes a scorer: whoever may add runs to the experiment (its owner,
//! admins); in the shared Default experiment, anyone registers a new name
//! and a scorer stays its maker's. A job's token reads scorers (an
//! evaluation in a job loads its judges); the gate lets it change none.
//!
//! Trainyard has no AI gateway, so it does not score traces as they come:
//! an online configuration may be stored with a sample rate of 0 (stopped),
//! and starting one is refused as MLflow refuses it for a scorer whose
//! model is not a gateway's.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_domain::identity::Principal;
use trainyard_domain::query::{Scope, parse_filter};
use trainyard_domain::tracking::{OnlineScoringConfig, ScorerVersion};
use trainyard_store::scorers::Changer;
use trainyard_store::tracking::DEFAULT_EXPERIMENT;
use trainyard_store::{Access, Viewer};

use super::request::Req;
use super::validate::no_nul;
use super::wire::{self, opt_i64, required};
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::Caller;

/// The largest serialized scorer: a judge's instructions with their
/// examples fit many times over.
pub const MAX_SERIALIZED_BYTES: usize = 256 << 10;
const MAX_NAME_CHARS: usize = 256;
/// Most experiments or scorer ids one request names.
const MAX_IDS: usize = 1000;
const MAX_FILTER_CHARS: usize = 4096;
/// Options of a judge's LLM client that choose where its requests go, or
/// what credentials and headers they carry (MLflow's
/// `GATEWAY_DESTINATION_KEYS`, and the client's own): a scorer loaded by
/// someone else would send their API key there. Refused as keys anywhere
/// in a scorer: third-party kwargs, a judge's `inference_params`, a
/// built-in scorer's fields.
const DESTINATION_KEYS: [&str; 9] = [
    "api_base",
    "base_url",
    "model_list",
    "fallbacks",
    "custom_llm_provider",
    "api_key",
    "extra_headers",
    "headers",
    "api_version",
];
/// MLflow 3.17's built-in scorer classes: the client builds
/// `builtin_scorers.<class>(**fields)` when it loads one, so any other name
/// (a function of that module, say) is refused.
const BUILTIN_SCORERS: [&str; 24] = [
    "Completeness",
    "ConversationCompleteness",
    "ConversationalGuidelines",
    "ConversationalRoleAdherence",
    "ConversationalSafety",
    "ConversationalToolCallEfficiency",
    "Correctness",
    "Equivalence",
    "ExpectationsGuidelines",
    "Fluency",
    "Guidelines",
    "KnowledgeRetention",
    "PIIDetection",
    "RegexMatch",
    "RelevanceToQuery",
    "ResponseLength",
    "RetrievalGroundedness",
    "RetrievalRelevance",
    "RetrievalSufficiency",
    "Safety",
    "Summarization",
    "ToolCallCorrectness",
    "ToolCallEfficiency",
    "UserFrustration",
];

fn scorer_json(s: &ScorerVersion) -> Value {
    json!({
        "experiment_id": s.experiment_id,
        "scorer_name": s.name,
        "scorer_version": s.version,
        "serialized_scorer": s.serialized,
        "creation_time": s.creation_time,
        "scorer_id": s.scorer_id,
    })
}

fn config_json(c: &OnlineScoringConfig) -> Value {
    let mut out = json!({
        "online_scoring_config_id": c.config_id,
        "scorer_id": c.scorer_id,
        "sample_rate": c.sample_rate,
        "experiment_id": c.experiment_id.to_string(),
    });
    if let Some(filter) = &c.filter_string {
        out["filter_string"] = json!(filter);
    }
    out
}

fn scorer_name(name: Option<String>) -> Result<String, ApiError> {
    let name = required(name, "name")?;
    if name.trim().is_empty() {
        return Err(ApiError::invalid(
            "Scorer name cannot be empty or contain only whitespace.",
        ));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::invalid(format!(
            "Scorer name is longer than {MAX_NAME_CHARS} characters; shorten it"
        )));
    }
    no_nul(&name, "name")?;
    Ok(name)
}

fn version_of(version: Option<i64>) -> Result<Option<i32>, ApiError> {
    version
        .map(|v| {
            i32::try_from(v).ok().filter(|v| *v >= 1).ok_or_else(|| {
                ApiError::invalid(format!(
                    "'version' must be a scorer version (1, 2, …), got {v}"
                ))
            })
        })
        .transpose()
}

/// Does any object in `value` carry custom code (`call_source`, which the
/// client runs with `exec` when it loads the scorer)?
fn has_code(value: &Value) -> bool {
    match value {
        Value::Object(map) => {
            map.get("call_source").is_some_and(|v| !v.is_null()) || map.values().any(has_code)
        }
        Value::Array(items) => items.iter().any(has_code),
        _ => false,
    }
}

/// The destination options set anywhere under `value` (not null), as
/// MLflow finds them in third-party kwargs: keys of objects, and
/// `[key, value]` pairs in lists. Built-in scorers write `extra_headers:
/// null` themselves.
fn destination_keys(value: &Value, found: &mut Vec<&'static str>) {
    fn note(key: &str, found: &mut Vec<&'static str>) {
        if let Some(k) = DESTINATION_KEYS.iter().find(|k| **k == key)
            && !found.contains(k)
        {
            found.push(k);
        }
    }
    match value {
        Value::Object(map) => {
            for (key, nested) in map {
                if !nested.is_null() {
                    note(key, found);
                }
                destination_keys(nested, found);
            }
        }
        Value::Array(items) => {
            for nested in items {
                if let Some([Value::String(key), value]) = nested.as_array().map(Vec::as_slice)
                    && !value.is_null()
                {
                    note(key, found);
                }
                destination_keys(nested, found);
            }
        }
        _ => {}
    }
}

/// The `kwargs` of every third-party scorer at any depth (ensembles wrap
/// whole scorers), which reach the wrapped library's LLM client unchanged.
fn third_party_kwargs<'a>(value: &'a Value, out: &mut Vec<&'a Value>) {
    match value {
        Value::Object(map) => {
            if let Some(kwargs) = map
                .get("third_party_scorer_data")
                .and_then(|d| d.get("kwargs"))
                .filter(|k| !k.is_null())
            {
                out.push(kwargs);
            }
            map.values().for_each(|v| third_party_kwargs(v, out));
        }
        Value::Array(items) => items.iter().for_each(|v| third_party_kwargs(v, out)),
        _ => {}
    }
}

/// A built-in scorer class at any depth that is not one of MLflow's.
fn unknown_builtin(value: &Value) -> Option<String> {
    match value {
        Value::Object(map) => {
            if let Some(class) = map.get("builtin_scorer_class").filter(|c| !c.is_null()) {
                let known = class.as_str().is_some_and(|c| BUILTIN_SCORERS.contains(&c));
                if !known {
                    return Some(match class {
                        Value::String(c) => c.clone(),
                        other => other.to_string(),
                    });
                }
            }
            map.values().find_map(unknown_builtin)
        }
        Value::Array(items) => items.iter().find_map(unknown_builtin),
        _ => None,
    }
}

/// The models a scorer's judges name, at any depth (ensembles, MemAlign's
/// base judge).
fn models(value: &Value, out: &mut Vec<Value>) {
    match value {
        Value::Object(map) => {
            for part in [
                "instructions_judge_pydantic_data",
                "builtin_scorer_pydantic_data",
                "third_party_scorer_data",
            ] {
                if let Some(model) = map.get(part).and_then(|d| d.get("model"))
                    && !model.is_null()
                {
                    out.push(model.clone());
                }
            }
            for nested in map.values() {
                models(nested, out);
            }
        }
        Value::Array(items) => items.iter().for_each(|v| models(v, out)),
        _ => {}
    }
}

/// Checks a serialized scorer as MLflow's server does before it stores it,
/// and for what Trainyard lacks (an AI gateway).
fn check_serialized(text: &str) -> Result<(), ApiError> {
    if text.len() > MAX_SERIALIZED_BYTES {
        return Err(ApiError::invalid(format!(
            "'serialized_scorer' is {} bytes; a scorer is at most {} KiB: shorten its instructions or examples",
            text.len(),
            MAX_SERIALIZED_BYTES >> 10
        )));
    }
    no_nul(text, "serialized_scorer")?;
    let Ok(value) = serde_json::from_str::<Value>(text) else {
        return Err(ApiError::invalid("serialized_scorer must be valid JSON"));
    };
    if !value.is_object() {
        return Err(ApiError::invalid(
            "serialized_scorer must be a JSON object, as the client's Scorer.model_dump() writes it",
        ));
    }
    if has_code(&value) {
        return Err(ApiError::invalid(
            "Custom scorer registration (using @scorer decorator) is refused: a custom scorer \
             carries Python code that runs in the process of everyone who loads it. Keep its code \
             in your project and import it, or use built-in scorers or make_judge() scorers, which \
             register.",
        ));
    }
    if let Some(class) = unknown_builtin(&value) {
        return Err(ApiError::invalid(format!(
            "builtin_scorer_class '{class}' is not one of MLflow's built-in scorers ({})",
            BUILTIN_SCORERS.join(", ")
        )));
    }
    let mut kwargs = Vec::new();
    third_party_kwargs(&value, &mut kwargs);
    if kwargs.iter().any(|k| !k.is_object()) {
        return Err(ApiError::invalid(
            "third_party_scorer_data.kwargs must be a JSON object",
        ));
    }
    let mut found = Vec::new();
    destination_keys(&value, &mut found);
    if !found.is_empty() {
        found.sort_unstable();
        let keys: Vec<String> = found.iter().map(|k| format!("'{k}'")).collect();
        return Err(ApiError::invalid(format!(
            "A scorer must not contain {}: these options choose where a judge's LLM client \
             sends requests, or what they carry, in the process of whoever loads the scorer. \
             Configure the judge's endpoint through the provider's environment variables where \
             the scorer runs instead.",
            keys.join(", ")
        )));
    }
    let mut named = Vec::new();
    models(&value, &mut named);
    for model in named {
        let Value::String(model) = model else {
            return Err(ApiError::invalid(format!(
                "Scorer model must be a string, got {model}."
            )));
        };
        if model.trim().is_empty() {
            return Err(ApiError::invalid(
                "Scorer model cannot be empty or contain only whitespace.",
            ));
        }
        if model.starts_with("gateway:/") {
            return Err(ApiError::invalid(format!(
                "The scorer's model '{model}' names an AI gateway endpoint, and this server has no \
                 AI gateway: name a provider's model instead, such as 'openai:/gpt-4o-mini'."
            )));
        }
    }
    Ok(())
}

/// The experiment, which the caller may read and which is active (scorers
/// change in active experiments only).
async fn active_experiment(
    state: &AppState,
    principal: &Principal,
    id: i64,
) -> Result<(), ApiError> {
    state
        .store
        .experiment_as(&principal.user, id, Access::Read)
        .await?;
    let experiment = state.store.get_experiment(id).await?;
    if experiment.lifecycle_stage != "active" {
        return Err(ApiError::invalid(format!(
            "The experiment {id} must be in the 'active' state. Current state is {}.",
            experiment.lifecycle_stage
        )));
    }
    Ok(())
}

/// Who may change the scorers of experiment `id` (register a version,
/// delete, configure): whoever may change the experiment; in Default,
/// anyone, each scorer its maker's (the store checks that in its
/// transaction).
async fn changer(state: &AppState, principal: &Principal, id: i64) -> Result<Changer, ApiError> {
    let user = &principal.user;
    if id == DEFAULT_EXPERIMENT && !user.is_admin {
        return Ok(Changer::Maker(user.id));
    }
    state.store.may_add_runs(user, id).await?;
    Ok(Changer::Experiment)
}

#[derive(Deserialize)]
pub struct Register {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    name: Option<String>,
    serialized_scorer: Option<String>,
}

/// `POST /api/3.0/mlflow/scorers/register`: the scorer's next version.
pub async fn register(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Register>,
) -> ApiResult {
    let experiment = required(req.experiment_id, "experiment_id")?;
    let name = scorer_name(req.name)?;
    let serialized = required(req.serialized_scorer, "serialized_scorer")?;
    check_serialized(&serialized)?;
    let id = wire::parse_experiment_id(&experiment)?;
    active_experiment(&state, &principal, id).await?;
    let who = changer(&state, &principal, id).await?;
    let made = state
        .store
        .register_scorer(id, &name, &serialized, Some(principal.user.id), who)
        .await?;
    Ok(Json(json!({
        "version": made.version,
        "scorer_id": made.scorer_id,
        "experiment_id": made.experiment_id.to_string(),
        "name": made.name,
        "serialized_scorer": made.serialized,
        "creation_time": made.creation_time,
    })))
}

#[derive(Deserialize)]
pub struct List {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    experiment_ids: Option<Value>,
}

/// `GET /api/3.0/mlflow/scorers/list`: the latest version of each scorer
/// of one experiment (`experiment_id`), of several (`experiment_ids`, those
/// the caller may not read left out), or of every experiment they may read.
pub async fn list(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<List>,
) -> ApiResult {
    let one = req.experiment_id.filter(|e| !e.is_empty());
    let many = match req.experiment_ids {
        None | Some(Value::Null) => None,
        Some(Value::Array(items)) => Some(items),
        Some(single) => Some(vec![single]),
    };
    let viewer = Viewer::of(&principal.user);
    let found = match (one, many) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "Cannot specify both 'experiment_id' and 'experiment_ids'. Use 'experiment_ids' to \
                 scope the query to multiple experiments, or 'experiment_id' to scope it to a \
                 single experiment.",
            ));
        }
        (Some(one), None) => {
            let id = wire::parse_experiment_id(&one)?;
            active_experiment(&state, &principal, id).await?;
            state.store.latest_scorers(Some(&[id]), &viewer).await?
        }
        (None, Some(items)) => {
            if items.len() > MAX_IDS {
                return Err(ApiError::invalid(format!(
                    "'experiment_ids' names {} experiments; name at most {MAX_IDS}",
                    items.len()
                )));
            }
            let mut ids = Vec::with_capacity(items.len());
            for item in items {
                let text = match item {
                    Value::String(s) => s,
                    Value::Number(n) => n.to_string(),
                    other => {
                        return Err(ApiError::invalid(format!(
                            "'experiment_ids' holds {other}; each must be an experiment ID"
                        )));
                    }
                };
                ids.push(wire::parse_experiment_id(&text)?);
            }
            ids.sort_unstable();
            ids.dedup();
            state.store.latest_scorers(Some(&ids), &viewer).await?
        }
        (None, None) => state.store.latest_scorers(None, &viewer).await?,
    };
    Ok(Json(
        json!({ "scorers": found.iter().map(scorer_json).collect::<Vec<_>>() }),
    ))
}

#[derive(Deserialize)]
pub struct Named {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    name: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    version: Option<i64>,
}

/// The experiment (readable, active) and name of a request.
async fn named(
    state: &AppState,
    principal: &Principal,
    req: Named,
) -> Result<(i64, String, Option<i32>), ApiError> {
    let experiment = required(req.experiment_id, "experiment_id")?;
    let name = scorer_name(req.name)?;
    let version = version_of(req.version)?;
    let id = wire::parse_experiment_id(&experiment)?;
    active_experiment(state, principal, id).await?;
    Ok((id, name, version))
}

/// `GET /api/3.0/mlflow/scorers/versions`: every version, oldest first.
pub async fn versions(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let (id, name, _) = named(&state, &principal, req).await?;
    let found = state.store.scorer_versions(id, &name).await?;
    Ok(Json(
        json!({ "scorers": found.iter().map(scorer_json).collect::<Vec<_>>() }),
    ))
}

/// `GET /api/3.0/mlflow/scorers/get`: one version, or the latest.
pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let (id, name, version) = named(&state, &principal, req).await?;
    let found = state.store.get_scorer(id, &name, version).await?;
    Ok(Json(json!({ "scorer": scorer_json(&found) })))
}

/// `DELETE /api/3.0/mlflow/scorers/delete`: one version, or all of them.
pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Named>,
) -> ApiResult {
    let (id, name, version) = named(&state, &principal, req).await?;
    let who = changer(&state, &principal, id).await?;
    state.store.delete_scorer(id, &name, version, who).await?;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct Configs {
    #[serde(default, deserialize_with = "wire::list")]
    scorer_ids: Vec<String>,
}

/// `GET /api/3.0/mlflow/scorers/online-configs?scorer_ids=…`: those of
/// scorers the caller may read; scorers without one are left out.
pub async fn online_configs(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Configs>,
) -> ApiResult {
    if req.scorer_ids.is_empty() {
        return Err(ApiError::invalid(
            "Missing value for required parameter 'scorer_ids'. See the API docs for more information about request parameters.",
        ));
    }
    if req.scorer_ids.len() > MAX_IDS {
        return Err(ApiError::invalid(format!(
            "'scorer_ids' names {} scorers; name at most {MAX_IDS}",
            req.scorer_ids.len()
        )));
    }
    let found = state
        .store
        .online_configs(&req.scorer_ids, &Viewer::of(&principal.user))
        .await?;
    Ok(Json(
        json!({ "configs": found.iter().map(config_json).collect::<Vec<_>>() }),
    ))
}

#[derive(Deserialize)]
pub struct Config {
    #[serde(default, deserialize_with = "wire::opt_id")]
    experiment_id: Option<String>,
    name: Option<String>,
    sample_rate: Option<Value>,
    filter_string: Option<Value>,
}

/// `PUT /api/3.0/mlflow/scorers/online-config`: `scorer.start` and
/// `scorer.stop`. Only a stopped configuration (sample rate 0) is kept:
/// with no AI gateway, this server scores no traces as they come.
pub async fn upsert_online_config(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Config>,
) -> ApiResult {
    let experiment = required(req.experiment_id, "experiment_id")?;
    let name = scorer_name(req.name)?;
    let rate = match required(req.sample_rate, "sample_rate")? {
        Value::Number(n) => n.as_f64(),
        Value::String(s) => s.trim().parse::<f64>().ok(),
        _ => None,
    }
    .filter(|r| r.is_finite())
    .ok_or_else(|| ApiError::invalid("sample_rate must be a number between 0.0 and 1.0"))?;
    if !(0.0..=1.0).contains(&rate) {
        return Err(ApiError::invalid(format!(
            "sample_rate must be between 0.0 and 1.0, got {rate}"
        )));
    }
    let filter = match req.filter_string {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) => Some(s),
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "Invalid value {other} for parameter 'filter_string' supplied: expected a string or null."
            )));
        }
    };
    if let Some(filter) = filter.as_deref().filter(|f| !f.trim().is_empty()) {
        if filter.chars().count() > MAX_FILTER_CHARS {
            return Err(ApiError::invalid(format!(
                "'filter_string' is longer than {MAX_FILTER_CHARS} characters; shorten it"
            )));
        }
        no_nul(filter, "filter_string")?;
        parse_filter(filter, Scope::Traces)
            .map_err(|e| ApiError::invalid(format!("Invalid filter_string: {e}")))?;
    }
    let id = wire::parse_experiment_id(&experiment)?;
    active_experiment(&state, &principal, id).await?;
    let who = changer(&state, &principal, id).await?;
    // The scorer must be there before its configuration is judged.
    state.store.get_scorer(id, &name, None).await?;
    if rate > 0.0 {
        return Err(ApiError::invalid(format!(
            "Scorer '{name}' does not use a gateway model. Automatic evaluation is only supported \
             for scorers that use gateway models, and this server has no AI gateway: score traces \
             with mlflow.genai.evaluate instead (in a Trainyard job, or where the traces are made)."
        )));
    }
    let config = state
        .store
        .upsert_online_config(id, &name, rate, filter.as_deref(), who)
        .await?;
    Ok(Json(json!({ "config": config_json(&config) })))
}
