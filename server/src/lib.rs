//! The Trainyard server: configuration, application state, the HTTP router
//! (pages, server functions, operations endpoints) and the serve loop.

pub mod agent;
mod agent_api;
mod agent_tokens;
mod audit_api;
pub mod auth;
pub mod cli;
pub mod config;
mod explorer;
mod gpus_api;
mod jobs_api;
pub mod metrics;
mod mlflow;
pub mod oidc;
mod ops;
mod quota;
pub mod security;
pub mod series;
mod teams_api;
pub mod telemetry;
mod tokens_api;
pub mod webhooks;

use std::net::SocketAddr;
use std::sync::Arc;
use trainyard_jobs::machine;

use axum::Router;
use axum::extract::FromRef;
use axum::routing::get;
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos_axum::{AxumRouteListing, LeptosRoutes, generate_route_list};
use tokio::net::TcpListener;
use tower_http::trace::TraceLayer;
use trainyard_app::{App, shell};
use trainyard_store::{Store, StoreError};

pub use config::Config;
use metrics::Metrics;

/// Why the server could not start or stopped badly.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    #[error("{0}")]
    Config(#[from] config::ConfigError),
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("listen: cannot bind {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("server failed: {0}")]
    Io(#[from] std::io::Error),
}

/// Everything a request handler may need, cloned cheaply per request.
#[derive(Clone)]
pub struct AppState {
    pub leptos_options: LeptosOptions,
    pub store: Store,
    pub metrics: Arc<Metrics>,
    /// Where run artifacts live: `<data_dir>/artifacts`.
    pub artifact_root: std::path::PathBuf,
    /// Largest artifact upload, in bytes.
    pub artifact_max_bytes: usize,
    /// Largest project or dataset upload, in bytes.
    pub upload_max_bytes: u64,
    /// What one person's uploads, and their runs' artifacts, may hold in
    /// all; None: no quota.
    pub upload_quota_bytes: Option<u64>,
    /// The files and folders one person's uploads may hold; None: no quota.
    pub upload_quota_entries: Option<u64>,
    pub artifact_quota_bytes: Option<u64>,
    pub artifact_usage: quota::ArtifactUsage,
    /// The data folder (uploads arrive in `<data_dir>/uploads/.incoming`).
    pub data_dir: std::path::PathBuf,
    pub jobs: trainyard_jobs::Jobs,
    pub auth: auth::Auth,
    pub telemetry: telemetry::Telemetry,
    /// Registry webhooks' sending side.
    pub webhooks: webhooks::Webhooks,
}

impl FromRef<AppState> for auth::Auth {
    fn from_ref(state: &AppState) -> Self {
        state.auth.clone()
    }
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

impl AppState {
    /// `machine`: this machine's name and how many GPUs it offers jobs
    /// (see [`discover_gpus`]).
    pub fn new(
        config: &Config,
        listen: SocketAddr,
        store: Store,
        executor: Arc<dyn trainyard_jobs::executor::Executor>,
    ) -> Result<AppState, ServerError> {
        let leptos_options = LeptosOptions::builder()
            .output_name("trainyard")
            .site_root(config.site_dir.to_string_lossy().into_owned())
            .site_pkg_dir("pkg")
            .site_addr(listen)
            .env(leptos::config::Env::PROD)
            .build();
        let jobs = trainyard_jobs::Jobs::new(
            store.clone(),
            trainyard_jobs::JobsConfig {
                root: config.data_dir.join("jobs"),
                templates_dir: config.templates_dir.clone(),
                uploads_root: config.data_dir.join("uploads"),
                upload_limits: trainyard_jobs::archive::Limits {
                    max_bytes: config.upload_max_bytes.saturating_mul(4),
                    max_files: 100_000,
                },
                usage_half_life: config.fair_share_half_life,
                checkpoint_keep: config.checkpoint_keep,
                checkpoint_keep_bytes: config.checkpoint_keep_bytes,
            },
            executor,
        );
        let mut auth_config = config.auth.clone();
        auth_config.public_url = public_url(config, listen);
        let oidc = match &auth_config.oidc {
            Some(oidc) => Some(
                oidc::Oidc::new(oidc.clone(), &auth_config.public_url)
                    .map_err(|e| ServerError::Config(config::ConfigError(e)))?,
            ),
            None => None,
        };
        let auth = auth::Auth {
            store: store.clone(),
            config: auth_config,
            oidc,
            local_admin: Default::default(),
            agents: None,
        };
        let telemetry = telemetry::Telemetry::new(store.clone(), config.telemetry);
        let sender = webhooks::Sender::new(
            config.webhook_schemes.clone(),
            config.webhook_allow_private_hosts,
        )
        .map_err(|e| ServerError::Config(config::ConfigError(e)))?;
        let webhooks = webhooks::Webhooks::new(store.clone(), sender);
        Ok(AppState {
            webhooks,
            leptos_options,
            auth,
            jobs,
            store,
            metrics: Arc::new(Metrics::new().with_gpus(telemetry.clone())),
            telemetry,
            artifact_root: config.data_dir.join("artifacts"),
            artifact_max_bytes: config.artifact_max_bytes,
            upload_max_bytes: config.upload_max_bytes,
            upload_quota_bytes: config.upload_quota_bytes,
            upload_quota_entries: config.upload_quota_entries,
            artifact_quota_bytes: config.artifact_quota_bytes,
            artifact_usage: Default::default(),
            data_dir: config.data_dir.clone(),
        })
    }
}

/// Where people reach the server: the setting, else the address actually
/// bound (port 0 becomes the real port).
fn public_url(config: &Config, listen: SocketAddr) -> url::Url {
    if config.auth.public_url_set {
        return config.auth.public_url.clone();
    }
    let mut public = listen;
    if public.ip().is_unspecified() {
        public.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    url::Url::parse(&format!("http://{public}")).unwrap_or_else(|_| config.auth.public_url.clone())
}

/// The Kubernetes executor's set-up: the checked settings, where pods
/// reach this server, where attempts' logs are kept.
fn kube_settings(
    config: &Config,
    kube: &config::KubeOptions,
    listen: SocketAddr,
) -> trainyard_kube::KubeSettings {
    let tracking = kube
        .tracking_url
        .clone()
        .unwrap_or_else(|| public_url(config, listen));
    trainyard_kube::KubeSettings {
        kubeconfig: kube.kubeconfig.clone(),
        context: kube.context.clone(),
        namespace: kube.namespace.clone(),
        node_selector: kube.node_selector.clone(),
        tolerations: kube.tolerations.clone(),
        image: kube.image.clone(),
        trainyard_image: kube.trainyard_image.clone(),
        image_pull_secrets: kube.image_pull_secrets.clone(),
        tracking_url: tracking.as_str().trim_end_matches('/').to_owned(),
        gpu_resource: kube.gpu_resource.clone(),
        stop_grace_secs: config.job_stop_grace_secs,
        image_pull_timeout: kube.image_pull_timeout,
        root: config.data_dir.join("jobs"),
        checkpoints: kube.checkpoints.clone(),
        disk_quota_bytes: config.job_disk_quota_bytes,
    }
}

/// What the local executor's set-up reads of the settings.
fn machine_settings(config: &Config) -> machine::MachineSettings {
    machine::MachineSettings {
        job_uids: config.job_uids,
        job_limits: config.job_limits,
        sign_in: config.auth.oidc.is_some(),
        data_dir: config.data_dir.clone(),
        venv_dir: config.venv_dir.clone(),
        database_file: config::sqlite_path(&config.database_url),
    }
}

/// This machine as the local executor's node.
#[derive(Debug, Clone)]
pub struct Machine {
    pub name: String,
    pub gpus: u32,
    /// Its GPUs as found, for the sampler.
    pub inventory: trainyard_nvml::Inventory,
}

/// The local executor's setup: this machine's CPUs and memory, the GPUs
/// it offers, and the address jobs report to.
fn local_config(
    config: &Config,
    listen: SocketAddr,
    machine: Machine,
    job_users: Option<trainyard_jobs::users::UidRange>,
    job_limits: Option<trainyard_jobs::cgroups::Hierarchy>,
) -> trainyard_jobs::local::LocalConfig {
    let mut tracking = listen;
    if tracking.ip().is_unspecified() {
        tracking.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get()) as u32;
    trainyard_jobs::local::LocalConfig {
        root: config.data_dir.join("jobs"),
        shim_program: config.job_shim.clone(),
        tracking_uri: format!("http://{tracking}"),
        node: machine.name,
        gpus: machine.gpus,
        cpu_millis: cpus * 1000,
        memory_mib: memory_mib().unwrap_or(4096),
        stop_grace_secs: config.job_stop_grace_secs,
        venv_root: config.venv_dir.clone(),
        uploads_root: config.data_dir.join("uploads"),
        job_users,
        job_limits,
        disk_quota_bytes: config.job_disk_quota_bytes,
    }
}

/// Total memory from /proc/meminfo, in MiB.
fn memory_mib() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

/// What pages and server functions find in their context: the store, the
/// job service, where artifacts live, and the page's security policy.
fn page_context(
    state: &AppState,
    provider: Option<String>,
) -> impl Fn() + Clone + Send + Sync + 'static {
    let store = state.store.clone();
    let jobs = state.jobs.clone();
    let artifacts = trainyard_app::explorer::api::ArtifactRoot(state.artifact_root.clone());
    let telemetry = state.telemetry.clone();
    let removed = {
        let (usage, turns) = (state.artifact_usage.clone(), state.artifact_usage.clone());
        trainyard_app::explorer::api::ArtifactsRemoved {
            turn: std::sync::Arc::new(move |owner| {
                let turns = turns.clone();
                Box::pin(async move {
                    Box::new(turns.turn(owner).await) as Box<dyn std::any::Any + Send>
                })
            }),
            forget: std::sync::Arc::new(move |owner| usage.forget(owner)),
        }
    };
    let storage = {
        let state = state.clone();
        trainyard_app::usage::StorageOf(std::sync::Arc::new(move |owner| {
            let state = state.clone();
            Box::pin(async move {
                quota::storage_of(&state, owner)
                    .await
                    .map_err(|e| e.message)
            })
        }))
    };
    move || {
        provide_context(store.clone());
        provide_context(jobs.clone());
        provide_context(artifacts.clone());
        provide_context(removed.clone());
        provide_context(storage.clone());
        provide_context(telemetry.clone());
        security::set_page_policy(provider.as_deref());
    }
}

/// The pages' routes, walked out of the app once per process.
///
/// Walking them sets a process-wide flag in Leptos that parks every
/// resource first polled meanwhile, for good (leptos-rs/leptos#4773): a
/// second server of this process (tests start many) must never walk them
/// while another one renders a page.
fn page_routes() -> Vec<AxumRouteListing> {
    static ROUTES: std::sync::OnceLock<Vec<AxumRouteListing>> = std::sync::OnceLock::new();
    ROUTES.get_or_init(|| generate_route_list(App)).clone()
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    let routes = page_routes();
    let options = state.leptos_options.clone();
    let provider = security::provider_origin(&state.auth.config);
    let https = state.auth.config.secure_cookies();
    Router::new()
        .merge(
            mlflow::routes(state.artifact_max_bytes)
                .route(
                    "/api/trainyard/v1/series",
                    axum::routing::post(series::series),
                )
                .route(
                    "/api/trainyard/v1/jobs",
                    axum::routing::post(jobs_api::submit).get(jobs_api::list),
                )
                .route("/api/trainyard/v1/chart", get(explorer::chart))
                .route(
                    "/api/trainyard/v1/experiments/{id}/runs.csv",
                    get(explorer::runs_csv),
                )
                .route(
                    "/api/trainyard/v1/runs/{id}/events",
                    get(explorer::run_events),
                )
                .route(
                    "/api/trainyard/v1/jobs/{id}",
                    get(jobs_api::show).delete(jobs_api::delete),
                )
                .route(
                    "/api/trainyard/v1/jobs/{id}/cancel",
                    axum::routing::post(jobs_api::cancel),
                )
                .route(
                    "/api/trainyard/v1/jobs/{id}/team",
                    axum::routing::put(jobs_api::set_team),
                )
                .route(
                    "/api/trainyard/v1/jobs/{id}/retry",
                    axum::routing::post(jobs_api::retry),
                )
                .route(
                    "/api/trainyard/v1/jobs/{id}/checkpoints",
                    axum::routing::delete(jobs_api::delete_checkpoints),
                )
                .route("/api/trainyard/v1/jobs/{id}/logs", get(jobs_api::logs))
                .route("/api/trainyard/v1/jobs/{id}/files", get(jobs_api::files))
                .route(
                    "/api/trainyard/v1/jobs/{id}/datasets/{name}",
                    get(jobs_api::dataset_of_job),
                )
                .route(
                    "/api/trainyard/v1/jobs/{id}/logs/stream",
                    get(jobs_api::stream_logs),
                )
                .route("/api/trainyard/v1/templates", get(jobs_api::templates))
                .route("/api/trainyard/v1/nodes", get(jobs_api::nodes))
                .route(
                    "/api/trainyard/v1/teams",
                    get(teams_api::list).post(teams_api::create),
                )
                .route(
                    "/api/trainyard/v1/teams/{id}",
                    axum::routing::put(teams_api::update),
                )
                .route("/api/trainyard/v1/usage", get(teams_api::usage))
                .route(
                    "/api/trainyard/v1/agent/register",
                    axum::routing::post(agent_api::register).layer(
                        axum::extract::DefaultBodyLimit::max(agent_api::MAX_REGISTRATION_BYTES),
                    ),
                )
                .route(
                    "/api/trainyard/v1/agent/readings",
                    axum::routing::post(agent_api::readings).layer(
                        axum::extract::DefaultBodyLimit::max(agent_api::MAX_AGENT_BODY_BYTES),
                    ),
                )
                .route(
                    "/api/trainyard/v1/nodes/{node}",
                    axum::routing::delete(agent_api::remove_node),
                )
                .route(
                    "/api/trainyard/v1/nodes/{node}/drain",
                    axum::routing::put(jobs_api::drain_node).delete(jobs_api::resume_node),
                )
                .route(
                    "/api/trainyard/v1/nodes/{node}/tokens",
                    get(agent_api::node_tokens).post(agent_api::create_node_token),
                )
                .route(
                    "/api/trainyard/v1/nodes/{node}/tokens/{id}",
                    axum::routing::delete(agent_api::revoke_node_token),
                )
                .route("/api/trainyard/v1/gpus", get(gpus_api::overview))
                .route("/api/trainyard/v1/gpus/heatmap", get(gpus_api::heatmap))
                .route("/api/trainyard/v1/gpus/usage", get(gpus_api::usage))
                .route(
                    "/api/trainyard/v1/nodes/{node}/gpus",
                    get(gpus_api::node_series),
                )
                .route(
                    "/api/trainyard/v1/nodes/{node}/gpus/chart",
                    get(gpus_api::node_chart),
                )
                .route(
                    "/api/trainyard/v1/jobs/{id}/gpus",
                    get(gpus_api::job_series),
                )
                .route(
                    "/api/trainyard/v1/jobs/{id}/gpus/chart",
                    get(gpus_api::job_chart),
                )
                .route(
                    "/api/trainyard/v1/uploads",
                    get(jobs_api::uploads).post(jobs_api::upload),
                )
                .route("/api/trainyard/v1/datasets", get(jobs_api::datasets))
                .route("/api/trainyard/v1/storage", get(quota::storage))
                .route("/api/trainyard/v1/audit", get(audit_api::list))
                .route(
                    "/api/trainyard/v1/uploads/{id}",
                    axum::routing::delete(jobs_api::delete_upload),
                )
                .route(
                    "/api/trainyard/v1/templates/{slug}",
                    get(jobs_api::template)
                        .put(jobs_api::save_template)
                        .delete(jobs_api::delete_template),
                )
                .route(
                    "/api/trainyard/v1/tokens",
                    get(tokens_api::list).post(tokens_api::create),
                )
                .route(
                    "/api/trainyard/v1/tokens/{id}",
                    axum::routing::delete(tokens_api::revoke),
                )
                .route("/api/trainyard/v1/me", get(tokens_api::me)),
        )
        .route("/auth/login", get(oidc::login))
        .route("/auth/callback", get(oidc::callback))
        .route("/auth/logout", axum::routing::post(oidc::logout))
        .route("/auth/signed-out", get(oidc::signed_out))
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .leptos_routes_with_context(
            &state,
            routes,
            page_context(&state, provider.clone()),
            move || shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(page_context(&state, provider), shell))
        .layer(axum::middleware::from_fn(jobs_api::json_refusals))
        .layer(axum::middleware::from_fn(server_fn_status))
        // Every request passes here: who is calling, and may they.
        .layer(axum::middleware::from_fn_with_state(
            state.auth.clone(),
            auth::gate,
        ))
        .layer(axum::middleware::from_fn_with_state(
            security::Limits::default(),
            security::limit,
        ))
        .layer(axum::middleware::from_fn_with_state(
            https,
            security::headers,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::track,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// A server function's error leaves with 500 unless the function set
/// another status. The error says what it is, so its status follows from
/// it (400 for input, 403, 404, 409): a refusal of what someone typed is
/// not logged and counted as the server failing.
async fn server_fn_status(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    // Server functions answer at `/api/NAME`; the APIs below `/api/` have
    // deeper paths.
    let server_fn = request
        .uri()
        .path()
        .strip_prefix("/api/")
        .is_some_and(|name| !name.is_empty() && !name.contains('/'));
    let response = next.run(request).await;
    if !server_fn || response.status() != axum::http::StatusCode::INTERNAL_SERVER_ERROR {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // An error is a few lines of JSON.
    let Ok(bytes) = axum::body::to_bytes(body, 1 << 20).await else {
        return axum::response::IntoResponse::into_response(
            axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        );
    };
    if let Ok(error) = serde_json::from_slice::<trainyard_app::error::AppError>(&bytes)
        && let Ok(status) = axum::http::StatusCode::from_u16(error.status())
    {
        parts.status = status;
    }
    axum::response::Response::from_parts(parts, axum::body::Body::from(bytes))
}

/// Connects to the database with the keys that open its sealed secrets
/// (`secrets_key`, and `secrets_key_previous` while rotating).
pub async fn keyed_store(config: &Config, connections: u32) -> Result<Store, ServerError> {
    config.prepare_folders()?;
    let mut store = Store::connect(&config.database_url, connections)
        .await?
        .with_sealing_key(config.sealing_key()?);
    if let Some(previous) = config.previous_sealing_key()? {
        store = store.with_previous_sealing_key(previous);
    }
    Ok(store)
}

/// Connects to the database, applies migrations and returns the store.
pub async fn open_store(config: &Config) -> Result<Store, ServerError> {
    let store = keyed_store(config, config.database_max_connections).await?;
    let applied = store.migrate().await?;
    for name in &applied {
        tracing::info!(migration = %name, "applied migration");
    }
    // The key is checked before anything is sealed with it.
    match store.check_sealed_secrets().await? {
        // Not one opens: another key sealed them. Serving would end every
        // session and fail every signed webhook, or fight a server that
        // has the right key.
        (0, failed) if failed > 0 => {
            return Err(config::ConfigError(format!(
                "secrets_key: this key ({}) does not open the secrets sealed in the database; start with the key that sealed them. \
                 If it is lost for good, run `trainyard forget-secrets` once: webhooks with a secret are turned off until given a new one, and people sign in again",
                config.secrets_key_source()
            ))
            .into());
        }
        (_, 0) => {}
        (opened, failed) => tracing::warn!(
            opened,
            failed,
            "some sealed secrets do not open with this secrets_key; run `trainyard forget-secrets` to drop them"
        ),
    }
    if config.secrets_key_previous.is_some() {
        let resealed = store.reseal_with_current_key().await?;
        tracing::info!(
            resealed,
            "sealed again with secrets_key what secrets_key_previous had sealed; remove secrets_key_previous once every server runs with the new key"
        );
    }
    let sealed = store.seal_plain_secrets().await?;
    if sealed > 0 {
        tracing::info!(sealed, "sealed secrets that were stored in the clear");
    }
    Ok(store)
}

/// Finds this machine's GPUs (NVML, or `simulated_gpus` without a driver),
/// records them as its node, and returns how many jobs may use.
pub async fn discover_gpus(config: &Config, store: &Store) -> Result<Machine, ServerError> {
    let node = machine::node_name();
    let simulated = config.simulated_gpus;
    let name = node.clone();
    let inventory = tokio::task::spawn_blocking(move || machine::gpus(simulated, &name))
        .await
        .map_err(|e| ServerError::Io(std::io::Error::other(e)))?;
    let gpus: Vec<trainyard_store::GpuInfo> = inventory
        .gpus
        .iter()
        .map(|g| trainyard_store::GpuInfo {
            index: g.index,
            uuid: g.uuid.clone(),
            name: g.name.clone(),
            memory_total_bytes: g.memory_total_bytes,
        })
        .collect();
    store.register_node(&node, &gpus).await?;
    Ok(Machine {
        name: node,
        gpus: gpus.len() as u32,
        inventory,
    })
}

/// Brings the catalog in line with the template files. A template that is
/// not valid stops the start, naming its file and field.
async fn sync_templates(config: &Config, store: &Store) -> Result<(), ServerError> {
    let dir = config.templates_dir.clone();
    let templates = tokio::task::spawn_blocking(move || trainyard_jobs::templates::load_dir(&dir))
        .await
        .map_err(|e| ServerError::Io(std::io::Error::other(e)))?
        .map_err(|message| ServerError::Config(config::ConfigError(message)))?;
    if templates.is_empty() {
        tracing::warn!(
            templates_dir = %config.templates_dir.display(),
            "no job templates found; the catalog is empty (set templates_dir)"
        );
    }
    let changed = store.sync_builtin_templates(&templates).await?;
    tracing::info!(
        templates = templates.len(),
        changed,
        "template catalog loaded"
    );
    Ok(())
}

/// A bound, ready server; `run` serves until SIGTERM or SIGINT.
pub struct Server {
    listener: TcpListener,
    state: AppState,
    grace: std::time::Duration,
    signals: ShutdownSignals,
    /// This machine's GPUs, sampled by the server (local executor only).
    local_gpus: Option<(trainyard_nvml::Inventory, String)>,
}

impl Server {
    pub async fn bind(config: &Config) -> Result<Server, ServerError> {
        let store = open_store(config).await?;
        // The local executor's set-up on this machine.
        let local_setup = match config.kubernetes {
            Some(_) => None,
            None => {
                let settings = machine_settings(config);
                let job_users = machine::decide_users(&settings).map_err(config::ConfigError)?;
                if job_users.is_some() {
                    machine::close_data_folder(&settings).map_err(config::ConfigError)?;
                }
                let job_limits =
                    machine::decide_limits(&settings, job_users).map_err(config::ConfigError)?;
                Some((job_users, job_limits))
            }
        };
        sync_templates(config, &store).await?;
        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| ServerError::Bind {
                    addr: config.listen,
                    source,
                })?;
        let local = listener.local_addr()?;
        if !config.site_dir.join("pkg").is_dir() {
            tracing::warn!(
                site_dir = %config.site_dir.display(),
                "no browser bundle found; pages render but will not hydrate (build with `make build`)"
            );
        }
        let (state, local_gpus) = {
            let mut local_gpus = None;
            let mut agents = None;
            let (executor, setting): (Arc<dyn trainyard_jobs::executor::Executor>, _) =
                match (&config.kubernetes, local_setup) {
                    (Some(kube), _) => {
                        let settings = kube_settings(config, kube, local);
                        let executor = trainyard_kube::KubeExecutor::connect(settings)
                            .await
                            .map_err(config::ConfigError)?;
                        tracing::info!(namespace = executor.namespace(), "jobs run on Kubernetes");
                        if let Some(account) = &kube.agent_account {
                            let reviewer = executor.agent_reviewer(account).map_err(|e| {
                                config::ConfigError(format!("kube_agent_account: {e}"))
                            })?;
                            tracing::info!(
                                account,
                                "node agents may sign in with their Kubernetes tokens"
                            );
                            agents = Some(agent_tokens::AgentTokens::new(reviewer));
                        }
                        (Arc::new(executor), "executor")
                    }
                    (None, setup) => {
                        let (job_users, job_limits) = setup.unwrap_or_default();
                        let machine = discover_gpus(config, &store).await?;
                        // A machine without GPUs has nothing to sample.
                        if machine.gpus > 0 {
                            local_gpus = Some((machine.inventory.clone(), machine.name.clone()));
                        }
                        let executor = trainyard_jobs::local::LocalExecutor::new(local_config(
                            config, local, machine, job_users, job_limits,
                        ));
                        (Arc::new(executor), "job_uids")
                    }
                };
            let mut state = AppState::new(config, local, store, executor)?;
            state.auth.agents = agents;
            state
                .jobs
                .prepare()
                .await
                .map_err(|e| config::ConfigError(format!("{setting}: {e}")))?;
            (state, local_gpus)
        };
        Ok(Server {
            signals: ShutdownSignals::install()?,
            state,
            listener,
            grace: config.shutdown_grace,
            local_gpus,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub async fn run(mut self) -> Result<(), ServerError> {
        let store = self.state.store.clone();
        // Stopped with the server, also when `run` itself is dropped.
        let compactor = Background(tokio::spawn(compact_forever(store.clone())));
        let supervisor = Background(tokio::spawn(self.state.jobs.clone().run_forever()));
        let deliverer = Background(tokio::spawn(self.state.webhooks.clone().deliver_forever()));
        let span_reader = Background(tokio::spawn(mlflow::traces::index_unread_spans(
            store.clone(),
            self.state.artifact_root.clone(),
        )));
        let telemetry = Background(tokio::spawn(
            self.state.telemetry.clone().maintain_forever(),
        ));
        let sampler = self.local_gpus.take().map(|(inventory, node)| {
            Background(tokio::spawn(
                trainyard_jobs::telemetry::sample_locally_forever(
                    self.state.telemetry.clone(),
                    inventory,
                    node,
                ),
            ))
        });
        let rechecker = self.state.auth.oidc.clone().map(|oidc| {
            Background(tokio::spawn(oidc::recheck_forever(
                self.state.auth.clone(),
                oidc,
            )))
        });
        let app = router(self.state);
        let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
        let app = app.into_make_service_with_connect_info::<SocketAddr>();
        let serve = axum::serve(self.listener, app).with_graceful_shutdown(async move {
            let _ = stop_rx.wait_for(|stop| *stop).await;
        });
        let serve = serve.into_future();
        tokio::pin!(serve);
        tokio::select! {
            result = &mut serve => result?,
            signal = self.signals.recv() => {
                tracing::info!(%signal, grace_secs = self.grace.as_secs(), "shutting down; finishing requests in flight");
                let _ = stop_tx.send(true);
                match tokio::time::timeout(self.grace, &mut serve).await {
                    Ok(result) => result?,
                    Err(_) => tracing::warn!("requests still running after the grace period; closing them"),
                }
            }
        }
        // A pass cut short rolls back: it rewrites nothing half-way. Jobs
        // keep running under their shims; the next start finds them.
        drop(compactor);
        drop(supervisor);
        drop(deliverer);
        drop(span_reader);
        drop(sampler);
        drop(telemetry);
        drop(rechecker);
        store.close().await?;
        tracing::info!("stopped");
        Ok(())
    }
}

/// A background task of the server, aborted when dropped.
struct Background(tokio::task::JoinHandle<()>);

impl Drop for Background {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// How often written series are compacted.
const COMPACTION_INTERVAL: std::time::Duration = std::time::Duration::from_secs(1);

/// Merges the small metric chunks of series as they are written (see
/// docs/metric-store.md), starting with those left from before a restart.
async fn compact_forever(store: Store) {
    match store.mark_uncompacted().await {
        Ok(0) => {}
        Ok(n) => tracing::info!(series = n, "compacting series written before the restart"),
        Err(error) => tracing::warn!(%error, "could not look for series to compact"),
    }
    let mut tick = tokio::time::interval(COMPACTION_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        match store.compact_pending().await {
            Ok(0) => {}
            Ok(merged) => tracing::debug!(merged, "compacted metric chunks"),
            Err(error) => {
                tracing::warn!(%error, "metric compaction failed; the series is tried again when next written, or after a restart")
            }
        }
    }
}

/// SIGTERM (what Kubernetes sends) and SIGINT (Ctrl-C), listened for from
/// the moment the server binds, so that a signal sent as soon as the server
/// announces itself is never lost.
struct ShutdownSignals {
    terminate: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl ShutdownSignals {
    fn install() -> std::io::Result<ShutdownSignals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(ShutdownSignals {
            terminate: signal(SignalKind::terminate())?,
            interrupt: signal(SignalKind::interrupt())?,
        })
    }

    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.interrupt.recv() => "SIGINT",
        }
    }
}
