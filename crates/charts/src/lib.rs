//! Trainyard's metric charts, drawn with plotters: metric lines over steps or time, a param
//! against a metric as a scatter, and parallel coordinates of params and a metric.
//!
//! The same code serves both sides: the wasm frontend draws an SVG string and puts it into the
//! page (the [`Frame`] it gets back maps mouse positions to data for the hover readout and drag
//! to zoom), and the server draws the same chart as SVG, or as PNG with the feature `png`, for
//! "download chart". Pure drawing: no I/O, no async runtime, no web framework.
//!
//! # What the SVG holds
//! plotters writes a flat `<svg>` (with a `viewBox` of the requested size, so CSS can scale it)
//! whose elements come in drawing order. Only data is drawn as `<polyline>`, `<polygon>` or
//! `<circle>`; the background, the plot frame, legend swatches and parallel axes are `<rect>`,
//! grid lines are `<line>`, and all words are `<text>`. See [`line_svg`], [`scatter_svg`] and
//! [`parallel_svg`] for the counts per chart.

mod bars;
mod format;
mod heatmap;
mod labels;
mod parallel;
mod plot;
#[cfg(feature = "png")]
mod raster;

pub use bars::{BarSeries, MAX_BAR_SERIES, StackedBars, stacked_bars_svg};
pub use format::{format_value, format_x};
#[cfg(feature = "png")]
pub use heatmap::heatmap_png;
pub use heatmap::{
    HeatGroup, HeatLayout, HeatRow, Heatmap, MAX_HEATMAP_HEIGHT, heat_color, heatmap_svg,
};
pub use parallel::{Column, Line, Parallel, parallel_svg};

#[cfg(feature = "png")]
use plotters::backend::BitMapBackend;
use plotters::backend::SVGBackend;
use plotters::coord::Shift;
use plotters::prelude::*;
use serde::{Deserialize, Serialize};

/// Okabe–Ito colour-blind-safe palette (as `#rrggbb`), ordered so that neighbouring runs
/// contrast; its black is a grey here, which reads on the dark theme too. Series `i` takes
/// `PALETTE[i]`, and past its end a colour of [`series_rgb`]'s own.
pub const PALETTE: [&str; 8] = [
    "#0072b2", "#e69f00", "#009e73", "#d55e00", "#56b4e9", "#cc79a7", "#f0e442", "#8c8c8c",
];

/// The colour of series `color`: the palette's, then hues a golden angle apart (so no two
/// series of a comparison share a colour), in two lightnesses that read on light and dark
/// backgrounds.
pub fn series_rgb(color: usize) -> (u8, u8, u8) {
    if let Some(hex) = PALETTE.get(color) {
        let channel = |i: usize| u8::from_str_radix(&hex[i..i + 2], 16).unwrap_or(0);
        return (channel(1), channel(3), channel(5));
    }
    let n = (color - PALETTE.len()) as f64;
    let hue = (15.0 + n * 137.507_764) % 360.0;
    let lightness = if color.is_multiple_of(2) { 0.42 } else { 0.58 };
    hsl_to_rgb(hue, 0.7, lightness)
}

/// [`series_rgb`] as `#rrggbb`.
pub fn color_hex(color: usize) -> String {
    let (r, g, b) = series_rgb(color);
    format!("#{r:02x}{g:02x}{b:02x}")
}

fn hsl_to_rgb(hue: f64, saturation: f64, lightness: f64) -> (u8, u8, u8) {
    let c = (1.0 - (2.0 * lightness - 1.0).abs()) * saturation;
    let h = hue / 60.0;
    let x = c * (1.0 - (h % 2.0 - 1.0).abs());
    let (r, g, b) = match h as u32 {
        0 => (c, x, 0.0),
        1 => (x, c, 0.0),
        2 => (0.0, c, x),
        3 => (0.0, x, c),
        4 => (x, 0.0, c),
        _ => (c, 0.0, x),
    };
    let m = lightness - c / 2.0;
    let byte = |v: f64| ((v + m) * 255.0).round().clamp(0.0, 255.0) as u8;
    (byte(r), byte(g), byte(b))
}

/// What the x values of a line chart mean.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum XAxis {
    /// Training steps.
    #[default]
    Step,
    /// Seconds since the run started; ticks read `90s`, `5m`, `2h`.
    RelativeSeconds,
    /// Unix milliseconds; ticks read `HH:MM:SS` (UTC), or dates when the span is over a day.
    WallTime,
}

