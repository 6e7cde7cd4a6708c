//! Prometheus metrics: HTTP requests by route and status, latencies, and the
//! database pool, served at `/metrics` in the OpenMetrics text format.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::Response;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use trainyard_store::PoolStats;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    method: String,
    route: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    state: &'static str,
}

fn latency_histogram() -> Histogram {
    // 1 ms to about 33 s.
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

pub struct Metrics {
    registry: Registry,
    requests: Family<RequestLabels, Counter>,
    latency: Family<RouteLabels, Histogram, fn() -> Histogram>,
    pool: Family<PoolLabels, Gauge>,
    pool_max: Gauge,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        // No prefix: the GPU metrics keep the DCGM exporter's own names.
        let mut registry = Registry::default();
        let requests = Family::<RequestLabels, Counter>::default();
        let latency: Family<RouteLabels, Histogram, fn() -> Histogram> =
            Family::new_with_constructor(latency_histogram);
        let pool = Family::<PoolLabels, Gauge>::default();
        let pool_max = Gauge::default();
        registry.register(
            "trainyard_http_requests",
            "HTTP requests answered, by method, route and status",
            requests.clone(),
        );
        registry.register(
            "trainyard_http_request_duration_seconds",
            "Time to answer an HTTP request, by method and route",
            latency.clone(),
        );
        registry.register(
            "trainyard_db_pool_connections",
            "Database connections in the pool, by state (open, idle, in_use)",
            pool.clone(),
        );
        registry.register(
            "trainyard_db_pool_max_connections",
            "Most connections the database pool may open",
            pool_max.clone(),
        );
        Metrics {
            registry,
            requests,
            latency,
            pool,
            pool_max,
        }
    }

    /// Adds every GPU's latest sample, in the DCGM exporter's names.
    pub fn with_gpus(mut self, telemetry: crate::telemetry::Telemetry) -> Self {
        self.registry
            .register_collector(Box::new(crate::telemetry::DcgmMetrics(telemetry)));
        self
    }

    fn observe(&self, method: &str, route: &str, status: u16, seconds: f64) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method.to_owned(),
                route: route.to_owned(),
                status: status.to_string(),
            })
            .inc();
        self.latency
            .get_or_create(&RouteLabels {
                method: method.to_owned(),
                route: route.to_owned(),
            })
            .observe(seconds);
    }

    /// Encodes every metric, reading the pool figures at this instant.
    pub fn render(&self, pool: PoolStats) -> String {
        let in_use = pool.open.saturating_sub(pool.idle);
        for (state, value) in [("open", pool.open), ("idle", pool.idle), ("in_use", in_use)] {
            self.pool
                .get_or_create(&PoolLabels { state })
                .set(i64::from(value));
        }
        self.pool_max.set(i64::from(pool.max));
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

/// The route label: the route's pattern, never the raw path, so that the
/// number of series stays bounded whatever clients ask for.
fn route_label(request: &Request) -> String {
    if let Some(matched) = request.extensions().get::<MatchedPath>() {
        return matched.as_str().to_owned();
    }
    if request.uri().path().starts_with("/pkg/") {
        "/pkg/{file}".to_owned()
    } else {
        "fallback".to_owned()
    }
}

/// The method label: the methods this server answers, and `other` for the
/// rest, so that made-up methods cannot grow the series (and memory)
/// without bound.
fn method_label(method: &axum::http::Method) -> &'static str {
    use axum::http::Method;
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Middleware that counts and times every request.
pub async fn track(State(metrics): State<Arc<Metrics>>, request: Request, next: Next) -> Response {
    let started = Instant::now();
    let method = method_label(request.method()).to_owned();
    let route = route_label(&request);
    let response = next.run(request).await;
    metrics.observe(
        &method,
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_requests_latencies_and_pool() {
        let metrics = Metrics::new();
        metrics.observe("GET", "/healthz", 200, 0.002);
        metrics.observe("GET", "/healthz", 200, 0.004);
        let text = metrics.render(PoolStats {
            open: 3,
            idle: 1,
            max: 8,
        });
        assert!(
            text.contains(
                r#"trainyard_http_requests_total{method="GET",route="/healthz",status="200"} 2"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"trainyard_http_request_duration_seconds_count{method="GET",route="/healthz"} 2"#
        ));
        assert!(text.contains(r#"trainyard_db_pool_connections{state="in_use"} 2"#));
        assert!(text.contains("trainyard_db_pool_max_connections 8"));
    }
}
