//! `/metrics/get-history` (paged) and `/metrics/get-history-bulk-interval`
//! (MLflow's sampled read for charts of up to 100 runs).

use axum::Json;
use axum::extract::State;
use base64::Engine;
use serde::Deserialize;
use serde_json::{Value, json};
use trainyard_domain::tracking::Point;

use super::request::Req;
use super::wire::{self, opt_i64, required};
use super::{ApiError, ApiResult};
use crate::AppState;
use crate::auth::Caller;

#[derive(Deserialize)]
pub struct History {
    run_id: Option<String>,
    run_uuid: Option<String>,
    metric_key: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
    page_token: Option<String>,
}

pub async fn get_history(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<History>,
) -> Result<Json<HistoryAnswer>, ApiError> {
    let run_id = required(
        req.run_id.filter(|s| !s.is_empty()).or(req.run_uuid),
        "run_id",
    )?;
    state
        .store
        .runs_readable(&principal.user, std::slice::from_ref(&run_id))
        .await?;
    let key = required(req.metric_key, "metric_key")?;
    let after = parse_history_token(req.page_token.as_deref())?;
    // A page is bounded whatever is asked: the rest follows through
    // next_page_token, which the mlflow client follows.
    let limit = match req.max_results {
        None => MAX_HISTORY_PAGE,
        Some(n) => wire::max_results(Some(n), n, i64::MAX)?.min(MAX_HISTORY_PAGE),
    };
    let limit = Some(limit as usize);
    let page = state
        .store
        .metric_history_page(&run_id, &key, after, limit)
        .await?;
    let next_page_token = match page.points.last() {
        Some(last) if page.more => Some(history_token(last)),
        _ => None,
    };
    Ok(Json(HistoryAnswer {
        key,
        points: page.points,
        next_page_token,
    }))
}

/// `{"metrics": [...], "next_page_token": ...}`, both left out when empty,
/// as MLflow does.
pub struct HistoryAnswer {
    key: String,
    points: Vec<Point>,
    next_page_token: Option<String>,
}

impl serde::Serialize for HistoryAnswer {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::{SerializeMap, SerializeSeq};
        struct Metrics<'a>(&'a str, &'a [Point]);
        impl serde::Serialize for Metrics<'_> {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                let mut seq = s.serialize_seq(Some(self.1.len()))?;
                for point in self.1 {
                    seq.serialize_element(&wire::MetricJson { key: self.0, point })?;
                }
                seq.end()
            }
        }
        let mut map = s.serialize_map(None)?;
        if !self.points.is_empty() {
            map.serialize_entry("metrics", &Metrics(&self.key, &self.points))?;
        }
        if let Some(token) = &self.next_page_token {
            map.serialize_entry("next_page_token", token)?;
        }
        map.end()
    }
}

/// A history page token names the last point returned (MLflow's order is
/// total over timestamp, step and value), so the next page starts right
/// after it without re-reading the pages before.
fn history_token(last: &Point) -> String {
    base64::engine::general_purpose::STANDARD.encode(
        json!({
            "timestamp": last.timestamp,
            "step": last.step,
            "value_bits": last.value.to_bits().to_string(),
        })
        .to_string(),
    )
}

fn parse_history_token(token: Option<&str>) -> Result<Option<Point>, ApiError> {
    let Some(token) = token.filter(|t| !t.is_empty()) else {
        return Ok(None);
    };
    let bad = || wire::invalid_page_token(token);
    let value = wire::decode_page_token(token)?;
    let bits: u64 = value["value_bits"]
        .as_str()
        .and_then(|s| s.parse().ok())
        .ok_or_else(bad)?;
    Ok(Some(Point {
        timestamp: value["timestamp"].as_i64().ok_or_else(bad)?,
        step: value["step"].as_i64().ok_or_else(bad)?,
        value: f64::from_bits(bits),
    }))
}

#[derive(Deserialize)]
pub struct BulkInterval {
    #[serde(default, deserialize_with = "wire::list")]
    run_ids: Vec<String>,
    metric_key: Option<String>,
    #[serde(default, deserialize_with = "opt_i64")]
    start_step: Option<i64>,
    #[serde(default, deserialize_with = "opt_i64")]
    end_step: Option<i64>,
    #[serde(default, deserialize_with = "opt_i64")]
    max_results: Option<i64>,
}

