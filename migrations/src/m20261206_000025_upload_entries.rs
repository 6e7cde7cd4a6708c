//! What each upload costs the disk in files and folders (`uploads.entries`),
//! so that one person's uploads are bounded in inodes as in bytes: an
//! archive of 100,000 empty folders holds 0 bytes. An upload counts its
//! own folder too; uploads kept before count their files and that folder.

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
                .table(Uploads::Table)
                .add_column(big_integer(Uploads::Entries).default(0))
                .to_owned(),
        )
        .await?;
        m.exec_stmt(
            Query::update()
                .table(Uploads::Table)
                .value(Uploads::Entries, Expr::col(Uploads::Files).add(1))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Uploads::Table)
                .drop_column(Uploads::Entries)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Uploads {
    Table,
    Files,
    Entries,
}
