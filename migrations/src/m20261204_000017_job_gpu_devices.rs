//! The GPUs a job's attempt really got, where that differs from
//! Trainyard's own pick: on Kubernetes the kubelet's device plugin chooses
//! the devices, and the node agent reads them from the kubelet's
//! pod-resources API. NULL where nothing told otherwise (`gpu_indices`
//! stands).

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Jobs::Table)
                .add_column(ColumnDef::new(Jobs::GpuDevices).text().null())
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Jobs::Table)
                .drop_column(Jobs::GpuDevices)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum Jobs {
    Table,
    GpuDevices,
}
