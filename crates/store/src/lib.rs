//! The store: one SeaORM connection pool over SQLite or PostgreSQL, the
//! migrations, and the queries the server needs.

pub mod assessments;
pub mod audit;
pub mod checkpoints;
mod chunks;
pub mod compaction;
pub mod entity;
pub mod eval_datasets;
pub mod fair_share;
pub mod identity;
pub mod jobs;
pub mod models;
mod nodes;
pub mod registry;
pub mod scorers;
pub mod seal;
pub mod series;
pub mod span_traces;
pub mod spans;
mod sql;
pub mod telemetry;
mod templates;
pub mod traces;
pub mod tracking;
mod uploads;
pub mod webhooks;

pub use fair_share::{DayUsage, GpuSpan};
pub use identity::{DueSession, LoginAttempt, NewSession, SessionUser, SignIn, TokenUser};
pub use jobs::{Access, JobChange, JobChanges, JobFollower, JobRecord, JobsOf, NewJob};
pub use models::{
    MAX_MODEL_METRICS_READ, MAX_PAGE_MODEL_METRICS, ModelFilter, ModelMetricIn, ModelOrder,
    ModelPage, NewModel,
};
pub use nodes::{GpuInfo, NodeRemoval};
pub use registry::NewVersion;
pub use telemetry::{Heat, NodeGpu};
pub use traces::TraceToDelete;
pub use tracking::{DEFAULT_EXPERIMENT, MetricIn, NewRun, Viewer};
pub use uploads::{NewUpload, UploadUse};

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sea_orm::sea_query::{Expr, Func};
use sea_orm::sqlx::sqlite::{SqliteJournalMode, SqliteSynchronous};
use sea_orm::{
    ColumnTrait, ConnectionTrait, Database, DatabaseConnection, DatabaseTransaction, DbErr,
    EntityTrait, FromQueryResult, PaginatorTrait, QueryFilter, QueryOrder, QuerySelect,
    SqliteTransactionMode, TransactionOptions, TransactionTrait,
};
use trainyard_domain::{ExperimentSummary, FieldError, JobState, NodeSummary, Overview};
use trainyard_migration::{Migrator, MigratorTrait};

use entity::{experiment, gpu, job, node, run};

/// What can go wrong in the store, in words a caller can pass on.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("database_url: {0}")]
    BadUrl(String),
    #[error("database_url: cannot open {url}: {source}")]
    Connect {
        url: String,
        #[source]
        source: DbErr,
    },
    #[error("{0}")]
    Invalid(#[from] FieldError),
    #[error("{what} already exists")]
    Conflict { what: String },
    /// The thing asked for does not exist (MLflow: RESOURCE_DOES_NOT_EXIST).
    #[error("{0}")]
    NotFound(String),
    /// The request breaks a rule of the data (MLflow: INVALID_PARAMETER_VALUE).
    #[error("{0}")]
    Rejected(String),
    /// The caller may see the thing but not change it (403).
    #[error("{0}")]
    Forbidden(String),
    /// It cannot be done at the moment, for a reason that passes (503,
    /// MLflow: TEMPORARILY_UNAVAILABLE): asked again later, it may be.
    #[error("{0}")]
    Unavailable(String),
    #[error("database error: {0}")]
    Db(#[from] DbErr),
    /// A secret could not be sealed or opened (see [`seal`]).
    #[error("{0}")]
    Sealed(String),
}

/// Which SQL engine is behind the pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Engine {
    Sqlite,
    Postgres,
}

impl Engine {
    /// Reads the engine from a database URL, or says what is wrong with it.
    pub fn from_url(url: &str) -> Result<Engine, StoreError> {
        let scheme = url.split_once(':').map(|(scheme, _)| scheme).unwrap_or("");
        match scheme {
            "sqlite" => Ok(Engine::Sqlite),
            "postgres" | "postgresql" => Ok(Engine::Postgres),
            "" => Err(StoreError::BadUrl(format!(
                "`{}` is not a URL; use sqlite://PATH or postgres://USER@HOST/DB",
                redact(url)
            ))),
            other => Err(StoreError::BadUrl(format!(
                "unsupported scheme `{other}`; use sqlite://PATH or postgres://USER@HOST/DB"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Engine::Sqlite => "sqlite",
            Engine::Postgres => "postgres",
        }
    }
}

/// Connections of the pool at one instant, for `/metrics`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PoolStats {
    pub open: u32,
    pub idle: u32,
    pub max: u32,
}

/// Whether the database can serve: reachable, and with every migration applied.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Readiness {
    Ready,
    Pending(Vec<String>),
}

#[derive(Clone)]
pub struct Store {
    db: DatabaseConnection,
    engine: Engine,
    /// SQLite has one writer at a time. A read transaction that later writes
    /// fails at once (SQLITE_BUSY_SNAPSHOT) if another commit came in between,
    /// without waiting; so write transactions take turns here instead.
    write_lock: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// Series written since the last compaction pass.
    dirty: compaction::Dirty,
    /// The id of every run just changed (status, metrics, params, tags), for
    /// pages that follow a run live.
    run_changes: tokio::sync::broadcast::Sender<std::sync::Arc<str>>,
    /// Who follows the writes of jobs (see [`Store::follow_jobs`]).
    job_writes: jobs::JobWrites,
    /// The key that secrets are sealed with at rest (see [`seal`]).
    sealing: Option<std::sync::Arc<seal::SealingKey>>,
    /// The key being rotated out: it opens, never seals.
    sealing_previous: Option<std::sync::Arc<seal::SealingKey>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("engine", &self.engine)
            .finish()
    }
}

