//! GPU telemetry over HTTP (docs/gpu-telemetry.md):
//! - `GET /api/trainyard/v1/gpus`: every GPU now, its job and idle flag
//!   (admins);
//! - `GET /api/trainyard/v1/gpus/heatmap?window=24h&format=svg|png`: the
//!   cluster heatmap (admins);
//! - `GET /api/trainyard/v1/nodes/{node}/gpus?window=…` and
//!   `…/gpus/chart?quantity=utilization&format=svg|png`: a node's GPUs over a
//!   window (admins);
//! - `GET /api/trainyard/v1/jobs/{id}/gpus` and `…/gpus/chart`: a job's GPUs
//!   over its life, for whoever may read the job (404 for the others).
//!
//! A window is `window=1h|6h|24h|7d|30d` back from now, or `from`/`to` in
//! Unix milliseconds (a zoom).

use std::collections::{BTreeMap, HashMap};

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use trainyard_domain::telemetry::{
    GpuLatest, GpuNode, GpuNow, GpuOverview, GpuQuantity, GpuSeries, GpuWindow,
};
use trainyard_store::{Access, NodeGpu};

use crate::AppState;
use crate::auth::{Caller, Principal};
use crate::jobs_api::JobsError;

/// The longest window one read may span.
const MAX_WINDOW_MS: i64 = 366 * 86_400_000;
const MAX_POINTS: usize = 4000;
const DEFAULT_POINTS: usize = 600;

