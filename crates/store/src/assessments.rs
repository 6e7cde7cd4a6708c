//! MLflow 3's assessments of traces: feedback (`mlflow.log_feedback`, the
//! scorers of `mlflow.genai.evaluate`) and expectations
//! (`mlflow.log_expectation`), with MLflow's overriding: an assessment that
//! overrides another makes that one not valid, until it is deleted.

use sea_orm::{ConnectionTrait, QueryResult};
use trainyard_domain::tracking::Assessment;

use crate::tracking::get;
use crate::{Store, StoreError};

/// Most assessments one trace holds: a trace is judged by a person or a
/// few scorers, each now and then, not without end.
pub const MAX_ASSESSMENTS_PER_TRACE: i64 = 1000;
/// Most text (values, rationales, metadata, in characters) the
/// assessments of one trace hold together, so that a trace is read whole.
pub const MAX_TRACE_ASSESSMENT_CHARS: i64 = 16 << 20;

/// The text an assessment holds, as the bound above counts it.
fn chars_of(body: &str, rationale: Option<&str>, metadata: Option<&str>) -> i64 {
    [Some(body), rationale, metadata]
        .into_iter()
        .flatten()
        .map(|t| t.chars().count() as i64)
        .sum()
}

/// What the trace's assessments hold together: how many, and their text.
/// Takes the trace's turn first (on PostgreSQL, until the transaction
/// ends), so that two writers at once cannot both pass the bounds.
async fn held(
    store: &Store,
    conn: &impl ConnectionTrait,
    trace_id: &str,
) -> Result<(i64, i64), StoreError> {
    crate::sql::lock_owner(
        conn,
        conn.get_database_backend(),
        &format!("trace_assessments:{trace_id}"),
    )
    .await?;
    let mut sql = store.sql();
    sql.push("SELECT COUNT(*) AS n, SUM(LENGTH(body) + COALESCE(LENGTH(rationale), 0) + COALESCE(LENGTH(metadata), 0)) AS chars FROM trace_assessments WHERE trace_id = ")
        .bind(trace_id.to_owned());
    match conn.query_one_raw(sql.build()).await? {
        Some(row) => Ok((
            get(&row, "n")?,
            get::<Option<i64>>(&row, "chars")?.unwrap_or(0),
        )),
        None => Ok((0, 0)),
    }
}

fn too_much(trace_id: &str, chars: i64) -> StoreError {
    StoreError::Rejected(format!(
        "The assessments of trace '{trace_id}' would hold {chars} characters, more than the {MAX_TRACE_ASSESSMENT_CHARS} one trace may hold; keep long values in an artifact or delete some assessments"
    ))
}

/// An assessment to record.
#[derive(Debug, Clone, Default)]
pub struct NewAssessment {
    /// The client's own id, if it gave one; else one is made (`a-…`).
    pub assessment_id: Option<String>,
    pub trace_id: String,
    pub name: String,
    /// `feedback` or `expectation`.
    pub kind: String,
    /// The feedback's or expectation's object (JSON text).
    pub body: String,
    pub source_type: String,
    pub source_id: String,
    pub span_id: Option<String>,
    pub rationale: Option<String>,
    pub metadata: Vec<(String, String)>,
    pub overrides: Option<String>,
    /// When the client made it, if it said; else now (ms).
    pub create_time: Option<i64>,
}

/// What an update changes; `None` keeps the field as it is.
#[derive(Debug, Clone, Default)]
pub struct AssessmentChange {
    pub name: Option<String>,
    /// A new object of the assessment's kind (`feedback` or `expectation`).
    pub body: Option<(String, String)>,
    pub rationale: Option<String>,
    /// Merged into what it holds, these winning.
    pub metadata: Option<Vec<(String, String)>>,
    pub valid: Option<bool>,
}

fn not_found(trace_id: &str, id: &str) -> StoreError {
    StoreError::NotFound(format!(
        "Assessment with ID '{id}' not found for trace '{trace_id}'"
    ))
}

/// The value of a feedback or expectation object, as JSON text for people
/// (an expectation's `serialized_value` is shown as it was serialized), and
/// a feedback's error.
pub fn readable(kind: &str, body: &str) -> (String, Option<String>) {
    let Ok(body) = serde_json::from_str::<serde_json::Value>(body) else {
        return (String::new(), None);
    };
    let value = match body.get("value") {
        Some(serde_json::Value::Null) | None => body
            .pointer("/serialized_value/value")
            .and_then(|v| v.as_str())
            .map(str::to_owned)
            .unwrap_or_default(),
        Some(v) => v.to_string(),
    };
    let error = (kind == "feedback")
        .then(|| body.get("error"))
        .flatten()
        .map(|e| {
            let field = |k: &str| e.get(k).and_then(|v| v.as_str()).unwrap_or_default();
            match (field("error_code"), field("error_message")) {
                ("", message) => message.to_owned(),
                (code, "") => code.to_owned(),
                (code, message) => format!("{code}: {message}"),
            }
        })
        .filter(|e| !e.is_empty());
    (value, error)
}

