//! Parallel coordinates: one vertical axis per param (and a metric last), one line per run.

use crate::format::{TickKind, ticks};
use crate::labels::{fit, text_height, text_width};
use crate::plot::{BORDER, LABEL_FONT, extent, text_style};
use crate::{ChartError, check_size, draw_err, format_value, rgb, svg};
use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};

/// One axis: `values[i]` belongs to `lines[i]` of the [`Parallel`] (a shorter column is missing
/// the rest). It is numeric when every present value parses as a finite f64, else categorical.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Column {
    pub name: String,
    pub values: Vec<Option<String>>,
}

/// One run.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub label: String,
    pub color: usize,
}

/// Params (then one metric, last) of runs, as parallel coordinates.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Parallel {
    pub columns: Vec<Column>,
    pub lines: Vec<Line>,
    pub width: u32,
    pub height: u32,
}

/// Draws parallel coordinates as SVG: exactly one `<polyline>` per line, in input order, with
/// a point on every axis. Axes are `<rect>`s, one per column, left to right. A numeric column
/// has its own min..max scale (high at the top) with ticks, logarithmic when its values are
/// all positive and span two decades or more; a categorical one spreads its
/// distinct values, sorted, evenly from the top, each labelled. A missing value is drawn on a
/// slot labelled "missing" below the axis, so that a line never breaks and each run stays one
/// polyline. Without columns or lines the chart says "no data".
pub fn parallel_svg(p: &Parallel) -> Result<String, ChartError> {
    check_size(p.width, p.height)?;
    svg(p.width, p.height, |root| draw(root, p)).map(|(svg, ())| svg)
}

enum Scale {
    /// `lo..=hi` in plotted units: log10 of the values when `log`.
    Numeric {
        lo: f64,
        hi: f64,
        log: bool,
    },
    Categorical(Vec<String>),
}

impl Scale {
    fn of(column: &Column) -> Scale {
        let present = || column.values.iter().flatten();
        let numbers: Option<Vec<f64>> = present()
            .map(|v| v.trim().parse::<f64>().ok().filter(|n| n.is_finite()))
            .collect();
        match numbers.and_then(extent) {
            // Positive values over two decades or more (a learning rate): a log axis.
            Some((lo, hi)) if lo > 0.0 && hi / lo >= 100.0 => Scale::Numeric {
                lo: lo.log10(),
                hi: hi.log10(),
                log: true,
            },
            Some((lo, hi)) => Scale::Numeric { lo, hi, log: false },
            None => {
                let mut values: Vec<String> = present().cloned().collect();
                values.sort();
                values.dedup();
                Scale::Categorical(values)
            }
        }
    }

    /// How far up the axis `value` sits, from 0 (bottom) to 1 (top).
    fn fraction(&self, value: &str) -> f64 {
        match self {
            Scale::Numeric { log, .. } => {
                let v = value.trim().parse::<f64>().unwrap_or(f64::NAN);
                self.fraction_plotted(if *log { v.log10() } else { v })
            }
            Scale::Categorical(values) if values.len() < 2 => 0.5,
            Scale::Categorical(values) => {
                let i = values.iter().position(|v| v == value).unwrap_or(0);
                1.0 - i as f64 / (values.len() - 1) as f64
            }
        }
    }

    /// Like `fraction`, for a value already in plotted units (a tick).
    fn fraction_plotted(&self, t: f64) -> f64 {
        match self {
            Scale::Numeric { lo, hi, .. } if hi > lo && t.is_finite() => (t - lo) / (hi - lo),
            _ => 0.5,
        }
    }
}

const NAME_FONT: f64 = LABEL_FONT;
const TICK_FONT: f64 = LABEL_FONT * 0.85;

