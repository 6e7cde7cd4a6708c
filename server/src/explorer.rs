//! The explorer's endpoints beside its server functions:
//! - `GET /api/trainyard/v1/chart?key=K&run=A&run=B…` draws a metric's chart
//!   with the browser's own drawing code (`trainyard-charts`), as SVG or PNG:
//!   the "download chart" links, and the charts of pages read without
//!   JavaScript.
//! - `GET /api/trainyard/v1/runs/{id}/events` pushes a line whenever a run
//!   changes (status, metrics, params, tags), so a live run page reads again
//!   instead of polling.
//! - `GET /api/trainyard/v1/experiments/{id}/runs.csv?q=…&sort=…&col=…`
//!   downloads the runs table as CSV (every metric and param when no
//!   `col` is given).

use std::time::Duration;

use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use trainyard_app::explorer::{ChartOptions, Groups, build_chart};
use trainyard_domain::explorer::{Column, CompareRun, SeriesRequest, XAxis, group_runs};
use trainyard_store::Access;

use crate::AppState;
use crate::auth::Caller;
use crate::mlflow::ApiError;

/// Default size of a downloaded chart, in pixels.
const WIDTH: u32 = 960;
const HEIGHT: u32 = 540;
/// Buckets per line of a downloaded chart.
const POINTS: usize = 1500;

/// What a chart link says.
#[derive(Debug, PartialEq)]
struct ChartQuery {
    key: String,
    runs: Vec<String>,
    options: ChartOptions,
    group: Option<Column>,
    x_range: (Option<f64>, Option<f64>),
    png: bool,
    width: u32,
    height: u32,
}

fn read_query(raw: &str) -> Result<ChartQuery, ApiError> {
    let mut q = ChartQuery {
        key: String::new(),
        runs: Vec::new(),
        options: ChartOptions::default(),
        group: None,
        x_range: (None, None),
        png: false,
        width: WIDTH,
        height: HEIGHT,
    };
    let number = |name: &str, value: &str| -> Result<f64, ApiError> {
        value
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| ApiError::invalid(format!("{name}: `{value}` is not a number")))
    };
    let size = |name: &str, value: &str| -> Result<u32, ApiError> {
        value
            .parse::<u32>()
            .ok()
            .filter(|v| trainyard_charts::SIZE_LIMITS.contains(v))
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "{name}: give {} to {} pixels",
                    trainyard_charts::SIZE_LIMITS.start(),
                    trainyard_charts::SIZE_LIMITS.end()
                ))
            })
    };
    for (name, value) in form_urlencoded::parse(raw.as_bytes()) {
        match name.as_ref() {
            "key" => q.key = value.into_owned(),
            "run" => q.runs.push(value.into_owned()),
            "x" => {
                q.options.x_axis = XAxis::parse(&value).ok_or_else(|| {
                    ApiError::invalid(format!("x: `{value}` is not step, relative or wall"))
                })?
            }
            "smooth" => {
                let s = number("smooth", &value)?;
                if !(0.0..1.0).contains(&s) {
                    return Err(ApiError::invalid("smooth: an EMA weight from 0 to 0.99"));
                }
                q.options.smoothing = s;
            }
            "log" => q.options.log_y = value == "1",
            "outliers" => q.options.ignore_outliers = value == "ignore",
            "group" => {
                q.group = Some(Column::parse(&value).ok_or_else(|| {
                    ApiError::invalid(format!(
                        "group: `{value}` is not params.KEY, tags.KEY or metrics.KEY"
                    ))
                })?)
            }
            "x_min" => q.x_range.0 = Some(number("x_min", &value)?),
            "x_max" => q.x_range.1 = Some(number("x_max", &value)?),
            "format" => {
                q.png = match value.as_ref() {
                    "svg" => false,
                    "png" => true,
                    other => {
                        return Err(ApiError::invalid(format!(
                            "format: `{other}` is not svg or png"
                        )));
                    }
                }
            }
            "width" => q.width = size("width", &value)?,
            "height" => q.height = size("height", &value)?,
            _ => {}
        }
    }
    if q.key.is_empty() {
        return Err(ApiError::invalid("key: name the metric to draw"));
    }
    Ok(q)
}

