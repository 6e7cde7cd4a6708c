//! Jobs and their timelines: submission, the state changes the scheduler
//! and the executor make (each one conditional on the state it expects, so
//! two actors can never both move a job), queue positions and cancels.

use sea_orm::sea_query::Expr;
use sea_orm::{
    ActiveModelTrait, ColumnTrait, EntityTrait, QueryFilter, QueryOrder, QuerySelect, Set,
};
use trainyard_domain::JobState;
use trainyard_domain::job::{Job, JobEvent, JobSpec};

use crate::entity::{job, job_event};
use crate::{NewRun, Store, StoreError, now_millis};

/// A job to queue, with the tracking run of its first attempt.
#[derive(Debug, Clone)]
pub struct NewJob {
    pub spec: JobSpec,
    pub owner_id: Option<i64>,
    pub team_id: Option<i64>,
    pub cpu_millis: u32,
    pub memory_mib: u64,
    pub max_runtime_secs: u64,
    /// The run, made SCHEDULED; its experiment is the job's. It is tagged
    /// `trainyard.job_id` with the new job's id.
    pub run: NewRun,
    /// The run's params (the hyperparameters) and further tags.
    pub params: Vec<(String, String)>,
    pub tags: Vec<(String, String)>,
    /// The timeline's first entry, after "submitted: ".
    pub submitted: String,
}

/// Whose jobs a list shows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobsOf {
    Everyone,
    User(i64),
    /// A user's own and their teams' jobs.
    UserOrTeams(i64, Vec<i64>),
}

/// A job with what only the server needs: who owns it and the executor's
/// handle of its running attempt.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRecord {
    pub job: Job,
    pub owner_id: Option<i64>,
    pub team_id: Option<i64>,
    pub node_id: Option<i64>,
    /// What the executor knows its running attempt by (its own format: the
    /// local executor's supervising process, a Kubernetes Job's name).
    pub handle: Option<String>,
    /// Set while it is being stopped to give its GPUs back (see
    /// [`JobChange::preempt_reason`]).
    pub preempt_reason: Option<String>,
    /// Where its attempt's GPU time is charged from, when a move to
    /// another team charged the part before (see [`Store::set_job_team`]).
    pub charged_from: Option<i64>,
}

impl JobRecord {
    /// Where the GPU time of its current attempt not yet recorded begins:
    /// its start, or the last move to another team after it. None before
    /// it starts.
    pub fn charge_start(&self) -> Option<i64> {
        let started = self.job.started_at?;
        Some(self.charged_from.map_or(started, |at| at.max(started)))
    }

    pub fn owner(&self) -> trainyard_domain::identity::Owner {
        trainyard_domain::identity::Owner::new(self.owner_id, self.team_id)
    }

    /// Who acts on it, named for its timeline when that is not its owner
    /// (an admin).
    pub fn acted_on_by<'a>(&self, user: &'a trainyard_domain::identity::User) -> Option<&'a str> {
        self.someone_else(user).map(|u| u.username.as_str())
    }

    /// `user`, when the job is not theirs (an admin acting on it).
    pub fn someone_else<'a>(
        &self,
        user: &'a trainyard_domain::identity::User,
    ) -> Option<&'a trainyard_domain::identity::User> {
        (self.owner_id != Some(user.id)).then_some(user)
    }
}

/// What a caller wants to do with a thing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    Read,
    Change,
}

impl JobsOf {
    /// `all`: everything the user may see (their teams' too; everyone's
    /// for admins); else their own.
    pub fn for_user(user: &trainyard_domain::identity::User, all: bool) -> JobsOf {
        match (all, user.is_admin) {
            (false, _) => JobsOf::User(user.id),
            (true, true) => JobsOf::Everyone,
            (true, false) => {
                JobsOf::UserOrTeams(user.id, user.teams.iter().map(|t| t.id).collect())
            }
        }
    }
}

