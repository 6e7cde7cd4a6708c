//! Who is calling, decided in one place for every request: pages, server
//! functions, the REST and MLflow APIs, streams and downloads.
//!
//! - `Authorization: Bearer <token>` (or the token as the password of Basic
//!   auth, as the mlflow client sends MLFLOW_TRACKING_PASSWORD): a personal
//!   API token, or a job's token that writes to its own run only.
//! - The session cookie, set at sign-in (see `oidc.rs`).
//! - Without an identity provider, the single-user mode: every caller is the
//!   local admin. The server then listens on loopback only (unless the
//!   loudly named `insecure_no_sign_in` says otherwise), and a request must
//!   name a loopback host, so a web page cannot reach it by DNS rebinding.
//!
//! A state change carried by ambient credentials (the cookie, or the
//! single-user mode) must come from Trainyard's own pages: browsers say
//! where a request comes from (`Sec-Fetch-Site`, `Origin`), and a cross-site
//! one is refused unless it carries the session's CSRF token. This is the
//! rule of Go's `http.CrossOriginProtection`; requests with neither header
//! do not come from a browser, which is what CSRF needs.

use std::net::SocketAddr;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use base64::Engine as _;
use trainyard_store::Store;

use crate::config::AuthConfig;
use crate::mlflow::ApiError;

pub use trainyard_domain::identity::{Principal, Via};

/// What the middleware needs: the store and how sign-in is set up.
#[derive(Clone)]
pub struct Auth {
    pub store: Store,
    pub config: AuthConfig,
    /// The identity provider; None in the single-user mode.
    pub oidc: Option<crate::oidc::Oidc>,
    /// The single-user mode's admin, read once: every request of that
    /// mode (metric ingest among them) is theirs.
    pub local_admin: std::sync::Arc<tokio::sync::OnceCell<trainyard_domain::identity::User>>,
    /// Node agents' Kubernetes tokens (kube_agent_account); None: agents
    /// use node tokens only.
    pub agents: Option<crate::agent_tokens::AgentTokens>,
}

/// The session cookie's name: with `__Host-` behind https, so that no
/// other site (not even a subdomain) can set it.
pub fn session_cookie_name(config: &AuthConfig) -> &'static str {
    if config.secure_cookies() {
        "__Host-trainyard_session"
    } else {
        "trainyard_session"
    }
}

/// The `Set-Cookie` value for a new session.
pub fn session_cookie(config: &AuthConfig, secret: &str) -> String {
    let secure = if config.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    format!(
        "{}={secret}; Path=/; HttpOnly; SameSite=Lax; Max-Age={}{secure}",
        session_cookie_name(config),
        config.session_ttl.as_secs()
    )
}

/// The `Set-Cookie` value that removes the session cookie.
pub fn clear_session_cookie(config: &AuthConfig) -> String {
    let secure = if config.secure_cookies() {
        "; Secure"
    } else {
        ""
    };
    format!(
        "{}=; Path=/; HttpOnly; SameSite=Lax; Max-Age=0{secure}",
        session_cookie_name(config)
    )
}

/// The session cookie's value, if the request has one.
pub fn session_secret(config: &AuthConfig, headers: &HeaderMap) -> Option<String> {
    cookie_value(headers, session_cookie_name(config))
}

/// A cookie's value, if the request has it (and it is not empty).
pub fn cookie_value(headers: &HeaderMap, name: &str) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v.to_owned())
        .filter(|v| !v.is_empty())
}

fn unauthenticated(message: &str) -> ApiError {
    ApiError {
        status: StatusCode::UNAUTHORIZED,
        code: "UNAUTHENTICATED",
        message: message.to_owned(),
    }
}

pub fn permission_denied(message: impl Into<String>) -> ApiError {
    ApiError {
        status: StatusCode::FORBIDDEN,
        code: "PERMISSION_DENIED",
        message: message.into(),
    }
}

/// The token in an `Authorization` header: `Bearer T`, or Basic with T as
/// the password. Err for any other scheme or a malformed value.
fn bearer_or_basic(value: &str) -> Result<String, ApiError> {
    let (scheme, rest) = value.trim().split_once(' ').unwrap_or((value.trim(), ""));
    let rest = rest.trim();
    if scheme.eq_ignore_ascii_case("bearer") && !rest.is_empty() {
        return Ok(rest.to_owned());
    }
    if scheme.eq_ignore_ascii_case("basic") {
        let decoded = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()
            .and_then(|b| String::from_utf8(b).ok())
            .ok_or_else(|| unauthenticated("the Basic credentials are not valid base64"))?;
        let (_, password) = decoded.split_once(':').unwrap_or(("", &decoded));
        if !password.is_empty() {
            return Ok(password.to_owned());
        }
    }
    Err(unauthenticated(
        "the Authorization header must be `Bearer <token>`, or Basic with the token as the password",
    ))
}

