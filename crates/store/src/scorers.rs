//! MLflow 3's registered scorers (`mlflow.genai.scorers`): judges kept by
//! name in an experiment, each registration a new version, as MLflow's own
//! store keeps them, and the online scoring configuration of each. The
//! serialized scorers are checked by the caller; the store keeps the bounds
//! that span requests (versions, scorers and bytes an experiment holds).

use sea_orm::{ConnectionTrait, QueryResult};
use trainyard_domain::tracking::{OnlineScoringConfig, ScorerVersion};

use crate::sql::{Sql, lock_owner};
use crate::tracking::{DEFAULT_EXPERIMENT, get};
use crate::{Store, StoreError, Viewer, now_millis};

/// Most versions one scorer keeps: delete old ones to register more.
pub const MAX_SCORER_VERSIONS: i32 = 1000;
/// Most scorers one experiment holds.
pub const MAX_EXPERIMENT_SCORERS: i64 = 1000;
/// Most bytes the versions of one experiment's scorers hold together.
pub const MAX_EXPERIMENT_SCORER_BYTES: i64 = 64 << 20;
/// In the shared Default experiment, the most scorers and bytes one
/// maker holds, so that no one fills it for everyone.
pub const MAX_DEFAULT_SCORERS_EACH: i64 = 100;
pub const MAX_DEFAULT_SCORER_BYTES_EACH: i64 = 8 << 20;
/// Most scorers one listing answers (across experiments), and most bytes
/// their versions hold together: one experiment's always fit.
pub const MAX_LISTED_SCORERS: i64 = 10_000;
pub const MAX_LISTED_BYTES: i64 = 64 << 20;

/// Who may change an existing scorer, checked in the writer's transaction
/// (so that two people registering one new name at once cannot both pass).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Changer {
    /// Whoever may change the experiment: the caller checked that.
    Experiment,
    /// Only the scorer's maker, this user (the shared Default experiment).
    Maker(i64),
}

fn not_makers(name: &str) -> StoreError {
    StoreError::Forbidden(format!(
        "scorer '{name}' of the Default experiment was registered by someone else: only they or an admin change it. Register yours under another name."
    ))
}

fn not_found(experiment_id: i64, name: &str, version: Option<i32>) -> StoreError {
    StoreError::NotFound(match version {
        Some(v) => format!(
            "Scorer with name '{name}' and version {v} not found for experiment {experiment_id}."
        ),
        None => format!("Scorer with name '{name}' not found for experiment {experiment_id}."),
    })
}

const VERSION_COLUMNS: &str =
    "s.id, s.experiment_id, s.name, v.version, v.serialized, v.creation_time";

fn version_of(row: &QueryResult) -> Result<ScorerVersion, StoreError> {
    Ok(ScorerVersion {
        scorer_id: get(row, "id")?,
        experiment_id: get(row, "experiment_id")?,
        name: get(row, "name")?,
        version: get(row, "version")?,
        serialized: get(row, "serialized")?,
        creation_time: get(row, "creation_time")?,
    })
}

/// On PostgreSQL, the writers of one experiment's scorers take turns.
async fn lock_scorers(conn: &impl ConnectionTrait, experiment_id: i64) -> Result<(), StoreError> {
    lock_owner(
        conn,
        conn.get_database_backend(),
        &format!("scorers:{experiment_id}"),
    )
    .await
}

fn config_of(row: &QueryResult) -> Result<OnlineScoringConfig, StoreError> {
    Ok(OnlineScoringConfig {
        config_id: get(row, "id")?,
        scorer_id: get(row, "scorer_id")?,
        experiment_id: get(row, "experiment_id")?,
        sample_rate: get(row, "sample_rate")?,
        filter_string: get(row, "filter_string")?,
    })
}

/// A scorer's row: its id, the last version number it gave, and its maker.
struct Scorer {
    id: String,
    given: i32,
    user_id: Option<i64>,
}

impl Scorer {
    fn may_change(&self, who: Changer, name: &str) -> Result<(), StoreError> {
        match who {
            Changer::Maker(user) if self.user_id != Some(user) => Err(not_makers(name)),
            _ => Ok(()),
        }
    }
}

