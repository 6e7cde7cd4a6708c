//! One metric's chart, drawn in the browser with the same plotters code the
//! server uses for downloads (`trainyard-charts`).
//!
//! Charts are mounted lazily: the page holds a placeholder with the server's
//! rendering as a lazy `<img>` (so the page also shows its charts without
//! JavaScript), and a chart fetches its series and turns interactive only
//! when it scrolls into view. A chart then shows the value of every line
//! under the pointer, zooms to a range dragged across it (asking the server
//! again for that range at the full point budget) and resets on a double
//! click.

use leptos::prelude::*;
use trainyard_charts::{LineChart, Series};
use trainyard_domain::explorer::{SeriesData, XAxis};

#[cfg(feature = "hydrate")]
use super::api::chart_series;

/// Pixels of a chart drawn in the page (the SVG scales to its box).
pub(crate) const CHART_WIDTH: u32 = 560;
pub(crate) const CHART_HEIGHT: u32 = 300;
/// Buckets asked per line: about one per pixel column of the plot.
#[cfg(feature = "hydrate")]
const POINTS: usize = 1000;
/// The smallest drag that zooms, in pixels.
const MIN_DRAG_PX: f64 = 6.0;

/// A run's line: which run, its label, its colour.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Line {
    pub run_id: String,
    pub label: String,
    pub color: usize,
}

/// How the charts of a page draw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChartOptions {
    pub x_axis: XAxis,
    /// EMA weight, 0 (off) to 0.99.
    pub smoothing: f64,
    pub log_y: bool,
    /// Fit y to the bulk of the values, not to a diverged run.
    pub ignore_outliers: bool,
}

impl Default for ChartOptions {
    fn default() -> Self {
        ChartOptions {
            x_axis: XAxis::Step,
            smoothing: 0.0,
            log_y: false,
            ignore_outliers: false,
        }
    }
}

/// Groups of runs drawn as their mean with a min–max band: (label, run ids).
pub type Groups = Vec<(String, Vec<String>)>;

fn axis_of(x: XAxis) -> trainyard_charts::XAxis {
    match x {
        XAxis::Step => trainyard_charts::XAxis::Step,
        XAxis::Relative => trainyard_charts::XAxis::RelativeSeconds,
        XAxis::Wall => trainyard_charts::XAxis::WallTime,
    }
}

/// The server's relative axis is in milliseconds, the chart's in seconds.
fn x_scale(x: XAxis) -> f64 {
    if x == XAxis::Relative { 1000.0 } else { 1.0 }
}

/// The chart of one metric: a line per run, or per group. Shared by the
/// page and the server's download endpoint.
pub fn build_chart(
    key: &str,
    data: &[SeriesData],
    lines: &[(String, String, usize)],
    groups: Option<&Groups>,
    options: ChartOptions,
    x_range: Option<(f64, f64)>,
    size: (u32, u32),
) -> LineChart {
    let scale = x_scale(options.x_axis);
    let series_of = |run_id: &str, label: &str, color: usize| -> Option<Series> {
        let d = data.iter().find(|d| d.run_id == run_id && d.key == key)?;
        let nan = |v: &Option<f64>| v.unwrap_or(f64::NAN);
        Some(Series {
            label: label.to_owned(),
            color,
            x: d.x.iter().map(|x| x / scale).collect(),
            y: d.y.iter().map(nan).collect(),
            min: Some(d.min.iter().map(nan).collect()),
            max: Some(d.max.iter().map(nan).collect()),
        })
    };
    let series = match groups {
        Some(groups) => groups
            .iter()
            .enumerate()
            .filter_map(|(i, (label, ids))| {
                let members: Vec<Series> = ids
                    .iter()
                    .filter(|id| lines.iter().any(|(run, ..)| run == *id))
                    .filter_map(|id| series_of(id, label, i))
                    .collect();
                if members.is_empty() {
                    return None;
                }
                let refs: Vec<&Series> = members.iter().collect();
                Some(trainyard_charts::group_mean(
                    &format!("{label} ({})", members.len()),
                    i,
                    &refs,
                ))
            })
            .collect(),
        None => lines
            .iter()
            .filter_map(|(run, label, color)| series_of(run, label, *color))
            .collect(),
    };
    LineChart {
        title: key.to_owned(),
        x_axis: axis_of(options.x_axis),
        series,
        log_y: options.log_y,
        smoothing: options.smoothing,
        x_range: x_range.map(|(a, b)| (a / scale, b / scale)),
        width: size.0,
        height: size.1,
        legend: false,
        y_include: None,
        ignore_outliers: options.ignore_outliers,
    }
}

