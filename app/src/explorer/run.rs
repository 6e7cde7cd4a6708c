//! `/experiments/EID/runs/RID`: one run. Its status, owner, timings and
//! job; a chart per metric (mounted as they scroll into view), the first
//! above the fold; then params, metric values, tags and artifacts. While
//! the run is live, the server pushes a line when it changes
//! (`/api/trainyard/v1/runs/RID/events`), and the page and its visible
//! charts read again; nothing polls.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_params_map;
use trainyard_domain::explorer::{Cell, RunDetail, XAxis};
use trainyard_domain::format_utc;

use super::api::{
    DeleteRunPage, EditRun, PurgeRunPage, RestoreRunPage, SetRunTag, artifact_preview,
    get_run_detail, get_run_metric_keys,
};
use super::chart::{ChartOptions, Line, MetricChart};
use super::status_class;
use crate::error::AppError;
use crate::jobs::duration_text;
use crate::pages::{ErrorNote, confirm_first};

/// Whether a run may still change.
fn is_live(status: &str) -> bool {
    matches!(status, "RUNNING" | "SCHEDULED")
}

#[component]
pub fn RunPage() -> impl IntoView {
    let params = use_params_map();
    let run_id = Memo::new(move |_| params.read().get("run").unwrap_or_default());
    let experiment = Memo::new(move |_| {
        params
            .read()
            .get("experiment")
            .and_then(|e| e.parse::<i64>().ok())
    });
    // Bumped by the server's pushes: fresh figures and chart data.
    let tick = RwSignal::new(0u32);
    // Bumped when the run logs a metric it had not logged before.
    let keys_tick = RwSignal::new(0u32);
    let edit = ServerAction::<EditRun>::new();
    let delete = ServerAction::<DeleteRunPage>::new();
    let restore = ServerAction::<RestoreRunPage>::new();
    let purge = ServerAction::<PurgeRunPage>::new();
    let tag = ServerAction::<SetRunTag>::new();
    // Blocking, so that a page of no run answers 404.
    let detail = Resource::new_blocking(
        move || {
            (
                run_id.get(),
                tick.get(),
                edit.version().get(),
                tag.version().get(),
                restore.version().get(),
            )
        },
        move |(id, _, _, _, _)| async move {
            let detail = get_run_detail(id.clone()).await;
            // Under its own experiment's address only.
            match detail {
                Ok(d) if Some(d.experiment_id) != experiment.get_untracked() => {
                    crate::error::page_not_found();
                    Err(AppError::NotFound(format!(
                        "run {id} is not in this experiment; it is in experiment {} ({})",
                        d.experiment_id, d.experiment_name
                    )))
                }
                other => other,
            }
        },
    );
    // Apart from the facts, so that live updates do not remount the charts;
    // asked again only when a new metric key appears.
    let metric_keys = Resource::new(
        move || (run_id.get(), keys_tick.get()),
        |(id, _)| get_run_metric_keys(id),
    );
    follow_run(run_id, detail, tick, keys_tick);
    let preview: RwSignal<Option<String>> = RwSignal::new(None);
    let options = RwSignal::new(ChartOptions::default());
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading the run…"</p> }>
            {move || Suspend::new(async move {
                match detail.await {
                    Ok(d) => view! { <RunHead detail=d edit delete restore purge/> }.into_any(),
                    Err(e) => view! { <Title text="Run"/><ErrorNote error=e/> }.into_any(),
                }
            })}
        </Transition>
        <section class="charts-section">
            <div class="section-head">
                <h2>"Metrics"</h2>
                <ChartControls options/>
            </div>
            <Suspense fallback=|| view! { <p class="muted">"Loading charts…"</p> }>
                {move || Suspend::new(async move {
                    match metric_keys.await {
                        Ok((_, keys)) if keys.is_empty() => view! {
                            <p class="empty" data-testid="no-metrics">
                                "This run has logged no metrics yet. "
                                <code>"mlflow.log_metric(\"loss\", value, step=step)"</code>
                                " draws one here."
                            </p>
                        }.into_any(),
                        Ok((name, keys)) => {
                            let line = Line { run_id: run_id.get_untracked(), label: name, color: 0 };
                            let lines = Signal::derive(move || vec![line.clone()]);
                            view! {
                                <div class="charts" data-testid="charts">
                                    {keys.into_iter().map(|key| view! {
                                        <MetricChart key lines group=Signal::derive(|| None)
                                            options=Signal::from(options) tick=Signal::from(tick)/>
                                    }).collect_view()}
                                </div>
                            }.into_any()
                        }
                        Err(_) => ().into_any(),
                    }
                })}
            </Suspense>
        </section>
        // The charts come before the tables: they are what a researcher
        // opens a run for, and they start above the fold.
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                detail.await.ok().map(|d| view! { <RunTables detail=d tag preview/> })
            })}
        </Transition>
    }
    .into_any()
}

