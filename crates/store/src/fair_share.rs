//! Fair share's records: each team's guaranteed GPUs and weight, and the
//! GPU time teams and people used, kept by the hour as attempts end.

use std::collections::HashMap;

use sea_orm::{ActiveModelTrait, ConnectionTrait, EntityTrait, QueryOrder, Set};
use trainyard_domain::teams::{TeamPolicy, TeamPolicyChange};

use crate::entity::{membership, team};
use crate::{Store, StoreError};

const HOUR_MS: i64 = 3_600_000;

/// GPUs held by one team's and person's attempt over `[from_ms, to_ms)`.
/// Team and user 0: none.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuSpan {
    pub team_id: i64,
    pub user_id: i64,
    pub from_ms: i64,
    pub to_ms: i64,
    pub gpus: u32,
}

/// GPU-seconds of one team and person on one UTC day.
#[derive(Debug, Clone, PartialEq)]
pub struct DayUsage {
    /// Days since the Unix epoch.
    pub day: i64,
    pub team_id: i64,
    pub team: Option<String>,
    pub user_id: i64,
    pub user: Option<String>,
    pub gpu_seconds: f64,
}

/// Splits spans at hour boundaries: (team, user, hour) → GPU-seconds.
fn by_hour(spans: &[GpuSpan]) -> Vec<((i64, i64, i64), f64)> {
    let mut sums: HashMap<(i64, i64, i64), f64> = HashMap::new();
    for s in spans {
        if s.gpus == 0 || s.to_ms <= s.from_ms {
            continue;
        }
        let mut at = s.from_ms;
        while at < s.to_ms {
            let hour = at.div_euclid(HOUR_MS);
            let end = ((hour + 1) * HOUR_MS).min(s.to_ms);
            *sums.entry((s.team_id, s.user_id, hour)).or_default() +=
                (end - at) as f64 / 1000.0 * s.gpus as f64;
            at = end;
        }
    }
    let mut out: Vec<_> = sums.into_iter().collect();
    out.sort_by_key(|(k, _)| *k);
    out
}

impl Store {
    /// Every team with its guaranteed GPUs, weight and member count, by name.
    pub async fn team_policies(&self) -> Result<Vec<TeamPolicy>, StoreError> {
        let mut members: HashMap<i64, u32> = HashMap::new();
        for m in membership::Entity::find().all(self.connection()).await? {
            *members.entry(m.team_id).or_default() += 1;
        }
        Ok(team::Entity::find()
            .order_by_asc(team::Column::Name)
            .all(self.connection())
            .await?
            .into_iter()
            .map(|t| policy(t, &members))
            .collect())
    }

    /// Every team's guaranteed GPUs and weight, without counting members:
    /// what each scheduling cycle reads.
    pub async fn team_quotas(&self) -> Result<Vec<TeamPolicy>, StoreError> {
        Ok(team::Entity::find()
            .all(self.connection())
            .await?
            .into_iter()
            .map(|t| policy(t, &HashMap::new()))
            .collect())
    }

    /// Sets a team's guaranteed GPUs and weight (what is given).
    pub async fn set_team_policy(
        &self,
        id: i64,
        change: &TeamPolicyChange,
    ) -> Result<TeamPolicy, StoreError> {
        let _turn = self.write_turn().await;
        let found = team::Entity::find_by_id(id)
            .one(self.connection())
            .await?
            .ok_or_else(|| StoreError::NotFound(format!("team {id} does not exist")))?;
        let mut model: team::ActiveModel = found.into();
        if let Some(q) = change.quota_gpus {
            model.gpu_quota = Set(Some(q.min(i32::MAX as u32) as i32));
        }
        if let Some(s) = change.share {
            model.share = Set(s);
        }
        let saved = model.update(self.connection()).await?;
        let members = membership::Entity::find()
            .all(self.connection())
            .await?
            .into_iter()
            .filter(|m| m.team_id == id)
            .count() as u32;
        Ok(policy(saved, &HashMap::from([(id, members)])))
    }

    /// Makes a team by hand (`name` checked by the caller): its members
    /// join it as they sign in with the group of that name. Conflict when
    /// a team of that name exists.
    pub async fn create_team(
        &self,
        name: &str,
        change: &TeamPolicyChange,
    ) -> Result<TeamPolicy, StoreError> {
        let _turn = self.write_turn().await;
        let saved = team::ActiveModel {
            name: Set(name.to_owned()),
            gpu_quota: Set(change.quota_gpus.map(|q| q.min(i32::MAX as u32) as i32)),
            share: Set(change.share.unwrap_or(1.0)),
            priority: Set(0),
            created_at: Set(crate::now_millis()),
            ..Default::default()
        }
        .insert(self.connection())
        .await
        .map_err(|err| match err.sql_err() {
            // The names are unique: one taken, also by a sign-in meanwhile.
            Some(sea_orm::SqlErr::UniqueConstraintViolation(_)) => StoreError::Conflict {
                what: format!("team `{name}`"),
            },
            _ => StoreError::Db(err),
        })?;
        Ok(policy(saved, &HashMap::new()))
    }

