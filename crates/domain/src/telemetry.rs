//! GPU telemetry: what a GPU reports at one moment (as NVML says it), the
//! batches a node sends, and the series the admin and job pages draw.

use serde::{Deserialize, Serialize};

use crate::FieldError;

/// A process on a GPU and the GPU memory it holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuProcess {
    pub pid: u32,
    /// None where the driver does not say (as under WDDM).
    pub used_bytes: Option<u64>,
}

/// One GPU at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSample {
    /// Its index on the node, as `CUDA_VISIBLE_DEVICES` names it.
    pub index: u32,
    pub uuid: String,
    /// Share of the last sample period a kernel ran (percent, 0–100).
    pub gpu_util: u8,
    /// Share of the period the memory was read or written (percent).
    pub mem_util: u8,
    pub mem_used_bytes: u64,
    pub mem_total_bytes: u64,
    /// Degrees Celsius.
    pub temperature_c: u32,
    pub power_mw: u32,
    pub power_limit_mw: u32,
    pub sm_clock_mhz: u32,
    pub mem_clock_mhz: u32,
    /// Volatile ECC error counts since the driver loaded; None where the
    /// GPU has no ECC or it is off.
    pub ecc_corrected: Option<u64>,
    pub ecc_uncorrected: Option<u64>,
    pub processes: Vec<GpuProcess>,
}

/// An XID error a GPU raised (NVML's critical XID event).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XidEvent {
    pub t_ms: i64,
    pub uuid: String,
    /// The XID code (e.g. 79: the GPU fell off the bus); None when NVML
    /// could not tell it.
    pub code: Option<u64>,
}

/// The samples of every GPU of a node taken at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Reading {
    /// Milliseconds since the Unix epoch.
    pub t_ms: i64,
    pub gpus: Vec<GpuSample>,
}

/// The samples of one GPU folded over a bucket of time: a raw sample is a
/// bucket of one. Means are over the samples, except where it says max.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuPoint {
    /// The bucket's start (for a raw sample, its time), ms since the epoch.
    pub t_ms: i64,
    /// How many samples the bucket folds.
    pub count: u32,
    pub gpu_util: f32,
    pub gpu_util_max: f32,
    pub mem_util: f32,
    /// The most memory used in the bucket.
    pub mem_used_bytes: u64,
    pub temperature_c: f32,
    pub temperature_max_c: f32,
    pub power_w: f32,
    pub power_max_w: f32,
    pub sm_clock_mhz: f32,
    pub mem_clock_mhz: f32,
}

/// The quantities a GPU chart can draw.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GpuQuantity {
    Utilization,
    Memory,
    Temperature,
    Power,
}

impl GpuQuantity {
    pub const ALL: [GpuQuantity; 4] = [
        GpuQuantity::Utilization,
        GpuQuantity::Memory,
        GpuQuantity::Temperature,
        GpuQuantity::Power,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            GpuQuantity::Utilization => "utilization",
            GpuQuantity::Memory => "memory",
            GpuQuantity::Temperature => "temperature",
            GpuQuantity::Power => "power",
        }
    }

    pub fn parse(s: &str) -> Option<GpuQuantity> {
        GpuQuantity::ALL.into_iter().find(|q| q.as_str() == s)
    }

    /// The axis title, with its unit.
    pub fn title(self) -> &'static str {
        match self {
            GpuQuantity::Utilization => "GPU utilization (%)",
            GpuQuantity::Memory => "GPU memory used (GiB)",
            GpuQuantity::Temperature => "Temperature (°C)",
            GpuQuantity::Power => "Power draw (W)",
        }
    }

    /// What the y axis always shows: a percentage all of 0–100, memory and
    /// power from 0; temperature where the data lies.
    pub fn y_include(self) -> Option<(f64, f64)> {
        match self {
            GpuQuantity::Utilization => Some((0.0, 100.0)),
            GpuQuantity::Memory | GpuQuantity::Power => Some((0.0, 0.0)),
            GpuQuantity::Temperature => None,
        }
    }

    /// The value of a point in the chart's unit.
    pub fn value(self, p: &GpuPoint) -> f64 {
        match self {
            GpuQuantity::Utilization => p.gpu_util as f64,
            GpuQuantity::Memory => p.mem_used_bytes as f64 / (1u64 << 30) as f64,
            GpuQuantity::Temperature => p.temperature_c as f64,
            GpuQuantity::Power => p.power_w as f64,
        }
    }
}

