//! PNG drawing: plotters' bitmap backend, with text set in the bundled DejaVu Sans by ab_glyph.

use crate::ChartError;
use ab_glyph::{Font, FontRef, Glyph, PxScale, ScaleFont, point};
use plotters::backend::BitMapBackend;
use plotters_backend::text_anchor::{HPos, VPos};
use plotters_backend::{
    BackendColor, BackendCoord, BackendStyle, BackendTextStyle, DrawingBackend, DrawingErrorKind,
};

const DEJAVU_SANS: &[u8] = include_bytes!("../fonts/DejaVuSans.ttf");

/// plotters' `BitMapBackend`, except that text is laid out and rasterised here. plotters
/// 0.3.7's own ab_glyph text drops each glyph's side bearing (`lr=0.01` comes out as
/// `lr= 0. 01`) and needs a process-wide font registry that also takes over SVG text layout.
pub(crate) struct Raster<'a> {
    inner: BitMapBackend<'a>,
    font: FontRef<'static>,
}

type Result<T, E> = std::result::Result<T, DrawingErrorKind<E>>;

impl<'a> Raster<'a> {
    pub(crate) fn new(inner: BitMapBackend<'a>) -> std::result::Result<Self, ChartError> {
        let font = FontRef::try_from_slice(DEJAVU_SANS).map_err(|_| ChartError::Font)?;
        Ok(Raster { inner, font })
    }

    /// The glyphs of `text` on a baseline from `origin`, and the text's width. `size` is
    /// plotters' font size; like the SVG backend, the em is size / 1.24 pixels.
    fn layout(&self, text: &str, size: f64, origin: (f32, f32)) -> (Vec<Glyph>, f32) {
        let em = (size / 1.24) as f32;
        let units = self.font.units_per_em().unwrap_or(2048.0);
        let font = self
            .font
            .as_scaled(PxScale::from(em * self.font.height_unscaled() / units));
        let (mut glyphs, mut caret, mut prev) = (vec![], 0.0, None);
        for c in text.chars() {
            let id = font.glyph_id(c);
            if let Some(p) = prev {
                caret += font.kern(p, id);
            }
            glyphs
                .push(id.with_scale_and_position(font.scale(), point(origin.0 + caret, origin.1)));
            caret += font.h_advance(id);
            prev = Some(id);
        }
        (glyphs, caret)
    }
}

impl<'a> DrawingBackend for Raster<'a> {
    type ErrorType = <BitMapBackend<'a> as DrawingBackend>::ErrorType;

    /// Anchored like the SVG backend's `dy`: top 0.76em above the baseline, centre half an ex.
    fn draw_text<S: BackendTextStyle>(
        &mut self,
        text: &str,
        style: &S,
        pos: BackendCoord,
    ) -> Result<(), Self::ErrorType> {
        let color = style.color();
        if color.alpha == 0.0 {
            return Ok(());
        }
        let em = (style.size() / 1.24) as f32;
        let (_, width) = self.layout(text, style.size(), (0.0, 0.0));
        let anchor = style.anchor();
        let dx = match anchor.h_pos {
            HPos::Left => 0.0,
            HPos::Center => -width / 2.0,
            HPos::Right => -width,
        };
        let dy = match anchor.v_pos {
            VPos::Top => 0.76 * em,
            VPos::Center => 0.27 * em,
            VPos::Bottom => -0.27 * em,
        };
        let (glyphs, _) = self.layout(text, style.size(), (dx, dy));
        let transform = style.transform();
        let mut result = Ok(());
        for outline in glyphs
            .into_iter()
            .filter_map(|g| self.font.outline_glyph(g))
        {
            let min = outline.px_bounds().min;
            outline.draw(|x, y, coverage| {
                let (x, y) = transform.transform(min.x as i32 + x as i32, min.y as i32 + y as i32);
                let ink = BackendColor {
                    alpha: color.alpha * f64::from(coverage),
                    rgb: color.rgb,
                };
                if result.is_ok() {
                    result = self.inner.draw_pixel((pos.0 + x, pos.1 + y), ink);
                }
            });
        }
        result
    }

    fn estimate_text_size<S: BackendTextStyle>(
        &self,
        text: &str,
        style: &S,
    ) -> Result<(u32, u32), Self::ErrorType> {
        let (_, width) = self.layout(text, style.size(), (0.0, 0.0));
        Ok((
            width.ceil() as u32,
            (style.size() / 1.24 * 1.2).ceil() as u32,
        ))
    }

    fn get_size(&self) -> (u32, u32) {
        self.inner.get_size()
    }

    fn ensure_prepared(&mut self) -> Result<(), Self::ErrorType> {
        self.inner.ensure_prepared()
    }

    fn present(&mut self) -> Result<(), Self::ErrorType> {
        self.inner.present()
    }

    fn draw_pixel(
        &mut self,
        point: BackendCoord,
        color: BackendColor,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_pixel(point, color)
    }

    fn draw_line<S: BackendStyle>(
        &mut self,
        from: BackendCoord,
        to: BackendCoord,
        style: &S,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_line(from, to, style)
    }

    fn draw_rect<S: BackendStyle>(
        &mut self,
        upper_left: BackendCoord,
        bottom_right: BackendCoord,
        style: &S,
        fill: bool,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_rect(upper_left, bottom_right, style, fill)
    }

    fn draw_path<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        path: I,
        style: &S,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_path(path, style)
    }

    fn draw_circle<S: BackendStyle>(
        &mut self,
        center: BackendCoord,
        radius: u32,
        style: &S,
        fill: bool,
    ) -> Result<(), Self::ErrorType> {
        self.inner.draw_circle(center, radius, style, fill)
    }

    fn fill_polygon<S: BackendStyle, I: IntoIterator<Item = BackendCoord>>(
        &mut self,
        vert: I,
        style: &S,
    ) -> Result<(), Self::ErrorType> {
        self.inner.fill_polygon(vert, style)
    }
}