/// The host a request names, without its port.
fn request_host(headers: &HeaderMap) -> Option<String> {
    let host = headers.get(header::HOST)?.to_str().ok()?;
    let without_port = if host.starts_with('[') {
        host.split(']').next().map(|h| format!("{h}]"))?
    } else {
        host.rsplit_once(':').map_or(host, |(h, _)| h).to_owned()
    };
    Some(without_port.to_ascii_lowercase())
}

fn is_loopback_name(host: &str) -> bool {
    host == "localhost"
        || host.ends_with(".localhost")
        || host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Does this state change come from our own pages (or from no browser)?
fn same_origin(config: &AuthConfig, headers: &HeaderMap) -> bool {
    if let Some(site) = headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        return matches!(site, "same-origin" | "none");
    }
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let public = config.public_url.origin().ascii_serialization();
    if origin == public {
        return true;
    }
    // The address the browser used, when it is not public_url (tests,
    // 127.0.0.1 against localhost).
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    host.is_some_and(|h| origin == format!("http://{h}") || origin == format!("https://{h}"))
}

/// Paths anyone may fetch: sign-in itself, the browser bundle and the
/// operations endpoints.
/// A multipart upload's part URL: the upload's id in it is its credential
/// (the mlflow client PUTs parts as it would to S3, without its own).
fn is_part_url(path: &str) -> bool {
    [
        "/api/2.0/mlflow-artifacts/mpu/part/",
        "/ajax-api/2.0/mlflow-artifacts/mpu/part/",
    ]
    .iter()
    .any(|prefix| path.starts_with(prefix))
}

fn is_public(path: &str) -> bool {
    is_part_url(path)
        || path.starts_with("/auth/")
        || path.starts_with("/pkg/")
        || matches!(
            path,
            "/healthz"
                | "/readyz"
                | "/metrics"
                | "/favicon.svg"
                | "/favicon.ico"
                | "/health"
                | "/version"
        )
}

fn is_api(path: &str) -> bool {
    path.starts_with("/api/") || path.starts_with("/ajax-api/")
}

/// The MLflow tracking and artifact APIs.
fn is_mlflow_api(path: &str) -> bool {
    path.starts_with("/api/2.0/mlflow")
        || path.starts_with("/ajax-api/2.0/mlflow")
        || path.starts_with("/api/3.0/mlflow")
        || path.starts_with("/ajax-api/3.0/mlflow")
        || path == "/v1/traces"
}

/// Where node agents send their node's GPUs and samples; node tokens reach
/// nothing else, and nothing else reaches it.
pub const AGENT_API: &str = "/api/trainyard/v1/agent/";

/// What a job's token may call: MLflow reads, and the calls that write to
/// a run (each handler then checks that the run is the token's own).
fn run_token_allows(method: &Method, path: &str) -> bool {
    if let Some(rest) = path.strip_prefix("/api/trainyard/v1/jobs/") {
        // What its job starts from: the job, its files, its datasets (the
        // handlers let a job's token reach its own job only).
        let parts: Vec<&str> = rest.split('/').collect();
        let read = matches!(*method, Method::GET | Method::HEAD);
        return read && matches!(parts.as_slice(), [_] | [_, "files"] | [_, "datasets", _]);
    }
    if !is_mlflow_api(path) {
        return false;
    }
    if matches!(*method, Method::GET | Method::HEAD) {
        return true;
    }
    let artifacts = path.contains("/mlflow-artifacts/artifacts/");
    if *method == Method::PUT {
        return artifacts;
    }
    // The models its run makes: finalized and tagged (the handlers check
    // that the model's source run is the token's).
    if *method == Method::PATCH {
        return path.contains("/mlflow/logged-models/");
    }
    if *method != Method::POST {
        return false;
    }
    // Multipart uploads of its run's artifacts (the handlers check the run).
    if path.contains("/mlflow-artifacts/mpu/") {
        return true;
    }
    if path.contains("/mlflow/logged-models/") && path.ends_with("/params") {
        return true;
    }
    // Traces of its run and their assessments, as `mlflow.genai.evaluate`
    // records them, and their spans (the handlers check that the trace is
    // its run's).
    if path == "/v1/traces" {
        return true;
    }
    if path.ends_with("/mlflow/traces")
        || (path.contains("/mlflow/traces/") && path.ends_with("/assessments"))
    {
        return true;
    }
    const RUN_WRITES_AND_SEARCHES: [&str; 19] = [
        // Runs under its own (the handler checks the parent).
        "/runs/create",
        "/runs/update",
        "/runs/log-model",
        "/runs/log-metric",
        "/runs/log-parameter",
        "/runs/set-tag",
        "/runs/delete-tag",
        "/runs/log-batch",
        "/runs/search",
        "/experiments/search",
        "/logged-models/search",
        "/runs/log-inputs",
        "/runs/outputs",
        "/experiments/search-datasets",
        "/mlflow/logged-models",
        "/traces/search",
        // Evaluation datasets: read, not written.
        "/datasets/search",
        // Its traces to its run (the handler checks both), and to the
        // prompt versions they used (the handler checks the trace).
        "/traces/link-to-run",
        "/traces/link-prompts",
    ];
    RUN_WRITES_AND_SEARCHES
        .iter()
        .any(|end| path.ends_with(end))
}

