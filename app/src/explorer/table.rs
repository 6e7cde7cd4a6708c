//! `/experiments/ID`: the runs table. It is virtual: the server counts the
//! matching runs, the table is as tall as all of them, and only the rows in
//! view (plus a margin) are in the page, fetched a page of 100 at a time as
//! they scroll in, so 10,000 runs scroll as smoothly as 10.
//!
//! The view (query, sort, columns, selection) lives in the URL. The query
//! box, the column picker and the sort headers are plain GET forms and
//! links, so they work before the wasm loads, and without JavaScript.

use std::collections::{HashMap, HashSet};

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::NavigateOptions;
use leptos_router::components::Form;
use leptos_router::hooks::{use_navigate, use_params_map, use_query_map};
use leptos_router::params::ParamsMap;
use trainyard_domain::explorer::{
    Cell, Column, ExperimentView, PAGE_ROWS, RunRow, RunsPage, Sort, children_query,
};
use trainyard_domain::format_utc;
use trainyard_domain::query::QueryError;

use super::api::{PurgeDeletedRuns, get_experiment_view, list_runs_page};
use super::{query_string, status_class, toggled};
use crate::error::AppError;
use crate::jobs::duration_text;
use crate::pages::{ErrorNote, confirm_first};

/// The height of a row, in CSS pixels (the stylesheet sets the same).
const ROW_PX: f64 = 34.0;
/// Rows drawn above and below the visible ones.
const OVERSCAN: u64 = 15;

/// The table's view as the URL holds it.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct TableState {
    pub q: String,
    pub sort: Option<String>,
    /// None: the default columns.
    pub cols: Option<Vec<String>>,
    pub sel: Vec<String>,
    /// The first row shown (without JavaScript, pages are links).
    pub offset: u64,
    /// The deleted runs rather than the others (`deleted=1`).
    pub deleted: bool,
}

impl TableState {
    pub fn from_query(map: &ParamsMap) -> TableState {
        TableState {
            q: map.get("q").unwrap_or_default(),
            sort: map.get("sort").filter(|s| !s.is_empty()),
            cols: map
                .get_all("col")
                .map(|list| list.into_iter().filter(|c| !c.is_empty()).collect()),
            sel: map
                .get_all("sel")
                .unwrap_or_default()
                .into_iter()
                .filter(|s| !s.is_empty())
                .collect(),
            offset: map
                .get("offset")
                .and_then(|o| o.parse::<u64>().ok())
                .unwrap_or(0)
                / PAGE_ROWS
                * PAGE_ROWS,
            deleted: map.get("deleted").is_some_and(|d| d == "1"),
        }
    }

    /// The query string of this view, `?` included.
    pub fn to_query(&self) -> String {
        let offset = self.offset.to_string();
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        if !self.q.is_empty() {
            pairs.push(("q", &self.q));
        }
        if let Some(sort) = &self.sort {
            pairs.push(("sort", sort));
        }
        if let Some(cols) = &self.cols {
            if cols.is_empty() {
                pairs.push(("col", ""));
            }
            pairs.extend(cols.iter().map(|c| ("col", c.as_str())));
        }
        pairs.extend(self.sel.iter().map(|s| ("sel", s.as_str())));
        if self.offset > 0 {
            pairs.push(("offset", &offset));
        }
        if self.deleted {
            pairs.push(("deleted", "1"));
        }
        match query_string(pairs) {
            q if q.is_empty() => "?".to_owned(),
            q => q,
        }
    }

    /// The view sorted by `by`: ascending first, then descending, then back.
    fn sorted_by(&self, by: &str) -> TableState {
        let current = self.sort.as_deref().and_then(Sort::parse);
        let next = match current {
            Some(s) if s.by == by && !s.descending => Sort {
                by: by.to_owned(),
                descending: true,
            },
            _ => Sort {
                by: by.to_owned(),
                descending: false,
            },
        };
        TableState {
            sort: Some(next.to_url()),
            offset: 0,
            ..self.clone()
        }
    }

