//! GPU telemetry in the database: ingest, compaction into tiers, reads and
//! pruning, on SQLite and (with TEST_DATABASE_URL) PostgreSQL.

use std::collections::HashMap;

use trainyard_domain::telemetry::{GpuSample, Reading, XidEvent};

use crate::{GpuInfo, Store};
use trainyard_test_db::TestDb;

const T0: i64 = 1_800_000_000_000 - 1_800_000_000_000 % 86_400_000;

async fn migrated(db: &TestDb) -> Store {
    let store = Store::connect(&db.url, 4).await.expect("connect");
    store.migrate().await.expect("migrate");
    store
}

fn gpu(index: u32) -> GpuInfo {
    GpuInfo {
        index,
        uuid: format!("GPU-n1-{index}"),
        name: "Simulated GPU".into(),
        memory_total_bytes: 80 << 30,
    }
}

fn sample(index: u32, util: u8) -> GpuSample {
    GpuSample {
        index,
        uuid: format!("GPU-n1-{index}"),
        gpu_util: util,
        mem_util: util / 2,
        mem_used_bytes: (util as u64) << 28,
        mem_total_bytes: 80 << 30,
        temperature_c: 30 + util as u32 / 2,
        power_mw: 60_000 + util as u32 * 3_000,
        power_limit_mw: 400_000,
        sm_clock_mhz: 1980,
        mem_clock_mhz: 2619,
        ecc_corrected: Some(0),
        ecc_uncorrected: Some(0),
        processes: Vec::new(),
    }
}

/// A node with two GPUs: GPU 0 busy at 80 %, GPU 1 idle, sampled every 10 s
/// for `minutes` from `start`.
fn readings(start: i64, minutes: i64) -> Vec<Reading> {
    (0..minutes * 6)
        .map(|i| Reading {
            t_ms: start + i * 10_000,
            gpus: vec![sample(0, 80), sample(1, 0)],
        })
        .collect()
}

async fn node(store: &Store) -> (i64, HashMap<String, i64>) {
    let node_id = store.register_node("n1", &[gpu(0), gpu(1)]).await.unwrap();
    let ids = store
        .gpu_inventory()
        .await
        .unwrap()
        .into_iter()
        .map(|g| (g.uuid, g.id))
        .collect();
    (node_id, ids)
}

#[tokio::test]
async fn registering_again_keeps_gpu_ids_and_follows_the_hardware() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let (node_id, ids) = node(&store).await;
    // GPU 1 is swapped for a new card; GPU 0 keeps its id.
    let mut new = gpu(1);
    new.uuid = "GPU-n1-new".into();
    assert_eq!(
        store.register_node("n1", &[gpu(0), new]).await.unwrap(),
        node_id
    );
    let after = store.gpu_inventory().await.unwrap();
    assert_eq!(after.len(), 2);
    assert_eq!(after[0].id, ids["GPU-n1-0"]);
    assert_eq!(after[0].node, "n1");
    assert_eq!(after[1].uuid, "GPU-n1-new");
    assert_ne!(after[1].id, ids["GPU-n1-1"]);
}

#[tokio::test]
async fn samples_are_read_before_and_after_compaction_alike() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let (node_id, ids) = node(&store).await;
    let busy = ids["GPU-n1-0"];
    let idle = ids["GPU-n1-1"];
    // Ten minutes in five batches, as an agent sends them.
    let all = readings(T0, 10);
    for batch in all.chunks(12) {
        assert_eq!(
            store
                .write_gpu_readings(node_id, &ids, batch, &[])
                .await
                .unwrap(),
            24
        );
    }
    let now = T0 + 10 * 60_000;
    let before = store
        .gpu_series(&[busy, idle], T0, now, now, 1000)
        .await
        .unwrap();
    assert_eq!(before[&busy].len(), 60, "every raw sample: {before:?}");
    assert!(before[&busy].iter().all(|p| p.gpu_util == 80.0));
    assert!(before[&idle].iter().all(|p| p.gpu_util == 0.0));

    // Five rows of 24 samples (36 bytes each): passes stop at their row
    // count or their bytes, whichever comes first, and take one row at least.
    let row = 24 * 36;
    assert_eq!(
        store.compact_gpu_samples_within(now, 100, 1).await.unwrap(),
        1
    );
    assert_eq!(
        store
            .compact_gpu_samples_within(now, 100, row + row / 2)
            .await
            .unwrap(),
        1
    );
    assert_eq!(store.compact_gpu_samples(now, 2).await.unwrap(), 2);
    assert_eq!(store.compact_gpu_samples(now, 100).await.unwrap(), 1);
    assert_eq!(store.compact_gpu_samples(now, 100).await.unwrap(), 0);
    let after = store
        .gpu_series(&[busy, idle], T0, now, now, 1000)
        .await
        .unwrap();
    assert_eq!(after, before, "compaction changes nothing a reader sees");

    // Fewer buckets: folds of 10 samples each.
    let folded = store.gpu_series(&[busy], T0, now, now, 6).await.unwrap();
    assert_eq!(folded[&busy].len(), 6);
    assert!(
        folded[&busy]
            .iter()
            .all(|p| p.count == 10 && p.gpu_util == 80.0)
    );
    // A GPU nobody asked for is not read.
    assert!(!folded.contains_key(&idle));
}

