//! The core model: people and teams, tracking (experiments, runs, params, tags,
//! metrics), jobs and their events, nodes and GPUs, templates, API tokens.
//!
//! Times are integers: milliseconds since the Unix epoch, as MLflow sends them,
//! so that SQLite and PostgreSQL store and compare them alike.

use sea_orm_migration::{prelude::*, schema::*};

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.create_table(
            Table::create()
                .table(Users::Table)
                .col(big_pk_auto(Users::Id))
                .col(string_len_uniq(Users::Username, 250))
                .col(string_len(Users::DisplayName, 250))
                .col(string_len_null(Users::Email, 320))
                .col(boolean(Users::IsAdmin).default(false))
                .col(big_integer(Users::CreatedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Teams::Table)
                .col(big_pk_auto(Teams::Id))
                .col(string_len_uniq(Teams::Name, 250))
                .col(integer_null(Teams::GpuQuota))
                .col(integer(Teams::Priority).default(0))
                .col(big_integer(Teams::CreatedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Memberships::Table)
                .col(big_integer(Memberships::TeamId))
                .col(big_integer(Memberships::UserId))
                .col(string_len(Memberships::Role, 32).default("member"))
                .primary_key(
                    Index::create()
                        .col(Memberships::TeamId)
                        .col(Memberships::UserId),
                )
                .foreign_key(&mut cascade(
                    Memberships::Table,
                    Memberships::TeamId,
                    Teams::Table,
                    Teams::Id,
                ))
                .foreign_key(&mut cascade(
                    Memberships::Table,
                    Memberships::UserId,
                    Users::Table,
                    Users::Id,
                ))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Experiments::Table)
                .col(big_pk_auto(Experiments::Id))
                .col(string_len_uniq(Experiments::Name, 250))
                .col(text(Experiments::ArtifactLocation))
                .col(string_len(Experiments::LifecycleStage, 32).default("active"))
                .col(big_integer_null(Experiments::OwnerId))
                .col(big_integer_null(Experiments::TeamId))
                .col(big_integer(Experiments::CreationTime))
                .col(big_integer(Experiments::LastUpdateTime))
                .foreign_key(&mut set_null(
                    Experiments::Table,
                    Experiments::OwnerId,
                    Users::Table,
                    Users::Id,
                ))
                .foreign_key(&mut set_null(
                    Experiments::Table,
                    Experiments::TeamId,
                    Teams::Table,
                    Teams::Id,
                ))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ExperimentTags::Table)
                .col(big_integer(ExperimentTags::ExperimentId))
                .col(string_len(ExperimentTags::Key, 250))
                .col(text(ExperimentTags::Value))
                .primary_key(
                    Index::create()
                        .col(ExperimentTags::ExperimentId)
                        .col(ExperimentTags::Key),
                )
                .foreign_key(&mut cascade(
                    ExperimentTags::Table,
                    ExperimentTags::ExperimentId,
                    Experiments::Table,
                    Experiments::Id,
                ))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Runs::Table)
                .col(string_len(Runs::Id, 32).primary_key())
                .col(big_integer(Runs::ExperimentId))
                .col(string_len(Runs::Name, 250))
                .col(big_integer_null(Runs::UserId))
                .col(string_len(Runs::Status, 32))
                .col(big_integer(Runs::StartTime))
                .col(big_integer_null(Runs::EndTime))
                .col(string_len(Runs::LifecycleStage, 32).default("active"))
                .col(text(Runs::ArtifactUri))
                .foreign_key(&mut cascade(
                    Runs::Table,
                    Runs::ExperimentId,
                    Experiments::Table,
                    Experiments::Id,
                ))
                .foreign_key(&mut set_null(
                    Runs::Table,
                    Runs::UserId,
                    Users::Table,
                    Users::Id,
                ))
                .to_owned(),
        )
        .await?;
        index(
            m,
            Runs::Table,
            "idx_runs_experiment_start",
            &[Runs::ExperimentId, Runs::StartTime],
        )
        .await?;

        for (table, key, value) in [
            (RunKv::Params, RunKv::Key, RunKv::Value),
            (RunKv::Tags, RunKv::Key, RunKv::Value),
        ] {
            m.create_table(
                Table::create()
                    .table(table)
                    .col(string_len(RunKv::RunId, 32))
                    .col(string_len(key, 250))
                    .col(text(value))
                    .primary_key(Index::create().col(RunKv::RunId).col(RunKv::Key))
                    .foreign_key(&mut cascade(table, RunKv::RunId, Runs::Table, Runs::Id))
                    .to_owned(),
            )
            .await?;
        }

        m.create_table(
            Table::create()
                .table(MetricPoints::Table)
                .col(string_len(MetricPoints::RunId, 32))
                .col(string_len(MetricPoints::Key, 250))
                .col(big_integer(MetricPoints::Step))
                .col(big_integer(MetricPoints::Timestamp))
                .col(double(MetricPoints::Value))
                .foreign_key(&mut cascade(
                    MetricPoints::Table,
                    MetricPoints::RunId,
                    Runs::Table,
                    Runs::Id,
                ))
                .to_owned(),
        )
        .await?;
        index(
            m,
            MetricPoints::Table,
            "idx_metric_points_series",
            &[MetricPoints::RunId, MetricPoints::Key, MetricPoints::Step],
        )
        .await?;

        m.create_table(
            Table::create()
                .table(LatestMetrics::Table)
                .col(string_len(LatestMetrics::RunId, 32))
                .col(string_len(LatestMetrics::Key, 250))
                .col(double(LatestMetrics::Value))
                .col(big_integer(LatestMetrics::Timestamp))
                .col(big_integer(LatestMetrics::Step))
                .primary_key(
                    Index::create()
                        .col(LatestMetrics::RunId)
                        .col(LatestMetrics::Key),
                )
                .foreign_key(&mut cascade(
                    LatestMetrics::Table,
                    LatestMetrics::RunId,
                    Runs::Table,
                    Runs::Id,
                ))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Nodes::Table)
                .col(big_pk_auto(Nodes::Id))
                .col(string_len_uniq(Nodes::Name, 250))
                .col(string_len(Nodes::State, 32).default("ready"))
                .col(big_integer_null(Nodes::LastSeen))
                .col(text(Nodes::Labels).default("{}"))
                .col(big_integer(Nodes::CreatedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Gpus::Table)
                .col(big_pk_auto(Gpus::Id))
                .col(big_integer(Gpus::NodeId))
                .col(integer(Gpus::Index))
                .col(string_len_uniq(Gpus::Uuid, 128))
                .col(string_len(Gpus::Name, 250))
                .col(big_integer(Gpus::MemoryTotalBytes))
                .foreign_key(&mut cascade(
                    Gpus::Table,
                    Gpus::NodeId,
                    Nodes::Table,
                    Nodes::Id,
                ))
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_gpus_node_index")
                .table(Gpus::Table)
                .col(Gpus::NodeId)
                .col(Gpus::Index)
                .unique()
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Templates::Table)
                .col(big_pk_auto(Templates::Id))
                .col(string_len_uniq(Templates::Slug, 100))
                .col(string_len(Templates::Title, 250))
                .col(text(Templates::Description))
                .col(text(Templates::Spec))
                .col(boolean(Templates::Builtin).default(false))
                .col(big_integer(Templates::CreatedAt))
                .col(big_integer(Templates::UpdatedAt))
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(Jobs::Table)
                .col(big_pk_auto(Jobs::Id))
                .col(string_len(Jobs::Name, 250))
                .col(big_integer_null(Jobs::OwnerId))
                .col(big_integer_null(Jobs::TeamId))
                .col(big_integer_null(Jobs::ExperimentId))
                .col(string_len_null(Jobs::RunId, 32))
                .col(string_len_null(Jobs::TemplateSlug, 100))
                .col(string_len(Jobs::State, 32))
                .col(integer(Jobs::Priority).default(0))
                .col(integer(Jobs::Gpus).default(0))
                .col(text(Jobs::Spec))
                .col(integer(Jobs::Attempt).default(0))
                .col(big_integer_null(Jobs::NodeId))
                .col(integer_null(Jobs::ExitCode))
                .col(big_integer(Jobs::CreatedAt))
                .col(big_integer_null(Jobs::StartedAt))
                .col(big_integer_null(Jobs::FinishedAt))
                .foreign_key(&mut set_null(
                    Jobs::Table,
                    Jobs::OwnerId,
                    Users::Table,
                    Users::Id,
                ))
                .foreign_key(&mut set_null(
                    Jobs::Table,
                    Jobs::TeamId,
                    Teams::Table,
                    Teams::Id,
                ))
                .foreign_key(&mut set_null(
                    Jobs::Table,
                    Jobs::ExperimentId,
                    Experiments::Table,
                    Experiments::Id,
                ))
                .foreign_key(&mut set_null(
                    Jobs::Table,
                    Jobs::RunId,
                    Runs::Table,
                    Runs::Id,
                ))
                .foreign_key(&mut set_null(
                    Jobs::Table,
                    Jobs::NodeId,
                    Nodes::Table,
                    Nodes::Id,
                ))
                .to_owned(),
        )
        .await?;
        index(
            m,
            Jobs::Table,
            "idx_jobs_state",
            &[Jobs::State, Jobs::Priority],
        )
        .await?;

        m.create_table(
            Table::create()
                .table(JobEvents::Table)
                .col(big_pk_auto(JobEvents::Id))
                .col(big_integer(JobEvents::JobId))
                .col(big_integer(JobEvents::Time))
                .col(string_len(JobEvents::Kind, 64))
                .col(text(JobEvents::Message))
                .foreign_key(&mut cascade(
                    JobEvents::Table,
                    JobEvents::JobId,
                    Jobs::Table,
                    Jobs::Id,
                ))
                .to_owned(),
        )
        .await?;
        index(
            m,
            JobEvents::Table,
            "idx_job_events_job",
            &[JobEvents::JobId, JobEvents::Time],
        )
        .await?;

        m.create_table(
            Table::create()
                .table(ApiTokens::Table)
                .col(big_pk_auto(ApiTokens::Id))
                .col(big_integer(ApiTokens::UserId))
                .col(string_len(ApiTokens::Name, 250))
                .col(string_len_uniq(ApiTokens::TokenHash, 128))
                .col(string_len(ApiTokens::Prefix, 16))
                .col(string_len_null(ApiTokens::RunId, 32))
                .col(big_integer(ApiTokens::CreatedAt))
                .col(big_integer_null(ApiTokens::LastUsedAt))
                .col(big_integer_null(ApiTokens::ExpiresAt))
                .col(big_integer_null(ApiTokens::RevokedAt))
                .foreign_key(&mut cascade(
                    ApiTokens::Table,
                    ApiTokens::UserId,
                    Users::Table,
                    Users::Id,
                ))
                .foreign_key(&mut cascade(
                    ApiTokens::Table,
                    ApiTokens::RunId,
                    Runs::Table,
                    Runs::Id,
                ))
                .to_owned(),
        )
        .await?;

        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let tables: [DynIden; 16] = [
            ApiTokens::Table.into_iden(),
            JobEvents::Table.into_iden(),
            Jobs::Table.into_iden(),
            Templates::Table.into_iden(),
            Gpus::Table.into_iden(),
            Nodes::Table.into_iden(),
            LatestMetrics::Table.into_iden(),
            MetricPoints::Table.into_iden(),
            RunKv::Tags.into_iden(),
            RunKv::Params.into_iden(),
            Runs::Table.into_iden(),
            ExperimentTags::Table.into_iden(),
            Experiments::Table.into_iden(),
            Memberships::Table.into_iden(),
            Teams::Table.into_iden(),
            Users::Table.into_iden(),
        ];
        for table in tables {
            m.drop_table(Table::drop().table(table).to_owned()).await?;
        }
        Ok(())
    }
}

