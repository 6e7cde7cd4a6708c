//! GPU telemetry (see docs/gpu-telemetry.md). Readings arrive as one row per
//! batch in `gpu_fresh`; compaction folds them into per-GPU blocks of fixed
//! 28-byte records in tiers (raw samples, 5-minute and hourly buckets) and
//! into heat strips of one byte per bucket, which the cluster heatmap reads
//! without decoding the full records. Old blocks are pruned per tier.

use std::collections::{BTreeMap, HashMap, HashSet};

use sea_orm::ConnectionTrait;
use trainyard_domain::telemetry::{GpuPoint, GpuSample, Reading, XidEvent};

use crate::sql::Sql;
use crate::{Store, StoreError};

const MINUTE: i64 = 60_000;
const HOUR: i64 = 60 * MINUTE;
const DAY: i64 = 24 * HOUR;

/// A tier of stored samples: its bucket width (0: samples as taken), the
/// span of one stored block, and how long it is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Tier {
    Raw = 0,
    FiveMinutes = 1,
    Hour = 2,
    /// Mean utilization per 5 minutes, one byte each.
    HeatFiveMinutes = 3,
    /// Mean utilization per hour, one byte each.
    HeatHour = 4,
}

impl Tier {
    pub fn step_ms(self) -> i64 {
        match self {
            Tier::Raw => 0,
            Tier::FiveMinutes | Tier::HeatFiveMinutes => 5 * MINUTE,
            Tier::Hour | Tier::HeatHour => HOUR,
        }
    }

    pub fn block_ms(self) -> i64 {
        match self {
            Tier::Raw => HOUR,
            Tier::FiveMinutes | Tier::HeatFiveMinutes => DAY,
            Tier::Hour | Tier::HeatHour => 7 * DAY,
        }
    }

    pub fn keep_ms(self) -> i64 {
        match self {
            Tier::Raw => 2 * DAY,
            Tier::FiveMinutes | Tier::HeatFiveMinutes => 30 * DAY,
            Tier::Hour | Tier::HeatHour => 366 * DAY,
        }
    }

    fn block_start(self, t_ms: i64) -> i64 {
        t_ms.div_euclid(self.block_ms()) * self.block_ms()
    }

    const ALL: [Tier; 5] = [
        Tier::Raw,
        Tier::FiveMinutes,
        Tier::Hour,
        Tier::HeatFiveMinutes,
        Tier::HeatHour,
    ];
}

/// The most samples per GPU a chart read decodes from one tier; past it a
/// coarser tier is read.
const MAX_READ_RECORDS: i64 = 20_000;
/// The sample period that raw reads assume when choosing a tier.
const NOMINAL_SAMPLE_MS: i64 = 10_000;

/// Bytes of one stored record.
pub const RECORD_BYTES: usize = 28;
/// Bytes of one fresh record (the GPU's id, then the record).
const FRESH_BYTES: usize = 8 + RECORD_BYTES;
/// The most fresh payload one compaction pass folds (about 930,000
/// samples): passes as large as that rewrite each touched block once for
/// many readings, where a pass per few thousand rows rewrote every GPU's
/// blocks each time.
pub const MAX_PASS_BYTES: usize = 32 << 20;
/// A heat byte for a bucket without samples.
const NO_HEAT: u8 = 255;

/// One sample, or the fold of a bucket of them. Percentages are kept in
/// hundredths, power in tenths of a watt, memory in MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub t_ms: i64,
    pub count: u16,
    util_c: u16,
    util_max: u8,
    mem_util: u8,
    temp: u8,
    temp_max: u8,
    power_dw: u16,
    power_max_dw: u16,
    mem_mib: u32,
    sm_mhz: u16,
    mem_mhz: u16,
}

fn sat_u8(v: u64) -> u8 {
    v.min(u8::MAX as u64) as u8
}

fn sat_u16(v: u64) -> u16 {
    v.min(u16::MAX as u64) as u16
}

impl Record {
    pub fn of(t_ms: i64, s: &GpuSample) -> Record {
        let power_dw = sat_u16(s.power_mw as u64 / 100);
        let temp = sat_u8(s.temperature_c as u64);
        Record {
            t_ms,
            count: 1,
            util_c: s.gpu_util.min(100) as u16 * 100,
            util_max: s.gpu_util.min(100),
            mem_util: s.mem_util.min(100),
            temp,
            temp_max: temp,
            power_dw,
            power_max_dw: power_dw,
            mem_mib: (s.mem_used_bytes >> 20).min(u32::MAX as u64) as u32,
            sm_mhz: sat_u16(s.sm_clock_mhz as u64),
            mem_mhz: sat_u16(s.mem_clock_mhz as u64),
        }
    }