/// One line of a [`LineChart`]: `y[i]` is the value at `x[i]` (extra values of the longer
/// vector are ignored). Non-finite values are gaps; in JSON, where serde_json writes them as
/// `null`, a `null` reads back as NaN.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Series {
    pub label: String,
    pub color: usize,
    #[serde(deserialize_with = "gaps::vec")]
    pub x: Vec<f64>,
    #[serde(deserialize_with = "gaps::vec")]
    pub y: Vec<f64>,
    /// Per-point band (downsampled min/max, or a group's min–max); drawn as a faint area.
    #[serde(default, deserialize_with = "gaps::opt_vec")]
    pub min: Option<Vec<f64>>,
    #[serde(default, deserialize_with = "gaps::opt_vec")]
    pub max: Option<Vec<f64>>,
}

/// JSON has no NaN or infinity (serde_json writes `null`): read `null` back as a NaN gap.
mod gaps {
    use serde::{Deserialize, Deserializer};

    pub fn vec<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<f64>, D::Error> {
        let values = Vec::<Option<f64>>::deserialize(d)?;
        Ok(values.into_iter().map(|v| v.unwrap_or(f64::NAN)).collect())
    }

    pub fn opt_vec<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<f64>>, D::Error> {
        let values = Option::<Vec<Option<f64>>>::deserialize(d)?;
        Ok(values.map(|v| v.into_iter().map(|v| v.unwrap_or(f64::NAN)).collect()))
    }
}

/// A metric over steps or time, one line per run (hidden runs are simply not passed in).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LineChart {
    /// Usually the metric key; drawn at the top.
    pub title: String,
    pub x_axis: XAxis,
    pub series: Vec<Series>,
    /// A log10 y axis; values ≤ 0 are left out (they become gaps).
    pub log_y: bool,
    /// EMA weight in [0, 1); 0 = off. When on, the raw line is drawn faint behind the smoothed one.
    pub smoothing: f64,
    /// Show only this x range (zoom), in either order; None (or a range that is empty or not
    /// finite) shows the data's extent. Lines are clipped to it and y fits what is inside.
    pub x_range: Option<(f64, f64)>,
    pub width: u32,
    pub height: u32,
    /// Draw a legend of the series labels in the top right corner (for downloads; the web page
    /// shows its own).
    #[serde(default)]
    pub legend: bool,
    /// Values the y axis always shows, whatever the data (0 to 100 for a percentage, 0 for a
    /// quantity that starts there); the data may widen it. Ignored on a log axis.
    #[serde(default)]
    pub y_include: Option<(f64, f64)>,
    /// Fit the y axis to the bulk of the lines' values (within Tukey's far-out fences: three
    /// interquartile ranges beyond the quartiles), so one diverged run does not flatten the
    /// others; lines leave the plot where they pass its edge.
    #[serde(default)]
    pub ignore_outliers: bool,
}

/// Where the plot area lies in the SVG's pixels (its viewBox units) and which data ranges it
/// shows, so the browser can map a mouse position to data (hover readout, drag to zoom).
/// `left..=right` and `top..=bottom` are the pixels of the first and last data positions;
/// `y_min`/`y_max` are data values even when `log_y` is set.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Frame {
    pub left: f64,
    pub top: f64,
    pub right: f64,
    pub bottom: f64,
    pub x_min: f64,
    pub x_max: f64,
    pub y_min: f64,
    pub y_max: f64,
    pub log_y: bool,
}

impl Frame {
    /// The data x under the pixel column `px`.
    pub fn x_at(&self, px: f64) -> f64 {
        self.x_min + (px - self.left) / (self.right - self.left) * (self.x_max - self.x_min)
    }

    /// The data y under the pixel row `py`.
    pub fn y_at(&self, py: f64) -> f64 {
        let (lo, hi) = self.y_scale();
        let v = lo + (self.bottom - py) / (self.bottom - self.top) * (hi - lo);
        if self.log_y { 10f64.powf(v) } else { v }
    }

    /// The pixel column of data x.
    pub fn px_of_x(&self, x: f64) -> f64 {
        self.left + (x - self.x_min) / (self.x_max - self.x_min) * (self.right - self.left)
    }

    /// The pixel row of data y (NaN for y ≤ 0 on a log axis).
    pub fn py_of_y(&self, y: f64) -> f64 {
        let (lo, hi) = self.y_scale();
        let v = if self.log_y { log10_or_nan(y) } else { y };
        self.bottom - (v - lo) / (hi - lo) * (self.bottom - self.top)
    }