fn cascade(
    from: impl IntoIden,
    col: impl IntoIden,
    to: impl IntoIden,
    to_col: impl IntoIden,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .from(from, col)
        .to(to, to_col)
        .on_delete(ForeignKeyAction::Cascade)
        .to_owned()
}

fn set_null(
    from: impl IntoIden,
    col: impl IntoIden,
    to: impl IntoIden,
    to_col: impl IntoIden,
) -> ForeignKeyCreateStatement {
    ForeignKey::create()
        .from(from, col)
        .to(to, to_col)
        .on_delete(ForeignKeyAction::SetNull)
        .to_owned()
}

async fn index<T: IntoIden + Copy + 'static, C: IntoIden + Copy + 'static>(
    m: &SchemaManager<'_>,
    table: T,
    name: &str,
    cols: &[C],
) -> Result<(), DbErr> {
    let mut stmt = Index::create();
    stmt.name(name).table(table);
    for col in cols {
        stmt.col(*col);
    }
    m.create_index(stmt.to_owned()).await
}

#[derive(DeriveIden, Clone, Copy)]
enum Users {
    Table,
    Id,
    Username,
    DisplayName,
    Email,
    IsAdmin,
    CreatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum Teams {
    Table,
    Id,
    Name,
    GpuQuota,
    Priority,
    CreatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum Memberships {
    Table,
    TeamId,
    UserId,
    Role,
}

#[derive(DeriveIden, Clone, Copy)]
enum Experiments {
    Table,
    Id,
    Name,
    ArtifactLocation,
    LifecycleStage,
    OwnerId,
    TeamId,
    CreationTime,
    LastUpdateTime,
}

#[derive(DeriveIden, Clone, Copy)]
enum ExperimentTags {
    Table,
    ExperimentId,
    Key,
    Value,
}

#[derive(DeriveIden, Clone, Copy)]
enum Runs {
    Table,
    Id,
    ExperimentId,
    Name,
    UserId,
    Status,
    StartTime,
    EndTime,
    LifecycleStage,
    ArtifactUri,
}

/// The two key-value tables of a run share one shape.
#[derive(DeriveIden, Clone, Copy)]
enum RunKv {
    Params,
    Tags,
    RunId,
    Key,
    Value,
}

#[derive(DeriveIden, Clone, Copy)]
enum MetricPoints {
    Table,
    RunId,
    Key,
    Step,
    Timestamp,
    Value,
}

#[derive(DeriveIden, Clone, Copy)]
enum LatestMetrics {
    Table,
    RunId,
    Key,
    Value,
    Timestamp,
    Step,
}

#[derive(DeriveIden, Clone, Copy)]
enum Nodes {
    Table,
    Id,
    Name,
    State,
    LastSeen,
    Labels,
    CreatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum Gpus {
    Table,
    Id,
    NodeId,
    Index,
    Uuid,
    Name,
    MemoryTotalBytes,
}

#[derive(DeriveIden, Clone, Copy)]
enum Templates {
    Table,
    Id,
    Slug,
    Title,
    Description,
    Spec,
    Builtin,
    CreatedAt,
    UpdatedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum Jobs {
    Table,
    Id,
    Name,
    OwnerId,
    TeamId,
    ExperimentId,
    RunId,
    TemplateSlug,
    State,
    Priority,
    Gpus,
    Spec,
    Attempt,
    NodeId,
    ExitCode,
    CreatedAt,
    StartedAt,
    FinishedAt,
}

#[derive(DeriveIden, Clone, Copy)]
enum JobEvents {
    Table,
    Id,
    JobId,
    Time,
    Kind,
    Message,
}

#[derive(DeriveIden, Clone, Copy)]
enum ApiTokens {
    Table,
    Id,
    UserId,
    Name,
    TokenHash,
    Prefix,
    RunId,
    CreatedAt,
    LastUsedAt,
    ExpiresAt,
    RevokedAt,
}
