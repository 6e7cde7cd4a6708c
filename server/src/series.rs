//! The native chart endpoint: for a set of runs and metric keys, an x-axis
//! (step, wall time, or time relative to the run's start), an optional range
//! and a point budget, the series downsampled on the server. Each bucket keeps
//! its mean, min and max, so a chart draws the line with its min–max band and
//! the browser never receives a million points.

use axum::Json;
use axum::extract::State;
use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_domain::tracking::Point;

use crate::AppState;
use crate::mlflow::request::Req;
use crate::mlflow::{ApiError, ApiResult};

pub const MAX_RUNS: usize = 100;
pub const MAX_KEYS: usize = 20;
pub const MAX_POINTS: usize = 2000;

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

#[derive(Deserialize, Default, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum XAxis {
    #[default]
    Step,
    /// Milliseconds since the Unix epoch.
    Wall,
    /// Milliseconds since the run started.
    Relative,
}

/// One bucket: mean x, mean y, min and max of y, and how many points.
#[derive(Debug, Clone, PartialEq)]
pub struct Bucket {
    pub x: f64,
    pub y: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    pub count: usize,
}

/// Reads its request like the MLflow API, so bad input gets the same
/// `{"error_code", "message"}` answer.
pub async fn series(State(state): State<AppState>, Req(req): Req<SeriesRequest>) -> ApiResult {
    if req.run_ids.is_empty() || req.run_ids.len() > MAX_RUNS {
        return Err(ApiError::invalid(format!(
            "run_ids: give 1 to {MAX_RUNS} runs"
        )));
    }
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
    let mut out = Vec::new();
    for run in &runs {
        for key in &req.keys {
            let points = state.store.metric_history(&run.info.run_id, key).await?;
            let total = points.len();
            let origin = match req.x_axis {
                XAxis::Relative => run.info.start_time as f64,
                _ => 0.0,
            };
            let mut xy: Vec<(f64, f64)> = points
                .iter()
                .map(|p: &Point| {
                    let x = match req.x_axis {
                        XAxis::Step => p.step as f64,
                        XAxis::Wall | XAxis::Relative => p.timestamp as f64 - origin,
                    };
                    (x, p.value)
                })
                .filter(|(x, _)| {
                    req.x_min.is_none_or(|lo| *x >= lo) && req.x_max.is_none_or(|hi| *x <= hi)
                })
                .collect();
            xy.sort_by(|a, b| a.0.total_cmp(&b.0));
            let buckets = downsample(&xy, budget);
            out.push(json!({
                "run_id": run.info.run_id,
                "key": key,
                "total_points": total,
                "in_range": xy.len(),
                "x": buckets.iter().map(|b| b.x).collect::<Vec<_>>(),
                "y": buckets.iter().map(|b| number(b.y)).collect::<Vec<_>>(),
                "min": buckets.iter().map(|b| number(b.min)).collect::<Vec<_>>(),
                "max": buckets.iter().map(|b| number(b.max)).collect::<Vec<_>>(),
                "count": buckets.iter().map(|b| b.count).collect::<Vec<_>>(),
            }));
        }
    }
    Ok(Json(json!({ "series": out })))
}

/// Non-finite values become null: JSON has no NaN.
fn number(v: Option<f64>) -> Value {
    match v {
        Some(v) if v.is_finite() => json!(v),
        _ => Value::Null,
    }
}

/// Splits `[first x, last x]` into `budget` equal-width buckets. Points must
/// be sorted by x. With no more points than the budget, each point is its
/// own bucket. NaN values count but do not enter the mean, min or max.
pub fn downsample(xy: &[(f64, f64)], budget: usize) -> Vec<Bucket> {
    if xy.len() <= budget {
        return xy
            .iter()
            .map(|&(x, y)| {
                let v = (!y.is_nan()).then_some(y);
                Bucket {
                    x,
                    y: v,
                    min: v,
                    max: v,
                    count: 1,
                }
            })
            .collect();
    }
    let lo = xy[0].0;
    let hi = xy[xy.len() - 1].0;
    let width = (hi - lo) / budget as f64;
    let mut out: Vec<Bucket> = Vec::with_capacity(budget);
    let mut current: Option<(usize, f64, f64, usize, f64, f64, usize)> = None; // (bucket, sum_x, sum_y, n_y, min, max, n)
    let flush = |state: (usize, f64, f64, usize, f64, f64, usize), out: &mut Vec<Bucket>| {
        let (_, sum_x, sum_y, n_y, min, max, n) = state;
        let has = n_y > 0;
        out.push(Bucket {
            x: sum_x / n as f64,
            y: has.then(|| sum_y / n_y as f64),
            min: has.then_some(min),
            max: has.then_some(max),
            count: n,
        });
    };
    for &(x, y) in xy {
        let index = if width > 0.0 {
            (((x - lo) / width) as usize).min(budget - 1)
        } else {
            0
        };
        match current.as_mut() {
            Some(state) if state.0 == index => {
                state.1 += x;
                state.6 += 1;
                if !y.is_nan() {
                    state.2 += y;
                    state.3 += 1;
                    state.4 = state.4.min(y);
                    state.5 = state.5.max(y);
                }
            }
            _ => {
                if let Some(done) = current.take() {
                    flush(done, &mut out);
                }
                let finite = !y.is_nan();
                current = Some((
                    index,
                    x,
                    if finite { y } else { 0.0 },
                    usize::from(finite),
                    if finite { y } else { f64::INFINITY },
                    if finite { y } else { f64::NEG_INFINITY },
                    1,
                ));
            }
        }
    }
    if let Some(done) = current {
        flush(done, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_series_come_back_whole() {
        let xy = [(0.0, 1.0), (1.0, f64::NAN), (2.0, 3.0)];
        let b = downsample(&xy, 10);
        assert_eq!(b.len(), 3);
        assert_eq!(b[1].y, None);
        assert_eq!(b[2].max, Some(3.0));
    }

    #[test]
    fn buckets_keep_mean_min_and_max() {
        let xy: Vec<(f64, f64)> = (0..1000)
            .map(|i| (i as f64, if i == 500 { 99.0 } else { (i % 10) as f64 }))
            .collect();
        let b = downsample(&xy, 100);
        assert_eq!(b.len(), 100);
        assert_eq!(b.iter().map(|b| b.count).sum::<usize>(), 1000);
        let spike = b
            .iter()
            .find(|b| b.max == Some(99.0))
            .expect("the spike survives");
        assert!(
            spike.min.unwrap() < 10.0,
            "the band spans the spike and its neighbours"
        );
        assert!((b[0].y.unwrap() - 4.5).abs() < 1e-9);
        assert!((b[0].x - 4.5).abs() < 1e-9);
    }
}
