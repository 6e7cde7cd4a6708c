//! Registry webhooks: what is sent for each event, how it is signed, where
//! it may go, and the deliverer that sends the store's outbox.
//!
//! A delivery is a POST of `{"entity", "action", "timestamp", "data"}` as
//! MLflow sends it, with `X-MLflow-Delivery-Id` (the same on every try, so
//! a receiver can drop a repeat), `X-MLflow-Timestamp` (seconds) and, when
//! the webhook has a secret, `X-MLflow-Signature: v1,<base64 HMAC-SHA256 of
//! "id.timestamp.body">`.
//!
//! The server reaches what its users cannot (its own loopback, the cloud's
//! metadata service, the cluster's services), so by default a webhook goes
//! to public addresses only. The check is made on the addresses the
//! connection is actually made to, by the client's resolver, so a name that
//! resolves elsewhere by the time of sending (DNS rebinding) gains nothing.
//! No proxy from the environment is used and no redirect is followed.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use futures::StreamExt;
use hmac::{Hmac, Mac};
use serde_json::{Value, json};
use sha2::Sha256;
use tokio::sync::Notify;
use trainyard_store::Store;
use trainyard_store::webhooks::{Attempt, DueDelivery};

/// How long one try may take.
const TIMEOUT: Duration = Duration::from_secs(30);
/// What is read of a receiver's answer (shown by the test endpoint).
const MAX_RESPONSE_BYTES: usize = 64 * 1024;
/// Waits before the 2nd, 3rd, … try.
const BACKOFF_SECS: [i64; 4] = [1, 10, 60, 600];
/// The longest `Retry-After` honoured.
const MAX_RETRY_AFTER_SECS: i64 = 3_600;
/// Deliveries sent at once, and claimed at once: one wave of them ends
/// within `TIMEOUT`, well inside the store's claim.
const PARALLEL: usize = 8;
/// The largest event sent; past it, long texts are cut (see `bounded`).
const MAX_EVENT_BYTES: usize = 64 * 1024;
/// What a text of an event keeps when the event is too large.
const CUT_CHARS: usize = 2_048;

/// Whether an address is one the public internet routes: not loopback,
/// private, link-local, shared (CGNAT), multicast, documentation or
/// otherwise reserved; IPv6 forms that carry an IPv4 address (mapped,
/// 6to4, NAT64) are judged by it.
pub fn is_public(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_public_v4(v4),
        IpAddr::V6(v6) => {
            if let Some(v4) = v6.to_ipv4_mapped() {
                return is_public_v4(v4);
            }
            let s = v6.segments();
            if s[0] == 0x2002 {
                let [a, b] = s[1].to_be_bytes();
                let [c, d] = s[2].to_be_bytes();
                return is_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
                let [a, b] = s[6].to_be_bytes();
                let [c, d] = s[7].to_be_bytes();
                return is_public_v4(Ipv4Addr::new(a, b, c, d));
            }
            // Global unicast is 2000::/3; within it, 2001::/23 (Teredo,
            // benchmarking, ORCHID…) and 2001:db8::/32 (documentation) are
            // not.
            let global_unicast = (s[0] & 0xe000) == 0x2000;
            let ietf = s[0] == 0x2001 && s[1] < 0x0200;
            let documentation = s[0] == 0x2001 && s[1] == 0x0db8;
            global_unicast && !ietf && !documentation && v6 != Ipv6Addr::UNSPECIFIED
        }
    }
}

fn is_public_v4(ip: Ipv4Addr) -> bool {
    let [a, b, c, _] = ip.octets();
    !(a == 0
        || a == 10
        || a == 127
        || (a == 100 && (64..128).contains(&b))
        || (a == 169 && b == 254)
        || (a == 172 && (16..32).contains(&b))
        || (a == 192 && b == 0 && c == 0)
        || (a == 192 && b == 0 && c == 2)
        || (a == 192 && b == 88 && c == 99)
        || (a == 192 && b == 168)
        || (a == 198 && (18..20).contains(&b))
        || (a == 198 && b == 51 && c == 100)
        || (a == 203 && b == 0 && c == 113)
        || a >= 224)
}

/// The client's resolver: a name's addresses, less those that are not
/// public unless private hosts are allowed.
struct PublicOnly {
    allow_private: bool,
}

