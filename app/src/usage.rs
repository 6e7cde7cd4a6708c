//! `/usage`: GPU-hours per team or person by day, week or month, as
//! stacked bars and a table, with a CSV download. An admin sees everyone's;
//! anyone else their own and their teams'. Below, the caller's storage
//! against their quotas.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::use_query_map;
use trainyard_charts::{BarSeries, StackedBars, stacked_bars_svg};
use trainyard_domain::teams::{StorageView, UsagePeriod, UsageView};
use trainyard_domain::{format_bytes, format_count, format_utc};

use crate::error::AppError;
use crate::pages::ErrorNote;

/// How many periods each view goes back.
#[cfg(feature = "ssr")]
fn periods_shown(period: UsagePeriod) -> usize {
    match period {
        UsagePeriod::Day => 30,
        UsagePeriod::Week => 12,
        UsagePeriod::Month => 12,
    }
}

/// The most days a chosen range spans (the usage API's bound).
#[cfg(feature = "ssr")]
const MAX_RANGE_DAYS: i64 = 400;

/// GPU-hours by `period`: the last few periods, or from the day `from` to
/// the day `to` (`YYYY-MM-DD`, UTC, both included) when given.
#[server(endpoint = "get_usage")]
pub async fn get_usage(
    period: UsagePeriod,
    from: Option<String>,
    to: Option<String>,
) -> Result<UsageView, AppError> {
    use trainyard_domain::FieldError;
    use trainyard_jobs::fair::{DAY_MS, parse_day, periods_between};
    let principal = crate::api::caller()?;
    let jobs = crate::api::jobs()?;
    let now = trainyard_store::now_millis();
    let day = |field: &str, text: Option<String>| -> Result<Option<i64>, AppError> {
        match text.as_deref().map(str::trim).filter(|t| !t.is_empty()) {
            None => Ok(None),
            Some(t) => parse_day(t).map(Some).ok_or_else(|| {
                AppError::Fields(vec![FieldError::new(
                    field,
                    format!("`{t}` is not a day; write it as YYYY-MM-DD"),
                )])
            }),
        }
    };
    let (from, to) = match (day("from", from)?, day("to", to)?) {
        (None, None) => {
            let periods = trainyard_jobs::fair::last_periods(now, period, periods_shown(period));
            (periods[0], now)
        }
        (from, to) => {
            // `to` is included: its day ends at the next midnight.
            let to = to.map_or(now, |t| (t + DAY_MS).min(now.max(t + 1)));
            let from = from.unwrap_or(to - 30 * DAY_MS);
            if from >= to {
                return Err(AppError::Fields(vec![FieldError::new(
                    "from",
                    "is after `to`; choose an earlier first day",
                )]));
            }
            if to - from > MAX_RANGE_DAYS * DAY_MS {
                return Err(AppError::Fields(vec![FieldError::new(
                    "from",
                    format!("the range is longer than {MAX_RANGE_DAYS} days; choose a shorter one"),
                )]));
            }
            (from, to)
        }
    };
    let periods = periods_between(from, to, period, MAX_RANGE_DAYS as usize);
    let rows = jobs
        .usage_by_period(&principal.user, from, to, period)
        .await?;
    Ok(UsageView {
        period,
        from,
        to,
        periods,
        rows,
        everyone: principal.user.is_admin,
    })
}

/// How the server counts a person's storage against their quotas (it
/// keeps the artifact count that the quota checks use).
#[cfg(feature = "ssr")]
#[derive(Clone)]
#[allow(clippy::type_complexity)]
pub struct StorageOf(
    pub  std::sync::Arc<
        dyn Fn(
                i64,
            ) -> std::pin::Pin<
                Box<dyn std::future::Future<Output = Result<StorageView, String>> + Send>,
            > + Send
            + Sync,
    >,
);

/// What the caller's storage holds against their quotas.
#[server(endpoint = "get_storage")]
pub async fn get_storage() -> Result<StorageView, AppError> {
    let user = crate::api::caller()?.user;
    let count = use_context::<StorageOf>()
        .ok_or_else(|| AppError::Internal("storage counts are not wired in".to_owned()))?;
    (count.0)(user.id).await.map_err(AppError::Internal)
}

/// `used` of `quota`, in words: "1.5 GiB of 10.0 GiB (15%)", or "1.5 GiB
/// (no quota)".
fn of_quota(used: String, used_n: u64, quota: Option<(String, u64)>) -> String {
    match quota {
        Some((text, n)) if n > 0 => {
            let percent = (used_n as f64 / n as f64 * 100.0).round();
            format!("{used} of {text} ({percent}%)")
        }
        Some((text, _)) => format!("{used} of {text}"),
        None => format!("{used} (no quota)"),
    }
}

