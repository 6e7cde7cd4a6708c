//! The cluster heatmap: one row per GPU, grouped by node, time across, GPU
//! utilization as colour (viridis, colour-blind safe: dark idle, bright
//! busy; light grey where no sample came).

use plotters::coord::Shift;
use plotters::prelude::*;
use plotters::style::text_anchor::{HPos, Pos, VPos};
use serde::{Deserialize, Serialize};

use crate::format::{self, TickKind};
use crate::plot::{BORDER, LABEL_FONT, TEXT};
use crate::{ChartError, draw_err};

/// One GPU's row: mean utilization (percent) per column, None where no
/// sample fell.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeatRow {
    pub label: String,
    pub cells: Vec<Option<f32>>,
}

/// The rows of one node.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeatGroup {
    pub label: String,
    pub rows: Vec<HeatRow>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Heatmap {
    pub title: String,
    /// The window the columns split evenly, Unix milliseconds.
    pub from_ms: i64,
    pub to_ms: i64,
    pub groups: Vec<HeatGroup>,
    /// Pixels per GPU row (1 to 24).
    pub row_height: u32,
    pub width: u32,
}

/// Where each node's rows lie in the drawing, so that a page can tell which
/// node and GPU is under the pointer.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct HeatLayout {
    pub height: u32,
    /// The cells' pixel columns.
    pub left: u32,
    pub right: u32,
    /// `(top, bottom)` pixel rows of each group, in order.
    pub groups: Vec<(u32, u32)>,
}

const TOP: u32 = 56;
const BOTTOM: u32 = 34;
const LEFT: u32 = 170;
const RIGHT: u32 = 16;
/// Pixels between two nodes' rows (none for rows thinner than 3 px, where
/// a gap per node would take a third of the height).
fn gap(row_height: u32) -> u32 {
    u32::from(row_height >= 3)
}
/// The tallest heatmap drawn (2 px rows for 8,000 GPUs, 1 px for 16,000).
pub const MAX_HEATMAP_HEIGHT: u32 = 16_384;
const NO_DATA: RGBColor = RGBColor(0xee, 0xee, 0xee);

/// Viridis at 0, 25, 50, 75 and 100 %.
const VIRIDIS: [(u8, u8, u8); 5] = [
    (0x44, 0x01, 0x54),
    (0x3b, 0x52, 0x8b),
    (0x21, 0x91, 0x8c),
    (0x5e, 0xc9, 0x62),
    (0xfd, 0xe7, 0x25),
];