/// What search compares: the value as JSON text (an expectation's
/// serialized value as it was serialized) and, where it is a finite number
/// (not a boolean), as a number.
fn searchable(kind: &str, body: &str) -> (Option<String>, Option<f64>) {
    // A serialized value is decoded here, and PostgreSQL keeps no NUL in
    // text: search does without them.
    let text = readable(kind, body).0.replace('\0', "");
    let number = serde_json::from_str::<serde_json::Value>(body)
        .ok()
        .and_then(|b| b.get("value").and_then(serde_json::Value::as_f64))
        .filter(|n| n.is_finite());
    ((!text.is_empty()).then_some(text), number)
}

fn from_row(row: &QueryResult) -> Result<Assessment, StoreError> {
    let kind: String = get(row, "kind")?;
    let body: String = get(row, "body")?;
    let (value, error) = readable(&kind, &body);
    let metadata: Option<String> = get(row, "metadata")?;
    let metadata = metadata
        .and_then(|m| serde_json::from_str::<Vec<(String, String)>>(&m).ok())
        .unwrap_or_default();
    Ok(Assessment {
        assessment_id: get(row, "id")?,
        trace_id: get(row, "trace_id")?,
        name: get(row, "name")?,
        kind,
        body,
        value,
        error,
        source_type: get(row, "source_type")?,
        source_id: get(row, "source_id")?,
        span_id: get(row, "span_id")?,
        rationale: get(row, "rationale")?,
        metadata,
        overrides: get(row, "overrides")?,
        valid: get(row, "valid")?,
        create_time: get(row, "create_time")?,
        last_update_time: get(row, "last_update_time")?,
    })
}

fn metadata_text(pairs: &[(String, String)]) -> Option<String> {
    (!pairs.is_empty()).then(|| serde_json::to_string(pairs).unwrap_or_default())
}

