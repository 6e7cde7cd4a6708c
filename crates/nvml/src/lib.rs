//! The GPUs of this machine: read through NVML (nvml-wrapper, which loads the
//! driver's libnvidia-ml at run time) where an NVIDIA driver is present, or
//! else a configured number of simulated GPUs, so that the whole flow runs on
//! a machine without one.
//!
//! [`Sampler`] reads every GPU on a period: NVML's counters where a driver
//! is present, or simulated readings that follow what runs on each GPU.

mod sample;

pub use sample::{Load, Sampler};

/// One GPU as the scheduler and the admin pages know it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gpu {
    /// Its index, as `CUDA_VISIBLE_DEVICES` names it.
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: u64,
}

/// Where the inventory came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    Nvml,
    Simulated,
}

/// The GPUs found, and how.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inventory {
    pub source: Source,
    pub gpus: Vec<Gpu>,
    /// Why NVML was not used, when it was not.
    pub note: Option<String>,
}

/// The memory a simulated GPU claims (an 80 GB card).
pub const SIMULATED_MEMORY_BYTES: u64 = 80 * 1024 * 1024 * 1024;

/// Reads the GPUs through NVML; falls back to `simulated` GPUs (named after
/// `node`) when there is no driver, NVML cannot be loaded, or it finds none.
pub fn discover(simulated: u32, node: &str) -> Inventory {
    match nvml_gpus() {
        Ok(gpus) if !gpus.is_empty() => Inventory {
            source: Source::Nvml,
            gpus,
            note: None,
        },
        Ok(_) => simulated_inventory(simulated, node, "NVML found no GPUs".to_owned()),
        Err(e) => simulated_inventory(simulated, node, format!("NVML is not available ({e})")),
    }
}

fn simulated_inventory(n: u32, node: &str, note: String) -> Inventory {
    Inventory {
        source: Source::Simulated,
        gpus: simulated_gpus(n, node),
        note: Some(note),
    }
}

/// `n` simulated GPUs with UUIDs stable for the node.
pub fn simulated_gpus(n: u32, node: &str) -> Vec<Gpu> {
    (0..n)
        .map(|index| Gpu {
            index,
            uuid: format!("GPU-simulated-{node}-{index}"),
            name: "Simulated GPU".to_owned(),
            memory_total_bytes: SIMULATED_MEMORY_BYTES,
        })
        .collect()
}

fn nvml_gpus() -> Result<Vec<Gpu>, nvml_wrapper::error::NvmlError> {
    let nvml = nvml_wrapper::Nvml::init()?;
    let count = nvml.device_count()?;
    (0..count)
        .map(|index| {
            let device = nvml.device_by_index(index)?;
            Ok(Gpu {
                index,
                uuid: device.uuid()?,
                name: device.name()?,
                memory_total_bytes: device.memory_info()?.total,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_a_driver_the_simulated_gpus_are_offered() {
        let inventory = discover(3, "box");
        match inventory.source {
            // A machine with a driver: every GPU has a name and memory.
            Source::Nvml => {
                assert!(!inventory.gpus.is_empty());
                for (i, gpu) in inventory.gpus.iter().enumerate() {
                    assert_eq!(gpu.index, i as u32);
                    assert!(gpu.uuid.starts_with("GPU-") || gpu.uuid.starts_with("MIG-"));
                    assert!(gpu.memory_total_bytes > 0);
                }
            }
            Source::Simulated => {
                assert_eq!(inventory.gpus, simulated_gpus(3, "box"));
                assert!(inventory.note.unwrap().contains("NVML"));
            }
        }
    }

    #[test]
    fn simulated_gpus_are_numbered_from_zero() {
        let gpus = simulated_gpus(2, "box");
        assert_eq!(gpus[1].index, 1);
        assert_eq!(gpus[1].uuid, "GPU-simulated-box-1");
        assert!(simulated_gpus(0, "box").is_empty());
    }
}