#[tokio::test]
async fn late_samples_merge_into_their_buckets_and_replace_duplicates() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let (node_id, ids) = node(&store).await;
    let busy = ids["GPU-n1-0"];
    let first = readings(T0, 5);
    store
        .write_gpu_readings(node_id, &ids, &first, &[])
        .await
        .unwrap();
    store.compact_gpu_samples(T0 + DAY, 100).await.unwrap();
    // The agent comes back with the same five minutes again (it did not
    // hear the answer) and the five after them.
    let mut again = readings(T0, 10);
    for r in again.iter_mut().skip(30) {
        r.gpus[0].gpu_util = 40;
    }
    store
        .write_gpu_readings(node_id, &ids, &again, &[])
        .await
        .unwrap();
    store.compact_gpu_samples(T0 + DAY, 100).await.unwrap();
    let now = T0 + DAY;
    let raw = store
        .gpu_series(&[busy], T0, T0 + 10 * 60_000, now, 1000)
        .await
        .unwrap();
    assert_eq!(raw[&busy].len(), 60, "no sample twice");
    // Read three days on: the raw tier is gone from reach, the 5-minute one
    // answers with one bucket per five minutes.
    let later = T0 + 3 * DAY;
    let buckets = store
        .gpu_series(&[busy], T0, T0 + 10 * 60_000, later, 1000)
        .await
        .unwrap();
    let utils: Vec<(u32, f32)> = buckets[&busy]
        .iter()
        .map(|p| (p.count, p.gpu_util))
        .collect();
    assert_eq!(utils, vec![(30, 80.0), (30, 40.0)]);
    // A week on, the hourly tier: one bucket of all sixty.
    let hourly = store
        .gpu_series(&[busy], T0, T0 + 10 * 60_000, T0 + 40 * DAY, 1000)
        .await
        .unwrap();
    assert_eq!(hourly[&busy].len(), 1);
    assert_eq!(hourly[&busy][0].count, 60);
    assert_eq!(hourly[&busy][0].gpu_util, 60.0);
    assert_eq!(hourly[&busy][0].gpu_util_max, 80.0);
}

const DAY: i64 = 86_400_000;

#[tokio::test]
async fn the_heatmap_reads_strips_and_the_samples_not_yet_compacted() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let (node_id, ids) = node(&store).await;
    let (busy, idle) = (ids["GPU-n1-0"], ids["GPU-n1-1"]);
    // An hour compacted, then ten minutes waiting.
    store
        .write_gpu_readings(node_id, &ids, &readings(T0, 60), &[])
        .await
        .unwrap();
    store
        .compact_gpu_samples(T0 + 60 * 60_000, 100)
        .await
        .unwrap();
    let mut recent = readings(T0 + 60 * 60_000, 10);
    for r in &mut recent {
        r.gpus[1].gpu_util = 50;
    }
    store
        .write_gpu_readings(node_id, &ids, &recent, &[])
        .await
        .unwrap();
    let now = T0 + 70 * 60_000;
    let heat = store.gpu_heat(T0, now, now, 14).await.unwrap();
    let rows: HashMap<i64, Vec<Option<f32>>> = heat.rows.into_iter().collect();
    assert_eq!(rows.len(), 2);
    assert!(
        rows[&busy].iter().all(|c| *c == Some(80.0)),
        "{:?}",
        rows[&busy]
    );
    // The idle GPU: zero for the compacted hour, 50 % in the last columns.
    let idle_row = &rows[&idle];
    assert!(
        idle_row[..12].iter().all(|c| *c == Some(0.0)),
        "{idle_row:?}"
    );
    assert!(
        idle_row[12..].iter().all(|c| *c == Some(50.0)),
        "{idle_row:?}"
    );
    // Before any sample: empty columns.
    let early = store.gpu_heat(T0 - DAY, T0 - 1, now, 10).await.unwrap();
    assert!(
        early
            .rows
            .iter()
            .all(|(_, cells)| cells.iter().all(Option::is_none))
    );
}

