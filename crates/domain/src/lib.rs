//! Types the browser and the server share: DTOs, job states, validation.
//! Serde only: this crate is compiled to wasm too, so it holds no I/O.

pub mod explorer;
pub mod float_text;
pub mod identity;
pub mod job;
pub mod query;
pub mod teams;
pub mod telemetry;
pub mod template;

use serde::{Deserialize, Serialize};
use std::fmt;

/// The life of a job, from submission to its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    Queued,
    Starting,
    Running,
    Succeeded,
    Failed,
    Cancelled,
    Lost,
}

impl JobState {
    pub const ALL: [JobState; 7] = [
        JobState::Queued,
        JobState::Starting,
        JobState::Running,
        JobState::Succeeded,
        JobState::Failed,
        JobState::Cancelled,
        JobState::Lost,
    ];

    /// The form stored in the database and sent over the wire.
    pub fn as_str(self) -> &'static str {
        match self {
            JobState::Queued => "QUEUED",
            JobState::Starting => "STARTING",
            JobState::Running => "RUNNING",
            JobState::Succeeded => "SUCCEEDED",
            JobState::Failed => "FAILED",
            JobState::Cancelled => "CANCELLED",
            JobState::Lost => "LOST",
        }
    }

    pub fn parse(s: &str) -> Option<JobState> {
        JobState::ALL.into_iter().find(|state| state.as_str() == s)
    }

    /// Words for people, as the UI shows them.
    pub fn label(self) -> &'static str {
        match self {
            JobState::Queued => "Queued",
            JobState::Starting => "Starting",
            JobState::Running => "Running",
            JobState::Succeeded => "Succeeded",
            JobState::Failed => "Failed",
            JobState::Cancelled => "Cancelled",
            JobState::Lost => "Lost",
        }
    }

    pub fn is_terminal(self) -> bool {
        matches!(
            self,
            JobState::Succeeded | JobState::Failed | JobState::Cancelled | JobState::Lost
        )
    }
}

impl fmt::Display for JobState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The live figures on the home page.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Overview {
    pub experiments: u64,
    pub runs: u64,
    pub active_runs: u64,
    /// Every state, in [`JobState::ALL`] order, with its count (zeros included).
    pub jobs_by_state: Vec<(JobState, u64)>,
    /// The nodes jobs run on and their GPUs: the executor's, as the admin
    /// page counts them (those the agents reported, while it cannot tell).
    pub nodes: u64,
    pub gpus: u64,
    /// The viewer is an admin, who may open the nodes' page.
    #[serde(default)]
    pub admin: bool,
}

impl Overview {
    pub fn jobs_total(&self) -> u64 {
        self.jobs_by_state.iter().map(|(_, n)| n).sum()
    }
}

/// One of someone's latest runs, for the overview.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecentRun {
    pub run_id: String,
    pub experiment_id: i64,
    pub experiment: String,
    pub name: String,
    pub status: String,
    pub start_time: i64,
    pub end_time: Option<i64>,
}

/// One line of the experiments list.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExperimentSummary {
    pub id: i64,
    pub name: String,
    pub lifecycle_stage: String,
    pub runs: u64,
    /// Milliseconds since the Unix epoch, of the newest change to it or its runs.
    pub last_activity: i64,
}

/// One GPU node as the admin pages list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    pub name: String,
    pub state: String,
    pub gpus: u64,
    pub last_seen: Option<i64>,
}

/// Where jobs run, as the admin page shows it: each node of the executor
/// with its GPUs, by whom they are held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorNodes {
    /// `local`, `kubernetes`.
    pub executor: String,
    pub nodes: Vec<ExecutorNode>,
    /// Why the executor cannot tell its nodes now (its API is away).
    pub unavailable: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExecutorNode {
    pub name: String,
    /// Takes new jobs (not drained, not cordoned, Ready, not tainted
    /// against them).
    pub takes_jobs: bool,
    /// An admin's drain of it, if drained (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<NodeDrain>,
    pub gpus: u32,
    /// Held by Trainyard's jobs that start or run there.
    pub used: u32,
    /// Held by what is not Trainyard's (other pods on a Kubernetes node).
    pub others: u32,
    pub free: u32,
    /// The Trainyard jobs on it, by id.
    pub jobs: Vec<i64>,
}

