//! GPUs as admins and job owners look at them: Admin → GPUs (the cluster
//! heatmap and every GPU now), a node's per-GPU charts over a window that a
//! drag zooms, and a job's GPUs on its page with the idle flag. The charts
//! are drawn by trainyard-charts, here in the browser and on the server for
//! downloads.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use trainyard_charts::{LineChart, Series, XAxis};
use trainyard_domain::telemetry::{
    GpuOverview, GpuQuantity, GpuUsage, GpuWindow, UsageBy, WINDOWS, heat_row_height,
};

use crate::error::AppError;
use crate::explorer::chart::themed;
use crate::pages::ErrorNote;

/// The chart size drawn in the page (it scales with its box).
const WIDTH: u32 = 560;
const HEIGHT: u32 = 260;
/// The heatmap's width as drawn (it scales with the page).
const HEAT_WIDTH: u32 = 1200;
/// The smallest drag that zooms, in chart pixels.
const MIN_DRAG_PX: f64 = 6.0;

/// The line chart of one quantity of a window's GPUs, one line per GPU.
pub fn gpu_chart(
    title: &str,
    quantity: GpuQuantity,
    w: &GpuWindow,
    width: Option<u32>,
    height: Option<u32>,
) -> LineChart {
    LineChart {
        title: format!("{title}{}", quantity.title()),
        x_axis: XAxis::WallTime,
        series: w
            .gpus
            .iter()
            .map(|g| Series {
                label: format!("GPU {}", g.index),
                color: g.index as usize,
                x: g.points.iter().map(|p| p.t_ms as f64).collect(),
                y: g.points.iter().map(|p| quantity.value(p)).collect(),
                min: None,
                max: None,
            })
            .collect(),
        log_y: false,
        smoothing: 0.0,
        x_range: Some((w.from_ms as f64, w.to_ms as f64)),
        width: width.unwrap_or(900).clamp(240, 4096),
        height: height.unwrap_or(320).clamp(160, 4096),
        legend: true,
        y_include: quantity.y_include(),
        ignore_outliers: false,
    }
}

#[cfg(feature = "ssr")]
fn telemetry() -> Result<trainyard_jobs::telemetry::Telemetry, AppError> {
    use_context::<trainyard_jobs::telemetry::Telemetry>().ok_or_else(|| {
        AppError::Internal("GPU telemetry is not wired into this request".to_owned())
    })
}

#[cfg(feature = "ssr")]
fn admin() -> Result<(), AppError> {
    let principal = crate::api::caller()?;
    if principal.user.is_admin {
        return Ok(());
    }
    crate::error::set_error_status(http::StatusCode::FORBIDDEN);
    Err(AppError::Forbidden(
        "only admins may see every GPU; a job's own GPUs are on its page".to_owned(),
    ))
}

#[cfg(feature = "ssr")]
fn now() -> i64 {
    trainyard_store::now_millis()
}

/// Every GPU now, by node (admins).
#[server(endpoint = "get_gpu_overview")]
pub async fn get_gpu_overview() -> Result<GpuOverview, AppError> {
    admin()?;
    Ok(telemetry()?.overview(now()).await?)
}

/// A node's GPUs over `window` back from now, or over `zoom` (admins);
/// None for a node without GPUs.
#[server(endpoint = "get_node_gpus")]
pub async fn get_node_gpus(
    node: String,
    window: String,
    zoom: Option<(i64, i64)>,
) -> Result<Option<GpuWindow>, AppError> {
    admin()?;
    let now = now();
    let span = zoom.filter(|(a, b)| a < b).unwrap_or_else(|| {
        let w = trainyard_domain::telemetry::window_ms(&window).unwrap_or(6 * 3_600_000);
        (now - w, now)
    });
    Ok(telemetry()?.node_window(&node, span, 600).await?)
}

