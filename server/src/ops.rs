//! Operations endpoints: liveness, readiness and Prometheus metrics.

use axum::Json;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use serde_json::json;
use trainyard_store::Readiness;

use crate::AppState;

/// The process is alive and answering.
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// The database answers and every migration is applied.
pub async fn readyz(State(state): State<AppState>) -> impl IntoResponse {
    let engine = state.store.engine().name();
    match state.store.readiness().await {
        Ok(Readiness::Ready) => (
            StatusCode::OK,
            Json(json!({ "status": "ready", "database": engine })),
        ),
        Ok(Readiness::Pending(pending)) => (
            StatusCode::SERVICE_UNAVAILABLE,
            Json(json!({
                "status": "migrations pending",
                "database": engine,
                "pending": pending,
                "hint": "run `trainyard migrate` or restart the server",
            })),
        ),
        Err(err) => {
            tracing::warn!(error = %err, "readiness check failed");
            (
                StatusCode::SERVICE_UNAVAILABLE,
                Json(json!({
                    "status": "database unreachable",
                    "database": engine,
                    "error": err.to_string(),
                })),
            )
        }
    }
}

pub async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let body = state.metrics.render(state.store.pool_stats());
    (
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
}
