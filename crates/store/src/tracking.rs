//! Tracking with MLflow's rules: experiments, runs, params (write-once),
//! tags (last write wins), metrics (appended in chunks, latest value kept
//! for search), and search over runs and experiments.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, DatabaseTransaction, EntityTrait, QueryResult, QuerySelect, Value};
use trainyard_domain::query::{Attribute, Expr, Field, OrderBy, Scope};
use trainyard_domain::tracking::{Experiment, LatestMetric, Point, Run, RunInfo, ViewType};

use crate::sql::{Sql, filter};
use crate::{Store, StoreError, chunks, now_millis};
use trainyard_domain::identity::{Owner, User};

/// Whose experiments and runs a read may return.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Viewer {
    /// An admin: everything.
    Everyone,
    /// A user: their own things and their teams'.
    Member { user_id: i64, teams: Vec<i64> },
}

impl Viewer {
    pub fn of(user: &User) -> Viewer {
        if user.is_admin {
            Viewer::Everyone
        } else {
            Viewer::Member {
                user_id: user.id,
                teams: user.teams.iter().map(|t| t.id).collect(),
            }
        }
    }

    /// The same restriction for a SeaORM query: everything for an admin,
    /// else rows of the user or of one of their teams.
    pub(crate) fn condition(
        &self,
        owner: impl sea_orm::ColumnTrait,
        team: impl sea_orm::ColumnTrait,
    ) -> sea_orm::Condition {
        match self {
            Viewer::Everyone => sea_orm::Condition::all(),
            Viewer::Member { user_id, teams } => sea_orm::Condition::any()
                .add(owner.eq(*user_id))
                .add(team.is_in(teams.iter().copied())),
        }
    }

    /// Adds ` AND (owner = me OR team IN my teams [OR also])`.
    pub(crate) fn restrict(&self, sql: &mut Sql, owner: &str, team: &str, also: Option<&str>) {
        let Viewer::Member { user_id, teams } = self else {
            return;
        };
        sql.push(&format!(" AND ({owner} = ")).bind(*user_id);
        if !teams.is_empty() {
            sql.push(&format!(" OR {team} IN "))
                .bind_list(teams.iter().copied());
        }
        if let Some(also) = also {
            sql.push(" OR ").push(also);
        }
        sql.push(")");
    }
}

/// MLflow's Default experiment: shared by everyone, its runs each their own.
pub const DEFAULT_EXPERIMENT: i64 = 0;

/// A metric point as logged: key and point.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricIn {
    pub key: String,
    pub point: Point,
}

/// What `create_run` needs.
#[derive(Debug, Clone, Default)]
pub struct NewRun {
    pub experiment_id: i64,
    /// The name MLflow shows as the run's user.
    pub user_id: String,
    /// The account that owns the run, and the team it is filed under.
    pub owner_id: Option<i64>,
    pub team_id: Option<i64>,
    pub run_name: Option<String>,
    pub start_time: Option<i64>,
    pub tags: Vec<(String, String)>,
}

const RUN_NAME_TAG: &str = "mlflow.runName";
/// The models logged in a run, as MLflow's clients record them.
pub const LOGGED_MODELS_TAG: &str = "mlflow.log-model.history";

/// Orders two metric values as MLflow breaks a tie between points of one
/// step and timestamp: the larger wins, NaN (stored as NULL) lowest.
fn nan_lowest(a: f64, b: f64) -> std::cmp::Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => std::cmp::Ordering::Equal,
        (true, false) => std::cmp::Ordering::Less,
        (false, true) => std::cmp::Ordering::Greater,
        (false, false) => a.partial_cmp(&b).unwrap_or(std::cmp::Ordering::Equal),
    }
}

pub(crate) fn get<T: sea_orm::TryGetable>(row: &QueryResult, col: &str) -> Result<T, StoreError> {
    Ok(row.try_get::<T>("", col)?)
}

fn not_found_run(run_id: &str) -> StoreError {
    StoreError::NotFound(format!("Run with id={run_id} not found"))
}

fn not_found_experiment(id: i64) -> StoreError {
    StoreError::NotFound(format!("No Experiment with id={id} exists"))
}

impl Store {
    pub(crate) fn sql(&self) -> Sql {
        Sql::new(self.connection().get_database_backend())
    }

    // ---------------------------------------------------------------- experiments

    /// Creates an experiment; MLflow's name rules are checked by the caller.
    pub async fn create_experiment_with(
        &self,
        name: &str,
        artifact_location: Option<&str>,
        tags: &[(String, String)],
        owner: Owner,
    ) -> Result<i64, StoreError> {
        let _turn = self.write_turn().await;
        let now = now_millis();
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push("INSERT INTO experiments (name, artifact_location, owner_id, team_id, lifecycle_stage, creation_time, last_update_time) VALUES (")
            .bind(name.to_owned())
            .push(", ")
            .bind(artifact_location.unwrap_or("").to_owned())
            .push(", ")
            .bind(owner.user_id)
            .push(", ")
            .bind(owner.team_id)
            .push(", 'active', ")
            .bind(now)
            .push(", ")
            .bind(now)
            .push(") RETURNING id");
        let row = txn
            .query_one_raw(sql.build())
            .await
            .map_err(|err| match err.sql_err() {
                Some(sea_orm::SqlErr::UniqueConstraintViolation(_)) => StoreError::Conflict {
                    what: format!("Experiment(name={name})"),
                },
                _ => StoreError::Db(err),
            })?
            .ok_or_else(|| StoreError::Db(sea_orm::DbErr::RecordNotInserted))?;
        let id: i64 = get(&row, "id")?;
        if artifact_location.unwrap_or("").is_empty() {
            let mut sql = self.sql();
            sql.push("UPDATE experiments SET artifact_location = ")
                .bind(format!("mlflow-artifacts:/{id}"))
                .push(" WHERE id = ")
                .bind(id);
            txn.execute_raw(sql.build()).await?;
        }
        for (key, value) in tags {
            upsert_experiment_tag(&txn, self.sql(), id, key, value).await?;
        }
        txn.commit().await?;
        Ok(id)
    }