/// A node's agent that Kubernetes vouched for: no account of Trainyard's,
/// and the gate keeps it to the agent API of its own node.
fn agent_principal(node: String) -> Principal {
    let name = format!("agent of node {node}");
    Principal {
        user: trainyard_domain::identity::User {
            id: 0,
            username: name.clone(),
            display_name: name,
            email: None,
            is_admin: false,
            teams: Vec::new(),
        },
        via: Via::NodeToken { node },
    }
}

impl Auth {
    /// The node of a Kubernetes agent's token (None where agents use node
    /// tokens only, or the API does not take it).
    async fn agent_node(&self, token: &str) -> Result<Option<String>, ApiError> {
        let Some(agents) = &self.agents else {
            return Ok(None);
        };
        match agents.node_of(token).await {
            Ok(node) => Ok(node),
            Err(e) => {
                tracing::warn!(error = %e, "a node agent's token could not be checked");
                Err(ApiError {
                    status: StatusCode::SERVICE_UNAVAILABLE,
                    code: "TEMPORARILY_UNAVAILABLE",
                    message: "the agent's Kubernetes token could not be checked now; try again"
                        .to_owned(),
                })
            }
        }
    }

    /// Who is calling; Ok(None) for an anonymous caller where sign-in is on.
    pub async fn identify(
        &self,
        peer: SocketAddr,
        headers: &HeaderMap,
    ) -> Result<Option<Principal>, ApiError> {
        if let Some(value) = headers.get(header::AUTHORIZATION) {
            let token = bearer_or_basic(value.to_str().unwrap_or(""))?;
            let found = self
                .store
                .token_user(&token)
                .await
                .map_err(ApiError::internal)?
                // The single-user mode's tokens end when sign-in starts.
                .filter(|found| !(found.local && self.config.oidc.is_some()));
            let Some(found) = found else {
                if let Some(node) = self.agent_node(&token).await? {
                    return Ok(Some(agent_principal(node)));
                }
                return Err(unauthenticated(
                    "unknown, revoked or expired token; make a new one under Settings → API tokens \
                     (a node agent's: an admin makes it with POST /api/trainyard/v1/nodes/NODE/tokens)",
                ));
            };
            let via = match (found.run_id, found.node) {
                (Some(run_id), _) => Via::RunToken { run_id },
                (None, Some(node)) => Via::NodeToken { node },
                (None, None) => Via::Token,
            };
            return Ok(Some(Principal {
                user: found.user,
                via,
            }));
        }
        if let Some(secret) = session_secret(&self.config, headers)
            && let Some(session) = self
                .store
                .session(&secret)
                .await
                .map_err(ApiError::internal)?
            && !(session.local && self.config.oidc.is_some())
        {
            return Ok(Some(Principal {
                user: session.user,
                via: Via::Session {
                    csrf_token: session.csrf_token,
                },
            }));
        }
        if self.config.oidc.is_some() {
            return Ok(None);
        }
        if !self.config.insecure_no_sign_in {
            // A proxy on this machine would make every caller local.
            let forwarded = ["forwarded", "x-forwarded-for", "x-real-ip"]
                .iter()
                .any(|h| headers.contains_key(*h));
            if !peer.ip().is_loopback() || forwarded {
                return Err(unauthenticated(
                    "this server has no sign-in and answers its own machine only, not through a proxy; configure sign-in (oidc_issuer_url) to share it",
                ));
            }
            let host = request_host(headers).unwrap_or_default();
            let public_host = self.config.public_url.host_str().unwrap_or("");
            if !is_loopback_name(&host) && !host.eq_ignore_ascii_case(public_host) {
                return Err(permission_denied(format!(
                    "the host `{host}` is not this server's; open it as http://127.0.0.1 or http://localhost"
                )));
            }
        }
        let user = self
            .local_admin
            .get_or_try_init(|| self.store.local_admin())
            .await
            .map_err(ApiError::internal)?
            .clone();
        Ok(Some(Principal {
            user,
            via: Via::Local,
        }))
    }
}

