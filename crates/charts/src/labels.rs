//! Where labels go so that none covers another or leaves the picture.
//!
//! Charts are drawn here and laid out as text by the browser, so a label's
//! width is estimated from its characters, on the wide side of the sans-serif
//! fonts browsers pick (DejaVu Sans, Arial, Helvetica). Sizes are plotters'
//! font sizes, which its SVG writes as `font-size` divided by
//! [`SVG_FONT_SCALE`].

/// What plotters' SVG backend divides a font size by.
pub(crate) const SVG_FONT_SCALE: f64 = 1.24;

/// About how wide `text` is at plotters' `font` size, in pixels: per
/// character, a share of the em by its kind (narrow, wide, capital, other).
pub(crate) fn text_width(text: &str, font: f64) -> i32 {
    let ems: f64 = text.chars().map(char_ems).sum();
    (ems * font / SVG_FONT_SCALE).ceil() as i32
}

fn char_ems(c: char) -> f64 {
    match c {
        'i' | 'j' | 'l' | 't' | 'f' | 'r' | 'I' | '.' | ',' | ':' | ';' | '\'' | '|' | '!' => 0.42,
        ' ' | '-' | '(' | ')' | '[' | ']' | '/' => 0.42,
        'm' | 'w' | 'M' | 'W' | '@' | '%' => 1.0,
        // DejaVu Sans draws these 0.84 em wide.
        '=' | '+' | '<' | '>' | '~' | '#' | '^' => 0.86,
        c if c.is_ascii_uppercase() => 0.78,
        c if c.is_ascii() => 0.66,
        // Other scripts (CJK is a full em) and symbols.
        _ => 1.0,
    }
}

/// How high a line of text is at plotters' `font` size, in pixels, for
/// text centred on a point: its ascenders reach about 0.66 em above the
/// point and its descenders 0.51 em below; this is 0.7 em both ways.
pub(crate) fn text_height(font: f64) -> i32 {
    (font / SVG_FONT_SCALE * 1.4).ceil() as i32
}

/// `text` cut in the middle (with an ellipsis) to what fits in `px` at
/// `font`, keeping its start and its end, where names and values that
/// share a start differ (`run-name-1`, `run-name-2`); None when not even
/// one character and the ellipsis fit.
pub(crate) fn fit(text: &str, px: i32, font: f64) -> Option<String> {
    if text_width(text, font) <= px {
        return Some(text.to_owned());
    }
    let width = |c: &char| (char_ems(*c) * font / SVG_FONT_SCALE).ceil() as i32;
    let room = px - text_width("…", font);
    let chars: Vec<char> = text.chars().collect();
    let (mut head, mut used) = (0, 0);
    while head < chars.len() && used + width(&chars[head]) <= room * 3 / 5 {
        used += width(&chars[head]);
        head += 1;
    }
    let mut tail = chars.len();
    while tail > head && used + width(&chars[tail - 1]) <= room {
        used += width(&chars[tail - 1]);
        tail -= 1;
    }
    if head == 0 && tail == chars.len() {
        return None;
    }
    let mut out: String = chars[..head].iter().collect();
    out.push('…');
    out.extend(&chars[tail..]);
    Some(out)
}

/// A label's box in pixels: left, top, right, bottom.
pub(crate) type Box2 = [i32; 4];

fn overlaps(a: &Box2, b: &Box2) -> bool {
    a[0] < b[2] && b[0] < a[2] && a[1] < b[3] && b[1] < a[3]
}

/// The boxes taken so far, inside a bound: a label is placed only where it
/// stays inside and covers nothing placed before it.
pub(crate) struct Placement {
    bound: Box2,
    taken: Vec<Box2>,
}

impl Placement {
    pub(crate) fn new(bound: Box2) -> Placement {
        Placement {
            bound,
            taken: Vec::new(),
        }
    }

    /// What labels must stay inside.
    pub(crate) fn bound(&self) -> Box2 {
        self.bound
    }

