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

use std::collections::HashMap;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

use trainyard_domain::telemetry::{
    AgentAnswer, AgentGpu, AgentRegistration, Reading, ReadingBatch, XidEvent,
};
use trainyard_nvml::{Inventory, Load, Sampler};

use crate::cli::CliError;

/// Readings per spool segment, and so per batch sent (an hour at 10 s).
pub const SEGMENT_READINGS: usize = 360;
/// The largest segment file read back (a full one is about 1 MB for 8 GPUs).
const MAX_SEGMENT_BYTES: u64 = 16 << 20;
/// How long one request may take.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentOptions {
    pub server: String,
    pub token: String,
    pub node: String,
    pub spool: PathBuf,
    pub sample_every: Duration,
    /// GPUs to simulate where there is no driver.
    pub simulated_gpus: u32,
    /// The most segments kept while the server is away.
    pub max_segments: usize,
}

/// Runs until killed (or the token is refused for good).
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
    let mut spool = Spool::open(&options.spool, options.max_segments)?;
    let client = Client::new(&options)?;
    let sampler = SamplerThread::start(inventory.clone())?;
    let registration = registration(&options.node, &inventory);
    let mut registered = false;
    let mut loads: HashMap<u32, Load> = HashMap::new();
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
        let Some((reading, xids)) = sampler.sample(trainyard_store::now_millis(), &loads).await
        else {
            return Err(CliError("the GPU sampling thread stopped".to_owned()));
        };
        if let Err(e) = spool.push(&reading, &xids) {
            tracing::error!(error = %e, "cannot write the spool; this reading is lost");
        }
        if !registered {
            match client
                .post("/api/trainyard/v1/agent/register", &registration)
                .await
            {
                Ok(answer) => {
                    registered = true;
                    loads = held_loads(&answer);
                    tracing::info!("registered with the server");
                }
                Err(e) => {
                    tracing::warn!(error = %e, "cannot register yet; samples wait in the spool");
                    continue;
                }
            }
        }
        match spool.send(&client).await {
            Ok(Some(answer)) => loads = held_loads(&answer),
            Ok(None) => {}
            Err(SendError::NotRegistered) => registered = false,
            Err(SendError::Away(e)) => {
                tracing::warn!(error = %e, waiting = spool.len(), "the server is away; samples wait in the spool")
            }
        }
    }
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

