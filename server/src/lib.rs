//! The Trainyard server: configuration, application state, the HTTP router
//! (pages, server functions, operations endpoints) and the serve loop.

pub mod auth;
pub mod config;
pub mod metrics;
mod mlflow;
mod ops;
pub mod series;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::FromRef;
use axum::routing::get;
use leptos::config::LeptosOptions;
use leptos::prelude::provide_context;
use leptos_axum::{LeptosRoutes, generate_route_list};
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
}

impl FromRef<AppState> for LeptosOptions {
    fn from_ref(state: &AppState) -> Self {
        state.leptos_options.clone()
    }
}

impl AppState {
    pub fn new(config: &Config, listen: SocketAddr, store: Store) -> AppState {
        let leptos_options = LeptosOptions::builder()
            .output_name("trainyard")
            .site_root(config.site_dir.to_string_lossy().into_owned())
            .site_pkg_dir("pkg")
            .site_addr(listen)
            .env(leptos::config::Env::PROD)
            .build();
        AppState {
            leptos_options,
            store,
            metrics: Arc::new(Metrics::new()),
            artifact_root: config.data_dir.join("artifacts"),
            artifact_max_bytes: config.artifact_max_bytes,
        }
    }
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    let routes = generate_route_list(App);
    let store = state.store.clone();
    let options = state.leptos_options.clone();
    Router::new()
        .merge(
            mlflow::routes(state.artifact_max_bytes)
                .route(
                    "/api/trainyard/v1/series",
                    axum::routing::post(series::series),
                )
                // Every API request is authenticated in this one place.
                .route_layer(axum::middleware::from_fn(auth::require)),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(ops::metrics))
        .leptos_routes_with_context(
            &state,
            routes,
            move || provide_context(store.clone()),
            move || shell(options.clone()),
        )
        .fallback(leptos_axum::file_and_error_handler_with_context::<
            AppState,
            _,
        >(
            {
                let store = state.store.clone();
                move || provide_context(store.clone())
            },
            shell,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.metrics.clone(),
            metrics::track,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}

/// Connects to the database, applies migrations and returns the store.
pub async fn open_store(config: &Config) -> Result<Store, ServerError> {
    config.prepare_folders()?;
    let store = Store::connect(&config.database_url, config.database_max_connections).await?;
    let applied = store.migrate().await?;
    for name in &applied {
        tracing::info!(migration = %name, "applied migration");
    }
    Ok(store)
}

/// A bound, ready server; `run` serves until SIGTERM or SIGINT.
pub struct Server {
    listener: TcpListener,
    state: AppState,
    grace: std::time::Duration,
    signals: ShutdownSignals,
}

impl Server {
    pub async fn bind(config: &Config) -> Result<Server, ServerError> {
        let store = open_store(config).await?;
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
        Ok(Server {
            signals: ShutdownSignals::install()?,
            state: AppState::new(config, local, store),
            listener,
            grace: config.shutdown_grace,
        })
    }

    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    pub async fn run(mut self) -> Result<(), ServerError> {
        let store = self.state.store.clone();
        let compactor = tokio::spawn(compact_forever(store.clone()));
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
        // A pass cut short rolls back: it rewrites nothing half-way.
        compactor.abort();
        store.close().await?;
        tracing::info!("stopped");
        Ok(())
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
