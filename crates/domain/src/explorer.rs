//! What the experiment explorer shows (pages of runs, a run's details, chart
//! series) and the view state it keeps in the URL, so that a view can be
//! shared by its link.
//!
//! Values travel as JSON, which has no NaN or infinity: metric values that
//! are not finite travel as text, chart points as `null`.

use serde::{Deserialize, Serialize};

use crate::ExperimentSummary;
use crate::query::{Attribute, Field, OrderBy};

/// Rows fetched at once by the runs table.
pub const PAGE_ROWS: u64 = 100;
/// Most columns a runs table shows beside its fixed ones.
pub const MAX_COLUMNS: usize = 50;
/// Most runs a comparison holds.
pub const MAX_COMPARE: usize = 100;
/// Most metrics whose figures one request asks for (the compare page's
/// table, a run page's values).
pub const MAX_FIGURE_KEYS: usize = 200;
/// Longest run query, in characters.
pub const MAX_QUERY_CHARS: usize = 4000;
/// Metric columns shown when the URL names none.
pub const DEFAULT_METRIC_COLUMNS: usize = 5;
/// Param columns shown when the URL names none.
pub const DEFAULT_PARAM_COLUMNS: usize = 3;
/// Keys of each kind offered as columns.
pub const MAX_KEYS: u64 = 1000;

/// A column of the runs table beyond the fixed ones (status, name, start,
/// duration, user): a metric's latest value, a param or a tag.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Column {
    Metric(String),
    Param(String),
    Tag(String),
}

impl Column {
    /// Reads `metrics.loss`, `params.lr` or `tags.team` (the query language's
    /// names, also the URL's).
    pub fn parse(text: &str) -> Option<Column> {
        let (kind, key) = text.split_once('.')?;
        if key.is_empty() {
            return None;
        }
        let key = key.to_owned();
        match kind {
            "metrics" | "metric" => Some(Column::Metric(key)),
            "params" | "param" => Some(Column::Param(key)),
            "tags" | "tag" => Some(Column::Tag(key)),
            _ => None,
        }
    }

    pub fn name(&self) -> String {
        match self {
            Column::Metric(k) => format!("metrics.{k}"),
            Column::Param(k) => format!("params.{k}"),
            Column::Tag(k) => format!("tags.{k}"),
        }
    }

    pub fn key(&self) -> &str {
        match self {
            Column::Metric(k) | Column::Param(k) | Column::Tag(k) => k,
        }
    }

    pub fn field(&self) -> Field {
        match self {
            Column::Metric(k) => Field::Metric(k.clone()),
            Column::Param(k) => Field::Param(k.clone()),
            Column::Tag(k) => Field::Tag(k.clone()),
        }
    }
}

/// What the table is sorted by: a column, or one of the run's attributes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Sort {
    /// `start_time`, `run_name`, `status`, `user_id`, `end_time`, or a
    /// column's name (`metrics.loss`).
    pub by: String,
    pub descending: bool,
}

impl Sort {
    /// The URL form: the name, with a leading `-` for descending.
    pub fn parse(text: &str) -> Option<Sort> {
        let (descending, by) = match text.strip_prefix('-') {
            Some(rest) => (true, rest),
            None => (false, text),
        };
        let sort = Sort {
            by: by.to_owned(),
            descending,
        };
        sort.order_by().map(|_| sort)
    }

    pub fn to_url(&self) -> String {
        if self.descending {
            format!("-{}", self.by)
        } else {
            self.by.clone()
        }
    }

    /// The search's order, or None for a name that is not sortable.
    pub fn order_by(&self) -> Option<OrderBy> {
        let field = match self.by.as_str() {
            "start_time" => Field::Attr(Attribute::StartTime),
            "end_time" => Field::Attr(Attribute::EndTime),
            "run_name" => Field::Attr(Attribute::RunName),
            "status" => Field::Attr(Attribute::Status),
            "user_id" => Field::Attr(Attribute::UserId),
            other => Column::parse(other)?.field(),
        };
        Some(OrderBy {
            field,
            ascending: !self.descending,
        })
    }
}

/// One value in a table cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Cell {
    Num(f64),
    Text(String),
}

impl Cell {
    /// A metric value: a number, or its name when it is not finite.
    pub fn metric(value: f64) -> Cell {
        if value.is_finite() {
            Cell::Num(value)
        } else if value.is_nan() {
            Cell::Text("NaN".to_owned())
        } else if value > 0.0 {
            Cell::Text("∞".to_owned())
        } else {
            Cell::Text("-∞".to_owned())
        }
    }