    fn with_selection(&self, sel: Vec<String>) -> TableState {
        TableState {
            sel,
            ..self.clone()
        }
    }
}

fn page_of(index: u64) -> u64 {
    index / PAGE_ROWS
}

#[component]
pub fn ExperimentPage() -> impl IntoView {
    let params = use_params_map();
    let id = Memo::new(move |_| params.read().get("id").and_then(|s| s.parse::<i64>().ok()));
    let query = use_query_map();
    let state = Memo::new(move |_| TableState::from_query(&query.read()));
    // What the rows depend on: not the selection.
    let fetch_key = Memo::new(move |_| {
        let s = state.get();
        (id.get(), s.q, s.sort, s.cols, s.offset, s.deleted)
    });
    // Blocking, so that a page of no experiment answers 404.
    let info = Resource::new_blocking(
        move || id.get(),
        |id| async move {
            match id {
                Some(id) => get_experiment_view(id).await,
                None => {
                    crate::error::page_not_found();
                    Err(AppError::NotFound("no such experiment".to_owned()))
                }
            }
        },
    );
    // Deleting the deleted runs forever empties their table.
    let purge = ServerAction::<PurgeDeletedRuns>::new();
    let first = Resource::new(
        move || (fetch_key.get(), purge.version().get()),
        |((id, q, sort, cols, offset, deleted), _)| async move {
            match id {
                Some(id) => list_runs_page(id, q, sort, cols, offset, deleted).await,
                None => Err(AppError::NotFound("no such experiment".to_owned())),
            }
        },
    );
    // The columns the table shows (it sets them): the picker starts from them.
    let shown: RwSignal<Option<Vec<String>>> = RwSignal::new(None);
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading the experiment…"</p> }>
            {move || Suspend::new(async move {
                match info.await {
                    Ok(info) => view! { <ExperimentHead info state shown purge/> }.into_any(),
                    Err(e) => view! { <Title text="Experiment"/><ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
        <Transition fallback=|| view! { <p class="muted">"Loading runs…"</p> }>
            {move || Suspend::new(async move {
                let Some(experiment_id) = id.get() else {
                    return ().into_any();
                };
                match first.await {
                    Ok(page) => view! { <RunsTable experiment_id page state shown/> }.into_any(),
                    Err(AppError::Query(error)) => view! {
                        <QueryErrorNote query=state.get_untracked().q error/>
                    }.into_any(),
                    // An experiment that is not there is said once, above.
                    Err(AppError::NotFound(_)) => ().into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}

/// The title, the query box and the column picker.
#[component]
fn ExperimentHead(
    info: ExperimentView,
    state: Memo<TableState>,
    shown: RwSignal<Option<Vec<String>>>,
    purge: ServerAction<PurgeDeletedRuns>,
) -> impl IntoView {
    let summary = info.summary.clone();
    let experiment_id = summary.id;
    let archived = summary.lifecycle_stage != "active";
    let keys = info.keys.clone();
    let current = move || state.get();
    view! {
        <Title text=summary.name.clone()/>
        <nav class="crumbs" aria-label="Breadcrumbs">
            <a href="/experiments">"Experiments"</a> " / "
        </nav>
        <section class="page-head">
            <h1 data-testid="experiment-name">{summary.name.clone()}</h1>
            {archived.then(|| view! { <span class="badge badge-off">"archived"</span> })}
            <span class="muted" data-testid="experiment-runs">{summary.runs} " " {crate::pages::plural(summary.runs, "run", "runs")}</span>
            <a href=format!("/experiments/{}/traces", summary.id)>"Traces"</a>
            <a href=format!("/experiments/{}/datasets", summary.id)>"Datasets"</a>
            <a href=format!("/experiments/{}/scorers", summary.id)>"Scorers"</a>
            <a href=format!("/models?experiment={}", summary.id)>"Logged models"</a>
            {(!archived).then(|| view! {
                <a data-testid="deleted-runs" href=move || {
                    let s = current();
                    TableState { deleted: !s.deleted, offset: 0, sel: Vec::new(), ..s }.to_query()
                }>
                    {move || if current().deleted { "Back to the runs" } else { "Deleted runs" }}
                </a>
            })}
        </section>
        {move || current().deleted.then(|| view! {
            <p class="hint" data-testid="deleted-runs-hint">
                "The deleted runs of this experiment: open one to restore it. Their artifacts count against their owner's artifact quota until they are deleted forever."
            </p>
            <ActionForm action=purge attr:class="inline-form">
                <input type="hidden" name="experiment_id" value=experiment_id/>
                <button type="submit" class="danger" data-testid="purge-deleted-runs"
                    on:click=confirm_first(
                        "Delete forever every deleted run of this experiment that you may change? Their metrics, params, tags and artifacts are removed for good, as mlflow gc does. This cannot be undone.".to_owned()
                    )>"Delete them all forever"</button>
            </ActionForm>
            {move || purge.value().get().map(|said| match said {
                Ok(said) => view! { <p class="notice" role="status" data-testid="purge-result">{said}</p> }.into_any(),
                Err(e) => view! { <ErrorNote error=e/> }.into_any(),
            })}
        })}
        <Form method="GET" action="" attr:class="query-box" attr:role="search">
            <label for="run-query">"Filter runs"</label>
            <input id="run-query" type="search" name="q" value=move || current().q
                placeholder="metrics.loss < 0.5 AND (params.lr = '0.01' OR params.lr = '0.1')"
                autocomplete="off" spellcheck="false" maxlength="4000"
                data-testid="query"/>
            {move || current().sort.map(|s| view! { <input type="hidden" name="sort" value=s/> })}
            {move || current().deleted.then(|| view! { <input type="hidden" name="deleted" value="1"/> })}
            {move || current().cols.map(|cols| {
                let cols = if cols.is_empty() { vec![String::new()] } else { cols };
                cols.into_iter().map(|c| view! { <input type="hidden" name="col" value=c/> }).collect_view()
            })}
            <button type="submit">"Search"</button>
            <details class="query-help">
                <summary>"Syntax"</summary>
                <p>
                    "Compare " <code>"metrics.KEY"</code> ", " <code>"params.KEY"</code> ", " <code>"tags.KEY"</code>
                    " and " <code>"status"</code> ", " <code>"run_name"</code> ", " <code>"user_id"</code> ", "
                    <code>"start_time"</code> " with " <code>"= != < <= > >= LIKE ILIKE"</code> "; "
                    "combine with " <code>"AND OR NOT"</code> " and parentheses; "
                    <code>"params.opt IN ('adam', 'sgd')"</code> ", "
                    <code>"metrics.acc BETWEEN 0.8 AND 0.9"</code> ". Strings take quotes."
                </p>
            </details>
        </Form>
        <ColumnPicker keys state shown/>
    }
    .into_any()
}

/// Which metrics, params and tags are columns: a GET form of checkboxes
/// that starts from the columns shown (the defaults too); boxes are ticked
/// and cleared one by one, or all those the search finds at once. Applying
/// keeps the sort only when its column stays.
#[component]
fn ColumnPicker(
    keys: trainyard_domain::explorer::Keys,
    state: Memo<TableState>,
    shown: RwSignal<Option<Vec<String>>>,
) -> impl IntoView {
    let groups = [
        (
            "Metrics",
            keys.metrics
                .iter()
                .map(|k| Column::Metric(k.clone()))
                .collect::<Vec<_>>(),
        ),
        (
            "Params",
            keys.params
                .iter()
                .map(|k| Column::Param(k.clone()))
                .collect(),
        ),
        (
            "Tags",
            keys.tags.iter().map(|k| Column::Tag(k.clone())).collect(),
        ),
    ];
    let every: Vec<(String, String)> = groups
        .iter()
        .flat_map(|(_, cols)| cols.iter().map(|c| (c.name(), c.key().to_lowercase())))
        .collect();
    let filter = RwSignal::new(String::new());
    // None: as shown; Some: what the person ticked since.
    let edits: RwSignal<Option<HashSet<String>>> = RwSignal::new(None);
    Effect::new(move |_| {
        shown.track();
        edits.set(None);
    });
    let picked = move || -> HashSet<String> {
        edits
            .get()
            .unwrap_or_else(|| shown.get().unwrap_or_default().into_iter().collect())
    };
    // Before the table says what it shows (and without JavaScript): the
    // columns the URL names.
    let is_picked = move |name: &str| match edits.read().as_ref() {
        Some(set) => set.contains(name),
        None => shown.with(|shown| match shown {
            Some(s) => s.iter().any(|c| c == name),
            None => state.with(|st| {
                st.cols
                    .as_ref()
                    .is_some_and(|s| s.iter().any(|c| c == name))
            }),
        }),
    };
    let set_all = move |on: bool| {
        let f = filter.get_untracked();
        let mut now = picked();
        for (name, key) in &every {
            if f.is_empty() || key.contains(&f) {
                if on {
                    now.insert(name.clone());
                } else {
                    now.remove(name);
                }
            }
        }
        edits.set(Some(now));
    };
    let set_none = set_all.clone();
    // A sort on a column that goes would sort by what is not shown.
    let kept_sort = move || {
        state.get().sort.filter(|s| {
            Sort::parse(s).is_some_and(|sort| match Column::parse(&sort.by) {
                None => true,
                Some(column) => is_picked(&column.name()),
            })
        })
    };
    view! {
        <details class="column-picker" data-testid="column-picker">
            <summary>"Columns"</summary>
            <Form method="GET" action="">
                <input type="hidden" name="q" value=move || state.get().q/>
                {move || kept_sort().map(|s| view! { <input type="hidden" name="sort" value=s/> })}
                // An empty `col` says "these columns, maybe none", not "the defaults".
                <input type="hidden" name="col" value=""/>
                <div class="picker-tools">
                    <input type="search" placeholder="Find a key" aria-label="Find a key" data-testid="find-key"
                        on:input=move |ev| filter.set(event_target_value(&ev).to_lowercase())/>
                    <button type="button" class="secondary" data-testid="pick-all"
                        on:click=move |_| set_all(true)>
                        {move || if filter.get().is_empty() { "All" } else { "All found" }}
                    </button>
                    <button type="button" class="secondary" data-testid="pick-none"
                        on:click=move |_| set_none(false)>
                        {move || if filter.get().is_empty() { "None" } else { "None of those found" }}
                    </button>
                </div>
                {groups.into_iter().filter(|(_, cols)| !cols.is_empty()).map(|(title, cols)| view! {
                    <fieldset>
                        <legend>{title}</legend>
                        {cols.into_iter().map(|column| {
                            let name = column.name();
                            let key = column.key().to_lowercase();
                            let shown_now = move || {
                                let f = filter.get();
                                f.is_empty() || key.contains(&f)
                            };
                            let checked = {
                                let name = name.clone();
                                move || is_picked(&name)
                            };
                            let toggle = {
                                let name = name.clone();
                                move |_| {
                                    let mut now = picked();
                                    if !now.remove(&name) {
                                        now.insert(name.clone());
                                    }
                                    edits.set(Some(now));
                                }
                            };
                            view! {
                                <label class="check" class:hidden=move || !shown_now()>
                                    <input type="checkbox" name="col" value=name.clone()
                                        checked=checked.clone() prop:checked=checked on:change=toggle/>
                                    {column.key().to_owned()}
                                </label>
                            }
                        }).collect_view()}
                    </fieldset>
                }).collect_view()}
                <button type="submit" data-testid="apply-columns">"Apply"</button>
                <a class="button secondary" href=move || TableState { cols: None, offset: 0, ..state.get() }.to_query()>"Defaults"</a>
            </Form>
        </details>
    }
    .into_any()
}

/// A query that does not parse: the query with a caret under the spot, and
/// where to read the language (`hint`, or the runs table's Syntax).
#[component]
pub(crate) fn QueryErrorNote(
    query: String,
    error: QueryError,
    #[prop(optional)] hint: Option<&'static str>,
) -> impl IntoView {
    let hint = hint.unwrap_or("Fix it above, or open Syntax for what the query language takes.");
    let caret = format!("{}^", " ".repeat(error.position.min(query.chars().count())));
    view! {
        <div class="error query-error" role="alert" data-testid="query-error">
            <strong>"The query does not parse: "</strong>
            {error.message.clone()}
            <pre><code>{query}</code>"\n"<code class="caret">{caret}</code></pre>
            <p class="hint">{hint}</p>
        </div>
    }
}

/// The virtual table.
#[component]
fn RunsTable(
    experiment_id: i64,
    page: RunsPage,
    state: Memo<TableState>,
    shown: RwSignal<Option<Vec<String>>>,
) -> impl IntoView {
    let total = page.total;
    let columns: Vec<String> = page.columns.clone();
    shown.set(Some(columns.clone()));
    let start = page.offset;
    let cache: RwSignal<HashMap<u64, Vec<RunRow>>> =
        RwSignal::new(HashMap::from([(page_of(start), page.rows)]));
    let scroll_top = RwSignal::new(start as f64 * ROW_PX);
    // Before the browser measures, a whole page is drawn (also without JS).
    let view_height = RwSignal::new(PAGE_ROWS as f64 * ROW_PX);
    let focused: RwSignal<Option<u64>> = RwSignal::new(None);
    let scroller = NodeRef::<leptos::html::Div>::new();
    let navigate = use_navigate();

    let window = Memo::new(move |_| {
        let top = scroll_top.get();
        let first = ((top / ROW_PX).floor().max(0.0) as u64).saturating_sub(OVERSCAN);
        let last = (((top + view_height.get()) / ROW_PX).ceil() as u64 + OVERSCAN).min(total);
        (first.min(last), last)
    });
    let selected = Memo::new(move |_| state.get().sel.into_iter().collect::<HashSet<String>>());

    fetch_missing_pages(experiment_id, state, window, cache);
    measure_and_scroll(scroller, view_height, scroll_top, start);

    let set_selection = {
        let navigate = navigate.clone();
        move |sel: Vec<String>| {
            let url = state.get_untracked().with_selection(sel).to_query();
            navigate(
                &url,
                NavigateOptions {
                    replace: true,
                    scroll: false,
                    ..Default::default()
                },
            );
        }
    };
    let toggle = {
        let set_selection = set_selection.clone();
        move |run_id: String| set_selection(toggled(state.get_untracked().sel, run_id))
    };
    let row_at = move |index: u64| -> Option<RunRow> {
        cache.with(|c| {
            c.get(&page_of(index))
                .and_then(|rows| rows.get((index % PAGE_ROWS) as usize).cloned())
        })
    };

    let on_key = {
        let toggle = toggle.clone();
        let navigate = navigate.clone();
        move |ev: leptos::ev::KeyboardEvent| {
            if total == 0 {
                return;
            }
            let page_rows = (view_height.get_untracked() / ROW_PX).floor().max(1.0) as u64;
            let now = focused.get_untracked();
            let next = match ev.key().as_str() {
                "ArrowDown" | "j" => Some(now.map_or(0, |i| (i + 1).min(total - 1))),
                "ArrowUp" | "k" => Some(now.map_or(0, |i| i.saturating_sub(1))),
                "PageDown" => Some(now.map_or(0, |i| (i + page_rows).min(total - 1))),
                "PageUp" => Some(now.map_or(0, |i| i.saturating_sub(page_rows))),
                "Home" => Some(0),
                "End" => Some(total - 1),
                " " | "x" => {
                    if let Some(row) = now.and_then(row_at) {
                        toggle(row.run_id);
                    }
                    ev.prevent_default();
                    None
                }
                "Enter" => {
                    if let Some(row) = now.and_then(row_at) {
                        navigate(
                            &format!("/experiments/{}/runs/{}", row.experiment_id, row.run_id),
                            Default::default(),
                        );
                    }
                    None
                }
                _ => None,
            };
            if let Some(index) = next {
                ev.prevent_default();
                focused.set(Some(index));
                scroll_into_view(scroller, index, scroll_top, view_height);
            }
        }
    };

    let header = {
        let columns = columns.clone();
        move || {
            let s = state.get();
            let current = s.sort.as_deref().and_then(Sort::parse);
            let th = |label: String, by: Option<String>, class: &'static str| {
                let (aria, arrow) = match (&current, &by) {
                    (Some(c), Some(b)) if &c.by == b => {
                        if c.descending {
                            ("descending", " ↓")
                        } else {
                            ("ascending", " ↑")
                        }
                    }
                    _ => ("none", ""),
                };
                match by {
                    Some(by) => view! {
                        <th class=class aria-sort=aria>
                            <a href=s.sorted_by(&by).to_query() data-sort=by.clone()>{label}{arrow}</a>
                        </th>
                    }.into_any(),
                    None => view! { <th class=class>{label}</th> }.into_any(),
                }
            };
            view! {
                <tr aria-rowindex="1">
                    <th class="select"><span class="visually-hidden">"Select"</span></th>
                    {th("Run".to_owned(), Some("run_name".to_owned()), "name")}
                    {th("Status".to_owned(), Some("status".to_owned()), "")}
                    {th("Started".to_owned(), Some("start_time".to_owned()), "")}
                    {th("Duration".to_owned(), None, "num")}
                    {th("User".to_owned(), Some("user_id".to_owned()), "")}
                    {columns.iter().map(|c| {
                        let parsed = Column::parse(c);
                        let class = if matches!(parsed, Some(Column::Metric(_))) { "num" } else { "" };
                        let label = parsed.as_ref().map(|p| p.key().to_owned()).unwrap_or_else(|| c.clone());
                        th(label, Some(c.clone()), class)
                    }).collect_view()}
                </tr>
            }
        }
    };

    let compare_href = move || {
        let sel = state.get().sel;
        format!(
            "/compare{}",
            query_string(sel.iter().map(|s| ("run", s.as_str())))
        )
    };
    let n_selected = move || state.get().sel.len();
    // The compare page's code is a chunk of its own (crate::lazy): fetched
    // when the pointer or the keyboard comes to the link, it is there by the
    // click, rather than fetched after it.
    let preload_compare = || {
        leptos::task::spawn_local(
            <crate::lazy::CompareRoute as leptos_router::LazyRoute>::preload(),
        )
    };
    let width = 6 + columns.len();
    let empty_query = state.get_untracked().q.is_empty();
    let deleted_view = state.get_untracked().deleted;

    view! {
        <div class="table-bar">
            <span data-testid="match-count">
                {match (total, empty_query) {
                    (1, true) => "1 run".to_owned(),
                    (1, false) => "1 run matches".to_owned(),
                    (n, true) => format!("{n} runs"),
                    (n, false) => format!("{n} runs match"),
                }}
            </span>
            <span class="spacer"></span>
            <span data-testid="selected-count">{move || format!("{} selected", n_selected())}</span>
            <button type="button" class="secondary" disabled=move || n_selected() == 0
                on:click={
                    let set_selection = set_selection.clone();
                    move |_| set_selection(Vec::new())
                }>"Clear"</button>
            <a class="button" data-testid="compare" href=compare_href
                aria-disabled=move || (n_selected() == 0).then_some("true")
                on:pointerenter=move |_| preload_compare() on:focus=move |_| preload_compare()>
                {move || format!("Compare {}", n_selected())}
            </a>
            <a class="button secondary" data-testid="runs-csv" download
                title="Every run this query matches, with these columns (every metric and param when none are chosen)"
                href=move || {
                    let s = state.get();
                    let table = TableState { sel: Vec::new(), offset: 0, ..s };
                    format!("/api/trainyard/v1/experiments/{experiment_id}/runs.csv{}", table.to_query())
                }>"CSV"</a>
        </div>
        {(total == 0).then(|| if empty_query && deleted_view {
            view! {
                <p class="empty" data-testid="runs-empty">"No deleted runs."</p>
            }.into_any()
        } else if empty_query {
            view! {
                <p class="empty" data-testid="runs-empty">
                    "No runs yet. Point a training script at this server and log one:"
                    <code class="block">"export MLFLOW_TRACKING_URI=http://<this server>\n"
                    "python -c \"import mlflow; mlflow.set_experiment('<this experiment>'); mlflow.start_run(); mlflow.log_metric('loss', 0.5)\""</code>
                    "or submit a job from a template."
                </p>
            }.into_any()
        } else {
            view! {
                <p class="empty" data-testid="runs-empty">
                    "No run matches this query. Loosen it, or clear it to see every run."
                </p>
            }.into_any()
        })}
        <div class="runs-scroll" node_ref=scroller tabindex="0" role="region"
            aria-label="Runs; arrows move, space selects, Enter opens"
            data-testid="runs"
            on:scroll=move |_| {
                if let Some(el) = scroller.get_untracked() {
                    scroll_top.set(el.scroll_top() as f64);
                }
            }
            on:keydown=on_key>
            // Its header is row 1: the runs are rows 2 on.
            <table class="table runs-table" role="grid" aria-rowcount=(total + 1).to_string()
                aria-label="Runs">
                <thead>{header}</thead>
                <tbody>
                    <tr class="spacer" aria-hidden="true">
                        <td colspan=width style=move || format!("height:{}px", window.get().0 as f64 * ROW_PX)></td>
                    </tr>
                    <For
                        each=move || { let (a, b) = window.get(); a..b }
                        key=move |i| (*i, row_at(*i).map(|r| r.run_id))
                        children=move |i| {
                            let toggle = toggle.clone();
                            match row_at(i) {
                                Some(row) => view! {
                                    <RunRowView row index=i selected focused toggle/>
                                }.into_any(),
                                None => view! {
                                    <tr class="loading" aria-busy="true"><td colspan=width>"…"</td></tr>
                                }.into_any(),
                            }
                        }
                    />
                    <tr class="spacer" aria-hidden="true">
                        <td colspan=width style=move || format!("height:{}px", (total - window.get().1) as f64 * ROW_PX)></td>
                    </tr>
                </tbody>
            </table>
        </div>
        <nav class="pager" aria-label="Pages of runs">
            {(start > 0).then(|| view! {
                <a href=TableState { offset: start.saturating_sub(PAGE_ROWS), ..state.get_untracked() }.to_query()>"← Previous 100"</a>
            })}
            {(start + PAGE_ROWS < total).then(|| view! {
                <a href=TableState { offset: start + PAGE_ROWS, ..state.get_untracked() }.to_query() data-testid="next-page">"Next 100 →"</a>
            })}
        </nav>
    }
    .into_any()
}

#[component]
fn RunRowView(
    row: RunRow,
    index: u64,
    selected: Memo<HashSet<String>>,
    focused: RwSignal<Option<u64>>,
    toggle: impl Fn(String) + Clone + Send + Sync + 'static,
) -> impl IntoView {
    let id = row.run_id.clone();
    let is_selected = {
        let id = id.clone();
        Signal::derive(move || selected.with(|s| s.contains(&id)))
    };
    let duration = row
        .end_time
        .map(|end| duration_text(end - row.start_time))
        .unwrap_or_default();
    let href = format!("/experiments/{}/runs/{}", row.experiment_id, row.run_id);
    view! {
        <tr data-run=id.clone() class:selected=is_selected class:focused=move || focused.get() == Some(index)
            aria-selected=move || if is_selected.get() { "true" } else { "false" }
            aria-rowindex=(index + 2).to_string()>
            <td class="select">
                <input type="checkbox" tabindex="-1" aria-label=format!("Select {}", row.name)
                    prop:checked=is_selected
                    on:change={
                        let id = id.clone();
                        move |_| toggle(id.clone())
                    }/>
            </td>
            <td class="name" title=row.name.clone()>
                {row.parent_run_id.clone().map(|parent| view! {
                    <a class="parent-link" tabindex="-1" data-testid="parent-link"
                        href=format!("/experiments/{}/runs/{}", row.experiment_id, parent)
                        title="Made under another run: open its parent"
                        aria-label="Open its parent run">"↳"</a>
                })}
                <a href=href tabindex="-1">{row.name.clone()}</a>
                {(row.children > 0).then(|| view! {
                    <a class="children-link" tabindex="-1" data-testid="children-link"
                        href=format!(
                            "/experiments/{}{}",
                            row.experiment_id,
                            query_string([("q", children_query(&row.run_id).as_str())])
                        )
                        title=format!("{} {} made under this run: show them", row.children, if row.children == 1 { "run" } else { "runs" })>
                        {format!("+{}", row.children)}
                    </a>
                })}
            </td>
            <td><span class=status_class(&row.status)>{row.status.clone()}</span></td>
            <td>{format_utc(row.start_time)}</td>
            <td class="num">{duration}</td>
            <td>{row.user.clone()}</td>
            {row.cells.into_iter().map(|cell| {
                let (class, text) = match &cell {
                    Some(Cell::Num(_)) => ("num", cell.as_ref().map(Cell::display).unwrap_or_default()),
                    Some(Cell::Text(t)) => ("", t.clone()),
                    None => ("muted", String::new()),
                };
                view! { <td class=class title=text.clone()>{text.clone()}</td> }
            }).collect_view()}
        </tr>
    }
    .into_any()
}

/// Keeps a focused row in view by scrolling the box.
#[allow(unused_variables)]
fn scroll_into_view(
    scroller: NodeRef<leptos::html::Div>,
    index: u64,
    scroll_top: RwSignal<f64>,
    view_height: RwSignal<f64>,
) {
    let top = index as f64 * ROW_PX;
    let now = scroll_top.get_untracked();
    // The sticky header covers the first row's height.
    let visible = view_height.get_untracked() - ROW_PX;
    let target = if top < now {
        Some(top)
    } else if top + ROW_PX > now + visible {
        Some(top + ROW_PX - visible)
    } else {
        None
    };
    if let (Some(target), Some(el)) = (target, scroller.get_untracked()) {
        el.set_scroll_top(target.max(0.0) as i32);
        scroll_top.set(target.max(0.0));
    }
}

/// In the browser: the pages of the rows in view that are not loaded yet.
#[allow(unused_variables)]
fn fetch_missing_pages(
    experiment_id: i64,
    state: Memo<TableState>,
    window: Memo<(u64, u64)>,
    cache: RwSignal<HashMap<u64, Vec<RunRow>>>,
) {
    #[cfg(feature = "hydrate")]
    {
        let asked: StoredValue<HashSet<u64>> = StoredValue::new(HashSet::new());
        Effect::new(move |_| {
            let (first, last) = window.get();
            if first >= last {
                return;
            }
            for page in page_of(first)..=page_of(last - 1) {
                if cache.with_untracked(|c| c.contains_key(&page))
                    || asked.with_value(|a| a.contains(&page))
                {
                    continue;
                }
                asked.update_value(|a| {
                    a.insert(page);
                });
                let s = state.get_untracked();
                leptos::task::spawn_local(async move {
                    if let Ok(found) = list_runs_page(
                        experiment_id,
                        s.q,
                        s.sort,
                        s.cols,
                        page * PAGE_ROWS,
                        s.deleted,
                    )
                    .await
                    {
                        cache.update(|c| {
                            c.insert(page, found.rows);
                        });
                    } else {
                        // Asked again when the rows come back into view.
                        asked.update_value(|a| {
                            a.remove(&page);
                        });
                    }
                });
            }
        });
    }
}

/// In the browser: the box's real height, and the first row shown at the
/// top when the page opened at an offset.
#[allow(unused_variables)]
fn measure_and_scroll(
    scroller: NodeRef<leptos::html::Div>,
    view_height: RwSignal<f64>,
    scroll_top: RwSignal<f64>,
    start: u64,
) {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if let Some(el) = scroller.get() {
            let height = el.client_height() as f64;
            if height > 0.0 {
                view_height.set(height);
            }
            let top = start as f64 * ROW_PX;
            el.set_scroll_top(top as i32);
            scroll_top.set(top);
        }
    });
}