fn draw<DB: DrawingBackend>(root: &DrawingArea<DB, Shift>, p: &Parallel) -> Result<(), ChartError> {
    root.fill(&WHITE).map_err(draw_err)?;
    let (w, h) = root.dim_in_pixel();
    let (w, h) = (w as i32, h as i32);
    if p.columns.is_empty() || p.lines.is_empty() {
        let style = text_style(LABEL_FONT * 1.2).pos(Pos::new(HPos::Center, VPos::Center));
        return root
            .draw_text("no data", &style, (w / 2, h / 2))
            .map_err(draw_err);
    }
    let value = |c: &Column, i: usize| c.values.get(i).cloned().flatten();
    let has_missing = |c: &Column| (0..p.lines.len()).any(|i| value(c, i).is_none());
    let any_missing = p.columns.iter().any(has_missing);
    let top = 34.min(h / 4);
    let missing_y = h - 14.min(h / 8);
    let bottom = if any_missing {
        h - 40.min(h / 4)
    } else {
        missing_y
    };
    let scales: Vec<Scale> = p.columns.iter().map(Scale::of).collect();
    let y_at = |fraction: f64| bottom - (fraction * f64::from(bottom - top)).round() as i32;
    let y_of = |s: &Scale, v: Option<&str>| v.map_or(missing_y, |v| y_at(s.fraction(v)));

    // Each axis's tick labels, whole: the first axis's set the left margin.
    let tick_labels: Vec<Vec<(String, i32)>> = p
        .columns
        .iter()
        .zip(&scales)
        .map(|(column, scale)| {
            let mut labels: Vec<(String, i32)> = match scale {
                Scale::Numeric { lo, hi, .. } if hi <= lo => vec![(format_value(*lo), y_at(0.5))],
                Scale::Numeric { lo, hi, log } => {
                    let target = ((bottom - top) / 40).max(2) as usize;
                    let kind = if *log {
                        TickKind::Log
                    } else {
                        TickKind::Number
                    };
                    let (ticks, format) = ticks(*lo, *hi, target, kind);
                    let at = |t: &f64| (format.label(*t), y_at(scale.fraction_plotted(*t)));
                    ticks.iter().map(at).collect()
                }
                Scale::Categorical(values) => {
                    // One label per line height at most.
                    let line = text_height(TICK_FONT);
                    let every = (values.len() as i32 * line / (bottom - top).max(1) + 1) as usize;
                    (values.iter().step_by(every))
                        .map(|v| (v.clone(), y_of(scale, Some(v))))
                        .collect()
                }
            };
            if has_missing(column) {
                labels.push(("missing".to_owned(), missing_y));
            }
            labels
        })
        .collect();
    // Margins wide enough for the first axis's labels and the outer axes'
    // names, within a quarter (left) and a sixth (right) of the width.
    let first_ticks = (tick_labels[0].iter())
        .map(|(l, _)| text_width(l, TICK_FONT))
        .max()
        .unwrap_or(0);
    let half_name = |c: &Column| text_width(&c.name, NAME_FONT) / 2 + 2;
    let left = (first_ticks + 9)
        .max(half_name(&p.columns[0]))
        .max(60)
        .min(w / 4);
    let right = half_name(&p.columns[p.columns.len() - 1])
        .max(40)
        .min(w / 6);
    let n = p.columns.len();
    let spacing = (w - left - right) / (n as i32 - 1).max(1);
    let axis_x = |j: usize| {
        if n == 1 {
            w / 2
        } else {
            left + spacing * j as i32
        }
    };

    for j in 0..n {
        let axis = Rectangle::new([(axis_x(j), top), (axis_x(j) + 1, bottom)], BORDER.filled());
        root.draw(&axis).map_err(draw_err)?;
    }
    for (i, line) in p.lines.iter().enumerate() {
        let points: Vec<_> = (p.columns.iter().zip(&scales).enumerate())
            .map(|(j, (c, s))| (axis_x(j), y_of(s, value(c, i).as_deref())))
            .collect();
        let style = rgb(line.color).mix(0.7).stroke_width(2);
        root.draw(&PathElement::new(points, style))
            .map_err(draw_err)?;
    }

    // Names centred over their axes, each within its share of the width and
    // inside the picture; tick labels left of their axis, clear of the one
    // before it (or of the left edge). Cut with an ellipsis where they would
    // not fit.
    let name_style = text_style(NAME_FONT).pos(Pos::new(HPos::Center, VPos::Top));
    let label_style = text_style(TICK_FONT).pos(Pos::new(HPos::Right, VPos::Center));
    for (j, (column, labels)) in p.columns.iter().zip(&tick_labels).enumerate() {
        let x = axis_x(j);
        let mut room = 2 * (x - 2).min(w - x - 2);
        if n > 1 {
            room = room.min(spacing - 10);
        }
        if let Some(name) = fit(&column.name, room, NAME_FONT) {
            root.draw_text(&name, &name_style, (x, 6))
                .map_err(draw_err)?;
        }
        let room = if j == 0 { x - 7 } else { spacing - 12 };
        for (label, y) in labels {
            if let Some(label) = fit(label, room, TICK_FONT) {
                root.draw_text(&label, &label_style, (x - 5, *y))
                    .map_err(draw_err)?;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plot::tests::polylines;

    fn column(name: &str, values: &[Option<&str>]) -> Column {
        Column {
            name: name.into(),
            values: values.iter().map(|v| v.map(String::from)).collect(),
        }
    }

    fn parallel() -> Parallel {
        Parallel {
            columns: vec![
                column("lr", &[Some("0.1"), Some("0.01"), Some("1e-3")]),
                column("optimizer", &[Some("sgd"), None, Some("adam")]),
                column("val/loss", &[Some("0.9"), Some("0.4"), Some("0.6")]),
            ],
            lines: (0..3)
                .map(|i| Line {
                    label: format!("run-{i}"),
                    color: i,
                })
                .collect(),
            width: 600,
            height: 300,
        }
    }

    #[test]
    fn one_polyline_per_run_through_every_axis() {
        let svg = parallel_svg(&parallel()).unwrap();
        let lines = polylines::<i32>(&svg);
        assert_eq!(lines.len(), 3);
        assert!(lines.iter().all(|l| l.len() == 3));
        assert_eq!(
            svg.matches("<rect ").count(),
            1 + 3,
            "background and three axes"
        );
        for name in ["lr", "optimizer", "val/loss", "adam", "sgd", "missing"] {
            assert!(svg.contains(&format!(">\n{name}\n</text>")), "{name}");
        }
        // Numeric: the highest loss (run 0) is highest up, the lowest (run 1) lowest.
        let at_metric: Vec<i32> = lines.iter().map(|l| l[2].1).collect();
        assert!(
            at_metric[0] < at_metric[2] && at_metric[2] < at_metric[1],
            "{at_metric:?}"
        );
        // Categorical, sorted from the top: adam above sgd; the missing value below both.
        let at_optimizer: Vec<i32> = lines.iter().map(|l| l[1].1).collect();
        assert!(at_optimizer[2] < at_optimizer[0] && at_optimizer[0] < at_optimizer[1]);
    }

    #[test]
    fn names_and_labels_cover_no_other_and_stay_inside() {
        let long = |i: usize| format!("a_very_long_categorical_value_number_{i}");
        let p = Parallel {
            columns: vec![
                column(
                    "model_architecture_family",
                    &[Some(&long(1)), Some(&long(2)), None],
                ),
                column(
                    "learning_rate_warmup_steps",
                    &[Some("100"), Some("2000"), Some("35000")],
                ),
                column("optimizer", &[Some("sgd"), Some("adamw"), Some("lion")]),
                column("weight_decay", &[Some("0.1"), Some("0.01"), Some("0.001")]),
                column(
                    "validation_loss_at_the_end",
                    &[Some("0.9"), Some("0.4"), Some("0.6")],
                ),
            ],
            lines: (0..3)
                .map(|i| Line {
                    label: format!("run-{i}"),
                    color: i,
                })
                .collect(),
            width: 900,
            height: 320,
        };
        let svg = parallel_svg(&p).unwrap();
        let boxes = crate::labels::tests::text_boxes(&svg);
        crate::labels::tests::assert_apart_and_inside(&boxes, 900, 320);
        // Every axis is named, the short ones whole; the long values are
        // there, cut.
        assert_eq!(
            boxes.iter().filter(|(_, b)| b[1] < 20).count(),
            5,
            "{boxes:?}"
        );
        assert!(svg.contains(">\noptimizer\n</text>"));
        // The long values are cut in the middle, so they stay apart.
        let values: Vec<&str> = boxes
            .iter()
            .map(|(t, _)| t.as_str())
            .filter(|t| t.starts_with("a_very"))
            .collect();
        assert_eq!(values.len(), 2, "{values:?}");
        assert!(values.iter().all(|v| v.contains('…')), "{values:?}");
        assert_ne!(values[0], values[1]);
        assert!(svg.contains(">\nmissing\n</text>"));
    }

    #[test]
    fn a_column_over_decades_is_logarithmic() {
        let svg = parallel_svg(&parallel()).unwrap();
        let at_lr: Vec<i32> = polylines::<i32>(&svg).iter().map(|l| l[0].1).collect();
        assert_eq!(
            at_lr[1] * 2,
            at_lr[0] + at_lr[2],
            "0.01 halfway between 0.1 and 0.001"
        );
        for tick in ["0.1", "0.01", "0.001"] {
            assert!(svg.contains(&format!(">\n{tick}\n</text>")), "{tick}");
        }
    }

    #[test]
    fn a_column_with_one_word_is_categorical() {
        let mut p = parallel();
        p.columns[0].values[1] = Some("auto".into());
        let svg = parallel_svg(&p).unwrap();
        for label in ["0.1", "auto", "1e-3"] {
            assert!(svg.contains(&format!(">\n{label}\n</text>")), "{label}");
        }
    }

    #[test]
    fn nothing_to_draw_says_no_data() {
        let mut p = parallel();
        p.lines.clear();
        let svg = parallel_svg(&p).unwrap();
        assert!(svg.contains(">\nno data\n</text>"));
        assert_eq!(svg.matches("<polyline ").count(), 0);
    }
}
