//! The charts on x/y axes: metric lines over steps or time, and param-vs-metric scatters.

use crate::format::{self, TickFormat, TickKind};
use crate::labels::{Placement, fit, text_height, text_width};
use crate::{
    ChartError, Frame, LineChart, SCATTER_LABELS_MAX, Scatter, ScatterPoint, XAxis, draw_err, ema,
    log10_or_nan, rgb,
};
use plotters::coord::Shift;
use plotters::coord::ranged1d::{KeyPointHint, NoDefaultFormatting, ValueFormatter};
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use std::ops::Range;

pub(crate) const TEXT: RGBColor = RGBColor(0x44, 0x44, 0x44);
const GRID: RGBColor = RGBColor(0xe8, 0xe8, 0xe8);
pub(crate) const BORDER: RGBColor = RGBColor(0xb0, 0xb0, 0xb0);
/// plotters sizes fonts in its own unit: the SVG gets `font-size` = size / 1.24.
pub(crate) const LABEL_FONT: f64 = 15.0;
const TITLE_FONT: f64 = 19.0;

type Chart<'a, DB> = ChartContext<'a, DB, Cartesian2d<Scale, Scale>>;

/// A point of a line (x, y, y) or of a band (x, min, max), in plotted units (log10 on a log axis).
type Pt = [f64; 3];

/// One axis: the shown range in plotted units, its ticks and how they read. It is the plotters
/// coordinate of the axis, so grid lines sit on our ticks and tick labels are ours.
#[derive(Clone)]
struct Scale {
    lo: f64,
    hi: f64,
    ticks: Vec<f64>,
    format: TickFormat,
}

impl Scale {
    /// `lo..hi` widened by `pad` of the span on both sides (a single value gets a range around
    /// it), with about `ticks` ticks.
    fn new(extent: Option<(f64, f64)>, pad: f64, ticks: u32, kind: TickKind) -> Scale {
        let (lo, hi) = match extent {
            Some((lo, hi)) if hi > lo => (lo - (hi - lo) * pad, hi + (hi - lo) * pad),
            Some((v, _)) => {
                let d = if v == 0.0 { 1.0 } else { v.abs() * 0.1 };
                (v - d, v + d)
            }
            None => (0.0, 1.0),
        };
        let (ticks, format) = format::ticks(lo, hi, ticks.max(2) as usize, kind);
        Scale {
            lo,
            hi,
            ticks,
            format,
        }
    }
}

impl Ranged for Scale {
    type FormatOption = NoDefaultFormatting;
    type ValueType = f64;

    fn map(&self, value: &f64, limit: (i32, i32)) -> i32 {
        RangedCoordf64::from(self.lo..self.hi).map(value, limit)
    }

    /// Our ticks as the (bold) grid; no light lines in between.
    fn key_points<H: KeyPointHint>(&self, hint: H) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            vec![]
        } else {
            self.ticks.clone()
        }
    }

    fn range(&self) -> Range<f64> {
        self.lo..self.hi
    }
}

impl ValueFormatter<f64> for Scale {
    fn format_ext(&self, value: &f64) -> String {
        self.format.label(*value)
    }
}

/// Room around the plot area, from the chart's size: small charts give up some of it.
struct Margins {
    top: u32,
    right: u32,
    bottom: u32,
    left: u32,
}

impl Margins {
    fn new((w, h): (u32, u32), title: bool, y_desc: bool) -> Margins {
        let left = if y_desc { 74 } else { 58 };
        Margins {
            top: if title { 30 } else { 12 }.min(h / 6),
            right: 20.min(w / 20),
            bottom: 40.min(h / 4),
            left: left.min(w / 4),
        }
    }

    fn plot_size(&self, (w, h): (u32, u32)) -> (u32, u32) {
        (
            w.saturating_sub(self.left + self.right + 4),
            h.saturating_sub(self.top + self.bottom + 4),
        )
    }
}

