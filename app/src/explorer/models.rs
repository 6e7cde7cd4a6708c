//! What MLflow 3 scripts log besides runs: the Models page (the registry
//! with its versions and aliases, and an experiment's logged models sorted
//! by their metrics), an experiment's traces, and one trace's span tree.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Form;
use leptos_router::hooks::{use_navigate, use_params_map, use_query_map};
use trainyard_domain::explorer::{Cell, ModelsView, TRACES_PAGE, TraceView};
use trainyard_domain::format_utc;
use trainyard_domain::tracking::{LoggedModel, TraceInfo};

use crate::error::AppError;
use crate::pages::ErrorNote;

use super::datasets::Fields;

#[cfg(feature = "ssr")]
use crate::api::{caller, store};

/// The registry as the caller may see it, and the logged models of
/// `experiment` (none when None).
#[server(endpoint = "get_models")]
pub async fn get_models(experiment: Option<i64>) -> Result<ModelsView, AppError> {
    use trainyard_domain::explorer::{LOGGED_MODELS_SHOWN, MODELS_SHOWN, VERSIONS_SHOWN};
    let user = caller()?.user;
    let viewer = trainyard_store::Viewer::of(&user);
    let store = store()?;
    // Prompts live in the registry too; as in MLflow, they are not models.
    let not_prompt = {
        use trainyard_domain::query::{CmpOp, Expr, Field, Literal, Predicate};
        Expr::Test(
            Field::Tag("mlflow.prompt.is_prompt".to_owned()),
            Predicate::Cmp(CmpOp::Ne, Literal::Str("true".to_owned())),
        )
    };
    let mut registered = store
        .search_registered_models(Some(&not_prompt), &[], MODELS_SHOWN + 1, 0, &viewer)
        .await?;
    let more_registered = registered.len() as u64 > MODELS_SHOWN;
    registered.truncate(MODELS_SHOWN as usize);
    let names: std::collections::HashSet<&str> =
        registered.iter().map(|m| m.name.as_str()).collect();
    let mut versions = store
        .search_model_versions(Some(&not_prompt), &[], VERSIONS_SHOWN, 0, &viewer)
        .await?;
    versions.retain(|v| names.contains(v.name.as_str()));
    let (logged, more_logged) = match experiment {
        Some(id) => {
            store
                .experiment_as(&user, id, trainyard_store::Access::Read)
                .await?;
            let page = store
                .search_logged_models(
                    &[id],
                    trainyard_store::ModelFilter::default(),
                    &[],
                    LOGGED_MODELS_SHOWN,
                    0,
                    &viewer,
                )
                .await?;
            (page.models, page.next_offset.is_some())
        }
        None => (Vec::new(), false),
    };
    let mut run_ids: Vec<String> = versions
        .iter()
        .filter_map(|v| v.run_id.clone())
        .chain(logged.iter().filter_map(|m| m.source_run_id.clone()))
        .collect();
    run_ids.sort();
    run_ids.dedup();
    // A version's source run may sit in an experiment the viewer cannot
    // read (someone registered from their own run): no link to a page
    // they could not open.
    let runs: Vec<(String, i64)> = store
        .load_runs(&run_ids)
        .await?
        .into_iter()
        .map(|run| (run.info.run_id, run.info.experiment_id))
        .collect();
    let mut experiments: Vec<i64> = runs.iter().map(|(_, e)| *e).collect();
    experiments.sort_unstable();
    experiments.dedup();
    let readable = store.readable_experiments(&experiments, &viewer).await?;
    let run_experiments = runs
        .into_iter()
        .filter(|(_, experiment)| readable.contains(experiment))
        .collect();
    let notes_html = registered
        .iter()
        .map(|m| (m.name.as_str(), None, m.description.as_deref()))
        .chain(versions.iter().map(|v| {
            (
                v.name.as_str(),
                Some(v.version),
                Some(v.description.as_str()),
            )
        }))
        .filter_map(|(name, version, note)| {
            let note = note.filter(|n| !n.trim().is_empty())?;
            Some((name.to_owned(), version, crate::markdown::to_html(note)))
        })
        .collect();
    Ok(ModelsView {
        registered,
        versions,
        run_experiments,
        experiment_id: experiment,
        logged,
        more_registered,
        more_logged,
        notes_html,
    })
}