/// Hides the password of a URL before it is logged or shown.
pub fn redact(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let (authority, tail) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    match authority.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            format!("{scheme}://{user}:***@{host}{tail}")
        }
        None => url.to_owned(),
    }
}

pub fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

/// How much of an SQLite file is read through a memory map (SQLite caps it
/// just under 2 GiB). Address space only: the pages are the kernel's page
/// cache, shared by the connections.
const MMAP_BYTES: u64 = 2 << 30;

/// Run changes kept for followers that are slow to read.
const RUN_CHANGES_BACKLOG: usize = 1024;

impl Store {
    /// Opens a pool. SQLite files are created when missing, in WAL mode with
    /// foreign keys on; the folder that holds them must exist.
    pub async fn connect(url: &str, max_connections: u32) -> Result<Store, StoreError> {
        let engine = Engine::from_url(url)?;
        let mut opts = sea_orm::ConnectOptions::new(url.to_owned());
        opts.max_connections(max_connections.max(1))
            .min_connections(0)
            .connect_timeout(Duration::from_secs(10))
            .acquire_timeout(Duration::from_secs(10))
            .sqlx_logging(false);
        if engine == Engine::Sqlite {
            opts.map_sqlx_sqlite_opts(|o| {
                o.create_if_missing(true)
                    .journal_mode(SqliteJournalMode::Wal)
                    .synchronous(SqliteSynchronous::Normal)
                    .busy_timeout(Duration::from_secs(10))
                    .foreign_keys(true)
                    // Reads through a memory map instead of a read() per
                    // page: a wide chart read touches thousands of pages.
                    .pragma("mmap_size", MMAP_BYTES.to_string())
            });
        }
        let db = Database::connect(opts)
            .await
            .map_err(|source| StoreError::Connect {
                url: redact(url),
                source,
            })?;
        // A pool opens lazily: prove now that the database answers, so that a
        // bad path or password stops the start, not the first request.
        db.execute_unprepared("SELECT 1")
            .await
            .map_err(|source| StoreError::Connect {
                url: redact(url),
                source,
            })?;
        Ok(Store {
            db,
            engine,
            write_lock: Default::default(),
            dirty: Default::default(),
            run_changes: tokio::sync::broadcast::channel(RUN_CHANGES_BACKLOG).0,
            job_writes: Default::default(),
            sealing: None,
            sealing_previous: None,
        })
    }