/// What a node's agent sends: its GPUs' readings since the last batch that
/// was accepted, and the XID errors raised meanwhile.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ReadingBatch {
    pub readings: Vec<Reading>,
    #[serde(default)]
    pub xids: Vec<XidEvent>,
    /// Which pods hold which of the node's GPUs now, as the kubelet's
    /// pod-resources API says, where the agent reads it (Kubernetes).
    /// `None`: the agent does not know; `Some(empty)`: no pod holds one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pods: Option<Vec<PodGpus>>,
}

/// A pod and the GPUs (by UUID) the kubelet gave its containers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PodGpus {
    pub namespace: String,
    pub pod: String,
    pub uuids: Vec<String>,
}

/// One GPU as the admin overview shows it now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuNow {
    /// The id the series endpoints take.
    pub id: i64,
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: u64,
    /// The latest sample, if one came within the last few periods.
    pub latest: Option<GpuLatest>,
    /// The job that holds it, if any.
    pub job: Option<i64>,
    /// Held by a job and below the idle threshold for the idle time.
    pub idle: bool,
}

/// The latest sample of a GPU, in display units.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuLatest {
    pub t_ms: i64,
    pub gpu_util: u8,
    pub mem_used_bytes: u64,
    pub temperature_c: u32,
    pub power_w: f32,
    pub power_limit_w: f32,
}

/// A node's GPUs now.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuNode {
    pub name: String,
    pub gpus: Vec<GpuNow>,
}

/// Whom GPU-hours are summed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UsageBy {
    Person,
    Team,
}

impl UsageBy {
    pub fn parse(text: &str) -> Option<UsageBy> {
        match text {
            "person" => Some(UsageBy::Person),
            "team" => Some(UsageBy::Team),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            UsageBy::Person => "person",
            UsageBy::Team => "team",
        }
    }
}

/// GPU-hours of one person or team over a period.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuUsageRow {
    /// The person's username or the team's name; "(no team)" and
    /// "(unknown)" where the job has none.
    pub name: String,
    /// Jobs that held GPUs in the period.
    pub jobs: u32,
    /// GPUs × hours held by jobs.
    pub allocated_hours: f64,
    /// Of those, the hours with samples (a GPU without telemetry counts as
    /// allocated but not sampled).
    pub sampled_hours: f64,
    /// Utilization × sampled hours: the hours' worth of work the GPUs did.
    pub busy_hours: f64,
}

impl GpuUsageRow {
    pub fn new(name: impl Into<String>) -> GpuUsageRow {
        GpuUsageRow {
            name: name.into(),
            jobs: 0,
            allocated_hours: 0.0,
            sampled_hours: 0.0,
            busy_hours: 0.0,
        }
    }

    /// Busy hours over sampled hours, in percent; None without samples.
    pub fn busy_percent(&self) -> Option<f64> {
        (self.sampled_hours > 0.0).then(|| self.busy_hours / self.sampled_hours * 100.0)
    }

    pub fn add(&mut self, other: &GpuUsageRow) {
        self.jobs += other.jobs;
        self.allocated_hours += other.allocated_hours;
        self.sampled_hours += other.sampled_hours;
        self.busy_hours += other.busy_hours;
    }
}

/// GPU-hours allocated against busy over a period, per person or team,
/// most allocated first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuUsage {
    pub from_ms: i64,
    pub to_ms: i64,
    pub by: UsageBy,
    pub rows: Vec<GpuUsageRow>,
    pub total: GpuUsageRow,
}