    fn encode_into(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.t_ms.to_le_bytes());
        out.extend_from_slice(&self.count.to_le_bytes());
        out.extend_from_slice(&self.util_c.to_le_bytes());
        out.extend_from_slice(&[self.util_max, self.mem_util, self.temp, self.temp_max]);
        out.extend_from_slice(&self.power_dw.to_le_bytes());
        out.extend_from_slice(&self.power_max_dw.to_le_bytes());
        out.extend_from_slice(&self.mem_mib.to_le_bytes());
        out.extend_from_slice(&self.sm_mhz.to_le_bytes());
        out.extend_from_slice(&self.mem_mhz.to_le_bytes());
    }

    fn decode(b: &[u8]) -> Record {
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[0..8]);
        Record {
            t_ms: i64::from_le_bytes(t),
            count: u16_at(8),
            util_c: u16_at(10),
            util_max: b[12],
            mem_util: b[13],
            temp: b[14],
            temp_max: b[15],
            power_dw: u16_at(16),
            power_max_dw: u16_at(18),
            mem_mib: u32::from_le_bytes([b[20], b[21], b[22], b[23]]),
            sm_mhz: u16_at(24),
            mem_mhz: u16_at(26),
        }
    }

    /// The fold of records into one bucket that starts at `t_ms`: means
    /// weighted by each record's count, maxima of the maxima.
    fn fold(t_ms: i64, records: &[Record]) -> Option<Record> {
        let n: u64 = records.iter().map(|r| r.count as u64).sum();
        if n == 0 {
            return None;
        }
        let mean = |f: fn(&Record) -> u64| {
            let sum: u64 = records.iter().map(|r| f(r) * r.count as u64).sum();
            (sum + n / 2) / n
        };
        Some(Record {
            t_ms,
            count: sat_u16(n),
            util_c: mean(|r| r.util_c as u64) as u16,
            util_max: records.iter().map(|r| r.util_max).max().unwrap_or(0),
            mem_util: mean(|r| r.mem_util as u64) as u8,
            temp: mean(|r| r.temp as u64) as u8,
            temp_max: records.iter().map(|r| r.temp_max).max().unwrap_or(0),
            power_dw: mean(|r| r.power_dw as u64) as u16,
            power_max_dw: records.iter().map(|r| r.power_max_dw).max().unwrap_or(0),
            mem_mib: records.iter().map(|r| r.mem_mib).max().unwrap_or(0),
            sm_mhz: mean(|r| r.sm_mhz as u64) as u16,
            mem_mhz: mean(|r| r.mem_mhz as u64) as u16,
        })
    }

    pub fn point(&self) -> GpuPoint {
        GpuPoint {
            t_ms: self.t_ms,
            count: self.count as u32,
            gpu_util: self.util_c as f32 / 100.0,
            gpu_util_max: self.util_max as f32,
            mem_util: self.mem_util as f32,
            mem_used_bytes: (self.mem_mib as u64) << 20,
            temperature_c: self.temp as f32,
            temperature_max_c: self.temp_max as f32,
            power_w: self.power_dw as f32 / 10.0,
            power_max_w: self.power_max_dw as f32 / 10.0,
            sm_clock_mhz: self.sm_mhz as f32,
            mem_clock_mhz: self.mem_mhz as f32,
        }
    }

    /// The heat byte of this record: utilization in half percents.
    fn heat(&self) -> u8 {
        ((self.util_c as u32 + 25) / 50).min(200) as u8
    }
}

fn encode_records(records: &[Record]) -> Vec<u8> {
    let mut out = Vec::with_capacity(records.len() * RECORD_BYTES);
    for r in records {
        r.encode_into(&mut out);
    }
    out
}

fn decode_records(bytes: &[u8]) -> Vec<Record> {
    bytes
        .chunks_exact(RECORD_BYTES)
        .map(Record::decode)
        .collect()
}

/// Puts `new` into sorted `into`, replacing records of the same time.
fn merge(into: &mut Vec<Record>, new: impl IntoIterator<Item = Record>) {
    let mut by_time: BTreeMap<i64, Record> = into.drain(..).map(|r| (r.t_ms, r)).collect();
    for r in new {
        by_time.insert(r.t_ms, r);
    }
    into.extend(by_time.into_values());
}

/// A stored block: which GPU, tier and span.
type BlockKey = (i64, Tier, i64);

