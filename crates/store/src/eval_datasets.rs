//! MLflow 3's evaluation datasets (`mlflow.genai.datasets`): named sets of
//! records that `mlflow.genai.evaluate` runs over, as MLflow's own store
//! keeps them. A record is one distinct set of inputs: merging records whose
//! inputs are already there replaces their outputs and adds to their
//! expectations and tags. Every change of the records gives the dataset a
//! new digest, and the schema (each field's type) grows with the fields the
//! records bring.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, QueryResult};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};
use trainyard_domain::identity::{Owner, User};
use trainyard_domain::query::{Attribute, Expr, Field, OrderBy, Scope};
use trainyard_domain::tracking::{DatasetRecord, EvaluationDataset};

use crate::sql::{filter, held_rows, lock_owner, upsert_pairs};
use crate::tracking::get;
use crate::{Store, StoreError, Viewer, now_millis};

/// Most records one dataset holds: an evaluation set is read whole by
/// `mlflow.genai.evaluate`, page by page, into one DataFrame.
pub const MAX_DATASET_RECORDS: i64 = 100_000;
/// Most JSON (in bytes) the records of one dataset hold together.
pub const MAX_DATASET_BYTES: i64 = 256 << 20;
/// Most JSON (in bytes) one record holds, its inputs, outputs,
/// expectations, tags and source together, merges included.
pub const MAX_RECORD_BYTES: i64 = 1 << 20;
/// Most JSON one page of records carries, so that a page of large records
/// stays a bounded answer; the page ends early and its token goes on.
pub const MAX_PAGE_BYTES: i64 = 32 << 20;
/// Most fields of each part (inputs, outputs, expectations) the schema
/// lists, and the longest name it lists: the schema describes, and a
/// stream of made-up field names must not grow it without end.
const SCHEMA_FIELDS: usize = 100;
const SCHEMA_NAME_CHARS: usize = 100;
/// Most experiments one dataset is shown in.
pub const MAX_DATASET_EXPERIMENTS: i64 = 1000;

/// The ids given to one `IN (…)`.
const IN_CHUNK: usize = 500;

fn not_found(id: &str) -> StoreError {
    StoreError::NotFound(format!("Evaluation dataset with id '{id}' not found"))
}

/// A record to merge into a dataset, checked by the caller: `inputs` is a
/// JSON object, `expectations` and `tags` are objects when given.
#[derive(Debug, Clone, Default)]
pub struct NewRecord {
    pub inputs: Map<String, Value>,
    /// Left out (`None`) keeps a record's outputs; given, it replaces them
    /// (`Some(Value::Null)` clears them).
    pub outputs: Option<Value>,
    pub expectations: Option<Map<String, Value>>,
    pub tags: Option<Map<String, Value>>,
    /// `{"source_type": …, "source_data": {…}}`, its type in MLflow's
    /// upper-case spelling.
    pub source: Option<Value>,
}

impl NewRecord {
    /// What MLflow keys a record by: the SHA-256 of its inputs as JSON with
    /// sorted keys.
    pub fn input_hash(&self) -> String {
        hex::encode(Sha256::digest(
            Value::Object(self.inputs.clone()).to_string().as_bytes(),
        ))
    }

    fn source_type(&self) -> Option<String> {
        self.source
            .as_ref()
            .and_then(|s| s.get("source_type"))
            .and_then(Value::as_str)
            .map(str::to_owned)
    }

    /// The trace a record came from, or its source's own id.
    fn source_id(&self) -> Option<String> {
        let data = self.source.as_ref()?.get("source_data")?;
        let key = if self.source_type().as_deref() == Some("TRACE") {
            "trace_id"
        } else {
            "source_id"
        };
        match data.get(key)? {
            Value::String(s) => Some(s.chars().take(250).collect()),
            Value::Null => None,
            other => Some(other.to_string().chars().take(250).collect()),
        }
    }
}

fn new_id(prefix: &str) -> String {
    format!("{prefix}{}", uuid::Uuid::new_v4().simple())
}

/// The dataset's digest, as MLflow makes it from its name and the time of
/// its last change, with the count of its changes beside them so that two
/// changes in one millisecond differ too.
fn digest(name: &str, time: i64, changes: i64) -> String {
    hex::encode(Sha256::digest(
        format!("{name}:{time}:{changes}").as_bytes(),
    ))[..8]
        .to_owned()
}