/// Middleware over the whole router: identifies the caller, refuses
/// cross-site state changes, and keeps anonymous callers to the public
/// paths (pages send them to sign in).
pub async fn gate(
    State(auth): State<Auth>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    mut request: Request,
    next: Next,
) -> Response {
    let path = request.uri().path().to_owned();
    let principal = match auth.identify(peer, request.headers()).await {
        Ok(principal) => principal,
        Err(err) if is_public(&path) => {
            tracing::debug!(error = %err.message, "credentials ignored on a public path");
            None
        }
        Err(err) => return challenge(err.into_response()),
    };
    let unsafe_method = !matches!(
        *request.method(),
        Method::GET | Method::HEAD | Method::OPTIONS
    );
    if unsafe_method && !is_part_url(&path) {
        let csrf_header = request
            .headers()
            .get("x-csrf-token")
            .and_then(|v| v.to_str().ok());
        let ambient = match principal.as_ref().map(|p| &p.via) {
            Some(Via::Session { csrf_token }) => Some(Some(csrf_token.as_str())),
            Some(Via::Local) => Some(None),
            // Sign-in itself (POST /auth/logout) is ambient too.
            None => Some(None),
            Some(Via::Token | Via::RunToken { .. } | Via::NodeToken { .. }) => None,
        };
        if let Some(session_csrf) = ambient {
            let token_ok = matches!((session_csrf, csrf_header), (Some(a), Some(b)) if a == b);
            if !token_ok && !same_origin(&auth.config, request.headers()) {
                return permission_denied(
                    "cross-site request refused: changes must come from Trainyard's own pages (or carry the session's X-CSRF-Token)",
                )
                .into_response();
            }
        }
    }
    match &principal {
        None if is_public(&path) => {}
        None if is_api(&path) => {
            return challenge(
                unauthenticated(
                    "sign in first: send an API token (Authorization: Bearer <token>), or use the browser session",
                )
                .into_response(),
            );
        }
        None if request.method() == Method::GET => {
            let target = request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_owned();
            let query: String = form_urlencoded::Serializer::new(String::new())
                .append_pair("return_to", &target)
                .finish();
            return Redirect::to(&format!("/auth/login?{query}")).into_response();
        }
        None => return challenge(unauthenticated("sign in first").into_response()),
        Some(Principal {
            via: Via::RunToken { .. },
            ..
        }) if !run_token_allows(request.method(), &path) => {
            if path.ends_with("/mlflow/experiments/create") {
                return permission_denied(
                    "a job's token cannot make experiments: a job's run is in the experiment its spec names. Put `experiment: NAME` in the job's spec (mlflow.set_experiment(NAME) in the job then finds it), or leave mlflow.set_experiment out",
                )
                .into_response();
            }
            return permission_denied(
                "a job's token may only read, and write to its own run and the runs made under it, through the MLflow API, and read its own job, files and datasets",
            )
            .into_response();
        }
        Some(Principal {
            via: Via::NodeToken { .. },
            ..
        }) if !path.starts_with(AGENT_API) => {
            return permission_denied(
                "a node's token is its agent's: it may only send that node's GPU samples (/api/trainyard/v1/agent/)",
            )
            .into_response();
        }
        Some(principal)
            if path.starts_with(AGENT_API) && !matches!(principal.via, Via::NodeToken { .. }) =>
        {
            return permission_denied(
                "the agent API takes a node's token; an admin makes one with POST /api/trainyard/v1/nodes/{node}/tokens",
            )
            .into_response();
        }
        Some(_) => {}
    }
    if let Some(principal) = principal {
        request.extensions_mut().insert(principal);
    }
    next.run(request).await
}

