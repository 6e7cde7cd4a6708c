//! GPU telemetry over HTTP (docs/gpu-telemetry.md):
//! - `GET /api/trainyard/v1/gpus`: every GPU now, its job and idle flag
//!   (admins);
//! - `GET /api/trainyard/v1/gpus/heatmap?window=24h&format=svg|png`: the
//!   cluster heatmap (admins);
//! - `GET /api/trainyard/v1/nodes/{node}/gpus?window=…` and
//!   `…/gpus/chart?quantity=utilization&format=svg|png`: a node's GPUs over a
//!   window (admins);
//! - `GET /api/trainyard/v1/jobs/{id}/gpus` and `…/gpus/chart`: a job's GPUs
//!   over its life, for whoever may read the job (404 for the others);
//! - `GET /api/trainyard/v1/gpus/usage?window=30d&by=team|person&format=json|csv`:
//!   GPU-hours allocated against busy (admins).
//!
//! A window is `window=1h|6h|24h|7d|30d` back from now, or `from`/`to` in
//! Unix milliseconds (a zoom).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use trainyard_domain::telemetry::{
    GpuOverview, GpuQuantity, GpuWindow, MAX_WINDOW_MS, UsageBy, heat_row_height, window_ms,
};
use trainyard_store::Access;

use crate::AppState;
use crate::auth::{Caller, Principal};
use crate::jobs_api::JobsError;

const MAX_POINTS: usize = 4000;
const DEFAULT_POINTS: usize = 600;

fn admin_only(principal: &Principal) -> Result<(), JobsError> {
    crate::jobs_api::admin_only(principal, "see every GPU; a job's own GPUs are on its page")
}

#[derive(Debug, Default, Deserialize)]
pub struct WindowQuery {
    pub window: Option<String>,
    pub from: Option<i64>,
    pub to: Option<i64>,
    pub points: Option<usize>,
    pub quantity: Option<String>,
    pub format: Option<String>,
    pub width: Option<u32>,
    pub height: Option<u32>,
    pub row_height: Option<u32>,
}

/// `[from, to]` asked for, else `window` (or `default`) back from `now`:
/// the span of every query here that reads a stretch of time. (Each query
/// names the three fields itself: `serde(flatten)` cannot parse numbers out
/// of a query string.)
fn span(
    window: Option<&str>,
    from_to: (Option<i64>, Option<i64>),
    now: i64,
    default: i64,
) -> Result<(i64, i64), JobsError> {
    let bad = |field: &str, why: String| {
        JobsError::invalid(
            format!("{field}: {why}"),
            vec![trainyard_domain::FieldError::new(field, why)],
        )
    };
    if let (Some(from), Some(to)) = from_to {
        if to <= from || to.checked_sub(from).is_none_or(|span| span > MAX_WINDOW_MS) {
            return Err(bad(
                "from",
                "from must be before to, and at most 366 days apart (Unix milliseconds)".to_owned(),
            ));
        }
        return Ok((from, to));
    }
    let w = match window {
        Some(name) => window_ms(name.trim()).ok_or_else(|| {
            bad(
                "window",
                format!("`{name}` is not a window; write 1h, 6h, 24h, 7d or 30d (1m to 366d)"),
            )
        })?,
        None => default,
    };
    Ok((now - w, now))
}

impl WindowQuery {
    fn span(&self, now: i64, default: i64) -> Result<(i64, i64), JobsError> {
        span(self.window.as_deref(), (self.from, self.to), now, default)
    }

    fn points(&self) -> usize {
        self.points.unwrap_or(DEFAULT_POINTS).clamp(1, MAX_POINTS)
    }

    fn quantity(&self) -> Result<GpuQuantity, JobsError> {
        let q = self.quantity.as_deref().unwrap_or("utilization");
        GpuQuantity::parse(q).ok_or_else(|| {
            JobsError::invalid(
                format!("quantity: `{q}` is not one of utilization, memory, temperature, power"),
                vec![trainyard_domain::FieldError::new(
                    "quantity",
                    "utilization, memory, temperature or power",
                )],
            )
        })
    }

    fn png(&self) -> Result<bool, JobsError> {
        match self.format.as_deref().unwrap_or("svg") {
            "svg" => Ok(false),
            "png" => Ok(true),
            other => Err(JobsError::invalid(
                format!("format: `{other}` is not svg or png"),
                vec![trainyard_domain::FieldError::new("format", "svg or png")],
            )),
        }
    }
}

