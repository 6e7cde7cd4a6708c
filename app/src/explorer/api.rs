//! The explorer's server functions: experiments, pages of runs, a run's
//! details, comparisons and chart series. Every one checks who may see what
//! through the store's helpers, like the MLflow API does.

use leptos::prelude::*;
use leptos::server_fn::codec::Json;
use trainyard_domain::ExperimentSummary;
use trainyard_domain::explorer::{
    CompareRun, ExperimentView, RunDetail, RunsPage, SeriesData, SeriesFigures, SeriesRequest,
};

use crate::error::AppError;
#[cfg(feature = "ssr")]
use trainyard_domain::tracking::PARENT_RUN_TAG;

#[cfg(feature = "ssr")]
use crate::api::{caller, store};

/// Where the server keeps artifacts (`<root>/<experiment>/<run>/artifacts`).
#[cfg(feature = "ssr")]
#[derive(Debug, Clone)]
pub struct ArtifactRoot(pub std::path::PathBuf);

/// The server's count of each person's artifacts, for pages that remove
/// some: `turn` waits for the person's turn at their artifacts (one write
/// or removal at a time, so that an upload in flight never writes into a
/// run's folder as it goes), held while the guard lives; `forget` has
/// their count taken from disk again.
#[cfg(feature = "ssr")]
#[derive(Clone)]
#[allow(clippy::type_complexity)]
pub struct ArtifactsRemoved {
    pub turn: std::sync::Arc<
        dyn Fn(
                i64,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Box<dyn std::any::Any + Send>> + Send>,
            > + Send
            + Sync,
    >,
    pub forget: std::sync::Arc<dyn Fn(i64) + Send + Sync>,
}

/// Answers 400: the request was wrong.
#[cfg(feature = "ssr")]
fn bad_request() {
    crate::error::set_error_status(http::StatusCode::BAD_REQUEST);
}

/// A query typed in a filter box, parsed for `scope`: one that is too long
/// or does not parse is a 400 saying where.
#[cfg(feature = "ssr")]
pub(crate) fn parse_query(
    query: &str,
    scope: trainyard_domain::query::Scope,
) -> Result<Option<trainyard_domain::query::Expr>, AppError> {
    use trainyard_domain::explorer::MAX_QUERY_CHARS;
    if query.chars().count() > MAX_QUERY_CHARS {
        bad_request();
        return Err(AppError::Query(trainyard_domain::query::QueryError {
            position: MAX_QUERY_CHARS,
            message: format!("the query is longer than {MAX_QUERY_CHARS} characters; shorten it"),
        }));
    }
    trainyard_domain::query::parse_filter(query, scope).map_err(|e| {
        bad_request();
        AppError::Query(e)
    })
}

/// Input that breaks a rule: a 400 naming the field.
#[cfg(feature = "ssr")]
fn invalid(field: &str, message: impl Into<String>) -> AppError {
    bad_request();
    AppError::Invalid(trainyard_domain::FieldError::new(field, message))
}

/// Most artifacts the run page lists.
#[cfg(feature = "ssr")]
const MAX_ARTIFACTS: usize = 1000;

/// Experiments the caller sees: the active ones, or the archived ones.
#[server(endpoint = "list_experiments")]
pub async fn list_experiments(
    #[server(default)] archived: bool,
) -> Result<Vec<ExperimentSummary>, AppError> {
    let viewer = trainyard_store::Viewer::of(&caller()?.user);
    Ok(store()?.list_experiments(&viewer, archived).await?)
}

#[server(endpoint = "create_experiment")]
pub async fn create_experiment(name: String) -> Result<i64, AppError> {
    let owner = caller()?.user.as_owner();
    Ok(store()?.create_experiment(&name, owner).await?)
}

#[server(endpoint = "rename_experiment")]
pub async fn rename_experiment(id: i64, name: String) -> Result<(), AppError> {
    let user = caller()?.user;
    let store = store()?;
    store
        .experiment_as(&user, id, trainyard_store::Access::Change)
        .await?;
    let name = trainyard_domain::validate_experiment_name(&name)
        .map_err(|e| invalid(&e.field, e.message))?;
    Ok(store.rename_experiment(id, &name).await?)
}

/// Archives an experiment with its runs (MLflow's delete), or restores it.
#[server(endpoint = "archive_experiment")]
pub async fn archive_experiment(id: i64, archived: bool) -> Result<(), AppError> {
    let user = caller()?.user;
    let store = store()?;
    store
        .experiment_as(&user, id, trainyard_store::Access::Change)
        .await?;
    if id == trainyard_store::DEFAULT_EXPERIMENT {
        return Err(invalid(
            "id",
            "the Default experiment holds everyone's unfiled runs; it cannot be archived",
        ));
    }
    Ok(store.set_experiment_deleted(id, archived).await?)
}

/// An experiment with its run count, and the keys its runs use.
#[server(endpoint = "get_experiment_view")]
pub async fn get_experiment_view(id: i64) -> Result<ExperimentView, AppError> {
    use trainyard_domain::explorer::{Keys, MAX_KEYS};
    use trainyard_domain::tracking::ViewType;
    let user = caller()?.user;
    let store = store()?;
    store
        .experiment_as(&user, id, trainyard_store::Access::Read)
        .await?;
    let experiment = store.get_experiment(id).await?;
    let viewer = trainyard_store::Viewer::of(&user);
    let view = if experiment.lifecycle_stage == "active" {
        ViewType::ActiveOnly
    } else {
        ViewType::DeletedOnly
    };
    let runs = store.count_runs(&[id], None, view, &viewer).await?;
    let keys = store.run_keys(id, &viewer, MAX_KEYS).await?;
    let may_change = store
        .experiment_as(&user, id, trainyard_store::Access::Change)
        .await
        .is_ok()
        && id != trainyard_store::DEFAULT_EXPERIMENT;
    Ok(ExperimentView {
        summary: ExperimentSummary {
            id,
            name: experiment.name,
            lifecycle_stage: experiment.lifecycle_stage,
            runs,
            last_activity: experiment.last_update_time,
        },
        may_change,
        keys: Keys {
            metrics: keys.metrics,
            params: keys.params,
            tags: keys.tags,
        },
    })
}

/// Rows `offset..offset + PAGE_ROWS` of an experiment's runs that match the
/// query, sorted, with the cells of the columns asked for. A query that does
/// not parse answers where it went wrong.
#[server(endpoint = "list_runs_page", input = Json)]
pub async fn list_runs_page(
    experiment_id: i64,
    query: String,
    sort: Option<String>,
    columns: Option<Vec<String>>,
    offset: u64,
    /// The deleted runs of an experiment that is not.
    #[server(default)]
    deleted: bool,
) -> Result<RunsPage, AppError> {
    use trainyard_domain::explorer::{MAX_COLUMNS, PAGE_ROWS};
    let user = caller()?.user;
    let store = store()?;
    let table = RunsTable {
        experiment_id,
        query,
        sort,
        columns,
        deleted,
    };
    runs_page(&store, &user, &table, MAX_COLUMNS, (offset, PAGE_ROWS)).await
}

/// Which runs of an experiment a table (or its CSV) shows, and how.
#[cfg(feature = "ssr")]
#[derive(Debug, Clone, Default)]
pub struct RunsTable {
    pub experiment_id: i64,
    /// A filter, or plain words that search run names.
    pub query: String,
    pub sort: Option<String>,
    /// None: the explorer's default columns.
    pub columns: Option<Vec<String>>,
    /// The deleted runs of an experiment that is not.
    pub deleted: bool,
}

/// The most runs one CSV holds.
#[cfg(feature = "ssr")]
pub const CSV_MAX_RUNS: u64 = 50_000;

/// The most metric and param columns a CSV of every key holds.
#[cfg(feature = "ssr")]
pub const CSV_MAX_KEYS: u64 = 500;

/// The most values (runs × columns) one CSV holds.
#[cfg(feature = "ssr")]
pub const CSV_MAX_CELLS: u64 = 2_000_000;

/// The runs of `table` as CSV, as the explorer's table lists them (with
/// its columns, or every metric and param when none are chosen): one line
/// per run, times in UTC, text quoted and kept from reading as a formula.
#[cfg(feature = "ssr")]
pub async fn runs_csv(
    store: &trainyard_store::Store,
    user: &trainyard_domain::identity::User,
    mut table: RunsTable,
) -> Result<String, AppError> {
    use trainyard_domain::explorer::{Cell, Column};
    use trainyard_domain::{csv_field, format_utc};
    const CHUNK: u64 = 1_000;
    store
        .experiment_as(user, table.experiment_id, trainyard_store::Access::Read)
        .await?;
    if table.columns.is_none() {
        // The keys of the runs it lists: an archived experiment's, or the
        // deleted runs', are those of deleted runs.
        let deleted = table.deleted
            || store
                .get_experiment(table.experiment_id)
                .await?
                .lifecycle_stage
                != "active";
        let viewer = trainyard_store::Viewer::of(user);
        let keys = store
            .run_keys_in(table.experiment_id, &viewer, CSV_MAX_KEYS, deleted)
            .await?;
        table.columns = Some(
            keys.metrics
                .into_iter()
                .map(|k| Column::Metric(k).name())
                .chain(keys.params.into_iter().map(|k| Column::Param(k).name()))
                .collect(),
        );
    }
    let most = 2 * CSV_MAX_KEYS as usize;
    let first = runs_page(store, user, &table, most, (0, CHUNK)).await?;
    if first.total > CSV_MAX_RUNS {
        return Err(invalid(
            "q",
            format!(
                "{} runs match; a CSV holds at most {CSV_MAX_RUNS}: filter them first",
                first.total
            ),
        ));
    }
    let cells = first.total.saturating_mul(first.columns.len() as u64);
    if cells > CSV_MAX_CELLS {
        return Err(invalid(
            "col",
            format!(
                "{} runs × {} columns is more than the {CSV_MAX_CELLS} values a CSV holds: choose fewer columns (col=…) or filter the runs",
                first.total,
                first.columns.len()
            ),
        ));
    }
    let metric: Vec<bool> = first
        .columns
        .iter()
        .map(|c| matches!(Column::parse(c), Some(Column::Metric(_))))
        .collect();
    let mut out = String::from("run_id,name,status,user,start_time,end_time,duration_s");
    for column in &first.columns {
        out.push(',');
        out.push_str(&csv_field(column));
    }
    out.push('\n');
    let mut page = first;
    loop {
        for row in &page.rows {
            let duration = row
                .end_time
                .map(|end| format!("{:.3}", (end - row.start_time) as f64 / 1000.0))
                .unwrap_or_default();
            out.push_str(&format!(
                "{},{},{},{},{},{},{}",
                row.run_id,
                csv_field(&row.name),
                row.status,
                csv_field(&row.user),
                format_utc(row.start_time),
                row.end_time.map(format_utc).unwrap_or_default(),
                duration
            ));
            for (cell, metric) in row.cells.iter().zip(&metric) {
                out.push(',');
                match cell {
                    // Every digit the run logged, not the table's rounding.
                    Some(Cell::Num(value)) => out.push_str(&value.to_string()),
                    // A metric that is not finite, as pandas reads it.
                    Some(Cell::Text(text)) if *metric => out.push_str(match text.as_str() {
                        "∞" => "inf",
                        "-∞" => "-inf",
                        _ => "nan",
                    }),
                    Some(Cell::Text(text)) => out.push_str(&csv_field(text)),
                    None => {}
                }
            }
            out.push('\n');
        }
        let next = page.offset + page.rows.len() as u64;
        if page.rows.is_empty() || next >= page.total {
            break;
        }
        page = runs_page(store, user, &table, most, (next, CHUNK)).await?;
    }
    Ok(out)
}

/// One page (`offset`, `limit`) of the runs of `table`, with at most
/// `max_columns` columns.
#[cfg(feature = "ssr")]
async fn runs_page(
    store: &trainyard_store::Store,
    user: &trainyard_domain::identity::User,
    table: &RunsTable,
    max_columns: usize,
    (offset, limit): (u64, u64),
) -> Result<RunsPage, AppError> {
    use trainyard_domain::explorer::{Cell, Column, RunRow, Sort};
    use trainyard_domain::query::Scope;
    use trainyard_domain::tracking::ViewType;
    let RunsTable {
        experiment_id,
        query,
        sort,
        columns,
        deleted,
    } = table.clone();
    store
        .experiment_as(user, experiment_id, trainyard_store::Access::Read)
        .await?;
    // Plain words search run names, as in MLflow's UI.
    let query = trainyard_domain::query::name_search(&query).unwrap_or(query);
    let filter = parse_query(&query, Scope::Runs)?;
    let viewer = trainyard_store::Viewer::of(user);
    let columns: Vec<String> = match columns {
        Some(list) => list.into_iter().filter(|c| !c.is_empty()).collect(),
        None => {
            use trainyard_domain::explorer::{DEFAULT_METRIC_COLUMNS, DEFAULT_PARAM_COLUMNS};
            let keys = store
                .run_keys(
                    experiment_id,
                    &viewer,
                    DEFAULT_METRIC_COLUMNS.max(DEFAULT_PARAM_COLUMNS) as u64,
                )
                .await?;
            let metrics = keys.metrics.into_iter().take(DEFAULT_METRIC_COLUMNS);
            // The params that tell runs apart, not the first alphabetically.
            let params = store
                .params_that_differ_first(experiment_id, &viewer, DEFAULT_PARAM_COLUMNS as u64)
                .await?;
            metrics
                .map(|k| Column::Metric(k).name())
                .chain(params.into_iter().map(|k| Column::Param(k).name()))
                .collect()
        }
    };
    if columns.len() > max_columns {
        return Err(invalid(
            "columns",
            format!("at most {max_columns} columns; hide some"),
        ));
    }
    let parsed: Vec<Column> = columns
        .iter()
        .map(|c| {
            Column::parse(c).ok_or_else(|| {
                invalid(
                    "columns",
                    format!("`{c}` is not a column; use metrics.KEY, params.KEY or tags.KEY"),
                )
            })
        })
        .collect::<Result<_, _>>()?;
    let order = match sort.as_deref().filter(|s| !s.is_empty()) {
        Some(text) => vec![
            Sort::parse(text)
                .and_then(|s| s.order_by())
                .ok_or_else(|| invalid("sort", format!("cannot sort by `{text}`")))?,
        ],
        None => Vec::new(),
    };
    let experiment = store.get_experiment(experiment_id).await?;
    let view = if experiment.lifecycle_stage == "active" && !deleted {
        ViewType::ActiveOnly
    } else {
        ViewType::DeletedOnly
    };
    let total = store
        .count_runs(&[experiment_id], filter.as_ref(), view, &viewer)
        .await?;
    let runs = store
        .search_runs(
            &[experiment_id],
            filter.as_ref(),
            &order,
            view,
            limit,
            offset,
            &viewer,
        )
        .await?;
    let ids: Vec<String> = runs.iter().map(|r| r.info.run_id.clone()).collect();
    let children = store.child_run_counts(&ids).await?;
    let rows = runs
        .into_iter()
        .map(|run| {
            // Looked up, not searched: a CSV asks for hundreds of columns.
            use std::collections::HashMap;
            let metrics: HashMap<&str, f64> = run
                .metrics
                .iter()
                .map(|m| (m.key.as_str(), m.point.value))
                .collect();
            let params: HashMap<&str, &str> = run
                .params
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let tags: HashMap<&str, &str> = run
                .tags
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str()))
                .collect();
            let cells = parsed
                .iter()
                .map(|column| match column {
                    Column::Metric(k) => metrics.get(k.as_str()).map(|v| Cell::metric(*v)),
                    Column::Param(k) => params.get(k.as_str()).map(|v| Cell::Text(v.to_string())),
                    Column::Tag(k) => tags.get(k.as_str()).map(|v| Cell::Text(v.to_string())),
                })
                .collect();
            RunRow {
                experiment_id: run.info.experiment_id,
                name: run.info.run_name,
                status: run.info.status,
                user: run.info.user_id,
                start_time: run.info.start_time,
                end_time: run.info.end_time,
                cells,
                parent_run_id: run
                    .tags
                    .iter()
                    .find(|(key, _)| key == PARENT_RUN_TAG)
                    .map(|(_, v)| v.clone()),
                children: children.get(&run.info.run_id).copied().unwrap_or(0),
                run_id: run.info.run_id,
            }
        })
        .collect();
    Ok(RunsPage {
        total,
        offset,
        columns,
        rows,
    })
}