/// What a state change writes besides the state. `None` leaves a column.
#[derive(Debug, Clone, Default)]
pub struct JobChange {
    pub gpu_indices: Option<Vec<u32>>,
    pub node_id: Option<Option<i64>>,
    pub handle: Option<Option<String>>,
    /// The node the attempt runs on, by name.
    pub node: Option<Option<String>>,
    /// What runs the attempt there, in its executor's words (a pod).
    pub pod: Option<Option<String>>,
    pub exit_code: Option<Option<i32>>,
    pub started_at: Option<Option<i64>>,
    pub finished_at: Option<Option<i64>>,
    pub queued_at: Option<i64>,
    pub attempt: Option<u32>,
    /// Further attempts allowed: raised when an attempt ends through no
    /// fault of its own (its node went away), so that it spends none.
    pub retries: Option<u32>,
    pub cancel_requested: Option<bool>,
    /// The run of a new attempt.
    pub run_id: Option<String>,
    /// An entry for the timeline: (kind, message).
    pub event: Option<(String, String)>,
    /// Runs on GPUs borrowed beyond its team's quota.
    pub borrowed: Option<bool>,
    /// Why it is being preempted: set when it is asked to stop for a team
    /// within its quota, cleared when it is queued again.
    pub preempt_reason: Option<Option<String>>,
}

fn gpu_list(text: Option<&str>) -> Vec<u32> {
    text.unwrap_or_default()
        .split(',')
        .filter_map(|s| s.trim().parse().ok())
        .collect()
}

fn gpu_text(gpus: &[u32]) -> String {
    gpus.iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",")
}

/// Past this many ids a follower is told to reread every job instead, so
/// that one that stopped taking its changes holds bounded memory.
const MOST_CHANGED_IDS: usize = 100_000;

/// The jobs a follower was told of since it last took them (see
/// [`Store::follow_jobs`]).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct JobChanges {
    /// Reread every job: a change not made by one job's id (a node's
    /// removal clears its jobs' node), or more ids than are kept.
    pub all: bool,
    /// The jobs written since, in id order.
    pub ids: std::collections::BTreeSet<i64>,
}

/// A follower of one store's writes of jobs, for a reader that keeps the
/// unfinished jobs in memory and rereads only those that changed (the
/// supervisor's cycle). It is told after the write committed, of every
/// change but queue positions and pending reasons (written by the
/// supervisor itself from what it decided, and never read back by it).
/// Writes from outside this process, and the database's own (a team or
/// user deleted clears their jobs'), are not told: read everything now
/// and then.
pub struct JobFollower(std::sync::Arc<std::sync::Mutex<JobChanges>>);

