//! Uploads: project archives (unpacked into each job that names them) and
//! named, reusable datasets. The files live under the data folder; this
//! table says what each upload is, whose, and how big.

use sea_orm_migration::prelude::*;

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
                .table(Uploads::Table)
                .col(
                    ColumnDef::new(Uploads::Id)
                        .string_len(32)
                        .not_null()
                        .primary_key(),
                )
                .col(ColumnDef::new(Uploads::Kind).string_len(16).not_null())
                .col(ColumnDef::new(Uploads::Name).string_len(250).not_null())
                // Set for datasets only, so their names are unique.
                .col(
                    ColumnDef::new(Uploads::DatasetName)
                        .string_len(100)
                        .null()
                        .unique_key(),
                )
                .col(ColumnDef::new(Uploads::OwnerId).big_integer().null())
                .col(ColumnDef::new(Uploads::Files).big_integer().not_null())
                .col(ColumnDef::new(Uploads::Bytes).big_integer().not_null())
                .col(ColumnDef::new(Uploads::CreatedAt).big_integer().not_null())
                .foreign_key(
                    ForeignKey::create()
                        .from(Uploads::Table, Uploads::OwnerId)
                        .to(Users::Table, Users::Id)
                        .on_delete(ForeignKeyAction::SetNull),
                )
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(Uploads::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum Uploads {
    Table,
    Id,
    Kind,
    Name,
    DatasetName,
    OwnerId,
    Files,
    Bytes,
    CreatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum Users {
    Table,
    Id,
}