/// A run the caller may read, or the error that says why not.
#[cfg(feature = "ssr")]
async fn readable_run(
    store: &trainyard_store::Store,
    run_id: &str,
) -> Result<trainyard_domain::tracking::Run, AppError> {
    let user = caller()?.user;
    store
        .run_as(&user, run_id, trainyard_store::Access::Read)
        .await?;
    Ok(store.get_run(run_id).await?)
}

/// A run with its latest metric values, params, tags and artifacts.
#[server(endpoint = "get_run_detail")]
pub async fn get_run_detail(run_id: String) -> Result<RunDetail, AppError> {
    use trainyard_domain::explorer::{Cell, LatestValue, MAX_FIGURE_KEYS};
    let store = store()?;
    let run = readable_run(&store, &run_id).await?;
    let experiment = store.get_experiment(run.info.experiment_id).await?;
    let job_id = run
        .tags
        .iter()
        .find(|(k, _)| k == "trainyard.job_id")
        .and_then(|(_, v)| v.parse().ok());
    let job_deleted = match job_id {
        Some(id) => matches!(
            store.get_job(id).await,
            Err(trainyard_store::StoreError::NotFound(_))
        ),
        None => false,
    };
    let root = use_context::<ArtifactRoot>()
        .ok_or_else(|| AppError::Internal("the artifact folder is not wired in".to_owned()))?;
    let folder = root
        .0
        .join(run.info.experiment_id.to_string())
        .join(&run.info.run_id)
        .join("artifacts");
    let (artifacts, artifacts_truncated) = list_artifacts(folder).await;
    let mut metrics: Vec<LatestValue> = run
        .metrics
        .iter()
        .map(|m| LatestValue {
            key: m.key.clone(),
            value: Cell::metric(m.point.value),
            step: m.point.step,
            timestamp: m.point.timestamp,
            min: None,
            max: None,
        })
        .collect();
    metrics.sort_by(|a, b| a.key.cmp(&b.key));
    // The lowest and highest of each (of the first MAX_FIGURE_KEYS).
    let keys: Vec<String> = metrics
        .iter()
        .take(MAX_FIGURE_KEYS)
        .map(|m| m.key.clone())
        .collect();
    let at = |(value, step): (f64, i64)| (Cell::metric(value), step);
    for figures in store
        .metric_summaries(std::slice::from_ref(&run.info.run_id), &keys)
        .await?
    {
        if let Some(m) = metrics.iter_mut().find(|m| m.key == figures.key) {
            m.min = figures.extremes.map(|e| at(e.min));
            m.max = figures.extremes.map(|e| at(e.max));
        }
    }
    let mut params = run.params;
    params.sort();
    let note = run
        .tags
        .iter()
        .find(|(k, _)| k == NOTE_TAG)
        .map(|(_, v)| v.clone())
        .filter(|v| !v.trim().is_empty());
    let parent_id = run
        .tags
        .iter()
        .find(|(k, _)| k == PARENT_RUN_TAG)
        .map(|(_, v)| v.clone());
    let tags = user_tags(run.tags);
    let user = caller()?.user;
    // The run it was made under, where the caller may read it.
    let mut parent = None;
    if let Some(id) = parent_id
        && store
            .run_as(&user, &id, trainyard_store::Access::Read)
            .await
            .is_ok()
    {
        let run = store.get_run(&id).await?;
        parent = Some(trainyard_domain::explorer::RunLink {
            run_id: run.info.run_id,
            experiment_id: run.info.experiment_id,
            name: run.info.run_name,
        });
    }
    let children = store
        .child_run_counts(std::slice::from_ref(&run.info.run_id))
        .await?
        .remove(&run.info.run_id)
        .unwrap_or(0);
    let changeable = store
        .run_as(&user, &run.info.run_id, trainyard_store::Access::Change)
        .await
        .is_ok();
    let may_change = run.info.lifecycle_stage == "active" && changeable;
    // A deleted run comes back into an experiment that is there.
    let may_purge = run.info.lifecycle_stage != "active" && changeable;
    let may_restore = run.info.lifecycle_stage != "active"
        && changeable
        && experiment.lifecycle_stage == "active";
    let mut io = store.run_io(std::slice::from_ref(&run.info.run_id)).await?;
    let datasets = run_datasets(
        io.remove(&run.info.run_id)
            .map(|io| io.datasets)
            .unwrap_or_default(),
    );
    let mut models = Vec::new();
    for model in store.logged_models_of_run(&run.info.run_id).await? {
        if store
            .logged_model_as(&user, &model.model_id, trainyard_store::Access::Read)
            .await
            .is_err()
        {
            continue;
        }
        // The latest value of each metric logged against it.
        let mut latest: Vec<(String, (i64, i64), f64)> = Vec::new();
        for m in &model.metrics {
            let at = (m.point.step, m.point.timestamp);
            match latest.iter_mut().find(|(k, _, _)| *k == m.key) {
                Some(slot) if slot.1 <= at => *slot = (m.key.clone(), at, m.point.value),
                Some(_) => {}
                None => latest.push((m.key.clone(), at, m.point.value)),
            }
        }
        latest.sort_by(|a, b| a.0.cmp(&b.0));
        models.push(trainyard_domain::explorer::RunModel {
            made_here: model.source_run_id.as_deref() == Some(run.info.run_id.as_str()),
            model_id: model.model_id,
            name: model.name,
            status: model.status,
            model_type: model.model_type,
            metrics: latest
                .into_iter()
                .map(|(k, _, v)| (k, Cell::metric(v)))
                .collect(),
            experiment_id: model.experiment_id,
        });
    }
    let by_run = trainyard_domain::query::Expr::Test(
        trainyard_domain::query::Field::Attr(trainyard_domain::query::Attribute::RunId),
        trainyard_domain::query::Predicate::Cmp(
            trainyard_domain::query::CmpOp::Eq,
            trainyard_domain::query::Literal::Str(run.info.run_id.clone()),
        ),
    );
    let traces = store
        .search_traces(
            &[run.info.experiment_id],
            Some(&by_run),
            &[],
            trainyard_domain::explorer::RUN_TRACES_SHOWN,
            0,
            &trainyard_store::Viewer::of(&user),
        )
        .await?
        .traces
        .into_iter()
        .map(|t| trainyard_domain::explorer::RunTrace {
            name: t
                .tags
                .iter()
                .find(|(k, _)| k == "mlflow.traceName")
                .map(|(_, v)| v.clone())
                .unwrap_or_default(),
            trace_id: t.trace_id,
            state: t.state,
            request_time: t.request_time,
            execution_ms: t.execution_time,
        })
        .collect();
    Ok(RunDetail {
        run_id: run.info.run_id,
        experiment_id: run.info.experiment_id,
        experiment_name: experiment.name,
        name: run.info.run_name,
        status: run.info.status,
        user: run.info.user_id,
        start_time: run.info.start_time,
        end_time: run.info.end_time,
        lifecycle_stage: run.info.lifecycle_stage,
        job_id,
        job_deleted,
        metrics,
        params,
        tags,
        artifacts,
        artifacts_truncated,
        datasets,
        models,
        traces,
        note_html: note.as_deref().map(crate::markdown::to_html),
        note,
        may_change,
        parent,
        children,
        may_restore,
        may_purge,
    })
}