impl JobFollower {
    /// What changed since the last take (or since it began to follow).
    pub fn take(&self) -> JobChanges {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The followers of a store's job writes; one that is dropped goes.
#[derive(Clone, Default)]
pub(crate) struct JobWrites(
    std::sync::Arc<std::sync::Mutex<Vec<std::sync::Weak<std::sync::Mutex<JobChanges>>>>>,
);

impl JobWrites {
    fn follow(&self) -> JobFollower {
        let changes = std::sync::Arc::new(std::sync::Mutex::new(JobChanges::default()));
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push(std::sync::Arc::downgrade(&changes));
        JobFollower(changes)
    }

    /// How many follow (the dropped ones go at the next change).
    #[cfg(test)]
    pub(crate) fn followers(&self) -> usize {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    /// Tells every follower of `ids` (`None`: of all jobs).
    pub(crate) fn changed(&self, ids: Option<&[i64]>) {
        let mut followers = self.0.lock().unwrap_or_else(|p| p.into_inner());
        followers.retain(|follower| {
            let Some(follower) = follower.upgrade() else {
                return false;
            };
            let mut changes = follower.lock().unwrap_or_else(|p| p.into_inner());
            match ids {
                Some(ids) if !changes.all => {
                    changes.ids.extend(ids.iter().copied());
                    if changes.ids.len() > MOST_CHANGED_IDS {
                        changes.all = true;
                        changes.ids.clear();
                    }
                }
                Some(_) => {}
                None => {
                    changes.all = true;
                    changes.ids.clear();
                }
            }
            true
        });
    }
}

fn record(m: job::Model) -> Result<JobRecord, StoreError> {
    let spec: JobSpec = serde_json::from_str(&m.spec)
        .map_err(|e| StoreError::Rejected(format!("job {} has an unreadable spec: {e}", m.id)))?;
    let state = JobState::parse(&m.state).unwrap_or(JobState::Lost);
    Ok(JobRecord {
        job: Job {
            id: m.id,
            name: m.name,
            state,
            experiment_id: m.experiment_id,
            run_id: m.run_id,
            template: m.template_slug,
            priority: m.priority,
            gpus: m.gpus.max(0) as u32,
            cpu_millis: m.cpu_millis.max(0) as u32,
            memory_mib: m.memory_mib.max(0) as u64,
            max_runtime_secs: m.max_runtime_secs.max(0) as u64,
            retries: m.retries.max(0) as u32,
            attempt: m.attempt.max(0) as u32,
            gpu_indices: gpu_list(m.gpu_indices.as_deref()),
            gpu_devices: m.gpu_devices.as_deref().map(|t| gpu_list(Some(t))),
            node: m.node,
            pod: m.pod,
            exit_code: m.exit_code,
            queue_position: m.queue_position.map(|p| p.max(0) as u32),
            pending_reason: m.pending_reason,
            cancel_requested: m.cancel_requested,
            created_at: m.created_at,
            queued_at: m.queued_at,
            started_at: m.started_at,
            finished_at: m.finished_at,
            spec,
            team: None,
            owner: None,
            borrowed: m.borrowed,
        },
        owner_id: m.owner_id,
        team_id: m.team_id,
        node_id: m.node_id,
        handle: m.handle,
        preempt_reason: m.preempt_reason,
        charged_from: m.charged_from,
    })
}

fn not_found_job(id: i64) -> StoreError {
    StoreError::NotFound(format!("job {id} does not exist"))
}

impl Store {
    /// Queues a job with its run and starts its timeline, in one
    /// transaction: all of it or nothing.
    pub async fn create_job(&self, new: NewJob) -> Result<JobRecord, StoreError> {
        let _turn = self.write_turn().await;
        let now = now_millis();
        let spec_json = serde_json::to_string(&new.spec)
            .map_err(|e| StoreError::Rejected(format!("the spec cannot be stored: {e}")))?;
        let experiment_id = new.run.experiment_id;
        let txn = self.begin_write().await?;
        let run_id = self.insert_run_in(&txn, new.run, "SCHEDULED").await?;
        if !new.params.is_empty() {
            self.insert_params(&txn, &run_id, &new.params).await?;
        }
        let model = job::ActiveModel {
            name: Set(new.spec.name.trim().to_owned()),
            owner_id: Set(new.owner_id),
            team_id: Set(new.team_id),
            experiment_id: Set(Some(experiment_id)),
            run_id: Set(Some(run_id.clone())),
            template_slug: Set(new.spec.template.clone()),
            state: Set(JobState::Queued.as_str().to_owned()),
            priority: Set(new.spec.priority),
            gpus: Set(new.spec.resources().gpus as i32),
            spec: Set(spec_json),
            attempt: Set(0),
            node_id: Set(None),
            exit_code: Set(None),
            created_at: Set(now),
            started_at: Set(None),
            finished_at: Set(None),
            cpu_millis: Set(new.cpu_millis as i32),
            memory_mib: Set(new.memory_mib as i64),
            max_runtime_secs: Set(new.max_runtime_secs as i64),
            retries: Set(new.spec.retries as i32),
            gpu_indices: Set(None),
            handle: Set(None),
            node: Set(None),
            pod: Set(None),
            queue_position: Set(None),
            pending_reason: Set(None),
            cancel_requested: Set(false),
            queued_at: Set(Some(now)),
            borrowed: Set(false),
            preempt_reason: Set(None),
            gpu_devices: Set(None),
            ..Default::default()
        }
        .insert(&txn)
        .await?;
        insert_event(&txn, model.id, now, "submitted".to_owned(), new.submitted).await?;
        let mut tags = vec![("trainyard.job_id".to_owned(), model.id.to_string())];
        tags.extend(new.tags);
        crate::tracking::upsert_run_tags(&txn, self.sql(), &run_id, &tags).await?;
        txn.commit().await?;
        self.run_changed(&run_id);
        self.job_writes.changed(Some(&[model.id]));
        // Its team and owner named, as every job that is answered.
        let mut made = record(model)?;
        self.name_teams(std::slice::from_mut(&mut made)).await?;
        Ok(made)
    }

    /// A job with its team's name filled in, for people to read.
    async fn named_job(&self, id: i64) -> Result<JobRecord, StoreError> {
        let mut record = self.get_job(id).await?;
        self.name_teams(std::slice::from_mut(&mut record)).await?;
        Ok(record)
    }

    pub async fn get_job(&self, id: i64) -> Result<JobRecord, StoreError> {
        let model = job::Entity::find_by_id(id)
            .one(self.connection())
            .await?
            .ok_or_else(|| not_found_job(id))?;
        record(model)
    }

    /// Jobs in the given states (all when empty), newest first.
    /// A job as the user may use it: one they may not see does not exist
    /// for them; one they may see but not change is Forbidden.
    pub async fn job_as(
        &self,
        user: &trainyard_domain::identity::User,
        id: i64,
        access: Access,
    ) -> Result<JobRecord, StoreError> {
        let record = self.named_job(id).await?;
        if !user.can_read(record.owner()) {
            return Err(StoreError::NotFound(format!("job {id} does not exist")));
        }
        if access == Access::Change && !user.can_change(record.owner()) {
            return Err(StoreError::Forbidden(format!(
                "job {id} is not yours: only its owner or an admin may change it"
            )));
        }
        Ok(record)
    }

    pub async fn find_jobs(
        &self,
        states: &[JobState],
        limit: u64,
        whose: &JobsOf,
    ) -> Result<Vec<JobRecord>, StoreError> {
        let mut query = job::Entity::find();
        match whose {
            JobsOf::Everyone => {}
            JobsOf::User(id) => query = query.filter(job::Column::OwnerId.eq(*id)),
            JobsOf::UserOrTeams(id, teams) => {
                query = query.filter(
                    sea_orm::Condition::any()
                        .add(job::Column::OwnerId.eq(*id))
                        .add(job::Column::TeamId.is_in(teams.iter().copied())),
                )
            }
        }
        if !states.is_empty() {
            query = query.filter(job::Column::State.is_in(states.iter().map(|s| s.as_str())));
        }
        let mut records = query
            .order_by_desc(job::Column::Id)
            .limit(limit)
            .all(self.connection())
            .await?
            .into_iter()
            .map(record)
            .collect::<Result<Vec<_>, _>>()?;
        self.name_teams(&mut records).await?;
        Ok(records)
    }

    /// Fills in the names of the jobs' teams and owners, for people to
    /// read.
    async fn name_teams(&self, records: &mut [JobRecord]) -> Result<(), StoreError> {
        let ids: std::collections::BTreeSet<i64> =
            records.iter().filter_map(|r| r.team_id).collect();
        if !ids.is_empty() {
            let names: std::collections::HashMap<i64, String> = crate::entity::team::Entity::find()
                .filter(crate::entity::team::Column::Id.is_in(ids))
                .all(self.connection())
                .await?
                .into_iter()
                .map(|t| (t.id, t.name))
                .collect();
            for r in records.iter_mut() {
                r.job.team = r.team_id.and_then(|t| names.get(&t).cloned());
            }
        }
        let owners: std::collections::BTreeSet<i64> =
            records.iter().filter_map(|r| r.owner_id).collect();
        if !owners.is_empty() {
            let names: std::collections::HashMap<i64, String> = crate::entity::user::Entity::find()
                .filter(crate::entity::user::Column::Id.is_in(owners))
                .all(self.connection())
                .await?
                .into_iter()
                .map(|u| (u.id, u.username))
                .collect();
            for r in records.iter_mut() {
                r.job.owner = r.owner_id.and_then(|u| names.get(&u).cloned());
            }
        }
        Ok(())
    }

    /// Follows this store's writes of jobs, from now (see [`JobFollower`]).
    pub fn follow_jobs(&self) -> JobFollower {
        self.job_writes.follow()
    }

    /// The jobs of `ids` that exist, whatever their state, in id order.
    pub async fn jobs_by_id(&self, ids: &[i64]) -> Result<Vec<JobRecord>, StoreError> {
        let mut records = Vec::with_capacity(ids.len());
        // A bound on the variables of one statement.
        for chunk in ids.chunks(500) {
            let models = job::Entity::find()
                .filter(job::Column::Id.is_in(chunk.iter().copied()))
                .all(self.connection())
                .await?;
            for model in models {
                records.push(record(model)?);
            }
        }
        // Sorted once here: callers may pass the ids in any order.
        records.sort_by_key(|r| r.job.id);
        Ok(records)
    }

    /// Every job that is not finished (queued, starting, running): what
    /// the scheduler and the executor work on, oldest (in id order) first.
    pub async fn active_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        job::Entity::find()
            .filter(job::Column::State.is_in([
                JobState::Queued.as_str(),
                JobState::Starting.as_str(),
                JobState::Running.as_str(),
            ]))
            .order_by_asc(job::Column::Id)
            .all(self.connection())
            .await?
            .into_iter()
            .map(record)
            .collect()
    }

    /// Records the GPUs a running attempt really got, as its node reported
    /// them (by index), if the job still runs on that node in that pod.
    /// Whether it was recorded.
    pub async fn set_job_gpu_devices(
        &self,
        id: i64,
        node: &str,
        pod: &str,
        devices: &[u32],
    ) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let updated = job::Entity::update_many()
            .col_expr(job::Column::GpuDevices, Expr::value(gpu_text(devices)))
            .filter(job::Column::Id.eq(id))
            .filter(job::Column::State.eq(JobState::Running.as_str()))
            .filter(job::Column::Node.eq(node))
            .filter(job::Column::Pod.eq(pod))
            .exec(self.connection())
            .await?;
        let recorded = updated.rows_affected == 1;
        if recorded {
            self.job_writes.changed(Some(&[id]));
        }
        Ok(recorded)
    }

    /// The jobs that held GPUs at some moment of `[from, to]`: started by
    /// `to` (one that started at `to` is running then), and not finished
    /// by `from`. Oldest first.
    pub async fn jobs_on_gpus_between(
        &self,
        from_ms: i64,
        to_ms: i64,
    ) -> Result<Vec<JobRecord>, StoreError> {
        job::Entity::find()
            .filter(job::Column::Gpus.gt(0))
            .filter(job::Column::StartedAt.lte(to_ms))
            .filter(
                sea_orm::Condition::any()
                    .add(job::Column::FinishedAt.is_null())
                    .add(job::Column::FinishedAt.gt(from_ms)),
            )
            .order_by_asc(job::Column::Id)
            .all(self.connection())
            .await?
            .into_iter()
            .map(record)
            .collect()
    }

    /// Deletes an ended job's record and timeline (and the record of the
    /// checkpoints it keeps), unless a job that has not ended took its
    /// checkpoints: whether it went. Its runs stay.
    pub async fn delete_job(&self, id: i64) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push(
            "DELETE FROM jobs WHERE state IN ('SUCCEEDED', 'FAILED', 'CANCELLED', 'LOST') AND id = ",
        )
        .bind(id)
        .push(&format!(
            " AND NOT EXISTS (SELECT 1 FROM kept_checkpoints WHERE NOT {} AND job_id = ",
            crate::checkpoints::NOT_HELD
        ))
        .bind(id)
        .push(")");
        let done = sea_orm::ConnectionTrait::execute_raw(self.connection(), sql.build()).await?;
        Ok(done.rows_affected() > 0)
    }