/// An admin's drain of a node: it takes no new jobs; those running there
/// go on to their end, or (`stop_jobs`) are stopped and queued again, their
/// retries untouched, to run elsewhere or once the node is back.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct NodeDrain {
    pub node: String,
    pub reason: String,
    pub stop_jobs: bool,
    /// The admin's username (None: an account removed since).
    pub by: Option<String>,
    /// Milliseconds since the Unix epoch.
    pub since: i64,
}

/// The longest reason a drain may give, in characters.
pub const MAX_DRAIN_REASON_CHARS: usize = 500;

/// A message of serde's (what a YAML or JSON document got wrong) in a
/// person's words: "invalid type: string \"two\", expected u32" reads
/// "got the text \"two\"; give a whole number, 0 or more". Messages it does
/// not know are kept as they are.
pub fn serde_in_words(message: &str) -> String {
    // `range`: the value was of the right kind but out of range, so the
    // range is named.
    let kind = |expected: &str, range: bool| -> String {
        let e = expected.trim();
        match e {
            "u8" => "a whole number from 0 to 255".to_owned(),
            "u16" => "a whole number from 0 to 65,535".to_owned(),
            "u32" if range => "a whole number from 0 to 4,294,967,295".to_owned(),
            "u32" | "u64" | "u128" | "usize" => "a whole number, 0 or more".to_owned(),
            "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number".to_owned(),
            "f32" | "f64" => "a number".to_owned(),
            "a boolean" => "true or false".to_owned(),
            "a sequence" => "a list".to_owned(),
            "a map" => "a mapping (key: value)".to_owned(),
            "a string" => "text".to_owned(),
            e if e.starts_with("struct ") || e.starts_with("a map ") => {
                "a mapping (key: value)".to_owned()
            }
            _ => e.to_owned(),
        }
    };
    let got = |found: &str| -> String {
        let f = found.trim();
        let quoted = |prefix: &str| {
            f.strip_prefix(prefix)
                .map(|rest| rest.trim().trim_matches('`').to_owned())
        };
        if let Some(text) = f.strip_prefix("string ") {
            format!("got the text {text}")
        } else if let Some(n) = quoted("integer").or_else(|| quoted("floating point")) {
            format!("got {n}")
        } else if let Some(b) = quoted("boolean") {
            format!("got {b}")
        } else if f == "map" {
            "got a mapping".to_owned()
        } else if f == "sequence" {
            "got a list".to_owned()
        } else if f == "unit value" || f == "null" {
            "got nothing".to_owned()
        } else {
            format!("got {f}")
        }
    };
    let m = message.trim();
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some((found, expected)) = m
            .strip_prefix(prefix)
            .and_then(|rest| rest.rsplit_once(", expected "))
        {
            let range = prefix == "invalid value: ";
            let wanted = kind(expected, range);
            // A number or a flag where text belongs: the same in quotes.
            let scalar = ["integer", "floating point", "boolean"]
                .iter()
                .find_map(|p| found.trim().strip_prefix(p))
                .map(|v| v.trim().trim_matches('`'));
            if wanted == "text"
                && let Some(value) = scalar
            {
                return format!("{}; give text: write it in quotes, \"{value}\"", got(found));
            }
            return format!("{}; give {wanted}", got(found));
        }
    }
    if let Some(rest) = m.strip_prefix("unknown field ") {
        if let Some((field, known)) = rest.split_once(", expected one of ") {
            return format!("{field} is not a field here; use one of {known}");
        }
        if let Some((field, known)) = rest.split_once(", expected ") {
            return format!("{field} is not a field here; use {known}");
        }
    }
    if let Some(rest) = m.strip_prefix("unknown variant ") {
        if let Some((value, known)) = rest.split_once(", expected one of ") {
            return format!("{value} is not one of the choices; use one of {known}");
        }
        if let Some((value, known)) = rest.split_once(", expected ") {
            return format!("{value} is not the choice here; use {known}");
        }
    }
    if let Some(field) = m.strip_prefix("missing field ") {
        return format!("{field} is required");
    }
    // serde-saphyr's: "duplicate mapping key: lr, set DuplicateKeyPolicy in
    // Options if acceptable" (a setting of ours, not the writer's).
    const POLICY: &str = ", set DuplicateKeyPolicy in Options if acceptable";
    if let Some(at) = m.find("duplicate mapping key") {
        let (before, rest) = m.split_at(at);
        let key = rest
            .strip_prefix("duplicate mapping key")
            .unwrap_or_default()
            .split(POLICY)
            .next()
            .unwrap_or_default()
            .trim_start_matches(':')
            .trim();
        let key = if key.is_empty() { "a key" } else { key };
        let after = rest.split_once(POLICY).map_or("", |(_, after)| after);
        return format!("{before}{key} is given twice in one mapping; keep one{after}");
    }
    m.to_owned()
}

