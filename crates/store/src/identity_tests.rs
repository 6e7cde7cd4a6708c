//! Accounts, sessions, sign-ins and tokens, on SQLite and PostgreSQL.

use super::*;
use crate::identity::{LOCAL_SUBJECT, secret_hash};
use crate::test_support::new_key;
use sea_orm::ConnectionTrait;
use trainyard_domain::identity::User;
use trainyard_test_db::TestDb;

async fn migrated(db: &TestDb) -> Store {
    let store = Store::connect(&db.url, 4)
        .await
        .expect("connect")
        .with_sealing_key(new_key());
    store.migrate().await.expect("migrate");
    store
}

fn alice(groups: &[&str]) -> SignIn {
    SignIn {
        subject: "sub-alice".to_owned(),
        username: "alice".to_owned(),
        display_name: "Alice A.".to_owned(),
        email: Some("alice@uni.example".to_owned()),
        is_admin: false,
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

fn bob(groups: &[&str]) -> SignIn {
    SignIn {
        subject: "sub-bob".to_owned(),
        username: "bob".to_owned(),
        display_name: String::new(),
        email: None,
        is_admin: false,
        groups: groups.iter().map(|g| g.to_string()).collect(),
    }
}

fn team_names(user: &trainyard_domain::identity::User) -> Vec<&str> {
    user.teams.iter().map(|t| t.name.as_str()).collect()
}

#[tokio::test]
async fn sign_in_ties_the_account_to_the_subject_and_teams_follow_groups() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let first = store
        .sign_in(alice(&["vision", "nlp", "vision", " "]))
        .await
        .unwrap();
    assert_eq!(team_names(&first), ["nlp", "vision"]);
    assert_eq!(first.email.as_deref(), Some("alice@uni.example"));

    // The next sign-in updates the same account; a group left is a team left.
    let mut again = alice(&["vision", "robotics"]);
    again.display_name = "Alice Anders".to_owned();
    again.is_admin = true;
    let second = store.sign_in(again).await.unwrap();
    assert_eq!(second.id, first.id);
    assert_eq!(second.display_name, "Alice Anders");
    assert!(second.is_admin);
    assert_eq!(team_names(&second), ["robotics", "vision"]);

    // Someone else with the same team name shares the team.
    let bob = store.sign_in(bob(&["vision"])).await.unwrap();
    assert_eq!(
        bob.display_name, "bob",
        "the username stands in for a missing name"
    );
    let vision = |u: &trainyard_domain::identity::User| {
        u.teams.iter().find(|t| t.name == "vision").unwrap().id
    };
    assert_eq!(vision(&bob), vision(&second));

    // Another subject claiming alice's username is refused, not merged.
    let mut impostor = alice(&[]);
    impostor.subject = "sub-mallory".to_owned();
    let err = store.sign_in(impostor).await.unwrap_err();
    assert!(
        err.to_string().contains("belongs to another account"),
        "{err}"
    );
    let mut empty = alice(&[]);
    empty.subject.clear();
    assert!(store.sign_in(empty).await.is_err());
}

#[tokio::test]
async fn the_local_admin_is_created_once() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let a = store.local_admin().await.unwrap();
    let b = store.local_admin().await.unwrap();
    assert_eq!(a.id, b.id);
    assert!(a.is_admin);
    assert_eq!(a.username, "local");
    // No provider can sign in as the local admin's subject by username.
    let err = store
        .sign_in(SignIn {
            subject: "sub-x".to_owned(),
            username: "local".to_owned(),
            display_name: String::new(),
            email: None,
            is_admin: false,
            groups: vec![],
        })
        .await
        .unwrap_err();
    assert!(err.to_string().contains("another account"));
    assert_ne!(LOCAL_SUBJECT, "sub-x");
}