/// A page of an experiment's traces that match `query` (as
/// `search_traces` filters: tags, status, spans…), newest first, with the
/// experiment's name; true when more follow.
#[server(endpoint = "experiment_traces")]
pub async fn experiment_traces(
    experiment_id: i64,
    query: String,
    offset: u64,
) -> Result<(String, Vec<TraceInfo>, bool), AppError> {
    let user = caller()?.user;
    let store = store()?;
    store
        .experiment_as(&user, experiment_id, trainyard_store::Access::Read)
        .await?;
    let filter = super::api::parse_query(&query, trainyard_domain::query::Scope::Traces)?;
    let experiment = store.get_experiment(experiment_id).await?;
    let viewer = trainyard_store::Viewer::of(&user);
    let page = store
        .search_traces(
            &[experiment_id],
            filter.as_ref(),
            &[],
            TRACES_PAGE + 1,
            offset,
            &viewer,
        )
        .await?;
    let mut traces = page.traces;
    let more = page.cut || traces.len() as u64 > TRACES_PAGE;
    traces.truncate(TRACES_PAGE as usize);
    // The list shows the feedback that stands, in short: the rest of each
    // assessment stays on the server.
    for t in &mut traces {
        t.assessments.retain(|a| a.valid && a.kind == "feedback");
        for a in &mut t.assessments {
            a.body.clear();
            a.rationale = None;
            a.metadata.clear();
            a.value = a.value.chars().take(40).collect();
        }
    }
    Ok((experiment.name, traces, more))
}

/// A trace with its spans, read from its `traces.json` (at most
/// [`trainyard_domain::explorer::MAX_TRACE_FILE`], never through a link).
#[server(endpoint = "get_trace")]
pub async fn get_trace(trace_id: String) -> Result<TraceView, AppError> {
    use trainyard_domain::explorer::MAX_TRACE_FILE;
    let user = caller()?.user;
    let store = store()?;
    store
        .trace_as(&user, &trace_id, trainyard_store::Access::Read)
        .await?;
    let info = store.get_trace_info(&trace_id).await?;
    let root = use_context::<super::api::ArtifactRoot>()
        .ok_or_else(|| AppError::Internal("the artifact folder is not wired in".to_owned()))?;
    let read = read_trace_file(&root.0, info.experiment_id, &info.trace_id).await;
    let (spans, truncated, note) = match read {
        Ok(Some(bytes)) => match serde_json::from_slice::<serde_json::Value>(&bytes) {
            Ok(json) => {
                let (spans, truncated) = trainyard_domain::explorer::place_spans(raw_spans(&json));
                let note = spans
                    .is_empty()
                    .then(|| "Its traces.json holds no spans.".to_owned());
                (spans, truncated, note)
            }
            Err(e) => (
                Vec::new(),
                false,
                Some(format!("Its traces.json is not JSON ({e}).")),
            ),
        },
        Ok(None) => (
            Vec::new(),
            false,
            Some(format!(
                "Its traces.json is larger than {} MiB, or holds more than {} JSON values; download it from the trace's artifacts.",
                MAX_TRACE_FILE >> 20,
                trainyard_domain::explorer::MAX_JSON_VALUES
            )),
        ),
        Err(_) => (
            Vec::new(),
            false,
            Some("The client has not written its spans (traces.json) yet.".to_owned()),
        ),
    };
    let prompts = store.trace_prompts(&trace_id).await?;
    Ok(TraceView {
        info,
        spans,
        note,
        truncated,
        prompts,
    })
}

/// The bytes of a trace's `traces.json` under the artifact folder `root`,
/// or None when it is larger than [`MAX_TRACE_FILE`] or holds more JSON
/// values than [`MAX_JSON_VALUES`] (too much to parse); missing, a link or
/// anything but a plain file is an error.
#[cfg(feature = "ssr")]
pub async fn read_trace_file(
    root: &std::path::Path,
    experiment_id: i64,
    trace_id: &str,
) -> std::io::Result<Option<Vec<u8>>> {
    use trainyard_domain::explorer::{MAX_JSON_VALUES, MAX_TRACE_FILE, json_values};
    let file = root
        .join(experiment_id.to_string())
        .join("traces")
        .join(trace_id)
        .join("artifacts")
        .join("traces.json");
    Ok(read_nofollow(&file, MAX_TRACE_FILE)
        .await?
        .filter(|bytes| json_values(bytes) <= MAX_JSON_VALUES))
}

