//! MLflow 3's registered scorers on SQLite and (with TEST_DATABASE_URL)
//! PostgreSQL: versions, listing, deletes, online configurations, who sees
//! what, and the bounds.

use sea_orm::{ConnectionTrait, TransactionTrait};
use trainyard_domain::identity::User;

use crate::scorers::{
    Changer, MAX_DEFAULT_SCORER_BYTES_EACH, MAX_DEFAULT_SCORERS_EACH, MAX_EXPERIMENT_SCORER_BYTES,
    MAX_EXPERIMENT_SCORERS, MAX_LISTED_BYTES, MAX_SCORER_VERSIONS,
};
use crate::test_support::{person, store};
use crate::{Store, StoreError, Viewer};

fn judge(instructions: &str) -> String {
    serde_json::json!({
        "name": "judge",
        "instructions_judge_pydantic_data": {"instructions": instructions, "model": "openai:/gpt-4o-mini"},
    })
    .to_string()
}

async fn exec(store: &Store, sql: &str) {
    store
        .connection()
        .execute_unprepared(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

#[tokio::test]
async fn versions_count_up_and_the_latest_is_what_is_read() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &["nlp"]).await;
    let exp = store
        .create_experiment_with("judges", None, &[], ana.as_owner())
        .await
        .unwrap();
    let one = store
        .register_scorer(exp, "tone", &judge("v1"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    let two = store
        .register_scorer(exp, "tone", &judge("v2"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    let other = store
        .register_scorer(
            exp,
            "brevity",
            &judge("short"),
            Some(ana.id),
            Changer::Experiment,
        )
        .await
        .unwrap();
    assert_eq!((one.version, two.version, other.version), (1, 2, 1));
    assert_eq!(one.scorer_id, two.scorer_id, "one scorer, two versions");
    assert_ne!(one.scorer_id, other.scorer_id);

    let latest = store.get_scorer(exp, "tone", None).await.unwrap();
    assert_eq!((latest.version, latest.serialized), (2, judge("v2")));
    let first = store.get_scorer(exp, "tone", Some(1)).await.unwrap();
    assert_eq!(first.serialized, judge("v1"));
    let all = store.scorer_versions(exp, "tone").await.unwrap();
    assert_eq!(all.iter().map(|s| s.version).collect::<Vec<_>>(), [1, 2]);

    let listed = store
        .latest_scorers(Some(&[exp]), &Viewer::of(&ana))
        .await
        .unwrap();
    let names: Vec<(&str, i32)> = listed
        .iter()
        .map(|s| (s.name.as_str(), s.version))
        .collect();
    assert_eq!(names, [("brevity", 1), ("tone", 2)]);
    let every = store.experiment_scorer_versions(exp, 100).await.unwrap();
    let every: Vec<(&str, i32)> = every.iter().map(|s| (s.name.as_str(), s.version)).collect();
    assert_eq!(every, [("brevity", 1), ("tone", 2), ("tone", 1)]);
    assert_eq!(
        store
            .experiment_scorer_versions(exp, 2)
            .await
            .unwrap()
            .len(),
        2
    );

    // The same name in another experiment is another scorer.
    let elsewhere = store
        .create_experiment_with("more judges", None, &[], ana.as_owner())
        .await
        .unwrap();
    let there = store
        .register_scorer(
            elsewhere,
            "tone",
            &judge("x"),
            Some(ana.id),
            Changer::Experiment,
        )
        .await
        .unwrap();
    assert_eq!(there.version, 1);
    assert_eq!(
        store
            .latest_scorers(None, &Viewer::of(&ana))
            .await
            .unwrap()
            .len(),
        3
    );

    match store.get_scorer(exp, "tone", Some(7)).await {
        Err(StoreError::NotFound(m)) => assert!(m.contains("version 7"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.scorer_versions(exp, "nothing").await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn deleting_versions_keeps_numbers_and_the_last_one_takes_the_scorer() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("judges", None, &[], ana.as_owner())
        .await
        .unwrap();
    for text in ["a", "b", "c"] {
        store
            .register_scorer(exp, "tone", &judge(text), Some(ana.id), Changer::Experiment)
            .await
            .unwrap();
    }
    store
        .upsert_online_config(exp, "tone", 0.0, Some("status = 'OK'"), Changer::Experiment)
        .await
        .unwrap();

    // The latest goes: the one before is read, and the next version is 4,
    // not 3 again.
    store
        .delete_scorer(exp, "tone", Some(3), Changer::Experiment)
        .await
        .unwrap();
    let latest = store.get_scorer(exp, "tone", None).await.unwrap();
    assert_eq!((latest.version, latest.serialized), (2, judge("b")));
    let next = store
        .register_scorer(exp, "tone", &judge("d"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    assert_eq!(next.version, 4);
    assert!(matches!(
        store
            .delete_scorer(exp, "tone", Some(3), Changer::Experiment)
            .await,
        Err(StoreError::NotFound(_))
    ));

    // Every version gone one by one: the scorer goes with its config.
    for v in [1, 2, 4] {
        store
            .delete_scorer(exp, "tone", Some(v), Changer::Experiment)
            .await
            .unwrap();
    }
    assert!(matches!(
        store.get_scorer(exp, "tone", None).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(
        store
            .online_configs(std::slice::from_ref(&next.scorer_id), &Viewer::Everyone)
            .await
            .unwrap()
            .is_empty()
    );
    // Registered again, it starts over.
    let again = store
        .register_scorer(exp, "tone", &judge("e"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    assert_eq!(again.version, 1);
    assert_ne!(again.scorer_id, next.scorer_id);

    // Deleting without a version takes every version.
    store
        .register_scorer(exp, "tone", &judge("f"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    store
        .delete_scorer(exp, "tone", None, Changer::Experiment)
        .await
        .unwrap();
    assert!(matches!(
        store
            .delete_scorer(exp, "tone", None, Changer::Experiment)
            .await,
        Err(StoreError::NotFound(_))
    ));
    let mut held = store.sql();
    held.push("SELECT COUNT(*) AS n FROM scorer_versions");
    let row = store
        .connection()
        .query_one_raw(held.build())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.try_get::<i64>("", "n").unwrap(), 0);
}

#[tokio::test]
async fn online_configs_are_replaced_and_shown_to_readers_only() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &["nlp"]).await;
    let ben = person(&store, "ben", &["nlp"]).await;
    let eve = person(&store, "eve", &["vision"]).await;
    let exp = store
        .create_experiment_with("judges", None, &[], ana.as_owner())
        .await
        .unwrap();
    let made = store
        .register_scorer(exp, "tone", &judge("a"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    let first = store
        .upsert_online_config(exp, "tone", 0.0, Some("status = 'OK'"), Changer::Experiment)
        .await
        .unwrap();
    let second = store
        .upsert_online_config(exp, "tone", 0.0, None, Changer::Experiment)
        .await
        .unwrap();
    assert_eq!(first.config_id, second.config_id, "one config a scorer");
    assert_eq!(second.filter_string, None);
    assert_eq!(second.experiment_id, exp);

    let ids = [made.scorer_id.clone(), "no-such-scorer".to_owned()];
    let seen = |user: &User| {
        let store = store.clone();
        let ids = ids.clone();
        let viewer = Viewer::of(user);
        async move { store.online_configs(&ids, &viewer).await.unwrap().len() }
    };
    assert_eq!(seen(&ana).await, 1);
    assert_eq!(seen(&ben).await, 1, "the team reads the experiment");
    assert_eq!(seen(&eve).await, 0, "another team does not");
    assert_eq!(
        store
            .latest_scorers(None, &Viewer::of(&eve))
            .await
            .unwrap()
            .len(),
        0
    );
    assert!(matches!(
        store
            .upsert_online_config(exp, "nothing", 0.0, None, Changer::Experiment)
            .await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn the_bounds_of_a_scorer_and_an_experiment_refuse_before_writing() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("judges", None, &[], ana.as_owner())
        .await
        .unwrap();
    let made = store
        .register_scorer(exp, "tone", &judge("a"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();

    // A scorer given its last version number takes no more.
    exec(
        &store,
        &format!(
            "UPDATE scorers SET given = {MAX_SCORER_VERSIONS} WHERE id = '{}'",
            made.scorer_id
        ),
    )
    .await;
    match store
        .register_scorer(exp, "tone", &judge("b"), Some(ana.id), Changer::Experiment)
        .await
    {
        Err(StoreError::Rejected(m)) => assert!(m.contains("new name"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(store.scorer_versions(exp, "tone").await.unwrap().len(), 1);

    // The experiment's bytes: a version that would pass them is refused.
    exec(
        &store,
        &format!(
            "UPDATE scorers SET bytes = {} WHERE id = '{}'",
            MAX_EXPERIMENT_SCORER_BYTES - 10,
            made.scorer_id
        ),
    )
    .await;
    match store
        .register_scorer(
            exp,
            "other",
            &judge("long enough"),
            Some(ana.id),
            Changer::Experiment,
        )
        .await
    {
        Err(StoreError::Rejected(m)) => assert!(m.contains("delete old versions"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert!(store.scorer_maker(exp, "other").await.unwrap().is_none());
    exec(
        &store,
        &format!(
            "UPDATE scorers SET bytes = 0 WHERE id = '{}'",
            made.scorer_id
        ),
    )
    .await;

    // The experiment's count of scorers.
    let rows: Vec<String> = (1..MAX_EXPERIMENT_SCORERS)
        .map(|i| format!("('id-{i}', {exp}, 'filler-{i}', 1, 1, 0, NULL)"))
        .collect();
    exec(
        &store,
        &format!(
            "INSERT INTO scorers (id, experiment_id, name, latest, given, bytes, user_id) VALUES {}",
            rows.join(", ")
        ),
    )
    .await;
    match store
        .register_scorer(
            exp,
            "one more",
            &judge("x"),
            Some(ana.id),
            Changer::Experiment,
        )
        .await
    {
        Err(StoreError::Rejected(m)) => assert!(m.contains("are 1000, the most"), "{m}"),
        other => panic!("{other:?}"),
    }
    // A new version of a scorer that is there is no new scorer.
    exec(
        &store,
        &format!(
            "UPDATE scorers SET given = 1 WHERE id = '{}'",
            made.scorer_id
        ),
    )
    .await;
    let next = store
        .register_scorer(exp, "tone", &judge("b"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    assert_eq!(next.version, 2);
    assert_eq!(
        store.scorer_maker(exp, "tone").await.unwrap(),
        Some(Some(ana.id))
    );
}

async fn bytes_held(store: &Store, exp: i64, name: &str) -> i64 {
    let mut sql = store.sql();
    sql.push("SELECT bytes FROM scorers WHERE experiment_id = ")
        .bind(exp)
        .push(" AND name = ")
        .bind(name.to_owned());
    let row = store
        .connection()
        .query_one_raw(sql.build())
        .await
        .unwrap()
        .unwrap();
    row.try_get::<i64>("", "bytes").unwrap()
}

#[tokio::test]
async fn in_default_a_scorer_is_its_makers_and_the_bounds_are_each_makers() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let ben = person(&store, "ben", &[]).await;
    let as_ana = Changer::Maker(ana.id);
    let as_ben = Changer::Maker(ben.id);
    store
        .register_scorer(0, "tone", &judge("a"), Some(ana.id), as_ana)
        .await
        .unwrap();
    // Checked in the writer's transaction: ben adds no version, config or
    // delete to ana's scorer, and nothing of his is written.
    let refused = [
        store
            .register_scorer(0, "tone", &judge("b"), Some(ben.id), as_ben)
            .await
            .map(|_| ()),
        store.delete_scorer(0, "tone", None, as_ben).await,
        store.delete_scorer(0, "tone", Some(1), as_ben).await,
        store
            .upsert_online_config(0, "tone", 0.0, None, as_ben)
            .await
            .map(|_| ()),
    ];
    for r in refused {
        match r {
            Err(StoreError::Forbidden(m)) => assert!(m.contains("another name"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(store.scorer_versions(0, "tone").await.unwrap().len(), 1);
    let next = store
        .register_scorer(0, "tone", &judge("c"), Some(ana.id), as_ana)
        .await
        .unwrap();
    assert_eq!(next.version, 2);

    // A single version deleted gives back its bytes.
    let before = bytes_held(&store, 0, "tone").await;
    assert_eq!(before, (judge("a").len() + judge("c").len()) as i64);
    store
        .delete_scorer(0, "tone", Some(1), as_ana)
        .await
        .unwrap();
    assert_eq!(bytes_held(&store, 0, "tone").await, judge("c").len() as i64);

    // Ana's share of Default's bytes is hers to fill: she is refused, and so
    // is an admin adding a version to her scorer (its bytes are hers); ben
    // is not.
    exec(
        &store,
        &format!(
            "UPDATE scorers SET bytes = {} WHERE id = '{}'",
            MAX_DEFAULT_SCORER_BYTES_EACH - 10,
            next.scorer_id
        ),
    )
    .await;
    let admin = store
        .sign_in(crate::SignIn {
            subject: "sub-root".to_owned(),
            username: "root".to_owned(),
            display_name: String::new(),
            email: None,
            is_admin: true,
            groups: Vec::new(),
        })
        .await
        .unwrap();
    for refused in [
        store
            .register_scorer(0, "brevity", &judge("short"), Some(ana.id), as_ana)
            .await,
        store
            .register_scorer(
                0,
                "tone",
                &judge("long enough"),
                Some(admin.id),
                Changer::Experiment,
            )
            .await,
    ] {
        match refused {
            Err(StoreError::Rejected(m)) => {
                assert!(m.contains("their maker in the Default"), "{m}")
            }
            other => panic!("{other:?}"),
        }
    }
    store
        .register_scorer(0, "brevity", &judge("short"), Some(ben.id), as_ben)
        .await
        .unwrap();

    // And her share of Default's scorers.
    exec(
        &store,
        &format!(
            "UPDATE scorers SET bytes = 0 WHERE id = '{}'",
            next.scorer_id
        ),
    )
    .await;
    let rows: Vec<String> = (1..MAX_DEFAULT_SCORERS_EACH)
        .map(|i| format!("('filler-{i}', 0, 'filler-{i}', 1, 1, 0, {})", ana.id))
        .collect();
    exec(
        &store,
        &format!(
            "INSERT INTO scorers (id, experiment_id, name, latest, given, bytes, user_id) VALUES {}",
            rows.join(", ")
        ),
    )
    .await;
    match store
        .register_scorer(0, "one more", &judge("x"), Some(ana.id), as_ana)
        .await
    {
        Err(StoreError::Rejected(m)) => assert!(m.contains("are 100, the most"), "{m}"),
        other => panic!("{other:?}"),
    }
    store
        .register_scorer(0, "bens second", &judge("x"), Some(ben.id), as_ben)
        .await
        .unwrap();
    // A new version of a scorer she has is no new scorer.
    store
        .register_scorer(0, "tone", &judge("d"), Some(ana.id), as_ana)
        .await
        .unwrap();
}

#[tokio::test]
async fn a_listing_past_its_bytes_is_refused_before_it_is_read() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("judges", None, &[], ana.as_owner())
        .await
        .unwrap();
    let made = store
        .register_scorer(exp, "tone", &judge("a"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    let viewer = Viewer::of(&ana);
    assert_eq!(store.latest_scorers(None, &viewer).await.unwrap().len(), 1);
    exec(
        &store,
        &format!(
            "UPDATE scorer_versions SET bytes = {} WHERE scorer_id = '{}'",
            MAX_LISTED_BYTES + 1,
            made.scorer_id
        ),
    )
    .await;
    for listed in [
        store.latest_scorers(None, &viewer).await,
        store.latest_scorers(Some(&[exp]), &viewer).await,
    ] {
        match listed {
            Err(StoreError::Rejected(m)) => assert!(m.contains("name fewer experiments"), "{m}"),
            other => panic!("{other:?}"),
        }
    }
}

/// SQLite: a write that reads before it writes waits while another
/// connection holds the write lock (as one does for a moment while sqlx
/// rolls back a transaction that an error dropped), instead of failing at
/// once with "database is locked".
#[tokio::test]
async fn a_write_waits_while_another_connection_holds_sqlites_lock() {
    let (db, store) = store().await;
    if db.is_postgres() {
        return;
    }
    let ana = person(&store, "ana", &[]).await;
    let exp = store
        .create_experiment_with("locks", None, &[], ana.as_owner())
        .await
        .unwrap();
    store
        .register_scorer(exp, "tone", &judge("a"), Some(ana.id), Changer::Experiment)
        .await
        .unwrap();
    let other = Store::connect(&db.url, 1).await.unwrap();
    let holder = other.connection().begin().await.unwrap();
    holder
        .execute_unprepared("UPDATE experiments SET name = name")
        .await
        .unwrap();
    let (deleted, ()) = tokio::join!(
        store.delete_scorer(exp, "tone", None, Changer::Experiment),
        async {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            holder.rollback().await.unwrap();
        }
    );
    deleted.unwrap();
    assert!(matches!(
        store.get_scorer(exp, "tone", None).await,
        Err(StoreError::NotFound(_))
    ));
}
