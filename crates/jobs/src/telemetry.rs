//! GPU telemetry (docs/gpu-telemetry.md): readings of every GPU go to the
//! store, the latest of each stays in memory for `/metrics` and the admin
//! pages, and which job holds which GPU is read from the jobs. On the local
//! executor the server samples its own GPUs; on a cluster each node's agent
//! sends its readings.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use trainyard_domain::JobState;
use trainyard_domain::job::Job;
use trainyard_domain::telemetry::{
    GpuLatest, GpuNode, GpuNow, GpuOverview, GpuPoint, GpuSample, GpuSeries, GpuUsage, GpuUsageRow,
    GpuWindow, HeldGpu, PodGpus, Reading, UsageBy, XidEvent,
};
use trainyard_nvml::{Inventory, Load, Sampler};
use trainyard_store::{GpuInfo, NodeGpu, Store, StoreError};

/// How GPUs are sampled and when a held GPU counts as idle.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TelemetrySettings {
    pub sample_every: Duration,
    pub idle_percent: f32,
    pub idle_after: Duration,
}

/// The job environment variable that sets how busy a simulated GPU held by
/// the job runs (percent); 90 without it. NVML ignores it.
pub const SIMULATED_UTIL_ENV: &str = "SIMULATED_GPU_UTIL";
const SIMULATED_DEFAULT_UTIL: u8 = 90;

/// How often stored samples are compacted into their tiers, and pruned.
const COMPACT_EVERY: Duration = Duration::from_secs(60);
const PRUNE_EVERY: Duration = Duration::from_secs(3600);
/// Fresh rows one compaction transaction folds.
const COMPACT_ROWS: usize = 100_000;
/// A latest sample older than this is not shown as current.
const STALE_MS: i64 = 5 * 60_000;

/// The latest sample of one GPU.
#[derive(Debug, Clone)]
pub struct Latest {
    pub node: String,
    pub model: String,
    pub t_ms: i64,
    pub sample: GpuSample,
    pub last_xid: Option<u64>,
}

/// A running job's hold on a GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Holder {
    pub job_id: i64,
    pub owner_id: Option<i64>,
    pub pod: Option<String>,
    pub started_at: Option<i64>,
    /// What a simulated GPU of this job runs at.
    pub simulated_util: u8,
}

/// GPUs by node and index.
pub type GpuKey = (String, u32);

#[derive(Clone)]
pub struct Telemetry {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Telemetry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Telemetry").finish_non_exhaustive()
    }
}

struct Inner {
    store: Store,
    settings: TelemetrySettings,
    latest: RwLock<HashMap<String, Latest>>,
    holders: RwLock<HashMap<GpuKey, Holder>>,
    /// Each node's id and its GPUs' ids and models by UUID.
    nodes: tokio::sync::Mutex<HashMap<String, NodeIds>>,
    /// The running jobs that have a pod, by node and pod, whatever GPUs
    /// they hold (two jobs may both claim an index until their nodes say).
    pods: RwLock<HashMap<(String, String), PodJob>>,
    /// Taken by a reread of the holders and by a node's word on its pods,
    /// so that neither undoes the other.
    holders_turn: tokio::sync::Mutex<()>,
}

/// A running job's pod, as [`Telemetry::apply_pods`] matches it.
#[derive(Debug, Clone)]
struct PodJob {
    holder: Holder,
    /// GPUs it asked for.
    gpus: u32,
    /// Those it holds now, sorted.
    held: Vec<u32>,
}

#[derive(Debug, Clone, Default)]
struct NodeIds {
    node_id: i64,
    ids: HashMap<String, i64>,
    models: HashMap<String, String>,
    indices: HashMap<String, u32>,
}

impl Telemetry {
    pub fn new(store: Store, settings: TelemetrySettings) -> Telemetry {
        Telemetry {
            inner: Arc::new(Inner {
                store,
                settings,
                latest: Default::default(),
                holders: Default::default(),
                nodes: Default::default(),
                pods: Default::default(),
                holders_turn: Default::default(),
            }),
        }
    }

    pub fn settings(&self) -> TelemetrySettings {
        self.inner.settings
    }

    /// Records a node and its GPUs (as found now).
    pub async fn register(&self, node: &str, gpus: &[GpuInfo]) -> Result<i64, StoreError> {
        let node_id = self.inner.store.register_node(node, gpus).await?;
        self.inner.nodes.lock().await.remove(node);
        Ok(node_id)
    }

    /// [`Telemetry::register`] for a node's agent: GPUs registered to
    /// another node are refused, not moved over.
    pub async fn register_agent(&self, node: &str, gpus: &[GpuInfo]) -> Result<i64, StoreError> {
        let node_id = self.inner.store.register_agent_node(node, gpus).await?;
        self.inner.nodes.lock().await.remove(node);
        Ok(node_id)
    }

