//! Stacked bars: one bar per period, one colour per team or person (the
//! largest seven by total; the rest together as "others"), the totals
//! above the bars.

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};

use crate::format::{self, TickKind};
use crate::plot::{BORDER, LABEL_FONT, TEXT};
use crate::{ChartError, check_size, draw_err, rgb};

/// One colour's values, one per category (missing ones are 0).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BarSeries {
    pub label: String,
    pub values: Vec<f64>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StackedBars {
    pub title: String,
    /// The bars' labels, left to right.
    pub categories: Vec<String>,
    pub series: Vec<BarSeries>,
    /// What the values are ("GPU-hours").
    pub unit: String,
    pub width: u32,
    pub height: u32,
}

/// Series drawn in colours of their own; the rest are summed as "others".
pub const MAX_BAR_SERIES: usize = 7;
const TOP: i32 = 44;
const BOTTOM: i32 = 36;
const LEFT: i32 = 64;
const LEGEND: i32 = 170;

impl StackedBars {
    /// The series as drawn: the largest by total first, the rest summed.
    pub fn shown(&self) -> Vec<BarSeries> {
        let n = self.categories.len();
        let value = |s: &BarSeries, i: usize| {
            s.values
                .get(i)
                .copied()
                .filter(|v| v.is_finite() && *v > 0.0)
                .unwrap_or(0.0)
        };
        let mut ranked: Vec<(f64, &BarSeries)> = self
            .series
            .iter()
            .map(|s| ((0..n).map(|i| value(s, i)).sum(), s))
            .filter(|(total, _)| *total > 0.0)
            .collect();
        ranked.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.label.cmp(&b.1.label)));
        let mut shown: Vec<BarSeries> = ranked
            .iter()
            .take(MAX_BAR_SERIES)
            .map(|(_, s)| BarSeries {
                label: s.label.clone(),
                values: (0..n).map(|i| value(s, i)).collect(),
            })
            .collect();
        if ranked.len() > MAX_BAR_SERIES {
            let rest = &ranked[MAX_BAR_SERIES..];
            shown.push(BarSeries {
                label: format!("{} others", rest.len()),
                values: (0..n)
                    .map(|i| rest.iter().map(|(_, s)| value(s, i)).sum())
                    .collect(),
            });
        }
        shown
    }
}