    /// Whether the pixel lies on the plot area.
    pub fn contains(&self, px: f64, py: f64) -> bool {
        (self.left..=self.right).contains(&px) && (self.top..=self.bottom).contains(&py)
    }

    fn y_scale(&self) -> (f64, f64) {
        if self.log_y {
            (self.y_min.log10(), self.y_max.log10())
        } else {
            (self.y_min, self.y_max)
        }
    }
}

/// Why a chart could not be drawn.
#[derive(Debug, thiserror::Error)]
pub enum ChartError {
    #[error(
        "a chart of {width}×{height} pixels cannot be drawn: ask for a width and height between {} and {}",
        SIZE_LIMITS.start(),
        SIZE_LIMITS.end()
    )]
    Size { width: u32, height: u32 },
    #[error("drawing the chart failed: {0}")]
    Draw(String),
    /// Only with the feature `png`.
    #[error("encoding the chart as PNG failed: {0}")]
    Png(String),
    /// Only with the feature `png`: the bundled font did not parse.
    #[error("the chart font bundled with trainyard-charts could not be loaded")]
    Font,
}

/// Allowed width and height of a chart, in pixels.
pub const SIZE_LIMITS: std::ops::RangeInclusive<u32> = 16..=4096;

/// Draws a line chart as SVG, and says where its plot area is.
///
/// Layers, each in series order: first the bands (`min`/`max`), one `<polygon>` per run of
/// finite points; then the lines, one `<polyline>` per run of finite points (a run of a single
/// point is a `<circle>`). With smoothing there are two line layers: the raw lines, faint
/// (`opacity="0.25"`), then the smoothed ones. So N series without gaps give exactly N
/// polylines, or 2N with smoothing, and a NaN or infinity (with `log_y` also a value ≤ 0)
/// inside a line splits it into two. With no data points the chart keeps its axes and says
/// "no data". The same input always gives the same string.
pub fn line_svg(chart: &LineChart) -> Result<(String, Frame), ChartError> {
    check_size(chart.width, chart.height)?;
    svg(chart.width, chart.height, |root| plot::line(root, chart))
}

/// The same drawing as [`line_svg`], rasterised (text in DejaVu Sans) and PNG-encoded.
#[cfg(feature = "png")]
pub fn line_png(chart: &LineChart) -> Result<Vec<u8>, ChartError> {
    check_size(chart.width, chart.height)?;
    png(chart.width, chart.height, |root| plot::line(root, chart))
}

/// One run's value of a param (x) and a metric (y) in a [`Scatter`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ScatterPoint {
    pub label: String,
    pub color: usize,
    pub x: f64,
    pub y: f64,
}

/// A numeric param (x) against a metric (y), one point per run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Scatter {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub points: Vec<ScatterPoint>,
    pub log_y: bool,
    pub width: u32,
    pub height: u32,
}

/// Draws a scatter as SVG: one filled `<circle>` per point with finite x and y (and y > 0 with
/// `log_y`), in input order. Up to [`SCATTER_LABELS_MAX`] points also get their label as
/// `<text>` beside them, where it covers no other label or dot and stays in the plot (cut
/// shorter, or left out, where there is no such room); more would only overlap.
pub fn scatter_svg(s: &Scatter) -> Result<String, ChartError> {
    check_size(s.width, s.height)?;
    svg(s.width, s.height, |root| plot::scatter(root, s)).map(|(svg, ())| svg)
}

/// Scatters with at most this many points label each point.
pub const SCATTER_LABELS_MAX: usize = 20;

/// TensorBoard's debiased EMA (the same as its smoothing slider): `weight` in [0, 1), where 0
/// returns `y` unchanged (weights from 0.999 up act as 0.999). Non-finite values pass through
/// and do not poison the average; a constant series stays exactly constant.
pub fn ema(y: &[f64], weight: f64) -> Vec<f64> {
    if weight.is_nan() || weight <= 0.0 {
        return y.to_vec();
    }
    let w = weight.min(0.999);
    if y.iter().all(|v| *v == y[0]) {
        return y.to_vec();
    }
    let (mut last, mut n) = (0.0, 0);
    y.iter()
        .map(|&v| {
            if !v.is_finite() {
                return v;
            }
            last = last * w + (1.0 - w) * v;
            n += 1;
            last / (1.0 - w.powi(n))
        })
        .collect()
}

