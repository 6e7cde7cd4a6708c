//! Traces made from their spans. An OpenTelemetry exporter sends spans to
//! `/v1/traces` before (or without) the client's summary of the trace; the
//! server then makes the trace from what the spans say, and
//! `traces.from_spans` says so: its times widen as more spans come, and the
//! client's summary (`POST /api/3.0/mlflow/traces`), when it comes, takes
//! the place of what the spans said instead of being refused as a
//! duplicate.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Traces::Table)
                .add_column(boolean(Traces::FromSpans).default(false))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Traces::Table)
                .drop_column(Traces::FromSpans)
                .to_owned(),
        )
        .await
    }
}

#[derive(DeriveIden)]
enum Traces {
    Table,
    FromSpans,
}