    /// As a table shows it: numbers with up to 6 significant digits.
    pub fn display(&self) -> String {
        match self {
            Cell::Num(v) => format_number(*v),
            Cell::Text(t) => t.clone(),
        }
    }

    pub fn as_number(&self) -> Option<f64> {
        match self {
            Cell::Num(v) => Some(*v),
            Cell::Text(t) => t.trim().parse().ok().filter(|v: &f64| v.is_finite()),
        }
    }
}

/// A number in at most 6 significant digits: 0.000123457, 1.23457e+08, 42.
pub fn format_number(v: f64) -> String {
    if !v.is_finite() {
        return Cell::metric(v).display();
    }
    if v == 0.0 {
        return "0".to_owned();
    }
    let magnitude = v.abs().log10().floor() as i32;
    if !(-4..9).contains(&magnitude) {
        let text = format!("{v:.5e}");
        // 1.50000e8 → 1.5e+08 (the mantissa without trailing zeros)
        let (mantissa, exponent) = text.split_once('e').unwrap_or((&text, "0"));
        let mantissa = mantissa.trim_end_matches('0').trim_end_matches('.');
        let exponent: i32 = exponent.parse().unwrap_or(0);
        return format!(
            "{mantissa}e{}{:02}",
            if exponent < 0 { '-' } else { '+' },
            exponent.abs()
        );
    }
    let decimals = (5 - magnitude).max(0) as usize;
    let text = format!("{v:.decimals$}");
    if text.contains('.') {
        text.trim_end_matches('0').trim_end_matches('.').to_owned()
    } else {
        text
    }
}

/// One row of the runs table: the fixed attributes and one cell per column
/// asked for, in order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunRow {
    pub run_id: String,
    pub experiment_id: i64,
    pub name: String,
    pub status: String,
    pub user: String,
    pub start_time: i64,
    pub end_time: Option<i64>,
    pub cells: Vec<Option<Cell>>,
    /// The run it was made under (`mlflow.parentRunId`), if any.
    #[serde(default)]
    pub parent_run_id: Option<String>,
    /// How many runs were made under it (not deleted).
    #[serde(default)]
    pub children: u64,
}

/// The runs table's query for the runs made under `run_id`.
pub fn children_query(run_id: &str) -> String {
    format!(
        "tags.{} = '{}'",
        crate::tracking::PARENT_RUN_TAG,
        run_id.replace('\'', "")
    )
}

/// Rows `offset..offset + rows.len()` of `total` matching runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunsPage {
    pub total: u64,
    pub offset: u64,
    /// The columns of `RunRow::cells`: those asked for, or the default ones.
    pub columns: Vec<String>,
    pub rows: Vec<RunRow>,
}

/// The keys that the runs of an experiment use, which the table offers as
/// columns.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Keys {
    pub metrics: Vec<String>,
    pub params: Vec<String>,
    pub tags: Vec<String>,
}

/// An experiment as its page shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentView {
    pub summary: ExperimentSummary,
    /// Whether the caller may rename or archive it.
    pub may_change: bool,
    pub keys: Keys,
}

/// A metric's latest value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatestValue {
    pub key: String,
    pub value: Cell,
    pub step: i64,
    pub timestamp: i64,
    /// The lowest and highest values with their steps: None when every
    /// value is NaN, or for keys past the first [`MAX_FIGURE_KEYS`].
    pub min: Option<(Cell, i64)>,
    pub max: Option<(Cell, i64)>,
}

/// Bytes of an artifact shown as text on the run page.
pub const PREVIEW_BYTES: usize = 64 * 1024;

/// The start of an artifact, to read on the run page without downloading
/// it: its text when it is UTF-8 (the first [`PREVIEW_BYTES`]), None when
/// it is not text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ArtifactPreview {
    pub text: Option<String>,
    /// More follows what `text` holds.
    pub truncated: bool,
    pub size: u64,
}

/// Rows and columns of a CSV or TSV artifact its preview shows at most.
pub const TABLE_ROWS: usize = 200;
pub const TABLE_COLUMNS: usize = 50;