/// The axis, smoothing and scale of every chart on a page.
#[component]
pub(crate) fn ChartControls(options: RwSignal<ChartOptions>) -> impl IntoView {
    view! {
        <div class="chart-controls" data-testid="chart-controls">
            <label>"x-axis "
                <select data-testid="x-axis" on:change=move |ev| {
                    let axis = XAxis::parse(&event_target_value(&ev)).unwrap_or_default();
                    options.update(|o| o.x_axis = axis);
                }>
                    <option value="step" selected=move || options.get().x_axis == XAxis::Step>"step"</option>
                    <option value="relative" selected=move || options.get().x_axis == XAxis::Relative>"relative time"</option>
                    <option value="wall" selected=move || options.get().x_axis == XAxis::Wall>"wall time"</option>
                </select>
            </label>
            <label>"smoothing "
                <input type="range" min="0" max="0.99" step="0.01" data-testid="smoothing"
                    prop:value=move || options.get().smoothing.to_string()
                    on:input=move |ev| {
                        let v: f64 = event_target_value(&ev).parse().unwrap_or(0.0);
                        options.update(|o| o.smoothing = v.clamp(0.0, 0.99));
                    }/>
                <output>{move || format!("{:.2}", options.get().smoothing)}</output>
            </label>
            <label class="check">
                <input type="checkbox" data-testid="log-scale" prop:checked=move || options.get().log_y
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        options.update(|o| o.log_y = on);
                    }/>
                "log scale"
            </label>
            <label class="check" title="Fit the y axis to the bulk of the values, so one diverged run does not flatten the rest">
                <input type="checkbox" data-testid="ignore-outliers" prop:checked=move || options.get().ignore_outliers
                    on:change=move |ev| {
                        let on = event_target_checked(&ev);
                        options.update(|o| o.ignore_outliers = on);
                    }/>
                "ignore outliers"
            </label>
        </div>
    }
    .into_any()
}

