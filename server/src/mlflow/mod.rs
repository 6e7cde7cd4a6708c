//! The MLflow tracking REST API (2.0, with MLflow 3's logged models and run
//! inputs), the model registry, and the mlflow-artifacts proxy, so that scripts using the official
//! `mlflow` client work unchanged. Served under `/api/2.0/mlflow/` and
//! `/ajax-api/2.0/mlflow/` (the MLflow UI's prefix); `/api/3.0/mlflow/`
//! answers `server-info`, traces and their assessments, evaluation
//! datasets and registered scorers; every unknown path under these answers
//! MLflow's JSON error.

mod artifacts;
mod assessments;
mod eval_datasets;
mod experiments;
mod metrics;
mod models;
mod multipart;
mod otlp;
mod registry;
pub mod request;
mod runs;
mod scorers;
pub(crate) mod traces;
mod validate;
mod webhooks;
pub mod wire;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::handler::Handler;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post, put};
use serde_json::json;
use trainyard_store::StoreError;

use crate::AppState;

/// Largest JSON request body: a full log-batch with long params and tags fits.
pub const MAX_JSON_BODY: usize = 4 * 1024 * 1024;

/// An error in MLflow's form: `{"error_code": ..., "message": ...}`.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl ApiError {
    pub fn invalid(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::BAD_REQUEST,
            code: "INVALID_PARAMETER_VALUE",
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError {
            status: StatusCode::NOT_FOUND,
            code: "RESOURCE_DOES_NOT_EXIST",
            message: message.into(),
        }
    }

    /// A fault of the server: logged in full, answered in general words.
    pub fn internal(detail: impl std::fmt::Display) -> ApiError {
        tracing::error!(error = %detail, "internal error");
        ApiError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "INTERNAL_ERROR",
            message: "the server failed to answer; see its log".to_owned(),
        }
    }

    pub fn too_large(limit: usize) -> ApiError {
        ApiError {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            code: "REQUEST_LIMIT_EXCEEDED",
            message: format!(
                "the request body is larger than the limit of {limit} bytes; split it up"
            ),
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (
            self.status,
            axum::Json(json!({ "error_code": self.code, "message": self.message })),
        )
            .into_response()
    }
}

impl From<StoreError> for ApiError {
    fn from(err: StoreError) -> Self {
        match err {
            StoreError::NotFound(message) => ApiError::not_found(message),
            StoreError::Rejected(message) => ApiError::invalid(message),
            StoreError::Forbidden(message) => crate::auth::permission_denied(message),
            StoreError::Unavailable(message) => ApiError {
                status: StatusCode::SERVICE_UNAVAILABLE,
                code: "TEMPORARILY_UNAVAILABLE",
                message,
            },
            StoreError::Invalid(e) => ApiError::invalid(e.to_string()),
            StoreError::Conflict { what } => ApiError {
                // MLflow answers 400 here; a 409 would be retried by nothing, but
                // clients match on the code.
                status: StatusCode::BAD_REQUEST,
                code: "RESOURCE_ALREADY_EXISTS",
                message: format!("{what} already exists."),
            },
            StoreError::Sealed(message) => {
                tracing::error!(error = %message, "a sealed secret");
                ApiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    code: "INTERNAL_ERROR",
                    message,
                }
            }
            other => {
                tracing::error!(error = %other, "tracking store error");
                ApiError {
                    status: StatusCode::INTERNAL_SERVER_ERROR,
                    code: "INTERNAL_ERROR",
                    message: "the server could not read or write its database; see its log"
                        .to_owned(),
                }
            }
        }
    }
}

pub type ApiResult = Result<axum::Json<serde_json::Value>, ApiError>;

/// Whether `run_id` is a job's run `own` or a run made under it (its
/// `mlflow.parentRunId` is `own`, in `own`'s experiment): what a job's
/// token writes to (`mlflow.start_run(nested=True)`: a sweep's trials).
pub async fn run_or_child_of(state: &AppState, own: &str, run_id: &str) -> Result<bool, ApiError> {
    if run_id == own {
        return Ok(true);
    }
    if state.store.run_parent(run_id).await?.as_deref() != Some(own) {
        return Ok(false);
    }
    let (theirs, ours) = (
        state.store.run_experiment(run_id).await?,
        state.store.run_experiment(own).await?,
    );
    Ok(theirs.is_some() && theirs == ours)
}