    pub async fn job_events(&self, id: i64) -> Result<Vec<JobEvent>, StoreError> {
        Ok(job_event::Entity::find()
            .filter(job_event::Column::JobId.eq(id))
            .order_by_asc(job_event::Column::Id)
            .all(self.connection())
            .await?
            .into_iter()
            .map(|e| JobEvent {
                time: e.time,
                kind: e.kind,
                message: e.message,
            })
            .collect())
    }

    /// Moves a job to `to` if it is in one of `from`, writing `change` with
    /// it. Returns false (and writes nothing) when the job was elsewhere.
    pub async fn move_job(
        &self,
        id: i64,
        from: &[JobState],
        to: JobState,
        change: JobChange,
    ) -> Result<bool, StoreError> {
        let moved = self.move_jobs(vec![(id, from, to, change)]).await?;
        Ok(moved.first().copied().unwrap_or(false))
    }

    /// [`Store::move_job`] for many jobs in one transaction (a cycle's
    /// starts): whether each moved, in the order given.
    pub async fn move_jobs(
        &self,
        moves: Vec<(i64, &[JobState], JobState, JobChange)>,
    ) -> Result<Vec<bool>, StoreError> {
        if moves.is_empty() {
            return Ok(Vec::new());
        }
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut moved = Vec::with_capacity(moves.len());
        let mut ids = Vec::with_capacity(moves.len());
        for (id, from, to, change) in moves {
            let done = move_job_in(&txn, id, from, to, change).await?;
            if done {
                ids.push(id);
            }
            moved.push(done);
        }
        txn.commit().await?;
        self.job_writes.changed(Some(&ids));
        Ok(moved)
    }
}

