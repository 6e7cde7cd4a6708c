//! Compaction: a series logged one point per request (`mlflow.log_metric`
//! in a training loop) would otherwise be a row per point. A write that adds
//! a small chunk marks its series; a background pass merges the small chunks
//! into the chunk before them, up to [`TARGET_POINTS`] points, with their
//! summaries. The merged points go into the first chunk of each run (its id
//! keeps the series in logged order) and the others are deleted, in one
//! transaction; readers take a snapshot, so they see either form whole.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use sea_orm::ConnectionTrait;
use trainyard_domain::tracking::Point;

use crate::{Store, StoreError, chunks};

/// Points per chunk that compaction aims for: about 100 KB of points and
/// 10 KB of summary.
pub const TARGET_POINTS: usize = 4096;

/// Series written since the last pass.
#[derive(Debug, Default, Clone)]
pub(crate) struct Dirty(Arc<Mutex<HashSet<(String, String)>>>);

impl Dirty {
    pub(crate) fn mark<'a>(&self, run_id: &str, keys: impl IntoIterator<Item = &'a str>) {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        for key in keys {
            if !set.contains(&(run_id.to_owned(), key.to_owned())) {
                set.insert((run_id.to_owned(), key.to_owned()));
            }
        }
    }

    fn take(&self) -> Vec<(String, String)> {
        let mut set = self.0.lock().unwrap_or_else(|e| e.into_inner());
        set.drain().collect()
    }
}

/// Chunks with fewer points than this come from small writes (one point
/// per `log_metric` call, or a few keys per step) and are merged. Larger ones
/// come from batches and are left alone: rewriting them would cost ingest
/// and gain reads little.
pub const SMALL_POINTS: usize = 64;

/// Groups consecutive chunks (in id order): a chunk under the target, then
/// the small chunks after it, up to [`TARGET_POINTS`] in all. Only groups of
/// two or more are worth merging.
fn plan(chunks: &[(i64, usize)]) -> Vec<Vec<i64>> {
    let mut groups = Vec::new();
    let mut current: Vec<i64> = Vec::new();
    let mut points = 0;
    for &(id, count) in chunks {
        if count < SMALL_POINTS && !current.is_empty() && points + count <= TARGET_POINTS {
            current.push(id);
            points += count;
            continue;
        }
        if current.len() > 1 {
            groups.push(std::mem::take(&mut current));
        }
        current.clear();
        points = 0;
        if count < TARGET_POINTS {
            current.push(id);
            points = count;
        }
    }
    if current.len() > 1 {
        groups.push(current);
    }
    groups
}

impl Store {
    /// Marks for compaction the series to which this write added a small
    /// chunk; batches of 64 points or more per key cost no compaction.
    pub(crate) fn mark_small_chunks(&self, run_id: &str, metrics: &[crate::MetricIn]) {
        let mut counts: HashMap<&str, usize> = HashMap::new();
        for m in metrics {
            *counts.entry(m.key.as_str()).or_default() += 1;
        }
        self.dirty.mark(
            run_id,
            counts
                .into_iter()
                .filter(|(_, n)| *n < SMALL_POINTS)
                .map(|(key, _)| key),
        );
    }