/// `GET /api/trainyard/v1/gpus`
pub async fn overview(
    State(state): State<AppState>,
    Caller(principal): Caller,
) -> Result<Json<GpuOverview>, JobsError> {
    admin_only(&principal)?;
    Ok(Json(
        state
            .telemetry
            .overview(trainyard_store::now_millis())
            .await?,
    ))
}

#[derive(Debug, Default, Deserialize)]
pub struct UsageQuery {
    pub window: Option<String>,
    pub from: Option<i64>,
    pub to: Option<i64>,
    pub by: Option<String>,
    pub format: Option<String>,
}

/// `GET /api/trainyard/v1/gpus/usage`
pub async fn usage(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Query(q): Query<UsageQuery>,
) -> Result<Response, JobsError> {
    admin_only(&principal)?;
    let now = trainyard_store::now_millis();
    let span = span(q.window.as_deref(), (q.from, q.to), now, 30 * 86_400_000)?;
    let by_text = q.by.as_deref().unwrap_or("team");
    let by = UsageBy::parse(by_text).ok_or_else(|| {
        JobsError::invalid(
            format!("by: `{by_text}` is not team or person"),
            vec![trainyard_domain::FieldError::new("by", "team or person")],
        )
    })?;
    let csv = match q.format.as_deref().unwrap_or("json") {
        "json" => false,
        "csv" => true,
        other => {
            return Err(JobsError::invalid(
                format!("format: `{other}` is not json or csv"),
                vec![trainyard_domain::FieldError::new("format", "json or csv")],
            ));
        }
    };
    let usage = state.telemetry.usage(span, by, now).await?;
    if !csv {
        return Ok(Json(usage).into_response());
    }
    Ok((
        [
            (header::CONTENT_TYPE, "text/csv; charset=utf-8".to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("attachment; filename=\"gpu-hours-by-{}.csv\"", by.as_str()),
            ),
        ],
        usage.csv(),
    )
        .into_response())
}

/// `GET /api/trainyard/v1/gpus/heatmap`
pub async fn heatmap(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Query(q): Query<WindowQuery>,
) -> Result<Response, JobsError> {
    admin_only(&principal)?;
    let now = trainyard_store::now_millis();
    let (from, to) = q.span(now, 86_400_000)?;
    let png = q.png()?;
    let width = q.width.unwrap_or(1200).clamp(240, 4096);
    let inventory = state.store.gpu_inventory().await?;
    let row_height = q
        .row_height
        .unwrap_or_else(|| heat_row_height(inventory.len()))
        .clamp(1, 24);
    // As many columns as 5-minute buckets, within two pixels each.
    let plot = width.saturating_sub(190) as i64;
    let columns = ((to - from) / 300_000).clamp(12, (plot / 2).max(12)) as usize;
    let heat = state.store.gpu_heat(from, to, now, columns).await?;
    let mut cells: HashMap<i64, Vec<Option<f32>>> = heat.rows.into_iter().collect();
    let mut groups: Vec<trainyard_charts::HeatGroup> = Vec::new();
    for g in &inventory {
        if groups.last().is_none_or(|last| last.label != g.node) {
            groups.push(trainyard_charts::HeatGroup {
                label: g.node.clone(),
                rows: Vec::new(),
            });
        }
        if let Some(group) = groups.last_mut() {
            group.rows.push(trainyard_charts::HeatRow {
                label: format!("GPU {}", g.index),
                cells: cells.remove(&g.id).unwrap_or_else(|| vec![None; columns]),
            });
        }
    }
    let map = trainyard_charts::Heatmap {
        title: format!("GPU utilization, {} GPUs", inventory.len()),
        from_ms: from,
        to_ms: to,
        groups,
        row_height,
        width,
    };
    draw(png, "gpu-heatmap", move || {
        if png {
            trainyard_charts::heatmap_png(&map)
        } else {
            trainyard_charts::heatmap_svg(&map).map(|(s, _)| s.into_bytes())
        }
    })
    .await
}

