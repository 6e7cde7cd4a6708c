//! Traces made from their spans. OpenTelemetry exporters (`POST
//! /v1/traces`) send a trace's spans as they end, before the client's
//! summary of the trace or without one: the first spans make the trace
//! (`traces.from_spans`), later ones widen its times and give it its
//! state, previews and tags once the root span comes, and the client's
//! summary, if it comes, takes the place of what the spans said.

use sea_orm::{ConnectionTrait, DatabaseTransaction};
use trainyard_domain::identity::Owner;
use trainyard_domain::tracking::TraceInfo;

use crate::spans::SearchSpan;
use crate::sql::{lock_owner, upsert_pairs};
use crate::traces::{ARTIFACT_LOCATION_TAG, SOURCE_RUN_METADATA, TRACE_NAME_TAG};
use crate::tracking::get;
use crate::{Store, StoreError};

/// What one batch of spans says about their trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SpansOfTrace {
    pub trace_id: String,
    /// The earliest start of the batch's spans, in ms.
    pub start_ms: i64,
    /// The latest end of those that ended, in ms.
    pub end_ms: Option<i64>,
    /// What the root span says, when the batch holds it.
    pub root: Option<RootSpan>,
    /// Set on the trace (the root span's `mlflow.traceTag.*` attributes,
    /// the exporter's resource attributes).
    pub tags: Vec<(String, String)>,
    /// Set where the trace has no such key yet (`mlflow.trace.user`, …).
    pub metadata: Vec<(String, String)>,
    /// The batch's spans, as search keeps them.
    pub search: Vec<SearchSpan>,
}

/// What `record_spans` did.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Recorded {
    /// The batch made the trace.
    pub made: bool,
    /// Some of its spans lie past the trace's search bounds.
    pub cut: bool,
}

/// What a trace's root span says of the trace.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RootSpan {
    /// OK or ERROR.
    pub state: String,
    pub request_preview: String,
    pub response_preview: String,
}

/// The trace states that a root span may still settle.
const UNSETTLED: [&str; 2] = ["IN_PROGRESS", "STATE_UNSPECIFIED"];

/// On PostgreSQL, the writers of one trace's row take turns (SQLite's
/// writers always do).
pub(crate) async fn lock_trace(
    conn: &impl ConnectionTrait,
    trace_id: &str,
) -> Result<(), StoreError> {
    lock_owner(
        conn,
        conn.get_database_backend(),
        &format!("trace:{trace_id}"),
    )
    .await
}

fn name_of(tags: &[(String, String)]) -> Option<String> {
    tags.iter()
        .rev()
        .find(|(k, _)| k == TRACE_NAME_TAG)
        .map(|(_, v)| v.chars().take(500).collect())
}