pub async fn chart(
    State(state): State<AppState>,
    Caller(principal): Caller,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let q = read_query(raw.as_deref().unwrap_or(""))?;
    let request = SeriesRequest {
        run_ids: q.runs.clone(),
        keys: vec![q.key.clone()],
        x_axis: q.options.x_axis,
        x_min: q.x_range.0,
        x_max: q.x_range.1,
        points: Some(POINTS),
    };
    if q.runs.is_empty() || q.runs.len() > trainyard_domain::explorer::SERIES_MAX_RUNS {
        return Err(ApiError::invalid(request.check().err().unwrap_or_default()));
    }
    state
        .store
        .runs_readable(&principal.user, &request.run_ids)
        .await?;
    let runs = state.store.load_runs(&q.runs).await?;
    if let Some(missing) = q
        .runs
        .iter()
        .find(|id| !runs.iter().any(|r| &r.info.run_id == *id))
    {
        return Err(ApiError::not_found(format!(
            "Run with id={missing} not found"
        )));
    }
    let data = state.store.chart_series(&request).await?;
    let lines: Vec<(String, String, usize)> = runs
        .iter()
        .enumerate()
        .map(|(i, r)| (r.info.run_id.clone(), r.info.run_name.clone(), i))
        .collect();
    let groups: Option<Groups> = q.group.as_ref().map(|by| {
        let compared: Vec<CompareRun> = runs
            .iter()
            .map(|r| CompareRun {
                run_id: r.info.run_id.clone(),
                experiment_id: r.info.experiment_id,
                name: r.info.run_name.clone(),
                status: r.info.status.clone(),
                start_time: r.info.start_time,
                metrics: Vec::new(),
                params: r.params.clone(),
                tags: r.tags.clone(),
            })
            .collect();
        group_runs(&compared, by)
    });
    let x_range = match q.x_range {
        (Some(a), Some(b)) if a < b => Some((a, b)),
        _ => None,
    };
    let mut chart = build_chart(
        &q.key,
        &data,
        &lines,
        groups.as_ref(),
        q.options,
        x_range,
        (q.width, q.height),
    );
    chart.legend = true;
    let (body, content_type) = tokio::task::spawn_blocking(move || {
        if q.png {
            trainyard_charts::line_png(&chart).map(|b| (b, "image/png"))
        } else {
            trainyard_charts::line_svg(&chart).map(|(s, _)| (s.into_bytes(), "image/svg+xml"))
        }
    })
    .await
    .map_err(|e| ApiError::internal(format!("drawing the chart: {e}")))?
    .map_err(|e| ApiError::internal(e.to_string()))?;
    let mut response = body.into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, no-cache"),
    );
    Ok(response)
}

/// The least time between two pushes about one run.
const PUSH_EVERY: Duration = Duration::from_millis(500);
/// A look at the run even without news (a change may come from elsewhere,
/// e.g. another server process on the same database).
/// It is also when the caller's credential is looked at again.
const RECHECK: Duration = crate::auth::STREAM_RECHECK;

/// `GET /api/trainyard/v1/runs/{id}/events`: a `run` event with
/// `STATUS KEYS` (the run's status and how many metric keys it has) at once
/// and then whenever the run changes, at most every half second; the stream
/// ends after the run ends.
pub async fn run_events(
    State(state): State<AppState>,
    Caller(principal): Caller,
    axum::extract::ConnectInfo(peer): axum::extract::ConnectInfo<std::net::SocketAddr>,
    headers: axum::http::HeaderMap,
    Path(run_id): Path<String>,
) -> Result<
    axum::response::sse::Sse<
        impl futures::Stream<Item = Result<axum::response::sse::Event, std::convert::Infallible>>,
    >,
    ApiError,
