//! Nodes and their GPUs as the executors find them: the local executor
//! registers this machine at start-up.

use sea_orm::{
    ActiveModelTrait, ColumnTrait, Condition, ConnectionTrait, EntityTrait, PaginatorTrait,
    QueryFilter, Set,
};

use crate::entity::{gpu, node};
use crate::{Store, StoreError, now_millis};

/// One GPU of a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuInfo {
    pub index: u32,
    pub uuid: String,
    pub name: String,
    pub memory_total_bytes: u64,
}

impl Store {
    /// Records a node as ready with exactly these GPUs (added, updated, or
    /// removed to match). Returns the node's id.
    pub async fn register_node(&self, name: &str, gpus: &[GpuInfo]) -> Result<i64, StoreError> {
        self.register(name, gpus, true).await
    }

    /// [`Store::register_node`] for a node's agent, which is not trusted
    /// with other nodes: a GPU UUID registered to another node is refused
    /// rather than moved over.
    pub async fn register_agent_node(
        &self,
        name: &str,
        gpus: &[GpuInfo],
    ) -> Result<i64, StoreError> {
        self.register(name, gpus, false).await
    }

    async fn register(
        &self,
        name: &str,
        gpus: &[GpuInfo],
        move_from_other_nodes: bool,
    ) -> Result<i64, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let now = now_millis();
        let existing = node::Entity::find()
            .filter(node::Column::Name.eq(name))
            .one(&txn)
            .await?;
        let node_id = match existing {
            Some(m) => {
                let mut active: node::ActiveModel = m.into();
                active.state = Set("ready".to_owned());
                active.last_seen = Set(Some(now));
                active.update(&txn).await?.id
            }
            None => {
                node::ActiveModel {
                    name: Set(name.to_owned()),
                    state: Set("ready".to_owned()),
                    last_seen: Set(Some(now)),
                    labels: Set("{}".to_owned()),
                    created_at: Set(now),
                    ..Default::default()
                }
                .insert(&txn)
                .await?
                .id
            }
        };
        // Matched by UUID, so that a GPU keeps its id (and its telemetry)
        // across registrations; its index and name follow the hardware.
        let wanted: std::collections::HashSet<&str> =
            gpus.iter().map(|g| g.uuid.as_str()).collect();
        let known = gpu::Entity::find()
            .filter(
                Condition::any()
                    .add(gpu::Column::NodeId.eq(node_id))
                    .add(gpu::Column::Uuid.is_in(wanted.iter().copied())),
            )
            .all(&txn)
            .await?;
        if !move_from_other_nodes && let Some(taken) = known.iter().find(|m| m.node_id != node_id) {
            return Err(StoreError::Forbidden(format!(
                "GPU {} is registered to another node; an agent reports its own node's GPUs only (an admin removes the other node if the card moved)",
                taken.uuid
            )));
        }
        let gone: Vec<i64> = known
            .iter()
            .filter(|m| m.node_id == node_id && !wanted.contains(m.uuid.as_str()))
            .map(|m| m.id)
            .collect();
        if !gone.is_empty() {
            gpu::Entity::delete_many()
                .filter(gpu::Column::Id.is_in(gone))
                .exec(&txn)
                .await?;
        }
        for g in gpus {
            match known.iter().find(|m| m.uuid == g.uuid) {
                Some(m) => {
                    let mut active: gpu::ActiveModel = m.clone().into();
                    active.node_id = Set(node_id);
                    active.index = Set(g.index as i32);
                    active.name = Set(g.name.clone());
                    active.memory_total_bytes = Set(g.memory_total_bytes as i64);
                    active.update(&txn).await?;
                }
                None => {
                    gpu::ActiveModel {
                        node_id: Set(node_id),
                        index: Set(g.index as i32),
                        uuid: Set(g.uuid.clone()),
                        name: Set(g.name.clone()),
                        memory_total_bytes: Set(g.memory_total_bytes as i64),
                        ..Default::default()
                    }
                    .insert(&txn)
                    .await?;
                }
            }
        }
        txn.commit().await?;
        Ok(node_id)
    }
}

