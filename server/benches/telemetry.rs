//! `make bench-telemetry`: GPU telemetry at cluster scale, against the real
//! server (in this process, on loopback) and a database of its own.
//!
//! 1. **The simulated day.** `BENCH_NODES` nodes of `BENCH_GPUS` GPUs
//!    (1,000 × 8) are registered, and `BENCH_HOURS` hours (24) of samples
//!    at 10 s are written the way the server stores them (a row per node
//!    and hour, then compaction into the tiers), ending now. The first node
//!    also gets the six days before, so that its week is whole. Printed:
//!    samples written per second and bytes on disk per sample.
//! 2. **Drawing.** The admin page's 24-hour heatmap of every GPU (SVG and
//!    PNG, as the page asks for it) and a node's week of per-GPU
//!    utilization (SVG, and the JSON series), each timed over HTTP.
//! 3. **Sustained ingest.** Every node's agent sends one reading (all its
//!    GPUs) per request, with its own node token, as agents do, from
//!    `BENCH_CLIENTS` connections for `BENCH_SECONDS`; the server compacts
//!    on its own schedule meanwhile. Then what is still waiting is folded
//!    into the tiers, and the rate counts both: samples / (sending time +
//!    the rest of compaction).
//!
//! The reference figures are the targets of issue 18: ingest at 10× what
//! 1,000 nodes of 8 GPUs sampled every 10 s send (8,000 samples/s), the
//! heatmap in 300 ms, a node's week in 100 ms.
//!
//! `BENCH_DATABASE_URL` runs it on PostgreSQL (an empty database); the
//! default is SQLite in a temporary folder.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use trainyard::config::{self, Overrides};
use trainyard_domain::telemetry::{GpuProcess, GpuSample, Reading};
use trainyard_store::{GpuInfo, Store};

const SECOND: i64 = 1_000;
const HOUR: i64 = 3_600 * SECOND;
const DAY: i64 = 24 * HOUR;
const PERIOD: i64 = 10 * SECOND;
/// What compaction folds in one transaction (the server's own figure).
const COMPACT_ROWS: usize = 100_000;

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}: `{v}` is not a number")),
        Err(_) => default,
    }
}

fn main() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    runtime.block_on(bench());
}

struct Options {
    nodes: usize,
    gpus: usize,
    hours: i64,
    seconds: u64,
    clients: usize,
}

