//! MLflow's model registry: registered models, their versions (numbered from
//! 1, a deleted one keeps its number), stages, aliases and tags, and search.

use std::collections::{BTreeSet, HashMap, HashSet};

use sea_orm::{ConnectionTrait, QueryResult};
use trainyard_domain::identity::{Owner, User};
use trainyard_domain::query::{Expr, OrderBy, Scope};
use trainyard_domain::tracking::{MODEL_STAGES, ModelVersion, RegisteredModel};

use crate::sql::{MAX_KEYS_HELD, Sql, filter, lock_owner, too_many, upsert_pairs};
use crate::tracking::get;
use crate::{Store, StoreError, Viewer, now_millis};

/// Ids given to one `IN (…)`: well within every backend's bound on
/// parameters.
const IN_CHUNK: usize = 500;

/// The stage MLflow gives a deleted version: its number stays taken.
pub(crate) const DELETED_STAGE: &str = "Deleted_Internal";

fn model_not_found(name: &str) -> StoreError {
    StoreError::NotFound(format!("Registered Model with name={name} not found"))
}

fn version_not_found(name: &str, version: i64) -> StoreError {
    StoreError::NotFound(format!(
        "Model Version (name={name}, version={version}) not found"
    ))
}

/// What `create_model_version` needs.
#[derive(Debug, Clone, Default)]
pub struct NewVersion {
    pub source: String,
    pub storage_location: String,
    pub run_id: Option<String>,
    pub run_link: String,
    pub description: String,
    pub user_name: String,
    pub model_id: Option<String>,
    pub tags: Vec<(String, String)>,
}

