//! `/webhooks`: MLflow 3's registry webhooks (`MlflowClient().create_webhook`,
//! `list_webhooks`, `get_webhook`, `update_webhook`, `delete_webhook`,
//! `test_webhook`). As in MLflow with sign-in, only admins manage them: a
//! webhook is told of every registered model's changes. What is sent, and
//! where it may go, is in `crate::webhooks`.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_domain::identity::Via;
use trainyard_domain::tracking::{WEBHOOK_EVENTS, Webhook};
use trainyard_store::webhooks::{NewWebhook, WebhookChange};

use super::request::Req;
use super::validate::{no_nul, shown};
use super::wire::{self, opt_i64, required};
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::{Caller, Principal, permission_denied};

/// The longest URL, description and secret taken.
const MAX_URL_CHARS: usize = 4_096;
const MAX_DESCRIPTION_CHARS: usize = 5_000;
const MAX_SECRET_CHARS: usize = 1_024;

/// The trail's entry for a webhook made or changed: where it sends, what,
/// and whether it is on (never its secret).
async fn audit(state: &AppState, principal: &Principal, webhook: &Webhook, done: &str) {
    state
        .store
        .audit(
            &principal.user,
            trainyard_domain::identity::AuditAction::WebhookChanged,
            &format!("webhook {} ({})", webhook.webhook_id, webhook.name),
            &format!(
                "{done}: {} to {}, {}",
                webhook.events.join(", "),
                webhook.url,
                webhook.status
            ),
        )
        .await;
}

/// Webhooks are the admins' (a job's token is never one).
fn admin_only(principal: &Principal) -> Result<(), ApiError> {
    if principal.user.is_admin && !matches!(principal.via, Via::RunToken { .. }) {
        return Ok(());
    }
    Err(permission_denied(
        "only admins manage webhooks: a webhook is told of every registered model's changes",
    ))
}

/// MLflow's rule: 1 to 63 letters, digits, `.`, `_` and `-`, beginning and
/// ending with a letter or digit.
fn name(name: &str) -> Result<(), ApiError> {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let ok = (1..=63).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        && edge(name.chars().next())
        && edge(name.chars().last());
    if ok {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Webhook name '{}' is invalid. It must start and end with a letter or digit, be less than 63 characters long, and contain only letters, digits, dots (.), underscores (_), and hyphens (-).",
            shown(name)
        )))
    }
}

/// `{"entity": "MODEL_VERSION", "action": "CREATED"}` as `model_version.created`.
#[derive(Deserialize)]
pub struct EventRef {
    entity: Option<Value>,
    action: Option<Value>,
}

/// An enum as the client sends it: its name, or its number in MLflow's
/// protocol.
fn enum_name(value: Option<&Value>, names: &[&str], field: &str) -> Result<String, ApiError> {
    match value {
        Some(Value::String(s)) => Ok(s.to_ascii_lowercase()),
        Some(Value::Null) | None => Err(ApiError::invalid(format!(
            "Missing value for required parameter '{field}'."
        ))),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|i| names.get(i as usize))
            .map(|s| s.to_string())
            .ok_or_else(|| ApiError::invalid(format!("'{field}' {n} is not one MLflow knows"))),
        Some(other) => Err(ApiError::invalid(format!(
            "'{field}' must be one of MLflow's names for it, not {}",
            shown(&other.to_string())
        ))),
    }
}

fn event(e: &EventRef) -> Result<String, ApiError> {
    const ENTITIES: [&str; 11] = [
        "entity_unspecified",
        "registered_model",
        "model_version",
        "model_version_tag",
        "model_version_alias",
        "prompt",
        "prompt_version",
        "prompt_tag",
        "prompt_version_tag",
        "prompt_alias",
        "budget_policy",
    ];
    const ACTIONS: [&str; 6] = [
        "action_unspecified",
        "created",
        "updated",
        "deleted",
        "set",
        "exceeded",
    ];
    let entity = enum_name(e.entity.as_ref(), &ENTITIES, "events.entity")?;
    let action = enum_name(e.action.as_ref(), &ACTIONS, "events.action")?;
    let event = format!("{entity}.{action}");
    if WEBHOOK_EVENTS.contains(&event.as_str()) {
        return Ok(event);
    }
    if entity == "budget_policy" {
        return Err(ApiError::invalid(
            "'budget_policy.exceeded' is an event of MLflow's AI gateway, which Trainyard does not have",
        ));
    }
    Err(ApiError::invalid(format!(
        "Invalid webhook event '{}'. Valid events are: {}.",
        shown(&event),
        WEBHOOK_EVENTS.join(", ")
    )))
}