impl reqwest::dns::Resolve for PublicOnly {
    fn resolve(&self, name: reqwest::dns::Name) -> reqwest::dns::Resolving {
        let allow_private = self.allow_private;
        Box::pin(async move {
            let host = name.as_str().to_owned();
            let found: Vec<SocketAddr> =
                tokio::net::lookup_host((host.as_str(), 0)).await?.collect();
            let kept: Vec<SocketAddr> = found
                .iter()
                .copied()
                .filter(|a| allow_private || is_public(a.ip()))
                .collect();
            if kept.is_empty() {
                let seen: Vec<String> = found.iter().map(|a| a.ip().to_string()).collect();
                return Err(format!(
                    "{host} resolves to no public address ({}); webhooks go to public addresses only unless webhook_allow_private_hosts is set",
                    seen.join(", ")
                )
                .into());
            }
            Ok(Box::new(kept.into_iter()) as reqwest::dns::Addrs)
        })
    }
}

/// What a try came to.
#[derive(Debug)]
pub struct Sent {
    pub status: Option<u16>,
    /// The start of the receiver's answer.
    pub body: String,
    /// Why it failed, when no answer came.
    pub error: Option<String>,
    /// When the receiver asked to be tried again (seconds).
    pub retry_after: Option<i64>,
}

impl Sent {
    fn failed(error: String) -> Sent {
        Sent {
            status: None,
            body: String::new(),
            error: Some(error),
            retry_after: None,
        }
    }
}

/// Webhooks' queue and deliverer; cheap to clone.
#[derive(Clone)]
pub struct Webhooks {
    store: Store,
    sender: Sender,
    wake: Arc<Notify>,
}

/// Sends to webhooks' URLs, and checks them.
#[derive(Clone)]
pub struct Sender {
    client: reqwest::Client,
    /// `https`, and `http` where allowed.
    schemes: Vec<String>,
    allow_private: bool,
}

