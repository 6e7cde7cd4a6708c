//! Reading every GPU of the machine on a period: NVML's counters where a
//! driver is present, or simulated readings driven by what runs on each GPU
//! (a held GPU works, an idle one rests), so that charts, idle flags and
//! the ingest path run on any machine.
//!
//! A [`Sampler`] is not `Send` (NVML's event set is a raw handle): make it
//! on the thread that samples.

use std::collections::HashMap;
use std::sync::OnceLock;

use nvml_wrapper::Nvml;
use nvml_wrapper::bitmasks::event::EventTypes;
use nvml_wrapper::enum_wrappers::device::{Clock, EccCounter, MemoryError, TemperatureSensor};
use nvml_wrapper::enums::device::UsedGpuMemory;
use nvml_wrapper::enums::event::XidError;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::event::EventSet;
use trainyard_domain::telemetry::{GpuProcess, GpuSample, Reading, XidEvent};

use crate::{Gpu, Inventory, Source};

/// What runs on a GPU. NVML reads the hardware and ignores it; the
/// simulated GPUs follow it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Load {
    /// Held by no job.
    #[default]
    Free,
    /// Held by a job that keeps it about this busy (percent).
    Held { util: u8 },
}

/// The power limit a simulated GPU claims (mW).
const SIMULATED_POWER_LIMIT_MW: u32 = 400_000;

/// Reads the GPUs of an inventory.
pub struct Sampler {
    inner: Inner,
    /// Why NVML is not read where the inventory came from it.
    pub note: Option<String>,
}

enum Inner {
    Nvml(NvmlGpus),
    Simulated(Simulated),
}

impl Sampler {
    /// NVML for an inventory read through it (simulated if NVML fails
    /// now, with the reason in `note`), simulated GPUs otherwise.
    pub fn new(inventory: &Inventory) -> Sampler {
        if inventory.source == Source::Nvml {
            match NvmlGpus::open(&inventory.gpus) {
                Ok(gpus) => {
                    return Sampler {
                        note: gpus.events_note.clone(),
                        inner: Inner::Nvml(gpus),
                    };
                }
                Err(e) => {
                    return Sampler {
                        inner: Inner::Simulated(Simulated::new(&inventory.gpus)),
                        note: Some(format!("NVML failed on sampling ({e}); simulated readings")),
                    };
                }
            }
        }
        Sampler {
            inner: Inner::Simulated(Simulated::new(&inventory.gpus)),
            note: None,
        }
    }

    pub fn source(&self) -> Source {
        match self.inner {
            Inner::Nvml(_) => Source::Nvml,
            Inner::Simulated(_) => Source::Simulated,
        }
    }

    /// Every GPU now (a GPU that fails to answer is left out of the
    /// reading), and the XID errors raised since the last call. `loads`:
    /// what runs on each GPU, by index.
    pub fn sample(&mut self, t_ms: i64, loads: &HashMap<u32, Load>) -> (Reading, Vec<XidEvent>) {
        match &mut self.inner {
            Inner::Nvml(n) => (
                Reading {
                    t_ms,
                    gpus: n.read(),
                },
                n.xids(t_ms),
            ),
            Inner::Simulated(s) => (
                Reading {
                    t_ms,
                    gpus: s.read(t_ms, loads),
                },
                Vec::new(),
            ),
        }
    }
}

/// NVML, initialised once for the process (its event sets borrow it).
fn nvml() -> Result<&'static Nvml, NvmlError> {
    static NVML: OnceLock<Nvml> = OnceLock::new();
    if let Some(n) = NVML.get() {
        return Ok(n);
    }
    let n = Nvml::init()?;
    Ok(NVML.get_or_init(|| n))
}

struct NvmlGpus {
    nvml: &'static Nvml,
    gpus: Vec<Gpu>,
    events: Option<EventSet<'static>>,
    events_note: Option<String>,
}

impl NvmlGpus {
    fn open(gpus: &[Gpu]) -> Result<NvmlGpus, NvmlError> {
        let nvml = nvml()?;
        let (events, events_note) = match xid_events(nvml, gpus) {
            Ok(set) => (Some(set), None),
            Err(e) => (None, Some(format!("XID errors are not watched: {e}"))),
        };
        Ok(NvmlGpus {
            nvml,
            gpus: gpus.to_vec(),
            events,
            events_note,
        })
    }

    fn read(&self) -> Vec<GpuSample> {
        self.gpus
            .iter()
            .filter_map(|g| read_device(self.nvml, g).ok())
            .collect()
    }

    /// The XID events waiting, without blocking (at most 64 a call).
    fn xids(&mut self, t_ms: i64) -> Vec<XidEvent> {
        let Some(set) = &self.events else {
            return Vec::new();
        };
        let mut out = Vec::new();
        while out.len() < 64 {
            match set.wait(0) {
                Ok(event) => {
                    let Ok(uuid) = event.device.uuid() else {
                        continue;
                    };
                    out.push(XidEvent {
                        t_ms,
                        uuid,
                        code: match event.event_data {
                            Some(XidError::Value(code)) => Some(code),
                            _ => None,
                        },
                    });
                }
                Err(_) => break,
            }
        }
        out
    }
}