/// The most points one `get-history` answer holds, asked for or not
/// (about 20 MB of JSON); the rest follows through `next_page_token`,
/// which MLflow's client follows (it asks for 25,000 a page).
pub const MAX_HISTORY_PAGE: u64 = 250_000;

/// The most points of one run's series `get-history-bulk-interval` reads
/// to sample from (those in the steps asked for, chosen in the query): the
/// longest series the explorer is built for.
pub const MAX_BULK_POINTS_READ: usize = 1_000_000;

pub const MAX_RUNS_BULK: usize = 100;
pub const MAX_RESULTS_PER_RUN: i64 = 2500;

pub async fn get_history_bulk_interval(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Req(req): Req<BulkInterval>,
) -> ApiResult {
    let key = required(req.metric_key, "metric_key")?;
    if req.run_ids.is_empty() {
        return Err(ApiError::invalid(
            "Missing value for required parameter 'run_ids'.",
        ));
    }
    if req.run_ids.len() > MAX_RUNS_BULK {
        return Err(ApiError::invalid(format!(
            "GetMetricHistoryBulkInterval request must specify at most {MAX_RUNS_BULK} run_ids. Received {} run_ids.",
            req.run_ids.len()
        )));
    }
    let max_results = req.max_results.unwrap_or(MAX_RESULTS_PER_RUN);
    if !(1..=MAX_RESULTS_PER_RUN).contains(&max_results) {
        return Err(ApiError::invalid(format!(
            "max_results must be between 1 and {MAX_RESULTS_PER_RUN}."
        )));
    }
    let range = match (req.start_step, req.end_step) {
        (None, None) => None,
        (Some(start), Some(end)) if start <= end => Some((start, end)),
        (Some(start), Some(end)) => {
            return Err(ApiError::invalid(format!(
                "end_step must be greater than start_step. Found start_step={start} and end_step={end}."
            )));
        }
        _ => {
            return Err(ApiError::invalid(
                "If either start step or end step are specified, both must be specified.",
            ));
        }
    };
    state
        .store
        .runs_readable(&principal.user, &req.run_ids)
        .await?;
    let mut metrics = Vec::new();
    for run_id in &req.run_ids {
        let Some(points) = state
            .store
            .metric_points_in_steps(run_id, &key, range, MAX_BULK_POINTS_READ)
            .await?
        else {
            return Err(ApiError::invalid(format!(
                "the series '{key}' of run {run_id} holds more than {MAX_BULK_POINTS_READ} points \
                 in the steps asked for; ask for fewer steps (start_step, end_step), read it \
                 downsampled with POST /api/trainyard/v1/series, or page through get-history"
            )));
        };
        for p in sample(&points, max_results as usize) {
            let mut m = wire::metric(&key, p);
            m["run_id"] = json!(run_id);
            metrics.push(m);
        }
    }
    let mut out = json!({});
    if !metrics.is_empty() {
        out["metrics"] = Value::Array(metrics);
    }
    Ok(Json(out))
}

/// MLflow's sampling: the first point of each of `n` equal buckets (NTILE),
/// always keeping the last point.
fn sample(points: &[Point], n: usize) -> Vec<&Point> {
    if points.len() <= n {
        return points.iter().collect();
    }
    let len = points.len();
    // NTILE(n): the first `len % n` buckets hold one point more.
    let base = len / n;
    let extra = len % n;
    let mut out = Vec::with_capacity(n);
    let mut index = 0;
    for bucket in 0..n {
        out.push(&points[index]);
        index += base + usize::from(bucket < extra);
    }
    let last = &points[len - 1];
    if let Some(slot) = out.last_mut()
        && !std::ptr::eq(*slot, last)
    {
        *slot = last;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sampling_keeps_bucket_starts_and_the_last_point() {
        let points: Vec<Point> = (0..10)
            .map(|i| Point {
                step: i,
                timestamp: 0,
                value: 0.0,
            })
            .collect();
        let steps = |n| {
            sample(&points, n)
                .iter()
                .map(|p| p.step)
                .collect::<Vec<_>>()
        };
        assert_eq!(steps(20).len(), 10);
        assert_eq!(steps(3), vec![0, 4, 9]);
        assert_eq!(steps(5), vec![0, 2, 4, 6, 9]);
    }
}