impl Sender {
    pub fn new(schemes: Vec<String>, allow_private: bool) -> Result<Sender, String> {
        let client = reqwest::Client::builder()
            .dns_resolver(Arc::new(PublicOnly { allow_private }))
            .no_proxy()
            .redirect(reqwest::redirect::Policy::none())
            .timeout(TIMEOUT)
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!("Trainyard-Webhooks/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("the webhooks' HTTP client: {e}"))?;
        Ok(Sender {
            client,
            schemes,
            allow_private,
        })
    }

    /// Checks a webhook's URL as it is set: a scheme the settings allow,
    /// no credentials, a host, and (unless private hosts are allowed) only
    /// public addresses now. The same check is made again at each
    /// connection.
    pub async fn check_url(&self, text: &str) -> Result<(), String> {
        let url = url::Url::parse(text.trim())
            .map_err(|e| format!("Invalid webhook URL '{text}': {e}"))?;
        self.scheme_allowed(&url)?;
        if !url.username().is_empty() || url.password().is_some() {
            return Err(format!(
                "The webhook URL '{text}' holds a user name or password; sign deliveries with the webhook's secret instead"
            ));
        }
        let host = match url.host() {
            Some(host) => host.to_owned(),
            None => return Err(format!("Webhook URL must include a hostname: '{text}'")),
        };
        if self.allow_private {
            return Ok(());
        }
        let addresses: Vec<IpAddr> = match host {
            url::Host::Ipv4(ip) => vec![IpAddr::V4(ip)],
            url::Host::Ipv6(ip) => vec![IpAddr::V6(ip)],
            url::Host::Domain(name) => {
                let lookup = tokio::net::lookup_host((name.as_str(), 0));
                tokio::time::timeout(Duration::from_secs(10), lookup)
                    .await
                    .map_err(|_| {
                        format!("The webhook URL's host '{name}' did not resolve within 10 s")
                    })?
                    .map_err(|e| format!("The webhook URL's host '{name}' does not resolve: {e}"))?
                    .map(|a| a.ip())
                    .collect()
            }
        };
        match addresses.iter().find(|ip| !is_public(**ip)) {
            Some(ip) => Err(format!(
                "The webhook URL '{text}' reaches {ip}, which is not a public address; webhooks go to public addresses only unless the server's webhook_allow_private_hosts is set"
            )),
            None => Ok(()),
        }
    }

    fn scheme_allowed(&self, url: &url::Url) -> Result<(), String> {
        if self.schemes.iter().any(|s| s == url.scheme()) {
            return Ok(());
        }
        Err(format!(
            "Invalid webhook URL scheme: '{}'. Allowed schemes are: {} (the server's webhook_schemes).",
            url.scheme(),
            self.schemes.join(", ")
        ))
    }

    /// Sends one POST, signed when there is a secret.
    pub async fn send(
        &self,
        url: &str,
        secret: Option<&str>,
        delivery_id: &str,
        body: &str,
    ) -> Sent {
        let Ok(parsed) = url::Url::parse(url) else {
            return Sent::failed(format!("'{url}' is not a URL"));
        };
        // The setting may have changed since the webhook was made.
        if let Err(e) = self.scheme_allowed(&parsed) {
            return Sent::failed(e);
        }
        // An address in the URL is dialled as it is, past the resolver.
        let literal = match parsed.host() {
            Some(url::Host::Ipv4(ip)) => Some(IpAddr::V4(ip)),
            Some(url::Host::Ipv6(ip)) => Some(IpAddr::V6(ip)),
            _ => None,
        };
        if let Some(ip) = literal.filter(|ip| !self.allow_private && !is_public(*ip)) {
            return Sent::failed(format!(
                "{ip} is not a public address; webhooks go to public addresses only unless webhook_allow_private_hosts is set"
            ));
        }
        let timestamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
            .to_string();
        let mut request = self
            .client
            .post(parsed)
            .header(reqwest::header::CONTENT_TYPE, "application/json")
            .header("X-MLflow-Delivery-Id", delivery_id)
            .header("X-MLflow-Timestamp", &timestamp)
            .body(body.to_owned());
        if let Some(secret) = secret {
            request = request.header(
                "X-MLflow-Signature",
                signature(secret, delivery_id, &timestamp, body),
            );
        }
        let response = match request.send().await {
            Ok(response) => response,
            Err(e) => return Sent::failed(error_chain(&e)),
        };
        let status = response.status().as_u16();
        let retry_after = response
            .headers()
            .get(reqwest::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse::<i64>().ok());
        let body = read_start(response).await;
        Sent {
            status: Some(status),
            body,
            error: None,
            retry_after,
        }
    }
}

impl Webhooks {
    pub fn new(store: Store, sender: Sender) -> Webhooks {
        Webhooks {
            store,
            sender,
            wake: Arc::new(Notify::new()),
        }
    }

    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    /// Which of `events` some active webhook asked for. Asked before an
    /// event that costs a lookup to build; a failure is logged and counts
    /// as none, as it would fail queueing too.
    pub async fn wanted(&self, events: &[&str]) -> Vec<String> {
        match self.store.webhook_events_wanted().await {
            Ok(wanted) => events
                .iter()
                .filter(|e| wanted.contains(**e))
                .map(|e| (*e).to_owned())
                .collect(),
            Err(e) => {
                tracing::error!(error = %e, "could not read which events webhooks want");
                Vec::new()
            }
        }
    }

    /// Queues an event's `data` for the webhooks that asked for it, and
    /// wakes the deliverer. A failure is logged: the registry change that
    /// raised the event has been made and stands.
    pub async fn emit(&self, event: &str, data: Value) {
        let body = body(event, bounded(data));
        match self.store.enqueue_webhook_event(event, &body).await {
            Ok(0) => {}
            Ok(_) => self.wake.notify_one(),
            Err(e) => tracing::error!(event, error = %e, "could not queue a webhook event"),
        }
    }

