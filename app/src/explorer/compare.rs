//! `/compare?run=A&run=B…`: selected runs side by side. An overlay chart
//! per chosen metric (axis, smoothing, log scale, zoom, hover readout,
//! legend to hide runs, grouping by a param or tag with the group's mean and
//! min–max band), the params that differ, parallel coordinates and a
//! param-vs-metric scatter. The view is in the URL.

use std::collections::HashSet;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::NavigateOptions;
use leptos_router::hooks::{use_navigate, use_query_map};
use leptos_router::params::ParamsMap;
use trainyard_domain::explorer::{Cell, Column, CompareRun, SeriesFigures, XAxis, group_runs};

use super::api::{compare_runs, metric_figures};
use super::chart::{ChartOptions, Groups, Line, MetricChart, swatch, themed};
use super::run::ChartControls;
use super::{query_string, toggled};
use crate::error::AppError;
use crate::pages::ErrorNote;

/// Charts shown when the URL names no metric.
const DEFAULT_METRICS: usize = 4;
/// Params on the parallel coordinates when the URL names none.
const DEFAULT_AXES: usize = 6;

/// The comparison's view as the URL holds it.
#[derive(Debug, Clone, PartialEq, Default)]
struct CompareState {
    runs: Vec<String>,
    /// None: the first few metrics.
    metrics: Option<Vec<String>>,
    options: ChartOptions,
    group: Option<String>,
    hide_identical: bool,
    /// Params on the parallel coordinates; None: those that differ.
    axes: Option<Vec<String>>,
    /// The metric of the parallel coordinates and the scatter.
    metric: Option<String>,
    /// The scatter's param.
    scatter: Option<String>,
    /// The x range every chart shows (a drag over one zooms all).
    zoom: Option<(f64, f64)>,
    /// Runs hidden from the charts and tables (a click on the legend),
    /// sorted.
    hidden: Vec<String>,
}

impl CompareState {
    fn from_query(map: &ParamsMap) -> CompareState {
        let list = |key: &str| -> Option<Vec<String>> {
            map.get_all(key)
                .map(|l| l.into_iter().filter(|v| !v.is_empty()).collect())
        };
        let mut runs: Vec<String> = Vec::new();
        for r in list("run").unwrap_or_default() {
            if !runs.contains(&r) {
                runs.push(r);
            }
        }
        CompareState {
            metrics: list("metric"),
            options: ChartOptions {
                x_axis: map
                    .get("x")
                    .and_then(|x| XAxis::parse(&x))
                    .unwrap_or_default(),
                smoothing: map
                    .get("smooth")
                    .and_then(|s| s.parse::<f64>().ok())
                    .filter(|s| s.is_finite())
                    .unwrap_or(0.0)
                    .clamp(0.0, 0.99),
                log_y: map.get("log").is_some_and(|v| v == "1"),
                ignore_outliers: map.get("outliers").is_some_and(|v| v == "ignore"),
            },
            group: map.get("group").filter(|g| Column::parse(g).is_some()),
            hide_identical: map.get("same").is_some_and(|v| v == "hide"),
            axes: list("axis"),
            metric: map.get("m").filter(|m| !m.is_empty()),
            scatter: map.get("sx").filter(|m| !m.is_empty()),
            zoom: map.get("x0").zip(map.get("x1")).and_then(|(a, b)| {
                let (a, b): (f64, f64) = (a.parse().ok()?, b.parse().ok()?);
                (a.is_finite() && b.is_finite() && a < b).then_some((a, b))
            }),
            hidden: {
                let mut hidden: Vec<String> = list("hide")
                    .unwrap_or_default()
                    .into_iter()
                    .filter(|h| runs.contains(h))
                    .collect();
                hidden.sort();
                hidden.dedup();
                hidden
            },
            runs,
        }
    }

