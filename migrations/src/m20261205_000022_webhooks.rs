//! MLflow 3's registry webhooks (`MlflowClient().create_webhook`): an admin
//! names a URL and the registry events it wants (a model or a version
//! created, a version's tag set, an alias moved, and the same for prompts),
//! and each such event is POSTed to it, signed with the webhook's secret.
//! Deliveries are an outbox: a row for each event and webhook, written when
//! the event happens and tried until the receiver takes it or the tries run
//! out, so a restart loses none and an admin sees what was sent.

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
                .table(Webhooks::Table)
                .col(string_len(Webhooks::Id, 64).primary_key())
                .col(string_len(Webhooks::Name, 64))
                .col(text_null(Webhooks::Description))
                .col(text(Webhooks::Url))
                .col(text(Webhooks::Events))
                .col(text_null(Webhooks::Secret))
                .col(string_len(Webhooks::Status, 16))
                .col(big_integer(Webhooks::CreationTimestamp))
                .col(big_integer(Webhooks::LastUpdatedTimestamp))
                .col(big_integer_null(Webhooks::UserId))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(WebhookDeliveries::Table)
                .col(string_len(WebhookDeliveries::Id, 64).primary_key())
                .col(string_len(WebhookDeliveries::WebhookId, 64))
                .col(string_len(WebhookDeliveries::Event, 64))
                .col(text(WebhookDeliveries::Body))
                .col(big_integer(WebhookDeliveries::Created))
                .col(integer(WebhookDeliveries::Attempts).default(0))
                .col(big_integer(WebhookDeliveries::NextAttempt))
                .col(string_len(WebhookDeliveries::State, 16))
                .col(integer_null(WebhookDeliveries::ResponseStatus))
                .col(text_null(WebhookDeliveries::Error))
                .col(big_integer_null(WebhookDeliveries::Finished))
                .foreign_key(
                    ForeignKey::create()
                        .from(WebhookDeliveries::Table, WebhookDeliveries::WebhookId)
                        .to(Webhooks::Table, Webhooks::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_webhook_deliveries_due")
                .table(WebhookDeliveries::Table)
                .col(WebhookDeliveries::State)
                .col(WebhookDeliveries::NextAttempt)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_webhook_deliveries_webhook")
                .table(WebhookDeliveries::Table)
                .col(WebhookDeliveries::WebhookId)
                .col(WebhookDeliveries::Created)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            WebhookDeliveries::Table.into_iden(),
            Webhooks::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Webhooks {
    Table,
    Id,
    Name,
    Description,
    Url,
    Events,
    Secret,
    Status,
    CreationTimestamp,
    LastUpdatedTimestamp,
    UserId,
}

#[derive(DeriveIden)]
enum WebhookDeliveries {
    Table,
    Id,
    WebhookId,
    Event,
    Body,
    Created,
    Attempts,
    NextAttempt,
    State,
    ResponseStatus,
    Error,
    Finished,
}