/// A `.csv` or `.tsv` artifact's text as rows of cells, the first its
/// header (quoted cells, doubled quotes and line breaks inside quotes as
/// RFC 4180 has them): at most [`TABLE_ROWS`] rows of [`TABLE_COLUMNS`]
/// cells. When the text is the start of a longer file (`complete` false),
/// the last row, which may be cut off, is left out. None for other files,
/// or when no row is whole.
pub fn delimited_rows(path: &str, text: &str, complete: bool) -> Option<Vec<Vec<String>>> {
    let lower = path.to_ascii_lowercase();
    let separator = if lower.ends_with(".csv") {
        ','
    } else if lower.ends_with(".tsv") {
        '\t'
    } else {
        return None;
    };
    let mut rows: Vec<Vec<String>> = Vec::new();
    let (mut row, mut cell) = (Vec::new(), String::new());
    let (mut quoted, mut was_quoted) = (false, false);
    let mut chars = text.chars().peekable();
    fn end_cell(row: &mut Vec<String>, cell: &mut String) {
        if row.len() < TABLE_COLUMNS {
            row.push(std::mem::take(cell));
        } else {
            cell.clear();
        }
    }
    while let Some(c) = chars.next() {
        if quoted {
            match c {
                '"' if chars.peek() == Some(&'"') => {
                    cell.push('"');
                    chars.next();
                }
                '"' => quoted = false,
                c => cell.push(c),
            }
            continue;
        }
        match c {
            '"' if cell.is_empty() && !was_quoted => {
                quoted = true;
                was_quoted = true;
            }
            '\r' if chars.peek() == Some(&'\n') => {}
            '\n' | '\r' => {
                end_cell(&mut row, &mut cell);
                rows.push(std::mem::take(&mut row));
                was_quoted = false;
                if rows.len() == TABLE_ROWS {
                    return Some(rows);
                }
            }
            c if c == separator => {
                end_cell(&mut row, &mut cell);
                was_quoted = false;
            }
            c => cell.push(c),
        }
    }
    if complete && !quoted && (!cell.is_empty() || !row.is_empty()) {
        end_cell(&mut row, &mut cell);
        rows.push(row);
    }
    (!rows.is_empty()).then_some(rows)
}

/// Whether the run page shows this artifact as an image (by its name):
/// raster formats, which a browser knows by their bytes (artifacts are
/// served as bytes; an SVG needs its type to be drawn, and shows as text).
pub fn is_image(path: &str) -> bool {
    let lower = path.to_ascii_lowercase();
    [".png", ".jpg", ".jpeg", ".gif", ".webp"]
        .iter()
        .any(|ext| lower.ends_with(ext))
}

/// A file or folder among a run's artifacts; `path` is relative to the
/// run's artifact root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Artifact {
    pub path: String,
    pub is_dir: bool,
    pub size: u64,
}

/// Everything the run page shows but its charts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDetail {
    pub run_id: String,
    pub experiment_id: i64,
    pub experiment_name: String,
    pub name: String,
    pub status: String,
    pub user: String,
    pub start_time: i64,
    pub end_time: Option<i64>,
    pub lifecycle_stage: String,
    /// The job whose attempt made this run.
    pub job_id: Option<i64>,
    /// That job was deleted since; its runs stay.
    #[serde(default)]
    pub job_deleted: bool,
    pub metrics: Vec<LatestValue>,
    pub params: Vec<(String, String)>,
    /// Without MLflow's and Trainyard's own (`mlflow.*`, `trainyard.*`).
    pub tags: Vec<(String, String)>,
    pub artifacts: Vec<Artifact>,
    /// True when the list stopped at its limit.
    pub artifacts_truncated: bool,
    /// The datasets it read (`mlflow.log_input`, autolog).
    pub datasets: Vec<RunDataset>,
    /// The logged models it made or read.
    pub models: Vec<RunModel>,
    /// Its traces, newest first (at most [`RUN_TRACES_SHOWN`]).
    pub traces: Vec<RunTrace>,
    /// Its description (`mlflow.note.content`), as written, and as HTML
    /// (Markdown, as MLflow's UI shows it; made safe on the server).
    #[serde(default)]
    pub note: Option<String>,
    #[serde(default)]
    pub note_html: Option<String>,
    /// The caller may rename, describe and delete it.
    #[serde(default)]
    pub may_change: bool,
    /// The run it was made under (`mlflow.parentRunId`), where the caller
    /// may read it.
    #[serde(default)]
    pub parent: Option<RunLink>,
    /// How many runs were made under it (not deleted).
    #[serde(default)]
    pub children: u64,
    /// It is deleted, and the caller may bring it back.
    #[serde(default)]
    pub may_restore: bool,
    /// It is deleted, and the caller may delete it forever.
    #[serde(default)]
    pub may_purge: bool,
}

/// Another run, as a link to it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunLink {
    pub run_id: String,
    pub experiment_id: i64,
    pub name: String,
}

