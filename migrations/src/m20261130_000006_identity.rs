//! Sign-in: accounts are tied to their identity provider's subject, runs
//! are filed under a team as jobs are, sessions
//! live on the server (the cookie carries only a random secret, stored
//! hashed), and a sign-in in progress keeps its state, nonce and PKCE
//! verifier here until the provider sends the browser back, once.

use sea_orm_migration::prelude::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        // SQLite adds one column per ALTER TABLE, and no unique constraint
        // with it: the subject's uniqueness is an index.
        for mut column in [
            ColumnDef::new(Users::Subject)
                .string_len(255)
                .null()
                .to_owned(),
            ColumnDef::new(Users::LastLoginAt)
                .big_integer()
                .null()
                .to_owned(),
        ] {
            m.alter_table(
                Table::alter()
                    .table(Users::Table)
                    .add_column(&mut column)
                    .to_owned(),
            )
            .await?;
        }
        // A run is filed under a team, as jobs are, so the team sees it.
        m.alter_table(
            Table::alter()
                .table(Runs::Table)
                .add_column(ColumnDef::new(Runs::TeamId).big_integer().null())
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("users_subject")
                .table(Users::Table)
                .col(Users::Subject)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Sessions::Table)
                // The SHA-256 of the cookie's secret, in hex.
                .col(
                    ColumnDef::new(Sessions::Id)
                        .string_len(64)
                        .not_null()
                        .primary_key(),
                )
                .col(ColumnDef::new(Sessions::UserId).big_integer().not_null())
                .col(
                    ColumnDef::new(Sessions::CsrfToken)
                        .string_len(64)
                        .not_null(),
                )
                .col(ColumnDef::new(Sessions::CreatedAt).big_integer().not_null())
                .col(ColumnDef::new(Sessions::ExpiresAt).big_integer().not_null())
                .col(
                    ColumnDef::new(Sessions::LastSeenAt)
                        .big_integer()
                        .not_null(),
                )
                .col(ColumnDef::new(Sessions::RevokedAt).big_integer().null())
                // Sent back to the provider as `id_token_hint` at sign-out.
                .col(ColumnDef::new(Sessions::IdToken).text().null())
                .foreign_key(
                    ForeignKey::create()
                        .from(Sessions::Table, Sessions::UserId)
                        .to(Users::Table, Users::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("sessions_user")
                .table(Sessions::Table)
                .col(Sessions::UserId)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(LoginAttempts::Table)
                .col(
                    ColumnDef::new(LoginAttempts::State)
                        .string_len(64)
                        .not_null()
                        .primary_key(),
                )
                .col(
                    ColumnDef::new(LoginAttempts::Nonce)
                        .string_len(64)
                        .not_null(),
                )
                // The SHA-256 of a secret in a cookie of the browser that
                // started the sign-in: only that browser may finish it.
                .col(
                    ColumnDef::new(LoginAttempts::Browser)
                        .string_len(64)
                        .not_null(),
                )
                .col(
                    ColumnDef::new(LoginAttempts::PkceVerifier)
                        .string_len(128)
                        .not_null(),
                )
                .col(
                    ColumnDef::new(LoginAttempts::ReturnTo)
                        .string_len(2048)
                        .not_null(),
                )
                .col(
                    ColumnDef::new(LoginAttempts::CreatedAt)
                        .big_integer()
                        .not_null(),
                )
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(LoginAttempts::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(Sessions::Table).to_owned())
            .await?;
        m.drop_index(
            Index::drop()
                .name("users_subject")
                .table(Users::Table)
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Runs::Table)
                .drop_column(Runs::TeamId)
                .to_owned(),
        )
        .await?;
        for column in [Users::LastLoginAt, Users::Subject] {
            m.alter_table(
                Table::alter()
                    .table(Users::Table)
                    .drop_column(column)
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden, Clone, Copy)]
enum Users {
    Table,
    Id,
    Subject,
    LastLoginAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum Runs {
    Table,
    TeamId,
}

#[derive(DeriveIden, Clone, Copy)]
enum Sessions {
    Table,
    Id,
    UserId,
    CsrfToken,
    CreatedAt,
    ExpiresAt,
    LastSeenAt,
    RevokedAt,
    IdToken,
}

#[derive(DeriveIden, Clone, Copy)]
enum LoginAttempts {
    Table,
    State,
    Nonce,
    Browser,
    PkceVerifier,
    ReturnTo,
    CreatedAt,
}