    /// Sends what is due until nothing is, then waits for an event or the
    /// next retry.
    pub async fn deliver_forever(self) {
        let mut failing = Duration::ZERO;
        loop {
            match self.store.claim_webhook_deliveries(PARALLEL as u64).await {
                Ok(due) if !due.is_empty() => {
                    failing = Duration::ZERO;
                    futures::stream::iter(due)
                        .for_each_concurrent(PARALLEL, |d| self.deliver(d))
                        .await;
                    continue;
                }
                Ok(_) => failing = Duration::ZERO,
                Err(e) => {
                    // The database is away or refuses writes: wait longer
                    // each time, up to 30 s, rather than ask again at once.
                    failing = (failing * 2).clamp(Duration::from_secs(1), Duration::from_secs(30));
                    tracing::warn!(error = %e, retry_secs = failing.as_secs(), "could not claim the webhooks' deliveries");
                    tokio::time::sleep(failing).await;
                    continue;
                }
            }
            let wait = match self.store.next_webhook_delivery().await {
                Ok(Some(at)) => (at - trainyard_store::now_millis()).clamp(100, 30_000),
                _ => 30_000,
            };
            tokio::select! {
                _ = self.wake.notified() => {}
                _ = tokio::time::sleep(Duration::from_millis(wait as u64)) => {}
            }
        }
    }

    async fn deliver(&self, due: DueDelivery) {
        let attempt = match &due.secret {
            Ok(secret) => {
                let sent = self
                    .sender
                    .send(&due.url, secret.as_deref(), &due.delivery_id, &due.body)
                    .await;
                outcome(&sent, due.attempts, trainyard_store::now_millis())
            }
            // Nothing is sent unsigned in its place; the right key (or a
            // new secret) lets a later try through.
            Err(why) => Attempt::Failed {
                status: None,
                error: why.clone(),
                retry_at: Some(trainyard_store::now_millis() + backoff(due.attempts) * 1000),
            },
        };
        if let Attempt::Failed { error, .. } = &attempt {
            tracing::warn!(webhook = %due.webhook_id, delivery = %due.delivery_id, event = %due.event, %error, "a webhook delivery failed");
        }
        if let Err(e) = self.store.record_webhook_attempt(&due, attempt).await {
            tracing::error!(delivery = %due.delivery_id, error = %e, "could not record a webhook delivery");
        }
    }
}

/// What a try means for the delivery: delivered on a 2xx; tried again
/// after a wait on no answer, 408, 429 or 5xx; else failed for good.
pub fn outcome(sent: &Sent, attempts_before: i32, now_ms: i64) -> Attempt {
    let status = sent.status.map(i32::from);
    match sent.status {
        Some(code) if (200..300).contains(&code) => Attempt::Delivered {
            status: i32::from(code),
        },
        Some(code) => {
            let retry = code == 408 || code == 429 || code >= 500;
            let wait = sent
                .retry_after
                .map(|s| s.clamp(0, MAX_RETRY_AFTER_SECS))
                .unwrap_or_else(|| backoff(attempts_before));
            Attempt::Failed {
                status,
                error: format!("the receiver answered {code}"),
                retry_at: retry.then_some(now_ms + wait * 1000),
            }
        }
        None => {
            let error = sent.error.clone().unwrap_or_default();
            // A refused address stays refused.
            let retry =
                !error.contains("not a public address") && !error.contains("no public address");
            Attempt::Failed {
                status: None,
                error,
                retry_at: retry.then_some(now_ms + backoff(attempts_before) * 1000),
            }
        }
    }
}

fn backoff(attempts_before: i32) -> i64 {
    let i = (attempts_before.max(0) as usize).min(BACKOFF_SECS.len() - 1);
    BACKOFF_SECS[i]
}

/// An event's data within `MAX_EVENT_BYTES`: when larger (a long
/// description, many or long tags, a long prompt template), each text is
/// cut to `CUT_CHARS` and the tags to those that fit, and `truncated` says
/// so; names, versions and aliases are short already.
fn bounded(mut data: Value) -> Value {
    if data.to_string().len() <= MAX_EVENT_BYTES {
        return data;
    }
    let cut = |text: &str| -> String {
        if text.chars().count() <= CUT_CHARS {
            text.to_owned()
        } else {
            text.chars().take(CUT_CHARS).chain(['…']).collect()
        }
    };
    if let Value::Object(fields) = &mut data {
        for value in fields.values_mut() {
            match value {
                Value::String(text) => *text = cut(text),
                Value::Object(tags) => {
                    let mut room = MAX_EVENT_BYTES / 2;
                    tags.retain(|key, value| {
                        if let Value::String(text) = value {
                            *text = cut(text);
                        }
                        let size = key.len() + value.to_string().len() + 4;
                        let keep = size <= room;
                        if keep {
                            room -= size;
                        }
                        keep
                    });
                }
                _ => {}
            }
        }
        fields.insert("truncated".to_owned(), Value::Bool(true));
    }
    data
}

/// `v1,` and the base64 HMAC-SHA256 of `id.timestamp.body` (MLflow's
/// signature, after Standard Webhooks).
pub fn signature(secret: &str, delivery_id: &str, timestamp: &str, body: &str) -> String {
    let mut mac =
        Hmac::<Sha256>::new_from_slice(secret.as_bytes()).expect("HMAC takes a key of any length");
    mac.update(format!("{delivery_id}.{timestamp}.{body}").as_bytes());
    format!(
        "v1,{}",
        base64::engine::general_purpose::STANDARD.encode(mac.finalize().into_bytes())
    )
}

/// What is POSTed for an event: MLflow's envelope around its `data`.
pub fn body(event: &str, data: Value) -> String {
    let (entity, action) = event.split_once('.').unwrap_or((event, ""));
    json!({
        "entity": entity,
        "action": action,
        "timestamp": iso_now(),
        "data": data,
    })
    .to_string()
}

/// Now as Python's `datetime.now(timezone.utc).isoformat()` writes it.
fn iso_now() -> String {
    let micros = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() as i64);
    chrono::DateTime::from_timestamp_micros(micros)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string())
        .unwrap_or_default()
}