/// Draws a [`LineChart`]; see [`crate::line_svg`] for what it draws in which order.
pub(crate) fn line<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    c: &LineChart,
) -> Result<Frame, ChartError> {
    let ty = |v: f64| if c.log_y { log10_or_nan(v) } else { v };
    let smoothing = c.smoothing > 0.0;
    let zoom = c
        .x_range
        .filter(|(a, b)| a.is_finite() && b.is_finite() && a != b);
    let data_x = extent(c.series.iter().flat_map(|s| {
        s.x.iter()
            .zip(&s.y)
            .filter(|(_, y)| ty(**y).is_finite())
            .map(|(x, _)| *x)
    }));
    let window = match zoom {
        Some((a, b)) => (a.min(b), a.max(b)),
        None => data_x.unwrap_or((0.0, 1.0)),
    };

    let (mut bands, mut raw, mut smooth) = (vec![], vec![], vec![]);
    for s in &c.series {
        let n = s.x.len().min(s.y.len());
        let (x, y) = (&s.x[..n], &s.y[..n]);
        let line = |ys: &[f64]| clip(x.iter().zip(ys).map(|(x, y)| [*x, ty(*y), ty(*y)]), window);
        raw.push((s.color, line(y)));
        if smoothing {
            smooth.push((s.color, line(&ema(y, c.smoothing))));
        }
        if let (Some(lo), Some(hi)) = (&s.min, &s.max) {
            let band = x
                .iter()
                .zip(lo)
                .zip(hi)
                .map(|((x, lo), hi)| [*x, ty(*lo), ty(*hi)]);
            bands.push((s.color, clip(band, window)));
        }
    }
    let all = || {
        bands
            .iter()
            .chain(&raw)
            .chain(&smooth)
            .flat_map(|(_, segs)| segs.iter().flatten())
    };
    let include = c
        .y_include
        .filter(|(a, b)| !c.log_y && a.is_finite() && b.is_finite())
        .map(|(a, b)| [a, b]);
    let lines_y = || {
        raw.iter()
            .chain(&smooth)
            .flat_map(|(_, segs)| segs.iter().flatten().map(|p| p[1]))
    };
    let data_y = match c.ignore_outliers {
        true => bulk_extent(lines_y().collect()).map(|(lo, hi)| {
            let (a, b) = extent(include.into_iter().flatten()).unwrap_or((lo, hi));
            (lo.min(a), hi.max(b))
        }),
        false => None,
    }
    .or_else(|| {
        extent(
            all()
                .flat_map(|p| [p[1], p[2]])
                .chain(include.into_iter().flatten()),
        )
    });
    let empty = all().next().is_none();

    let size = root.dim_in_pixel();
    let margins = Margins::new(size, !c.title.is_empty(), false);
    let (plot_w, plot_h) = margins.plot_size(size);
    let x_kind = match c.x_axis {
        XAxis::Step => TickKind::Number,
        XAxis::RelativeSeconds => TickKind::Duration,
        XAxis::WallTime => TickKind::WallTime,
    };
    let x = match zoom {
        Some(_) => Scale::new(Some(window), 0.0, plot_w / 90, x_kind),
        None => Scale::new(data_x, 0.02, plot_w / 90, x_kind),
    };
    let y_kind = if c.log_y {
        TickKind::Log
    } else {
        TickKind::Number
    };
    let y = Scale::new(data_y, 0.05, plot_h / 45, y_kind);
    if c.ignore_outliers {
        // What lies beyond the axis is cut at its edge: lines where they
        // cross it (clipped as x is, with the coordinates swapped), bands
        // pressed to it.
        let (lo, hi) = (y.lo, y.hi);
        let cut = |segments: &mut Vec<Vec<Pt>>| {
            *segments = std::mem::take(segments)
                .into_iter()
                .flat_map(|seg| clip(seg.into_iter().map(|p| [p[1], p[0], p[0]]), (lo, hi)))
                .map(|seg| seg.into_iter().map(|p| [p[1], p[0], p[0]]).collect())
                .collect();
        };
        for (_, segments) in raw.iter_mut().chain(smooth.iter_mut()) {
            cut(segments);
        }
        for (_, segments) in &mut bands {
            for p in segments.iter_mut().flatten() {
                p[1] = p[1].clamp(lo, hi);
                p[2] = p[2].clamp(lo, hi);
            }
        }
    }
    let x_desc = match c.x_axis {
        XAxis::Step => "step",
        XAxis::RelativeSeconds => "relative time",
        XAxis::WallTime => "wall time (UTC)",
    };
    let chart = axes(root, &margins, &c.title, x_desc, None, &x, &y)?;
    let area = chart.plotting_area();

    for (color, segments) in &bands {
        let fill = rgb(*color).mix(0.15).filled();
        for seg in segments.iter().filter(|s| s.len() > 1) {
            let upper = seg.iter().map(|p| (p[0], p[2]));
            let lower = seg.iter().rev().map(|p| (p[0], p[1]));
            area.draw(&Polygon::new(upper.chain(lower).collect::<Vec<_>>(), fill))
                .map_err(draw_err)?;
        }
    }
    let faint = |color: usize| rgb(color).mix(0.25).stroke_width(1);
    let solid = |color: usize| rgb(color).stroke_width(2);
    let lines = raw
        .iter()
        .map(|(c, s)| (if smoothing { faint(*c) } else { solid(*c) }, s));
    for (style, segments) in lines.chain(smooth.iter().map(|(c, s)| (solid(*c), s))) {
        for seg in segments {
            match seg.as_slice() {
                [p] => area.draw(&Circle::new((p[0], p[1]), 2, style.filled())),
                _ => area.draw(&PathElement::new(
                    seg.iter().map(|p| (p[0], p[1])).collect::<Vec<_>>(),
                    style,
                )),
            }
            .map_err(draw_err)?;
        }
    }

    let frame = frame_of(&chart, &x, &y, c.log_y);
    if empty {
        // Values a log scale cannot place (0 and below) are not no data.
        let valued = c.series.iter().any(|s| s.y.iter().any(|v| v.is_finite()));
        no_data(root, &frame, c.log_y && valued)?;
    } else if c.legend {
        legend(root, &frame, &c.series)?;
    }
    Ok(frame)
}