impl GpuUsage {
    /// The rows as CSV (RFC 4180), with the total last. Names are quoted
    /// where needed, and a name a spreadsheet would run as a formula is
    /// prefixed with `'`.
    pub fn csv(&self) -> String {
        let mut out = format!(
            "{},jobs,allocated_gpu_hours,sampled_gpu_hours,busy_gpu_hours,busy_percent\r\n",
            self.by.as_str()
        );
        for r in self.rows.iter().chain(std::iter::once(&self.total)) {
            out.push_str(&format!(
                "{},{},{:.3},{:.3},{:.3},{}\r\n",
                crate::csv_field(&r.name),
                r.jobs,
                r.allocated_hours,
                r.sampled_hours,
                r.busy_hours,
                r.busy_percent()
                    .map(|p| format!("{p:.1}"))
                    .unwrap_or_default()
            ));
        }
        out
    }
}

/// The admin's view of every GPU, with the settings that give it meaning.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuOverview {
    pub sample_secs: u64,
    pub idle_percent: f32,
    pub idle_minutes: u64,
    pub nodes: Vec<GpuNode>,
}

/// One GPU's points over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuSeries {
    pub id: i64,
    pub index: u32,
    pub uuid: String,
    pub points: Vec<GpuPoint>,
}

/// A node's or a job's GPUs over a window.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuWindow {
    pub node: String,
    pub from_ms: i64,
    pub to_ms: i64,
    pub gpus: Vec<GpuSeries>,
    /// For a job: its GPUs are flagged idle now, by the thresholds below.
    #[serde(default)]
    pub idle: bool,
    #[serde(default)]
    pub idle_percent: f32,
    #[serde(default)]
    pub idle_minutes: u64,
}

/// The windows the GPU pages offer, back from now.
pub const WINDOWS: [&str; 5] = ["1h", "6h", "24h", "7d", "30d"];

/// The longest window one read may span (a year and a day).
pub const MAX_WINDOW_MS: i64 = 366 * 86_400_000;

/// A window written as a count and a unit (`30m`, `6h`, `7d`), in
/// milliseconds; None unless it is 1 minute to [`MAX_WINDOW_MS`].
pub fn window_ms(name: &str) -> Option<i64> {
    let (n, unit) = name.split_at(name.len().checked_sub(1)?);
    let n: i64 = n.parse().ok()?;
    let unit = match unit {
        "m" => 60_000,
        "h" => 3_600_000,
        "d" => 86_400_000,
        _ => return None,
    };
    n.checked_mul(unit)
        .filter(|w| (60_000..=MAX_WINDOW_MS).contains(w))
}