fn admin_only(principal: &Principal) -> Result<(), JobsError> {
    if principal.user.is_admin {
        Ok(())
    } else {
        Err(JobsError::new(
            StatusCode::FORBIDDEN,
            "PERMISSION_DENIED",
            "only admins may see every GPU; a job's own GPUs are on its page",
        ))
    }
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

/// A named window back from now, in milliseconds.
pub fn window_ms(name: &str) -> Option<i64> {
    let (n, unit) = name.split_at(name.len().checked_sub(1)?);
    let n: i64 = n.parse().ok()?;
    let unit = match unit {
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    Some(n.checked_mul(unit)?).filter(|w| (60_000..=MAX_WINDOW_MS).contains(w))
}

impl WindowQuery {
    /// `[from, to]` asked for, else `default` back from `now`.
    fn span(&self, now: i64, default: i64) -> Result<(i64, i64), JobsError> {
        let bad = |field: &str, why: String| {
            JobsError::invalid(
                format!("{field}: {why}"),
                vec![trainyard_domain::FieldError::new(field, why)],
            )
        };
        if let (Some(from), Some(to)) = (self.from, self.to) {
            if to <= from || to - from > MAX_WINDOW_MS {
                return Err(bad(
                    "from",
                    "from must be before to, and at most 366 days apart (Unix milliseconds)"
                        .to_owned(),
                ));
            }
            return Ok((from, to));
        }
        let w = match &self.window {
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
    let now = trainyard_store::now_millis();
    let inventory = state.store.gpu_inventory().await?;
    let telemetry = &state.telemetry;
    let latest = telemetry.latest(now);
    let holders = telemetry.holders();
    let idle = telemetry.idle(&inventory, now).await?;
    let mut nodes: BTreeMap<String, Vec<GpuNow>> = BTreeMap::new();
    for g in inventory {
        let key = (g.node.clone(), g.index);
        nodes.entry(g.node.clone()).or_default().push(GpuNow {
            id: g.id,
            index: g.index,
            latest: latest.get(&g.uuid).map(|l| GpuLatest {
                t_ms: l.t_ms,
                gpu_util: l.sample.gpu_util,
                mem_used_bytes: l.sample.mem_used_bytes,
                temperature_c: l.sample.temperature_c,
                power_w: l.sample.power_mw as f32 / 1000.0,
                power_limit_w: l.sample.power_limit_mw as f32 / 1000.0,
            }),
            job: holders.get(&key).map(|h| h.job_id),
            idle: idle.contains(&key),
            uuid: g.uuid,
            name: g.name,
            memory_total_bytes: g.memory_total_bytes,
        });
    }
    let settings = telemetry.settings();
    Ok(Json(GpuOverview {
        sample_secs: settings.sample_every.as_secs(),
        idle_percent: settings.idle_percent,
        idle_minutes: settings.idle_after.as_secs() / 60,
        nodes: nodes
            .into_iter()
            .map(|(name, gpus)| GpuNode { name, gpus })
            .collect(),
    }))
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
        .unwrap_or(if inventory.len() > 2000 {
            1
        } else if inventory.len() > 400 {
            2
        } else {
            8
        })
        .clamp(1, 24);
    // As many columns as 5-minute buckets, within two pixels each.
    let plot = width.saturating_sub(190) as i64;
    let columns = ((to - from) / 300_000).clamp(12, (plot / 2).max(12)) as usize;
    let heat = state.store.gpu_heat(from, to, now, columns).await?;
    let cells: HashMap<i64, Vec<Option<f32>>> = heat.rows.into_iter().collect();
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
                cells: cells
                    .get(&g.id)
                    .cloned()
                    .unwrap_or_else(|| vec![None; columns]),
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

/// The series of these GPUs over the window.
async fn window(
    state: &AppState,
    node: &str,
    gpus: &[NodeGpu],
    (from, to): (i64, i64),
    points: usize,
) -> Result<GpuWindow, JobsError> {
    let now = trainyard_store::now_millis();
    let ids: Vec<i64> = gpus.iter().map(|g| g.id).collect();
    let mut series = state.store.gpu_series(&ids, from, to, now, points).await?;
    Ok(GpuWindow {
        node: node.to_owned(),
        from_ms: from,
        to_ms: to,
        gpus: gpus
            .iter()
            .map(|g| GpuSeries {
                id: g.id,
                index: g.index,
                uuid: g.uuid.clone(),
                points: series.remove(&g.id).unwrap_or_default(),
            })
            .collect(),
        idle: false,
    })
}

async fn node_gpus(state: &AppState, node: &str) -> Result<Vec<NodeGpu>, JobsError> {
    let gpus: Vec<NodeGpu> = state
        .store
        .gpu_inventory()
        .await?
        .into_iter()
        .filter(|g| g.node == node)
        .collect();
    if gpus.is_empty() {
        return Err(JobsError::new(
            StatusCode::NOT_FOUND,
            "RESOURCE_DOES_NOT_EXIST",
            format!("node {node} has no GPUs known to Trainyard"),
        ));
    }
    Ok(gpus)
}

/// `GET /api/trainyard/v1/nodes/{node}/gpus`
pub async fn node_series(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
    Query(q): Query<WindowQuery>,
) -> Result<Json<GpuWindow>, JobsError> {
    admin_only(&principal)?;
    let gpus = node_gpus(&state, &node).await?;
    let span = q.span(trainyard_store::now_millis(), 6 * 3_600_000)?;
    Ok(Json(window(&state, &node, &gpus, span, q.points()).await?))
}

/// `GET /api/trainyard/v1/nodes/{node}/gpus/chart`
pub async fn node_chart(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(node): Path<String>,
    Query(q): Query<WindowQuery>,
) -> Result<Response, JobsError> {
    admin_only(&principal)?;
    let gpus = node_gpus(&state, &node).await?;
    let span = q.span(trainyard_store::now_millis(), 6 * 3_600_000)?;
    let w = window(&state, &node, &gpus, span, q.points()).await?;
    chart(&q, &format!("{node}: "), &w).await
}

/// The job's GPUs over its life (now for a running one), or an empty
/// window for a job that held none.
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
    let job = record.job;
    let now = trainyard_store::now_millis();
    let (Some(node), Some(started)) = (job.node.clone(), job.started_at) else {
        return Ok(GpuWindow {
            node: job.node.unwrap_or_default(),
            from_ms: now,
            to_ms: now,
            gpus: Vec::new(),
            idle: false,
        });
    };
    let end = job.finished_at.unwrap_or(now).max(started + 1000);
    let span = match (q.from, q.to) {
        (Some(_), Some(_)) => q.span(now, 0)?,
        _ => (started, end),
    };
    let inventory = state.store.gpu_inventory().await?;
    let gpus: Vec<NodeGpu> = inventory
        .iter()
        .filter(|g| g.node == node && job.gpu_indices.contains(&g.index))
        .cloned()
        .collect();
    let mut w = window(state, &node, &gpus, span, q.points()).await?;
    if job.state == trainyard_domain::JobState::Running {
        w.idle = !state.telemetry.idle(&gpus, now).await?.is_empty();
    }
    Ok(w)
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
    let chart = gpu_chart(title, quantity, w, q.width, q.height);
    draw(png, &format!("gpus-{}", quantity.as_str()), move || {
        if png {
            trainyard_charts::line_png(&chart)
        } else {
            trainyard_charts::line_svg(&chart).map(|(s, _)| s.into_bytes())
        }
    })
    .await
}

/// The line chart of one quantity of a window's GPUs.
pub fn gpu_chart(
    title: &str,
    quantity: GpuQuantity,
    w: &GpuWindow,
    width: Option<u32>,
    height: Option<u32>,
) -> trainyard_charts::LineChart {
    trainyard_charts::LineChart {
        title: format!("{title}{}", quantity.title()),
        x_axis: trainyard_charts::XAxis::WallTime,
        series: w
            .gpus
            .iter()
            .map(|g| trainyard_charts::Series {
                label: format!("GPU {}", g.index),
                color: g.index as usize,
                x: g.points.iter().map(|p| p.t_ms as f64).collect(),
                y: g.points.iter().map(|p| quantity.value(p)).collect(),
                min: None,
                max: None,
            })
            .collect(),
        log_y: false,
        smoothing: 0.0,
        x_range: Some((w.from_ms as f64, w.to_ms as f64)),
        width: width.unwrap_or(900).clamp(240, 4096),
        height: height.unwrap_or(320).clamp(160, 4096),
        legend: true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_read_as_people_write_them() {
        assert_eq!(window_ms("24h"), Some(86_400_000));
        assert_eq!(window_ms("7d"), Some(7 * 86_400_000));
        assert_eq!(window_ms("30m"), Some(1_800_000));
        assert_eq!(window_ms("400d"), None, "beyond a year");
        assert_eq!(window_ms("0h"), None);
        assert_eq!(window_ms("h"), None);
        assert_eq!(window_ms(""), None);
        assert_eq!(window_ms("3w"), None);
        assert_eq!(window_ms("99999999999999d"), None);
    }

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