> {
    use axum::response::sse::{Event, KeepAlive, Sse};
    state
        .store
        .run_as(&principal.user, &run_id, Access::Read)
        .await?;
    let changes = state.store.run_changes();
    let store = state.store.clone();
    let credential = crate::auth::Credential::new(&state.auth, peer, headers, &principal);
    // (receiver, first, finished, last look at the credential)
    let stream = futures::stream::unfold(
        (changes, true, false, std::time::Instant::now()),
        move |(mut changes, first, finished, mut checked)| {
            let store = store.clone();
            let run_id = run_id.clone();
            let credential = credential.clone();
            async move {
                if finished {
                    return None;
                }
                if !first {
                    wait_for_change(&mut changes, &run_id).await;
                    tokio::time::sleep(PUSH_EVERY).await;
                    // What came in meanwhile is in this one push.
                    while changes.try_recv().is_ok() {}
                    // A session or token revoked since, or the run no
                    // longer the caller's to read, ends the stream.
                    if checked.elapsed() >= crate::auth::STREAM_RECHECK {
                        let principal = credential.recheck().await?;
                        store
                            .run_as(&principal.user, &run_id, Access::Read)
                            .await
                            .ok()?;
                        checked = std::time::Instant::now();
                    }
                }
                let run = store.get_run(&run_id).await.ok()?;
                let live = matches!(run.info.status.as_str(), "RUNNING" | "SCHEDULED");
                let event = Event::default().event("run").data(format!(
                    "{} {}",
                    run.info.status,
                    run.metrics.len()
                ));
                Some((Ok(event), (changes, false, !live, checked)))
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// Waits until the run changes (or the backlog overflowed, or a while
/// passed).
async fn wait_for_change(
    changes: &mut tokio::sync::broadcast::Receiver<std::sync::Arc<str>>,
    run_id: &str,
) {
    use tokio::sync::broadcast::error::RecvError;
    let deadline = tokio::time::sleep(RECHECK);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            _ = &mut deadline => return,
            got = changes.recv() => match got {
                Ok(id) if &*id == run_id => return,
                Ok(_) => {}
                Err(RecvError::Lagged(_)) | Err(RecvError::Closed) => return,
            },
        }
    }
}

/// `GET /api/trainyard/v1/experiments/{id}/runs.csv`: the explorer's runs
/// table as CSV, with the table's query (`q`, `sort`, `col`…, `deleted`);
/// without `col`, every metric and param is a column.
pub async fn runs_csv(
    State(state): State<AppState>,
    Caller(principal): Caller,
    Path(experiment_id): Path<i64>,
    RawQuery(raw): RawQuery,
) -> Result<Response, ApiError> {
    let mut table = trainyard_app::explorer::api::RunsTable {
        experiment_id,
        ..Default::default()
    };
    let mut columns: Option<Vec<String>> = None;
    for (key, value) in form_urlencoded::parse(raw.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "q" => table.query = value.into_owned(),
            "sort" => table.sort = Some(value.into_owned()).filter(|s| !s.is_empty()),
            "col" => {
                let list = columns.get_or_insert_with(Vec::new);
                if !value.is_empty() {
                    list.push(value.into_owned());
                }
            }
            "deleted" => table.deleted = value == "1" || value == "true",
            // The table's own state (selection, scroll) means nothing here.
            "sel" | "offset" => {}
            other => {
                return Err(ApiError::invalid(format!(
                    "`{other}` is not a parameter of runs.csv; use q, sort, col and deleted"
                )));
            }
        }
    }
    // An empty list (the table's "no columns") is every key too.
    table.columns = columns.filter(|c| !c.is_empty());
    let csv = trainyard_app::explorer::api::runs_csv(&state.store, &principal.user, table)
        .await
        .map_err(|e| {
            let status = axum::http::StatusCode::from_u16(e.status())
                .unwrap_or(axum::http::StatusCode::INTERNAL_SERVER_ERROR);
            ApiError {
                status,
                code: match status {
                    axum::http::StatusCode::NOT_FOUND => "RESOURCE_DOES_NOT_EXIST",
                    axum::http::StatusCode::FORBIDDEN => "PERMISSION_DENIED",
                    axum::http::StatusCode::BAD_REQUEST => "INVALID_PARAMETER_VALUE",
                    axum::http::StatusCode::CONFLICT => "INVALID_STATE",
                    _ => "INTERNAL_ERROR",
                },
                message: e.to_string(),
            }
        })?;
    Ok((
        [
            (
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/csv; charset=utf-8"),
            ),
            (
                header::CONTENT_DISPOSITION,
                HeaderValue::from_str(&format!(
                    "attachment; filename=\"experiment-{experiment_id}-runs.csv\""
                ))
                .map_err(ApiError::internal)?,
            ),
        ],
        csv,
    )
        .into_response())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chart_links_are_read_and_checked() {
        let q = read_query("key=val%20loss&run=a&run=b&x=relative&smooth=0.6&log=1&group=params.lr&x_min=10&x_max=20&format=png&width=800&height=400").unwrap();
        assert_eq!(q.key, "val loss");
        assert_eq!(q.runs, ["a", "b"]);
        assert_eq!(q.options.x_axis, XAxis::Relative);
        assert_eq!(q.options.smoothing, 0.6);
        assert!(q.options.log_y && q.png);
        assert_eq!(q.group, Some(Column::Param("lr".to_owned())));
        assert_eq!(q.x_range, (Some(10.0), Some(20.0)));
        assert_eq!((q.width, q.height), (800, 400));
        for bad in [
            "run=a",
            "key=k&x=time",
            "key=k&smooth=1.5",
            "key=k&format=gif",
            "key=k&width=100000",
            "key=k&x_min=abc",
            "key=k&group=lr",
        ] {
            assert!(read_query(bad).is_err(), "{bad} should be refused");
        }
    }
}
