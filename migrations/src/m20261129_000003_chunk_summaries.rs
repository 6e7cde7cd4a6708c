//! Metric chunks gain a `summary` column: per block of points, count, x
//! extents and sums, and the values' min, max and sum, so wide chart reads
//! merge summaries instead of decoding every point (docs/metric-store.md).
//!
//! On SQLite the column must come *before* `points`: a column stored after a
//! large blob is reached only by walking the blob's overflow pages. So the
//! table is rebuilt there. PostgreSQL keeps large values out of line (TOAST),
//! so adding the column at the end is enough. Existing chunks get NULL; the
//! store fills their summaries at start-up.

use sea_orm_migration::prelude::*;
use sea_orm_migration::sea_orm::DbBackend;

#[derive(DeriveMigrationName)]
pub struct Migration;

#[async_trait::async_trait]
impl MigrationTrait for Migration {
    /// The rebuild is one transaction on one connection, on SQLite too:
    /// all of it happens or none.
    fn use_transaction(&self) -> Option<bool> {
        Some(true)
    }

    async fn up(&self, m: &SchemaManager) -> Result<(), DbErr> {
        let db = m.get_connection();
        match m.get_database_backend() {
            DbBackend::Sqlite => {
                for statement in [
                    r#"CREATE TABLE "metric_chunks_new" (
                        "id" integer NOT NULL PRIMARY KEY AUTOINCREMENT,
                        "run_id" varchar(32) NOT NULL,
                        "key" varchar(250) NOT NULL,
                        "count" integer NOT NULL,
                        "min_step" bigint NOT NULL,
                        "max_step" bigint NOT NULL,
                        "min_timestamp" bigint NOT NULL,
                        "max_timestamp" bigint NOT NULL,
                        "summary" blob NULL,
                        "points" blob NOT NULL,
                        FOREIGN KEY ("run_id") REFERENCES "runs" ("id") ON DELETE CASCADE
                    )"#,
                    r#"INSERT INTO "metric_chunks_new"
                        ("id", "run_id", "key", "count", "min_step", "max_step", "min_timestamp", "max_timestamp", "summary", "points")
                        SELECT "id", "run_id", "key", "count", "min_step", "max_step", "min_timestamp", "max_timestamp", NULL, "points"
                        FROM "metric_chunks""#,
                    r#"DROP TABLE "metric_chunks""#,
                    r#"ALTER TABLE "metric_chunks_new" RENAME TO "metric_chunks""#,
                    r#"CREATE INDEX "idx_metric_chunks_series" ON "metric_chunks" ("run_id", "key", "id")"#,
                ] {
                    db.execute_unprepared(statement).await?;
                }
            }
            _ => {
                db.execute_unprepared(
                    r#"ALTER TABLE "metric_chunks" ADD COLUMN "summary" bytea NULL"#,
                )
                .await?;
            }
        }
        Ok(())
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.get_connection()
            .execute_unprepared(r#"ALTER TABLE "metric_chunks" DROP COLUMN "summary""#)
            .await?;
        Ok(())
    }
}
