//! The Kubernetes executor: each attempt of a job becomes a `batch/v1` Job
//! of one pod, pinned (required node affinity) to the node that Trainyard's
//! scheduler chose, with its token in a Secret the Job owns. What becomes
//! of it is read from watches (kube::runtime reflectors of nodes, pods and
//! Jobs), never by polling; its pod's log is followed into the attempt's
//! log file.
//!
//! The handle of an attempt is its Job's name, `trainyard-<job>-<attempt>`:
//! the same attempt always has the same name, so a server that stopped
//! while starting one finds it (by name and labels) rather than making a
//! second.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Secret, Toleration};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::{Notify, watch};
use trainyard_jobs::executor::{
    Attempt, Capacity, EndReason, Ending, Executor, Observation, StartError, Started,
};
use trainyard_scheduler as sched;
use trainyard_store::JobRecord;

pub use k8s_openapi::api::core::v1::Toleration as KubeToleration;

pub mod agents;
pub mod lean;
pub mod logs;
pub mod pod_resources;
pub mod quantity;
pub mod shape;
pub mod status;

use lean::Lean;
use status::PodSeen;

/// How the executor reaches the cluster and what it gives each pod.
#[derive(Debug, Clone)]
pub struct KubeSettings {
    /// A kubeconfig file; None: `$KUBECONFIG` or `~/.kube/config`, else the
    /// pod's own service account (in the cluster).
    pub kubeconfig: Option<PathBuf>,
    /// A context of the kubeconfig other than its current one.
    pub context: Option<String>,
    /// Where Jobs are made; None: the kubeconfig context's, or the service
    /// account's namespace.
    pub namespace: Option<String>,
    /// Only nodes with these labels run jobs (and count as capacity).
    pub node_selector: BTreeMap<String, String>,
    /// What job pods tolerate (GPU nodes are often tainted).
    pub tolerations: Vec<Toleration>,
    /// The image of jobs that name none.
    pub image: String,
    /// Trainyard's own image, which fetches a job's files before it starts.
    pub trainyard_image: String,
    pub image_pull_secrets: Vec<String>,
    /// Where pods reach Trainyard (`MLFLOW_TRACKING_URI` and the files).
    pub tracking_url: String,
    /// The extended resource that counts GPUs.
    pub gpu_resource: String,
    /// Seconds between SIGTERM and SIGKILL when a job is stopped.
    pub stop_grace_secs: u64,
    /// How long a pod's image may fail to pull before its attempt fails.
    pub image_pull_timeout: Duration,
    /// `<data_dir>/jobs`: the attempt's log is `<id>/<attempt>/output.log`.
    pub root: PathBuf,
    /// Each job's checkpoint volume, kept across its attempts: the
    /// StorageClass of its claim and its size in GiB. None: an emptyDir,
    /// which goes with the attempt.
    pub checkpoints: Option<(String, u64)>,
    /// Most bytes an attempt may write to its pod's own disk (its
    /// workspace, home and container layer: `ephemeral-storage`); None: no
    /// limit.
    pub disk_quota_bytes: Option<u64>,
}

/// `key=value,key2=value2` as a node selector.
pub fn parse_node_selector(text: &str) -> Result<BTreeMap<String, String>, String> {
    let mut selector = BTreeMap::new();
    for pair in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (key, value) = pair
            .split_once('=')
            .ok_or_else(|| format!("`{pair}` is not key=value"))?;
        if key.trim().is_empty() {
            return Err(format!("`{pair}` has no key"));
        }
        selector.insert(key.trim().to_owned(), value.trim().to_owned());
    }
    Ok(selector)
}

/// `key[=value][:Effect]`, comma-separated, as tolerations: without a
/// value it tolerates the key whatever its value (`Exists`); without an
/// effect, every effect.
pub fn parse_tolerations(text: &str) -> Result<Vec<Toleration>, String> {
    let mut tolerations = Vec::new();
    for item in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (rest, effect) = match item.rsplit_once(':') {
            Some((rest, effect)) => {
                if !matches!(effect, "NoSchedule" | "PreferNoSchedule" | "NoExecute") {
                    return Err(format!(
                        "`{item}`: the effect must be NoSchedule, PreferNoSchedule or NoExecute, not `{effect}`"
                    ));
                }
                (rest, Some(effect.to_owned()))
            }
            None => (item, None),
        };
        let (key, value) = match rest.split_once('=') {
            Some((k, v)) => (k, Some(v.to_owned())),
            None => (rest, None),
        };
        if key.is_empty() {
            return Err(format!("`{item}` has no key"));
        }
        tolerations.push(Toleration {
            key: Some(key.to_owned()),
            operator: Some(if value.is_some() { "Equal" } else { "Exists" }.to_owned()),
            value,
            effect,
            toleration_seconds: None,
        });
    }
    Ok(tolerations)
}

/// The watches, by index into [`Watches::state`].
const NODES: usize = 0;
const PODS: usize = 1;
const JOBS: usize = 2;
const WATCH_NAMES: [&str; 3] = ["nodes", "pods of all namespaces", "Jobs"];

/// Whether each watch has listed everything once, and whether it fails now.
#[derive(Default)]
struct Watches {
    synced: [AtomicBool; 3],
    failing: Mutex<[Option<String>; 3]>,
    /// Counts each watch's events, once its store holds what they said.
    events: [AtomicU64; 3],
}

impl Watches {
    fn ok(&self, which: usize, init_done: bool) {
        if init_done {
            self.synced[which].store(true, Ordering::Release);
        }
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        failing[which] = None;
    }

    fn failed(&self, which: usize, error: String) {
        let mut failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if failing[which].is_none() {
            tracing::warn!(watch = WATCH_NAMES[which], %error, "watching the cluster failed; retrying with backoff");
        }
        failing[which] = Some(error);
    }

    fn synced(&self) -> bool {
        self.synced.iter().all(|s| s.load(Ordering::Acquire))
    }

