//! The tracking store of the MLflow API: metric points move into compact
//! chunks per run and key (see docs/metric-store.md), latest values may be
//! NaN, MLflow's "Default" experiment 0 exists, and names get MLflow's limits.

use sea_orm_migration::prelude::*;
use sea_orm_migration::schema::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(MetricPoints::Table).to_owned())
            .await?;
        m.drop_table(Table::drop().table(LatestMetrics::Table).to_owned())
            .await?;

        m.create_table(
            Table::create()
                .table(MetricChunks::Table)
                .col(big_pk_auto(MetricChunks::Id))
                .col(string_len(MetricChunks::RunId, 32))
                .col(string_len(MetricChunks::Key, 250))
                .col(integer(MetricChunks::Count))
                .col(big_integer(MetricChunks::MinStep))
                .col(big_integer(MetricChunks::MaxStep))
                .col(big_integer(MetricChunks::MinTimestamp))
                .col(big_integer(MetricChunks::MaxTimestamp))
                .col(blob(MetricChunks::Points))
                .foreign_key(
                    ForeignKey::create()
                        .from(MetricChunks::Table, MetricChunks::RunId)
                        .to(Runs::Table, Runs::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_metric_chunks_series")
                .table(MetricChunks::Table)
                .col(MetricChunks::RunId)
                .col(MetricChunks::Key)
                .col(MetricChunks::Id)
                .to_owned(),
        )
        .await?;

        m.create_table(
            Table::create()
                .table(LatestMetrics::Table)
                .col(string_len(LatestMetrics::RunId, 32))
                .col(string_len(LatestMetrics::Key, 250))
                // NULL stands for NaN: SQLite cannot store a NaN REAL.
                .col(double_null(LatestMetrics::Value))
                .col(big_integer(LatestMetrics::Timestamp))
                .col(big_integer(LatestMetrics::Step))
                .primary_key(
                    Index::create()
                        .col(LatestMetrics::RunId)
                        .col(LatestMetrics::Key),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(LatestMetrics::Table, LatestMetrics::RunId)
                        .to(Runs::Table, Runs::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        // Sorting and filtering runs by a metric reads this index.
        m.create_index(
            Index::create()
                .name("idx_latest_metrics_key_value")
                .table(LatestMetrics::Table)
                .col(LatestMetrics::Key)
                .col(LatestMetrics::Value)
                .to_owned(),
        )
        .await?;
        for (table, name) in [
            (RunKv::Params, "idx_params_key"),
            (RunKv::Tags, "idx_tags_key"),
        ] {
            m.create_index(
                Index::create()
                    .name(name)
                    .table(table)
                    .col(RunKv::Key)
                    .to_owned(),
            )
            .await?;
        }

        // MLflow's user_id is a free string (the client sends the OS user);
        // runs.user_id stays the Trainyard user who owns the run.
        m.alter_table(
            Table::alter()
                .table(Runs::Table)
                .add_column(string_len(Runs::UserName, 250).default(""))
                .to_owned(),
        )
        .await?;

        let db = m.get_connection();
        if m.get_database_backend() == DbBackend::Postgres {
            // MLflow allows experiment names of 500 characters; SQLite ignores lengths.
            db.execute_unprepared("ALTER TABLE experiments ALTER COLUMN name TYPE varchar(500)")
                .await?;
        }
        // MLflow clients log to experiment "0" when none is set.
        let now_ms = if m.get_database_backend() == DbBackend::Postgres {
            "CAST(EXTRACT(EPOCH FROM now()) * 1000 AS BIGINT)"
        } else {
            "CAST(strftime('%s', 'now') AS INTEGER) * 1000"
        };
        db.execute_unprepared(&format!(
            "INSERT INTO experiments (id, name, artifact_location, lifecycle_stage, creation_time, last_update_time) \
             SELECT 0, 'Default', 'mlflow-artifacts:/0', 'active', {now_ms}, {now_ms} \
             WHERE NOT EXISTS (SELECT 1 FROM experiments WHERE id = 0)"
        ))
        .await?;
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(MetricChunks::Table).to_owned())
            .await?;
        Ok(())
    }
}

#[derive(DeriveIden)]
enum MetricChunks {
    Table,
    Id,
    RunId,
    Key,
    Count,
    MinStep,
    MaxStep,
    MinTimestamp,
    MaxTimestamp,
    Points,
}

#[derive(DeriveIden)]
enum MetricPoints {
    Table,
}

#[derive(DeriveIden)]
enum LatestMetrics {
    Table,
    RunId,
    Key,
    Value,
    Timestamp,
    Step,
}

#[derive(DeriveIden, Clone, Copy)]
enum RunKv {
    Params,
    Tags,
    Key,
}

#[derive(DeriveIden)]
enum Runs {
    Table,
    Id,
    UserName,
}
