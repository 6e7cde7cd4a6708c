//! MLflow 3's assessments of traces: feedback (a person's, a judge's or a
//! scorer's verdict, with its rationale) and expectations (the answer a
//! trace should have given). One row each, removed with its trace. The
//! feedback's or expectation's own object is kept as the client sent it
//! (JSON), so that it comes back whole; its value beside it, as JSON text
//! and as a number where it is one, for search (`feedback.correct =
//! 'true'`, `feedback.score > 0.5`).

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
                .table(TraceAssessments::Table)
                .col(string_len(TraceAssessments::Id, 64).primary_key())
                .col(string_len(TraceAssessments::TraceId, 64))
                .col(string_len(TraceAssessments::Name, 250))
                .col(string_len(TraceAssessments::Kind, 16))
                .col(text(TraceAssessments::Body))
                .col(text_null(TraceAssessments::ValueText))
                .col(double_null(TraceAssessments::ValueNumber))
                .col(string_len(TraceAssessments::SourceType, 32))
                .col(string_len(TraceAssessments::SourceId, 250))
                .col(string_len_null(TraceAssessments::SpanId, 64))
                .col(text_null(TraceAssessments::Rationale))
                .col(text_null(TraceAssessments::Metadata))
                .col(string_len_null(TraceAssessments::Overrides, 64))
                .col(boolean(TraceAssessments::Valid).default(true))
                .col(big_integer(TraceAssessments::CreateTime))
                .col(big_integer(TraceAssessments::LastUpdateTime))
                .foreign_key(
                    ForeignKey::create()
                        .from(TraceAssessments::Table, TraceAssessments::TraceId)
                        .to(Traces::Table, Traces::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_trace_assessments_trace")
                .table(TraceAssessments::Table)
                .col(TraceAssessments::TraceId)
                .col(TraceAssessments::CreateTime)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(TraceAssessments::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Traces {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum TraceAssessments {
    Table,
    Id,
    TraceId,
    Name,
    Kind,
    Body,
    ValueText,
    ValueNumber,
    SourceType,
    SourceId,
    SpanId,
    Rationale,
    Metadata,
    Overrides,
    Valid,
    CreateTime,
    LastUpdateTime,
}
