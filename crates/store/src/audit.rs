//! The admins' audit trail: each entry is written after what it records
//! was done, and a failure to write it is logged, never the action's.

use sea_orm::ConnectionTrait;
use trainyard_domain::identity::{AuditAction, AuditEvent, User};

use crate::identity::clip;
use crate::tracking::get;
use crate::{Store, StoreError, now_millis};

/// The most entries one page of the trail lists.
pub const AUDIT_PAGE: u64 = 200;

/// Which entries a page of the trail lists.
#[derive(Debug, Clone, Default)]
pub struct AuditQuery {
    /// Only entries older than this one (the next page).
    pub before: Option<i64>,
    pub action: Option<AuditAction>,
    /// Only this person's (their username).
    pub actor: Option<String>,
}

impl Store {
    /// Records that `actor` did `action` to `target`. Longer texts are cut
    /// (target 250 characters, detail 2,000).
    pub async fn audit(&self, actor: &User, action: AuditAction, target: &str, detail: &str) {
        let mut sql = self.sql();
        sql.push(
            "INSERT INTO audit_events (time, actor_id, actor, action, target, detail) VALUES (",
        )
        .bind(now_millis())
        .push(", ")
        .bind(actor.id)
        .push(", ")
        .bind(clip(&actor.username, 250))
        .push(", ")
        .bind(action.as_str())
        .push(", ")
        .bind(clip(target, 250))
        .push(", ")
        .bind(clip(detail, 2_000))
        .push(")");
        if let Err(error) = self.connection().execute_raw(sql.build()).await {
            tracing::error!(%error, actor = %actor.username, action = action.as_str(), target, "could not write the audit trail");
        }
    }

    /// A page of the trail, newest first: at most `limit` (and
    /// [`AUDIT_PAGE`]) entries.
    pub async fn audit_events(
        &self,
        query: &AuditQuery,
        limit: u64,
    ) -> Result<Vec<AuditEvent>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT id, time, actor, action, target, detail FROM audit_events WHERE 1 = 1");
        if let Some(before) = query.before {
            sql.push(" AND id < ").bind(before);
        }
        if let Some(action) = query.action {
            sql.push(" AND action = ").bind(action.as_str());
        }
        if let Some(actor) = &query.actor {
            sql.push(" AND actor = ").bind(actor.clone());
        }
        sql.push(" ORDER BY id DESC LIMIT ")
            .bind(limit.min(AUDIT_PAGE) as i64);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| {
                Ok(AuditEvent {
                    id: get(row, "id")?,
                    time: get(row, "time")?,
                    actor: get(row, "actor")?,
                    action: get(row, "action")?,
                    target: get(row, "target")?,
                    detail: get(row, "detail")?,
                })
            })
            .collect()
    }
}