impl Store {
    /// Records what a batch of spans says about their trace, in the
    /// experiment `experiment_id` where the trace is new (owned by `owner`,
    /// filed under `run_id` if given), and keeps the batch's spans for
    /// search, in one transaction.
    pub async fn record_spans(
        &self,
        experiment_id: i64,
        owner: Owner,
        run_id: Option<&str>,
        spans: &SpansOfTrace,
    ) -> Result<Recorded, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        lock_trace(&txn, &spans.trace_id).await?;
        let made = match self.trace_row_in(&txn, &spans.trace_id).await? {
            None => {
                self.make_trace_from_spans(&txn, experiment_id, owner, run_id, spans)
                    .await?;
                true
            }
            Some(row) => {
                self.widen_trace(&txn, &row, spans).await?;
                false
            }
        };
        let cut = self
            .add_spans_in(&txn, &spans.trace_id, &spans.search)
            .await?;
        txn.commit().await?;
        Ok(Recorded { made, cut })
    }

    async fn trace_row_in(
        &self,
        txn: &DatabaseTransaction,
        trace_id: &str,
    ) -> Result<Option<TraceRow>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT request_time, execution_time, state, request_preview, response_preview, from_spans FROM traces WHERE id = ")
            .bind(trace_id.to_owned());
        let Some(row) = txn.query_one_raw(sql.build()).await? else {
            return Ok(None);
        };
        Ok(Some(TraceRow {
            request_time: get(&row, "request_time")?,
            execution_time: get(&row, "execution_time")?,
            state: get(&row, "state")?,
            request_preview: get(&row, "request_preview")?,
            response_preview: get(&row, "response_preview")?,
            from_spans: get(&row, "from_spans")?,
        }))
    }

    async fn make_trace_from_spans(
        &self,
        txn: &DatabaseTransaction,
        experiment_id: i64,
        owner: Owner,
        run_id: Option<&str>,
        spans: &SpansOfTrace,
    ) -> Result<(), StoreError> {
        let (location, team_id) = self
            .trace_location(txn, experiment_id, &spans.trace_id)
            .await?;
        let root = spans.root.clone().unwrap_or_default();
        let state = if spans.root.is_some() {
            root.state.clone()
        } else {
            "IN_PROGRESS".to_owned()
        };
        let mut sql = self.sql();
        sql.push("INSERT INTO traces (id, experiment_id, name, request_time, execution_time, state, request_preview, response_preview, run_id, artifact_location, user_id, team_id, from_spans) VALUES (")
            .bind(spans.trace_id.clone())
            .push(", ")
            .bind(experiment_id)
            .push(", ")
            .bind(name_of(&spans.tags).unwrap_or_default())
            .push(", ")
            .bind(spans.start_ms)
            .push(", ")
            .bind(spans.end_ms.map(|end| (end - spans.start_ms).max(0)))
            .push(", ")
            .bind(state)
            .push(", ")
            .bind(root.request_preview)
            .push(", ")
            .bind(root.response_preview)
            .push(", ")
            .bind(run_id.map(str::to_owned))
            .push(", ")
            .bind(location.clone())
            .push(", ")
            .bind(owner.user_id)
            .push(", ")
            .bind(team_id.or(owner.team_id))
            .push(", ")
            .bind(true)
            .push(")");
        txn.execute_raw(sql.build()).await?;
        let mut tags = spans.tags.clone();
        tags.retain(|(k, _)| k != ARTIFACT_LOCATION_TAG);
        tags.push((ARTIFACT_LOCATION_TAG.to_owned(), location));
        let mut metadata = spans.metadata.clone();
        if let Some(run) = run_id {
            metadata.push((SOURCE_RUN_METADATA.to_owned(), run.to_owned()));
        }
        let key = [("trace_id", spans.trace_id.clone().into())];
        upsert_pairs(txn, self.sql(), "trace_tags", &key, &tags).await?;
        upsert_pairs(txn, self.sql(), "trace_metadata", &key, &metadata).await?;
        Ok(())
    }

    /// Where a new trace of the experiment keeps its `traces.json`, and the
    /// experiment's team; the experiment must exist and be active.
    pub(crate) async fn trace_location(
        &self,
        conn: &impl ConnectionTrait,
        experiment_id: i64,
        trace_id: &str,
    ) -> Result<(String, Option<i64>), StoreError> {
        use sea_orm::EntityTrait;
        let experiment = crate::entity::experiment::Entity::find_by_id(experiment_id)
            .one(conn)
            .await?
            .ok_or_else(|| {
                StoreError::NotFound(format!("No Experiment with id={experiment_id} exists"))
            })?;
        if experiment.lifecycle_stage != "active" {
            return Err(StoreError::Rejected(format!(
                "The experiment {experiment_id} must be in the 'active' state. Current state is {}.",
                experiment.lifecycle_stage
            )));
        }
        let location = format!(
            "{}/traces/{trace_id}/artifacts",
            experiment.artifact_location.trim_end_matches('/')
        );
        Ok((location, experiment.team_id))
    }

    async fn widen_trace(
        &self,
        txn: &DatabaseTransaction,
        row: &TraceRow,
        spans: &SpansOfTrace,
    ) -> Result<(), StoreError> {
        let mut sets: Vec<(&str, sea_orm::Value)> = Vec::new();
        // The client's summary is what it says; only a trace made from its
        // spans takes its times from them.
        if row.from_spans {
            let start = row.request_time.min(spans.start_ms);
            let old_end = row.execution_time.map(|e| row.request_time + e);
            let end = match (old_end, spans.end_ms) {
                (Some(a), Some(b)) => Some(a.max(b)),
                (a, b) => a.or(b),
            };
            sets.push(("request_time", start.into()));
            sets.push(("execution_time", end.map(|e| (e - start).max(0)).into()));
        }
        if let Some(root) = &spans.root {
            if UNSETTLED.contains(&row.state.as_str()) {
                sets.push(("state", root.state.clone().into()));
            }
            if row.request_preview.is_empty() && !root.request_preview.is_empty() {
                sets.push(("request_preview", root.request_preview.clone().into()));
            }
            if row.response_preview.is_empty() && !root.response_preview.is_empty() {
                sets.push(("response_preview", root.response_preview.clone().into()));
            }
        }
        if let Some(name) = name_of(&spans.tags) {
            sets.push(("name", name.into()));
        }
        if !sets.is_empty() {
            let mut sql = self.sql();
            sql.push("UPDATE traces SET ");
            for (i, (column, value)) in sets.into_iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.push(&format!("{column} = ")).bind(value);
            }
            sql.push(" WHERE id = ").bind(spans.trace_id.clone());
            txn.execute_raw(sql.build()).await?;
        }
        let key = [("trace_id", spans.trace_id.clone().into())];
        let tags: Vec<(String, String)> = spans
            .tags
            .iter()
            .filter(|(k, _)| k != ARTIFACT_LOCATION_TAG)
            .cloned()
            .collect();
        upsert_pairs(txn, self.sql(), "trace_tags", &key, &tags).await?;
        if !spans.metadata.is_empty() {
            let mut sql = self.sql();
            sql.push("SELECT key FROM trace_metadata WHERE trace_id = ")
                .bind(spans.trace_id.clone());
            let held: std::collections::HashSet<String> = txn
                .query_all_raw(sql.build())
                .await?
                .iter()
                .map(|r| get(r, "key"))
                .collect::<Result<_, _>>()?;
            let missing: Vec<(String, String)> = spans
                .metadata
                .iter()
                .filter(|(k, _)| !held.contains(k))
                .cloned()
                .collect();
            upsert_pairs(txn, self.sql(), "trace_metadata", &key, &missing).await?;
        }
        Ok(())
    }

    /// `start_trace` of a trace already there (its turn taken): where the
    /// trace was made from its spans, by the same owner in the same
    /// experiment, the
    /// client's summary takes the place of what the spans said (tags the
    /// spans set stay unless the summary sets them too). Ok is whether it
    /// did; false is a duplicate.
    pub(crate) async fn complete_trace_from_spans(
        &self,
        txn: &DatabaseTransaction,
        info: &TraceInfo,
        name: &str,
        run_id: Option<&str>,
        owner: Owner,
    ) -> Result<bool, StoreError> {
        let mut sql = self.sql();
        sql.push("UPDATE traces SET request_time = ")
            .bind(info.request_time)
            .push(", execution_time = ")
            .bind(info.execution_time)
            .push(", state = ")
            .bind(info.state.clone())
            .push(", client_request_id = ")
            .bind(info.client_request_id.clone())
            .push(", from_spans = ")
            .bind(false);
        // What the client leaves empty, the spans may have said.
        for (column, text) in [
            ("name", name),
            ("request_preview", info.request_preview.as_str()),
            ("response_preview", info.response_preview.as_str()),
        ] {
            if !text.is_empty() {
                sql.push(&format!(", {column} = ")).bind(text.to_owned());
            }
        }
        if let Some(run) = run_id {
            sql.push(", run_id = ").bind(run.to_owned());
        }
        sql.push(" WHERE id = ")
            .bind(info.trace_id.clone())
            .push(" AND experiment_id = ")
            .bind(info.experiment_id)
            .push(" AND from_spans = ")
            .bind(true);
        match owner.user_id {
            Some(user) => sql.push(" AND user_id = ").bind(user),
            None => sql.push(" AND user_id IS NULL"),
        };
        Ok(txn.execute_raw(sql.build()).await?.rows_affected() == 1)
    }
}

struct TraceRow {
    request_time: i64,
    execution_time: Option<i64>,
    state: String,
    request_preview: String,
    response_preview: String,
    from_spans: bool,
}
