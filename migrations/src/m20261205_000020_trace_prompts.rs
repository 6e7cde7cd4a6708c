//! The prompt versions a trace used (`mlflow.genai.load_prompt` inside a
//! traced function): MLflow's client links them when it exports the trace,
//! and `search_traces` finds the traces of one (`prompt = "name/3"`). One
//! row per link, as `name/version`, removed with the trace.

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
                .table(TracePrompts::Table)
                .col(string_len(TracePrompts::TraceId, 64))
                .col(string_len(TracePrompts::Prompt, 512))
                .primary_key(
                    Index::create()
                        .col(TracePrompts::TraceId)
                        .col(TracePrompts::Prompt),
                )
                .foreign_key(
                    ForeignKey::create()
                        .from(TracePrompts::Table, TracePrompts::TraceId)
                        .to(Traces::Table, Traces::Id)
                        .on_delete(ForeignKeyAction::Cascade),
                )
                .to_owned(),
        )
        .await?;
        m.create_index(
            Index::create()
                .name("idx_trace_prompts_prompt")
                .table(TracePrompts::Table)
                .col(TracePrompts::Prompt)
                .to_owned(),
        )
        .await
    }

    async fn down(&self, m: &SchemaManager) -> Result<(), DbErr> {
        m.drop_table(Table::drop().table(TracePrompts::Table).to_owned())
            .await
    }
}

#[derive(DeriveIden)]
enum Traces {
    Table,
    Id,
}

#[derive(DeriveIden)]
enum TracePrompts {
    Table,
    TraceId,
    Prompt,
}