/// The GPUs of one node, by UUID.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpu {
    pub id: i64,
    pub node_id: i64,
    pub node: String,
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: u64,
}

/// The cluster heatmap: for each GPU, mean utilization per column (None
/// where no sample fell in it).
#[derive(Debug, Clone, PartialEq)]
pub struct Heat {
    pub from_ms: i64,
    pub to_ms: i64,
    pub rows: Vec<(i64, Vec<Option<f32>>)>,
}

impl Store {
    /// Every GPU known, with its node, ordered by node name and index.
    pub async fn gpu_inventory(&self) -> Result<Vec<NodeGpu>, StoreError> {
        self.node_gpu_rows(None).await
    }

    /// One node's GPUs by index (none for a node unknown).
    pub async fn node_gpus(&self, node: &str) -> Result<Vec<NodeGpu>, StoreError> {
        self.node_gpu_rows(Some(node)).await
    }

    async fn node_gpu_rows(&self, node: Option<&str>) -> Result<Vec<NodeGpu>, StoreError> {
        let mut sql = Sql::new(self.connection().get_database_backend());
        sql.push(
            "SELECT g.id, g.node_id, n.name AS node, g.\"index\", g.uuid, g.name, \
             g.memory_total_bytes FROM gpus g JOIN nodes n ON n.id = g.node_id",
        );
        if let Some(node) = node {
            sql.push(" WHERE n.name = ").bind(node.to_owned());
        }
        sql.push(" ORDER BY n.name, g.\"index\"");
        let rows = self.connection().query_all_raw(sql.build()).await?;
        rows.iter()
            .map(|row| {
                Ok(NodeGpu {
                    id: row.try_get("", "id")?,
                    node_id: row.try_get("", "node_id")?,
                    node: row.try_get("", "node")?,
                    index: row.try_get::<i32>("", "index")?.max(0) as u32,
                    uuid: row.try_get("", "uuid")?,
                    name: row.try_get("", "name")?,
                    memory_total_bytes: row.try_get::<i64>("", "memory_total_bytes")?.max(0) as u64,
                })
            })
            .collect()
    }