    /// Adds ended attempts' GPU time, hour by hour, in one statement.
    pub async fn add_gpu_usage(&self, spans: &[GpuSpan]) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        self.add_gpu_usage_in(self.connection(), spans).await
    }

    /// [`Store::add_gpu_usage`] on `db` (a transaction), under the caller's
    /// write turn.
    pub(crate) async fn add_gpu_usage_in(
        &self,
        db: &impl ConnectionTrait,
        spans: &[GpuSpan],
    ) -> Result<(), StoreError> {
        let hours = by_hour(spans);
        // Bounded statements: 4 values a row.
        for chunk in hours.chunks(2000) {
            let mut sql = self.sql();
            sql.push("INSERT INTO gpu_usage (team_id, user_id, hour, gpu_seconds) VALUES ");
            for (i, ((team, user, hour), seconds)) in chunk.iter().enumerate() {
                if i > 0 {
                    sql.push(", ");
                }
                sql.push("(")
                    .bind(*team)
                    .push(", ")
                    .bind(*user)
                    .push(", ")
                    .bind(*hour)
                    .push(", ")
                    .bind(*seconds)
                    .push(")");
            }
            sql.push(
                " ON CONFLICT (team_id, user_id, hour) DO UPDATE SET gpu_seconds = gpu_usage.gpu_seconds + excluded.gpu_seconds",
            );
            db.execute_raw(sql.build()).await?;
        }
        Ok(())
    }

    /// GPU-seconds by UTC day, team and person over the hours that
    /// `[from_ms, to_ms)` touches, with names; `only` keeps the rows of one person or
    /// of the teams given (what a non-admin may see).
    pub async fn gpu_usage_by_day(
        &self,
        from_ms: i64,
        to_ms: i64,
        only: Option<(i64, &[i64])>,
    ) -> Result<Vec<DayUsage>, StoreError> {
        let mut sql = self.sql();
        sql.push(
            "SELECT u.hour / 24 AS day, u.team_id, t.name AS team, u.user_id, us.username AS username, \
             SUM(u.gpu_seconds) AS gpu_seconds FROM gpu_usage u \
             LEFT JOIN teams t ON t.id = u.team_id LEFT JOIN users us ON us.id = u.user_id \
             WHERE u.hour >= ",
        )
        .bind(from_ms.div_euclid(HOUR_MS))
        // The hour `to_ms` falls in counts (whole hours are kept).
        .push(" AND u.hour < ")
        .bind(to_ms.saturating_add(HOUR_MS - 1).div_euclid(HOUR_MS));
        if let Some((user, teams)) = only {
            sql.push(" AND (u.user_id = ").bind(user);
            if !teams.is_empty() {
                sql.push(" OR u.team_id IN ")
                    .bind_list(teams.iter().copied());
            }
            sql.push(")");
        }
        sql.push(
            " GROUP BY u.hour / 24, u.team_id, t.name, u.user_id, us.username ORDER BY day, team, username",
        );
        let rows = self.connection().query_all_raw(sql.build()).await?;
        rows.into_iter()
            .map(|row| {
                Ok(DayUsage {
                    day: row.try_get("", "day")?,
                    team_id: row.try_get("", "team_id")?,
                    team: row.try_get("", "team")?,
                    user_id: row.try_get("", "user_id")?,
                    user: row.try_get("", "username")?,
                    gpu_seconds: row.try_get("", "gpu_seconds")?,
                })
            })
            .collect()
    }

    /// GPU-seconds by team, person and day since `from_ms`: what the
    /// scheduler's decayed usage starts from.
    pub async fn gpu_usage_since(&self, from_ms: i64) -> Result<Vec<DayUsage>, StoreError> {
        self.gpu_usage_by_day(from_ms, i64::MAX, None).await
    }
}