/// The longest tag key the run page sets (MLflow's).
pub const MAX_TAG_KEY: usize = 250;
/// The longest tag value it sets (what the tracking API keeps whole).
pub const MAX_TAG_VALUE: usize = 65_536;

/// The longest description a run keeps (MLflow's tag value limit).
pub const MAX_RUN_NOTE: usize = 65_536;
/// The longest run name (the column's width).
pub const MAX_RUN_NAME: usize = 250;

/// How many of a run's traces its page lists.
pub const RUN_TRACES_SHOWN: u64 = 50;

/// A dataset a run read, as its page shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunDataset {
    pub name: String,
    pub digest: String,
    pub source_type: String,
    /// Where it came from: the source's `uri` when it has one, else its JSON.
    pub source: String,
    /// `mlflow.data.context`: training, eval, …
    pub context: Option<String>,
    /// The input's other tags (`log_input(…, tags={…})`), MLflow's own
    /// (`mlflow.…`) left out.
    pub tags: Vec<(String, String)>,
    /// Column names and types from its schema.
    pub columns: Vec<(String, String)>,
    pub rows: Option<u64>,
}

/// A logged model of a run, with the metrics logged against it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunModel {
    pub model_id: String,
    pub name: String,
    /// PENDING, READY or FAILED.
    pub status: String,
    /// True when this run made it; false when it only read it.
    pub made_here: bool,
    pub model_type: String,
    pub metrics: Vec<(String, Cell)>,
    /// The experiment it is filed under (for its files' path).
    pub experiment_id: i64,
}

/// A trace of a run, as its page lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunTrace {
    pub trace_id: String,
    pub name: String,
    pub state: String,
    pub request_time: i64,
    pub execution_ms: Option<i64>,
}

/// A metric of one run in figures: its latest value and its lowest and
/// highest, each with the step it was logged at (the extremes at the first
/// point logged with them).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesFigures {
    pub run_id: String,
    pub key: String,
    pub last: (Cell, i64),
    /// None when every value is NaN.
    pub min: Option<(Cell, i64)>,
    pub max: Option<(Cell, i64)>,
}

/// A run as a comparison needs it: its name, params, tags and latest
/// metric values.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompareRun {
    pub run_id: String,
    pub experiment_id: i64,
    pub name: String,
    pub status: String,
    pub start_time: i64,
    pub metrics: Vec<(String, Cell)>,
    pub params: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
}

impl CompareRun {
    /// The value of `params.x`, `tags.x` or `metrics.x`.
    pub fn value_of(&self, column: &Column) -> Option<Cell> {
        let find = |list: &[(String, String)], key: &str| {
            list.iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| Cell::Text(v.clone()))
        };
        match column {
            Column::Param(k) => find(&self.params, k),
            Column::Tag(k) => find(&self.tags, k),
            Column::Metric(k) => self
                .metrics
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone()),
        }
    }
}

/// Runs grouped by their value of a column (a param or tag, usually): one
/// group per value, labelled `key=value`, ordered by value (numerically
/// when every value is a number); runs without the value form `key=(none)`,
/// last. Answers (label, run ids).
pub fn group_runs(runs: &[CompareRun], by: &Column) -> Vec<(String, Vec<String>)> {
    let mut groups: Vec<(Option<Cell>, Vec<String>)> = Vec::new();
    for run in runs {
        let value = run.value_of(by);
        match groups.iter_mut().find(|(v, _)| *v == value) {
            Some((_, ids)) => ids.push(run.run_id.clone()),
            None => groups.push((value, vec![run.run_id.clone()])),
        }
    }
    let numeric = groups
        .iter()
        .all(|(v, _)| v.as_ref().is_none_or(|c| c.as_number().is_some()));
    groups.sort_by(|(a, _), (b, _)| match (a, b) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (Some(_), None) => std::cmp::Ordering::Less,
        (Some(a), Some(b)) if numeric => a
            .as_number()
            .partial_cmp(&b.as_number())
            .unwrap_or(std::cmp::Ordering::Equal),
        (Some(a), Some(b)) => a.display().cmp(&b.display()),
    });
    groups
        .into_iter()
        .map(|(value, ids)| {
            let shown = value.map_or_else(|| "(none)".to_owned(), |v| v.display());
            (format!("{}={shown}", by.key()), ids)
        })
        .collect()
}

/// The x-axis of a chart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum XAxis {
    #[default]
    Step,
    /// Milliseconds since the run's start.
    Relative,
    /// Milliseconds since the Unix epoch.
    Wall,
}

