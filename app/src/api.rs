//! Server functions: the browser's calls into the store, at stable paths
//! (`/api/<name>`) so that scripts and tests can call them too.

use leptos::prelude::*;
use trainyard_domain::{ExperimentSummary, JobSummary, NodeSummary, Overview, TemplateSummary};

use crate::error::AppError;

#[cfg(feature = "ssr")]
fn store() -> Result<trainyard_store::Store, AppError> {
    use_context::<trainyard_store::Store>()
        .ok_or_else(|| AppError::Internal("the database is not wired into this request".to_owned()))
}

#[server(endpoint = "get_overview")]
pub async fn get_overview() -> Result<Overview, AppError> {
    Ok(store()?.overview().await?)
}

#[server(endpoint = "list_experiments")]
pub async fn list_experiments() -> Result<Vec<ExperimentSummary>, AppError> {
    Ok(store()?.list_experiments().await?)
}

#[server(endpoint = "create_experiment")]
pub async fn create_experiment(name: String) -> Result<i64, AppError> {
    Ok(store()?.create_experiment(&name).await?)
}

#[server(endpoint = "list_jobs")]
pub async fn list_jobs() -> Result<Vec<JobSummary>, AppError> {
    Ok(store()?.list_jobs(200).await?)
}

#[server(endpoint = "list_templates")]
pub async fn list_templates() -> Result<Vec<TemplateSummary>, AppError> {
    Ok(store()?.list_templates().await?)
}

#[server(endpoint = "list_nodes")]
pub async fn list_nodes() -> Result<Vec<NodeSummary>, AppError> {
    Ok(store()?.list_nodes().await?)
}