    /// Why what the watches hold cannot be trusted now, if so.
    fn trouble(&self) -> Option<String> {
        let failing = self.failing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((which, error)) = failing
            .iter()
            .enumerate()
            .find_map(|(i, e)| e.as_ref().map(|e| (i, e)))
        {
            return Some(format!(
                "the Kubernetes API cannot be watched ({}): {error}",
                WATCH_NAMES[which]
            ));
        }
        drop(failing);
        if let Some(which) =
            (0..WATCH_NAMES.len()).find(|i| !self.synced[*i].load(Ordering::Acquire))
        {
            return Some(format!(
                "the first list of the cluster's {} has not arrived yet",
                WATCH_NAMES[which]
            ));
        }
        None
    }
}

/// What the pod watch keeps for each attempt (by Job name).
#[derive(Default)]
struct Attempts {
    pods: HashMap<String, PodSeen>,
    /// Log followers, told when their container ended.
    followers: HashMap<String, (watch::Sender<bool>, tokio::task::AbortHandle)>,
    /// The job and attempt of each Job, from its pod's labels.
    ids: HashMap<String, (i64, u32)>,
    /// The Jobs of this server's records (made by it, or observed for one):
    /// only their logs are followed. Another Trainyard's pods in the same
    /// namespace (an install before this one) may carry the same job ids.
    ours: HashSet<String>,
}

struct Shared {
    watches: Watches,
    attempts: Mutex<Attempts>,
    changed: Notify,
    /// Told of every event of the Jobs watch (see [`KubeExecutor::seen_by_watch`]).
    jobs_seen: Notify,
    root: PathBuf,
    /// Trainyard's namespace, and its pods there.
    namespace: String,
    pods: Api<Pod>,
    /// The watches' tasks, stopped with the executor.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
}

impl Shared {
    /// A pod of the pods watch changed: one of Trainyard's (in its
    /// namespace, with its label) is looked at; others only count for
    /// capacity, which reads the watch's store.
    fn any_pod_changed(self: &Arc<Self>, pod: &Pod, deleted: bool) {
        if pod.namespace().as_deref() == Some(self.namespace.as_str()) && shape::is_managed(pod) {
            self.pod_changed(pod, deleted);
        }
    }

    fn attempts(&self) -> std::sync::MutexGuard<'_, Attempts> {
        self.attempts.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn log_path(&self, job: i64, attempt: u32) -> PathBuf {
        self.root
            .join(job.to_string())
            .join(attempt.to_string())
            .join(trainyard_jobs::shim::LOG_FILE)
    }

    /// One of Trainyard's pods changed: remember how it stands, start
    /// following its log once it runs, tell the follower when it ended.
    fn pod_changed(self: &Arc<Self>, pod: &Pod, deleted: bool) {
        let labels = pod.labels();
        let (Some(job), Some(attempt), Some(name)) = (
            labels
                .get(shape::JOB_LABEL)
                .and_then(|v| v.parse::<i64>().ok()),
            labels
                .get(shape::ATTEMPT_LABEL)
                .and_then(|v| v.parse::<u32>().ok()),
            // The Job it belongs to.
            pod.owner_references()
                .iter()
                .find(|o| o.kind == "Job")
                .map(|o| o.name.clone()),
        ) else {
            return;
        };
        let mut seen = status::seen(pod);
        seen.going |= deleted;
        let mut attempts = self.attempts();
        if seen.pull_failed.is_some() {
            // The kubelet retries a pull with back-off: how long it has
            // failed is counted from the first time it was seen failing.
            seen.pull_failing_since = Some(
                attempts
                    .pods
                    .get(&name)
                    .and_then(|before| before.pull_failing_since)
                    .unwrap_or_else(Instant::now),
            );
        }
        if deleted && !attempts.ours.contains(&name) {
            // Gone, and nothing of ours waits for word of it.
            attempts.pods.remove(&name);
            attempts.ids.remove(&name);
            return;
        }
        attempts.ids.insert(name.clone(), (job, attempt));
        attempts.pods.insert(name.clone(), seen);
        self.follow_if_ours(&mut attempts, &name);
        drop(attempts);
        self.changed.notify_one();
    }

    /// Marks a Job as one of this server's, and follows its log if its pod
    /// runs.
    fn claim(&self, name: &str) {
        let mut attempts = self.attempts();
        if attempts.ours.insert(name.to_owned()) {
            self.follow_if_ours(&mut attempts, name);
        }
    }

    /// Starts following the log of a Job of ours whose main container
    /// started, or tells its follower that the container ended.
    fn follow_if_ours(&self, attempts: &mut Attempts, name: &str) {
        let (Some(seen), Some(&(job, attempt))) = (attempts.pods.get(name), attempts.ids.get(name))
        else {
            return;
        };
        let finished = seen.finished();
        if let Some((follower, _)) = attempts.followers.get(name) {
            if finished {
                let _ = follower.send(true);
            }
            return;
        }
        if !attempts.ours.contains(name) || !seen.started || seen.going {
            return;
        }
        let log = self.log_path(job, attempt);
        if logs::done_path(&log).exists() {
            return;
        }
        let (tell, told) = watch::channel(finished);
        let task = tokio::spawn(logs::follow(self.pods.clone(), seen.pod.clone(), log, told));
        attempts
            .followers
            .insert(name.to_owned(), (tell, task.abort_handle()));
    }
}

pub struct KubeExecutor {
    settings: KubeSettings,
    namespace: String,
    jobs: Api<Job>,
    secrets: Api<Secret>,
    claims: Api<PersistentVolumeClaim>,
    /// For the checks of what the account may read.
    client_nodes: Api<Node>,
    client_pods: Api<Pod>,
    nodes: Store<Lean<Node>>,
    all_pods: Store<Lean<Pod>>,
    job_store: Store<Lean<Job>>,
    shared: Arc<Shared>,
    /// Jobs made by this server lately, which the watch may not show yet.
    created: Mutex<HashMap<String, Instant>>,
    /// Jobs asked to stop.
    stopping: Mutex<HashSet<String>>,
    /// After a start the API did not take: until when nothing else starts,
    /// and why (so that a namespace or a right that is missing is not
    /// tried again every half second).
    paused: Mutex<Option<(Instant, String)>>,
    /// [`KubeExecutor::whole_nodes`] as last made, and the count of node
    /// watch events it was made at.
    whole_nodes: Mutex<Option<(u64, Arc<Vec<sched::Node>>)>>,
    /// Nodes that the watch of selected nodes lacks, as the API last said:
    /// when it was asked, and whether the node is gone.
    node_checks: Mutex<HashMap<String, (Instant, bool)>>,
}