/// MLflow's tag for a run's description.
pub const NOTE_TAG: &str = "mlflow.note.content";

/// Renames a run and sets its description, from its page (`note` None: the
/// description is left as it is).
#[server(endpoint = "edit_run")]
pub async fn edit_run(run_id: String, name: String, note: Option<String>) -> Result<(), AppError> {
    use trainyard_domain::FieldError;
    use trainyard_domain::explorer::{MAX_RUN_NAME, MAX_RUN_NOTE};
    let store = store()?;
    let user = caller()?.user;
    store
        .run_as(&user, &run_id, trainyard_store::Access::Change)
        .await?;
    let name = name.trim();
    let mut errors = Vec::new();
    if name.is_empty() {
        errors.push(FieldError::new("name", "is empty; give the run a name"));
    } else if name.chars().count() > MAX_RUN_NAME {
        errors.push(FieldError::new(
            "name",
            format!("is longer than {MAX_RUN_NAME} characters"),
        ));
    }
    if note.as_ref().is_some_and(|n| n.len() > MAX_RUN_NOTE) {
        errors.push(FieldError::new(
            "note",
            format!("is longer than {} KiB", MAX_RUN_NOTE / 1024),
        ));
    }
    if !errors.is_empty() {
        return Err(AppError::Fields(errors));
    }
    store.update_run(&run_id, None, None, Some(name)).await?;
    if let Some(note) = note {
        store
            .log_batch(&run_id, &[], &[], &[(NOTE_TAG.to_owned(), note)])
            .await?;
    }
    Ok(())
}

