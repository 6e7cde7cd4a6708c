//! Registry webhooks (MLflow 3's `create_webhook`) and their deliveries.
//!
//! Deliveries are an outbox: `enqueue_webhook_event` writes a row for each
//! active webhook that asked for the event, and the server's deliverer
//! claims what is due, POSTs it and records how it went. A row is tried
//! until the receiver takes it or `MAX_ATTEMPTS` run out; the last
//! `KEPT_FINISHED_EACH` finished rows of a webhook stay for its admins to
//! read. What the URL may be and what is sent is the server's business.

use std::collections::BTreeSet;

use sea_orm::{ConnectionTrait, DatabaseTransaction, QueryResult};
use trainyard_domain::tracking::{Webhook, WebhookDelivery};

use crate::seal::Purpose;
use crate::sql::{Sql, lock_owner};
use crate::tracking::get;
use crate::{Store, StoreError, now_millis};

/// Webhooks in all.
pub const MAX_WEBHOOKS: i64 = 1_000;
/// Deliveries that wait for one webhook; past it, a new event is not
/// queued for that webhook (its receiver has long been away) but listed as
/// failed, saying so.
pub const MAX_PENDING_EACH: i64 = 1_000;
/// Finished deliveries kept for each webhook, newest first.
pub const KEPT_FINISHED_EACH: i64 = 100;
/// Tries of one delivery, the first included.
pub const MAX_ATTEMPTS: i32 = 5;
/// How long a claimed delivery is the claimer's: after it, another
/// deliverer (or this one, restarted) tries it again.
pub const CLAIM_MILLIS: i64 = 120_000;

const COLUMNS: &str = "id, name, description, url, events, secret, status, \
                       creation_timestamp, last_updated_timestamp";

/// A webhook to make; the server has checked every field.
pub struct NewWebhook<'a> {
    pub name: &'a str,
    pub description: Option<&'a str>,
    pub url: &'a str,
    pub events: &'a [String],
    pub secret: Option<&'a str>,
    pub status: &'a str,
}

/// What an update changes: the fields given. A secret of "" takes the
/// secret away.
#[derive(Default)]
pub struct WebhookChange {
    pub name: Option<String>,
    pub description: Option<String>,
    pub url: Option<String>,
    pub events: Option<Vec<String>>,
    pub secret: Option<String>,
    pub status: Option<String>,
}

/// A delivery claimed for sending, with what sending needs.
#[derive(Debug, Clone)]
pub struct DueDelivery {
    pub delivery_id: String,
    pub webhook_id: String,
    pub url: String,
    /// The secret to sign with (None: unsigned), or why it cannot be read.
    pub secret: Result<Option<String>, String>,
    pub event: String,
    pub body: String,
    /// Tries made before this one.
    pub attempts: i32,
    /// The claim's end (ms since the epoch); a try is recorded only while
    /// it holds.
    pub claimed_until: i64,
}

/// How one try went.
pub enum Attempt {
    Delivered {
        status: i32,
    },
    /// Failed, to be tried again at `retry_at` (ms since the epoch; None:
    /// never) unless that was the last try.
    Failed {
        status: Option<i32>,
        error: String,
        retry_at: Option<i64>,
    },
}

/// The events as stored: `,a.b,c.d,`, so that one is found whole.
fn events_text(events: &[String]) -> String {
    format!(",{},", events.join(","))
}

fn events_of(text: &str) -> Vec<String> {
    text.split(',')
        .filter(|e| !e.is_empty())
        .map(str::to_owned)
        .collect()
}

fn webhook_of(row: &QueryResult) -> Result<Webhook, StoreError> {
    let secret: Option<String> = get(row, "secret")?;
    let events: String = get(row, "events")?;
    Ok(Webhook {
        webhook_id: get(row, "id")?,
        name: get(row, "name")?,
        description: get(row, "description")?,
        url: get(row, "url")?,
        events: events_of(&events),
        status: get(row, "status")?,
        has_secret: secret.is_some_and(|s| !s.is_empty()),
        creation_timestamp: get(row, "creation_timestamp")?,
        last_updated_timestamp: get(row, "last_updated_timestamp")?,
    })
}

