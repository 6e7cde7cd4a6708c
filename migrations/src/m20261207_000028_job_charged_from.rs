//! Where the GPU time of a job's current attempt has been charged up to
//! (`jobs.charged_from`): a running job moved to another team charges what
//! it used so far to the team it ran for, and the rest of the attempt,
//! from here, to the new one. Empty until such a move, and cleared when
//! an attempt starts.

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
        m.alter_table(
            Table::alter()
                .table(Jobs::Table)
                .add_column(big_integer_null(Jobs::ChargedFrom))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Jobs::Table)
                .drop_column(Jobs::ChargedFrom)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Jobs {
    Table,
    ChargedFrom,
}