async fn bench() {
    let o = Options {
        nodes: env_or("BENCH_NODES", 1_000usize).max(1),
        gpus: env_or("BENCH_GPUS", 8usize).clamp(1, 64),
        hours: env_or("BENCH_HOURS", 24i64).clamp(1, 47),
        seconds: env_or("BENCH_SECONDS", 60u64).max(1),
        clients: env_or("BENCH_CLIENTS", 32usize).max(1),
    };
    let work = tempfile::tempdir().expect("a temporary folder");
    let url = std::env::var("BENCH_DATABASE_URL")
        .unwrap_or_else(|_| format!("sqlite://{}/trainyard.db", work.path().display()));
    let engine = if url.starts_with("sqlite:") {
        "SQLite"
    } else {
        "PostgreSQL"
    };
    println!(
        "GPU telemetry: {} nodes x {} GPUs, {} h of samples every 10 s, {engine}",
        o.nodes, o.gpus, o.hours
    );

    // 1. The simulated day, written before the server starts (SQLite takes
    // one writer).
    let store = Store::connect(&url, 4).await.expect("the database");
    store.migrate().await.expect("migrations");
    let nodes = register(&store, &o).await;
    let now = trainyard_store::now_millis() / PERIOD * PERIOD;
    let day_from = now - o.hours * HOUR;
    let started = Instant::now();
    let mut written = 0u64;
    // The first node's week before the day, then the day of every node.
    written += fill(&store, &nodes[..1], now - 7 * DAY, day_from).await;
    written += fill(&store, &nodes, day_from, now).await;
    let fill_secs = started.elapsed().as_secs_f64();
    let disk = disk_bytes(&store).await;
    drop(store);
    println!(
        "  written and compacted: {written} samples in {fill_secs:.0} s ({:.0} samples/s)",
        written as f64 / fill_secs
    );
    print_disk(&disk, written);

    // 2. The server, and what an admin's page asks of it.
    let server = Running::start(&url, work.path()).await;
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(o.clients)
        .timeout(Duration::from_secs(120))
        .build()
        .expect("an HTTP client");
    let base = format!("http://{}", server.addr);
    println!("drawing (over HTTP, median of 5, slowest beside it):");
    let heat = timed(
        &http,
        &format!("{base}/api/trainyard/v1/gpus/heatmap?window=24h&width=1200&format=svg"),
        5,
    )
    .await;
    row("  24 h heatmap of every GPU, SVG", &heat, 300.0);
    let heat_png = timed(
        &http,
        &format!("{base}/api/trainyard/v1/gpus/heatmap?window=24h&width=1200&format=png"),
        5,
    )
    .await;
    row("  24 h heatmap of every GPU, PNG", &heat_png, 300.0);
    let node = &nodes[0].name;
    let week = timed(&http, &format!("{base}/api/trainyard/v1/nodes/{node}/gpus/chart?quantity=utilization&window=7d&format=svg"), 5).await;
    row("  a node's week, utilization SVG", &week, 100.0);
    let week_json = timed(
        &http,
        &format!("{base}/api/trainyard/v1/nodes/{node}/gpus?window=7d"),
        5,
    )
    .await;
    row("  a node's week, JSON series", &week_json, 100.0);

    // 3. Sustained ingest, every node's agent with its own token.
    let mut tokens = Vec::with_capacity(nodes.len());
    for n in &nodes {
        let made = http
            .post(format!("{base}/api/trainyard/v1/nodes/{}/tokens", n.name))
            .send()
            .await
            .expect("a node token");
        assert_eq!(made.status(), 201, "making a node token");
        let body: serde_json::Value = made.json().await.expect("a token answer");
        tokens.push(body["secret"].as_str().expect("a secret").to_owned());
    }
    let sent = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let nodes = Arc::new(nodes);
    let tokens = Arc::new(tokens);
    // Readings from 47 hours back, 10 s apart per node: inside what the
    // server takes, and clear of the simulated day's blocks.
    let base_t = now - 47 * HOUR;
    let started = Instant::now();
    let mut workers = Vec::new();
    for w in 0..o.clients.min(nodes.len()) {
        let (http, base, nodes, tokens, sent, stop) = (
            http.clone(),
            base.clone(),
            nodes.clone(),
            tokens.clone(),
            sent.clone(),
            stop.clone(),
        );
        let clients = o.clients.min(nodes.len());
        workers.push(tokio::spawn(async move {
            let mut step = 0i64;
            let mut errors = 0u64;
            'send: loop {
                for i in (w..nodes.len()).step_by(clients) {
                    if stop.load(Ordering::Relaxed) {
                        break 'send;
                    }
                    let n = &nodes[i];
                    let t_ms = base_t + step * PERIOD;
                    let reading = Reading {
                        t_ms,
                        gpus: n.sample_all(t_ms, true),
                    };
                    let answer = http
                        .post(format!("{base}/api/trainyard/v1/agent/readings"))
                        .bearer_auth(&tokens[i])
                        .json(&serde_json::json!({ "readings": [reading] }))
                        .send()
                        .await;
                    match answer {
                        Ok(r) if r.status().is_success() => {
                            sent.fetch_add(n.gpus.len() as u64, Ordering::Relaxed);
                        }
                        Ok(r) => {
                            errors += 1;
                            if errors <= 3 {
                                eprintln!(
                                    "  refused: {} {}",
                                    r.status(),
                                    r.text().await.unwrap_or_default()
                                );
                            }
                        }
                        Err(e) => {
                            errors += 1;
                            if errors <= 3 {
                                eprintln!("  failed: {e}");
                            }
                        }
                    }
                }
                step += 1;
            }
            errors
        }));
    }
    tokio::time::sleep(Duration::from_secs(o.seconds)).await;
    stop.store(true, Ordering::Relaxed);
    let mut errors = 0;
    for w in workers {
        errors += w.await.unwrap_or(0);
    }
    let send_secs = started.elapsed().as_secs_f64();
    let samples = sent.load(Ordering::Relaxed);
    drop(server);
    // What the server had not folded yet.
    let store = Store::connect(&url, 4).await.expect("the database");
    let waiting = fresh_rows(&store).await;
    let started = Instant::now();
    loop {
        let n = store
            .compact_gpu_samples(trainyard_store::now_millis(), COMPACT_ROWS)
            .await
            .expect("compaction");
        if n == 0 {
            break;
        }
    }
    let rest_secs = started.elapsed().as_secs_f64();
    let sustained = samples as f64 / (send_secs + rest_secs);
    let need = (o.nodes * o.gpus) as f64 / 10.0;
    println!(
        "ingest ({} connections, one reading of {} GPUs per request, {} nodes' tokens):",
        o.clients.min(o.nodes),
        o.gpus,
        o.nodes
    );
    println!(
        "  sent: {samples} samples in {send_secs:.1} s ({:.0} samples/s, {:.0} requests/s), {errors} refused or failed",
        samples as f64 / send_secs,
        samples as f64 / send_secs / o.gpus as f64
    );
    println!("  compaction left after sending: {waiting} rows, folded in {rest_secs:.1} s");
    println!(
        "  sustained: {sustained:.0} samples/s   target >= {:.0} (10x what {} nodes at 10 s send: {need:.0}/s)   {}",
        need * 10.0,
        o.nodes,
        verdict(sustained >= need * 10.0)
    );
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn row(what: &str, ms: &(f64, f64, usize), target_ms: f64) {
    println!(
        "{what:<36} {:>8.1} ms (slowest {:>7.1} ms, {:>7} KiB)   target <= {target_ms:.0} ms   {}",
        ms.0,
        ms.1,
        ms.2 / 1024,
        verdict(ms.0 <= target_ms)
    );
}

