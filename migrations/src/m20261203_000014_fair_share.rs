//! Fair share: each team's fair-share weight, whether a running job is on
//! borrowed GPUs and why it is being preempted, and the GPU time each team
//! and person used, by hour (what fair share decays, and what the usage
//! page shows).

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
        // SQLite takes one column per ALTER TABLE.
        m.alter_table(
            Table::alter()
                .table(Teams::Table)
                .add_column(double(Teams::Share).default(1.0))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Jobs::Table)
                .add_column(boolean(Jobs::Borrowed).default(false))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Jobs::Table)
                .add_column(text_null(Jobs::PreemptReason))
                .to_owned(),
        )
        .await?;
        // Team and user 0: none (a job of no team, or of no account).
        m.create_table(
            Table::create()
                .table(GpuUsage::Table)
                .col(big_integer(GpuUsage::TeamId))
                .col(big_integer(GpuUsage::UserId))
                .col(big_integer(GpuUsage::Hour))
                .col(double(GpuUsage::GpuSeconds))
                .primary_key(
                    Index::create()
                        .col(GpuUsage::TeamId)
                        .col(GpuUsage::UserId)
                        .col(GpuUsage::Hour),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("gpu_usage_hour")
                .table(GpuUsage::Table)
                .col(GpuUsage::Hour)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(GpuUsage::Table).to_owned())
            .await?;
        for column in [Jobs::PreemptReason, Jobs::Borrowed] {
            m.alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .drop_column(column)
                    .to_owned(),
            )
            .await?;
        }
        m.alter_table(
            Table::alter()
                .table(Teams::Table)
                .drop_column(Teams::Share)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum Teams {
    Table,
    Share,
}

#[derive(DeriveIden, Clone, Copy)]
enum Jobs {
    Table,
    Borrowed,
    PreemptReason,
}

#[derive(DeriveIden, Clone, Copy)]
enum GpuUsage {
    Table,
    TeamId,
    UserId,
    Hour,
    GpuSeconds,
}