    /// Marks `b` as taken whatever is there (a dot, an axis name).
    pub(crate) fn block(&mut self, b: Box2) {
        self.taken.push(b);
    }

    /// Takes `b` when it is inside the bound and free.
    pub(crate) fn take(&mut self, b: Box2) -> bool {
        let inside = b[0] >= self.bound[0]
            && b[1] >= self.bound[1]
            && b[2] <= self.bound[2]
            && b[3] <= self.bound[3];
        if inside && !self.taken.iter().any(|t| overlaps(t, &b)) {
            self.taken.push(b);
            true
        } else {
            false
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// The estimated box of each `<text>` of an SVG from plotters, with
    /// its text: placed by its `x`, `y`, `text-anchor` and `dy` (centred on
    /// `y` for `0.5ex`, hanging from it for `0.76em`).
    pub(crate) fn text_boxes(svg: &str) -> Vec<(String, Box2)> {
        svg.split("<text ")
            .skip(1)
            .map(|el| {
                let attr = |name: &str| {
                    let at = el.find(&format!("{name}=\"")).unwrap() + name.len() + 2;
                    el[at..].split('"').next().unwrap().to_owned()
                };
                let num = |name: &str| attr(name).parse::<f64>().unwrap();
                let text = el.split_once('>').unwrap().1;
                let text = text.split("</text>").next().unwrap().trim().to_owned();
                let font = num("font-size") * SVG_FONT_SCALE;
                let (w, h) = (text_width(&text, font), text_height(font));
                let (x, y) = (num("x").round() as i32, num("y").round() as i32);
                let left = match attr("text-anchor").as_str() {
                    "end" => x - w,
                    "middle" => x - w / 2,
                    _ => x,
                };
                let top = match attr("dy").as_str() {
                    "0.76em" => y - h / 8,
                    _ => y - h / 2,
                };
                (text, [left, top, left + w, top + h])
            })
            .collect()
    }

    /// Panics naming the first two of `boxes` that overlap, or one that
    /// leaves `0..w` × `0..h`.
    pub(crate) fn assert_apart_and_inside(boxes: &[(String, Box2)], w: i32, h: i32) {
        for (i, (a, ab)) in boxes.iter().enumerate() {
            assert!(
                ab[0] >= 0 && ab[1] >= 0 && ab[2] <= w && ab[3] <= h,
                "{a:?} {ab:?} leaves {w}×{h}"
            );
            for (b, bb) in &boxes[i + 1..] {
                assert!(!overlaps(ab, bb), "{a:?} {ab:?} covers {b:?} {bb:?}");
            }
        }
    }

    #[test]
    fn a_label_is_cut_to_fit_and_never_to_nothing() {
        let font = 12.0;
        let whole = "learning_rate_warmup";
        assert_eq!(fit(whole, 1_000, font).as_deref(), Some(whole));
        let cut = fit(whole, 90, font).unwrap();
        assert!(cut.chars().count() < whole.chars().count());
        assert!(text_width(&cut, font) <= 90, "{cut}");
        // Cut in the middle: the start and the end stay.
        let (start, end) = cut.split_once('…').unwrap();
        assert!(!start.is_empty() && !end.is_empty(), "{cut}");
        assert!(whole.starts_with(start) && whole.ends_with(end), "{cut}");
        assert_eq!(fit(whole, 5, font), None);
        // Wide letters take more room than narrow ones.
        assert!(text_width("mmmm", font) > text_width("iiii", font));
    }

    #[test]
    fn a_box_is_taken_only_inside_and_free() {
        let mut p = Placement::new([0, 0, 100, 50]);
        assert!(p.take([10, 10, 40, 20]));
        assert!(!p.take([30, 15, 60, 25]), "overlaps the first");
        assert!(p.take([40, 10, 70, 20]), "touching is not covering");
        assert!(!p.take([90, 10, 110, 20]), "leaves the bound");
        p.block([0, 30, 100, 40]);
        assert!(!p.take([5, 35, 20, 45]), "blocked");
    }
}