    /// Forgets what is kept in memory of a node that was removed: its
    /// agent's next readings are refused as of a node not registered, so
    /// that it registers again, and its GPUs leave the overview.
    pub async fn forget_node(&self, node: &str) {
        self.inner.nodes.lock().await.remove(node);
        self.inner
            .latest
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|_, l| l.node != node);
    }

    /// The GPUs of a node that jobs hold now, for its agent.
    pub fn held(&self, node: &str) -> Vec<HeldGpu> {
        let mut held: Vec<_> = self
            .inner
            .holders
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|((n, _), _)| n == node)
            .map(|((_, index), h)| HeldGpu {
                index: *index,
                job_id: h.job_id,
                simulated_util: h.simulated_util,
            })
            .collect();
        held.sort_by_key(|h| h.index);
        held
    }

    async fn node_ids(&self, node: &str) -> Result<Option<NodeIds>, StoreError> {
        let mut nodes = self.inner.nodes.lock().await;
        if let Some(ids) = nodes.get(node) {
            return Ok(Some(ids.clone()));
        }
        let gpus: Vec<NodeGpu> = self.inner.store.node_gpus(node).await?;
        let Some(first) = gpus.first() else {
            return Ok(None);
        };
        let ids = NodeIds {
            node_id: first.node_id,
            ids: gpus.iter().map(|g| (g.uuid.clone(), g.id)).collect(),
            models: gpus
                .iter()
                .map(|g| (g.uuid.clone(), g.name.clone()))
                .collect(),
            indices: gpus.iter().map(|g| (g.uuid.clone(), g.index)).collect(),
        };
        nodes.insert(node.to_owned(), ids.clone());
        Ok(Some(ids))
    }

    /// Stores a node's readings and keeps the newest of each GPU. Returns
    /// the samples kept (those of the node's registered GPUs).
    pub async fn ingest(
        &self,
        node: &str,
        readings: &[Reading],
        xids: &[XidEvent],
    ) -> Result<usize, StoreError> {
        let Some(ids) = self.node_ids(node).await? else {
            return Err(StoreError::NotFound(format!(
                "node {node} has no GPUs registered; register it first"
            )));
        };
        let kept = self
            .inner
            .store
            .write_gpu_readings(ids.node_id, &ids.ids, readings, xids)
            .await?;
        let mut latest = self.inner.latest.write().unwrap_or_else(|e| e.into_inner());
        for reading in readings {
            for s in &reading.gpus {
                let Some(model) = ids.models.get(&s.uuid) else {
                    continue;
                };
                let entry = latest.entry(s.uuid.clone()).or_insert_with(|| Latest {
                    node: node.to_owned(),
                    model: model.clone(),
                    t_ms: i64::MIN,
                    sample: s.clone(),
                    last_xid: None,
                });
                if reading.t_ms >= entry.t_ms {
                    entry.t_ms = reading.t_ms;
                    entry.sample = s.clone();
                    entry.node = node.to_owned();
                }
            }
        }
        // Only the node's own GPUs: a node's XID never marks another's.
        for x in xids.iter().filter(|x| ids.models.contains_key(&x.uuid)) {
            if let Some(entry) = latest.get_mut(&x.uuid) {
                entry.last_xid = x.code.or(entry.last_xid);
            }
        }
        Ok(kept)
    }

    /// Takes a node agent's word on which pod holds which of the node's GPUs
    /// (the kubelet's, on Kubernetes, where the device plugin picks them):
    /// a running job whose pod in `namespace` (the executor's) is named
    /// gets the GPUs named, recorded on the job and held from now on.
    /// Pods of other namespaces, GPUs not the node's, more GPUs than the
    /// job asked for, and jobs not running there are passed over. The jobs
    /// whose GPUs changed.
    pub async fn apply_pods(
        &self,
        node: &str,
        namespace: &str,
        pods: &[PodGpus],
    ) -> Result<Vec<i64>, StoreError> {
        let Some(ids) = self.node_ids(node).await? else {
            return Ok(Vec::new());
        };
        let _turn = self.inner.holders_turn.lock().await;
        let mut changed = Vec::new();
        for p in pods.iter().filter(|p| p.namespace == namespace) {
            let key = (node.to_owned(), p.pod.clone());
            let Some(job) = self.pod_jobs().get(&key).cloned() else {
                continue;
            };
            let mut devices: Vec<u32> = p
                .uuids
                .iter()
                .filter_map(|u| ids.indices.get(u).copied())
                .collect();
            devices.sort_unstable();
            devices.dedup();
            if devices.is_empty() || devices == job.held || devices.len() > job.gpus as usize {
                continue;
            }
            let id = job.holder.job_id;
            if !self
                .inner
                .store
                .set_job_gpu_devices(id, node, &p.pod, &devices)
                .await?
            {
                continue; // it ended meanwhile
            }
            tracing::info!(job = id, node, pod = %p.pod, gpus = ?devices, picked = ?job.held, "the node says which GPUs the job's pod got");
            {
                let mut holders = self
                    .inner
                    .holders
                    .write()
                    .unwrap_or_else(|e| e.into_inner());
                holders.retain(|(n, _), h| !(n == node && h.job_id == id));
                for index in &devices {
                    holders.insert((node.to_owned(), *index), job.holder.clone());
                }
            }
            if let Some(entry) = self
                .inner
                .pods
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .get_mut(&key)
            {
                entry.held = devices;
            }
            changed.push(id);
        }
        Ok(changed)
    }

    fn pod_jobs(&self) -> std::sync::RwLockReadGuard<'_, HashMap<(String, String), PodJob>> {
        self.inner.pods.read().unwrap_or_else(|e| e.into_inner())
    }

    /// The newest sample of every GPU that reported lately, by UUID.
    pub fn latest(&self, now_ms: i64) -> HashMap<String, Latest> {
        self.inner
            .latest
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, l)| now_ms - l.t_ms <= STALE_MS)
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    }

    /// Rereads which running job holds which GPU.
    pub async fn refresh_holders(&self) -> Result<(), StoreError> {
        let _turn = self.inner.holders_turn.lock().await;
        let mut jobs = self.inner.store.active_jobs().await?;
        // Where a node said which GPUs a pod got, that wins over a pick
        // of Trainyard's that overlaps it (another job's, not reported yet).
        jobs.sort_by_key(|r| r.job.gpu_devices.is_some());
        let mut holders = HashMap::new();
        let mut pods = HashMap::new();
        for r in jobs {
            if r.job.state != JobState::Running {
                continue;
            }
            let Some(node) = &r.job.node else { continue };
            let simulated_util = r
                .job
                .spec
                .env
                .get(SIMULATED_UTIL_ENV)
                .and_then(|v| v.trim().parse::<u8>().ok())
                .map(|u| u.min(100))
                .unwrap_or(SIMULATED_DEFAULT_UTIL);
            let holder = Holder {
                job_id: r.job.id,
                owner_id: r.owner_id,
                pod: r.job.pod.clone(),
                started_at: r.job.started_at,
                simulated_util,
            };
            for index in r.job.gpus_held() {
                holders.insert((node.clone(), *index), holder.clone());
            }
            if let Some(pod) = &r.job.pod {
                let mut held = r.job.gpus_held().to_vec();
                held.sort_unstable();
                pods.insert(
                    (node.clone(), pod.clone()),
                    PodJob {
                        holder,
                        gpus: r.job.gpus,
                        held,
                    },
                );
            }
        }
        *self
            .inner
            .holders
            .write()
            .unwrap_or_else(|e| e.into_inner()) = holders;
        *self.inner.pods.write().unwrap_or_else(|e| e.into_inner()) = pods;
        Ok(())
    }

    /// Sets what a GPU reported last (tests and tools that feed samples by
    /// hand).
    pub fn set_latest(&self, uuid: &str, latest: Latest) {
        self.inner
            .latest
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uuid.to_owned(), latest);
    }

    /// Sets who holds a GPU until the next refresh from the jobs.
    pub fn set_holder(&self, gpu: GpuKey, holder: Holder) {
        self.inner
            .holders
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(gpu, holder);
    }

    pub fn holders(&self) -> HashMap<GpuKey, Holder> {
        self.inner
            .holders
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// What runs on each GPU of a node, for simulated GPUs to follow.
    pub fn loads(&self, node: &str) -> HashMap<u32, Load> {
        loads_of(&self.held(node))
    }

    /// The held GPUs that stayed below the idle threshold for the idle
    /// time (their jobs ran at least that long, and samples cover at least
    /// half of it).
    pub async fn idle(
        &self,
        inventory: &[NodeGpu],
        now_ms: i64,
    ) -> Result<Vec<GpuKey>, StoreError> {
        let settings = self.inner.settings;
        let window = settings.idle_after.as_millis() as i64;
        let holders = self.holders();
        let candidates: Vec<&NodeGpu> = inventory
            .iter()
            .filter(|g| {
                holders
                    .get(&(g.node.clone(), g.index))
                    .and_then(|h| h.started_at)
                    .is_some_and(|started| started <= now_ms - window)
            })
            .collect();
        if candidates.is_empty() {
            return Ok(Vec::new());
        }
        let ids: Vec<i64> = candidates.iter().map(|g| g.id).collect();
        let series = self
            .inner
            .store
            .gpu_series(&ids, now_ms - window, now_ms, now_ms, 1)
            .await?;
        let expected = (window / settings.sample_every.as_millis().max(1) as i64).max(1);
        Ok(candidates
            .into_iter()
            .filter(|g| {
                let points = series.get(&g.id).map(Vec::as_slice).unwrap_or(&[]);
                let count: i64 = points.iter().map(|p| p.count as i64).sum();
                let busiest = points.iter().map(|p| p.gpu_util_max).fold(0.0, f32::max);
                count * 2 >= expected && busiest < settings.idle_percent
            })
            .map(|g| (g.node.clone(), g.index))
            .collect())
    }

    /// Every GPU now, by node: its latest sample, job and idle flag.
    pub async fn overview(&self, now_ms: i64) -> Result<GpuOverview, StoreError> {
        // Exact at the moment asked, not as of the last sample period.
        self.refresh_holders().await?;
        let inventory = self.inner.store.gpu_inventory().await?;
        let latest = self.latest(now_ms);
        let holders = self.holders();
        let idle = self.idle(&inventory, now_ms).await?;
        let mut nodes: BTreeMap<String, Vec<GpuNow>> = BTreeMap::new();
        for g in inventory {
            let key = (g.node.clone(), g.index);
            nodes.entry(g.node.clone()).or_default().push(GpuNow {
                id: g.id,
                index: g.index,
                latest: latest.get(&g.uuid).map(|l| GpuLatest {
                    t_ms: l.t_ms,
                    gpu_util: l.sample.gpu_util,
                    mem_used_bytes: l.sample.mem_used_bytes,
                    temperature_c: l.sample.temperature_c,
                    power_w: l.sample.power_mw as f32 / 1000.0,
                    power_limit_w: l.sample.power_limit_mw as f32 / 1000.0,
                }),
                job: holders.get(&key).map(|h| h.job_id),
                idle: idle.contains(&key),
                uuid: g.uuid,
                name: g.name,
                memory_total_bytes: g.memory_total_bytes,
            });
        }
        let settings = self.inner.settings;
        Ok(GpuOverview {
            sample_secs: settings.sample_every.as_secs(),
            idle_percent: settings.idle_percent,
            idle_minutes: settings.idle_after.as_secs() / 60,
            nodes: nodes
                .into_iter()
                .map(|(name, gpus)| GpuNode { name, gpus })
                .collect(),
        })
    }

    /// These GPUs of a node over `[from, to]`, at most `points` each.
    async fn window(
        &self,
        node: &str,
        gpus: &[NodeGpu],
        (from_ms, to_ms): (i64, i64),
        points: usize,
    ) -> Result<GpuWindow, StoreError> {
        let now = trainyard_store::now_millis();
        let ids: Vec<i64> = gpus.iter().map(|g| g.id).collect();
        let mut series = self
            .inner
            .store
            .gpu_series(&ids, from_ms, to_ms, now, points)
            .await?;
        Ok(GpuWindow {
            node: node.to_owned(),
            from_ms,
            to_ms,
            gpus: gpus
                .iter()
                .map(|g| GpuSeries {
                    id: g.id,
                    index: g.index,
                    uuid: g.uuid.clone(),
                    points: series.remove(&g.id).unwrap_or_default(),
                })
                .collect(),
            idle: false,
            idle_percent: self.inner.settings.idle_percent,
            idle_minutes: self.inner.settings.idle_after.as_secs() / 60,
        })
    }

    /// A node's GPUs over a window; None for a node without GPUs.
    pub async fn node_window(
        &self,
        node: &str,
        span: (i64, i64),
        points: usize,
    ) -> Result<Option<GpuWindow>, StoreError> {
        let gpus: Vec<NodeGpu> = self.inner.store.node_gpus(node).await?;
        if gpus.is_empty() {
            return Ok(None);
        }
        Ok(Some(self.window(node, &gpus, span, points).await?))
    }

    /// The GPUs a job held over its life (until now while it runs), or
    /// over `span`; with the idle flag while it runs. Empty for a job that
    /// never held any.
    pub async fn job_window(
        &self,
        job: &Job,
        span: Option<(i64, i64)>,
        points: usize,
    ) -> Result<GpuWindow, StoreError> {
        let now = trainyard_store::now_millis();
        let (Some(node), Some(started)) = (job.node.clone(), job.started_at) else {
            return Ok(GpuWindow {
                node: job.node.clone().unwrap_or_default(),
                from_ms: now,
                to_ms: now,
                gpus: Vec::new(),
                idle: false,
                idle_percent: self.inner.settings.idle_percent,
                idle_minutes: self.inner.settings.idle_after.as_secs() / 60,
            });
        };
        let end = job.finished_at.unwrap_or(now).max(started + 1000);
        let gpus: Vec<NodeGpu> = self
            .inner
            .store
            .node_gpus(&node)
            .await?
            .into_iter()
            .filter(|g| job.gpus_held().contains(&g.index))
            .collect();
        // A zoom within its life: before and after it, others held them.
        let span = span
            .map(|(from, to)| (from.max(started), to.min(end)))
            .filter(|(from, to)| from < to)
            .unwrap_or((started, end));
        let mut w = self.window(&node, &gpus, span, points).await?;
        if job.state == JobState::Running {
            w.idle = !self.idle(&gpus, now).await?.is_empty();
        }
        Ok(w)
    }

    /// GPU-hours over `[from, to)`, from the hour `from` falls in, per
    /// person or team: what jobs held (GPUs × hours), the part of it with
    /// samples, and the utilization × hours of that part. What attempts
    /// that ended held is read from the accounting, which keeps it by the
    /// hour (every attempt: one preempted, lost or retried counts too);
    /// a running attempt counts from its start to now. Samples are read
    /// for each job's latest attempt, on the GPUs it holds or held.
    pub async fn usage(
        &self,
        (from_ms, to_ms): (i64, i64),
        by: UsageBy,
        now_ms: i64,
    ) -> Result<GpuUsage, StoreError> {
        const HOUR_MS: f64 = 3_600_000.0;
        // Ended attempts are kept by the whole hour.
        let from_ms = from_ms.div_euclid(HOUR_MS as i64) * HOUR_MS as i64;
        let store = &self.inner.store;
        let jobs = store.jobs_on_gpus_between(from_ms, to_ms).await?;
        let gpu_ids: HashMap<(String, u32), i64> = store
            .gpu_inventory()
            .await?
            .into_iter()
            .map(|g| ((g.node, g.index), g.id))
            .collect();
        let names: HashMap<i64, String> = match by {
            UsageBy::Person => store
                .users()
                .await?
                .into_iter()
                .map(|u| (u.user.id, u.user.username))
                .collect(),
            UsageBy::Team => store
                .teams()
                .await?
                .into_iter()
                .map(|t| (t.id, t.name))
                .collect(),
        };
        // The last minute's samples, not yet in the tiers, read once.
        let fresh = store.gpu_fresh_points(from_ms, to_ms).await?;
        let period_ms = self.inner.settings.sample_every.as_millis().max(1) as f64;
        let nobody = match by {
            UsageBy::Person => "(unknown)",
            UsageBy::Team => "(no team)",
        };
        // The accounting's 0 is nobody, as a job's None is.
        let name_of = |who: Option<i64>| {
            who.filter(|id| *id != 0)
                .map(|id| names.get(&id).cloned().unwrap_or_else(|| format!("#{id}")))
                .unwrap_or_else(|| nobody.to_owned())
        };
        let mut rows: HashMap<String, GpuUsageRow> = HashMap::new();
        for ended in store.gpu_usage_by_day(from_ms, to_ms, None).await? {
            let who = match by {
                UsageBy::Person => ended.user_id,
                UsageBy::Team => ended.team_id,
            };
            let name = name_of(Some(who));
            rows.entry(name.clone())
                .or_insert_with(|| GpuUsageRow::new(name))
                .allocated_hours += ended.gpu_seconds / 3600.0;
        }
        for r in jobs {
            let job = &r.job;
            let Some(started) = job.started_at else {
                continue;
            };
            let running = job.finished_at.is_none()
                && matches!(job.state, JobState::Running | JobState::Starting);
            let ended = match (job.finished_at, running) {
                (Some(finished), _) => finished,
                (None, true) => now_ms,
                (None, false) => job.queued_at.filter(|q| *q > started).unwrap_or(started),
            };
            let (from, to) = (started.max(from_ms), ended.min(to_ms).min(now_ms));
            // A job running now is one of the period's jobs even in the
            // millisecond it started; an ended one must have held some time.
            if to < from || (to == from && !running) {
                continue;
            }
            let hours = (to - from) as f64 / HOUR_MS;
            let name = name_of(match by {
                UsageBy::Person => r.owner_id,
                UsageBy::Team => r.team_id,
            });
            let row = rows
                .entry(name.clone())
                .or_insert_with(|| GpuUsageRow::new(name));
            row.jobs += 1;
            // An ended attempt is in the accounting read above.
            if running {
                let held = job.gpus_held().len().max(job.gpus as usize);
                row.allocated_hours += held as f64 * hours;
            }
            let ids: Vec<i64> = match &job.node {
                Some(node) => job
                    .gpus_held()
                    .iter()
                    .filter_map(|i| gpu_ids.get(&(node.clone(), *i)).copied())
                    .collect(),
                None => Vec::new(),
            };
            if ids.is_empty() {
                continue;
            }
            // Per GPU: the mean over the job's part of the period, from one
            // point folded from the tiers and the samples still waiting.
            let mut series = store
                .gpu_series_compacted(&ids, from, to, now_ms, 1)
                .await?;
            for id in &ids {
                let stored = series.remove(id).unwrap_or_default();
                let points: Vec<&GpuPoint> = stored
                    .iter()
                    .chain(
                        fresh
                            .get(id)
                            .into_iter()
                            .flatten()
                            .filter(|p| p.t_ms >= from && p.t_ms <= to),
                    )
                    .collect();
                let count: f64 = points.iter().map(|p| p.count as f64).sum();
                if count == 0.0 {
                    continue;
                }
                let util = points
                    .iter()
                    .map(|p| p.gpu_util as f64 * p.count as f64)
                    .sum::<f64>()
                    / count;
                // Agents may sample faster than the server's setting: the
                // samples cover at most the time held.
                let sampled = (count * period_ms / HOUR_MS).min(hours);
                row.sampled_hours += sampled;
                row.busy_hours += util / 100.0 * sampled;
            }
        }
        // The accounting's span of an attempt ends when its end was
        // recorded, a moment after the job's own: the samples never count
        // for more than what was held.
        for row in rows.values_mut() {
            row.allocated_hours = row.allocated_hours.max(row.sampled_hours);
        }
        let mut rows: Vec<GpuUsageRow> = rows.into_values().collect();
        rows.sort_by(|a, b| {
            b.allocated_hours
                .total_cmp(&a.allocated_hours)
                .then_with(|| a.name.cmp(&b.name))
        });
        let mut total = GpuUsageRow::new("(total)");
        for r in &rows {
            total.add(r);
        }
        Ok(GpuUsage {
            from_ms,
            to_ms,
            by,
            rows,
            total,
        })
    }

    /// Folds waiting samples into their tiers every minute and drops what
    /// each tier no longer keeps every hour; rereads job holders each
    /// sample period.
    pub async fn maintain_forever(self) {
        let mut tick = tokio::time::interval(self.inner.settings.sample_every.min(COMPACT_EVERY));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last_compaction = tokio::time::Instant::now();
        // The first pruning a minute after the start, not in the same
        // breath as everything else the start writes.
        let mut next_prune = tokio::time::Instant::now() + COMPACT_EVERY;
        loop {
            tick.tick().await;
            if let Err(e) = self.refresh_holders().await {
                tracing::warn!(error = %e, "could not read which jobs hold GPUs");
            }
            if last_compaction.elapsed() >= COMPACT_EVERY {
                last_compaction = tokio::time::Instant::now();
                if let Err(e) = self.compact().await {
                    tracing::warn!(error = %e, "GPU sample compaction failed; it is tried again");
                }
            }
            if tokio::time::Instant::now() >= next_prune {
                next_prune = tokio::time::Instant::now() + PRUNE_EVERY;
                match self
                    .inner
                    .store
                    .prune_gpu_samples(trainyard_store::now_millis())
                    .await
                {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(blocks = n, "old GPU samples pruned"),
                    Err(e) => tracing::warn!(error = %e, "GPU sample pruning failed"),
                }
            }
        }
    }

    /// Folds every waiting sample into the tiers.
    pub async fn compact(&self) -> Result<usize, StoreError> {
        let mut total = 0;
        loop {
            let n = self
                .inner
                .store
                .compact_gpu_samples(trainyard_store::now_millis(), COMPACT_ROWS)
                .await?;
            total += n;
            // A pass may stop at its byte budget before its rows.
            if n == 0 {
                return Ok(total);
            }
        }
    }
}