/// Pixels per GPU row of the cluster heatmap, so that it stays readable
/// for a few GPUs and fits for thousands.
pub fn heat_row_height(gpus: usize) -> u32 {
    match gpus {
        0..=64 => 12,
        65..=400 => 6,
        401..=2000 => 3,
        2001..=8000 => 2,
        _ => 1,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn usage_csv_quotes_names_and_defuses_formulas() {
        let mut a = super::GpuUsageRow::new("=HYPERLINK(\"x\")");
        a.jobs = 2;
        a.allocated_hours = 3.0;
        a.sampled_hours = 2.0;
        a.busy_hours = 1.5;
        let b = super::GpuUsageRow::new("vision, ml");
        let mut total = super::GpuUsageRow::new("(total)");
        total.add(&a);
        total.add(&b);
        let usage = super::GpuUsage {
            from_ms: 0,
            to_ms: 1,
            by: super::UsageBy::Team,
            rows: vec![a, b],
            total,
        };
        let csv = usage.csv();
        let lines: Vec<&str> = csv.split("\r\n").collect();
        assert_eq!(
            lines[0],
            "team,jobs,allocated_gpu_hours,sampled_gpu_hours,busy_gpu_hours,busy_percent"
        );
        assert_eq!(
            lines[1],
            "\"'=HYPERLINK(\"\"x\"\")\",2,3.000,2.000,1.500,75.0"
        );
        // No samples: no percent, not 0 %.
        assert_eq!(lines[2], "\"vision, ml\",0,0.000,0.000,0.000,");
        assert_eq!(lines[3], "(total),2,3.000,2.000,1.500,75.0");
        assert_eq!(lines[4], "");
    }

    #[test]
    fn node_names_are_kubernetes_names() {
        for ok in ["gpu-1", "a", "node-7.cluster.example.org", "0"] {
            assert!(check_node_name(ok).is_ok(), "{ok}");
        }
        let long = "a".repeat(254);
        for bad in [
            "",
            "GPU-1",
            "-a",
            "a-",
            "a_b",
            "a/b",
            "../x",
            "a b",
            long.as_str(),
        ] {
            assert_eq!(check_node_name(bad).unwrap_err().field, "node", "{bad}");
        }
    }

    #[test]
    fn agent_batches_are_checked_field_by_field() {
        let now = 1_800_000_000_000;
        let sample = |uuid: &str, processes: usize| GpuSample {
            index: 0,
            uuid: uuid.to_owned(),
            gpu_util: 1,
            mem_util: 1,
            mem_used_bytes: 1,
            mem_total_bytes: 1,
            temperature_c: 1,
            power_mw: 1,
            power_limit_mw: 1,
            sm_clock_mhz: 1,
            mem_clock_mhz: 1,
            ecc_corrected: None,
            ecc_uncorrected: None,
            processes: vec![
                GpuProcess {
                    pid: 1,
                    used_bytes: None
                };
                processes
            ],
        };
        let batch = |t_ms: i64, s: GpuSample| ReadingBatch {
            readings: vec![Reading {
                t_ms,
                gpus: vec![s],
            }],
            xids: Vec::new(),
            pods: None,
        };
        assert!(batch(now, sample("GPU-1", 1)).check(now).is_ok());
        let field = |b: ReadingBatch| b.check(now).unwrap_err().field;
        assert_eq!(
            field(batch(now + 3_600_000, sample("GPU-1", 0))),
            "readings[0].t_ms"
        );
        assert_eq!(
            field(batch(now - 49 * 3_600_000, sample("GPU-1", 0))),
            "readings[0].t_ms"
        );
        assert_eq!(
            field(batch(now, sample("GPU 1\n", 0))),
            "readings[0].gpus[0].uuid"
        );
        assert_eq!(
            field(batch(now, sample("GPU-1", AGENT_MAX_PROCESSES + 1))),
            "readings[0].gpus[0].processes"
        );
        let many = ReadingBatch {
            readings: vec![
                Reading {
                    t_ms: now,
                    gpus: Vec::new()
                };
                AGENT_MAX_READINGS + 1
            ],
            xids: Vec::new(),
            pods: None,
        };
        assert_eq!(field(many), "readings");
        let with_pods = |pods: Vec<PodGpus>| ReadingBatch {
            pods: Some(pods),
            ..batch(now, sample("GPU-1", 0))
        };
        let pod = |namespace: &str, name: &str, uuid: &str| PodGpus {
            namespace: namespace.to_owned(),
            pod: name.to_owned(),
            uuids: vec![uuid.to_owned()],
        };
        assert!(
            with_pods(vec![pod("ml", "job-7-0-x2k9p", "GPU-1")])
                .check(now)
                .is_ok()
        );
        assert_eq!(
            field(with_pods(vec![pod("ML", "job-7", "GPU-1")])),
            "pods[0].namespace"
        );
        assert_eq!(
            field(with_pods(vec![pod("ml", "job 7", "GPU-1")])),
            "pods[0].pod"
        );
        assert_eq!(
            field(with_pods(vec![pod("ml", "job-7", "GPU 1")])),
            "pods[0].uuids[0]"
        );
        assert_eq!(
            field(with_pods(vec![
                pod("ml", "job-7", "GPU-1");
                AGENT_MAX_PODS + 1
            ])),
            "pods"
        );
        assert_eq!(
            field(with_pods(vec![
                pod("ml", "job-7", "GPU-1"),
                pod("ml", "job-8", "GPU-2"),
                pod("ml", "job-7", "GPU-3"),
            ])),
            "pods[2]"
        );
    }

    #[test]
    fn a_registration_names_each_gpu_once() {
        let gpu = |index: u32, uuid: &str| AgentGpu {
            index,
            uuid: uuid.to_owned(),
            name: "NVIDIA H100".to_owned(),
            memory_total_bytes: 1,
        };
        let reg = |gpus| AgentRegistration {
            node: "gpu-1".to_owned(),
            gpus,
        };
        assert!(reg(vec![gpu(0, "GPU-a"), gpu(1, "GPU-b")]).check().is_ok());
        assert_eq!(
            reg(vec![gpu(0, "GPU-a"), gpu(1, "GPU-a")])
                .check()
                .unwrap_err()
                .field,
            "gpus[1]"
        );
        assert_eq!(
            reg(vec![gpu(0, "GPU-a"), gpu(0, "GPU-b")])
                .check()
                .unwrap_err()
                .field,
            "gpus[1]"
        );
        assert_eq!(
            reg(vec![gpu(64, "GPU-a")]).check().unwrap_err().field,
            "gpus[0].index"
        );
        assert_eq!(
            reg((0..65).map(|i| gpu(i, &format!("GPU-{i}"))).collect())
                .check()
                .unwrap_err()
                .field,
            "gpus"
        );
    }

    use super::*;

    #[test]
    fn quantities_parse_back_from_their_names() {
        for q in GpuQuantity::ALL {
            assert_eq!(GpuQuantity::parse(q.as_str()), Some(q));
        }
        assert_eq!(GpuQuantity::parse("fan"), None);
    }

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
        assert!(WINDOWS.iter().all(|w| window_ms(w).is_some()));
    }

    #[test]
    fn heatmap_rows_thin_out_as_gpus_grow_and_stay_within_bounds() {
        assert_eq!(heat_row_height(8), 12);
        assert_eq!(heat_row_height(8000), 2);
        assert_eq!(heat_row_height(20_000), 1);
        // 8,000 GPUs on 1,000 nodes: 16,000 px of rows, under the limit
        // of 16,384 with the gaps between nodes counted by the chart.
        assert!(8000 * heat_row_height(8000) <= 16_000);
    }

    #[test]
    fn memory_is_drawn_in_gib() {
        let p = GpuPoint {
            t_ms: 0,
            count: 1,
            gpu_util: 50.0,
            gpu_util_max: 50.0,
            mem_util: 0.0,
            mem_used_bytes: 3 << 30,
            temperature_c: 0.0,
            temperature_max_c: 0.0,
            power_w: 0.0,
            power_max_w: 0.0,
            sm_clock_mhz: 0.0,
            mem_clock_mhz: 0.0,
        };
        assert_eq!(GpuQuantity::Memory.value(&p), 3.0);
        assert_eq!(GpuQuantity::Utilization.value(&p), 50.0);
    }
}