/// `update` only where the job's attempt and charge are still those of
/// `seen`: what keeps a part of an attempt from being charged twice.
fn unchanged_charge(
    update: sea_orm::UpdateMany<job::Entity>,
    seen: &job::Model,
) -> sea_orm::UpdateMany<job::Entity> {
    let update = match seen.started_at {
        Some(at) => update.filter(job::Column::StartedAt.eq(at)),
        None => update.filter(job::Column::StartedAt.is_null()),
    };
    match seen.charged_from {
        Some(at) => update.filter(job::Column::ChargedFrom.eq(at)),
        None => update.filter(job::Column::ChargedFrom.is_null()),
    }
}

/// The GPU time of a running attempt not charged yet, up to `now`.
fn charge_span(record: &JobRecord, now: i64) -> Option<crate::GpuSpan> {
    let gpus = record.job.gpu_indices.len() as u32;
    let from = record.charge_start()?;
    (gpus > 0 && matches!(record.job.state, JobState::Starting | JobState::Running)).then(|| {
        crate::GpuSpan {
            team_id: record.team_id.unwrap_or(0),
            user_id: record.owner_id.unwrap_or(0),
            from_ms: from,
            to_ms: now.max(from),
            gpus,
        }
    })
}

/// An entry in a job's timeline, at `time`.
async fn insert_event(
    db: &impl sea_orm::ConnectionTrait,
    id: i64,
    time: i64,
    kind: String,
    message: String,
) -> Result<(), StoreError> {
    job_event::ActiveModel {
        job_id: Set(id),
        time: Set(time),
        kind: Set(kind),
        message: Set(message),
        ..Default::default()
    }
    .insert(db)
    .await?;
    Ok(())
}