impl Store {
    /// Removes a node that is gone for good: its GPUs and their samples,
    /// its agent tokens (revoked), and its name from ended jobs; not while a
    /// job starts or runs on it. A node that is still there comes back when next seen (the
    /// local executor's at start-up, an agent's at its next registration
    /// with a new token, a cluster's at the next capacity read).
    pub async fn remove_node(&self, name: &str) -> Result<NodeRemoval, StoreError> {
        use sea_orm::sea_query::Expr;
        use trainyard_domain::JobState;

        use crate::entity::{api_token, job};
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let Some(found) = node::Entity::find()
            .filter(node::Column::Name.eq(name))
            .one(&txn)
            .await?
        else {
            return Ok(NodeRemoval::Missing);
        };
        let busy = job::Entity::find()
            .filter(job::Column::NodeId.eq(found.id))
            .filter(
                job::Column::State.is_in([JobState::Starting.as_str(), JobState::Running.as_str()]),
            )
            .count(&txn)
            .await?;
        if busy > 0 {
            return Ok(NodeRemoval::Busy(busy));
        }
        let gpu_ids: Vec<i64> = gpu::Entity::find()
            .filter(gpu::Column::NodeId.eq(found.id))
            .all(&txn)
            .await?
            .into_iter()
            .map(|g| g.id)
            .collect();
        for table in ["gpu_series", "gpu_xids"] {
            for ids in gpu_ids.chunks(500) {
                let mut sql = self.sql();
                sql.push(&format!("DELETE FROM {table} WHERE gpu_id IN "))
                    .bind_list(ids.iter().copied());
                txn.execute_raw(sql.build()).await?;
            }
        }
        let mut sql = self.sql();
        sql.push("DELETE FROM gpu_fresh WHERE node_id = ")
            .bind(found.id);
        txn.execute_raw(sql.build()).await?;
        gpu::Entity::delete_many()
            .filter(gpu::Column::NodeId.eq(found.id))
            .exec(&txn)
            .await?;
        job::Entity::update_many()
            .col_expr(job::Column::NodeId, Expr::value(Option::<i64>::None))
            .filter(job::Column::NodeId.eq(found.id))
            .exec(&txn)
            .await?;
        api_token::Entity::update_many()
            .col_expr(api_token::Column::RevokedAt, Expr::value(now_millis()))
            .filter(api_token::Column::Node.eq(name))
            .filter(api_token::Column::RevokedAt.is_null())
            .exec(&txn)
            .await?;
        node::Entity::delete_by_id(found.id).exec(&txn).await?;
        txn.commit().await?;
        // Its jobs' node was cleared, whichever they were.
        self.job_writes.changed(None);
        Ok(NodeRemoval::Removed)
    }
}

/// What [`Store::remove_node`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeRemoval {
    Removed,
    /// No node of that name.
    Missing,
    /// Jobs are starting or running on it: nothing was removed.
    Busy(u64),
}

/// Drains in all: a name a cluster never had cannot fill the table.
pub const MAX_DRAINS: i64 = 10_000;

impl Store {
    /// Drains `node` (again: the new reason and choice replace the old),
    /// by the admin `by`.
    pub async fn drain_node(
        &self,
        node: &str,
        reason: &str,
        stop_jobs: bool,
        by: Option<i64>,
    ) -> Result<trainyard_domain::NodeDrain, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push("SELECT COUNT(*) AS n FROM node_drains WHERE node <> ")
            .bind(node.to_owned());
        let held: i64 = match txn.query_one_raw(sql.build()).await? {
            Some(row) => crate::tracking::get(&row, "n")?,
            None => 0,
        };
        if held >= MAX_DRAINS {
            return Err(StoreError::Rejected(format!(
                "{held} nodes are drained already, the most this server keeps; resume some first"
            )));
        }
        let mut sql = self.sql();
        sql.push("INSERT INTO node_drains (node, reason, stop_jobs, user_id, created_at) VALUES (")
            .bind(node.to_owned())
            .push(", ")
            .bind(reason.to_owned())
            .push(", ")
            .bind(stop_jobs)
            .push(", ")
            .bind(by)
            .push(", ")
            .bind(now_millis())
            .push(
                ") ON CONFLICT (node) DO UPDATE SET reason = excluded.reason, \
                 stop_jobs = excluded.stop_jobs, user_id = excluded.user_id, \
                 created_at = excluded.created_at",
            );
        txn.execute_raw(sql.build()).await?;
        txn.commit().await?;
        // The supervisor looks again at once.
        self.job_writes.changed(None);
        self.node_drains()
            .await?
            .into_iter()
            .find(|d| d.node == node)
            .ok_or_else(|| StoreError::NotFound(format!("node {node} is not drained")))
    }

    /// Ends the drain of `node`; false when it was not drained.
    pub async fn resume_node(&self, node: &str) -> Result<bool, StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push("DELETE FROM node_drains WHERE node = ")
            .bind(node.to_owned());
        let done = self.connection().execute_raw(sql.build()).await?;
        self.job_writes.changed(None);
        Ok(done.rows_affected() > 0)
    }

    /// Every drain, by node name.
    pub async fn node_drains(&self) -> Result<Vec<trainyard_domain::NodeDrain>, StoreError> {
        use crate::tracking::get;
        let rows = self
            .connection()
            .query_all_raw(sea_orm::Statement::from_string(
                self.connection().get_database_backend(),
                "SELECT d.node, d.reason, d.stop_jobs, d.created_at, u.username \
                 FROM node_drains d LEFT JOIN users u ON u.id = d.user_id ORDER BY d.node",
            ))
            .await?;
        rows.iter()
            .map(|row| {
                Ok(trainyard_domain::NodeDrain {
                    node: get(row, "node")?,
                    reason: get(row, "reason")?,
                    stop_jobs: get(row, "stop_jobs")?,
                    by: get(row, "username")?,
                    since: get(row, "created_at")?,
                })
            })
            .collect()
    }
}
