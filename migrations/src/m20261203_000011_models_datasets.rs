//! MLflow 3's run inputs and outputs and its logged models: datasets (one row
//! per experiment, name and digest, as MLflow dedupes them), the datasets
//! and models a run read or wrote, and logged models with their params,
//! tags and metrics. A model is owned as a run is (user and team).

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
                .table(Datasets::Table)
                .col(string_len(Datasets::Id, 32).primary_key())
                .col(big_integer(Datasets::ExperimentId))
                .col(string_len(Datasets::Name, 500))
                .col(string_len(Datasets::Digest, 36))
                .col(string_len(Datasets::SourceType, 36))
                .col(text(Datasets::Source))
                .col(text_null(Datasets::Schema))
                .col(text_null(Datasets::Profile))
                .foreign_key(
                    ForeignKey::create()
                        .from(Datasets::Table, Datasets::ExperimentId)
                        .to(Experiments::Table, Experiments::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_datasets_identity")
                .table(Datasets::Table)
                .col(Datasets::ExperimentId)
                .col(Datasets::Name)
                .col(Datasets::Digest)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(RunDatasets::Table)
                .col(string_len(RunDatasets::RunId, 32))
                .col(string_len(RunDatasets::DatasetId, 32))
                // The order the run logged them in.
                .col(integer(RunDatasets::Position))
                // The input's tags (mlflow.data.context) as a JSON list of pairs.
                .col(text(RunDatasets::Tags))
                .primary_key(
                    Index::create()
                        .col(RunDatasets::RunId)
                        .col(RunDatasets::DatasetId),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(RunDatasets::Table, RunDatasets::RunId)
                        .to(Runs::Table, Runs::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(RunDatasets::Table, RunDatasets::DatasetId)
                        .to(Datasets::Table, Datasets::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(LoggedModels::Table)
                .col(string_len(LoggedModels::Id, 34).primary_key())
                .col(big_integer(LoggedModels::ExperimentId))
                .col(string_len(LoggedModels::Name, 500))
                .col(text(LoggedModels::ArtifactLocation))
                .col(big_integer(LoggedModels::CreationTime))
                .col(big_integer(LoggedModels::LastUpdateTime))
                .col(string_len(LoggedModels::Status, 16))
                .col(text(LoggedModels::StatusMessage))
                .col(string_len(LoggedModels::ModelType, 500))
                .col(string_len_null(LoggedModels::SourceRunId, 32))
                .col(big_integer_null(LoggedModels::UserId))
                .col(big_integer_null(LoggedModels::TeamId))
                .col(string_len(LoggedModels::LifecycleStage, 16))
                .foreign_key(
                    ForeignKey::create()
                        .from(LoggedModels::Table, LoggedModels::ExperimentId)
                        .to(Experiments::Table, Experiments::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(LoggedModels::Table, LoggedModels::SourceRunId)
                        .to(Runs::Table, Runs::Id)
                        .on_delete(ForeignKeyAction::SetNull),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_logged_models_experiment")
                .table(LoggedModels::Table)
                .col(LoggedModels::ExperimentId)
                .col(LoggedModels::CreationTime)
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_logged_models_run")
                .table(LoggedModels::Table)
                .col(LoggedModels::SourceRunId)
                .to_owned(),
        )
        .await?;

        for table in [ModelKv::LoggedModelParams, ModelKv::LoggedModelTags] {
            m.create_table(
                Table::create()
                    .table(table)
                    .col(string_len(ModelKv::ModelId, 34))
                    .col(string_len(ModelKv::Key, 250))
                    .col(text(ModelKv::Value))
                    .primary_key(Index::create().col(ModelKv::ModelId).col(ModelKv::Key))
                    .foreign_key(
                        ForeignKey::create()
                            .from(table, ModelKv::ModelId)
                            .to(LoggedModels::Table, LoggedModels::Id)
                            .on_delete(ForeignKeyAction::Cascade),
                    )
                    .to_owned(),
            )
            .await?;
        }

        m.create_table(
            Table::create()
                .table(LoggedModelMetrics::Table)
                .col(big_pk_auto(LoggedModelMetrics::Id))
                .col(string_len(LoggedModelMetrics::ModelId, 34))
                .col(string_len(LoggedModelMetrics::Key, 250))
                // NULL stands for NaN, as in latest_metrics.
                .col(double_null(LoggedModelMetrics::Value))
                .col(big_integer(LoggedModelMetrics::Timestamp))
                .col(big_integer(LoggedModelMetrics::Step))
                .col(string_len_null(LoggedModelMetrics::RunId, 32))
                .col(string_len_null(LoggedModelMetrics::DatasetName, 500))
                .col(string_len_null(LoggedModelMetrics::DatasetDigest, 36))
                .foreign_key(
                    ForeignKey::create()
                        .from(LoggedModelMetrics::Table, LoggedModelMetrics::ModelId)
                        .to(LoggedModels::Table, LoggedModels::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_logged_model_metrics_key")
                .table(LoggedModelMetrics::Table)
                .col(LoggedModelMetrics::ModelId)
                .col(LoggedModelMetrics::Key)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(RunModels::Table)
                .col(string_len(RunModels::RunId, 32))
                .col(string_len(RunModels::ModelId, 34))
                // `input` or `output`.
                .col(string_len(RunModels::Direction, 8))
                .col(big_integer(RunModels::Step))
                .col(integer(RunModels::Position))
                .primary_key(
                    Index::create()
                        .col(RunModels::RunId)
                        .col(RunModels::ModelId)
                        .col(RunModels::Direction),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(RunModels::Table, RunModels::RunId)
                        .to(Runs::Table, Runs::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(RunModels::Table, RunModels::ModelId)
                        .to(LoggedModels::Table, LoggedModels::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            RunModels::Table.into_iden(),
            LoggedModelMetrics::Table.into_iden(),
            ModelKv::LoggedModelTags.into_iden(),
            ModelKv::LoggedModelParams.into_iden(),
            LoggedModels::Table.into_iden(),
            RunDatasets::Table.into_iden(),
            Datasets::Table.into_iden(),
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
enum Runs {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum Datasets {
    Table,
    Id,
    ExperimentId,
    Name,
    Digest,
    SourceType,
    Source,
    Schema,
    Profile,
}

#[derive(DeriveIden)]
enum RunDatasets {
    Table,
    RunId,
    DatasetId,
    Position,
    Tags,
}

#[derive(DeriveIden)]
enum LoggedModels {
    Table,
    Id,
    ExperimentId,
    Name,
    ArtifactLocation,
    CreationTime,
    LastUpdateTime,
    Status,
    StatusMessage,
    ModelType,
    SourceRunId,
    UserId,
    TeamId,
    LifecycleStage,
}

#[derive(DeriveIden, Clone, Copy)]
enum ModelKv {
    LoggedModelParams,
    LoggedModelTags,
    ModelId,
    Key,
    Value,
}

#[derive(DeriveIden)]
enum LoggedModelMetrics {
    Table,
    Id,
    ModelId,
    Key,
    Value,
    Timestamp,
    Step,
    RunId,
    DatasetName,
    DatasetDigest,
}

#[derive(DeriveIden)]
enum RunModels {
    Table,
    RunId,
    ModelId,
    Direction,
    Step,
    Position,
}