/// Removes a node that is gone for good (admins): its GPUs, their samples
/// and its agent tokens; the browser goes back to every GPU.
#[server(endpoint = "remove_gpu_node")]
pub async fn remove_gpu_node(node: String) -> Result<(), AppError> {
    admin()?;
    let by = crate::api::caller()?.user;
    let removal = crate::api::jobs()?.remove_node(&node, &by).await?;
    if removal == trainyard_jobs::NodeRemoval::Removed {
        telemetry()?.forget_node(&node).await;
    }
    if let Some(why) = removal.refusal(&node) {
        let (status, error) = match removal {
            trainyard_jobs::NodeRemoval::Missing => {
                (http::StatusCode::NOT_FOUND, AppError::NotFound(why))
            }
            trainyard_jobs::NodeRemoval::ExecutorUnsure(_) => (
                http::StatusCode::SERVICE_UNAVAILABLE,
                AppError::Unavailable(why),
            ),
            _ => (http::StatusCode::CONFLICT, AppError::Conflict(why)),
        };
        crate::error::set_error_status(status);
        return Err(error);
    }
    leptos_axum::redirect("/admin/gpus");
    Ok(())
}

/// GPU-hours allocated against busy over `window` back from now, per team
/// or person (admins).
#[server(endpoint = "get_gpu_usage")]
pub async fn get_gpu_usage(window: String, by: UsageBy) -> Result<GpuUsage, AppError> {
    admin()?;
    let now = now();
    let w = trainyard_domain::telemetry::window_ms(&window).unwrap_or(86_400_000);
    Ok(telemetry()?.usage((now - w, now), by, now).await?)
}

/// A job's GPUs over its life, or over `zoom`, for whoever may read it.
#[server(endpoint = "get_job_gpus")]
pub async fn get_job_gpus(id: i64, zoom: Option<(i64, i64)>) -> Result<GpuWindow, AppError> {
    let principal = crate::api::caller()?;
    let record = crate::api::store()?
        .job_as(&principal.user, id, trainyard_store::Access::Read)
        .await?;
    Ok(telemetry()?
        .job_window(&record.job, zoom.filter(|(a, b)| a < b), 600)
        .await?)
}

/// Links to the windows, the current one marked.
#[component]
fn WindowPicker(#[prop(into)] current: Signal<String>, base: String) -> impl IntoView {
    view! {
        <nav class="window-picker" aria-label="Time window" data-testid="window-picker">
            {WINDOWS.iter().map(|w| {
                let href = format!("{base}?window={w}");
                let w = *w;
                view! {
                    <a href=href class:current=move || current.get() == w
                        aria-current=move || (current.get() == w).then_some("page")>{w}</a>
                }
            }).collect_view()}
        </nav>
    }
}

/// The window in the page's query, else `default`.
fn chosen_window(default: &'static str) -> Signal<String> {
    let query = use_query_map();
    Signal::derive(move || {
        query
            .read()
            .get("window")
            .filter(|w| WINDOWS.contains(&w.as_str()))
            .unwrap_or_else(|| default.to_owned())
    })
}

/// `/admin/gpus`: the heatmap of every GPU over the window, and each GPU
/// now with its job and idle flag.
#[component]
pub fn GpusPage() -> impl IntoView {
    let window = chosen_window("24h");
    view! { <crate::pages::AdminOnly><Gpus window/></crate::pages::AdminOnly> }
}