    /// Marks every series with small chunks for the next pass: series
    /// written before a restart are compacted too. Returns how many.
    pub async fn mark_uncompacted(&self) -> Result<usize, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT run_id, key FROM metric_chunks WHERE count < ")
            .bind(SMALL_POINTS as i32)
            .push(" GROUP BY run_id, key HAVING COUNT(*) > 1");
        let rows = self.connection().query_all_raw(sql.build()).await?;
        for row in &rows {
            let run_id: String = row.try_get("", "run_id")?;
            let key: String = row.try_get("", "key")?;
            self.dirty.mark(&run_id, [key.as_str()]);
        }
        Ok(rows.len())
    }

    /// Compacts every series written since the last pass. Returns how many
    /// chunks were merged away.
    pub async fn compact_pending(&self) -> Result<usize, StoreError> {
        let mut merged = 0;
        for (run_id, key) in self.dirty.take() {
            merged += self.compact_series(&run_id, &key).await?;
        }
        Ok(merged)
    }

    /// Merges the small chunks of one series. Returns how many chunks were
    /// merged away.
    pub async fn compact_series(&self, run_id: &str, key: &str) -> Result<usize, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push("SELECT id, count FROM metric_chunks WHERE run_id = ")
            .bind(run_id.to_owned())
            .push(" AND key = ")
            .bind(key.to_owned())
            .push(" ORDER BY id");
        let mut chunk_list = Vec::new();
        for row in txn.query_all_raw(sql.build()).await? {
            let id: i64 = row.try_get("", "id")?;
            let count: i32 = row.try_get("", "count")?;
            chunk_list.push((id, count as usize));
        }
        let mut merged = 0;
        for group in plan(&chunk_list) {
            let mut sql = self.sql();
            sql.push("SELECT points FROM metric_chunks WHERE id IN ")
                .bind_list(group.iter().copied())
                .push(" ORDER BY id");
            let mut points: Vec<Point> = Vec::new();
            for row in txn.query_all_raw(sql.build()).await? {
                let bytes: Vec<u8> = row.try_get("", "points")?;
                chunks::decode_into(&bytes, &mut points);
            }
            let min_step = points.iter().map(|p| p.step).min().unwrap_or(0);
            let max_step = points.iter().map(|p| p.step).max().unwrap_or(0);
            let min_ts = points.iter().map(|p| p.timestamp).min().unwrap_or(0);
            let max_ts = points.iter().map(|p| p.timestamp).max().unwrap_or(0);
            let mut sql = self.sql();
            sql.push("UPDATE metric_chunks SET count = ")
                .bind(points.len() as i32)
                .push(", min_step = ")
                .bind(min_step)
                .push(", max_step = ")
                .bind(max_step)
                .push(", min_timestamp = ")
                .bind(min_ts)
                .push(", max_timestamp = ")
                .bind(max_ts)
                .push(", summary = ")
                .bind(chunks::summarize(&points))
                .push(", points = ")
                .bind(chunks::encode(&points))
                .push(" WHERE id = ")
                .bind(group[0]);
            txn.execute_raw(sql.build()).await?;
            let mut sql = self.sql();
            sql.push("DELETE FROM metric_chunks WHERE id IN ")
                .bind_list(group[1..].iter().copied());
            txn.execute_raw(sql.build()).await?;
            merged += group.len() - 1;
        }
        txn.commit().await?;
        Ok(merged)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plans_merge_small_chunks_into_the_chunk_before_them() {
        // Ten one-point chunks: one group.
        let ones: Vec<(i64, usize)> = (1..=10).map(|id| (id, 1)).collect();
        assert_eq!(plan(&ones), vec![(1..=10).collect::<Vec<i64>>()]);
        // Small chunks join the chunk before them unless it is full.
        let mixed = [
            (1, 10),
            (2, 10),
            (3, TARGET_POINTS),
            (4, 5),
            (5, 1000),
            (6, 3),
        ];
        assert_eq!(plan(&mixed), vec![vec![1, 2], vec![5, 6]]);
        // Batches (64 points or more) are left as they are.
        let batches = [(1, 100), (2, 100), (3, 1000), (4, 64)];
        assert!(plan(&batches).is_empty());
        // Groups stop at the target.
        let mut near = vec![(1, TARGET_POINTS - 2)];
        near.extend((2..=6).map(|id| (id, 1)));
        assert_eq!(plan(&near), vec![vec![1, 2, 3], vec![4, 5, 6]]);
        assert!(plan(&[(1, 7)]).is_empty());
        assert!(plan(&[]).is_empty());
    }
}
