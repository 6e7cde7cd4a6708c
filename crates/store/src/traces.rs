//! MLflow 3's traces: their summaries, tags and request metadata, search,
//! deletion, and the run a trace belongs to. Spans are in each trace's
//! `traces.json` artifact, which the client writes and reads itself (or
//! the server, from the spans an OpenTelemetry exporter sends).

use sea_orm::{ConnectionTrait, QueryResult};
use trainyard_domain::identity::{Owner, User};
use trainyard_domain::query::{Expr, Field, OrderBy, Scope};
use trainyard_domain::tracking::TraceInfo;

use crate::sql::{attr_column, filter, upsert_pairs};
use crate::tracking::get;
use crate::{Store, StoreError, Viewer};

/// The tag that names a trace (its root span's name).
pub const TRACE_NAME_TAG: &str = "mlflow.traceName";
/// The metadata key of the run a trace was made under.
pub const SOURCE_RUN_METADATA: &str = "mlflow.sourceRun";
/// The tag that says where the trace's `traces.json` is.
pub const ARTIFACT_LOCATION_TAG: &str = "mlflow.artifactLocation";

/// Refuses a change of the tag the server sets: where a trace's spans are
/// kept. Clients fetch `traces.json` from it with their own credentials, so
/// a trace that named another host would send a reader's token there.
fn server_set(key: &str) -> Result<(), StoreError> {
    if key == ARTIFACT_LOCATION_TAG {
        return Err(StoreError::Rejected(format!(
            "The tag '{ARTIFACT_LOCATION_TAG}' is set by the server (where the trace's spans are kept) and cannot be changed; use another key"
        )));
    }
    Ok(())
}

/// Most text (assessments' values, rationales and metadata, and the
/// traces' tags and metadata, in characters) that one page of a trace
/// search carries: the page ends early rather than carry more, and the
/// next page goes on from there.
pub const MAX_PAGE_TEXT_CHARS: i64 = 32 << 20;

/// A page of a trace search.
#[derive(Debug, Clone, Default)]
pub struct TracePage {
    pub traces: Vec<TraceInfo>,
    /// It ended early, on [`MAX_PAGE_TEXT_CHARS`]: more may follow,
    /// from `offset + traces.len()`.
    pub cut: bool,
}

fn trace_not_found(id: &str) -> StoreError {
    StoreError::NotFound(format!("Trace with ID '{id}' not found."))
}