/// Sets a tag of a run (or deletes it, with `remove`), from its page. Keys
/// follow MLflow's rules; the `mlflow.` and `trainyard.` tags are the
/// system's and stay as they are.
#[server(endpoint = "set_run_tag")]
pub async fn set_run_tag(
    run_id: String,
    key: String,
    #[server(default)] value: String,
    #[server(default)] remove: bool,
) -> Result<(), AppError> {
    use trainyard_domain::FieldError;
    use trainyard_domain::explorer::{MAX_TAG_KEY, MAX_TAG_VALUE};
    let store = store()?;
    let user = caller()?.user;
    store
        .run_as(&user, &run_id, trainyard_store::Access::Change)
        .await?;
    let allowed = |c: char| c.is_alphanumeric() || matches!(c, '_' | '-' | '.' | ' ' | ':' | '/');
    let problem = if key.is_empty() {
        Some("is empty; name the tag".to_owned())
    } else if key.chars().count() > MAX_TAG_KEY {
        Some(format!("is longer than {MAX_TAG_KEY} characters"))
    } else if !key.chars().all(allowed) {
        Some("may hold letters, digits and _ - . : / and spaces only".to_owned())
    } else if key.starts_with('/') || key.split('/').any(|p| p == "." || p == "..") {
        Some("may not start with / or hold . or .. as a part".to_owned())
    } else if key.starts_with("mlflow.") || key.starts_with("trainyard.") {
        Some(
            "is a system tag (mlflow.… and trainyard.… are set by the client and by Trainyard)"
                .to_owned(),
        )
    } else {
        None
    };
    if let Some(problem) = problem {
        bad_request();
        return Err(AppError::Fields(vec![FieldError::new("key", problem)]));
    }
    if remove {
        return Ok(store.delete_run_tag(&run_id, &key).await?);
    }
    if value.chars().count() > MAX_TAG_VALUE {
        bad_request();
        return Err(AppError::Fields(vec![FieldError::new(
            "value",
            format!("is longer than {MAX_TAG_VALUE} characters"),
        )]));
    }
    store.log_batch(&run_id, &[], &[], &[(key, value)]).await?;
    Ok(())
}