impl XAxis {
    pub fn parse(text: &str) -> Option<XAxis> {
        match text {
            "step" => Some(XAxis::Step),
            "relative" => Some(XAxis::Relative),
            "wall" => Some(XAxis::Wall),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            XAxis::Step => "step",
            XAxis::Relative => "relative",
            XAxis::Wall => "wall",
        }
    }
}

/// What a chart asks the server for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesRequest {
    pub run_ids: Vec<String>,
    pub keys: Vec<String>,
    #[serde(default)]
    pub x_axis: XAxis,
    pub x_min: Option<f64>,
    pub x_max: Option<f64>,
    pub points: Option<usize>,
}

/// Most runs one chart request reads.
pub const SERIES_MAX_RUNS: usize = 100;
/// Most metric keys one chart request reads.
pub const SERIES_MAX_KEYS: usize = 20;
/// Most buckets per series.
pub const SERIES_MAX_POINTS: usize = 2000;
/// Buckets per series when the request does not say.
pub const SERIES_DEFAULT_POINTS: usize = 1000;

impl SeriesRequest {
    /// Checks the limits; answers the point budget, or what is wrong.
    pub fn check(&self) -> Result<usize, String> {
        if self.run_ids.is_empty() || self.run_ids.len() > SERIES_MAX_RUNS {
            return Err(format!("run_ids: give 1 to {SERIES_MAX_RUNS} runs"));
        }
        if self.keys.is_empty() || self.keys.len() > SERIES_MAX_KEYS {
            return Err(format!("keys: give 1 to {SERIES_MAX_KEYS} metric keys"));
        }
        let budget = self.points.unwrap_or(SERIES_DEFAULT_POINTS);
        if budget == 0 || budget > SERIES_MAX_POINTS {
            return Err(format!(
                "points: the budget per series is 1 to {SERIES_MAX_POINTS}"
            ));
        }
        for bound in [self.x_min, self.x_max].into_iter().flatten() {
            if !bound.is_finite() {
                return Err("x_min and x_max must be finite numbers".to_owned());
            }
        }
        if let (Some(lo), Some(hi)) = (self.x_min, self.x_max)
            && lo > hi
        {
            return Err("x_min must not be greater than x_max".to_owned());
        }
        Ok(budget)
    }
}

/// One downsampled series: bucket i is `x[i]`, its mean `y[i]` and the
/// `min[i]..max[i]` of the points in it (`None`: no finite value).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesData {
    pub run_id: String,
    pub key: String,
    pub total_points: usize,
    pub in_range: usize,
    pub x: Vec<f64>,
    pub y: Vec<Option<f64>>,
    pub min: Vec<Option<f64>>,
    pub max: Vec<Option<f64>>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_and_sorts_read_their_url_form() {
        assert_eq!(
            Column::parse("metrics.val loss"),
            Some(Column::Metric("val loss".to_owned()))
        );
        assert_eq!(Column::parse("params.lr").unwrap().name(), "params.lr");
        assert_eq!(Column::parse("params."), None);
        assert_eq!(Column::parse("status"), None);
        let sort = Sort::parse("-metrics.loss").unwrap();
        assert!(sort.descending);
        assert_eq!(
            sort.order_by().unwrap().field,
            Field::Metric("loss".to_owned())
        );
        assert_eq!(sort.to_url(), "-metrics.loss");
        assert_eq!(
            Sort::parse("start_time").unwrap().order_by().unwrap().field,
            Field::Attr(Attribute::StartTime)
        );
        assert_eq!(Sort::parse("-duration"), None, "not sortable");
    }

    #[test]
    fn numbers_read_well() {
        assert_eq!(format_number(0.0), "0");
        assert_eq!(format_number(42.0), "42");
        assert_eq!(format_number(0.123456789), "0.123457");
        assert_eq!(format_number(-1234.5), "-1234.5");
        assert_eq!(format_number(0.000123456789), "0.000123457");
        assert_eq!(format_number(1.5e8), "150000000");
        assert_eq!(format_number(1.5e9), "1.5e+09");
        assert_eq!(format_number(2.5e-7), "2.5e-07");
        assert_eq!(format_number(f64::NAN), "NaN");
        assert_eq!(Cell::metric(f64::NEG_INFINITY), Cell::Text("-∞".to_owned()));
    }

    #[test]
    fn compare_runs_answer_by_column() {
        let run = CompareRun {
            run_id: "r".to_owned(),
            experiment_id: 1,
            name: "a".to_owned(),
            status: "FINISHED".to_owned(),
            start_time: 0,
            metrics: vec![("loss".to_owned(), Cell::Num(0.5))],
            params: vec![("lr".to_owned(), "0.01".to_owned())],
            tags: vec![],
        };
        assert_eq!(
            run.value_of(&Column::Param("lr".to_owned()))
                .unwrap()
                .as_number(),
            Some(0.01)
        );
        assert_eq!(
            run.value_of(&Column::Metric("loss".to_owned())),
            Some(Cell::Num(0.5))
        );
        assert_eq!(run.value_of(&Column::Tag("x".to_owned())), None);
    }

    #[test]
    fn runs_group_by_value_in_numeric_order() {
        let run = |id: &str, lr: Option<&str>| CompareRun {
            run_id: id.to_owned(),
            experiment_id: 1,
            name: id.to_owned(),
            status: "FINISHED".to_owned(),
            start_time: 0,
            metrics: vec![],
            params: lr
                .map(|v| vec![("lr".to_owned(), v.to_owned())])
                .unwrap_or_default(),
            tags: vec![],
        };
        let runs = [
            run("a", Some("0.1")),
            run("b", Some("0.01")),
            run("c", None),
            run("d", Some("0.1")),
            run("e", Some("1e-3")),
        ];
        let groups = group_runs(&runs, &Column::Param("lr".to_owned()));
        let labels: Vec<&str> = groups.iter().map(|(l, _)| l.as_str()).collect();
        assert_eq!(labels, ["lr=1e-3", "lr=0.01", "lr=0.1", "lr=(none)"]);
        assert_eq!(groups[2].1, ["a", "d"]);
    }
}