impl Store {
    /// Records a trace that the client finished. Its artifact location (for
    /// `traces.json`) is under its experiment's; a trace id is recorded
    /// once, except that the summary completes a trace its owner's spans
    /// made (`record_spans`).
    pub async fn start_trace(
        &self,
        mut info: TraceInfo,
        owner: Owner,
    ) -> Result<TraceInfo, StoreError> {
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            // On PostgreSQL, after or before the spans that make it
            // (`record_spans`), never beside them.
            crate::span_traces::lock_trace(&txn, &info.trace_id).await?;
            let (location, team_id) = self
                .trace_location(&txn, info.experiment_id, &info.trace_id)
                .await?;
            info.tags.retain(|(k, _)| k != ARTIFACT_LOCATION_TAG);
            info.tags
                .push((ARTIFACT_LOCATION_TAG.to_owned(), location.clone()));
            let name = info
                .tags
                .iter()
                .find(|(k, _)| k == TRACE_NAME_TAG)
                .map(|(_, v)| v.chars().take(500).collect::<String>())
                .unwrap_or_default();
            let run_id = info
                .metadata
                .iter()
                .find(|(k, _)| k == SOURCE_RUN_METADATA)
                .map(|(_, v)| v.clone())
                .filter(|r| r.len() <= 32);
            let mut sql = self.sql();
            sql.push("INSERT INTO traces (id, experiment_id, name, request_time, execution_time, state, request_preview, response_preview, client_request_id, run_id, artifact_location, user_id, team_id) VALUES (")
                .bind(info.trace_id.clone())
                .push(", ")
                .bind(info.experiment_id)
                .push(", ")
                .bind(name.clone())
                .push(", ")
                .bind(info.request_time)
                .push(", ")
                .bind(info.execution_time)
                .push(", ")
                .bind(info.state.clone())
                .push(", ")
                .bind(info.request_preview.clone())
                .push(", ")
                .bind(info.response_preview.clone())
                .push(", ")
                .bind(info.client_request_id.clone())
                .push(", ")
                .bind(run_id.clone())
                .push(", ")
                .bind(location)
                .push(", ")
                .bind(owner.user_id)
                .push(", ")
                .bind(team_id.or(owner.team_id))
                .push(") ON CONFLICT (id) DO NOTHING");
            if txn.execute_raw(sql.build()).await?.rows_affected() == 0
                && !self
                    .complete_trace_from_spans(&txn, &info, &name, run_id.as_deref(), owner)
                    .await?
            {
                return Err(StoreError::Conflict {
                    what: format!("Trace with ID '{}'", info.trace_id),
                });
            }
            let owner = [("trace_id", info.trace_id.clone().into())];
            upsert_pairs(&txn, self.sql(), "trace_tags", &owner, &info.tags).await?;
            upsert_pairs(&txn, self.sql(), "trace_metadata", &owner, &info.metadata).await?;
            txn.commit().await?;
        }
        self.get_trace_info(&info.trace_id).await
    }

    pub async fn get_trace_info(&self, trace_id: &str) -> Result<TraceInfo, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT * FROM traces WHERE id = ")
            .bind(trace_id.to_owned());
        let rows = self.connection().query_all_raw(sql.build()).await?;
        self.traces_from(&rows)
            .await?
            .pop()
            .ok_or_else(|| trace_not_found(trace_id))
    }

    async fn traces_from(&self, rows: &[QueryResult]) -> Result<Vec<TraceInfo>, StoreError> {
        let mut out: Vec<TraceInfo> = Vec::with_capacity(rows.len());
        for row in rows {
            out.push(TraceInfo {
                trace_id: get(row, "id")?,
                experiment_id: get(row, "experiment_id")?,
                request_time: get(row, "request_time")?,
                execution_time: get(row, "execution_time")?,
                state: get(row, "state")?,
                request_preview: get(row, "request_preview")?,
                response_preview: get(row, "response_preview")?,
                client_request_id: get(row, "client_request_id")?,
                metadata: Vec::new(),
                tags: Vec::new(),
                assessments: Vec::new(),
            });
        }
        let ids: Vec<String> = out.iter().map(|t| t.trace_id.clone()).collect();
        let at: std::collections::HashMap<String, usize> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.clone(), i))
            .collect();
        for a in self.assessments_of(&ids).await? {
            if let Some(&i) = at.get(&a.trace_id) {
                out[i].assessments.push(a);
            }
        }
        for chunk in ids.chunks(500) {
            for table in ["trace_tags", "trace_metadata"] {
                let mut sql = self.sql();
                sql.push(&format!(
                    "SELECT trace_id, key, value FROM {table} WHERE trace_id IN "
                ))
                .bind_list(chunk.iter().cloned())
                .push(" ORDER BY key");
                for row in self.connection().query_all_raw(sql.build()).await? {
                    let id: String = get(&row, "trace_id")?;
                    if let Some(trace) = at.get(&id).map(|&i| &mut out[i]) {
                        let kv = (get(&row, "key")?, get(&row, "value")?);
                        if table == "trace_tags" {
                            trace.tags.push(kv);
                        } else {
                            trace.metadata.push(kv);
                        }
                    }
                }
            }
        }
        Ok(out)
    }

    /// The (experiment, trace) of every trace a user owns: where their
    /// `traces.json` files are.
    pub async fn traces_owned_by(&self, user_id: i64) -> Result<Vec<(i64, String)>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT experiment_id, id FROM traces WHERE user_id = ")
            .bind(user_id);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| Ok((get(row, "experiment_id")?, get(row, "id")?)))
            .collect()
    }

    /// Some columns of a trace's row.
    async fn trace_row(&self, trace_id: &str, columns: &str) -> Result<QueryResult, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!("SELECT {columns} FROM traces WHERE id = "))
            .bind(trace_id.to_owned());
        self.connection()
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| trace_not_found(trace_id))
    }

    /// Who owns a trace and in which experiment it is.
    pub async fn trace_place(&self, trace_id: &str) -> Result<(i64, Owner), StoreError> {
        let row = self
            .trace_row(trace_id, "experiment_id, user_id, team_id")
            .await?;
        Ok((
            get(&row, "experiment_id")?,
            Owner::new(get(&row, "user_id")?, get(&row, "team_id")?),
        ))
    }

    /// The run a trace is filed under, if any.
    pub async fn trace_run(&self, trace_id: &str) -> Result<Option<String>, StoreError> {
        get(&self.trace_row(trace_id, "run_id").await?, "run_id")
    }

    /// May the user see (Read) or change (Change) the trace? As for runs.
    pub async fn trace_as(
        &self,
        user: &User,
        trace_id: &str,
        access: crate::Access,
    ) -> Result<(), StoreError> {
        let (_, owner) = self.trace_place(trace_id).await?;
        if !user.can_read(owner) {
            return Err(trace_not_found(trace_id));
        }
        if access == crate::Access::Change && !user.can_change(owner) {
            return Err(StoreError::Forbidden(format!(
                "trace {trace_id} is not yours: only its owner or an admin may change it"
            )));
        }
        Ok(())
    }

    /// Traces of the experiments matching the filter, newest first unless
    /// ordered otherwise; at most `limit`, fewer where their assessments,
    /// tags and metadata would carry more than [`MAX_PAGE_TEXT_CHARS`] (at
    /// least one).
    pub async fn search_traces(
        &self,
        experiment_ids: &[i64],
        expr: Option<&Expr>,
        order: &[OrderBy],
        limit: u64,
        offset: u64,
        viewer: &Viewer,
    ) -> Result<TracePage, StoreError> {
        if experiment_ids.is_empty() {
            return Ok(TracePage::default());
        }
        let mut sql = self.sql();
        sql.push("SELECT t.* FROM traces t WHERE t.experiment_id IN ")
            .int_list(experiment_ids);
        viewer.restrict(&mut sql, "t.user_id", "t.team_id", None);
        if let Some(expr) = expr {
            sql.push(" AND ");
            filter(&mut sql, expr, Scope::Traces);
        }
        let mut terms = Vec::new();
        for o in order {
            let Field::Attr(attr) = &o.field else {
                return Err(StoreError::Rejected(
                    "Invalid order_by: traces are ordered by timestamp_ms, execution_time_ms, end_time_ms, status or name".to_owned(),
                ));
            };
            let column = attr_column(*attr, Scope::Traces);
            let dir = if o.ascending { "ASC" } else { "DESC" };
            // Unset (a trace under way has no execution or end time) last
            // either way, on both engines.
            terms.push(format!(
                "CASE WHEN {column} IS NULL THEN 1 ELSE 0 END, {column} {dir}"
            ));
        }
        terms.push("t.request_time DESC, t.id ASC".to_owned());
        sql.push(&format!(" ORDER BY {} LIMIT ", terms.join(", ")))
            .bind(limit as i64)
            .push(" OFFSET ")
            .bind(offset as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        let ids = rows
            .iter()
            .map(|row| get(row, "id"))
            .collect::<Result<Vec<String>, _>>()?;
        let fit = self.traces_within_text_budget(&ids).await?;
        Ok(TracePage {
            traces: self.traces_from(&rows[..fit]).await?,
            cut: fit < rows.len(),
        })
    }

    /// How many of `ids`, from the first, carry at most
    /// [`MAX_PAGE_TEXT_CHARS`] of assessments, tags and metadata together;
    /// at least one.
    async fn traces_within_text_budget(&self, ids: &[String]) -> Result<usize, StoreError> {
        let mut sizes = std::collections::HashMap::<String, i64>::new();
        let texts = [
            (
                "trace_assessments",
                "LENGTH(body) + COALESCE(LENGTH(rationale), 0) + COALESCE(LENGTH(metadata), 0)",
            ),
            ("trace_tags", "LENGTH(key) + LENGTH(value)"),
            ("trace_metadata", "LENGTH(key) + LENGTH(value)"),
        ];
        for chunk in ids.chunks(500) {
            for (table, chars) in texts {
                let mut sql = self.sql();
                sql.push(&format!(
                    "SELECT trace_id, SUM({chars}) AS n FROM {table} WHERE trace_id IN "
                ))
                .bind_list(chunk.iter().cloned())
                .push(" GROUP BY trace_id");
                for row in self.connection().query_all_raw(sql.build()).await? {
                    let n: Option<i64> = get(&row, "n")?;
                    *sizes.entry(get::<String>(&row, "trace_id")?).or_default() += n.unwrap_or(0);
                }
            }
        }
        let mut total = 0;
        for (i, id) in ids.iter().enumerate() {
            total += sizes.get(id).copied().unwrap_or(0);
            if total > MAX_PAGE_TEXT_CHARS && i > 0 {
                return Ok(i);
            }
        }
        Ok(ids.len())
    }

    pub async fn set_trace_tag(
        &self,
        trace_id: &str,
        key: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        server_set(key)?;
        let _turn = self.write_turn().await;
        self.trace_place(trace_id).await?;
        let txn = self.begin_write().await?;
        upsert_pairs(
            &txn,
            self.sql(),
            "trace_tags",
            &[("trace_id", trace_id.to_owned().into())],
            &[(key.to_owned(), value.to_owned())],
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    pub async fn delete_trace_tag(&self, trace_id: &str, key: &str) -> Result<(), StoreError> {
        server_set(key)?;
        let _turn = self.write_turn().await;
        self.trace_place(trace_id).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM trace_tags WHERE trace_id = ")
            .bind(trace_id.to_owned())
            .push(" AND key = ")
            .bind(key.to_owned());
        if self
            .connection()
            .execute_raw(sql.build())
            .await?
            .rows_affected()
            == 0
        {
            return Err(StoreError::NotFound(format!(
                "No trace tag with key '{key}' for trace with ID '{trace_id}'"
            )));
        }
        Ok(())
    }

    /// A page of the traces of an experiment that a deletion takes, oldest
    /// first: the given ids, or those requested at or before
    /// `max_timestamp`; after the trace `after` (its request time and id),
    /// those of the user `only_of` where given, at most `limit`. Each with its owner, for the caller's check.
    pub async fn traces_to_delete(
        &self,
        experiment_id: i64,
        max_timestamp: Option<i64>,
        ids: &[String],
        after: Option<(i64, &str)>,
        only_of: Option<i64>,
        limit: u64,
    ) -> Result<Vec<TraceToDelete>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT id, request_time, user_id, team_id FROM traces WHERE experiment_id = ")
            .bind(experiment_id);
        if let Some(user) = only_of {
            sql.push(" AND user_id = ").bind(user);
        }
        if !ids.is_empty() {
            sql.push(" AND id IN ").bind_list(ids.iter().cloned());
        }
        if let Some(max) = max_timestamp {
            sql.push(" AND request_time <= ").bind(max);
        }
        if let Some((time, id)) = after {
            sql.push(" AND (request_time > ")
                .bind(time)
                .push(" OR (request_time = ")
                .bind(time)
                .push(" AND id > ")
                .bind(id.to_owned())
                .push("))");
        }
        sql.push(" ORDER BY request_time ASC, id ASC LIMIT ")
            .bind(limit.min(i64::MAX as u64) as i64);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| {
                Ok(TraceToDelete {
                    id: get(row, "id")?,
                    request_time: get(row, "request_time")?,
                    owner: Owner::new(get(row, "user_id")?, get(row, "team_id")?),
                })
            })
            .collect()
    }

    pub async fn delete_traces(&self, ids: &[String]) -> Result<u64, StoreError> {
        let _turn = self.write_turn().await;
        let mut deleted = 0;
        for chunk in ids.chunks(500) {
            let mut sql = self.sql();
            sql.push("DELETE FROM traces WHERE id IN ")
                .bind_list(chunk.iter().cloned());
            deleted += self
                .connection()
                .execute_raw(sql.build())
                .await?
                .rows_affected();
        }
        Ok(deleted)
    }

    /// Files traces under a run (each trace belongs to one run here).
    pub async fn link_traces_to_run(&self, ids: &[String], run_id: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push("UPDATE traces SET run_id = ")
            .bind(run_id.to_owned())
            .push(" WHERE id IN ")
            .bind_list(ids.iter().cloned());
        self.connection().execute_raw(sql.build()).await?;
        Ok(())
    }

    /// Records that a trace used these prompt versions (`name/version`
    /// each); links it holds already stay once. Refused when the trace would
    /// then hold more than [`MAX_PROMPTS_PER_TRACE`].
    pub async fn link_prompts_to_trace(
        &self,
        trace_id: &str,
        prompts: &[String],
    ) -> Result<(), StoreError> {
        let mut prompts = prompts.to_vec();
        prompts.sort();
        prompts.dedup();
        if prompts.is_empty() {
            return Ok(());
        }
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        crate::sql::lock_owner(
            &txn,
            txn.get_database_backend(),
            &format!("trace_prompts:{trace_id}"),
        )
        .await?;
        let mut sql = self.sql();
        sql.push("INSERT INTO trace_prompts (trace_id, prompt) VALUES ");
        for (i, prompt) in prompts.iter().enumerate() {
            if i > 0 {
                sql.push(", ");
            }
            sql.push("(")
                .bind(trace_id.to_owned())
                .push(", ")
                .bind(prompt.clone())
                .push(")");
        }
        sql.push(" ON CONFLICT (trace_id, prompt) DO NOTHING");
        txn.execute_raw(sql.build()).await?;
        let held =
            crate::sql::held_rows(&txn, "trace_prompts", &[("trace_id", trace_id.into())]).await?;
        if held > MAX_PROMPTS_PER_TRACE {
            return Err(StoreError::Rejected(format!(
                "Trace '{trace_id}' would be linked to {held} prompt versions, more than the {MAX_PROMPTS_PER_TRACE} one trace may be"
            )));
        }
        txn.commit().await?;
        Ok(())
    }

    /// The prompt versions a trace used, as `name/version`.
    pub async fn trace_prompts(&self, trace_id: &str) -> Result<Vec<String>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT prompt FROM trace_prompts WHERE trace_id = ")
            .bind(trace_id.to_owned())
            .push(" ORDER BY prompt");
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| get(row, "prompt"))
            .collect()
    }
}

/// Most prompt versions one trace is linked to: a traced call loads a few.
pub const MAX_PROMPTS_PER_TRACE: i64 = 1000;

/// A trace a deletion takes, with what its caller's check needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceToDelete {
    pub id: String,
    pub request_time: i64,
    pub owner: Owner,
}
