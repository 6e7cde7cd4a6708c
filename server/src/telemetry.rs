//! `/metrics` in the DCGM exporter's names and labels, from the latest
//! sample of every GPU (see trainyard_jobs::telemetry), so that Grafana
//! dashboards made for the exporter work unchanged.

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::gauge::ConstGauge;
pub use trainyard_jobs::telemetry::{Holder, Latest, Telemetry, TelemetrySettings};

/// The GPU metrics: a collector read at each scrape.
#[derive(Debug)]
pub struct DcgmMetrics(pub Telemetry);

type Field = (&'static str, &'static str, fn(&Latest) -> Option<f64>);

const DCGM_FIELDS: &[Field] = &[
    ("DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", |l| {
        Some(l.sample.gpu_util as f64)
    }),
    (
        "DCGM_FI_DEV_MEM_COPY_UTIL",
        "Memory utilization (in %).",
        |l| Some(l.sample.mem_util as f64),
    ),
    (
        "DCGM_FI_DEV_FB_USED",
        "Framebuffer memory used (in MiB).",
        |l| Some((l.sample.mem_used_bytes >> 20) as f64),
    ),
    (
        "DCGM_FI_DEV_FB_FREE",
        "Framebuffer memory free (in MiB).",
        |l| {
            Some(
                (l.sample
                    .mem_total_bytes
                    .saturating_sub(l.sample.mem_used_bytes)
                    >> 20) as f64,
            )
        },
    ),
    ("DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", |l| {
        Some(l.sample.temperature_c as f64)
    }),
    ("DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", |l| {
        Some(l.sample.power_mw as f64 / 1000.0)
    }),
    (
        "DCGM_FI_DEV_SM_CLOCK",
        "SM clock frequency (in MHz).",
        |l| Some(l.sample.sm_clock_mhz as f64),
    ),
    (
        "DCGM_FI_DEV_MEM_CLOCK",
        "Memory clock frequency (in MHz).",
        |l| Some(l.sample.mem_clock_mhz as f64),
    ),
    (
        "DCGM_FI_DEV_XID_ERRORS",
        "Value of the last XID error encountered.",
        |l| Some(l.last_xid.unwrap_or(0) as f64),
    ),
    (
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL",
        "Total number of single-bit volatile ECC errors.",
        |l| l.sample.ecc_corrected.map(|v| v as f64),
    ),
    (
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",
        "Total number of double-bit volatile ECC errors.",
        |l| l.sample.ecc_uncorrected.map(|v| v as f64),
    ),
];

impl Collector for DcgmMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut gpus: Vec<Latest> = self
            .0
            .latest(trainyard_store::now_millis())
            .into_values()
            .collect();
        if gpus.is_empty() {
            return Ok(());
        }
        gpus.sort_by(|a, b| (&a.node, a.sample.index).cmp(&(&b.node, b.sample.index)));
        let holders = self.0.holders();
        let labels: Vec<Vec<(&'static str, String)>> = gpus
            .iter()
            .map(|l| {
                let mut set = vec![
                    ("gpu", l.sample.index.to_string()),
                    ("UUID", l.sample.uuid.clone()),
                    ("device", format!("nvidia{}", l.sample.index)),
                    ("modelName", l.model.clone()),
                    ("Hostname", l.node.clone()),
                ];
                if let Some(h) = holders.get(&(l.node.clone(), l.sample.index)) {
                    set.push(("trainyard_job", h.job_id.to_string()));
                    if let Some(pod) = &h.pod {
                        set.push(("pod", pod.clone()));
                    }
                }
                set
            })
            .collect();
        for (name, help, value) in DCGM_FIELDS {
            let mut family = encoder.encode_descriptor(name, help, None, MetricType::Gauge)?;
            for (l, set) in gpus.iter().zip(&labels) {
                match value(l) {
                    // Whole numbers as the exporter writes them ("97").
                    Some(v) if v.fract() == 0.0 && v.abs() < 9e15 => {
                        ConstGauge::new(v as i64).encode(family.encode_family(set)?)?
                    }
                    Some(v) => ConstGauge::new(v).encode(family.encode_family(set)?)?,
                    None => {}
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;
    use trainyard_domain::telemetry::GpuSample;
    use trainyard_store::Store;

    fn settings() -> TelemetrySettings {
        TelemetrySettings {
            sample_every: Duration::from_secs(10),
            idle_percent: 5.0,
            idle_after: Duration::from_secs(1800),
        }
    }

    fn latest(index: u32, util: u8) -> Latest {
        Latest {
            node: "gpu-1".into(),
            model: "NVIDIA H100 80GB HBM3".into(),
            t_ms: 0,
            sample: GpuSample {
                index,
                uuid: format!("GPU-{index}"),
                gpu_util: util,
                mem_util: 12,
                mem_used_bytes: 3 << 30,
                mem_total_bytes: 80 << 30,
                temperature_c: 61,
                power_mw: 312_500,
                power_limit_mw: 700_000,
                sm_clock_mhz: 1980,
                mem_clock_mhz: 2619,
                ecc_corrected: Some(0),
                ecc_uncorrected: None,
                processes: Vec::new(),
            },
            last_xid: Some(79),
        }
    }

    #[tokio::test]
    async fn metrics_read_as_the_dcgm_exporter_writes_them() {
        let db = trainyard_test_db::TestDb::new().await;
        let store = Store::connect(&db.url, 2).await.unwrap();
        store.migrate().await.unwrap();
        let telemetry = Telemetry::new(store, settings());
        let now = trainyard_store::now_millis();
        for (i, util) in [(0, 97), (1, 3)] {
            let mut x = latest(i, util);
            x.t_ms = now;
            telemetry.set_latest(&x.sample.uuid.clone(), x);
        }
        // A GPU that stopped reporting an hour ago is left out.
        let mut old = latest(2, 50);
        old.t_ms = now - 3_600_000;
        telemetry.set_latest("GPU-2", old);
        telemetry.set_holder(
            ("gpu-1".into(), 0),
            Holder {
                job_id: 42,
                owner_id: None,
                pod: Some("trainyard-42-0-abc".into()),
                started_at: None,
                simulated_util: 90,
            },
        );
        let mut registry = prometheus_client::registry::Registry::default();
        registry.register_collector(Box::new(DcgmMetrics(telemetry)));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(text.contains("# TYPE DCGM_FI_DEV_GPU_UTIL gauge"), "{text}");
        assert!(
            text.contains(
                r#"DCGM_FI_DEV_GPU_UTIL{gpu="0",UUID="GPU-0",device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-1",trainyard_job="42",pod="trainyard-42-0-abc"} 97"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"DCGM_FI_DEV_GPU_UTIL{gpu="1",UUID="GPU-1",device="nvidia1",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-1"} 3"#),
            "{text}"
        );
        assert!(text.contains(r#"DCGM_FI_DEV_FB_USED{gpu="1""#));
        assert!(text.contains("} 3072\n"), "memory in MiB: {text}");
        assert!(text.contains("} 78848\n"), "free memory in MiB: {text}");
        assert!(text.contains("} 312.5\n"), "power in W: {text}");
        assert!(text.contains(r#"DCGM_FI_DEV_XID_ERRORS{gpu="0""#));
        assert!(
            !text.contains("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL{"),
            "unknown: left out"
        );
        assert!(!text.contains("GPU-2"), "stale GPUs are left out: {text}");
    }
}
