//! The admins' audit trail (`audit_events`): who changed what that is not
//! theirs alone, and when: a team's guarantee or share, a drained node,
//! someone else's sessions ended or job stopped, a template, a node token.
//! Kept with the actor's name as it was, so that it reads the same after
//! the account goes.

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
                .table(AuditEvents::Table)
                .col(big_pk_auto(AuditEvents::Id))
                .col(big_integer(AuditEvents::Time))
                .col(big_integer_null(AuditEvents::ActorId))
                .col(string_len(AuditEvents::Actor, 250))
                .col(string_len(AuditEvents::Action, 64))
                .col(string_len(AuditEvents::Target, 250))
                .col(text(AuditEvents::Detail))
                .foreign_key(
                    ForeignKey::create()
                        .from(AuditEvents::Table, AuditEvents::ActorId)
                        .to(Users::Table, Users::Id)
                        .on_delete(ForeignKeyAction::SetNull),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_audit_events_action")
                .table(AuditEvents::Table)
                .col(AuditEvents::Action)
                .col(AuditEvents::Id)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(AuditEvents::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum AuditEvents {
    Table,
    Id,
    Time,
    ActorId,
    Actor,
    Action,
    Target,
    Detail,
}

#[derive(DeriveIden)]
enum Users {
    Table,
    Id,
}