#[tokio::test]
async fn sessions_open_expire_and_end() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let user = store.sign_in(alice(&["vision"])).await.unwrap();
    let opened = store
        .create_session(user.id, Duration::from_secs(3600), Some("id.token".into()))
        .await
        .unwrap();
    assert_ne!(opened.secret, opened.csrf_token);
    let live = store.session(&opened.secret).await.unwrap().unwrap();
    assert_eq!(live.user, user);
    assert_eq!(live.csrf_token, opened.csrf_token);
    // Only the hash is stored: the secret itself opens nothing.
    assert!(
        store
            .session(&secret_hash(&opened.secret))
            .await
            .unwrap()
            .is_none()
    );
    assert!(store.session("forged").await.unwrap().is_none());

    assert_eq!(
        store.end_session(&opened.secret).await.unwrap().as_deref(),
        Some("id.token")
    );
    assert!(store.session(&opened.secret).await.unwrap().is_none());

    let expired = store
        .create_session(user.id, Duration::ZERO, None)
        .await
        .unwrap();
    assert!(store.session(&expired.secret).await.unwrap().is_none());

    let a = store
        .create_session(user.id, Duration::from_secs(60), None)
        .await
        .unwrap();
    let b = store
        .create_session(user.id, Duration::from_secs(60), None)
        .await
        .unwrap();
    let listed = store.users().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].user.username, "alice");
    assert_eq!(
        listed[0].live_sessions, 2,
        "the ended and the expired ones do not count"
    );
    assert!(listed[0].last_login_at.is_some());
    assert_eq!(store.end_sessions_of(user.id).await.unwrap(), 2);
    assert!(store.session(&a.secret).await.unwrap().is_none());
    assert!(store.session(&b.secret).await.unwrap().is_none());
}

#[tokio::test]
async fn a_sign_in_in_progress_is_taken_once() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let attempt = LoginAttempt {
        state: "state-1".to_owned(),
        nonce: "nonce-1".to_owned(),
        browser: "browser-1".to_owned(),
        pkce_verifier: "verifier-1".to_owned(),
        return_to: "/jobs".to_owned(),
    };
    store.begin_login(attempt.clone()).await.unwrap();
    assert!(store.take_login("state-2").await.unwrap().is_none());
    assert_eq!(store.take_login("state-1").await.unwrap(), Some(attempt));
    assert!(
        store.take_login("state-1").await.unwrap().is_none(),
        "a replayed state is refused"
    );
}

#[tokio::test]
async fn tokens_authenticate_until_revoked_or_expired() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let user = store.sign_in(alice(&[])).await.unwrap();
    let made = store
        .create_api_token(user.id, "laptop", None)
        .await
        .unwrap();
    assert!(made.secret.starts_with("ty_") && made.secret.len() > 40);
    assert!(made.secret.starts_with(&made.token.prefix));
    let found = store.token_user(&made.secret).await.unwrap().unwrap();
    assert_eq!((found.user.id, found.run_id), (user.id, None));
    let listed = store.api_tokens(user.id).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(listed[0].last_used_at.is_some(), "use is recorded");

    // Someone else cannot revoke it; its owner can, once.
    let bob = store.sign_in(bob(&[])).await.unwrap();
    assert!(!store.revoke_api_token(bob.id, made.token.id).await.unwrap());
    assert!(
        store
            .revoke_api_token(user.id, made.token.id)
            .await
            .unwrap()
    );
    assert!(
        !store
            .revoke_api_token(user.id, made.token.id)
            .await
            .unwrap()
    );
    assert!(store.token_user(&made.secret).await.unwrap().is_none());
    assert!(store.api_tokens(user.id).await.unwrap().is_empty());

    let old = store
        .create_api_token(user.id, "old", Some(now_millis() - 1))
        .await
        .unwrap();
    assert!(store.token_user(&old.secret).await.unwrap().is_none());

    // A personal token always expires: after 90 days when not asked.
    let personal = store
        .create_personal_token(
            user.id,
            &trainyard_domain::identity::TokenRequest {
                name: "cli".to_owned(),
                expires_in_days: None,
            },
        )
        .await
        .unwrap();
    // Exactly: the lifetime runs from the token's own creation time.
    let span = personal.token.expires_at.unwrap() - personal.token.created_at;
    assert_eq!(span, 90 * 86_400_000);
    assert!(
        store
            .create_personal_token(
                user.id,
                &trainyard_domain::identity::TokenRequest {
                    name: "forever".to_owned(),
                    expires_in_days: Some(10_000),
                },
            )
            .await
            .is_err()
    );
    assert!(
        store
            .revoke_api_token(user.id, personal.token.id)
            .await
            .unwrap()
    );

    // A run token names its run, is not listed, and ends with the run.
    let run = store
        .create_run(NewRun {
            experiment_id: 0,
            owner_id: None,
            team_id: None,
            user_id: "alice".to_owned(),
            run_name: None,
            start_time: None,
            tags: vec![],
        })
        .await
        .unwrap();
    let run_id = run.info.run_id.clone();
    let run_token = store.create_run_token(user.id, &run_id).await.unwrap();
    let found = store.token_user(&run_token).await.unwrap().unwrap();
    assert_eq!(found.run_id.as_deref(), Some(run_id.as_str()));
    assert!(store.api_tokens(user.id).await.unwrap().is_empty());
    assert_eq!(store.revoke_run_tokens(&run_id).await.unwrap(), 1);
    assert!(store.token_user(&run_token).await.unwrap().is_none());
}

