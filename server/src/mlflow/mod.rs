//! The MLflow tracking REST API (2.0) and the mlflow-artifacts proxy, so that
//! scripts using the official `mlflow` client work unchanged. Served under
//! `/api/2.0/mlflow/` and `/ajax-api/2.0/mlflow/` (the MLflow UI's prefix).

mod artifacts;
mod experiments;
mod metrics;
pub mod request;
mod runs;
mod validate;
pub mod wire;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
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
            StoreError::Invalid(e) => ApiError::invalid(e.to_string()),
            StoreError::Conflict { what } => ApiError {
                // MLflow answers 400 here; a 409 would be retried by nothing, but
                // clients match on the code.
                status: StatusCode::BAD_REQUEST,
                code: "RESOURCE_ALREADY_EXISTS",
                message: format!("{what} already exists."),
            },
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

/// May the caller write to this run? A job's token writes to its own run
/// only; everyone else must own the run (or be an admin).
pub async fn may_change_run(
    state: &AppState,
    principal: &crate::auth::Principal,
    run_id: &str,
) -> Result<(), ApiError> {
    if !principal.run_scope_allows(run_id) {
        return Err(crate::auth::permission_denied(format!(
            "this job's token writes to its own run only, not to run {run_id}"
        )));
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
        .route("/runs/create", post(runs::create))
        .route("/runs/update", post(runs::update))
        .route("/runs/get", get(runs::get))
        .route("/runs/search", get(runs::search).post(runs::search))
        .route("/runs/delete", post(runs::delete))
        .route("/runs/restore", post(runs::restore))
        .route("/runs/log-metric", post(runs::log_metric))
        .route("/runs/log-parameter", post(runs::log_parameter))
        .route("/runs/set-tag", post(runs::set_tag))
        .route("/runs/delete-tag", post(runs::delete_tag))
        .route("/runs/log-batch", post(runs::log_batch))
        .route("/metrics/get-history", get(metrics::get_history))
        .route(
            "/metrics/get-history-bulk-interval",
            get(metrics::get_history_bulk_interval),
        )
        .route("/logged-models/search", post(logged_models_search))
        .fallback(unknown_endpoint)
        .layer(DefaultBodyLimit::max(MAX_JSON_BODY))
}

/// Every MLflow route, mounted under both of MLflow's prefixes.
pub fn routes(artifact_limit: usize) -> Router<AppState> {
    let artifacts = artifacts::routes(artifact_limit);
    Router::new()
        .nest("/api/2.0/mlflow", tracking_routes())
        .nest("/ajax-api/2.0/mlflow", tracking_routes())
        .nest("/api/2.0/mlflow-artifacts", artifacts.clone())
        .nest("/ajax-api/2.0/mlflow-artifacts", artifacts)
}

/// Logged models are not tracked yet; the client searches them when it lists
/// a run's artifacts by path, and an empty answer is the truth.
async fn logged_models_search() -> axum::Json<serde_json::Value> {
    axum::Json(json!({}))
}

async fn unknown_endpoint(uri: axum::http::Uri) -> ApiError {
    ApiError {
        status: StatusCode::NOT_FOUND,
        code: "ENDPOINT_NOT_FOUND",
        message: format!("no MLflow endpoint at {}", uri.path()),
    }
}