/// The run's name, status, description, its edit form and its facts in
/// one strip: what sits above its charts.
#[component]
fn RunHead(
    detail: RunDetail,
    edit: ServerAction<EditRun>,
    delete: ServerAction<DeleteRunPage>,
    restore: ServerAction<RestoreRunPage>,
    purge: ServerAction<PurgeRunPage>,
) -> impl IntoView {
    let d = detail;
    let error = move || {
        edit.value()
            .get()
            .and_then(Result::err)
            .or_else(|| delete.value().get().and_then(Result::err))
            .or_else(|| restore.value().get().and_then(Result::err))
            .or_else(|| purge.value().get().and_then(Result::err))
    };
    // The description box is filled in the browser only: a textarea's
    // server-rendered text is not escaped by this Leptos.
    let in_browser = RwSignal::new(false);
    Effect::new(move |_| in_browser.set(true));
    let note_text = d.note.clone().unwrap_or_default();
    let duration = d
        .end_time
        .map(|end| duration_text(end - d.start_time))
        .unwrap_or_else(|| {
            if is_live(&d.status) {
                "running".to_owned()
            } else {
                "–".to_owned()
            }
        });
    view! {
        <Title text=d.name.clone()/>
        <nav class="crumbs" aria-label="Breadcrumbs">
            <a href="/experiments">"Experiments"</a> " / "
            <a href=format!("/experiments/{}", d.experiment_id)>{d.experiment_name.clone()}</a> " / "
        </nav>
        <section class="page-head">
            <h1 data-testid="run-name">{d.name.clone()}</h1>
            <span class=status_class(&d.status) data-testid="run-status">{d.status.clone()}</span>
            {(d.lifecycle_stage != "active").then(|| view! { <span class="badge badge-off">"deleted"</span> })}
            {d.may_restore.then({
                let run_id = d.run_id.clone();
                move || view! {
                <ActionForm action=restore attr:class="inline-form">
                    <input type="hidden" name="run_id" value=run_id/>
                    <button type="submit" class="secondary" data-testid="run-restore">"Restore run"</button>
                </ActionForm>
            }})}
            {d.may_purge.then({
                let (run_id, name) = (d.run_id.clone(), d.name.clone());
                move || view! {
                <ActionForm action=purge attr:class="inline-form">
                    <input type="hidden" name="run_id" value=run_id/>
                    <button type="submit" class="danger" data-testid="run-purge"
                        on:click=confirm_first(format!(
                            "Delete the run {name} forever? Its metrics, params, tags and artifacts are removed for good (as mlflow gc does), and its artifacts stop counting against your quota. This cannot be undone."
                        ))>"Delete forever"</button>
                </ActionForm>
            }})}
        </section>
        {d.note_html.clone().map(|html| view! { <div class="run-note markdown" data-testid="run-note" inner_html=html></div> })}
        {move || error().map(|e| view! { <crate::pages::ErrorNote error=e/> })}
        {d.may_change.then(|| {
            let note_text = note_text.clone();
            let (run_id, name) = (d.run_id.clone(), d.name.clone());
            let (delete_id, delete_name) = (d.run_id.clone(), d.name.clone());
            view! {
                <details class="run-edit" data-testid="run-edit">
                    <summary>"Rename, describe or delete"</summary>
                    <ActionForm action=edit attr:class="form">
                        <input type="hidden" name="run_id" value=run_id.clone()/>
                        <label>"Name"
                            <input type="text" name="name" required maxlength="250" value=name.clone() data-testid="run-edit-name"/>
                        </label>
                        {move || in_browser.get().then(|| view! {
                            <label>"Description"
                                <textarea name="note" rows="4" maxlength="65536" prop:value=note_text.clone()
                                    data-testid="run-edit-note"></textarea>
                            </label>
                        })}
                        <div class="inline-form">
                            <button type="submit" data-testid="run-edit-save">"Save"</button>
                        </div>
                    </ActionForm>
                    <ActionForm action=delete attr:class="inline-form">
                        <input type="hidden" name="run_id" value=delete_id.clone()/>
                        <button type="submit" class="danger" data-testid="run-delete"
                            on:click=confirm_first(format!(
                                "Delete the run {delete_name}? It leaves the experiment's table, and Restore (or MLflow's restore-run) brings it back. Its artifacts count against your artifact quota until you delete it forever (its page, or the experiment's Deleted runs)."
                            ))>"Delete run"</button>
                    </ActionForm>
                </details>
            }
        })}
        <dl class="facts strip" data-testid="run-facts">
            <div><dt>"Run ID"</dt><dd><code>{d.run_id.clone()}</code></dd></div>
            <div><dt>"Owner"</dt><dd>{d.user.clone()}</dd></div>
            <div><dt>"Started"</dt><dd>{format_utc(d.start_time)}</dd></div>
            <div><dt>"Ended"</dt><dd>{d.end_time.map(format_utc).unwrap_or_else(|| "–".to_owned())}</dd></div>
            <div><dt>"Duration"</dt><dd>{duration}</dd></div>
            {d.parent.clone().map(|p| view! {
                <div><dt>"Parent run"</dt><dd>
                    <a href=format!("/experiments/{}/runs/{}", p.experiment_id, p.run_id) data-testid="run-parent">{p.name}</a>
                </dd></div>
            })}
            {(d.children > 0).then(|| view! {
                <div><dt>"Child runs"</dt><dd>
                    <a data-testid="run-children"
                        href=format!(
                            "/experiments/{}{}",
                            d.experiment_id,
                            super::query_string([("q", trainyard_domain::explorer::children_query(&d.run_id).as_str())])
                        )>
                        {format!("{} {}", d.children, if d.children == 1 { "run" } else { "runs" })}
                    </a>
                </dd></div>
            })}
            <div><dt>"Job"</dt>
            <dd>{match d.job_id {
                Some(id) if d.job_deleted => view! {
                    <span class="muted" data-testid="run-job">{format!("job {id}, since deleted")}</span>
                }.into_any(),
                Some(id) => view! { <a href=format!("/jobs/{id}") data-testid="run-job">{format!("job {id}")}</a> }.into_any(),
                None => view! { <span class="muted">"logged from outside (no job)"</span> }.into_any(),
            }}</dd></div>
        </dl>
    }
    .into_any()
}