fn policy(t: team::Model, members: &HashMap<i64, u32>) -> TeamPolicy {
    TeamPolicy {
        id: t.id,
        members: members.get(&t.id).copied().unwrap_or(0),
        name: t.name,
        quota_gpus: t.gpu_quota.unwrap_or(0).max(0) as u32,
        share: if t.share.is_finite() && t.share > 0.0 {
            t.share
        } else {
            1.0
        },
        gpus_in_use: 0,
        gpus_borrowed: 0,
        decayed_gpu_hours: 0.0,
        waiting_beyond_guarantee: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SignIn;
    use trainyard_test_db::TestDb;

    async fn person(
        store: &Store,
        name: &str,
        groups: &[&str],
    ) -> trainyard_domain::identity::User {
        store
            .sign_in(SignIn {
                subject: format!("sub-{name}"),
                username: name.to_owned(),
                display_name: String::new(),
                email: None,
                is_admin: false,
                groups: groups.iter().map(|g| g.to_string()).collect(),
            })
            .await
            .unwrap()
    }

    /// On SQLite and (with TEST_DATABASE_URL) PostgreSQL.
    #[tokio::test]
    async fn policies_and_usage_round_trip() {
        let db = TestDb::new().await;
        let store = Store::connect(&db.url, 4).await.unwrap();
        store.migrate().await.unwrap();
        let ada = person(&store, "ada", &["vision", "nlp"]).await;
        let bob = person(&store, "bob", &["vision"]).await;
        let teams = store.team_policies().await.unwrap();
        let names: Vec<_> = teams
            .iter()
            .map(|t| (t.name.as_str(), t.quota_gpus, t.share, t.members))
            .collect();
        assert_eq!(
            names,
            vec![("nlp", 0, 1.0, 1), ("vision", 0, 1.0, 2)],
            "teams from sign-in, with defaults"
        );
        let vision = teams[1].id;
        let nlp = teams[0].id;
        let set = store
            .set_team_policy(
                vision,
                &TeamPolicyChange {
                    quota_gpus: Some(4),
                    share: None,
                },
            )
            .await
            .unwrap();
        assert_eq!((set.quota_gpus, set.share, set.members), (4, 1.0, 2));
        let set = store
            .set_team_policy(
                vision,
                &TeamPolicyChange {
                    quota_gpus: None,
                    share: Some(2.5),
                },
            )
            .await
            .unwrap();
        assert_eq!(
            (set.quota_gpus, set.share),
            (4, 2.5),
            "what is left out stays"
        );
        assert!(matches!(
            store
                .set_team_policy(999, &TeamPolicyChange::default())
                .await,
            Err(StoreError::NotFound(_))
        ));

        // Two attempts of ada's (one across midnight), one of bob's; the
        // second write adds to the first.
        let day = 24 * HOUR_MS;
        let spans = [
            GpuSpan {
                team_id: vision,
                user_id: ada.id,
                from_ms: day - HOUR_MS,
                to_ms: day + HOUR_MS,
                gpus: 2,
            },
            GpuSpan {
                team_id: nlp,
                user_id: ada.id,
                from_ms: day,
                to_ms: day + HOUR_MS / 2,
                gpus: 1,
            },
        ];
        store.add_gpu_usage(&spans).await.unwrap();
        store
            .add_gpu_usage(&[GpuSpan {
                team_id: vision,
                user_id: bob.id,
                from_ms: day,
                to_ms: day + HOUR_MS,
                gpus: 4,
            }])
            .await
            .unwrap();
        store
            .add_gpu_usage(&[GpuSpan {
                team_id: vision,
                user_id: ada.id,
                from_ms: day,
                to_ms: day + HOUR_MS,
                gpus: 1,
            }])
            .await
            .unwrap();
        let rows = store.gpu_usage_since(0).await.unwrap();
        let seen: Vec<_> = rows
            .iter()
            .map(|r| {
                (
                    r.day,
                    r.team.as_deref().unwrap(),
                    r.user.as_deref().unwrap(),
                    r.gpu_seconds,
                )
            })
            .collect();
        assert_eq!(
            seen,
            vec![
                (0, "vision", "ada", 7200.0),
                (1, "nlp", "ada", 1800.0),
                (1, "vision", "ada", 7200.0 + 3600.0),
                (1, "vision", "bob", 14400.0),
            ]
        );
        // Bob, alone in vision, sees vision's rows; ada's nlp row is not his.
        let his = store
            .gpu_usage_by_day(0, 2 * day, Some((bob.id, &[vision])))
            .await
            .unwrap();
        assert_eq!(his.len(), 3);
        assert!(his.iter().all(|r| r.team_id == vision));
        // A period that ends before the second day.
        assert_eq!(store.gpu_usage_by_day(0, day, None).await.unwrap().len(), 1);
        // One that ends within an hour counts that hour.
        assert_eq!(
            store
                .gpu_usage_by_day(0, day + 1, None)
                .await
                .unwrap()
                .len(),
            4
        );
    }

    /// A running job moved to another team: the part of its attempt before
    /// the move is charged to the team it ran for, at once, and the rest
    /// of the attempt starts from the move. A new attempt starts clean.
    #[tokio::test]
    async fn a_moved_attempt_is_charged_to_each_team_for_its_part() {
        use crate::entity::job;
        use crate::{JobChange, now_millis};
        use trainyard_domain::JobState;

        let db = TestDb::new().await;
        let store = Store::connect(&db.url, 4).await.unwrap();
        store.migrate().await.unwrap();
        let ada = person(&store, "ada", &["vision", "nlp"]).await;
        let teams = store.team_policies().await.unwrap();
        let (nlp, vision) = (teams[0].id, teams[1].id);
        let started = now_millis() - 2 * HOUR_MS;
        let id = job::ActiveModel {
            name: Set("moved".to_owned()),
            state: Set(JobState::Running.as_str().to_owned()),
            spec: Set(r#"{"name": "moved", "command": "true"}"#.to_owned()),
            gpus: Set(2),
            gpu_indices: Set(Some("0,1".to_owned())),
            owner_id: Set(Some(ada.id)),
            team_id: Set(Some(vision)),
            created_at: Set(started),
            started_at: Set(Some(started)),
            ..Default::default()
        }
        .insert(store.connection())
        .await
        .unwrap()
        .id;

        let (moved, charged) = store.set_job_team(id, Some(nlp), "to nlp").await.unwrap();
        let span = charged.expect("the part so far is charged");
        assert_eq!(
            (span.team_id, span.user_id, span.from_ms, span.gpus),
            (vision, ada.id, started, 2)
        );
        assert!(span.to_ms >= started + 2 * HOUR_MS, "{span:?}");
        assert_eq!(moved.team_id, Some(nlp));
        assert_eq!(
            moved.charge_start(),
            Some(span.to_ms),
            "the rest starts here"
        );
        let recorded: Vec<_> = store
            .gpu_usage_since(0)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.team_id, r.gpu_seconds))
            .collect();
        let vision_seconds: f64 = recorded
            .iter()
            .filter(|(t, _)| *t == vision)
            .map(|(_, s)| s)
            .sum();
        let expected = (span.to_ms - started) as f64 / 1000.0 * 2.0;
        assert!(
            (vision_seconds - expected).abs() < 1e-6,
            "{vision_seconds} against {expected}: {recorded:?}"
        );
        assert!(recorded.iter().all(|(t, _)| *t == vision), "{recorded:?}");

        // Moved again: only what came after the first move is charged.
        let (_, again) = store.set_job_team(id, Some(vision), "back").await.unwrap();
        let again = again.unwrap();
        assert_eq!((again.team_id, again.from_ms), (nlp, span.to_ms));

        // The attempt's end charges what is left since the last move, to
        // the team it runs for then; once, and not for another attempt.
        let end = store.charge_attempt(id, started).await.unwrap().unwrap();
        assert_eq!((end.team_id, end.from_ms), (vision, again.to_ms));
        assert_eq!(store.charge_attempt(id, started + 1).await.unwrap(), None);
        let again_end = store.charge_attempt(id, started).await.unwrap().unwrap();
        assert_eq!(again_end.from_ms, end.to_ms, "nothing charged twice");

        // A new attempt is charged from its own start.
        let restart = started + HOUR_MS * 3;
        assert!(
            store
                .move_job(
                    id,
                    &[JobState::Running],
                    JobState::Running,
                    JobChange {
                        started_at: Some(Some(restart)),
                        ..Default::default()
                    },
                )
                .await
                .unwrap()
        );
        assert_eq!(
            store.get_job(id).await.unwrap().charge_start(),
            Some(restart)
        );

        // A queued job has nothing to charge.
        store
            .move_job(
                id,
                &[JobState::Running],
                JobState::Queued,
                JobChange {
                    started_at: Some(None),
                    ..Default::default()
                },
            )
            .await
            .unwrap();
        let (_, none) = store.set_job_team(id, Some(nlp), "queued").await.unwrap();
        assert_eq!(none, None);
    }

    #[test]
    fn spans_are_split_at_hours() {
        let spans = [GpuSpan {
            team_id: 1,
            user_id: 2,
            from_ms: HOUR_MS / 2,
            to_ms: 2 * HOUR_MS + HOUR_MS / 4,
            gpus: 2,
        }];
        let hours = by_hour(&spans);
        assert_eq!(
            hours,
            vec![
                ((1, 2, 0), 3600.0),
                ((1, 2, 1), 7200.0),
                ((1, 2, 2), 1800.0)
            ]
        );
        assert!(
            by_hour(&[GpuSpan {
                gpus: 0,
                ..spans[0]
            }])
            .is_empty()
        );
    }
}