/// What simulated GPUs follow: the load of each GPU jobs hold.
pub fn loads_of(held: &[HeldGpu]) -> HashMap<u32, Load> {
    held.iter()
        .map(|h| {
            (
                h.index,
                Load::Held {
                    util: h.simulated_util,
                },
            )
        })
        .collect()
}

/// A GPU sampler on a thread of its own, where NVML's handles stay; the
/// server (for its own node) and the agent ask it for each reading.
pub struct SamplerThread {
    tx: std::sync::mpsc::Sender<Tick>,
}

/// One request to the sampling thread.
struct Tick {
    t_ms: i64,
    loads: HashMap<u32, Load>,
    reply: tokio::sync::oneshot::Sender<(Reading, Vec<XidEvent>)>,
}

impl SamplerThread {
    /// Starts the thread; it ends when the `SamplerThread` is dropped.
    pub fn start(inventory: Inventory) -> std::io::Result<SamplerThread> {
        let (tx, rx) = std::sync::mpsc::channel::<Tick>();
        std::thread::Builder::new()
            .name("gpu-sampler".to_owned())
            .spawn(move || {
                let mut sampler = Sampler::new(&inventory);
                if let Some(note) = &sampler.note {
                    tracing::warn!(note = %note, "GPU sampling");
                }
                while let Ok(tick) = rx.recv() {
                    let _ = tick.reply.send(sampler.sample(tick.t_ms, &tick.loads));
                }
            })?;
        Ok(SamplerThread { tx })
    }