impl Store {
    /// Records an assessment of a trace (which must exist). One that
    /// overrides another makes that one not valid; the other must be of
    /// the same trace.
    pub async fn create_assessment(&self, new: NewAssessment) -> Result<Assessment, StoreError> {
        let id = new
            .assessment_id
            .clone()
            .unwrap_or_else(|| format!("a-{}", uuid::Uuid::new_v4().simple()));
        let now = crate::now_millis();
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let (count, chars) = held(self, &txn, &new.trace_id).await?;
            if count >= MAX_ASSESSMENTS_PER_TRACE {
                return Err(StoreError::Rejected(format!(
                    "Trace '{}' already holds {count} assessments, the most one trace may hold; delete some first",
                    new.trace_id
                )));
            }
            let metadata = metadata_text(&new.metadata);
            let after = chars + chars_of(&new.body, new.rationale.as_deref(), metadata.as_deref());
            if after > MAX_TRACE_ASSESSMENT_CHARS {
                return Err(too_much(&new.trace_id, after));
            }
            if let Some(old) = &new.overrides {
                let mut sql = self.sql();
                sql.push("UPDATE trace_assessments SET valid = ")
                    .bind(false)
                    .push(" WHERE trace_id = ")
                    .bind(new.trace_id.clone())
                    .push(" AND id = ")
                    .bind(old.clone());
                if txn.execute_raw(sql.build()).await?.rows_affected() == 0 {
                    return Err(not_found(&new.trace_id, old));
                }
            }
            let created = new.create_time.unwrap_or(now);
            let mut sql = self.sql();
            let (value_text, value_number) = searchable(&new.kind, &new.body);
            sql.push("INSERT INTO trace_assessments (id, trace_id, name, kind, body, value_text, value_number, source_type, source_id, span_id, rationale, metadata, overrides, valid, create_time, last_update_time) VALUES (")
                .bind(id.clone())
                .push(", ")
                .bind(new.trace_id.clone())
                .push(", ")
                .bind(new.name)
                .push(", ")
                .bind(new.kind)
                .push(", ")
                .bind(new.body)
                .push(", ")
                .bind(value_text)
                .push(", ")
                .bind(value_number)
                .push(", ")
                .bind(new.source_type)
                .push(", ")
                .bind(new.source_id)
                .push(", ")
                .bind(new.span_id)
                .push(", ")
                .bind(new.rationale)
                .push(", ")
                .bind(metadata)
                .push(", ")
                .bind(new.overrides)
                .push(", ")
                .bind(true)
                .push(", ")
                .bind(created)
                .push(", ")
                .bind(created)
                .push(") ON CONFLICT (id) DO NOTHING");
            if txn.execute_raw(sql.build()).await?.rows_affected() == 0 {
                return Err(StoreError::Conflict {
                    what: format!("Assessment with ID '{id}'"),
                });
            }
            txn.commit().await?;
        }
        self.get_assessment(&new.trace_id, &id).await
    }

    pub async fn get_assessment(&self, trace_id: &str, id: &str) -> Result<Assessment, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT * FROM trace_assessments WHERE trace_id = ")
            .bind(trace_id.to_owned())
            .push(" AND id = ")
            .bind(id.to_owned());
        match self.connection().query_one_raw(sql.build()).await? {
            Some(row) => from_row(&row),
            None => Err(not_found(trace_id, id)),
        }
    }

    /// Changes an assessment; its source, span and kind stay. A new value
    /// must be of its kind.
    pub async fn update_assessment(
        &self,
        trace_id: &str,
        id: &str,
        change: AssessmentChange,
    ) -> Result<Assessment, StoreError> {
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let mut sql = self.sql();
            sql.push("SELECT * FROM trace_assessments WHERE trace_id = ")
                .bind(trace_id.to_owned())
                .push(" AND id = ")
                .bind(id.to_owned());
            let old = match txn.query_one_raw(sql.build()).await? {
                Some(row) => from_row(&row)?,
                None => return Err(not_found(trace_id, id)),
            };
            let before = chars_of(
                &old.body,
                old.rationale.as_deref(),
                metadata_text(&old.metadata).as_deref(),
            );
            let body = match change.body {
                Some((kind, body)) if kind == old.kind => body,
                Some((kind, _)) => {
                    return Err(StoreError::Rejected(format!(
                        "Assessment '{id}' is {} {}: its value cannot become {} {kind}",
                        article(&old.kind),
                        old.kind,
                        article(&kind)
                    )));
                }
                None => old.body,
            };
            let mut metadata = old.metadata;
            for (k, v) in change.metadata.unwrap_or_default() {
                match metadata.iter_mut().find(|(key, _)| *key == k) {
                    Some(slot) => slot.1 = v,
                    None => metadata.push((k, v)),
                }
            }
            // An empty rationale removes it.
            let rationale = match change.rationale {
                Some(r) if r.is_empty() => None,
                Some(r) => Some(r),
                None => old.rationale,
            };
            let metadata = metadata_text(&metadata);
            let (_, chars) = held(self, &txn, trace_id).await?;
            let after = chars - before + chars_of(&body, rationale.as_deref(), metadata.as_deref());
            if after > chars.max(MAX_TRACE_ASSESSMENT_CHARS) {
                return Err(too_much(trace_id, after));
            }
            let (value_text, value_number) = searchable(&old.kind, &body);
            let mut sql = self.sql();
            sql.push("UPDATE trace_assessments SET name = ")
                .bind(change.name.unwrap_or(old.name))
                .push(", body = ")
                .bind(body)
                .push(", value_text = ")
                .bind(value_text)
                .push(", value_number = ")
                .bind(value_number)
                .push(", rationale = ")
                .bind(rationale)
                .push(", metadata = ")
                .bind(metadata)
                .push(", valid = ")
                .bind(change.valid.unwrap_or(old.valid))
                .push(", last_update_time = ")
                .bind(crate::now_millis().max(old.create_time))
                .push(" WHERE trace_id = ")
                .bind(trace_id.to_owned())
                .push(" AND id = ")
                .bind(id.to_owned());
            txn.execute_raw(sql.build()).await?;
            txn.commit().await?;
        }
        self.get_assessment(trace_id, id).await
    }

    /// Deletes an assessment (nothing when it is not there, as MLflow); the
    /// one it overrode is valid again.
    pub async fn delete_assessment(&self, trace_id: &str, id: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push("SELECT overrides FROM trace_assessments WHERE trace_id = ")
            .bind(trace_id.to_owned())
            .push(" AND id = ")
            .bind(id.to_owned());
        let Some(row) = txn.query_one_raw(sql.build()).await? else {
            return Ok(());
        };
        let overrode: Option<String> = get(&row, "overrides")?;
        let mut sql = self.sql();
        sql.push("DELETE FROM trace_assessments WHERE trace_id = ")
            .bind(trace_id.to_owned())
            .push(" AND id = ")
            .bind(id.to_owned());
        txn.execute_raw(sql.build()).await?;
        if let Some(old) = overrode {
            let mut sql = self.sql();
            sql.push("UPDATE trace_assessments SET valid = ")
                .bind(true)
                .push(" WHERE trace_id = ")
                .bind(trace_id.to_owned())
                .push(" AND id = ")
                .bind(old);
            txn.execute_raw(sql.build()).await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// The assessments of these traces, each trace's oldest first.
    pub(crate) async fn assessments_of(
        &self,
        trace_ids: &[String],
    ) -> Result<Vec<Assessment>, StoreError> {
        let mut out = Vec::new();
        for chunk in trace_ids.chunks(500) {
            let mut sql = self.sql();
            sql.push("SELECT * FROM trace_assessments WHERE trace_id IN ")
                .bind_list(chunk.iter().cloned())
                .push(" ORDER BY trace_id, create_time, id");
            for row in self.connection().query_all_raw(sql.build()).await? {
                out.push(from_row(&row)?);
            }
        }
        Ok(out)
    }
}

fn article(kind: &str) -> &'static str {
    if kind.starts_with(['a', 'e', 'i', 'o', 'u']) {
        "an"
    } else {
        "a"
    }
}
