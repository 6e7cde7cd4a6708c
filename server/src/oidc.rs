//! Sign-in with the institution's OpenID Provider: the Authorization Code
//! flow with PKCE, state and nonce; the ID token checked against the
//! provider's keys (signature, issuer, audience, expiry, nonce) by the
//! openidconnect crate; claims mapped to an account and teams; sign-out,
//! at the provider too where it offers an end-session endpoint.
//!
//! While a session lives, the provider is asked again every
//! `oidc_recheck_secs` with the refresh token it gave at sign-in (see
//! [`recheck_forever`]).
//!
//! `/auth/login` keeps the attempt's state, nonce and PKCE verifier in the
//! database, and `/auth/callback` takes them once: a replayed or forged
//! callback finds nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use base64::Engine as _;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreErrorResponseType};
use openidconnect::{
    AuthorizationCode, ClientId, ClientSecret, CsrfToken, IssuerUrl, LogoutRequest, Nonce,
    OAuth2TokenResponse, PkceCodeChallenge, PkceCodeVerifier, PostLogoutRedirectUrl,
    ProviderMetadataWithLogout, RedirectUrl, RefreshToken, RequestTokenError, Scope, TokenResponse,
};
use serde::Deserialize;
use serde_json::Value;
use trainyard_store::{DueSession, LoginAttempt, SignIn};

use crate::auth::{Auth, clear_session_cookie, cookie_value, session_cookie, session_secret};
use crate::config::OidcConfig;
use trainyard_store::identity::{LOGIN_MAX_AGE, random_secret, secret_hash};

/// How long the provider's metadata and keys are kept before asking again.
const METADATA_TTL: Duration = Duration::from_secs(300);
/// How long a call to the provider may take.
const PROVIDER_TIMEOUT: Duration = Duration::from_secs(10);

/// A client made from discovered metadata: the authorization endpoint is
/// known, the token and userinfo endpoints may be.
type ProviderClient = CoreClient<
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// The provider, its discovered metadata cached.
#[derive(Clone)]
pub struct Oidc {
    inner: Arc<Inner>,
}

struct Inner {
    config: OidcConfig,
    redirect_url: RedirectUrl,
    signed_out_url: String,
    http: openidconnect::reqwest::Client,
    metadata: tokio::sync::Mutex<Option<(Instant, ProviderMetadataWithLogout)>>,
}

/// A finished sign-in: who, the provider's tokens, and where to go.
pub struct Finished {
    pub who: SignIn,
    /// Kept for the provider's sign-out.
    pub id_token: String,
    /// Kept to ask the provider about the person again.
    pub refresh_token: Option<String>,
    pub return_to: String,
}

/// What the provider said when asked again.
pub struct Refreshed {
    /// The person as it now describes them; None: it did not say.
    pub who: Option<SignIn>,
    /// The refresh token it rotated to, if it did.
    pub refresh_token: Option<String>,
}

/// Why asking the provider again did not work.
#[derive(Debug, thiserror::Error)]
pub enum RefreshError {
    /// It no longer honours the grant (the person was removed or disabled,
    /// or their session there ended), or it named someone else.
    #[error("the identity provider refused: {0}")]
    Refused(String),
    /// It could not be asked now; the next check tries again.
    #[error("the identity provider could not be reached or answered wrongly: {0}")]
    Unavailable(String),
}

/// Why a sign-in failed, in words for the person signing in.
#[derive(Debug, thiserror::Error)]
pub enum SignInError {
    #[error("the identity provider could not be reached or answered wrongly: {0}")]
    Provider(String),
    #[error("this sign-in has expired, was already used, or did not start here; start again")]
    UnknownState,
    #[error("this sign-in was started in another browser; start again in this one")]
    OtherBrowser,
    #[error("the identity provider refused the sign-in: {0}")]
    Refused(String),
    #[error("the identity provider's ID token was not accepted: {0}")]
    BadToken(String),
    #[error("{0}")]
    Account(String),
    #[error("the server failed; see its log")]
    Internal,
}

