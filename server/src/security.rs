//! Response headers that keep pages from being framed, sniffed or scripted
//! from elsewhere, and rate limits on sign-in and token making.
//!
//! Pages get a Content-Security-Policy with a fresh nonce per response:
//! Leptos puts the nonce on the hydration script it writes, so that script
//! runs and no other inline script can. WebAssembly needs
//! `'wasm-unsafe-eval'`. Every other response gets a policy that allows no
//! inline script and no framing.

use std::net::{IpAddr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::config::AuthConfig;

/// The policy of a page whose inline scripts carry `nonce`. `form_action`
/// adds the identity provider, where sign-out's form is sent on.
pub fn page_policy(nonce: &str, provider_origin: Option<&str>) -> String {
    let provider = provider_origin.map(|o| format!(" {o}")).unwrap_or_default();
    format!(
        "default-src 'self'; script-src 'self' 'nonce-{nonce}' 'wasm-unsafe-eval'; \
         style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; \
         object-src 'none'; base-uri 'none'; form-action 'self'{provider}; frame-ancestors 'none'"
    )
}

/// For everything that is not a page: no inline script, no framing.
const DEFAULT_POLICY: &str =
    "default-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'";

/// Sets the page's policy from inside the Leptos render (where the nonce
/// is known).
pub fn set_page_policy(provider_origin: Option<&str>) {
    use leptos::prelude::use_context;
    let (Some(nonce), Some(response)) = (
        leptos::nonce::use_nonce(),
        use_context::<leptos_axum::ResponseOptions>(),
    ) else {
        return;
    };
    if let Ok(value) = HeaderValue::from_str(&page_policy(&nonce, provider_origin)) {
        response.insert_header(header::CONTENT_SECURITY_POLICY, value);
    }
}

/// Middleware: the headers every response carries.
pub async fn headers(State(https): State<bool>, request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    headers
        .entry(header::CONTENT_SECURITY_POLICY)
        .or_insert(HeaderValue::from_static(DEFAULT_POLICY));
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        HeaderName::from_static("cross-origin-opener-policy"),
        HeaderValue::from_static("same-origin"),
    );
    if https {
        headers.insert(
            header::STRICT_TRANSPORT_SECURITY,
            HeaderValue::from_static("max-age=31536000"),
        );
    }
    response
}

/// Requests per minute, per client address, to sign-in's endpoints.
pub const SIGN_IN_PER_MINUTE: u32 = 60;
/// Tokens made per minute, per client address.
pub const TOKENS_PER_MINUTE: u32 = 10;

/// Keyed by the client's address.
#[derive(Clone)]
pub struct Limits {
    sign_in: Arc<DefaultKeyedRateLimiter<IpAddr>>,
    tokens: Arc<DefaultKeyedRateLimiter<IpAddr>>,
}

impl Default for Limits {
    fn default() -> Self {
        let per_minute = |n: u32| Quota::per_minute(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN));
        Limits {
            sign_in: Arc::new(RateLimiter::keyed(per_minute(SIGN_IN_PER_MINUTE))),
            tokens: Arc::new(RateLimiter::keyed(per_minute(TOKENS_PER_MINUTE))),
        }
    }
}

impl Limits {
    /// Which limit a request counts against, if any.
    fn limiter(&self, method: &Method, path: &str) -> Option<&DefaultKeyedRateLimiter<IpAddr>> {
        if path.starts_with("/auth/login") || path.starts_with("/auth/callback") {
            return Some(&self.sign_in);
        }
        let makes_token = *method == Method::POST
            && (path == "/api/trainyard/v1/tokens" || path == "/api/create_token");
        makes_token.then_some(&self.tokens)
    }
}

/// Middleware: 429 with Retry-After past a limit.
pub async fn limit(
    State(limits): State<Limits>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    request: Request,
    next: Next,
) -> Response {
    if let Some(limiter) = limits.limiter(request.method(), request.uri().path()) {
        if let Err(not_until) = limiter.check_key(&peer.ip()) {
            let wait = not_until
                .wait_time_from(governor::clock::Clock::now(
                    &governor::clock::DefaultClock::default(),
                ))
                .as_secs()
                .max(1);
            return (
                StatusCode::TOO_MANY_REQUESTS,
                [(header::RETRY_AFTER, wait.to_string())],
                axum::Json(serde_json::json!({
                    "error_code": "REQUEST_LIMIT_EXCEEDED",
                    "message": format!("too many requests from your address; try again in {wait} s"),
                })),
            )
                .into_response();
        }
        // Addresses seen long ago are forgotten.
        if limiter.len() > 10_000 {
            limiter.retain_recent();
        }
    }
    next.run(request).await
}

/// The identity provider's origin, for `form-action`.
pub fn provider_origin(config: &AuthConfig) -> Option<String> {
    let issuer = config.oidc.as_ref()?.issuer_url.as_str();
    let url = url::Url::parse(issuer).ok()?;
    Some(url.origin().ascii_serialization())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_policy_allows_only_the_nonced_script_and_wasm() {
        let policy = page_policy("abc123", Some("https://idp.example"));
        assert!(policy.contains("script-src 'self' 'nonce-abc123' 'wasm-unsafe-eval';"));
        assert!(!policy.contains("script-src 'self' 'unsafe-inline'"));
        assert!(policy.contains("form-action 'self' https://idp.example;"));
        assert!(policy.contains("frame-ancestors 'none'"));
        assert!(!page_policy("n", None).contains("form-action 'self' "));
    }

    #[test]
    fn limits_apply_to_sign_in_and_token_making_only() {
        let limits = Limits::default();
        assert!(limits.limiter(&Method::GET, "/auth/login").is_some());
        assert!(limits.limiter(&Method::GET, "/auth/callback").is_some());
        assert!(limits.limiter(&Method::POST, "/api/create_token").is_some());
        assert!(
            limits
                .limiter(&Method::POST, "/api/trainyard/v1/tokens")
                .is_some()
        );
        assert!(
            limits
                .limiter(&Method::GET, "/api/trainyard/v1/tokens")
                .is_none()
        );
        assert!(
            limits
                .limiter(&Method::POST, "/api/2.0/mlflow/runs/log-batch")
                .is_none()
        );
    }
}