/// A 401 says how to authenticate.
fn challenge(mut response: Response) -> Response {
    if response.status() == StatusCode::UNAUTHORIZED {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            axum::http::HeaderValue::from_static("Bearer realm=\"trainyard\""),
        );
    }
    response
}

/// How often a long answer (a log or run stream) looks again at the
/// credential it came with, so that a session or token revoked (or an
/// access lost) since its start ends it.
pub const STREAM_RECHECK: std::time::Duration = std::time::Duration::from_secs(5);

/// The credential a long answer came with, to look at again while it lasts.
#[derive(Clone)]
pub struct Credential {
    auth: Auth,
    peer: SocketAddr,
    headers: HeaderMap,
    user_id: i64,
}

impl Credential {
    pub fn new(auth: &Auth, peer: SocketAddr, headers: HeaderMap, principal: &Principal) -> Self {
        Credential {
            auth: auth.clone(),
            peer,
            headers,
            user_id: principal.user.id,
        }
    }

    /// The caller as the store knows them now, while the credential still
    /// holds for the same person; None once it was revoked or expired.
    pub async fn recheck(&self) -> Option<Principal> {
        match self.auth.identify(self.peer, &self.headers).await {
            Ok(Some(principal)) if principal.user.id == self.user_id => Some(principal),
            _ => None,
        }
    }
}

/// The caller of an API request, as an extractor: 401 when there is none
/// (the gate lets no such request through; this is the second lock).
pub struct Caller(pub Principal);

