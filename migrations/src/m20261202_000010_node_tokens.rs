//! Node credentials: an API token may be a node's, for its agent
//! (`trainyard agent`), which then writes that node's GPU samples and
//! nothing else.

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
                .table(ApiTokens::Table)
                .add_column(ColumnDef::new(ApiTokens::Node).string_len(253).null())
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(ApiTokens::Table)
                .drop_column(ApiTokens::Node)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum ApiTokens {
    Table,
    Node,
}