    fn to_query(&self) -> String {
        let smooth = format!("{:.2}", self.options.smoothing);
        let mut pairs: Vec<(&str, &str)> = self.runs.iter().map(|r| ("run", r.as_str())).collect();
        if let Some(metrics) = &self.metrics {
            if metrics.is_empty() {
                pairs.push(("metric", ""));
            }
            pairs.extend(metrics.iter().map(|m| ("metric", m.as_str())));
        }
        if self.options.x_axis != XAxis::Step {
            pairs.push(("x", self.options.x_axis.as_str()));
        }
        if self.options.smoothing > 0.0 {
            pairs.push(("smooth", &smooth));
        }
        if self.options.log_y {
            pairs.push(("log", "1"));
        }
        if self.options.ignore_outliers {
            pairs.push(("outliers", "ignore"));
        }
        if let Some(g) = &self.group {
            pairs.push(("group", g));
        }
        if self.hide_identical {
            pairs.push(("same", "hide"));
        }
        if let Some(axes) = &self.axes {
            if axes.is_empty() {
                pairs.push(("axis", ""));
            }
            pairs.extend(axes.iter().map(|a| ("axis", a.as_str())));
        }
        if let Some(m) = &self.metric {
            pairs.push(("m", m));
        }
        if let Some(s) = &self.scatter {
            pairs.push(("sx", s));
        }
        let zoom = self.zoom.map(|(a, b)| (a.to_string(), b.to_string()));
        if let Some((a, b)) = &zoom {
            pairs.push(("x0", a));
            pairs.push(("x1", b));
        }
        pairs.extend(self.hidden.iter().map(|h| ("hide", h.as_str())));
        format!("/compare{}", query_string(pairs))
    }

    /// This view with another metric for the parallel coordinates and the
    /// scatter (which share it); empty: the default.
    fn with_metric(self, metric: String) -> CompareState {
        CompareState {
            metric: Some(metric).filter(|m| !m.is_empty()),
            ..self
        }
    }
}

fn union_keys<'a>(lists: impl Iterator<Item = &'a [(String, impl Sized + 'a)]>) -> Vec<String> {
    let mut keys: Vec<String> = Vec::new();
    for list in lists {
        for (k, _) in list {
            if !keys.contains(k) {
                keys.push(k.clone());
            }
        }
    }
    keys.sort();
    keys
}

/// The `n` metrics the most runs logged (a metric of one run alone is
/// charted after those all share), in the picker's order.
fn most_shared_metrics(runs: &[CompareRun], n: usize) -> Vec<String> {
    let mut by_key: std::collections::BTreeMap<&str, usize> = std::collections::BTreeMap::new();
    for run in runs {
        for (key, _) in &run.metrics {
            *by_key.entry(key.as_str()).or_default() += 1;
        }
    }
    let mut counts: Vec<(String, usize)> =
        by_key.into_iter().map(|(k, c)| (k.to_owned(), c)).collect();
    // Most runs first; by name among equals (the map's order, kept).
    counts.sort_by_key(|c| std::cmp::Reverse(c.1));
    let mut keys: Vec<String> = counts.into_iter().take(n).map(|(k, _)| k).collect();
    keys.sort();
    keys
}

/// The runs not hidden, each with its place in the comparison (its colour).
fn shown<'a>(runs: &'a [CompareRun], hidden: &HashSet<String>) -> Vec<(usize, &'a CompareRun)> {
    runs.iter()
        .enumerate()
        .filter(|(_, r)| !hidden.contains(&r.run_id))
        .collect()
}

/// Params whose value is not the same in every run.
fn differing_params(runs: &[CompareRun], keys: &[String]) -> Vec<String> {
    keys.iter()
        .filter(|k| {
            let column = Column::Param((*k).clone());
            let first = runs.first().and_then(|r| r.value_of(&column));
            runs.iter().any(|r| r.value_of(&column) != first)
        })
        .cloned()
        .collect()
}