/// A quota's bar and its words; the bar only where there is a quota.
fn quota_row(
    label: &'static str,
    id: &'static str,
    used: u64,
    quota: Option<u64>,
    words: String,
) -> impl IntoView {
    view! {
        <div class="quota" data-testid=id>
            <span class="quota-label">{label}</span>
            {quota.filter(|q| *q > 0).map(|q| view! {
                <meter min="0" max=q.to_string() value=used.min(q).to_string()
                    high=(q / 10 * 9).to_string() optimum="0" aria-label=label></meter>
            })}
            <span class="quota-words">{words}</span>
        </div>
    }
}

/// The caller's storage: artifacts and uploads against their quotas, and
/// what their deleted runs hold, with the way to free it.
#[component]
fn StorageSection() -> impl IntoView {
    let storage = Resource::new(|| (), |_| get_storage());
    view! {
        <section class="storage" data-testid="storage">
            <h2>"Your storage"</h2>
            <Suspense fallback=|| view! { <p class="muted">"Counting your storage…"</p> }>
                {move || Suspend::new(async move {
                    match storage.await {
                        Ok(s) => storage_view(s).into_any(),
                        Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                    }
                })}
            </Suspense>
        </section>
    }
}

fn storage_view(s: StorageView) -> impl IntoView {
    let artifacts = of_quota(
        format_bytes(s.artifact_bytes),
        s.artifact_bytes,
        s.artifact_quota_bytes.map(|q| (format_bytes(q), q)),
    );
    let uploads = of_quota(
        format_bytes(s.upload_bytes),
        s.upload_bytes,
        s.upload_quota_bytes.map(|q| (format_bytes(q), q)),
    );
    let entries = of_quota(
        format!(
            "{} files and folders",
            format_count(i64::try_from(s.upload_entries).unwrap_or(i64::MAX))
        ),
        s.upload_entries,
        s.upload_quota_entries
            .map(|q| (format_count(i64::try_from(q).unwrap_or(i64::MAX)), q)),
    );
    let held: u64 = s.deleted.iter().map(|d| d.bytes).sum();
    let deleted = s.deleted.clone();
    view! {
        {quota_row("Artifacts of your runs, models and traces", "storage-artifacts", s.artifact_bytes, s.artifact_quota_bytes, artifacts)}
        {quota_row("Uploads (projects and datasets)", "storage-uploads", s.upload_bytes, s.upload_quota_bytes, format!("{uploads}, in {} upload{}", s.uploads, if s.uploads == 1 { "" } else { "s" }))}
        {quota_row("Files and folders of your uploads", "storage-entries", s.upload_entries, s.upload_quota_entries, entries)}
        {if deleted.is_empty() {
            view! { <p class="muted" data-testid="storage-no-deleted">"None of your runs is deleted: deleting runs you no longer need, then deleting them forever, frees their artifacts' room."</p> }.into_any()
        } else {
            view! {
                <p data-testid="storage-deleted-said">
                    {format!("Your deleted runs still hold {} of your artifacts: deleted forever (their experiment's Deleted runs), the room is yours again.", format_bytes(held))}
                </p>
                <table class="table" data-testid="storage-deleted">
                    <thead><tr>
                        <th>"Experiment"</th>
                        <th class="num">"Deleted runs"</th>
                        <th class="num">"Artifacts"</th>
                    </tr></thead>
                    <tbody>
                        {deleted.into_iter().map(|d| view! {
                            <tr data-experiment=d.experiment_id>
                                <td><a href=format!("/experiments/{}?deleted=1", d.experiment_id)>{d.experiment.clone()}</a></td>
                                <td class="num">{format_count(i64::try_from(d.runs).unwrap_or(i64::MAX))}</td>
                                <td class="num">{format_bytes(d.bytes)}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
        {checkpoints_view(s.checkpoints)}
    }
}

/// The checkpoints ended jobs keep for a job to resume from, each until
/// its time.
fn checkpoints_view(kept: Vec<trainyard_domain::job::KeptCheckpoints>) -> impl IntoView {
    let held: u64 = kept.iter().map(|k| k.bytes).sum();
    (!kept.is_empty()).then(|| view! {
        <p data-testid="storage-checkpoints-said">
            {format!(
                "Your ended jobs keep {} of checkpoints for a job to resume from, each until its time (on the job's page: resume from them, or delete them now).",
                format_bytes(held)
            )}
        </p>
        <table class="table" data-testid="storage-checkpoints">
            <thead><tr>
                <th>"Job"</th>
                <th class="num">"Checkpoints"</th>
                <th>"Kept until (UTC)"</th>
            </tr></thead>
            <tbody>
                {kept.into_iter().map(|k| view! {
                    <tr data-job=k.job>
                        <td><a href=format!("/jobs/{}", k.job)>"#" {k.job}</a></td>
                        <td class="num">{format_bytes(k.bytes)}</td>
                        <td>{format_utc(k.kept_until)}</td>
                    </tr>
                }).collect_view()}
            </tbody>
        </table>
    })
}

/// A period's label: `12-03` for a day or week, `2026-12` for a month.
fn label(start: i64, period: UsagePeriod) -> String {
    let text = format_utc(start);
    match period {
        UsagePeriod::Month => text.get(..7).unwrap_or(&text).to_owned(),
        _ => text.get(5..10).unwrap_or(&text).to_owned(),
    }
}

/// Team or person.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum By {
    Team,
    Person,
}

impl By {
    fn as_str(self) -> &'static str {
        match self {
            By::Team => "team",
            By::Person => "person",
        }
    }
}

/// The bars: one series per team or person, one value per period.
fn bars(view: &UsageView, by: By) -> StackedBars {
    let mut series: Vec<BarSeries> = Vec::new();
    for row in &view.rows {
        let name = match by {
            By::Team => row.team.clone().unwrap_or_else(|| "(no team)".to_owned()),
            By::Person => row.user.clone().unwrap_or_else(|| "(unknown)".to_owned()),
        };
        let Some(i) = view.periods.iter().position(|&p| p == row.period_start) else {
            continue;
        };
        let at = match series.iter().position(|s| s.label == name) {
            Some(at) => at,
            None => {
                series.push(BarSeries {
                    label: name,
                    values: vec![0.0; view.periods.len()],
                });
                series.len() - 1
            }
        };
        series[at].values[i] += row.gpu_hours;
    }
    StackedBars {
        title: format!("GPU-hours by {} and {}", view.period.as_str(), by.as_str()),
        categories: view
            .periods
            .iter()
            .map(|&p| label(p, view.period))
            .collect(),
        series,
        unit: "GPU-h".to_owned(),
        width: 960,
        height: 320,
    }
}

#[component]
pub fn UsagePage() -> impl IntoView {
    let query = use_query_map();
    let period = Signal::derive(move || {
        query
            .read()
            .get("period")
            .and_then(|p| UsagePeriod::parse(&p))
            .unwrap_or(UsagePeriod::Week)
    });
    let by = Signal::derive(move || match query.read().get("by").as_deref() {
        Some("person") => By::Person,
        _ => By::Team,
    });
    let day = move |key: &str| query.read().get(key).filter(|d| !d.trim().is_empty());
    let usage = Resource::new(
        move || (period.get(), day("from"), day("to")),
        |(p, from, to)| get_usage(p, from, to),
    );
    // The range chosen stays as the period and colouring change.
    let link = move |p: UsagePeriod, b: By| {
        let mut url = format!("/usage?period={}&by={}", p.as_str(), b.as_str());
        for key in ["from", "to"] {
            if let Some(d) = day(key) {
                url.push_str(&format!("&{key}={}", urlencoding_day(&d)));
            }
        }
        url
    };
    view! {
        <Title text="GPU usage"/>
        <section class="page-head"><h1>"GPU usage"</h1></section>
        <div class="section-head">
            <nav class="window-picker" aria-label="Period">
                {[UsagePeriod::Day, UsagePeriod::Week, UsagePeriod::Month].into_iter().map(|p| view! {
                    <a href=move || link(p, by.get()) class:current=move || period.get() == p
                        aria-current=move || (period.get() == p).then_some("page")>
                        {match p { UsagePeriod::Day => "by day", UsagePeriod::Week => "by week", UsagePeriod::Month => "by month" }}
                    </a>
                }).collect_view()}
            </nav>
            <nav class="window-picker" aria-label="Colour by">
                {[By::Team, By::Person].into_iter().map(|b| view! {
                    <a href=move || link(period.get(), b) class:current=move || by.get() == b
                        aria-current=move || (by.get() == b).then_some("page")>
                        {match b { By::Team => "per team", By::Person => "per person" }}
                    </a>
                }).collect_view()}
            </nav>
            <leptos_router::components::Form method="GET" action="/usage" attr:class="inline-form range-form" attr:data-testid="usage-range">
                <input type="hidden" name="period" value=move || period.get().as_str()/>
                <input type="hidden" name="by" value=move || by.get().as_str()/>
                <label>"From " <input type="date" name="from" value=move || day("from").unwrap_or_default() data-testid="usage-from"/></label>
                <label>"to " <input type="date" name="to" value=move || day("to").unwrap_or_default() data-testid="usage-to"/></label>
                <button type="submit" class="secondary" data-testid="usage-show">"Show"</button>
                {move || (day("from").is_some() || day("to").is_some()).then(|| view! {
                    <a href=move || format!("/usage?period={}&by={}", period.get().as_str(), by.get().as_str())>"latest"</a>
                })}
            </leptos_router::components::Form>
        </div>
        <Suspense fallback=|| view! { <p class="muted">"Summing GPU-hours…"</p> }>
            {move || Suspend::new(async move {
                match usage.await {
                    Ok(view) => usage_view(view, by.get()).into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
        <StorageSection/>
    }
}

/// A day as it may stand in a query: digits and dashes only.
fn urlencoding_day(day: &str) -> String {
    day.chars()
        .filter(|c| c.is_ascii_digit() || *c == '-')
        .collect()
}

fn usage_view(view: UsageView, by: By) -> impl IntoView {
    let chart = bars(&view, by);
    let svg = stacked_bars_svg(&chart).map_err(|e| e.to_string());
    let csv = format!(
        "/api/trainyard/v1/usage?period={}&from={}&to={}&format=csv",
        view.period.as_str(),
        view.from,
        view.to
    );
    let whose = if view.everyone {
        "Everyone's GPU time"
    } else {
        "Your GPU time and your teams'"
    };
    // Totals per team or person over the whole view, largest first.
    let mut totals: Vec<(String, f64)> = chart
        .series
        .iter()
        .map(|s| (s.label.clone(), s.values.iter().sum()))
        .collect();
    totals.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
    view! {
        <p class="muted">
            {whose} " from " {format_utc(view.from)} " to " {format_utc(view.to)} ": GPUs × hours held by jobs (ended attempts and running ones so far). "
            <a href=csv download=format!("gpu-hours-by-{}.csv", view.period.as_str()) data-testid="usage-csv">"CSV"</a>
        </p>
        <figure class="chart" data-testid="usage-chart" data-series=chart.series.len()>
            {match svg {
                Ok(svg) => view! { <div class="chart-svg" inner_html=svg></div> }.into_any(),
                Err(e) => view! { <p class="error">{e}</p> }.into_any(),
            }}
        </figure>
        {if totals.is_empty() {
            view! { <p class="empty" data-testid="usage-empty">"No job held a GPU in these periods."</p> }.into_any()
        } else {
            view! {
                <table class="table" data-testid="usage-totals">
                    <thead><tr>
                        <th>{match by { By::Team => "Team", By::Person => "Person" }}</th>
                        <th class="num">"GPU-hours"</th>
                    </tr></thead>
                    <tbody>
                        {totals.into_iter().map(|(name, hours)| view! {
                            <tr data-name=name.clone()>
                                <td>{name.clone()}</td>
                                <td class="num">{trainyard_charts::format_value(hours)}</td>
                            </tr>
                        }).collect_view()}
                    </tbody>
                </table>
            }.into_any()
        }}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trainyard_domain::teams::UsageRow;

    #[test]
    fn storage_is_said_against_its_quota() {
        let gib = 1u64 << 30;
        assert_eq!(
            of_quota(
                "1.5 GiB".into(),
                gib + gib / 2,
                Some(("10.0 GiB".into(), 10 * gib))
            ),
            "1.5 GiB of 10.0 GiB (15%)"
        );
        assert_eq!(of_quota("0 B".into(), 0, None), "0 B (no quota)");
        assert_eq!(
            of_quota("2 B".into(), 2, Some(("0 B".into(), 0))),
            "2 B of 0 B"
        );
    }

    #[test]
    fn rows_become_one_series_per_team_or_person() {
        let row = |p: i64, team: &str, user: &str, h: f64| UsageRow {
            period_start: p,
            team: Some(team.into()),
            user: Some(user.into()),
            gpu_hours: h,
        };
        let view = UsageView {
            period: UsagePeriod::Day,
            from: 0,
            to: 2 * 86_400_000,
            periods: vec![0, 86_400_000],
            rows: vec![
                row(0, "vision", "ada", 1.0),
                row(0, "vision", "bob", 2.0),
                row(86_400_000, "nlp", "ada", 4.0),
            ],
            everyone: true,
        };
        let teams = bars(&view, By::Team);
        assert_eq!(teams.categories, vec!["01-01", "01-02"]);
        assert_eq!(teams.series.len(), 2);
        assert_eq!(teams.series[0].label, "vision");
        assert_eq!(teams.series[0].values, vec![3.0, 0.0]);
        let people = bars(&view, By::Person);
        assert_eq!(people.series[0].label, "ada");
        assert_eq!(people.series[0].values, vec![1.0, 4.0]);
        assert_eq!(label(0, UsagePeriod::Month), "1970-01");
    }
}