/// What the run holds besides its charts: params, metric values, tags,
/// artifacts, and the datasets, models and traces it has.
#[component]
fn RunTables(
    detail: RunDetail,
    tag: ServerAction<SetRunTag>,
    /// The artifact shown in place (an image, or a text's start), if any;
    /// the page's, so a live run's refresh keeps it open.
    preview: RwSignal<Option<String>>,
) -> impl IntoView {
    let d = detail;
    let artifact_base = format!(
        "/api/2.0/mlflow-artifacts/artifacts/{}/{}/artifacts/",
        d.experiment_id, d.run_id
    );
    let preview_base = artifact_base.clone();
    let preview_run = d.run_id.clone();
    view! {
        <div class="two-col">
            <section>
                <h2>"Parameters"</h2>
                {if d.params.is_empty() {
                    view! { <p class="muted">"No parameters. " <code>"mlflow.log_param(\"lr\", 0.01)"</code> " records one."</p> }.into_any()
                } else {
                    view! { <KeyValues rows=d.params.clone() testid="params"/> }.into_any()
                }}
                <h2>"Metric values"</h2>
                {if d.metrics.is_empty() {
                    view! { <p class="muted">"No metrics yet."</p> }.into_any()
                } else {
                    view! {
                        <table class="table narrow" data-testid="latest">
                            <thead><tr>
                                <th>"Metric"</th><th class="num">"Last"</th><th class="num">"Step"</th>
                                <th class="num">"Min"</th><th class="num">"Max"</th>
                            </tr></thead>
                            <tbody>
                                {d.metrics.iter().map(|m| {
                                    let extreme = |v: &Option<(Cell, i64)>| match v {
                                        Some((value, step)) => view! {
                                            {value.display()} <span class="muted at-step">{format!(" @{step}")}</span>
                                        }.into_any(),
                                        None => "–".into_any(),
                                    };
                                    view! {
                                        <tr data-metric=m.key.clone()>
                                            <td>{m.key.clone()}</td>
                                            <td class="num" data-figure="last">{m.value.display()}</td>
                                            <td class="num">{m.step}</td>
                                            <td class="num" data-figure="min">{extreme(&m.min)}</td>
                                            <td class="num" data-figure="max">{extreme(&m.max)}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any()
                }}
            </section>
            <section>
                <h2>"Tags"</h2>
                {if d.tags.is_empty() {
                    view! { <p class="muted">"No tags."</p> }.into_any()
                } else if d.may_change {
                    view! { <EditableTags run_id=d.run_id.clone() rows=d.tags.clone() tag/> }.into_any()
                } else {
                    view! { <KeyValues rows=d.tags.clone() testid="tags"/> }.into_any()
                }}
                {move || tag.value().get().and_then(Result::err).map(|e| view! { <ErrorNote error=e/> })}
                {d.may_change.then(|| view! {
                    <ActionForm action=tag attr:class="inline-form tag-form">
                        <input type="hidden" name="run_id" value=d.run_id.clone()/>
                        <input type="text" name="key" required maxlength="250" placeholder="key"
                            aria-label="Tag key" data-testid="tag-key"/>
                        <input type="text" name="value" maxlength="65536" placeholder="value"
                            aria-label="Tag value" data-testid="tag-value"/>
                        <button type="submit" data-testid="tag-set">"Set tag"</button>
                    </ActionForm>
                })}
                <h2>"Artifacts"</h2>
                {if d.artifacts.is_empty() {
                    view! { <p class="muted" data-testid="no-artifacts">"No artifacts. " <code>"mlflow.log_artifact(\"model.pt\")"</code> " stores one here."</p> }.into_any()
                } else {
                    view! {
                        <ul class="artifacts" data-testid="artifacts">
                            {d.artifacts.iter().map(|a| {
                                let depth = a.path.matches('/').count();
                                let name = a.path.rsplit('/').next().unwrap_or(&a.path).to_owned();
                                let style = format!("padding-left:{}rem", depth as f64 * 1.2);
                                if a.is_dir {
                                    view! { <li style=style class="dir">{name} "/"</li> }.into_any()
                                } else {
                                    let path = a.path.clone();
                                    let shown = {
                                        let path = path.clone();
                                        Signal::derive(move || preview.with(|p| p.as_ref() == Some(&path)))
                                    };
                                    let toggle = {
                                        let path = path.clone();
                                        move |_| preview.update(|p| {
                                            *p = if p.as_ref() == Some(&path) { None } else { Some(path.clone()) };
                                        })
                                    };
                                    view! {
                                        <li style=style data-artifact=path.clone()>
                                            <a href=format!("{artifact_base}{}", trainyard_domain::encode_path(&a.path)) download=name.clone()>{name.clone()}</a>
                                            " " <span class="muted">{trainyard_domain::format_bytes(a.size)}</span>
                                            " " <button type="button" class="link" data-testid="preview-artifact"
                                                aria-label=format!("show {name} on this page")
                                                aria-pressed=move || shown.get().to_string()
                                                on:click=toggle>
                                                {move || if shown.get() { "close" } else { "view" }}
                                            </button>
                                        </li>
                                    }.into_any()
                                }
                            }).collect_view()}
                            {d.artifacts_truncated.then(|| view! { <li class="muted">"… and more (the list stops at 1,000)"</li> })}
                        </ul>
                        {move || preview.get().map(|path| view! {
                            <ArtifactView run_id=preview_run.clone() url=format!("{preview_base}{}", trainyard_domain::encode_path(&path)) path/>
                        })}
                    }.into_any()
                }}
            </section>
        </div>
        {view! { <RunInputsOutputs experiment=d.experiment_id datasets=d.datasets models=d.models traces=d.traces/> }.into_any()}
    }
    .into_any()
}

/// An artifact shown in place: an image as itself, anything else as the
/// start of its text (or a word that it is not text).
#[component]
fn ArtifactView(run_id: String, url: String, path: String) -> impl IntoView {
    if trainyard_domain::explorer::is_image(&path) {
        return view! {
            <figure class="artifact-preview" data-testid="artifact-preview">
                <figcaption><code>{path.clone()}</code></figcaption>
                <img src=url alt=format!("{path}, an image this run logged")/>
            </figure>
        }
        .into_any();
    }
    let text = Resource::new(
        move || (run_id.clone(), path.clone()),
        |(run, path)| async move { artifact_preview(run, path.clone()).await.map(|p| (path, p)) },
    );
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Reading…"</p> }>
            {move || Suspend::new(async move {
                match text.await {
                    Ok((path, p)) => view! {
                        <figure class="artifact-preview" data-testid="artifact-preview">
                            <figcaption><code>{path.clone()}</code></figcaption>
                            {match p.text {
                                Some(t) => view! {
                                    // A CSV or TSV as a table, as MLflow's UI shows it.
                                    {match trainyard_domain::explorer::delimited_rows(&path, &t, !p.truncated) {
                                        Some(rows) => view! { <ArtifactTable rows/> }.into_any(),
                                        None => view! { <pre class="log artifact-text" tabindex="0">{t}</pre> }.into_any(),
                                    }}
                                    {p.truncated.then(|| view! {
                                        <p class="muted">{format!(
                                            "The first {} of {}; download it for the rest.",
                                            trainyard_domain::format_bytes(trainyard_domain::explorer::PREVIEW_BYTES as u64),
                                            trainyard_domain::format_bytes(p.size),
                                        )}</p>
                                    })}
                                }.into_any(),
                                None => view! {
                                    <p class="muted">"Not text (and not an image this page shows): download it to open it."</p>
                                }.into_any(),
                            }}
                        </figure>
                    }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
    .into_any()
}

/// The rows of a CSV or TSV artifact, the first as the header.
#[component]
fn ArtifactTable(rows: Vec<Vec<String>>) -> impl IntoView {
    use trainyard_domain::explorer::TABLE_ROWS;
    let mut rows = rows.into_iter();
    let head = rows.next().unwrap_or_default();
    let body: Vec<Vec<String>> = rows.collect();
    let shown = body.len();
    view! {
        <div class="artifact-table" tabindex="0">
            <table class="table narrow" data-testid="artifact-table">
                <thead><tr>{head.into_iter().map(|h| view! { <th>{h}</th> }).collect_view()}</tr></thead>
                <tbody>
                    {body.into_iter().map(|row| view! {
                        <tr>{row.into_iter().map(|c| view! { <td>{c}</td> }).collect_view()}</tr>
                    }).collect_view()}
                </tbody>
            </table>
        </div>
        {(shown + 1 >= TABLE_ROWS).then(|| view! {
            <p class="muted">{format!("The first {shown} rows; download it for the rest.")}</p>
        })}
    }
}

/// What the run read and made besides metrics: datasets, logged models,
/// traces. Each section is there only when the run has some.
#[component]
fn RunInputsOutputs(
    experiment: i64,
    datasets: Vec<trainyard_domain::explorer::RunDataset>,
    models: Vec<trainyard_domain::explorer::RunModel>,
    traces: Vec<trainyard_domain::explorer::RunTrace>,
) -> impl IntoView {
    let datasets = (!datasets.is_empty()).then(|| view! {
        <section>
            <h2>"Datasets"</h2>
            <table class="table" data-testid="datasets">
                <thead><tr>
                    <th>"Name"</th><th>"Used for"</th><th>"Digest"</th><th>"Source"</th>
                    <th class="num">"Rows"</th><th>"Columns"</th>
                </tr></thead>
                <tbody>
                    {datasets.into_iter().map(|d| {
                        let columns = d.columns.iter()
                            .map(|(name, kind)| if kind.is_empty() { name.clone() } else { format!("{name} ({kind})") })
                            .collect::<Vec<_>>()
                            .join(", ");
                        view! {
                            <tr data-dataset=d.name.clone()>
                                <td>{d.name.clone()}</td>
                                <td>
                                    {d.context.unwrap_or_else(|| "–".to_owned())}
                                    {(!d.tags.is_empty()).then(|| view! {
                                        <div class="muted" data-testid="dataset-tags">
                                            {d.tags.iter().map(|(k, v)| format!("{k}={v}")).collect::<Vec<_>>().join(", ")}
                                        </div>
                                    })}
                                </td>
                                <td><code>{d.digest}</code></td>
                                <td><span class="muted">{d.source_type}": "</span>{d.source}</td>
                                <td class="num">{d.rows.map(|r| r.to_string()).unwrap_or_else(|| "–".to_owned())}</td>
                                <td>{columns}</td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }.into_any());
    let models = (!models.is_empty()).then(|| view! {
        <section>
            <h2>"Models"</h2>
            <table class="table" data-testid="models">
                <thead><tr><th>"Name"</th><th>"Status"</th><th>"Run"</th><th>"Metrics"</th><th>"Model ID"</th><th>"Files"</th></tr></thead>
                <tbody>
                    {models.into_iter().map(|m| {
                        let files = format!(
                            "/api/2.0/mlflow-artifacts/artifacts/{}/models/{}/artifacts/MLmodel",
                            m.experiment_id, m.model_id
                        );
                        let metrics = m.metrics.iter()
                            .map(|(k, v)| format!("{k} {}", v.display()))
                            .collect::<Vec<_>>()
                            .join(" · ");
                        let status_class = match m.status.as_str() {
                            "READY" => "badge badge-ok",
                            "FAILED" => "badge badge-bad",
                            _ => "badge",
                        };
                        view! {
                            <tr data-model=m.name.clone()>
                                <td>{m.name.clone()}{(!m.model_type.is_empty()).then(|| view! { " " <span class="muted">{m.model_type.clone()}</span> })}</td>
                                <td><span class=status_class>{m.status.to_lowercase()}</span></td>
                                <td>{if m.made_here { "made here" } else { "read" }}</td>
                                <td>{if metrics.is_empty() { "–".to_owned() } else { metrics }}</td>
                                <td><code>{m.model_id}</code></td>
                                <td><a href=files download="MLmodel">"MLmodel"</a></td>
                            </tr>
                        }
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }.into_any());
    let traces = (!traces.is_empty()).then(|| view! {
        <section>
            <h2>"Traces"</h2>
            <table class="table narrow" data-testid="traces">
                <thead><tr><th>"Name"</th><th>"State"</th><th>"At"</th><th class="num">"Took"</th><th>"Trace ID"</th></tr></thead>
                <tbody>
                    {traces.into_iter().map(|t| view! {
                        <tr data-trace=t.trace_id.clone()>
                            <td><a href=format!("/experiments/{experiment}/traces/{}", t.trace_id)>{t.name}</a></td>
                            <td>{t.state}</td>
                            <td>{format_utc(t.request_time)}</td>
                            <td class="num">{t.execution_ms.map(|ms| format!("{ms} ms")).unwrap_or_else(|| "–".to_owned())}</td>
                            <td><code>{t.trace_id.clone()}</code></td>
                        </tr>
                    }).collect_view()}
                </tbody>
            </table>
        </section>
    }.into_any());
    view! { {datasets} {models} {traces} }.into_any()
}

/// A run's tags, each but the system's (`mlflow.…`, `trainyard.…`) with a
/// button that removes it.
#[component]
fn EditableTags(
    run_id: String,
    rows: Vec<(String, String)>,
    tag: ServerAction<SetRunTag>,
) -> impl IntoView {
    view! {
        <table class="table narrow kv" data-testid="tags">
            <tbody>
                {rows.into_iter().map(|(k, v)| {
                    let system = k.starts_with("mlflow.") || k.starts_with("trainyard.");
                    let label = format!("Remove the tag {k}");
                    let run_id = run_id.clone();
                    let key = k.clone();
                    view! {
                        <tr data-tag=k.clone()>
                            <th scope="row">{k.clone()}</th>
                            <td>{v}</td>
                            <td class="actions">{(!system).then(|| view! {
                                <ActionForm action=tag attr:class="inline-form">
                                    <input type="hidden" name="run_id" value=run_id/>
                                    <input type="hidden" name="key" value=key/>
                                    <input type="hidden" name="remove" value="true"/>
                                    <button type="submit" class="link" aria-label=label title="Remove">"×"</button>
                                </ActionForm>
                            })}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

#[component]
fn KeyValues(rows: Vec<(String, String)>, testid: &'static str) -> impl IntoView {
    view! {
        <table class="table narrow kv" data-testid=testid>
            <tbody>
                {rows.into_iter().map(|(k, v)| view! {
                    <tr><th scope="row">{k}</th><td>{v}</td></tr>
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// In the browser, while the run is live: the server's pushes. Each `run`
/// event carries `STATUS KEYS` (its status and how many metric keys it has).
#[allow(unused_variables)]
fn follow_run(
    run_id: Memo<String>,
    detail: Resource<Result<RunDetail, AppError>>,
    tick: RwSignal<u32>,
    keys_tick: RwSignal<u32>,
) {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        use wasm_bindgen::closure::Closure;
        // Live or not is known once the first answer came.
        let live = Memo::new(move |_| {
            detail
                .get()
                .and_then(|d| d.ok())
                .map(|d| (is_live(&d.status), d.metrics.len()))
        });
        Effect::new(move |_| {
            let Some((true, keys)) = live.get() else {
                return;
            };
            let known = StoredValue::new(keys);
            let url = format!("/api/trainyard/v1/runs/{}/events", run_id.get());
            let Ok(source) = web_sys::EventSource::new(&url) else {
                return;
            };
            let closer = source.clone();
            let on_run = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(
                move |e: web_sys::MessageEvent| {
                    let text = e.data().as_string().unwrap_or_default();
                    let mut parts = text.split(' ');
                    let status = parts.next().unwrap_or_default().to_owned();
                    let keys: usize = parts.next().and_then(|k| k.parse().ok()).unwrap_or(0);
                    if keys != known.get_value() {
                        known.set_value(keys);
                        keys_tick.update(|t| *t += 1);
                    }
                    if !is_live(&status) {
                        closer.close();
                    }
                    tick.update(|t| *t += 1);
                },
            );
            let _ = source.add_event_listener_with_callback("run", on_run.as_ref().unchecked_ref());
            let held = send_wrapper::SendWrapper::new((source, on_run));
            on_cleanup(move || held.take().0.close());
        });
    }
}
