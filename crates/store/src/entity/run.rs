use sea_orm::entity::prelude::*;

#[derive(Clone, Debug, PartialEq, Eq, DeriveEntityModel)]
#[sea_orm(table_name = "runs")]
pub struct Model {
    #[sea_orm(primary_key, auto_increment = false)]
    pub id: String,
    pub experiment_id: i64,
    pub name: String,
    pub user_id: Option<i64>,
    pub status: String,
    pub start_time: i64,
    pub end_time: Option<i64>,
    pub lifecycle_stage: String,
    pub artifact_uri: String,
    pub user_name: String,
    pub team_id: Option<i64>,
}

#[derive(Copy, Clone, Debug, EnumIter, DeriveRelation)]
pub enum Relation {}

impl ActiveModelBehavior for ActiveModel {}