    /// Stores a node's readings (one row, whatever their number) and its
    /// XID errors. `ids`: the node's GPUs by UUID; samples of other GPUs are
    /// left out. Returns the samples kept.
    pub async fn write_gpu_readings(
        &self,
        node_id: i64,
        ids: &HashMap<String, i64>,
        readings: &[Reading],
        xids: &[XidEvent],
    ) -> Result<usize, StoreError> {
        let mut payload = Vec::new();
        let mut t_max = i64::MIN;
        for reading in readings {
            for s in &reading.gpus {
                let Some(id) = ids.get(&s.uuid) else {
                    continue;
                };
                payload.extend_from_slice(&id.to_le_bytes());
                Record::of(reading.t_ms, s).encode_into(&mut payload);
                t_max = t_max.max(reading.t_ms);
            }
        }
        let kept = payload.len() / FRESH_BYTES;
        let xids: Vec<(i64, &XidEvent)> = xids
            .iter()
            .filter_map(|x| ids.get(&x.uuid).map(|id| (*id, x)))
            .collect();
        if kept == 0 && xids.is_empty() {
            return Ok(0);
        }
        let backend = self.connection().get_database_backend();
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        if kept > 0 {
            let mut sql = Sql::new(backend);
            sql.push("INSERT INTO gpu_fresh (node_id, t_ms, payload) VALUES (")
                .bind(node_id)
                .push(", ")
                .bind(t_max)
                .push(", ")
                .bind(payload)
                .push(")");
            txn.execute_raw(sql.build()).await?;
        }
        for chunk in xids.chunks(200) {
            let mut sql = Sql::new(backend);
            sql.push("INSERT INTO gpu_xids (gpu_id, t_ms, code) VALUES ");
            for (i, (id, x)) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.push("(")
                    .bind(*id)
                    .push(", ")
                    .bind(x.t_ms)
                    .push(", ")
                    .bind(x.code.map(|c| c.min(i64::MAX as u64) as i64))
                    .push(")");
            }
            txn.execute_raw(sql.build()).await?;
        }
        txn.commit().await?;
        Ok(kept)
    }

    /// Folds up to `max_rows` fresh rows into the tiers, in one transaction
    /// (and at most [`MAX_PASS_BYTES`] of them, but at least one row).
    /// Samples older than the raw tier keeps are dropped. Returns the rows
    /// folded (0: nothing was waiting).
    pub async fn compact_gpu_samples(
        &self,
        now_ms: i64,
        max_rows: usize,
    ) -> Result<usize, StoreError> {
        self.compact_gpu_samples_within(now_ms, max_rows, MAX_PASS_BYTES)
            .await
    }

    /// [`Store::compact_gpu_samples`] with a byte budget of its own.
    pub async fn compact_gpu_samples_within(
        &self,
        now_ms: i64,
        max_rows: usize,
        max_bytes: usize,
    ) -> Result<usize, StoreError> {
        let backend = self.connection().get_database_backend();
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        // The oldest rows that fit the budget, by their sizes first.
        let mut sql = Sql::new(backend);
        sql.push(
            "SELECT id, CAST(LENGTH(payload) AS BIGINT) AS bytes FROM gpu_fresh ORDER BY id LIMIT ",
        )
        .bind(max_rows.max(1) as i64);
        let mut last = None;
        let mut bytes = 0usize;
        for row in txn.query_all_raw(sql.build()).await? {
            let size = row.try_get::<i64>("", "bytes")?.max(0) as usize;
            if last.is_some() && bytes + size > max_bytes {
                break;
            }
            bytes += size;
            last = Some(row.try_get::<i64>("", "id")?);
        }
        let Some(last) = last else {
            return Ok(0);
        };
        let mut sql = Sql::new(backend);
        sql.push("SELECT id, payload FROM gpu_fresh WHERE id <= ")
            .bind(last)
            .push(" ORDER BY id");
        let rows = txn.query_all_raw(sql.build()).await?;
        if rows.is_empty() {
            return Ok(0);
        }
        let oldest = now_ms - Tier::Raw.keep_ms();
        let mut ids = Vec::with_capacity(rows.len());
        // New raw records by raw block.
        let mut fresh: HashMap<BlockKey, Vec<Record>> = HashMap::new();
        for row in &rows {
            ids.push(row.try_get::<i64>("", "id")?);
            let payload: Vec<u8> = row.try_get("", "payload")?;
            for rec in payload.chunks_exact(FRESH_BYTES) {
                let gpu = i64::from_le_bytes(rec[..8].try_into().unwrap_or_default());
                let r = Record::decode(&rec[8..]);
                if r.t_ms < oldest {
                    continue;
                }
                fresh
                    .entry((gpu, Tier::Raw, Tier::Raw.block_start(r.t_ms)))
                    .or_default()
                    .push(r);
            }
        }
        // The raw blocks, merged with what they held.
        let mut raw = load_blocks(&txn, fresh.keys().copied().collect()).await?;
        let mut tier_updates: HashMap<BlockKey, Vec<Record>> = HashMap::new();
        for (key, new) in fresh {
            let block = raw.entry(key).or_default();
            merge(block, new);
            // Every bucket of a touched raw block is folded again, so a
            // bucket filled over several passes ends whole.
            let (gpu, _, _) = key;
            for tier in [Tier::FiveMinutes, Tier::Hour] {
                let step = tier.step_ms();
                let mut buckets: BTreeMap<i64, Vec<Record>> = BTreeMap::new();
                for r in block.iter() {
                    buckets
                        .entry(r.t_ms.div_euclid(step) * step)
                        .or_default()
                        .push(*r);
                }
                for (t, records) in buckets {
                    if let Some(folded) = Record::fold(t, &records) {
                        tier_updates
                            .entry((gpu, tier, tier.block_start(t)))
                            .or_default()
                            .push(folded);
                    }
                }
            }
        }
        let mut blocks = load_blocks(&txn, tier_updates.keys().copied().collect()).await?;
        let heat_keys: Vec<BlockKey> = tier_updates
            .keys()
            .map(|&(gpu, tier, start)| (gpu, heat_of(tier), start))
            .collect();
        let mut heats = load_heat(&txn, heat_keys).await?;
        for ((gpu, tier, start), folded) in tier_updates {
            let heat_tier = heat_of(tier);
            let strip = heats.entry((gpu, heat_tier, start)).or_insert_with(|| {
                vec![NO_HEAT; (heat_tier.block_ms() / heat_tier.step_ms()) as usize]
            });
            for r in &folded {
                let i = ((r.t_ms - start) / heat_tier.step_ms()) as usize;
                if let Some(b) = strip.get_mut(i) {
                    *b = r.heat();
                }
            }
            merge(blocks.entry((gpu, tier, start)).or_default(), folded);
        }
        let mut writes: Vec<(BlockKey, Vec<u8>)> = raw
            .into_iter()
            .chain(blocks)
            .map(|(k, records)| (k, encode_records(&records)))
            .collect();
        writes.extend(heats);
        for chunk in writes.chunks(100) {
            let mut sql = Sql::new(backend);
            sql.push("INSERT INTO gpu_series (gpu_id, tier, block_start, payload) VALUES ");
            for (i, ((gpu, tier, start), payload)) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.push("(")
                    .bind(*gpu)
                    .push(", ")
                    .bind(*tier as i16)
                    .push(", ")
                    .bind(*start)
                    .push(", ")
                    .bind(payload.clone())
                    .push(")");
            }
            sql.push(
                " ON CONFLICT (gpu_id, tier, block_start) DO UPDATE SET payload = excluded.payload",
            );
            txn.execute_raw(sql.build()).await?;
        }
        for chunk in ids.chunks(500) {
            let mut sql = Sql::new(backend);
            sql.push("DELETE FROM gpu_fresh WHERE id IN ")
                .bind_list(chunk.iter().copied());
            txn.execute_raw(sql.build()).await?;
        }
        txn.commit().await?;
        Ok(rows.len())
    }

    /// Drops each tier's blocks that ended before what it keeps, and XID
    /// errors older than a year. Returns the blocks dropped.
    pub async fn prune_gpu_samples(&self, now_ms: i64) -> Result<u64, StoreError> {
        let backend = self.connection().get_database_backend();
        let _turn = self.write_turn().await;
        let mut dropped = 0;
        for tier in Tier::ALL {
            let mut sql = Sql::new(backend);
            sql.push("DELETE FROM gpu_series WHERE tier = ")
                .bind(tier as i16)
                .push(" AND block_start < ")
                .bind(now_ms - tier.keep_ms() - tier.block_ms());
            dropped += self
                .connection()
                .execute_raw(sql.build())
                .await?
                .rows_affected();
        }
        let mut sql = Sql::new(backend);
        sql.push("DELETE FROM gpu_xids WHERE t_ms < ")
            .bind(now_ms - Tier::HeatHour.keep_ms());
        self.connection().execute_raw(sql.build()).await?;
        Ok(dropped)
    }

    /// The GPUs' samples over `[from, to]` folded into at most `buckets`
    /// points each, from the finest tier that still covers `from`.
    pub async fn gpu_series(
        &self,
        gpus: &[i64],
        from_ms: i64,
        to_ms: i64,
        now_ms: i64,
        buckets: usize,
    ) -> Result<HashMap<i64, Vec<GpuPoint>>, StoreError> {
        self.gpu_series_of(gpus, (from_ms, to_ms), now_ms, buckets, true)
            .await
    }

    /// [`Store::gpu_series`] from the tiers alone, without the samples of
    /// the last minute or so that wait for compaction: for sums over many
    /// jobs, where reading the waiting rows once per job would cost more
    /// than the minute is worth.
    pub async fn gpu_series_compacted(
        &self,
        gpus: &[i64],
        from_ms: i64,
        to_ms: i64,
        now_ms: i64,
        buckets: usize,
    ) -> Result<HashMap<i64, Vec<GpuPoint>>, StoreError> {
        self.gpu_series_of(gpus, (from_ms, to_ms), now_ms, buckets, false)
            .await
    }

    async fn gpu_series_of(
        &self,
        gpus: &[i64],
        (from_ms, to_ms): (i64, i64),
        now_ms: i64,
        buckets: usize,
        with_fresh: bool,
    ) -> Result<HashMap<i64, Vec<GpuPoint>>, StoreError> {
        if gpus.is_empty() || to_ms < from_ms {
            return Ok(HashMap::new());
        }
        let window = to_ms - from_ms;
        let tier = [Tier::Raw, Tier::FiveMinutes]
            .into_iter()
            .find(|t| {
                from_ms >= now_ms - t.keep_ms()
                    && window / t.step_ms().max(NOMINAL_SAMPLE_MS) <= MAX_READ_RECORDS
            })
            .unwrap_or(Tier::Hour);
        let mut records: HashMap<i64, Vec<Record>> = HashMap::new();
        for chunk in gpus.chunks(500) {
            let mut sql = Sql::new(self.connection().get_database_backend());
            sql.push("SELECT gpu_id, payload FROM gpu_series WHERE tier = ")
                .bind(tier as i16)
                .push(" AND gpu_id IN ")
                .bind_list(chunk.iter().copied())
                .push(" AND block_start >= ")
                .bind(tier.block_start(from_ms))
                .push(" AND block_start <= ")
                .bind(to_ms);
            for row in self.connection().query_all_raw(sql.build()).await? {
                let gpu: i64 = row.try_get("", "gpu_id")?;
                let payload: Vec<u8> = row.try_get("", "payload")?;
                records.entry(gpu).or_default().extend(
                    decode_records(&payload)
                        .into_iter()
                        .filter(|r| r.t_ms >= from_ms && r.t_ms <= to_ms),
                );
            }
        }
        if with_fresh {
            let wanted: HashSet<i64> = gpus.iter().copied().collect();
            for (gpu, r) in self.fresh_records(&wanted, from_ms, to_ms).await? {
                records.entry(gpu).or_default().push(r);
            }
        }
        let buckets = buckets.max(1);
        let width = (window / buckets as i64).max(1);
        Ok(records
            .into_iter()
            .map(|(gpu, mut rs)| {
                rs.sort_by_key(|r| r.t_ms);
                let points = if rs.len() <= buckets {
                    rs.iter().map(Record::point).collect()
                } else {
                    let mut out = Vec::with_capacity(buckets);
                    let mut i = 0;
                    while i < rs.len() {
                        let bucket = (rs[i].t_ms - from_ms) / width;
                        let mut j = i;
                        while j < rs.len() && (rs[j].t_ms - from_ms) / width == bucket {
                            j += 1;
                        }
                        if let Some(r) = Record::fold(rs[i].t_ms, &rs[i..j]) {
                            out.push(r.point());
                        }
                        i = j;
                    }
                    out
                };
                (gpu, points)
            })
            .collect())
    }

    /// Mean utilization of every GPU in `columns` equal slices of
    /// `[from, to]`, read from the heat strips (5-minute or hourly) and the
    /// samples not yet compacted.
    pub async fn gpu_heat(
        &self,
        from_ms: i64,
        to_ms: i64,
        now_ms: i64,
        columns: usize,
    ) -> Result<Heat, StoreError> {
        let columns = columns.clamp(1, 4096);
        let window = (to_ms - from_ms).max(1);
        let tier = if from_ms >= now_ms - Tier::HeatFiveMinutes.keep_ms()
            && window / Tier::HeatFiveMinutes.step_ms() <= MAX_READ_RECORDS
        {
            Tier::HeatFiveMinutes
        } else {
            Tier::HeatHour
        };
        let step = tier.step_ms();
        // Sum and count of heat per GPU and column.
        let mut acc: HashMap<i64, Vec<(f32, u32)>> = HashMap::new();
        let column = |t: i64| -> Option<usize> {
            if t < from_ms || t > to_ms {
                return None;
            }
            let c = (t - from_ms) as i128 * columns as i128 / window as i128;
            Some((c as usize).min(columns - 1))
        };
        let mut sql = Sql::new(self.connection().get_database_backend());
        sql.push("SELECT gpu_id, block_start, payload FROM gpu_series WHERE tier = ")
            .bind(tier as i16)
            .push(" AND block_start >= ")
            .bind(tier.block_start(from_ms))
            .push(" AND block_start <= ")
            .bind(to_ms);
        // The column of each bucket of a strip, per strip start (every GPU's
        // strips share the few starts of the window).
        let mut columns_of: HashMap<i64, Vec<Option<usize>>> = HashMap::new();
        for row in self.connection().query_all_raw(sql.build()).await? {
            let gpu: i64 = row.try_get("", "gpu_id")?;
            let start: i64 = row.try_get("", "block_start")?;
            let strip: Vec<u8> = row.try_get("", "payload")?;
            let at = columns_of.entry(start).or_insert_with(|| {
                // A bucket counts in the column of its middle.
                (0..tier.block_ms() / step)
                    .map(|i| column(start + i * step + step / 2))
                    .collect()
            });
            let cells = acc.entry(gpu).or_insert_with(|| vec![(0.0, 0); columns]);
            for (b, c) in strip.iter().zip(at.iter()) {
                if let (false, Some(c)) = (*b == NO_HEAT, c) {
                    cells[*c].0 += *b as f32 / 2.0;
                    cells[*c].1 += 1;
                }
            }
        }
        // Samples not compacted yet fill the newest columns.
        let mut recent: HashMap<(i64, usize), (f32, u32)> = HashMap::new();
        for (gpu, r) in self.fresh_records_all(from_ms, to_ms).await? {
            if let Some(c) = column(r.t_ms) {
                let e = recent.entry((gpu, c)).or_default();
                e.0 += r.util_c as f32 / 100.0;
                e.1 += 1;
            }
        }
        for ((gpu, c), (sum, n)) in recent {
            let cells = acc.entry(gpu).or_insert_with(|| vec![(0.0, 0); columns]);
            // One more bucket's worth: the mean of the recent samples.
            cells[c].0 += sum / n as f32;
            cells[c].1 += 1;
        }
        let mut rows: Vec<(i64, Vec<Option<f32>>)> = acc
            .into_iter()
            .map(|(gpu, cells)| {
                (
                    gpu,
                    cells
                        .into_iter()
                        .map(|(sum, n)| (n > 0).then(|| sum / n as f32))
                        .collect(),
                )
            })
            .collect();
        rows.sort_by_key(|(gpu, _)| *gpu);
        Ok(Heat {
            from_ms,
            to_ms,
            rows,
        })
    }

    /// The XID errors of these GPUs since `from`, newest first (at most 100).
    pub async fn gpu_xids(
        &self,
        gpus: &[i64],
        from_ms: i64,
    ) -> Result<Vec<(i64, i64, Option<i64>)>, StoreError> {
        if gpus.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = Sql::new(self.connection().get_database_backend());
        sql.push("SELECT gpu_id, t_ms, code FROM gpu_xids WHERE gpu_id IN ")
            .bind_list(gpus.iter().copied())
            .push(" AND t_ms >= ")
            .bind(from_ms)
            .push(" ORDER BY t_ms DESC LIMIT 100");
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| {
                Ok((
                    row.try_get("", "gpu_id")?,
                    row.try_get("", "t_ms")?,
                    row.try_get("", "code")?,
                ))
            })
            .collect()
    }

    /// The samples waiting for compaction within `[from, to]`, by GPU.
    pub async fn gpu_fresh_points(
        &self,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<HashMap<i64, Vec<GpuPoint>>, StoreError> {
        let mut out: HashMap<i64, Vec<GpuPoint>> = HashMap::new();
        for (gpu, r) in self.fresh_records_all(from_ms, to_ms).await? {
            out.entry(gpu).or_default().push(r.point());
        }
        Ok(out)
    }

    /// Fresh records of these GPUs within the window.
    async fn fresh_records(
        &self,
        gpus: &HashSet<i64>,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<(i64, Record)>, StoreError> {
        Ok(self
            .fresh_records_all(from_ms, to_ms)
            .await?
            .into_iter()
            .filter(|(gpu, _)| gpus.contains(gpu))
            .collect())
    }

    /// Every fresh record within the window.
    async fn fresh_records_all(
        &self,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<(i64, Record)>, StoreError> {
        let mut sql = Sql::new(self.connection().get_database_backend());
        sql.push("SELECT payload FROM gpu_fresh WHERE t_ms >= ")
            .bind(from_ms);
        let mut out = Vec::new();
        for row in self.connection().query_all_raw(sql.build()).await? {
            let payload: Vec<u8> = row.try_get("", "payload")?;
            for rec in payload.chunks_exact(FRESH_BYTES) {
                let gpu = i64::from_le_bytes(rec[..8].try_into().unwrap_or_default());
                let r = Record::decode(&rec[8..]);
                if r.t_ms >= from_ms && r.t_ms <= to_ms {
                    out.push((gpu, r));
                }
            }
        }
        Ok(out)
    }
}

fn heat_of(tier: Tier) -> Tier {
    match tier {
        Tier::Hour => Tier::HeatHour,
        _ => Tier::HeatFiveMinutes,
    }
}

/// Reads stored record blocks; missing ones are absent from the map.
async fn load_blocks(
    txn: &impl ConnectionTrait,
    keys: Vec<BlockKey>,
) -> Result<HashMap<BlockKey, Vec<Record>>, StoreError> {
    Ok(load_payloads(txn, keys)
        .await?
        .into_iter()
        .map(|(k, p)| (k, decode_records(&p)))
        .collect())
}

async fn load_heat(
    txn: &impl ConnectionTrait,
    keys: Vec<BlockKey>,
) -> Result<HashMap<BlockKey, Vec<u8>>, StoreError> {
    load_payloads(txn, keys).await
}

/// Payloads of blocks, asked for per tier and block start with the GPUs in
/// a list (a pass touches few distinct spans).
async fn load_payloads(
    txn: &impl ConnectionTrait,
    keys: Vec<BlockKey>,
) -> Result<HashMap<BlockKey, Vec<u8>>, StoreError> {
    let mut by_span: BTreeMap<(Tier, i64), Vec<i64>> = BTreeMap::new();
    for (gpu, tier, start) in keys {
        by_span.entry((tier, start)).or_default().push(gpu);
    }
    let mut out = HashMap::new();
    for ((tier, start), gpus) in by_span {
        for chunk in gpus.chunks(500) {
            let mut sql = Sql::new(txn.get_database_backend());
            sql.push("SELECT gpu_id, payload FROM gpu_series WHERE tier = ")
                .bind(tier as i16)
                .push(" AND block_start = ")
                .bind(start)
                .push(" AND gpu_id IN ")
                .bind_list(chunk.iter().copied());
            for row in txn.query_all_raw(sql.build()).await? {
                let gpu: i64 = row.try_get("", "gpu_id")?;
                out.insert((gpu, tier, start), row.try_get("", "payload")?);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod unit {
    use super::*;

    fn sample(util: u8) -> GpuSample {
        GpuSample {
            index: 0,
            uuid: "GPU-a".into(),
            gpu_util: util,
            mem_util: util / 2,
            mem_used_bytes: 10 << 30,
            mem_total_bytes: 80 << 30,
            temperature_c: 40 + util as u32 / 4,
            power_mw: 100_000 + util as u32 * 3_000,
            power_limit_mw: 400_000,
            sm_clock_mhz: 1980,
            mem_clock_mhz: 2619,
            ecc_corrected: None,
            ecc_uncorrected: None,
            processes: Vec::new(),
        }
    }

    #[test]
    fn a_record_round_trips_through_its_bytes() {
        let r = Record::of(1_700_000_000_123, &sample(87));
        let mut bytes = Vec::new();
        r.encode_into(&mut bytes);
        assert_eq!(bytes.len(), RECORD_BYTES);
        assert_eq!(Record::decode(&bytes), r);
        let p = r.point();
        assert_eq!(p.gpu_util, 87.0);
        assert_eq!(p.mem_used_bytes, 10 << 30);
        assert_eq!(p.power_w, 361.0);
        assert_eq!(p.temperature_c, 61.0);
    }

    #[test]
    fn out_of_range_readings_saturate_instead_of_wrapping() {
        let mut s = sample(100);
        s.gpu_util = 250;
        s.temperature_c = 9_000;
        s.power_mw = u32::MAX;
        let r = Record::of(0, &s);
        assert_eq!(r.point().gpu_util, 100.0);
        assert_eq!(r.point().temperature_c, 255.0);
        assert_eq!(r.point().power_w, 6553.5);
    }

    #[test]
    fn a_fold_weighs_means_by_count_and_keeps_maxima() {
        let a = Record::of(0, &sample(10));
        let b = Record::of(10_000, &sample(90));
        let ab = Record::fold(0, &[a, b]).unwrap();
        assert_eq!(ab.count, 2);
        assert_eq!(ab.point().gpu_util, 50.0);
        assert_eq!(ab.point().gpu_util_max, 90.0);
        // A bucket of two and a bucket of one: the mean of three samples.
        let c = Record::of(20_000, &sample(100));
        let abc = Record::fold(0, &[ab, c]).unwrap();
        assert_eq!(abc.count, 3);
        assert!(
            (abc.point().gpu_util - 66.67).abs() < 0.01,
            "{:?}",
            abc.point()
        );
        assert_eq!(abc.point().power_max_w, 400.0);
        assert_eq!(Record::fold(0, &[]), None);
    }

    #[test]
    fn merging_replaces_a_sample_of_the_same_time_and_keeps_order() {
        let mut block = vec![Record::of(0, &sample(1)), Record::of(20, &sample(3))];
        merge(
            &mut block,
            [Record::of(10, &sample(2)), Record::of(20, &sample(4))],
        );
        let utils: Vec<f32> = block.iter().map(|r| r.point().gpu_util).collect();
        assert_eq!(utils, vec![1.0, 2.0, 4.0]);
    }

    #[test]
    fn heat_is_utilization_in_half_percents() {
        assert_eq!(Record::of(0, &sample(0)).heat(), 0);
        assert_eq!(Record::of(0, &sample(37)).heat(), 74);
        assert_eq!(Record::of(0, &sample(100)).heat(), 200);
        assert_ne!(NO_HEAT, 200);
    }

    #[test]
    fn blocks_align_to_their_span() {
        assert_eq!(Tier::Raw.block_start(HOUR + 5), HOUR);
        assert_eq!(Tier::FiveMinutes.block_start(DAY * 3 + HOUR), DAY * 3);
        assert_eq!(Tier::Raw.block_start(-1), -HOUR);
        // A tier's buckets never straddle the block of the tier below.
        for t in [Tier::FiveMinutes, Tier::Hour] {
            assert_eq!(Tier::Raw.block_ms() % t.step_ms(), 0);
            assert_eq!(t.block_ms() % t.step_ms(), 0);
        }
    }
}