/// Deletes a run (MLflow's soft delete: `mlflow gc` or a restore later),
/// from its page; the browser goes back to its experiment.
#[server(endpoint = "delete_run_page")]
pub async fn delete_run_page(run_id: String) -> Result<(), AppError> {
    let (store, run) = run_to_change(&run_id).await?;
    store.set_run_deleted(&run_id, true).await?;
    leptos_axum::redirect(&format!("/experiments/{}", run.info.experiment_id));
    Ok(())
}

/// Brings a deleted run back into its experiment, from its page.
#[server(endpoint = "restore_run_page")]
pub async fn restore_run_page(run_id: String) -> Result<(), AppError> {
    let (store, run) = run_to_change(&run_id).await?;
    let experiment = store.get_experiment(run.info.experiment_id).await?;
    if experiment.lifecycle_stage != "active" {
        return Err(AppError::Conflict(format!(
            "its experiment {} is archived: restore the experiment first (Experiments → Archived)",
            experiment.name
        )));
    }
    store.set_run_deleted(&run_id, false).await?;
    leptos_axum::redirect(&format!(
        "/experiments/{}/runs/{}",
        run.info.experiment_id, run_id
    ));
    Ok(())
}

/// Deletes a deleted run forever, from its page: its record and its
/// artifacts; the browser goes to its experiment's deleted runs.
#[server(endpoint = "purge_run_page")]
pub async fn purge_run_page(run_id: String) -> Result<(), AppError> {
    let (store, run) = run_to_change(&run_id).await?;
    purge(&store, &run_id, run.info.experiment_id).await?;
    leptos_axum::redirect(&format!(
        "/experiments/{}?deleted=1",
        run.info.experiment_id
    ));
    Ok(())
}

/// The most runs one press of "Delete all forever" removes.
pub const PURGE_AT_ONCE: u64 = 200;