/// Draws a [`Scatter`]; see [`crate::scatter_svg`].
pub(crate) fn scatter<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    s: &Scatter,
) -> Result<(), ChartError> {
    let ty = |v: f64| if s.log_y { log10_or_nan(v) } else { v };
    let points: Vec<_> = s
        .points
        .iter()
        .map(|p| (p, p.x, ty(p.y)))
        .filter(|(_, x, y)| x.is_finite() && y.is_finite())
        .collect();
    let size = root.dim_in_pixel();
    let margins = Margins::new(size, !s.title.is_empty(), !s.y_label.is_empty());
    let (plot_w, plot_h) = margins.plot_size(size);
    let x_extent = extent(points.iter().map(|p| p.1));
    let x = Scale::new(x_extent, 0.05, plot_w / 90, TickKind::Number);
    let y_kind = if s.log_y {
        TickKind::Log
    } else {
        TickKind::Number
    };
    let y_extent = extent(points.iter().map(|p| p.2));
    let y = Scale::new(y_extent, 0.05, plot_h / 45, y_kind);
    let y_desc = Some(s.y_label.as_str()).filter(|d| !d.is_empty());
    let chart = axes(root, &margins, &s.title, &s.x_label, y_desc, &x, &y)?;

    for (p, x, y) in &points {
        let dot = Circle::new((*x, *y), 4, rgb(p.color).mix(0.85).filled());
        chart.plotting_area().draw(&dot).map_err(draw_err)?;
    }
    if points.len() <= SCATTER_LABELS_MAX {
        label_points(root, &chart, &points)?;
    }
    if points.is_empty() {
        let valued = s.points.iter().any(|p| p.x.is_finite() && p.y.is_finite());
        no_data(root, &frame_of(&chart, &x, &y, s.log_y), s.log_y && valued)?;
    }
    Ok(())
}

/// Labels the scatter's points inside its plot area: each to the right of
/// its dot, else to the left, above or below, else cut shorter (in the
/// middle) and tried again, else left out (the page's legend names every
/// colour). No label covers another or a dot.
fn label_points<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    chart: &Chart<DB>,
    points: &[(&ScatterPoint, f64, f64)],
) -> Result<(), ChartError> {
    const FONT: f64 = LABEL_FONT * 0.9;
    const DOT: i32 = 4;
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    let mut placement = Placement::new([xr.start, yr.start, xr.end, yr.end]);
    let at: Vec<(i32, i32)> = points
        .iter()
        .map(|(_, x, y)| chart.backend_coord(&(*x, *y)))
        .collect();
    for &(px, py) in &at {
        placement.block([px - DOT, py - DOT, px + DOT + 1, py + DOT + 1]);
    }
    let h = text_height(FONT);
    let [left_edge, _, right_edge, _] = placement.bound();
    for ((p, _, _), &(px, py)) in points.iter().zip(&at) {
        let whole = fit(&p.label, 200, FONT);
        let short = fit(&p.label, 80, FONT);
        let placed = [whole, short]
            .into_iter()
            .flatten()
            .find_map(|label: String| {
                let w = text_width(&label, FONT);
                let gap = DOT + 3;
                let beside = |left: i32, anchor: i32, pos: HPos| {
                    ([left, py - h / 2, left + w, py + h / 2], (anchor, py), pos)
                };
                // Above and below: a line's height away (clear of the labels
                // beside), centred on the dot or moved in from the plot's edge.
                let over = |top: i32| {
                    let left = (px - w / 2).min(right_edge - w).max(left_edge);
                    (
                        [left, top, left + w, top + h],
                        (left, top + h / 2),
                        HPos::Left,
                    )
                };
                let sides = [
                    beside(px + gap, px + gap, HPos::Left),
                    beside(px - gap - w, px - gap, HPos::Right),
                    over(py - h / 2 - h),
                    over(py + h / 2),
                ];
                sides
                    .into_iter()
                    .find(|(b, _, _)| placement.take(*b))
                    .map(|(_, point, pos)| (label, point, pos))
            });
        if let Some((label, point, pos)) = placed {
            let style = text_style(FONT).pos(Pos::new(pos, VPos::Center));
            root.draw_text(&label, &style, point).map_err(draw_err)?;
        }
    }
    Ok(())
}