/// Draws the bars as SVG: each non-empty stack segment one `<rect>` (with a
/// `<title>`-less fill of its series' colour), legend swatches as `<rect>`s
/// too, all words as `<text>`.
pub fn stacked_bars_svg(b: &StackedBars) -> Result<String, ChartError> {
    check_size(b.width, b.height)?;
    let (svg, ()) = crate::svg(b.width, b.height, |root| draw(root, b))?;
    Ok(svg)
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    b: &StackedBars,
) -> Result<(), ChartError> {
    root.fill(&WHITE).map_err(draw_err)?;
    let text = |size: f64, pos: Pos| ("sans-serif", size).into_font().color(&TEXT).pos(pos);
    root.draw(&Text::new(
        b.title.clone(),
        (8, 8),
        text(19.0, Pos::new(HPos::Left, VPos::Top)),
    ))
    .map_err(draw_err)?;
    let shown = b.shown();
    let n = b.categories.len();
    let totals: Vec<f64> = (0..n)
        .map(|i| shown.iter().map(|s| s.values[i]).sum())
        .collect();
    let max = totals.iter().copied().fold(0.0, f64::max);
    let (left, right) = (LEFT, b.width as i32 - LEGEND);
    let (top, bottom) = (TOP, b.height as i32 - BOTTOM);
    if n == 0 || max <= 0.0 {
        root.draw(&Text::new(
            "no GPU time in this period",
            ((left + right) / 2, (top + bottom) / 2),
            text(LABEL_FONT, Pos::new(HPos::Center, VPos::Center)),
        ))
        .map_err(draw_err)?;
        return Ok(());
    }
    let (ticks, tick_format) = format::ticks(0.0, max * 1.1, 5, TickKind::Number);
    let hi = ticks.last().copied().unwrap_or(max).max(max * 1.05);
    let y_of = |v: f64| bottom - ((v / hi) * (bottom - top) as f64).round() as i32;
    for &t in &ticks {
        let y = y_of(t);
        root.draw(&PathElement::new(
            vec![(left, y), (right, y)],
            RGBColor(0xe8, 0xe8, 0xe8),
        ))
        .map_err(draw_err)?;
        root.draw(&Text::new(
            tick_format.label(t),
            (left - 6, y),
            text(LABEL_FONT * 0.8, Pos::new(HPos::Right, VPos::Center)),
        ))
        .map_err(draw_err)?;
    }
    root.draw(&Text::new(
        b.unit.clone(),
        (left - 6, top - 14),
        text(LABEL_FONT * 0.8, Pos::new(HPos::Right, VPos::Bottom)),
    ))
    .map_err(draw_err)?;
    let slot = (right - left) as f64 / n as f64;
    let bar = (slot * 0.7).max(1.0);
    // Labels under every bar where they fit, else under every k-th.
    let every = ((70.0 / slot).ceil() as usize).max(1);
    for (i, (&total, category)) in totals.iter().zip(&b.categories).enumerate() {
        let x0 = left + (slot * i as f64 + (slot - bar) / 2.0).round() as i32;
        let x1 = x0 + bar.round() as i32;
        let mut base = 0.0;
        for (c, s) in shown.iter().enumerate() {
            let v = s.values[i];
            if v <= 0.0 {
                continue;
            }
            root.draw(&Rectangle::new(
                [(x0, y_of(base + v)), (x1, y_of(base))],
                rgb(c).filled(),
            ))
            .map_err(draw_err)?;
            base += v;
        }
        if total > 0.0 && bar >= 24.0 {
            root.draw(&Text::new(
                format::format_value(total),
                ((x0 + x1) / 2, y_of(total) - 3),
                text(LABEL_FONT * 0.75, Pos::new(HPos::Center, VPos::Bottom)),
            ))
            .map_err(draw_err)?;
        }
        if i % every == 0 {
            root.draw(&Text::new(
                category.clone(),
                ((x0 + x1) / 2, bottom + 6),
                text(LABEL_FONT * 0.8, Pos::new(HPos::Center, VPos::Top)),
            ))
            .map_err(draw_err)?;
        }
    }
    root.draw(&PathElement::new(
        vec![(left, bottom), (right, bottom)],
        BORDER,
    ))
    .map_err(draw_err)?;
    // The legend, largest first, as the stacks read from the bottom.
    for (c, s) in shown.iter().enumerate() {
        let y = top + c as i32 * 22;
        let x = right + 16;
        root.draw(&Rectangle::new([(x, y), (x + 12, y + 12)], rgb(c).filled()))
            .map_err(draw_err)?;
        let label: String = s.label.chars().take(20).collect();
        root.draw(&Text::new(
            label,
            (x + 18, y + 6),
            text(LABEL_FONT * 0.85, Pos::new(HPos::Left, VPos::Center)),
        ))
        .map_err(draw_err)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(series: Vec<BarSeries>) -> StackedBars {
        StackedBars {
            title: "GPU-hours by week".into(),
            categories: vec!["11-23".into(), "11-30".into()],
            series,
            unit: "GPU-h".into(),
            width: 800,
            height: 300,
        }
    }

    #[test]
    fn each_segment_and_swatch_is_a_rect_and_the_rest_are_others() {
        let two = chart(vec![
            BarSeries {
                label: "vision".into(),
                values: vec![3.0, 1.0],
            },
            BarSeries {
                label: "nlp".into(),
                values: vec![0.0, 5.0],
            },
        ]);
        let svg = stacked_bars_svg(&two).unwrap();
        // Background, 3 non-empty segments, 2 swatches.
        assert_eq!(svg.matches("<rect").count(), 1 + 3 + 2, "{svg}");
        assert!(svg.contains(">\nnlp\n</text>") && svg.contains(">\nvision\n</text>"));
        assert_eq!(two.shown()[0].label, "nlp", "the largest first");

        let many = chart(
            (0..10)
                .map(|i| BarSeries {
                    label: format!("p{i}"),
                    values: vec![i as f64 + 1.0, 0.0],
                })
                .collect(),
        );
        let shown = many.shown();
        assert_eq!(shown.len(), MAX_BAR_SERIES + 1);
        assert_eq!(shown[MAX_BAR_SERIES].label, "3 others");
        assert_eq!(shown[MAX_BAR_SERIES].values, vec![1.0 + 2.0 + 3.0, 0.0]);
        assert!(
            stacked_bars_svg(&chart(Vec::new()))
                .unwrap()
                .contains("no GPU time")
        );
        assert!(matches!(
            stacked_bars_svg(&StackedBars {
                width: 5,
                ..chart(Vec::new())
            }),
            Err(ChartError::Size { .. })
        ));
    }
}