/// How often the API is asked again whether a node missing from the watch
/// is gone.
const NODE_CHECK_EVERY: Duration = Duration::from_secs(5);

/// At most how long a start waits for the watch to show its Job before
/// making its Secret.
const JOB_SEEN_WAIT: Duration = Duration::from_secs(1);

/// How long starts wait after the API did not take one.
const START_PAUSE: Duration = Duration::from_secs(5);

/// How long a Job this server made may be missing from the watch before
/// the API is asked whether it is there.
const CREATED_GRACE: Duration = Duration::from_secs(30);

fn describe(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => format!("{} ({})", status.message, status.code),
        other => other.to_string(),
    }
}

/// Errors that another try may not meet: the API away, overloaded, or not
/// letting Trainyard in (fixed by an admin, not by the job).
fn transient(error: &kube::Error) -> bool {
    match error {
        // 413: the object is larger than the API server takes; it will be
        // next time too.
        kube::Error::Api(status) => !matches!(status.code, 400 | 413 | 422),
        _ => true,
    }
}

impl KubeExecutor {
    /// The checkpoint claim `job` holds now: the one made for it (by its
    /// name, whose labels still say it is the job's: a job that resumed
    /// from it relabelled it as its own), or, for a job that resumes, the
    /// one it took (by its labels).
    async fn claim_of(
        &self,
        job: &trainyard_domain::job::Job,
    ) -> Result<Option<PersistentVolumeClaim>, kube::Error> {
        let held = |claim: &PersistentVolumeClaim| {
            shape::is_managed(claim)
                && claim.labels().get(shape::JOB_LABEL) == Some(&job.id.to_string())
        };
        if let Some(claim) = self
            .claims
            .get_opt(&shape::claim_name(job))
            .await?
            .filter(held)
        {
            return Ok(Some(claim));
        }
        if job.spec.resume_from.is_none() {
            return Ok(None);
        }
        let mine = ListParams::default().labels(&shape::claim_selector(job));
        Ok(self.claims.list(&mine).await?.items.into_iter().next())
    }

    /// The name of the checkpoint claim an attempt of `job`, which resumes
    /// from `from`, mounts: `from`'s, relabelled as `job`'s at its first
    /// start (later starts find it so). Refused when neither holds one.
    async fn take_claim(
        &self,
        job: &trainyard_domain::job::Job,
        from: &trainyard_domain::job::Job,
    ) -> Result<String, StartError> {
        let unavailable = |error: kube::Error| {
            StartError::Unavailable(format!(
                "cannot find the checkpoint volume claim it resumes from now: {}",
                describe(&error)
            ))
        };
        if let Some(claim) = self.claim_of(job).await.map_err(unavailable)? {
            return Ok(claim.name_any());
        }
        let Some(claim) = self.claim_of(from).await.map_err(unavailable)? else {
            return Err(StartError::Refused(format!(
                "job {}'s checkpoint volume claim is gone, so it cannot resume from it; submit it again without resuming to start from scratch",
                from.id
            )));
        };
        let name = claim.name_any();
        let patch = kube::api::Patch::Merge(shape::take_claim_patch(job, from));
        match self
            .claims
            .patch(&name, &kube::api::PatchParams::default(), &patch)
            .await
        {
            Ok(_) => Ok(name),
            Err(error) if transient(&error) => Err(StartError::Unavailable(format!(
                "the Kubernetes API did not relabel the checkpoint volume claim it resumes from: {}",
                describe(&error)
            ))),
            Err(error) => Err(StartError::Failed(format!(
                "Kubernetes refused to relabel the checkpoint volume claim it resumes from ({name}): {}",
                describe(&error)
            ))),
        }
    }

    /// Deletes a checkpoint claim (its volume goes as its StorageClass
    /// says): true once it is gone.
    async fn delete_claim(&self, job: i64, claim: &str) -> bool {
        match self.claims.delete(claim, &DeleteParams::background()).await {
            Ok(_) => true,
            Err(kube::Error::Api(s)) if s.is_not_found() => true,
            Err(error) => {
                tracing::warn!(job, %claim, error = %describe(&error), "could not delete the job's checkpoint volume claim");
                false
            }
        }
    }

    /// Connects to the cluster and starts the watches. Fails only on a
    /// configuration that cannot work (no kubeconfig, a missing context);
    /// a cluster that does not answer yet is waited for.
    pub async fn connect(settings: KubeSettings) -> Result<KubeExecutor, String> {
        use kube::config::{KubeConfigOptions, Kubeconfig};
        let options = KubeConfigOptions {
            context: settings.context.clone(),
            ..Default::default()
        };
        let config = match &settings.kubeconfig {
            Some(path) => {
                let file = Kubeconfig::read_from(path).map_err(|e| {
                    format!("kube_config: cannot read {}: {e}", path.display())
                })?;
                kube::Config::from_custom_kubeconfig(file, &options)
                    .await
                    .map_err(|e| format!("kube_config {}: {e}", path.display()))?
            }
            None if settings.context.is_some() => kube::Config::from_kubeconfig(&options)
                .await
                .map_err(|e| format!("kube_context: {e}"))?,
            None => kube::Config::infer().await.map_err(|e| {
                format!("no Kubernetes configuration found (set kube_config, or run in a pod with a service account): {e}")
            })?,
        };
        let namespace = settings
            .namespace
            .clone()
            .unwrap_or_else(|| config.default_namespace.clone());
        let client = Client::try_from(config)
            .map_err(|e| format!("cannot make a Kubernetes client: {e}"))?;
        Ok(Self::start_watching(settings, namespace, client))
    }