// ---------------------------------------------------------------------------
// The node agent's wire (`trainyard agent`, docs/gpu-telemetry.md).

/// The most GPUs one node may report.
pub const AGENT_MAX_GPUS: usize = 64;
/// The most readings one batch may carry (an hour at 10 s is 360).
pub const AGENT_MAX_READINGS: usize = 1000;
/// The most XID events one batch may carry.
pub const AGENT_MAX_XIDS: usize = 1000;
/// The most processes one GPU's sample may list.
pub const AGENT_MAX_PROCESSES: usize = 256;
/// The longest GPU UUID or model name taken.
pub const AGENT_MAX_NAME: usize = 128;
/// The most pods with GPUs one batch may name.
pub const AGENT_MAX_PODS: usize = 512;
/// How far ahead of the server's clock a reading may be (clock skew).
pub const AGENT_MAX_AHEAD_MS: i64 = 5 * 60_000;
/// How old a reading may be: the raw tier's span, past which it would be
/// pruned at once.
pub const AGENT_MAX_AGE_MS: i64 = 48 * 3_600_000;

/// A node's name as Kubernetes takes it: a DNS-1123 subdomain (lower-case
/// letters, digits, `-` and `.`, starting and ending with a letter or
/// digit, at most 253 characters).
pub fn check_node_name(name: &str) -> Result<(), FieldError> {
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_lowercase() || c.is_ascii_digit());
    if name.is_empty()
        || name.len() > 253
        || !name.chars().all(ok_char)
        || !edge(name.chars().next())
        || !edge(name.chars().last())
    {
        return Err(FieldError::new(
            "node",
            "a node's name is 1 to 253 lower-case letters, digits, '-' and '.', starting and ending with a letter or digit (as Kubernetes names nodes)",
        ));
    }
    Ok(())
}

