//! What node agents (`trainyard agent`) call, with their node's token, and
//! how admins make those tokens:
//! - `POST /api/trainyard/v1/agent/register`: the node and its GPUs;
//! - `POST /api/trainyard/v1/agent/readings`: a batch of samples, and
//!   which pod holds which GPU where the agent reads the kubelet;
//! - `POST|GET /api/trainyard/v1/nodes/{node}/tokens`,
//!   `DELETE …/tokens/{id}`: a node's agent tokens (admins).
//!
//! A node's token names its node: an agent writes that node's samples and
//! nothing else (the gate keeps node tokens to the agent API, and these
//! handlers to the token's node). Both answers carry the node's GPUs that
//! jobs hold now, which simulated GPUs follow.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::de::DeserializeOwned;
use trainyard_domain::FieldError;
use trainyard_domain::identity::{ApiToken, NewApiToken, NodeTokenRequest, Via};
use trainyard_domain::telemetry::{AgentAnswer, AgentRegistration, ReadingBatch};
use trainyard_store::GpuInfo;

use crate::AppState;
use crate::auth::{Caller, Principal};
use crate::jobs_api::JobsError;

/// The largest body an agent may send (a full batch is about 2 MB).
pub const MAX_AGENT_BODY_BYTES: usize = 8 << 20;
/// The largest registration (64 GPUs take about 16 KB).
pub const MAX_REGISTRATION_BYTES: usize = 256 << 10;

/// The node the caller's token belongs to.
fn token_node(principal: &Principal) -> Result<&str, JobsError> {
    match &principal.via {
        Via::NodeToken { node } => Ok(node),
        _ => Err(JobsError::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "the agent API takes a node's token",
        )),
    }
}

fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, JobsError> {
    serde_json::from_slice(body).map_err(|e| {
        JobsError::invalid(
            format!("the body is not the agent's JSON: {e}"),
            vec![FieldError::new("body", e.to_string())],
        )
    })
}

fn invalid(e: FieldError) -> JobsError {
    JobsError::invalid(format!("{}: {}", e.field, e.message), vec![e])
}

/// `POST /api/trainyard/v1/agent/register`
pub async fn register(
    State(state): State<AppState>,
    Caller(principal): Caller,
    body: Bytes,
) -> Result<Json<AgentAnswer>, JobsError> {
    let node = token_node(&principal)?;
    let registration: AgentRegistration = parse(&body)?;
    registration.check().map_err(invalid)?;
    if registration.node != node {
        return Err(JobsError::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            format!(
                "this token is node {node}'s; it cannot register node {}",
                registration.node
            ),
        ));
    }
    if let Some(why) = state.jobs.servers_own_node(node).await? {
        return Err(JobsError::new(StatusCode::CONFLICT, "INVALID_STATE", why));
    }
    let gpus: Vec<GpuInfo> = registration
        .gpus
        .iter()
        .map(|g| GpuInfo {
            index: g.index,
            uuid: g.uuid.clone(),
            name: g.name.clone(),
            memory_total_bytes: g.memory_total_bytes,
        })
        .collect();
    state.telemetry.register_agent(node, &gpus).await?;
    tracing::info!(node, gpus = gpus.len(), "node agent registered");
    Ok(Json(AgentAnswer {
        node: node.to_owned(),
        kept: 0,
        held: state.telemetry.held(node),
    }))
}

/// `POST /api/trainyard/v1/agent/readings`
pub async fn readings(
    State(state): State<AppState>,
    Caller(principal): Caller,
    body: Bytes,
) -> Result<Json<AgentAnswer>, JobsError> {
    let node = token_node(&principal)?;
    let batch: ReadingBatch = parse(&body)?;
    batch
        .check(trainyard_store::now_millis())
        .map_err(invalid)?;
    // Samples of GPUs not registered to this node are not kept: a node's
    // token writes its own node's series only.
    let kept = state
        .telemetry
        .ingest(node, &batch.readings, &batch.xids)
        .await
        .map_err(|e| match e {
            trainyard_store::StoreError::NotFound(message) => {
                JobsError::new(StatusCode::CONFLICT, "NODE_NOT_REGISTERED", message)
            }
            other => other.into(),
        })?;
    // Which pod holds which GPU, where the agent reads it from the kubelet:
    // pods of the executor's namespace only (none on the local executor).
    // The readings are stored by now: a failure here must not make the
    // agent send them again, so it is logged, and the next batch tries.
    if let (Some(pods), Some(namespace)) = (&batch.pods, state.jobs.executor().pod_namespace())
        && let Err(e) = state.telemetry.apply_pods(node, namespace, pods).await
    {
        tracing::warn!(node, error = %e, "could not record which GPUs the node's pods got");
    }
    Ok(Json(AgentAnswer {
        node: node.to_owned(),
        kept,
        held: state.telemetry.held(node),
    }))
}

