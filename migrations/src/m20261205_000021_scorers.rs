//! MLflow 3's registered scorers (`Scorer.register`, `get_scorer`,
//! `list_scorers`): LLM judges and built-in scorers kept by name in an
//! experiment, each registration a new version of its serialized form. A
//! scorer remembers who made it (in the shared Default experiment only its
//! maker changes it), its latest version, the last version number it gave
//! (a number is never given twice) and the bytes its versions hold; an
//! online scoring configuration (its sample rate and trace filter) may hang
//! off it. All go with the experiment.

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
                .table(Scorers::Table)
                .col(string_len(Scorers::Id, 64).primary_key())
                .col(big_integer(Scorers::ExperimentId))
                .col(string_len(Scorers::Name, 256))
                .col(integer(Scorers::Latest))
                .col(integer(Scorers::Given))
                .col(big_integer(Scorers::Bytes).default(0))
                .col(big_integer_null(Scorers::UserId))
                .foreign_key(
                    ForeignKey::create()
                        .from(Scorers::Table, Scorers::ExperimentId)
                        .to(Experiments::Table, Experiments::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_scorers_experiment_name")
                .table(Scorers::Table)
                .col(Scorers::ExperimentId)
                .col(Scorers::Name)
                .unique()
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ScorerVersions::Table)
                .col(string_len(ScorerVersions::ScorerId, 64))
                .col(integer(ScorerVersions::Version))
                .col(text(ScorerVersions::Serialized))
                .col(big_integer(ScorerVersions::Bytes))
                .col(big_integer(ScorerVersions::CreationTime))
                .primary_key(
                    Index::create()
                        .col(ScorerVersions::ScorerId)
                        .col(ScorerVersions::Version),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(ScorerVersions::Table, ScorerVersions::ScorerId)
                        .to(Scorers::Table, Scorers::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_table(
            Table::create()
                .table(ScorerOnlineConfigs::Table)
                .col(string_len(ScorerOnlineConfigs::Id, 64).primary_key())
                .col(string_len_uniq(ScorerOnlineConfigs::ScorerId, 64))
                .col(double(ScorerOnlineConfigs::SampleRate))
                .col(text_null(ScorerOnlineConfigs::FilterString))
                .foreign_key(
                    ForeignKey::create()
                        .from(ScorerOnlineConfigs::Table, ScorerOnlineConfigs::ScorerId)
                        .to(Scorers::Table, Scorers::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        for table in [
            ScorerOnlineConfigs::Table.into_iden(),
            ScorerVersions::Table.into_iden(),
            Scorers::Table.into_iden(),
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
enum Scorers {
    Table,
    Id,
    ExperimentId,
    Name,
    Latest,
    Given,
    Bytes,
    UserId,
}

#[derive(DeriveIden)]
enum ScorerVersions {
    Table,
    ScorerId,
    Version,
    Serialized,
    Bytes,
    CreationTime,
}

#[derive(DeriveIden)]
enum ScorerOnlineConfigs {
    Table,
    Id,
    ScorerId,
    SampleRate,
    FilterString,
}