/// One job's move within a transaction.
async fn move_job_in(
    txn: &sea_orm::DatabaseTransaction,
    id: i64,
    from: &[JobState],
    to: JobState,
    change: JobChange,
) -> Result<bool, StoreError> {
    let mut update = job::Entity::update_many()
        .col_expr(job::Column::State, Expr::value(to.as_str()))
        .filter(job::Column::Id.eq(id))
        .filter(job::Column::State.is_in(from.iter().map(|s| s.as_str())));
    if to != JobState::Queued {
        update = update
            .col_expr(job::Column::QueuePosition, Expr::value(Option::<i32>::None))
            .col_expr(
                job::Column::PendingReason,
                Expr::value(Option::<String>::None),
            );
    }
    if let Some(gpus) = &change.gpu_indices {
        let text = (!gpus.is_empty()).then(|| gpu_text(gpus));
        update = update
            .col_expr(job::Column::GpuIndices, Expr::value(text))
            // A new pick: what the node reported of the last one is gone.
            .col_expr(job::Column::GpuDevices, Expr::value(Option::<String>::None));
    }
    if let Some(v) = change.node_id {
        update = update.col_expr(job::Column::NodeId, Expr::value(v));
    }
    if let Some(v) = change.handle {
        update = update.col_expr(job::Column::Handle, Expr::value(v));
    }
    if let Some(v) = change.node {
        update = update.col_expr(job::Column::Node, Expr::value(v));
    }
    if let Some(v) = change.pod {
        update = update.col_expr(job::Column::Pod, Expr::value(v));
    }
    if let Some(v) = change.exit_code {
        update = update.col_expr(job::Column::ExitCode, Expr::value(v));
    }
    if let Some(v) = change.started_at {
        // A new attempt (or none): nothing of it is charged yet.
        update = update
            .col_expr(job::Column::StartedAt, Expr::value(v))
            .col_expr(job::Column::ChargedFrom, Expr::value(Option::<i64>::None));
    }
    if let Some(v) = change.borrowed {
        update = update.col_expr(job::Column::Borrowed, Expr::value(v));
    }
    if let Some(v) = change.preempt_reason {
        update = update.col_expr(job::Column::PreemptReason, Expr::value(v));
    }
    if let Some(v) = change.finished_at {
        update = update.col_expr(job::Column::FinishedAt, Expr::value(v));
    }
    if let Some(v) = change.queued_at {
        update = update.col_expr(job::Column::QueuedAt, Expr::value(v));
    }
    if let Some(v) = change.attempt {
        update = update.col_expr(job::Column::Attempt, Expr::value(v as i32));
    }
    if let Some(v) = change.retries {
        update = update.col_expr(job::Column::Retries, Expr::value(v as i32));
    }
    if let Some(v) = change.cancel_requested {
        update = update.col_expr(job::Column::CancelRequested, Expr::value(v));
    }
    if let Some(v) = change.run_id {
        update = update.col_expr(job::Column::RunId, Expr::value(v));
    }
    let moved = update.exec(txn).await?.rows_affected == 1;
    if moved && let Some((kind, message)) = change.event {
        insert_event(txn, id, now_millis(), kind, message).await?;
    }
    Ok(moved)
}

