//! The native chart endpoint: for a set of runs and metric keys, an x-axis
//! (step, wall time, or time relative to the run's start), an optional range
//! and a point budget, the series downsampled on the server. Each bucket keeps
//! its mean, min and max, so a chart draws the line with its min–max band and
//! the browser never receives a million points.

use axum::Json;
use axum::extract::State;
use serde::Serialize;
use trainyard_domain::explorer::{SERIES_MAX_RUNS, SeriesRequest};

use crate::AppState;
use crate::auth::Caller;
use crate::mlflow::ApiError;
use crate::mlflow::request::Req;

/// Reads its request like the MLflow API, so bad input gets the same
/// `{"error_code", "message"}` answer.
pub async fn series(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<SeriesRequest>,
) -> Result<Json<SeriesAnswer>, ApiError> {
    if req.run_ids.is_empty() || req.run_ids.len() > SERIES_MAX_RUNS {
        return Err(ApiError::invalid(format!(
            "run_ids: give 1 to {SERIES_MAX_RUNS} runs"
        )));
    }
    state
        .store
        .runs_readable(&principal.user, &req.run_ids)
        .await?;
    let budget = req.check().map_err(ApiError::invalid)?;
    let series = state
        .store
        .downsample_many(
            &req.run_ids,
            &req.keys,
            req.x_axis,
            req.x_min,
            req.x_max,
            budget,
        )
        .await?;
    let out = series
        .into_iter()
        .map(|(run_id, key, series)| {
            let buckets = &series.buckets;
            SeriesOut {
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
            }
        })
        .collect();
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