impl Oidc {
    pub fn new(config: OidcConfig, public_url: &url::Url) -> Result<Oidc, String> {
        let base = public_url.as_str().trim_end_matches('/');
        let redirect_url = RedirectUrl::new(format!("{base}/auth/callback"))
            .map_err(|e| format!("public_url: cannot make the redirect URL: {e}"))?;
        let http = openidconnect::reqwest::Client::builder()
            // Never follow a redirect from the provider (SSRF).
            .redirect(openidconnect::reqwest::redirect::Policy::none())
            .timeout(PROVIDER_TIMEOUT)
            .build()
            .map_err(|e| format!("cannot make the HTTP client for the provider: {e}"))?;
        Ok(Oidc {
            inner: Arc::new(Inner {
                config,
                redirect_url,
                signed_out_url: format!("{base}/auth/signed-out"),
                http,
                metadata: tokio::sync::Mutex::new(None),
            }),
        })
    }

    pub fn issuer(&self) -> &str {
        &self.inner.config.issuer_url
    }

    /// The provider's metadata and keys, fetched again after a while.
    async fn metadata(&self) -> Result<ProviderMetadataWithLogout, SignInError> {
        let mut cached = self.inner.metadata.lock().await;
        if let Some((at, metadata)) = cached.as_ref()
            && at.elapsed() < METADATA_TTL
        {
            return Ok(metadata.clone());
        }
        let issuer = IssuerUrl::new(self.inner.config.issuer_url.clone())
            .map_err(|e| SignInError::Provider(e.to_string()))?;
        let metadata = ProviderMetadataWithLogout::discover_async(issuer, &self.inner.http)
            .await
            .map_err(|e| SignInError::Provider(error_chain(&e)))?;
        *cached = Some((Instant::now(), metadata.clone()));
        Ok(metadata)
    }

    /// Drops the cached metadata, so the next sign-in fetches fresh keys.
    async fn forget_metadata(&self) {
        *self.inner.metadata.lock().await = None;
    }

    fn client(&self, metadata: ProviderMetadataWithLogout) -> ProviderClient {
        let config = &self.inner.config;
        CoreClient::from_provider_metadata(
            metadata,
            ClientId::new(config.client_id.clone()),
            config.client_secret.clone().map(ClientSecret::new),
        )
        .set_redirect_uri(self.inner.redirect_url.clone())
    }