#[component]
pub fn ComparePage() -> impl IntoView {
    let query = use_query_map();
    let state = Memo::new(move |_| CompareState::from_query(&query.read()));
    let runs_key = Memo::new(move |_| state.get().runs);
    let runs = Resource::new(
        move || runs_key.get(),
        |ids| async move {
            if ids.is_empty() {
                Err(AppError::NotFound(
                    "no runs chosen: select runs in an experiment's table, then Compare".to_owned(),
                ))
            } else {
                compare_runs(ids).await
            }
        },
    );
    view! {
        <Title text="Compare runs"/>
        <section class="page-head"><h1>"Compare runs"</h1></section>
        <Suspense fallback=|| view! { <p class="muted">"Loading runs…"</p> }>
            {move || Suspend::new(async move {
                match runs.await {
                    Ok(list) => view! { <Comparison runs=list state/> }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Comparison(runs: Vec<CompareRun>, state: Memo<CompareState>) -> impl IntoView {
    let navigate = use_navigate();
    let go = move |next: CompareState| {
        navigate(
            &next.to_query(),
            NavigateOptions {
                replace: true,
                scroll: false,
                ..Default::default()
            },
        );
    };
    let metric_keys = union_keys(runs.iter().map(|r| r.metrics.as_slice()));
    let param_keys = union_keys(runs.iter().map(|r| r.params.as_slice()));
    let tag_keys = union_keys(runs.iter().map(|r| r.tags.as_slice()));
    let differing = differing_params(&runs, &param_keys);
    let runs = StoredValue::new(runs);
    // Hidden runs, kept in the URL both ways as the zoom is.
    let hidden: RwSignal<HashSet<String>> =
        RwSignal::new(state.get_untracked().hidden.into_iter().collect());
    {
        let go = go.clone();
        Effect::new(move |_| {
            let mut h: Vec<String> = hidden.get().into_iter().collect();
            h.sort();
            let s = state.get_untracked();
            if s.hidden != h {
                go(CompareState { hidden: h, ..s });
            }
        });
        Effect::new(move |_| {
            let h: HashSet<String> = state.get().hidden.into_iter().collect();
            if hidden.with_untracked(|now| *now != h) {
                hidden.set(h);
            }
        });
    }

    // Controls edit a signal; the URL follows it.
    let options = RwSignal::new(state.get_untracked().options);
    {
        let go = go.clone();
        Effect::new(move |_| {
            let o = options.get();
            let s = state.get_untracked();
            if s.options != o {
                go(CompareState { options: o, ..s });
            }
        });
    }
    // One zoom for every chart, kept in the URL both ways (a link brings
    // the zoom back; the URL read elsewhere sets it here).
    let zoom = RwSignal::new(state.get_untracked().zoom);
    {
        let go = go.clone();
        Effect::new(move |_| {
            let z = zoom.get();
            let s = state.get_untracked();
            if s.zoom != z {
                go(CompareState { zoom: z, ..s });
            }
        });
        Effect::new(move |_| {
            let z = state.get().zoom;
            if zoom.get_untracked() != z {
                zoom.set(z);
            }
        });
    }

    let lines = Signal::derive(move || {
        let hidden = hidden.get();
        runs.with_value(|runs| {
            shown(runs, &hidden)
                .into_iter()
                .map(|(i, r)| Line {
                    run_id: r.run_id.clone(),
                    label: r.name.clone(),
                    color: i,
                })
                .collect::<Vec<_>>()
        })
    });
    // Grouped once per change, not on each read (every legend chip reads it).
    let group = Memo::new(move |_| {
        let by = state.get().group?;
        let column = Column::parse(&by)?;
        let groups: Groups = runs.with_value(|r| group_runs(r, &column));
        Some((by, groups))
    });
    let chosen_metrics = {
        let defaults = runs.with_value(|r| most_shared_metrics(r, DEFAULT_METRICS));
        Memo::new(move |_| state.get().metrics.unwrap_or_else(|| defaults.clone()))
    };

    let toggle_metric = {
        let go = go.clone();
        move |key: String| {
            let list = toggled(chosen_metrics.get_untracked(), key);
            go(CompareState {
                metrics: Some(list),
                ..state.get_untracked()
            });
        }
    };
    let set_group = {
        let go = go.clone();
        move |value: String| {
            let s = state.get_untracked();
            go(CompareState {
                group: Some(value).filter(|v| !v.is_empty()),
                ..s
            });
        }
    };

    let group_choices: Vec<String> = param_keys
        .iter()
        .map(|k| Column::Param(k.clone()).name())
        .chain(tag_keys.iter().map(|k| Column::Tag(k.clone()).name()))
        .collect();

    view! {
        <ul class="legend" data-testid="legend" aria-label="Runs; click one to hide or show it">
            {runs.with_value(|runs| runs.iter().enumerate().map(|(i, r)| {
                let id = r.run_id.clone();
                let shown = {
                    let id = id.clone();
                    Signal::derive(move || !hidden.with(|h| h.contains(&id)))
                };
                view! {
                    <li>
                        <button type="button" class="legend-entry" aria-pressed=move || shown.get().to_string()
                            data-run=id.clone() class:off=move || !shown.get()
                            on:click={
                                let id = id.clone();
                                move |_| hidden.update(|h| { if !h.remove(&id) { h.insert(id.clone()); } })
                            }>
                            // Grouped, a run wears its group's colour, as
                            // the group's line does.
                            <span class="swatch" style={
                                let id = id.clone();
                                move || {
                                    let color = group
                                        .with(|g| g.as_ref().and_then(|(_, groups)| groups.iter().position(|(_, ids)| ids.contains(&id))))
                                        .unwrap_or(i);
                                    format!("background:{}", swatch(color))
                                }
                            }></span>
                            {r.name.clone()}
                        </button>
                        " "
                        <a class="muted" href=format!("/experiments/{}/runs/{}", r.experiment_id, r.run_id)>"open"</a>
                    </li>
                }
            }).collect_view())}
        </ul>
        <div class="compare-controls">
            <ChartControls options/>
            <label>"group by "
                <select data-testid="group-by" on:change=move |ev| set_group(event_target_value(&ev))>
                    <option value="" selected=move || state.get().group.is_none()>"(no grouping)"</option>
                    {group_choices.into_iter().map(|c| {
                        let value = c.clone();
                        let label = c.clone();
                        view! { <option value=c selected=move || state.get().group.as_deref() == Some(value.as_str())>{label}</option> }
                    }).collect_view()}
                </select>
            </label>
            <details class="metric-picker">
                <summary>"Metrics"</summary>
                {metric_keys.iter().map(|k| {
                    let key = k.clone();
                    let checked = {
                        let key = key.clone();
                        move || chosen_metrics.get().contains(&key)
                    };
                    let toggle_metric = toggle_metric.clone();
                    view! {
                        <label class="check">
                            <input type="checkbox" data-metric=key.clone() prop:checked=checked
                                on:change={
                                    let key = key.clone();
                                    move |_| toggle_metric(key.clone())
                                }/>
                            {key.clone()}
                        </label>
                    }
                }).collect_view()}
            </details>
        </div>
        {metric_keys.is_empty().then(|| view! {
            <p class="empty">"These runs have logged no metrics."</p>
        })}
        <MetricsTable runs hidden keys=chosen_metrics/>
        <div class="charts" data-testid="compare-charts">
            <For each=move || chosen_metrics.get() key=|k| k.clone() let:key>
                <MetricChart key lines group options=Signal::from(options) tick=Signal::derive(|| 0) zoom/>
            </For>
        </div>
        <ParamDiff runs hidden param_keys=param_keys.clone() state go=go.clone()/>
        <ParallelView runs hidden param_keys differing metric_keys=metric_keys.clone() state go=go.clone()/>
        <ScatterView runs hidden metric_keys state go/>
    }
    .into_any()
}

/// What people read first: for each chosen metric, every shown run's last
/// value, lowest and highest, with the step of each (the last one large).
#[component]
fn MetricsTable(
    runs: StoredValue<Vec<CompareRun>>,
    hidden: RwSignal<HashSet<String>>,
    keys: Memo<Vec<String>>,
) -> impl IntoView {
    let run_ids: Vec<String> = runs.with_value(|r| r.iter().map(|r| r.run_id.clone()).collect());
    let figures = Resource::new(
        move || keys.get(),
        move |keys| {
            let run_ids = run_ids.clone();
            async move {
                if keys.is_empty() {
                    return Ok((keys, Vec::new()));
                }
                metric_figures(run_ids, keys.clone())
                    .await
                    .map(|list| (keys, list))
            }
        },
    );
    // Laid out as the params are: a row per metric, a column per run.
    let table = move |keys: Vec<String>, list: Vec<SeriesFigures>| {
        let find = |run: &str, key: &str| list.iter().find(|f| f.run_id == run && f.key == key);
        let at = |v: Option<&(Cell, i64)>| match v {
            Some((value, step)) => (value.display(), format!("@{step}")),
            None => ("–".to_owned(), String::new()),
        };
        let rows = keys
            .iter()
            .map(|key| {
                let cells = runs.with_value(|runs| {
                    runs.iter()
                        .map(|r| {
                            let id = r.run_id.clone();
                            let figures = match find(&r.run_id, key) {
                                None => view! { <span class="muted">"–"</span> }.into_any(),
                                Some(f) => {
                                let (last, last_step) = at(Some(&f.last));
                                let (min, min_step) = at(f.min.as_ref());
                                let (max, max_step) = at(f.max.as_ref());
                                view! {
                                    <span class="figure-last" data-figure="last">{last}</span>
                                    <span class="muted">" " {last_step}</span>
                                    <span class="figure-range muted">
                                        "min " <span data-figure="min">{min}</span> " " {min_step}
                                        " · max " <span data-figure="max">{max}</span> " " {max_step}
                                    </span>
                                }
                                .into_any()
                                }
                            };
                            view! {
                                <td data-run=id.clone() class:hidden=move || hidden.with(|h| h.contains(&id))>
                                    {figures}
                                </td>
                            }
                        })
                        .collect_view()
                });
                view! { <tr data-metric=key.clone()><th scope="row">{key.clone()}</th>{cells}</tr> }
            })
            .collect_view();
        view! {
            <div class="table-wrap">
                <table class="table figures" data-testid="metric-figures">
                    <thead><tr>
                        <th scope="col">"Metric"</th>
                        {runs.with_value(|runs| runs.iter().enumerate().map(|(i, r)| {
                            let id = r.run_id.clone();
                            view! {
                                <th scope="col" class:hidden=move || hidden.with(|h| h.contains(&id))>
                                    <span class="swatch" style=format!("background:{}", swatch(i))></span>{r.name.clone()}
                                </th>
                            }
                        }).collect_view())}
                    </tr></thead>
                    <tbody>{rows}</tbody>
                </table>
            </div>
        }
    };
    view! {
        <section class="metric-figures">
            <h2>"Metrics"</h2>
            <Transition fallback=|| view! { <p class="muted">"Loading figures…"</p> }>
                {move || Suspend::new(async move {
                    match figures.await {
                        Ok((keys, _)) if keys.is_empty() => view! {
                            <p class="muted">"Choose metrics above to see their figures."</p>
                        }.into_any(),
                        Ok((keys, list)) => table(keys, list).into_any(),
                        Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    }
                })}
            </Transition>
        </section>
    }
    .into_any()
}

/// The params of the runs side by side; differing rows stand out, and
/// identical ones can be hidden.
#[component]
fn ParamDiff(
    runs: StoredValue<Vec<CompareRun>>,
    hidden: RwSignal<HashSet<String>>,
    param_keys: Vec<String>,
    state: Memo<CompareState>,
    go: impl Fn(CompareState) + Clone + Send + Sync + 'static,
) -> impl IntoView {
    // Each param's values beside the run they belong to: whether a row is
    // identical is asked of the runs shown, so hiding a run can make one so.
    type Row = (String, Vec<(String, Option<String>)>);
    let rows: Vec<Row> = runs.with_value(|runs| {
        param_keys
            .iter()
            .map(|k| {
                let column = Column::Param(k.clone());
                let values = runs
                    .iter()
                    .map(|r| (r.run_id.clone(), r.value_of(&column).map(|c| c.display())))
                    .collect();
                (k.clone(), values)
            })
            .collect()
    });
    let same = move |values: &[(String, Option<String>)]| {
        hidden.with(|h| {
            let mut shown = values
                .iter()
                .filter(|(id, _)| !h.contains(id))
                .map(|(_, v)| v);
            let first = shown.next();
            shown.all(|v| Some(v) == first)
        })
    };
    let counted = rows.clone();
    let identical = move || counted.iter().filter(|(_, values)| same(values)).count();
    view! {
        <section class="param-diff">
            <div class="section-head">
                <h2>"Parameters"</h2>
                <label class="check">
                    <input type="checkbox" data-testid="hide-identical" prop:checked=move || state.get().hide_identical
                        on:change=move |ev| {
                            let on = event_target_checked(&ev);
                            go(CompareState { hide_identical: on, ..state.get_untracked() });
                        }/>
                    {move || format!("hide identical ({})", identical())}
                </label>
            </div>
            {if rows.is_empty() {
                view! { <p class="muted">"These runs have no parameters."</p> }.into_any()
            } else {
                view! {
                    <div class="table-wrap">
                        <table class="table" data-testid="param-diff">
                            <thead><tr>
                                <th>"Param"</th>
                                {runs.with_value(|runs| runs.iter().enumerate().map(|(i, r)| {
                                    let id = r.run_id.clone();
                                    view! {
                                        <th class:hidden=move || hidden.with(|h| h.contains(&id))>
                                            <span class="swatch" style=format!("background:{}", swatch(i))></span>{r.name.clone()}
                                        </th>
                                    }
                                }).collect_view())}
                            </tr></thead>
                            <tbody>
                                {rows.into_iter().map(|(key, values)| {
                                    let (differs, alike) = (values.clone(), values.clone());
                                    view! {
                                        <tr data-param=key.clone() class:differs=move || !same(&differs)
                                            class:hidden=move || same(&alike) && state.get().hide_identical>
                                            <th scope="row">{key.clone()}</th>
                                            {values.into_iter().map(|(id, v)| view! {
                                                <td class:hidden=move || hidden.with(|h| h.contains(&id))>{v.unwrap_or_else(|| "–".to_owned())}</td>
                                            }).collect_view()}
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    </div>
                }.into_any()
            }}
        </section>
    }
    .into_any()
}

/// Parallel coordinates over chosen params and one metric.
#[component]
fn ParallelView(
    runs: StoredValue<Vec<CompareRun>>,
    hidden: RwSignal<HashSet<String>>,
    param_keys: Vec<String>,
    differing: Vec<String>,
    metric_keys: Vec<String>,
    state: Memo<CompareState>,
    go: impl Fn(CompareState) + Clone + Send + Sync + 'static,
) -> impl IntoView {
    let axes = {
        let differing = differing.clone();
        Memo::new(move |_| {
            state
                .get()
                .axes
                .unwrap_or_else(|| differing.iter().take(DEFAULT_AXES).cloned().collect())
        })
    };
    let metric = {
        let first = metric_keys.first().cloned();
        Memo::new(move |_| state.get().metric.or_else(|| first.clone()))
    };
    let svg = Memo::new(move |_| {
        let axes = axes.get();
        let metric = metric.get();
        let hidden = hidden.get();
        runs.with_value(|runs| {
            // Hidden runs are left out; the others keep their colours.
            let runs: Vec<(usize, &CompareRun)> = shown(runs, &hidden);
            let mut columns: Vec<trainyard_charts::Column> = axes
                .iter()
                .map(|k| trainyard_charts::Column {
                    name: k.clone(),
                    values: runs
                        .iter()
                        .map(|(_, r)| r.value_of(&Column::Param(k.clone())).map(|c| c.display()))
                        .collect(),
                })
                .collect();
            if let Some(m) = &metric {
                columns.push(trainyard_charts::Column {
                    name: m.clone(),
                    values: runs
                        .iter()
                        .map(|(_, r)| {
                            r.value_of(&Column::Metric(m.clone()))
                                .and_then(|c| c.as_number())
                                .map(|v| v.to_string())
                        })
                        .collect(),
                });
            }
            if columns.len() < 2 {
                return None;
            }
            let lines = runs
                .iter()
                .map(|&(i, r)| trainyard_charts::Line {
                    label: r.name.clone(),
                    color: i,
                })
                .collect();
            Some(
                trainyard_charts::parallel_svg(&trainyard_charts::Parallel {
                    columns,
                    lines,
                    width: 900,
                    height: 320,
                })
                .map(themed)
                .map_err(|e| e.to_string()),
            )
        })
    });
    let toggle_axis = {
        let go = go.clone();
        move |key: String| {
            let list = toggled(axes.get_untracked(), key);
            go(CompareState {
                axes: Some(list),
                ..state.get_untracked()
            });
        }
    };
    let set_metric = move |m: String| go(state.get_untracked().with_metric(m));
    view! {
        <section class="parallel">
            <div class="section-head">
                <h2>"Parallel coordinates"</h2>
                <details class="axis-picker">
                    <summary>"Params"</summary>
                    {param_keys.iter().map(|k| {
                        let key = k.clone();
                        let checked = {
                            let key = key.clone();
                            move || axes.get().contains(&key)
                        };
                        let toggle_axis = toggle_axis.clone();
                        view! {
                            <label class="check">
                                <input type="checkbox" prop:checked=checked on:change={
                                    let key = key.clone();
                                    move |_| toggle_axis(key.clone())
                                }/>
                                {key.clone()}
                            </label>
                        }
                    }).collect_view()}
                </details>
                <MetricSelect metric_keys=metric_keys.clone() current=metric on_pick=set_metric testid="parallel-metric"/>
            </div>
            {move || match svg.get() {
                Some(Ok(svg)) => view! { <div class="wide-chart" data-testid="parallel" inner_html=svg></div> }.into_any(),
                Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
                None => view! {
                    <p class="muted">"Choose at least two axes (params, or a param and the metric). Runs whose params are all the same have nothing to draw here."</p>
                }.into_any(),
            }}
        </section>
    }
    .into_any()
}

/// One numeric param against one metric.
#[component]
fn ScatterView(
    runs: StoredValue<Vec<CompareRun>>,
    hidden: RwSignal<HashSet<String>>,
    metric_keys: Vec<String>,
    state: Memo<CompareState>,
    go: impl Fn(CompareState) + Clone + Send + Sync + 'static,
) -> impl IntoView {
    // Params that are numbers in at least two runs.
    let numeric: Vec<String> = runs.with_value(|runs| {
        let keys = union_keys(runs.iter().map(|r| r.params.as_slice()));
        keys.into_iter()
            .filter(|k| {
                runs.iter()
                    .filter_map(|r| r.value_of(&Column::Param(k.clone())))
                    .filter(|c| c.as_number().is_some())
                    .count()
                    >= 2
            })
            .collect()
    });
    let param = {
        let first = numeric.first().cloned();
        Memo::new(move |_| state.get().scatter.or_else(|| first.clone()))
    };
    let metric = {
        let first = metric_keys.first().cloned();
        Memo::new(move |_| state.get().metric.or_else(|| first.clone()))
    };
    let svg = Memo::new(move |_| {
        let (Some(p), Some(m)) = (param.get(), metric.get()) else {
            return None;
        };
        let log_y = state.get().options.log_y;
        let hidden = hidden.get();
        runs.with_value(|runs| {
            let points = shown(runs, &hidden)
                .into_iter()
                .filter_map(|(i, r)| {
                    let x = r.value_of(&Column::Param(p.clone()))?.as_number()?;
                    let y = r.value_of(&Column::Metric(m.clone()))?.as_number()?;
                    Some(trainyard_charts::ScatterPoint {
                        label: r.name.clone(),
                        color: i,
                        x,
                        y,
                    })
                })
                .collect();
            Some(
                trainyard_charts::scatter_svg(&trainyard_charts::Scatter {
                    title: format!("{m} vs {p}"),
                    x_label: p.clone(),
                    y_label: m.clone(),
                    points,
                    log_y,
                    width: 560,
                    height: 320,
                })
                .map(themed)
                .map_err(|e| e.to_string()),
            )
        })
    });
    let set_param = {
        let go = go.clone();
        move |p: String| {
            go(CompareState {
                scatter: Some(p).filter(|p| !p.is_empty()),
                ..state.get_untracked()
            })
        }
    };
    let set_metric = move |m: String| go(state.get_untracked().with_metric(m));
    view! {
        <section class="scatter">
            <div class="section-head">
                <h2>"Param vs metric"</h2>
                <label>"param "
                    <select data-testid="scatter-param" on:change=move |ev| set_param(event_target_value(&ev))>
                        {numeric.iter().map(|k| {
                            let key = k.clone();
                            view! { <option value=k.clone() selected=move || param.get().as_deref() == Some(key.as_str())>{k.clone()}</option> }
                        }).collect_view()}
                    </select>
                </label>
                <MetricSelect metric_keys current=metric on_pick=set_metric testid="scatter-metric"/>
            </div>
            {move || match svg.get() {
                Some(Ok(svg)) => view! { <div class="wide-chart" data-testid="scatter" inner_html=svg></div> }.into_any(),
                Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
                None => view! { <p class="muted">"A scatter needs a param that is a number in at least two runs, and a metric."</p> }.into_any(),
            }}
        </section>
    }
    .into_any()
}

#[component]
fn MetricSelect(
    metric_keys: Vec<String>,
    current: Memo<Option<String>>,
    on_pick: impl Fn(String) + Send + Sync + 'static,
    testid: &'static str,
) -> impl IntoView {
    view! {
        <label>"metric "
            <select data-testid=testid on:change=move |ev| on_pick(event_target_value(&ev))>
                {metric_keys.into_iter().map(|k| {
                    let key = k.clone();
                    let label = k.clone();
                    view! { <option value=k selected=move || current.get().as_deref() == Some(key.as_str())>{label}</option> }
                }).collect_view()}
            </select>
        </label>
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_default_charts_are_the_metrics_most_runs_logged() {
        use trainyard_domain::explorer::{Cell, CompareRun};
        let run = |id: &str, keys: &[&str]| CompareRun {
            run_id: id.to_owned(),
            experiment_id: 0,
            name: id.to_owned(),
            status: "FINISHED".to_owned(),
            start_time: 0,
            metrics: keys
                .iter()
                .map(|k| (k.to_string(), Cell::Num(1.0)))
                .collect(),
            params: Vec::new(),
            tags: Vec::new(),
        };
        // A sweep's parent logs acc, bm, f1 and loss; its three trials loss
        // and val_acc: val_acc comes before the parent's own.
        let runs = [
            run("parent", &["acc", "bm", "f1", "loss"]),
            run("a", &["loss", "val_acc"]),
            run("b", &["loss", "val_acc"]),
            run("c", &["loss", "val_acc"]),
        ];
        assert_eq!(
            super::most_shared_metrics(&runs, 4),
            ["acc", "bm", "loss", "val_acc"]
        );
        assert_eq!(super::most_shared_metrics(&runs, 1), ["loss"]);
    }

    use super::*;

    #[test]
    fn the_url_holds_the_whole_view() {
        let state = CompareState {
            runs: vec!["a".to_owned(), "b".to_owned()],
            metrics: Some(vec!["loss".to_owned()]),
            options: ChartOptions {
                x_axis: XAxis::Relative,
                smoothing: 0.6,
                log_y: true,
                ignore_outliers: true,
            },
            group: Some("params.lr".to_owned()),
            hide_identical: true,
            axes: Some(vec!["lr".to_owned(), "batch".to_owned()]),
            metric: Some("acc".to_owned()),
            scatter: Some("lr".to_owned()),
            zoom: Some((-12.5, 40.0)),
            hidden: vec!["b".to_owned()],
        };
        let url = state.to_query();
        let query = url.strip_prefix("/compare").unwrap();
        let mut map = ParamsMap::new();
        for pair in query.trim_start_matches('?').split('&') {
            let (k, v) = pair.split_once('=').unwrap();
            map.insert(k.to_owned(), v.to_owned());
        }
        assert_eq!(CompareState::from_query(&map), state, "{url}");
    }

    #[test]
    fn only_params_that_differ_are_axes_by_default() {
        let run = |id: &str, lr: &str| CompareRun {
            run_id: id.to_owned(),
            experiment_id: 1,
            name: id.to_owned(),
            status: "FINISHED".to_owned(),
            start_time: 0,
            metrics: vec![],
            params: vec![
                ("lr".to_owned(), lr.to_owned()),
                ("seed".to_owned(), "1".to_owned()),
            ],
            tags: vec![],
        };
        let runs = [run("a", "0.1"), run("b", "0.2")];
        let keys = union_keys(runs.iter().map(|r| r.params.as_slice()));
        assert_eq!(keys, ["lr", "seed"]);
        assert_eq!(differing_params(&runs, &keys), ["lr"]);
    }
}
