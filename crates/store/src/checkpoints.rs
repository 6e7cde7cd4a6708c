//! The checkpoints that ended jobs left, kept for a while for their
//! owners' next jobs to resume from. The files are the executor's; these
//! rows say whose they are, how big, until when, and which job took them
//! (`taken_by`: from that job's submission to its end, so that no other
//! job takes them and they do not expire under it).

use sea_orm::ConnectionTrait;
use trainyard_domain::job::KeptCheckpoints;

use crate::tracking::get;
use crate::{Store, StoreError, now_millis};

/// The most kept checkpoints one listing returns.
pub const KEPT_LISTED: u64 = 1_000;

const COLUMNS: &str = "k.job_id, k.bytes, k.kept_until, u.username";

/// Rows no job that has not ended holds: free to expire or be deleted.
pub(crate) const NOT_HELD: &str = "(taken_by IS NULL OR taken_by IN \
     (SELECT id FROM jobs WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST')))";

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
    /// kept until `until` (milliseconds since the Unix epoch), taken by
    /// no job.
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
            .push(
                ") ON CONFLICT (job_id) DO UPDATE SET bytes = excluded.bytes, \
                 kept_until = excluded.kept_until, taken_by = NULL",
            );
        self.connection().execute_raw(sql.build()).await?;
        Ok(())
    }

    /// What job `job` left, if it is kept (its time not up) and no job
    /// took it.
    pub async fn kept_checkpoints(&self, job: i64) -> Result<Option<KeptCheckpoints>, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT {COLUMNS} FROM kept_checkpoints k LEFT JOIN users u ON u.id = k.owner_id \
             WHERE k.taken_by IS NULL AND k.job_id = "
        ))
        .bind(job)
        // Past their time (or being deleted): going, not kept.
        .push(" AND k.kept_until > ")
        .bind(now_millis());
        match self.connection().query_one_raw(sql.build()).await? {
            Some(row) => Ok(Some(kept(&row)?)),
            None => Ok(None),
        }
    }

    /// The checkpoints kept for `owner` (a user id) that no job took, those
    /// to go first first: at most [`KEPT_LISTED`].
    pub async fn kept_checkpoints_of(
        &self,
        owner: i64,
    ) -> Result<Vec<KeptCheckpoints>, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT {COLUMNS} FROM kept_checkpoints k LEFT JOIN users u ON u.id = k.owner_id \
             WHERE k.taken_by IS NULL AND k.owner_id = "
        ))
        .bind(owner)
        .push(" AND k.kept_until > ")
        .bind(now_millis())
        .push(" ORDER BY k.kept_until, k.job_id LIMIT ")
        .bind(KEPT_LISTED as i64);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(kept)
            .collect()
    }

    /// How many jobs' checkpoints are kept for `owner`, and their bytes,
    /// whether a job took them or not: what one person's bound counts.
    pub async fn kept_checkpoints_held_by(&self, owner: i64) -> Result<(u64, u64), StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT COUNT(*) AS n, COALESCE(SUM(bytes), 0) AS bytes FROM kept_checkpoints WHERE owner_id = ")
            .bind(owner);
        let Some(row) = self.connection().query_one_raw(sql.build()).await? else {
            return Ok((0, 0));
        };
        let n: i64 = get(&row, "n")?;
        // SUM is NUMERIC on PostgreSQL: read as text, whatever its type.
        let bytes = match get::<i64>(&row, "bytes") {
            Ok(bytes) => bytes,
            Err(_) => get::<sea_orm::prelude::Decimal>(&row, "bytes")?
                .to_string()
                .parse()
                .unwrap_or(i64::MAX),
        };
        Ok((n.max(0) as u64, bytes.max(0) as u64))
    }

    /// Checkpoints held by jobs that ended without letting them go (the
    /// server stopped between): (whose they are, the job that took them),
    /// at most `limit`.
    pub async fn claims_of_ended_jobs(&self, limit: u64) -> Result<Vec<(i64, i64)>, StoreError> {
        let mut sql = self.sql();
        sql.push(
            "SELECT job_id, taken_by FROM kept_checkpoints WHERE taken_by IN \
             (SELECT id FROM jobs WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST')) \
             ORDER BY job_id LIMIT ",
        )
        .bind(limit.min(KEPT_LISTED) as i64);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| Ok((get(row, "job_id")?, get(row, "taken_by")?)))
            .collect()
    }

    /// The jobs whose checkpoints were kept until `now` or before and that
    /// no job that has not ended holds, the longest past first: at most
    /// `limit`.
    pub async fn expired_checkpoints(&self, now: i64, limit: u64) -> Result<Vec<i64>, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT job_id FROM kept_checkpoints WHERE {NOT_HELD} AND kept_until <= "
        ))
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

    /// Job `by` takes what job `from` left, from its submission to its
    /// end: true when they were kept, unexpired, and no other job had them.
    /// Only one job ever gets true for the same checkpoints.
    pub async fn claim_checkpoints(&self, from: i64, by: i64) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push("UPDATE kept_checkpoints SET taken_by = ")
            .bind(by)
            .push(" WHERE taken_by IS NULL AND job_id = ")
            .bind(from)
            .push(" AND kept_until > ")
            .bind(now_millis())
            // Only a job that waits to start takes them: one cancelled
            // meanwhile would hold them to no end.
            .push(" AND EXISTS (SELECT 1 FROM jobs WHERE state = 'QUEUED' AND id = ")
            .bind(by)
            .push(")");
        let done = self.connection().execute_raw(sql.build()).await?;
        Ok(done.rows_affected() > 0)
    }

    /// The job whose checkpoints job `by` took, if it took some.
    pub async fn claimed_by(&self, by: i64) -> Result<Option<i64>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT job_id FROM kept_checkpoints WHERE taken_by = ")
            .bind(by);
        match self.connection().query_one_raw(sql.build()).await? {
            Some(row) => Ok(Some(get(&row, "job_id")?)),
            None => Ok(None),
        }
    }

    /// Job `by` ended without taking job `from`'s checkpoints after all
    /// (cancelled in the queue): they are kept again, until their time.
    pub async fn unclaim_checkpoints(&self, from: i64, by: i64) -> Result<(), StoreError> {
        self.forget_claimed(from, by, false).await
    }

    /// Job `by` ended, its checkpoints now the ones `from` left: the row
    /// of `from` goes.
    pub async fn drop_claimed(&self, from: i64, by: i64) -> Result<(), StoreError> {
        self.forget_claimed(from, by, true).await
    }

    async fn forget_claimed(&self, from: i64, by: i64, drop: bool) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push(if drop {
            "DELETE FROM kept_checkpoints"
        } else {
            "UPDATE kept_checkpoints SET taken_by = NULL"
        })
        .push(" WHERE job_id = ")
        .bind(from)
        .push(" AND taken_by = ")
        .bind(by);
        self.connection().execute_raw(sql.build()).await?;
        Ok(())
    }

    /// The job that has not ended which took job `job`'s checkpoints to
    /// resume from, if one did.
    pub async fn checkpoints_taker(&self, job: i64) -> Result<Option<i64>, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT taken_by FROM kept_checkpoints WHERE NOT {NOT_HELD} AND job_id = "
        ))
        .bind(job);
        match self.connection().query_one_raw(sql.build()).await? {
            Some(row) => Ok(get(&row, "taken_by")?),
            None => Ok(None),
        }
    }

    /// Marks what job `job` left as expired now, to delete it (their owner
    /// asked, or room is made): no job takes them from here on, and the
    /// sweep of expired ones finishes what a deletion leaves undone. True
    /// when they were kept and no job that has not ended holds them.
    pub async fn expire_checkpoints_now(&self, job: i64) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push(&format!(
            "UPDATE kept_checkpoints SET kept_until = 0 WHERE {NOT_HELD} AND job_id = "
        ))
        .bind(job);
        let done = self.connection().execute_raw(sql.build()).await?;
        Ok(done.rows_affected() > 0)
    }

    /// Takes what job `job` left off the record, once it is deleted (their
    /// time is up): true when it was kept and no job that has not ended
    /// holds it.
    pub async fn take_checkpoints(&self, job: i64) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push(&format!(
            "DELETE FROM kept_checkpoints WHERE {NOT_HELD} AND job_id = "
        ))
        .bind(job);
        let done = self.connection().execute_raw(sql.build()).await?;
        Ok(done.rows_affected() > 0)
    }
}
