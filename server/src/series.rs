//! The native chart endpoint: for a set of runs and metric keys, an x-axis
//! (step, wall time, or time relative to the run's start), an optional range
//! and a point budget, the series downsampled on the server. Each bucket keeps
//! its mean, min and max, so a chart draws the line with its min–max band and
//! the browser never receives a million points.

use axum::Json;
use axum::extract::State;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use trainyard_store::series::{SeriesQuery, XAxis};

use crate::AppState;
use crate::auth::Caller;
use crate::mlflow::ApiError;
use crate::mlflow::request::Req;

pub const MAX_RUNS: usize = 100;
pub const MAX_KEYS: usize = 20;
pub const MAX_POINTS: usize = 2000;
/// Series read at once by one request.
const PARALLEL_SERIES: usize = 4;

#[derive(Deserialize)]
pub struct SeriesRequest {
    run_ids: Vec<String>,
    keys: Vec<String>,
    #[serde(default)]
    x_axis: XAxis,
    x_min: Option<f64>,
    x_max: Option<f64>,
    points: Option<usize>,
}

/// Reads its request like the MLflow API, so bad input gets the same
/// `{"error_code", "message"}` answer.
pub async fn series(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<SeriesRequest>,
) -> Result<Json<SeriesAnswer>, ApiError> {
    if req.run_ids.is_empty() || req.run_ids.len() > MAX_RUNS {
        return Err(ApiError::invalid(format!(
            "run_ids: give 1 to {MAX_RUNS} runs"
        )));
    }
    state
        .store
        .runs_readable(&principal.user, &req.run_ids)
        .await?;
    if req.keys.is_empty() || req.keys.len() > MAX_KEYS {
        return Err(ApiError::invalid(format!(
            "keys: give 1 to {MAX_KEYS} metric keys"
        )));
    }
    let budget = req.points.unwrap_or(1000);
    if budget == 0 || budget > MAX_POINTS {
        return Err(ApiError::invalid(format!(
            "points: the budget per series is 1 to {MAX_POINTS}"
        )));
    }
    if let (Some(lo), Some(hi)) = (req.x_min, req.x_max)
        && lo > hi
    {
        return Err(ApiError::invalid("x_min must not be greater than x_max"));
    }
    let runs = state.store.load_runs(&req.run_ids).await?;
    // Series are read in parallel (a few at a time, each its own task, so
    // decoding uses every core) and answered in the order asked.
    let mut wanted = Vec::with_capacity(runs.len() * req.keys.len());
    for run in &runs {
        let query = SeriesQuery {
            axis: req.x_axis,
            origin: run.info.start_time,
            x_min: req.x_min,
            x_max: req.x_max,
            budget,
        };
        for key in &req.keys {
            wanted.push((run.info.run_id.clone(), key.clone(), query));
        }
    }
    let store = state.store.clone();
    let jobs = wanted.into_iter().map(move |(run_id, key, query)| {
        let store = store.clone();
        tokio::spawn(async move {
            let series = store.downsample_series(&run_id, &key, query).await;
            (run_id, key, series)
        })
    });
    let mut results = futures::stream::iter(jobs).buffered(PARALLEL_SERIES);
    let mut out = Vec::new();
    while let Some(joined) = results.next().await {
        let (run_id, key, series) =
            joined.map_err(|e| ApiError::internal(format!("series task: {e}")))?;
        let series = series?;
        let buckets = &series.buckets;
        out.push(SeriesOut {
            run_id,
            key,
            total_points: series.total_points,
            in_range: series.in_range,
            from_summaries: series.from_summaries,
            x: buckets.iter().map(|b| b.x).collect(),
            y: buckets.iter().map(|b| finite(b.y)).collect(),
            min: buckets.iter().map(|b| finite(b.min)).collect(),
            max: buckets.iter().map(|b| finite(b.max)).collect(),
            count: buckets.iter().map(|b| b.count).collect(),
        });
    }
    Ok(Json(SeriesAnswer { series: out }))
}

#[derive(Serialize)]
pub struct SeriesAnswer {
    series: Vec<SeriesOut>,
}

/// One series as columns: bucket i is `x[i]`, `y[i]`, …
#[derive(Serialize)]
struct SeriesOut {
    run_id: String,
    key: String,
    total_points: usize,
    in_range: usize,
    from_summaries: bool,
    x: Vec<f64>,
    y: Vec<Option<f64>>,
    min: Vec<Option<f64>>,
    max: Vec<Option<f64>>,
    count: Vec<usize>,
}

/// Non-finite values become null: JSON has no NaN.
fn finite(v: Option<f64>) -> Option<f64> {
    v.filter(|v| v.is_finite())
}