/// MLflow's name of a JSON value's type, for the schema.
fn type_of(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "integer",
        Value::Number(_) => "float",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The schema with the fields of `records` that it lacks, as MLflow grows
/// it: the first type seen of each field stays.
pub fn grow_schema(existing: Option<&str>, records: &[NewRecord]) -> Option<String> {
    if records.is_empty() && existing.is_none() {
        return None;
    }
    let mut schema = existing
        .and_then(|s| serde_json::from_str::<Map<String, Value>>(s).ok())
        .unwrap_or_else(|| {
            let mut m = Map::new();
            for part in ["inputs", "outputs", "expectations"] {
                m.insert(part.to_owned(), Value::Object(Map::new()));
            }
            m.insert("version".to_owned(), Value::from("1.0"));
            m
        });
    let add = |schema: &mut Map<String, Value>, part: &str, fields: &Map<String, Value>| {
        if let Some(Value::Object(known)) = schema.get_mut(part) {
            for (key, value) in fields {
                if known.len() >= SCHEMA_FIELDS {
                    break;
                }
                if key.chars().count() <= SCHEMA_NAME_CHARS && !known.contains_key(key) {
                    known.insert(key.clone(), Value::from(type_of(value)));
                }
            }
        }
    };
    for record in records {
        add(&mut schema, "inputs", &record.inputs);
        match &record.outputs {
            Some(Value::Object(fields)) => add(&mut schema, "outputs", fields),
            Some(Value::Null) | None => {}
            Some(other) => {
                let empty = match schema.get("outputs") {
                    Some(Value::Object(o)) => o.is_empty(),
                    Some(Value::String(_)) => false,
                    _ => true,
                };
                if empty {
                    schema.insert("outputs".to_owned(), Value::from(type_of(other)));
                }
            }
        }
        if let Some(expectations) = &record.expectations {
            add(&mut schema, "expectations", expectations);
        }
    }
    Some(Value::Object(schema).to_string())
}

/// Bytes of the JSON texts a record keeps.
fn bytes_of(texts: &[Option<&str>]) -> i64 {
    texts.iter().flatten().map(|t| t.len() as i64).sum()
}

fn dataset_from(
    row: &QueryResult,
    tags: Vec<(String, String)>,
) -> Result<EvaluationDataset, StoreError> {
    Ok(EvaluationDataset {
        dataset_id: get(row, "id")?,
        name: get(row, "name")?,
        tags,
        schema: get(row, "schema_json")?,
        digest: get(row, "digest")?,
        num_records: get(row, "num_records")?,
        created_time: get(row, "created_time")?,
        last_update_time: get(row, "last_update_time")?,
        created_by: get(row, "created_by")?,
        last_updated_by: get(row, "last_updated_by")?,
    })
}

fn record_from(row: &QueryResult) -> Result<DatasetRecord, StoreError> {
    Ok(DatasetRecord {
        dataset_record_id: get(row, "id")?,
        dataset_id: get(row, "dataset_id")?,
        inputs: get(row, "inputs")?,
        outputs: get(row, "outputs")?,
        expectations: get(row, "expectations")?,
        tags: get(row, "tags")?,
        source: get(row, "source")?,
        source_id: get(row, "source_id")?,
        source_type: get(row, "source_type")?,
        created_time: get(row, "created_time")?,
        last_update_time: get(row, "last_update_time")?,
        created_by: get(row, "created_by")?,
        last_updated_by: get(row, "last_updated_by")?,
    })
}

/// A page of records, and where the next begins: after the record of
/// this number.
#[derive(Debug, Clone)]
pub struct RecordPage {
    pub records: Vec<DatasetRecord>,
    pub next: Option<i64>,
}

/// A record as a merge sees it: read from its row, or new in this request.
#[derive(Debug, Clone)]
struct Held {
    /// The row's id; made for a record new in this request.
    id: String,
    /// Its number in the dataset's order.
    position: i64,
    /// Its bytes as stored, before this request (0 for a new one).
    stored_bytes: i64,
    created_time: i64,
    created_by: Option<String>,
    inputs: String,
    outputs: Option<Value>,
    expectations: Option<Value>,
    tags: Option<Value>,
    source: Option<String>,
    source_id: Option<String>,
    source_type: Option<String>,
    changed: bool,
}

fn text(value: &Option<Value>) -> Option<String> {
    value.as_ref().map(Value::to_string)
}

impl Held {
    fn from_row(row: &QueryResult) -> Result<Held, StoreError> {
        let parse = |col: &str| -> Result<Option<Value>, StoreError> {
            Ok(get::<Option<String>>(row, col)?
                .and_then(|t| serde_json::from_str::<Value>(&t).ok()))
        };
        Ok(Held {
            id: get(row, "id")?,
            position: get(row, "position")?,
            stored_bytes: get(row, "bytes")?,
            created_time: get(row, "created_time")?,
            created_by: get(row, "created_by")?,
            inputs: get(row, "inputs")?,
            outputs: parse("outputs")?,
            expectations: parse("expectations")?,
            tags: parse("tags")?,
            source: get(row, "source")?,
            source_id: get(row, "source_id")?,
            source_type: get(row, "source_type")?,
            changed: false,
        })
    }

    /// A record new to the dataset: as MLflow, one without outputs has
    /// empty ones, and its tags are at least empty.
    fn new(record: &NewRecord, position: i64, now: i64, username: &str) -> Held {
        Held {
            id: new_id("dr-"),
            position,
            stored_bytes: 0,
            created_time: now,
            created_by: Some(username.to_owned()),
            inputs: Value::Object(record.inputs.clone()).to_string(),
            outputs: match &record.outputs {
                None => Some(Value::Object(Map::new())),
                Some(Value::Null) => None,
                Some(v) => Some(v.clone()),
            },
            expectations: record.expectations.clone().map(Value::Object),
            tags: Some(Value::Object(record.tags.clone().unwrap_or_default())),
            source: record.source.as_ref().map(Value::to_string),
            source_id: record.source_id(),
            source_type: record.source_type(),
            changed: true,
        }
    }

    /// MLflow's merge: given outputs replace (null clears them); given
    /// expectations and tags are added, the new winning. The source stays.
    fn merge(&mut self, record: &NewRecord) {
        if let Some(outputs) = &record.outputs {
            self.outputs = (!outputs.is_null()).then(|| outputs.clone());
        }
        let add = |held: &mut Option<Value>, new: &Option<Map<String, Value>>| {
            if let Some(new) = new.as_ref().filter(|n| !n.is_empty()) {
                let mut map = match held.take() {
                    Some(Value::Object(m)) => m,
                    _ => Map::new(),
                };
                map.extend(new.clone());
                *held = Some(Value::Object(map));
            }
        };
        add(&mut self.expectations, &record.expectations);
        add(&mut self.tags, &record.tags);
        self.changed = true;
    }

    /// The bytes of the JSON it keeps, as the bounds count them.
    fn bytes(&self) -> i64 {
        let (outputs, expectations, tags) = (
            text(&self.outputs),
            text(&self.expectations),
            text(&self.tags),
        );
        bytes_of(&[
            Some(&self.inputs),
            outputs.as_deref(),
            expectations.as_deref(),
            tags.as_deref(),
            self.source.as_deref(),
        ])
    }
}

/// The lock every writer of a dataset's records takes (on PostgreSQL; on
/// SQLite one transaction writes at a time already), so that counts and
/// bounds are read and written by one at a time.
async fn lock_records(conn: &impl ConnectionTrait, id: &str) -> Result<(), StoreError> {
    lock_owner(
        conn,
        conn.get_database_backend(),
        &format!("evaluation_dataset_records:{id}"),
    )
    .await
}

impl Store {
    /// The dataset's owner and name.
    async fn dataset_row(
        &self,
        conn: &impl ConnectionTrait,
        id: &str,
    ) -> Result<(Owner, String), StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT name, user_id, team_id FROM evaluation_datasets WHERE id = ")
            .bind(id.to_owned());
        let row = conn
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| not_found(id))?;
        Ok((
            Owner::new(get(&row, "user_id")?, get(&row, "team_id")?),
            get(&row, "name")?,
        ))
    }

    /// May the user see (Read) or change (Change) the dataset? One they may
    /// not see does not exist for them.
    pub async fn dataset_as(
        &self,
        user: &User,
        id: &str,
        access: crate::Access,
    ) -> Result<(), StoreError> {
        let (owner, _) = self.dataset_row(self.connection(), id).await?;
        if !user.can_read(owner) {
            return Err(not_found(id));
        }
        if access == crate::Access::Change && !user.can_change(owner) {
            return Err(StoreError::Forbidden(format!(
                "evaluation dataset {id} is not yours: only its owner or an admin may change it"
            )));
        }
        Ok(())
    }

    /// Makes a dataset, shown in the given experiments (which the caller
    /// has checked exist).
    pub async fn create_dataset(
        &self,
        name: &str,
        tags: &[(String, String)],
        experiment_ids: &[i64],
        owner: Owner,
        username: &str,
    ) -> Result<EvaluationDataset, StoreError> {
        let id = new_id("d-");
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let now = now_millis();
            let mut sql = self.sql();
            sql.push("INSERT INTO evaluation_datasets (id, name, digest, created_time, last_update_time, created_by, last_updated_by, num_records, bytes, last_position, changes, user_id, team_id) VALUES (")
                .bind(id.clone())
                .push(", ")
                .bind(name.to_owned())
                .push(", ")
                .bind(digest(name, now, 0))
                .push(", ")
                .bind(now)
                .push(", ")
                .bind(now)
                .push(", ")
                .bind(username.to_owned())
                .push(", ")
                .bind(username.to_owned())
                .push(", 0, 0, 0, 0, ")
                .bind(owner.user_id)
                .push(", ")
                .bind(owner.team_id)
                .push(")");
            txn.execute_raw(sql.build()).await?;
            upsert_pairs(
                &txn,
                self.sql(),
                "evaluation_dataset_tags",
                &[("dataset_id", id.clone().into())],
                tags,
            )
            .await?;
            self.link_experiments(&txn, &id, experiment_ids).await?;
            txn.commit().await?;
        }
        self.get_dataset(&id).await
    }

    pub async fn get_dataset(&self, id: &str) -> Result<EvaluationDataset, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT * FROM evaluation_datasets WHERE id = ")
            .bind(id.to_owned());
        let row = self
            .connection()
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| not_found(id))?;
        let mut found = self.datasets_from(&[row]).await?;
        found.pop().ok_or_else(|| not_found(id))
    }

    /// Datasets of rows, with their tags.
    async fn datasets_from(
        &self,
        rows: &[QueryResult],
    ) -> Result<Vec<EvaluationDataset>, StoreError> {
        let ids: Vec<String> = rows
            .iter()
            .map(|r| get::<String>(r, "id"))
            .collect::<Result<_, _>>()?;
        let mut tags: std::collections::HashMap<String, Vec<(String, String)>> = Default::default();
        for chunk in ids.chunks(IN_CHUNK) {
            let mut sql = self.sql();
            sql.push(
                "SELECT dataset_id, key, value FROM evaluation_dataset_tags WHERE dataset_id IN ",
            )
            .bind_list(chunk.iter().cloned())
            .push(" ORDER BY key");
            for row in self.connection().query_all_raw(sql.build()).await? {
                tags.entry(get(&row, "dataset_id")?)
                    .or_default()
                    .push((get(&row, "key")?, get(&row, "value")?));
            }
        }
        rows.iter()
            .map(|row| {
                let id: String = get(row, "id")?;
                dataset_from(row, tags.remove(&id).unwrap_or_default())
            })
            .collect()
    }

    /// Deletes the dataset with its records; one already gone is no error.
    pub async fn delete_dataset(&self, id: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        lock_records(&txn, id).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM evaluation_datasets WHERE id = ")
            .bind(id.to_owned());
        txn.execute_raw(sql.build()).await?;
        txn.commit().await?;
        Ok(())
    }

    /// Datasets the viewer may see, matching the filter (`name`, times,
    /// `created_by`, `tags.*`), shown in one of `experiment_ids` when any,
    /// newest first unless ordered otherwise.
    pub async fn search_eval_datasets(
        &self,
        experiment_ids: &[i64],
        expr: Option<&Expr>,
        order: &[OrderBy],
        limit: u64,
        offset: u64,
        viewer: &Viewer,
    ) -> Result<Vec<EvaluationDataset>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT d.* FROM evaluation_datasets d WHERE 1 = 1");
        viewer.restrict(&mut sql, "d.user_id", "d.team_id", None);
        if !experiment_ids.is_empty() {
            sql.push(" AND d.id IN (SELECT dataset_id FROM evaluation_dataset_experiments WHERE experiment_id IN ")
                .bind_list(experiment_ids.iter().copied())
                .push(")");
        }
        if let Some(expr) = expr {
            sql.push(" AND ");
            filter(&mut sql, expr, Scope::EvaluationDatasets);
        }
        let mut terms = Vec::new();
        for o in order {
            let column = match &o.field {
                Field::Attr(Attribute::Name) => "d.name",
                Field::Attr(Attribute::CreationTime) => "d.created_time",
                Field::Attr(Attribute::LastUpdateTime) => "d.last_update_time",
                _ => {
                    return Err(StoreError::Rejected(
                        "Invalid order_by: use name, created_time or last_update_time".to_owned(),
                    ));
                }
            };
            terms.push(format!(
                "{column} {}",
                if o.ascending { "ASC" } else { "DESC" }
            ));
        }
        if terms.is_empty() {
            terms.push("d.created_time DESC".to_owned());
        }
        terms.push("d.id DESC".to_owned());
        sql.push(&format!(" ORDER BY {}", terms.join(", ")))
            .push(" LIMIT ")
            .bind(limit as i64)
            .push(" OFFSET ")
            .bind(offset as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        self.datasets_from(&rows).await
    }

    /// Sets tags, keeping the others.
    pub async fn set_dataset_tags(
        &self,
        id: &str,
        tags: &[(String, String)],
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        self.dataset_row(&txn, id).await?;
        upsert_pairs(
            &txn,
            self.sql(),
            "evaluation_dataset_tags",
            &[("dataset_id", id.to_owned().into())],
            tags,
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    /// Deletes a tag; one that is not there is no error.
    pub async fn delete_dataset_tag(&self, id: &str, key: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push("DELETE FROM evaluation_dataset_tags WHERE dataset_id = ")
            .bind(id.to_owned())
            .push(" AND key = ")
            .bind(key.to_owned());
        self.connection().execute_raw(sql.build()).await?;
        Ok(())
    }

    /// The experiments the dataset is shown in, by id.
    pub async fn dataset_experiment_ids(&self, id: &str) -> Result<Vec<i64>, StoreError> {
        self.dataset_row(self.connection(), id).await?;
        let mut sql = self.sql();
        sql.push("SELECT experiment_id FROM evaluation_dataset_experiments WHERE dataset_id = ")
            .bind(id.to_owned())
            .push(" ORDER BY experiment_id");
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| get(row, "experiment_id"))
            .collect()
    }

    async fn link_experiments(
        &self,
        conn: &impl ConnectionTrait,
        id: &str,
        experiment_ids: &[i64],
    ) -> Result<(), StoreError> {
        if experiment_ids.is_empty() {
            return Ok(());
        }
        lock_owner(
            conn,
            conn.get_database_backend(),
            &format!("evaluation_dataset_experiments:{id}"),
        )
        .await?;
        for chunk in experiment_ids.chunks(IN_CHUNK) {
            let mut sql = self.sql();
            sql.push(
                "INSERT INTO evaluation_dataset_experiments (dataset_id, experiment_id) VALUES ",
            );
            for (i, experiment) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.push("(")
                    .bind(id.to_owned())
                    .push(", ")
                    .bind(*experiment)
                    .push(")");
            }
            sql.push(" ON CONFLICT (dataset_id, experiment_id) DO NOTHING");
            conn.execute_raw(sql.build()).await?;
        }
        let held = held_rows(
            conn,
            "evaluation_dataset_experiments",
            &[("dataset_id", id.into())],
        )
        .await?;
        if held > MAX_DATASET_EXPERIMENTS {
            return Err(StoreError::Rejected(format!(
                "An evaluation dataset is shown in at most {MAX_DATASET_EXPERIMENTS} experiments; this would make it {held}: remove it from some first"
            )));
        }
        Ok(())
    }

    /// Shows the dataset in more experiments (which the caller has checked
    /// exist); those it is in already stay.
    pub async fn add_dataset_experiments(
        &self,
        id: &str,
        experiment_ids: &[i64],
    ) -> Result<EvaluationDataset, StoreError> {
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            self.dataset_row(&txn, id).await?;
            self.link_experiments(&txn, id, experiment_ids).await?;
            self.touch_dataset(&txn, id, None).await?;
            txn.commit().await?;
        }
        self.get_dataset(id).await
    }

    /// Takes the dataset out of experiments; one it is not in is no error.
    pub async fn remove_dataset_experiments(
        &self,
        id: &str,
        experiment_ids: &[i64],
    ) -> Result<EvaluationDataset, StoreError> {
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            self.dataset_row(&txn, id).await?;
            for chunk in experiment_ids.chunks(IN_CHUNK) {
                let mut sql = self.sql();
                sql.push("DELETE FROM evaluation_dataset_experiments WHERE dataset_id = ")
                    .bind(id.to_owned())
                    .push(" AND experiment_id IN ")
                    .bind_list(chunk.iter().copied());
                txn.execute_raw(sql.build()).await?;
            }
            self.touch_dataset(&txn, id, None).await?;
            txn.commit().await?;
        }
        self.get_dataset(id).await
    }

    /// Marks the dataset changed now; with `records`, also its record
    /// count, bytes held, digest, last number given and schema as they now
    /// are (the caller holds [`lock_records`]).
    async fn touch_dataset(
        &self,
        conn: &impl ConnectionTrait,
        id: &str,
        records: Option<RecordsChange<'_>>,
    ) -> Result<(), StoreError> {
        let now = now_millis();
        let mut sql = self.sql();
        sql.push("UPDATE evaluation_datasets SET last_update_time = ")
            .bind(now);
        if let Some(change) = records {
            let mut held = self.sql();
            held.push("SELECT changes FROM evaluation_datasets WHERE id = ")
                .bind(id.to_owned());
            let changes: i64 = match conn.query_one_raw(held.build()).await? {
                Some(row) => get::<i64>(&row, "changes")? + 1,
                None => 1,
            };
            sql.push(", changes = ")
                .bind(changes)
                .push(", digest = ")
                .bind(digest(change.name, now, changes))
                .push(", num_records = (SELECT COUNT(*) FROM evaluation_dataset_records WHERE dataset_id = ")
                .bind(id.to_owned())
                .push("), bytes = (SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) FROM evaluation_dataset_records WHERE dataset_id = ")
                .bind(id.to_owned())
                .push(")");
            if let Some(schema) = change.schema {
                sql.push(", schema_json = ").bind(schema);
            }
            if let Some(position) = change.last_position {
                sql.push(", last_position = ").bind(position);
            }
            if let Some(username) = change.username {
                sql.push(", last_updated_by = ").bind(username.to_owned());
            }
        }
        sql.push(" WHERE id = ").bind(id.to_owned());
        conn.execute_raw(sql.build()).await?;
        Ok(())
    }

    /// Merges records into the dataset, as MLflow does: a record whose
    /// inputs the dataset holds already (or that came earlier in the same
    /// request) takes the new outputs (when given) and adds the new
    /// expectations and tags to its own; others are added. Answers how many
    /// were inserted and how many updated. Refused whole, before anything
    /// is written, when a record or the dataset would then hold more than
    /// its bounds.
    pub async fn upsert_dataset_records(
        &self,
        id: &str,
        records: &[NewRecord],
        username: &str,
    ) -> Result<(i64, i64), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        lock_records(&txn, id).await?;
        let (_, name) = self.dataset_row(&txn, id).await?;
        let mut sql = self.sql();
        sql.push("SELECT schema_json, last_position, (SELECT COUNT(*) FROM evaluation_dataset_records WHERE dataset_id = ")
            .bind(id.to_owned())
            .push(") AS held, (SELECT CAST(COALESCE(SUM(bytes), 0) AS BIGINT) FROM evaluation_dataset_records WHERE dataset_id = ")
            .bind(id.to_owned())
            .push(") AS held_bytes FROM evaluation_datasets WHERE id = ")
            .bind(id.to_owned());
        let row = txn
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| not_found(id))?;
        let schema: Option<String> = get(&row, "schema_json")?;
        let mut position: i64 = get(&row, "last_position")?;
        let held_records: i64 = get(&row, "held")?;
        let held_bytes: i64 = get(&row, "held_bytes")?;

        // The records these inputs have already, read in chunks.
        let hashes: Vec<String> = records.iter().map(NewRecord::input_hash).collect();
        let mut unique: Vec<&String> = hashes.iter().collect();
        unique.sort();
        unique.dedup();
        let mut held: HashMap<String, Held> = HashMap::new();
        for chunk in unique.chunks(IN_CHUNK) {
            let mut sql = self.sql();
            sql.push("SELECT * FROM evaluation_dataset_records WHERE dataset_id = ")
                .bind(id.to_owned())
                .push(" AND input_hash IN ")
                .bind_list(chunk.iter().map(|h| (*h).clone()));
            for row in txn.query_all_raw(sql.build()).await? {
                held.insert(get(&row, "input_hash")?, Held::from_row(&row)?);
            }
        }

        let now = now_millis();
        let (mut inserted, mut updated) = (0, 0);
        // The changed records in the order they first came.
        let mut changed: Vec<String> = Vec::new();
        for (i, (record, hash)) in records.iter().zip(&hashes).enumerate() {
            if let Some(row) = held.get_mut(hash) {
                if !row.changed {
                    changed.push(hash.clone());
                }
                row.merge(record);
                updated += 1;
            } else {
                position += 1;
                changed.push(hash.clone());
                inserted += 1;
                held.insert(hash.clone(), Held::new(record, position, now, username));
            }
            let bytes = held[hash].bytes();
            if bytes > MAX_RECORD_BYTES {
                return Err(StoreError::Rejected(format!(
                    "records[{i}] would make its record hold {bytes} bytes of JSON, more than the {MAX_RECORD_BYTES} one record may hold; keep long documents in artifacts and refer to them"
                )));
            }
        }
        if held_records + inserted > MAX_DATASET_RECORDS {
            return Err(StoreError::Rejected(format!(
                "Evaluation dataset '{id}' would hold {} records, more than the {MAX_DATASET_RECORDS} one dataset may hold; make a second dataset or delete some records",
                held_records + inserted
            )));
        }
        let bytes_after = held_bytes
            + changed
                .iter()
                .map(|h| held[h].bytes() - held[h].stored_bytes)
                .sum::<i64>();
        if bytes_after > MAX_DATASET_BYTES {
            return Err(StoreError::Rejected(format!(
                "The records of evaluation dataset '{id}' would hold {bytes_after} bytes of JSON, more than the {MAX_DATASET_BYTES} one dataset may hold; keep long documents in artifacts and refer to them, or make a second dataset"
            )));
        }

        // New and changed records, many to a statement (16 values each:
        // well within every backend's bound on parameters); one already
        // there is matched by its inputs and takes the merged fields.
        for chunk in changed.chunks(100) {
            let mut sql = self.sql();
            sql.push("INSERT INTO evaluation_dataset_records (id, dataset_id, input_hash, inputs, outputs, expectations, tags, source, source_id, source_type, created_time, last_update_time, created_by, last_updated_by, bytes, position) VALUES ");
            for (i, hash) in chunk.iter().enumerate() {
                let row = &held[hash];
                if i > 0 {
                    sql.push(", ");
                }
                sql.push("(")
                    .bind(row.id.clone())
                    .push(", ")
                    .bind(id.to_owned())
                    .push(", ")
                    .bind(hash.clone())
                    .push(", ")
                    .bind(row.inputs.clone())
                    .push(", ")
                    .bind(text(&row.outputs))
                    .push(", ")
                    .bind(text(&row.expectations))
                    .push(", ")
                    .bind(text(&row.tags))
                    .push(", ")
                    .bind(row.source.clone())
                    .push(", ")
                    .bind(row.source_id.clone())
                    .push(", ")
                    .bind(row.source_type.clone())
                    .push(", ")
                    .bind(row.created_time)
                    .push(", ")
                    .bind(now)
                    .push(", ")
                    .bind(row.created_by.clone())
                    .push(", ")
                    .bind(username.to_owned())
                    .push(", ")
                    .bind(row.bytes())
                    .push(", ")
                    .bind(row.position)
                    .push(")");
            }
            sql.push(" ON CONFLICT (dataset_id, input_hash) DO UPDATE SET outputs = excluded.outputs, expectations = excluded.expectations, tags = excluded.tags, last_update_time = excluded.last_update_time, last_updated_by = excluded.last_updated_by, bytes = excluded.bytes");
            txn.execute_raw(sql.build()).await?;
        }

        let schema = grow_schema(schema.as_deref(), records);
        self.touch_dataset(
            &txn,
            id,
            Some(RecordsChange {
                name: &name,
                schema,
                last_position: Some(position),
                username: Some(username),
            }),
        )
        .await?;
        txn.commit().await?;
        Ok((inserted, updated))
    }

    /// A page of the dataset's records in the order they were added, from
    /// after `after` (the number of the last one read): at most `limit`,
    /// and fewer when they would carry more than [`MAX_PAGE_BYTES`] (always
    /// one). The page's end is found from the records' sizes before any is
    /// read whole.
    pub async fn dataset_records(
        &self,
        id: &str,
        limit: u64,
        after: Option<i64>,
    ) -> Result<RecordPage, StoreError> {
        self.dataset_row(self.connection(), id).await?;
        let after = after.unwrap_or(0);
        let mut sql = self.sql();
        sql.push("SELECT position, bytes FROM evaluation_dataset_records WHERE dataset_id = ")
            .bind(id.to_owned())
            .push(" AND position > ")
            .bind(after)
            .push(" ORDER BY position LIMIT ")
            .bind(limit as i64 + 1);
        let sizes = self.connection().query_all_raw(sql.build()).await?;
        let mut more = sizes.len() as u64 > limit;
        let mut last = None;
        let mut bytes = 0;
        for row in sizes.iter().take(limit as usize) {
            let record_bytes: i64 = get(row, "bytes")?;
            if last.is_some() && bytes + record_bytes > MAX_PAGE_BYTES {
                more = true;
                break;
            }
            bytes += record_bytes;
            last = Some(get::<i64>(row, "position")?);
        }
        let Some(last) = last else {
            return Ok(RecordPage {
                records: Vec::new(),
                next: None,
            });
        };
        let mut sql = self.sql();
        sql.push("SELECT * FROM evaluation_dataset_records WHERE dataset_id = ")
            .bind(id.to_owned())
            .push(" AND position > ")
            .bind(after)
            .push(" AND position <= ")
            .bind(last)
            .push(" ORDER BY position");
        let records = self
            .connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(record_from)
            .collect::<Result<Vec<_>, _>>()?;
        Ok(RecordPage {
            records,
            next: more.then_some(last),
        })
    }

    /// Deletes records of the dataset by id; answers how many went.
    pub async fn delete_dataset_records(
        &self,
        id: &str,
        record_ids: &[String],
    ) -> Result<u64, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        lock_records(&txn, id).await?;
        let (_, name) = self.dataset_row(&txn, id).await?;
        let mut deleted = 0;
        for chunk in record_ids.chunks(IN_CHUNK) {
            let mut sql = self.sql();
            sql.push("DELETE FROM evaluation_dataset_records WHERE dataset_id = ")
                .bind(id.to_owned())
                .push(" AND id IN ")
                .bind_list(chunk.iter().cloned());
            deleted += txn.execute_raw(sql.build()).await?.rows_affected();
        }
        if deleted > 0 {
            self.touch_dataset(
                &txn,
                id,
                Some(RecordsChange {
                    name: &name,
                    schema: None,
                    last_position: None,
                    username: None,
                }),
            )
            .await?;
        }
        txn.commit().await?;
        Ok(deleted)
    }
}