fn delivery_of(row: &QueryResult) -> Result<WebhookDelivery, StoreError> {
    Ok(WebhookDelivery {
        delivery_id: get(row, "id")?,
        webhook_id: get(row, "webhook_id")?,
        event: get(row, "event")?,
        created: get(row, "created")?,
        attempts: get(row, "attempts")?,
        state: get(row, "state")?,
        response_status: get(row, "response_status")?,
        error: get(row, "error")?,
        finished: get(row, "finished")?,
    })
}

/// On PostgreSQL, what changes one webhook's deliveries takes turns (a
/// disable and an event queued at once, two events and the queue's bound).
async fn lock_webhook(txn: &DatabaseTransaction, id: &str) -> Result<(), StoreError> {
    lock_owner(txn, txn.get_database_backend(), &format!("webhook:{id}")).await
}

/// Keeps a webhook's last `KEPT_FINISHED_EACH` finished deliveries.
async fn prune(txn: &DatabaseTransaction, webhook_id: &str) -> Result<(), StoreError> {
    let mut sql = Sql::new(txn.get_database_backend());
    sql.push("DELETE FROM webhook_deliveries WHERE state <> 'pending' AND webhook_id = ")
        .bind(webhook_id.to_owned())
        .push(
            " AND id NOT IN (SELECT id FROM webhook_deliveries \
             WHERE state <> 'pending' AND webhook_id = ",
        )
        .bind(webhook_id.to_owned())
        .push(" ORDER BY finished DESC, created DESC LIMIT ")
        .bind(KEPT_FINISHED_EACH)
        .push(")");
    txn.execute_raw(sql.build()).await?;
    Ok(())
}

fn not_found(id: &str) -> StoreError {
    StoreError::NotFound(format!("Webhook with ID {id} not found."))
}

impl Store {
    /// A statement with no values in it.
    fn plain(&self, text: &str) -> sea_orm::Statement {
        sea_orm::Statement::from_string(self.connection().get_database_backend(), text)
    }

