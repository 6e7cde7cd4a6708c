//! A logged model's metric values by the order they were logged, so that a
//! read takes a model's newest values (at most a bound) without sorting all
//! of them, and a page of models counts them from the index.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_index(
            Index::create()
                .name("idx_logged_model_metrics_newest")
                .table(LoggedModelMetrics::Table)
                .col(LoggedModelMetrics::ModelId)
                .col(LoggedModelMetrics::Id)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(
            Index::drop()
                .name("idx_logged_model_metrics_newest")
                .table(LoggedModelMetrics::Table)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum LoggedModelMetrics {
    Table,
    Id,
    ModelId,
}
