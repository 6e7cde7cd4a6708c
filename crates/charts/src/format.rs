//! Tick positions and the short text of numbers, durations and UTC times on axes and readouts.

use crate::XAxis;

/// A value for a readout, about 4 significant digits: `0.1234`, `12.35k`, `3.457e-5`.
pub fn format_value(v: f64) -> String {
    if !v.is_finite() {
        return non_finite(v);
    }
    let a = v.abs();
    if a == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e15).contains(&a) {
        return exponent(v, 3);
    }
    let (unit, suffix) = unit_of(a);
    let scaled = v / unit;
    let decimals = (3 - scaled.abs().log10().floor() as i32).max(0) as usize;
    format!("{}{suffix}", trim(format!("{scaled:.decimals$}")))
}

/// An x value for a readout: a whole step as is, seconds as `90s`/`5m`/`2.5h`, wall time as
/// `2026-11-29 14:03:07` (UTC).
pub fn format_x(axis: XAxis, x: f64) -> String {
    if !x.is_finite() {
        return non_finite(x);
    }
    match axis {
        XAxis::Step if x.fract() == 0.0 && x.abs() < 1e15 => format!("{}", x as i64),
        XAxis::Step => format_value(x),
        XAxis::RelativeSeconds => {
            let a = x.abs();
            let (unit, suffix) = match a {
                a if a < 120.0 => (1.0, "s"),
                a if a < 7200.0 => (60.0, "m"),
                a if a < 172_800.0 => (3600.0, "h"),
                _ => (86_400.0, "d"),
            };
            format!("{}{suffix}", trim(format!("{:.1}", x / unit)))
        }
        XAxis::WallTime => {
            let (date, time) = utc(x);
            format!("{date} {time}")
        }
    }
}

/// How tick labels of one axis are written; all labels of an axis share the step's precision.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum TickFormat {
    Number {
        step: f64,
    },
    /// Axis values are log10 of the data; `step` is the data-space step of linear ticks, or
    /// None for ticks at powers of ten.
    Log {
        step: Option<f64>,
    },
    Duration {
        step: f64,
    },
    /// Unix millis; `span` (ms) decides between times of day and dates.
    WallTime {
        step: f64,
        span: f64,
    },
}

impl TickFormat {
    pub(crate) fn label(self, v: f64) -> String {
        match self {
            TickFormat::Number { step } => tick_number(v, step),
            TickFormat::Log { step: Some(step) } => tick_number(10f64.powf(v), step),
            TickFormat::Log { step: None } => {
                let p = 10f64.powf(v.round());
                tick_number(p, p)
            }
            TickFormat::Duration { step } => {
                let (unit, suffix) = match step {
                    s if s < 60.0 => (1.0, "s"),
                    s if s < 3600.0 => (60.0, "m"),
                    s if s < 86_400.0 => (3600.0, "h"),
                    _ => (86_400.0, "d"),
                };
                let d = decimals(step / unit);
                format!("{}{suffix}", trim(format!("{:.d$}", v / unit)))
            }
            TickFormat::WallTime { step, span } => {
                let (date, time) = utc(v);
                if span <= DAY_MS {
                    if step < 1000.0 {
                        let ms = v.rem_euclid(1000.0).round() as u32 % 1000;
                        format!("{time}.{ms:03}")
                    } else {
                        time
                    }
                } else if step < DAY_MS {
                    format!("{} {}", &date[5..], &time[..5])
                } else {
                    date
                }
            }
        }
    }
}

const DAY_MS: f64 = 86_400_000.0;

