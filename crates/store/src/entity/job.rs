use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "jobs")]
pub struct Model {
    #[sea_orm(primary_key)]
    pub id: i64,
    pub name: String,
    pub owner_id: Option<i64>,
    pub team_id: Option<i64>,
    pub experiment_id: Option<i64>,
    pub run_id: Option<String>,
    pub template_slug: Option<String>,
    pub state: String,
    pub priority: i32,
    pub gpus: i32,
    pub spec: String,
    pub attempt: i32,
    pub node_id: Option<i64>,
    pub exit_code: Option<i32>,
    pub created_at: i64,
    pub started_at: Option<i64>,
    pub finished_at: Option<i64>,
    pub cpu_millis: i32,
    pub memory_mib: i64,
    pub max_runtime_secs: i64,
    pub retries: i32,
    pub gpu_indices: Option<String>,
    pub handle: Option<String>,
    pub node: Option<String>,
    pub pod: Option<String>,
    pub queue_position: Option<i32>,
    pub pending_reason: Option<String>,
    pub cancel_requested: bool,
    pub queued_at: Option<i64>,
    pub borrowed: bool,
    pub preempt_reason: Option<String>,
    pub gpu_devices: Option<String>,
    pub charged_from: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
