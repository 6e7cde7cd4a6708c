//! Node drains: an admin takes a node out of the queue's reach (for a
//! driver update, a failing GPU) by its name, whichever executor offers
//! it. The scheduler places nothing new there; with `stop_jobs`, what runs
//! there is stopped and queued again without spending its retries.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(NodeDrains::Table)
                .col(string_len(NodeDrains::Node, 253).primary_key())
                .col(text(NodeDrains::Reason))
                .col(boolean(NodeDrains::StopJobs))
                .col(big_integer_null(NodeDrains::UserId))
                .col(big_integer(NodeDrains::CreatedAt))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(NodeDrains::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum NodeDrains {
    Table,
    Node,
    Reason,
    StopJobs,
    UserId,
    CreatedAt,
}
