//! Personal API tokens under `/api/trainyard/v1/tokens`, and `/me`.
//!
//! Tokens are made and revoked from a browser session (or the single-user
//! mode): a token cannot make more tokens, so a leaked one cannot outlive
//! its revocation.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use trainyard_domain::identity::{Me, TokenRequest};

use crate::AppState;
use crate::auth::{Caller, Principal};
use crate::jobs_api::JobsError;

fn from_a_session(principal: &Principal) -> Result<(), JobsError> {
    if principal.has_session() {
        Ok(())
    } else {
        Err(JobsError::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "tokens are made and revoked in the browser (Settings → API tokens), not with a token",
        ))
    }
}

/// `GET /tokens`: the caller's live personal tokens, without secrets.
pub async fn list(
    State(state): State<AppState>,
    Caller(principal): Caller,
) -> Result<Response, JobsError> {
    let tokens = state.store.api_tokens(principal.user.id).await?;
    Ok(Json(serde_json::json!({ "tokens": tokens })).into_response())
}

/// `POST /tokens` `{"name": "laptop", "expires_in_days": 90}`: a new token;
/// its secret is in this answer only.
pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    body: axum::body::Bytes,
) -> Result<Response, JobsError> {
    from_a_session(&principal)?;
    let request: TokenRequest = serde_json::from_slice(&body).map_err(|e| {
        JobsError::invalid(
            format!("the body must be {{\"name\": ..., \"expires_in_days\": ...}}: {e}"),
            Vec::new(),
        )
    })?;
    let made = state
        .store
        .create_personal_token(principal.user.id, &request)
        .await?;
    Ok((StatusCode::CREATED, Json(made)).into_response())
}

/// `DELETE /tokens/{id}`: revokes one of the caller's tokens.
pub async fn revoke(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
) -> Result<Response, JobsError> {
    from_a_session(&principal)?;
    if state.store.revoke_api_token(principal.user.id, id).await? {
        Ok(StatusCode::NO_CONTENT.into_response())
    } else {
        Err(JobsError::new(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            format!("you have no live token {id}"),
        ))
    }
}

/// `GET /me`: who the server takes the caller for.
pub async fn me(State(state): State<AppState>, Caller(principal): Caller) -> Json<Me> {
    Json(Me::of(&principal, state.auth.oidc.is_none()))
}
