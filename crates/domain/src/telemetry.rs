//! GPU telemetry: what a GPU reports at one moment (as NVML says it), the
//! batches a node sends, and the series the admin and job pages draw.

use serde::{Deserialize, Serialize};

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
