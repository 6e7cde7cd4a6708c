//! `trainyard agent`: runs on each GPU node, samples its GPUs every period
//! and sends the readings to the server with the node's token.
//!
//! Every reading goes to a spool folder first (JSON lines, in segments of
//! [`SEGMENT_READINGS`]), and segments are sent oldest first and deleted
//! once the server took them. While the server is away they pile up, at
//! most `max_segments` of them (48 hours at 10 s by default; the oldest
//! go first), and what was missed is sent when it returns. A segment the
//! server refuses as bad (400) is dropped, with the reason in the log.
//!
//! The server's answers say which GPUs jobs hold now: simulated GPUs (no
//! driver) follow them, as the server's own do.
//!
//! On Kubernetes the device plugin, not the server, picks a pod's GPUs.
//! With `pod_resources_socket` set, each batch says which pod holds which
//! GPU now, as the kubelet's pod-resources API tells, and the server
//! charts and flags the GPUs the pods really got.

use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use trainyard_domain::telemetry::{
    AGENT_MAX_AGE_MS, AGENT_MAX_PODS, AGENT_MAX_XIDS, AgentAnswer, AgentGpu, AgentRegistration,
    PodGpus, Reading, ReadingBatch, XidEvent,
};
use trainyard_jobs::telemetry::{SamplerThread, loads_of};
use trainyard_kube::pod_resources::{PodDevices, PodResourcesClient, gpu_uuids};
use trainyard_nvml::{Inventory, Load};

use crate::cli::CliError;

/// Readings per spool segment, and so per batch sent (an hour at 10 s).
pub const SEGMENT_READINGS: usize = 360;
/// A segment past this size is full too, whatever its readings, so that a
/// segment (and so a batch) stays well under the server's body limit
/// (8 MiB): one reading is at most about 0.8 MB (64 GPUs of 256 processes).
const SEGMENT_BYTES: u64 = 4 << 20;
/// The largest segment file read back.
const MAX_SEGMENT_BYTES: u64 = 8 << 20;
/// The most of an answer the agent reads.
const MAX_ANSWER_BYTES: usize = 1 << 20;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub server: String,
    /// The file holding the token, read again for every request: a
    /// Kubernetes ServiceAccount token is renewed in place by the kubelet.
    pub token_file: PathBuf,
    pub node: String,
    pub spool: PathBuf,
    pub sample_every: Duration,
    /// GPUs to simulate where there is no driver.
    pub simulated_gpus: u32,
    /// The most segments kept while the server is away.
    pub max_segments: usize,
    /// The kubelet's pod-resources socket, if the agent reads which pod
    /// holds which GPU.
    pub pod_resources_socket: Option<PathBuf>,
    /// The extended resource whose devices are GPUs there.
    pub gpu_resource: String,
}

