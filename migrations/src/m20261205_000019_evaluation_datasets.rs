//! MLflow 3's evaluation datasets (`mlflow.genai.datasets`): named sets of
//! records (inputs, expectations, outputs, where each came from) that
//! `mlflow.genai.evaluate` runs over. A dataset is owned as a registered
//! model is (its maker, filed under the maker's team), may be shown in any
//! number of experiments, and holds its records, one per distinct inputs
//! (their hash is unique within the dataset), numbered in the order they
//! came (a number is never given twice), which is the order they are read
//! in. The record count, the bytes held and the count of changes (for the
//! digest) are kept on the dataset.

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
                .table(EvaluationDatasets::Table)
                .col(string_len(EvaluationDatasets::Id, 64).primary_key())
                .col(string_len(EvaluationDatasets::Name, 255))
                .col(text_null(EvaluationDatasets::SchemaJson))
                .col(string_len(EvaluationDatasets::Digest, 64))
                .col(big_integer(EvaluationDatasets::CreatedTime))
                .col(big_integer(EvaluationDatasets::LastUpdateTime))
                .col(string_len_null(EvaluationDatasets::CreatedBy, 255))
                .col(string_len_null(EvaluationDatasets::LastUpdatedBy, 255))
                .col(big_integer(EvaluationDatasets::NumRecords).default(0))
                .col(big_integer(EvaluationDatasets::Bytes).default(0))
                .col(big_integer(EvaluationDatasets::LastPosition).default(0))
                .col(big_integer(EvaluationDatasets::Changes).default(0))
                .col(big_integer_null(EvaluationDatasets::UserId))
                .col(big_integer_null(EvaluationDatasets::TeamId))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_evaluation_datasets_created")
                .table(EvaluationDatasets::Table)
                .col(EvaluationDatasets::CreatedTime)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(EvaluationDatasetTags::Table)
                .col(string_len(EvaluationDatasetTags::DatasetId, 64))
                .col(string_len(EvaluationDatasetTags::Key, 250))
                .col(text(EvaluationDatasetTags::Value))
                .primary_key(
                    Index::create()
                        .col(EvaluationDatasetTags::DatasetId)
                        .col(EvaluationDatasetTags::Key),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            EvaluationDatasetTags::Table,
                            EvaluationDatasetTags::DatasetId,
                        )
                        .to(EvaluationDatasets::Table, EvaluationDatasets::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(EvaluationDatasetExperiments::Table)
                .col(string_len(EvaluationDatasetExperiments::DatasetId, 64))
                .col(big_integer(EvaluationDatasetExperiments::ExperimentId))
                .primary_key(
                    Index::create()
                        .col(EvaluationDatasetExperiments::DatasetId)
                        .col(EvaluationDatasetExperiments::ExperimentId),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            EvaluationDatasetExperiments::Table,
                            EvaluationDatasetExperiments::DatasetId,
                        )
                        .to(EvaluationDatasets::Table, EvaluationDatasets::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            EvaluationDatasetExperiments::Table,
                            EvaluationDatasetExperiments::ExperimentId,
                        )
                        .to(Experiments::Table, Experiments::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_evaluation_dataset_experiments_experiment")
                .table(EvaluationDatasetExperiments::Table)
                .col(EvaluationDatasetExperiments::ExperimentId)
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(EvaluationDatasetRecords::Table)
                .col(string_len(EvaluationDatasetRecords::Id, 64).primary_key())
                .col(string_len(EvaluationDatasetRecords::DatasetId, 64))
                .col(string_len(EvaluationDatasetRecords::InputHash, 64))
                .col(text(EvaluationDatasetRecords::Inputs))
                .col(text_null(EvaluationDatasetRecords::Outputs))
                .col(text_null(EvaluationDatasetRecords::Expectations))
                .col(text_null(EvaluationDatasetRecords::Tags))
                .col(text_null(EvaluationDatasetRecords::Source))
                .col(string_len_null(EvaluationDatasetRecords::SourceId, 250))
                .col(string_len_null(EvaluationDatasetRecords::SourceType, 32))
                .col(big_integer(EvaluationDatasetRecords::CreatedTime))
                .col(big_integer(EvaluationDatasetRecords::LastUpdateTime))
                .col(string_len_null(EvaluationDatasetRecords::CreatedBy, 255))
                .col(string_len_null(
                    EvaluationDatasetRecords::LastUpdatedBy,
                    255,
                ))
                .col(big_integer(EvaluationDatasetRecords::Bytes))
                .col(big_integer(EvaluationDatasetRecords::Position))
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            EvaluationDatasetRecords::Table,
                            EvaluationDatasetRecords::DatasetId,
                        )
                        .to(EvaluationDatasets::Table, EvaluationDatasets::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_evaluation_dataset_records_inputs")
                .table(EvaluationDatasetRecords::Table)
                .col(EvaluationDatasetRecords::DatasetId)
                .col(EvaluationDatasetRecords::InputHash)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_evaluation_dataset_records_order")
                .table(EvaluationDatasetRecords::Table)
                .col(EvaluationDatasetRecords::DatasetId)
                .col(EvaluationDatasetRecords::Position)
                .unique()
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            EvaluationDatasetRecords::Table.into_iden(),
            EvaluationDatasetExperiments::Table.into_iden(),
            EvaluationDatasetTags::Table.into_iden(),
            EvaluationDatasets::Table.into_iden(),
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
enum EvaluationDatasets {
    Table,
    Id,
    Name,
    SchemaJson,
    Digest,
    CreatedTime,
    LastUpdateTime,
    CreatedBy,
    LastUpdatedBy,
    NumRecords,
    Bytes,
    LastPosition,
    Changes,
    UserId,
    TeamId,
}

#[derive(DeriveIden)]
enum EvaluationDatasetTags {
    Table,
    DatasetId,
    Key,
    Value,
}

#[derive(DeriveIden)]
enum EvaluationDatasetExperiments {
    Table,
    DatasetId,
    ExperimentId,
}

#[derive(DeriveIden)]
enum EvaluationDatasetRecords {
    Table,
    Id,
    DatasetId,
    InputHash,
    Inputs,
    Outputs,
    Expectations,
    Tags,
    Source,
    SourceId,
    SourceType,
    CreatedTime,
    LastUpdateTime,
    CreatedBy,
    LastUpdatedBy,
    Bytes,
    Position,
}
