//! Jobs gain what the scheduler and the executor need: their sizes in
//! numbers, the retry budget, where they run (GPU indices, the supervising
//! process and its start time, so a restarted server can find it again),
//! their place in the queue with the reason, and a cancel request.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE.
        let columns = [
            ColumnDef::new(Jobs::CpuMillis)
                .integer()
                .not_null()
                .default(1000)
                .to_owned(),
            ColumnDef::new(Jobs::MemoryMib)
                .big_integer()
                .not_null()
                .default(4096)
                .to_owned(),
            ColumnDef::new(Jobs::MaxRuntimeSecs)
                .big_integer()
                .not_null()
                .default(86_400)
                .to_owned(),
            ColumnDef::new(Jobs::Retries)
                .integer()
                .not_null()
                .default(0)
                .to_owned(),
            ColumnDef::new(Jobs::GpuIndices)
                .string_len(400)
                .null()
                .to_owned(),
            ColumnDef::new(Jobs::Pid).integer().null().to_owned(),
            ColumnDef::new(Jobs::PidStart)
                .big_integer()
                .null()
                .to_owned(),
            ColumnDef::new(Jobs::QueuePosition)
                .integer()
                .null()
                .to_owned(),
            ColumnDef::new(Jobs::PendingReason).text().null().to_owned(),
            ColumnDef::new(Jobs::CancelRequested)
                .boolean()
                .not_null()
                .default(false)
                .to_owned(),
            ColumnDef::new(Jobs::QueuedAt)
                .big_integer()
                .null()
                .to_owned(),
        ];
        for mut column in columns {
            m.alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(&mut column)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for column in [
            Jobs::QueuedAt,
            Jobs::CancelRequested,
            Jobs::PendingReason,
            Jobs::QueuePosition,
            Jobs::PidStart,
            Jobs::Pid,
            Jobs::GpuIndices,
            Jobs::Retries,
            Jobs::MaxRuntimeSecs,
            Jobs::MemoryMib,
            Jobs::CpuMillis,
        ] {
            m.alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .drop_column(column)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum Jobs {
    Table,
    CpuMillis,
    MemoryMib,
    MaxRuntimeSecs,
    Retries,
    GpuIndices,
    Pid,
    PidStart,
    QueuePosition,
    PendingReason,
    CancelRequested,
    QueuedAt,
}