/// White background, title, grid, tick labels, axis descriptions and the plot frame.
fn axes<'a, DB: DrawingBackend>(
    root: &'a DrawingArea<DB, Shift>,
    m: &Margins,
    title: &str,
    x_desc: &str,
    y_desc: Option<&str>,
    x: &Scale,
    y: &Scale,
) -> Result<Chart<'a, DB>, ChartError> {
    root.fill(&WHITE).map_err(draw_err)?;
    let (w, _) = root.dim_in_pixel();
    if !title.is_empty() {
        let style = text_style(TITLE_FONT).pos(Pos::new(HPos::Center, VPos::Top));
        let fits = (w as usize / 10).max(4);
        root.draw_text(&shorten(title, fits), &style, (w as i32 / 2, 6))
            .map_err(draw_err)?;
    }
    let mut chart = ChartBuilder::on(root)
        .margin_top(m.top)
        .margin_right(m.right)
        .margin_left(4)
        .margin_bottom(4)
        .x_label_area_size(m.bottom)
        .y_label_area_size(m.left)
        .build_cartesian_2d(x.clone(), y.clone())
        .map_err(draw_err)?;
    let mut mesh = chart.configure_mesh();
    mesh.bold_line_style(GRID)
        .light_line_style(TRANSPARENT)
        // Axis lines and tick marks would be <polyline>s like the data: the frame below is a <rect>.
        .axis_style(TRANSPARENT)
        .label_style(text_style(LABEL_FONT))
        .axis_desc_style(text_style(LABEL_FONT))
        .x_desc(x_desc);
    if let Some(d) = y_desc {
        mesh.y_desc(d);
    }
    mesh.draw().map_err(draw_err)?;
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    let border = Rectangle::new([(xr.start, yr.start), (xr.end - 1, yr.end - 1)], BORDER);
    root.draw(&border).map_err(draw_err)?;
    Ok(chart)
}

/// The plot area as plotters maps it: values land on `left..=right` and `bottom..=top`.
fn frame_of<DB: DrawingBackend>(chart: &Chart<DB>, x: &Scale, y: &Scale, log_y: bool) -> Frame {
    let (xr, yr) = chart.plotting_area().get_pixel_range();
    let data = |v: f64| if log_y { 10f64.powf(v) } else { v };
    Frame {
        left: f64::from(xr.start),
        top: f64::from(yr.start),
        right: f64::from(xr.end - 1),
        bottom: f64::from(yr.end - 1),
        x_min: x.lo,
        x_max: x.hi,
        y_min: data(y.lo),
        y_max: data(y.hi),
        log_y,
    }
}

/// "no data" in the middle of the plot; or, where there are values and
/// none above 0 (`unloggable`), that the log scale cannot show them.
fn no_data<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &Frame,
    unloggable: bool,
) -> Result<(), ChartError> {
    let style = text_style(LABEL_FONT * 1.2).pos(Pos::new(HPos::Center, VPos::Center));
    let at = (
        ((f.left + f.right) / 2.0) as i32,
        ((f.top + f.bottom) / 2.0) as i32,
    );
    let text = if unloggable {
        "no value above 0 for a log scale"
    } else {
        "no data"
    };
    root.draw_text(text, &style, at).map_err(draw_err)
}

/// Series labels in the top right corner of the plot, each after a swatch of its colour
/// (a `<rect>`, so that polylines stay the data's), as many as fit.
fn legend<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    f: &Frame,
    series: &[crate::Series],
) -> Result<(), ChartError> {
    const ROW: i32 = 16;
    let rows = ((f.bottom - f.top) as i32 - 8) / ROW;
    let labels: Vec<_> = series
        .iter()
        .filter(|s| !s.label.is_empty())
        .take(rows.max(0) as usize)
        .map(|s| (s.color, shorten(&s.label, 28)))
        .collect();
    if labels.is_empty() {
        return Ok(());
    }
    let chars = labels
        .iter()
        .map(|(_, l)| l.chars().count())
        .max()
        .unwrap_or(0) as i32;
    let (right, top) = (f.right as i32 - 6, f.top as i32 + 6);
    let left = (right - 24 - chars * 7).max(f.left as i32);
    let bottom = top + 6 + ROW * labels.len() as i32;
    let background = Rectangle::new([(left, top), (right, bottom)], WHITE.mix(0.85).filled());
    root.draw(&background).map_err(draw_err)?;
    let style = text_style(LABEL_FONT * 0.9).pos(Pos::new(HPos::Left, VPos::Center));
    for (i, (color, label)) in labels.iter().enumerate() {
        let cy = top + 3 + ROW / 2 + ROW * i as i32;
        let swatch = Rectangle::new(
            [(left + 6, cy - 5), (left + 16, cy + 5)],
            rgb(*color).filled(),
        );
        root.draw(&swatch).map_err(draw_err)?;
        root.draw_text(label, &style, (left + 22, cy))
            .map_err(draw_err)?;
    }
    Ok(())
}

pub(crate) fn text_style(size: f64) -> TextStyle<'static> {
    ("sans-serif", size).into_font().color(&TEXT)
}

/// `text` cut to `max` characters, with an ellipsis when cut.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.into();
    }
    let mut s: String = text.chars().take(max.saturating_sub(1)).collect();
    s.push('…');
    s
}