/// One GPU as an agent finds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentGpu {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: u64,
}

/// What an agent sends when it starts: its node and the GPUs it found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentRegistration {
    pub node: String,
    pub gpus: Vec<AgentGpu>,
}

impl AgentRegistration {
    pub fn check(&self) -> Result<(), FieldError> {
        check_node_name(&self.node)?;
        if self.gpus.len() > AGENT_MAX_GPUS {
            return Err(FieldError::new(
                "gpus",
                format!("at most {AGENT_MAX_GPUS} GPUs per node"),
            ));
        }
        for (i, g) in self.gpus.iter().enumerate() {
            if g.index as usize >= AGENT_MAX_GPUS {
                return Err(FieldError::new(
                    &format!("gpus[{i}].index"),
                    format!(
                        "a GPU's index is 0 to {} (as NVML numbers them)",
                        AGENT_MAX_GPUS - 1
                    ),
                ));
            }
            check_uuid(&format!("gpus[{i}].uuid"), &g.uuid)?;
            if g.name.chars().count() > AGENT_MAX_NAME || g.name.chars().any(char::is_control) {
                return Err(FieldError::new(
                    &format!("gpus[{i}].name"),
                    format!("at most {AGENT_MAX_NAME} printable characters"),
                ));
            }
            if self.gpus[..i]
                .iter()
                .any(|o| o.uuid == g.uuid || o.index == g.index)
            {
                return Err(FieldError::new(
                    &format!("gpus[{i}]"),
                    "each GPU's index and UUID appear once",
                ));
            }
        }
        Ok(())
    }
}

fn check_uuid(field: &str, uuid: &str) -> Result<(), FieldError> {
    let ok = !uuid.is_empty()
        && uuid.len() <= AGENT_MAX_NAME
        && uuid
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.');
    if ok {
        Ok(())
    } else {
        Err(FieldError::new(
            field,
            format!(
                "a GPU UUID is 1 to {AGENT_MAX_NAME} letters, digits, '-', '_' or '.' (as NVML gives it)"
            ),
        ))
    }
}