/// May the caller write to this run? A job's token writes to its own run
/// and the runs made under it ([`run_or_child_of`]); everyone else must own
/// the run (or be an admin).
pub async fn may_change_run(
    state: &AppState,
    principal: &crate::auth::Principal,
    run_id: &str,
) -> Result<(), ApiError> {
    if !principal.run_scope_allows(run_id) {
        let child_of_own = match &principal.via {
            crate::auth::Via::RunToken { run_id: own } => {
                run_or_child_of(state, own, run_id).await?
            }
            _ => false,
        };
        if !child_of_own {
            return Err(crate::auth::permission_denied(format!(
                "this job's token writes to its own run and the runs made under it \
                 (mlflow.start_run(nested=True)) only, not to run {run_id}"
            )));
        }
    }
    Ok(state
        .store
        .run_as(&principal.user, run_id, trainyard_store::Access::Change)
        .await?)
}

fn tracking_routes() -> Router<AppState> {
    Router::new()
        .route("/experiments/create", post(experiments::create))
        .route("/experiments/get", get(experiments::get))
        .route("/experiments/get-by-name", get(experiments::get_by_name))
        .route(
            "/experiments/search",
            get(experiments::search).post(experiments::search),
        )
        .route("/experiments/update", post(experiments::update))
        .route("/experiments/delete", post(experiments::delete))
        .route("/experiments/restore", post(experiments::restore))
        .route(
            "/experiments/set-experiment-tag",
            post(experiments::set_tag),
        )
        .route(
            "/experiments/delete-experiment-tag",
            post(experiments::delete_tag),
        )
        .route("/artifacts/list", get(artifacts::list_of_run))
        .route("/runs/create", post(runs::create))
        .route("/runs/update", post(runs::update))
        .route("/runs/get", get(runs::get))
        .route("/runs/search", get(runs::search).post(runs::search))
        .route("/runs/delete", post(runs::delete))
        .route("/runs/restore", post(runs::restore))
        .route("/runs/log-metric", post(runs::log_metric))
        .route("/runs/log-parameter", post(runs::log_parameter))
        .route("/runs/set-tag", post(runs::set_tag))
        .route("/runs/log-model", post(runs::log_model))
        .route("/runs/delete-tag", post(runs::delete_tag))
        .route("/runs/log-batch", post(runs::log_batch))
        .route("/runs/log-inputs", post(runs::log_inputs))
        .route("/runs/outputs", post(runs::log_outputs))
        .route(
            "/experiments/search-datasets",
            post(experiments::search_datasets),
        )
        .route("/logged-models", post(models::create))
        .route(
            "/logged-models/{model_id}",
            get(models::get)
                .patch(models::finalize)
                .delete(models::delete),
        )
        .route("/logged-models/{model_id}/tags", patch(models::set_tags))
        .route(
            "/logged-models/{model_id}/tags/{key}",
            delete(models::delete_tag),
        )
        .route("/logged-models/{model_id}/params", post(models::log_params))
        .route("/metrics/get-history", get(metrics::get_history))
        .route(
            "/metrics/get-history-bulk-interval",
            get(metrics::get_history_bulk_interval),
        )
        .route("/logged-models/search", post(models::search))
        .route("/webhooks", post(webhooks::create).get(webhooks::list))
        .route(
            "/webhooks/{webhook_id}",
            get(webhooks::get)
                .patch(webhooks::update)
                .delete(webhooks::delete),
        )
        .route("/webhooks/{webhook_id}/test", post(webhooks::test))
        .route("/registered-models/create", post(registry::create))
        .route("/registered-models/get", get(registry::get))
        .route("/registered-models/update", patch(registry::update))
        .route("/registered-models/rename", post(registry::rename))
        .route("/registered-models/delete", delete(registry::delete))
        .route(
            "/registered-models/search",
            get(registry::search).post(registry::search),
        )
        .route(
            "/registered-models/get-latest-versions",
            get(registry::latest_versions).post(registry::latest_versions),
        )
        .route("/registered-models/set-tag", post(registry::set_tag))
        .route(
            "/registered-models/delete-tag",
            delete(registry::delete_tag),
        )
        .route(
            "/registered-models/alias",
            get(registry::get_by_alias)
                .post(registry::set_alias)
                .delete(registry::delete_alias),
        )
        .route("/model-versions/create", post(registry::create_version))
        .route("/model-versions/get", get(registry::get_version))
        .route("/model-versions/update", patch(registry::update_version))
        .route("/model-versions/delete", delete(registry::delete_version))
        .route(
            "/model-versions/transition-stage",
            post(registry::transition_stage),
        )
        .route(
            "/model-versions/search",
            get(registry::search_versions).post(registry::search_versions),
        )
        .route(
            "/model-versions/get-download-uri",
            get(registry::download_uri),
        )
        .route(
            "/traces/{trace_id}/tags",
            patch(traces::set_tag).delete(traces::delete_tag),
        )
        .route("/traces/delete-traces", post(traces::delete))
        .route("/traces/link-to-run", post(traces::link_to_run))
        .route("/traces/link-prompts", post(traces::link_prompts))
        .route("/model-versions/set-tag", post(registry::set_version_tag))
        .route(
            "/model-versions/delete-tag",
            delete(registry::delete_version_tag),
        )
        .fallback(unknown_endpoint)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
}