impl Store {
    /// The id and owner of a registered model.
    async fn registered_model_row(
        &self,
        conn: &impl ConnectionTrait,
        name: &str,
    ) -> Result<(i64, Owner), StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT id, user_id, team_id FROM registered_models WHERE name = ")
            .bind(name.to_owned());
        let row = conn
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| model_not_found(name))?;
        Ok((
            get(&row, "id")?,
            Owner::new(get(&row, "user_id")?, get(&row, "team_id")?),
        ))
    }

    /// May the user see (Read) or change (Change) the registered model? One
    /// they may not see does not exist for them.
    pub async fn registered_model_as(
        &self,
        user: &User,
        name: &str,
        access: crate::Access,
    ) -> Result<(), StoreError> {
        let (_, owner) = self.registered_model_row(self.connection(), name).await?;
        if !user.can_read(owner) {
            return Err(model_not_found(name));
        }
        if access == crate::Access::Change && !user.can_change(owner) {
            return Err(StoreError::Forbidden(format!(
                "registered model {name} is not yours: only its owner or an admin may change it"
            )));
        }
        Ok(())
    }

    pub async fn create_registered_model(
        &self,
        name: &str,
        description: Option<&str>,
        tags: &[(String, String)],
        owner: Owner,
    ) -> Result<RegisteredModel, StoreError> {
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let now = now_millis();
            let mut sql = self.sql();
            sql.push("INSERT INTO registered_models (name, description, creation_time, last_update_time, user_id, team_id) VALUES (")
                .bind(name.to_owned())
                .push(", ")
                .bind(description.map(str::to_owned))
                .push(", ")
                .bind(now)
                .push(", ")
                .bind(now)
                .push(", ")
                .bind(owner.user_id)
                .push(", ")
                .bind(owner.team_id)
                .push(") ON CONFLICT (name) DO NOTHING");
            if txn.execute_raw(sql.build()).await?.rows_affected() == 0 {
                return Err(StoreError::Conflict {
                    what: format!("Registered Model (name={name})"),
                });
            }
            let (id, _) = self.registered_model_row(&txn, name).await?;
            upsert_pairs(
                &txn,
                self.sql(),
                "registered_model_tags",
                &[("registered_model_id", id.into())],
                tags,
            )
            .await?;
            txn.commit().await?;
        }
        self.get_registered_model(name).await
    }

    pub async fn get_registered_model(&self, name: &str) -> Result<RegisteredModel, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT * FROM registered_models WHERE name = ")
            .bind(name.to_owned());
        let row = self
            .connection()
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| model_not_found(name))?;
        let mut models = self.registered_models_from(&[row]).await?;
        models.pop().ok_or_else(|| model_not_found(name))
    }

    async fn registered_models_from(
        &self,
        rows: &[QueryResult],
    ) -> Result<Vec<RegisteredModel>, StoreError> {
        let ids = rows
            .iter()
            .map(|row| get::<i64>(row, "id"))
            .collect::<Result<Vec<i64>, StoreError>>()?;
        // A few queries a page, whatever its length: never one per model.
        let mut tags: HashMap<i64, Vec<(String, String)>> = HashMap::new();
        let mut aliases: HashMap<i64, Vec<(String, i64)>> = HashMap::new();
        let mut latest: HashMap<String, Vec<ModelVersion>> = HashMap::new();
        for chunk in ids.chunks(IN_CHUNK) {
            let mut sql = self.sql();
            sql.push("SELECT registered_model_id, key, value FROM registered_model_tags WHERE registered_model_id IN ")
                .bind_list(chunk.iter().copied())
                .push(" ORDER BY key");
            for r in self.connection().query_all_raw(sql.build()).await? {
                tags.entry(get(&r, "registered_model_id")?)
                    .or_default()
                    .push((get(&r, "key")?, get(&r, "value")?));
            }
            let mut sql = self.sql();
            sql.push("SELECT registered_model_id, alias, version FROM registered_model_aliases WHERE registered_model_id IN ")
                .bind_list(chunk.iter().copied())
                .push(" ORDER BY alias");
            for r in self.connection().query_all_raw(sql.build()).await? {
                aliases
                    .entry(get(&r, "registered_model_id")?)
                    .or_default()
                    .push((get(&r, "alias")?, i64::from(get::<i32>(&r, "version")?)));
            }
            // The newest version of each stage.
            let versions = self
                .versions_where(|sql| {
                    sql.push("WHERE v.registered_model_id IN ")
                        .bind_list(chunk.iter().copied())
                        .push(" AND v.stage <> ")
                        .bind(DELETED_STAGE.to_owned())
                        .push(" AND v.version = (SELECT MAX(w.version) FROM model_versions w WHERE w.registered_model_id = v.registered_model_id AND w.stage = v.stage) ORDER BY v.version");
                    Ok(())
                })
                .await?;
            for version in versions {
                latest
                    .entry(version.name.clone())
                    .or_default()
                    .push(version);
            }
        }
        rows.iter()
            .zip(ids)
            .map(|(row, id)| {
                let name: String = get(row, "name")?;
                Ok(RegisteredModel {
                    latest_versions: latest.remove(&name).unwrap_or_default(),
                    name,
                    description: get(row, "description")?,
                    creation_time: get(row, "creation_time")?,
                    last_update_time: get(row, "last_update_time")?,
                    tags: tags.remove(&id).unwrap_or_default(),
                    aliases: aliases.remove(&id).unwrap_or_default(),
                })
            })
            .collect()
    }

    /// Versions that `tail` selects (it writes `WHERE …` over
    /// `model_versions v` joined with `registered_models g`), with their
    /// tags and aliases.
    async fn versions_where(
        &self,
        tail: impl FnOnce(&mut Sql) -> Result<(), StoreError>,
    ) -> Result<Vec<ModelVersion>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT v.*, g.name FROM model_versions v JOIN registered_models g ON g.id = v.registered_model_id ");
        tail(&mut sql)?;
        let rows = self.connection().query_all_raw(sql.build()).await?;
        let keys = rows
            .iter()
            .map(|row| {
                Ok((
                    get::<i64>(row, "registered_model_id")?,
                    get::<i32>(row, "version")?,
                ))
            })
            .collect::<Result<Vec<(i64, i32)>, StoreError>>()?;
        // Tags and aliases of a chunk of versions at a time: those of its
        // models and version numbers, kept for the versions asked.
        let mut tags: HashMap<(i64, i32), Vec<(String, String)>> = HashMap::new();
        let mut aliases: HashMap<(i64, i32), Vec<String>> = HashMap::new();
        for chunk in keys.chunks(IN_CHUNK) {
            let wanted: HashSet<(i64, i32)> = chunk.iter().copied().collect();
            let models: BTreeSet<i64> = chunk.iter().map(|k| k.0).collect();
            let numbers: BTreeSet<i32> = chunk.iter().map(|k| k.1).collect();
            for (table, columns) in [
                ("model_version_tags", "key, value"),
                ("registered_model_aliases", "alias"),
            ] {
                let mut sql = self.sql();
                sql.push(&format!(
                    "SELECT registered_model_id, version, {columns} FROM {table} WHERE registered_model_id IN "
                ))
                .bind_list(models.iter().copied())
                .push(" AND version IN ")
                .bind_list(numbers.iter().copied())
                .push(if table == "model_version_tags" {
                    " ORDER BY key"
                } else {
                    " ORDER BY alias"
                });
                for r in self.connection().query_all_raw(sql.build()).await? {
                    let key = (get(&r, "registered_model_id")?, get(&r, "version")?);
                    if !wanted.contains(&key) {
                        continue;
                    }
                    if table == "model_version_tags" {
                        tags.entry(key)
                            .or_default()
                            .push((get(&r, "key")?, get(&r, "value")?));
                    } else {
                        aliases.entry(key).or_default().push(get(&r, "alias")?);
                    }
                }
            }
        }
        rows.iter()
            .zip(keys)
            .map(|(row, key)| {
                Ok(ModelVersion {
                    name: get(row, "name")?,
                    version: i64::from(key.1),
                    creation_time: get(row, "creation_time")?,
                    last_update_time: get(row, "last_update_time")?,
                    description: get(row, "description")?,
                    user_id: get(row, "user_name")?,
                    source: get(row, "source")?,
                    storage_location: get(row, "storage_location")?,
                    run_id: get(row, "run_id")?,
                    run_link: get(row, "run_link")?,
                    stage: get(row, "stage")?,
                    model_id: get(row, "model_id")?,
                    tags: tags.remove(&key).unwrap_or_default(),
                    aliases: aliases.remove(&key).unwrap_or_default(),
                })
            })
            .collect()
    }

    async fn touch_registered_model(
        &self,
        conn: &impl ConnectionTrait,
        id: i64,
    ) -> Result<(), StoreError> {
        let mut sql = self.sql();
        sql.push("UPDATE registered_models SET last_update_time = ")
            .bind(now_millis())
            .push(" WHERE id = ")
            .bind(id);
        conn.execute_raw(sql.build()).await?;
        Ok(())
    }

    pub async fn update_registered_model(
        &self,
        name: &str,
        description: &str,
    ) -> Result<RegisteredModel, StoreError> {
        {
            let _turn = self.write_turn().await;
            let mut sql = self.sql();
            sql.push("UPDATE registered_models SET description = ")
                .bind(description.to_owned())
                .push(", last_update_time = ")
                .bind(now_millis())
                .push(" WHERE name = ")
                .bind(name.to_owned());
            if self
                .connection()
                .execute_raw(sql.build())
                .await?
                .rows_affected()
                == 0
            {
                return Err(model_not_found(name));
            }
        }
        self.get_registered_model(name).await
    }

    pub async fn rename_registered_model(
        &self,
        name: &str,
        new_name: &str,
    ) -> Result<RegisteredModel, StoreError> {
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let (id, _) = self.registered_model_row(&txn, name).await?;
            if self.registered_model_row(&txn, new_name).await.is_ok() {
                return Err(StoreError::Conflict {
                    what: format!("Registered Model (name={new_name})"),
                });
            }
            let mut sql = self.sql();
            sql.push("UPDATE registered_models SET name = ")
                .bind(new_name.to_owned())
                .push(", last_update_time = ")
                .bind(now_millis())
                .push(" WHERE id = ")
                .bind(id);
            txn.execute_raw(sql.build()).await?;
            txn.commit().await?;
        }
        self.get_registered_model(new_name).await
    }

    pub async fn delete_registered_model(&self, name: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let mut sql = self.sql();
        sql.push("DELETE FROM registered_models WHERE name = ")
            .bind(name.to_owned());
        if self
            .connection()
            .execute_raw(sql.build())
            .await?
            .rows_affected()
            == 0
        {
            return Err(model_not_found(name));
        }
        Ok(())
    }

    pub async fn set_registered_model_tag(
        &self,
        name: &str,
        key: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let (id, _) = self.registered_model_row(&txn, name).await?;
        upsert_pairs(
            &txn,
            self.sql(),
            "registered_model_tags",
            &[("registered_model_id", id.into())],
            &[(key.to_owned(), value.to_owned())],
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    pub async fn delete_registered_model_tag(
        &self,
        name: &str,
        key: &str,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let (id, _) = self.registered_model_row(self.connection(), name).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM registered_model_tags WHERE registered_model_id = ")
            .bind(id)
            .push(" AND key = ")
            .bind(key.to_owned());
        self.connection().execute_raw(sql.build()).await?;
        Ok(())
    }

    /// Registered models matching the filter (`name`, `tags.*`), by name
    /// unless ordered otherwise.
    pub async fn search_registered_models(
        &self,
        expr: Option<&Expr>,
        order: &[OrderBy],
        limit: u64,
        offset: u64,
        viewer: &Viewer,
    ) -> Result<Vec<RegisteredModel>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT g.* FROM registered_models g WHERE 1 = 1");
        viewer.restrict(&mut sql, "g.user_id", "g.team_id", None);
        if let Some(expr) = expr {
            sql.push(" AND ");
            filter(&mut sql, expr, Scope::RegisteredModels);
        }
        push_order(&mut sql, order, Scope::RegisteredModels, "g.name ASC")?;
        sql.push(" LIMIT ")
            .bind(limit as i64)
            .push(" OFFSET ")
            .bind(offset as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        self.registered_models_from(&rows).await
    }

    // ---------------------------------------------------------------- versions

    pub async fn create_model_version(
        &self,
        name: &str,
        new: NewVersion,
    ) -> Result<ModelVersion, StoreError> {
        let version = {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let (id, _) = self.registered_model_row(&txn, name).await?;
            let mut sql = self.sql();
            sql.push("SELECT COALESCE(MAX(version), 0) AS n FROM model_versions WHERE registered_model_id = ")
                .bind(id);
            let last: i64 = match txn.query_one_raw(sql.build()).await? {
                Some(row) => row
                    .try_get::<i64>("", "n")
                    .or_else(|_| row.try_get::<i32>("", "n").map(i64::from))?,
                None => 0,
            };
            let version = i32::try_from(last + 1).map_err(|_| {
                StoreError::Rejected(format!("registered model {name} has too many versions"))
            })?;
            let now = now_millis();
            let mut sql = self.sql();
            sql.push("INSERT INTO model_versions (registered_model_id, version, creation_time, last_update_time, description, user_name, source, storage_location, run_id, run_link, stage, model_id) VALUES (")
                .bind(id)
                .push(", ")
                .bind(version)
                .push(", ")
                .bind(now)
                .push(", ")
                .bind(now)
                .push(", ")
                .bind(new.description.clone())
                .push(", ")
                .bind(new.user_name.clone())
                .push(", ")
                .bind(new.source.clone())
                .push(", ")
                .bind(new.storage_location.clone())
                .push(", ")
                .bind(new.run_id.clone())
                .push(", ")
                .bind(new.run_link.clone())
                .push(", 'None', ")
                .bind(new.model_id.clone())
                .push(")");
            txn.execute_raw(sql.build()).await?;
            upsert_pairs(
                &txn,
                self.sql(),
                "model_version_tags",
                &[
                    ("registered_model_id", id.into()),
                    ("version", version.into()),
                ],
                &new.tags,
            )
            .await?;
            self.touch_registered_model(&txn, id).await?;
            txn.commit().await?;
            i64::from(version)
        };
        self.get_model_version(name, version).await
    }

    pub async fn get_model_version(
        &self,
        name: &str,
        version: i64,
    ) -> Result<ModelVersion, StoreError> {
        self.versions_where(|sql| {
            sql.push("WHERE g.name = ")
                .bind(name.to_owned())
                .push(" AND v.version = ")
                .bind(version)
                .push(" AND v.stage <> ")
                .bind(DELETED_STAGE.to_owned());
            Ok(())
        })
        .await?
        .pop()
        .ok_or_else(|| version_not_found(name, version))
    }

    /// The id of a registered model and checks that the version exists.
    async fn live_version(
        &self,
        conn: &impl ConnectionTrait,
        name: &str,
        version: i64,
    ) -> Result<i64, StoreError> {
        let (id, _) = self.registered_model_row(conn, name).await?;
        let mut sql = self.sql();
        sql.push("SELECT 1 AS one FROM model_versions WHERE registered_model_id = ")
            .bind(id)
            .push(" AND version = ")
            .bind(version)
            .push(" AND stage <> ")
            .bind(DELETED_STAGE.to_owned());
        match conn.query_one_raw(sql.build()).await? {
            Some(_) => Ok(id),
            None => Err(version_not_found(name, version)),
        }
    }

    async fn set_version_column(
        &self,
        name: &str,
        version: i64,
        column: &str,
        value: String,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let id = self.live_version(&txn, name, version).await?;
        let mut sql = self.sql();
        sql.push(&format!("UPDATE model_versions SET {column} = "))
            .bind(value)
            .push(", last_update_time = ")
            .bind(now_millis())
            .push(" WHERE registered_model_id = ")
            .bind(id)
            .push(" AND version = ")
            .bind(version);
        txn.execute_raw(sql.build()).await?;
        self.touch_registered_model(&txn, id).await?;
        txn.commit().await?;
        Ok(())
    }

    pub async fn update_model_version(
        &self,
        name: &str,
        version: i64,
        description: &str,
    ) -> Result<ModelVersion, StoreError> {
        self.set_version_column(name, version, "description", description.to_owned())
            .await?;
        self.get_model_version(name, version).await
    }

    /// Deletes a version: it is found no more, its aliases go, and its
    /// number is not given again.
    pub async fn delete_model_version(&self, name: &str, version: i64) -> Result<(), StoreError> {
        {
            let _turn = self.write_turn().await;
            let txn = self.begin_write().await?;
            let id = self.live_version(&txn, name, version).await?;
            let mut sql = self.sql();
            sql.push("DELETE FROM registered_model_aliases WHERE registered_model_id = ")
                .bind(id)
                .push(" AND version = ")
                .bind(version);
            txn.execute_raw(sql.build()).await?;
            txn.commit().await?;
        }
        self.set_version_column(name, version, "stage", DELETED_STAGE.to_owned())
            .await
    }

    /// Moves a version to a stage; with `archive_existing`, the other
    /// versions in that stage go to Archived.
    pub async fn transition_model_version_stage(
        &self,
        name: &str,
        version: i64,
        stage: &str,
        archive_existing: bool,
    ) -> Result<ModelVersion, StoreError> {
        if archive_existing && matches!(stage, "Staging" | "Production") {
            let _turn = self.write_turn().await;
            let (id, _) = self.registered_model_row(self.connection(), name).await?;
            let mut sql = self.sql();
            sql.push("UPDATE model_versions SET stage = 'Archived', last_update_time = ")
                .bind(now_millis())
                .push(" WHERE registered_model_id = ")
                .bind(id)
                .push(" AND stage = ")
                .bind(stage.to_owned())
                .push(" AND version <> ")
                .bind(version);
            self.connection().execute_raw(sql.build()).await?;
        }
        self.set_version_column(name, version, "stage", stage.to_owned())
            .await?;
        self.get_model_version(name, version).await
    }

    pub async fn set_model_version_tag(
        &self,
        name: &str,
        version: i64,
        key: &str,
        value: &str,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let id = self.live_version(&txn, name, version).await?;
        upsert_pairs(
            &txn,
            self.sql(),
            "model_version_tags",
            &[
                ("registered_model_id", id.into()),
                ("version", (version as i32).into()),
            ],
            &[(key.to_owned(), value.to_owned())],
        )
        .await?;
        txn.commit().await?;
        Ok(())
    }

    pub async fn delete_model_version_tag(
        &self,
        name: &str,
        version: i64,
        key: &str,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let id = self.live_version(self.connection(), name, version).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM model_version_tags WHERE registered_model_id = ")
            .bind(id)
            .push(" AND version = ")
            .bind(version)
            .push(" AND key = ")
            .bind(key.to_owned());
        self.connection().execute_raw(sql.build()).await?;
        Ok(())
    }

    /// Points an alias at a version (moving it if it pointed elsewhere).
    pub async fn set_registered_model_alias(
        &self,
        name: &str,
        alias: &str,
        version: i64,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let id = self.live_version(&txn, name, version).await?;
        let backend = self.connection().get_database_backend();
        lock_owner(&txn, backend, &format!("registered_model_aliases:{id}")).await?;
        let mut sql = self.sql();
        sql.push(
            "INSERT INTO registered_model_aliases (registered_model_id, alias, version) VALUES (",
        )
        .bind(id)
        .push(", ")
        .bind(alias.to_owned())
        .push(", ")
        .bind(version)
        .push(
            ") ON CONFLICT (registered_model_id, alias) DO UPDATE SET version = excluded.version",
        );
        txn.execute_raw(sql.build()).await?;
        let held = crate::sql::held_rows(
            &txn,
            "registered_model_aliases",
            &[("registered_model_id", id.into())],
        )
        .await?;
        if held as usize > MAX_KEYS_HELD {
            return Err(StoreError::Rejected(too_many(
                "registered_model_aliases",
                held,
            )));
        }
        self.touch_registered_model(&txn, id).await?;
        txn.commit().await?;
        Ok(())
    }

    pub async fn delete_registered_model_alias(
        &self,
        name: &str,
        alias: &str,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let (id, _) = self.registered_model_row(self.connection(), name).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM registered_model_aliases WHERE registered_model_id = ")
            .bind(id)
            .push(" AND alias = ")
            .bind(alias.to_owned());
        self.connection().execute_raw(sql.build()).await?;
        Ok(())
    }

    pub async fn model_version_by_alias(
        &self,
        name: &str,
        alias: &str,
    ) -> Result<ModelVersion, StoreError> {
        if alias.eq_ignore_ascii_case("latest") {
            // MLflow's reserved alias: the newest version (no alias may be
            // named so).
            let newest = self
                .latest_model_versions(name, &[])
                .await?
                .into_iter()
                .map(|v| v.version)
                .max()
                .ok_or_else(|| {
                    StoreError::NotFound(format!("Latest version not found for model {name}."))
                })?;
            return self.get_model_version(name, newest).await;
        }
        let (id, _) = self.registered_model_row(self.connection(), name).await?;
        let mut sql = self.sql();
        sql.push("SELECT version FROM registered_model_aliases WHERE registered_model_id = ")
            .bind(id)
            .push(" AND alias = ")
            .bind(alias.to_owned());
        let row = self
            .connection()
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| {
                StoreError::NotFound(format!(
                    "Registered model alias {alias} not found on model {name}."
                ))
            })?;
        let version: i32 = get(&row, "version")?;
        self.get_model_version(name, i64::from(version)).await
    }

    /// The newest version in each of the stages (all stages when none).
    pub async fn latest_model_versions(
        &self,
        name: &str,
        stages: &[String],
    ) -> Result<Vec<ModelVersion>, StoreError> {
        let model = self.get_registered_model(name).await?;
        Ok(model
            .latest_versions
            .into_iter()
            .filter(|v| {
                stages.is_empty() || stages.iter().any(|s| s.eq_ignore_ascii_case(&v.stage))
            })
            .collect())
    }

    /// Versions matching the filter (`name`, `run_id`, `source_path`,
    /// `version_number`, `tags.*`), newest change first unless ordered.
    pub async fn search_model_versions(
        &self,
        expr: Option<&Expr>,
        order: &[OrderBy],
        limit: u64,
        offset: u64,
        viewer: &Viewer,
    ) -> Result<Vec<ModelVersion>, StoreError> {
        self.versions_where(|sql| {
            sql.push("WHERE v.stage <> ").bind(DELETED_STAGE.to_owned());
            viewer.restrict(sql, "g.user_id", "g.team_id", None);
            if let Some(expr) = expr {
                sql.push(" AND ");
                filter(sql, expr, Scope::ModelVersions);
            }
            push_order(
                sql,
                order,
                Scope::ModelVersions,
                "v.last_update_time DESC, g.name ASC, v.version DESC",
            )?;
            sql.push(" LIMIT ")
                .bind(limit as i64)
                .push(" OFFSET ")
                .bind(offset as i64);
            Ok(())
        })
        .await
    }
}

