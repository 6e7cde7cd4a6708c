//! MLflow 3's run inputs and outputs (datasets, models) and logged models:
//! their params, tags, metrics and search, with MLflow's rules.

use std::collections::HashMap;

use sea_orm::{ConnectionTrait, EntityTrait, QueryResult};
use trainyard_domain::identity::{Owner, User};
use trainyard_domain::query::{Attribute, Expr, Field};
use trainyard_domain::tracking::{
    Dataset, DatasetInput, DatasetSummary, LoggedModel, ModelMetric, Point, RunIo,
};

use crate::sql::upsert_pairs;
use crate::tracking::get;
use crate::{Store, StoreError, Viewer, now_millis};

/// How many dataset summaries one search returns, as MLflow.
pub const MAX_DATASET_SUMMARIES: usize = 1000;

/// The newest metric values of one logged model that a read of it carries
/// (get, search, a run's models). MLflow returns every one; a model that a
/// training loop logs against could hold millions. Older values stay
/// stored, and filters and ordering still see them.
pub const MAX_MODEL_METRICS_READ: usize = 10_000;

/// The metric values one page of a logged-model search carries in all: a
/// page that would carry more ends early (at least one model), and its
/// next page goes on from there.
pub const MAX_PAGE_MODEL_METRICS: usize = 100_000;

/// A page of logged models, and where the next one starts, if any.
#[derive(Debug, Clone, Default)]
pub struct ModelPage {
    pub models: Vec<LoggedModel>,
    pub next_offset: Option<u64>,
}

/// The context tag of a dataset input.
pub const DATASET_CONTEXT_TAG: &str = "mlflow.data.context";

/// What `create_logged_model` needs.
#[derive(Debug, Clone, Default)]
pub struct NewModel {
    pub experiment_id: i64,
    pub name: Option<String>,
    pub model_type: String,
    pub source_run_id: Option<String>,
    pub owner: Owner,
    pub tags: Vec<(String, String)>,
    pub params: Vec<(String, String)>,
}

/// A metric logged against a model, as `log-batch` carries it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelMetricIn {
    pub model_id: String,
    pub key: String,
    pub point: Point,
    pub dataset_name: Option<String>,
    pub dataset_digest: Option<String>,
}

/// One `order_by` element of a logged-model search.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelOrder {
    /// An attribute, or `Field::Metric` (MLflow orders by metrics only).
    pub field: Field,
    pub ascending: bool,
    pub dataset_name: Option<String>,
    pub dataset_digest: Option<String>,
}

fn model_not_found(model_id: &str) -> StoreError {
    StoreError::NotFound(format!("Logged model with ID '{model_id}' not found."))
}

fn tags_json(tags: &[(String, String)]) -> String {
    serde_json::to_string(tags).unwrap_or_else(|_| "[]".to_owned())
}

fn tags_from_json(text: &str) -> Vec<(String, String)> {
    serde_json::from_str(text).unwrap_or_default()
}

impl Store {
    // ------------------------------------------------------------- run inputs