/// Deletes forever the deleted runs of an experiment that the caller may
/// change (up to [`PURGE_AT_ONCE`]), saying what it removed and what it
/// kept and why.
#[server(endpoint = "purge_deleted_runs")]
pub async fn purge_deleted_runs(experiment_id: i64) -> Result<String, AppError> {
    use trainyard_domain::{format_bytes, format_count};
    let user = caller()?.user;
    let store = store()?;
    store
        .experiment_as(&user, experiment_id, trainyard_store::Access::Read)
        .await?;
    // Only those the caller may change count toward a press's 200: an
    // admin's, everyone's; anyone else's, their own.
    let owner = (!user.is_admin).then_some(user.id);
    let deleted = store
        .deleted_runs(experiment_id, owner, PURGE_AT_ONCE + 1)
        .await?;
    let more = deleted.len() as u64 > PURGE_AT_ONCE;
    let (mut removed, mut freed) = (0i64, 0u64);
    let (mut kept, mut stuck) = (Vec::new(), Vec::new());
    for (run_id, name) in deleted.into_iter().take(PURGE_AT_ONCE as usize) {
        if store
            .run_as(&user, &run_id, trainyard_store::Access::Change)
            .await
            .is_err()
        {
            continue;
        }
        match purge(&store, &run_id, experiment_id).await {
            Ok(bytes) => {
                removed += 1;
                freed += bytes;
            }
            // Gone meanwhile (a second press).
            Err(NotPurged::Store(trainyard_store::StoreError::NotFound(_))) => {}
            Err(NotPurged::Store(trainyard_store::StoreError::Rejected(why))) => {
                kept.push(format!("{name}: {why}"))
            }
            Err(e @ (NotPurged::Store(_) | NotPurged::Unwired(_))) => return Err(e.into()),
            Err(NotPurged::Folder(why)) => {
                removed += 1;
                stuck.push(format!("{name}: {why}"));
            }
        }
    }
    let mut said = format!(
        "Deleted {} run{} forever, freeing {}.",
        format_count(removed),
        if removed == 1 { "" } else { "s" },
        format_bytes(freed)
    );
    if !kept.is_empty() {
        said.push_str(&format!(" Kept {}: {}.", kept.len(), kept.join("; ")));
    }
    if !stuck.is_empty() {
        said.push_str(&format!(" {}.", stuck.join("; ")));
    }
    if more {
        said.push_str(&format!(
            " At most {PURGE_AT_ONCE} go at once: press again for the rest."
        ));
    }
    Ok(said)
}

/// Why a run was not deleted forever.
#[cfg(feature = "ssr")]
enum NotPurged {
    /// Refused or failed in the store: nothing changed.
    Store(trainyard_store::StoreError),
    /// The server is not set up for it: nothing changed.
    Unwired(&'static str),
    /// The record is gone, its folder stays: what happened.
    Folder(String),
}

/// Deletes a deleted run's record, then its folder (links removed, never
/// followed), and has its owner's artifacts counted again. The bytes its
/// artifacts held.
#[cfg(feature = "ssr")]
async fn purge(
    store: &trainyard_store::Store,
    run_id: &str,
    experiment_id: i64,
) -> Result<u64, NotPurged> {
    let root = use_context::<ArtifactRoot>()
        .ok_or_else(|| NotPurged::Unwired("the artifact folder is not wired in"))?;
    let owner = store.run_owner(run_id).await.map_err(NotPurged::Store)?;
    let counts = use_context::<ArtifactsRemoved>();
    // The owner's turn, from the record's end to the folder's: an upload
    // waiting for it finds the run gone, and one that had it is done.
    let _turn = match (&counts, owner.user_id) {
        (Some(counts), Some(user_id)) => Some((counts.turn)(user_id).await),
        _ => None,
    };
    store.purge_run(run_id).await.map_err(NotPurged::Store)?;
    if let Ok(me) = caller()
        && owner.user_id != Some(me.user.id)
    {
        store
            .audit(
                &me.user,
                trainyard_domain::identity::AuditAction::RunPurged,
                &format!("run {run_id}"),
                &format!("in experiment {experiment_id}"),
            )
            .await;
    }
    let folder = root.0.join(experiment_id.to_string()).join(run_id);
    let (freed, removed) = tokio::task::spawn_blocking(move || {
        let (bytes, _) = trainyard_jobs::tree::file_bytes(
            &[folder.join("artifacts")],
            trainyard_jobs::tree::MAX_COUNTED,
        );
        (
            bytes,
            trainyard_jobs::tree::remove_tree(&folder).map_err(|e| (folder, e)),
        )
    })
    .await
    .map_err(|e| {
        tracing::error!(run_id, "removing a purged run's folder failed: {e}");
        NotPurged::Folder(
            "its record is gone, but removing its files failed; the server's log says why"
                .to_owned(),
        )
    })?;
    if let (Some(counts), Some(user_id)) = (counts, owner.user_id) {
        (counts.forget)(user_id);
    }
    if let Err((folder, e)) = removed {
        tracing::error!(run_id, folder = %folder.display(), "a purged run's folder stays: {e}");
        return Err(NotPurged::Folder(
            "its record is gone, but some of its files could not be removed; the server's log names them for an admin".to_owned(),
        ));
    }
    Ok(freed)
}

#[cfg(feature = "ssr")]
impl From<NotPurged> for AppError {
    fn from(not: NotPurged) -> AppError {
        match not {
            NotPurged::Store(e) => e.into(),
            NotPurged::Folder(why) => {
                crate::error::set_error_status(http::StatusCode::INTERNAL_SERVER_ERROR);
                AppError::Internal(why)
            }
            NotPurged::Unwired(what) => {
                crate::error::set_error_status(http::StatusCode::INTERNAL_SERVER_ERROR);
                AppError::Internal(what.to_owned())
            }
        }
    }
}

/// A run the caller may change, as the buttons of its page act on it, with
/// the store.
#[cfg(feature = "ssr")]
async fn run_to_change(
    run_id: &str,
) -> Result<(trainyard_store::Store, trainyard_domain::tracking::Run), AppError> {
    let store = store()?;
    let user = caller()?.user;
    store
        .run_as(&user, run_id, trainyard_store::Access::Change)
        .await?;
    let run = store.get_run(run_id).await?;
    Ok((store, run))
}

/// A run's datasets as its page shows them: the source's URI, the schema's
/// columns, the profile's row count.
#[cfg(feature = "ssr")]
fn run_datasets(
    inputs: Vec<trainyard_domain::tracking::DatasetInput>,
) -> Vec<trainyard_domain::explorer::RunDataset> {
    use serde_json::Value;
    inputs
        .into_iter()
        .map(|input| {
            let d = input.dataset;
            let source: Option<Value> = serde_json::from_str(&d.source).ok();
            let uri = source
                .as_ref()
                .and_then(|s| s.get("uri").or_else(|| s.get("path")))
                .and_then(Value::as_str)
                .map(str::to_owned);
            let schema: Option<Value> = d
                .schema
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok());
            let columns = schema
                .as_ref()
                .and_then(|s| {
                    s.get("mlflow_colspec")
                        .or_else(|| s.get("mlflow_tensorspec"))
                })
                .and_then(Value::as_array)
                .map(|cols| {
                    cols.iter()
                        .take(200)
                        .map(|c| {
                            let text =
                                |k: &str| c.get(k).and_then(Value::as_str).unwrap_or("").to_owned();
                            (text("name"), text("type"))
                        })
                        .collect()
                })
                .unwrap_or_default();
            let rows = d
                .profile
                .as_deref()
                .and_then(|p| serde_json::from_str::<Value>(p).ok())
                .and_then(|p| p.get("num_rows").and_then(Value::as_u64));
            let (mlflow, tags): (Vec<_>, Vec<_>) = input
                .tags
                .into_iter()
                .partition(|(k, _)| k.starts_with("mlflow."));
            trainyard_domain::explorer::RunDataset {
                name: d.name,
                digest: d.digest,
                source_type: d.source_type,
                source: uri.unwrap_or(d.source),
                context: mlflow
                    .into_iter()
                    .find(|(k, _)| k == "mlflow.data.context")
                    .map(|(_, v)| v),
                tags,
                columns,
                rows,
            }
        })
        .collect()
}