fn held_loads(answer: &AgentAnswer) -> HashMap<u32, Load> {
    answer
        .held
        .iter()
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

/// NVML's handles stay on a thread of their own.
struct SamplerThread {
    tx: std::sync::mpsc::Sender<Tick>,
}

struct Tick {
    t_ms: i64,
    loads: HashMap<u32, Load>,
    reply: tokio::sync::oneshot::Sender<(Reading, Vec<XidEvent>)>,
}

impl SamplerThread {
    fn start(inventory: Inventory) -> Result<SamplerThread, CliError> {
        let (tx, rx) = std::sync::mpsc::channel::<Tick>();
        std::thread::Builder::new()
            .name("gpu-sampler".to_owned())
            .spawn(move || {
                let mut sampler = Sampler::new(&inventory);
                while let Ok(tick) = rx.recv() {
                    let _ = tick.reply.send(sampler.sample(tick.t_ms, &tick.loads));
                }
            })
            .map_err(|e| CliError(format!("cannot start the sampling thread: {e}")))?;
        Ok(SamplerThread { tx })
    }

    async fn sample(
        &self,
        t_ms: i64,
        loads: &HashMap<u32, Load>,
    ) -> Option<(Reading, Vec<XidEvent>)> {
        let (reply, answer) = tokio::sync::oneshot::channel();
        self.tx
            .send(Tick {
                t_ms,
                loads: loads.clone(),
                reply,
            })
            .ok()?;
        answer.await.ok()
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
}

impl Client {
    fn new(options: &AgentOptions) -> Result<Client, CliError> {
        let mut headers = reqwest::header::HeaderMap::new();
        let value =
            reqwest::header::HeaderValue::from_str(&format!("Bearer {}", options.token.trim()))
                .map_err(|_| CliError("the token holds characters a header cannot".into()))?;
        headers.insert(reqwest::header::AUTHORIZATION, value);
        let http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(Duration::from_secs(10))
            .timeout(REQUEST_TIMEOUT)
            .build()?;
        Ok(Client {
            http,
            server: options.server.trim_end_matches('/').to_owned(),
        })
    }

    async fn request(&self, path: &str, body: &impl serde::Serialize) -> Outcome {
        let sent = self
            .http
            .post(format!("{}{path}", self.server))
            .json(body)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => return Outcome::Away(format!("cannot reach {}: {e}", self.server)),
        };
        let status = response.status();
        let text = response.text().await.unwrap_or_default();
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

/// The readings not yet taken by the server, on disk.
struct Spool {
    dir: PathBuf,
    max_segments: usize,
    /// Segment numbers on disk, oldest first.
    segments: std::collections::VecDeque<u64>,
    /// Lines in the newest segment.
    newest_lines: usize,
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
        };
        if let Some(&last) = spool.segments.back() {
            spool.newest_lines = spool
                .read(last)
                .map_or(SEGMENT_READINGS, |b| b.readings.len());
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
            Some(&n) if self.newest_lines < SEGMENT_READINGS => n,
            last => {
                let n = last.map_or(1, |n| n + 1);
                self.segments.push_back(n);
                self.newest_lines = 0;
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
        })?;
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.path(newest))?;
        file.write_all(format!("{line}\n").as_bytes())?;
        self.newest_lines += 1;
        Ok(())
    }

    /// A segment's readings, as one batch; lines that do not parse (a
    /// write cut short) are skipped.
    fn read(&self, n: u64) -> std::io::Result<ReadingBatch> {
        use std::io::Read;
        let file = std::fs::File::open(self.path(n))?;
        let mut batch = ReadingBatch {
            readings: Vec::new(),
            xids: Vec::new(),
        };
        let reader = std::io::BufReader::new(file.take(MAX_SEGMENT_BYTES));
        for line in reader.lines().take(SEGMENT_READINGS) {
            if let Ok(one) = serde_json::from_str::<ReadingBatch>(&line?) {
                batch.readings.extend(one.readings);
                batch.xids.extend(one.xids);
            }
        }
        batch
            .xids
            .truncate(trainyard_domain::telemetry::AGENT_MAX_XIDS);
        Ok(batch)
    }

    /// Sends the segments, oldest first, until all are taken or the server
    /// is away. The newest answer, if any was sent.
    async fn send(&mut self, client: &Client) -> Result<Option<AgentAnswer>, SendError> {
        let mut last = None;
        while let Some(&n) = self.segments.front() {
            let batch = match self.read(n) {
                Ok(batch) => batch,
                Err(e) => {
                    tracing::warn!(error = %e, "an unreadable spool segment is dropped");
                    self.forget_oldest();
                    continue;
                }
            };
            match client
                .request("/api/trainyard/v1/agent/readings", &batch)
                .await
            {
                Outcome::Ok(answer) => {
                    last = Some(answer);
                    self.forget_oldest();
                }
                Outcome::Refused(message) => {
                    tracing::error!(message = %message, readings = batch.readings.len(), "the server refused a batch; it is dropped");
                    self.forget_oldest();
                }
                Outcome::NotRegistered => return Err(SendError::NotRegistered),
                Outcome::Away(e) => return Err(SendError::Away(e)),
            }
        }
        Ok(last)
    }

    fn forget_oldest(&mut self) {
        if let Some(n) = self.segments.pop_front() {
            let _ = std::fs::remove_file(self.path(n));
            if self.segments.is_empty() {
                self.newest_lines = 0;
            }
        }
    }
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