/// The extent of the values within Tukey's far-out fences (three interquartile ranges beyond
/// the quartiles); None for fewer than eight values, too few to call any an outlier, and when
/// half of them or more are one value (a plateau), where the fences would close on it.
fn bulk_extent(mut values: Vec<f64>) -> Option<(f64, f64)> {
    values.retain(|v| v.is_finite());
    if values.len() < 8 {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let quantile = |q: f64| values[((values.len() - 1) as f64 * q).round() as usize];
    let (q1, q3) = (quantile(0.25), quantile(0.75));
    if q3 <= q1 {
        return None;
    }
    let reach = 3.0 * (q3 - q1);
    extent(
        values
            .iter()
            .copied()
            .filter(|v| (q1 - reach..=q3 + reach).contains(v)),
    )
}

/// The smallest and largest finite value.
pub(crate) fn extent(values: impl IntoIterator<Item = f64>) -> Option<(f64, f64)> {
    values
        .into_iter()
        .filter(|v| v.is_finite())
        .fold(None, |acc, v| match acc {
            None => Some((v, v)),
            Some((lo, hi)) => Some((v.min(lo), v.max(hi))),
        })
}

/// Splits points into runs of finite points, clipped to `lo..=hi` in x: a run that crosses
/// the edge ends (or starts) exactly on it, at the interpolated value.
fn clip(points: impl IntoIterator<Item = Pt>, (lo, hi): (f64, f64)) -> Vec<Vec<Pt>> {
    let (mut runs, mut run) = (vec![], vec![]);
    let mut flush = |run: &mut Vec<Pt>| {
        if !run.is_empty() {
            runs.push(std::mem::take(run));
        }
    };
    let mut prev: Option<Pt> = None;
    for p in points {
        if !p.iter().all(|v| v.is_finite()) {
            flush(&mut run);
            prev = None;
            continue;
        }
        let inside = (lo..=hi).contains(&p[0]);
        match prev.map(|q| clip_segment(q, p, lo, hi)) {
            None if inside => run.push(p),
            None => {}
            Some(None) => flush(&mut run),
            Some(Some((a, b))) => {
                if run.last() != Some(&a) {
                    flush(&mut run);
                    run.push(a);
                }
                if run.last() != Some(&b) {
                    run.push(b);
                }
                if !inside {
                    flush(&mut run);
                }
            }
        }
        prev = Some(p);
    }
    flush(&mut run);
    runs
}

/// The part of the segment a→b with x in `lo..=hi`, if any.
fn clip_segment(a: Pt, b: Pt, lo: f64, hi: f64) -> Option<(Pt, Pt)> {
    if a[0].max(b[0]) < lo || a[0].min(b[0]) > hi {
        return None;
    }
    let at = |x: f64| {
        let t = (x - a[0]) / (b[0] - a[0]);
        [x, a[1] + t * (b[1] - a[1]), a[2] + t * (b[2] - a[2])]
    };
    let inside = |p: Pt| match p[0] {
        x if x < lo => at(lo),
        x if x > hi => at(hi),
        _ => p,
    };
    Some((inside(a), inside(b)))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::{ChartError, Series, line_svg, scatter_svg};
    use crate::{ScatterPoint, format_x};

    fn series(color: usize, x: &[f64], y: &[f64]) -> Series {
        Series {
            label: format!("run-{color}"),
            color,
            x: x.to_vec(),
            y: y.to_vec(),
            min: None,
            max: None,
        }
    }

    fn chart(series: Vec<Series>) -> LineChart {
        LineChart {
            title: "train/loss".into(),
            x_axis: XAxis::Step,
            series,
            log_y: false,
            smoothing: 0.0,
            x_range: None,
            y_include: None,
            width: 640,
            height: 360,
            legend: false,
            ignore_outliers: false,
        }
    }

    fn count(svg: &str, tag: &str) -> usize {
        svg.matches(&format!("<{tag} ")).count()
    }

    /// The points of each polyline, in pixels (as `f64` or, where the
    /// drawing rounds them, `i32`).
    pub(crate) fn polylines<T>(svg: &str) -> Vec<Vec<(T, T)>>
    where
        T: std::str::FromStr,
        T::Err: std::fmt::Debug,
    {
        svg.split("<polyline ")
            .skip(1)
            .map(|el| {
                let points = el
                    .split("points=\"")
                    .nth(1)
                    .unwrap()
                    .split('"')
                    .next()
                    .unwrap();
                points
                    .split_whitespace()
                    .map(|p| {
                        let (x, y) = p.split_once(',').unwrap();
                        (x.parse().unwrap(), y.parse().unwrap())
                    })
                    .collect()
            })
            .collect()
    }

    fn three_runs() -> Vec<Series> {
        (0..3)
            .map(|i| {
                let x: Vec<f64> = (0..50).map(|s| s as f64 * 10.0).collect();
                let y = x
                    .iter()
                    .map(|x| (i + 1) as f64 / (1.0 + x / 100.0))
                    .collect::<Vec<_>>();
                series(i, &x, &y)
            })
            .collect()
    }

    #[test]
    fn one_polyline_per_series_and_two_with_smoothing() {
        let mut c = chart(three_runs());
        let (svg, _) = line_svg(&c).unwrap();
        assert_eq!(count(&svg, "polyline"), 3);
        assert_eq!(count(&svg, "polygon"), 0);
        assert!(svg.contains(">\ntrain/loss\n</text>"), "title");
        assert!(svg.contains(">\nstep\n</text>"), "x axis label");
        assert!(
            svg.contains("stroke=\"#E69F00\""),
            "series 1 in the palette's second colour"
        );

        c.smoothing = 0.6;
        let (smoothed, _) = line_svg(&c).unwrap();
        assert_eq!(count(&smoothed, "polyline"), 6);
        assert_eq!(
            smoothed.matches("opacity=\"0.25\"").count(),
            3,
            "raw lines are faint"
        );
        assert_eq!(line_svg(&c).unwrap().0, smoothed, "deterministic");
    }

    #[test]
    fn axis_labels_follow_the_x_axis_kind() {
        let mut c = chart(three_runs());
        c.x_axis = XAxis::RelativeSeconds;
        let (svg, _) = line_svg(&c).unwrap();
        assert!(svg.contains(">\nrelative time\n</text>"));
        assert!(svg.contains(">\n4m\n</text>"), "ticks as durations: {svg}");
        c.x_axis = XAxis::WallTime;
        c.series[0].x = vec![1_795_960_987_000.0, 1_795_961_887_000.0];
        let (svg, f) = line_svg(&c).unwrap();
        assert!(svg.contains(">\nwall time (UTC)\n</text>"));
        assert!(f.x_min < 1_795_960_987_000.0);
        assert_eq!(
            format_x(XAxis::WallTime, 1_795_960_987_000.0),
            "2026-11-29 14:03:07"
        );
    }

    #[test]
    fn nan_splits_a_line_and_a_lone_point_is_a_dot() {
        let nan = f64::NAN;
        let c = chart(vec![series(
            0,
            &[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0],
            &[1.0, 2.0, nan, 3.0, 4.0, f64::INFINITY, 5.0],
        )]);
        let (svg, _) = line_svg(&c).unwrap();
        let lines = polylines::<f64>(&svg);
        assert_eq!(lines.iter().map(Vec::len).collect::<Vec<_>>(), [2, 2]);
        assert_eq!(count(&svg, "circle"), 1, "the point at x=6");
    }

    #[test]
    fn log_y_leaves_out_non_positive_values() {
        let mut c = chart(vec![series(
            0,
            &[0.0, 1.0, 2.0, 3.0, 4.0],
            &[1.0, 0.1, 0.0, -1.0, 0.01],
        )]);
        c.log_y = true;
        let (svg, f) = line_svg(&c).unwrap();
        assert_eq!(
            polylines::<f64>(&svg)
                .iter()
                .map(Vec::len)
                .collect::<Vec<_>>(),
            [2]
        );
        assert_eq!(count(&svg, "circle"), 1, "0.01 at x=4, alone after the gap");
        assert!(f.log_y && f.y_min > 0.0 && f.y_min < 0.01 && f.y_max > 1.0);
    }

    #[test]
    fn frame_matches_where_plotters_drew() {
        let (svg, f) = line_svg(&chart(three_runs())).unwrap();
        let line = &polylines::<f64>(&svg)[0];
        let (first, last) = (line[0], line[line.len() - 1]);
        assert!((f.px_of_x(0.0) - first.0).abs() <= 1.0, "{f:?} {first:?}");
        assert!((f.py_of_y(1.0) - first.1).abs() <= 1.0, "{f:?} {first:?}");
        assert!((f.px_of_x(490.0) - last.0).abs() <= 1.0);
        assert!((f.x_at(first.0) - 0.0).abs() <= (f.x_max - f.x_min) / (f.right - f.left));
        for px in [f.left, 200.0, f.right] {
            assert!((f.px_of_x(f.x_at(px)) - px).abs() < 1e-9);
        }
        assert!(f.x_min < 0.0 && f.x_max > 490.0, "padded");
        assert!(f.y_min < 1.0 / 5.9 && f.y_max > 3.0, "padded");
    }

    #[test]
    fn zoom_sets_the_frame_and_clips_lines_to_it() {
        let mut c = chart(three_runs());
        c.x_range = Some((105.0, 200.0));
        let (svg, f) = line_svg(&c).unwrap();
        assert_eq!((f.x_min, f.x_max), (105.0, 200.0));
        let lines = polylines::<f64>(&svg);
        assert_eq!(lines.len(), 3);
        for p in lines.iter().flatten() {
            assert!(p.0 >= f.left && p.0 <= f.right, "{p:?} outside {f:?}");
            assert!(p.1 >= f.top && p.1 <= f.bottom, "{p:?} outside {f:?}");
        }
        // Points 110..=200 plus the edge at 105, interpolated between 100 and 110.
        assert_eq!(lines[0].len(), 11);
        assert!((lines[0][0].0 - f.left).abs() <= 1.0);
        // y fits the zoomed data: run 0 is 1/(1+x/100) ≤ 1/2.05 from x=105.
        assert!(f.y_max < 1.6, "{f:?}");
    }

    #[test]
    fn bands_are_polygons() {
        let mut s = series(2, &[0.0, 1.0, 2.0], &[1.0, 2.0, 3.0]);
        s.min = Some(vec![0.5, 1.5, 2.5]);
        s.max = Some(vec![1.5, 2.5, 3.5]);
        let (svg, f) = line_svg(&chart(vec![s])).unwrap();
        assert_eq!(count(&svg, "polygon"), 1);
        assert!(svg.contains("opacity=\"0.15\" fill=\"#009E73\""));
        assert!(f.y_min < 0.5 && f.y_max > 3.5, "the band is in range");
    }

    #[test]
    fn empty_chart_says_no_data() {
        for series in [
            vec![],
            vec![series(0, &[], &[])],
            vec![series(0, &[1.0], &[f64::NAN])],
        ] {
            let (svg, f) = line_svg(&chart(series)).unwrap();
            assert!(svg.contains(">\nno data\n</text>"));
            assert_eq!(count(&svg, "polyline"), 0);
            assert!(f.right > f.left && f.x_max > f.x_min && f.y_max > f.y_min);
        }
        // A log scale of values at or below 0 says why it is empty.
        let mut negative = chart(vec![series(0, &[0.0, 1.0], &[-2.0, 0.0])]);
        negative.log_y = true;
        let (svg, _) = line_svg(&negative).unwrap();
        assert!(
            svg.contains(">\nno value above 0 for a log scale\n</text>"),
            "{svg}"
        );
    }

    #[test]
    fn flat_and_single_point_series_get_a_range() {
        let (svg, f) = line_svg(&chart(vec![series(0, &[0.0, 5.0], &[2.0, 2.0])])).unwrap();
        assert_eq!(count(&svg, "polyline"), 1);
        assert!(f.y_min < 2.0 && f.y_max > 2.0);
        let (svg, f) = line_svg(&chart(vec![series(0, &[7.0], &[0.0])])).unwrap();
        assert_eq!(count(&svg, "circle"), 1);
        assert!(f.x_min < 7.0 && f.x_max > 7.0 && f.y_min < 0.0 && f.y_max > 0.0);
    }

    #[test]
    fn legend_lists_labels_without_adding_polylines() {
        let mut c = chart(three_runs());
        c.legend = true;
        let (svg, _) = line_svg(&c).unwrap();
        assert_eq!(count(&svg, "polyline"), 3);
        assert!(svg.contains(">\nrun-2\n</text>"));
    }

    #[test]
    fn sizes_outside_the_limits_are_refused() {
        let mut c = chart(three_runs());
        c.width = 0;
        assert!(matches!(
            line_svg(&c),
            Err(ChartError::Size { width: 0, .. })
        ));
        c.width = 5000;
        assert!(line_svg(&c).is_err());
        (c.width, c.height) = (16, 16);
        let (svg, _) = line_svg(&c).unwrap();
        assert!(svg.starts_with("<svg width=\"16\" height=\"16\""));
    }

    #[cfg(feature = "png")]
    #[test]
    fn png_has_the_signature_and_the_requested_size() {
        let mut c = chart(three_runs());
        (c.width, c.height, c.smoothing, c.legend) = (333, 222, 0.6, true);
        let png = crate::line_png(&c).unwrap();
        assert_eq!(&png[..8], b"\x89PNG\r\n\x1a\n");
        assert_eq!(&png[12..16], b"IHDR");
        let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
        assert_eq!((be(&png[16..20]), be(&png[20..24])), (333, 222));
        assert_eq!((png[24], png[25]), (8, 2), "8-bit RGB");
        c.title.clear();
        assert_ne!(crate::line_png(&c).unwrap(), png, "the title is rasterised");
        c.height = 9;
        assert!(matches!(
            crate::line_png(&c),
            Err(ChartError::Size { height: 9, .. })
        ));
    }

    #[test]
    fn scatter_labels_cover_no_other_and_stay_inside() {
        let point = |label: &str, x: f64, y: f64| ScatterPoint {
            label: label.into(),
            color: 0,
            x,
            y,
        };
        let mut points: Vec<ScatterPoint> = (0..5)
            .map(|i| point(&format!("trial-{i}"), 0.5, 0.5))
            .collect();
        // Two close neighbours, and one at the right edge with a long name.
        points.push(point("neighbour-a", 0.72, 0.51));
        points.push(point("neighbour-b", 0.68, 0.49));
        points.push(point("a-rather-long-run-name-at-the-edge", 1.0, 0.2));
        points.push(point("left", 0.0, 0.8));
        let s = Scatter {
            title: "loss vs lr".into(),
            x_label: "lr".into(),
            y_label: "loss".into(),
            points,
            log_y: false,
            width: 560,
            height: 320,
        };
        let svg = scatter_svg(&s).unwrap();
        let labels: Vec<_> = crate::labels::tests::text_boxes(&svg)
            .into_iter()
            .filter(|(t, _)| {
                ["trial-", "neighbour", "a-rather", "left"]
                    .iter()
                    .any(|p| t.starts_with(p))
            })
            .collect();
        crate::labels::tests::assert_apart_and_inside(&labels, 560, 320);
        let named = |prefix: &str| labels.iter().filter(|(t, _)| t.starts_with(prefix)).count();
        // Five dots on one spot: four sides, so one of them goes unlabelled.
        assert_eq!(named("trial-"), 4, "{labels:?}");
        assert_eq!(named("left"), 1);
        // The long name at the right edge is there, cut, left of its dot.
        let edge = svg
            .split("<text ")
            .find(|t| t.contains("a-rather"))
            .unwrap();
        assert!(edge.contains("text-anchor=\"end\""), "{edge}");
    }

    #[test]
    fn scatter_draws_a_dot_per_point() {
        let point = |i: usize, x: f64, y: f64| ScatterPoint {
            label: format!("trial-{i}"),
            color: i,
            x,
            y,
        };
        let mut s = Scatter {
            title: "loss vs lr".into(),
            x_label: "lr".into(),
            y_label: "val/loss".into(),
            points: vec![
                point(0, 0.1, 1.0),
                point(1, 0.01, 0.5),
                point(2, f64::NAN, 1.0),
            ],
            log_y: false,
            width: 480,
            height: 320,
        };
        let svg = scatter_svg(&s).unwrap();
        assert_eq!(count(&svg, "circle"), 2);
        assert!(svg.contains(">\ntrial-1\n</text>") && !svg.contains("trial-2"));
        assert!(svg.contains(">\nval/loss\n</text>") && svg.contains(">\nlr\n</text>"));

        s.points = (0..30)
            .map(|i| point(i, i as f64, i as f64 - 1.0))
            .collect();
        s.log_y = true;
        let svg = scatter_svg(&s).unwrap();
        assert_eq!(count(&svg, "circle"), 28, "y ≤ 0 is left out on a log axis");
        assert!(!svg.contains("trial-"), "too many points to label");
    }

    #[test]
    fn the_y_axis_shows_what_it_must_include() {
        let mut c = chart(vec![Series {
            label: "gpu".into(),
            color: 0,
            x: vec![0.0, 1.0],
            y: vec![0.0, 2.0],
            min: None,
            max: None,
        }]);
        let (_, tight) = crate::line_svg(&c).unwrap();
        assert!(tight.y_max < 10.0, "{tight:?}");
        c.y_include = Some((0.0, 100.0));
        let (_, wide) = crate::line_svg(&c).unwrap();
        assert!(wide.y_min <= 0.0 && wide.y_max >= 100.0, "{wide:?}");
        // Ignored on a log axis, where 0 cannot be drawn.
        c.log_y = true;
        let (_, log) = crate::line_svg(&c).unwrap();
        assert!(log.y_max < 10.0, "{log:?}");
    }

    #[test]
    fn ignoring_outliers_fits_the_runs_that_did_not_diverge() {
        let run = |color: usize, last: f64| Series {
            label: format!("run {color}"),
            color,
            x: (0..50).map(f64::from).collect(),
            y: (0..50)
                .map(|i| {
                    if i == 49 {
                        last
                    } else {
                        1.0 / (1.0 + f64::from(i)) + color as f64 * 0.01
                    }
                })
                .collect(),
            min: None,
            max: None,
        };
        let mut c = chart((0..4).map(|i| run(i, 0.02)).chain([run(4, 1e6)]).collect());
        let (_, all) = crate::line_svg(&c).unwrap();
        assert!(all.y_max >= 1e6, "{all:?}");
        c.ignore_outliers = true;
        let (svg, bulk) = crate::line_svg(&c).unwrap();
        assert!(bulk.y_max < 2.0 && bulk.y_min < 0.05, "{bulk:?}");
        // The diverged run's line leaves through the top edge: no point of
        // any line is drawn above the plot.
        let top = bulk.top.floor() as i32;
        for line in polylines::<i32>(&svg) {
            assert!(line.iter().all(|&(_, y)| y >= top - 1), "{line:?}");
        }
        assert_eq!(polylines::<i32>(&svg).len(), 5, "every run is still drawn");

        // Accuracy that sits at 1.0 most of the time: no fences close on the plateau.
        let plateau = Series {
            y: (0..50)
                .map(|i| if i < 10 { f64::from(i) / 10.0 } else { 1.0 })
                .collect(),
            ..run(0, 1.0)
        };
        let mut c = chart(vec![plateau]);
        c.ignore_outliers = true;
        let (_, frame) = crate::line_svg(&c).unwrap();
        assert!(frame.y_min <= 0.0 && frame.y_max >= 1.0, "{frame:?}");
    }
}