/// A run's name and the keys of its metrics, sorted: what its page draws
/// charts of (without the facts, artifacts and experiment of the detail).
#[server(endpoint = "get_run_metric_keys")]
pub async fn get_run_metric_keys(run_id: String) -> Result<(String, Vec<String>), AppError> {
    let run = readable_run(&store()?, &run_id).await?;
    let mut keys: Vec<String> = run.metrics.into_iter().map(|m| m.key).collect();
    keys.sort();
    keys.dedup();
    Ok((run.info.run_name, keys))
}

/// A run's own tags, sorted: without MLflow's (`mlflow.*`) and ours
/// (`trainyard.*`), which the pages show in their own places.
#[cfg(feature = "ssr")]
fn user_tags(tags: Vec<(String, String)>) -> Vec<(String, String)> {
    let mut tags: Vec<(String, String)> = tags
        .into_iter()
        .filter(|(k, _)| !k.starts_with("mlflow.") && !k.starts_with("trainyard."))
        .collect();
    tags.sort();
    tags
}

/// The files under a run's artifact folder, sorted; folders are listed
/// too. Stops at [`MAX_ARTIFACTS`] entries, without reading further: of a
/// folder with more, the listing holds those the file system gave first.
#[cfg(feature = "ssr")]
async fn list_artifacts(
    folder: std::path::PathBuf,
) -> (Vec<trainyard_domain::explorer::Artifact>, bool) {
    use trainyard_domain::explorer::Artifact;
    let mut out = Vec::new();
    let mut stack = vec![(folder.clone(), String::new())];
    let mut truncated = false;
    while let Some((dir, prefix)) = stack.pop() {
        if truncated {
            break;
        }
        let Ok(mut entries) = tokio::fs::read_dir(&dir).await else {
            continue;
        };
        let mut here = Vec::new();
        while let Ok(Some(entry)) = entries.next_entry().await {
            if out.len() + here.len() >= MAX_ARTIFACTS {
                truncated = true;
                break;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with(".upload-") {
                continue;
            }
            // Links are not followed: an artifact stays inside its folder.
            let Ok(meta) = tokio::fs::symlink_metadata(entry.path()).await else {
                continue;
            };
            if meta.file_type().is_symlink() {
                continue;
            }
            here.push((name, meta.is_dir(), meta.len(), entry.path()));
        }
        here.sort_by(|a, b| b.0.cmp(&a.0));
        for (name, is_dir, size, path) in here.into_iter().rev() {
            if out.len() >= MAX_ARTIFACTS {
                truncated = true;
                break;
            }
            let rel = format!("{prefix}{name}");
            if is_dir {
                stack.push((path, format!("{rel}/")));
            }
            out.push(Artifact {
                path: rel,
                is_dir,
                size: if is_dir { 0 } else { size },
            });
        }
    }
    out.sort_by(|a, b| a.path.cmp(&b.path));
    (out, truncated)
}

/// The start of one of a run's artifacts as text, for its page. The path
/// stays inside the run's artifact folder and follows no link; a file
/// that is not UTF-8 (or holds NUL bytes) has no text.
#[server(endpoint = "artifact_preview")]
pub async fn artifact_preview(
    run_id: String,
    path: String,
) -> Result<trainyard_domain::explorer::ArtifactPreview, AppError> {
    use tokio::io::AsyncReadExt;
    use trainyard_domain::explorer::{ArtifactPreview, PREVIEW_BYTES};
    let segments: Vec<&str> = path.split('/').collect();
    if path.len() > 4096
        || segments
            .iter()
            .any(|s| s.is_empty() || *s == "." || *s == ".." || s.contains('\0'))
    {
        return Err(invalid(
            "path",
            "name a file inside the run's artifacts, as the list shows it",
        ));
    }
    let store = store()?;
    let run = readable_run(&store, &run_id).await?;
    let root = use_context::<ArtifactRoot>()
        .ok_or_else(|| AppError::Internal("the artifact folder is not wired in".to_owned()))?;
    let mut file = root
        .0
        .join(run.info.experiment_id.to_string())
        .join(&run.info.run_id)
        .join("artifacts");
    // A 404, as the store's not-found sets it.
    let missing = || {
        AppError::from(trainyard_store::StoreError::NotFound(format!(
            "no artifact '{path}' in this run"
        )))
    };
    // Each step is looked at without following it: a link is not an artifact.
    for (i, segment) in segments.iter().enumerate() {
        file.push(segment);
        let meta = tokio::fs::symlink_metadata(&file)
            .await
            .map_err(|_| missing())?;
        let last = i + 1 == segments.len();
        if meta.file_type().is_symlink() || (last && !meta.is_file()) || (!last && !meta.is_dir()) {
            return Err(missing());
        }
    }
    // Opened without following a link swapped in since (nor blocking on a
    // pipe), and looked at again once open.
    let mut opened = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(&file)
        .await
        .map_err(|_| missing())?;
    let meta = opened.metadata().await.map_err(|_| missing())?;
    if !meta.is_file() {
        return Err(missing());
    }
    let size = meta.len();
    let mut bytes = Vec::with_capacity(PREVIEW_BYTES.min(size as usize));
    (&mut opened)
        .take(PREVIEW_BYTES as u64)
        .read_to_end(&mut bytes)
        .await
        .map_err(|e| AppError::Internal(format!("reading '{path}': {e}")))?;
    let truncated = (bytes.len() as u64) < size;
    // A cut may fall inside a character: up to three bytes go.
    let text = match std::str::from_utf8(&bytes) {
        Ok(t) => Some(t.to_owned()),
        Err(e) if truncated && e.error_len().is_none() => {
            Some(String::from_utf8_lossy(&bytes[..e.valid_up_to()]).into_owned())
        }
        Err(_) => None,
    }
    .filter(|t| !t.contains('\0'));
    Ok(ArtifactPreview {
        text,
        truncated,
        size,
    })
}

/// Runs to compare, in the order asked, with their params, tags and latest
/// metric values.
#[server(endpoint = "compare_runs", input = Json)]
pub async fn compare_runs(run_ids: Vec<String>) -> Result<Vec<CompareRun>, AppError> {
    use trainyard_domain::explorer::{Cell, MAX_COMPARE};
    if run_ids.is_empty() || run_ids.len() > MAX_COMPARE {
        return Err(invalid(
            "runs",
            format!("select 1 to {MAX_COMPARE} runs to compare"),
        ));
    }
    let user = caller()?.user;
    let store = store()?;
    store.runs_readable(&user, &run_ids).await?;
    let runs = store.load_runs(&run_ids).await?;
    Ok(runs
        .into_iter()
        .map(|run| {
            let mut metrics: Vec<(String, Cell)> = run
                .metrics
                .iter()
                .map(|m| (m.key.clone(), Cell::metric(m.point.value)))
                .collect();
            metrics.sort_by(|a, b| a.0.cmp(&b.0));
            let mut params = run.params;
            params.sort();
            let tags = user_tags(run.tags);
            CompareRun {
                run_id: run.info.run_id,
                experiment_id: run.info.experiment_id,
                name: run.info.run_name,
                status: run.info.status,
                start_time: run.info.start_time,
                metrics,
                params,
                tags,
            }
        })
        .collect())
}

/// Chart series, downsampled on the server (see `/api/trainyard/v1/series`).
#[server(endpoint = "chart_series", input = Json)]
pub async fn chart_series(request: SeriesRequest) -> Result<Vec<SeriesData>, AppError> {
    let user = caller()?.user;
    let store = store()?;
    if request.run_ids.len() > trainyard_domain::explorer::SERIES_MAX_RUNS {
        return Err(invalid(
            "run_ids",
            request.check().err().unwrap_or_default(),
        ));
    }
    store.runs_readable(&user, &request.run_ids).await?;
    Ok(store.chart_series(&request).await?)
}

/// The figures of chosen metrics of chosen runs: the latest value, the
/// lowest and the highest, each with its step (the compare page's metrics
/// table). Series a run lacks are left out.
#[server(endpoint = "metric_figures", input = Json)]
pub async fn metric_figures(
    run_ids: Vec<String>,
    keys: Vec<String>,
) -> Result<Vec<SeriesFigures>, AppError> {
    use trainyard_domain::explorer::{Cell, MAX_COMPARE, MAX_FIGURE_KEYS};
    if run_ids.is_empty() || run_ids.len() > MAX_COMPARE {
        return Err(invalid("run_ids", format!("name 1 to {MAX_COMPARE} runs")));
    }
    if keys.len() > MAX_FIGURE_KEYS {
        return Err(invalid(
            "keys",
            format!("name at most {MAX_FIGURE_KEYS} metrics; choose fewer"),
        ));
    }
    let user = caller()?.user;
    let store = store()?;
    store.runs_readable(&user, &run_ids).await?;
    let at = |(value, step): (f64, i64)| (Cell::metric(value), step);
    Ok(store
        .metric_summaries(&run_ids, &keys)
        .await?
        .into_iter()
        .map(|s| SeriesFigures {
            run_id: s.run_id,
            key: s.key,
            last: at(s.last),
            min: s.extremes.map(|e| at(e.min)),
            max: s.extremes.map(|e| at(e.max)),
        })
        .collect())
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::{MAX_ARTIFACTS, list_artifacts};

    #[tokio::test]
    async fn artifacts_are_listed_without_links_or_uploads_and_up_to_the_limit() {
        let root =
            std::env::temp_dir().join(format!("trainyard-artifact-listing-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(root.join("sub")).unwrap();
        std::fs::write(root.join("sub/model.bin"), b"12345").unwrap();
        std::fs::write(root.join("a.txt"), b"abc").unwrap();
        std::fs::write(root.join(".upload-123"), b"half").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", root.join("link")).unwrap();
        let (listed, truncated) = list_artifacts(root.clone()).await;
        let seen: Vec<(&str, bool, u64)> = listed
            .iter()
            .map(|a| (a.path.as_str(), a.is_dir, a.size))
            .collect();
        assert_eq!(
            seen,
            [
                ("a.txt", false, 3),
                ("sub", true, 0),
                ("sub/model.bin", false, 5)
            ]
        );
        assert!(!truncated);

        std::fs::create_dir(root.join("many")).unwrap();
        for i in 0..MAX_ARTIFACTS + 200 {
            std::fs::write(root.join(format!("many/{i}")), b"").unwrap();
        }
        let (listed, truncated) = list_artifacts(root.clone()).await;
        assert!(truncated);
        assert_eq!(listed.len(), MAX_ARTIFACTS);
        std::fs::remove_dir_all(&root).unwrap();
    }
}
