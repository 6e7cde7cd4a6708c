//! Each project upload's SHA-256 (`uploads.digest`), so that the same
//! archive sent again (`trainyard submit --file` on each try, the form's
//! upload of an unchanged project) is the upload already kept rather than
//! another copy against its owner's quota. Uploads kept before have none.

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
                .add_column(string_len_null(Uploads::Digest, 64))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("uploads_owner_digest")
                .table(Uploads::Table)
                .col(Uploads::OwnerId)
                .col(Uploads::Digest)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_index(
            Index::drop()
                .name("uploads_owner_digest")
                .table(Uploads::Table)
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Uploads::Table)
                .drop_column(Uploads::Digest)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Uploads {
    Table,
    OwnerId,
    Digest,
}