impl ReadingBatch {
    /// Sizes within the limits, times within what the store keeps, at the
    /// server's `now_ms`.
    pub fn check(&self, now_ms: i64) -> Result<(), FieldError> {
        if self.readings.len() > AGENT_MAX_READINGS {
            return Err(FieldError::new(
                "readings",
                format!(
                    "at most {AGENT_MAX_READINGS} readings per batch; send the rest in another"
                ),
            ));
        }
        if self.xids.len() > AGENT_MAX_XIDS {
            return Err(FieldError::new(
                "xids",
                format!("at most {AGENT_MAX_XIDS} XID events per batch"),
            ));
        }
        let check_time = |field: String, t_ms: i64| {
            if t_ms > now_ms + AGENT_MAX_AHEAD_MS {
                Err(FieldError::new(
                    &field,
                    "in the future by more than 5 minutes: is the node's clock set (NTP)?",
                ))
            } else if t_ms < now_ms - AGENT_MAX_AGE_MS {
                Err(FieldError::new(
                    &field,
                    "older than 48 hours, what the raw samples keep; drop it",
                ))
            } else {
                Ok(())
            }
        };
        for (i, r) in self.readings.iter().enumerate() {
            check_time(format!("readings[{i}].t_ms"), r.t_ms)?;
            if r.gpus.len() > AGENT_MAX_GPUS {
                return Err(FieldError::new(
                    &format!("readings[{i}].gpus"),
                    format!("at most {AGENT_MAX_GPUS} GPUs per reading"),
                ));
            }
            for (j, g) in r.gpus.iter().enumerate() {
                check_uuid(&format!("readings[{i}].gpus[{j}].uuid"), &g.uuid)?;
                if g.processes.len() > AGENT_MAX_PROCESSES {
                    return Err(FieldError::new(
                        &format!("readings[{i}].gpus[{j}].processes"),
                        format!("at most {AGENT_MAX_PROCESSES} processes per GPU"),
                    ));
                }
            }
        }
        for (i, x) in self.xids.iter().enumerate() {
            check_time(format!("xids[{i}].t_ms"), x.t_ms)?;
            check_uuid(&format!("xids[{i}].uuid"), &x.uuid)?;
        }
        let pods = self.pods.as_deref().unwrap_or_default();
        if pods.len() > AGENT_MAX_PODS {
            return Err(FieldError::new(
                "pods",
                format!("at most {AGENT_MAX_PODS} pods with GPUs per batch"),
            ));
        }
        let mut seen = std::collections::HashSet::new();
        for (i, p) in pods.iter().enumerate() {
            // As Kubernetes names them: a namespace is a DNS label, a pod a
            // DNS subdomain (the node-name rule).
            if p.namespace.len() > 63
                || p.namespace.contains('.')
                || check_node_name(&p.namespace).is_err()
            {
                return Err(FieldError::new(
                    &format!("pods[{i}].namespace"),
                    "a namespace is 1 to 63 lower-case letters, digits and '-'",
                ));
            }
            if check_node_name(&p.pod).is_err() {
                return Err(FieldError::new(
                    &format!("pods[{i}].pod"),
                    "a pod's name is 1 to 253 lower-case letters, digits, '-' and '.'",
                ));
            }
            if p.uuids.len() > AGENT_MAX_GPUS {
                return Err(FieldError::new(
                    &format!("pods[{i}].uuids"),
                    format!("at most {AGENT_MAX_GPUS} GPUs per pod"),
                ));
            }
            for (j, u) in p.uuids.iter().enumerate() {
                check_uuid(&format!("pods[{i}].uuids[{j}]"), u)?;
            }
            if !seen.insert((&p.namespace, &p.pod)) {
                return Err(FieldError::new(
                    &format!("pods[{i}]"),
                    format!(
                        "pod {}/{} is named twice; name each pod once",
                        p.namespace, p.pod
                    ),
                ));
            }
        }
        Ok(())
    }
}

/// A GPU of the agent's node that a job holds now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeldGpu {
    pub index: u32,
    pub job_id: i64,
    /// What a simulated GPU runs at while the job holds it.
    pub simulated_util: u8,
}

/// The server's answer to an agent's registration or batch: what it kept,
/// and which of the node's GPUs jobs hold now (simulated GPUs follow it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AgentAnswer {
    pub node: String,
    /// GPU samples kept from the batch (those of the node's registered
    /// GPUs).
    pub kept: usize,
    pub held: Vec<HeldGpu>,
}