fn xid_events(nvml: &'static Nvml, gpus: &[Gpu]) -> Result<EventSet<'static>, NvmlError> {
    let mut set = nvml.create_event_set()?;
    for g in gpus {
        let device = nvml.device_by_index(g.index)?;
        set = device
            .register_events(EventTypes::CRITICAL_XID_ERROR, set)
            .map_err(|e| e.error)?;
    }
    Ok(set)
}

fn read_device(nvml: &Nvml, gpu: &Gpu) -> Result<GpuSample, NvmlError> {
    let d = nvml.device_by_index(gpu.index)?;
    let util = d.utilization_rates()?;
    let memory = d.memory_info()?;
    let optional = |r: Result<u64, NvmlError>| r.ok();
    Ok(GpuSample {
        index: gpu.index,
        uuid: gpu.uuid.clone(),
        gpu_util: util.gpu.min(100) as u8,
        mem_util: util.memory.min(100) as u8,
        mem_used_bytes: memory.used,
        mem_total_bytes: memory.total,
        temperature_c: d.temperature(TemperatureSensor::Gpu).unwrap_or(0),
        power_mw: d.power_usage().unwrap_or(0),
        power_limit_mw: d.enforced_power_limit().unwrap_or(0),
        sm_clock_mhz: d.clock_info(Clock::SM).unwrap_or(0),
        mem_clock_mhz: d.clock_info(Clock::Memory).unwrap_or(0),
        ecc_corrected: optional(d.total_ecc_errors(MemoryError::Corrected, EccCounter::Volatile)),
        ecc_uncorrected: optional(
            d.total_ecc_errors(MemoryError::Uncorrected, EccCounter::Volatile),
        ),
        processes: d
            .running_compute_processes()
            .unwrap_or_default()
            .into_iter()
            .map(|p| GpuProcess {
                pid: p.pid,
                used_bytes: match p.used_gpu_memory {
                    UsedGpuMemory::Used(b) => Some(b),
                    UsedGpuMemory::Unavailable => None,
                },
            })
            .collect(),
    })
}

/// GPUs that behave like a data-centre card: a held GPU runs near its
/// job's utilization with noise, warms up and draws power over a few
/// samples; a free one cools down to rest.
struct Simulated {
    gpus: Vec<Gpu>,
    /// Temperature (°C) and power (W) by index: they follow the load with
    /// inertia.
    thermal: HashMap<u32, (f64, f64)>,
}

const REST_TEMPERATURE_C: f64 = 32.0;
const REST_POWER_W: f64 = 62.0;

impl Simulated {
    fn new(gpus: &[Gpu]) -> Simulated {
        Simulated {
            gpus: gpus.to_vec(),
            thermal: gpus
                .iter()
                .map(|g| (g.index, (REST_TEMPERATURE_C, REST_POWER_W)))
                .collect(),
        }
    }

    fn read(&mut self, t_ms: i64, loads: &HashMap<u32, Load>) -> Vec<GpuSample> {
        self.gpus
            .iter()
            .map(|g| {
                let load = loads.get(&g.index).copied().unwrap_or_default();
                // Noise in [-1, 1), the same for the same GPU and moment.
                let noise = |salt: u64| unit_noise(&g.uuid, t_ms, salt);
                let (util, held) = match load {
                    Load::Free => (0.0, false),
                    Load::Held { util } => {
                        let u = util.min(100) as f64;
                        // Busy GPUs wander a few points; an idling job's
                        // GPU shows a blip now and then, as real ones do.
                        let spread = if u >= 10.0 { 6.0 } else { 1.5 };
                        ((u + spread * noise(1)).clamp(0.0, 100.0), true)
                    }
                };
                let (temp, power) = self
                    .thermal
                    .entry(g.index)
                    .or_insert((REST_TEMPERATURE_C, REST_POWER_W));
                let target_temp = REST_TEMPERATURE_C + 0.48 * util + if held { 4.0 } else { 0.0 };
                let target_power = REST_POWER_W + 3.2 * util + if held { 25.0 } else { 0.0 };
                *temp += (target_temp - *temp) * 0.5;
                *power += (target_power - *power) * 0.6;
                let memory = g.memory_total_bytes as f64;
                // A job's memory is steady once allocated, as real ones are.
                let mem_used = if held {
                    memory * (0.62 + 0.02 * unit_noise(&g.uuid, 0, 2))
                } else {
                    0.0
                };
                GpuSample {
                    index: g.index,
                    uuid: g.uuid.clone(),
                    gpu_util: util.round() as u8,
                    mem_util: (util * 0.42).round() as u8,
                    mem_used_bytes: mem_used as u64,
                    mem_total_bytes: g.memory_total_bytes,
                    temperature_c: (*temp + 0.6 * noise(3)).round() as u32,
                    power_mw: ((*power + 4.0 * noise(4)) * 1000.0) as u32,
                    power_limit_mw: SIMULATED_POWER_LIMIT_MW,
                    sm_clock_mhz: if util >= 1.0 { 1980 } else { 345 },
                    mem_clock_mhz: if held { 2619 } else { 405 },
                    ecc_corrected: Some(0),
                    ecc_uncorrected: Some(0),
                    processes: Vec::new(),
                }
            })
            .collect()
    }
}

/// A number in [-1, 1) from the GPU, the moment and a salt (splitmix64).
fn unit_noise(uuid: &str, t_ms: i64, salt: u64) -> f64 {
    let mut x = (t_ms as u64) ^ salt.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    for b in uuid.bytes() {
        x = (x ^ b as u64).wrapping_mul(0x0100_0000_01B3);
    }
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^= x >> 31;
    (x >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::simulated_gpus;

    fn simulated(n: u32) -> Sampler {
        Sampler::new(&Inventory {
            source: Source::Simulated,
            gpus: simulated_gpus(n, "box"),
            note: None,
        })
    }

    /// Samples every 10 s for `n` readings; returns the last.
    fn run(s: &mut Sampler, loads: &HashMap<u32, Load>, n: usize) -> Reading {
        let mut last = None;
        for i in 0..n {
            last = Some(s.sample(1_700_000_000_000 + 10_000 * i as i64, loads).0);
        }
        last.unwrap()
    }

    #[test]
    fn a_held_gpu_works_and_a_free_one_rests() {
        let mut s = simulated(3);
        assert_eq!(s.source(), Source::Simulated);
        let loads = HashMap::from([(0, Load::Held { util: 90 }), (1, Load::Held { util: 0 })]);
        let mut busy = Vec::new();
        for i in 0..30 {
            let (reading, xids) = s.sample(1_700_000_000_000 + 10_000 * i, &loads);
            assert!(xids.is_empty());
            assert_eq!(reading.gpus.len(), 3);
            busy.push(reading.gpus[0].gpu_util);
            let idle = &reading.gpus[1];
            let free = &reading.gpus[2];
            assert!(idle.gpu_util <= 2, "an idling job's GPU: {}", idle.gpu_util);
            assert!(idle.mem_used_bytes > 40 << 30, "its job still holds memory");
            assert_eq!(free.gpu_util, 0);
            assert_eq!(free.mem_used_bytes, 0);
            assert!(reading.gpus[0].power_mw <= reading.gpus[0].power_limit_mw);
        }
        assert!(busy.iter().all(|u| (80..=100).contains(u)), "{busy:?}");
        // Noise, not a constant.
        assert!(busy.iter().any(|u| *u != busy[0]), "{busy:?}");
        let last = run(&mut s, &loads, 1);
        let [hot, idle, free] = &last.gpus[..] else {
            unreachable!()
        };
        assert!(
            hot.temperature_c > idle.temperature_c + 20,
            "{hot:?} {idle:?}"
        );
        assert!(
            hot.power_mw > 250_000 && free.power_mw < 80_000,
            "{hot:?} {free:?}"
        );
        assert!(hot.sm_clock_mhz > free.sm_clock_mhz);
    }

    #[test]
    fn a_gpu_warms_up_and_cools_down_over_samples() {
        let mut s = simulated(1);
        let hot = HashMap::from([(0, Load::Held { util: 100 })]);
        let first = run(&mut s, &hot, 1).gpus[0].temperature_c;
        let warm = run(&mut s, &hot, 10).gpus[0].temperature_c;
        assert!(first < warm, "{first} then {warm}");
        let cooled = run(&mut s, &HashMap::new(), 1).gpus[0].temperature_c;
        let cold = run(&mut s, &HashMap::new(), 10).gpus[0].temperature_c;
        assert!(cooled < warm && cold < cooled, "{warm} {cooled} {cold}");
    }

    #[test]
    fn the_same_moment_reads_the_same() {
        let loads = HashMap::from([(0, Load::Held { util: 70 })]);
        let a = run(&mut simulated(1), &loads, 5);
        let b = run(&mut simulated(1), &loads, 5);
        assert_eq!(a, b);
    }

    #[test]
    fn noise_is_spread_over_its_range() {
        let values: Vec<f64> = (0..1000).map(|t| unit_noise("GPU-x", t, 1)).collect();
        assert!(values.iter().all(|v| (-1.0..1.0).contains(v)));
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        assert!(mean.abs() < 0.1, "{mean}");
        assert!(values.iter().any(|v| *v < -0.8) && values.iter().any(|v| *v > 0.8));
    }
}
