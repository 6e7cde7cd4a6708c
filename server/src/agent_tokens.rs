//! Node agents' Kubernetes credentials (see trainyard_kube::agents): a
//! bearer token that is no Trainyard token is given to the API's
//! TokenReview, and what it answers is kept for a minute, so that a
//! thousand agents pushing every 10 s cost the API a review per agent and
//! minute rather than one per push. A token the API stops taking (its pod
//! deleted) is so refused within a minute.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use trainyard_kube::agents::AgentReviewer;
use trainyard_store::identity::{TOKEN_PREFIX, secret_hash};

/// How long the API's answer about a token is kept.
const KEEP: Duration = Duration::from_secs(60);
/// The most answers kept (a cluster's agents, and refused tokens).
const MAX_KEPT: usize = 20_000;
/// The longest token sent to the API: ServiceAccount tokens are JWTs of a
/// kilobyte or two.
const MAX_TOKEN_BYTES: usize = 16 << 10;

/// Token hash → (its node, or None where refused; until when).
type Kept = HashMap<String, (Option<String>, Instant)>;

/// The most reviews asked of the API at once: a flood of made-up tokens
/// waits here rather than landing on the API server.
const MAX_REVIEWS_AT_ONCE: usize = 8;

#[derive(Clone)]
pub struct AgentTokens {
    reviewer: AgentReviewer,
    kept: Arc<Mutex<Kept>>,
    reviews: Arc<tokio::sync::Semaphore>,
}

impl AgentTokens {
    pub fn new(reviewer: AgentReviewer) -> AgentTokens {
        AgentTokens {
            reviewer,
            kept: Default::default(),
            reviews: Arc::new(tokio::sync::Semaphore::new(MAX_REVIEWS_AT_ONCE)),
        }
    }

    /// The node whose agent holds `token`, where the API says so; Ok(None)
    /// for anything else. Err: the API could not be asked.
    pub async fn node_of(&self, token: &str) -> Result<Option<String>, String> {
        if !looks_like_jwt(token) {
            return Ok(None);
        }
        let key = secret_hash(token);
        let now = Instant::now();
        if let Some((node, until)) = self.lock().get(&key)
            && *until > now
        {
            return Ok(node.clone());
        }
        let _turn = self
            .reviews
            .acquire()
            .await
            .map_err(|e| format!("the reviews were closed: {e}"))?;
        let node = self.reviewer.node_of(token).await?;
        let mut kept = self.lock();
        if kept.len() >= MAX_KEPT {
            kept.retain(|_, (_, until)| *until > now);
            if kept.len() >= MAX_KEPT {
                kept.clear();
            }
        }
        kept.insert(key, (node.clone(), now + KEEP));
        Ok(node)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Kept> {
        self.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// Three base64url parts, as a ServiceAccount token is; Trainyard's own
/// tokens (and anything else) are never sent to the API.
fn looks_like_jwt(token: &str) -> bool {
    !token.starts_with(TOKEN_PREFIX)
        && token.len() <= MAX_TOKEN_BYTES
        && token.split('.').count() == 3
        && token.split('.').all(|part| {
            !part.is_empty()
                && part
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jwts_go_to_the_api() {
        assert!(looks_like_jwt("eyJhbGciOi.eyJhdWQiOlsi.c2lnbmF0dXJl-_x"));
        assert!(!looks_like_jwt("ty_abcdef.ghi.jkl"));
        assert!(!looks_like_jwt("just-a-password"));
        assert!(!looks_like_jwt("a..c"));
        assert!(!looks_like_jwt("a.b.c.d"));
        assert!(!looks_like_jwt("a.b.c d"));
        assert!(!looks_like_jwt(&format!(
            "a.b.{}",
            "c".repeat(MAX_TOKEN_BYTES)
        )));
    }
}
