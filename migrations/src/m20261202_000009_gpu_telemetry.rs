//! GPU telemetry (see docs/gpu-telemetry.md): readings as nodes send them
//! (`gpu_fresh`), folded by compaction into per-GPU blocks of fixed records
//! in tiers (`gpu_series`), and the XID errors GPUs raised (`gpu_xids`).

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
                .table(GpuFresh::Table)
                .col(big_pk_auto(GpuFresh::Id))
                .col(big_integer(GpuFresh::NodeId))
                .col(big_integer(GpuFresh::TMs))
                .col(blob(GpuFresh::Payload))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_gpu_fresh_node_time")
                .table(GpuFresh::Table)
                .col(GpuFresh::NodeId)
                .col(GpuFresh::TMs)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(GpuSeries::Table)
                .col(big_integer(GpuSeries::GpuId))
                .col(small_integer(GpuSeries::Tier))
                .col(big_integer(GpuSeries::BlockStart))
                .col(blob(GpuSeries::Payload))
                .primary_key(
                    Index::create()
                        .col(GpuSeries::GpuId)
                        .col(GpuSeries::Tier)
                        .col(GpuSeries::BlockStart),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_gpu_series_tier_block")
                .table(GpuSeries::Table)
                .col(GpuSeries::Tier)
                .col(GpuSeries::BlockStart)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(GpuXids::Table)
                .col(big_pk_auto(GpuXids::Id))
                .col(big_integer(GpuXids::GpuId))
                .col(big_integer(GpuXids::TMs))
                .col(big_integer_null(GpuXids::Code))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_gpu_xids_gpu_time")
                .table(GpuXids::Table)
                .col(GpuXids::GpuId)
                .col(GpuXids::TMs)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            GpuXids::Table.into_iden(),
            GpuSeries::Table.into_iden(),
            GpuFresh::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum GpuFresh {
    Table,
    Id,
    NodeId,
    TMs,
    Payload,
}

#[derive(DeriveIden, Clone, Copy)]
enum GpuSeries {
    Table,
    GpuId,
    Tier,
    BlockStart,
    Payload,
}

#[derive(DeriveIden, Clone, Copy)]
enum GpuXids {
    Table,
    Id,
    GpuId,
    TMs,
    Code,
}