/// Registered models the Models page lists at most.
pub const MODELS_SHOWN: u64 = 200;
/// Versions of registered models it lists at most (newest first).
pub const VERSIONS_SHOWN: u64 = 1000;
/// Logged models of one experiment it lists at most (newest first).
pub const LOGGED_MODELS_SHOWN: u64 = 500;

/// The Models page: the registry, and one experiment's logged models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelsView {
    pub registered: Vec<crate::tracking::RegisteredModel>,
    /// Versions of those models, newest change first.
    pub versions: Vec<crate::tracking::ModelVersion>,
    /// The experiment of each version's or logged model's source run, for
    /// links to the run's page.
    pub run_experiments: Vec<(String, i64)>,
    /// The experiment whose logged models are listed, if any.
    pub experiment_id: Option<i64>,
    pub logged: Vec<crate::tracking::LoggedModel>,
    /// More exist than listed (of each list).
    pub more_registered: bool,
    pub more_logged: bool,
    /// The descriptions of registered models (version None) and their
    /// versions, as HTML from their Markdown, as MLflow's UI shows them.
    pub notes_html: Vec<(String, Option<i64>, String)>,
}

/// An experiment's traces, a page at a time.
pub const TRACES_PAGE: u64 = 100;

/// The longest `traces.json` a trace's page reads.
pub const MAX_TRACE_FILE: u64 = 16 << 20;

/// Most JSON values and keys a client's JSON of up to 16 MiB (a
/// `traces.json`, an OTLP/JSON request) is parsed with. Parsing makes a
/// value of each however short it is written (`0,` is two bytes, the
/// value 32), so the text is counted first ([`json_values`]); a span's
/// values take tens of bytes each.
pub const MAX_JSON_VALUES: usize = 4_000_000;

/// How many values and keys a JSON text holds, at most: its commas,
/// colons and opening brackets outside strings, plus one. One pass over
/// the bytes, nothing kept.
pub fn json_values(text: &[u8]) -> usize {
    let (mut count, mut in_string, mut escaped) = (1, false, false);
    for &byte in text {
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
        } else {
            match byte {
                b'"' => in_string = true,
                b',' | b':' | b'[' | b'{' => count += 1,
                _ => {}
            }
        }
    }
    count
}

/// Spans a trace's page draws at most.
pub const MAX_SPANS: usize = 2000;

/// The longest input or output of a span the page shows.
pub const SPAN_TEXT: usize = 4096;

/// One span of a trace, placed in its tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceSpan {
    pub name: String,
    /// Nesting below the root (0).
    pub depth: usize,
    /// LLM, CHAIN, TOOL, … as the client typed it; empty when untyped.
    pub span_type: String,
    /// Start after the trace's first span started, and duration, in µs.
    pub start_us: i64,
    pub duration_us: i64,
    /// OK, ERROR or UNSET.
    pub status: String,
    pub status_message: String,
    /// Its inputs and outputs as JSON text, cut at [`SPAN_TEXT`].
    pub inputs: String,
    pub outputs: String,
    /// What it raised (its `exception` event): type and message, then the
    /// stack trace's last [`SPAN_TEXT`] characters; empty when none.
    #[serde(default)]
    pub exception: String,
    /// Its other attributes (the model, its settings, token counts, the
    /// client's own), by name, each value cut at [`SPAN_TEXT`]; at most
    /// [`MAX_SPAN_ATTRIBUTES`].
    #[serde(default)]
    pub attributes: Vec<(String, String)>,
}