/// A group of lines (e.g. runs grouped by a param value) as one series: the mean at each x with
/// the min–max band.
///
/// Lines have different x grids, so the result is on the union of all their x values (those
/// with a finite y). At each such x, every line whose extent covers it takes part, with its
/// value there linearly interpolated between its neighbouring points; a line does not take part
/// outside its first..last x. Non-finite points are left out before interpolating.
pub fn group_mean(label: &str, color: usize, lines: &[&Series]) -> Series {
    let lines: Vec<Vec<(f64, f64)>> = lines
        .iter()
        .map(|s| {
            let mut p: Vec<_> =
                s.x.iter()
                    .zip(&s.y)
                    .map(|(x, y)| (*x, *y))
                    .filter(|(x, y)| x.is_finite() && y.is_finite())
                    .collect();
            p.sort_by(|a, b| a.0.total_cmp(&b.0));
            p
        })
        .collect();
    let mut xs: Vec<f64> = lines.iter().flatten().map(|p| p.0).collect();
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let (mut mean, mut min, mut max) = (vec![], vec![], vec![]);
    for &x in &xs {
        let values: Vec<f64> = lines.iter().filter_map(|l| interpolate(l, x)).collect();
        mean.push(values.iter().sum::<f64>() / values.len() as f64);
        min.push(values.iter().copied().fold(f64::INFINITY, f64::min));
        max.push(values.iter().copied().fold(f64::NEG_INFINITY, f64::max));
    }
    Series {
        label: label.into(),
        color,
        x: xs,
        y: mean,
        min: Some(min),
        max: Some(max),
    }
}

/// The value of `points` (sorted by x) at `x`, interpolated; None outside their extent.
fn interpolate(points: &[(f64, f64)], x: f64) -> Option<f64> {
    let i = points.partition_point(|p| p.0 < x);
    let b = *points.get(i)?;
    if b.0 == x {
        return Some(b.1);
    }
    let a = *points.get(i.checked_sub(1)?)?;
    Some(a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0))
}

/// The point of `series` nearest to data `x` (for the hover readout), as (x, y); y may be
/// non-finite, a readout shows that as it is. None if the series has no point with a finite x,
/// or if `x` lies beyond the first or last point by more than the gap to its neighbour. A
/// series of a single x (a metric logged once, or the one point of a run in a zoomed view)
/// has no gap to go by: it answers within `reach` of that x.
pub fn value_at(series: &Series, x: f64, reach: f64) -> Option<(f64, f64)> {
    if !x.is_finite() {
        return None;
    }
    let points = || {
        series
            .x
            .iter()
            .zip(&series.y)
            .map(|(x, y)| (*x, *y))
            .filter(|p| p.0.is_finite())
    };
    let nearest = points().min_by(|a, b| (a.0 - x).abs().total_cmp(&(b.0 - x).abs()))?;
    let first = points().map(|p| p.0).fold(f64::INFINITY, f64::min);
    let last = points().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max);
    let second = points()
        .map(|p| p.0)
        .filter(|v| *v > first)
        .fold(f64::INFINITY, f64::min);
    let before_last = points()
        .map(|p| p.0)
        .filter(|v| *v < last)
        .fold(f64::NEG_INFINITY, f64::max);
    if first == last {
        return ((x - first).abs() <= reach).then_some(nearest);
    }
    let outside = x < first - (second - first) || x > last + (last - before_last);
    (!outside).then_some(nearest)
}

fn check_size(width: u32, height: u32) -> Result<(), ChartError> {
    if SIZE_LIMITS.contains(&width) && SIZE_LIMITS.contains(&height) {
        Ok(())
    } else {
        Err(ChartError::Size { width, height })
    }
}

fn svg<R>(
    width: u32,
    height: u32,
    draw: impl FnOnce(&DrawingArea<SVGBackend, Shift>) -> Result<R, ChartError>,
) -> Result<(String, R), ChartError> {
    let mut buf = String::new();
    let drawn = {
        let root = SVGBackend::with_string(&mut buf, (width, height)).into_drawing_area();
        let drawn = draw(&root)?;
        root.present().map_err(draw_err)?;
        drawn
    };
    Ok((buf, drawn))
}

#[cfg(feature = "png")]
fn png<R>(
    width: u32,
    height: u32,
    draw: impl FnOnce(&DrawingArea<raster::Raster, Shift>) -> Result<R, ChartError>,
) -> Result<Vec<u8>, ChartError> {
    png_then(width, height, draw, |_| ())
}

