//! `/api/trainyard/v1/teams`: teams as the queue sees them (guaranteed
//! GPUs, fair-share weight, GPUs in use and borrowed, decayed usage), and
//! admins' changes to them; `/api/trainyard/v1/usage`: GPU-hours by
//! period, team and person.

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use trainyard_domain::FieldError;
use trainyard_domain::teams::{NewTeam, TeamPolicy, TeamPolicyChange, UsagePeriod, UsageRow};

use crate::AppState;
use crate::auth::Caller;
use crate::jobs_api::{JobsError, admin_only, field_errors, small_json};

/// The most days one usage request spans.
const MAX_USAGE_DAYS: i64 = 400;

/// `GET /api/trainyard/v1/teams`: every team (admins), or the caller's.
pub async fn list(
    State(state): State<AppState>,
    Caller(principal): Caller,
) -> Result<Json<Vec<TeamPolicy>>, JobsError> {
    let mut teams = state.jobs.team_policies().await?;
    if !principal.user.is_admin {
        teams.retain(|t| principal.user.in_team(t.id));
    }
    Ok(Json(teams))
}

/// `PUT /api/trainyard/v1/teams/{id}` (admins) with `{"quota_gpus": 4,
/// "share": 2}`: what is left out stays.
pub async fn update(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
    body: Bytes,
) -> Result<Json<TeamPolicy>, JobsError> {
    admin_only(&principal, "set teams' quotas and shares")?;
    let change: TeamPolicyChange =
        small_json(&body, "a team change", r#"{"quota_gpus": N, "share": W}"#)?;
    change.check().map_err(field_errors)?;
    let saved = state.jobs.store().set_team_policy(id, &change).await?;
    state
        .jobs
        .team_changed(&principal.user, &saved, false)
        .await;
    Ok(Json(saved))
}

/// `POST /api/trainyard/v1/teams` (admins) with `{"name": "vision",
/// "quota_gpus": 4, "share": 2}`: a team made before its members sign in
/// (they join it through the identity provider's group of that name).
pub async fn create(
    State(state): State<AppState>,
    Caller(principal): Caller,
    body: Bytes,
) -> Result<(axum::http::StatusCode, Json<TeamPolicy>), JobsError> {
    admin_only(&principal, "make teams")?;
    let new: NewTeam = small_json(
        &body,
        "a new team",
        r#"{"name": "group", "quota_gpus": N, "share": W}"#,
    )?;
    let name = new.check().map_err(field_errors)?;
    let change = TeamPolicyChange {
        quota_gpus: new.quota_gpus,
        share: new.share,
    };
    let made = state.jobs.store().create_team(&name, &change).await?;
    state.jobs.team_changed(&principal.user, &made, true).await;
    Ok((axum::http::StatusCode::CREATED, Json(made)))
}

#[derive(Debug, Deserialize)]
pub struct UsageQuery {
    /// day, week or month (UTC).
    period: Option<String>,
    /// Milliseconds since the Unix epoch; the last 30 days by default.
    from: Option<i64>,
    to: Option<i64>,
    /// json or csv.
    format: Option<String>,
}

/// `GET /api/trainyard/v1/usage?period=week&from=…&to=…&format=csv`:
/// GPU-hours by period, team and person: all for admins, the caller's own
/// and their teams' for everyone else.
pub async fn usage(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Query(q): Query<UsageQuery>,
) -> Result<Response, JobsError> {
    let bad = |field: &str, message: String| {
        JobsError::invalid(
            format!("{field}: {message}"),
            vec![FieldError::new(field, message)],
        )
    };
    let period_text = q.period.as_deref().unwrap_or("day");
    let period = UsagePeriod::parse(period_text).ok_or_else(|| {
        bad(
            "period",
            format!("`{period_text}` is not day, week or month"),
        )
    })?;
    let now = trainyard_store::now_millis();
    let to = q.to.unwrap_or(now);
    let from = q.from.unwrap_or(to.saturating_sub(30 * 86_400_000));
    if to <= from {
        return Err(bad("from", "must be before `to`".to_owned()));
    }
    if to
        .checked_sub(from)
        .is_none_or(|span| span > MAX_USAGE_DAYS * 86_400_000)
    {
        return Err(bad(
            "from",
            format!("the span is longer than {MAX_USAGE_DAYS} days; ask for less"),
        ));
    }
    let csv = match q.format.as_deref().unwrap_or("json") {
        "json" => false,
        "csv" => true,
        other => return Err(bad("format", format!("`{other}` is not json or csv"))),
    };
    let rows = state
        .jobs
        .usage_by_period(&principal.user, from, to, period)
        .await?;
    if !csv {
        return Ok(Json(rows).into_response());
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!(
                    "attachment; filename=\"gpu-hours-by-{}.csv\"",
                    period.as_str()
                ),
            ),
        ],
        usage_csv(&rows),
    )
        .into_response())
}

/// One line per period, team and person; names quoted as CSV wants.
fn usage_csv(rows: &[UsageRow]) -> String {
    use trainyard_domain::csv_field as field;
    let mut out = String::from("period_start,team,person,gpu_hours\n");
    for r in rows {
        let start = chrono::DateTime::from_timestamp_millis(r.period_start)
            .map(|t| t.format("%Y-%m-%d").to_string())
            .unwrap_or_default();
        out.push_str(&format!(
            "{start},{},{},{:.3}\n",
            field(r.team.as_deref().unwrap_or("(no team)")),
            field(r.user.as_deref().unwrap_or("(unknown)")),
            r.gpu_hours
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn csv_quotes_names_and_defuses_formulas() {
        let rows = vec![UsageRow {
            period_start: 0,
            team: Some("vi\"sion".into()),
            user: Some("=cmd".into()),
            gpu_hours: 1.5,
        }];
        assert_eq!(
            usage_csv(&rows),
            "period_start,team,person,gpu_hours\n1970-01-01,\"vi\"\"sion\",'=cmd,1.500\n"
        );
    }
}
