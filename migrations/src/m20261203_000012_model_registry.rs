//! MLflow's model registry: registered models (a unique name, owned and
//! shared as experiments are), their numbered versions (a deleted version
//! keeps its number, as in MLflow), tags of both, and aliases.

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
                .table(RegisteredModels::Table)
                .col(big_pk_auto(RegisteredModels::Id))
                .col(string_len_uniq(RegisteredModels::Name, 256))
                .col(text_null(RegisteredModels::Description))
                .col(big_integer(RegisteredModels::CreationTime))
                .col(big_integer(RegisteredModels::LastUpdateTime))
                .col(big_integer_null(RegisteredModels::UserId))
                .col(big_integer_null(RegisteredModels::TeamId))
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(RegisteredModelTags::Table)
                .col(big_integer(RegisteredModelTags::RegisteredModelId))
                .col(string_len(RegisteredModelTags::Key, 250))
                .col(text(RegisteredModelTags::Value))
                .primary_key(
                    Index::create()
                        .col(RegisteredModelTags::RegisteredModelId)
                        .col(RegisteredModelTags::Key),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            RegisteredModelTags::Table,
                            RegisteredModelTags::RegisteredModelId,
                        )
                        .to(RegisteredModels::Table, RegisteredModels::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ModelVersions::Table)
                .col(big_integer(ModelVersions::RegisteredModelId))
                .col(integer(ModelVersions::Version))
                .col(big_integer(ModelVersions::CreationTime))
                .col(big_integer(ModelVersions::LastUpdateTime))
                .col(text(ModelVersions::Description))
                .col(string_len(ModelVersions::UserName, 250))
                .col(text(ModelVersions::Source))
                .col(text(ModelVersions::StorageLocation))
                .col(string_len_null(ModelVersions::RunId, 32))
                .col(text(ModelVersions::RunLink))
                .col(string_len(ModelVersions::Stage, 20))
                .col(string_len_null(ModelVersions::ModelId, 34))
                .primary_key(
                    Index::create()
                        .col(ModelVersions::RegisteredModelId)
                        .col(ModelVersions::Version),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(ModelVersions::Table, ModelVersions::RegisteredModelId)
                        .to(RegisteredModels::Table, RegisteredModels::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ModelVersionTags::Table)
                .col(big_integer(ModelVersionTags::RegisteredModelId))
                .col(integer(ModelVersionTags::Version))
                .col(string_len(ModelVersionTags::Key, 250))
                .col(text(ModelVersionTags::Value))
                .primary_key(
                    Index::create()
                        .col(ModelVersionTags::RegisteredModelId)
                        .col(ModelVersionTags::Version)
                        .col(ModelVersionTags::Key),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            ModelVersionTags::Table,
                            (
                                ModelVersionTags::RegisteredModelId,
                                ModelVersionTags::Version,
                            ),
                        )
                        .to(
                            ModelVersions::Table,
                            (ModelVersions::RegisteredModelId, ModelVersions::Version),
                        )
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(RegisteredModelAliases::Table)
                .col(big_integer(RegisteredModelAliases::RegisteredModelId))
                .col(string_len(RegisteredModelAliases::Alias, 256))
                .col(integer(RegisteredModelAliases::Version))
                .primary_key(
                    Index::create()
                        .col(RegisteredModelAliases::RegisteredModelId)
                        .col(RegisteredModelAliases::Alias),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(
                            RegisteredModelAliases::Table,
                            RegisteredModelAliases::RegisteredModelId,
                        )
                        .to(RegisteredModels::Table, RegisteredModels::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            RegisteredModelAliases::Table.into_iden(),
            ModelVersionTags::Table.into_iden(),
            ModelVersions::Table.into_iden(),
            RegisteredModelTags::Table.into_iden(),
            RegisteredModels::Table.into_iden(),
        ] {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

#[derive(DeriveIden)]
enum RegisteredModels {
    Table,
    Id,
    Name,
    Description,
    CreationTime,
    LastUpdateTime,
    UserId,
    TeamId,
}

#[derive(DeriveIden)]
enum RegisteredModelTags {
    Table,
    RegisteredModelId,
    Key,
    Value,
}

#[derive(DeriveIden)]
enum ModelVersions {
    Table,
    RegisteredModelId,
    Version,
    CreationTime,
    LastUpdateTime,
    Description,
    UserName,
    Source,
    StorageLocation,
    RunId,
    RunLink,
    Stage,
    ModelId,
}

#[derive(DeriveIden)]
enum ModelVersionTags {
    Table,
    RegisteredModelId,
    Version,
    Key,
    Value,
}

#[derive(DeriveIden)]
enum RegisteredModelAliases {
    Table,
    RegisteredModelId,
    Alias,
    Version,
}
