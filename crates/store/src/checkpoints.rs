//! The checkpoints that ended jobs left, kept for a while for their
//! owners' next jobs to resume from. The files are the executor's; these
//! rows say whose they are, how big, and until when.

use sea_orm::ConnectionTrait;
use trainyard_domain::job::KeptCheckpoints;

use crate::tracking::get;
use crate::{Store, StoreError};

/// The most kept checkpoints one listing returns.
pub const KEPT_LISTED: u64 = 1_000;

const COLUMNS: &str = "k.job_id, k.bytes, k.kept_until, u.username";

fn kept(row: &sea_orm::QueryResult) -> Result<KeptCheckpoints, StoreError> {
    Ok(KeptCheckpoints {
        job: get(row, "job_id")?,
        owner: get(row, "username")?,
        bytes: get::<i64>(row, "bytes")?.max(0) as u64,
        kept_until: get(row, "kept_until")?,
    })
}

impl Store {
    /// Records that job `job` (of `owner`) left `bytes` of checkpoints,
    /// kept until `until` (milliseconds since the Unix epoch).
    pub async fn keep_checkpoints(
        &self,
        job: i64,
        owner: Option<i64>,
        bytes: u64,
        until: i64,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push("INSERT INTO kept_checkpoints (job_id, owner_id, bytes, kept_until) VALUES (")
            .bind(job)
            .push(", ")
            .bind(owner)
            .push(", ")
            .bind(bytes.min(i64::MAX as u64) as i64)
            .push(", ")
            .bind(until)
            .push(") ON CONFLICT (job_id) DO UPDATE SET bytes = excluded.bytes, kept_until = excluded.kept_until");
        self.connection().execute_raw(sql.build()).await?;
        Ok(())
    }

    /// What job `job` left, if it is kept.
    pub async fn kept_checkpoints(&self, job: i64) -> Result<Option<KeptCheckpoints>, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT {COLUMNS} FROM kept_checkpoints k LEFT JOIN users u ON u.id = k.owner_id WHERE k.job_id = "
        ))
        .bind(job);
        match self.connection().query_one_raw(sql.build()).await? {
            Some(row) => Ok(Some(kept(&row)?)),
            None => Ok(None),
        }
    }

    /// The checkpoints kept for `owner` (a user id), those to go first
    /// first: at most [`KEPT_LISTED`].
    pub async fn kept_checkpoints_of(
        &self,
        owner: i64,
    ) -> Result<Vec<KeptCheckpoints>, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT {COLUMNS} FROM kept_checkpoints k LEFT JOIN users u ON u.id = k.owner_id WHERE k.owner_id = "
        ))
        .bind(owner)
        .push(" ORDER BY k.kept_until, k.job_id LIMIT ")
        .bind(KEPT_LISTED as i64);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(kept)
            .collect()
    }

    /// The jobs whose checkpoints were kept until `now` or before, the
    /// longest past first: at most `limit`.
    pub async fn expired_checkpoints(&self, now: i64, limit: u64) -> Result<Vec<i64>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT job_id FROM kept_checkpoints WHERE kept_until <= ")
            .bind(now)
            .push(" ORDER BY kept_until, job_id LIMIT ")
            .bind(limit.min(KEPT_LISTED) as i64);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| get(row, "job_id"))
            .collect()
    }

    /// Takes what job `job` left off the record, for a job that resumes
    /// from it or because it is deleted: true when it was kept. Only one
    /// caller ever gets true for the same checkpoints.
    pub async fn take_checkpoints(&self, job: i64) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push("DELETE FROM kept_checkpoints WHERE job_id = ")
            .bind(job);
        let done = self.connection().execute_raw(sql.build()).await?;
        Ok(done.rows_affected() > 0)
    }
}