/// Draws, then lets `finish` work on the RGB pixels, then encodes.
#[cfg(feature = "png")]
fn png_then<R>(
    width: u32,
    height: u32,
    draw: impl FnOnce(&DrawingArea<raster::Raster, Shift>) -> Result<R, ChartError>,
    finish: impl FnOnce(&mut [u8]),
) -> Result<Vec<u8>, ChartError> {
    let mut rgb = vec![0u8; width as usize * height as usize * 3];
    {
        let bitmap = BitMapBackend::with_buffer(&mut rgb, (width, height));
        let root = raster::Raster::new(bitmap)?.into_drawing_area();
        draw(&root)?;
        root.present().map_err(draw_err)?;
    }
    finish(&mut rgb);
    encode_png(width, height, &rgb)
}

/// RGB pixels as PNG, compressed for speed (charts are flat colour, which
/// compresses well anyway).
#[cfg(feature = "png")]
fn encode_png(width: u32, height: u32, rgb: &[u8]) -> Result<Vec<u8>, ChartError> {
    let png_err = |e: png::EncodingError| ChartError::Png(e.to_string());
    let mut out = Vec::new();
    let mut encoder = png::Encoder::new(&mut out, width, height);
    encoder.set_color(png::ColorType::Rgb);
    encoder.set_depth(png::BitDepth::Eight);
    encoder.set_compression(png::Compression::Fast);
    let mut writer = encoder.write_header().map_err(png_err)?;
    writer.write_image_data(rgb).map_err(png_err)?;
    writer.finish().map_err(png_err)?;
    Ok(out)
}

fn draw_err(e: impl std::fmt::Display) -> ChartError {
    ChartError::Draw(e.to_string())
}

/// The colour of series `color`.
fn rgb(color: usize) -> RGBColor {
    let (r, g, b) = series_rgb(color);
    RGBColor(r, g, b)
}