impl Store {
    /// Adds an entry to a job's timeline.
    pub async fn add_job_event(
        &self,
        id: i64,
        kind: &str,
        message: &str,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        insert_event(
            self.connection(),
            id,
            now_millis(),
            kind.to_owned(),
            message.to_owned(),
        )
        .await
    }

    /// Writes queued jobs' positions and reasons, in one transaction.
    pub async fn set_queue_positions(
        &self,
        positions: &[(i64, u32, String)],
    ) -> Result<(), StoreError> {
        if positions.is_empty() {
            return Ok(());
        }
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        for (id, position, reason) in positions {
            job::Entity::update_many()
                .col_expr(job::Column::QueuePosition, Expr::value(*position as i32))
                .col_expr(job::Column::PendingReason, Expr::value(reason.clone()))
                .filter(job::Column::Id.eq(*id))
                .filter(job::Column::State.eq(JobState::Queued.as_str()))
                .exec(&txn)
                .await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Files a job that has not ended (and its current run) under another
    /// team, with `event` in its timeline: the queue counts it against
    /// that team from the next cycle. A running attempt's GPU time so far
    /// is charged to the team it ran for, in the same transaction, and the
    /// rest of it goes to the new team when it ends; that charge is in the
    /// answer, for the decayed usage. Rejected once the job has ended.
    pub async fn set_job_team(
        &self,
        id: i64,
        team_id: Option<i64>,
        event: &str,
    ) -> Result<(JobRecord, Option<crate::GpuSpan>), StoreError> {
        let current = self.get_job(id).await?;
        let ended = || {
            StoreError::Rejected(format!(
                "job {id} has already ended ({}); its GPU time is counted against the team it ran for",
                current.job.state.label()
            ))
        };
        if current.job.state.is_terminal() {
            return Err(ended());
        }
        let charged = {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            // The job as it is now, read in the same transaction (a retry
            // may have given it a new attempt and run since `current`).
            let Some(before) = job::Entity::find_by_id(id).one(&txn).await? else {
                return Err(not_found_job(id));
            };
            let now = now_millis();
            // Only if its attempt and charge are still what was read: two
            // moves at once (PostgreSQL takes no write turn), or its
            // attempt's end charged meanwhile, would charge a part twice.
            let moved = unchanged_charge(
                job::Entity::update_many()
                    .col_expr(job::Column::TeamId, Expr::value(team_id))
                    .col_expr(job::Column::ChargedFrom, Expr::value(now))
                    .filter(job::Column::Id.eq(id))
                    .filter(
                        job::Column::State.is_in(
                            [JobState::Queued, JobState::Starting, JobState::Running]
                                .map(|s| s.as_str()),
                        ),
                    ),
                &before,
            )
            .exec(&txn)
            .await?
            .rows_affected
                == 1;
            if !moved {
                let now_ended = job::Entity::find_by_id(id)
                    .one(&txn)
                    .await?
                    .and_then(|m| JobState::parse(&m.state))
                    .is_none_or(JobState::is_terminal);
                return Err(if now_ended {
                    ended()
                } else {
                    StoreError::Rejected(format!(
                        "job {id} changed while it was being moved (another move, or its attempt ended); look at it again and retry"
                    ))
                });
            }
            let before = record(before)?;
            let charged = charge_span(&before, now);
            if let Some(span) = &charged {
                self.add_gpu_usage_in(&txn, std::slice::from_ref(span))
                    .await?;
            }
            if let Some(run_id) = &before.job.run_id {
                crate::entity::run::Entity::update_many()
                    .col_expr(crate::entity::run::Column::TeamId, Expr::value(team_id))
                    .filter(crate::entity::run::Column::Id.eq(run_id.as_str()))
                    .exec(&txn)
                    .await?;
            }
            insert_event(&txn, id, now, "team".to_owned(), event.to_owned()).await?;
            txn.commit().await?;
            self.job_writes.changed(Some(&[id]));
            charged
        };
        Ok((self.named_job(id).await?, charged))
    }

    /// Charges what an attempt that ended (attempt started at
    /// `started_at`) used and is not charged yet, to the team it runs for
    /// now, and marks it charged, in one transaction guarded as a move is:
    /// a move at the same moment is charged once, by one or the other. The
    /// span charged, if any (the attempt has moved on, or used no GPU).
    pub async fn charge_attempt(
        &self,
        id: i64,
        started_at: i64,
    ) -> Result<Option<crate::GpuSpan>, StoreError> {
        for _ in 0..3 {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let Some(seen) = job::Entity::find_by_id(id).one(&txn).await? else {
                return Ok(None);
            };
            if seen.started_at != Some(started_at) {
                return Ok(None);
            }
            let now = now_millis();
            let marked = unchanged_charge(
                job::Entity::update_many()
                    .col_expr(job::Column::ChargedFrom, Expr::value(now))
                    .filter(job::Column::Id.eq(id)),
                &seen,
            )
            .exec(&txn)
            .await?
            .rows_affected
                == 1;
            if !marked {
                // Moved meanwhile: read again.
                continue;
            }
            let charged = charge_span(&record(seen)?, now);
            if let Some(span) = &charged {
                self.add_gpu_usage_in(&txn, std::slice::from_ref(span))
                    .await?;
            }
            txn.commit().await?;
            return Ok(charged);
        }
        Err(StoreError::Rejected(format!(
            "job {id} kept changing while its GPU time was charged"
        )))
    }

    /// Asks for a job to stop. A queued job is cancelled at once; a running
    /// one is marked, and the executor stops it. Finished jobs are refused.
    /// `by`: who asked, when not the job's owner (an admin), for its
    /// timeline.
    pub async fn request_cancel(&self, id: i64, by: Option<&str>) -> Result<JobRecord, StoreError> {
        let by = by.map(|name| format!(" by {name}")).unwrap_or_default();
        let current = self.get_job(id).await?;
        if current.job.state.is_terminal() {
            return Err(StoreError::Rejected(format!(
                "job {id} has already ended ({}); there is nothing to cancel",
                current.job.state.label()
            )));
        }
        let now = now_millis();
        let cancelled_in_queue = self
            .move_job(
                id,
                &[JobState::Queued],
                JobState::Cancelled,
                JobChange {
                    finished_at: Some(Some(now)),
                    cancel_requested: Some(true),
                    event: Some(("cancelled".into(), format!("cancelled while queued{by}"))),
                    ..Default::default()
                },
            )
            .await?;
        if !cancelled_in_queue {
            // Starting or running: the executor sees the mark and stops it.
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let marked = job::Entity::update_many()
                .col_expr(job::Column::CancelRequested, Expr::value(true))
                .filter(job::Column::Id.eq(id))
                .filter(job::Column::CancelRequested.eq(false))
                .filter(
                    job::Column::State
                        .is_in([JobState::Starting.as_str(), JobState::Running.as_str()]),
                )
                .exec(&txn)
                .await?
                .rows_affected
                == 1;
            if marked {
                insert_event(
                    &txn,
                    id,
                    now,
                    "cancel".to_owned(),
                    format!("cancel requested{by}; stopping"),
                )
                .await?;
            }
            txn.commit().await?;
            if marked {
                self.job_writes.changed(Some(&[id]));
            }
        }
        self.named_job(id).await
    }
}