/// A file's bytes, or None when it is larger than `max`; a link or
/// anything but a plain file is an error.
#[cfg(feature = "ssr")]
async fn read_nofollow(path: &std::path::Path, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use tokio::io::AsyncReadExt;
    let mut file = tokio::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .await?;
    let meta = file.metadata().await?;
    if !meta.is_file() {
        return Err(std::io::Error::other("not a file"));
    }
    if meta.len() > max {
        return Ok(None);
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    (&mut file).take(max + 1).read_to_end(&mut bytes).await?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// The spans of MLflow's `traces.json` (`{"spans": [...]}`, OpenTelemetry
/// fields; the attributes' values are JSON text).
#[cfg(feature = "ssr")]
fn raw_spans(json: &serde_json::Value) -> Vec<trainyard_domain::explorer::RawSpan> {
    use serde_json::Value;
    use trainyard_domain::explorer::{
        MAX_SPAN_ATTRIBUTES, MAX_SPANS, RawSpan, SPAN_TEXT, TraceSpan,
    };
    // Shown in their own places (the type, the inputs and outputs) or
    // MLflow's own bookkeeping.
    const SHOWN_APART: [&str; 4] = [
        "mlflow.spanType",
        "mlflow.spanInputs",
        "mlflow.spanOutputs",
        "mlflow.traceRequestId",
    ];
    let cut = |text: String| -> String {
        match text.char_indices().nth(SPAN_TEXT) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text,
        }
    };
    let text = |v: Option<&Value>| -> String {
        cut(match v {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.clone(),
            Some(other) => other.to_string(),
        })
    };
    let nanos = |v: Option<&Value>| -> i64 {
        match v {
            Some(Value::Number(n)) => n.as_i64().unwrap_or_default(),
            Some(Value::String(s)) => s.parse().unwrap_or_default(),
            _ => 0,
        }
    };
    let Some(spans) = json.get("spans").and_then(Value::as_array) else {
        return Vec::new();
    };
    // Past the bound the page shows nothing more; the tree is made from a
    // bounded number of spans either way.
    spans
        .iter()
        .take(MAX_SPANS * 4)
        .map(|span| {
            let attributes = span.get("attributes");
            let attribute = |key: &str| attributes.and_then(|a| a.get(key));
            let status = span.get("status");
            RawSpan {
                id: text(span.get("span_id")),
                parent: span
                    .get("parent_span_id")
                    .and_then(Value::as_str)
                    .filter(|p| !p.is_empty())
                    .map(str::to_owned),
                start_ns: nanos(span.get("start_time_unix_nano")),
                end_ns: nanos(span.get("end_time_unix_nano")),
                span: TraceSpan {
                    name: text(span.get("name")),
                    depth: 0,
                    span_type: attribute("mlflow.spanType")
                        .map(trainyard_store::spans::attribute_text)
                        .unwrap_or_default(),
                    start_us: 0,
                    duration_us: 0,
                    status: trainyard_store::spans::span_status(span),
                    status_message: text(status.and_then(|s| s.get("message"))),
                    inputs: text(attribute("mlflow.spanInputs")),
                    outputs: text(attribute("mlflow.spanOutputs")),
                    exception: exception_of(span),
                    attributes: attributes
                        .and_then(Value::as_object)
                        .map(|all| {
                            all.iter()
                                .filter(|(key, _)| !SHOWN_APART.contains(&key.as_str()))
                                .take(MAX_SPAN_ATTRIBUTES)
                                .map(|(key, value)| {
                                    let value = trainyard_store::spans::attribute_text(value);
                                    (cut(key.clone()), cut(value))
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                },
            }
        })
        .collect()
}

/// What a span raised, from its `exception` event (OpenTelemetry's
/// `exception.type`, `.message` and `.stacktrace`): the type and message,
/// then the end of the stack trace, where the frame that raised is.
#[cfg(feature = "ssr")]
fn exception_of(span: &serde_json::Value) -> String {
    use serde_json::Value;
    use trainyard_domain::explorer::SPAN_TEXT;
    let Some(event) = span
        .get("events")
        .and_then(Value::as_array)
        .and_then(|events| {
            events
                .iter()
                .find(|e| e.get("name").and_then(Value::as_str) == Some("exception"))
        })
    else {
        return String::new();
    };
    let field = |key: &str| {
        event
            .get("attributes")
            .and_then(|a| a.get(key))
            .map(trainyard_store::spans::attribute_text)
            .unwrap_or_default()
    };
    let (kind, message, stack) = (
        field("exception.type"),
        field("exception.message"),
        field("exception.stacktrace"),
    );
    let head: String = match (kind.is_empty(), message.is_empty()) {
        (false, false) => format!("{kind}: {message}"),
        (false, true) => kind,
        _ => message,
    };
    let head: String = head.chars().take(SPAN_TEXT).collect();
    let count = stack.chars().count();
    let tail = if count > SPAN_TEXT {
        let skip = stack
            .char_indices()
            .nth(count - SPAN_TEXT)
            .map_or(0, |(at, _)| at);
        format!("…{}", &stack[skip..])
    } else {
        stack
    };
    match (head.is_empty(), tail.is_empty()) {
        (_, true) => head,
        (true, false) => tail,
        (false, false) => format!("{head}\n\n{tail}"),
    }
}

/// A run's page, when its experiment is known.
fn run_link(run_id: &str, experiments: &[(String, i64)]) -> AnyView {
    match experiments.iter().find(|(id, _)| id == run_id) {
        Some((_, experiment)) => view! {
            <a href=format!("/experiments/{experiment}/runs/{run_id}")><code>{short(run_id)}</code></a>
        }
        .into_any(),
        None => view! { <code>{short(run_id)}</code> }.into_any(),
    }
}

fn short(id: &str) -> String {
    id.chars().take(8).collect()
}

/// `/models`: the registry, and the logged models of the experiment in
/// `?experiment=`.
#[component]
pub fn ModelsPage() -> impl IntoView {
    let query = use_query_map();
    let experiment = Memo::new(move |_| {
        query
            .read()
            .get("experiment")
            .and_then(|e| e.parse::<i64>().ok())
    });
    let view = Resource::new(move || experiment.get(), get_models);
    let experiments = Resource::new(|| (), |_| super::api::list_experiments(false));
    let navigate = use_navigate();
    let choose = move |ev: leptos::ev::Event| {
        let value = event_target_value(&ev);
        let to = if value.is_empty() {
            "/models".to_owned()
        } else {
            format!("/models?experiment={value}")
        };
        navigate(&to, Default::default());
    };
    view! {
        <Title text="Models"/>
        <section class="page-head"><h1>"Models"</h1></section>
        <Suspense fallback=|| view! { <p class="muted">"Loading models…"</p> }>
            {move || view.get().map(|v| match v {
                Ok(v) => view! { <Registry view=v.clone()/> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        </Suspense>
        <section>
            <h2>"Logged models"</h2>
            <p class="muted">"Models that runs logged (mlflow.<flavor>.log_model, autolog), with the metrics logged against them. Click a column to sort."</p>
            <label class="inline">"Experiment "
                <select on:change=choose data-testid="models-experiment">
                    <option value="" selected=move || experiment.get().is_none()>"Choose one"</option>
                    <Suspense>
                        {move || experiments.get().and_then(Result::ok).map(|list| list.into_iter().map(|e| {
                            let id = e.id;
                            view! { <option value=id.to_string() selected=move || experiment.get() == Some(id)>{e.name}</option> }
                        }).collect_view())}
                    </Suspense>
                </select>
            </label>
            <Suspense>
                {move || view.get().and_then(Result::ok).map(|v| match v.experiment_id {
                    None => view! { <p class="muted">"Choose an experiment to list its logged models."</p> }.into_any(),
                    Some(_) if v.logged.is_empty() => view! { <p class="muted" data-testid="no-logged-models">"No run of this experiment has logged a model."</p> }.into_any(),
                    Some(_) => view! { <LoggedModels models=v.logged.clone() runs=v.run_experiments.clone() more=v.more_logged/> }.into_any(),
                })}
            </Suspense>
        </section>
    }
}

/// Registered models, each with its aliases and versions.
#[component]
fn Registry(view: ModelsView) -> impl IntoView {
    if view.registered.is_empty() {
        return view! {
            <section>
                <h2>"Registered models"</h2>
                <p class="muted" data-testid="no-registered-models">"No model is registered yet. A script registers one with mlflow.register_model(\"runs:/<run id>/model\", \"name\"), or log_model(..., registered_model_name=\"name\")."</p>
            </section>
        }
        .into_any();
    }
    let runs = view.run_experiments.clone();
    let more = view.more_registered;
    let notes = view.notes_html;
    let note_html = |name: &str, version: Option<i64>| {
        notes
            .iter()
            .find(|(n, v, _)| n == name && *v == version)
            .map(|(_, _, html)| html.clone())
    };
    view! {
        <section>
            <h2>"Registered models"</h2>
            {more.then(|| view! { <p class="muted">"The first 200 by name."</p> })}
            {view.registered.into_iter().map(|model| {
                // Newest version first, as MLflow lists them.
                let mut versions: Vec<_> = view.versions.iter().filter(|v| v.name == model.name).cloned().collect();
                versions.sort_by_key(|v| std::cmp::Reverse(v.version));
                let runs = runs.clone();
                let aliases = model.aliases.iter().map(|(a, v)| format!("@{a} → v{v}")).collect::<Vec<_>>().join(", ");
                view! {
                    <article class="card model" data-registered=model.name.clone()>
                        <h3>{model.name.clone()}</h3>
                        <p class="muted">
                            {format!("{} version{}", versions.len(), if versions.len() == 1 { "" } else { "s" })}
                            {(!aliases.is_empty()).then(|| view! { " · " <span data-testid="aliases">{aliases.clone()}</span> })}
                            " · updated " {format_utc(model.last_update_time)}
                        </p>
                        {note_html(&model.name, None).map(|html| view! { <div class="model-note markdown" data-testid="model-note" inner_html=html></div> })}
                        {
                            let tags = own_tags(&model.tags);
                            (!tags.is_empty()).then(|| view! { <p class="muted" data-testid="model-tags">"Tags: " {tags}</p> })
                        }
                        <table class="table narrow" data-testid="versions">
                            <thead><tr><th class="num">"Version"</th><th>"Aliases"</th><th>"Stage"</th><th>"Source run"</th><th>"From"</th><th>"Registered"</th><th>"Description, tags"</th></tr></thead>
                            <tbody>
                                {versions.into_iter().map(|v| view! {
                                    <tr data-version=v.version.to_string()>
                                        <td class="num">{v.version}</td>
                                        <td>{v.aliases.iter().map(|a| format!("@{a}")).collect::<Vec<_>>().join(" ")}</td>
                                        <td>{v.stage.clone()}</td>
                                        <td>{match &v.run_id { Some(run) => run_link(run, &runs), None => view! { "–" }.into_any() }}</td>
                                        <td><code>{v.source.clone()}</code></td>
                                        <td>{format_utc(v.creation_time)}</td>
                                        <td class="model-note" data-testid="version-notes">
                                            {note_html(&v.name, Some(v.version)).map(|html| view! { <div class="markdown" inner_html=html></div> })}
                                            {
                                                let tags = own_tags(&v.tags);
                                                (!tags.is_empty()).then(|| view! { <span class="muted">" " {tags}</span> })
                                            }
                                        </td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    </article>
                }
            }).collect_view()}
        </section>
    }
    .into_any()
}

/// A registered model's or version's tags as `key=value`, MLflow's own
/// (`mlflow.…`) left out.
fn own_tags(tags: &[(String, String)]) -> String {
    tags.iter()
        .filter(|(k, _)| !k.starts_with("mlflow."))
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// How the logged models are sorted: a column, and which way.
#[derive(Clone, PartialEq)]
enum ModelSort {
    Name,
    Created,
    Metric(String),
}

/// The latest value of each metric logged against a model.
fn latest(model: &LoggedModel, key: &str) -> Option<f64> {
    model
        .metrics
        .iter()
        .filter(|m| m.key == key)
        .max_by_key(|m| (m.point.timestamp, m.point.step))
        .map(|m| m.point.value)
}

#[component]
fn LoggedModels(models: Vec<LoggedModel>, runs: Vec<(String, i64)>, more: bool) -> impl IntoView {
    let mut keys: Vec<String> = models
        .iter()
        .flat_map(|m| m.metrics.iter().map(|x| x.key.clone()))
        .collect();
    keys.sort();
    keys.dedup();
    let sort = RwSignal::new((ModelSort::Created, true));
    let pick = move |column: ModelSort| {
        sort.update(|(current, descending)| {
            if *current == column {
                *descending = !*descending;
            } else {
                *current = column;
                *descending = true;
            }
        })
    };
    let sorted = {
        let models = models.clone();
        move || {
            let (column, descending) = sort.get();
            let mut rows = models.clone();
            rows.sort_by(|a, b| {
                let order = match &column {
                    ModelSort::Name => a.name.cmp(&b.name),
                    ModelSort::Created => a.creation_time.cmp(&b.creation_time),
                    // Models without the metric stay last either way.
                    ModelSort::Metric(key) => match (latest(a, key), latest(b, key)) {
                        (Some(x), Some(y)) => x.total_cmp(&y),
                        (Some(_), None) => return std::cmp::Ordering::Less,
                        (None, Some(_)) => return std::cmp::Ordering::Greater,
                        (None, None) => std::cmp::Ordering::Equal,
                    },
                };
                if descending { order.reverse() } else { order }
            });
            rows
        }
    };
    let mark = move |column: ModelSort| {
        move || {
            let (current, descending) = sort.get();
            if current != column {
                "none"
            } else if descending {
                "descending"
            } else {
                "ascending"
            }
        }
    };
    let header_keys = keys.clone();
    view! {
        {more.then(|| view! { <p class="muted">"The newest 500."</p> })}
        <div class="table-scroll" role="region" aria-label="Logged models" tabindex="0">
            <table class="table" data-testid="logged-models">
                <thead><tr>
                    <th aria-sort=mark(ModelSort::Name)><button class="link" on:click=move |_| pick(ModelSort::Name)>"Name"</button></th>
                    <th>"Status"</th>
                    <th>"Source run"</th>
                    <th aria-sort=mark(ModelSort::Created)><button class="link" on:click=move |_| pick(ModelSort::Created)>"Created"</button></th>
                    {header_keys.into_iter().map(|key| {
                        let column = ModelSort::Metric(key.clone());
                        let on = column.clone();
                        view! {
                            <th class="num" aria-sort=mark(column)><button class="link" data-sort=key.clone() on:click=move |_| pick(on.clone())>{key.clone()}</button></th>
                        }
                    }).collect_view()}
                </tr></thead>
                <tbody>
                    {move || {
                        let keys = keys.clone();
                        let runs = runs.clone();
                        sorted().into_iter().map(|m| {
                            let status_class = match m.status.as_str() {
                                "LOGGED_MODEL_READY" | "READY" => "badge badge-ok",
                                "LOGGED_MODEL_UPLOAD_FAILED" | "FAILED" => "badge badge-bad",
                                _ => "badge",
                            };
                            let status = m.status.trim_start_matches("LOGGED_MODEL_").to_lowercase();
                            view! {
                                <tr data-model=m.name.clone()>
                                    <td>{m.name.clone()} " " <code class="muted">{short(&m.model_id)}</code></td>
                                    <td><span class=status_class>{status}</span></td>
                                    <td>{match &m.source_run_id { Some(run) => run_link(run, &runs), None => view! { "–" }.into_any() }}</td>
                                    <td>{format_utc(m.creation_time)}</td>
                                    {keys.iter().map(|key| view! {
                                        <td class="num">{latest(&m, key).map(|v| Cell::metric(v).display()).unwrap_or_else(|| "–".to_owned())}</td>
                                    }).collect_view()}
                                </tr>
                            }
                        }).collect_view()
                    }}
                </tbody>
            </table>
        </div>
    }
}

/// `/experiments/:id/traces`: its traces, newest first, a page at a time.
#[component]
pub fn TracesPage() -> impl IntoView {
    let query = use_query_map();
    let experiment = super::experiment_param();
    let offset = Memo::new(move |_| {
        query
            .read()
            .get("offset")
            .and_then(|o| o.parse::<u64>().ok())
            .unwrap_or(0)
    });
    let filter = Memo::new(move |_| query.read().get("q").unwrap_or_default());
    // Blocking, so that the traces of no experiment answer 404.
    let traces = Resource::new_blocking(
        move || (experiment.get(), filter.get(), offset.get()),
        |(id, q, offset)| experiment_traces(id, q, offset),
    );
    // `?q=…&offset=…` of another page of the same search.
    let page_at = move |offset: u64| {
        let q = filter.get();
        let offset = offset.to_string();
        let mut pairs = vec![("offset", offset.as_str())];
        if !q.is_empty() {
            pairs.insert(0, ("q", q.as_str()));
        }
        super::query_string(pairs)
    };
    let search_box = move || {
        view! {
                <Form method="GET" action="" attr:class="query-box" attr:role="search">
                    <label for="trace-query">"Filter traces"</label>
                    <input id="trace-query" type="search" name="q" value=move || filter.get()
                        placeholder="span.type = 'LLM' AND span.status = 'ERROR'"
                        autocomplete="off" spellcheck="false" maxlength="4000"
                        data-testid="trace-query"/>
                    <button type="submit">"Search"</button>
                    <details class="query-help">
                        <summary>"Syntax"</summary>
                        <p>
                            "Compare " <code>"tags.KEY"</code> ", " <code>"metadata.KEY"</code> ", " <code>"feedback.NAME"</code> ", "
                            <code>"status"</code> ", " <code>"name"</code> ", " <code>"execution_time_ms"</code> " and a span's "
                            <code>"span.name"</code> ", " <code>"span.type"</code> ", " <code>"span.status"</code> ", "
                            <code>"span.attributes.KEY"</code> " with " <code>"= != < > IN LIKE ILIKE"</code> "; "
                            <code>"trace.text LIKE '%timeout%'"</code> " searches every span. "
                            "Comparisons of spans joined by " <code>"AND"</code> " hold for one span. Strings take quotes."
                        </p>
                    </details>
                </Form>
        }
    };
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading traces…"</p> }>
            {move || traces.get().map(|t| match t {
                Ok((name, traces, more)) => {
                    let id = experiment.get();
                    let offset = offset.get();
                    let shown = traces.len() as u64;
                    let filtered = !filter.get().is_empty();
                    view! {
                        <Title text=format!("Traces of {name}")/>
                        <nav class="crumbs" aria-label="Breadcrumbs">
                            <a href="/experiments">"Experiments"</a> " / "
                            <a href=format!("/experiments/{id}")>{name.clone()}</a> " / "
                        </nav>
                        <section class="page-head"><h1>"Traces"</h1></section>
                        {search_box()}
                        {if traces.is_empty() && offset == 0 && filtered {
                            view! { <p class="muted" data-testid="no-traces">"No trace matches this filter."</p> }.into_any()
                        } else if traces.is_empty() && offset == 0 {
                            view! { <p class="muted" data-testid="no-traces">"No trace yet. Functions decorated with @mlflow.trace log one each time they run."</p> }.into_any()
                        } else {
                            view! {
                                <table class="table" data-testid="trace-list">
                                    <thead><tr><th>"Name"</th><th>"State"</th><th>"At"</th><th class="num">"Took"</th><th>"Request"</th><th>"Feedback"</th><th>"Trace ID"</th></tr></thead>
                                    <tbody>
                                        {traces.into_iter().map(|t| {
                                            let name = trace_name(&t);
                                            let href = format!("/experiments/{id}/traces/{}", t.trace_id);
                                            view! {
                                                <tr data-trace=t.trace_id.clone()>
                                                    <td><a href=href>{name}</a></td>
                                                    <td>{t.state.to_lowercase()}</td>
                                                    <td>{format_utc(t.request_time)}</td>
                                                    <td class="num">{t.execution_time.map(|ms| format!("{ms} ms")).unwrap_or_else(|| "–".to_owned())}</td>
                                                    <td class="clip">{t.request_preview.chars().take(120).collect::<String>()}</td>
                                                    <td data-testid="trace-feedback">{feedback_summary(&t)}</td>
                                                    <td><code>{t.trace_id.clone()}</code></td>
                                                </tr>
                                            }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                <nav class="pager">
                                    {(offset > 0).then(|| view! { <a href=page_at(offset.saturating_sub(TRACES_PAGE))>"← Newer"</a> })}
                                    {more.then(|| view! { <a href=page_at(offset + shown)>"Older →"</a> })}
                                </nav>
                            }.into_any()
                        }}
                    }.into_any()
                }
                Err(AppError::Query(error)) => view! {
                    <Title text="Traces"/>
                    <section class="page-head"><h1>"Traces"</h1></section>
                    {search_box()}
                    <super::table::QueryErrorNote query=filter.get_untracked() error
                        hint="Fix it above; it takes MLflow's search_traces language: trace.*, span.*, tags.*, metadata.*, feedback.* and expectation.*, joined by AND."/>
                }.into_any(),
                Err(e) => view! { <Title text="Traces"/><ErrorNote error=e/> }.into_any(),
            })}
        </Suspense>
    }
}

/// A trace's feedback that stands (not overridden), as `name: value`,
/// each name once (its latest); `–` without any.
fn feedback_summary(t: &TraceInfo) -> String {
    let mut latest: Vec<(&str, String)> = Vec::new();
    for a in t
        .assessments
        .iter()
        .filter(|a| a.valid && a.kind == "feedback")
    {
        let said = a
            .error
            .as_ref()
            .map_or_else(|| a.value.clone(), |_| "error".to_owned());
        match latest.iter_mut().find(|(name, _)| *name == a.name) {
            Some(slot) => slot.1 = said,
            None => latest.push((a.name.as_str(), said)),
        }
    }
    if latest.is_empty() {
        return "–".to_owned();
    }
    latest
        .iter()
        .map(|(name, value)| format!("{name}: {}", value.chars().take(40).collect::<String>()))
        .collect::<Vec<_>>()
        .join(", ")
}

/// What a trace is called: its root span's name as the client tagged it.
fn trace_name(t: &TraceInfo) -> String {
    t.tags
        .iter()
        .find(|(k, _)| k == "mlflow.traceName")
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| t.trace_id.clone())
}

/// `/experiments/:experiment/traces/:trace`: the spans as a tree beside a
/// timeline (each span a bar from its start for its duration).
#[component]
pub fn TracePage() -> impl IntoView {
    let params = use_params_map();
    let trace_id = Memo::new(move |_| params.read().get("trace").unwrap_or_default());
    let experiment = Memo::new(move |_| {
        params
            .read()
            .get("experiment")
            .and_then(|e| e.parse::<i64>().ok())
    });
    // Blocking, so that a page of no trace answers 404; under its own
    // experiment's address only.
    let trace = Resource::new_blocking(
        move || (experiment.get(), trace_id.get()),
        |(experiment, id)| async move {
            match get_trace(id.clone()).await {
                Ok(t) if Some(t.info.experiment_id) != experiment => {
                    crate::error::page_not_found();
                    Err(AppError::NotFound(format!(
                        "trace {id} is not in this experiment; it is in experiment {}",
                        t.info.experiment_id
                    )))
                }
                other => other,
            }
        },
    );
    let open = RwSignal::new(None::<usize>);
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading the trace…"</p> }>
            {move || trace.get().map(|t| match t {
                Ok(t) => {
                    let name = trace_name(&t.info);
                    let experiment = t.info.experiment_id;
                    let total = t.spans.iter().map(|s| s.start_us + s.duration_us).max().unwrap_or(0).max(1);
                    let spans = t.spans.clone();
                    let assessments = t.info.assessments.clone();
                    // The client's own; MLflow's (`mlflow.…`) are its bookkeeping.
                    let own = |pairs: &[(String, String)]| -> Vec<(String, String)> {
                        pairs.iter().filter(|(k, _)| !k.starts_with("mlflow.")).cloned().collect()
                    };
                    let tags = own(&t.info.tags);
                    let metadata = own(&t.info.metadata);
                    let source_run = t.info.metadata.iter()
                        .find(|(k, _)| k == "mlflow.sourceRun")
                        .map(|(_, run)| run.clone());
                    view! {
                        <Title text=format!("Trace {name}")/>
                        <nav class="crumbs" aria-label="Breadcrumbs">
                            <a href="/experiments">"Experiments"</a> " / "
                            <a href=format!("/experiments/{experiment}/traces")>"Traces"</a> " / "
                        </nav>
                        <section class="page-head">
                            <h1 data-testid="trace-name">{name}</h1>
                            <span class="badge">{t.info.state.to_lowercase()}</span>
                            <span class="muted">{format_utc(t.info.request_time)} {t.info.execution_time.map(|ms| format!(" · {ms} ms"))}</span>
                        </section>
                        {(!t.prompts.is_empty()).then(|| view! {
                            <p class="muted" data-testid="trace-prompts">"Prompts used: "
                                {t.prompts.iter().map(|p| match p.rsplit_once('/') {
                                    Some((name, version)) => view! { <code>{format!("{name} v{version}")}</code> " " },
                                    None => view! { <code>{p.clone()}</code> " " },
                                }).collect_view()}
                            </p>
                        })}
                        {source_run.map(|run| view! {
                            <p class="muted">"Logged by run "
                                <a href=format!("/experiments/{experiment}/runs/{run}") data-testid="trace-run">{run.clone()}</a>
                            </p>
                        })}
                        {(!tags.is_empty()).then(|| view! {
                            <h2>"Tags"</h2><div data-testid="trace-tags"><Fields fields=tags/></div>
                        })}
                        {(!metadata.is_empty()).then(|| view! {
                            <h2>"Metadata"</h2><div data-testid="trace-metadata"><Fields fields=metadata/></div>
                        })}
                        {t.note.clone().map(|n| view! { <p class="muted" data-testid="trace-note">{n}</p> })}
                        {t.truncated.then(|| view! { <p class="muted">"Only the first 2,000 spans are shown."</p> })}
                        <table class="table spans" data-testid="spans">
                            <thead><tr><th>"Span"</th><th>"Type"</th><th class="num">"Took"</th><th class="timeline">"Timeline"</th></tr></thead>
                            <tbody>
                                {spans.into_iter().enumerate().map(|(i, s)| {
                                    let left = s.start_us as f64 * 100.0 / total as f64;
                                    let width = (s.duration_us as f64 * 100.0 / total as f64).max(0.3);
                                    let bar = format!("left: {left:.2}%; width: {width:.2}%");
                                    let failed = s.status == "ERROR";
                                    let indent = format!("padding-left: {}rem", s.depth as f64 * 1.25);
                                    let detail = (s.inputs.clone(), s.outputs.clone(), s.status_message.clone(), s.exception.clone(), s.attributes.clone());
                                    view! {
                                        <tr data-span=s.name.clone() data-depth=s.depth.to_string() class:failed=failed>
                                            <td style=indent>
                                                <button class="link" aria-expanded=move || (open.get() == Some(i)).to_string()
                                                    on:click=move |_| open.update(|o| *o = if *o == Some(i) { None } else { Some(i) })>{s.name.clone()}</button>
                                            </td>
                                            <td>{s.span_type.clone()}</td>
                                            <td class="num">{format_micros(s.duration_us)}</td>
                                            <td class="timeline"><span class="span-bar" class:failed=failed style=bar></span></td>
                                        </tr>
                                        {move || (open.get() == Some(i)).then(|| {
                                            let (inputs, outputs, message, exception, attributes) = detail.clone();
                                            view! {
                                                <tr class="span-detail"><td colspan="4">
                                                    {(!message.is_empty()).then(|| view! { <p class="error">{message}</p> })}
                                                    {(!exception.is_empty()).then(|| view! {
                                                        <h4>"Raised"</h4><pre class="error" tabindex="0" data-testid="span-exception">{exception}</pre>
                                                    })}
                                                    <h4>"Inputs"</h4><pre tabindex="0" data-testid="span-inputs">{inputs}</pre>
                                                    <h4>"Outputs"</h4><pre tabindex="0" data-testid="span-outputs">{outputs}</pre>
                                                    {(!attributes.is_empty()).then(|| view! {
                                                        <h4>"Attributes"</h4>
                                                        <div data-testid="span-attributes"><Fields fields=attributes/></div>
                                                    })}
                                                </td></tr>
                                            }
                                            .into_any()
                                        })}
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                        <TraceAssessments assessments=assessments/>
                    }.into_any()
                }
                Err(e) => view! { <Title text="Trace"/><ErrorNote error=e/> }.into_any(),
            })}
        </Suspense>
    }
}

/// A trace's feedback and expectations: what each says, who or what said
/// it and why; one another replaced is shown struck through.
#[component]
fn TraceAssessments(assessments: Vec<trainyard_domain::tracking::Assessment>) -> impl IntoView {
    (!assessments.is_empty()).then(|| view! {
        <h2>"Assessments"</h2>
        <table class="table" data-testid="assessments">
            <thead><tr><th>"Name"</th><th>"Kind"</th><th>"Value"</th><th>"Source"</th><th>"Rationale"</th><th>"At"</th></tr></thead>
            <tbody>
                {assessments.into_iter().map(|a| {
                    let source = match (a.source_type.as_str(), a.source_id.as_str()) {
                        ("SOURCE_TYPE_UNSPECIFIED", id) => id.to_owned(),
                        (kind, "") => kind.to_lowercase().replace('_', " "),
                        (kind, id) => format!("{} · {id}", kind.to_lowercase().replace('_', " ")),
                    };
                    let replaced = (!a.valid).then(|| view! { <span class="badge">"overridden"</span> });
                    let value = match &a.error {
                        Some(e) => view! { <span class="error">{e.clone()}</span> }.into_any(),
                        None => view! { <code>{a.value.clone()}</code> }.into_any(),
                    };
                    view! {
                        <tr data-assessment=a.name.clone() data-valid=a.valid.to_string() class:muted=!a.valid>
                            <td>{a.name.clone()} " " {replaced}</td>
                            <td>{a.kind.clone()}</td>
                            <td>{value}</td>
                            <td>{source}</td>
                            <td>{a.rationale.clone().unwrap_or_default()}</td>
                            <td>{format_utc(a.create_time)}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    })
}

/// A duration in µs as people read it.
fn format_micros(us: i64) -> String {
    if us >= 1_000_000 {
        format!("{:.2} s", us as f64 / 1e6)
    } else if us >= 1000 {
        format!("{:.1} ms", us as f64 / 1000.0)
    } else {
        format!("{us} µs")
    }
}