/// `ORDER BY` the attributes asked, then `default`.
fn push_order(
    sql: &mut Sql,
    order: &[OrderBy],
    scope: Scope,
    default: &str,
) -> Result<(), StoreError> {
    use trainyard_domain::query::{Attribute, Field};
    let mut terms = Vec::new();
    for o in order {
        let dir = if o.ascending { "ASC" } else { "DESC" };
        let column = match (&o.field, scope) {
            (Field::Attr(Attribute::Name), _) => "g.name",
            (Field::Attr(Attribute::CreationTime), Scope::RegisteredModels) => "g.creation_time",
            (Field::Attr(Attribute::LastUpdateTime), Scope::RegisteredModels) => {
                "g.last_update_time"
            }
            (Field::Attr(Attribute::CreationTime), _) => "v.creation_time",
            (Field::Attr(Attribute::LastUpdateTime), _) => "v.last_update_time",
            (Field::Attr(Attribute::VersionNumber), Scope::ModelVersions) => "v.version",
            (Field::Attr(Attribute::RunId), Scope::ModelVersions) => "v.run_id",
            (Field::Attr(Attribute::SourcePath), Scope::ModelVersions) => "v.source",
            _ => {
                return Err(StoreError::Rejected(
                    "Invalid order_by: use name, creation_timestamp or last_updated_timestamp (and version_number for versions)".to_owned(),
                ));
            }
        };
        terms.push(format!("{column} {dir}"));
    }
    terms.push(default.to_owned());
    sql.push(&format!(" ORDER BY {}", terms.join(", ")));
    Ok(())
}

/// The stage's canonical spelling, as MLflow accepts it (any case).
pub fn canonical_stage(stage: &str) -> Option<&'static str> {
    MODEL_STAGES
        .into_iter()
        .find(|s| s.eq_ignore_ascii_case(stage))
}