    /// Starts a sign-in: the provider's address to send the browser to.
    /// `browser`: the hash of the secret in the browser's sign-in cookie.
    pub async fn begin(
        &self,
        auth: &Auth,
        return_to: &str,
        browser: String,
    ) -> Result<String, SignInError> {
        let metadata = self.metadata().await?;
        let client = self.client(metadata);
        let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
        let mut request = client.authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        );
        for scope in self.inner.config.scopes.iter().filter(|s| *s != "openid") {
            request = request.add_scope(Scope::new(scope.clone()));
        }
        let (url, state, nonce) = request.set_pkce_challenge(challenge).url();
        auth.store
            .begin_login(LoginAttempt {
                state: state.secret().clone(),
                nonce: nonce.secret().clone(),
                browser,
                pkce_verifier: verifier.secret().clone(),
                return_to: return_to.to_owned(),
            })
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "cannot record a sign-in attempt");
                SignInError::Internal
            })?;
        Ok(url.to_string())
    }

    /// Finishes a sign-in: checks everything, and returns the account and
    /// the ID token (kept for sign-out) with where to go next. `browser`:
    /// the secret in this browser's sign-in cookie, which must be the one
    /// the sign-in started with (else someone else's finished sign-in could
    /// be slipped to this browser).
    pub async fn finish(
        &self,
        auth: &Auth,
        code: &str,
        state: &str,
        browser: Option<&str>,
    ) -> Result<Finished, SignInError> {
        let attempt = auth
            .store
            .take_login(state)
            .await
            .map_err(|e| {
                tracing::error!(error = %e, "cannot read a sign-in attempt");
                SignInError::Internal
            })?
            .ok_or(SignInError::UnknownState)?;
        if browser.map(secret_hash).as_deref() != Some(attempt.browser.as_str()) {
            return Err(SignInError::OtherBrowser);
        }
        let metadata = self.metadata().await?;
        let client = self.client(metadata);
        let response = client
            .exchange_code(AuthorizationCode::new(code.to_owned()))
            .map_err(|e| SignInError::Provider(e.to_string()))?
            .set_pkce_verifier(PkceCodeVerifier::new(attempt.pkce_verifier))
            .request_async(&self.inner.http)
            .await
            .map_err(|e| SignInError::Refused(error_chain(&e)))?;
        let id_token = response
            .id_token()
            .ok_or_else(|| SignInError::BadToken("the provider sent no ID token".to_owned()))?;
        let verifier = client.id_token_verifier();
        if let Err(e) = id_token.claims(&verifier, &Nonce::new(attempt.nonce)) {
            // Keys rotate: the next attempt fetches them again.
            self.forget_metadata().await;
            return Err(SignInError::BadToken(error_chain(&e)));
        }
        let raw = id_token.to_string();
        let claims = token_payload(&raw)
            .ok_or_else(|| SignInError::BadToken("its claims are not JSON".to_owned()))?;
        let who = map_claims(&self.inner.config, &claims).map_err(SignInError::Account)?;
        Ok(Finished {
            who,
            id_token: raw,
            refresh_token: response.refresh_token().map(|t| t.secret().clone()),
            return_to: attempt.return_to,
        })
    }

    /// Asks the provider again about a signed-in person, with the refresh
    /// token of their session: what it now says of them (None when it sent
    /// no ID token, or one that could not be read; their rights then stay),
    /// and the refresh token to use next time.
    pub async fn refresh(&self, due: &DueSession) -> Result<Refreshed, RefreshError> {
        let metadata = self
            .metadata()
            .await
            .map_err(|e| RefreshError::Unavailable(e.to_string()))?;
        let client = self.client(metadata);
        let token = RefreshToken::new(due.refresh_token.clone());
        let response = client
            .exchange_refresh_token(&token)
            .map_err(|e| RefreshError::Unavailable(e.to_string()))?
            .request_async(&self.inner.http)
            .await;
        let response = match response {
            Ok(response) => response,
            Err(RequestTokenError::ServerResponse(e))
                if *e.error() == CoreErrorResponseType::InvalidGrant =>
            {
                return Err(RefreshError::Refused(e.to_string()));
            }
            Err(e) => return Err(RefreshError::Unavailable(error_chain(&e))),
        };
        let who = match response.id_token() {
            Some(id_token) => {
                self.refreshed_person(&client, id_token, &due.subject)
                    .await?
            }
            None => None,
        };
        Ok(Refreshed {
            who,
            refresh_token: response.refresh_token().map(|t| t.secret().clone()),
        })
    }

    /// The person a refreshed ID token describes; None, with the reason
    /// logged, when it tells nothing to go by (not accepted, not readable,
    /// or without the groups claim or another claim the mapping needs).
    /// Refused when it names another subject than the session's.
    async fn refreshed_person(
        &self,
        client: &ProviderClient,
        id_token: &openidconnect::core::CoreIdToken,
        subject: &str,
    ) -> Result<Option<SignIn>, RefreshError> {
        // A refreshed ID token carries no nonce (OpenID Connect Core 12.2).
        let verifier = client.id_token_verifier();
        if let Err(e) = id_token.claims(&verifier, |_: Option<&Nonce>| Ok(())) {
            self.forget_metadata().await;
            tracing::warn!(error = %error_chain(&e), "a refreshed ID token was not accepted; rights stay as they were");
            return Ok(None);
        }
        let Some(claims) = token_payload(&id_token.to_string()) else {
            return Ok(None);
        };
        if !claims.contains_key(&self.inner.config.groups_claim) {
            // A refreshed ID token may leave claims out (Core 12.2): without
            // the groups, nothing is known of them.
            tracing::debug!(claim = %self.inner.config.groups_claim, "a refreshed ID token has no groups; rights stay as they were");
            return Ok(None);
        }
        match map_claims(&self.inner.config, &claims) {
            Ok(who) if who.subject != subject => Err(RefreshError::Refused(format!(
                "the refreshed ID token names another subject ({})",
                who.subject
            ))),
            Ok(who) => Ok(Some(who)),
            Err(e) => {
                tracing::warn!(error = %e, "a refreshed ID token lacks a claim; rights stay as they were");
                Ok(None)
            }
        }
    }

    /// Where to send the browser after signing out here: the provider's
    /// end-session endpoint when it has one, else our signed-out page.
    pub async fn sign_out_url(&self, id_token: Option<&str>) -> String {
        let end_session = match self.metadata().await {
            Ok(m) => m.additional_metadata().end_session_endpoint.clone(),
            Err(_) => None,
        };
        let Some(end_session) = end_session else {
            return self.inner.signed_out_url.clone();
        };
        let mut request = LogoutRequest::from(end_session)
            .set_client_id(ClientId::new(self.inner.config.client_id.clone()));
        if let Ok(url) = PostLogoutRedirectUrl::new(self.inner.signed_out_url.clone()) {
            request = request.set_post_logout_redirect_uri(url);
        }
        let mut url = request.http_get_url();
        if let Some(hint) = id_token {
            url.query_pairs_mut().append_pair("id_token_hint", hint);
        }
        url.to_string()
    }
}