/// Ticks for `lo..=hi` at about `target` of them, and how to label them.
pub(crate) fn ticks(lo: f64, hi: f64, target: usize, kind: TickKind) -> (Vec<f64>, TickFormat) {
    let span = hi - lo;
    match kind {
        TickKind::Number => {
            let step = nice_step(span, target);
            (multiples(lo, hi, step), TickFormat::Number { step })
        }
        TickKind::Duration => {
            let step = time_step(span, target);
            (multiples(lo, hi, step), TickFormat::Duration { step })
        }
        TickKind::WallTime => {
            let step = time_step(span / 1000.0, target) * 1000.0;
            (multiples(lo, hi, step), TickFormat::WallTime { step, span })
        }
        TickKind::Log if span >= 1.5 => {
            let step = nice_step(span, target).ceil().max(1.0);
            (multiples(lo, hi, step), TickFormat::Log { step: None })
        }
        TickKind::Log => {
            // Less than a decade and a half: round numbers of the data, placed on the log scale.
            let (a, b) = (10f64.powf(lo), 10f64.powf(hi));
            let step = nice_step(b - a, target);
            let t = multiples(a, b, step).into_iter().filter(|v| *v > 0.0);
            (
                t.map(f64::log10).collect(),
                TickFormat::Log { step: Some(step) },
            )
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TickKind {
    Number,
    Log,
    Duration,
    WallTime,
}

/// 1, 2 or 5 times a power of ten, so that `span` holds about `target` steps.
fn nice_step(span: f64, target: usize) -> f64 {
    let raw = span / target.max(1) as f64;
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let m = match raw / mag {
        n if n <= 1.0 => 1.0,
        n if n <= 2.0 => 2.0,
        n if n <= 5.0 => 5.0,
        _ => 10.0,
    };
    m * mag
}

/// Steps of a clock (seconds): 15 s, 5 min, 6 h, … above one second; nice numbers below.
fn time_step(span_s: f64, target: usize) -> f64 {
    const STEPS: [f64; 18] = [
        1.0, 2.0, 5.0, 10.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1800.0, 3600.0, 7200.0,
        10_800.0, 21_600.0, 43_200.0, 86_400.0,
    ];
    let raw = span_s / target.max(1) as f64;
    if raw <= 1.0 {
        return nice_step(span_s, target);
    }
    match STEPS.iter().find(|s| **s >= raw) {
        Some(s) => *s,
        None => 86_400.0 * nice_step(span_s / 86_400.0, target),
    }
}

/// The multiples of `step` inside `lo..=hi` (at most a few hundred, whatever the input).
fn multiples(lo: f64, hi: f64, step: f64) -> Vec<f64> {
    let (i0, i1) = ((lo / step).ceil(), (hi / step).floor());
    if !(i0.is_finite() && i1.is_finite()) || i1 - i0 > 500.0 {
        return vec![];
    }
    (i0 as i64..=i1 as i64)
        .map(|i| {
            let v = i as f64 * step;
            if v.abs() < step * 1e-9 { 0.0 } else { v }
        })
        .collect()
}

/// A tick label with just enough decimals for `step`: `1.5k`, `0.25`, `3e-5`.
fn tick_number(v: f64, step: f64) -> String {
    let a = v.abs();
    if a < step.abs() * 1e-6 || a == 0.0 {
        return "0".into();
    }
    if !(1e-3..1e15).contains(&a) {
        let e = a.log10().floor();
        return exponent(v, decimals(step / 10f64.powf(e)));
    }
    let (unit, suffix) = unit_of(a);
    let d = decimals(step / unit);
    format!("{}{suffix}", trim(format!("{:.d$}", v / unit)))
}

/// `3.4e-5`: a mantissa with at most `d` decimals.
fn exponent(v: f64, d: usize) -> String {
    let mut e = v.abs().log10().floor();
    let mut m = v / 10f64.powf(e);
    if format!("{:.d$}", m.abs()).starts_with("10") {
        e += 1.0;
        m /= 10.0;
    }
    format!("{}e{}", trim(format!("{m:.d$}")), e as i32)
}

fn unit_of(a: f64) -> (f64, &'static str) {
    [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")]
        .into_iter()
        .find(|(u, _)| a >= *u)
        .unwrap_or((1.0, ""))
}

/// The fewest decimals that write multiples of `step` exactly (0.25 → 2, 5 → 0).
fn decimals(step: f64) -> usize {
    (0..=9)
        .find(|d| {
            let s = step * 10f64.powi(*d as i32);
            (s - s.round()).abs() <= 1e-6 * s.abs().max(1.0)
        })
        .unwrap_or(9)
}

fn trim(s: String) -> String {
    if s.contains('.') {
        let t = s.trim_end_matches('0').trim_end_matches('.');
        if t == "-0" { "0".into() } else { t.into() }
    } else {
        s
    }
}

fn non_finite(v: f64) -> String {
    match v {
        v if v.is_nan() => "NaN".into(),
        v if v > 0.0 => "inf".into(),
        _ => "-inf".into(),
    }
}

/// Unix millis → ("YYYY-MM-DD", "HH:MM:SS") in UTC.
fn utc(ms: f64) -> (String, String) {
    let secs = (ms / 1000.0).floor() as i64;
    let (days, sod) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let (y, m, d) = trainyard_domain::civil_from_days(days);
    (
        format!("{y:04}-{m:02}-{d:02}"),
        format!("{:02}:{:02}:{:02}", sod / 3600, sod / 60 % 60, sod % 60),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_short() {
        assert_eq!(format_value(0.0), "0");
        assert_eq!(format_value(0.123456), "0.1235");
        assert_eq!(format_value(1234.0), "1.234k");
        assert_eq!(format_value(-2_500_000.0), "-2.5M");
        assert_eq!(format_value(3.4e-5), "3.4e-5");
        assert_eq!(format_value(9.9999e-5), "1e-4");
        assert_eq!(format_value(f64::NAN), "NaN");
    }

    #[test]
    fn ticks_take_the_precision_of_their_step() {
        let (t, f) = ticks(0.0, 2000.0, 4, TickKind::Number);
        assert_eq!(t, [0.0, 500.0, 1000.0, 1500.0, 2000.0]);
        let labels: Vec<_> = t.iter().map(|v| f.label(*v)).collect();
        assert_eq!(labels, ["0", "500", "1k", "1.5k", "2k"]);
        let (t, f) = ticks(0.1, 0.35, 5, TickKind::Number);
        assert_eq!(f.label(t[1]), "0.15");
        let (t, f) = ticks(-5.0, -3.0, 3, TickKind::Log);
        let labels: Vec<_> = t.iter().map(|v| f.label(*v)).collect();
        assert_eq!(labels, ["1e-5", "1e-4", "0.001"]);
    }

    #[test]
    fn time_axes_use_clock_steps() {
        let (t, f) = ticks(0.0, 600.0, 5, TickKind::Duration);
        assert_eq!(t[1], 120.0);
        assert_eq!(f.label(t[1]), "2m");
        assert_eq!(format_x(XAxis::RelativeSeconds, 90.0), "90s");
        assert_eq!(format_x(XAxis::RelativeSeconds, 300.0), "5m");
        assert_eq!(format_x(XAxis::RelativeSeconds, 7200.0), "2h");
        // 2026-11-29 14:03:07 UTC
        let ms = 1_795_960_987_000.0;
        assert_eq!(format_x(XAxis::WallTime, ms), "2026-11-29 14:03:07");
        let (t, f) = ticks(ms, ms + 3_600_000.0, 4, TickKind::WallTime);
        assert_eq!(f.label(t[0]), "14:15:00");
        let (t, f) = ticks(ms, ms + 10.0 * DAY_MS, 5, TickKind::WallTime);
        assert_eq!(f.label(t[0]), "2026-12-01");
    }
}