    fn start_watching(settings: KubeSettings, namespace: String, client: Client) -> KubeExecutor {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &namespace);
        let shared = Arc::new(Shared {
            watches: Watches::default(),
            attempts: Mutex::new(Attempts::default()),
            changed: Notify::new(),
            jobs_seen: Notify::new(),
            root: settings.root.clone(),
            namespace: namespace.clone(),
            pods,
            tasks: Mutex::new(Vec::new()),
        });
        let node_labels = settings
            .node_selector
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join(",");
        let mut node_config = watcher::Config::default();
        if !node_labels.is_empty() {
            node_config = node_config.labels(&node_labels);
        }
        let nodes = watch_into(
            Api::<Lean<Node>>::all(client.clone()),
            node_config,
            &shared,
            NODES,
            |_, _, _| {},
        );
        // One watch of every pod, of every phase: what others' pods ask
        // for takes its share of a node, and Trainyard's own (ended ones
        // too, for their exit) give their attempts' states. One watch
        // rather than a second of Trainyard's pods alone: each pod event
        // is sent and read once.
        let all_pods = watch_into(
            Api::<Lean<Pod>>::all(client.clone()),
            watcher::Config::default(),
            &shared,
            PODS,
            |shared, pod, deleted| shared.any_pod_changed(pod, deleted),
        );
        let managed = shape::managed_selector();
        let job_store = watch_into(
            Api::<Lean<Job>>::namespaced(client.clone(), &namespace),
            watcher::Config::default().labels(&managed),
            &shared,
            JOBS,
            |shared, _, _| {
                shared.changed.notify_one();
                shared.jobs_seen.notify_waiters();
            },
        );
        KubeExecutor {
            jobs: Api::namespaced(client.clone(), &namespace),
            client_nodes: Api::all(client.clone()),
            client_pods: Api::all(client.clone()),
            claims: Api::namespaced(client.clone(), &namespace),
            secrets: Api::namespaced(client, &namespace),
            settings,
            namespace,
            nodes,
            all_pods,
            job_store,
            shared,
            created: Mutex::new(HashMap::new()),
            stopping: Mutex::new(HashSet::new()),
            paused: Mutex::new(None),
            whole_nodes: Mutex::new(None),
            node_checks: Mutex::new(HashMap::new()),
        }
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    /// A checker of node agents' tokens (of the ServiceAccount `account`,
    /// `namespace/name`) on this executor's cluster.
    pub fn agent_reviewer(&self, account: &str) -> Result<agents::AgentReviewer, String> {
        agents::AgentReviewer::new(Client::from(self.jobs.clone()), account)
    }

    fn job_named(&self, name: &str) -> Option<Arc<Lean<Job>>> {
        self.job_store
            .get(&ObjectRef::new(name).within(&self.namespace))
    }

    fn pod_seen(&self, name: &str) -> Option<PodSeen> {
        self.shared.attempts().pods.get(name).cloned()
    }

    /// Whether a node was deleted from the cluster. A node missing from
    /// the watch may only have lost the selector's labels (its pods run
    /// on), so the API is asked, at most every few seconds per node; an API
    /// that does not answer says nothing is gone.
    async fn node_gone(&self, node: &str) -> bool {
        if self.nodes.get(&ObjectRef::new(node)).is_some() {
            return false;
        }
        if let Some(&(at, gone)) = self
            .node_checks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(node)
            && at.elapsed() < NODE_CHECK_EVERY
        {
            return gone;
        }
        let gone = matches!(self.client_nodes.get_opt(node).await, Ok(None));
        let mut checks = self.node_checks.lock().unwrap_or_else(|p| p.into_inner());
        checks.retain(|_, (at, _)| at.elapsed() < NODE_CHECK_EVERY * 12);
        checks.insert(node.to_owned(), (Instant::now(), gone));
        gone
    }

    fn handle_of(record: &JobRecord) -> String {
        record
            .handle
            .clone()
            .unwrap_or_else(|| shape::attempt_name(&record.job))
    }

    fn note(&self, name: &str, node: &str) -> String {
        format!("Kubernetes Job {}/{name} on node {node}", self.namespace)
    }

    /// An attempt is over (a retry is another Job): its Job goes once its
    /// log is in.
    fn let_go(&self, name: String) {
        self.created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        self.remove_later(name);
    }

    /// Removes a Job and what it owns (its pod, its Secret), once its log
    /// is all in.
    fn remove_later(&self, name: String) {
        let jobs = self.jobs.clone();
        let shared = self.shared.clone();
        tokio::spawn(async move {
            let deadline = Instant::now() + Duration::from_secs(30);
            loop {
                let following = shared
                    .attempts()
                    .followers
                    .get(&name)
                    .is_some_and(|(_, task)| !task.is_finished());
                if !following || Instant::now() > deadline {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            match jobs.delete(&name, &DeleteParams::background()).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_not_found() => {}
                Err(error) => {
                    tracing::warn!(job = %name, error = %describe(&error), "could not remove a finished Kubernetes Job; its TTL removes it within a day");
                }
            }
            let mut attempts = shared.attempts();
            attempts.followers.remove(&name);
            attempts.pods.remove(&name);
            attempts.ids.remove(&name);
            attempts.ours.remove(&name);
        });
    }
}

/// Starts a watch of `api` into a reflector store, calling `on_change` for
/// each object that changed (and true if it was deleted).
fn watch_into<K>(
    api: Api<K>,
    config: watcher::Config,
    shared: &Arc<Shared>,
    which: usize,
    on_change: fn(&Arc<Shared>, &K, bool),
) -> Store<K>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (store, writer) = reflector::store::<K>();
    let keep = shared.clone();
    let shared = shared.clone();
    let task = tokio::spawn(async move {
        let stream = watcher(api, config).default_backoff().reflect(writer);
        let mut stream = std::pin::pin!(stream);
        // Never ends and never gives up: errors are retried with backoff.
        while let Some(item) = stream.next().await {
            match item {
                Ok(event) => {
                    // The reflector applied it to the store before passing
                    // it on (a relist's at its InitDone).
                    shared.watches.events[which].fetch_add(1, Ordering::AcqRel);
                    shared
                        .watches
                        .ok(which, matches!(event, watcher::Event::InitDone));
                    match &event {
                        watcher::Event::Apply(k) | watcher::Event::InitApply(k) => {
                            on_change(&shared, k, false)
                        }
                        watcher::Event::Delete(k) => on_change(&shared, k, true),
                        watcher::Event::Init => {}
                        watcher::Event::InitDone => shared.changed.notify_one(),
                    }
                }
                Err(error) => shared.watches.failed(which, error.to_string()),
            }
        }
    });
    keep.tasks
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .push(task.abort_handle());
    store
}

