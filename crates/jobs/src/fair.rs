//! The GPU-hours fair share compares: each team's and person's usage,
//! decayed with a half-life, kept incrementally (ended attempts are added
//! as they end; history is read once, at the first cycle).

use std::collections::HashMap;

use trainyard_scheduler as sched;

const HOUR_MS: f64 = 3_600_000.0;
pub const DAY_MS: i64 = 86_400_000;

/// The first millisecond (UTC) of the day, week (from Monday) or month
/// that holds `at_ms`.
pub fn period_start(at_ms: i64, period: trainyard_domain::teams::UsagePeriod) -> i64 {
    use trainyard_domain::teams::UsagePeriod;
    let day = at_ms.div_euclid(DAY_MS);
    match period {
        UsagePeriod::Day => day * DAY_MS,
        // 1970-01-01 was a Thursday.
        UsagePeriod::Week => (day - (day + 3).rem_euclid(7)) * DAY_MS,
        UsagePeriod::Month => {
            let (y, m, _) = civil_from_days(day);
            days_from_civil(y, m, 1) * DAY_MS
        }
    }
}

/// The last `count` periods up to and including the one that holds
/// `now_ms`: their first milliseconds, oldest first.
pub fn last_periods(
    now_ms: i64,
    period: trainyard_domain::teams::UsagePeriod,
    count: usize,
) -> Vec<i64> {
    let mut starts = vec![period_start(now_ms, period)];
    while starts.len() < count.max(1) {
        let earlier = period_start(starts[starts.len() - 1] - 1, period);
        starts.push(earlier);
    }
    starts.reverse();
    starts
}

/// `[from, to)` cut at UTC midnights: (the day's first millisecond, the
/// milliseconds of the span in it).
pub fn split_days(from_ms: i64, to_ms: i64) -> Vec<(i64, i64)> {
    let mut out = Vec::new();
    let mut at = from_ms;
    while at < to_ms {
        let day = at.div_euclid(DAY_MS) * DAY_MS;
        let end = (day + DAY_MS).min(to_ms);
        out.push((day, end - at));
        at = end;
    }
    out
}

/// The periods from the one that holds `from_ms` to the one that holds
/// `to_ms - 1`: their first milliseconds, oldest first; at most `max`
/// (the newest kept).
pub fn periods_between(
    from_ms: i64,
    to_ms: i64,
    period: trainyard_domain::teams::UsagePeriod,
    max: usize,
) -> Vec<i64> {
    let mut starts = vec![period_start((to_ms - 1).max(from_ms), period)];
    let first = period_start(from_ms, period);
    while starts.len() < max.max(1) && starts[starts.len() - 1] > first {
        let earlier = period_start(starts[starts.len() - 1] - 1, period);
        starts.push(earlier);
    }
    starts.reverse();
    starts
}

/// The first millisecond (UTC) of a day written `YYYY-MM-DD`; None when it
/// is no such day.
pub fn parse_day(text: &str) -> Option<i64> {
    let mut parts = text.trim().splitn(3, '-');
    let y: i64 = parts.next()?.parse().ok()?;
    let m: u32 = parts.next()?.parse().ok()?;
    let d: u32 = parts.next()?.parse().ok()?;
    if !(1970..=9999).contains(&y) || !(1..=12).contains(&m) || d < 1 {
        return None;
    }
    let day = days_from_civil(y, m, d);
    // 2026-02-30 is no day: it would come back as March 2nd.
    (civil_from_days(day) == (y, m, d)).then_some(day * DAY_MS)
}

/// Year, month, day of a day count since 1970-01-01 (proleptic Gregorian;
/// Howard Hinnant's algorithm).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let m = m as i64;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d as i64 - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// Decayed usage, stored as GPU-hours scaled by `2^((t - origin) / half_life)`
/// for usage at `t`: adding needs no pass over the others, and reading at
/// `now` multiplies by `2^(-(now - origin) / half_life)`.
#[derive(Debug)]
pub struct UsageBook {
    half_life_ms: f64,
    origin_ms: i64,
    team: HashMap<i64, f64>,
    user: HashMap<i64, f64>,
}

impl UsageBook {
    pub fn new(half_life_ms: i64, origin_ms: i64) -> UsageBook {
        UsageBook {
            half_life_ms: (half_life_ms.max(1)) as f64,
            origin_ms,
            team: HashMap::new(),
            user: HashMap::new(),
        }
    }

    fn scale(&self, at_ms: i64) -> f64 {
        ((at_ms - self.origin_ms) as f64 / self.half_life_ms).exp2()
    }

    /// Adds `gpu_hours` used at `at_ms` by `team` and `user` (0: none).
    pub fn add(&mut self, team: i64, user: i64, gpu_hours: f64, at_ms: i64) {
        if !(gpu_hours.is_finite() && gpu_hours > 0.0) {
            return;
        }
        // Far from the origin the scale would overflow: move the origin.
        if (at_ms - self.origin_ms) as f64 > 512.0 * self.half_life_ms {
            self.rebase(at_ms);
        }
        let scaled = gpu_hours * self.scale(at_ms);
        *self.team.entry(team).or_default() += scaled;
        *self.user.entry(user).or_default() += scaled;
    }

    fn rebase(&mut self, origin_ms: i64) {
        let factor = 1.0 / ((origin_ms - self.origin_ms) as f64 / self.half_life_ms).exp2();
        for v in self.team.values_mut().chain(self.user.values_mut()) {
            *v *= factor;
        }
        self.origin_ms = origin_ms;
    }