/// The error and its causes, which say what actually went wrong (refused,
/// timed out, not public).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        let cause_text = cause.to_string();
        if !text.contains(&cause_text) {
            text.push_str(": ");
            text.push_str(&cause_text);
        }
        source = cause.source();
    }
    text
}

/// The first `MAX_RESPONSE_BYTES` of an answer, as text.
async fn read_start(mut response: reqwest::Response) -> String {
    let mut bytes = Vec::new();
    while let Ok(Some(chunk)) = response.chunk().await {
        let room = MAX_RESPONSE_BYTES - bytes.len();
        bytes.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if bytes.len() >= MAX_RESPONSE_BYTES {
            break;
        }
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// MLflow's example payload of an event, which the test endpoint sends.
pub fn example(event: &str) -> Value {
    let (entity, _) = event.split_once('.').unwrap_or((event, ""));
    let prompt = entity.starts_with("prompt");
    let name = if prompt {
        "example_prompt"
    } else {
        "example_model"
    };
    match event {
        "registered_model.created" | "prompt.created" => json!({
            "name": name,
            "tags": {"example_key": "example_value"},
            "description": if prompt { "An example prompt" } else { "An example registered model" },
        }),
        "model_version.created" => json!({
            "name": name, "version": "1", "source": "models:/123", "run_id": "abcd1234abcd5678",
            "tags": {"example_key": "example_value"}, "description": "An example model version",
        }),
        "prompt_version.created" => json!({
            "name": name, "version": "1", "template": "Hello {{name}}!",
            "tags": {"example_key": "example_value"}, "description": "An example prompt version",
        }),
        "model_version_tag.set" | "prompt_version_tag.set" => {
            json!({"name": name, "version": "1", "key": "example_key", "value": "example_value"})
        }
        "model_version_tag.deleted" | "prompt_version_tag.deleted" => {
            json!({"name": name, "version": "1", "key": "example_key"})
        }
        "prompt_tag.set" => json!({"name": name, "key": "example_key", "value": "example_value"}),
        "prompt_tag.deleted" => json!({"name": name, "key": "example_key"}),
        "model_version_alias.created" | "prompt_alias.created" => {
            json!({"name": name, "alias": "example_alias", "version": "1"})
        }
        _ => json!({"name": name, "alias": "example_alias"}),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_public_addresses_are_public() {
        for private in [
            "127.0.0.1",
            "10.1.2.3",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.1.1",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
            "224.0.0.1",
            "255.255.255.255",
            "192.0.2.1",
            "198.18.0.1",
            "::1",
            "::",
            "fe80::1",
            "fc00::1",
            "fd12::1",
            "ff02::1",
            "2001:db8::1",
            "2001::1",
            "::ffff:127.0.0.1",
            "::ffff:169.254.169.254",
            "2002:a00:1::",
            "64:ff9b::a9fe:a9fe",
        ] {
            assert!(!is_public(private.parse().unwrap()), "{private}");
        }
        for public in [
            "8.8.8.8",
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "2002:808:808::",
        ] {
            assert!(is_public(public.parse().unwrap()), "{public}");
        }
    }

    #[test]
    fn a_2xx_delivers_a_busy_receiver_is_tried_again_and_a_refusal_is_final() {
        let answered = |status: u16, retry_after: Option<i64>| Sent {
            status: Some(status),
            body: String::new(),
            error: None,
            retry_after,
        };
        assert!(matches!(
            outcome(&answered(204, None), 0, 0),
            Attempt::Delivered { status: 204 }
        ));
        for (status, attempts, at) in [(503, 0, 1_000), (429, 1, 10_000), (500, 9, 600_000)] {
            match outcome(&answered(status, None), attempts, 0) {
                Attempt::Failed {
                    retry_at: Some(t), ..
                } => assert_eq!(t, at, "{status} after {attempts}"),
                _ => panic!("{status} is tried again"),
            }
        }
        match outcome(&answered(429, Some(120)), 0, 5) {
            Attempt::Failed { retry_at, .. } => assert_eq!(retry_at, Some(120_005)),
            _ => panic!("Retry-After is honoured"),
        }
        match outcome(&answered(401, None), 0, 0) {
            Attempt::Failed {
                retry_at, error, ..
            } => {
                assert_eq!(retry_at, None);
                assert!(error.contains("401"));
            }
            _ => panic!("a 401 fails"),
        }
        match outcome(&Sent::failed("connection refused".into()), 0, 0) {
            Attempt::Failed { retry_at, .. } => assert_eq!(retry_at, Some(1_000)),
            _ => panic!(),
        }
        match outcome(
            &Sent::failed("10.0.0.1 is not a public address".into()),
            0,
            0,
        ) {
            Attempt::Failed { retry_at, .. } => assert_eq!(retry_at, None),
            _ => panic!(),
        }
    }

    fn both() -> Vec<String> {
        vec!["https".to_owned(), "http".to_owned()]
    }

    #[tokio::test]
    async fn a_url_must_be_https_unless_http_is_allowed() {
        let https_only = Sender::new(vec!["https".to_owned()], true).unwrap();
        https_only.check_url("https://localhost/x").await.unwrap();
        let refused = https_only
            .check_url("http://localhost/x")
            .await
            .unwrap_err();
        assert!(refused.contains("Allowed schemes are: https"), "{refused}");
        let sent = https_only
            .send("http://localhost:9/x", None, "d", "{}")
            .await;
        assert!(sent.error.unwrap().contains("scheme: 'http'"));
    }

    #[tokio::test]
    async fn a_url_must_be_http_and_public_unless_private_hosts_are_allowed() {
        let public_only = Sender::new(both(), false).unwrap();
        for (url, says) in [
            (
                "ftp://8.8.8.8/x",
                "scheme: 'ftp'. Allowed schemes are: https, http",
            ),
            ("http://", "Invalid webhook URL"),
            ("not a url", "Invalid webhook URL"),
            ("http://ci:pw@8.8.8.8/x", "user name or password"),
            ("http://localhost:8080/x", "not a public address"),
            ("http://127.1/x", "127.0.0.1, which is not a public address"),
            ("http://169.254.169.254/latest", "not a public address"),
            ("http://[::ffff:7f00:1]/x", "not a public address"),
            ("http://[fd00::1]/x", "not a public address"),
        ] {
            let refused = public_only.check_url(url).await.unwrap_err();
            assert!(refused.contains(says), "{url}: {refused}");
        }
        public_only.check_url("https://8.8.8.8/hook").await.unwrap();
        let private_too = Sender::new(both(), true).unwrap();
        private_too
            .check_url("http://localhost:8080/x")
            .await
            .unwrap();
        assert!(private_too.check_url("file:///etc/passwd").await.is_err());
    }

    #[tokio::test]
    async fn a_delivery_is_signed_and_goes_to_private_addresses_only_when_allowed() {
        use std::sync::Mutex;
        let seen: Arc<Mutex<Vec<(axum::http::HeaderMap, String)>>> = Default::default();
        let kept = seen.clone();
        let app = axum::Router::new().route(
            "/hook",
            axum::routing::post(move |headers: axum::http::HeaderMap, body: String| {
                let kept = kept.clone();
                async move {
                    kept.lock().unwrap().push((headers, body));
                    (axum::http::StatusCode::ACCEPTED, "thanks")
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });

        // Refused by name (the resolver drops the address) and by address.
        let public_only = Sender::new(both(), false).unwrap();
        for url in [
            format!("http://localhost:{port}/hook"),
            format!("http://127.0.0.1:{port}/hook"),
        ] {
            let sent = public_only.send(&url, None, "d-1", "{}").await;
            assert_eq!(sent.status, None, "{url}");
            let error = sent.error.unwrap_or_default();
            assert!(error.contains("public address"), "{url}: {error}");
        }
        assert!(seen.lock().unwrap().is_empty());

        let sender = Sender::new(both(), true).unwrap();
        let body = body(
            "model_version.created",
            json!({"name": "m", "version": "1"}),
        );
        let sent = sender
            .send(
                &format!("http://localhost:{port}/hook"),
                Some("k3y"),
                "d-2",
                &body,
            )
            .await;
        assert_eq!((sent.status, sent.body.as_str()), (Some(202), "thanks"));
        let seen = seen.lock().unwrap();
        let (headers, got) = &seen[0];
        assert_eq!(got, &body);
        let header = |name: &str| headers[name].to_str().unwrap().to_owned();
        assert_eq!(header("x-mlflow-delivery-id"), "d-2");
        assert_eq!(header("content-type"), "application/json");
        let timestamp = header("x-mlflow-timestamp");
        assert_eq!(
            header("x-mlflow-signature"),
            signature("k3y", "d-2", &timestamp, &body)
        );
        let envelope: Value = serde_json::from_str(got).unwrap();
        assert_eq!(
            (
                &envelope["entity"],
                &envelope["action"],
                &envelope["data"]["name"]
            ),
            (&json!("model_version"), &json!("created"), &json!("m"))
        );
        assert!(
            envelope["timestamp"].as_str().unwrap().ends_with("+00:00"),
            "{envelope}"
        );
    }

    #[test]
    fn a_large_event_is_cut_to_fit_and_says_so() {
        let small = json!({"name": "m", "version": "1", "tags": {"a": "b"}});
        assert_eq!(bounded(small.clone()), small);
        let tags: serde_json::Map<String, Value> = (0..1_000)
            .map(|i| (format!("tag-{i}"), json!("v".repeat(5_000))))
            .collect();
        let big = json!({"name": "m", "description": "d".repeat(100_000), "tags": tags});
        let cut = bounded(big);
        assert!(
            cut.to_string().len() <= MAX_EVENT_BYTES,
            "{}",
            cut.to_string().len()
        );
        assert_eq!(cut["truncated"], true);
        assert_eq!(cut["name"], "m");
        assert_eq!(
            cut["description"].as_str().unwrap().chars().count(),
            CUT_CHARS + 1
        );
        let kept = cut["tags"].as_object().unwrap();
        assert!(!kept.is_empty() && kept.len() < 1_000, "{}", kept.len());
    }

    #[test]
    fn the_signature_is_mlflows() {
        // From mlflow.webhooks.delivery._generate_hmac_signature (3.17).
        assert_eq!(
            signature(
                "whsec-test",
                "b8e1c0a2-delivery",
                "1764959400",
                r#"{"entity":"model_version","action":"created","data":{"name":"m"}}"#
            ),
            "v1,L6uXEJA+SHk5R5R9UvdooohSC7v7qQx8A7RqoS4ukf0="
        );
    }

    #[test]
    fn every_event_has_an_example_named_for_its_kind() {
        for event in trainyard_domain::tracking::WEBHOOK_EVENTS {
            let data = example(event);
            let name = data["name"].as_str().unwrap();
            assert_eq!(
                name.contains("prompt"),
                event.starts_with("prompt"),
                "{event}"
            );
            if event.contains("alias") {
                assert_eq!(data["alias"], "example_alias", "{event}");
            }
            if event.ends_with("tag.set") {
                assert_eq!(data["value"], "example_value", "{event}");
            }
        }
    }
}