impl Drop for KubeExecutor {
    /// Its watches and log followers stop with it (a server that stops
    /// leaves its Jobs running; the next one adopts them).
    fn drop(&mut self) {
        for task in self
            .shared
            .tasks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain(..)
        {
            task.abort();
        }
        for (_, (_, task)) in self.shared.attempts().followers.drain() {
            task.abort();
        }
    }
}

/// What a pod asks of its node: CPU millis, memory MiB, GPUs.
fn pod_requests(pod: &Pod, gpu_resource: &str) -> (u32, u64, u32) {
    let Some(spec) = pod.spec.as_ref() else {
        return (0, 0, 0);
    };
    let of = |c: &k8s_openapi::api::core::v1::Container, key: &str| {
        let resources = c.resources.as_ref()?;
        resources
            .requests
            .as_ref()
            .and_then(|r| r.get(key))
            .or_else(|| resources.limits.as_ref().and_then(|l| l.get(key)))
            .map(|q| q.0.clone())
    };
    let sum = |containers: &[k8s_openapi::api::core::v1::Container]| {
        containers.iter().fold((0u32, 0u64, 0u32), |(c, m, g), k| {
            (
                c.saturating_add(
                    of(k, "cpu")
                        .and_then(|q| quantity::cpu_millis(&q))
                        .unwrap_or(0),
                ),
                m.saturating_add(
                    of(k, "memory")
                        .and_then(|q| quantity::memory_mib(&q))
                        .unwrap_or(0),
                ),
                g.saturating_add(
                    of(k, gpu_resource)
                        .and_then(|q| quantity::count(&q))
                        .unwrap_or(0),
                ),
            )
        })
    };
    let main = sum(&spec.containers);
    // Init containers run one at a time, before the others.
    let init = spec
        .init_containers
        .as_deref()
        .unwrap_or(&[])
        .iter()
        .map(|c| sum(std::slice::from_ref(c)))
        .fold((0, 0, 0), |a, b| (a.0.max(b.0), a.1.max(b.1), a.2.max(b.2)));
    (main.0.max(init.0), main.1.max(init.1), main.2.max(init.2))
}

/// Whether a node takes new pods of ours: Ready, not cordoned, and no
/// taint that keeps them off which they do not tolerate.
fn takes_new(node: &Node, tolerations: &[Toleration]) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let spec = node.spec.as_ref();
    let cordoned = spec.and_then(|s| s.unschedulable).unwrap_or(false);
    let blocked = spec
        .and_then(|s| s.taints.as_deref())
        .unwrap_or(&[])
        .iter()
        .filter(|t| t.effect == "NoSchedule" || t.effect == "NoExecute")
        .any(|taint| {
            !tolerations.iter().any(|t| {
                let key = t.key.as_deref().is_none_or(|k| k == taint.key);
                let value = t.operator.as_deref() == Some("Exists")
                    || t.value.as_deref() == taint.value.as_deref();
                let effect = t.effect.as_deref().is_none_or(|e| e == taint.effect);
                key && value && effect
            })
        });
    ready && !cordoned && !blocked
}

impl KubeExecutor {
    /// The nodes as the scheduler sees them when empty, in name order:
    /// made again only after the nodes watch saw a change (a cycle runs
    /// many times a second in a burst; nodes change seldom).
    fn whole_nodes(&self) -> Arc<Vec<sched::Node>> {
        // Read before the store: a change that lands meanwhile makes the
        // next call look again.
        let generation = self.shared.watches.events[NODES].load(Ordering::Acquire);
        if let Some((seen, nodes)) = &*self.whole_nodes.lock().unwrap_or_else(|p| p.into_inner())
            && *seen == generation
        {
            return nodes.clone();
        }
        let gpu = self.settings.gpu_resource.as_str();
        let mut nodes: Vec<Arc<Lean<Node>>> = self.nodes.state();
        nodes.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let in_all: Arc<Vec<sched::Node>> = Arc::new(
            nodes
                .iter()
                .enumerate()
                .map(|(i, node)| {
                    let allocatable = node.status.as_ref().and_then(|s| s.allocatable.as_ref());
                    let read =
                        |key: &str| allocatable.and_then(|a| a.get(key)).map(|q| q.0.as_str());
                    sched::Node {
                        id: i as sched::NodeId,
                        name: node.name_any(),
                        gpus: read(gpu).and_then(quantity::count).unwrap_or(0),
                        cpu_millis: read("cpu").and_then(quantity::cpu_millis).unwrap_or(0),
                        memory_mib: read("memory").and_then(quantity::memory_mib).unwrap_or(0),
                        schedulable: takes_new(node, &self.settings.tolerations),
                    }
                })
                .collect(),
        );
        *self.whole_nodes.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((generation, in_all.clone()));
        in_all
    }

    /// A capacity of `nodes` (what is free of others' pods) and `in_all`,
    /// with the words a refusal uses.
    fn capacity_of(&self, nodes: Vec<sched::Node>, in_all: Arc<Vec<sched::Node>>) -> Capacity {
        let count = in_all.len();
        let largest = in_all.iter().map(|n| n.gpus).max().unwrap_or(0);
        let selector = if self.settings.node_selector.is_empty() {
            String::new()
        } else {
            format!(
                " with {}",
                self.settings
                    .node_selector
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
                    .join(",")
            )
        };
        Capacity {
            nodes,
            in_all,
            slots: None,
            gpus_said: format!(
                "the largest of the cluster's {count} {}{selector} has {largest} ({})",
                if count == 1 { "node" } else { "nodes" },
                self.settings.gpu_resource
            ),
            place: "the largest node of the cluster".to_owned(),
            full: String::new(),
        }
    }