/// Runs until killed.
pub async fn run(options: AgentOptions) -> Result<(), CliError> {
    trainyard_domain::telemetry::check_node_name(&options.node)
        .map_err(|e| CliError(format!("--node: {}", e.message)))?;
    let node = options.node.clone();
    let simulated = options.simulated_gpus;
    let inventory = tokio::task::spawn_blocking(move || trainyard_nvml::discover(simulated, &node))
        .await
        .map_err(|e| CliError(e.to_string()))?;
    if inventory.gpus.is_empty() {
        return Err(CliError(format!(
            "no GPUs found on this node ({}); nothing to report (--simulated-gpus simulates some)",
            inventory.note.as_deref().unwrap_or("NVML found none")
        )));
    }
    if let Some(note) = &inventory.note {
        tracing::warn!(note = %note, gpus = inventory.gpus.len(), "simulated GPUs");
    }
    let spool = Arc::new(Mutex::new(Spool::open(
        &options.spool,
        options.max_segments,
    )?));
    let client = Client::new(&options)?;
    let sampler = SamplerThread::start(inventory.clone())
        .map_err(|e| CliError(format!("cannot start the sampling thread: {e}")))?;
    let loads: Arc<Mutex<HashMap<u32, Load>>> = Arc::default();
    // Sending runs beside sampling, so that a server slow to answer (or
    // gone without a word) never delays a sample.
    let wake = Arc::new(tokio::sync::Notify::new());
    let pods = options
        .pod_resources_socket
        .as_deref()
        .map(|socket| PodReader {
            client: PodResourcesClient::new(socket, &options.gpu_resource),
            gpus: inventory
                .gpus
                .iter()
                .map(|g| (g.index, g.uuid.clone()))
                .collect(),
            failing: false,
        });
    let sender = tokio::spawn(send_forever(
        client,
        registration(&options.node, &inventory),
        spool.clone(),
        loads.clone(),
        wake.clone(),
        pods,
    ));
    let mut interval = tokio::time::interval(options.sample_every);
    interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tracing::info!(
        node = %options.node,
        server = %options.server,
        gpus = inventory.gpus.len(),
        "agent started"
    );
    loop {
        interval.tick().await;
        let now_loads = lock(&loads).clone();
        let Some((reading, xids)) = sampler
            .sample(trainyard_store::now_millis(), now_loads)
            .await
        else {
            sender.abort();
            return Err(CliError("the GPU sampling thread stopped".to_owned()));
        };
        if let Err(e) = lock(&spool).push(&reading, &xids) {
            tracing::error!(error = %e, "cannot write the spool; this reading is lost");
        }
        wake.notify_one();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Registers, then sends the spool each time a sample is added.
async fn send_forever(
    client: Client,
    registration: AgentRegistration,
    spool: Arc<Mutex<Spool>>,
    loads: Arc<Mutex<HashMap<u32, Load>>>,
    wake: Arc<tokio::sync::Notify>,
    mut pods: Option<PodReader>,
) {
    let mut registered = false;
    loop {
        wake.notified().await;
        if !registered {
            match client
                .post("/api/trainyard/v1/agent/register", &registration)
                .await
            {
                Ok(answer) => {
                    registered = true;
                    *lock(&loads) = loads_of(&answer.held);
                    tracing::info!("registered with the server");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot register yet; samples wait in the spool");
                    continue;
                }
            }
        }
        let now_pods = match &mut pods {
            Some(reader) => reader.read().await,
            None => None,
        };
        match send_spool(&client, &spool, now_pods).await {
            Ok(Some(answer)) => *lock(&loads) = loads_of(&answer.held),
            Ok(None) => {}
            Err(SendError::NotRegistered) => registered = false,
            Err(SendError::Away(e)) => {
                let waiting = lock(&spool).len();
                tracing::warn!(error = %e, waiting, "the server is away; samples wait in the spool")
            }
        }
    }
}

/// Sends the segments, oldest first, until all are taken or the server
/// is away. The newest answer, if any was sent.
async fn send_spool(
    client: &Client,
    spool: &Mutex<Spool>,
    pods: Option<Vec<PodGpus>>,
) -> Result<Option<AgentAnswer>, SendError> {
    let mut last = None;
    loop {
        let oldest = lock(spool).oldest(trainyard_store::now_millis());
        let Some((n, lines, mut batch)) = oldest else {
            return Ok(last);
        };
        // Which pod holds which GPU is news of now, sent with whatever
        // batch goes now.
        batch.pods = pods.clone();
        match client
            .request("/api/trainyard/v1/agent/readings", &batch)
            .await
        {
            Outcome::Ok(answer) => {
                last = Some(answer);
                lock(spool).forget(n, lines);
            }
            Outcome::Refused(message) => {
                tracing::error!(message = %message, readings = batch.readings.len(), "the server refused a batch; it is dropped");
                lock(spool).forget(n, lines);
            }
            Outcome::NotRegistered => return Err(SendError::NotRegistered),
            Outcome::Away(e) => return Err(SendError::Away(e)),
        }
    }
}

/// Reads which pod holds which of the node's GPUs from the kubelet.
struct PodReader {
    client: PodResourcesClient,
    /// The node's GPUs: index → UUID.
    gpus: BTreeMap<u32, String>,
    /// The last read failed (said once, not every period).
    failing: bool,
}

impl PodReader {
    /// The pods holding the node's GPUs now; `None` if the kubelet did not
    /// answer (the server then keeps what it knew).
    async fn read(&mut self) -> Option<Vec<PodGpus>> {
        match self.client.gpu_pods().await {
            Ok(pods) => {
                if std::mem::take(&mut self.failing) {
                    tracing::info!("the kubelet's pod resources answer again");
                }
                Some(pod_gpus(pods, &self.gpus))
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(error = %e, "cannot read the kubelet's pod resources; the server's own GPU picks stand meanwhile");
                }
                None
            }
        }
    }
}

/// What a batch says of the kubelet's pods: those holding the node's GPUs,
/// each named once (a pod deleted and made again under its name, as a
/// StatefulSet's is, can be listed twice while the old one ends: their
/// GPUs are merged), at most [`AGENT_MAX_PODS`], as the server takes them.
fn pod_gpus(pods: Vec<PodDevices>, gpus: &BTreeMap<u32, String>) -> Vec<PodGpus> {
    let mut out: Vec<PodGpus> = Vec::new();
    let mut at: HashMap<(String, String), usize> = HashMap::new();
    for p in pods {
        let uuids = gpu_uuids(&p.device_ids, gpus);
        if uuids.is_empty() {
            continue;
        }
        match at.get(&(p.namespace.clone(), p.pod.clone())) {
            Some(&i) => {
                for u in uuids {
                    if !out[i].uuids.contains(&u) {
                        out[i].uuids.push(u);
                    }
                }
            }
            None if out.len() < AGENT_MAX_PODS => {
                at.insert((p.namespace.clone(), p.pod.clone()), out.len());
                out.push(PodGpus {
                    namespace: p.namespace,
                    pod: p.pod,
                    uuids,
                });
            }
            None => {}
        }
    }
    out
}

fn registration(node: &str, inventory: &Inventory) -> AgentRegistration {
    AgentRegistration {
        node: node.to_owned(),
        gpus: inventory
            .gpus
            .iter()
            .map(|g| AgentGpu {
                index: g.index,
                uuid: g.uuid.clone(),
                name: g.name.clone(),
                memory_total_bytes: g.memory_total_bytes,
            })
            .collect(),
    }
}

/// Why a send stopped.
#[derive(Debug)]
enum SendError {
    /// The server does not know the node (its database was reset, or an
    /// admin removed it): register again.
    NotRegistered,
    /// Unreachable, failing, or refusing the token: try again later.
    Away(String),
}

/// What a request came to.
#[derive(Debug)]
enum Outcome {
    Ok(AgentAnswer),
    /// 400: the body is bad and will stay bad.
    Refused(String),
    NotRegistered,
    Away(String),
}

struct Client {
    http: reqwest::Client,
    server: String,
    token_file: PathBuf,
}

/// The largest token file read (a ServiceAccount token is a kilobyte or two).
const MAX_TOKEN_FILE_BYTES: u64 = 16 << 10;

/// The token in `path`, checked to fit a header.
pub fn read_token(path: &Path) -> Result<String, String> {
    use std::io::Read as _;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_TOKEN_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| format!("--token-file {}: {e}", path.display()))?;
    if text.len() as u64 > MAX_TOKEN_FILE_BYTES {
        return Err(format!(
            "--token-file {}: over {MAX_TOKEN_FILE_BYTES} bytes; it should hold one token",
            path.display()
        ));
    }
    let token = text.trim();
    if token.is_empty() {
        return Err(format!("--token-file {}: empty", path.display()));
    }
    if reqwest::header::HeaderValue::from_str(token).is_err() {
        return Err(format!(
            "--token-file {}: the token holds characters a header cannot",
            path.display()
        ));
    }
    Ok(token.to_owned())
}

