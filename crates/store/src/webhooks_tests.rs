//! Registry webhooks on SQLite and (with TEST_DATABASE_URL) PostgreSQL:
//! their fields, paging, the outbox of deliveries (who gets an event,
//! claims, retries, the last try, pruning) and the bounds.

use sea_orm::ConnectionTrait;

use crate::test_support::store;
use crate::webhooks::{
    Attempt, KEPT_FINISHED_EACH, MAX_ATTEMPTS, MAX_PENDING_EACH, MAX_WEBHOOKS, NewWebhook,
    WebhookChange,
};
use crate::{Store, StoreError, now_millis};
use trainyard_domain::tracking::Webhook;

async fn try_webhook(
    store: &Store,
    name: &str,
    events: &[&str],
    secret: Option<&str>,
) -> Result<Webhook, StoreError> {
    let events: Vec<String> = events.iter().map(|e| e.to_string()).collect();
    store
        .create_webhook(
            NewWebhook {
                name,
                description: Some("for CI"),
                url: "https://ci.example.org/hook",
                events: &events,
                secret,
                status: "ACTIVE",
            },
            None,
        )
        .await
}

async fn webhook(store: &Store, name: &str, events: &[&str], secret: Option<&str>) -> Webhook {
    try_webhook(store, name, events, secret).await.unwrap()
}

