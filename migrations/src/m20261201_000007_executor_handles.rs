//! A running attempt is known by its executor's own handle (the local
//! executor's supervising process and its start time, a Kubernetes Job's
//! name), and by the node it runs on, instead of a process id in two
//! columns.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for mut column in [
            ColumnDef::new(Jobs::Handle)
                .string_len(400)
                .null()
                .to_owned(),
            ColumnDef::new(Jobs::Node).string_len(253).null().to_owned(),
        ] {
            m.alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(&mut column)
                    .to_owned(),
            )
            .await?;
        }
        // What runs now keeps being found: the local executor's handle is
        // `pid:start`.
        m.get_connection()
            .execute_unprepared(
                "UPDATE jobs SET handle = CAST(pid AS TEXT) || ':' || CAST(pid_start AS TEXT) \
                 WHERE pid IS NOT NULL AND pid_start IS NOT NULL",
            )
            .await?;
        for column in [Jobs::PidStart, Jobs::Pid] {
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

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for mut column in [
            ColumnDef::new(Jobs::Pid).integer().null().to_owned(),
            ColumnDef::new(Jobs::PidStart)
                .big_integer()
                .null()
                .to_owned(),
        ] {
            m.alter_table(
                Table::alter()
                    .table(Jobs::Table)
                    .add_column(&mut column)
                    .to_owned(),
            )
            .await?;
        }
        // The local executor's `pid:start` handles back into their columns
        // (a Kubernetes Job's name has no place there).
        let split = match m.get_database_backend() {
            sea_orm_migration::sea_orm::DatabaseBackend::Postgres => {
                "pid = CAST(split_part(handle, ':', 1) AS INTEGER), \
                 pid_start = CAST(split_part(handle, ':', 2) AS BIGINT) \
                 WHERE handle ~ '^[0-9]+:[0-9]+$'"
            }
            _ => {
                "pid = CAST(substr(handle, 1, instr(handle, ':') - 1) AS INTEGER), \
                 pid_start = CAST(substr(handle, instr(handle, ':') + 1) AS INTEGER) \
                 WHERE handle GLOB '[0-9]*:[0-9]*' AND handle NOT GLOB '*[^0-9:]*'"
            }
        };
        m.get_connection()
            .execute_unprepared(&format!("UPDATE jobs SET {split}"))
            .await?;
        for column in [Jobs::Node, Jobs::Handle] {
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
    Pid,
    PidStart,
    Handle,
    Node,
}