    pub async fn create_webhook(
        &self,
        new: NewWebhook<'_>,
        user_id: Option<i64>,
    ) -> Result<Webhook, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let sealed = self.seal_secret(&id, new.secret)?;
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        lock_owner(&txn, txn.get_database_backend(), "webhooks").await?;
        let row = txn
            .query_one_raw(self.plain("SELECT COUNT(*) AS n FROM webhooks"))
            .await?;
        let held: i64 = match row {
            Some(row) => get(&row, "n")?,
            None => 0,
        };
        if held >= MAX_WEBHOOKS {
            return Err(StoreError::Rejected(format!(
                "There are already {held} webhooks, the most this server keeps; delete one first"
            )));
        }
        let now = now_millis();
        let mut sql = self.sql();
        sql.push(&format!(
            "INSERT INTO webhooks ({COLUMNS}, user_id) VALUES ("
        ))
        .bind(id.clone())
        .push(", ")
        .bind(new.name.to_owned())
        .push(", ")
        .bind(new.description.map(str::to_owned))
        .push(", ")
        .bind(new.url.to_owned())
        .push(", ")
        .bind(events_text(new.events))
        .push(", ")
        .bind(sealed)
        .push(", ")
        .bind(new.status.to_owned())
        .push(", ")
        .bind(now)
        .push(", ")
        .bind(now)
        .push(", ")
        .bind(user_id)
        .push(")");
        txn.execute_raw(sql.build()).await?;
        txn.commit().await?;
        self.get_webhook(&id).await
    }

    pub async fn get_webhook(&self, id: &str) -> Result<Webhook, StoreError> {
        let mut sql = self.sql();
        sql.push(&format!("SELECT {COLUMNS} FROM webhooks WHERE id = "))
            .bind(id.to_owned());
        let row = self
            .connection()
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| not_found(id))?;
        webhook_of(&row)
    }

    /// A webhook's secret, for signing; None when it has none.
    pub async fn webhook_secret(&self, id: &str) -> Result<Option<String>, StoreError> {
        let mut sql = self.sql();
        sql.push("SELECT secret FROM webhooks WHERE id = ")
            .bind(id.to_owned());
        let row = self
            .connection()
            .query_one_raw(sql.build())
            .await?
            .ok_or_else(|| not_found(id))?;
        self.open_secret(id, get(&row, "secret")?)
    }

    /// A stored secret, opened; None for none.
    fn open_secret(&self, id: &str, stored: Option<String>) -> Result<Option<String>, StoreError> {
        stored
            .filter(|s| !s.is_empty())
            .map(|s| self.open_sealed(Purpose::WebhookSecret, id, &s))
            .transpose()
    }

    /// A secret as stored: sealed, or None for none.
    fn seal_secret(&self, id: &str, secret: Option<&str>) -> Result<Option<String>, StoreError> {
        secret
            .filter(|s| !s.is_empty())
            .map(|s| self.seal(Purpose::WebhookSecret, id, s))
            .transpose()
    }

    /// Webhooks, newest first, from `offset`; true when more follow.
    pub async fn list_webhooks(
        &self,
        offset: u64,
        limit: u64,
    ) -> Result<(Vec<Webhook>, bool), StoreError> {
        let mut sql = self.sql();
        sql.push(&format!(
            "SELECT {COLUMNS} FROM webhooks ORDER BY creation_timestamp DESC, id LIMIT "
        ))
        .bind(limit as i64 + 1)
        .push(" OFFSET ")
        .bind(offset as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        let more = rows.len() as u64 > limit;
        let webhooks = rows
            .iter()
            .take(limit as usize)
            .map(webhook_of)
            .collect::<Result<_, _>>()?;
        Ok((webhooks, more))
    }

    /// Changes the fields given. Disabling a webhook ends what waited for
    /// it: those deliveries fail, saying so.
    pub async fn update_webhook(
        &self,
        id: &str,
        change: WebhookChange,
    ) -> Result<Webhook, StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push("UPDATE webhooks SET last_updated_timestamp = ")
            .bind(now_millis());
        if let Some(name) = change.name {
            sql.push(", name = ").bind(name);
        }
        if let Some(description) = change.description {
            sql.push(", description = ").bind(description);
        }
        if let Some(url) = change.url {
            sql.push(", url = ").bind(url);
        }
        if let Some(events) = change.events {
            sql.push(", events = ").bind(events_text(&events));
        }
        if let Some(secret) = change.secret {
            sql.push(", secret = ")
                .bind(self.seal_secret(id, Some(&secret))?);
        }
        let disabled = change.status.as_deref() == Some("DISABLED");
        if let Some(status) = change.status {
            sql.push(", status = ").bind(status);
        }
        sql.push(" WHERE id = ").bind(id.to_owned());
        if txn.execute_raw(sql.build()).await?.rows_affected() == 0 {
            return Err(not_found(id));
        }
        if disabled {
            lock_webhook(&txn, id).await?;
            let mut sql = self.sql();
            sql.push(
                "UPDATE webhook_deliveries SET state = 'failed', body = '', \
                 error = 'the webhook was disabled before this was delivered', finished = ",
            )
            .bind(now_millis())
            .push(" WHERE state = 'pending' AND webhook_id = ")
            .bind(id.to_owned());
            txn.execute_raw(sql.build()).await?;
            prune(&txn, id).await?;
        }
        txn.commit().await?;
        self.get_webhook(id).await
    }

    /// Deletes a webhook and its deliveries.
    pub async fn delete_webhook(&self, id: &str) -> Result<(), StoreError> {
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM webhook_deliveries WHERE webhook_id = ")
            .bind(id.to_owned());
        txn.execute_raw(sql.build()).await?;
        let mut sql = self.sql();
        sql.push("DELETE FROM webhooks WHERE id = ")
            .bind(id.to_owned());
        if txn.execute_raw(sql.build()).await?.rows_affected() == 0 {
            return Err(not_found(id));
        }
        txn.commit().await?;
        Ok(())
    }

    /// The active webhooks, each with the events it asked for.
    async fn active_webhooks(&self) -> Result<Vec<(String, Vec<String>)>, StoreError> {
        let rows = self
            .connection()
            .query_all_raw(self.plain("SELECT id, events FROM webhooks WHERE status = 'ACTIVE'"))
            .await?;
        rows.iter()
            .map(|row| Ok((get(row, "id")?, events_of(&get::<String>(row, "events")?))))
            .collect()
    }

    /// The events that some active webhook asked for, so that a caller
    /// need not build an event that no one is told of.
    pub async fn webhook_events_wanted(&self) -> Result<BTreeSet<String>, StoreError> {
        Ok(self
            .active_webhooks()
            .await?
            .into_iter()
            .flat_map(|(_, events)| events)
            .collect())
    }

    /// Queues `body` for every active webhook that asked for `event` and
    /// has fewer than `MAX_PENDING_EACH` deliveries waiting (for the others
    /// the event is listed as not queued); returns how many were queued.
    pub async fn enqueue_webhook_event(&self, event: &str, body: &str) -> Result<u64, StoreError> {
        let wanted: Vec<String> = self
            .active_webhooks()
            .await?
            .into_iter()
            .filter(|(_, events)| events.iter().any(|e| e == event))
            .map(|(id, _)| id)
            .collect();
        if wanted.is_empty() {
            return Ok(0);
        }
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let now = now_millis();
        let mut queued = 0;
        for webhook_id in wanted {
            lock_webhook(&txn, &webhook_id).await?;
            let mut sql = self.sql();
            sql.push("SELECT COUNT(*) AS n FROM webhook_deliveries WHERE state = 'pending' AND webhook_id = ")
                .bind(webhook_id.clone());
            let pending: i64 = match txn.query_one_raw(sql.build()).await? {
                Some(row) => get(&row, "n")?,
                None => 0,
            };
            let dropped = pending >= MAX_PENDING_EACH;
            if dropped {
                tracing::warn!(
                    webhook = %webhook_id,
                    event,
                    pending,
                    "a webhook's receiver has {pending} deliveries waiting; this event is not queued for it"
                );
            }
            let mut sql = self.sql();
            sql.push(
                "INSERT INTO webhook_deliveries \
                 (id, webhook_id, event, body, created, attempts, next_attempt, state, error, finished) \
                 SELECT ",
            )
            .bind(uuid::Uuid::new_v4().to_string())
            .push(", id, ")
            .bind(event.to_owned())
            .push(", ")
            // A dropped event is listed as failed, without its body.
            .bind(if dropped { String::new() } else { body.to_owned() })
            .push(", ")
            .bind(now)
            .push(", 0, ")
            .bind(now);
            if dropped {
                sql.push(", 'failed', ")
                    .bind(format!(
                        "not queued: {pending} deliveries were waiting for this receiver"
                    ))
                    .push(", ")
                    .bind(now);
            } else {
                sql.push(", 'pending', NULL, NULL");
            }
            sql.push(" FROM webhooks WHERE status = 'ACTIVE' AND id = ")
                .bind(webhook_id.clone());
            let written = txn.execute_raw(sql.build()).await?.rows_affected();
            if dropped {
                prune(&txn, &webhook_id).await?;
            } else {
                queued += written;
            }
        }
        txn.commit().await?;
        Ok(queued)
    }

    /// Claims up to `limit` deliveries that are due, oldest first, for
    /// `CLAIM_MILLIS`: another claimer passes them over meanwhile.
    pub async fn claim_webhook_deliveries(
        &self,
        limit: u64,
    ) -> Result<Vec<DueDelivery>, StoreError> {
        let now = now_millis();
        let mut sql = self.sql();
        sql.push(
            "SELECT d.id, d.webhook_id, d.event, d.body, d.attempts, d.next_attempt, w.url, w.secret \
             FROM webhook_deliveries d JOIN webhooks w ON w.id = d.webhook_id \
             WHERE d.state = 'pending' AND w.status = 'ACTIVE' AND d.next_attempt <= ",
        )
        .bind(now)
        .push(" ORDER BY d.next_attempt, d.created LIMIT ")
        .bind(limit as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        let mut claimed = Vec::with_capacity(rows.len());
        for row in &rows {
            let id: String = get(row, "id")?;
            let due: i64 = get(row, "next_attempt")?;
            let claimed_until = now + CLAIM_MILLIS;
            let mut sql = self.sql();
            sql.push("UPDATE webhook_deliveries SET next_attempt = ")
                .bind(claimed_until)
                .push(" WHERE state = 'pending' AND id = ")
                .bind(id.clone())
                .push(" AND next_attempt = ")
                .bind(due);
            let taken = {
                let _turn = self.write_turn().await;
                self.connection().execute_raw(sql.build()).await?
            };
            if taken.rows_affected() == 1 {
                let webhook_id: String = get(row, "webhook_id")?;
                claimed.push(DueDelivery {
                    delivery_id: id,
                    secret: self
                        .open_secret(&webhook_id, get(row, "secret")?)
                        .map_err(|e| e.to_string()),
                    webhook_id,
                    url: get(row, "url")?,
                    event: get(row, "event")?,
                    body: get(row, "body")?,
                    attempts: get(row, "attempts")?,
                    claimed_until,
                });
            }
        }
        Ok(claimed)
    }

    /// The earliest time a pending delivery is due, if one waits.
    pub async fn next_webhook_delivery(&self) -> Result<Option<i64>, StoreError> {
        let row = self
            .connection()
            .query_one_raw(self.plain(
                "SELECT MIN(d.next_attempt) AS due FROM webhook_deliveries d \
                     JOIN webhooks w ON w.id = d.webhook_id \
                     WHERE d.state = 'pending' AND w.status = 'ACTIVE'",
            ))
            .await?;
        Ok(match row {
            Some(row) => get(&row, "due")?,
            None => None,
        })
    }

    /// Records a try. A delivery that succeeded, or failed with no retry
    /// (or its last), is finished; past `KEPT_FINISHED_EACH` finished ones
    /// of its webhook, the oldest go.
    pub async fn record_webhook_attempt(
        &self,
        delivery: &DueDelivery,
        attempt: Attempt,
    ) -> Result<(), StoreError> {
        let now = now_millis();
        let tries = delivery.attempts + 1;
        let mut sql = self.sql();
        sql.push("UPDATE webhook_deliveries SET attempts = ")
            .bind(tries);
        let finished = match attempt {
            Attempt::Delivered { status } => {
                sql.push(", state = 'delivered', body = '', error = NULL, response_status = ")
                    .bind(status)
                    .push(", finished = ")
                    .bind(now);
                true
            }
            Attempt::Failed {
                status,
                error,
                retry_at,
            } => {
                sql.push(", response_status = ")
                    .bind(status)
                    .push(", error = ")
                    .bind(error);
                match retry_at.filter(|_| tries < MAX_ATTEMPTS) {
                    Some(at) => {
                        sql.push(", next_attempt = ").bind(at);
                        false
                    }
                    None => {
                        sql.push(", state = 'failed', body = '', finished = ")
                            .bind(now);
                        true
                    }
                }
            }
        };
        // Only while the claim holds: past it, another claimer may have it.
        sql.push(" WHERE state = 'pending' AND id = ")
            .bind(delivery.delivery_id.clone())
            .push(" AND next_attempt = ")
            .bind(delivery.claimed_until);
        let _turn = self.write_turn().await;
        let txn = self.begin_write().await?;
        let recorded = txn.execute_raw(sql.build()).await?.rows_affected() == 1;
        if recorded && finished {
            prune(&txn, &delivery.webhook_id).await?;
        }
        txn.commit().await?;
        Ok(())
    }

    /// A webhook's deliveries, newest first: those waiting and the last
    /// finished ones.
    pub async fn webhook_deliveries(
        &self,
        webhook_id: &str,
        limit: u64,
    ) -> Result<Vec<WebhookDelivery>, StoreError> {
        let mut sql = self.sql();
        sql.push(
            "SELECT id, webhook_id, event, created, attempts, state, response_status, error, finished \
             FROM webhook_deliveries WHERE webhook_id = ",
        )
        .bind(webhook_id.to_owned())
        .push(" ORDER BY created DESC, id LIMIT ")
        .bind(limit as i64);
        let rows = self.connection().query_all_raw(sql.build()).await?;
        rows.iter().map(delivery_of).collect()
    }
}