fn events(items: &[EventRef]) -> Result<Vec<String>, ApiError> {
    if items.is_empty() {
        return Err(ApiError::invalid(
            "Webhook events must be a non-empty list, e.g. [{\"entity\": \"MODEL_VERSION\", \"action\": \"CREATED\"}]",
        ));
    }
    let mut out: Vec<String> = Vec::new();
    for item in items {
        let e = event(item)?;
        if !out.contains(&e) {
            out.push(e);
        }
    }
    Ok(out)
}

fn status(value: Option<&Value>) -> Result<Option<String>, ApiError> {
    // MLflow reads an empty status as none given.
    if value.is_none_or(|v| v.is_null() || v.as_str() == Some("")) {
        return Ok(None);
    }
    let status = enum_name(value, &["", "active", "disabled"], "status")?;
    match status.as_str() {
        "active" | "disabled" => Ok(Some(status.to_ascii_uppercase())),
        _ => Err(ApiError::invalid(format!(
            "Invalid webhook status '{}'; use ACTIVE or DISABLED",
            shown(&status)
        ))),
    }
}

fn bounded(value: &str, field: &str, max: usize) -> Result<(), ApiError> {
    let n = value.chars().count();
    if n > max {
        return Err(ApiError::invalid(format!(
            "'{field}' has {n} characters, more than the limit of {max}; shorten it"
        )));
    }
    no_nul(value, field)
}

async fn url(state: &AppState, url: &str) -> Result<(), ApiError> {
    bounded(url, "url", MAX_URL_CHARS)?;
    state
        .webhooks
        .sender()
        .check_url(url)
        .await
        .map_err(ApiError::invalid)
}

fn webhook_id(id: &str) -> Result<(), ApiError> {
    if id.len() > 64 {
        return Err(ApiError::not_found(format!(
            "Webhook with ID {id} not found."
        )));
    }
    Ok(())
}

/// A webhook as MLflow's protocol writes it (its secret never).
fn wire_webhook(w: &Webhook) -> Value {
    let mut out = json!({
        "webhook_id": w.webhook_id,
        "name": w.name,
        "url": w.url,
        "events": w.events.iter().map(|e| {
            let (entity, action) = e.split_once('.').unwrap_or((e, ""));
            json!({"entity": entity.to_ascii_uppercase(), "action": action.to_ascii_uppercase()})
        }).collect::<Vec<_>>(),
        "status": w.status,
        "creation_timestamp": w.creation_timestamp,
        "last_updated_timestamp": w.last_updated_timestamp,
    });
    if let Some(d) = w.description.as_deref().filter(|d| !d.is_empty()) {
        out["description"] = json!(d);
    }
    out
}

/// What a create or an update may give.
#[derive(Deserialize)]
pub struct Fields {
    name: Option<String>,
    description: Option<String>,
    url: Option<String>,
    #[serde(default, deserialize_with = "wire::list")]
    events: Vec<EventRef>,
    secret: Option<String>,
    status: Option<Value>,
}

/// The fields given, checked; an empty name, URL or event list is not
/// given (as MLflow reads them).
async fn checked(state: &AppState, req: Fields) -> Result<WebhookChange, ApiError> {
    let mut change = WebhookChange::default();
    if let Some(n) = req.name.filter(|n| !n.is_empty()) {
        name(&n)?;
        change.name = Some(n);
    }
    if let Some(u) = req.url.filter(|u| !u.trim().is_empty()) {
        url(state, &u).await?;
        change.url = Some(u.trim().to_owned());
    }
    if !req.events.is_empty() {
        change.events = Some(events(&req.events)?);
    }
    if let Some(d) = req.description {
        bounded(&d, "description", MAX_DESCRIPTION_CHARS)?;
        change.description = Some(d);
    }
    if let Some(s) = req.secret {
        bounded(&s, "secret", MAX_SECRET_CHARS)?;
        change.secret = Some(s);
    }
    change.status = status(req.status.as_ref())?;
    Ok(change)
}