    /// Waits until the Jobs watch holds the Job `name` just made, at most
    /// [`JOB_SEEN_WAIT`]. Its Secret is made after that: the garbage
    /// collector, fed from the same watch cache, then knows the Secret's
    /// owner when it sees the Secret, where otherwise it asked the API
    /// for the Job of nearly every Secret (2,549 reads of Jobs for 1,954
    /// Secrets in `make bench-k8s-executor`, a twelfth of the API server's
    /// extra work for a job). It should cost the pod nothing (reasoned, not
    /// measured on a real kubelet): its container needs the Secret only
    /// after the Job controller made the pod, kube-scheduler bound it and
    /// the kubelet saw it, each one watch event later than this one.
    async fn seen_by_watch(&self, name: &str) {
        let seen = async {
            loop {
                let told = self.shared.jobs_seen.notified();
                let mut told = std::pin::pin!(told);
                told.as_mut().enable();
                if self.job_named(name).is_some() {
                    return;
                }
                told.await;
            }
        };
        let _ = tokio::time::timeout(JOB_SEEN_WAIT, seen).await;
    }

    async fn start_attempt(&self, attempt: Attempt) -> Result<Started, StartError> {
        let record = &attempt.record.job;
        let name = shape::attempt_name(record);
        let node = attempt.node.clone();
        let claim = match (&self.settings.checkpoints, &attempt.resume_from) {
            (None, _) => None,
            (Some(_), Some(from)) => Some(self.take_claim(record, from).await?),
            (Some((class, gib)), None) => {
                // Made at the first start, found at the next ones.
                let claim = shape::checkpoint_claim(record, class, *gib);
                match self.claims.create(&PostParams::default(), &claim).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.is_already_exists() => {}
                    Err(error) if transient(&error) => {
                        return Err(StartError::Unavailable(format!(
                            "the Kubernetes API did not take its checkpoint volume claim: {}",
                            describe(&error)
                        )));
                    }
                    Err(error) => {
                        return Err(StartError::Failed(format!(
                            "Kubernetes refused its checkpoint volume claim: {} (check kube_checkpoint_storage_class and kube_checkpoint_gib)",
                            describe(&error)
                        )));
                    }
                }
                Some(shape::claim_name(record))
            }
        };
        let job = shape::job(
            &self.settings,
            &attempt,
            trainyard_store::now_millis(),
            claim.as_deref(),
        );
        let asked = Instant::now();
        let created = match self.jobs.create(&PostParams::default(), &job).await {
            Ok(created) => created,
            Err(kube::Error::Api(s)) if s.is_already_exists() => {
                // Made before the server stopped: found, not made twice.
                match self.jobs.get(&name).await {
                    Ok(existing) => existing,
                    Err(error) => return Err(StartError::Unavailable(describe(&error))),
                }
            }
            Err(error) if transient(&error) => {
                return Err(StartError::Unavailable(format!(
                    "the Kubernetes API did not take its Job: {}",
                    describe(&error)
                )));
            }
            Err(error) => {
                return Err(StartError::Failed(format!(
                    "Kubernetes refused its Job: {}",
                    describe(&error)
                )));
            }
        };
        let job_ms = asked.elapsed().as_millis() as u64;
        self.created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone(), Instant::now());
        self.shared.claim(&name);
        let asked = Instant::now();
        if let Some(token) = attempt.env.get(shape::TOKEN_VAR) {
            self.seen_by_watch(&name).await;
            let owner = created.controller_owner_ref(&()).map(|mut o| {
                o.block_owner_deletion = Some(true);
                o
            });
            let Some(owner) = owner else {
                return Err(StartError::Unavailable(
                    "the Kubernetes API returned its Job without a uid".to_owned(),
                ));
            };
            let secret = shape::secret(
                &name,
                owner,
                token,
                shape::labels(record.id, record.attempt),
            );
            match self.secrets.create(&PostParams::default(), &secret).await {
                Ok(_) => {}
                Err(kube::Error::Api(s)) if s.is_already_exists() => {}
                Err(error) => {
                    return Err(StartError::Unavailable(format!(
                        "the Kubernetes API did not take its Secret: {}",
                        describe(&error)
                    )));
                }
            }
        }
        tracing::debug!(job = %name, job_ms, secret_ms = asked.elapsed().as_millis() as u64, "Job and Secret made");
        Ok(Started {
            note: self.note(&name, &node),
            handle: name,
        })
    }
}

