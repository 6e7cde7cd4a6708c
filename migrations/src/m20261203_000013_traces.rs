//! MLflow 3's traces: one row per trace (its experiment, owner, times,
//! state, previews, the run it belongs to), with its tags and request
//! metadata as key-value rows for search. Spans stay in the trace's
//! `traces.json` artifact, as MLflow keeps them with an artifact store.

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
                .table(Traces::Table)
                .col(string_len(Traces::Id, 64).primary_key())
                .col(big_integer(Traces::ExperimentId))
                .col(string_len(Traces::Name, 500))
                .col(big_integer(Traces::RequestTime))
                .col(big_integer_null(Traces::ExecutionTime))
                .col(string_len(Traces::State, 32))
                .col(text(Traces::RequestPreview))
                .col(text(Traces::ResponsePreview))
                .col(text_null(Traces::ClientRequestId))
                .col(string_len_null(Traces::RunId, 32))
                .col(text(Traces::ArtifactLocation))
                .col(big_integer_null(Traces::UserId))
                .col(big_integer_null(Traces::TeamId))
                .foreign_key(
                    ForeignKey::create()
                        .from(Traces::Table, Traces::ExperimentId)
                        .to(Experiments::Table, Experiments::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_traces_experiment_time")
                .table(Traces::Table)
                .col(Traces::ExperimentId)
                .col(Traces::RequestTime)
                .to_owned(),
        )
        .await?;
        for table in [TraceKv::TraceTags, TraceKv::TraceMetadata] {
            m.create_table(
                Table::create()
                    .table(table)
                    .col(string_len(TraceKv::TraceId, 64))
                    .col(string_len(TraceKv::Key, 250))
                    .col(text(TraceKv::Value))
                    .primary_key(Index::create().col(TraceKv::TraceId).col(TraceKv::Key))
                    .foreign_key(
                        ForeignKey::create()
                            .from(table, TraceKv::TraceId)
                            .to(Traces::Table, Traces::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            TraceKv::TraceMetadata.into_iden(),
            TraceKv::TraceTags.into_iden(),
            Traces::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum Experiments {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Traces {
    Table,
    Id,
    ExperimentId,
    Name,
    RequestTime,
    ExecutionTime,
    State,
    RequestPreview,
    ResponsePreview,
    ClientRequestId,
    RunId,
    ArtifactLocation,
    UserId,
    TeamId,
}

#[derive(DeriveIden, Clone, Copy)]
enum TraceKv {
    TraceTags,
    TraceMetadata,
    TraceId,
    Key,
    Value,
}