/// Attributes a span's page lists at most.
pub const MAX_SPAN_ATTRIBUTES: usize = 64;

/// A trace with its spans in tree order (a parent before its children,
/// children by start).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TraceView {
    pub info: crate::tracking::TraceInfo,
    pub spans: Vec<TraceSpan>,
    /// Why no spans are shown, when none are.
    pub note: Option<String>,
    /// Spans past [`MAX_SPANS`] were left out.
    pub truncated: bool,
    /// The prompt versions it used, as `name/version`.
    pub prompts: Vec<String>,
}

/// A span as `traces.json` holds it, before it is placed in its tree.
#[derive(Debug, Clone)]
pub struct RawSpan {
    pub id: String,
    pub parent: Option<String>,
    pub start_ns: i64,
    pub end_ns: i64,
    /// What is shown of it; `depth`, `start_us` and `duration_us` are set
    /// by [`place_spans`].
    pub span: TraceSpan,
}

/// Orders spans as a tree: each root (a span whose parent is not in the
/// trace) by start, each parent before its children, children by start;
/// times from the earliest start. Spans caught in a loop of parents are
/// shown as roots. At most [`MAX_SPANS`]; true when some were left out.
/// No recursion: a trace is the client's data.
pub fn place_spans(mut raw: Vec<RawSpan>) -> (Vec<TraceSpan>, bool) {
    use std::collections::HashMap;
    raw.sort_by_key(|s| s.start_ns);
    let first = raw.first().map_or(0, |s| s.start_ns);
    let index: HashMap<&str, usize> = raw
        .iter()
        .enumerate()
        .map(|(i, s)| (s.id.as_str(), i))
        .collect();
    let mut children: Vec<Vec<usize>> = vec![Vec::new(); raw.len()];
    let mut roots = Vec::new();
    for (i, span) in raw.iter().enumerate() {
        match span.parent.as_deref().and_then(|p| index.get(p)) {
            Some(&parent) if parent != i => children[parent].push(i),
            _ => roots.push(i),
        }
    }
    let mut placed = vec![false; raw.len()];
    let mut order: Vec<(usize, usize)> = Vec::with_capacity(raw.len().min(MAX_SPANS));
    // Roots first; then whatever a loop of parents kept from being reached.
    let starts: Vec<usize> = roots.into_iter().chain(0..raw.len()).collect();
    for start in starts {
        if placed[start] {
            continue;
        }
        let mut stack = vec![(start, 0usize)];
        while let Some((i, depth)) = stack.pop() {
            if placed[i] {
                continue;
            }
            placed[i] = true;
            order.push((i, depth));
            // Reversed, so the earliest child comes off the stack first.
            for &child in children[i].iter().rev() {
                if !placed[child] {
                    stack.push((child, depth + 1));
                }
            }
        }
    }
    let truncated = order.len() > MAX_SPANS;
    order.truncate(MAX_SPANS);
    let spans = order
        .into_iter()
        .map(|(i, depth)| {
            let raw = &raw[i];
            TraceSpan {
                depth,
                start_us: raw.start_ns.saturating_sub(first) / 1000,
                duration_us: raw.end_ns.max(raw.start_ns).saturating_sub(raw.start_ns) / 1000,
                ..raw.span.clone()
            }
        })
        .collect();
    (spans, truncated)
}

#[cfg(test)]
mod span_tests {
    use super::*;

    fn raw(id: &str, parent: Option<&str>, start_ns: i64, end_ns: i64) -> RawSpan {
        RawSpan {
            id: id.to_owned(),
            parent: parent.map(str::to_owned),
            start_ns,
            end_ns,
            span: TraceSpan {
                name: id.to_owned(),
                depth: 0,
                span_type: String::new(),
                start_us: 0,
                duration_us: 0,
                status: "OK".to_owned(),
                status_message: String::new(),
                inputs: String::new(),
                outputs: String::new(),
                exception: String::new(),
                attributes: Vec::new(),
            },
        }
    }

