//! The name of what runs an attempt, where its executor has one beside
//! the handle: a Kubernetes Job's pod, shown with the node.

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
                .add_column(ColumnDef::new(Jobs::Pod).string_len(253).null())
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Jobs::Table)
                .drop_column(Jobs::Pod)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum Jobs {
    Table,
    Pod,
}
