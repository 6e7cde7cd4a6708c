//! The checkpoints of ended jobs, kept for a while (`kept_checkpoints`):
//! a job that hit its max runtime, was cancelled or failed leaves its
//! checkpoint folder for its owner's next job to resume from, until
//! `checkpoint_keep_hours` have passed. `taken_by`: the job that resumes
//! from them, from its submission to its end.

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
        m.create_table(
            Table::create()
                .table(KeptCheckpoints::Table)
                .col(big_integer(KeptCheckpoints::JobId).primary_key())
                .col(big_integer_null(KeptCheckpoints::OwnerId))
                .col(big_integer(KeptCheckpoints::Bytes))
                .col(big_integer(KeptCheckpoints::KeptUntil))
                .col(big_integer_null(KeptCheckpoints::TakenBy))
                .foreign_key(
                    ForeignKey::create()
                        .from(KeptCheckpoints::Table, KeptCheckpoints::JobId)
                        .to(Jobs::Table, Jobs::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(KeptCheckpoints::Table, KeptCheckpoints::TakenBy)
                        .to(Jobs::Table, Jobs::Id)
                        .on_delete(ForeignKeyAction::SetNull),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(KeptCheckpoints::Table, KeptCheckpoints::OwnerId)
                        .to(Users::Table, Users::Id)
                        .on_delete(ForeignKeyAction::SetNull),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_kept_checkpoints_until")
                .table(KeptCheckpoints::Table)
                .col(KeptCheckpoints::KeptUntil)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_kept_checkpoints_taken_by")
                .table(KeptCheckpoints::Table)
                .col(KeptCheckpoints::TakenBy)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_kept_checkpoints_owner")
                .table(KeptCheckpoints::Table)
                .col(KeptCheckpoints::OwnerId)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(KeptCheckpoints::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum KeptCheckpoints {
    Table,
    JobId,
    OwnerId,
    Bytes,
    KeptUntil,
    TakenBy,
}

#[derive(DeriveIden)]
enum Jobs {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}