    pub async fn get_experiment(&self, id: i64) -> Result<Experiment, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT * FROM experiments e WHERE e.id = ")
            .bind(id);
        self.one_experiment(sql)
            .await?
            .ok_or_else(|| not_found_experiment(id))
    }

    pub async fn get_experiment_by_name(&self, name: &str) -> Result<Experiment, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT * FROM experiments e WHERE e.name = ")
            .bind(name.to_owned());
        self.one_experiment(sql).await?.ok_or_else(|| {
            StoreError::NotFound(format!("Could not find experiment with name '{name}'"))
        })
    }

    async fn one_experiment(&self, sql: Sql) -> Result<Option<Experiment>, StoreError> {
        let rows = self.connection().query_all_raw(sql.build()).await?;
        let mut list = self.experiments_from_rows(&rows).await?;
        Ok(list.pop())
    }

    async fn experiments_from_rows(
        &self,
        rows: &[QueryResult],
    ) -> Result<Vec<Experiment>, StoreError> {
        let mut out = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(Experiment {
                id: get(row, "id")?,
                name: get(row, "name")?,
                artifact_location: get(row, "artifact_location")?,
                lifecycle_stage: get(row, "lifecycle_stage")?,
                creation_time: get(row, "creation_time")?,
                last_update_time: get(row, "last_update_time")?,
                tags: Vec::new(),
            });
        }
        if out.is_empty() {
            return Ok(out);
        }
        let mut sql = self.sql();
        sql.push("SELECT experiment_id, key, value FROM experiment_tags WHERE experiment_id IN ")
            .bind_list(out.iter().map(|e| e.id))
            .push(" ORDER BY key");
        let tag_rows = self.connection().query_all_raw(sql.build()).await?;
        let index: HashMap<i64, usize> = out.iter().enumerate().map(|(i, e)| (e.id, i)).collect();
        for row in tag_rows {
            let id: i64 = get(&row, "experiment_id")?;
            if let Some(&i) = index.get(&id) {
                out[i].tags.push((get(&row, "key")?, get(&row, "value")?));
            }
        }
        Ok(out)
    }

    /// Experiments matching a filter, in order; `limit + 1` rows tell the
    /// caller whether another page exists.
    pub async fn search_experiments(
        &self,
        filter_expr: Option<&Expr>,
        order: &[OrderBy],
        view: ViewType,
        limit: u64,
        offset: u64,
        viewer: &Viewer,
    ) -> Result<Vec<Experiment>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT e.* FROM experiments e WHERE e.lifecycle_stage IN ")
            .bind_list(view.stages().iter().map(|s| s.to_string()));
        viewer.restrict(&mut sql, "e.owner_id", "e.team_id", Some("e.id = 0"));
        if let Some(expr) = filter_expr {
            sql.push(" AND ");
            filter(&mut sql, expr, Scope::Experiments);
        }
        sql.push(" ORDER BY ");
        let mut terms: Vec<String> = Vec::new();
        let mut has_id = false;
        for o in order {
            let dir = if o.ascending { "ASC" } else { "DESC" };
            let column = match &o.field {
                Field::Attr(Attribute::Name) => "e.name",
                Field::Attr(Attribute::ExperimentId) => {
                    has_id = true;
                    "e.id"
                }
                Field::Attr(Attribute::CreationTime) => "e.creation_time",
                Field::Attr(Attribute::LastUpdateTime) => "e.last_update_time",
                other => {
                    return Err(StoreError::Rejected(format!(
                        "Invalid order_by field {other:?}; experiments order by name, experiment_id, creation_time or last_update_time"
                    )));
                }
            };
            terms.push(format!("{column} {dir}"));
        }
        if terms.is_empty() {
            terms.push("e.creation_time DESC".to_owned());
            terms.push("e.id ASC".to_owned());
        } else if !has_id {
            terms.push("e.id DESC".to_owned());
        }
        sql.push(&terms.join(", "));
        sql.push(" LIMIT ")
            .bind(limit as i64)
            .push(" OFFSET ")
            .bind(offset as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        self.experiments_from_rows(&rows).await
    }

    pub async fn rename_experiment(&self, id: i64, new_name: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let experiment = self.get_experiment(id).await?;
        if experiment.lifecycle_stage != "active" {
            return Err(StoreError::Rejected(
                "Cannot rename a non-active experiment.".to_owned(),
            ));
        }
        let mut sql = self.sql();
        sql.push("UPDATE experiments SET name = ")
            .bind(new_name.to_owned())
            .push(", last_update_time = ")
            .bind(now_millis())
            .push(" WHERE id = ")
            .bind(id);
        self.connection()
            .execute_raw(sql.build())
            .await
            .map_err(|err| match err.sql_err() {
                Some(sea_orm::SqlErr::UniqueConstraintViolation(_)) => StoreError::Conflict {
                    what: format!("Experiment(name={new_name})"),
                },
                _ => StoreError::Db(err),
            })?;
        Ok(())
    }

    /// Deletes (or restores) an experiment and every run in it.
    pub async fn set_experiment_deleted(&self, id: i64, deleted: bool) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let (from, to) = if deleted {
            ("active", "deleted")
        } else {
            ("deleted", "active")
        };
        let txn = self.begin_write().await?;
        // Locked for update on PostgreSQL, to the commit: a job or run
        // being made in it (which reads it under a share lock) is
        // committed first and counted below, or waits and then finds it
        // deleted. Not its key: rows that merely refer to it (tags,
        // traces) are not held up. On SQLite both hold the write turn.
        let experiment = crate::entity::experiment::Entity::find_by_id(id)
            .lock(sea_orm::sea_query::LockType::NoKeyUpdate)
            .one(&txn)
            .await?
            .ok_or_else(|| not_found_experiment(id))?;
        if experiment.lifecycle_stage != from {
            return Err(not_found_experiment(id));
        }
        // A job that has not ended logs into it, and its next attempt
        // needs a new run there: archived under it, the job could not go
        // on.
        if deleted {
            use crate::entity::job;
            use sea_orm::{ColumnTrait, QueryFilter, QueryOrder};
            use trainyard_domain::JobState;
            let unfinished: Vec<i64> = job::Entity::find()
                .select_only()
                .column(job::Column::Id)
                .filter(job::Column::ExperimentId.eq(id))
                .filter(job::Column::State.is_in(
                    [JobState::Queued, JobState::Starting, JobState::Running].map(|s| s.as_str()),
                ))
                .order_by_asc(job::Column::Id)
                .limit(11)
                .into_tuple()
                .all(&txn)
                .await?;
            if !unfinished.is_empty() {
                let mut ids: Vec<String> =
                    unfinished.iter().take(10).map(|j| j.to_string()).collect();
                if unfinished.len() > 10 {
                    ids.push("…".to_owned());
                }
                return Err(StoreError::Rejected(format!(
                    "experiment {id} has jobs that have not ended ({}); cancel them or let them end, then delete it",
                    ids.join(", ")
                )));
            }
        }
        let mut sql = self.sql();
        sql.push("UPDATE experiments SET lifecycle_stage = ")
            .bind(to)
            .push(", last_update_time = ")
            .bind(now_millis())
            .push(" WHERE id = ")
            .bind(id);
        txn.execute_raw(sql.build()).await?;
        let mut sql = self.sql();
        sql.push("UPDATE runs SET lifecycle_stage = ")
            .bind(to)
            .push(" WHERE experiment_id = ")
            .bind(id);
        txn.execute_raw(sql.build()).await?;
        txn.commit().await?;
        Ok(())
    }

    pub async fn set_experiment_tag(
        &self,
        id: i64,
        key: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        self.require_active_experiment(id).await?;
        upsert_experiment_tag(self.connection(), self.sql(), id, key, value).await
    }

    pub async fn delete_experiment_tag(&self, id: i64, key: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        self.require_active_experiment(id).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM experiment_tags WHERE experiment_id = ")
            .bind(id)
            .push(" AND key = ")
            .bind(key.to_owned());
        let done = self.connection().execute_raw(sql.build()).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!(
                "No tag with name: {key} in experiment with id {id}"
            )));
        }
        Ok(())
    }

    /// Which of `ids` the viewer may see (Default always): one query, for
    /// pages that link to many runs' experiments at once.
    pub async fn readable_experiments(
        &self,
        ids: &[i64],
        viewer: &Viewer,
    ) -> Result<std::collections::HashSet<i64>, StoreError> {
        if ids.is_empty() {
            return Ok(Default::default());
        }
        let mut sql = self.sql();
        sql.push("SELECT e.id FROM experiments e WHERE e.id IN ")
            .bind_list(ids.iter().copied());
        viewer.restrict(&mut sql, "e.owner_id", "e.team_id", Some("e.id = 0"));
        let rows = self.connection().query_all_raw(sql.build()).await?;
        rows.iter()
            .map(|row| row.try_get::<i64>("", "id").map_err(StoreError::from))
            .collect()
    }

    /// Whose an experiment is.
    pub async fn experiment_owner(&self, id: i64) -> Result<Owner, StoreError> {
        let found = crate::entity::experiment::Entity::find_by_id(id)
            .one(self.connection())
            .await?
            .ok_or_else(|| not_found_experiment(id))?;
        Ok(Owner::new(found.owner_id, found.team_id))
    }

    /// May the user see (Read) or change (Change) the experiment? One they
    /// may not see does not exist for them. Everyone sees Default; only
    /// admins change it.
    pub async fn experiment_as(
        &self,
        user: &User,
        id: i64,
        access: crate::Access,
    ) -> Result<(), StoreError> {
        if user.is_admin {
            return Ok(());
        }
        let owner = self.experiment_owner(id).await?;
        let shared = id == DEFAULT_EXPERIMENT;
        if !shared && !user.can_read(owner) {
            return Err(not_found_experiment(id));
        }
        if access == crate::Access::Change && !user.can_change(owner) {
            return Err(StoreError::Forbidden(format!(
                "experiment {id} is not yours: only its owner or an admin may change it"
            )));
        }
        Ok(())
    }

    /// May the user create runs in the experiment: their own, or Default.
    pub async fn may_add_runs(&self, user: &User, id: i64) -> Result<(), StoreError> {
        if id == DEFAULT_EXPERIMENT {
            self.experiment_owner(id).await?;
            return Ok(());
        }
        self.experiment_as(user, id, crate::Access::Change).await
    }

    async fn require_active_experiment(&self, id: i64) -> Result<Experiment, StoreError> {
        let experiment = self.get_experiment(id).await?;
        if experiment.lifecycle_stage != "active" {
            return Err(StoreError::Rejected(format!(
                "The experiment {id} must be in the 'active' state. Current state is {}.",
                experiment.lifecycle_stage
            )));
        }
        Ok(experiment)
    }

    // ------------------------------------------------------------------------ runs

    pub async fn create_run(&self, new: NewRun) -> Result<Run, StoreError> {
        let run_id = self.insert_run(new, "RUNNING").await?;
        self.get_run(&run_id).await
    }

    /// Creates a run in `status` (RUNNING, or SCHEDULED for a job's run that
    /// waits for its start) and returns its id.
    pub async fn insert_run(&self, new: NewRun, status: &str) -> Result<String, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let run_id = self.insert_run_in(&txn, new, status).await?;
        txn.commit().await?;
        Ok(run_id)
    }

    /// [`Store::insert_run`] within a transaction (the caller holds the
    /// write turn).
    pub(crate) async fn insert_run_in(
        &self,
        txn: &DatabaseTransaction,
        new: NewRun,
        status: &str,
    ) -> Result<String, StoreError> {
        // Read under a share lock on PostgreSQL, held to the commit: a
        // deletion of the experiment (which takes it exclusively) waits
        // for the run, or the run sees the experiment deleted. SQLite has
        // no row locks; there both hold the write turn.
        let experiment = crate::entity::experiment::Entity::find_by_id(new.experiment_id)
            .lock_shared()
            .one(txn)
            .await?
            .ok_or_else(|| not_found_experiment(new.experiment_id))?;
        if experiment.lifecycle_stage != "active" {
            return Err(StoreError::Rejected(format!(
                "The experiment {} must be in the 'active' state. Current state is {}.",
                new.experiment_id, experiment.lifecycle_stage
            )));
        }
        // A run is filed under its experiment's team, so that whoever sees
        // the experiment sees its runs; in Default, under its creator's.
        let team_id = experiment.team_id.or(new.team_id);
        let tag_name = new
            .tags
            .iter()
            .rev()
            .find(|(k, _)| k == RUN_NAME_TAG)
            .map(|(_, v)| v.clone());
        let given = new.run_name.clone().filter(|n| !n.is_empty());
        if let (Some(name), Some(tag)) = (&given, &tag_name)
            && name != tag
        {
            return Err(StoreError::Rejected(format!(
                "Both 'run_name' argument and 'mlflow.runName' tag are specified, but with different values (run_name='{name}', mlflow.runName='{tag}')."
            )));
        }
        let run_id = uuid::Uuid::new_v4().simple().to_string();
        let name = given.or(tag_name).unwrap_or_else(random_run_name);
        let artifact_uri = format!(
            "{}/{run_id}/artifacts",
            experiment.artifact_location.trim_end_matches('/')
        );
        let start_time = new.start_time.unwrap_or_else(now_millis);
        let mut sql = self.sql();
        sql.push("INSERT INTO runs (id, experiment_id, name, user_id, team_id, user_name, status, start_time, lifecycle_stage, artifact_uri) VALUES (")
            .bind(run_id.clone())
            .push(", ")
            .bind(new.experiment_id)
            .push(", ")
            .bind(name.clone())
            .push(", ")
            .bind(new.owner_id)
            .push(", ")
            .bind(team_id)
            .push(", ")
            .bind(new.user_id.clone())
            .push(", ")
            .bind(status.to_owned())
            .push(", ")
            .bind(start_time)
            .push(", 'active', ")
            .bind(artifact_uri)
            .push(")");
        txn.execute_raw(sql.build()).await?;
        let mut tags = new.tags.clone();
        if !tags.iter().any(|(k, _)| k == RUN_NAME_TAG) {
            tags.push((RUN_NAME_TAG.to_owned(), name));
        }
        upsert_run_tags(txn, self.sql(), &run_id, &tags).await?;
        Ok(run_id)
    }

    pub async fn get_run(&self, run_id: &str) -> Result<Run, StoreError> {
        let mut runs = self.load_runs(&[run_id.to_owned()]).await?;
        runs.pop().ok_or_else(|| not_found_run(run_id))
    }

    /// Runs by id, in the order given, with their params, tags and latest metrics.
    pub async fn load_runs(&self, ids: &[String]) -> Result<Vec<Run>, StoreError> {
        let mut runs: Vec<Run> = Vec::with_capacity(ids.len());
        let mut index: HashMap<String, usize> = HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let mut sql = self.sql();
            sql.push("SELECT * FROM runs WHERE id IN ")
                .bind_list(chunk.iter().cloned());
            for row in self.connection().query_all_raw(sql.build()).await? {
                let info = RunInfo {
                    run_id: get(&row, "id")?,
                    experiment_id: get(&row, "experiment_id")?,
                    run_name: get(&row, "name")?,
                    user_id: get(&row, "user_name")?,
                    status: get(&row, "status")?,
                    start_time: get(&row, "start_time")?,
                    end_time: get(&row, "end_time")?,
                    artifact_uri: get(&row, "artifact_uri")?,
                    lifecycle_stage: get(&row, "lifecycle_stage")?,
                };
                index.insert(info.run_id.clone(), runs.len());
                runs.push(Run {
                    info,
                    metrics: Vec::new(),
                    params: Vec::new(),
                    tags: Vec::new(),
                });
            }
            for table in ["params", "tags"] {
                let mut sql = self.sql();
                sql.push(&format!(
                    "SELECT run_id, key, value FROM {table} WHERE run_id IN "
                ))
                .bind_list(chunk.iter().cloned())
                .push(" ORDER BY key");
                for row in self.connection().query_all_raw(sql.build()).await? {
                    let id: String = get(&row, "run_id")?;
                    if let Some(&i) = index.get(&id) {
                        let kv = (get(&row, "key")?, get(&row, "value")?);
                        if table == "params" {
                            runs[i].params.push(kv);
                        } else {
                            runs[i].tags.push(kv);
                        }
                    }
                }
            }
            let mut sql = self.sql();
            sql.push(
                "SELECT run_id, key, value, timestamp, step FROM latest_metrics WHERE run_id IN ",
            )
            .bind_list(chunk.iter().cloned())
            .push(" ORDER BY key");
            for row in self.connection().query_all_raw(sql.build()).await? {
                let id: String = get(&row, "run_id")?;
                if let Some(&i) = index.get(&id) {
                    let value: Option<f64> = get(&row, "value")?;
                    runs[i].metrics.push(LatestMetric {
                        key: get(&row, "key")?,
                        point: Point {
                            step: get(&row, "step")?,
                            timestamp: get(&row, "timestamp")?,
                            value: value.unwrap_or(f64::NAN),
                        },
                    });
                }
            }
        }
        // Back into the order asked for.
        let position: HashMap<&str, usize> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        runs.sort_by_key(|r| {
            position
                .get(r.info.run_id.as_str())
                .copied()
                .unwrap_or(usize::MAX)
        });
        Ok(runs)
    }

    /// The experiment a run belongs to, without loading the run's data.
    pub async fn run_experiment(&self, run_id: &str) -> Result<Option<i64>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT experiment_id FROM runs WHERE id = ")
            .bind(run_id.to_owned());
        match self.connection().query_one_raw(sql.build()).await? {
            Some(row) => Ok(Some(get(&row, "experiment_id")?)),
            None => Ok(None),
        }
    }

    /// The run a run was made under (its `mlflow.parentRunId` tag), if any.
    pub async fn run_parent(&self, run_id: &str) -> Result<Option<String>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT value FROM tags WHERE run_id = ")
            .bind(run_id.to_owned())
            .push(" AND key = 'mlflow.parentRunId'");
        match self.connection().query_one_raw(sql.build()).await? {
            Some(row) => Ok(get(&row, "value")?),
            None => Ok(None),
        }
    }

    /// How many runs (not deleted) were made under each of `run_ids`
    /// (their `mlflow.parentRunId` tag); runs with none are left out.
    pub async fn child_run_counts(
        &self,
        run_ids: &[String],
    ) -> Result<HashMap<String, u64>, StoreError> {
        let mut counts = HashMap::new();
        for chunk in run_ids.chunks(500) {
            let mut sql = self.sql();
            sql.push(
                "SELECT t.value AS parent, COUNT(*) AS children FROM tags t \
                 JOIN runs r ON r.id = t.run_id \
                 WHERE t.key = 'mlflow.parentRunId' AND r.lifecycle_stage = 'active' AND t.value IN ",
            )
            .bind_list(chunk.iter().cloned())
            .push(" GROUP BY t.value");
            for row in self.connection().query_all_raw(sql.build()).await? {
                let parent: String = get(&row, "parent")?;
                let children: i64 = get(&row, "children")?;
                counts.insert(parent, children.max(0) as u64);
            }
        }
        Ok(counts)
    }

    /// The lifecycle stage of a run, or not found.
    async fn run_stage(
        &self,
        conn: &impl ConnectionTrait,
        run_id: &str,
    ) -> Result<String, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT lifecycle_stage FROM runs WHERE id = ")
            .bind(run_id.to_owned());
        let row = conn
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| not_found_run(run_id))?;
        get(&row, "lifecycle_stage")
    }

    async fn require_active_run(
        &self,
        conn: &impl ConnectionTrait,
        run_id: &str,
    ) -> Result<(), StoreError> {
        let stage = self.run_stage(conn, run_id).await?;
        if stage != "active" {
            return Err(StoreError::Rejected(format!(
                "The run {run_id} must be in the 'active' state. Current state is {stage}."
            )));
        }
        Ok(())
    }

    pub async fn update_run(
        &self,
        run_id: &str,
        status: Option<&str>,
        end_time: Option<i64>,
        run_name: Option<&str>,
    ) -> Result<RunInfo, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        self.require_active_run(&txn, run_id).await?;
        let mut sets: Vec<(&str, Value)> = Vec::new();
        if let Some(status) = status {
            sets.push(("status", status.to_owned().into()));
        }
        if let Some(end) = end_time {
            sets.push(("end_time", end.into()));
        }
        let name = run_name.filter(|n| !n.is_empty());
        if let Some(name) = name {
            sets.push(("name", name.to_owned().into()));
        }
        if !sets.is_empty() {
            let mut sql = self.sql();
            sql.push("UPDATE runs SET ");
            for (i, (column, value)) in sets.into_iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.push(&format!("{column} = ")).bind(value);
            }
            sql.push(" WHERE id = ").bind(run_id.to_owned());
            txn.execute_raw(sql.build()).await?;
        }
        if let Some(name) = name {
            upsert_run_tags(
                &txn,
                self.sql(),
                run_id,
                &[(RUN_NAME_TAG.to_owned(), name.to_owned())],
            )
            .await?;
        }
        txn.commit().await?;
        self.run_changed(run_id);
        Ok(self.get_run(run_id).await?.info)
    }

    /// Ends the runs made under `parent` (`mlflow.parentRunId`, in its
    /// experiment) that are still RUNNING, with `status` at `end_time`: a
    /// job's nested runs when the job ends (killed, their client never ended
    /// them). Returns how many.
    pub async fn end_child_runs(
        &self,
        parent: &str,
        status: &str,
        end_time: i64,
    ) -> Result<u64, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push(
            "SELECT r.id FROM tags t JOIN runs r ON r.id = t.run_id \
             WHERE t.key = 'mlflow.parentRunId' AND t.value = ",
        )
        .bind(parent.to_owned())
        .push(" AND r.status = 'RUNNING' AND r.experiment_id = (SELECT p.experiment_id FROM runs p WHERE p.id = ")
        .bind(parent.to_owned())
        .push(")");
        let ids: Vec<String> = txn
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| get(row, "id"))
            .collect::<Result<_, _>>()?;
        for chunk in ids.chunks(500) {
            let mut sql = self.sql();
            sql.push("UPDATE runs SET status = ")
                .bind(status.to_owned())
                .push(", end_time = ")
                .bind(end_time)
                .push(" WHERE id IN ")
                .bind_list(chunk.iter().cloned());
            txn.execute_raw(sql.build()).await?;
        }
        txn.commit().await?;
        for id in &ids {
            self.run_changed(id);
        }
        Ok(ids.len() as u64)
    }

    /// Marks the runs of attempts that just started RUNNING from `at`, in
    /// one statement a 500 runs, reading nothing back. A job's run is made
    /// when it is queued; its start is when it starts, as MLflow's, so a
    /// run's duration is not its wait in the queue. Deleted runs, and runs
    /// that ended meanwhile (cancelled, or ended by a quick script), are
    /// left as they are.
    pub async fn start_runs(&self, run_ids: &[String], at: i64) -> Result<(), StoreError> {
        if run_ids.is_empty() {
            return Ok(());
        }
        let _turn = self.write_turn().await;
        for chunk in run_ids.chunks(500) {
            let mut sql = self.sql();
            sql.push("UPDATE runs SET status = 'RUNNING', start_time = ")
                .bind(at)
                .push(
                    " WHERE lifecycle_stage = 'active' AND end_time IS NULL \
                     AND status IN ('SCHEDULED', 'RUNNING') AND id IN ",
                )
                .bind_list(chunk.iter().cloned());
            self.connection().execute_raw(sql.build()).await?;
        }
        for run_id in run_ids {
            self.run_changed(run_id);
        }
        Ok(())
    }

    /// Ends a job's run with `status` at `at`, reading nothing back. A run
    /// that never started (still SCHEDULED: its job was cancelled or failed
    /// while queued) starts when it ends, so it shows no duration. False
    /// when the run is deleted or gone.
    pub async fn end_job_run(
        &self,
        run_id: &str,
        status: &str,
        at: i64,
    ) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push("UPDATE runs SET start_time = CASE WHEN status = 'SCHEDULED' THEN ")
            .bind(at)
            .push(" ELSE start_time END, status = ")
            .bind(status.to_owned())
            .push(", end_time = ")
            .bind(at)
            .push(" WHERE id = ")
            .bind(run_id.to_owned())
            .push(" AND lifecycle_stage = 'active'");
        let changed = self
            .connection()
            .execute_raw(sql.build())
            .await?
            .rows_affected()
            == 1;
        if changed {
            self.run_changed(run_id);
        }
        Ok(changed)
    }

    pub async fn set_run_deleted(&self, run_id: &str, deleted: bool) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        self.run_stage(self.connection(), run_id).await?;
        let mut sql = self.sql();
        sql.push("UPDATE runs SET lifecycle_stage = ")
            .bind(if deleted { "deleted" } else { "active" })
            .push(" WHERE id = ")
            .bind(run_id.to_owned());
        self.connection().execute_raw(sql.build()).await?;
        self.run_changed(run_id);
        Ok(())
    }

    /// The deleted runs of an experiment (`owner`'s only, when given),
    /// oldest first, at most `limit`: (id, name).
    pub async fn deleted_runs(
        &self,
        experiment_id: i64,
        owner: Option<i64>,
        limit: u64,
    ) -> Result<Vec<(String, String)>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT id, name FROM runs WHERE experiment_id = ")
            .bind(experiment_id)
            .push(" AND lifecycle_stage = 'deleted'");
        if let Some(owner) = owner {
            sql.push(" AND user_id = ").bind(owner);
        }
        sql.push(" ORDER BY start_time, id LIMIT ")
            .bind(i64::try_from(limit).unwrap_or(i64::MAX));
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| Ok((get(row, "id")?, get(row, "name")?)))
            .collect()
    }

    /// The deleted runs a user owns, by experiment: (experiment id, its
    /// name, the run ids), in experiment order.
    pub async fn deleted_runs_owned_by(
        &self,
        user_id: i64,
    ) -> Result<Vec<(i64, String, Vec<String>)>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT r.experiment_id, e.name, r.id FROM runs r JOIN experiments e ON e.id = r.experiment_id WHERE r.user_id = ")
            .bind(user_id)
            .push(" AND r.lifecycle_stage = 'deleted' ORDER BY r.experiment_id, r.id");
        let mut out: Vec<(i64, String, Vec<String>)> = Vec::new();
        for row in self.connection().query_all_raw(sql.build()).await? {
            let experiment: i64 = get(&row, "experiment_id")?;
            let run: String = get(&row, "id")?;
            match out.last_mut() {
                Some((id, _, runs)) if *id == experiment => runs.push(run),
                _ => out.push((experiment, get(&row, "name")?, vec![run])),
            }
        }
        Ok(out)
    }

    /// Deletes a deleted run for good, as `mlflow gc` does: its params,
    /// tags, metrics, dataset inputs and job tokens go with it; a job keeps
    /// its record without the link, and traces and model versions keep the
    /// id they were logged with. Refused for a run that is not deleted, one
    /// a job still runs as, and one whose files a registered model version
    /// is (the caller removes the run's folder after this). Returns the
    /// experiment whose folder holds the run's.
    pub async fn purge_run(&self, run_id: &str) -> Result<i64, StoreError> {
        use crate::entity::job;
        use sea_orm::{ColumnTrait, QueryFilter, QueryOrder, QuerySelect};
        use trainyard_domain::JobState;
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push("SELECT experiment_id, lifecycle_stage FROM runs WHERE id = ")
            .bind(run_id.to_owned());
        let row = txn
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("Run with id={run_id} not found")))?;
        let experiment: i64 = get(&row, "experiment_id")?;
        if get::<String>(&row, "lifecycle_stage")? != "deleted" {
            return Err(StoreError::Rejected(format!(
                "run {run_id} is not deleted: delete it first, then delete it forever"
            )));
        }
        let running: Option<i64> = job::Entity::find()
            .select_only()
            .column(job::Column::Id)
            .filter(job::Column::RunId.eq(run_id))
            .filter(job::Column::State.is_in(
                [JobState::Queued, JobState::Starting, JobState::Running].map(|s| s.as_str()),
            ))
            .order_by_asc(job::Column::Id)
            .into_tuple()
            .one(&txn)
            .await?;
        if let Some(job) = running {
            return Err(StoreError::Rejected(format!(
                "job {job} still runs as run {run_id}: cancel it or let it end first"
            )));
        }
        // A version registered from the run's own files (`runs:/ID/…`, or a
        // path into its artifacts, whatever run it names) would lose them;
        // one of a logged model lives in the model's folder.
        let made_of_it = |sql: &mut crate::sql::Sql| {
            sql.push(" v.stage <> ")
                .bind(crate::registry::DELETED_STAGE)
                .push(" AND (v.source LIKE ")
                .bind(format!("runs:/{run_id}/%"))
                .push(" OR v.source LIKE ")
                .bind(format!("%/{run_id}/artifacts%"))
                .push(" OR v.storage_location LIKE ")
                .bind(format!("%/{run_id}/artifacts%"))
                .push(")");
        };
        let mut sql = self.sql();
        sql.push(
            "SELECT g.name, v.version FROM model_versions v JOIN registered_models g ON g.id = v.registered_model_id WHERE",
        );
        made_of_it(&mut sql);
        sql.push(" ORDER BY g.name, v.version");
        if let Some(row) = txn.query_one_raw(sql.build()).await? {
            let name: String = get(&row, "name")?;
            let version: i32 = get(&row, "version")?;
            return Err(StoreError::Rejected(format!(
                "version {version} of the registered model {name} is made of run {run_id}'s files: delete that version first, or keep the run"
            )));
        }
        // Checked again as it goes: on PostgreSQL a restore or a version
        // registered since the checks above (no write turn there) keeps it.
        let mut sql = self.sql();
        sql.push("DELETE FROM runs WHERE id = ")
            .bind(run_id.to_owned())
            .push(" AND lifecycle_stage = 'deleted' AND NOT EXISTS (SELECT 1 FROM model_versions v WHERE");
        made_of_it(&mut sql);
        sql.push(")");
        if txn.execute_raw(sql.build()).await?.rows_affected() != 1 {
            return Err(StoreError::Rejected(format!(
                "run {run_id} changed while it was being deleted forever (restored, or a model version registered from it): look at it again"
            )));
        }
        txn.commit().await?;
        self.run_changed(run_id);
        Ok(experiment)
    }

    /// Logs metrics, params and tags in one transaction: all or nothing.
    /// Params are write-once (the same value again is accepted), tags are
    /// last-write-wins, metric points are appended.
    pub async fn log_batch(
        &self,
        run_id: &str,
        metrics: &[MetricIn],
        params: &[(String, String)],
        tags: &[(String, String)],
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        self.require_active_run(&txn, run_id).await?;
        if !params.is_empty() {
            self.insert_params(&txn, run_id, params).await?;
        }
        if !metrics.is_empty() {
            self.append_metrics(&txn, run_id, metrics).await?;
        }
        if !tags.is_empty() {
            upsert_run_tags(&txn, self.sql(), run_id, tags).await?;
        }
        txn.commit().await?;
        if !metrics.is_empty() {
            self.mark_small_chunks(run_id, metrics);
        }
        self.run_changed(run_id);
        Ok(())
    }

    /// Appends a model logged in a run to the run's `mlflow.log-model.history`
    /// tag (a JSON list), as MLflow's `record_logged_model` does: its run,
    /// time, artifact path, uuid and flavors (each without its `config`).
    /// The run must be active; a history longer than `max_len` characters,
    /// or one that is not a list, is refused saying so.
    pub async fn record_logged_model(
        &self,
        run_id: &str,
        model: &serde_json::Map<String, serde_json::Value>,
        max_len: usize,
    ) -> Result<(), StoreError> {
        use serde_json::Value as Json;
        let mut entry = serde_json::Map::new();
        for key in ["run_id", "utc_time_created", "artifact_path", "model_uuid"] {
            if let Some(value) = model.get(key) {
                entry.insert(key.to_owned(), value.clone());
            }
        }
        let flavors = match model.get("flavors") {
            Some(Json::Object(flavors)) => flavors
                .iter()
                .map(|(name, config)| {
                    let mut config = config.clone();
                    if let Json::Object(fields) = &mut config {
                        fields.remove("config");
                    }
                    (name.clone(), config)
                })
                .collect(),
            _ => serde_json::Map::new(),
        };
        entry.insert("flavors".to_owned(), Json::Object(flavors));

        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let backend = txn.get_database_backend();
        crate::sql::lock_owner(&txn, backend, &format!("{LOGGED_MODELS_TAG}:{run_id}")).await?;
        self.require_active_run(&txn, run_id).await?;
        let mut sql = self.sql();
        sql.push("SELECT value FROM tags WHERE run_id = ")
            .bind(run_id.to_owned())
            .push(" AND key = ")
            .bind(LOGGED_MODELS_TAG);
        let mut history = match txn.query_one_raw(sql.build()).await? {
            None => Vec::new(),
            Some(row) => {
                let text: String = get(&row, "value")?;
                match serde_json::from_str::<Json>(&text) {
                    Ok(Json::Array(history)) => history,
                    _ => {
                        return Err(StoreError::Rejected(format!(
                            "The tag {LOGGED_MODELS_TAG} of run {run_id} is not a JSON list, so no model can be added to it; delete the tag to record models again"
                        )));
                    }
                }
            }
        };
        history.push(Json::Object(entry));
        let value = Json::Array(history).to_string();
        if value.chars().count() > max_len {
            return Err(StoreError::Rejected(format!(
                "The run {run_id} has logged so many models that their list (tag {LOGGED_MODELS_TAG}) would be longer than {max_len} characters; the model's artifacts are kept, log further models in a new run"
            )));
        }
        upsert_run_tags(
            &txn,
            self.sql(),
            run_id,
            &[(LOGGED_MODELS_TAG.to_owned(), value)],
        )
        .await?;
        txn.commit().await?;
        self.run_changed(run_id);
        Ok(())
    }

    pub(crate) async fn insert_params(
        &self,
        txn: &DatabaseTransaction,
        run_id: &str,
        params: &[(String, String)],
    ) -> Result<(), StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT key, value FROM params WHERE run_id = ")
            .bind(run_id.to_owned())
            .push(" AND key IN ")
            .bind_list(params.iter().map(|(k, _)| k.clone()));
        let mut existing: HashMap<String, String> = HashMap::new();
        for row in txn.query_all_raw(sql.build()).await? {
            existing.insert(get(&row, "key")?, get(&row, "value")?);
        }
        let mut fresh = Vec::new();
        for (key, value) in params {
            match existing.get(key) {
                Some(old) if old == value => {}
                Some(old) => {
                    return Err(StoreError::Rejected(format!(
                        "Changing param values is not allowed. Param with key='{key}' was already logged with value='{old}' for run ID='{run_id}'. Attempted logging new value '{value}'."
                    )));
                }
                None => fresh.push((key, value)),
            }
        }
        if fresh.is_empty() {
            return Ok(());
        }
        let mut sql = self.sql();
        sql.push("INSERT INTO params (run_id, key, value) VALUES ");
        for (i, (key, value)) in fresh.into_iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.push("(")
                .bind(run_id.to_owned())
                .push(", ")
                .bind((*key).clone())
                .push(", ")
                .bind((*value).clone())
                .push(")");
        }
        txn.execute_raw(sql.build()).await?;
        Ok(())
    }

    /// One chunk per key for this batch, and the latest value per key.
    async fn append_metrics(
        &self,
        txn: &DatabaseTransaction,
        run_id: &str,
        metrics: &[MetricIn],
    ) -> Result<(), StoreError> {
        let mut order: Vec<&str> = Vec::new();
        let mut series: HashMap<&str, Vec<Point>> = HashMap::new();
        for m in metrics {
            series
                .entry(m.key.as_str())
                .or_insert_with(|| {
                    order.push(m.key.as_str());
                    Vec::new()
                })
                .push(m.point);
        }
        let mut chunks_sql = self.sql();
        chunks_sql.push(
            "INSERT INTO metric_chunks (run_id, key, count, min_step, max_step, min_timestamp, max_timestamp, summary, points) VALUES ",
        );
        let mut latest_sql = self.sql();
        latest_sql.push("INSERT INTO latest_metrics (run_id, key, value, timestamp, step) VALUES ");
        for (i, key) in order.iter().enumerate() {
            let points = &series[key];
            let min_step = points.iter().map(|p| p.step).min().unwrap_or(0);
            let max_step = points.iter().map(|p| p.step).max().unwrap_or(0);
            let min_ts = points.iter().map(|p| p.timestamp).min().unwrap_or(0);
            let max_ts = points.iter().map(|p| p.timestamp).max().unwrap_or(0);
            // MLflow's latest value: the highest step, then timestamp, then
            // value (NaN lowest).
            let latest = points
                .iter()
                .copied()
                .max_by(|a, b| {
                    (a.step, a.timestamp)
                        .cmp(&(b.step, b.timestamp))
                        .then_with(|| nan_lowest(a.value, b.value))
                })
                .unwrap_or(Point {
                    step: 0,
                    timestamp: 0,
                    value: f64::NAN,
                });
            if i > 0 {
                chunks_sql.push(", ");
                latest_sql.push(", ");
            }
            chunks_sql
                .push("(")
                .bind(run_id.to_owned())
                .push(", ")
                .bind((*key).to_owned())
                .push(", ")
                .bind(points.len() as i32)
                .push(", ")
                .bind(min_step)
                .push(", ")
                .bind(max_step)
                .push(", ")
                .bind(min_ts)
                .push(", ")
                .bind(max_ts)
                .push(", ")
                .bind(chunks::summarize(points))
                .push(", ")
                .bind(chunks::encode(points))
                .push(")");
            let value: Option<f64> = (!latest.value.is_nan()).then_some(latest.value);
            latest_sql
                .push("(")
                .bind(run_id.to_owned())
                .push(", ")
                .bind((*key).to_owned())
                .push(", ")
                .bind(value)
                .push(", ")
                .bind(latest.timestamp)
                .push(", ")
                .bind(latest.step)
                .push(")");
        }
        latest_sql.push(
            " ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value, timestamp = excluded.timestamp, step = excluded.step \
             WHERE excluded.step > latest_metrics.step \
             OR (excluded.step = latest_metrics.step AND excluded.timestamp > latest_metrics.timestamp) \
             OR (excluded.step = latest_metrics.step AND excluded.timestamp = latest_metrics.timestamp \
                 AND (latest_metrics.value IS NULL OR excluded.value >= latest_metrics.value))",
        );
        txn.execute_raw(chunks_sql.build()).await?;
        txn.execute_raw(latest_sql.build()).await?;
        Ok(())
    }

    pub async fn delete_run_tag(&self, run_id: &str, key: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        self.require_active_run(self.connection(), run_id).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM tags WHERE run_id = ")
            .bind(run_id.to_owned())
            .push(" AND key = ")
            .bind(key.to_owned());
        let done = self.connection().execute_raw(sql.build()).await?;
        if done.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!(
                "No tag with name: {key} in run with id {run_id}"
            )));
        }
        self.run_changed(run_id);
        Ok(())
    }

    /// Every point of a series, in the order logged.
    pub async fn metric_history(&self, run_id: &str, key: &str) -> Result<Vec<Point>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT points FROM metric_chunks WHERE run_id = ")
            .bind(run_id.to_owned())
            .push(" AND key = ")
            .bind(key.to_owned())
            .push(" ORDER BY id");
        let rows = self.connection().query_all_raw(sql.build()).await?;
        let mut points = Vec::new();
        for row in rows {
            let bytes: Vec<u8> = get(&row, "points")?;
            chunks::decode_into(&bytes, &mut points);
        }
        Ok(points)
    }

    /// Runs of the given experiments that match, in order. Returns up to
    /// `limit` runs after skipping `offset`.
    #[allow(clippy::too_many_arguments)]
    pub async fn search_runs(
        &self,
        experiment_ids: &[i64],
        filter_expr: Option<&Expr>,
        order: &[OrderBy],
        view: ViewType,
        limit: u64,
        offset: u64,
        viewer: &Viewer,
    ) -> Result<Vec<Run>, StoreError> {
        if experiment_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = self.sql();
        sql.push("SELECT r.id FROM runs r");
        let mut terms: Vec<String> = Vec::new();
        let mut orders_start_time = false;
        for (i, o) in order.iter().enumerate() {
            let dir = if o.ascending { "ASC" } else { "DESC" };
            let table = match &o.field {
                Field::Metric(_) => "latest_metrics",
                Field::Param(_) => "params",
                Field::Tag(_) => "tags",
                // Only traces have assessments; the parser gives none for
                // runs, nor an order by datasets.
                Field::Assessment(..) | Field::Dataset(_) | Field::Span(..) | Field::TraceText => {
                    return Err(StoreError::Rejected(
                        "Invalid order_by: runs have no assessments".to_owned(),
                    ));
                }
                Field::Attr(attr) => {
                    let column = match attr {
                        Attribute::RunId => "r.id",
                        Attribute::RunName => "r.name",
                        Attribute::UserId => "r.user_name",
                        Attribute::Status => "r.status",
                        Attribute::ArtifactUri => "r.artifact_uri",
                        Attribute::StartTime => {
                            orders_start_time = true;
                            "r.start_time"
                        }
                        Attribute::EndTime => "r.end_time",
                        other => {
                            return Err(StoreError::Rejected(format!(
                                "Invalid order_by attribute `{}` for runs",
                                other.name()
                            )));
                        }
                    };
                    terms.push(format!(
                        "CASE WHEN {column} IS NULL THEN 1 ELSE 0 END, {column} {dir}"
                    ));
                    continue;
                }
            };
            let (Field::Metric(key) | Field::Param(key) | Field::Tag(key)) = &o.field else {
                continue;
            };
            sql.push(&format!(
                " LEFT JOIN {table} o{i} ON o{i}.run_id = r.id AND o{i}.key = "
            ))
            .bind(key.clone());
            if table == "latest_metrics" {
                terms.push(format!(
                    "CASE WHEN o{i}.run_id IS NULL THEN 2 WHEN o{i}.value IS NULL THEN 1 ELSE 0 END, o{i}.value {dir}"
                ));
            } else if matches!(o.field, Field::Param(_)) {
                // Params are text: numbers among them are ordered as
                // numbers (batch sizes 32, 64, 128, not 128, 32, 64), then
                // the rest as text.
                let number = crate::sql::numeric_text(sql.is_postgres(), &format!("o{i}.value"));
                terms.push(format!(
                    "CASE WHEN o{i}.run_id IS NULL THEN 2 WHEN {number} IS NULL THEN 1 ELSE 0 END, {number} {dir}, o{i}.value {dir}"
                ));
            } else {
                terms.push(format!(
                    "CASE WHEN o{i}.run_id IS NULL THEN 1 ELSE 0 END, o{i}.value {dir}"
                ));
            }
        }
        runs_where(&mut sql, experiment_ids, filter_expr, view, viewer);
        if !orders_start_time {
            terms.push("r.start_time DESC".to_owned());
        }
        terms.push("r.id ASC".to_owned());
        sql.push(" ORDER BY ").push(&terms.join(", "));
        sql.push(" LIMIT ")
            .bind(limit as i64)
            .push(" OFFSET ")
            .bind(offset as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        let ids: Vec<String> = rows
            .iter()
            .map(|row| get(row, "id"))
            .collect::<Result<_, _>>()?;
        self.load_runs(&ids).await
    }

    /// How many runs a search with this filter finds (for the explorer's
    /// scroll bar and "N runs").
    pub async fn count_runs(
        &self,
        experiment_ids: &[i64],
        filter_expr: Option<&Expr>,
        view: ViewType,
        viewer: &Viewer,
    ) -> Result<u64, StoreError> {
        if experiment_ids.is_empty() {
            return Ok(0);
        }
        let mut sql = self.sql();
        sql.push("SELECT COUNT(*) AS n FROM runs r");
        runs_where(&mut sql, experiment_ids, filter_expr, view, viewer);
        let row = self.connection().query_one_raw(sql.build()).await?;
        let n: i64 = match row {
            Some(row) => get(&row, "n")?,
            None => 0,
        };
        Ok(n.max(0) as u64)
    }

    /// The metric, param and tag keys that the runs of an experiment use
    /// (those the viewer sees), sorted; at most `limit` of each kind. The
    /// explorer offers them as columns.
    pub async fn run_keys(
        &self,
        experiment_id: i64,
        viewer: &Viewer,
        limit: u64,
    ) -> Result<RunKeys, StoreError> {
        self.run_keys_in(experiment_id, viewer, limit, false).await
    }

    /// [`Store::run_keys`] of the experiment's deleted runs (`deleted`), or
    /// of its active ones.
    pub async fn run_keys_in(
        &self,
        experiment_id: i64,
        viewer: &Viewer,
        limit: u64,
        deleted: bool,
    ) -> Result<RunKeys, StoreError> {
        let mut keys = RunKeys::default();
        for (table, out) in [
            ("latest_metrics", &mut keys.metrics),
            ("params", &mut keys.params),
            ("tags", &mut keys.tags),
        ] {
            let mut sql = self.sql();
            sql.push(&format!(
                "SELECT DISTINCT k.key FROM {table} k JOIN runs r ON r.id = k.run_id \
                 WHERE r.experiment_id = "
            ))
            .bind(experiment_id)
            .push(" AND r.lifecycle_stage = ")
            .bind(if deleted { "deleted" } else { "active" });
            viewer.restrict(&mut sql, "r.user_id", "r.team_id", None);
            sql.push(" ORDER BY k.key LIMIT ").bind(limit as i64);
            for row in self.connection().query_all_raw(sql.build()).await? {
                out.push(get(&row, "key")?);
            }
        }
        Ok(keys)
    }

    /// Up to `limit` param keys of an experiment's newest 1,000 runs (those
    /// the viewer may see), the ones whose values differ between runs
    /// first (what tells runs apart), then the rest; by key within each.
    pub async fn params_that_differ_first(
        &self,
        experiment_id: i64,
        viewer: &Viewer,
        limit: u64,
    ) -> Result<Vec<String>, StoreError> {
        let mut sql = self.sql();
        sql.push(
            "SELECT k.key AS key, CASE WHEN COUNT(DISTINCT k.value) > 1 THEN 0 ELSE 1 END AS same \
             FROM params k WHERE k.run_id IN (SELECT r.id FROM runs r WHERE r.experiment_id = ",
        )
        .bind(experiment_id)
        .push(" AND r.lifecycle_stage = 'active'");
        viewer.restrict(&mut sql, "r.user_id", "r.team_id", None);
        sql.push(
            " ORDER BY r.start_time DESC LIMIT 1000) GROUP BY k.key ORDER BY same, k.key LIMIT ",
        )
        .bind(limit as i64);
        let mut keys = Vec::new();
        for row in self.connection().query_all_raw(sql.build()).await? {
            keys.push(get(&row, "key")?);
        }
        Ok(keys)
    }
}