impl Store {
    async fn scorer_row(
        &self,
        conn: &impl ConnectionTrait,
        experiment_id: i64,
        name: &str,
    ) -> Result<Option<Scorer>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT id, given, user_id FROM scorers WHERE experiment_id = ")
            .bind(experiment_id)
            .push(" AND name = ")
            .bind(name.to_owned());
        let Some(row) = conn.query_one_raw(sql.build()).await? else {
            return Ok(None);
        };
        Ok(Some(Scorer {
            id: get(&row, "id")?,
            given: get(&row, "given")?,
            user_id: get(&row, "user_id")?,
        }))
    }

    /// Who registered the scorer first: None where there is no such
    /// scorer, `Some(None)` where it was made with no account.
    pub async fn scorer_maker(
        &self,
        experiment_id: i64,
        name: &str,
    ) -> Result<Option<Option<i64>>, StoreError> {
        Ok(self
            .scorer_row(self.connection(), experiment_id, name)
            .await?
            .map(|s| s.user_id))
    }

    /// Registers `serialized` as the scorer's next version (1 for a new
    /// name, made by `maker`), refusing past the bounds of the scorer and
    /// the experiment, and in the shared Default experiment past the share
    /// of the scorer's maker, so that no one fills it for everyone.
    pub async fn register_scorer(
        &self,
        experiment_id: i64,
        name: &str,
        serialized: &str,
        maker: Option<i64>,
        who: Changer,
    ) -> Result<ScorerVersion, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        // Registrations in one experiment take turns: the next version and
        // the experiment's bounds are read and written by one at a time.
        lock_scorers(&txn, experiment_id).await?;
        let bytes = serialized.len() as i64;
        let found = self.scorer_row(&txn, experiment_id, name).await?;
        if let Some(s) = &found {
            s.may_change(who, name)?;
            if s.given >= MAX_SCORER_VERSIONS {
                return Err(StoreError::Rejected(format!(
                    "Scorer '{name}' has been given {MAX_SCORER_VERSIONS} versions, the most one scorer is given: register it under a new name, or delete it and register it again."
                )));
            }
        }
        // The experiment's bounds, and in Default the share of the scorer's
        // maker (the caller's, for a new name).
        let mut bounds = vec![(
            None,
            "The scorers of this experiment",
            MAX_EXPERIMENT_SCORERS,
            MAX_EXPERIMENT_SCORER_BYTES,
        )];
        if experiment_id == DEFAULT_EXPERIMENT {
            let whose = found.as_ref().map_or(maker, |s| s.user_id);
            bounds.push((
                Some(whose),
                "The scorers of their maker in the Default experiment",
                MAX_DEFAULT_SCORERS_EACH,
                MAX_DEFAULT_SCORER_BYTES_EACH,
            ));
        }
        for (whose, what, most, most_bytes) in bounds {
            let mut held = self.sql();
            held.push(
                "SELECT COUNT(*) AS n, CAST(COALESCE(SUM(bytes), 0) AS BIGINT) AS bytes FROM scorers WHERE experiment_id = ",
            )
            .bind(experiment_id);
            match whose {
                Some(Some(user)) => {
                    held.push(" AND user_id = ").bind(user);
                }
                Some(None) => {
                    held.push(" AND user_id IS NULL");
                }
                None => {}
            }
            let (count, held_bytes): (i64, i64) = match txn.query_one_raw(held.build()).await? {
                Some(row) => (get(&row, "n")?, get(&row, "bytes")?),
                None => (0, 0),
            };
            if held_bytes + bytes > most_bytes {
                return Err(StoreError::Rejected(format!(
                    "{what} hold {held_bytes} bytes, and this version would take them past {most_bytes}: delete old versions first (delete_scorer with a version)."
                )));
            }
            if found.is_none() && count >= most {
                return Err(StoreError::Rejected(format!(
                    "{what} are {count}, the most there may be: delete some first."
                )));
            }
        }
        let scorer = match found {
            Some(s) => s,
            None => {
                let id = uuid::Uuid::new_v4().to_string();
                let mut sql = self.sql();
                sql.push("INSERT INTO scorers (id, experiment_id, name, latest, given, bytes, user_id) VALUES (")
                    .bind(id.clone())
                    .push(", ")
                    .bind(experiment_id)
                    .push(", ")
                    .bind(name.to_owned())
                    .push(", 0, 0, 0, ")
                    .bind(maker)
                    .push(")");
                txn.execute_raw(sql.build()).await?;
                Scorer {
                    id,
                    given: 0,
                    user_id: maker,
                }
            }
        };
        let version = scorer.given + 1;
        let now = now_millis();
        let mut sql = self.sql();
        sql.push(
            "INSERT INTO scorer_versions (scorer_id, version, serialized, bytes, creation_time) VALUES (",
        )
        .bind(scorer.id.clone())
        .push(", ")
        .bind(version)
        .push(", ")
        .bind(serialized.to_owned())
        .push(", ")
        .bind(bytes)
        .push(", ")
        .bind(now)
        .push(")");
        txn.execute_raw(sql.build()).await?;
        let mut sql = self.sql();
        sql.push("UPDATE scorers SET latest = ")
            .bind(version)
            .push(", given = ")
            .bind(version)
            .push(", bytes = bytes + ")
            .bind(bytes)
            .push(" WHERE id = ")
            .bind(scorer.id.clone());
        txn.execute_raw(sql.build()).await?;
        txn.commit().await?;
        Ok(ScorerVersion {
            scorer_id: scorer.id,
            experiment_id,
            name: name.to_owned(),
            version,
            serialized: serialized.to_owned(),
            creation_time: now,
        })
    }

    /// The latest version of each scorer of `experiment_ids` (every
    /// experiment the viewer may see where None), active experiments only,
    /// by experiment and name; refused past [`MAX_LISTED_SCORERS`] or
    /// [`MAX_LISTED_BYTES`], counted before any is read.
    pub async fn latest_scorers(
        &self,
        experiment_ids: Option<&[i64]>,
        viewer: &Viewer,
    ) -> Result<Vec<ScorerVersion>, StoreError> {
        if experiment_ids.is_some_and(<[i64]>::is_empty) {
            return Ok(Vec::new());
        }
        let listing = |columns: &str| {
            let mut sql = self.sql();
            sql.push(&format!(
                "SELECT {columns} FROM scorers s \
                 JOIN scorer_versions v ON v.scorer_id = s.id AND v.version = s.latest \
                 JOIN experiments e ON e.id = s.experiment_id \
                 WHERE e.lifecycle_stage = 'active'"
            ));
            if let Some(ids) = experiment_ids {
                sql.push(" AND s.experiment_id IN ")
                    .bind_list(ids.iter().copied());
            }
            viewer.restrict(&mut sql, "e.owner_id", "e.team_id", Some("e.id = 0"));
            sql
        };
        // What the listing would hold is counted before any of it is read.
        let size = listing("COUNT(*) AS n, CAST(COALESCE(SUM(v.bytes), 0) AS BIGINT) AS bytes");
        let (count, bytes): (i64, i64) = match self.connection().query_one_raw(size.build()).await?
        {
            Some(row) => (get(&row, "n")?, get(&row, "bytes")?),
            None => (0, 0),
        };
        if count > MAX_LISTED_SCORERS || bytes > MAX_LISTED_BYTES {
            return Err(StoreError::Rejected(format!(
                "The scorers to list are {count} holding {bytes} bytes, more than one listing carries ({MAX_LISTED_SCORERS} scorers, {MAX_LISTED_BYTES} bytes): name fewer experiments."
            )));
        }
        let mut sql = listing(VERSION_COLUMNS);
        sql.push(" ORDER BY s.experiment_id, s.name LIMIT ")
            .bind(MAX_LISTED_SCORERS);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        rows.iter().map(version_of).collect()
    }

    /// The start of a query for the versions of an experiment's scorers,
    /// to which a caller adds its conditions and order.
    fn versions_of_experiment(&self, experiment_id: i64) -> Sql {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT {VERSION_COLUMNS} FROM scorers s \
             JOIN scorer_versions v ON v.scorer_id = s.id \
             WHERE s.experiment_id = "
        ))
        .bind(experiment_id);
        sql
    }

    /// Every version of every scorer of an experiment, by name and newest
    /// version first, at most `limit` (for the explorer's page; the bytes
    /// an experiment's scorers hold are bounded).
    pub async fn experiment_scorer_versions(
        &self,
        experiment_id: i64,
        limit: u64,
    ) -> Result<Vec<ScorerVersion>, StoreError> {
        let mut sql = self.versions_of_experiment(experiment_id);
        sql.push(" ORDER BY s.name, v.version DESC LIMIT ")
            .bind(limit as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        rows.iter().map(version_of).collect()
    }

    /// Every version of a scorer, oldest first.
    pub async fn scorer_versions(
        &self,
        experiment_id: i64,
        name: &str,
    ) -> Result<Vec<ScorerVersion>, StoreError> {
        let mut sql = self.versions_of_experiment(experiment_id);
        sql.push(" AND s.name = ")
            .bind(name.to_owned())
            .push(" ORDER BY v.version");
        let rows = self.connection().query_all_raw(sql.build()).await?;
        if rows.is_empty() {
            return Err(not_found(experiment_id, name, None));
        }
        rows.iter().map(version_of).collect()
    }

    /// One version of a scorer, or its latest.
    pub async fn get_scorer(
        &self,
        experiment_id: i64,
        name: &str,
        version: Option<i32>,
    ) -> Result<ScorerVersion, StoreError> {
        let mut sql = self.versions_of_experiment(experiment_id);
        sql.push(" AND s.name = ").bind(name.to_owned());
        match version {
            Some(v) => sql.push(" AND v.version = ").bind(v),
            None => sql.push(" AND v.version = s.latest"),
        };
        let row = self
            .connection()
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| not_found(experiment_id, name, version))?;
        version_of(&row)
    }

    /// Deletes one version of a scorer, or all of them (and so the scorer
    /// and its online configuration). A scorer left with no version goes.
    pub async fn delete_scorer(
        &self,
        experiment_id: i64,
        name: &str,
        version: Option<i32>,
        who: Changer,
    ) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        lock_scorers(&txn, experiment_id).await?;
        let scorer = self
            .scorer_row(&txn, experiment_id, name)
            .await?
            .ok_or_else(|| not_found(experiment_id, name, None))?;
        scorer.may_change(who, name)?;
        let mut remove = self.sql();
        remove
            .push("DELETE FROM scorers WHERE id = ")
            .bind(scorer.id.clone());
        let Some(version) = version else {
            txn.execute_raw(remove.build()).await?;
            txn.commit().await?;
            return Ok(());
        };
        let mut sql = self.sql();
        sql.push("DELETE FROM scorer_versions WHERE scorer_id = ")
            .bind(scorer.id.clone())
            .push(" AND version = ")
            .bind(version)
            .push(" RETURNING bytes");
        let Some(row) = txn.query_one_raw(sql.build()).await? else {
            return Err(not_found(experiment_id, name, Some(version)));
        };
        let bytes: i64 = get(&row, "bytes")?;
        let mut sql = self.sql();
        sql.push("SELECT MAX(version) AS latest FROM scorer_versions WHERE scorer_id = ")
            .bind(scorer.id.clone());
        let latest: Option<i32> = match txn.query_one_raw(sql.build()).await? {
            Some(row) => get(&row, "latest")?,
            None => None,
        };
        let Some(latest) = latest else {
            txn.execute_raw(remove.build()).await?;
            txn.commit().await?;
            return Ok(());
        };
        let mut sql = self.sql();
        sql.push("UPDATE scorers SET bytes = bytes - ")
            .bind(bytes)
            .push(", latest = ")
            .bind(latest)
            .push(" WHERE id = ")
            .bind(scorer.id);
        txn.execute_raw(sql.build()).await?;
        txn.commit().await?;
        Ok(())
    }

    /// Sets (or replaces) the online scoring configuration of a scorer.
    pub async fn upsert_online_config(
        &self,
        experiment_id: i64,
        name: &str,
        sample_rate: f64,
        filter_string: Option<&str>,
        who: Changer,
    ) -> Result<OnlineScoringConfig, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        lock_scorers(&txn, experiment_id).await?;
        let scorer = self
            .scorer_row(&txn, experiment_id, name)
            .await?
            .ok_or_else(|| not_found(experiment_id, name, None))?;
        scorer.may_change(who, name)?;
        let mut sql = self.sql();
        sql.push(
            "INSERT INTO scorer_online_configs (id, scorer_id, sample_rate, filter_string) VALUES (",
        )
        .bind(uuid::Uuid::new_v4().simple().to_string())
        .push(", ")
        .bind(scorer.id.clone())
        .push(", ")
        .bind(sample_rate)
        .push(", ")
        .bind(filter_string.map(str::to_owned))
        .push(
            ") ON CONFLICT (scorer_id) DO UPDATE SET sample_rate = excluded.sample_rate, \
             filter_string = excluded.filter_string",
        );
        txn.execute_raw(sql.build()).await?;
        txn.commit().await?;
        let mut found = self.online_configs(&[scorer.id], &Viewer::Everyone).await?;
        found
            .pop()
            .ok_or_else(|| not_found(experiment_id, name, None))
    }

    /// The online scoring configurations of `scorer_ids` that the viewer
    /// may see (those of experiments they may read).
    pub async fn online_configs(
        &self,
        scorer_ids: &[String],
        viewer: &Viewer,
    ) -> Result<Vec<OnlineScoringConfig>, StoreError> {
        if scorer_ids.is_empty() {
            return Ok(Vec::new());
        }
        let mut sql = self.sql();
        sql.push(
            "SELECT c.id, c.scorer_id, s.experiment_id, c.sample_rate, c.filter_string \
             FROM scorer_online_configs c JOIN scorers s ON s.id = c.scorer_id \
             JOIN experiments e ON e.id = s.experiment_id WHERE c.scorer_id IN ",
        )
        .bind_list(scorer_ids.iter().cloned());
        viewer.restrict(&mut sql, "e.owner_id", "e.team_id", Some("e.id = 0"));
        sql.push(" ORDER BY c.scorer_id");
        let rows = self.connection().query_all_raw(sql.build()).await?;
        rows.iter().map(config_of).collect()
    }
}