/// The colour of a utilization (percent), clamped to 0–100.
pub fn heat_color(util: f32) -> (u8, u8, u8) {
    let u = if util.is_finite() {
        util.clamp(0.0, 100.0)
    } else {
        0.0
    } / 25.0;
    let i = (u.floor() as usize).min(3);
    let f = u - i as f32;
    let (a, b) = (VIRIDIS[i], VIRIDIS[i + 1]);
    let mix = |x: u8, y: u8| (x as f32 + (y as f32 - x as f32) * f).round() as u8;
    (mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

impl Heatmap {
    /// The layout this heatmap will be drawn with.
    pub fn layout(&self) -> HeatLayout {
        let mut y = TOP;
        let mut groups = Vec::with_capacity(self.groups.len());
        for g in &self.groups {
            let h = g.rows.len() as u32 * self.row_height;
            groups.push((y, y + h));
            y += h + gap(self.row_height);
        }
        HeatLayout {
            height: y + BOTTOM,
            left: LEFT,
            right: self.width.saturating_sub(RIGHT),
            groups,
        }
    }

    fn check(&self) -> Result<HeatLayout, ChartError> {
        let layout = self.layout();
        if !(1..=24).contains(&self.row_height)
            || !(LEFT + RIGHT + 16..=4096).contains(&self.width)
            || layout.height > MAX_HEATMAP_HEIGHT
        {
            return Err(ChartError::Draw(format!(
                "a heatmap of {} rows of {} px at {} px wide does not fit: ask for fewer GPUs, thinner rows (1 to 24 px) or a width of {} to 4096 px",
                self.groups.iter().map(|g| g.rows.len()).sum::<usize>(),
                self.row_height,
                self.width,
                LEFT + RIGHT + 16
            )));
        }
        Ok(layout)
    }
}

/// Draws the heatmap as SVG: each row's cells as `<rect>`s, neighbours of
/// one colour merged, so an idle or a steadily busy GPU costs few elements.
pub fn heatmap_svg(h: &Heatmap) -> Result<(String, HeatLayout), ChartError> {
    let layout = h.check()?;
    let (svg, ()) = crate::svg(h.width, layout.height, |root| draw(root, h, &layout))?;
    Ok((svg, layout))
}

/// The same drawing as [`heatmap_svg`], as PNG.
#[cfg(feature = "png")]
pub fn heatmap_png(h: &Heatmap) -> Result<Vec<u8>, ChartError> {
    let layout = h.check()?;
    crate::png(h.width, layout.height, |root| draw(root, h, &layout))
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    h: &Heatmap,
    layout: &HeatLayout,
) -> Result<(), ChartError> {
    root.fill(&WHITE).map_err(draw_err)?;
    let text = |size: f64, pos: Pos| ("sans-serif", size).into_font().color(&TEXT).pos(pos);
    let left_top = Pos::new(HPos::Left, VPos::Top);
    root.draw(&Text::new(h.title.clone(), (8, 8), text(19.0, left_top)))
        .map_err(draw_err)?;
    let (left, right) = (layout.left as i32, layout.right as i32);
    let width = (right - left).max(1);
    // Rows; a label beside a node's first row where there is room.
    let mut last_label: Option<i32> = None;
    for (g, &(top, _)) in h.groups.iter().zip(&layout.groups) {
        let top = top as i32;
        if last_label.is_none_or(|y| top - y >= 14) {
            root.draw(&Text::new(
                g.label.clone(),
                (left - 8, top),
                text(LABEL_FONT * 0.85, Pos::new(HPos::Right, VPos::Top)),
            ))
            .map_err(draw_err)?;
            last_label = Some(top);
        }
        for (r, row) in g.rows.iter().enumerate() {
            let y0 = top + r as i32 * h.row_height as i32;
            let y1 = y0 + h.row_height as i32;
            let n = row.cells.len().max(1);
            let x_of = |i: usize| left + (i as i64 * width as i64 / n as i64) as i32;
            let color = |c: Option<f32>| match c {
                Some(u) => {
                    let (r, g, b) = heat_color(u);
                    RGBColor(r, g, b)
                }
                None => NO_DATA,
            };
            let mut i = 0;
            while i < row.cells.len() {
                let c = color(row.cells[i]);
                let mut j = i + 1;
                while j < row.cells.len() && color(row.cells[j]) == c {
                    j += 1;
                }
                root.draw(&Rectangle::new([(x_of(i), y0), (x_of(j), y1)], c.filled()))
                    .map_err(draw_err)?;
                i = j;
            }
        }
    }
    // The time axis under the rows.
    let bottom = layout.height as i32 - BOTTOM as i32;
    root.draw(&PathElement::new(
        vec![(left, bottom), (right, bottom)],
        BORDER,
    ))
    .map_err(draw_err)?;
    let (from, to) = (h.from_ms as f64, h.to_ms.max(h.from_ms + 1) as f64);
    let (ticks, fmt) = format::ticks(from, to, (width / 110).max(2) as usize, TickKind::WallTime);
    for t in ticks {
        let x = left + ((t - from) / (to - from) * width as f64).round() as i32;
        root.draw(&PathElement::new(
            vec![(x, bottom), (x, bottom + 4)],
            BORDER,
        ))
        .map_err(draw_err)?;
        root.draw(&Text::new(
            fmt.label(t),
            (x, bottom + 7),
            text(LABEL_FONT * 0.85, Pos::new(HPos::Center, VPos::Top)),
        ))
        .map_err(draw_err)?;
    }
    // The colour key, top right: 0 % to 100 %.
    let key_w = 160;
    let key_x = right - key_w;
    let key_y = 14;
    for i in 0..key_w {
        let (r, g, b) = heat_color(i as f32 * 100.0 / (key_w - 1) as f32);
        root.draw(&Rectangle::new(
            [(key_x + i, key_y), (key_x + i + 1, key_y + 12)],
            RGBColor(r, g, b).filled(),
        ))
        .map_err(draw_err)?;
    }
    for (x, label, pos) in [
        (key_x - 6, "0 %", Pos::new(HPos::Right, VPos::Top)),
        (right, "100 % busy", Pos::new(HPos::Right, VPos::Top)),
    ] {
        let y = if label == "0 %" { key_y } else { key_y + 16 };
        root.draw(&Text::new(label, (x, y), text(LABEL_FONT * 0.8, pos)))
            .map_err(draw_err)?;
    }
    root.draw(&Rectangle::new(
        [(key_x - 120, key_y + 16), (key_x - 108, key_y + 28)],
        NO_DATA.filled(),
    ))
    .map_err(draw_err)?;
    root.draw(&Text::new(
        "no sample",
        (key_x - 104, key_y + 16),
        text(LABEL_FONT * 0.8, left_top),
    ))
    .map_err(draw_err)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rows: &[&[Option<f32>]]) -> Heatmap {
        Heatmap {
            title: "GPUs".into(),
            from_ms: 1_800_000_000_000,
            to_ms: 1_800_086_400_000,
            groups: vec![
                HeatGroup {
                    label: "node-a".into(),
                    rows: rows
                        .iter()
                        .enumerate()
                        .map(|(i, cells)| HeatRow {
                            label: format!("GPU {i}"),
                            cells: cells.to_vec(),
                        })
                        .collect(),
                },
                HeatGroup {
                    label: "node-b".into(),
                    rows: vec![HeatRow {
                        label: "GPU 0".into(),
                        cells: vec![None; 4],
                    }],
                },
            ],
            row_height: 10,
            width: 600,
        }
    }

    #[test]
    fn colours_run_from_dark_idle_to_bright_busy() {
        assert_eq!(heat_color(0.0), VIRIDIS[0]);
        assert_eq!(heat_color(100.0), VIRIDIS[4]);
        assert_eq!(heat_color(50.0), VIRIDIS[2]);
        assert_eq!(heat_color(250.0), VIRIDIS[4]);
        assert_eq!(heat_color(f32::NAN), VIRIDIS[0]);
        let brightness = |(r, g, b): (u8, u8, u8)| r as u32 + g as u32 + b as u32;
        assert!(brightness(heat_color(80.0)) > brightness(heat_color(20.0)));
    }

    #[test]
    fn cells_of_one_colour_are_one_rectangle() {
        let busy = Some(90.0);
        let idle = Some(0.0);
        let (svg, layout) = heatmap_svg(&map(&[
            &[busy, busy, busy, idle],
            &[idle, idle, idle, idle],
        ]))
        .unwrap();
        // The cells: rectangles at or below the first row (the key is above).
        let cells: Vec<&str> = svg
            .lines()
            .filter(|l| l.starts_with("<rect"))
            .filter(|l| {
                let y = l.split("y=\"").nth(1).and_then(|v| v.split('"').next());
                y.and_then(|v| v.parse::<u32>().ok())
                    .is_some_and(|y| y >= TOP)
            })
            .collect();
        let fill = |c: (u8, u8, u8)| format!("fill=\"#{:02X}{:02X}{:02X}\"", c.0, c.1, c.2);
        let count = |c| cells.iter().filter(|l| l.contains(&fill(c))).count();
        // Row 0: one busy run and one idle cell; row 1: one idle run;
        // node-b: one run without data.
        assert_eq!(cells.len(), 4, "{svg}");
        assert_eq!(count(heat_color(90.0)), 1);
        assert_eq!(count(heat_color(0.0)), 2);
        assert_eq!(count((0xee, 0xee, 0xee)), 1);
        assert!(svg.contains("node-a") && svg.contains("node-b"));
        assert_eq!(layout.groups, vec![(TOP, TOP + 20), (TOP + 21, TOP + 31)]);
        assert_eq!(layout.height, TOP + 32 + BOTTOM);
        assert_eq!((layout.left, layout.right), (LEFT, 600 - RIGHT));
    }

    #[test]
    fn a_heatmap_too_tall_is_refused_with_the_way_out() {
        let mut h = map(&[&[Some(1.0)]]);
        h.groups[0].rows = vec![
            HeatRow {
                label: "g".into(),
                cells: vec![]
            };
            2000
        ];
        let err = heatmap_svg(&h).unwrap_err().to_string();
        assert!(err.contains("thinner rows"), "{err}");
        h.row_height = 2;
        assert!(heatmap_svg(&h).is_ok());
    }

    #[cfg(feature = "png")]
    #[test]
    fn the_png_has_the_layouts_size() {
        let h = map(&[&[Some(50.0), None]]);
        let png = heatmap_png(&h).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        let height = u32::from_be_bytes(png[20..24].try_into().unwrap());
        assert_eq!(height, h.layout().height);
    }
}