impl<S: Send + Sync> axum::extract::FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut axum::http::request::Parts,
        _state: &S,
    ) -> Result<Self, Self::Rejection> {
        parts
            .extensions
            .get::<Principal>()
            .cloned()
            .map(Caller)
            .ok_or_else(|| unauthenticated("sign in first"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    fn config(public: &str) -> AuthConfig {
        AuthConfig {
            public_url: url::Url::parse(public).unwrap(),
            public_url_set: true,
            oidc: None,
            session_ttl: std::time::Duration::from_secs(3600),
            insecure_no_sign_in: false,
        }
    }

    #[test]
    fn tokens_come_as_bearer_or_as_the_basic_password() {
        assert_eq!(bearer_or_basic("Bearer ty_abc").unwrap(), "ty_abc");
        assert_eq!(bearer_or_basic("bearer  ty_abc ").unwrap(), "ty_abc");
        // base64("alice:ty_secret")
        assert_eq!(
            bearer_or_basic("Basic YWxpY2U6dHlfc2VjcmV0").unwrap(),
            "ty_secret"
        );
        assert!(bearer_or_basic("Basic !!!").is_err());
        assert!(bearer_or_basic("Digest x").is_err());
        assert!(bearer_or_basic("Bearer").is_err());
    }

    #[test]
    fn cross_site_requests_are_told_apart() {
        let c = config("https://ty.example");
        assert!(same_origin(
            &c,
            &headers(&[("sec-fetch-site", "same-origin")])
        ));
        assert!(same_origin(&c, &headers(&[("sec-fetch-site", "none")])));
        assert!(!same_origin(
            &c,
            &headers(&[("sec-fetch-site", "same-site")])
        ));
        assert!(!same_origin(
            &c,
            &headers(&[("sec-fetch-site", "cross-site")])
        ));
        assert!(same_origin(
            &c,
            &headers(&[("origin", "https://ty.example")])
        ));
        assert!(!same_origin(
            &c,
            &headers(&[("origin", "https://evil.example")])
        ));
        assert!(same_origin(
            &c,
            &headers(&[
                ("origin", "http://127.0.0.1:3000"),
                ("host", "127.0.0.1:3000")
            ])
        ));
        assert!(!same_origin(
            &c,
            &headers(&[
                ("origin", "http://127.0.0.1:4000"),
                ("host", "127.0.0.1:3000")
            ])
        ));
        // Not from a browser: no CSRF possible.
        assert!(same_origin(&c, &headers(&[])));
    }

    #[test]
    fn the_session_cookie_is_found_among_others_and_hardened_behind_https() {
        let plain = config("http://127.0.0.1:3000");
        let h = headers(&[("cookie", "a=1; trainyard_session=s3cret; b=2")]);
        assert_eq!(session_secret(&plain, &h).as_deref(), Some("s3cret"));
        assert_eq!(session_secret(&plain, &headers(&[("cookie", "x=1")])), None);
        let cookie = session_cookie(&plain, "s3cret");
        assert!(cookie.contains("HttpOnly") && cookie.contains("SameSite=Lax"));
        assert!(!cookie.contains("Secure"));

        let tls = config("https://ty.example");
        let cookie = session_cookie(&tls, "s3cret");
        assert!(cookie.starts_with("__Host-trainyard_session=s3cret;"));
        assert!(cookie.contains("; Secure"));
        assert!(clear_session_cookie(&tls).contains("Max-Age=0"));
        // The plain name is not read behind https.
        assert_eq!(session_secret(&tls, &h), None);
    }

    #[test]
    fn hosts_are_read_without_ports() {
        assert_eq!(
            request_host(&headers(&[("host", "127.0.0.1:3000")])).as_deref(),
            Some("127.0.0.1")
        );
        assert_eq!(
            request_host(&headers(&[("host", "[::1]:3000")])).as_deref(),
            Some("[::1]")
        );
        assert!(is_loopback_name("localhost") && is_loopback_name("[::1]"));
        assert!(is_loopback_name("127.0.0.1") && !is_loopback_name("evil.example"));
    }

    #[test]
    fn public_paths_are_few() {
        assert!(is_public("/auth/login") && is_public("/pkg/trainyard.wasm"));
        assert!(!is_public("/jobs") && !is_public("/api/trainyard/v1/jobs"));
        assert!(is_mlflow_api("/api/2.0/mlflow/runs/log-batch"));
        assert!(is_mlflow_api("/api/2.0/mlflow-artifacts/artifacts/x"));
        assert!(!is_mlflow_api("/api/trainyard/v1/jobs"));
        let post = Method::POST;
        assert!(run_token_allows(&post, "/api/2.0/mlflow/runs/log-batch"));
        assert!(run_token_allows(&post, "/api/2.0/mlflow/runs/log-model"));
        assert!(run_token_allows(&Method::GET, "/api/2.0/mlflow/runs/get"));
        // Runs under its own: the handler checks the parent and experiment.
        assert!(run_token_allows(&post, "/api/2.0/mlflow/runs/create"));
        assert!(!run_token_allows(
            &post,
            "/api/2.0/mlflow/experiments/create"
        ));
        assert!(!run_token_allows(&post, "/api/2.0/mlflow/runs/delete"));
        assert!(!run_token_allows(&Method::GET, "/api/trainyard/v1/jobs"));
        assert!(run_token_allows(
            &Method::PUT,
            "/api/2.0/mlflow-artifacts/artifacts/1/abc/artifacts/model.pt"
        ));
        assert!(!run_token_allows(
            &Method::DELETE,
            "/api/2.0/mlflow-artifacts/artifacts/1/abc/artifacts/model.pt"
        ));
        // The models its run logs: made, finalized, tagged; never deleted.
        assert!(run_token_allows(&post, "/api/2.0/mlflow/logged-models"));
        assert!(run_token_allows(&post, "/api/2.0/mlflow/runs/log-inputs"));
        assert!(run_token_allows(
            &Method::PATCH,
            "/api/2.0/mlflow/logged-models/m-1"
        ));
        assert!(run_token_allows(
            &post,
            "/api/2.0/mlflow/logged-models/m-1/params"
        ));
        assert!(!run_token_allows(
            &Method::DELETE,
            "/api/2.0/mlflow/logged-models/m-1"
        ));
        // The traces of its run and their verdicts; no deletions, tags or
        // changes of verdicts.
        assert!(run_token_allows(&post, "/api/3.0/mlflow/traces"));
        assert!(run_token_allows(
            &post,
            "/api/3.0/mlflow/traces/tr-1/assessments"
        ));
        assert!(!run_token_allows(
            &Method::PATCH,
            "/api/3.0/mlflow/traces/tr-1/assessments/a-1"
        ));
        assert!(run_token_allows(&post, "/api/3.0/mlflow/traces/search"));
        assert!(run_token_allows(&post, "/v1/traces"));
        assert!(!run_token_allows(&Method::DELETE, "/v1/traces"));
        assert!(run_token_allows(
            &post,
            "/api/2.0/mlflow/traces/link-to-run"
        ));
        assert!(!run_token_allows(
            &post,
            "/api/2.0/mlflow/traces/delete-traces"
        ));
        assert!(!run_token_allows(
            &Method::PATCH,
            "/api/2.0/mlflow/traces/tr-1/tags"
        ));
        assert!(is_mlflow_api("/api/3.0/mlflow/server-info"));
    }
}