    /// Records datasets and models a run read. A dataset is kept once per
    /// experiment, name and digest (the first record's source and schema
    /// stay); a run lists each dataset once, with the tags it first gave.
    pub async fn log_run_inputs(
        &self,
        run_id: &str,
        datasets: &[DatasetInput],
        models: &[String],
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let experiment_id = self.active_run_experiment(&txn, run_id).await?;
        self.models_exist(&txn, models).await?;
        let mut position = self.count_of(&txn, "run_datasets", run_id).await?;
        for input in datasets {
            let d = &input.dataset;
            let mut sql = self.sql();
            sql.push("INSERT INTO datasets (id, experiment_id, name, digest, source_type, source, schema, profile) VALUES (")
                .bind(uuid::Uuid::new_v4().simple().to_string())
                .push(", ")
                .bind(experiment_id)
                .push(", ")
                .bind(d.name.clone())
                .push(", ")
                .bind(d.digest.clone())
                .push(", ")
                .bind(d.source_type.clone())
                .push(", ")
                .bind(d.source.clone())
                .push(", ")
                .bind(d.schema.clone())
                .push(", ")
                .bind(d.profile.clone())
                .push(") ON CONFLICT (experiment_id, name, digest) DO NOTHING");
            txn.execute_raw(sql.build()).await?;
            let mut sql = self.sql();
            sql.push("SELECT id FROM datasets WHERE experiment_id = ")
                .bind(experiment_id)
                .push(" AND name = ")
                .bind(d.name.clone())
                .push(" AND digest = ")
                .bind(d.digest.clone());
            let row = txn
                .query_one_raw(sql.build())
                .await?
                .ok_or_else(|| StoreError::NotFound(format!("dataset {}", d.name)))?;
            let dataset_id: String = get(&row, "id")?;
            let mut sql = self.sql();
            sql.push("INSERT INTO run_datasets (run_id, dataset_id, position, tags) VALUES (")
                .bind(run_id.to_owned())
                .push(", ")
                .bind(dataset_id)
                .push(", ")
                .bind(position)
                .push(", ")
                .bind(tags_json(&input.tags))
                .push(") ON CONFLICT (run_id, dataset_id) DO NOTHING");
            if txn.execute_raw(sql.build()).await?.rows_affected() > 0 {
                position += 1;
            }
        }
        self.link_models(
            &txn,
            run_id,
            "input",
            models.iter().map(|m| (m.as_str(), 0)),
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    /// Records models a run wrote, with the step at which it wrote each.
    pub async fn log_run_outputs(
        &self,
        run_id: &str,
        models: &[(String, i64)],
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        self.active_run_experiment(&txn, run_id).await?;
        let ids: Vec<String> = models.iter().map(|(m, _)| m.clone()).collect();
        self.models_exist(&txn, &ids).await?;
        self.link_models(
            &txn,
            run_id,
            "output",
            models.iter().map(|(m, s)| (m.as_str(), *s)),
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    async fn link_models(
        &self,
        txn: &impl ConnectionTrait,
        run_id: &str,
        direction: &str,
        models: impl Iterator<Item = (&str, i64)>,
    ) -> Result<(), StoreError> {
        let mut position = self.count_of(txn, "run_models", run_id).await?;
        for (model_id, step) in models {
            let mut sql = self.sql();
            sql.push(
                "INSERT INTO run_models (run_id, model_id, direction, step, position) VALUES (",
            )
            .bind(run_id.to_owned())
            .push(", ")
            .bind(model_id.to_owned())
            .push(", ")
            .bind(direction.to_owned())
            .push(", ")
            .bind(step)
            .push(", ")
            .bind(position)
            .push(") ON CONFLICT (run_id, model_id, direction) DO NOTHING");
            if txn.execute_raw(sql.build()).await?.rows_affected() > 0 {
                position += 1;
            }
        }
        Ok(())
    }

    async fn count_of(
        &self,
        conn: &impl ConnectionTrait,
        table: &str,
        run_id: &str,
    ) -> Result<i32, StoreError> {
        let n = crate::sql::held_rows(conn, table, &[("run_id", run_id.into())]).await?;
        Ok(i32::try_from(n).unwrap_or(i32::MAX))
    }

    /// The experiment of a run that may take inputs and outputs.
    async fn active_run_experiment(
        &self,
        conn: &impl ConnectionTrait,
        run_id: &str,
    ) -> Result<i64, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT experiment_id, lifecycle_stage FROM runs WHERE id = ")
            .bind(run_id.to_owned());
        let row = conn
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("Run with id={run_id} not found")))?;
        let stage: String = get(&row, "lifecycle_stage")?;
        if stage != "active" {
            return Err(StoreError::Rejected(format!(
                "The run {run_id} must be in the 'active' state. Current state is {stage}."
            )));
        }
        get(&row, "experiment_id")
    }

    async fn models_exist(
        &self,
        conn: &impl ConnectionTrait,
        ids: &[String],
    ) -> Result<(), StoreError> {
        if ids.is_empty() {
            return Ok(());
        }
        let mut sql = self.sql();
        sql.push("SELECT id FROM logged_models WHERE lifecycle_stage = 'active' AND id IN ")
            .bind_list(ids.iter().cloned());
        let found: Vec<String> = conn
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| get(row, "id"))
            .collect::<Result<_, _>>()?;
        match ids.iter().find(|id| !found.contains(id)) {
            Some(missing) => Err(model_not_found(missing)),
            None => Ok(()),
        }
    }