/// A rule broken by input, naming the field so the UI can point at it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{field}: {message}")]
pub struct FieldError {
    pub field: String,
    pub message: String,
}

impl FieldError {
    pub fn new(field: &str, message: impl Into<String>) -> Self {
        FieldError {
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// MLflow's limit on metric, param and tag keys.
pub const MAX_KEY_LEN: usize = 250;

/// MLflow's limit on experiment names.
pub const MAX_EXPERIMENT_NAME_LEN: usize = 500;

/// Checks an experiment name and returns it trimmed.
pub fn validate_experiment_name(name: &str) -> Result<String, FieldError> {
    let name = name.trim();
    if name.is_empty() {
        return Err(FieldError::new(
            "name",
            "must not be empty; give the experiment a name",
        ));
    }
    let chars = name.chars().count();
    if chars > MAX_EXPERIMENT_NAME_LEN {
        return Err(FieldError::new(
            "name",
            format!("is {chars} characters long; the limit is {MAX_EXPERIMENT_NAME_LEN}"),
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(FieldError::new(
            "name",
            "must not contain control characters",
        ));
    }
    Ok(name.to_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_are_encoded_name_by_name() {
        assert_eq!(encode_path("ckpt/acc=95%.pt"), "ckpt/acc%3D95%25.pt");
        assert_eq!(encode_path("a b/#1?.txt"), "a%20b/%231%3F.txt");
        assert_eq!(encode_path("modèle.bin"), "mod%C3%A8le.bin");
        assert_eq!(encode_path("plain/model-1_v2.~pt"), "plain/model-1_v2.~pt");
    }

    #[test]
    fn job_state_round_trips_through_its_wire_form() {
        for state in JobState::ALL {
            assert_eq!(JobState::parse(state.as_str()), Some(state));
        }
        assert_eq!(JobState::parse("queued"), None);
    }

    #[test]
    fn terminal_states_are_the_four_ends() {
        let terminal: Vec<_> = JobState::ALL
            .into_iter()
            .filter(|s| s.is_terminal())
            .collect();
        assert_eq!(
            terminal,
            [
                JobState::Succeeded,
                JobState::Failed,
                JobState::Cancelled,
                JobState::Lost
            ]
        );
    }

    #[test]
    fn experiment_names_are_trimmed_and_checked() {
        assert_eq!(validate_experiment_name("  mnist  ").unwrap(), "mnist");
        assert_eq!(validate_experiment_name("   ").unwrap_err().field, "name");
        let long = "x".repeat(MAX_EXPERIMENT_NAME_LEN + 1);
        assert!(
            validate_experiment_name(&long)
                .unwrap_err()
                .message
                .contains("501")
        );
        assert!(validate_experiment_name(&"é".repeat(MAX_EXPERIMENT_NAME_LEN)).is_ok());
        assert!(validate_experiment_name("a\u{0}b").is_err());
    }

    #[test]
    fn overview_totals_jobs() {
        let overview = Overview {
            jobs_by_state: vec![(JobState::Queued, 2), (JobState::Running, 3)],
            ..Overview::default()
        };
        assert_eq!(overview.jobs_total(), 5);
    }
}

/// Formats milliseconds since the Unix epoch as `YYYY-MM-DD HH:MM UTC`.
/// Pure, so the server and the browser render the same text.
pub fn format_utc(millis: i64) -> String {
    let secs = millis.div_euclid(1000);
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    let (y, m, d) = civil_from_days(days);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02} UTC",
        rem / 3600,
        (rem % 3600) / 60
    )
}

/// Days since 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's
/// algorithm): (year, month 1–12, day 1–31).
pub fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

#[cfg(test)]
mod words_tests {
    use super::serde_in_words;

    #[test]
    fn serde_says_what_to_give_in_a_persons_words() {
        let cases = [
            (
                "invalid type: string \"two\", expected u32",
                "got the text \"two\"; give a whole number, 0 or more",
            ),
            (
                "invalid value: integer `5000000000`, expected u32",
                "got 5000000000; give a whole number from 0 to 4,294,967,295",
            ),
            (
                "invalid value: integer `-1`, expected u64",
                "got -1; give a whole number, 0 or more",
            ),
            (
                "invalid type: integer `4`, expected struct Resources",
                "got 4; give a mapping (key: value)",
            ),
            (
                "unknown variant `huge`, expected one of `int`, `float`",
                "`huge` is not one of the choices; use one of `int`, `float`",
            ),
            (
                "invalid type: floating point `1.5`, expected i64",
                "got 1.5; give a whole number",
            ),
            (
                "invalid type: sequence, expected a string",
                "got a list; give text",
            ),
            (
                "invalid type: floating point `0.1`, expected a string",
                "got 0.1; give text: write it in quotes, \"0.1\"",
            ),
            (
                "invalid type: string \"yes\", expected a boolean",
                "got the text \"yes\"; give true or false",
            ),
            (
                "unknown field `gpu`, expected one of `gpus`, `cpus`",
                "`gpu` is not a field here; use one of `gpus`, `cpus`",
            ),
            ("missing field `command`", "`command` is required"),
            (
                "duplicate mapping key: lr, set DuplicateKeyPolicy in Options if acceptable",
                "lr is given twice in one mapping; keep one",
            ),
            ("something else entirely", "something else entirely"),
        ];
        for (serde, words) in cases {
            assert_eq!(serde_in_words(serde), words, "{serde}");
        }
    }

    #[test]
    fn real_serde_messages_lose_their_rust_words() {
        #[derive(Debug, serde::Deserialize)]
        #[serde(deny_unknown_fields)]
        #[allow(dead_code)]
        struct Resources {
            gpus: u32,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Spec {
            resources: Resources,
        }
        for doc in [
            r#"{"resources": {"gpus": "two"}}"#,
            r#"{"resources": {"gpus": -1}}"#,
            r#"{"resources": {"gpus": 5000000000}}"#,
            r#"{"resources": {"gpus": 1.5}}"#,
            r#"{"resources": {"gpu": 1}}"#,
            r#"{"resources": 4}"#,
            r#"{"resources": {}}"#,
        ] {
            let err = serde_json::from_str::<Spec>(doc).unwrap_err().to_string();
            let err = err.split(" at line").next().unwrap();
            let words = serde_in_words(err);
            assert!(
                !words.contains("u32") && !words.contains("invalid") && !words.contains("struct"),
                "{doc}: {words}"
            );
        }
    }
}

#[cfg(test)]
mod time_tests {
    use super::{format_bytes, format_count, format_utc};

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_utc(0), "1970-01-01 00:00 UTC");
        assert_eq!(format_utc(951_782_400_000), "2000-02-29 00:00 UTC");
        assert_eq!(format_utc(1_795_900_000_000), "2026-11-28 21:06 UTC");
        assert_eq!(format_utc(-60_000), "1969-12-31 23:59 UTC");
        assert_eq!(format_bytes(10), "10 B");
        assert_eq!(format_bytes(1536), "1.5 KiB");
        assert_eq!(format_bytes(5 << 30), "5.0 GiB");
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(format_count(0), "0");
        assert_eq!(format_count(999), "999");
        assert_eq!(format_count(1000), "1,000");
        assert_eq!(format_count(8_388_609), "8,388,609");
        assert_eq!(format_count(-12_345), "-12,345");
        assert_eq!(format_count(i64::MIN), "-9,223,372,036,854,775,808");
    }
}

/// Text as one CSV field: quoted when it holds a comma, quote or line
/// break, and led by `'` when a spreadsheet would read it as a formula
/// (`=`, `+`, `-`, `@`, a tab or a carriage return first), unless it is a
/// plain number (`-0.001` stays a number).
pub fn csv_field(text: &str) -> String {
    if text.parse::<f64>().is_ok_and(f64::is_finite) {
        return text.to_owned();
    }
    let text = if text.starts_with(['=', '+', '-', '@', '\t', '\r']) {
        format!("'{text}")
    } else {
        text.to_owned()
    };
    if text.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", text.replace('"', "\"\""))
    } else {
        text
    }
}

/// A count for people: `10000` as `10,000`.
pub fn format_count(n: i64) -> String {
    let digits = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// A relative path (`a/b c#1.pt`) made fit for a URL: each name
/// percent-encoded (all but letters, digits and `-._~`), the `/` between
/// names kept.
pub fn encode_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    for byte in path.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~/".contains(&byte) {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

/// A size in bytes for people: 512 B, 1.5 KiB, 3.2 GiB.
pub fn format_bytes(n: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut value = n as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{n} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Tracking entities, as the store returns them and the UI shows them.
pub mod tracking {
    use serde::{Deserialize, Serialize};

    /// The tag that names the run a run was made under (MLflow's nested
    /// runs: `mlflow.start_run(nested=True)`, sweeps, autolog's children).
    pub const PARENT_RUN_TAG: &str = "mlflow.parentRunId";

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Experiment {
        pub id: i64,
        pub name: String,
        pub artifact_location: String,
        pub lifecycle_stage: String,
        pub creation_time: i64,
        pub last_update_time: i64,
        pub tags: Vec<(String, String)>,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct RunInfo {
        pub run_id: String,
        pub experiment_id: i64,
        pub run_name: String,
        pub user_id: String,
        pub status: String,
        pub start_time: i64,
        pub end_time: Option<i64>,
        pub artifact_uri: String,
        pub lifecycle_stage: String,
    }

    /// One metric point. NaN and ±Inf are legal values, as in MLflow.
    #[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
    pub struct Point {
        pub step: i64,
        pub timestamp: i64,
        #[serde(with = "crate::float_text")]
        pub value: f64,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct LatestMetric {
        pub key: String,
        pub point: Point,
    }

    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Run {
        pub info: RunInfo,
        pub metrics: Vec<LatestMetric>,
        pub params: Vec<(String, String)>,
        pub tags: Vec<(String, String)>,
    }

    /// A dataset as MLflow records it: one per experiment, name and digest.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Dataset {
        pub name: String,
        pub digest: String,
        pub source_type: String,
        /// JSON that says where the data came from (a URI, a table, code).
        pub source: String,
        pub schema: Option<String>,
        pub profile: Option<String>,
    }

    /// A dataset a run read, with the input's tags (`mlflow.data.context`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct DatasetInput {
        pub dataset: Dataset,
        pub tags: Vec<(String, String)>,
    }

    /// What a run read and wrote besides params and metrics (MLflow 3).
    #[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
    pub struct RunIo {
        pub datasets: Vec<DatasetInput>,
        /// Logged models the run read.
        pub model_inputs: Vec<String>,
        /// Logged models the run wrote, with the step at which it did.
        pub model_outputs: Vec<(String, i64)>,
    }

    /// One dataset of an experiment and the context it was used in.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct DatasetSummary {
        pub experiment_id: i64,
        pub name: String,
        pub digest: String,
        pub context: Option<String>,
    }

    /// Where a logged model's artifacts stand: being uploaded, complete or
    /// abandoned.
    pub const MODEL_STATUSES: [&str; 3] = ["PENDING", "READY", "FAILED"];

    /// A metric logged against a model (its run and dataset, if given).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct ModelMetric {
        pub key: String,
        pub point: Point,
        pub run_id: Option<String>,
        pub dataset_name: Option<String>,
        pub dataset_digest: Option<String>,
    }

    /// MLflow 3's logged model: a model with its own id, artifacts, params,
    /// tags and metrics, usually made by a run.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct LoggedModel {
        pub model_id: String,
        pub experiment_id: i64,
        pub name: String,
        pub artifact_uri: String,
        pub creation_time: i64,
        pub last_update_time: i64,
        /// One of [`MODEL_STATUSES`].
        pub status: String,
        pub status_message: String,
        pub model_type: String,
        pub source_run_id: Option<String>,
        pub lifecycle_stage: String,
        pub tags: Vec<(String, String)>,
        pub params: Vec<(String, String)>,
        pub metrics: Vec<ModelMetric>,
    }

    /// The registry's stages (kept for clients before aliases).
    pub const MODEL_STAGES: [&str; 4] = ["None", "Staging", "Production", "Archived"];

    /// A version of a registered model.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct ModelVersion {
        pub name: String,
        pub version: i64,
        pub creation_time: i64,
        pub last_update_time: i64,
        pub description: String,
        pub user_id: String,
        /// The URI it was registered from (`models:/m-…`, `runs:/…/model`).
        pub source: String,
        /// Where its files are, for `get-download-uri`.
        pub storage_location: String,
        pub run_id: Option<String>,
        pub run_link: String,
        /// One of [`MODEL_STAGES`].
        pub stage: String,
        /// The logged model it was registered from, if any.
        pub model_id: Option<String>,
        pub tags: Vec<(String, String)>,
        pub aliases: Vec<String>,
    }