/// The keys the runs of an experiment use, by kind.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunKeys {
    pub metrics: Vec<String>,
    pub params: Vec<String>,
    pub tags: Vec<String>,
}

/// The condition of a run search: experiments, lifecycle stages, what the
/// viewer may see, and the filter.
fn runs_where(
    sql: &mut Sql,
    experiment_ids: &[i64],
    filter_expr: Option<&Expr>,
    view: ViewType,
    viewer: &Viewer,
) {
    sql.push(" WHERE r.experiment_id IN ")
        .int_list(experiment_ids)
        .push(" AND r.lifecycle_stage IN ")
        .bind_list(view.stages().iter().map(|s| s.to_string()));
    viewer.restrict(sql, "r.user_id", "r.team_id", None);
    if let Some(expr) = filter_expr {
        sql.push(" AND ");
        filter(sql, expr, Scope::Runs);
    }
}

async fn upsert_experiment_tag(
    conn: &impl ConnectionTrait,
    mut sql: Sql,
    id: i64,
    key: &str,
    value: &str,
) -> Result<(), StoreError> {
    sql.push("INSERT INTO experiment_tags (experiment_id, key, value) VALUES (")
        .bind(id)
        .push(", ")
        .bind(key.to_owned())
        .push(", ")
        .bind(value.to_owned())
        .push(") ON CONFLICT (experiment_id, key) DO UPDATE SET value = excluded.value");
    conn.execute_raw(sql.build()).await?;
    Ok(())
}