/// Checks sessions with the provider again, every `oidc_recheck_secs`
/// for each: their person's rights follow the groups it now gives, and a
/// session whose refresh token it refuses ends. Runs until dropped.
pub async fn recheck_forever(auth: Auth, oidc: Oidc) {
    let Some(every) = oidc.inner.config.recheck else {
        // Checks are off: refresh tokens kept while they were on go.
        if let Err(e) = auth.store.forget_refresh_tokens(false).await {
            tracing::warn!(error = %e, "cannot drop the sessions' refresh tokens");
        }
        return;
    };
    // Looked at four times an interval: a session is checked at most a
    // quarter interval late.
    let tick = (every / 4).clamp(Duration::from_secs(1), Duration::from_secs(60));
    loop {
        tokio::time::sleep(tick).await;
        let before = trainyard_store::now_millis() - every.as_millis() as i64;
        loop {
            let due = match auth
                .store
                .claim_sessions_to_recheck(before, RECHECK_BATCH)
                .await
            {
                Ok(due) => due,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot read the sessions to check with the provider");
                    break;
                }
            };
            let full = due.len() as u64 == RECHECK_BATCH;
            for session in &due {
                recheck(&auth, &oidc, session).await;
            }
            if !full {
                break;
            }
        }
    }
}

/// Sessions claimed for a check at a time: few, so that a batch (each
/// call bounded by PROVIDER_TIMEOUT) ends long before the claim could be
/// taken again by another process.
const RECHECK_BATCH: u64 = 10;