/// Draws off the async threads and answers with the image.
async fn draw(
    png: bool,
    name: &str,
    f: impl FnOnce() -> Result<Vec<u8>, trainyard_charts::ChartError> + Send + 'static,
) -> Result<Response, JobsError> {
    let bytes = tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| JobsError::internal(format!("drawing: {e}")))?
        .map_err(|e| JobsError::invalid(e.to_string(), Vec::new()))?;
    let (kind, ext) = if png {
        ("image/png", "png")
    } else {
        ("image/svg+xml", "svg")
    };
    Ok((
        [
            (header::CONTENT_TYPE, kind.to_owned()),
            (
                header::CONTENT_DISPOSITION,
                format!("inline; filename=\"{name}.{ext}\""),
            ),
        ],
        bytes,
    )
        .into_response())
}

async fn node_window(
    state: &AppState,
    node: &str,
    q: &WindowQuery,
) -> Result<GpuWindow, JobsError> {
    let span = q.span(trainyard_store::now_millis(), 6 * 3_600_000)?;
    state
        .telemetry
        .node_window(node, span, q.points())
        .await?
        .ok_or_else(|| {
            JobsError::new(
                StatusCode::NOT_FOUND,
                "RESOURCE_DOES_NOT_EXIST",
                format!("node {node} has no GPUs known to Trainyard"),
            )
        })
}

/// `GET /api/trainyard/v1/nodes/{node}/gpus`
pub async fn node_series(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
    Query(q): Query<WindowQuery>,
) -> Result<Json<GpuWindow>, JobsError> {
    admin_only(&principal)?;
    Ok(Json(node_window(&state, &node, &q).await?))
}

/// `GET /api/trainyard/v1/nodes/{node}/gpus/chart`
pub async fn node_chart(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
    Query(q): Query<WindowQuery>,
) -> Result<Response, JobsError> {
    admin_only(&principal)?;
    let w = node_window(&state, &node, &q).await?;
    chart(&q, &format!("{node}: "), &w).await
}

/// The job's GPUs over its life, or over the zoom asked for.
async fn job_window(
    state: &AppState,
    principal: &Principal,
    id: i64,
    q: &WindowQuery,
) -> Result<GpuWindow, JobsError> {
    let record = state
        .store
        .job_as(&principal.user, id, Access::Read)
        .await?;
    let span = match (q.from, q.to) {
        (Some(_), Some(_)) => Some(q.span(trainyard_store::now_millis(), 0)?),
        _ => None,
    };
    Ok(state
        .telemetry
        .job_window(&record.job, span, q.points())
        .await?)
}

/// `GET /api/trainyard/v1/jobs/{id}/gpus`
pub async fn job_series(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
    Query(q): Query<WindowQuery>,
) -> Result<Json<GpuWindow>, JobsError> {
    Ok(Json(job_window(&state, &principal, id, &q).await?))
}

/// `GET /api/trainyard/v1/jobs/{id}/gpus/chart`
pub async fn job_chart(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(id): Path<i64>,
    Query(q): Query<WindowQuery>,
) -> Result<Response, JobsError> {
    let w = job_window(&state, &principal, id, &q).await?;
    chart(&q, &format!("job {id}: "), &w).await
}

/// One line per GPU of the quantity asked for.
async fn chart(q: &WindowQuery, title: &str, w: &GpuWindow) -> Result<Response, JobsError> {
    let quantity = q.quantity()?;
    let png = q.png()?;
    let chart = trainyard_app::gpus::gpu_chart(title, quantity, w, q.width, q.height);
    draw(png, &format!("gpus-{}", quantity.as_str()), move || {
        if png {
            trainyard_charts::line_png(&chart)
        } else {
            trainyard_charts::line_svg(&chart).map(|(s, _)| s.into_bytes())
        }
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zoom_is_checked_and_a_bad_window_names_its_field() {
        let q = WindowQuery {
            from: Some(10),
            to: Some(5),
            ..Default::default()
        };
        assert!(q.span(100, 50).is_err());
        let q = WindowQuery {
            window: Some("yesterday".into()),
            ..Default::default()
        };
        let err = q.span(100, 50).unwrap_err();
        assert!(format!("{err:?}").contains("window"), "{err:?}");
        let q = WindowQuery::default();
        assert_eq!(q.span(1000, 300).unwrap(), (700, 1000));
        assert_eq!(q.points(), DEFAULT_POINTS);
    }
}
