//! Sessions keep the provider's refresh token, so that a person's groups
//! and admin rights are read again while they stay signed in, and when the
//! provider last vouched for them.

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
        // SQLite takes one column per ALTER TABLE.
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .add_column(text_null(Sessions::RefreshToken))
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Sessions::Table)
                .add_column(big_integer_null(Sessions::CheckedAt))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for column in [Sessions::CheckedAt, Sessions::RefreshToken] {
            m.alter_table(
                Table::alter()
                    .table(Sessions::Table)
                    .drop_column(column)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum Sessions {
    Table,
    RefreshToken,
    CheckedAt,
}
