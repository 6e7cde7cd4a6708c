//! The database schema as SeaORM migrations, applied in order at start-up.

pub use sea_orm_migration::prelude::*;

mod m20261129_000001_core_model;
mod m20261129_000002_tracking;
mod m20261129_000003_chunk_summaries;
mod m20261130_000004_job_execution;
mod m20261130_000005_uploads;
mod m20261130_000006_identity;
mod m20261201_000007_executor_handles;
mod m20261202_000008_job_pods;
mod m20261202_000009_gpu_telemetry;
mod m20261202_000010_node_tokens;
mod m20261203_000011_models_datasets;
mod m20261203_000012_model_registry;
mod m20261203_000013_traces;
mod m20261203_000014_fair_share;
mod m20261203_000015_session_recheck;
mod m20261204_000016_model_metrics_newest;
mod m20261204_000017_job_gpu_devices;
mod m20261205_000018_trace_assessments;
mod m20261205_000019_evaluation_datasets;
mod m20261205_000020_trace_prompts;
mod m20261205_000021_scorers;
mod m20261205_000022_webhooks;
mod m20261206_000023_trace_spans;
mod m20261206_000024_traces_from_spans;
mod m20261206_000025_upload_entries;
mod m20261206_000026_node_drains;
mod m20261207_000027_upload_digests;
mod m20261207_000028_job_charged_from;
mod m20261207_000029_audit_events;
mod m20261207_000030_kept_checkpoints;

pub struct Migrator;

#[async_trait::async_trait]
impl MigratorTrait for Migrator {
    fn migrations() -> Vec<Box<dyn MigrationTrait>> {
        vec![
            Box::new(m20261129_000001_core_model::Migration),
            Box::new(m20261129_000002_tracking::Migration),
            Box::new(m20261129_000003_chunk_summaries::Migration),
            Box::new(m20261130_000004_job_execution::Migration),
            Box::new(m20261130_000005_uploads::Migration),
            Box::new(m20261130_000006_identity::Migration),
            Box::new(m20261201_000007_executor_handles::Migration),
            Box::new(m20261202_000008_job_pods::Migration),
            Box::new(m20261202_000009_gpu_telemetry::Migration),
            Box::new(m20261202_000010_node_tokens::Migration),
            Box::new(m20261203_000011_models_datasets::Migration),
            Box::new(m20261203_000012_model_registry::Migration),
            Box::new(m20261203_000013_traces::Migration),
            Box::new(m20261203_000014_fair_share::Migration),
            Box::new(m20261203_000015_session_recheck::Migration),
            Box::new(m20261204_000016_model_metrics_newest::Migration),
            Box::new(m20261204_000017_job_gpu_devices::Migration),
            Box::new(m20261205_000018_trace_assessments::Migration),
            Box::new(m20261205_000019_evaluation_datasets::Migration),
            Box::new(m20261205_000020_trace_prompts::Migration),
            Box::new(m20261205_000021_scorers::Migration),
            Box::new(m20261205_000022_webhooks::Migration),
            Box::new(m20261206_000023_trace_spans::Migration),
            Box::new(m20261206_000024_traces_from_spans::Migration),
            Box::new(m20261206_000025_upload_entries::Migration),
            Box::new(m20261206_000026_node_drains::Migration),
            Box::new(m20261207_000027_upload_digests::Migration),
            Box::new(m20261207_000028_job_charged_from::Migration),
            Box::new(m20261207_000029_audit_events::Migration),
            Box::new(m20261207_000030_kept_checkpoints::Migration),
        ]
    }
}