async fn recheck(auth: &Auth, oidc: &Oidc, due: &DueSession) {
    match oidc.refresh(due).await {
        Ok(Refreshed { who, refresh_token }) => {
            match auth.store.session_rechecked(due, who, refresh_token).await {
                Ok(Some(user)) => {
                    tracing::debug!(user = %user.username, admin = user.is_admin, teams = user.teams.len(), "rights read again from the provider")
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::warn!(error = %e, user_id = due.user_id, "cannot record what the provider said")
                }
            }
        }
        Err(RefreshError::Refused(reason)) => match auth.store.session_refused(due).await {
            Ok(true) => {
                tracing::info!(user_id = due.user_id, %reason, "the provider no longer vouches for a session; it ended");
            }
            Ok(false) => {}
            Err(e) => {
                tracing::error!(error = %e, user_id = due.user_id, "cannot end a session the provider refused");
            }
        },
        Err(e @ RefreshError::Unavailable(_)) => {
            tracing::warn!(error = %e, user_id = due.user_id, "cannot check a session with the provider; trying again later");
        }
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(inner) = source {
        text.push_str(": ");
        text.push_str(&inner.to_string());
        source = inner.source();
    }
    text
}

/// The claims of a compact JWT, read after its signature was checked.
fn token_payload(jwt: &str) -> Option<serde_json::Map<String, Value>> {
    let payload = jwt.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

/// Group names as providers send them: a list or one string; Keycloak's
/// full paths lose their leading slash.
fn groups_of(value: Option<&Value>) -> Vec<String> {
    let names: Vec<&str> = match value {
        Some(Value::Array(items)) => items.iter().filter_map(Value::as_str).collect(),
        Some(Value::String(one)) => vec![one.as_str()],
        _ => Vec::new(),
    };
    names
        .into_iter()
        .map(|g| g.trim().trim_start_matches('/').to_owned())
        .filter(|g| !g.is_empty())
        .collect()
}

/// Whether `name` is `pattern`, where each `*` stands for any characters
/// (none included).
fn glob_match(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        // No `*`: the whole name.
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The account the claims describe, by the configured mapping.
pub fn map_claims(
    config: &OidcConfig,
    claims: &serde_json::Map<String, Value>,
) -> Result<SignIn, String> {
    let text = |name: &str| {
        claims
            .get(name)
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let subject = text("sub").ok_or("the ID token has no `sub` claim")?;
    let username = text(&config.username_claim).ok_or_else(|| {
        format!(
            "the ID token has no `{}` claim for the username; ask your provider's admin to release it, or set oidc_username_claim",
            config.username_claim
        )
    })?;
    let mut groups = groups_of(claims.get(&config.groups_claim));
    let is_admin = config
        .admin_group
        .as_deref()
        .is_some_and(|admin| groups.iter().any(|g| g == admin.trim_start_matches('/')));
    // Only the groups that are teams, where the admin said which.
    if !config.team_groups.is_empty() {
        groups.retain(|g| config.team_groups.iter().any(|p| glob_match(p, g)));
    }
    Ok(SignIn {
        subject,
        display_name: text(&config.name_claim).unwrap_or_else(|| username.clone()),
        username,
        email: text(&config.email_claim),
        is_admin,
        groups,
    })
}

/// `return_to` is kept only if it is a path on this server.
/// Browsers drop tabs and newlines from URLs and read `\\` as `/`, so
/// `/\t/evil.example` would leave the site.
fn local_path(return_to: Option<&str>) -> String {
    match return_to {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.contains('\\')
                && !p.chars().any(|c| c.is_control() || c.is_whitespace()) =>
        {
            p.to_owned()
        }
        _ => "/".to_owned(),
    }
}

/// The cookie that ties a sign-in to the browser that started it.
fn login_cookie_name(auth: &Auth) -> &'static str {
    if auth.config.secure_cookies() {
        "__Host-trainyard_login"
    } else {
        "trainyard_login"
    }
}

fn login_cookie(auth: &Auth, value: &str, max_age: u64) -> String {
    let secure = if auth.config.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    format!(
        "{}={value}; Path=/; HttpOnly; SameSite=Lax; Max-Age={max_age}{secure}",
        login_cookie_name(auth)
    )
}

#[derive(Deserialize)]
pub struct LoginQuery {
    return_to: Option<String>,
}

/// A small page for sign-in's outcomes, outside the app (it works without
/// a session and without the browser bundle).
fn message_page(status: StatusCode, title: &str, message: &str, link: (&str, &str)) -> Response {
    let esc = |s: &str| {
        s.replace('&', "&amp;")
            .replace('<', "&lt;")
            .replace('>', "&gt;")
            .replace('"', "&quot;")
    };
    let body = format!(
        "<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{t} · Trainyard</title>\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <link rel=\"stylesheet\" href=\"/pkg/trainyard.css\"></head>\
         <body><main class=\"page auth-message\"><h1>{t}</h1><p class=\"auth-detail\">{m}</p>\
         <p><a class=\"button\" href=\"{href}\">{label}</a></p></main></body></html>",
        t = esc(title),
        m = esc(message),
        href = esc(link.0),
        label = esc(link.1),
    );
    (status, Html(body)).into_response()
}

/// `GET /auth/login?return_to=/path`: off to the provider.
pub async fn login(State(auth): State<Auth>, Query(q): Query<LoginQuery>) -> Response {
    let return_to = local_path(q.return_to.as_deref());
    let Some(oidc) = auth.oidc.clone() else {
        // Single-user mode: everyone is signed in already.
        return Redirect::to(&return_to).into_response();
    };
    let browser = random_secret();
    match oidc.begin(&auth, &return_to, secret_hash(&browser)).await {
        Ok(url) => (
            [(
                header::SET_COOKIE,
                login_cookie(&auth, &browser, LOGIN_MAX_AGE.as_secs()),
            )],
            Redirect::to(&url),
        )
            .into_response(),
        Err(err) => {
            tracing::warn!(error = %err, issuer = oidc.issuer(), "sign-in could not start");
            message_page(
                StatusCode::BAD_GATEWAY,
                "Sign-in is unavailable",
                &err.to_string(),
                ("/auth/login", "Try again"),
            )
        }
    }
}

#[derive(Deserialize)]
pub struct CallbackQuery {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    error_description: Option<String>,
}

/// `GET /auth/callback?code=…&state=…`: the provider sends the browser
/// back; on success a session starts.
pub async fn callback(
    State(auth): State<Auth>,
    headers: HeaderMap,
    Query(q): Query<CallbackQuery>,
) -> Response {
    let Some(oidc) = auth.oidc.clone() else {
        return Redirect::to("/").into_response();
    };
    // The sign-in cookie is spent whatever happens.
    let spent = login_cookie(&auth, "", 0);
    let failed = |status: StatusCode, message: &str| {
        let mut page = message_page(
            status,
            "Sign-in failed",
            message,
            ("/auth/login", "Sign in again"),
        );
        if let Ok(value) = axum::http::HeaderValue::from_str(&spent) {
            page.headers_mut().append(header::SET_COOKIE, value);
        }
        page
    };
    let browser = cookie_value(&headers, login_cookie_name(&auth));
    if let Some(error) = q.error {
        // The attempt is spent either way.
        if let Some(state) = &q.state {
            let _ = auth.store.take_login(state).await;
        }
        let detail = q.error_description.unwrap_or_default();
        return failed(
            StatusCode::BAD_REQUEST,
            &format!("the identity provider said `{error}` {detail}"),
        );
    }
    let (Some(code), Some(state)) = (q.code, q.state) else {
        return failed(
            StatusCode::BAD_REQUEST,
            &SignInError::UnknownState.to_string(),
        );
    };
    let Finished {
        who,
        id_token,
        refresh_token,
        return_to,
    } = match oidc.finish(&auth, &code, &state, browser.as_deref()).await {
        Ok(done) => done,
        Err(err) => {
            tracing::warn!(error = %err, "sign-in refused");
            let status = match err {
                SignInError::Provider(_) => StatusCode::BAD_GATEWAY,
                SignInError::Internal => StatusCode::INTERNAL_SERVER_ERROR,
                _ => StatusCode::BAD_REQUEST,
            };
            return failed(status, &err.to_string());
        }
    };
    let user = match auth.store.sign_in(who).await {
        Ok(user) => user,
        Err(err @ trainyard_store::StoreError::Conflict { .. }) => {
            return failed(StatusCode::CONFLICT, &err.to_string());
        }
        Err(err) => {
            tracing::error!(error = %err, "cannot record a sign-in");
            return failed(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the server failed; see its log",
            );
        }
    };
    let session = match auth
        .store
        .create_provider_session(
            user.id,
            auth.config.session_ttl,
            Some(id_token),
            refresh_token.filter(|_| oidc.inner.config.recheck.is_some()),
        )
        .await
    {
        Ok(s) => s,
        Err(err) => {
            tracing::error!(error = %err, "cannot open a session");
            return failed(
                StatusCode::INTERNAL_SERVER_ERROR,
                "the server failed; see its log",
            );
        }
    };
    tracing::info!(user = %user.username, admin = user.is_admin, teams = user.teams.len(), "signed in");
    (
        axum::response::AppendHeaders([
            (
                header::SET_COOKIE,
                session_cookie(&auth.config, &session.secret),
            ),
            (header::SET_COOKIE, login_cookie(&auth, "", 0)),
        ]),
        Redirect::to(&local_path(Some(&return_to))),
    )
        .into_response()
}

/// `POST /auth/logout`: ends the session here, then at the provider.
pub async fn logout(State(auth): State<Auth>, headers: HeaderMap) -> Response {
    let id_token = match session_secret(&auth.config, &headers) {
        Some(secret) => auth.store.end_session(&secret).await.unwrap_or_else(|e| {
            tracing::error!(error = %e, "cannot end a session");
            None
        }),
        None => None,
    };
    let target = match &auth.oidc {
        Some(oidc) => oidc.sign_out_url(id_token.as_deref()).await,
        None => "/".to_owned(),
    };
    (
        [(header::SET_COOKIE, clear_session_cookie(&auth.config))],
        Redirect::to(&target),
    )
        .into_response()
}

/// `GET /auth/signed-out`: where the provider sends people back.
pub async fn signed_out() -> Response {
    message_page(
        StatusCode::OK,
        "Signed out",
        "You have signed out of Trainyard.",
        ("/auth/login", "Sign in again"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn config(admin_group: Option<&str>) -> OidcConfig {
        OidcConfig {
            issuer_url: "https://idp.example".to_owned(),
            client_id: "trainyard".to_owned(),
            client_secret: None,
            scopes: vec!["openid".to_owned()],
            username_claim: "preferred_username".to_owned(),
            name_claim: "name".to_owned(),
            email_claim: "email".to_owned(),
            groups_claim: "groups".to_owned(),
            admin_group: admin_group.map(str::to_owned),
            team_groups: Vec::new(),
            recheck: None,
        }
    }

    #[test]
    fn team_group_patterns_match_names_with_stars() {
        for (pattern, name, matches) in [
            ("vision", "vision", true),
            ("vision", "vision-lab", false),
            ("lab-*", "lab-vision", true),
            ("lab-*", "lab-", true),
            ("lab-*", "all-students", false),
            ("*-lab", "vision-lab", true),
            ("*", "anything", true),
            ("a*b*c", "axxbyyc", true),
            ("a*b*c", "acb", false),
            ("ab*ba", "aba", false),
            ("course-*-2026", "course-ml-2026", true),
        ] {
            assert_eq!(glob_match(pattern, name), matches, "{pattern} {name}");
        }
        let mut only_labs = config(Some("gpu-admins"));
        only_labs.team_groups = vec!["lab-*".to_owned(), "course-ml".to_owned()];
        let who = map_claims(
            &only_labs,
            &claims(json!({
                "sub": "1", "preferred_username": "ada",
                "groups": ["all-students", "/lab-vision", "course-ml", "course-db", "gpu-admins"]
            })),
        )
        .unwrap();
        assert_eq!(who.groups, ["lab-vision", "course-ml"]);
        assert!(who.is_admin, "the admin group counts, though it is no team");
    }

    fn claims(value: Value) -> serde_json::Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn claims_map_to_an_account_with_teams() {
        let who = map_claims(
            &config(Some("/gpu-admins")),
            &claims(json!({
                "sub": "1234", "preferred_username": "alice", "name": "Alice A.",
                "email": "alice@uni.example", "groups": ["/vision", "gpu-admins", 7]
            })),
        )
        .unwrap();
        assert_eq!(who.subject, "1234");
        assert_eq!(who.username, "alice");
        assert_eq!(who.display_name, "Alice A.");
        assert_eq!(who.email.as_deref(), Some("alice@uni.example"));
        assert_eq!(who.groups, ["vision", "gpu-admins"]);
        assert!(who.is_admin);

        let mut other = config(None);
        other.username_claim = "email".to_owned();
        other.groups_claim = "roles".to_owned();
        let who = map_claims(
            &other,
            &claims(json!({"sub": "9", "email": "bob@uni.example", "roles": "staff"})),
        )
        .unwrap();
        assert_eq!(who.username, "bob@uni.example");
        assert_eq!(who.display_name, "bob@uni.example");
        assert_eq!(who.groups, ["staff"]);
        assert!(!who.is_admin);
    }

    #[test]
    fn missing_claims_are_named() {
        let err = map_claims(&config(None), &claims(json!({"sub": "1"}))).unwrap_err();
        assert!(err.contains("`preferred_username`"), "{err}");
        let err =
            map_claims(&config(None), &claims(json!({"preferred_username": "a"}))).unwrap_err();
        assert!(err.contains("`sub`"), "{err}");
    }

    #[test]
    fn only_local_paths_are_returned_to() {
        assert_eq!(local_path(Some("/jobs?x=1")), "/jobs?x=1");
        assert_eq!(local_path(Some("//evil.example")), "/");
        assert_eq!(local_path(Some("https://evil.example")), "/");
        assert_eq!(local_path(Some("/\\evil.example")), "/");
        assert_eq!(local_path(Some("/\t/evil.example")), "/");
        assert_eq!(local_path(Some("/\n/evil.example")), "/");
        assert_eq!(local_path(Some("/ /evil.example")), "/");
        assert_eq!(local_path(None), "/");
    }

    #[test]
    fn a_payload_is_read_from_a_compact_token() {
        let payload = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .encode(br#"{"sub":"1","groups":["a"]}"#);
        let map = token_payload(&format!("h.{payload}.s")).unwrap();
        assert_eq!(map["sub"], "1");
        assert!(token_payload("nonsense").is_none());
    }
}