    /// The datasets and models of each run, for `runs/get` and search.
    pub async fn run_io(&self, run_ids: &[String]) -> Result<HashMap<String, RunIo>, StoreError> {
        let mut out: HashMap<String, RunIo> = HashMap::new();
        for chunk in run_ids.chunks(500) {
            let mut sql = self.sql();
            sql.push(
                "SELECT rd.run_id, rd.tags, d.name, d.digest, d.source_type, d.source, d.schema, d.profile \
                 FROM run_datasets rd JOIN datasets d ON d.id = rd.dataset_id WHERE rd.run_id IN ",
            )
            .bind_list(chunk.iter().cloned())
            .push(" ORDER BY rd.run_id, rd.position");
            for row in self.connection().query_all_raw(sql.build()).await? {
                let run_id: String = get(&row, "run_id")?;
                let tags: String = get(&row, "tags")?;
                out.entry(run_id).or_default().datasets.push(DatasetInput {
                    dataset: Dataset {
                        name: get(&row, "name")?,
                        digest: get(&row, "digest")?,
                        source_type: get(&row, "source_type")?,
                        source: get(&row, "source")?,
                        schema: get(&row, "schema")?,
                        profile: get(&row, "profile")?,
                    },
                    tags: tags_from_json(&tags),
                });
            }
            let mut sql = self.sql();
            sql.push("SELECT run_id, model_id, direction, step FROM run_models WHERE run_id IN ")
                .bind_list(chunk.iter().cloned())
                .push(" ORDER BY run_id, position");
            for row in self.connection().query_all_raw(sql.build()).await? {
                let run_id: String = get(&row, "run_id")?;
                let model_id: String = get(&row, "model_id")?;
                let direction: String = get(&row, "direction")?;
                let io = out.entry(run_id).or_default();
                if direction == "input" {
                    io.model_inputs.push(model_id);
                } else {
                    io.model_outputs.push((model_id, get(&row, "step")?));
                }
            }
        }
        Ok(out)
    }

    /// The datasets the experiments' runs used, one per name, digest and
    /// context, as far as the viewer may see the runs (at most
    /// [`MAX_DATASET_SUMMARIES`]).
    pub async fn search_datasets(
        &self,
        experiment_ids: &[i64],
        viewer: &Viewer,
    ) -> Result<Vec<DatasetSummary>, StoreError> {
        if experiment_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = self.sql();
        sql.push(
            "SELECT DISTINCT d.experiment_id, d.name, d.digest, rd.tags FROM datasets d \
             JOIN run_datasets rd ON rd.dataset_id = d.id JOIN runs r ON r.id = rd.run_id \
             WHERE d.experiment_id IN ",
        )
        .int_list(experiment_ids);
        viewer.restrict(&mut sql, "r.user_id", "r.team_id", None);
        sql.push(" ORDER BY d.experiment_id, d.name, d.digest LIMIT 100000");
        let mut out: Vec<DatasetSummary> = Vec::new();
        for row in self.connection().query_all_raw(sql.build()).await? {
            let tags: String = get(&row, "tags")?;
            let context = tags_from_json(&tags)
                .into_iter()
                .find(|(k, _)| k == DATASET_CONTEXT_TAG)
                .map(|(_, v)| v);
            let summary = DatasetSummary {
                experiment_id: get(&row, "experiment_id")?,
                name: get(&row, "name")?,
                digest: get(&row, "digest")?,
                context,
            };
            if !out.contains(&summary) {
                out.push(summary);
                if out.len() == MAX_DATASET_SUMMARIES {
                    break;
                }
            }
        }
        Ok(out)
    }

    // ---------------------------------------------------------- logged models