#[tokio::test]
async fn pruning_drops_each_tier_past_its_age_and_xids_are_kept() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let (node_id, ids) = node(&store).await;
    let busy = ids["GPU-n1-0"];
    let xid = XidEvent {
        t_ms: T0 + 1000,
        uuid: "GPU-n1-0".into(),
        code: Some(79),
    };
    let stranger = XidEvent {
        t_ms: T0,
        uuid: "GPU-other-node".into(),
        code: Some(13),
    };
    store
        .write_gpu_readings(node_id, &ids, &readings(T0, 5), &[xid, stranger])
        .await
        .unwrap();
    assert_eq!(
        store.gpu_xids(&[busy, ids["GPU-n1-1"]], T0).await.unwrap(),
        vec![(busy, T0 + 1000, Some(79))],
        "another node's GPU is not this agent's to report"
    );
    store.compact_gpu_samples(T0 + 60_000, 100).await.unwrap();
    // Three days on the raw blocks (one per GPU) go; the buckets stay.
    assert_eq!(store.prune_gpu_samples(T0 + 3 * DAY).await.unwrap(), 2);
    let series = store
        .gpu_series(&[busy], T0, T0 + 5 * 60_000, T0 + 3 * DAY, 100)
        .await
        .unwrap();
    assert_eq!(series[&busy].len(), 1);
    // Past a year nothing stays: four tiers of buckets for each GPU.
    assert_eq!(store.prune_gpu_samples(T0 + 400 * DAY).await.unwrap(), 8);
    assert!(store.gpu_xids(&[busy], 0).await.unwrap().is_empty());
    // Samples older than the raw tier's age are not folded in.
    store
        .write_gpu_readings(node_id, &ids, &readings(T0, 1), &[])
        .await
        .unwrap();
    store.compact_gpu_samples(T0 + 10 * DAY, 100).await.unwrap();
    let none = store
        .gpu_series(&[busy], T0, T0 + 60_000, T0 + 10 * DAY, 100)
        .await
        .unwrap();
    assert!(none.get(&busy).is_none_or(Vec::is_empty), "{none:?}");
}

/// A drain is kept by node name (a node no agent registered included),
/// replaced by a new one, named with its admin, and ended by a resume.
#[tokio::test]
async fn nodes_are_drained_redrained_and_resumed() {
    let (_db, store) = crate::test_support::store().await;
    let ana = crate::test_support::person(&store, "ana", &[]).await;
    assert!(store.node_drains().await.unwrap().is_empty());
    let first = store
        .drain_node("gpu-7", "driver update", false, Some(ana.id))
        .await
        .unwrap();
    assert_eq!(
        (first.node.as_str(), first.reason.as_str(), first.stop_jobs),
        ("gpu-7", "driver update", false)
    );
    assert_eq!(first.by.as_deref(), Some("ana"));
    assert!(first.since > 0);
    store.drain_node("gpu-2", "fan", false, None).await.unwrap();
    let again = store
        .drain_node("gpu-7", "GPU 3 has XID 79", true, Some(ana.id))
        .await
        .unwrap();
    assert!(again.stop_jobs);
    let drains = store.node_drains().await.unwrap();
    let listed: Vec<(&str, &str, Option<&str>)> = drains
        .iter()
        .map(|d| (d.node.as_str(), d.reason.as_str(), d.by.as_deref()))
        .collect();
    assert_eq!(
        listed,
        [
            ("gpu-2", "fan", None),
            ("gpu-7", "GPU 3 has XID 79", Some("ana"))
        ]
    );
    assert!(store.resume_node("gpu-7").await.unwrap());
    assert!(!store.resume_node("gpu-7").await.unwrap());
    let left: Vec<String> = store
        .node_drains()
        .await
        .unwrap()
        .into_iter()
        .map(|d| d.node)
        .collect();
    assert_eq!(left, ["gpu-2"]);
}
