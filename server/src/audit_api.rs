//! `GET /api/trainyard/v1/audit` (admins): the audit trail, newest first,
//! 200 a page: `?before=ID` for the next, `?action=team.change` and
//! `?actor=USERNAME` to narrow it.

use axum::Json;
use axum::extract::{Query, State};
use serde::Deserialize;
use trainyard_domain::identity::{AuditAction, AuditEvent};
use trainyard_store::audit::{AUDIT_PAGE, AuditQuery};

use crate::AppState;
use crate::auth::Caller;
use crate::jobs_api::{JobsError, admin_only};

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuditParams {
    before: Option<i64>,
    action: Option<String>,
    actor: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Query(q): Query<AuditParams>,
) -> Result<Json<Vec<AuditEvent>>, JobsError> {
    admin_only(&principal, "read the audit trail")?;
    let action = match q.action.as_deref() {
        None | Some("") => None,
        Some(text) => Some(AuditAction::parse_field(text).map_err(|field| {
            JobsError::invalid(format!("{}: {}", field.field, field.message), vec![field])
        })?),
    };
    let query = AuditQuery {
        before: q.before,
        action,
        actor: q.actor.filter(|a| !a.is_empty()),
    };
    Ok(Json(state.store.audit_events(&query, AUDIT_PAGE).await?))
}