    /// One reading of every GPU at `t_ms`; `None` once the thread is gone.
    pub async fn sample(
        &self,
        t_ms: i64,
        loads: HashMap<u32, Load>,
    ) -> Option<(Reading, Vec<XidEvent>)> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.tx.send(Tick { t_ms, loads, reply }).ok()?;
        answer.await.ok()
    }
}

/// Samples this machine's GPUs every period, in the server (the local
/// executor's node).
pub async fn sample_locally_forever(telemetry: Telemetry, inventory: Inventory, node: String) {
    let sampler = match SamplerThread::start(inventory) {
        Ok(sampler) => sampler,
        Err(e) => {
            tracing::error!(error = %e, "cannot start the GPU sampling thread; no GPU telemetry");
            return;
        }
    };
    let mut interval = tokio::time::interval(telemetry.settings().sample_every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        interval.tick().await;
        let Some((reading, xids)) = sampler
            .sample(trainyard_store::now_millis(), telemetry.loads(&node))
            .await
        else {
            return;
        };
        if let Err(e) = telemetry.ingest(&node, &[reading], &xids).await {
            tracing::warn!(error = %e, "could not store this machine's GPU samples");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> TelemetrySettings {
        TelemetrySettings {
            sample_every: Duration::from_secs(10),
            idle_percent: 5.0,
            idle_after: Duration::from_secs(1800),
        }
    }

    /// A node's GPUs `GPU-0`…, as it registers them.
    fn gpus(count: u32) -> Vec<GpuInfo> {
        (0..count)
            .map(|i| GpuInfo {
                index: i,
                uuid: format!("GPU-{i}"),
                name: "Simulated GPU".into(),
                memory_total_bytes: 80 << 30,
            })
            .collect()
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
    async fn a_held_gpu_below_the_threshold_for_the_whole_window_is_idle() {
        let db = trainyard_test_db::TestDb::new().await;
        let store = Store::connect(&db.url, 2).await.unwrap();
        store.migrate().await.unwrap();
        let telemetry = Telemetry::new(store.clone(), settings());
        telemetry.register("gpu-1", &gpus(3)).await.unwrap();
        let now = trainyard_store::now_millis();
        // 40 minutes: GPU 0 busy, GPU 1 at 2 %, GPU 2 at 2 % but free.
        let readings: Vec<Reading> = (0..240)
            .map(|i| Reading {
                t_ms: now - 40 * 60_000 + i * 10_000,
                gpus: [(0, 88), (1, 2), (2, 2)]
                    .into_iter()
                    .map(|(i, u)| latest(i, u).sample)
                    .collect(),
            })
            .collect();
        assert_eq!(
            telemetry.ingest("gpu-1", &readings, &[]).await.unwrap(),
            720
        );
        let hold = |job_id, started_at| Holder {
            job_id,
            owner_id: None,
            pod: None,
            started_at: Some(started_at),
            simulated_util: 90,
        };
        telemetry.set_holder(("gpu-1".into(), 0), hold(1, now - 45 * 60_000));
        telemetry.set_holder(("gpu-1".into(), 1), hold(2, now - 45 * 60_000));
        let inventory = store.gpu_inventory().await.unwrap();
        assert_eq!(
            telemetry.idle(&inventory, now).await.unwrap(),
            vec![("gpu-1".to_owned(), 1)]
        );
        // A job that started ten minutes ago is not judged yet.
        telemetry.set_holder(("gpu-1".into(), 1), hold(2, now - 10 * 60_000));
        assert!(telemetry.idle(&inventory, now).await.unwrap().is_empty());
        // The latest sample of each GPU is kept for the overview.
        let l = telemetry.latest(now);
        assert_eq!(l["GPU-0"].sample.gpu_util, 88);
        assert_eq!(l["GPU-0"].t_ms, now - 40 * 60_000 + 239 * 10_000);
        // A node that never registered is refused.
        assert!(matches!(
            telemetry.ingest("stranger", &readings, &[]).await,
            Err(StoreError::NotFound(_))
        ));
    }

    #[tokio::test]
    async fn the_gpus_a_node_says_a_pod_got_are_the_ones_its_job_holds() {
        use trainyard_store::{JobChange, NewJob, NewRun};
        let db = trainyard_test_db::TestDb::new().await;
        let store = Store::connect(&db.url, 2).await.unwrap();
        store.migrate().await.unwrap();
        let telemetry = Telemetry::new(store.clone(), settings());
        telemetry.register("gpu-1", &gpus(8)).await.unwrap();
        let owner = store.local_admin().await.unwrap();
        let experiment = store
            .create_experiment("pods", owner.as_owner())
            .await
            .unwrap();
        let placed = |pod: &str, gpus: Vec<u32>| JobChange {
            gpu_indices: Some(gpus),
            node: Some(Some("gpu-1".to_owned())),
            pod: Some(Some(pod.to_owned())),
            started_at: Some(Some(trainyard_store::now_millis())),
            ..Default::default()
        };
        // Two jobs of one GPU each, which Trainyard put on GPUs 0 and 1.
        let mut ids = Vec::new();
        for (pod, pick) in [("job-a", 0), ("job-b", 1)] {
            let id = store
                .create_job(NewJob {
                    spec: serde_json::from_str(
                        r#"{"name": "j", "command": "x", "resources": {"gpus": 1}}"#,
                    )
                    .unwrap(),
                    owner_id: Some(owner.id),
                    team_id: None,
                    cpu_millis: 1000,
                    memory_mib: 1024,
                    max_runtime_secs: 60,
                    run: NewRun {
                        experiment_id: experiment,
                        user_id: "t".to_owned(),
                        owner_id: Some(owner.id),
                        team_id: None,
                        run_name: None,
                        start_time: None,
                        tags: Vec::new(),
                    },
                    params: Vec::new(),
                    tags: Vec::new(),
                    submitted: "queued".to_owned(),
                })
                .await
                .unwrap()
                .job
                .id;
            let moved = store
                .move_job(
                    id,
                    &[JobState::Queued],
                    JobState::Running,
                    placed(pod, vec![pick]),
                )
                .await
                .unwrap();
            assert!(moved);
            ids.push(id);
        }
        let (a, b) = (ids[0], ids[1]);
        telemetry.refresh_holders().await.unwrap();
        // Which job holds each held GPU.
        let held = |t: &Telemetry| -> Vec<(u32, i64)> {
            t.held("gpu-1")
                .iter()
                .map(|h| (h.index, h.job_id))
                .collect()
        };
        assert_eq!(held(&telemetry), [(0, a), (1, b)]);
        let pod = |namespace: &str, name: &str, uuids: &[&str]| PodGpus {
            namespace: namespace.to_owned(),
            pod: name.to_owned(),
            uuids: uuids.iter().map(|u| u.to_string()).collect(),
        };
        let devices = |store: Store| async move {
            store
                .active_jobs()
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.job.gpu_devices)
                .collect::<Vec<_>>()
        };

        // Another namespace's pod of that name, a GPU that is not the
        // node's, another node, a pod of no job, and more GPUs than the
        // job asked for change nothing.
        for (node, pods) in [
            ("gpu-1", vec![pod("elsewhere", "job-a", &["GPU-7"])]),
            ("gpu-1", vec![pod("ml", "job-a", &["GPU-x"])]),
            ("gpu-2", vec![pod("ml", "job-a", &["GPU-7"])]),
            ("gpu-1", vec![pod("ml", "someone-else", &["GPU-7"])]),
            ("gpu-1", vec![pod("ml", "job-a", &["GPU-6", "GPU-7"])]),
        ] {
            let changed = telemetry.apply_pods(node, "ml", &pods).await.unwrap();
            assert!(changed.is_empty(), "{pods:?} on {node}");
        }
        assert_eq!(devices(store.clone()).await, [None, None]);

        // The kubelet gave job a GPU 7: it holds 7, not 0, and keeps it
        // through a reread of the jobs; the scheduler's pick stays.
        let said = [pod("ml", "job-a", &["GPU-7"])];
        let changed = telemetry.apply_pods("gpu-1", "ml", &said).await.unwrap();
        assert_eq!(changed, [a]);
        assert_eq!(held(&telemetry), [(1, b), (7, a)]);
        assert_eq!(devices(store.clone()).await, [Some(vec![7]), None]);
        let again = telemetry.apply_pods("gpu-1", "ml", &said).await.unwrap();
        assert!(again.is_empty(), "said twice, written once");
        telemetry.refresh_holders().await.unwrap();
        assert_eq!(held(&telemetry), [(1, b), (7, a)]);
        let record = &store.active_jobs().await.unwrap()[0];
        assert_eq!(record.job.gpu_indices, [0]);
        assert_eq!(record.job.gpus_held(), [7]);

        // Picks that cross: a was put on 0 but got 1, b on 1 but got 0.
        // Until b's word comes, a's report wins GPU 1 and b holds none in
        // the overview, yet b is still found by its pod.
        let said = [pod("ml", "job-a", &["GPU-1"])];
        telemetry.apply_pods("gpu-1", "ml", &said).await.unwrap();
        telemetry.refresh_holders().await.unwrap();
        assert_eq!(held(&telemetry), [(1, a)]);
        let said = [
            pod("ml", "job-a", &["GPU-1"]),
            pod("ml", "job-b", &["GPU-0"]),
        ];
        let changed = telemetry.apply_pods("gpu-1", "ml", &said).await.unwrap();
        assert_eq!(changed, [b]);
        assert_eq!(held(&telemetry), [(0, b), (1, a)]);
        telemetry.refresh_holders().await.unwrap();
        assert_eq!(held(&telemetry), [(0, b), (1, a)]);

        // A new attempt placed anew forgets what the node said of the last.
        let requeued = store
            .move_job(
                a,
                &[JobState::Running],
                JobState::Queued,
                JobChange {
                    gpu_indices: Some(Vec::new()),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        assert!(requeued);
        let moved = store
            .move_job(
                a,
                &[JobState::Queued],
                JobState::Running,
                placed("job-a-2", vec![2]),
            )
            .await
            .unwrap();
        assert!(moved);
        assert_eq!(devices(store.clone()).await, [None, Some(vec![0])]);
        telemetry.refresh_holders().await.unwrap();
        assert_eq!(held(&telemetry), [(0, b), (2, a)]);
    }
}