/// The cluster's heatmap and the GPU-hours, for admins.
#[component]
fn Gpus(window: Signal<String>) -> impl IntoView {
    let overview = Resource::new(|| (), |_| get_gpu_overview());
    view! {
        <Title text="GPUs"/>
        <section class="page-head">
            <h1>"GPUs"</h1>
            <WindowPicker current=window base="/admin/gpus".to_owned()/>
        </section>
        <Suspense fallback=|| view! { <p class="muted">"Loading the GPUs…"</p> }>
            {move || Suspend::new(async move {
                match overview.await {
                    Ok(o) if o.nodes.is_empty() => view! {
                        <p class="empty" data-testid="gpus-empty">
                            "No GPU has reported yet: on this machine the server samples its own GPUs; on a cluster each GPU node runs "
                            <code>"trainyard agent"</code>"."
                        </p>
                    }.into_any(),
                    Ok(o) => view! { <Cluster overview=o window=window/> }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
        <Usage window=window/>
    }
}

/// GPU-hours that jobs held over the window against the hours their GPUs
/// were busy, per team or person, with the CSV.
#[component]
fn Usage(window: Signal<String>) -> impl IntoView {
    let query = use_query_map();
    let by = Signal::derive(move || match query.read().get("by").as_deref() {
        Some("person") => UsageBy::Person,
        _ => UsageBy::Team,
    });
    let usage = Resource::new(
        move || (window.get(), by.get()),
        |(w, by)| get_gpu_usage(w, by),
    );
    // Two decimals below 10 hours, so a short test job's 0.03 h is not 0.0.
    let hours = |h: f64| {
        if h < 10.0 {
            format!("{h:.2}")
        } else {
            format!("{h:.1}")
        }
    };
    view! {
        <section class="gpu-usage" data-testid="gpu-usage">
            <div class="section-head">
                <h2>"GPU-hours, allocated and busy"</h2>
                <nav class="window-picker" aria-label="Sum by">
                    {[UsageBy::Team, UsageBy::Person].into_iter().map(|b| view! {
                        <a href=move || format!("/admin/gpus?window={}&by={}", window.get(), b.as_str())
                            class:current=move || by.get() == b
                            aria-current=move || (by.get() == b).then_some("page")>
                            {match b { UsageBy::Team => "by team", UsageBy::Person => "by person" }}
                        </a>
                    }).collect_view()}
                    <a href=move || format!("/api/trainyard/v1/gpus/usage?window={}&by={}&format=csv", window.get(), by.get().as_str())
                        download="gpu-hours.csv" data-testid="usage-csv">"CSV"</a>
                </nav>
            </div>
            <p class="muted">
                "Allocated: GPUs × hours held by jobs, each attempt of a retried or preempted job counted, from the start of the hour the window begins in. Busy: utilization × the hours with samples, so an allocated GPU at 25 % for 4 hours is 1 busy hour. GPUs without telemetry count as allocated, not sampled."
            </p>
            <Suspense fallback=|| view! { <p class="muted">"Summing GPU-hours…"</p> }>
                {move || Suspend::new(async move {
                    match usage.await {
                        Ok(u) if u.rows.is_empty() => view! {
                            <p class="empty">"No job held a GPU in this window."</p>
                        }.into_any(),
                        Ok(u) => view! {
                            <table class="table" data-testid="usage-table">
                                <thead><tr>
                                    <th>{match u.by { UsageBy::Team => "Team", UsageBy::Person => "Person" }}</th>
                                    <th class="num">"Jobs"</th><th class="num">"Allocated GPU-h"</th>
                                    <th class="num">"Sampled GPU-h"</th><th class="num">"Busy GPU-h"</th><th>"Busy"</th>
                                </tr></thead>
                                <tbody>
                                    {u.rows.iter().chain(std::iter::once(&u.total)).map(|r| {
                                        let percent = r.busy_percent();
                                        view! {
                                            <tr data-name=r.name.clone()>
                                                <td>{r.name.clone()}</td>
                                                <td class="num">{r.jobs}</td>
                                                <td class="num" data-testid="allocated">{hours(r.allocated_hours)}</td>
                                                <td class="num">{hours(r.sampled_hours)}</td>
                                                <td class="num" data-testid="busy">{hours(r.busy_hours)}</td>
                                                <td>{match percent {
                                                    Some(p) => view! {
                                                        <span class="util-bar" role="img" aria-label=format!("{p:.0} % busy")>
                                                            <span style=format!("width:{p:.0}%")></span>
                                                        </span>
                                                        " " {format!("{p:.0} %")}
                                                    }.into_any(),
                                                    None => view! { <span class="muted">"no samples"</span> }.into_any(),
                                                }}</td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                        }.into_any(),
                        Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

#[component]
fn Cluster(overview: GpuOverview, window: Signal<String>) -> impl IntoView {
    let total: usize = overview.nodes.iter().map(|n| n.gpus.len()).sum();
    let held = overview
        .nodes
        .iter()
        .flat_map(|n| &n.gpus)
        .filter(|g| g.job.is_some())
        .count();
    let idle = overview
        .nodes
        .iter()
        .flat_map(|n| &n.gpus)
        .filter(|g| g.idle)
        .count();
    // Where each node's rows lie in the heatmap, for the links over it.
    let layout = trainyard_charts::Heatmap {
        title: String::new(),
        from_ms: 0,
        to_ms: 1,
        groups: overview
            .nodes
            .iter()
            .map(|n| trainyard_charts::HeatGroup {
                label: n.name.clone(),
                rows: n
                    .gpus
                    .iter()
                    .map(|_| trainyard_charts::HeatRow {
                        label: String::new(),
                        cells: Vec::new(),
                    })
                    .collect(),
            })
            .collect(),
        row_height: heat_row_height(total),
        width: HEAT_WIDTH,
    }
    .layout();
    let row_height = heat_row_height(total);
    let heat_url = move |format: &str| {
        format!(
            "/api/trainyard/v1/gpus/heatmap?window={}&width={HEAT_WIDTH}&row_height={row_height}&format={format}",
            window.get()
        )
    };
    let nodes = overview.nodes.len();
    let summary = format!(
        "{total} {} on {nodes} {}: {held} held by jobs, {idle} of them idle (below {} % for {} minutes); sampled every {} s",
        crate::pages::plural(total as u64, "GPU", "GPUs"),
        crate::pages::plural(nodes as u64, "node", "nodes"),
        overview.idle_percent,
        overview.idle_minutes,
        overview.sample_secs
    );
    let links: Vec<_> = overview
        .nodes
        .iter()
        .zip(&layout.groups)
        .map(|(n, (top, bottom))| {
            let h = layout.height as f64;
            (
                n.name.clone(),
                format!(
                    "top:{:.3}%;height:{:.3}%;left:0;right:0",
                    *top as f64 / h * 100.0,
                    (*bottom - *top).max(1) as f64 / h * 100.0
                ),
            )
        })
        .collect();
    view! {
        <p class="muted" data-testid="gpus-summary">{summary}</p>
        <figure class="heatmap" data-testid="heatmap">
            <figcaption>
                <span class="chart-title">"Utilization of every GPU, rows grouped by node"</span>
                <span class="chart-actions">
                    <a href=move || heat_url("svg") download="gpu-heatmap.svg">"SVG"</a>
                    <a href=move || heat_url("png") download="gpu-heatmap.png">"PNG"</a>
                </span>
            </figcaption>
            <div class="heatmap-area">
                <img src=move || heat_url("svg") alt="Heatmap of GPU utilization over time" width=HEAT_WIDTH.to_string() height=layout.height.to_string()/>
                {links.into_iter().map(|(node, style)| view! {
                    <a class="heat-node" href=format!("/admin/gpus/{node}") style=style title=format!("{node}: its GPUs' charts") data-node=node.clone()></a>
                }).collect_view()}
            </div>
        </figure>
        <table class="table" data-testid="gpus">
            <thead><tr>
                <th>"Node"</th><th>"GPU"</th><th>"Model"</th><th>"Utilization"</th>
                <th class="num">"Memory"</th><th class="num">"Temp."</th><th class="num">"Power"</th><th>"Job"</th>
            </tr></thead>
            <tbody>
                {overview.nodes.into_iter().flat_map(|n| {
                    let node = n.name.clone();
                    n.gpus.into_iter().map(move |g| {
                        let node = node.clone();
                        let latest = g.latest;
                        view! {
                            <tr data-node=node.clone() data-gpu=g.index.to_string() data-idle=g.idle.to_string()>
                                <td><a href=format!("/admin/gpus/{node}")>{node.clone()}</a></td>
                                <td>{g.index}</td>
                                <td title=g.uuid.clone()>{g.name.clone()}</td>
                                <td data-testid="gpu-util">{match latest {
                                    Some(l) => view! {
                                        <span class="util-bar" role="img" aria-label=format!("{} % busy", l.gpu_util)>
                                            <span style=format!("width:{}%", l.gpu_util)></span>
                                        </span>
                                        " " {format!("{} %", l.gpu_util)}
                                    }.into_any(),
                                    None => view! { <span class="muted">"no recent sample"</span> }.into_any(),
                                }}</td>
                                <td class="num">{latest.map(|l| format!(
                                    "{} / {}",
                                    trainyard_domain::format_bytes(l.mem_used_bytes),
                                    trainyard_domain::format_bytes(g.memory_total_bytes)
                                ))}</td>
                                <td class="num">{latest.map(|l| format!("{} °C", l.temperature_c))}</td>
                                <td class="num">{latest.map(|l| format!("{:.0} / {:.0} W", l.power_w, l.power_limit_w))}</td>
                                <td>
                                    {g.job.map(|id| view! { <a href=format!("/jobs/{id}")>{format!("#{id}")}</a> })}
                                    {g.idle.then(|| view! { " " <span class="badge badge-wait" data-testid="gpu-idle" title="held by a job but below the idle threshold for the idle time">"idle"</span> })}
                                </td>
                            </tr>
                        }
                    }).collect::<Vec<_>>()
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// `/admin/gpus/NODE`: the node's GPUs over the window, one chart per
/// quantity; a drag over any chart zooms them all.
#[component]
pub fn NodeGpusPage() -> impl IntoView {
    let params = use_params_map();
    let node = move || params.read().get("node").unwrap_or_default();
    let window = chosen_window("6h");
    let zoom: RwSignal<Option<(i64, i64)>> = RwSignal::new(None);
    // Blocking, so that a page of no node answers 404.
    let data = Resource::new_blocking(
        move || (node(), window.get(), zoom.get()),
        |(node, window, zoom)| async move {
            let data = get_node_gpus(node, window, zoom).await;
            if matches!(data, Ok(None)) {
                crate::error::page_not_found();
            }
            data
        },
    );
    // The charts draw once the page is alive in the browser: drawn from
    // the data on the server and empty at hydration (or the other way
    // round) would not hydrate.
    let alive = RwSignal::new(false);
    Effect::new(move || alive.set(true));
    let shown = Signal::derive(move || {
        alive
            .get()
            .then(|| data.get().and_then(Result::ok).flatten())
            .flatten()
    });
    let remove = ServerAction::<RemoveGpuNode>::new();
    view! {
        <Title text=move || format!("GPUs of {}", node())/>
        <section class="page-head">
            <h1>{move || format!("GPUs of {}", node())}</h1>
            <WindowPicker current=window base=format!("/admin/gpus/{}", node())/>
            {move || zoom.get().is_some().then(|| view! {
                <button type="button" class="link" data-testid="reset-zoom" on:click=move |_| zoom.set(None)>"Reset zoom"</button>
            })}
        </section>
        <p><a href="/admin/gpus">"← every GPU"</a></p>
        <Suspense fallback=|| view! { <p class="muted">"Loading the node…"</p> }>
            {move || Suspend::new(async move {
                match data.await {
                    Ok(Some(_)) => ().into_any(),
                    Ok(None) => view! { <p class="error">"No such node has GPUs. " <a href="/admin/gpus">"See every GPU"</a></p> }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
        <div class="chart-grid">
            {GpuQuantity::ALL.into_iter().map(|q| {
                let download = move |format: &str| {
                    let (from, to) = shown.get().map(|w| (w.from_ms, w.to_ms)).unwrap_or_default();
                    format!("/api/trainyard/v1/nodes/{}/gpus/chart?quantity={}&from={from}&to={to}&format={format}", node(), q.as_str())
                };
                view! { <GpuChart quantity=q data=shown zoom=zoom download=download/> }.into_any()
            }).collect_view()}
        </div>
        // Open when the removal was refused, so that its reason shows.
        <details class="node-remove" data-testid="node-remove"
            open=move || remove.value().with(|v| matches!(v, Some(Err(_))))>
            <summary>"Remove this node"</summary>
            <p class="muted">
                "For a node that is gone for good: its GPUs, their history and its agent tokens go; "
                "ended jobs keep their records. Refused while jobs start or run there, and for a node "
                "the executor still has (remove it there first). A node still there comes back when its agent "
                "registers with a new token."
            </p>
            <ActionForm action=remove attr:class="inline-form">
                <input type="hidden" name="node" value=node/>
                <button type="submit" class="danger" data-testid="node-remove-button"
                    on:click=move |ev| confirm_remove(&node(), ev)>"Remove node"</button>
            </ActionForm>
            {move || remove.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
        </details>
    }
}

/// Asks before a node is removed (declining leaves the form unsent).
#[allow(unused_variables)]
fn confirm_remove(node: &str, ev: leptos::ev::MouseEvent) {
    #[cfg(feature = "hydrate")]
    {
        let question = format!(
            "Remove the node {node}, its GPUs, their history and its agent tokens? Only for a node that is gone for good."
        );
        let yes = web_sys::window()
            .and_then(|w| w.confirm_with_message(&question).ok())
            .unwrap_or(false);
        if !yes {
            ev.prevent_default();
        }
    }
}

/// A job's GPUs over its life (or the zoom), reread when `tick` moves; read
/// in the browser only, so the page renders without waiting for it. Made
/// by the job page once, so that its refreshes keep what was read.
pub fn job_gpus(
    id: impl Fn() -> Option<i64> + Send + Sync + 'static,
    tick: RwSignal<u32>,
    zoom: RwSignal<Option<(i64, i64)>>,
) -> LocalResource<Result<Option<GpuWindow>, AppError>> {
    LocalResource::new(move || {
        tick.track();
        let (id, zoom) = (id(), zoom.get());
        async move {
            match id {
                Some(id) => get_job_gpus(id, zoom).await.map(Some),
                None => Ok(None),
            }
        }
    })
}

/// A job's GPUs on its page: utilization and memory over its life, and
/// the idle flag while it runs.
#[component]
pub fn JobGpus(
    id: i64,
    data: LocalResource<Result<Option<GpuWindow>, AppError>>,
    zoom: RwSignal<Option<(i64, i64)>>,
) -> impl IntoView {
    let shown = Signal::derive(move || data.get().and_then(Result::ok).flatten());
    let idle = move || shown.get().filter(|w| w.idle);
    view! {
        <section class="job-gpus" data-testid="job-gpus">
            <h2>"GPUs"
                {move || zoom.get().is_some().then(|| view! {
                    " " <button type="button" class="link" data-testid="reset-zoom" on:click=move |_| zoom.set(None)>"Reset zoom"</button>
                })}
            </h2>
            {move || idle().map(|w| view! {
                <p class="notice" role="status" data-testid="job-gpus-idle">
                    {format!(
                        "Its GPUs are held but idle: below {} % for the last {} minutes. Is the job using them (a data loader that starves them, a step on the CPU)? Others are waiting for GPUs.",
                        w.idle_percent, w.idle_minutes
                    )}
                </p>
            })}
            {move || data.get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
            <div class="chart-grid">
                {[GpuQuantity::Utilization, GpuQuantity::Memory].into_iter().map(|q| {
                    let download = move |format: &str| {
                        format!("/api/trainyard/v1/jobs/{id}/gpus/chart?quantity={}&format={format}", q.as_str())
                    };
                    view! { <GpuChart quantity=q data=shown zoom=zoom download=download/> }.into_any()
                }).collect_view()}
            </div>
        </section>
    }
}

/// One quantity of a window's GPUs, drawn in the page; a drag sets the
/// zoom, a double click clears it.
#[component]
fn GpuChart(
    quantity: GpuQuantity,
    #[prop(into)] data: Signal<Option<GpuWindow>>,
    zoom: RwSignal<Option<(i64, i64)>>,
    download: impl Fn(&str) -> String + Copy + Send + Sync + 'static,
) -> impl IntoView {
    let area = NodeRef::<leptos::html::Div>::new();
    let drag: RwSignal<Option<(f64, f64)>> = RwSignal::new(None);
    let drawn = Memo::new(move |_| {
        let w = data.get()?;
        let mut chart = gpu_chart("", quantity, &w, Some(WIDTH), Some(HEIGHT));
        chart.title.clear();
        chart.legend = false;
        let points: usize = w.gpus.iter().map(|g| g.points.len()).sum();
        Some(
            trainyard_charts::line_svg(&chart)
                .map(|(svg, frame)| (themed(svg), frame, points))
                .map_err(|e| e.to_string()),
        )
    });
    let frame =
        move || drawn.with(|d| d.as_ref().and_then(|r| r.as_ref().ok()).map(|(_, f, _)| *f));
    let to_px = move |ev: &leptos::ev::MouseEvent| svg_px(area, ev);
    let on_down = move |ev: leptos::ev::MouseEvent| {
        if ev.button() != 0 {
            return;
        }
        if let (Some(px), Some(f)) = (to_px(&ev), frame())
            && px >= f.left
            && px <= f.right
        {
            ev.prevent_default();
            drag.set(Some((px, px)));
        }
    };
    let on_move = move |ev: leptos::ev::MouseEvent| {
        if let (Some((start, _)), Some(px)) = (drag.get_untracked(), to_px(&ev)) {
            drag.set(Some((start, px)));
        }
    };
    let on_up = move |_| {
        let (Some((a, b)), Some(f)) = (drag.get_untracked(), frame()) else {
            drag.set(None);
            return;
        };
        drag.set(None);
        if (a - b).abs() < MIN_DRAG_PX {
            return;
        }
        let (lo, hi) = (a.min(b).max(f.left), a.max(b).min(f.right));
        zoom.set(Some((f.x_at(lo) as i64, f.x_at(hi) as i64)));
    };
    let legend = move || {
        data.get()
            .map(|w| w.gpus.iter().map(|g| g.index).collect::<Vec<_>>())
            .unwrap_or_default()
    };
    view! {
        <figure class="chart" data-quantity=quantity.as_str()
            data-points=move || drawn.with(|d| d.as_ref().and_then(|r| r.as_ref().ok()).map(|(_, _, n)| n.to_string()))
            data-zoomed=move || zoom.get().is_some().to_string()>
            <figcaption>
                <span class="chart-title">{quantity.title()}</span>
                <span class="chart-actions">
                    <a href=move || download("svg") download=format!("{}.svg", quantity.as_str())>"SVG"</a>
                    <a href=move || download("png") download=format!("{}.png", quantity.as_str())>"PNG"</a>
                </span>
            </figcaption>
            <div class="chart-area" node_ref=area
                on:mousedown=on_down on:mousemove=on_move on:mouseup=on_up
                on:mouseleave=move |_| drag.set(None)
                on:dblclick=move |_| zoom.set(None)>
                {move || match drawn.get() {
                    Some(Ok((svg, _, _))) => view! { <div class="chart-svg" inner_html=svg></div> }.into_any(),
                    Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
                    None => view! { <p class="muted">"Loading…"</p> }.into_any(),
                }}
                {move || drag.get().filter(|(a, b)| (a - b).abs() >= 1.0).map(|(a, b)| {
                    let (lo, hi) = (a.min(b), a.max(b));
                    view! {
                        <div class="chart-brush" style=format!(
                            "left:{:.2}%;width:{:.2}%",
                            lo / WIDTH as f64 * 100.0,
                            (hi - lo) / WIDTH as f64 * 100.0
                        )></div>
                    }
                })}
            </div>
            <ul class="chart-legend">
                {move || legend().into_iter().map(|i| view! {
                    <li><span class="swatch" style=format!("background:{}", crate::explorer::chart::swatch(i as usize))></span>{format!("GPU {i}")}</li>
                }).collect_view()}
            </ul>
        </figure>
    }
}

/// The pointer's x in the chart's own pixels (the SVG scales with its box).
#[allow(unused_variables)]
fn svg_px(area: NodeRef<leptos::html::Div>, ev: &leptos::ev::MouseEvent) -> Option<f64> {
    #[cfg(feature = "hydrate")]
    {
        let el = area.get_untracked()?;
        let rect = el.get_bounding_client_rect();
        if rect.width() <= 0.0 {
            return None;
        }
        Some((ev.client_x() as f64 - rect.left()) * WIDTH as f64 / rect.width())
    }
    #[cfg(not(feature = "hydrate"))]
    None
}