async fn disable(store: &Store, hook: &Webhook) {
    store
        .update_webhook(
            &hook.webhook_id,
            WebhookChange {
                status: Some("DISABLED".into()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
}

#[tokio::test]
async fn webhooks_keep_their_fields_and_page_newest_first() {
    let (_db, store) = store().await;
    let one = webhook(&store, "one", &["model_version.created"], Some("s3cret")).await;
    assert_eq!(one.events, ["model_version.created"]);
    assert!(one.has_secret);
    assert_eq!(one.description.as_deref(), Some("for CI"));
    assert_eq!(store.get_webhook(&one.webhook_id).await.unwrap(), one);
    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    let two = webhook(
        &store,
        "two",
        &["registered_model.created", "prompt_alias.deleted"],
        None,
    )
    .await;
    assert!(!two.has_secret);

    let (page, more) = store.list_webhooks(0, 1).await.unwrap();
    assert_eq!((page[0].name.as_str(), more), ("two", true));
    let (page, more) = store.list_webhooks(1, 1).await.unwrap();
    assert_eq!((page[0].name.as_str(), more), ("one", false));

    let changed = store
        .update_webhook(
            &one.webhook_id,
            WebhookChange {
                name: Some("renamed".into()),
                events: Some(vec!["model_version_alias.created".into()]),
                secret: Some(String::new()),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(changed.name, "renamed");
    assert_eq!(changed.events, ["model_version_alias.created"]);
    assert!(!changed.has_secret, "an empty secret takes it away");
    assert_eq!(changed.url, one.url);
    assert!(changed.last_updated_timestamp >= one.last_updated_timestamp);

    store.delete_webhook(&one.webhook_id).await.unwrap();
    assert!(matches!(
        store.get_webhook(&one.webhook_id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.delete_webhook(&one.webhook_id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.update_webhook("nope", WebhookChange::default()).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn an_event_is_queued_for_the_active_webhooks_that_asked_for_it() {
    let (_db, store) = store().await;
    let versions = webhook(&store, "versions", &["model_version.created"], Some("k")).await;
    let models = webhook(&store, "models", &["registered_model.created"], None).await;
    let off = webhook(
        &store,
        "off",
        &["model_version.created", "model_version_alias.created"],
        None,
    )
    .await;
    disable(&store, &off).await;
    // What only the disabled webhook asked for is wanted by no one.
    assert_eq!(
        store.webhook_events_wanted().await.unwrap(),
        ["model_version.created", "registered_model.created"]
            .map(String::from)
            .into()
    );

    let queued = store
        .enqueue_webhook_event("model_version.created", r#"{"data":1}"#)
        .await
        .unwrap();
    assert_eq!(queued, 1);
    assert_eq!(
        store
            .enqueue_webhook_event("model_version_tag.set", "{}")
            .await
            .unwrap(),
        0
    );

    let due = store.claim_webhook_deliveries(10).await.unwrap();
    assert_eq!(due.len(), 1);
    assert_eq!(due[0].webhook_id, versions.webhook_id);
    assert_eq!(due[0].secret, Ok(Some("k".to_owned())));
    assert_eq!(due[0].body, r#"{"data":1}"#);
    assert_eq!(due[0].attempts, 0);
    // Claimed: nobody else takes it meanwhile.
    assert!(store.claim_webhook_deliveries(10).await.unwrap().is_empty());
    // A try is recorded only while its claim holds.
    let mut lapsed = due[0].clone();
    lapsed.claimed_until -= 1;
    store
        .record_webhook_attempt(&lapsed, Attempt::Delivered { status: 200 })
        .await
        .unwrap();
    assert_eq!(
        store
            .webhook_deliveries(&versions.webhook_id, 1)
            .await
            .unwrap()[0]
            .state,
        "pending"
    );

    store
        .record_webhook_attempt(&due[0], Attempt::Delivered { status: 204 })
        .await
        .unwrap();
    let seen = store
        .webhook_deliveries(&versions.webhook_id, 10)
        .await
        .unwrap();
    assert_eq!(seen.len(), 1);
    assert_eq!(
        (
            seen[0].state.as_str(),
            seen[0].attempts,
            seen[0].response_status
        ),
        ("delivered", 1, Some(204))
    );
    assert!(seen[0].finished.is_some());
    assert!(
        store
            .webhook_deliveries(&models.webhook_id, 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(store.next_webhook_delivery().await.unwrap(), None);
}

#[tokio::test]
async fn a_failed_try_is_retried_until_the_last_and_disabling_ends_the_wait() {
    let (_db, store) = store().await;
    let hook = webhook(&store, "flaky", &["model_version.created"], None).await;
    store
        .enqueue_webhook_event("model_version.created", "{}")
        .await
        .unwrap();
    for n in 1..=MAX_ATTEMPTS {
        let due = store.claim_webhook_deliveries(10).await.unwrap();
        assert_eq!(due.len(), 1, "try {n}");
        assert_eq!(due[0].attempts, n - 1);
        store
            .record_webhook_attempt(
                &due[0],
                Attempt::Failed {
                    status: Some(503),
                    error: "busy".into(),
                    retry_at: Some(now_millis() - 1),
                },
            )
            .await
            .unwrap();
    }
    let seen = store
        .webhook_deliveries(&hook.webhook_id, 10)
        .await
        .unwrap();
    assert_eq!(
        (
            seen[0].state.as_str(),
            seen[0].attempts,
            seen[0].error.as_deref()
        ),
        ("failed", MAX_ATTEMPTS, Some("busy"))
    );
    assert!(store.claim_webhook_deliveries(10).await.unwrap().is_empty());

    // A retry not yet due waits; disabling the webhook fails it, saying why.
    store
        .enqueue_webhook_event("model_version.created", "{}")
        .await
        .unwrap();
    let due = store.claim_webhook_deliveries(10).await.unwrap();
    let later = now_millis() + 60_000;
    store
        .record_webhook_attempt(
            &due[0],
            Attempt::Failed {
                status: None,
                error: "connection refused".into(),
                retry_at: Some(later),
            },
        )
        .await
        .unwrap();
    assert!(store.claim_webhook_deliveries(10).await.unwrap().is_empty());
    assert_eq!(store.next_webhook_delivery().await.unwrap(), Some(later));
    disable(&store, &hook).await;
    let seen = store
        .webhook_deliveries(&hook.webhook_id, 10)
        .await
        .unwrap();
    assert_eq!(seen[0].state, "failed");
    assert!(seen[0].error.as_deref().unwrap().contains("disabled"));
    assert_eq!(store.next_webhook_delivery().await.unwrap(), None);
}

#[tokio::test]
async fn a_webhook_keeps_its_last_finished_deliveries_and_a_bounded_queue() {
    let (_db, store) = store().await;
    let hook = webhook(&store, "busy", &["model_version.created"], None).await;
    for _ in 0..KEPT_FINISHED_EACH + 5 {
        store
            .enqueue_webhook_event("model_version.created", "{}")
            .await
            .unwrap();
    }
    loop {
        let due = store.claim_webhook_deliveries(50).await.unwrap();
        if due.is_empty() {
            break;
        }
        for d in &due {
            store
                .record_webhook_attempt(d, Attempt::Delivered { status: 200 })
                .await
                .unwrap();
        }
    }
    let kept = store
        .webhook_deliveries(&hook.webhook_id, 1_000)
        .await
        .unwrap();
    assert_eq!(kept.len() as i64, KEPT_FINISHED_EACH);

    // The queue of one webhook is bounded: past it, events are not queued
    // for it (written straight, as a receiver long away would leave them).
    store
        .connection()
        .execute_unprepared(&format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {MAX_PENDING_EACH}) \
             INSERT INTO webhook_deliveries (id, webhook_id, event, body, created, attempts, next_attempt, state) \
             SELECT 'p' || i, '{}', 'model_version.created', '{{}}', 0, 0, 0, 'pending' FROM n",
            hook.webhook_id
        ))
        .await
        .unwrap();
    assert_eq!(
        store
            .enqueue_webhook_event("model_version.created", "{}")
            .await
            .unwrap(),
        0
    );
    // The event that was not queued is listed, failed, saying why.
    let newest = &store.webhook_deliveries(&hook.webhook_id, 1).await.unwrap()[0];
    assert_eq!(newest.state, "failed");
    assert!(
        newest.error.as_deref().unwrap().contains(&format!(
            "not queued: {MAX_PENDING_EACH} deliveries were waiting"
        )),
        "{newest:?}"
    );

    // And so is the number of webhooks.
    store
        .connection()
        .execute_unprepared(&format!(
            "WITH RECURSIVE n(i) AS (SELECT 2 UNION ALL SELECT i + 1 FROM n WHERE i < {MAX_WEBHOOKS}) \
             INSERT INTO webhooks (id, name, url, events, status, creation_timestamp, last_updated_timestamp) \
             SELECT 'w' || i, 'w', 'https://x.org', ',model_version.created,', 'ACTIVE', 0, 0 FROM n"
        ))
        .await
        .unwrap();
    let refused = try_webhook(&store, "one-too-many", &["model_version.created"], None).await;
    assert!(
        matches!(&refused, Err(StoreError::Rejected(m)) if m.contains("delete one")),
        "{refused:?}"
    );
}

#[tokio::test]
async fn secrets_are_sealed_at_rest_and_the_clear_ones_of_before_are_sealed_at_start() {
    let (db, store) = store().await;
    // A secret that base64 cannot spell by chance ('-' is not among its
    // letters), so that finding it means it was kept in the clear.
    let hook = webhook(
        &store,
        "sealed",
        &["model_version.created"],
        Some("s3cret-k1"),
    )
    .await;
    let stored = || async {
        let mut sql = store.sql();
        sql.push("SELECT secret FROM webhooks WHERE id = ")
            .bind(hook.webhook_id.clone());
        let row = store
            .connection()
            .query_one_raw(sql.build())
            .await
            .unwrap()
            .unwrap();
        crate::tracking::get::<String>(&row, "secret").unwrap()
    };
    let at_rest = stored().await;
    assert!(at_rest.starts_with("sealed.v1.") && !at_rest.contains("s3cret-k1"));
    assert_eq!(
        store.webhook_secret(&hook.webhook_id).await.unwrap(),
        Some("s3cret-k1".to_owned())
    );

    // A secret kept in the clear by an older server is sealed at start,
    // and reads the same.
    let mut sql = store.sql();
    sql.push("UPDATE webhooks SET secret = 'plain' WHERE id = ")
        .bind(hook.webhook_id.clone());
    store.connection().execute_raw(sql.build()).await.unwrap();
    assert_eq!(store.seal_plain_secrets().await.unwrap(), 1);
    assert_eq!(store.seal_plain_secrets().await.unwrap(), 0);
    assert!(stored().await.starts_with("sealed.v1."));
    assert_eq!(
        store.webhook_secret(&hook.webhook_id).await.unwrap(),
        Some("plain".to_owned())
    );

    // Under another key the secret does not open: its deliveries say why
    // instead of going unsigned.
    store
        .enqueue_webhook_event("model_version.created", "{}")
        .await
        .unwrap();
    let other = Store::connect(&db.url, 1)
        .await
        .unwrap()
        .with_sealing_key(crate::test_support::new_key());
    let due = other.claim_webhook_deliveries(10).await.unwrap();
    assert!(
        due[0]
            .secret
            .as_ref()
            .is_err_and(|e| e.contains("secrets_key")),
        "{:?}",
        due[0].secret
    );
    assert!(other.webhook_secret(&hook.webhook_id).await.is_err());
    assert_eq!(store.check_sealed_secrets().await.unwrap(), (1, 0));
    assert_eq!(other.check_sealed_secrets().await.unwrap(), (0, 1));
    // The key lost for good: the secret is dropped and the webhook turned
    // off, never left to send unsigned.
    assert_eq!(other.forget_unopened_secrets().await.unwrap(), (1, 0));
    let forgotten = other.get_webhook(&hook.webhook_id).await.unwrap();
    assert!(!forgotten.has_secret && forgotten.status == "DISABLED");
    let waited = other
        .webhook_deliveries(&hook.webhook_id, 10)
        .await
        .unwrap();
    assert_eq!(waited[0].state, "failed", "what waited fails, saying so");
    assert_eq!(other.check_sealed_secrets().await.unwrap(), (0, 0));
    // A store without a key keeps no secret in the clear.
    let keyless = Store::connect(&db.url, 1).await.unwrap();
    assert!(
        try_webhook(&keyless, "clear", &["model_version.created"], Some("k"))
            .await
            .is_err()
    );
}

#[tokio::test]
async fn a_rotated_key_opens_with_the_one_it_replaces_and_seals_everything_again() {
    use crate::seal::SealingKey;
    let (old_key, new_key) = (SealingKey::generate(), SealingKey::generate());
    let key = |text: &str| SealingKey::parse(text).unwrap();
    let db = trainyard_test_db::TestDb::new().await;
    let store = Store::connect(&db.url, 1)
        .await
        .unwrap()
        .with_sealing_key(key(&old_key));
    store.migrate().await.unwrap();
    let hook = webhook(
        &store,
        "rotated",
        &["model_version.created"],
        Some("s3cret-k1"),
    )
    .await;
    // The server comes back with a new key and the old one as previous.
    let rotating = Store::connect(&db.url, 1)
        .await
        .unwrap()
        .with_sealing_key(key(&new_key))
        .with_previous_sealing_key(key(&old_key));
    assert_eq!(rotating.check_sealed_secrets().await.unwrap(), (1, 0));
    assert_eq!(
        rotating.webhook_secret(&hook.webhook_id).await.unwrap(),
        Some("s3cret-k1".to_owned()),
        "what the old key sealed opens while rotating"
    );
    assert_eq!(rotating.reseal_with_current_key().await.unwrap(), 1);
    assert_eq!(rotating.reseal_with_current_key().await.unwrap(), 0);
    // Rotated: the new key alone opens it, the old one no more.
    let rotated = Store::connect(&db.url, 1)
        .await
        .unwrap()
        .with_sealing_key(key(&new_key));
    assert_eq!(
        rotated.webhook_secret(&hook.webhook_id).await.unwrap(),
        Some("s3cret-k1".to_owned())
    );
    assert_eq!(store.check_sealed_secrets().await.unwrap(), (0, 1));
    // Without a previous key, nothing is sealed again.
    assert_eq!(rotated.reseal_with_current_key().await.unwrap(), 0);
}