/// What a change of records sets on its dataset besides the counts.
struct RecordsChange<'a> {
    name: &'a str,
    schema: Option<String>,
    last_position: Option<i64>,
    username: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(inputs: Value) -> NewRecord {
        NewRecord {
            inputs: inputs.as_object().cloned().unwrap(),
            ..Default::default()
        }
    }

    #[test]
    fn inputs_are_keyed_whatever_the_order_of_their_fields() {
        let a = record(json!({"q": "why?", "n": 1}));
        let b = record(json!({"n": 1, "q": "why?"}));
        assert_eq!(a.input_hash(), b.input_hash());
        assert_ne!(
            a.input_hash(),
            record(json!({"q": "why?", "n": 2})).input_hash()
        );
        assert_eq!(a.input_hash().len(), 64);
    }

    #[test]
    fn the_schema_keeps_the_first_type_of_each_field_and_grows() {
        let mut first = record(json!({"q": "why?", "k": 3}));
        first.expectations = Some(
            json!({"answer": "because", "score": 0.5})
                .as_object()
                .cloned()
                .unwrap(),
        );
        first.outputs = Some(json!("text"));
        let schema = grow_schema(None, &[first]).unwrap();
        let s: Value = serde_json::from_str(&schema).unwrap();
        assert_eq!(s["inputs"], json!({"q": "string", "k": "integer"}));
        assert_eq!(
            s["expectations"],
            json!({"answer": "string", "score": "float"})
        );
        assert_eq!(s["outputs"], json!("string"));
        assert_eq!(s["version"], json!("1.0"));
        let mut second = record(json!({"q": 5, "flag": true, "docs": [1]}));
        second.outputs = Some(json!({"a": null}));
        let grown: Value =
            serde_json::from_str(&grow_schema(Some(&schema), &[second]).unwrap()).unwrap();
        assert_eq!(
            grown["inputs"],
            json!({"q": "string", "k": "integer", "flag": "boolean", "docs": "array"})
        );
        // Outputs were a plain value: an object later adds nothing to it.
        assert_eq!(grown["outputs"], json!("string"));
        assert_eq!(grow_schema(None, &[]), None);
    }

    #[test]
    fn a_records_source_names_its_trace_or_its_own_id() {
        let mut r = record(json!({"q": 1}));
        r.source = Some(json!({"source_type": "TRACE", "source_data": {"trace_id": "tr-1"}}));
        assert_eq!(r.source_id().as_deref(), Some("tr-1"));
        assert_eq!(r.source_type().as_deref(), Some("TRACE"));
        r.source = Some(json!({"source_type": "HUMAN", "source_data": {"source_id": "ana"}}));
        assert_eq!(r.source_id().as_deref(), Some("ana"));
        r.source = Some(json!({"source_type": "CODE", "source_data": {}}));
        assert_eq!(r.source_id(), None);
    }

    #[test]
    fn digests_change_with_time_and_with_each_change() {
        assert_eq!(digest("qa", 1, 0).len(), 8);
        assert_ne!(digest("qa", 1, 0), digest("qa", 2, 0));
        assert_ne!(digest("qa", 1, 0), digest("qa", 1, 1));
    }
}