    /// Creates a logged model, PENDING until its artifacts are finalized. It
    /// is filed under its experiment's team, as runs are.
    pub async fn create_logged_model(&self, new: NewModel) -> Result<LoggedModel, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let experiment = crate::entity::experiment::Entity::find_by_id(new.experiment_id)
            .one(&txn)
            .await?
            .ok_or_else(|| {
                StoreError::NotFound(format!(
                    "No Experiment with id={} exists",
                    new.experiment_id
                ))
            })?;
        if experiment.lifecycle_stage != "active" {
            return Err(StoreError::Rejected(format!(
                "The experiment {} must be in the 'active' state. Current state is {}.",
                new.experiment_id, experiment.lifecycle_stage
            )));
        }
        if let Some(run_id) = &new.source_run_id {
            let run_experiment = self.active_run_experiment(&txn, run_id).await?;
            if run_experiment != new.experiment_id {
                return Err(StoreError::Rejected(format!(
                    "The source run {run_id} belongs to experiment {run_experiment}, not to experiment {}",
                    new.experiment_id
                )));
            }
        }
        let model_id = format!("m-{}", uuid::Uuid::new_v4().simple());
        let artifact_location = format!(
            "{}/models/{model_id}/artifacts",
            experiment.artifact_location.trim_end_matches('/')
        );
        let name = new
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(crate::tracking::random_run_name);
        let team_id = experiment.team_id.or(new.owner.team_id);
        let now = now_millis();
        let mut sql = self.sql();
        sql.push("INSERT INTO logged_models (id, experiment_id, name, artifact_location, creation_time, last_update_time, status, status_message, model_type, source_run_id, user_id, team_id, lifecycle_stage) VALUES (")
            .bind(model_id.clone())
            .push(", ")
            .bind(new.experiment_id)
            .push(", ")
            .bind(name)
            .push(", ")
            .bind(artifact_location)
            .push(", ")
            .bind(now)
            .push(", ")
            .bind(now)
            .push(", 'PENDING', '', ")
            .bind(new.model_type.clone())
            .push(", ")
            .bind(new.source_run_id.clone())
            .push(", ")
            .bind(new.owner.user_id)
            .push(", ")
            .bind(team_id)
            .push(", 'active')");
        txn.execute_raw(sql.build()).await?;
        upsert_pairs(
            &txn,
            self.sql(),
            "logged_model_params",
            &[("model_id", model_id.to_owned().into())],
            &new.params,
        )
        .await?;
        upsert_pairs(
            &txn,
            self.sql(),
            "logged_model_tags",
            &[("model_id", model_id.to_owned().into())],
            &new.tags,
        )
        .await?;
        txn.commit().await?;
        self.get_logged_model(&model_id).await
    }

    /// A logged model with its tags, params and metrics; deleted ones are
    /// not found.
    pub async fn get_logged_model(&self, model_id: &str) -> Result<LoggedModel, StoreError> {
        self.load_logged_models(&[model_id.to_owned()])
            .await?
            .pop()
            .ok_or_else(|| model_not_found(model_id))
    }

    /// Who owns a model (for access), if it exists and is not deleted.
    pub async fn logged_model_owner(&self, model_id: &str) -> Result<Owner, StoreError> {
        let mut sql = self.sql();
        sql.push(
            "SELECT user_id, team_id FROM logged_models WHERE lifecycle_stage = 'active' AND id = ",
        )
        .bind(model_id.to_owned());
        let row = self
            .connection()
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| model_not_found(model_id))?;
        Ok(Owner::new(get(&row, "user_id")?, get(&row, "team_id")?))
    }

    /// May the user see (Read) or change (Change) the model? As for runs:
    /// one they may not see does not exist for them.
    pub async fn logged_model_as(
        &self,
        user: &User,
        model_id: &str,
        access: crate::Access,
    ) -> Result<(), StoreError> {
        let owner = self.logged_model_owner(model_id).await?;
        if !user.can_read(owner) {
            return Err(model_not_found(model_id));
        }
        if access == crate::Access::Change && !user.can_change(owner) {
            return Err(StoreError::Forbidden(format!(
                "logged model {model_id} is not yours: only its owner or an admin may change it"
            )));
        }
        Ok(())
    }

    /// The logged models a run made (its source run) or read or wrote, in
    /// the order they were made: the first 1,000, and of those no more than
    /// carry [`MAX_PAGE_MODEL_METRICS`] metric values together.
    pub async fn logged_models_of_run(&self, run_id: &str) -> Result<Vec<LoggedModel>, StoreError> {
        let mut sql = self.sql();
        sql.push(
            "SELECT id FROM logged_models WHERE lifecycle_stage = 'active' AND (source_run_id = ",
        )
        .bind(run_id.to_owned())
        .push(" OR id IN (SELECT model_id FROM run_models WHERE run_id = ")
        .bind(run_id.to_owned())
        .push(")) ORDER BY creation_time, id LIMIT 1000");
        let mut ids: Vec<String> = self
            .connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| get(row, "id"))
            .collect::<Result<_, _>>()?;
        // As a search page: no more metric values than one carries.
        let fit = self.models_within_metric_budget(&ids).await?;
        ids.truncate(fit);
        self.load_logged_models(&ids).await
    }

    /// The (experiment, model) of every logged model a user owns, deleted
    /// ones too: where their artifacts are.
    pub async fn logged_models_owned_by(
        &self,
        user_id: i64,
    ) -> Result<Vec<(i64, String)>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT experiment_id, id FROM logged_models WHERE user_id = ")
            .bind(user_id);
        self.connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| Ok((get(row, "experiment_id")?, get(row, "id")?)))
            .collect()
    }

    /// The experiment and source run of a model, deleted ones too (their
    /// artifacts stay on disk until collected).
    pub async fn logged_model_place(
        &self,
        model_id: &str,
    ) -> Result<Option<(i64, Option<String>)>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT experiment_id, source_run_id FROM logged_models WHERE id = ")
            .bind(model_id.to_owned());
        match self.connection().query_one_raw(sql.build()).await? {
            Some(row) => Ok(Some((
                get(&row, "experiment_id")?,
                get(&row, "source_run_id")?,
            ))),
            None => Ok(None),
        }
    }

    async fn touch_model(
        &self,
        conn: &impl ConnectionTrait,
        model_id: &str,
        set: &str,
        value: Option<String>,
    ) -> Result<(), StoreError> {
        let mut sql = self.sql();
        sql.push("UPDATE logged_models SET last_update_time = ")
            .bind(now_millis());
        if let Some(value) = value {
            sql.push(&format!(", {set} = ")).bind(value);
        }
        sql.push(" WHERE lifecycle_stage = 'active' AND id = ")
            .bind(model_id.to_owned());
        if conn.execute_raw(sql.build()).await?.rows_affected() == 0 {
            return Err(model_not_found(model_id));
        }
        Ok(())
    }

    /// Sets a model's status (READY once its artifacts are uploaded, or
    /// FAILED).
    pub async fn finalize_logged_model(
        &self,
        model_id: &str,
        status: &str,
    ) -> Result<LoggedModel, StoreError> {
        {
            let _turn = self.write_turn().await;
            self.touch_model(
                self.connection(),
                model_id,
                "status",
                Some(status.to_owned()),
            )
            .await?;
        }
        self.get_logged_model(model_id).await
    }

    /// Marks a model deleted: it is no longer found or searched.
    pub async fn delete_logged_model(&self, model_id: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        self.touch_model(
            self.connection(),
            model_id,
            "lifecycle_stage",
            Some("deleted".to_owned()),
        )
        .await
    }

    /// Sets tags on a model (last write wins).
    pub async fn set_logged_model_tags(
        &self,
        model_id: &str,
        tags: &[(String, String)],
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        self.touch_model(&txn, model_id, "", None).await?;
        upsert_pairs(
            &txn,
            self.sql(),
            "logged_model_tags",
            &[("model_id", model_id.to_owned().into())],
            tags,
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    pub async fn delete_logged_model_tag(
        &self,
        model_id: &str,
        key: &str,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        self.touch_model(&txn, model_id, "", None).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM logged_model_tags WHERE model_id = ")
            .bind(model_id.to_owned())
            .push(" AND key = ")
            .bind(key.to_owned());
        if txn.execute_raw(sql.build()).await?.rows_affected() == 0 {
            return Err(StoreError::NotFound(format!(
                "No tag with key '{key}' found for model with ID '{model_id}'."
            )));
        }
        txn.commit().await?;
        Ok(())
    }

    /// Logs params of a model. A param keeps its first value, as a run's:
    /// a different value for a key already set is refused.
    pub async fn log_logged_model_params(
        &self,
        model_id: &str,
        params: &[(String, String)],
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        self.touch_model(&txn, model_id, "", None).await?;
        let keys: Vec<String> = params.iter().map(|(k, _)| k.clone()).collect();
        if !keys.is_empty() {
            let mut sql = self.sql();
            sql.push("SELECT key, value FROM logged_model_params WHERE model_id = ")
                .bind(model_id.to_owned())
                .push(" AND key IN ")
                .bind_list(keys);
            for row in txn.query_all_raw(sql.build()).await? {
                let key: String = get(&row, "key")?;
                let old: String = get(&row, "value")?;
                if let Some((_, new)) = params.iter().find(|(k, v)| *k == key && *v != old) {
                    return Err(StoreError::Rejected(format!(
                        "Changing param values is not allowed. Param with key='{key}' was already logged with value='{old}' for model ID='{model_id}'. Attempted logging new value '{new}'."
                    )));
                }
            }
        }
        upsert_pairs(
            &txn,
            self.sql(),
            "logged_model_params",
            &[("model_id", model_id.to_owned().into())],
            params,
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    /// Keeps metrics that a run logged against models (`model_id` on a
    /// metric of `log-batch`). Each model must exist and be in the run's
    /// experiment.
    pub async fn log_model_metrics(
        &self,
        run_id: &str,
        metrics: &[ModelMetricIn],
    ) -> Result<(), StoreError> {
        if metrics.is_empty() {
            return Ok(());
        }
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let experiment_id = self.active_run_experiment(&txn, run_id).await?;
        let mut ids: Vec<String> = metrics.iter().map(|m| m.model_id.clone()).collect();
        ids.sort();
        ids.dedup();
        self.models_exist(&txn, &ids).await?;
        let mut sql = self.sql();
        sql.push("SELECT id FROM logged_models WHERE experiment_id <> ")
            .bind(experiment_id)
            .push(" AND id IN ")
            .bind_list(ids.iter().cloned());
        if let Some(row) = txn.query_one_raw(sql.build()).await? {
            let other: String = get(&row, "id")?;
            return Err(StoreError::Rejected(format!(
                "Logged model {other} belongs to another experiment than run {run_id}; log its metrics from a run of its own experiment"
            )));
        }
        for chunk in metrics.chunks(200) {
            let mut sql = self.sql();
            sql.push("INSERT INTO logged_model_metrics (model_id, key, value, timestamp, step, run_id, dataset_name, dataset_digest) VALUES ");
            for (i, m) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                let value = (!m.point.value.is_nan()).then_some(m.point.value);
                sql.push("(")
                    .bind(m.model_id.clone())
                    .push(", ")
                    .bind(m.key.clone())
                    .push(", ")
                    .bind(value)
                    .push(", ")
                    .bind(m.point.timestamp)
                    .push(", ")
                    .bind(m.point.step)
                    .push(", ")
                    .bind(run_id.to_owned())
                    .push(", ")
                    .bind(m.dataset_name.clone())
                    .push(", ")
                    .bind(m.dataset_digest.clone())
                    .push(")");
            }
            txn.execute_raw(sql.build()).await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// Models by id (active ones), in the order given, whole.
    pub async fn load_logged_models(&self, ids: &[String]) -> Result<Vec<LoggedModel>, StoreError> {
        let mut models: Vec<LoggedModel> = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(500) {
            let mut sql = self.sql();
            sql.push("SELECT * FROM logged_models WHERE lifecycle_stage = 'active' AND id IN ")
                .bind_list(chunk.iter().cloned());
            let start = models.len();
            for row in self.connection().query_all_raw(sql.build()).await? {
                models.push(model_from_row(&row)?);
            }
            let index: HashMap<String, usize> = models[start..]
                .iter()
                .enumerate()
                .map(|(i, m)| (m.model_id.clone(), start + i))
                .collect();
            for table in ["logged_model_params", "logged_model_tags"] {
                let mut sql = self.sql();
                sql.push(&format!(
                    "SELECT model_id, key, value FROM {table} WHERE model_id IN "
                ))
                .bind_list(chunk.iter().cloned())
                .push(" ORDER BY key");
                for row in self.connection().query_all_raw(sql.build()).await? {
                    let id: String = get(&row, "model_id")?;
                    if let Some(&i) = index.get(&id) {
                        let kv = (get(&row, "key")?, get(&row, "value")?);
                        if table == "logged_model_params" {
                            models[i].params.push(kv);
                        } else {
                            models[i].tags.push(kv);
                        }
                    }
                }
            }
            // Each model's newest values, at most MAX_MODEL_METRICS_READ,
            // in the order they were logged: those within the bound in one
            // query, each model past it on its own (newest first through
            // the (model_id, id) index, so its older values are not read).
            let counts = self.model_metric_counts(chunk).await?;
            let (whole, newest): (Vec<&String>, Vec<&String>) = chunk
                .iter()
                .partition(|id| counts.get(*id).copied().unwrap_or(0) <= MAX_MODEL_METRICS_READ);
            let mut rows = Vec::new();
            if !whole.is_empty() {
                let mut sql = self.sql();
                sql.push("SELECT * FROM logged_model_metrics WHERE model_id IN ")
                    .bind_list(whole.into_iter().cloned())
                    .push(" ORDER BY id");
                rows.extend(self.connection().query_all_raw(sql.build()).await?);
            }
            for id in newest {
                let mut sql = self.sql();
                sql.push("SELECT * FROM logged_model_metrics WHERE model_id = ")
                    .bind(id.clone())
                    .push(" ORDER BY id DESC LIMIT ")
                    .bind(MAX_MODEL_METRICS_READ as i64);
                let mut own = self.connection().query_all_raw(sql.build()).await?;
                own.reverse();
                rows.extend(own);
            }
            for row in rows {
                let id: String = get(&row, "model_id")?;
                if let Some(&i) = index.get(&id) {
                    let value: Option<f64> = get(&row, "value")?;
                    models[i].metrics.push(ModelMetric {
                        key: get(&row, "key")?,
                        point: Point {
                            step: get(&row, "step")?,
                            timestamp: get(&row, "timestamp")?,
                            value: value.unwrap_or(f64::NAN),
                        },
                        run_id: get(&row, "run_id")?,
                        dataset_name: get(&row, "dataset_name")?,
                        dataset_digest: get(&row, "dataset_digest")?,
                    });
                }
            }
        }
        let position: HashMap<&str, usize> = ids
            .iter()
            .enumerate()
            .map(|(i, id)| (id.as_str(), i))
            .collect();
        models.sort_by_key(|m| {
            position
                .get(m.model_id.as_str())
                .copied()
                .unwrap_or(usize::MAX)
        });
        Ok(models)
    }

    /// Logged models of the experiments that match the filter, in the
    /// order asked (then newest first, then by id), `limit` from `offset`;
    /// a page ends early rather than carry more than
    /// [`MAX_PAGE_MODEL_METRICS`] metric values.
    pub async fn search_logged_models(
        &self,
        experiment_ids: &[i64],
        filter: ModelFilter<'_>,
        order: &[ModelOrder],
        limit: u64,
        offset: u64,
        viewer: &Viewer,
    ) -> Result<ModelPage, StoreError> {
        if experiment_ids.is_empty() {
            return Ok(ModelPage::default());
        }
        let ModelFilter { expr, datasets } = filter;
        let mut sql = self.sql();
        sql.push("SELECT m.id FROM logged_models m");
        let mut terms: Vec<String> = Vec::new();
        let (mut by_creation, mut by_id) = (false, false);
        for (i, o) in order.iter().enumerate() {
            let dir = if o.ascending { "ASC" } else { "DESC" };
            match &o.field {
                Field::Metric(key) => {
                    // The model's latest value of the metric (on the dataset, if named).
                    sql.push(
                        " LEFT JOIN (SELECT model_id, value FROM (SELECT model_id, value, ROW_NUMBER() OVER (PARTITION BY model_id ORDER BY timestamp DESC, step DESC, run_id ASC) AS n FROM logged_model_metrics WHERE key = "
                    )
                    .bind(key.clone());
                    if let Some(name) = &o.dataset_name {
                        sql.push(" AND dataset_name = ").bind(name.clone());
                    }
                    if let Some(digest) = &o.dataset_digest {
                        sql.push(" AND dataset_digest = ").bind(digest.clone());
                    }
                    sql.push(&format!(
                        ") t{i} WHERE t{i}.n = 1) o{i} ON o{i}.model_id = m.id"
                    ));
                    terms.push(format!(
                        "CASE WHEN o{i}.value IS NULL THEN 1 ELSE 0 END, o{i}.value {dir}"
                    ));
                }
                Field::Attr(attr) => {
                    let column = match attr {
                        Attribute::Name => "m.name",
                        Attribute::ModelId => {
                            by_id = true;
                            "m.id"
                        }
                        Attribute::ModelType => "m.model_type",
                        Attribute::Status => "m.status",
                        Attribute::SourceRunId => "m.source_run_id",
                        Attribute::CreationTime => {
                            by_creation = true;
                            "m.creation_time"
                        }
                        Attribute::LastUpdateTime => "m.last_update_time",
                        other => {
                            return Err(StoreError::Rejected(format!(
                                "Invalid order by field name: {}",
                                other.name()
                            )));
                        }
                    };
                    terms.push(format!(
                        "CASE WHEN {column} IS NULL THEN 1 ELSE 0 END, {column} {dir}"
                    ));
                }
                Field::Param(_)
                | Field::Tag(_)
                | Field::Assessment(..)
                | Field::Dataset(_)
                | Field::Span(..)
                | Field::TraceText => {
                    return Err(StoreError::Rejected(
                        "Invalid order by field name: only metrics and attributes order logged models"
                            .to_owned(),
                    ));
                }
            }
        }
        if !by_creation {
            terms.push("m.creation_time DESC".to_owned());
        }
        if !by_id {
            terms.push("m.id ASC".to_owned());
        }
        sql.push(" WHERE m.lifecycle_stage = 'active' AND m.experiment_id IN ")
            .int_list(experiment_ids);
        viewer.restrict(&mut sql, "m.user_id", "m.team_id", None);
        if let Some(expr) = expr {
            sql.push(" AND ");
            crate::sql::filter_on(
                &mut sql,
                expr,
                trainyard_domain::query::Scope::LoggedModels,
                datasets,
            );
        }
        // Datasets and no metric to hold to them: the models with any
        // metric logged on one of them.
        if !datasets.is_empty() && !expr.is_some_and(has_metric) {
            sql.push(
                " AND EXISTS (SELECT 1 FROM logged_model_metrics d WHERE d.model_id = m.id AND ",
            );
            crate::sql::on_datasets(&mut sql, "d", datasets);
            sql.push(")");
        }
        sql.push(&format!(" ORDER BY {} LIMIT ", terms.join(", ")))
            .bind(limit as i64 + 1)
            .push(" OFFSET ")
            .bind(offset as i64);
        let mut ids: Vec<String> = self
            .connection()
            .query_all_raw(sql.build())
            .await?
            .iter()
            .map(|row| get(row, "id"))
            .collect::<Result<_, _>>()?;
        let mut more = ids.len() as u64 > limit;
        ids.truncate(limit as usize);
        let fit = self.models_within_metric_budget(&ids).await?;
        if fit < ids.len() {
            ids.truncate(fit);
            more = true;
        }
        Ok(ModelPage {
            models: self.load_logged_models(&ids).await?,
            next_offset: more.then_some(offset + ids.len() as u64),
        })
    }

    /// How many of `ids`, from the first, carry at most
    /// [`MAX_PAGE_MODEL_METRICS`] metric values together (each counted up
    /// to what a read of it carries); at least one.
    async fn models_within_metric_budget(&self, ids: &[String]) -> Result<usize, StoreError> {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for chunk in ids.chunks(500) {
            counts.extend(self.model_metric_counts(chunk).await?);
        }
        let mut total = 0;
        for (i, id) in ids.iter().enumerate() {
            total += counts
                .get(id)
                .copied()
                .unwrap_or(0)
                .min(MAX_MODEL_METRICS_READ);
            if total > MAX_PAGE_MODEL_METRICS && i > 0 {
                return Ok(i);
            }
        }
        Ok(ids.len())
    }

    /// How many metric values each of (at most 500) models holds; models
    /// without any are left out.
    async fn model_metric_counts(
        &self,
        ids: &[String],
    ) -> Result<HashMap<String, usize>, StoreError> {
        let mut counts = HashMap::new();
        if ids.is_empty() {
            return Ok(counts);
        }
        let mut sql = self.sql();
        sql.push("SELECT model_id, COUNT(*) AS n FROM logged_model_metrics WHERE model_id IN ")
            .bind_list(ids.iter().cloned())
            .push(" GROUP BY model_id");
        for row in self.connection().query_all_raw(sql.build()).await? {
            let n: i64 = get(&row, "n")?;
            counts.insert(get(&row, "model_id")?, n as usize);
        }
        Ok(counts)
    }
}

/// What a logged-model search keeps: the models matching `expr` (all when
/// None), with its metric comparisons held to `datasets` when any are
/// named (MLflow's `datasets` clause).
#[derive(Debug, Clone, Copy, Default)]
pub struct ModelFilter<'a> {
    pub expr: Option<&'a Expr>,
    pub datasets: &'a [crate::sql::DatasetRef],
}

/// Whether a filter compares any metric.
fn has_metric(expr: &Expr) -> bool {
    match expr {
        Expr::And(parts) | Expr::Or(parts) => parts.iter().any(has_metric),
        Expr::Not(inner) => has_metric(inner),
        Expr::Test(field, _) => matches!(field, Field::Metric(_)),
    }
}

fn model_from_row(row: &QueryResult) -> Result<LoggedModel, StoreError> {
    Ok(LoggedModel {
        model_id: get(row, "id")?,
        experiment_id: get(row, "experiment_id")?,
        name: get(row, "name")?,
        artifact_uri: get(row, "artifact_location")?,
        creation_time: get(row, "creation_time")?,
        last_update_time: get(row, "last_update_time")?,
        status: get(row, "status")?,
        status_message: get(row, "status_message")?,
        model_type: get(row, "model_type")?,
        source_run_id: get(row, "source_run_id")?,
        lifecycle_stage: get(row, "lifecycle_stage")?,
        tags: Vec::new(),
        params: Vec::new(),
        metrics: Vec::new(),
    })
}