impl Client {
    fn new(options: &AgentOptions) -> Result<Client, CliError> {
        read_token(&options.token_file).map_err(CliError)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .timeout(REQUEST_TIMEOUT)
            .build()?;
        Ok(Client {
            http,
            server: options.server.trim_end_matches('/').to_owned(),
            token_file: options.token_file.clone(),
        })
    }

    async fn request(&self, path: &str, body: &impl serde::Serialize) -> Outcome {
        let token = match read_token(&self.token_file) {
            Ok(token) => token,
            Err(e) => return Outcome::Away(e),
        };
        let sent = self
            .http
            .post(format!("{}{path}", self.server))
            .bearer_auth(token)
            .json(body)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return Outcome::Away(format!("cannot reach {}: {e}", self.server)),
        };
        let status = response.status();
        let text = match read_limited(response).await {
            Ok(text) => text,
            Err(e) => return Outcome::Away(e),
        };
        if status.is_success() {
            return match serde_json::from_str(&text) {
                Ok(answer) => Outcome::Ok(answer),
                Err(e) => Outcome::Away(format!("the server's answer is not an agent answer: {e}")),
            };
        }
        let message = serde_json::from_str::<serde_json::Value>(&text)
            .ok()
            .and_then(|v| v["message"].as_str().map(str::to_owned))
            .unwrap_or(text);
        match status.as_u16() {
            409 => Outcome::NotRegistered,
            400 | 413 => Outcome::Refused(message),
            code => Outcome::Away(format!("{code}: {message}")),
        }
    }

    async fn post(&self, path: &str, body: &impl serde::Serialize) -> Result<AgentAnswer, String> {
        match self.request(path, body).await {
            Outcome::Ok(answer) => Ok(answer),
            Outcome::Refused(m) | Outcome::Away(m) => Err(m),
            Outcome::NotRegistered => Err("the server does not know this node".to_owned()),
        }
    }
}