/// The server's rendering of a chart, for `<img>` and downloads.
pub(crate) fn chart_url(
    key: &str,
    lines: &[Line],
    group: Option<&str>,
    options: ChartOptions,
    x_range: Option<(f64, f64)>,
    format: &str,
) -> String {
    let smooth = format!("{:.2}", options.smoothing);
    let range = x_range.map(|(a, b)| (a.to_string(), b.to_string()));
    let mut pairs: Vec<(&str, &str)> = vec![("key", key)];
    pairs.extend(lines.iter().map(|l| ("run", l.run_id.as_str())));
    pairs.push(("x", options.x_axis.as_str()));
    if options.smoothing > 0.0 {
        pairs.push(("smooth", &smooth));
    }
    if options.log_y {
        pairs.push(("log", "1"));
    }
    if options.ignore_outliers {
        pairs.push(("outliers", "ignore"));
    }
    if let Some(group) = group {
        pairs.push(("group", group));
    }
    if let Some((a, b)) = &range {
        pairs.push(("x_min", a));
        pairs.push(("x_max", b));
    }
    pairs.push(("format", format));
    format!("/api/trainyard/v1/chart{}", super::query_string(pairs))
}

/// The readout under the pointer: data x, and each line's value there.
#[derive(Debug, Clone, PartialEq)]
struct Readout {
    px: f64,
    x: String,
    values: Vec<(String, usize, String)>,
}