/// Every MLflow route, mounted under both of MLflow's prefixes.
pub fn routes(artifact_limit: usize) -> Router<AppState> {
    let artifacts = artifacts::routes(artifact_limit);
    Router::new()
        .nest("/api/2.0/mlflow", tracking_routes())
        .nest("/ajax-api/2.0/mlflow", tracking_routes())
        .nest("/api/3.0/mlflow", v3_routes())
        .nest("/ajax-api/3.0/mlflow", v3_routes())
        .route(
            "/v1/traces",
            post(otlp::export).layer(DefaultBodyLimit::max(otlp::MAX_OTLP_BODY)),
        )
        .route("/version", get(version))
        .route("/health", get(health))
        .nest("/api/2.0/mlflow-artifacts", artifacts.clone())
        .nest("/ajax-api/2.0/mlflow-artifacts", artifacts)
}

/// What MLflow 3's client asks under `/api/3.0/mlflow/`: what this server
/// offers. Everything else there is an unknown endpoint, in JSON.
fn v3_routes() -> Router<AppState> {
    Router::new()
        .route("/server-info", get(server_info))
        .route("/traces", post(traces::start))
        .route("/traces/search", post(traces::search))
        .route("/traces/{trace_id}", get(traces::get))
        .route("/traces/{trace_id}/assessments", post(assessments::create))
        .route(
            "/traces/{trace_id}/assessments/{assessment_id}",
            get(assessments::get)
                .patch(assessments::update)
                .delete(assessments::delete),
        )
        .route("/datasets/create", post(eval_datasets::create))
        .route(
            "/datasets/search",
            get(eval_datasets::search).post(eval_datasets::search),
        )
        .route(
            "/datasets/{dataset_id}",
            get(eval_datasets::get).delete(eval_datasets::delete),
        )
        .route(
            "/datasets/{dataset_id}/tags",
            patch(eval_datasets::set_tags),
        )
        .route(
            "/datasets/{dataset_id}/tags/{key}",
            delete(eval_datasets::delete_tag),
        )
        .route(
            "/datasets/{dataset_id}/experiment-ids",
            get(eval_datasets::experiment_ids),
        )
        .route(
            "/datasets/{dataset_id}/add-experiments",
            post(eval_datasets::add_experiments),
        )
        .route(
            "/datasets/{dataset_id}/remove-experiments",
            post(eval_datasets::remove_experiments),
        )
        .route(
            "/datasets/{dataset_id}/records",
            get(eval_datasets::records)
                .post(
                    eval_datasets::upsert_records
                        .layer(DefaultBodyLimit::max(eval_datasets::MAX_RECORDS_BODY)),
                )
                .delete(eval_datasets::delete_records),
        )
        .route("/scorers/register", post(scorers::register))
        .route("/scorers/list", get(scorers::list))
        .route("/scorers/versions", get(scorers::versions))
        .route("/scorers/get", get(scorers::get))
        .route("/scorers/delete", delete(scorers::delete))
        .route("/scorers/online-configs", get(scorers::online_configs))
        .route("/scorers/online-config", put(scorers::upsert_online_config))
        .fallback(unknown_endpoint)
        .method_not_allowed_fallback(wrong_method)
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
}

/// The version of MLflow's protocol that this server speaks, for `/version`.
pub const MLFLOW_VERSION: &str = "3.17.2";

async fn server_info() -> axum::Json<serde_json::Value> {
    axum::Json(json!({
        "store_type": "SqlStore",
        "workspaces_enabled": false,
        "trace_archival_enabled": false,
        "multipart_uploads_enabled": true,
        "multipart_downloads_enabled": false,
        "presigned_upload_run_id_supported": false,
        "presigned_upload_model_id_supported": false,
        "features_enabled": {},
    }))
}

/// MLflow's `/version`: clients compare it to their own.
pub async fn version() -> &'static str {
    MLFLOW_VERSION
}

/// MLflow's `/health`: plain `OK` while the process answers.
pub async fn health() -> &'static str {
    "OK"
}

/// A known endpoint asked with a method it does not take.
async fn wrong_method(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::METHOD_NOT_ALLOWED,
        code: "ENDPOINT_NOT_FOUND",
        message: format!(
            "{} does not take {method}; see MLflow's REST API for its method",
            uri.path()
        ),
    }
}

async fn unknown_endpoint(uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "ENDPOINT_NOT_FOUND",
        message: format!("no MLflow endpoint at {}", uri.path()),
    }
}