#[async_trait::async_trait]
impl Executor for KubeExecutor {
    fn kind(&self) -> &'static str {
        "kubernetes"
    }

    async fn prepare(&self, _active: &[JobRecord]) -> Result<(), String> {
        // What this server may read is checked once, with a clear word if
        // not (what it may make is said by the first start that fails).
        let one = ListParams::default().limit(1);
        let checks = [
            (
                format!("list Jobs in namespace {}", self.namespace),
                self.jobs.list_metadata(&one).await.err(),
            ),
            (
                "list nodes".to_owned(),
                self.client_nodes.list_metadata(&one).await.err(),
            ),
            (
                "list pods of all namespaces".to_owned(),
                self.client_pods.list_metadata(&one).await.err(),
            ),
            (
                format!(
                    "list persistent volume claims in namespace {} (each job's checkpoints)",
                    self.namespace
                ),
                match self.settings.checkpoints {
                    Some(_) => self.claims.list_metadata(&one).await.err(),
                    None => None,
                },
            ),
        ];
        for (what, error) in checks {
            match error {
                None => {}
                Some(kube::Error::Api(s)) if s.is_forbidden() => {
                    return Err(format!(
                        "the Kubernetes account may not {what}: {} (apply the Role and ClusterRole of helm/trainyard/templates/rbac.yaml, or check kube_namespace)",
                        s.message
                    ));
                }
                Some(error) => {
                    tracing::warn!(namespace = %self.namespace, error = %describe(&error), "the Kubernetes API does not answer yet; jobs wait until it does");
                    break;
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.shared.watches.synced() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        Ok(())
    }

    async fn capacity(&self) -> Result<Capacity, String> {
        if let Some(trouble) = self.shared.watches.trouble() {
            return Err(trouble);
        }
        if let Some((until, why)) = self
            .paused
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            && Instant::now() < until
        {
            return Err(format!("{why}; trying again shortly"));
        }
        let gpu = self.settings.gpu_resource.as_str();
        // What pods that are not our running attempts hold, per node: other
        // people's pods, and ours that are going away.
        let pods = self.all_pods.state();
        let mut held: HashMap<&str, (u32, u64, u32)> = HashMap::new();
        for pod in &pods {
            let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
                continue;
            };
            // An ended pod holds nothing.
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            let ours = shape::is_managed(pod.as_ref())
                && pod.metadata.namespace.as_deref() == Some(&self.namespace);
            if ours && pod.metadata.deletion_timestamp.is_none() {
                continue;
            }
            let (c, m, g) = pod_requests(pod, gpu);
            let entry = held.entry(node).or_default();
            *entry = (
                entry.0.saturating_add(c),
                entry.1.saturating_add(m),
                entry.2.saturating_add(g),
            );
        }
        let in_all = self.whole_nodes();
        let nodes: Vec<sched::Node> = in_all
            .iter()
            .map(|node| {
                let (c, m, g) = held.get(node.name.as_str()).copied().unwrap_or_default();
                sched::Node {
                    gpus: node.gpus.saturating_sub(g),
                    cpu_millis: node.cpu_millis.saturating_sub(c),
                    memory_mib: node.memory_mib.saturating_sub(m),
                    ..node.clone()
                }
            })
            .collect();
        Ok(self.capacity_of(nodes, in_all))
    }

    /// What a submission is checked against: the nodes with all they
    /// have, kept between changes of the nodes (no walk of the pods).
    async fn limits(&self) -> Result<Capacity, String> {
        if let Some(trouble) = self.shared.watches.trouble() {
            return Err(trouble);
        }
        Ok(self.capacity_of(Vec::new(), self.whole_nodes()))
    }

    async fn start(&self, attempt: Attempt) -> Result<Started, StartError> {
        let started = self.start_attempt(attempt).await;
        if let Err(StartError::Unavailable(why)) = &started {
            *self.paused.lock().unwrap_or_else(|p| p.into_inner()) =
                Some((Instant::now() + START_PAUSE, why.clone()));
        }
        started
    }

    async fn observe(&self, record: &JobRecord) -> Observation {
        let name = Self::handle_of(record);
        if !self.shared.watches.synced() {
            return Observation::Running; // not known yet; nothing is lost
        }
        let pod = self.pod_seen(&name);
        if let Some(job) = self.job_named(&name) {
            self.shared.claim(&name);
            if record.handle.is_none() {
                let node = pod
                    .as_ref()
                    .and_then(|p| p.node.clone())
                    .or(record.job.node.clone())
                    .unwrap_or_default();
                return Observation::Adopted(Started {
                    note: format!("{}, found again after a restart", self.note(&name, &node)),
                    handle: name,
                });
            }
            if let Some(ending) = status::job_ending(&job, pod.as_ref()) {
                self.let_go(name);
                return Observation::Ended(ending);
            }
            // A node deleted from the cluster runs nothing more; Kubernetes
            // collects its pods only after a while (40 s and more): the
            // attempt is placed again now, without spending a retry.
            if let Some(node) = pod
                .as_ref()
                .filter(|p| !p.finished())
                .and_then(|p| p.node.clone())
                && self.node_gone(&node).await
            {
                self.let_go(name);
                return Observation::Ended(Ending {
                    message: Some(format!(
                        "on node {node}, which was deleted from the cluster"
                    )),
                    ..Ending::of(EndReason::Disrupted)
                });
            }
            let waiting = pod.filter(|p| !p.started && !p.finished());
            // An image that cannot be pulled fails the attempt once the
            // kubelet has tried for a while (a name that is not an image
            // at once), rather than holding its GPUs for ever.
            if let Some((failure, waited)) = waiting.as_ref().and_then(|p| {
                let failure = p.pull_failed.as_ref()?;
                let waited = p.pull_failing_since.map_or(Duration::ZERO, |t| t.elapsed());
                (failure.permanent || waited >= self.settings.image_pull_timeout)
                    .then(|| (failure.clone(), waited))
            }) {
                self.let_go(name);
                let tried = if failure.permanent {
                    String::new()
                } else {
                    format!(" (tried for {} s)", waited.as_secs())
                };
                return Observation::Ended(Ending {
                    message: Some(format!(
                        "its image could not be pulled{tried}: {}; check the job's image and the image pull secrets",
                        failure.why
                    )),
                    ..Ending::of(EndReason::StartFailed)
                });
            }
            // Why its pod waits: kube-scheduler's message, an image that
            // cannot be pulled (yet).
            if let Some(why) = waiting.and_then(|p| p.waiting) {
                return Observation::Waiting(why);
            }
            return Observation::Running;
        }
        // Not in the watch: stopped by us, not seen yet, or gone.
        let stopped = record.job.cancel_requested
            || self
                .stopping
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .contains(&name);
        let recent = self
            .created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&name)
            .is_some_and(|t| t.elapsed() < CREATED_GRACE);
        if recent && !stopped {
            return Observation::Running;
        }
        match self.jobs.get_opt(&name).await {
            Ok(Some(_)) | Err(_) => Observation::Running,
            Ok(None) if stopped => {
                self.stopping
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&name);
                let term = pod.and_then(|p| p.main_end);
                Observation::Ended(Ending {
                    exit_code: term.as_ref().map(|t| t.exit_code),
                    signal: term.and_then(|t| t.signal),
                    ..Ending::of(EndReason::Cancelled)
                })
            }
            Ok(None) if record.handle.is_none() => Observation::Lost(
                "it never reached Kubernetes (the server stopped while starting it)".to_owned(),
            ),
            Ok(None) => Observation::Lost(format!(
                "its Kubernetes Job {}/{name} was deleted by someone else",
                self.namespace
            )),
        }
    }

    fn pod_namespace(&self) -> Option<&str> {
        Some(&self.namespace)
    }

    fn pod(&self, record: &JobRecord) -> Option<String> {
        self.shared
            .attempts()
            .pods
            .get(&Self::handle_of(record))
            .map(|p| p.pod.clone())
    }

    async fn stop(&self, record: &JobRecord) -> Result<(), String> {
        let name = Self::handle_of(record);
        let first = self
            .stopping
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.clone());
        if !first
            && self
                .job_named(&name)
                .is_some_and(|j| j.metadata.deletion_timestamp.is_some())
        {
            return Ok(()); // already going
        }
        // Foreground: the Job goes once its pod has (SIGTERM, the pod's
        // grace of job_stop_grace_secs, then SIGKILL).
        match self.jobs.delete(&name, &DeleteParams::foreground()).await {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.is_not_found() => Ok(()),
            Err(error) => Err(format!(
                "could not delete Kubernetes Job {name}: {}",
                describe(&error)
            )),
        }
    }

    async fn changed(&self) {
        self.shared.changed.notified().await
    }

    async fn retire(&self, record: &JobRecord, keep: bool) -> Option<u64> {
        let name = Self::handle_of(record);
        self.stopping
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        self.created
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&name);
        self.remove_later(name);
        let (_, gib) = self.settings.checkpoints.as_ref()?;
        let configured = gib.saturating_mul(1 << 30);
        let job = &record.job;
        // Kept whole, as a claim: what it holds is its volume's size,
        // whatever the job wrote to it. A claim made for a job none of
        // whose attempts ran holds nothing.
        let ran = job.started_at.is_some() || job.attempt > 0 || job.spec.resume_from.is_some();
        let claim = match self.claim_of(job).await {
            Ok(claim) => claim?,
            Err(error) if keep && ran => {
                // Recorded at the size it was made with: expiry or its
                // owner's deletion finds it again once the API answers.
                tracing::warn!(job = job.id, error = %describe(&error), "cannot read the job's checkpoint volume claim now; it is kept as made");
                return Some(configured);
            }
            Err(error) => {
                tracing::warn!(job = job.id, error = %describe(&error), "cannot find the job's checkpoint volume claim now; deleting it by name");
                self.delete_claim(job.id, &shape::claim_name(job)).await;
                return None;
            }
        };
        if keep && ran {
            let size = |sizes: Option<
                &BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>,
            >| {
                sizes
                    .and_then(|sizes| sizes.get("storage"))
                    .and_then(|q| quantity::bytes(&q.0))
            };
            // The volume's, else what was asked for, else the setting.
            let bytes = size(claim.status.as_ref().and_then(|s| s.capacity.as_ref()))
                .or_else(|| {
                    size(
                        claim
                            .spec
                            .as_ref()
                            .and_then(|s| s.resources.as_ref())
                            .and_then(|r| r.requests.as_ref()),
                    )
                })
                .unwrap_or(configured);
            return Some(bytes);
        }
        // Ended for good: its checkpoints are of no more use.
        self.delete_claim(job.id, &claim.name_any()).await;
        None
    }

    fn keeps_checkpoints(&self) -> bool {
        self.settings.checkpoints.is_some()
    }

    fn keeps_no_checkpoints_because(&self) -> String {
        "its Kubernetes executor keeps them only in volume claims, and kube_checkpoint_storage_class is not set".to_owned()
    }

    async fn holds_checkpoints(&self, job: &trainyard_domain::job::Job) -> Result<bool, String> {
        self.claim_of(job)
            .await
            .map(|claim| claim.is_some())
            .map_err(|error| describe(&error))
    }

    async fn drop_checkpoints(&self, job: &trainyard_domain::job::Job) -> bool {
        match self.claim_of(job).await {
            Ok(Some(claim)) => self.delete_claim(job.id, &claim.name_any()).await,
            Ok(None) => true,
            Err(error) => {
                tracing::warn!(job = job.id, error = %describe(&error), "cannot find the job's checkpoint volume claim to delete it; trying again later");
                false
            }
        }
    }

    async fn read_log(
        &self,
        job: i64,
        attempt: u32,
        offset: u64,
        limit: u64,
    ) -> std::io::Result<(Vec<u8>, u64)> {
        trainyard_jobs::local::read_from(&self.shared.log_path(job, attempt), offset, limit).await
    }

    async fn log_tail(&self, job: i64, attempt: u32, max: u64) -> std::io::Result<(String, u64)> {
        trainyard_jobs::local::read_tail(&self.shared.log_path(job, attempt), max).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_selectors_and_tolerations_are_read_from_their_settings() {
        assert_eq!(
            parse_node_selector("nvidia.com/gpu.present=true, pool=a100").unwrap(),
            BTreeMap::from([
                ("nvidia.com/gpu.present".to_owned(), "true".to_owned()),
                ("pool".to_owned(), "a100".to_owned())
            ])
        );
        assert!(parse_node_selector("").unwrap().is_empty());
        assert_eq!(
            parse_node_selector("gpu").unwrap_err(),
            "`gpu` is not key=value"
        );
        let t = parse_tolerations("nvidia.com/gpu:NoSchedule,dedicated=ml").unwrap();
        assert_eq!(t[0].key.as_deref(), Some("nvidia.com/gpu"));
        assert_eq!(t[0].operator.as_deref(), Some("Exists"));
        assert_eq!(t[0].effect.as_deref(), Some("NoSchedule"));
        assert_eq!(t[1].value.as_deref(), Some("ml"));
        assert_eq!(t[1].operator.as_deref(), Some("Equal"));
        assert_eq!(t[1].effect, None);
        assert!(
            parse_tolerations("a:Sometimes")
                .unwrap_err()
                .contains("NoSchedule, PreferNoSchedule or NoExecute")
        );
    }

    fn node(taints: &[(&str, Option<&str>, &str)], ready: bool) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n"},
            "spec": {"taints": taints.iter().map(|(k, v, e)| serde_json::json!({"key": k, "value": v, "effect": e})).collect::<Vec<_>>()},
            "status": {"conditions": [{"type": "Ready", "status": if ready {"True"} else {"False"}}]}
        }))
        .unwrap()
    }

    #[test]
    fn a_node_takes_new_pods_when_ready_and_its_taints_are_tolerated() {
        let gpu = parse_tolerations("nvidia.com/gpu:NoSchedule").unwrap();
        assert!(takes_new(&node(&[], true), &gpu));
        assert!(!takes_new(&node(&[], false), &gpu));
        assert!(takes_new(
            &node(&[("nvidia.com/gpu", Some("present"), "NoSchedule")], true),
            &gpu
        ));
        assert!(!takes_new(
            &node(&[("broken", Some("true"), "NoExecute")], true),
            &gpu
        ));
        assert!(takes_new(
            &node(&[("soft", None, "PreferNoSchedule")], true),
            &[]
        ));
    }
}