    /// A registered model: a name, its versions' latest per stage, aliases.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct RegisteredModel {
        pub name: String,
        pub description: Option<String>,
        pub creation_time: i64,
        pub last_update_time: i64,
        pub tags: Vec<(String, String)>,
        /// (alias, version)
        pub aliases: Vec<(String, i64)>,
        /// The newest version in each stage.
        pub latest_versions: Vec<ModelVersion>,
    }

    /// An MLflow 3 trace's summary (its spans are in its `traces.json`).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct TraceInfo {
        pub trace_id: String,
        pub experiment_id: i64,
        /// When the request came, in ms since the epoch.
        pub request_time: i64,
        /// How long it took, in ms.
        pub execution_time: Option<i64>,
        /// OK, ERROR or IN_PROGRESS.
        pub state: String,
        pub request_preview: String,
        pub response_preview: String,
        pub client_request_id: Option<String>,
        pub metadata: Vec<(String, String)>,
        pub tags: Vec<(String, String)>,
        /// Its feedback and expectations, oldest first.
        pub assessments: Vec<Assessment>,
    }

    /// An assessment of a trace (MLflow 3): feedback on what it answered
    /// (a person's, an LLM judge's or a scorer's) or an expectation of
    /// what it should have answered.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Assessment {
        pub assessment_id: String,
        pub trace_id: String,
        pub name: String,
        /// `feedback` or `expectation`.
        pub kind: String,
        /// The feedback's or expectation's object as the client sent it
        /// (JSON): its `value` (or an expectation's `serialized_value`) and
        /// a feedback's `error`.
        pub body: String,
        /// Its value as JSON text, for people to read; empty when it has
        /// none (a feedback that failed).
        pub value: String,
        /// A feedback's error, when the judge or scorer failed.
        pub error: Option<String>,
        /// HUMAN, LLM_JUDGE, CODE or SOURCE_TYPE_UNSPECIFIED.
        pub source_type: String,
        /// Who or what assessed: a user name, a judge, a scorer.
        pub source_id: String,
        pub span_id: Option<String>,
        pub rationale: Option<String>,
        pub metadata: Vec<(String, String)>,
        /// The assessment this one replaces (which is then not valid).
        pub overrides: Option<String>,
        /// False once another assessment overrides it.
        pub valid: bool,
        /// In ms since the epoch.
        pub create_time: i64,
        pub last_update_time: i64,
    }

    /// An evaluation dataset (MLflow 3's `mlflow.genai.datasets`): the
    /// records `mlflow.genai.evaluate` runs over.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct EvaluationDataset {
        /// `d-` and 32 hex digits.
        pub dataset_id: String,
        pub name: String,
        pub tags: Vec<(String, String)>,
        /// MLflow's inferred schema (JSON): each field of the records'
        /// inputs, outputs and expectations with its type.
        pub schema: Option<String>,
        /// Changes with every change of the records.
        pub digest: String,
        pub num_records: i64,
        /// In ms since the epoch.
        pub created_time: i64,
        pub last_update_time: i64,
        pub created_by: Option<String>,
        pub last_updated_by: Option<String>,
    }

    /// One record of an evaluation dataset: one distinct set of inputs,
    /// with what is expected of them. The JSON fields are kept as sent.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct DatasetRecord {
        /// `dr-` and 32 hex digits.
        pub dataset_record_id: String,
        pub dataset_id: String,
        /// A JSON object.
        pub inputs: String,
        /// Any JSON value, or none.
        pub outputs: Option<String>,
        /// A JSON object, or none.
        pub expectations: Option<String>,
        /// A JSON object of strings.
        pub tags: Option<String>,
        /// `{"source_type": "TRACE" | "HUMAN" | "DOCUMENT" | "CODE" |
        /// "UNSPECIFIED", "source_data": {...}}`.
        pub source: Option<String>,
        /// The trace's id for a record made from a trace, else the source's
        /// own `source_id`.
        pub source_id: Option<String>,
        pub source_type: Option<String>,
        pub created_time: i64,
        pub last_update_time: i64,
        pub created_by: Option<String>,
        pub last_updated_by: Option<String>,
    }

    /// One registered version of a scorer (MLflow 3's `Scorer.register`):
    /// an LLM judge or built-in scorer kept by name in an experiment.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct ScorerVersion {
        /// A UUID, the same for every version of the scorer.
        pub scorer_id: String,
        pub experiment_id: i64,
        pub name: String,
        /// 1, 2, … in the order they were registered.
        pub version: i32,
        /// The scorer as MLflow's client serializes it: a JSON object.
        pub serialized: String,
        /// In ms since the epoch.
        pub creation_time: i64,
    }

    /// How a registered scorer judges new traces as they come (MLflow 3's
    /// `scorer.start(sampling_config=…)`): the share of traces it samples
    /// and which traces it looks at.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct OnlineScoringConfig {
        /// 32 hex digits.
        pub config_id: String,
        pub scorer_id: String,
        pub experiment_id: i64,
        /// From 0 (stopped) to 1.
        pub sample_rate: f64,
        pub filter_string: Option<String>,
    }

    /// A registry webhook (MLflow 3's `create_webhook`): the registry events
    /// that are POSTed to a URL. Its secret, which signs them, is never
    /// shown again once set.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct Webhook {
        /// A UUID.
        pub webhook_id: String,
        pub name: String,
        pub description: Option<String>,
        pub url: String,
        /// `entity.action`, as in [`WEBHOOK_EVENTS`].
        pub events: Vec<String>,
        /// `ACTIVE` or `DISABLED`.
        pub status: String,
        pub has_secret: bool,
        /// In ms since the epoch.
        pub creation_timestamp: i64,
        pub last_updated_timestamp: i64,
    }

    /// One event sent (or being sent) to a webhook.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct WebhookDelivery {
        /// A UUID, sent as `X-MLflow-Delivery-Id`.
        pub delivery_id: String,
        pub webhook_id: String,
        /// `entity.action`.
        pub event: String,
        /// In ms since the epoch.
        pub created: i64,
        pub attempts: i32,
        /// `pending`, `delivered` or `failed`.
        pub state: String,
        /// The receiver's last HTTP status.
        pub response_status: Option<i32>,
        /// Why the last try failed, when it did.
        pub error: Option<String>,
        pub finished: Option<i64>,
    }

    /// The registry events a webhook may ask for: MLflow's, less its AI
    /// gateway's budget alerts (Trainyard has no gateway).
    pub const WEBHOOK_EVENTS: [&str; 14] = [
        "registered_model.created",
        "model_version.created",
        "model_version_tag.set",
        "model_version_tag.deleted",
        "model_version_alias.created",
        "model_version_alias.deleted",
        "prompt.created",
        "prompt_version.created",
        "prompt_tag.set",
        "prompt_tag.deleted",
        "prompt_version_tag.set",
        "prompt_version_tag.deleted",
        "prompt_alias.created",
        "prompt_alias.deleted",
    ];

    /// Run statuses of MLflow.
    pub const RUN_STATUSES: [&str; 5] = ["RUNNING", "SCHEDULED", "FINISHED", "FAILED", "KILLED"];

    /// Which lifecycle stages a search includes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    pub enum ViewType {
        ActiveOnly,
        DeletedOnly,
        All,
    }

    impl ViewType {
        pub fn stages(self) -> &'static [&'static str] {
            match self {
                ViewType::ActiveOnly => &["active"],
                ViewType::DeletedOnly => &["deleted"],
                ViewType::All => &["active", "deleted"],
            }
        }
    }
}

#[cfg(test)]
mod csv_tests {
    use super::csv_field;

    #[test]
    fn csv_fields_are_quoted_and_defused_but_numbers_stay_numbers() {
        assert_eq!(csv_field("plain"), "plain");
        assert_eq!(csv_field("a, b"), "\"a, b\"");
        assert_eq!(csv_field("say \"hi\""), "\"say \"\"hi\"\"\"");
        assert_eq!(csv_field("=cmd|' /C calc'!A0"), "'=cmd|' /C calc'!A0");
        assert_eq!(csv_field("-1+2"), "'-1+2");
        assert_eq!(csv_field("@SUM(A1)"), "'@SUM(A1)");
        assert_eq!(csv_field("-0.001"), "-0.001");
        assert_eq!(csv_field("-3e-5"), "-3e-5");
        assert_eq!(csv_field("-inf"), "'-inf");
    }
}