/// A node token lasts until it is revoked unless a lifetime is asked for;
/// an expired one is refused, is not listed, and leaves room for another.
#[tokio::test]
async fn node_tokens_last_until_revoked_or_the_days_asked_for() {
    use crate::entity::api_token;
    use sea_orm::{ColumnTrait, EntityTrait, QueryFilter, sea_query::Expr};
    use trainyard_domain::identity::{MAX_TOKEN_DAYS, NodeTokenRequest};

    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let admin = store.sign_in(alice(&[])).await.unwrap();
    let lasting = store
        .create_node_token(admin.id, "gpu-a", &NodeTokenRequest::default())
        .await
        .unwrap();
    assert_eq!(lasting.token.expires_at, None);
    let month = store
        .create_node_token(
            admin.id,
            "gpu-a",
            &NodeTokenRequest {
                expires_in_days: Some(30),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        month.token.expires_at.unwrap() - month.token.created_at,
        30 * 86_400_000
    );
    for days in [0, MAX_TOKEN_DAYS + 1] {
        let refused = store
            .create_node_token(
                admin.id,
                "gpu-a",
                &NodeTokenRequest {
                    expires_in_days: Some(days),
                },
            )
            .await;
        assert!(
            matches!(&refused, Err(StoreError::Invalid(e)) if e.field == "expires_in_days"),
            "{days}: {refused:?}"
        );
    }
    let found = store.token_user(&month.secret).await.unwrap().unwrap();
    assert_eq!(found.node.as_deref(), Some("gpu-a"));

    // Its days over: refused, and no longer one of the node's.
    api_token::Entity::update_many()
        .col_expr(api_token::Column::ExpiresAt, Expr::value(now_millis() - 1))
        .filter(api_token::Column::Id.eq(month.token.id))
        .exec(store.connection())
        .await
        .unwrap();
    assert!(store.token_user(&month.secret).await.unwrap().is_none());
    let listed: Vec<i64> = store
        .node_tokens("gpu-a")
        .await
        .unwrap()
        .iter()
        .map(|t| t.id)
        .collect();
    assert_eq!(listed, vec![lasting.token.id]);
    assert!(store.token_user(&lasting.secret).await.unwrap().is_some());
    // Every node's live tokens at once (the admin page's list): the
    // expired and the revoked are not among them, nor personal tokens.
    let other = store
        .create_node_token(admin.id, "gpu-b", &NodeTokenRequest::default())
        .await
        .unwrap();
    let gone = store
        .create_node_token(admin.id, "gpu-b", &NodeTokenRequest::default())
        .await
        .unwrap();
    assert!(
        store
            .revoke_node_token("gpu-b", gone.token.id)
            .await
            .unwrap()
    );
    let all: Vec<(String, i64)> = store
        .all_node_tokens(10)
        .await
        .unwrap()
        .into_iter()
        .map(|(node, t)| (node, t.id))
        .collect();
    assert_eq!(
        all,
        vec![
            ("gpu-a".to_owned(), lasting.token.id),
            ("gpu-b".to_owned(), other.token.id)
        ]
    );
    assert_eq!(store.all_node_tokens(1).await.unwrap().len(), 1);
}

async fn member(store: &Store, name: &str, groups: &[&str], admin: bool) -> User {
    store
        .sign_in(SignIn {
            subject: format!("sub-{name}"),
            username: name.to_owned(),
            display_name: String::new(),
            email: None,
            is_admin: admin,
            groups: groups.iter().map(|g| g.to_string()).collect(),
        })
        .await
        .unwrap()
}

async fn run_in(store: &Store, experiment_id: i64, who: &User) -> String {
    store
        .create_run(NewRun {
            experiment_id,
            user_id: who.username.clone(),
            owner_id: Some(who.id),
            team_id: who.primary_team(),
            ..NewRun::default()
        })
        .await
        .unwrap()
        .info
        .run_id
}

#[tokio::test]
async fn people_see_their_own_and_their_teams_experiments_and_runs() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let alice = member(&store, "alice", &["vision"], false).await;
    let bob = member(&store, "bob", &["vision"], false).await;
    let carol = member(&store, "carol", &["nlp"], false).await;
    let admin = member(&store, "root", &[], true).await;

    let exp_a = store
        .create_experiment("a", alice.as_owner())
        .await
        .unwrap();
    let run_a = run_in(&store, exp_a, &alice).await;
    let run_c = run_in(&store, DEFAULT_EXPERIMENT, &carol).await;

    let names = |list: Vec<trainyard_domain::ExperimentSummary>| {
        let mut names: Vec<String> = list.into_iter().map(|e| e.name).collect();
        names.sort();
        names
    };
    assert_eq!(
        names(
            store
                .list_experiments(&Viewer::of(&bob), false)
                .await
                .unwrap()
        ),
        ["Default", "a"]
    );
    assert_eq!(
        names(
            store
                .list_experiments(&Viewer::of(&carol), false)
                .await
                .unwrap()
        ),
        ["Default"]
    );
    let runs = |viewer: Viewer| {
        let store = store.clone();
        async move {
            let mut ids: Vec<String> = store
                .search_runs(
                    &[DEFAULT_EXPERIMENT, exp_a],
                    None,
                    &[],
                    trainyard_domain::tracking::ViewType::ActiveOnly,
                    100,
                    0,
                    &viewer,
                )
                .await
                .unwrap()
                .into_iter()
                .map(|r| r.info.run_id)
                .collect();
            ids.sort();
            ids
        }
    };
    assert_eq!(runs(Viewer::of(&bob)).await, std::slice::from_ref(&run_a));
    assert_eq!(runs(Viewer::of(&carol)).await, std::slice::from_ref(&run_c));
    let mut both = vec![run_a.clone(), run_c.clone()];
    both.sort();
    assert_eq!(runs(Viewer::of(&admin)).await, both);

    // The overview counts what each may see, not everyone's.
    let counts = |viewer: Viewer| {
        let store = store.clone();
        async move {
            let o = store.overview(&viewer).await.unwrap();
            (o.experiments, o.runs)
        }
    };
    assert_eq!(
        counts(Viewer::of(&bob)).await,
        (2, 1),
        "Default and a; alice's run"
    );
    assert_eq!(
        counts(Viewer::of(&carol)).await,
        (1, 1),
        "Default; her own run"
    );
    assert_eq!(counts(Viewer::of(&admin)).await, (2, 2));

    assert!(
        store
            .runs_readable(&bob, std::slice::from_ref(&run_a))
            .await
            .is_ok()
    );
    assert!(matches!(
        store.runs_readable(&bob, &[run_a.clone(), run_c.clone()]).await,
        Err(StoreError::NotFound(m)) if m.contains(&run_c)
    ));
    assert!(
        store
            .runs_readable(&admin, std::slice::from_ref(&run_c))
            .await
            .is_ok()
    );

    use crate::Access::{Change, Read};
    assert!(matches!(
        store.experiment_as(&carol, exp_a, Read).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(store.experiment_as(&bob, exp_a, Read).await.is_ok());
    assert!(matches!(
        store.experiment_as(&bob, exp_a, Change).await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(store.experiment_as(&alice, exp_a, Change).await.is_ok());
    assert!(
        store
            .experiment_as(&carol, DEFAULT_EXPERIMENT, Read)
            .await
            .is_ok()
    );
    assert!(matches!(
        store
            .experiment_as(&carol, DEFAULT_EXPERIMENT, Change)
            .await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(store.may_add_runs(&carol, DEFAULT_EXPERIMENT).await.is_ok());
    assert!(matches!(
        store.may_add_runs(&bob, exp_a).await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(matches!(
        store.run_as(&bob, &run_a, Change).await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(store.run_as(&alice, &run_a, Change).await.is_ok());
}

#[tokio::test]
async fn a_team_made_ahead_is_joined_by_its_groups_members_with_its_quota() {
    use trainyard_domain::teams::TeamPolicyChange;
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let change = TeamPolicyChange {
        quota_gpus: Some(4),
        share: Some(2.0),
    };
    let made = store.create_team("robotics", &change).await.unwrap();
    assert_eq!((made.quota_gpus, made.share, made.members), (4, 2.0, 0));
    let again = store.create_team("robotics", &change).await.unwrap_err();
    assert!(matches!(again, StoreError::Conflict { .. }), "{again}");
    let alice = store.sign_in(alice(&["robotics"])).await.unwrap();
    assert_eq!(alice.teams[0].id, made.id, "the same team, not a second");
    let policies = store.team_policies().await.unwrap();
    let robotics = policies.iter().find(|t| t.name == "robotics").unwrap();
    assert_eq!((robotics.quota_gpus, robotics.members), (4, 1));
    // Without a weight given, the default.
    let plain = store
        .create_team("plain", &TeamPolicyChange::default())
        .await
        .unwrap();
    assert_eq!((plain.quota_gpus, plain.share), (0, 1.0));
    store.close().await.unwrap();
}

#[tokio::test]
async fn sessions_are_checked_again_with_the_provider_and_a_refusal_ends_one() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let hour = Duration::from_secs(3600);
    let mut admin = alice(&["vision"]);
    admin.is_admin = true;
    let user = store.sign_in(admin.clone()).await.unwrap();
    let signed_in_at = store.users().await.unwrap()[0].last_login_at;
    // Without a refresh token a session is never due.
    store.create_session(user.id, hour, None).await.unwrap();
    let a = store
        .create_provider_session(user.id, hour, Some("id".into()), Some("rt-a".into()))
        .await
        .unwrap();
    let b = store
        .create_provider_session(user.id, hour, None, Some("rt-b".into()))
        .await
        .unwrap();
    let stored: Vec<String> = store
        .connection()
        .query_all_raw(sea_orm::Statement::from_string(
            store.connection().get_database_backend(),
            "SELECT refresh_token FROM sessions WHERE refresh_token IS NOT NULL",
        ))
        .await
        .unwrap()
        .iter()
        .map(|row| row.try_get("", "refresh_token").unwrap())
        .collect();
    assert_eq!(stored.len(), 2);
    assert!(
        stored
            .iter()
            .all(|t| t.starts_with("sealed.v1.") && !t.contains("rt-")),
        "refresh tokens are sealed at rest: {stored:?}"
    );
    let settle = || tokio::time::sleep(Duration::from_millis(20));
    // What is due a moment later (check times are in milliseconds).
    let due_now = || async {
        settle().await;
        store
            .claim_sessions_to_recheck(now_millis(), 10)
            .await
            .unwrap()
    };
    let tokens = |due: &[DueSession]| {
        let mut t: Vec<String> = due.iter().map(|d| d.refresh_token.clone()).collect();
        t.sort();
        t
    };
    assert!(
        store
            .claim_sessions_to_recheck(now_millis() - 60_000, 10)
            .await
            .unwrap()
            .is_empty(),
        "not due before the interval"
    );
    settle().await;
    let cut = now_millis();
    let due = store.claim_sessions_to_recheck(cut, 10).await.unwrap();
    assert_eq!(tokens(&due), ["rt-a", "rt-b"]);
    assert!(due.iter().all(|d| d.subject == "sub-alice"));
    assert!(
        store
            .claim_sessions_to_recheck(cut, 10)
            .await
            .unwrap()
            .is_empty(),
        "claimed sessions are not handed out twice"
    );

    // The provider now says: no longer an admin, in nlp; and the token
    // rotated.
    let on_a = due.iter().find(|d| d.refresh_token == "rt-a").unwrap();
    let updated = store
        .session_rechecked(on_a, Some(alice(&["nlp"])), Some("rt-a2".into()))
        .await
        .unwrap()
        .unwrap();
    assert!(!updated.is_admin);
    assert_eq!(team_names(&updated), ["nlp"]);
    assert_eq!(
        store.users().await.unwrap()[0].last_login_at,
        signed_in_at,
        "a check is not a sign-in"
    );
    let mut mallory = alice(&[]);
    mallory.subject = "sub-mallory".to_owned();
    assert!(
        store
            .session_rechecked(on_a, Some(mallory), None)
            .await
            .is_err(),
        "a session's person never becomes someone else"
    );
    let due = due_now().await;
    assert_eq!(tokens(&due), ["rt-a2", "rt-b"], "the rotated token is used");

    // Admin again by a sign-in; then the provider refuses b's token: b
    // ends, a lives on.
    assert!(store.sign_in(admin).await.unwrap().is_admin);
    let on_b = due.iter().find(|d| d.refresh_token == "rt-b").unwrap();
    assert!(store.session_refused(on_b).await.unwrap());
    assert!(store.session(&b.secret).await.unwrap().is_none());
    assert!(store.session(&a.secret).await.unwrap().is_some());

    // Signed out while a check was under way: what the provider said then
    // is not written back, neither the rights nor the token.
    let on_a = due.iter().find(|d| d.refresh_token == "rt-a2").unwrap();
    store.end_session(&a.secret).await.unwrap();
    let late = store
        .session_rechecked(on_a, Some(alice(&["late"])), Some("rt-a3".into()))
        .await
        .unwrap();
    assert!(late.is_none());
    let user = store.user(user.id).await.unwrap().unwrap();
    assert!(user.is_admin);
    assert_eq!(team_names(&user), ["vision"]);
    assert!(!store.session_refused(on_a).await.unwrap(), "ended already");
    assert!(due_now().await.is_empty());

    // A new session's token; turning the checks off forgets it.
    store
        .create_provider_session(user.id, hour, None, Some("rt-c".into()))
        .await
        .unwrap();
    assert_eq!(store.forget_refresh_tokens(false).await.unwrap(), 1);
    assert!(due_now().await.is_empty());
}

#[tokio::test]
async fn a_session_whose_refresh_token_cannot_be_opened_ends_at_its_check() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let hour = Duration::from_secs(3600);
    let user = store.sign_in(alice(&["vision"])).await.unwrap();
    let session = store
        .create_provider_session(user.id, hour, None, Some("rt-a".into()))
        .await
        .unwrap();
    store.close().await.unwrap();
    // The server comes back with another key (the old one lost).
    let store = Store::connect(&db.url, 4)
        .await
        .unwrap()
        .with_sealing_key(new_key());
    assert_eq!(store.check_sealed_secrets().await.unwrap(), (0, 1));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let due = store
        .claim_sessions_to_recheck(now_millis(), 10)
        .await
        .unwrap();
    assert!(due.is_empty(), "nothing to send the provider");
    assert!(
        store.session(&session.secret).await.unwrap().is_none(),
        "the session ends rather than keep its rights unchecked"
    );
    store.close().await.unwrap();
}

#[tokio::test]
async fn sealing_and_forgetting_go_through_every_page_of_secrets() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let hour = Duration::from_secs(3600);
    let user = store.sign_in(alice(&["vision"])).await.unwrap();
    // More sessions than two pages of the sweeps (500 each).
    const MANY: u64 = 1_201;
    for n in 0..MANY {
        store
            .create_provider_session(user.id, hour, None, Some(format!("rt-{n}")))
            .await
            .unwrap();
    }
    // As an older server left them: every token in the clear.
    store
        .connection()
        .execute_unprepared("UPDATE sessions SET refresh_token = 'rt-' || id")
        .await
        .unwrap();
    assert_eq!(store.seal_plain_secrets().await.unwrap(), MANY);
    assert_eq!(store.seal_plain_secrets().await.unwrap(), 0);
    store.close().await.unwrap();

    let other = Store::connect(&db.url, 4)
        .await
        .unwrap()
        .with_sealing_key(new_key());
    assert_eq!(other.forget_unopened_secrets().await.unwrap(), (0, MANY));
    assert_eq!(other.forget_unopened_secrets().await.unwrap(), (0, 0));
    let live = other
        .connection()
        .query_one_raw(sea_orm::Statement::from_string(
            other.connection().get_database_backend(),
            "SELECT COUNT(*) AS n FROM sessions WHERE revoked_at IS NULL OR refresh_token IS NOT NULL",
        ))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(live.try_get::<i64>("", "n").unwrap(), 0);
    other.close().await.unwrap();
}

/// What one person's uploads hold, in bytes and in files and folders,
/// summed over theirs alone (a sum of bigints is numeric on PostgreSQL).
#[tokio::test]
async fn a_persons_uploads_are_summed_in_bytes_and_entries() {
    let db = TestDb::new().await;
    let store = migrated(&db).await;
    let alice = store.sign_in(alice(&[])).await.unwrap();
    assert_eq!(
        store.upload_use_of(alice.id).await.unwrap(),
        crate::UploadUse::default()
    );
    let upload = |id: &str, owner: i64, bytes: u64, entries: u64| crate::NewUpload {
        id: id.to_owned(),
        kind: "project".to_owned(),
        name: "p.tar.gz".to_owned(),
        owner_id: Some(owner),
        files: entries / 2,
        bytes,
        entries,
    };
    store
        .create_upload(upload("a1", alice.id, 3 << 40, 100_000))
        .await
        .unwrap();
    let kept = store
        .create_upload(upload("a2", alice.id, 5, 7))
        .await
        .unwrap();
    assert_eq!((kept.files, kept.bytes, kept.entries), (3, 5, 7));
    let bob = store.sign_in(bob(&[])).await.unwrap();
    store
        .create_upload(upload("b1", bob.id, 1, 1))
        .await
        .unwrap();
    assert_eq!(
        store.upload_use_of(alice.id).await.unwrap(),
        crate::UploadUse {
            bytes: (3 << 40) + 5,
            entries: 100_007
        }
    );
    let listed = store.uploads_of(alice.id).await.unwrap();
    assert_eq!(listed.len(), 2);
    assert!(listed.iter().any(|u| u.entries == 100_000));
}