fn log10_or_nan(v: f64) -> f64 {
    if v > 0.0 { v.log10() } else { f64::NAN }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hundred_series_get_a_hundred_colours() {
        let colours: std::collections::HashSet<String> = (0..100).map(color_hex).collect();
        assert_eq!(colours.len(), 100);
        assert_eq!(color_hex(0), PALETTE[0]);
        assert_eq!(color_hex(7), PALETTE[7]);
        for i in 0..100 {
            let (r, g, b) = series_rgb(i);
            // Neither near-white nor near-black: each reads on both themes.
            let luma = 0.2126 * r as f64 + 0.7152 * g as f64 + 0.0722 * b as f64;
            assert!((40.0..=225.0).contains(&luma), "series {i}: {r},{g},{b}");
        }
    }

    fn series(x: &[f64], y: &[f64]) -> Series {
        Series {
            label: "run".into(),
            color: 0,
            x: x.to_vec(),
            y: y.to_vec(),
            min: None,
            max: None,
        }
    }

    #[test]
    fn ema_weight_zero_is_identity() {
        let y = [1.0, 5.0, f64::NAN, -2.0];
        let out = ema(&y, 0.0);
        assert_eq!(out[..2], y[..2]);
        assert!(out[2].is_nan());
        assert_eq!(out[3], -2.0);
    }

    #[test]
    fn ema_matches_tensorboards_debiased_average() {
        // By hand, weight 0.5: last = 0.5, 0.5*0.5 + 0.5*3 = 1.75, 1.75*0.5 + 0.5*2 = 1.875;
        // debiased by 1 - 0.5^n = 0.5, 0.75, 0.875.
        let out = ema(&[1.0, 3.0, 2.0], 0.5);
        let want = [1.0, 1.75 / 0.75, 1.875 / 0.875];
        for (o, w) in out.iter().zip(want) {
            assert!((o - w).abs() < 1e-12, "{out:?} vs {want:?}");
        }
    }

    #[test]
    fn ema_passes_nan_through_without_poisoning() {
        let out = ema(&[1.0, f64::NAN, 3.0], 0.5);
        assert_eq!(out[0], 1.0);
        assert!(out[1].is_nan());
        // The NaN is skipped: the third value is the second finite one, 1.75 / 0.75.
        assert!((out[2] - 1.75 / 0.75).abs() < 1e-12);
    }

    #[test]
    fn group_mean_aligns_lines_on_the_union_of_their_xs() {
        let a = series(&[0.0, 10.0, 20.0], &[0.0, 10.0, 20.0]);
        let b = series(&[0.0, 20.0], &[2.0, 4.0]);
        let c = series(&[5.0, 10.0], &[7.0, f64::NAN]);
        let g = group_mean("lr=0.1", 3, &[&a, &b, &c]);
        assert_eq!(g.x, [0.0, 5.0, 10.0, 20.0]);
        // x=5: a → 5, b → 2.5 (interpolated), c → 7. x=10: c has no finite value there.
        assert_eq!(
            g.y,
            [1.0, (5.0 + 2.5 + 7.0) / 3.0, (10.0 + 3.0) / 2.0, 12.0]
        );
        assert_eq!(g.min.as_deref(), Some(&[0.0, 2.5, 3.0, 4.0][..]));
        assert_eq!(g.max.as_deref(), Some(&[2.0, 7.0, 10.0, 20.0][..]));
        assert_eq!((g.label.as_str(), g.color), ("lr=0.1", 3));
    }

    #[test]
    fn value_at_finds_the_nearest_point() {
        let s = series(&[0.0, 10.0, 20.0], &[1.0, 2.0, 3.0]);
        assert_eq!(value_at(&s, 4.0, 1.0), Some((0.0, 1.0)));
        assert_eq!(value_at(&s, 6.0, 1.0), Some((10.0, 2.0)));
        assert_eq!(value_at(&s, 29.0, 1.0), Some((20.0, 3.0)));
        assert_eq!(value_at(&s, 31.0, 1.0), None);
        assert_eq!(value_at(&s, -11.0, 1.0), None);
        assert_eq!(value_at(&s, f64::NAN, 1.0), None);
        assert_eq!(value_at(&series(&[], &[]), 0.0, 1.0), None);
        // One point answers near it only: not past a run's last step when
        // it is the only one in view.
        let one = series(&[5.0], &[f64::NAN]);
        assert_eq!(value_at(&one, 5.5, 1.0).map(|p| p.0), Some(5.0));
        assert_eq!(value_at(&one, 107.0, 1.0), None);
    }

    #[test]
    fn frame_maps_pixels_and_data_both_ways() {
        let f = Frame {
            left: 60.0,
            top: 30.0,
            right: 580.0,
            bottom: 350.0,
            x_min: -5.0,
            x_max: 105.0,
            y_min: 1e-3,
            y_max: 10.0,
            log_y: true,
        };
        for x in [-5.0, 0.0, 42.5, 105.0] {
            assert!((f.x_at(f.px_of_x(x)) - x).abs() < 1e-9);
        }
        assert_eq!(f.px_of_x(-5.0), 60.0);
        assert_eq!(f.py_of_y(10.0), 30.0);
        assert!((f.py_of_y(0.1) - 190.0).abs() < 1e-9, "halfway in decades");
        assert!((f.y_at(f.py_of_y(0.5)) - 0.5).abs() < 1e-12);
        assert!(f.contains(60.0, 350.0) && !f.contains(59.0, 100.0));
    }

    #[test]
    fn series_travel_as_json_with_gaps() {
        let mut s = series(&[0.0, 1.0], &[f64::NAN, 2.0]);
        s.max = Some(vec![f64::INFINITY, 3.0]);
        let json = serde_json::to_string(&s).unwrap();
        assert!(json.contains(r#""y":[null,2.0]"#), "{json}");
        let back: Series = serde_json::from_str(&json).unwrap();
        assert!(back.y[0].is_nan() && back.max.as_ref().unwrap()[0].is_nan());
        assert_eq!((back.y[1], back.min), (2.0, None));
        let chart = r#"{"title":"loss","x_axis":"WallTime","series":[],"log_y":false,
            "smoothing":0.6,"x_range":[1.0,2.0],"width":300,"height":200}"#;
        let chart: LineChart = serde_json::from_str(chart).unwrap();
        assert_eq!(
            (chart.x_axis, chart.x_range, chart.legend),
            (XAxis::WallTime, Some((1.0, 2.0)), false)
        );
    }

    #[test]
    fn palette_colours_parse() {
        assert_eq!(rgb(0), RGBColor(0x00, 0x72, 0xb2));
        assert_eq!(rgb(7), RGBColor(0x8c, 0x8c, 0x8c));
        // Past the palette, colours of their own: the ninth run is not the first again.
        assert_ne!(rgb(8), rgb(0));
    }
}