    /// A team's decayed GPU-hours at `now_ms`.
    pub fn team_hours(&self, team: i64, now_ms: i64) -> f64 {
        self.team.get(&team).copied().unwrap_or(0.0) / self.scale(now_ms)
    }

    /// The scheduler's view at `now_ms`, with what running attempts used
    /// so far (`(team, user, gpus, started_at)`, counted undecayed).
    pub fn usage(&self, now_ms: i64, running: &[(i64, i64, u32, i64)]) -> sched::Usage {
        let unscale = 1.0 / self.scale(now_ms);
        let mut usage = sched::Usage::default();
        for (&team, &v) in &self.team {
            usage
                .team_gpu_hours
                .insert(team as sched::TeamId, v * unscale);
        }
        for (&user, &v) in &self.user {
            usage
                .user_gpu_hours
                .insert(user as sched::UserId, v * unscale);
        }
        for &(team, user, gpus, started_at) in running {
            let hours = gpus as f64 * (now_ms - started_at).max(0) as f64 / HOUR_MS;
            *usage
                .team_gpu_hours
                .entry(team as sched::TeamId)
                .or_default() += hours;
            *usage
                .user_gpu_hours
                .entry(user as sched::UserId)
                .or_default() += hours;
        }
        usage
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn days_are_read_and_periods_listed_between_two_dates() {
        use trainyard_domain::teams::UsagePeriod;
        assert_eq!(parse_day("1970-01-02"), Some(DAY_MS));
        assert_eq!(parse_day("2024-02-29"), Some(19_782 * DAY_MS));
        for bad in [
            "2026-02-30",
            "2026-13-01",
            "2026-1",
            "yesterday",
            "1969-12-31",
            "",
        ] {
            assert_eq!(parse_day(bad), None, "{bad}");
        }
        let from = parse_day("2026-11-28").unwrap();
        let to = parse_day("2026-12-03").unwrap();
        let days = periods_between(from, to, UsagePeriod::Day, 400);
        assert_eq!(days.len(), 5);
        assert_eq!((days[0], days[4]), (from, to - DAY_MS));
        // Mondays: 2026-11-23 and 2026-11-30.
        let weeks = periods_between(from, to, UsagePeriod::Week, 400);
        assert_eq!(
            weeks,
            vec![
                parse_day("2026-11-23").unwrap(),
                parse_day("2026-11-30").unwrap()
            ]
        );
        let months = periods_between(from, to, UsagePeriod::Month, 400);
        assert_eq!(
            months,
            vec![
                parse_day("2026-11-01").unwrap(),
                parse_day("2026-12-01").unwrap()
            ]
        );
        assert_eq!(
            periods_between(from, to, UsagePeriod::Day, 2),
            vec![to - 2 * DAY_MS, to - DAY_MS]
        );
    }

    use super::*;

    const DAY: i64 = 24 * 3_600_000;

    #[test]
    fn periods_start_at_utc_midnight_monday_and_the_first() {
        use trainyard_domain::teams::UsagePeriod;
        // 2026-12-03 (a Thursday) 15:00 UTC.
        let at = 1_796_310_000_000;
        assert_eq!(period_start(at, UsagePeriod::Day), 1_796_256_000_000); // 12-03
        assert_eq!(period_start(at, UsagePeriod::Week), 1_795_996_800_000); // 11-30
        assert_eq!(period_start(at, UsagePeriod::Month), 1_796_083_200_000); // 12-01
        // A leap day and the turn of a year.
        assert_eq!(civil_from_days(days_from_civil(2028, 2, 29)), (2028, 2, 29));
        assert_eq!(
            period_start(days_from_civil(2027, 1, 1) * DAY_MS - 1, UsagePeriod::Month),
            days_from_civil(2026, 12, 1) * DAY_MS
        );
        assert_eq!(
            split_days(DAY_MS - 10, DAY_MS + 5),
            vec![(0, 10), (DAY_MS, 5)]
        );
    }

    #[test]
    fn usage_halves_every_half_life() {
        let mut book = UsageBook::new(7 * DAY, 0);
        book.add(1, 10, 8.0, 0);
        book.add(2, 20, 8.0, 7 * DAY);
        let at = |now| {
            let u = book.usage(now, &[]);
            (
                u.team_gpu_hours[&1],
                u.team_gpu_hours[&2],
                u.user_gpu_hours[&10],
            )
        };
        let (a, b, user) = at(7 * DAY);
        assert!((a - 4.0).abs() < 1e-9 && (b - 8.0).abs() < 1e-9 && (user - 4.0).abs() < 1e-9);
        let (a, b, _) = at(14 * DAY);
        assert!((a - 2.0).abs() < 1e-9 && (b - 4.0).abs() < 1e-9);
        assert!((book.team_hours(2, 21 * DAY) - 2.0).abs() < 1e-9);
    }

    #[test]
    fn running_attempts_count_as_they_run_and_far_futures_do_not_overflow() {
        let mut book = UsageBook::new(DAY, 0);
        let u = book.usage(3_600_000, &[(1, 10, 2, 0)]);
        assert!((u.team_gpu_hours[&1] - 2.0).abs() < 1e-9);
        assert!((u.user_gpu_hours[&10] - 2.0).abs() < 1e-9);
        // 2,000 half-lives on: still finite, and the newest usage counts whole.
        book.add(1, 10, 1.0, 0);
        book.add(1, 10, 3.0, 2000 * DAY);
        let u = book.usage(2000 * DAY, &[]);
        assert!((u.team_gpu_hours[&1] - 3.0).abs() < 1e-9, "{:?}", u);
    }
}