/// Upserts run tags (the last of a repeated key wins); `mlflow.runName`
/// renames the run too.
pub(crate) async fn upsert_run_tags(
    conn: &impl ConnectionTrait,
    mut sql: Sql,
    run_id: &str,
    tags: &[(String, String)],
) -> Result<(), StoreError> {
    let mut last: Vec<(&str, &str)> = Vec::new();
    for (k, v) in tags {
        match last.iter_mut().find(|(key, _)| *key == k.as_str()) {
            Some(slot) => slot.1 = v.as_str(),
            None => last.push((k.as_str(), v.as_str())),
        }
    }
    if last.is_empty() {
        return Ok(());
    }
    let rename = last
        .iter()
        .find(|(k, _)| *k == RUN_NAME_TAG)
        .map(|(_, v)| v.to_string());
    sql.push("INSERT INTO tags (run_id, key, value) VALUES ");
    for (i, (key, value)) in last.iter().enumerate() {
        if i > 0 {
            sql.push(", ");
        }
        sql.push("(")
            .bind(run_id.to_owned())
            .push(", ")
            .bind((*key).to_owned())
            .push(", ")
            .bind((*value).to_owned())
            .push(")");
    }
    sql.push(" ON CONFLICT (run_id, key) DO UPDATE SET value = excluded.value");
    let backend = conn.get_database_backend();
    conn.execute_raw(sql.build()).await?;
    if let Some(name) = rename {
        let mut sql = Sql::new(backend);
        sql.push("UPDATE runs SET name = ")
            .bind(name)
            .push(" WHERE id = ")
            .bind(run_id.to_owned());
        conn.execute_raw(sql.build()).await?;
    }
    Ok(())
}

/// `adjective-noun-NNN`, as MLflow names runs nobody named.
pub(crate) fn random_run_name() -> String {
    const ADJECTIVES: [&str; 16] = [
        "brave", "calm", "eager", "fair", "gentle", "honest", "keen", "lively", "merry", "nimble",
        "proud", "quick", "rare", "sharp", "tidy", "witty",
    ];
    const NOUNS: [&str; 16] = [
        "otter", "heron", "lynx", "finch", "bison", "crane", "gecko", "koala", "moose", "panda",
        "raven", "sloth", "tapir", "viper", "whale", "zebra",
    ];
    let bytes = uuid::Uuid::new_v4().into_bytes();
    let number = u16::from_le_bytes([bytes[2], bytes[3]]) % 1000;
    format!(
        "{}-{}-{number:03}",
        ADJECTIVES[usize::from(bytes[0]) % ADJECTIVES.len()],
        NOUNS[usize::from(bytes[1]) % NOUNS.len()]
    )
}