fn admin_only(principal: &Principal) -> Result<(), JobsError> {
    crate::jobs_api::admin_only(principal, "make, list or revoke node tokens")
}

fn checked_node(node: &str) -> Result<(), JobsError> {
    trainyard_domain::telemetry::check_node_name(node).map_err(invalid)
}

/// `POST /api/trainyard/v1/nodes/{node}/tokens`, with an empty body or
/// `{"expires_in_days": 90}`: a new agent token for the node; its secret
/// is in this answer only.
pub async fn create_node_token(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
    body: Bytes,
) -> Result<(StatusCode, Json<NewApiToken>), JobsError> {
    admin_only(&principal)?;
    checked_node(&node)?;
    let request: NodeTokenRequest = if body.iter().all(u8::is_ascii_whitespace) {
        NodeTokenRequest::default()
    } else {
        serde_json::from_slice(&body).map_err(|e| {
            JobsError::invalid(
                format!("the body must be empty or {{\"expires_in_days\": N}}: {e}"),
                Vec::new(),
            )
        })?
    };
    let token = state
        .jobs
        .make_node_token(&principal.user, &node, &request)
        .await
        .map_err(|e| match e {
            trainyard_jobs::NodeTokenError::ServersOwn(why) => {
                JobsError::new(StatusCode::CONFLICT, "INVALID_STATE", why)
            }
            trainyard_jobs::NodeTokenError::Store(e) => e.into(),
        })?;
    Ok((StatusCode::CREATED, Json(token)))
}

/// `GET /api/trainyard/v1/nodes/{node}/tokens`
pub async fn node_tokens(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
) -> Result<Json<Vec<ApiToken>>, JobsError> {
    admin_only(&principal)?;
    checked_node(&node)?;
    Ok(Json(state.store.node_tokens(&node).await?))
}

/// `DELETE /api/trainyard/v1/nodes/{node}`: an admin removes a node that
/// is gone for good (its GPUs, their samples, its agent tokens).
pub async fn remove_node(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
) -> Result<StatusCode, JobsError> {
    crate::jobs_api::admin_only(&principal, "remove nodes")?;
    checked_node(&node)?;
    let removal = state.jobs.remove_node(&node, &principal.user).await?;
    let (status, code) = match &removal {
        trainyard_jobs::NodeRemoval::Removed => {
            state.telemetry.forget_node(&node).await;
            return Ok(StatusCode::NO_CONTENT);
        }
        trainyard_jobs::NodeRemoval::Missing => (StatusCode::NOT_FOUND, "RESOURCE_DOES_NOT_EXIST"),
        trainyard_jobs::NodeRemoval::ExecutorUnsure(_) => {
            (StatusCode::SERVICE_UNAVAILABLE, "TEMPORARILY_UNAVAILABLE")
        }
        _ => (StatusCode::CONFLICT, "INVALID_STATE"),
    };
    Err(JobsError::new(
        status,
        code,
        removal.refusal(&node).unwrap_or_default(),
    ))
}

/// `DELETE /api/trainyard/v1/nodes/{node}/tokens/{id}`
pub async fn revoke_node_token(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path((node, id)): Path<(String, i64)>,
) -> Result<StatusCode, JobsError> {
    admin_only(&principal)?;
    checked_node(&node)?;
    if state
        .jobs
        .revoke_node_token(&principal.user, &node, id)
        .await?
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(JobsError::new(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            format!("node {node} has no live token {id}"),
        ))
    }
}
