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

    #[cfg(feature = "png")]
    fn cell_count(&self) -> usize {
        self.groups
            .iter()
            .flat_map(|g| g.rows.iter().map(|r| r.cells.len()))
            .sum()
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

/// Past this many cells, an SVG carries them as one embedded PNG (one
/// pixel per cell, stretched) rather than a rectangle per run: 8,000 GPUs
/// over a day are 3.8 million cells, which as rectangles make an SVG of
/// 100 MB that takes seconds to write and to render.
#[cfg(feature = "png")]
const RASTER_CELLS: usize = 50_000;

/// Draws the heatmap as SVG: each row's cells as `<rect>`s, neighbours of
/// one colour merged, so an idle or a steadily busy GPU costs few elements;
/// a large map's cells as one embedded image (with the `png` feature).
pub fn heatmap_svg(h: &Heatmap) -> Result<(String, HeatLayout), ChartError> {
    let layout = h.check()?;
    #[cfg(feature = "png")]
    let raster = h.cell_count() > RASTER_CELLS;
    #[cfg(not(feature = "png"))]
    let raster = false;
    let (svg, ()) = crate::svg(h.width, layout.height, |root| {
        draw(root, h, &layout, !raster)
    })?;
    #[cfg(feature = "png")]
    let svg = if raster {
        with_cells_image(svg, h, &layout)?
    } else {
        svg
    };
    Ok((svg, layout))
}

/// Adds the cells to a drawing without them, as one PNG image.
#[cfg(feature = "png")]
fn with_cells_image(
    mut svg: String,
    h: &Heatmap,
    layout: &HeatLayout,
) -> Result<String, ChartError> {
    use base64::Engine;
    let cells = CellPixels::of(h, layout);
    let png = crate::encode_png(cells.width, cells.height, &cells.rgb)?;
    let image = format!(
        "<image x=\"{}\" y=\"{}\" width=\"{}\" height=\"{}\" preserveAspectRatio=\"none\" style=\"image-rendering:pixelated\" href=\"data:image/png;base64,{}\"/>\n",
        layout.left,
        cells.top,
        layout.right - layout.left,
        cells.bottom - cells.top,
        base64::engine::general_purpose::STANDARD.encode(png)
    );
    // Last: it covers only the cells' area, which nothing else draws on.
    let at = svg.find("</svg>").unwrap_or(svg.len());
    svg.insert_str(at, &image);
    Ok(svg)
}

/// The same drawing as [`heatmap_svg`], as PNG (the cells copied in from
/// one pixel per cell, as nearest neighbours).
#[cfg(feature = "png")]
pub fn heatmap_png(h: &Heatmap) -> Result<Vec<u8>, ChartError> {
    let layout = h.check()?;
    let cells = CellPixels::of(h, &layout);
    crate::png_then(
        h.width,
        layout.height,
        |root| draw(root, h, &layout, false),
        |rgb| cells.blit(rgb, h.width, &layout),
    )
}

/// The cells as an image: one pixel per column, and one per GPU row where
/// nodes have no gap between them (else one per drawn pixel row).
#[cfg(feature = "png")]
struct CellPixels {
    width: u32,
    height: u32,
    /// Drawn pixel rows per image row.
    unit: u32,
    top: u32,
    bottom: u32,
    rgb: Vec<u8>,
}

#[cfg(feature = "png")]
impl CellPixels {
    fn of(h: &Heatmap, layout: &HeatLayout) -> CellPixels {
        let top = layout.groups.first().map_or(TOP, |g| g.0);
        let bottom = layout.groups.last().map_or(TOP, |g| g.1).max(top + 1);
        let unit = if gap(h.row_height) == 0 {
            h.row_height.max(1)
        } else {
            1
        };
        let width = h
            .groups
            .iter()
            .flat_map(|g| g.rows.iter().map(|r| r.cells.len()))
            .max()
            .unwrap_or(1)
            .max(1) as u32;
        let height = (bottom - top).div_ceil(unit);
        // Colours per tenth of a percent.
        let lut: Vec<[u8; 3]> = (0..=1000)
            .map(|i| {
                let (r, g, b) = heat_color(i as f32 / 10.0);
                [r, g, b]
            })
            .collect();
        let no_data = [NO_DATA.0, NO_DATA.1, NO_DATA.2];
        let mut rgb = vec![255u8; width as usize * height as usize * 3];
        let mut line = vec![0u8; width as usize * 3];
        for (g, &(gtop, _)) in h.groups.iter().zip(&layout.groups) {
            for (r, row) in g.rows.iter().enumerate() {
                let n = row.cells.len().max(1);
                for x in 0..width as usize {
                    let c = row.cells.get(x * n / width as usize).copied().flatten();
                    let px = match c {
                        Some(u) if u.is_finite() => {
                            lut[(u.clamp(0.0, 100.0) * 10.0).round() as usize]
                        }
                        Some(_) => lut[0],
                        None => no_data,
                    };
                    line[x * 3..x * 3 + 3].copy_from_slice(&px);
                }
                let y0 = gtop + r as u32 * h.row_height;
                let (from, to) = ((y0 - top) / unit, (y0 + h.row_height - top).div_ceil(unit));
                for y in from..to.min(height) {
                    let at = y as usize * width as usize * 3;
                    rgb[at..at + line.len()].copy_from_slice(&line);
                }
            }
        }
        CellPixels {
            width,
            height,
            unit,
            top,
            bottom,
            rgb,
        }
    }

    /// Copies the cells into a drawing of `width` pixels per line.
    fn blit(&self, out: &mut [u8], width: u32, layout: &HeatLayout) {
        let (left, right) = (layout.left, layout.right.min(width));
        let span = (right - left).max(1) as usize;
        for &(gtop, gbottom) in &layout.groups {
            for y in gtop..gbottom {
                let src_row = ((y - self.top) / self.unit).min(self.height - 1) as usize;
                let src = &self.rgb[src_row * self.width as usize * 3..][..self.width as usize * 3];
                let dst = &mut out[(y as usize * width as usize + left as usize) * 3..][..span * 3];
                for x in 0..span {
                    let sx = x * self.width as usize / span;
                    dst[x * 3..x * 3 + 3].copy_from_slice(&src[sx * 3..sx * 3 + 3]);
                }
            }
        }
    }
}

fn draw<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    h: &Heatmap,
    layout: &HeatLayout,
    cells: bool,
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
        if !cells {
            continue;
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
    fn decode(png: &[u8]) -> (u32, u32, Vec<u8>) {
        let decoder = png::Decoder::new(std::io::Cursor::new(png));
        let mut reader = decoder.read_info().unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        assert_eq!(info.color_type, png::ColorType::Rgb);
        buf.truncate(info.buffer_size());
        (info.width, info.height, buf)
    }

    /// 2 nodes × 60 GPUs × 600 columns: past the raster threshold. Node a's
    /// GPUs are busy in the first half and idle after; node b has no data.
    #[cfg(feature = "png")]
    fn big_map() -> Heatmap {
        let row = |busy: bool| HeatRow {
            label: "GPU".into(),
            cells: (0..600)
                .map(|i| busy.then_some(if i < 300 { 90.0 } else { 0.0 }))
                .collect(),
        };
        Heatmap {
            title: "GPUs".into(),
            from_ms: 1_800_000_000_000,
            to_ms: 1_800_086_400_000,
            groups: vec![
                HeatGroup {
                    label: "node-a".into(),
                    rows: (0..60).map(|_| row(true)).collect(),
                },
                HeatGroup {
                    label: "node-b".into(),
                    rows: (0..60).map(|_| row(false)).collect(),
                },
            ],
            row_height: 2,
            width: 1200,
        }
    }

    #[cfg(feature = "png")]
    #[test]
    fn a_large_svg_carries_its_cells_as_one_image_of_a_pixel_per_cell() {
        use base64::Engine;
        let h = big_map();
        let (svg, layout) = heatmap_svg(&h).unwrap();
        assert_eq!(svg.matches("<image").count(), 1);
        // No rectangle per cell: only the key's and the background's.
        assert!(svg.matches("<rect").count() < 200, "{}", svg.len());
        let data = svg
            .split("href=\"data:image/png;base64,")
            .nth(1)
            .and_then(|s| s.split('"').next())
            .unwrap();
        let png = base64::engine::general_purpose::STANDARD
            .decode(data)
            .unwrap();
        let (w, hgt, rgb) = decode(&png);
        // A pixel per column, and one per GPU row (2 px rows, no gaps).
        assert_eq!((w, hgt), (600, 120));
        let px = |x: u32, y: u32| {
            let i = ((y * w + x) * 3) as usize;
            (rgb[i], rgb[i + 1], rgb[i + 2])
        };
        assert_eq!(px(0, 0), heat_color(90.0));
        assert_eq!(px(299, 59), heat_color(90.0));
        assert_eq!(px(300, 59), heat_color(0.0));
        assert_eq!(px(10, 60), (0xee, 0xee, 0xee));
        // Stretched over the cells' area of the layout.
        let (top, bottom) = (layout.groups[0].0, layout.groups[1].1);
        assert!(svg.contains(&format!(
            "x=\"{}\" y=\"{top}\" width=\"{}\" height=\"{}\"",
            layout.left,
            layout.right - layout.left,
            bottom - top
        )));
    }

    #[cfg(feature = "png")]
    #[test]
    fn the_png_draws_the_cells_where_the_svg_has_them() {
        let h = big_map();
        let layout = h.layout();
        let (w, hgt, rgb) = decode(&heatmap_png(&h).unwrap());
        assert_eq!((w, hgt), (1200, layout.height));
        let px = |x: u32, y: u32| {
            let i = ((y * w + x) * 3) as usize;
            (rgb[i], rgb[i + 1], rgb[i + 2])
        };
        let (left, right) = (layout.left, layout.right);
        let (a_top, a_bottom) = layout.groups[0];
        let b_top = layout.groups[1].0;
        assert_eq!(px(left, a_top), heat_color(90.0));
        assert_eq!(px(right - 1, a_bottom - 1), heat_color(0.0));
        assert_eq!(px((left + right) / 2 + 2, a_top + 5), heat_color(0.0));
        assert_eq!(px(left + 3, b_top), (0xee, 0xee, 0xee));
        // Outside the cells, the page's white.
        assert_eq!(px(left - 2, a_top + 40), (255, 255, 255));
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