    #[test]
    fn spans_are_placed_parent_first_children_by_start_and_loops_survive() {
        let (spans, truncated) = place_spans(vec![
            raw("tool", Some("agent"), 5_000_000, 6_000_000),
            raw("llm", Some("agent"), 2_000_000, 4_000_000),
            raw("agent", None, 1_000_000, 9_000_000),
            raw("parse", Some("llm"), 3_000_000, 3_500_000),
            // A parent outside the trace: a root of its own.
            raw("orphan", Some("gone"), 10_000_000, 10_000_000),
            // Two spans that name each other.
            raw("a", Some("b"), 11_000_000, 12_000_000),
            raw("b", Some("a"), 11_500_000, 11_600_000),
        ]);
        // Times a client made up do not overflow.
        let (odd, _) = place_spans(vec![
            raw("early", None, i64::MIN, i64::MAX),
            raw("late", None, i64::MAX, i64::MIN),
        ]);
        assert_eq!(odd[0].start_us, 0);
        assert_eq!(odd[1].duration_us, 0);
        assert!(!truncated);
        let got: Vec<(&str, usize, i64, i64)> = spans
            .iter()
            .map(|s| (s.name.as_str(), s.depth, s.start_us, s.duration_us))
            .collect();
        assert_eq!(
            got,
            [
                ("agent", 0, 0, 8000),
                ("llm", 1, 1000, 2000),
                ("parse", 2, 2000, 500),
                ("tool", 1, 4000, 1000),
                ("orphan", 0, 9000, 0),
                ("a", 0, 10_000, 1000),
                ("b", 1, 10_500, 100),
            ]
        );
    }

    #[test]
    fn a_deep_or_wide_trace_is_cut_at_the_bound_without_recursion() {
        let deep: Vec<RawSpan> = (0..MAX_SPANS as i64 + 10)
            .map(|i| {
                let parent = (i > 0).then(|| format!("s{}", i - 1));
                raw(&format!("s{i}"), parent.as_deref(), i, i + 1)
            })
            .collect();
        let (spans, truncated) = place_spans(deep);
        assert!(truncated);
        assert_eq!(spans.len(), MAX_SPANS);
        assert_eq!(spans.last().unwrap().depth, MAX_SPANS - 1);
    }

    #[test]
    fn json_values_are_counted_at_most_once_each_outside_strings() {
        // The object, "a", the list, 1, the string and {}: six, counted
        // as seven (the opening bracket and the colon both count "a"'s).
        assert_eq!(json_values(br#"{"a": [1, "x,y:[{\"", {}]}"#), 7);
        assert_eq!(json_values(b"0"), 1);
        // An escaped backslash ends no string early.
        assert_eq!(json_values(br#""\\",[""#), 3);
        let zeros = "0,".repeat(999) + "0";
        assert_eq!(json_values(format!("[{zeros}]").as_bytes()), 1001);
        let parsed: serde_json::Value = serde_json::from_str(&format!("[{zeros}]")).unwrap();
        assert_eq!(parsed.as_array().unwrap().len() + 1, 1001);
    }
}

#[cfg(test)]
mod table_tests {
    use super::delimited_rows;

    #[test]
    fn csv_and_tsv_artifacts_read_as_rows() {
        let rows = delimited_rows(
            "eval/predictions.CSV",
            "id,text,score\r\n1,\"a, b\",0.5\n2,\"say \"\"hi\"\"\nthen\",0.25\n",
            true,
        )
        .unwrap();
        assert_eq!(
            rows,
            [
                vec!["id", "text", "score"],
                vec!["1", "a, b", "0.5"],
                vec!["2", "say \"hi\"\nthen", "0.25"],
            ]
        );
        let rows = delimited_rows("t.tsv", "a\tb\n1\t2", true).unwrap();
        assert_eq!(rows, [vec!["a", "b"], vec!["1", "2"]]);
        // The start of a longer file leaves out its last, cut-off row.
        let rows = delimited_rows("p.csv", "a,b\n1,2\n3,", false).unwrap();
        assert_eq!(rows, [vec!["a", "b"], vec!["1", "2"]]);
        assert_eq!(delimited_rows("notes.txt", "a,b\n", true), None);
        assert_eq!(delimited_rows("p.csv", "", true), None);
        // Bounded in rows and columns.
        let wide = format!("{}\n", vec!["x"; 80].join(","));
        let many = wide.repeat(300);
        let rows = delimited_rows("w.csv", &many, true).unwrap();
        assert_eq!(rows.len(), super::TABLE_ROWS);
        assert_eq!(rows[0].len(), super::TABLE_COLUMNS);
    }
}