    /// Held for the length of a write transaction on SQLite; PostgreSQL
    /// handles concurrent writers itself.
    pub(crate) async fn write_turn(&self) -> Option<tokio::sync::MutexGuard<'_, ()>> {
        match self.engine {
            Engine::Sqlite => Some(self.write_lock.lock().await),
            Engine::Postgres => None,
        }
    }

    /// Begins a write transaction, under `write_turn` on SQLite. There it
    /// takes the database's write lock at once (`BEGIN IMMEDIATE`), waiting
    /// up to the busy timeout while another connection holds it. A deferred
    /// transaction that read first would instead fail at its first write
    /// with "database is locked", without waiting, whenever another
    /// connection held the lock: as one does for a moment after an error
    /// drops its transaction, since sqlx rolls that back on its own thread
    /// after the drop has returned and the turn has passed on.
    pub(crate) async fn begin_write(&self) -> Result<DatabaseTransaction, StoreError> {
        Ok(self
            .db
            .begin_with_options(TransactionOptions {
                sqlite_transaction_mode: Some(SqliteTransactionMode::Immediate),
                ..Default::default()
            })
            .await?)
    }

    /// Follows run changes: each message is the id of a run that changed. A
    /// receiver that falls behind gets `Lagged` and should reread what it shows.
    pub fn run_changes(&self) -> tokio::sync::broadcast::Receiver<std::sync::Arc<str>> {
        self.run_changes.subscribe()
    }

    /// Tells followers that a run changed (nobody listening costs nothing).
    pub(crate) fn run_changed(&self, run_id: &str) {
        if self.run_changes.receiver_count() > 0 {
            let _ = self.run_changes.send(run_id.into());
        }
    }

    pub fn engine(&self) -> Engine {
        self.engine
    }

    pub fn connection(&self) -> &DatabaseConnection {
        &self.db
    }

    /// Applies every pending migration; returns the names applied.
    pub async fn migrate(&self) -> Result<Vec<String>, StoreError> {
        let pending = self.pending_migrations().await?;
        Migrator::up(&self.db, None).await?;
        self.fill_missing_summaries().await?;
        Ok(pending)
    }

    pub async fn pending_migrations(&self) -> Result<Vec<String>, StoreError> {
        Ok(Migrator::get_pending_migrations(&self.db)
            .await?
            .iter()
            .map(|m| m.name().to_owned())
            .collect())
    }

    /// Every migration this build knows, applied or not.
    pub fn known_migrations() -> Vec<String> {
        Migrator::migrations()
            .iter()
            .map(|m| m.name().to_owned())
            .collect()
    }

    /// Reachable and migrated? Reads only; never changes the schema.
    pub async fn readiness(&self) -> Result<Readiness, StoreError> {
        self.db.execute_unprepared("SELECT 1").await?;
        let pending: Vec<String> = Migrator::get_pending_migrations_read_only(&self.db)
            .await?
            .iter()
            .map(|m| m.name().to_owned())
            .collect();
        Ok(if pending.is_empty() {
            Readiness::Ready
        } else {
            Readiness::Pending(pending)
        })
    }

    pub fn pool_stats(&self) -> PoolStats {
        match self.engine {
            Engine::Sqlite => {
                let pool = self.db.get_sqlite_connection_pool();
                PoolStats {
                    open: pool.size(),
                    idle: pool.num_idle() as u32,
                    max: pool.options().get_max_connections(),
                }
            }
            Engine::Postgres => {
                let pool = self.db.get_postgres_connection_pool();
                PoolStats {
                    open: pool.size(),
                    idle: pool.num_idle() as u32,
                    max: pool.options().get_max_connections(),
                }
            }
        }
    }

    /// Closes the pool, waiting for connections in use to come back.
    pub async fn close(self) -> Result<(), StoreError> {
        self.db.close().await?;
        Ok(())
    }

    /// A person's latest runs that are not deleted, newest first, with
    /// their experiments' names.
    pub async fn recent_runs(
        &self,
        user_id: i64,
        limit: u64,
    ) -> Result<Vec<trainyard_domain::RecentRun>, StoreError> {
        let runs = run::Entity::find()
            .filter(run::Column::UserId.eq(user_id))
            .filter(run::Column::LifecycleStage.eq("active"))
            .order_by_desc(run::Column::StartTime)
            .order_by_desc(run::Column::Id)
            .limit(limit)
            .all(&self.db)
            .await?;
        let ids: Vec<i64> = runs.iter().map(|r| r.experiment_id).collect();
        let names: HashMap<i64, String> = experiment::Entity::find()
            .filter(experiment::Column::Id.is_in(ids))
            .all(&self.db)
            .await?
            .into_iter()
            .map(|e| (e.id, e.name))
            .collect();
        Ok(runs
            .into_iter()
            .map(|r| trainyard_domain::RecentRun {
                experiment: names.get(&r.experiment_id).cloned().unwrap_or_default(),
                run_id: r.id,
                experiment_id: r.experiment_id,
                name: r.name,
                status: r.status,
                start_time: r.start_time,
                end_time: r.end_time,
            })
            .collect())
    }

    /// The figures of the home page, of what `viewer` may see (the
    /// machine's nodes and GPUs are everyone's to know).
    pub async fn overview(&self, viewer: &Viewer) -> Result<Overview, StoreError> {
        let experiments = experiment::Entity::find()
            .filter(experiment::Column::LifecycleStage.eq("active"))
            .filter(
                viewer
                    .condition(experiment::Column::OwnerId, experiment::Column::TeamId)
                    .add_option(
                        matches!(viewer, Viewer::Member { .. })
                            .then(|| experiment::Column::Id.eq(DEFAULT_EXPERIMENT)),
                    ),
            )
            .count(&self.db)
            .await?;
        let runs_seen = viewer.condition(run::Column::UserId, run::Column::TeamId);
        let runs = run::Entity::find()
            .filter(run::Column::LifecycleStage.eq("active"))
            .filter(runs_seen.clone())
            .count(&self.db)
            .await?;
        let active_runs = run::Entity::find()
            .filter(run::Column::LifecycleStage.eq("active"))
            .filter(run::Column::Status.eq("RUNNING"))
            .filter(runs_seen)
            .count(&self.db)
            .await?;
        let counted: Vec<(String, i64)> = job::Entity::find()
            .filter(viewer.condition(job::Column::OwnerId, job::Column::TeamId))
            .select_only()
            .column(job::Column::State)
            .column_as(Expr::from(Func::count(Expr::col(job::Column::Id))), "n")
            .group_by(job::Column::State)
            .into_tuple()
            .all(&self.db)
            .await?;
        let counted: HashMap<String, i64> = counted.into_iter().collect();
        let jobs_by_state = JobState::ALL
            .into_iter()
            .map(|state| {
                let n = counted.get(state.as_str()).copied().unwrap_or(0);
                (state, n.max(0) as u64)
            })
            .collect();
        let nodes = node::Entity::find().count(&self.db).await?;
        let gpus = gpu::Entity::find().count(&self.db).await?;
        Ok(Overview {
            experiments,
            runs,
            active_runs,
            jobs_by_state,
            nodes,
            gpus,
            admin: false,
        })
    }

    /// Experiments with their run counts and last activity, newest first:
    /// the active ones, or (`archived`) the deleted ones.
    pub async fn list_experiments(
        &self,
        viewer: &Viewer,
        archived: bool,
    ) -> Result<Vec<ExperimentSummary>, StoreError> {
        #[derive(FromQueryResult)]
        struct Row {
            id: i64,
            name: String,
            lifecycle_stage: String,
            last_update_time: i64,
            runs: i64,
            last_run_start: Option<i64>,
        }
        // Run counts are of the runs the viewer sees (Default is shared).
        let mut sql = self.sql();
        sql.push(
            "SELECT e.id, e.name, e.lifecycle_stage, e.last_update_time, \
             COUNT(r.id) AS runs, MAX(r.start_time) AS last_run_start \
             FROM experiments e LEFT JOIN runs r \
             ON r.experiment_id = e.id AND r.lifecycle_stage = e.lifecycle_stage",
        );
        viewer.restrict(&mut sql, "r.user_id", "r.team_id", None);
        sql.push(" WHERE e.lifecycle_stage = ")
            .bind(if archived { "deleted" } else { "active" });
        viewer.restrict(&mut sql, "e.owner_id", "e.team_id", Some("e.id = 0"));
        sql.push(" GROUP BY e.id, e.name, e.lifecycle_stage, e.last_update_time");
        let rows = Row::find_by_statement(sql.build()).all(&self.db).await?;
        let mut list: Vec<ExperimentSummary> = rows
            .into_iter()
            .map(|row| ExperimentSummary {
                id: row.id,
                name: row.name,
                lifecycle_stage: row.lifecycle_stage,
                runs: row.runs.max(0) as u64,
                last_activity: row.last_update_time.max(row.last_run_start.unwrap_or(0)),
            })
            .collect();
        list.sort_by(|a, b| b.last_activity.cmp(&a.last_activity).then(b.id.cmp(&a.id)));
        Ok(list)
    }

    /// Creates an experiment whose artifacts the server itself stores.
    pub async fn create_experiment(
        &self,
        name: &str,
        owner: trainyard_domain::identity::Owner,
    ) -> Result<i64, StoreError> {
        let name = trainyard_domain::validate_experiment_name(name)?;
        self.create_experiment_with(&name, None, &[], owner)
            .await
            .map_err(|err| match err {
                StoreError::Conflict { .. } => StoreError::Conflict {
                    what: format!("an experiment named `{name}`"),
                },
                other => other,
            })
    }

    pub async fn list_nodes(&self) -> Result<Vec<NodeSummary>, StoreError> {
        let nodes = node::Entity::find()
            .order_by_asc(node::Column::Name)
            .all(&self.db)
            .await?;
        let per_node: Vec<(i64, i64)> = gpu::Entity::find()
            .select_only()
            .column(gpu::Column::NodeId)
            .column_as(Expr::from(Func::count(Expr::col(gpu::Column::Id))), "n")
            .group_by(gpu::Column::NodeId)
            .into_tuple()
            .all(&self.db)
            .await?;
        let per_node: HashMap<i64, i64> = per_node.into_iter().collect();
        Ok(nodes
            .into_iter()
            .map(|n| NodeSummary {
                gpus: per_node.get(&n.id).copied().unwrap_or(0).max(0) as u64,
                name: n.name,
                state: n.state,
                last_seen: n.last_seen,
            })
            .collect())
    }
}

#[cfg(test)]
mod test_support;
#[cfg(test)]
mod tests;

#[cfg(test)]
mod eval_datasets_tests;
#[cfg(test)]
mod identity_tests;
#[cfg(test)]
mod models_tests;
#[cfg(test)]
mod scorers_tests;
#[cfg(test)]
mod series_tests;
#[cfg(test)]
mod telemetry_tests;
#[cfg(test)]
mod tracking_tests;
#[cfg(test)]
mod webhooks_tests;