/// One metric's chart. `lines` are the runs shown (hidden ones left out),
/// `groups` turns them into group means, `tick` asks for fresh data (a live
/// run logged more).
#[component]
pub(crate) fn MetricChart(
    #[prop(into)] key: String,
    #[prop(into)] lines: Signal<Vec<Line>>,
    #[prop(into)] group: Signal<Option<(String, Groups)>>,
    #[prop(into)] options: Signal<ChartOptions>,
    #[prop(into)] tick: Signal<u32>,
    /// A zoom shared with the page's other charts; each chart has its own
    /// otherwise.
    #[prop(optional)]
    zoom: Option<RwSignal<Option<(f64, f64)>>>,
) -> impl IntoView {
    let figure = NodeRef::<leptos::html::Figure>::new();
    let visible = RwSignal::new(false);
    let zoom = zoom.unwrap_or_else(|| RwSignal::new(None));
    let data: RwSignal<Option<Vec<SeriesData>>> = RwSignal::new(None);
    let error: RwSignal<Option<String>> = RwSignal::new(None);
    let readout: RwSignal<Option<Readout>> = RwSignal::new(None);
    let drag: RwSignal<Option<(f64, f64)>> = RwSignal::new(None);
    // Answers received: tests and the benchmark wait on it.
    let loads = RwSignal::new(0u32);

    watch_visibility(figure, visible);
    {
        let key = key.clone();
        load_series(key, lines, options, zoom, tick, visible, data, error, loads);
    }

    let drawn = {
        let key = key.clone();
        Memo::new(move |_| {
            let data = data.get()?;
            let lines = lines.get();
            let wire: Vec<(String, String, usize)> = lines
                .iter()
                .map(|l| (l.run_id.clone(), l.label.clone(), l.color))
                .collect();
            let group = group.get();
            let mut chart = build_chart(
                &key,
                &data,
                &wire,
                group.as_ref().map(|(_, g)| g),
                options.get(),
                zoom.get(),
                (CHART_WIDTH, CHART_HEIGHT),
            );
            // The card's caption names the metric; the plot gets the room.
            chart.title.clear();
            Some(match trainyard_charts::line_svg(&chart) {
                Ok((svg, frame)) => Ok((themed(svg), frame, chart)),
                Err(e) => Err(e.to_string()),
            })
        })
    };
    let frame =
        move || drawn.with(|d| d.as_ref().and_then(|r| r.as_ref().ok()).map(|(_, f, _)| *f));

    // Pointer positions in the SVG's own pixels.
    let to_px = move |ev: &leptos::ev::MouseEvent| -> Option<f64> { svg_px(figure, ev) };
    let on_move = move |ev: leptos::ev::MouseEvent| {
        let (Some(px), Some(frame)) = (to_px(&ev), frame()) else {
            return;
        };
        if let Some((start, _)) = drag.get_untracked() {
            drag.set(Some((start, px)));
        }
        if px < frame.left || px > frame.right {
            readout.set(None);
            return;
        }
        let x = frame.x_at(px);
        // A lone point answers within 5 % of the chart's width of it.
        let reach = (frame.x_max - frame.x_min).abs() * 0.05;
        let values = drawn.with_untracked(|d| {
            d.as_ref()
                .and_then(|r| r.as_ref().ok())
                .map(|(_, _, chart)| {
                    let smoothing = chart.smoothing;
                    chart
                        .series
                        .iter()
                        .filter_map(|s| {
                            let shown = if smoothing > 0.0 {
                                Series {
                                    y: trainyard_charts::ema(&s.y, smoothing),
                                    ..s.clone()
                                }
                            } else {
                                s.clone()
                            };
                            trainyard_charts::value_at(&shown, x, reach)
                                .map(|(_, y)| (s.label.clone(), s.color, y))
                        })
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        });
        // Highest first, as the lines stack on the chart; what is not a
        // number last.
        let mut values = values;
        values.sort_by(|a, b| {
            b.2.is_finite()
                .cmp(&a.2.is_finite())
                .then(b.2.total_cmp(&a.2))
        });
        let values = values
            .into_iter()
            .map(|(label, color, y)| (label, color, trainyard_domain::explorer::format_number(y)))
            .collect();
        let axis = options.get_untracked().x_axis;
        readout.set(Some(Readout {
            px,
            x: match axis {
                XAxis::Step => format!("step {}", x.round()),
                other => trainyard_charts::format_x(axis_of(other), x),
            },
            values,
        }));
    };
    let on_down = move |ev: leptos::ev::MouseEvent| {
        if ev.button() != 0 {
            return;
        }
        if let (Some(px), Some(frame)) = (to_px(&ev), frame())
            && px >= frame.left
            && px <= frame.right
        {
            ev.prevent_default();
            drag.set(Some((px, px)));
        }
    };
    let on_up = move |_| {
        let Some((a, b)) = drag.get_untracked() else {
            return;
        };
        drag.set(None);
        let Some(frame) = frame() else {
            return;
        };
        if (a - b).abs() < MIN_DRAG_PX {
            return;
        }
        let (lo, hi) = (a.min(b).max(frame.left), a.max(b).min(frame.right));
        let scale = x_scale(options.get_untracked().x_axis);
        zoom.set(Some((frame.x_at(lo) * scale, frame.x_at(hi) * scale)));
    };
    // The keyboard's zoom: + and − halve and double the range shown, the
    // arrows move it by a quarter, 0 or Escape shows it all again.
    let on_key = move |ev: leptos::ev::KeyboardEvent| {
        // Ctrl/⌘ with + − 0 stay the browser's own zoom.
        if ev.ctrl_key() || ev.meta_key() || ev.alt_key() {
            return;
        }
        let Some(frame) = frame() else {
            return;
        };
        let (lo, hi) = (frame.x_min, frame.x_max);
        let span = hi - lo;
        let zoomed = zoom.get_untracked().is_some();
        let next = match ev.key().as_str() {
            "+" | "=" => (lo + span / 4.0, hi - span / 4.0),
            "-" | "_" if zoomed => (lo - span / 2.0, hi + span / 2.0),
            "ArrowLeft" if zoomed => (lo - span / 4.0, hi - span / 4.0),
            "ArrowRight" if zoomed => (lo + span / 4.0, hi + span / 4.0),
            "0" | "Escape" if zoomed => {
                ev.prevent_default();
                zoom.set(None);
                return;
            }
            _ => return,
        };
        ev.prevent_default();
        if next.1 - next.0 > 0.0 {
            let scale = x_scale(options.get_untracked().x_axis);
            zoom.set(Some((next.0 * scale, next.1 * scale)));
        }
    };
    let on_leave = move |_| {
        readout.set(None);
        drag.set(None);
    };
    // Another axis makes the zoom meaningless.
    Effect::new(move |prev: Option<XAxis>| {
        let axis = options.get().x_axis;
        if prev.is_some_and(|p| p != axis) {
            zoom.set(None);
        }
        axis
    });

    let static_lines = lines.get_untracked();
    let static_group = group.get_untracked().map(|(by, _)| by);
    let alt = format!("Chart of {key}");
    let static_src = chart_url(
        &key,
        &static_lines,
        static_group.as_deref(),
        options.get_untracked(),
        None,
        "svg",
    );
    let download = {
        let key = key.clone();
        move |format: &'static str| {
            let group = group.get().map(|(by, _)| by);
            chart_url(
                &key,
                &lines.get(),
                group.as_deref(),
                options.get(),
                zoom.get(),
                format,
            )
        }
    };
    let download_png = download.clone();
    let legend = move || {
        drawn.with(|d| {
            d.as_ref()
                .and_then(|r| r.as_ref().ok())
                .map(|(_, _, chart)| {
                    chart
                        .series
                        .iter()
                        .map(|s| (s.label.clone(), s.color))
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
    };
    view! {
        <figure class="chart" node_ref=figure data-metric=key.clone()
            data-series=move || drawn.with(|d| d.as_ref().and_then(|r| r.as_ref().ok()).map(|(_, _, c)| c.series.len().to_string()))
            data-zoomed=move || zoom.get().is_some().to_string()
            data-loads=move || loads.get().to_string()>
            <figcaption>
                <span class="chart-title">{key.clone()}</span>
                <span class="chart-actions">
                    {move || zoom.get().is_some().then(|| view! {
                        <button type="button" class="link" data-testid="reset-zoom" on:click=move |_| zoom.set(None)>"Reset zoom"</button>
                    })}
                    <a href=move || download("svg") download=format!("{key}.svg") data-testid="download-svg">"SVG"</a>
                    <a href=move || download_png("png") download=format!("{key}.png")>"PNG"</a>
                </span>
            </figcaption>
            <div class="chart-area" tabindex="0" role="img"
                aria-label=format!("Chart of {key}; the values are in the page's metrics table. Keys: + and − zoom, arrows move, 0 shows all")
                on:keydown=on_key
                on:mousemove=on_move
                on:mousedown=on_down
                on:mouseup=on_up
                on:mouseleave=on_leave
                on:dblclick=move |_| zoom.set(None)>
                {move || match drawn.get() {
                    Some(Ok((svg, _, _))) => view! { <div class="chart-svg" inner_html=svg></div> }.into_any(),
                    Some(Err(e)) => view! { <p class="error">{e}</p> }.into_any(),
                    None => view! {
                        <img class="chart-static" src=static_src.clone() loading="lazy" alt=alt.clone()
                            width=CHART_WIDTH.to_string() height=CHART_HEIGHT.to_string()/>
                    }.into_any(),
                }}
                {move || readout.get().map(|r| view! {
                    <div class="chart-cursor" style=format!("left:{:.2}%", r.px / CHART_WIDTH as f64 * 100.0)></div>
                    // Right of the pointer in the chart's left half, left of it in
                    // the right half, so it stays on the card.
                    <div class="chart-readout" data-testid="readout"
                        class:flip={r.px > CHART_WIDTH as f64 / 2.0}
                        style=format!("left:{:.2}%", r.px / CHART_WIDTH as f64 * 100.0)>
                        <div class="muted">{r.x}</div>
                        {r.values.into_iter().map(|(label, color, value)| view! {
                            <div><span class="swatch" style=format!("background:{}", swatch(color))></span>
                            {label} ": " <strong>{value}</strong></div>
                        }).collect_view()}
                    </div>
                })}
                {move || drag.get().filter(|(a, b)| (a - b).abs() >= 1.0).map(|(a, b)| {
                    let (lo, hi) = (a.min(b), a.max(b));
                    view! {
                        <div class="chart-brush" style=format!(
                            "left:{:.2}%;width:{:.2}%",
                            lo / CHART_WIDTH as f64 * 100.0,
                            (hi - lo) / CHART_WIDTH as f64 * 100.0
                        )></div>
                    }
                })}
            </div>
            {move || error.get().map(|e| view! { <p class="error" role="alert">{e}</p> })}
            // Runs are named once for the page (its legend, or the run itself);
            // groups are the chart's own lines, so a grouped chart names them.
            {move || group.with(|g| g.is_some()).then(|| view! {
                <ul class="chart-legend">
                    {legend().into_iter().map(|(label, color)| view! {
                        <li><span class="swatch" style=format!("background:{}", swatch(color))></span>{label}</li>
                    }).collect_view()}
                </ul>
            })}
        </figure>
    }.into_any()
}

/// A chart drawn for the page: no background of its own and text in the
/// page's colour, so it sits on the card in the light and the dark theme.
/// (Downloads keep plotters' white background and grey text.)
pub(crate) fn themed(svg: String) -> String {
    svg.replacen("fill=\"#FFFFFF\"", "fill=\"none\"", 1)
        .replace("#444444", "currentColor")
        .replace("#E8E8E8", "#8080803a")
        .replace("#B0B0B0", "#80808099")
}

pub(crate) fn swatch(color: usize) -> String {
    trainyard_charts::color_hex(color)
}

/// The pointer's x in the chart's own pixels (the SVG scales with its box).
#[allow(unused_variables)]
fn svg_px(figure: NodeRef<leptos::html::Figure>, ev: &leptos::ev::MouseEvent) -> Option<f64> {
    #[cfg(feature = "hydrate")]
    {
        let el = figure.get_untracked()?;
        let area = el.query_selector(".chart-area").ok()??;
        let rect = area.get_bounding_client_rect();
        if rect.width() <= 0.0 {
            return None;
        }
        Some((ev.client_x() as f64 - rect.left()) * CHART_WIDTH as f64 / rect.width())
    }
    #[cfg(not(feature = "hydrate"))]
    None
}

/// In the browser: sets `visible` once the element nears the viewport.
#[allow(unused_variables)]
fn watch_visibility(target: NodeRef<leptos::html::Figure>, visible: RwSignal<bool>) {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        use wasm_bindgen::JsCast;
        use wasm_bindgen::closure::Closure;
        let Some(el) = target.get() else {
            return;
        };
        let callback = Closure::<dyn FnMut(js_sys::Array, web_sys::IntersectionObserver)>::new(
            move |entries: js_sys::Array, observer: web_sys::IntersectionObserver| {
                let seen = entries.iter().any(|e| {
                    e.unchecked_into::<web_sys::IntersectionObserverEntry>()
                        .is_intersecting()
                });
                if seen {
                    visible.set(true);
                    observer.disconnect();
                }
            },
        );
        let init = web_sys::IntersectionObserverInit::new();
        init.set_root_margin("200px");
        let Ok(observer) = web_sys::IntersectionObserver::new_with_options(
            callback.as_ref().unchecked_ref(),
            &init,
        ) else {
            // No observer (very old browser): draw at once.
            visible.set(true);
            return;
        };
        observer.observe(&el);
        let held = send_wrapper::SendWrapper::new((observer, callback));
        on_cleanup(move || held.take().0.disconnect());
    });
}

/// In the browser: once visible, fetches the series again whenever the
/// runs, the axis, the zoom or `tick` change.
#[allow(unused_variables, clippy::too_many_arguments)]
fn load_series(
    key: String,
    lines: Signal<Vec<Line>>,
    options: Signal<ChartOptions>,
    zoom: RwSignal<Option<(f64, f64)>>,
    tick: Signal<u32>,
    visible: RwSignal<bool>,
    data: RwSignal<Option<Vec<SeriesData>>>,
    error: RwSignal<Option<String>>,
    loads: RwSignal<u32>,
) {
    #[cfg(feature = "hydrate")]
    {
        // Only the newest answer counts: a zoom may overtake a live update.
        let generation = StoredValue::new(0u64);
        Effect::new(move |_| {
            if !visible.get() {
                return;
            }
            tick.track();
            let run_ids: Vec<String> = lines.with(|l| l.iter().map(|l| l.run_id.clone()).collect());
            let axis = options.with(|o| o.x_axis);
            let range = zoom.get();
            if run_ids.is_empty() {
                data.set(Some(Vec::new()));
                return;
            }
            generation.update_value(|g| *g += 1);
            let mine = generation.get_value();
            let request = trainyard_domain::explorer::SeriesRequest {
                run_ids,
                keys: vec![key.clone()],
                x_axis: axis,
                x_min: range.map(|r| r.0),
                x_max: range.map(|r| r.1),
                points: Some(POINTS),
            };
            leptos::task::spawn_local(async move {
                let answer = chart_series(request).await;
                // A chart gone meanwhile (its page redrew its charts for a
                // new metric) has nothing to draw it in.
                if generation.try_get_value() != Some(mine) {
                    return;
                }
                match answer {
                    Ok(series) => {
                        error.set(None);
                        data.set(Some(series));
                        loads.update(|n| *n += 1);
                    }
                    Err(e) => error.set(Some(e.to_string())),
                }
            });
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn data(run: &str, key: &str, ys: &[f64]) -> SeriesData {
        SeriesData {
            run_id: run.to_owned(),
            key: key.to_owned(),
            total_points: ys.len(),
            in_range: ys.len(),
            x: (0..ys.len()).map(|i| i as f64).collect(),
            y: ys.iter().map(|v| Some(*v)).collect(),
            min: ys.iter().map(|v| Some(*v)).collect(),
            max: ys.iter().map(|v| Some(*v)).collect(),
        }
    }

    #[test]
    fn a_chart_has_a_line_per_run_or_per_group() {
        let series = vec![
            data("a", "loss", &[3.0, 2.0, 1.0]),
            data("b", "loss", &[4.0, 3.0, 2.0]),
            data("c", "loss", &[5.0, 4.0, 3.0]),
            data("a", "acc", &[0.1, 0.2, 0.3]),
        ];
        let lines = vec![
            ("a".to_owned(), "run a".to_owned(), 0),
            ("b".to_owned(), "run b".to_owned(), 1),
            ("c".to_owned(), "run c".to_owned(), 2),
        ];
        let chart = build_chart(
            "loss",
            &series,
            &lines,
            None,
            ChartOptions::default(),
            None,
            (400, 200),
        );
        assert_eq!(chart.series.len(), 3);
        assert_eq!(chart.series[1].label, "run b");
        assert_eq!(chart.series[1].y, vec![4.0, 3.0, 2.0]);

        let groups: Groups = vec![
            ("lr=0.1".to_owned(), vec!["a".to_owned(), "b".to_owned()]),
            ("lr=0.2".to_owned(), vec!["c".to_owned()]),
        ];
        let chart = build_chart(
            "loss",
            &series,
            &lines,
            Some(&groups),
            ChartOptions::default(),
            None,
            (400, 200),
        );
        assert_eq!(chart.series.len(), 2);
        assert_eq!(chart.series[0].label, "lr=0.1 (2)");
        assert_eq!(chart.series[0].y, vec![3.5, 2.5, 1.5], "the group's mean");
        assert_eq!(chart.series[0].min.as_deref(), Some(&[3.0, 2.0, 1.0][..]));

        // A hidden run (not among the lines) leaves its group.
        let chart = build_chart(
            "loss",
            &series,
            &lines[1..],
            Some(&groups),
            ChartOptions::default(),
            None,
            (400, 200),
        );
        assert_eq!(chart.series[0].label, "lr=0.1 (1)");
    }

    #[test]
    fn page_charts_take_the_page_colours() {
        let lines = vec![("a".to_owned(), "a".to_owned(), 0)];
        let chart = build_chart(
            "loss",
            &[data("a", "loss", &[1.0, 2.0])],
            &lines,
            None,
            ChartOptions::default(),
            None,
            (400, 200),
        );
        let (svg, _) = trainyard_charts::line_svg(&chart).unwrap();
        assert!(
            svg.contains("#FFFFFF") && svg.contains("#444444"),
            "plotters' own colours"
        );
        let page = themed(svg);
        assert!(!page.contains("#FFFFFF") && !page.contains("#444444"));
        assert!(page.contains("currentColor"));
        assert!(
            page.contains(trainyard_charts::PALETTE[0].to_uppercase().as_str()),
            "the lines keep their colour"
        );
    }

    #[test]
    fn relative_time_is_drawn_in_seconds() {
        let mut d = data("a", "loss", &[1.0, 2.0]);
        d.x = vec![0.0, 90_000.0];
        let options = ChartOptions {
            x_axis: XAxis::Relative,
            ..ChartOptions::default()
        };
        let lines = vec![("a".to_owned(), "a".to_owned(), 0)];
        let chart = build_chart(
            "loss",
            &[d],
            &lines,
            None,
            options,
            Some((0.0, 60_000.0)),
            (400, 200),
        );
        assert_eq!(chart.series[0].x, vec![0.0, 90.0]);
        assert_eq!(chart.x_range, Some((0.0, 60.0)));
    }

    #[test]
    fn chart_urls_carry_the_view() {
        let lines = vec![Line {
            run_id: "r1".to_owned(),
            label: "x".to_owned(),
            color: 0,
        }];
        let options = ChartOptions {
            x_axis: XAxis::Wall,
            smoothing: 0.6,
            log_y: true,
            ignore_outliers: true,
        };
        let url = chart_url(
            "val loss",
            &lines,
            Some("params.lr"),
            options,
            Some((1.0, 2.0)),
            "png",
        );
        assert!(
            url.starts_with(
                "/api/trainyard/v1/chart?key=val%20loss&run=r1&x=wall&smooth=0.60&log=1"
            ),
            "{url}"
        );
        assert!(
            url.contains("group=params.lr")
                && url.contains("outliers=ignore")
                && url.contains("x_min=1&x_max=2")
                && url.ends_with("format=png"),
            "{url}"
        );
    }
}
