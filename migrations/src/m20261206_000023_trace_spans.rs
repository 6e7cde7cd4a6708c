//! The spans of traces, as `search_traces` filters them (`span.name`,
//! `span.type`, `span.status`, `span.attributes.<key>`, `span.content`,
//! `trace.text`). The client keeps a trace's spans in its `traces.json`
//! artifact; the server copies what a filter needs into these tables when
//! that file is written, and `traces.spans_indexed` says when it last did
//! (NULL: never, so traces kept before this migration are indexed at
//! start). Removed with their trace.

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
                .table(TraceSpans::Table)
                .col(string_len(TraceSpans::TraceId, 64))
                .col(string_len(TraceSpans::SpanId, 128))
                .col(text(TraceSpans::Name))
                .col(string_len(TraceSpans::SpanType, 250))
                .col(string_len(TraceSpans::Status, 32))
                // The span's JSON, for `span.content` and `trace.text`.
                .col(text(TraceSpans::Content))
                .primary_key(
                    Index::create()
                        .col(TraceSpans::TraceId)
                        .col(TraceSpans::SpanId),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(TraceSpans::Table, TraceSpans::TraceId)
                        .to(Traces::Table, Traces::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(TraceSpanAttributes::Table)
                .col(string_len(TraceSpanAttributes::TraceId, 64))
                .col(string_len(TraceSpanAttributes::SpanId, 128))
                .col(string_len(TraceSpanAttributes::Key, 250))
                // The value as text: a JSON string's own text, else its JSON.
                .col(text(TraceSpanAttributes::Value))
                .primary_key(
                    Index::create()
                        .col(TraceSpanAttributes::TraceId)
                        .col(TraceSpanAttributes::SpanId)
                        .col(TraceSpanAttributes::Key),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(TraceSpanAttributes::Table, TraceSpanAttributes::TraceId)
                        .to(Traces::Table, Traces::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.alter_table(
            Table::alter()
                .table(Traces::Table)
                .add_column(big_integer_null(Traces::SpansIndexed))
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.alter_table(
            Table::alter()
                .table(Traces::Table)
                .drop_column(Traces::SpansIndexed)
                .to_owned(),
        )
        .await?;
        m.drop_table(Table::drop().table(TraceSpanAttributes::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(TraceSpans::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Traces {
    Table,
    Id,
    SpansIndexed,
}

#[derive(DeriveIden)]
enum TraceSpans {
    Table,
    TraceId,
    SpanId,
    Name,
    SpanType,
    Status,
    Content,
}

#[derive(DeriveIden)]
enum TraceSpanAttributes {
    Table,
    TraceId,
    SpanId,
    Key,
    Value,
}