/// Median and slowest milliseconds of `n` GETs, and the answer's size.
async fn timed(http: &reqwest::Client, url: &str, n: usize) -> (f64, f64, usize) {
    let mut times = Vec::with_capacity(n);
    let mut size = 0;
    for _ in 0..n {
        let started = Instant::now();
        let answer = http.get(url).send().await.expect("an answer");
        let status = answer.status();
        let body = answer.bytes().await.expect("a body");
        assert!(
            status.is_success(),
            "{url}: {status} {}",
            String::from_utf8_lossy(&body)
        );
        times.push(started.elapsed().as_secs_f64() * 1e3);
        size = body.len();
    }
    times.sort_by(f64::total_cmp);
    (times[n / 2], times[n - 1], size)
}

/// A simulated node: its GPUs' ids and states.
struct Node {
    name: String,
    id: i64,
    gpus: Vec<SimGpu>,
    ids: HashMap<String, i64>,
}

struct SimGpu {
    index: u32,
    uuid: String,
    seed: u64,
}

impl Node {
    fn sample_all(&self, t_ms: i64, with_processes: bool) -> Vec<GpuSample> {
        self.gpus
            .iter()
            .map(|g| g.sample(t_ms, with_processes))
            .collect()
    }
}

fn mix(mut x: u64) -> u64 {
    // splitmix64's finalizer: a fixed, well-spread hash.
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

impl SimGpu {
    /// What a GPU of a shared cluster looks like: jobs of one to eight
    /// hours at their own level, with noise, and idle gaps between them.
    fn sample(&self, t_ms: i64, with_processes: bool) -> GpuSample {
        let slot = t_ms.div_euclid(HOUR) as u64;
        let job = mix(self.seed ^ (slot / 4).wrapping_mul(0x9e37_79b9));
        let busy = !job.is_multiple_of(5);
        let level = 55 + (job >> 8) % 45;
        let noise = mix(self.seed ^ t_ms as u64) % 11;
        let util = if busy {
            (level + noise).saturating_sub(5).min(100) as u8
        } else {
            (noise % 3) as u8
        };
        let total = 80u64 << 30;
        let used = if busy {
            (20 + (job >> 16) % 55) << 30
        } else {
            0
        };
        GpuSample {
            index: self.index,
            uuid: self.uuid.clone(),
            gpu_util: util,
            mem_util: util / 2,
            mem_used_bytes: used,
            mem_total_bytes: total,
            temperature_c: 34 + util as u32 * 45 / 100,
            power_mw: 70_000 + util as u32 * 6_300,
            power_limit_mw: 700_000,
            sm_clock_mhz: if busy { 1_980 } else { 345 },
            mem_clock_mhz: 2_619,
            ecc_corrected: Some(0),
            ecc_uncorrected: Some(0),
            processes: if busy && with_processes {
                vec![GpuProcess {
                    pid: 1_000 + (job % 30_000) as u32,
                    used_bytes: Some(used),
                }]
            } else {
                Vec::new()
            },
        }
    }
}

async fn register(store: &Store, o: &Options) -> Vec<Node> {
    let mut nodes = Vec::with_capacity(o.nodes);
    for n in 0..o.nodes {
        let name = format!("gpu-node-{n:04}");
        let gpus: Vec<SimGpu> = (0..o.gpus)
            .map(|i| SimGpu {
                index: i as u32,
                uuid: format!("GPU-bench-{n:04}-{i}"),
                seed: mix((n * 64 + i) as u64 + 1),
            })
            .collect();
        let infos: Vec<GpuInfo> = gpus
            .iter()
            .map(|g| GpuInfo {
                index: g.index,
                uuid: g.uuid.clone(),
                name: "NVIDIA H100 80GB HBM3".to_owned(),
                memory_total_bytes: 80 << 30,
            })
            .collect();
        let id = store.register_node(&name, &infos).await.expect("a node");
        nodes.push(Node {
            name,
            id,
            gpus,
            ids: HashMap::new(),
        });
    }
    for g in store.gpu_inventory().await.expect("the GPUs") {
        if let Some(n) = nodes.iter_mut().find(|n| n.id == g.node_id) {
            n.ids.insert(g.uuid, g.id);
        }
    }
    nodes
}

/// Writes `[from, to)` for these nodes an hour at a time, each hour folded
/// into the tiers as the server does, as of that hour's end.
async fn fill(store: &Store, nodes: &[Node], from: i64, to: i64) -> u64 {
    let mut written = 0u64;
    let mut hour = from;
    let mut shown = Instant::now();
    while hour < to {
        let end = (hour + HOUR).min(to);
        for n in nodes {
            let readings: Vec<Reading> = (0..)
                .map(|k| hour + k * PERIOD)
                .take_while(|t| *t < end)
                .map(|t_ms| Reading {
                    t_ms,
                    gpus: n.sample_all(t_ms, false),
                })
                .collect();
            written += store
                .write_gpu_readings(n.id, &n.ids, &readings, &[])
                .await
                .expect("samples written") as u64;
        }
        loop {
            let folded = store
                .compact_gpu_samples(end, COMPACT_ROWS)
                .await
                .expect("compaction");
            if folded == 0 {
                break;
            }
        }
        hour = end;
        if shown.elapsed() > Duration::from_secs(30) {
            shown = Instant::now();
            println!(
                "  ... {written} samples, up to {:.1} h before now",
                (to - hour) as f64 / HOUR as f64
            );
        }
    }
    written
}

/// The telemetry tables' bytes: (what, bytes) rows.
async fn disk_bytes(store: &Store) -> Vec<(String, u64)> {
    use sea_orm::ConnectionTrait;
    let db = store.connection();
    let backend = db.get_database_backend();
    let one = |sql: &str| sea_orm::Statement::from_string(backend, sql.to_owned());
    let mut out = Vec::new();
    for row in db
        .query_all_raw(one(
            "SELECT tier, COUNT(*) AS blocks, CAST(SUM(LENGTH(payload)) AS BIGINT) AS bytes FROM gpu_series GROUP BY tier ORDER BY tier",
        ))
        .await
        .expect("tier sizes")
    {
        let tier: i32 = row.try_get::<i16>("", "tier").map(i32::from).or_else(|_| row.try_get::<i32>("", "tier")).unwrap_or(-1);
        let blocks: i64 = row.try_get("", "blocks").unwrap_or(0);
        let bytes: i64 = row.try_get("", "bytes").unwrap_or(0);
        let name = match tier {
            0 => "raw 10 s samples",
            1 => "5-minute buckets",
            2 => "hourly buckets",
            3 => "5-minute heat strips",
            4 => "hourly heat strips",
            _ => "other",
        };
        out.push((format!("payload, {name} ({blocks} blocks)"), bytes.max(0) as u64));
    }
    let total = match backend {
        sea_orm::DatabaseBackend::Sqlite => {
            db.execute_unprepared("PRAGMA wal_checkpoint(TRUNCATE)")
                .await
                .expect("a checkpoint");
            let row = db
                .query_one_raw(one(
                    "SELECT page_count * page_size AS bytes FROM pragma_page_count(), pragma_page_size()",
                ))
                .await
                .expect("the file size")
                .expect("a row");
            (
                "database file, all tables and indexes".to_owned(),
                row.try_get::<i64>("", "bytes").unwrap_or(0),
            )
        }
        _ => {
            let row = db
                .query_one_raw(one(
                    "SELECT pg_total_relation_size('gpu_series') + pg_total_relation_size('gpu_fresh') AS bytes",
                ))
                .await
                .expect("the table size")
                .expect("a row");
            (
                "gpu_series and gpu_fresh with indexes and TOAST".to_owned(),
                row.try_get::<i64>("", "bytes").unwrap_or(0),
            )
        }
    };
    out.push((total.0, total.1.max(0) as u64));
    out
}

fn print_disk(rows: &[(String, u64)], samples: u64) {
    println!("  on disk ({samples} samples):");
    for (what, bytes) in rows {
        println!(
            "    {what:<52} {:>10.1} MiB  {:>6.2} bytes per sample",
            *bytes as f64 / (1u64 << 20) as f64,
            *bytes as f64 / samples.max(1) as f64
        );
    }
}

async fn fresh_rows(store: &Store) -> i64 {
    use sea_orm::ConnectionTrait;
    let db = store.connection();
    let row = db
        .query_one_raw(sea_orm::Statement::from_string(
            db.get_database_backend(),
            "SELECT COUNT(*) AS n FROM gpu_fresh".to_owned(),
        ))
        .await
        .expect("a count")
        .expect("a row");
    row.try_get("", "n").unwrap_or(0)
}

/// The server, in this process, until dropped.
struct Running {
    addr: std::net::SocketAddr,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    async fn start(url: &str, work: &std::path::Path) -> Running {
        // From cargo as it runs the bench (see tests/it/common.rs's workspace_root).
        let root = std::env::var_os("CARGO_MANIFEST_DIR")
            .map_or_else(
                || env!("CARGO_MANIFEST_DIR").into(),
                std::path::PathBuf::from,
            )
            .join("..");
        let vars = vec![
            ("TRAINYARD_LISTEN".to_owned(), "127.0.0.1:0".to_owned()),
            ("TRAINYARD_DATABASE_URL".to_owned(), url.to_owned()),
            (
                "TRAINYARD_DATA_DIR".to_owned(),
                work.join("data").display().to_string(),
            ),
            (
                "TRAINYARD_SITE_DIR".to_owned(),
                root.join("target/site").display().to_string(),
            ),
            (
                "TRAINYARD_TEMPLATES_DIR".to_owned(),
                root.join("templates").display().to_string(),
            ),
            ("TRAINYARD_JOB_UIDS".to_owned(), "none".to_owned()),
        ];
        let config = config::load_from(None, &Overrides::default(), &vars).expect("a config");
        let server = trainyard::Server::bind(&config).await.expect("the server");
        let addr = server.local_addr().expect("an address");
        let task = tokio::spawn(async move {
            if let Err(e) = server.run().await {
                eprintln!("the server stopped: {e}");
            }
        });
        Running { addr, task }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}