/// `POST /api/2.0/mlflow/webhooks`.
pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<Fields>,
) -> ApiResult {
    admin_only(&principal)?;
    let given = checked(&state, req).await?;
    let name = required(given.name, "name")?;
    let url = required(given.url, "url")?;
    let events = match given.events {
        Some(events) => events,
        None => events(&[])?,
    };
    let webhook = state
        .store
        .create_webhook(
            NewWebhook {
                name: &name,
                description: given.description.as_deref().filter(|d| !d.is_empty()),
                url: &url,
                events: &events,
                secret: given.secret.as_deref(),
                status: given.status.as_deref().unwrap_or("ACTIVE"),
            },
            (principal.user.id > 0).then_some(principal.user.id),
        )
        .await?;
    audit(&state, &principal, &webhook, "made").await;
    Ok(Json(json!({ "webhook": wire_webhook(&webhook) })))
}

#[derive(Deserialize)]
pub struct List {
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    page_token: Option<String>,
}

/// `GET /api/2.0/mlflow/webhooks`: newest first.
pub async fn list(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<List>,
) -> ApiResult {
    admin_only(&principal)?;
    let limit = wire::max_results(req.max_results, 100, 1000)?;
    let offset = wire::parse_page_token(req.page_token.as_deref().filter(|t| !t.is_empty()))?;
    let (webhooks, more) = state.store.list_webhooks(offset, limit).await?;
    let mut out = json!({ "webhooks": webhooks.iter().map(wire_webhook).collect::<Vec<_>>() });
    if more {
        out["next_page_token"] = json!(wire::page_token(offset + limit));
    }
    Ok(Json(out))
}

/// `GET /api/2.0/mlflow/webhooks/{webhook_id}`.
pub async fn get(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    admin_only(&principal)?;
    webhook_id(&id)?;
    let webhook = state.store.get_webhook(&id).await?;
    Ok(Json(json!({ "webhook": wire_webhook(&webhook) })))
}

/// `PATCH /api/2.0/mlflow/webhooks/{webhook_id}`: the fields given.
pub async fn update(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    Req(req): Req<Fields>,
) -> ApiResult {
    admin_only(&principal)?;
    webhook_id(&id)?;
    let change = checked(&state, req).await?;
    let webhook = state.store.update_webhook(&id, change).await?;
    audit(&state, &principal, &webhook, "changed").await;
    Ok(Json(json!({ "webhook": wire_webhook(&webhook) })))
}

/// `DELETE /api/2.0/mlflow/webhooks/{webhook_id}`, with its deliveries.
pub async fn delete(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
) -> ApiResult {
    admin_only(&principal)?;
    webhook_id(&id)?;
    state.store.delete_webhook(&id).await?;
    state
        .store
        .audit(
            &principal.user,
            trainyard_domain::identity::AuditAction::WebhookChanged,
            &format!("webhook {id}"),
            "deleted",
        )
        .await;
    Ok(Json(json!({})))
}

#[derive(Deserialize)]
pub struct Test {
    event: Option<EventRef>,
}

/// `POST /api/2.0/mlflow/webhooks/{webhook_id}/test`: sends the example
/// payload of an event (the webhook's first unless one is named) once, now,
/// and says how the receiver answered.
pub async fn test(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<String>,
    Req(req): Req<Test>,
) -> ApiResult {
    admin_only(&principal)?;
    webhook_id(&id)?;
    let webhook = state.store.get_webhook(&id).await?;
    let chosen = match &req.event {
        Some(e) => event(e)?,
        None => webhook.events.first().cloned().unwrap_or_default(),
    };
    let secret = state.store.webhook_secret(&id).await?;
    let body = crate::webhooks::body(&chosen, crate::webhooks::example(&chosen));
    let delivery_id = uuid::Uuid::new_v4().to_string();
    let sent = state
        .webhooks
        .sender()
        .send(&webhook.url, secret.as_deref(), &delivery_id, &body)
        .await;
    let mut result = json!({ "success": sent.status.is_some_and(|s| s < 400) });
    if let Some(status) = sent.status {
        result["response_status"] = json!(status);
        result["response_body"] = json!(sent.body);
    }
    if let Some(error) = sent.error {
        result["error_message"] = json!(format!("Failed to test webhook: {error}"));
    }
    Ok(Json(json!({ "result": result })))
}