/// An answer's body, up to [`MAX_ANSWER_BYTES`].
async fn read_limited(mut response: reqwest::Response) -> Result<String, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response
        .chunk()
        .await
        .map_err(|e| format!("the answer was cut: {e}"))?
    {
        if body.len() + chunk.len() > MAX_ANSWER_BYTES {
            return Err(format!("the answer is over {MAX_ANSWER_BYTES} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(String::from_utf8_lossy(&body).into_owned())
}

/// The readings not yet taken by the server, on disk.
struct Spool {
    dir: PathBuf,
    max_segments: usize,
    /// Segment numbers on disk, oldest first.
    segments: std::collections::VecDeque<u64>,
    /// Complete lines in the newest segment, and its bytes.
    newest_lines: usize,
    newest_bytes: u64,
}

impl Spool {
    /// Opens (or makes, 0700) the folder, and picks up what an earlier run
    /// left there.
    fn open(dir: &Path, max_segments: usize) -> Result<Spool, CliError> {
        use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(dir)
            .map_err(|e| CliError(format!("--spool {}: {e}", dir.display())))?;
        let meta = std::fs::symlink_metadata(dir)?;
        // Root writes here: the folder must be a real one of its own that
        // nobody else can write.
        let mine = meta.uid() == my_uid();
        if !meta.is_dir() || !mine || meta.permissions().mode() & 0o022 != 0 {
            return Err(CliError(format!(
                "--spool {}: must be a folder (not a link) of this user that others cannot write",
                dir.display()
            )));
        }
        let mut segments: Vec<u64> = std::fs::read_dir(dir)?
            .filter_map(|e| e.ok())
            .filter_map(|e| segment_number(&e.file_name().to_string_lossy()))
            .collect();
        segments.sort_unstable();
        let mut spool = Spool {
            dir: dir.to_owned(),
            max_segments: max_segments.max(1),
            segments: segments.into(),
            newest_lines: 0,
            newest_bytes: 0,
        };
        if let Some(&last) = spool.segments.back() {
            // A write cut short (a crash) leaves a partial last line: it
            // goes, so that the next reading starts a line of its own.
            let text = spool.text(last).unwrap_or_default();
            let complete = text.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
            if complete < text.len() {
                let file = std::fs::OpenOptions::new()
                    .write(true)
                    .open(spool.path(last))?;
                file.set_len(complete as u64)?;
            }
            spool.newest_lines = count_lines(&text[..complete]);
            spool.newest_bytes = complete as u64;
            tracing::info!(
                segments = spool.segments.len(),
                "readings left from an earlier run will be sent"
            );
        }
        Ok(spool)
    }

    fn path(&self, n: u64) -> PathBuf {
        self.dir.join(format!("segment-{n:020}.jsonl"))
    }

    /// Readings waiting.
    fn len(&self) -> usize {
        self.segments.len().saturating_sub(1) * SEGMENT_READINGS + self.newest_lines
    }

    /// Appends a reading (and the XID events that came with it).
    fn push(&mut self, reading: &Reading, xids: &[XidEvent]) -> std::io::Result<()> {
        let newest = match self.segments.back() {
            Some(&n)
                if self.newest_lines < SEGMENT_READINGS && self.newest_bytes < SEGMENT_BYTES =>
            {
                n
            }
            last => {
                let n = last.map_or(1, |n| n + 1);
                self.segments.push_back(n);
                self.newest_lines = 0;
                self.newest_bytes = 0;
                while self.segments.len() > self.max_segments {
                    if let Some(oldest) = self.segments.pop_front() {
                        tracing::warn!(
                            "the spool is full ({} segments): the oldest readings are dropped",
                            self.max_segments
                        );
                        let _ = std::fs::remove_file(self.path(oldest));
                    }
                }
                n
            }
        };
        let line = serde_json::to_string(&ReadingBatch {
            readings: vec![reading.clone()],
            xids: xids.to_vec(),
            pods: None,
        })?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(newest))?;
        let line = format!("{line}\n");
        file.write_all(line.as_bytes())?;
        self.newest_lines += 1;
        self.newest_bytes += line.len() as u64;
        Ok(())
    }

    /// A segment file's bytes (at most [`MAX_SEGMENT_BYTES`]).
    fn text(&self, n: u64) -> std::io::Result<Vec<u8>> {
        use std::io::Read;
        let mut text = Vec::new();
        std::fs::File::open(self.path(n))?
            .take(MAX_SEGMENT_BYTES)
            .read_to_end(&mut text)?;
        Ok(text)
    }

    /// A segment's complete lines, and its readings as one batch: lines
    /// that do not parse are skipped, and so are readings too old for the
    /// server to keep (at `now_ms`).
    fn read(&self, n: u64, now_ms: i64) -> std::io::Result<(usize, ReadingBatch)> {
        let text = self.text(n)?;
        let mut batch = ReadingBatch {
            readings: Vec::new(),
            xids: Vec::new(),
            pods: None,
        };
        // A minute of margin for the trip.
        let oldest = now_ms - AGENT_MAX_AGE_MS + 60_000;
        let mut lines = 0;
        for line in text.split_inclusive(|&b| b == b'\n') {
            if line.last() != Some(&b'\n') {
                break;
            }
            lines += 1;
            if let Ok(one) = serde_json::from_slice::<ReadingBatch>(line) {
                batch
                    .readings
                    .extend(one.readings.into_iter().filter(|r| r.t_ms >= oldest));
                batch
                    .xids
                    .extend(one.xids.into_iter().filter(|x| x.t_ms >= oldest));
            }
        }
        batch.xids.truncate(AGENT_MAX_XIDS);
        Ok((lines, batch))
    }

    /// The oldest segment to send: its number, its lines, its readings.
    /// Unreadable segments, and those with nothing left to send, are
    /// dropped on the way.
    fn oldest(&mut self, now_ms: i64) -> Option<(u64, usize, ReadingBatch)> {
        while let Some(&n) = self.segments.front() {
            match self.read(n, now_ms) {
                Ok((lines, batch)) if !batch.readings.is_empty() => return Some((n, lines, batch)),
                Ok((lines, _)) => self.forget(n, lines),
                Err(e) => {
                    tracing::warn!(error = %e, "an unreadable spool segment is dropped");
                    self.forget(n, usize::MAX);
                }
            }
            // The newest segment, still empty (or all too old): nothing to
            // send now.
            if self.segments.front() == Some(&n) {
                return None;
            }
        }
        None
    }

    /// The server took the first `lines` of segment `n`. Readings added to
    /// it since it was read (it may have filled up meanwhile) stay, for
    /// the next send.
    fn forget(&mut self, n: u64, lines: usize) {
        let text = self.text(n).unwrap_or_default();
        let total = count_lines(&text);
        if total > lines {
            match self.drop_head(n, &text, lines) {
                Ok(kept_bytes) => {
                    if self.segments.back() == Some(&n) {
                        self.newest_lines = total - lines;
                        self.newest_bytes = kept_bytes;
                    }
                    return;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot trim a sent spool segment; it is dropped")
                }
            }
        }
        self.segments.retain(|&s| s != n);
        let _ = std::fs::remove_file(self.path(n));
        if self.segments.is_empty() {
            self.newest_lines = 0;
            self.newest_bytes = 0;
        }
    }

    /// Rewrites segment `n` (whose bytes are `text`) without its first
    /// `lines` lines; the bytes kept.
    fn drop_head(&self, n: u64, text: &[u8], lines: usize) -> std::io::Result<u64> {
        let rest: Vec<u8> = text
            .split_inclusive(|&b| b == b'\n')
            .filter(|line| line.last() == Some(&b'\n'))
            .skip(lines)
            .flatten()
            .copied()
            .collect();
        let tmp = self.dir.join(format!("segment-{n:020}.tmp"));
        std::fs::write(&tmp, &rest)?;
        std::fs::rename(tmp, self.path(n))?;
        Ok(rest.len() as u64)
    }
}

/// Complete (newline-ended) lines.
fn count_lines(text: &[u8]) -> usize {
    text.iter().filter(|&&b| b == b'\n').count()
}

fn segment_number(name: &str) -> Option<u64> {
    name.strip_prefix("segment-")?
        .strip_suffix(".jsonl")?
        .parse()
        .ok()
}

/// This process's user.
fn my_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").map_or(u32::MAX, |m| m.uid())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Now" in these tests; readings are numbered by milliseconds before
    /// it is far from the age limit.
    const NOW: i64 = 1_800_000_000_000;

    fn reading(t_ms: i64) -> Reading {
        Reading {
            t_ms: NOW - 1_000_000 + t_ms,
            gpus: Vec::new(),
        }
    }

    fn times(batch: &ReadingBatch) -> Vec<i64> {
        batch
            .readings
            .iter()
            .map(|r| r.t_ms - (NOW - 1_000_000))
            .collect()
    }

    #[test]
    fn a_pod_listed_twice_is_sent_once_with_both_its_gpus() {
        let gpus: BTreeMap<u32, String> = (0..4).map(|i| (i, format!("GPU-{i}"))).collect();
        let listed = |namespace: &str, pod: &str, ids: &[&str]| PodDevices {
            namespace: namespace.to_owned(),
            pod: pod.to_owned(),
            device_ids: ids.iter().map(|s| s.to_string()).collect(),
        };
        let pods = pod_gpus(
            vec![
                listed("ml", "db-0", &["GPU-1"]),
                listed("ml", "web", &[]),
                listed("ml", "other", &["MIG-x"]),
                listed("ml", "db-0", &["GPU-2", "GPU-1"]),
                listed("team", "db-0", &["3"]),
            ],
            &gpus,
        );
        let said: Vec<(&str, &str, Vec<&str>)> = pods
            .iter()
            .map(|p| {
                let uuids = p.uuids.iter().map(String::as_str).collect();
                (p.namespace.as_str(), p.pod.as_str(), uuids)
            })
            .collect();
        assert_eq!(
            said,
            [
                ("ml", "db-0", vec!["GPU-1", "GPU-2"]),
                ("team", "db-0", vec!["GPU-3"])
            ]
        );
        let batch = ReadingBatch {
            readings: Vec::new(),
            xids: Vec::new(),
            pods: Some(pods),
        };
        assert!(batch.check(0).is_ok());
        // At most what a batch may carry.
        let many = (0..AGENT_MAX_PODS + 10)
            .map(|i| listed("ml", &format!("p-{i}"), &["GPU-0"]))
            .collect();
        assert_eq!(pod_gpus(many, &gpus).len(), AGENT_MAX_PODS);
    }

    #[test]
    fn readings_added_while_a_segment_is_sent_stay_for_the_next_send() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(&dir.path().join("spool"), 4).unwrap();
        spool.push(&reading(1), &[]).unwrap();
        spool.push(&reading(2), &[]).unwrap();
        let (n, lines, batch) = spool.oldest(NOW).unwrap();
        assert_eq!((lines, times(&batch)), (2, vec![1, 2]));
        // A sample comes in while the batch is on its way.
        spool.push(&reading(3), &[]).unwrap();
        spool.forget(n, lines);
        let (_, lines, batch) = spool.oldest(NOW).unwrap();
        assert_eq!((lines, times(&batch)), (1, vec![3]));
        assert_eq!(spool.len(), 1);
        spool.forget(n, lines);
        assert!(spool.oldest(NOW).is_none());
        assert_eq!(spool.len(), 0);
    }

    #[test]
    fn a_segment_that_fills_up_while_it_is_sent_keeps_its_new_readings() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(&dir.path().join("spool"), 4).unwrap();
        let almost = SEGMENT_READINGS as i64 - 2;
        for t in 0..almost {
            spool.push(&reading(t), &[]).unwrap();
        }
        let (n, lines, _) = spool.oldest(NOW).unwrap();
        // Meanwhile the segment fills and the next one starts.
        for t in almost..almost + 3 {
            spool.push(&reading(t), &[]).unwrap();
        }
        spool.forget(n, lines);
        let (m, lines, batch) = spool.oldest(NOW).unwrap();
        assert_eq!(m, n);
        assert_eq!(times(&batch), vec![almost, almost + 1]);
        spool.forget(m, lines);
        let (_, _, batch) = spool.oldest(NOW).unwrap();
        assert_eq!(times(&batch), vec![almost + 2]);
    }

    #[test]
    fn a_line_cut_short_by_a_crash_is_dropped_and_the_rest_sent() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let mut spool = Spool::open(&path, 4).unwrap();
        spool.push(&reading(1), &[]).unwrap();
        let file = spool.path(1);
        drop(spool);
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .open(&file)
            .unwrap();
        f.write_all(br#"{"readings":[{"t_ms":12"#).unwrap();
        let mut again = Spool::open(&path, 4).unwrap();
        assert_eq!(again.len(), 1);
        again.push(&reading(2), &[]).unwrap();
        let (n, lines, batch) = again.oldest(NOW).unwrap();
        assert_eq!((lines, times(&batch)), (2, vec![1, 2]));
        again.forget(n, lines);
        assert!(again.oldest(NOW).is_none());
    }

    #[test]
    fn readings_too_old_for_the_server_are_not_sent() {
        let dir = tempfile::tempdir().unwrap();
        let mut spool = Spool::open(&dir.path().join("spool"), 4).unwrap();
        spool.push(&reading(1), &[]).unwrap();
        let later = NOW + AGENT_MAX_AGE_MS;
        assert!(spool.oldest(later).is_none());
        assert_eq!(spool.len(), 0);
    }

    #[test]
    fn a_full_spool_drops_its_oldest_segments_and_a_restart_picks_up_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("spool");
        let mut spool = Spool::open(&path, 2).unwrap();
        let total = 3 * SEGMENT_READINGS as i64 + 5;
        for t in 0..total {
            spool.push(&reading(t), &[]).unwrap();
        }
        // Two segments kept: the last full one and the 5 after it.
        assert_eq!(spool.len(), SEGMENT_READINGS + 5);
        drop(spool);
        let mut again = Spool::open(&path, 2).unwrap();
        assert_eq!(again.len(), SEGMENT_READINGS + 5);
        let (n, lines, batch) = again.oldest(NOW).unwrap();
        assert_eq!(batch.readings.len(), SEGMENT_READINGS);
        assert_eq!(times(&batch)[0], 2 * SEGMENT_READINGS as i64);
        again.forget(n, lines);
        // The newest segment goes on filling where it stopped.
        again.push(&reading(total), &[]).unwrap();
        let (_, lines, batch) = again.oldest(NOW).unwrap();
        assert_eq!(lines, 6);
        assert_eq!(*times(&batch).last().unwrap(), total);
    }

    #[test]
    fn a_spool_others_can_write_or_a_link_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let open = dir.path().join("open");
        std::fs::create_dir(&open).unwrap();
        std::fs::set_permissions(&open, std::fs::Permissions::from_mode(0o777)).unwrap();
        assert!(Spool::open(&open, 1).is_err());
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path(), &link).unwrap();
        assert!(Spool::open(&link, 1).is_err());
    }
}
