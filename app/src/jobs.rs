//! The jobs pages: the list (state, queue position and reason, GPUs), the
//! submit form (from a template, or a command of one's own) and a job's page
//! (timeline, cancel, and its log as it is written).

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use trainyard_domain::job::Job;
use trainyard_domain::template::{ParamSpec, ParamType, Template};
use trainyard_domain::{JobState, format_bytes, format_utc};

use crate::api::{
    CancelJob, DeleteJob, DeleteJobCheckpoints, DeleteJobs, DeleteTemplate, MoveJobTeam, RetryJob,
    SaveTemplate, SubmitJob, get_job, get_log_tail, get_template, list_job_page, template_text,
};
use crate::error::AppError;
use crate::pages::{ErrorNote, state_class};

/// How often a page with unfinished jobs looks again, in milliseconds.
const REFRESH_MS: u64 = 2000;

/// Bumps `tick` every [`REFRESH_MS`] while `active()` says so; in the
/// browser only.
pub(crate) fn refresh_while(tick: RwSignal<u32>, active: impl Fn() -> bool + 'static) {
    let active = std::rc::Rc::new(active);
    Effect::new(move |_| {
        let active = active.clone();
        if let Ok(handle) = set_interval_with_handle(
            move || {
                if active() {
                    tick.update(|t| *t += 1);
                }
            },
            std::time::Duration::from_millis(REFRESH_MS),
        ) {
            on_cleanup(move || handle.clear());
        }
    });
}

/// What the job may use besides GPUs (the local executor holds it to
/// them where it can make control groups).
fn resources_text(job: &Job) -> String {
    format!(
        "{} CPU{} · {}",
        f64::from(job.cpu_millis) / 1000.0,
        if job.cpu_millis == 1000 { "" } else { "s" },
        format_bytes(job.memory_mib.saturating_mul(1 << 20))
    )
}

fn gpus_text(job: &Job) -> String {
    match (job.gpus, job.gpus_held().is_empty()) {
        (0, _) => "–".to_owned(),
        (n, true) => n.to_string(),
        (n, false) => format!(
            "{n} (#{})",
            job.gpus_held()
                .iter()
                .map(u32::to_string)
                .collect::<Vec<_>>()
                .join(", #")
        ),
    }
}

/// "12 s", "4 min 05 s", "2 h 03 min".
pub fn duration_text(ms: i64) -> String {
    let s = ms.max(0) / 1000;
    match s {
        0..60 => format!("{s} s"),
        60..3600 => format!("{} min {:02} s", s / 60, s % 60),
        _ => format!("{} h {:02} min", s / 3600, (s % 3600) / 60),
    }
}

/// How long it ran, or has been running (against `now`).
fn ran_for(job: &Job, now: i64) -> String {
    match (job.started_at, job.finished_at, job.state) {
        (Some(start), Some(end), _) => duration_text(end - start),
        (Some(start), None, JobState::Running | JobState::Starting) => duration_text(now - start),
        _ => String::new(),
    }
}

/// "borrowed" beside the state of a job running beyond its team's quota.
fn borrowed_badge(job: &Job) -> Option<impl IntoView + use<>> {
    (job.borrowed && matches!(job.state, JobState::Running | JobState::Starting)).then(|| {
        view! {
            <span class="badge badge-wait" data-testid="borrowed"
                title="Runs on GPUs borrowed beyond its team's quota: it may be preempted when another team needs its guaranteed GPUs back">
                "borrowed GPUs, may be preempted"
            </span>
        }
    })
}

pub(crate) fn queue_text(job: &Job) -> String {
    match (job.state, job.queue_position, &job.pending_reason) {
        (JobState::Queued, Some(p), Some(reason)) => format!("#{p} · {reason}"),
        (JobState::Queued, _, _) => "waiting for the scheduler".to_owned(),
        _ => String::new(),
    }
}

fn now_ms() -> i64 {
    #[cfg(feature = "hydrate")]
    {
        js_sys_now()
    }
    #[cfg(not(feature = "hydrate"))]
    {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0)
    }
}

#[cfg(feature = "hydrate")]
fn js_sys_now() -> i64 {
    web_sys::window()
        .and_then(|w| w.performance().map(|p| p.time_origin() + p.now()))
        .unwrap_or(0.0) as i64
}

#[component]
pub fn JobsPage() -> impl IntoView {
    let tick = RwSignal::new(0u32);
    let query = use_query_map();
    let all = move || query.read().get("all").is_some_and(|v| v == "1");
    let state = move || query.read().get("state").unwrap_or_default();
    let jobs = Resource::new(
        move || (tick.get(), all(), state()),
        |(_, all, state)| list_job_page(all, state),
    );
    // The filter's links keep whose jobs are shown, and the other way round.
    let link = move |all: bool, state: &str| {
        let mut query = Vec::new();
        if all {
            query.push("all=1".to_owned());
        }
        if !state.is_empty() {
            query.push(format!("state={state}"));
        }
        if query.is_empty() {
            "/jobs".to_owned()
        } else {
            format!("/jobs?{}", query.join("&"))
        }
    };
    refresh_while(tick, move || {
        jobs.get_untracked()
            .and_then(Result::ok)
            .is_some_and(|list| list.jobs.iter().any(|j| !j.state.is_terminal()))
    });
    // Ended jobs ticked in the list, deleted together; the ticks outlive
    // the list's refreshes, and those deleted are unticked.
    let delete = ServerAction::<DeleteJobs>::new();
    let selected = RwSignal::new(std::collections::BTreeSet::<i64>::new());
    Effect::new(move |_| {
        if let Some(Ok(done)) = delete.value().get() {
            selected.update(|s| {
                for id in &done.deleted {
                    s.remove(id);
                }
            });
            tick.update(|t| *t += 1);
        }
    });
    view! {
        <Title text="Jobs"/>
        <section class="page-head">
            <h1>"Jobs"</h1>
            <a class="button" href="/submit" data-testid="new-job">"Submit a job"</a>
        </section>
        <nav class="tabs" aria-label="Whose jobs">
            <a href=move || link(false, &state()) aria-current=move || (!all()).then_some("page")>"Mine"</a>
            <a href=move || link(true, &state()) aria-current=move || all().then_some("page") data-testid="all-jobs">"All I can see"</a>
        </nav>
        <nav class="tabs" aria-label="Which state" data-testid="job-states">
            {[("", "Any state"), ("QUEUED", "Queued"), ("RUNNING", "Running"), ("SUCCEEDED", "Succeeded"), ("FAILED", "Failed"), ("CANCELLED", "Cancelled")]
                .into_iter()
                .map(|(code, label)| view! {
                    <a href=move || link(all(), code) aria-current=move || (state() == code).then_some("page") data-state=code>{label}</a>
                })
                .collect_view()}
        </nav>
        // Mounted before there is anything to say, so that what is said
        // is announced.
        <div role="status" aria-live="polite">
            {move || delete.value().get().map(|done| match done {
                Ok(done) => view! { <DeletedNote done/> }.into_any(),
                Err(e) => view! { <ErrorNote error=e labels=&[("ids", "Jobs to delete")]/> }.into_any(),
            })}
        </div>
        <Transition fallback=|| view! { <p class="muted">"Loading jobs…"</p> }>
            {move || Suspend::new(async move {
                match jobs.await.map(|list| (list.jobs, list.deletable)) {
                    Ok((list, _)) if list.is_empty() && !state().is_empty() => view! {
                        <p class="empty" data-testid="jobs-empty">"No job in this state."</p>
                    }.into_any(),
                    Ok((list, _)) if list.is_empty() => view! {
                        <p class="empty" data-testid="jobs-empty">
                            "No jobs yet. "
                            <a href="/templates">"Start from a template"</a>
                            " (the CPU demo trains in a minute, no GPU needed), or "
                            <a href="/submit">"run a command of your own"</a>"."
                        </p>
                    }.into_any(),
                    Ok((list, deletable)) => {
                        let now = now_ms();
                        // Whose each is, where the list has others' jobs.
                        let whose = all();
                        let cut = list.len() >= crate::api::JOBS_SHOWN;
                        let any_deletable = !deletable.is_empty();
                        let deletable = std::sync::Arc::new(deletable);
                        let ticked = {
                            let deletable = deletable.clone();
                            move || selected.with(|s| deletable.iter().filter(|id| s.contains(id)).count())
                        };
                        let all_ticked = {
                            let ticked = ticked.clone();
                            let deletable = deletable.clone();
                            move || ticked() == deletable.len()
                        };
                        let tick_all = {
                            let deletable = deletable.clone();
                            move |ev: leptos::ev::Event| {
                                let on = event_target_checked(&ev);
                                selected.update(|s| {
                                    for id in deletable.iter() {
                                        if on { s.insert(*id); } else { s.remove(id); }
                                    }
                                });
                            }
                        };
                        view! {
                            {cut.then(|| view! {
                                <p class="muted" data-testid="jobs-cut">
                                    {format!("The newest {} are shown: choose a state above for others, or list more with `trainyard jobs --limit N` (up to 1,000).", crate::api::JOBS_SHOWN)}
                                </p>
                            })}
                            <ActionForm action=delete attr:data-testid="delete-jobs">
                            {any_deletable.then(|| {
                                let label = ticked.clone();
                                let ask_first = confirm_delete(ticked.clone());
                                view! {
                                    <div class="table-bar">
                                        <button type="submit" class="danger" data-testid="delete-selected"
                                            disabled=move || delete.pending().get()
                                            on:click=ask_first>
                                            {move || match label() {
                                                0 => "Delete the ticked jobs".to_owned(),
                                                1 => "Delete 1 job".to_owned(),
                                                n => format!("Delete {n} jobs"),
                                            }}
                                        </button>
                                        <span class="muted">"Ended jobs may be ticked; their runs stay in their experiments."</span>
                                    </div>
                                }
                            })}
                            <table class="table" data-testid="jobs">
                                <thead><tr>
                                    <th class="tick">{any_deletable.then(|| view! {
                                        <input type="checkbox" aria-label="Tick every ended job shown" data-testid="select-all-jobs"
                                            prop:checked=all_ticked on:change=tick_all/>
                                    })}</th>
                                    <th class="num">"#"</th><th>"Name"</th>
                                    {whose.then(|| view! { <th>"Owner"</th> })}
                                    <th>"Team"</th><th>"State"</th><th>"Queue"</th>
                                    <th>"GPUs"</th><th>"Ran for"</th><th>"Submitted"</th>
                                </tr></thead>
                                <tbody>
                                    {list.into_iter().enumerate().map(|(row, j)| {
                                        let href = format!("/jobs/{}", j.id);
                                        let id = j.id;
                                        let tickable = deletable.contains(&id);
                                        view! {
                                            <tr data-job=j.id data-state=j.state.as_str()>
                                                <td class="tick">{tickable.then(|| view! {
                                                    <input type="checkbox" name=format!("ids[{row}]") value=id
                                                        aria-label=format!("Tick job {id}, {}", j.name) data-testid="select-job"
                                                        prop:checked=move || selected.with(|s| s.contains(&id))
                                                        on:change=move |ev| {
                                                            let on = event_target_checked(&ev);
                                                            selected.update(|s| if on { s.insert(id); } else { s.remove(&id); });
                                                        }/>
                                                })}</td>
                                                <td class="num">{j.id}</td>
                                                <td><a href=href>{j.name.clone()}</a></td>
                                                {whose.then(|| view! {
                                                    <td data-testid="job-owner">{j.owner.clone().unwrap_or_else(|| "–".to_owned())}</td>
                                                })}
                                                <td>{j.team.clone().unwrap_or_else(|| "–".to_owned())}</td>
                                                <td>
                                                    <span class=state_class(j.state)>{j.state.label()}</span>
                                                    {borrowed_badge(&j)}
                                                </td>
                                                <td class="reason">{queue_text(&j)}</td>
                                                <td>{gpus_text(&j)}</td>
                                                <td>{ran_for(&j, now)}</td>
                                                <td>{format_utc(j.created_at)}</td>
                                            </tr>
                                        }
                                    }).collect_view()}
                                </tbody>
                            </table>
                            </ActionForm>
                        }.into_any()
                    }
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// Where the reader of a job's page stands with being told of its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum EndNotice {
    Off,
    /// The browser is asking them whether this site may notify.
    Asking,
    On,
    /// The browser refuses this site's notifications (only the browser
    /// finds that).
    #[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
    Blocked,
    Told,
}

/// "Tell me when it ends": the browser's notification at the job's end,
/// asked for once; shown only where the browser has notifications (and
/// JavaScript runs).
#[component]
fn NotifyAtEnd(notice: RwSignal<EndNotice>, supported: RwSignal<bool>) -> impl IntoView {
    let ask = move |_: leptos::ev::MouseEvent| {
        notice.set(EndNotice::Asking);
        #[cfg(feature = "hydrate")]
        wasm_bindgen_futures::spawn_local(async move {
            notice.set(if notifications_granted().await {
                EndNotice::On
            } else {
                EndNotice::Blocked
            });
        });
    };
    move || {
        supported.get().then(|| match notice.get() {
            EndNotice::Off | EndNotice::Asking => view! {
                <button type="button" class="secondary" data-testid="notify-end"
                    title="Your browser tells you, while this page stays open"
                    disabled=move || notice.get() == EndNotice::Asking
                    on:click=ask>
                    "Tell me when it ends"
                </button>
            }
            .into_any(),
            EndNotice::On => view! {
                <span class="muted" data-testid="notify-end-on">
                    "You will be told when it ends, while this page stays open. "
                    <button type="button" class="link" on:click=move |_| notice.set(EndNotice::Off)>"Not needed"</button>
                </span>
            }
            .into_any(),
            EndNotice::Blocked => view! {
                <span class="muted" data-testid="notify-end-blocked">
                    "Your browser blocks this site's notifications: allow them in its settings for this site, then reload."
                </span>
            }
            .into_any(),
            EndNotice::Told => ().into_any(),
        })
    }
}

#[cfg(feature = "hydrate")]
fn notifications_supported() -> bool {
    web_sys::window()
        .is_some_and(|w| js_sys::Reflect::has(&w, &"Notification".into()).unwrap_or(false))
}

/// Whether this site may notify, asking the reader where they were never
/// asked.
#[cfg(feature = "hydrate")]
async fn notifications_granted() -> bool {
    use web_sys::{Notification, NotificationPermission};
    if Notification::permission() == NotificationPermission::Granted {
        return true;
    }
    let Ok(asked) = Notification::request_permission() else {
        return false;
    };
    wasm_bindgen_futures::JsFuture::from(asked)
        .await
        .ok()
        .and_then(|answer| answer.as_string())
        .is_some_and(|answer| answer == "granted")
}

/// The notification of a job's end: its state, name and exit code.
#[cfg(feature = "hydrate")]
fn tell_end(job: &Job) {
    let options = web_sys::NotificationOptions::new();
    let mut body = job.name.clone();
    if let Some(code) = job.exit_code.filter(|c| *c != 0) {
        body.push_str(&format!(" · exit code {code}"));
    }
    options.set_body(&body);
    options.set_tag(&format!("trainyard-job-{}", job.id));
    let title = format!("Job {} {}", job.id, job.state.label().to_lowercase());
    if web_sys::Notification::new_with_options(&title, &options).is_err() {
        leptos::logging::warn!(
            "the browser refused the notification of job {}'s end",
            job.id
        );
    }
}

/// Asks before the ticked jobs are deleted; with none ticked, asks
/// nothing (the server says to tick some).
fn confirm_delete(ticked: impl Fn() -> usize + 'static) -> impl Fn(leptos::ev::MouseEvent) {
    move |ev| {
        #[cfg(feature = "hydrate")]
        {
            let n = ticked();
            let yes = n == 0
                || web_sys::window()
                    .and_then(|w| {
                        w.confirm_with_message(&format!(
                            "Delete {n} job{} for good? Their timelines, logs, files and kept checkpoints go; their runs stay in their experiments.",
                            if n == 1 { "" } else { "s" }
                        ))
                        .ok()
                    })
                    .unwrap_or(true);
            if !yes {
                ev.prevent_default();
            }
        }
        #[cfg(not(feature = "hydrate"))]
        let _ = (&ticked, ev);
    }
}

/// What a deletion from the list did: how many went, and each refused
/// with its reason.
#[component]
fn DeletedNote(done: crate::api::DeletedJobs) -> impl IntoView {
    let n = done.deleted.len();
    view! {
        <div class="notice" data-testid="jobs-deleted">
            <p>{match n {
                0 => "No job was deleted.".to_owned(),
                1 => "1 job was deleted for good.".to_owned(),
                n => format!("{n} jobs were deleted for good."),
            }}</p>
            {(!done.refused.is_empty()).then(|| view! {
                <ul class="refused">
                    {done.refused.into_iter().map(|(id, why)| view! {
                        <li data-job=id>
                            <a href=format!("/jobs/{id}")>{format!("Job {id}")}</a>
                            {format!(" was kept: {why}")}
                        </li>
                    }).collect_view()}
                </ul>
            })}
        </div>
    }
}

/// One labelled box of the submit form, with its error under it.
#[component]
fn Field(
    label: &'static str,
    /// The spec field its errors are reported against.
    field: &'static str,
    error: Signal<Option<AppError>>,
    children: Children,
) -> impl IntoView {
    let message = move || error.get().and_then(|e| e.message_for(field));
    view! {
        <div class="field" class:invalid=move || message().is_some()>
            <label>{label} {children()}</label>
            {move || message().map(|m| view! { <p class="field-error" data-field=field>{m}</p> })}
        </div>
    }
}

/// What a number parameter takes, in words: "a whole number from 1 to 1000".
fn param_range(param: &ParamSpec) -> Option<String> {
    let kind = match param.kind {
        ParamType::Int => "a whole number",
        ParamType::Float => "a number",
        _ => return None,
    };
    Some(match (param.min, param.max) {
        (Some(lo), Some(hi)) => format!("{kind} from {lo} to {hi}"),
        (Some(lo), None) => format!("{kind}, at least {lo}"),
        (None, Some(hi)) => format!("{kind}, at most {hi}"),
        (None, None) => kind.to_owned(),
    })
}

/// The form box for one template parameter, with its default, range and help.
fn param_input(name: String, param: ParamSpec, error: Signal<Option<AppError>>) -> impl IntoView {
    let input_name = format!("form[hp][{name}]");
    let default = param
        .default
        .as_ref()
        .map(ToString::to_string)
        .unwrap_or_default();
    let control = match param.kind {
        ParamType::Bool => view! {
            <select name=input_name>
                <option value="true" selected=default == "true">"true"</option>
                <option value="false" selected=default == "false">"false"</option>
            </select>
        }
        .into_any(),
        ParamType::Choice => view! {
            <select name=input_name>
                {param.choices.iter().map(|c| view! {
                    <option value=c.clone() selected=*c == default>{c.clone()}</option>
                }).collect_view()}
            </select>
        }
        .into_any(),
        ParamType::Int | ParamType::Float => view! {
            <input type="number" name=input_name value=default required=param.default.is_none()
                step=if param.kind == ParamType::Int { "1" } else { "any" }
                min=param.min.map(|m| m.to_string()) max=param.max.map(|m| m.to_string())/>
        }
        .into_any(),
        ParamType::String => {
            view! { <input type="text" name=input_name value=default/> }.into_any()
        }
    };
    let field = format!("hyperparameters.{name}");
    let message = Signal::derive(move || error.get().and_then(|e| e.message_for(&field)));
    let range = param_range(&param);
    view! {
        <div class="field" class:invalid=move || message.get().is_some()>
            <label><code>{name.clone()}</code> {control}</label>
            {range.map(|r| view! { <p class="hint" data-testid="param-range">{r}</p> })}
            {param.help.map(|h| view! { <p class="hint">{h}</p> })}
            {move || message.get().map(|m| view! { <p class="field-error">{m}</p> })}
        </div>
    }
}

/// What a job submitted before fills the form with (`/submit?from=ID`):
/// its spec as it was given, and the team it counted against.
#[derive(Clone, serde::Serialize, serde::Deserialize)]
struct Prefill {
    from: i64,
    spec: trainyard_domain::job::JobSpec,
    team: Option<String>,
    /// The checkpoints that job keeps, when they are the caller's to
    /// resume from …
    checkpoints: Option<trainyard_domain::job::KeptCheckpoints>,
    /// … and whether the form resumes from them at first
    /// (`/submit?from=ID&resume=1`).
    resume: bool,
}

/// `/submit?template=SLUG`: the form for a template's job, or (without a
/// template) for a command of one's own; `/submit?from=ID`: the form filled
/// with job ID's spec, to change and submit again. Posts work without
/// JavaScript.
#[component]
pub fn SubmitPage() -> impl IntoView {
    let query = use_query_map();
    let asked_slug = move || query.read().get("template").unwrap_or_default();
    let from = move || {
        query
            .read()
            .get("from")
            .and_then(|id| id.parse::<i64>().ok())
    };
    let resume = move || query.read().get("resume").is_some_and(|v| v == "1");
    let template = Resource::new(
        move || (asked_slug(), from(), resume()),
        |(slug, from, resume)| async move {
            let prefill = match from {
                Some(id) => {
                    let page = match get_job(id).await {
                        Ok(page) => page,
                        Err(e) => return Err(e),
                    };
                    let mut spec = page.job.spec.clone();
                    // Someone else's project is theirs to run from.
                    if !page.yours {
                        spec.project = None;
                    }
                    // What it resumed from is gone (it took them); what
                    // it left may be resumed from, by its owner.
                    spec.resume_from = None;
                    let checkpoints = page.checkpoints.filter(|_| page.resumable);
                    Some(Prefill {
                        from: id,
                        spec,
                        team: page.job.team.clone(),
                        checkpoints,
                        resume,
                    })
                }
                None => None,
            };
            // The job's template, when the form is filled from a job.
            let slug = match &prefill {
                Some(p) => p.spec.template.clone().unwrap_or_default(),
                None => slug,
            };
            // Someone in several teams chooses which one the job counts against.
            let teams = crate::api::whoami()
                .await
                .ok()
                .flatten()
                .map(|me| me.user.teams)
                .unwrap_or_default();
            let (template, beyond) = if slug.is_empty() {
                (Ok(None), None)
            } else {
                // Asks beyond what this server has, said before submitting.
                let beyond = crate::api::templates_too_big()
                    .await
                    .unwrap_or_default()
                    .into_iter()
                    .find(|(s, _)| *s == slug)
                    .map(|(_, why)| why);
                (get_template(slug.clone()).await, beyond)
            };
            // The experiments the caller sees, suggested as they type.
            let experiments = crate::explorer::api::list_experiments(false)
                .await
                .map(|list| list.into_iter().map(|e| e.name).collect())
                .unwrap_or_default();
            template.map(|t| (t, slug, teams, experiments, beyond, prefill))
        },
    );
    let submit = ServerAction::<SubmitJob>::new();
    let error = Signal::derive(move || submit.value().get().and_then(Result::err));
    view! {
        <Title text="Submit a job"/>
        <section class="page-head"><h1>"Submit a job"</h1></section>
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match template.await {
                    Ok((None, slug, _, _, _, _)) if !slug.is_empty() => view! {
                        <p class="error" role="alert">
                            "There is no template “" {slug} "” in the catalog. "
                            <a href="/templates">"Choose one from the catalog"</a>
                        </p>
                    }.into_any(),
                    Ok((t, _, teams, experiments, beyond, prefill)) => {
                        submit_form(t, teams, experiments, beyond, prefill, submit, error).into_any()
                    }
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

fn submit_form(
    template: Option<Template>,
    teams: Vec<trainyard_domain::identity::Team>,
    experiments: Vec<String>,
    beyond: Option<String>,
    prefill: Option<Prefill>,
    submit: ServerAction<SubmitJob>,
    error: Signal<Option<AppError>>,
) -> impl IntoView {
    let spec = prefill.as_ref().map(|p| &p.spec);
    let resources = spec
        .and_then(|s| s.resources.clone())
        .or_else(|| template.as_ref().map(|t| t.spec.resources.clone()))
        .unwrap_or_default();
    let max_runtime = spec
        .and_then(|s| s.max_runtime.clone())
        .or_else(|| template.as_ref().and_then(|t| t.spec.max_runtime.clone()))
        .unwrap_or_default();
    let (slug, heading, mut params) = match &template {
        Some(t) => (
            t.slug.clone(),
            view! {
                <div class="card">
                    <strong>{t.spec.title.clone()}</strong>
                    <p>{crate::pages::with_code(&t.spec.description)}</p>
                    {t.spec.data.clone().map(|d| view! { <p class="hint">"Data: " {d}</p> })}
                </div>
            }
            .into_any(),
            t.spec.parameters.clone(),
        ),
        None => (
            String::new(),
            view! {
                <p class="hint">
                    "Runs a shell command in the job's folder, with MLFLOW_TRACKING_URI and MLFLOW_RUN_ID set, "
                    "so mlflow.start_run() logs to the job's run. Or "
                    <a href="/templates">"start from a template"</a>"."
                </p>
            }
            .into_any(),
            Default::default(),
        ),
    };
    let custom = template.is_none();
    // A shipped template brings its own files and data, and offers neither
    // unless it says so; one written in the browser has no files of its own.
    let takes_project = template
        .as_ref()
        .is_none_or(|t| !t.builtin || t.spec.project);
    let takes_datasets = template
        .as_ref()
        .is_none_or(|t| !t.builtin || t.spec.datasets);
    let default_name = match spec {
        Some(s) => s.name.clone(),
        None => template
            .as_ref()
            .map(|t| t.slug.clone())
            .unwrap_or_default(),
    };
    // Filled from a job: its values where the form asks for them.
    let hyperparameters = spec.map(|s| s.hyperparameters.clone()).unwrap_or_default();
    for (name, param) in &mut params {
        if let Some(value) = hyperparameters.get(name) {
            param.default = Some(value.clone());
        }
    }
    let own_hyperparameters = if custom {
        hyperparameters
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect::<Vec<_>>()
            .join("\n")
    } else {
        String::new()
    };
    let experiment = spec.and_then(|s| s.experiment.clone()).unwrap_or_default();
    let command = spec.and_then(|s| s.command.clone()).unwrap_or_default();
    let datasets = spec.map(|s| s.datasets.join(", ")).unwrap_or_default();
    let retries = spec.map_or(0, |s| s.retries);
    let priority = spec.map_or(0, |s| s.priority);
    let never_preempt = spec.is_some_and(|s| !s.preemptible);
    let chosen_team = prefill.as_ref().and_then(|p| p.team.clone());
    let project = spec.and_then(|s| s.project.clone());
    let from_note = prefill.as_ref().map(|p| {
        // What the form has no field for is said, not dropped silently.
        let mut left_out = Vec::new();
        if let Some(image) = &p.spec.image {
            left_out.push(format!("its image ({image})"));
        }
        if !p.spec.env.is_empty() {
            let names: Vec<&str> = p.spec.env.keys().map(String::as_str).collect();
            left_out.push(format!("its environment variables ({})", names.join(", ")));
        }
        if !custom {
            let extra: Vec<&str> = p
                .spec
                .hyperparameters
                .keys()
                .filter(|k| !params.contains_key(*k))
                .map(String::as_str)
                .collect();
            if !extra.is_empty() {
                left_out.push(format!(
                    "its hyperparameters that are not the template's ({})",
                    extra.join(", ")
                ));
            }
        }
        view! {
            <p class="hint" data-testid="prefilled">
                "Filled from " <a href=format!("/jobs/{}", p.from)>{format!("job #{}", p.from)}</a>
                ": change what you want and submit it as a new job."
                {(!left_out.is_empty()).then(|| format!(
                    " This form has no place for {}: the new job runs without them (`trainyard submit` with the job's spec keeps them).",
                    left_out.join(" or ")
                ))}
            </p>
        }
    });
    let other_error = move || {
        error.get().filter(|e| {
            // Errors of fields not on this form are shown at the top.
            !matches!(e, AppError::Fields(_) | AppError::Invalid(_))
                || e.field()
                    .is_some_and(|f| f == "spec" || f == "request" || f == "template")
        })
    };
    view! {
        {heading}
        {from_note}
        {move || other_error().map(|e| view! { <ErrorNote error=e/> })}
        <ActionForm action=submit attr:class="form" attr:data-testid="submit-job">
            <input type="hidden" name="form[template]" value=slug/>
            <Field label="Name" field="name" error=error>
                <input type="text" name="form[name]" required maxlength="100" value=default_name/>
            </Field>
            <Field label="Experiment" field="experiment" error=error>
                <input type="text" name="form[experiment]" placeholder="Default" maxlength="500"
                    list="experiment-names" autocomplete="off" value=experiment/>
                <datalist id="experiment-names">
                    {experiments.into_iter().map(|name| view! { <option value=name/> }).collect_view()}
                </datalist>
            </Field>
            {custom.then(|| view! {
                <Field label="Command" field="command" error=error>
                    <textarea name="form[command]" rows="3" required
                        placeholder="python3 train.py --lr {lr}">{command}</textarea>
                </Field>
                <Field label="Hyperparameters (name=value, one per line)" field="hyperparameters" error=error>
                    <textarea name="form[hyperparameters]" rows="4" placeholder="lr=0.01\nepochs=20">{own_hyperparameters}</textarea>
                </Field>
            })}
            {(!params.is_empty()).then(|| view! {
                <fieldset>
                    <legend>"Parameters"</legend>
                    {params.into_iter().map(|(name, p)| param_input(name, p, error)).collect_view()}
                </fieldset>
            })}
            {takes_project.then(|| view! { <ProjectUpload kept=project/> })}
            {takes_datasets.then(|| view! {
                <Field label="Datasets (names, separated by commas)" field="datasets" error=error>
                    <input type="text" name="form[datasets]" placeholder="e.g. cifar10" autocomplete="off" value=datasets/>
                </Field>
            })}
            <fieldset class="row">
                <legend>"Resources"</legend>
                {beyond.map(|why| view! {
                    <p class="hint warn" data-testid="too-big">
                        "As the template asks, more than this server has: " {why} ". Ask for less here."
                    </p>
                })}
                <Field label="GPUs" field="resources.gpus" error=error>
                    <input type="number" name="form[gpus]" min="0" max="64" step="1" value=resources.gpus/>
                </Field>
                <Field label="CPUs" field="resources.cpus" error=error>
                    <input type="number" name="form[cpus]" min="0.1" step="any" value=resources.cpus/>
                </Field>
                <Field label="Memory" field="resources.memory" error=error>
                    <input type="text" name="form[memory]" value=resources.memory size="6"/>
                </Field>
                <Field label="Max runtime" field="max_runtime" error=error>
                    <input type="text" name="form[max_runtime]" value=max_runtime placeholder="24h" size="6"/>
                </Field>
                <Field label="Retries" field="retries" error=error>
                    <input type="number" name="form[retries]" min="0" max="10" step="1" value=retries/>
                </Field>
                <Field label="Priority" field="priority" error=error>
                    <input type="number" name="form[priority]" min="-10" max="10" step="1" value=priority/>
                </Field>
            </fieldset>
            {(teams.len() > 1).then(|| view! {
                <Field label="Team (its GPUs count against this team's quota and share)" field="team" error=error>
                    <select name="form[team]" data-testid="submit-team">
                        {teams.into_iter().map(|t| {
                            let selected = chosen_team.as_deref() == Some(t.name.as_str());
                            view! { <option value=t.name.clone() selected=selected>{t.name.clone()}</option> }
                        }).collect_view()}
                    </select>
                </Field>
            })}
            {prefill.as_ref().and_then(|p| Some((p.from, p.checkpoints.clone()?, p.resume))).map(|(from, kept, resume)| view! {
                <Field label="Resume" field="resume_from" error=error>
                    <input type="checkbox" name="form[resume_from]" value=from.to_string() data-testid="resume-from" checked=resume/>
                    <span class="hint">" from the checkpoints job #" {from} " left (" {format_bytes(kept.bytes)} ", kept until " {format_utc(kept.kept_until)} "): they are in TRAINYARD_CHECKPOINT_DIR at its start; unticked, it starts from scratch"</span>
                </Field>
            })}
            <Field label="Never preempt" field="preemptible" error=error>
                <input type="checkbox" name="form[never_preempt]" value="on" data-testid="never-preempt" checked=never_preempt/>
                <span class="hint">" runs only on the team's own (guaranteed) GPUs, never on borrowed ones: it is never stopped for another team, and may wait longer"</span>
            </Field>
            <button type="submit" disabled=move || submit.pending().get()>"Submit"</button>
        </ActionForm>
    }
}

/// Where an upload stands. (Only the browser moves it past `Idle`.)
#[derive(Debug, Clone, PartialEq)]
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
enum UploadState {
    Idle,
    /// Bytes sent of the total.
    Sending(f64, f64),
    /// Uploaded: its id and what it unpacked to.
    Done(String, String),
    Failed(String),
}

/// The project archive for the job: uploaded as soon as it is chosen, with
/// its progress; its id goes with the form. (Needs JavaScript; without it,
/// `trainyard submit --file` does the same.)
/// `kept`: the project a job filled the form with, sent with it unless
/// another file is chosen.
#[component]
fn ProjectUpload(kept: Option<String>) -> impl IntoView {
    let state = RwSignal::new(match kept {
        Some(id) => UploadState::Done(
            id.clone(),
            format!("the project the job ran with (upload {id}); choose a file to send another"),
        ),
        None => UploadState::Idle,
    });
    let id = move || match state.get() {
        UploadState::Done(id, _) => id,
        _ => String::new(),
    };
    #[allow(unused_variables)]
    let on_change = move |ev: leptos::ev::Event| {
        #[cfg(feature = "hydrate")]
        {
            let input: web_sys::HtmlInputElement = event_target(&ev);
            if let Some(file) = input.files().and_then(|files| files.get(0)) {
                start_upload(file, state);
            }
        }
    };
    view! {
        <div class="field">
            <label>"Project archive (zip or tar.gz; a requirements.txt at its top is installed)"
                <input type="file" accept=".zip,.tar,.tar.gz,.tgz" data-testid="project-file" on:change=on_change/>
            </label>
            <input type="hidden" name="form[project]" prop:value=id/>
            {move || match state.get() {
                UploadState::Idle => ().into_any(),
                UploadState::Sending(sent, total) => view! {
                    <p class="hint" data-testid="upload-progress">
                        <progress max=total value=sent></progress>
                        " uploading… " {format!("{:.0}%", if total > 0.0 { sent * 100.0 / total } else { 0.0 })}
                    </p>
                }.into_any(),
                UploadState::Done(_, summary) => view! {
                    <p class="hint" data-testid="upload-done">"Uploaded: " {summary}</p>
                }.into_any(),
                UploadState::Failed(message) => view! {
                    <p class="field-error" data-testid="upload-error">{message}</p>
                }.into_any(),
            }}
        </div>
    }
}

/// Sends the file with XMLHttpRequest, whose upload progress events a
/// fetch does not have.
#[cfg(feature = "hydrate")]
fn start_upload(file: web_sys::File, state: RwSignal<UploadState>) {
    use wasm_bindgen::JsCast;
    use wasm_bindgen::closure::Closure;
    let fail = move |message: String| state.set(UploadState::Failed(message));
    let Ok(xhr) = web_sys::XmlHttpRequest::new() else {
        return fail("this browser cannot upload files".into());
    };
    let name: String = js_sys::encode_uri_component(&file.name()).into();
    if xhr
        .open(
            "POST",
            &format!("/api/trainyard/v1/uploads?kind=project&name={name}"),
        )
        .is_err()
    {
        return fail("the upload could not start".into());
    }
    state.set(UploadState::Sending(0.0, file.size()));
    if let Ok(upload) = xhr.upload() {
        let on_progress =
            Closure::<dyn FnMut(web_sys::ProgressEvent)>::new(move |e: web_sys::ProgressEvent| {
                if e.length_computable() {
                    state.set(UploadState::Sending(e.loaded(), e.total()));
                }
            });
        upload.set_onprogress(Some(on_progress.as_ref().unchecked_ref()));
        on_progress.forget();
    }
    let answered = xhr.clone();
    let on_load = Closure::<dyn FnMut()>::new(move || {
        let status = answered.status().unwrap_or(0);
        let text = answered.response_text().ok().flatten().unwrap_or_default();
        let body = js_sys::JSON::parse(&text).unwrap_or(wasm_bindgen::JsValue::NULL);
        let get = |value: &wasm_bindgen::JsValue, key: &str| {
            js_sys::Reflect::get(value, &key.into()).unwrap_or(wasm_bindgen::JsValue::UNDEFINED)
        };
        if status == 200 || status == 201 {
            let upload = get(&body, "upload");
            let id = get(&upload, "id").as_string().unwrap_or_default();
            let files = get(&upload, "files").as_f64().unwrap_or(0.0);
            let bytes = get(&upload, "bytes").as_f64().unwrap_or(0.0);
            // 200: the same archive as one uploaded before, which is reused.
            let again = if status == 200 {
                ", the same as before"
            } else {
                ""
            };
            state.set(UploadState::Done(
                id,
                format!(
                    "{files} files, {} unpacked{again}",
                    format_bytes(bytes as u64)
                ),
            ));
        } else {
            let message = get(&body, "message")
                .as_string()
                .unwrap_or_else(|| format!("the server answered {status}"));
            state.set(UploadState::Failed(message));
        }
    });
    xhr.set_onload(Some(on_load.as_ref().unchecked_ref()));
    on_load.forget();
    let on_error = Closure::<dyn FnMut()>::new(move || {
        state.set(UploadState::Failed(
            "the upload was cut off; try again".into(),
        ))
    });
    xhr.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    on_error.forget();
    if xhr.send_with_opt_blob(Some(&file)).is_err() {
        state.set(UploadState::Failed("the upload could not be sent".into()));
    }
}

/// `/jobs/ID`: the job, its timeline, cancel, and its log, live while it runs.
#[component]
pub fn JobPage() -> impl IntoView {
    let params = use_params_map();
    let id = move || params.read().get("id").and_then(|s| s.parse::<i64>().ok());
    let tick = RwSignal::new(0u32);
    let cancel = ServerAction::<CancelJob>::new();
    let retry = ServerAction::<RetryJob>::new();
    let move_team = ServerAction::<MoveJobTeam>::new();
    let drop_checkpoints = ServerAction::<DeleteJobCheckpoints>::new();
    let delete = ServerAction::<DeleteJob>::new();
    // Blocking, so that a page of no job answers 404 (its status leaves
    // with the first bytes).
    let page = Resource::new_blocking(
        move || {
            (
                id(),
                tick.get(),
                cancel.version().get(),
                move_team.version().get(),
                drop_checkpoints.version().get(),
            )
        },
        |(id, _, _, _, _)| async move {
            match id {
                Some(id) => get_job(id).await.map(Some),
                None => {
                    crate::error::page_not_found();
                    Ok(None)
                }
            }
        },
    );
    // Its attempt as the page last read it: a retry or a preemption moves
    // the log and the charts on to the new attempt (whose log and run are
    // new). Kept while the page reloads, so that a reload alone reads
    // nothing again.
    let attempt = Memo::new(move |seen: Option<&u32>| {
        page.get()
            .and_then(Result::ok)
            .flatten()
            .map(|p| p.job.attempt)
            .or(seen.copied())
            .unwrap_or(0)
    });
    // The run the charts draw: the current attempt's.
    let chart_run = Resource::new(
        move || (id(), attempt.get()),
        |(id, _)| async move {
            match id {
                Some(id) => get_job(id).await.ok().and_then(|p| p.job.run_id),
                None => None,
            }
        },
    );
    let log = Resource::new(
        move || (id(), attempt.get()),
        |(id, _)| async move {
            match id {
                Some(id) => get_log_tail(id).await.map(Some),
                None => Ok(None),
            }
        },
    );
    refresh_while(tick, move || {
        page.get_untracked()
            .and_then(Result::ok)
            .flatten()
            .is_some_and(|p| !p.job.state.is_terminal())
    });
    // Told by the browser when the job ends, where the reader asked and
    // the page stays open (in a tab behind others).
    let end_notice = RwSignal::new(EndNotice::Off);
    let notifiable = RwSignal::new(false);
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        notifiable.set(notifications_supported());
    });
    Effect::new(move |_| {
        if end_notice.get() != EndNotice::On {
            return;
        }
        if let Some(Ok(Some(p))) = page.get()
            && p.job.state.is_terminal()
        {
            end_notice.set(EndNotice::Told);
            #[cfg(feature = "hydrate")]
            tell_end(&p.job);
        }
    });
    let live = RwSignal::new(String::new());
    // Set once the page let go of the log's start to stay light.
    let trimmed = RwSignal::new(false);
    let log_box = NodeRef::<leptos::html::Pre>::new();
    follow_log(id, log, live, trimmed, tick, log_box);
    let gpu_zoom = RwSignal::new(None);
    let gpus = crate::gpus::job_gpus(id, tick, gpu_zoom);
    let cancel_error = move || {
        cancel
            .value()
            .get()
            .and_then(Result::err)
            .or_else(|| retry.value().get().and_then(Result::err))
            .or_else(|| move_team.value().get().and_then(Result::err))
            .or_else(|| drop_checkpoints.value().get().and_then(Result::err))
            .or_else(|| delete.value().get().and_then(Result::err))
    };
    view! {
        <Transition fallback=|| view! { <p class="muted">"Loading the job…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(Some(p)) => {
                        let job = p.job;
                        let now = now_ms();
                        let cancellable = !job.state.is_terminal();
                        let yours = p.yours;
                        view! {
                            // Its state first, so that a tab left open says when it ends.
                            <Title text=format!("{} · Job {} · {}", job.state.label(), job.id, job.name)/>
                            <section class="page-head">
                                <h1>{job.name.clone()}</h1>
                                <span class=state_class(job.state) data-testid="job-state">{job.state.label()}</span>
                                {borrowed_badge(&job)}
                                {(yours && !cancellable).then(|| view! {
                                    <ActionForm action=retry attr:class="inline-form">
                                        <input type="hidden" name="id" value=job.id/>
                                        <button type="submit" class="secondary" data-testid="retry">"Run again"</button>
                                    </ActionForm>
                                })}
                                {yours.then(|| view! {
                                    <a class="button secondary" href=format!("/submit?from={}", job.id) data-testid="edit-resubmit">"Edit and resubmit"</a>
                                })}
                                {(yours && !cancellable).then(|| view! {
                                    <ActionForm action=delete attr:class="inline-form">
                                        <input type="hidden" name="id" value=job.id/>
                                        <button type="submit" class="danger" data-testid="delete-job"
                                            disabled=move || delete.pending().get()
                                            on:click=crate::pages::confirm_first(format!(
                                                "Delete job {} for good? Its timeline, logs, files and kept checkpoints go; its runs stay in their experiment.",
                                                job.id
                                            ))>
                                            "Delete"
                                        </button>
                                    </ActionForm>
                                })}
                                {cancellable.then(|| view! { <NotifyAtEnd notice=end_notice supported=notifiable/> })}
                                {(yours && cancellable).then(|| view! {
                                    <ActionForm action=cancel attr:class="inline-form">
                                        <input type="hidden" name="id" value=job.id/>
                                        <button type="submit" class="danger" data-testid="cancel"
                                            on:click=confirm_cancel(job.id, matches!(job.state, JobState::Running | JobState::Starting))>
                                            {if job.cancel_requested { "Stopping…" } else { "Cancel" }}
                                        </button>
                                    </ActionForm>
                                })}
                            </section>
                            <dl class="facts">
                                <dt>"Job"</dt><dd>"#" {job.id} {job.template.clone().map(|t| format!(" · template {t}"))}
                                    {job.owner.clone().map(|o| view! { " · by " <span data-testid="job-owner">{o}</span> })}</dd>
                                <dt>"Queue"</dt><dd data-testid="job-queue">{
                                    let q = queue_text(&job);
                                    if q.is_empty() { "–".to_owned() } else { q }
                                }</dd>
                                <dt>"GPUs"</dt><dd>{gpus_text(&job)}</dd>
                                <dt>"Team"</dt><dd>
                                    <span data-testid="job-team">{
                                        let team = job.team.clone().unwrap_or_else(|| "–".to_owned());
                                        if job.spec.preemptible { team } else { format!("{team} · never preempted: runs on the team's own GPUs only") }
                                    }</span>
                                    {
                                        let current = job.team.clone().unwrap_or_default();
                                        let others: Vec<String> = p.team_choices.iter().filter(|t| **t != current).cloned().collect();
                                        (!others.is_empty()).then(|| view! {
                                            " "
                                            <ActionForm action=move_team attr:class="inline-form" attr:data-testid="move-team">
                                                <input type="hidden" name="id" value=job.id/>
                                                <select name="team" aria-label="Move to team" data-testid="move-team-choice">
                                                    {others.into_iter().map(|t| view! { <option value=t.clone()>{t.clone()}</option> }).collect_view()}
                                                </select>
                                                <button type="submit" class="secondary" data-testid="move-team-submit">"Move to team"</button>
                                            </ActionForm>
                                        })
                                    }
                                </dd>
                                <dt>"Node"</dt><dd data-testid="job-node">{job.node.clone().unwrap_or_else(|| "–".to_owned())}</dd>
                                {job.pod.clone().map(|pod| view! {
                                    <dt>"Pod"</dt><dd data-testid="job-pod"><code>{pod}</code></dd>
                                })}
                                <dt>"CPUs, memory"</dt><dd data-testid="job-resources">{resources_text(&job)}</dd>
                                <dt>"Attempt"</dt><dd>{job.attempt + 1} " of " {job.retries + 1}
                                    // The log below is this attempt's; the earlier ones' are kept.
                                    {(job.attempt > 0).then(|| view! {
                                        <span class="muted" data-testid="earlier-logs">" · logs of attempt "
                                            {(0..job.attempt).map(|a| view! {
                                                " " <a href=format!("/api/trainyard/v1/jobs/{}/logs?attempt={a}&download=1", job.id)>{a + 1}</a>
                                            }).collect_view()}
                                        </span>
                                    })}
                                </dd>
                                <dt>"Ran for"</dt><dd>{ran_for(&job, now)}</dd>
                                <dt>"Exit code"</dt><dd>{job.exit_code.map(|c| c.to_string()).unwrap_or_else(|| "–".to_owned())}</dd>
                                <dt>"Run"</dt><dd>{match (job.experiment_id, job.run_id.clone()) {
                                    (Some(exp), Some(run)) => view! {
                                        <a href=format!("/experiments/{exp}/runs/{run}") data-testid="job-run"><code>{run.clone()}</code></a>
                                    }.into_any(),
                                    (_, run) => view! { <code>{run.unwrap_or_default()}</code> }.into_any(),
                                }}</dd>
                                <dt>"Submitted"</dt><dd>{format_utc(job.created_at)}</dd>
                                {job.spec.resume_from.map(|from| view! {
                                    <dt>"Resumed from"</dt>
                                    <dd data-testid="job-resumed-from">"the checkpoints of " <a href=format!("/jobs/{from}")>"job #" {from}</a></dd>
                                })}
                                {p.checkpoints.clone().map(|kept| view! {
                                    <dt>"Checkpoints"</dt>
                                    <dd data-testid="job-checkpoints">
                                        {format_bytes(kept.bytes)} " kept until " {format_utc(kept.kept_until)}
                                        " for a job to resume from"
                                        {yours.then(|| view! {
                                            <div class="checkpoint-actions">
                                                <ActionForm action=retry attr:class="inline-form">
                                                    <input type="hidden" name="id" value=job.id/>
                                                    <input type="hidden" name="resume" value="true"/>
                                                    <button type="submit" data-testid="resume" disabled=move || retry.pending().get()>"Resume from them"</button>
                                                </ActionForm>
                                                {p.resumable.then(|| view! {
                                                    <a class="button secondary" href=format!("/submit?from={}&resume=1", job.id) data-testid="edit-resume">"Edit and resume"</a>
                                                })}
                                                <ActionForm action=drop_checkpoints attr:class="inline-form">
                                                    <input type="hidden" name="id" value=job.id/>
                                                    <button type="submit" class="danger" data-testid="delete-checkpoints"
                                                        on:click=crate::pages::confirm_first(format!("Delete job {}'s checkpoints? No job can resume from them after.", job.id))>
                                                        "Delete them"
                                                    </button>
                                                </ActionForm>
                                            </div>
                                        })}
                                    </dd>
                                })}
                                {(job.spec.template.is_some() || job.spec.project.is_some()).then(|| view! {
                                    <dt>"Files"</dt>
                                    <dd><a href=format!("/api/trainyard/v1/jobs/{}/files", job.id) download=format!("job-{}-files.tar", job.id) data-testid="job-files">"what it started from (tar)"</a></dd>
                                })}
                            </dl>
                            <h2>"Timeline"</h2>
                            <ol class="timeline" data-testid="events">
                                {p.events.into_iter().map(|e| view! {
                                    <li><time>{format_utc(e.time)}</time> " " <strong>{e.kind}</strong> " " {e.message}</li>
                                }).collect_view()}
                            </ol>
                            {(job.gpus > 0 && job.started_at.is_some()).then(|| view! {
                                <crate::gpus::JobGpus id=job.id data=gpus zoom=gpu_zoom/>
                            }.into_any())}

                        }.into_any()
                    }
                    Ok(None) => view! { <p class="error">"There is no such job. " <a href="/jobs">"See all jobs"</a></p> }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Transition>
        {move || cancel_error().map(|e| view! { <ErrorNote error=e/> })}
        // Outside the page's refresh, so that the charts stay mounted.
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                chart_run.await.map(|run_id| view! { <JobRunCharts run_id tick/> })
            })}
        </Suspense>
        {move || id().map(|id| view! {
            <h2>"Log " <a class="hint" href=format!("/api/trainyard/v1/jobs/{id}/logs?download=1")>"download"</a></h2>
        })}
        <Suspense fallback=|| ()>
            {move || Suspend::new(async move {
                match log.await {
                    Ok(Some(tail)) => view! {
                        {move || trimmed.get().then(|| view! {
                            <p class="hint" data-testid="log-trimmed">
                                "This page keeps the log's last "
                                {LIVE_LOG_KEEP / 1024} " KiB as it grows; "
                                {move || id().map(|id| view! {
                                    <a href=format!("/api/trainyard/v1/jobs/{id}/logs?download=1")>"download"</a>
                                })}
                                " it whole, or follow it with " <code>"trainyard logs -f"</code> "."
                            </p>
                        })}
                        <pre class="log" data-testid="log" node_ref=log_box tabindex="0"
                            aria-label="The job's log">
                            {move || (!trimmed.get()).then(|| tail.text.clone())}
                            {move || live.get()}
                        </pre>
                    }.into_any(),
                    Ok(None) => ().into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// Asks before a job is cancelled: a running (or starting) job's work
/// stops and cannot resume (declining leaves the form unsent).
#[allow(unused_variables)]
fn confirm_cancel(id: i64, running: bool) -> impl Fn(leptos::ev::MouseEvent) {
    move |ev| {
        #[cfg(feature = "hydrate")]
        {
            let question = if running {
                format!(
                    "Cancel job {id}? Its processes are stopped and what it has not saved is lost; \"Run again\" starts it over."
                )
            } else {
                format!("Cancel job {id}? It leaves the queue.")
            };
            let yes = web_sys::window()
                .and_then(|w| w.confirm_with_message(&question).ok())
                .unwrap_or(true);
            if !yes {
                ev.prevent_default();
            }
        }
    }
}

/// Whether a scrolled box shows its end (give or take a line).
#[cfg(feature = "hydrate")]
fn at_end(el: &web_sys::Element) -> bool {
    el.scroll_top() + el.client_height() >= el.scroll_height() - 24
}

/// How much of a growing log the job page keeps: past
/// [`LIVE_LOG_MAX`] bytes the start goes, at a line, down to about
/// [`LIVE_LOG_KEEP`] (a job that prints a megabyte a second would
/// otherwise slow the page to a halt).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
const LIVE_LOG_MAX: usize = 512 * 1024;
const LIVE_LOG_KEEP: usize = 256 * 1024;

/// Drops the start of `text` once it is past [`LIVE_LOG_MAX`], keeping
/// about the last [`LIVE_LOG_KEEP`] bytes from a line's start; true if it
/// did.
#[cfg_attr(not(any(feature = "hydrate", test)), allow(dead_code))]
fn keep_log_end(text: &mut String) -> bool {
    if text.len() <= LIVE_LOG_MAX {
        return false;
    }
    let mut cut = text.len() - LIVE_LOG_KEEP;
    while !text.is_char_boundary(cut) {
        cut += 1;
    }
    let cut = text[cut..].find('\n').map_or(cut, |i| cut + i + 1);
    text.drain(..cut);
    true
}

/// In the browser: follows the log from where the tail ended through the
/// server's event stream, appending to `live` (its start dropped past
/// [`LIVE_LOG_MAX`], `trimmed` then set); when the job has ended,
/// bumps `tick` so the page reads its final state. The box shows the end
/// of the log and keeps to it as lines arrive, like `tail -f`, unless the
/// person scrolled up to read.
#[allow(unused_variables)]
fn follow_log(
    id: impl Fn() -> Option<i64> + Send + Sync + 'static,
    log: Resource<Result<Option<crate::api::LogTail>, AppError>>,
    live: RwSignal<String>,
    trimmed: RwSignal<bool>,
    tick: RwSignal<u32>,
    log_box: NodeRef<leptos::html::Pre>,
) {
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        if let Some(el) = log_box.get() {
            el.set_scroll_top(el.scroll_height());
        }
    });
    #[cfg(feature = "hydrate")]
    Effect::new(move |_| {
        use wasm_bindgen::JsCast;
        use wasm_bindgen::closure::Closure;
        let (Some(id), Some(Ok(Some(tail)))) = (id(), log.get()) else {
            return;
        };
        live.set(String::new());
        let url = format!(
            "/api/trainyard/v1/jobs/{id}/logs/stream?offset={}",
            tail.end
        );
        let Ok(source) = web_sys::EventSource::new(&url) else {
            return;
        };
        let on_log =
            Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |e: web_sys::MessageEvent| {
                if let Some(text) = e.data().as_string() {
                    let follow = log_box.get_untracked().is_some_and(|el| at_end(&el));
                    let mut cut = false;
                    live.update(|l| {
                        l.push_str(&text);
                        cut = keep_log_end(l);
                    });
                    if cut && !trimmed.get_untracked() {
                        trimmed.set(true);
                    }
                    if follow {
                        // Once the new text is laid out.
                        request_animation_frame(move || {
                            if let Some(el) = log_box.get_untracked() {
                                el.set_scroll_top(el.scroll_height());
                            }
                        });
                    }
                }
            });
        let closer = source.clone();
        let on_end = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |_| {
            closer.close();
            tick.update(|t| *t += 1);
        });
        let _ = source.add_event_listener_with_callback("log", on_log.as_ref().unchecked_ref());
        let _ = source.add_event_listener_with_callback("end", on_end.as_ref().unchecked_ref());
        let held = send_wrapper::SendWrapper::new((source, on_log, on_end));
        on_cleanup(move || held.take().0.close());
    });
}

/// `/templates/new` and `/templates/SLUG/edit`: a template as YAML (or
/// JSON), checked on save with every problem named by its field. Shipped
/// templates are shown but changed in their files.
#[component]
pub fn TemplateEditor() -> impl IntoView {
    let params = use_params_map();
    let slug = move || params.read().get("slug").unwrap_or_default();
    // Blocking, so that the editor of no template answers 404.
    let text = Resource::new_blocking(slug, |slug| async move {
        let text = template_text(slug).await;
        if matches!(text, Ok(None)) {
            crate::error::page_not_found();
        }
        text
    });
    let save = ServerAction::<SaveTemplate>::new();
    let delete = ServerAction::<DeleteTemplate>::new();
    let error = move || {
        save.value()
            .get()
            .and_then(Result::err)
            .or_else(|| delete.value().get().and_then(Result::err))
    };
    view! {
        <Title text="Template"/>
        <section class="page-head">
            <h1>{move || if slug().is_empty() { "New template".to_owned() } else { format!("Template {}", slug()) }}</h1>
        </section>
        {move || error().map(|e| view! { <ErrorNote error=e labels=&[("slug", "Name"), ("spec", "Template")]/> })}
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match text.await {
                    Ok(Some((builtin, body))) => {
                        let editing = !slug().is_empty();
                        view! {
                            {builtin.then(|| view! {
                                <p class="hint">"This template ships with Trainyard: change "
                                    <code>{format!("templates/{}/template.yaml", slug())}</code>
                                    ", or save it here under another name."</p>
                            })}
                            <ActionForm action=save attr:class="form" attr:data-testid="template-form">
                                <input type="hidden" name="new" value=(!editing || builtin).to_string()/>
                                <label>"Name (a-z, 0-9 and -)"
                                    <input type="text" name="slug" required maxlength="100"
                                        value=if builtin { String::new() } else { slug() }
                                        readonly=editing && !builtin pattern="[a-z0-9][a-z0-9-]*"/>
                                </label>
                                <label>"Template (YAML or JSON)"
                                    <textarea name="text" rows="20" spellcheck="false">{body}</textarea>
                                </label>
                                <button type="submit">"Save"</button>
                            </ActionForm>
                            {(editing && !builtin).then(|| view! {
                                <ActionForm action=delete attr:class="inline-form">
                                    <input type="hidden" name="slug" value=slug()/>
                                    <button type="submit" class="danger" data-testid="delete-template"
                                        on:click=crate::pages::confirm_first(format!(
                                            "Delete the template {}? It leaves the catalog; jobs made from it are kept.",
                                            slug()
                                        ))>"Delete"</button>
                                </ActionForm>
                            })}
                        }.into_any()
                    }
                    Ok(None) => view! { <p class="error">"There is no such template. " <a href="/templates">"See the catalog"</a></p> }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// The charts of the job's run (its losses first, at most two), following
/// the page's refresh while the job runs: whether training goes well, seen
/// where the job is watched.
#[component]
fn JobRunCharts(run_id: String, tick: RwSignal<u32>) -> impl IntoView {
    use crate::explorer::ChartOptions;
    use crate::explorer::chart::{Line, MetricChart};
    // Asked again with each refresh until the run has logged a metric;
    // then the charts stay mounted and follow `tick` themselves.
    let has_keys = RwSignal::new(false);
    let keys = {
        let run_id = run_id.clone();
        Resource::new(
            move || if has_keys.get() { 0 } else { tick.get() },
            move |_| crate::explorer::api::get_run_metric_keys(run_id.clone()),
        )
    };
    let options = RwSignal::new(ChartOptions::default());
    view! {
        <Transition fallback=|| ()>
            {move || {
                let run_id = run_id.clone();
                Suspend::new(async move {
                    match keys.await {
                        Ok((name, keys)) if !keys.is_empty() => {
                            has_keys.set(true);
                            let line = Line { run_id, label: name, color: 0 };
                            let lines = Signal::derive(move || vec![line.clone()]);
                            view! {
                                <h2>"Training"</h2>
                                <div class="charts" data-testid="job-charts">
                                    {main_metrics(keys).into_iter().map(|key| view! {
                                        <MetricChart key lines group=Signal::derive(|| None)
                                            options=Signal::from(options) tick=Signal::from(tick)/>
                                    }).collect_view()}
                                </div>
                            }.into_any()
                        }
                        _ => ().into_any(),
                    }
                })
            }}
        </Transition>
    }
}

/// The metrics a job's page draws: those named like a loss first, two at most.
fn main_metrics(mut keys: Vec<String>) -> Vec<String> {
    keys.sort_by_key(|k| (!k.to_lowercase().contains("loss"), k.clone()));
    keys.truncate(2);
    keys
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_growing_log_keeps_its_end_from_a_line_start() {
        let line = "step 1234: loss 0.123456 — ünïcode\n";
        let mut log = String::new();
        while log.len() <= LIVE_LOG_MAX {
            assert!(!keep_log_end(&mut log));
            log.push_str(line);
        }
        let before = log.len();
        assert!(keep_log_end(&mut log));
        assert!(log.len() <= LIVE_LOG_KEEP && log.len() + line.len() > LIVE_LOG_KEEP);
        assert!(log.starts_with("step 1234"), "cut at a line's start");
        assert!(log.ends_with(line));
        assert!(before > log.len());
        // One line longer than what is kept: cut inside it, on a character.
        let mut long = "é".repeat(LIVE_LOG_MAX);
        assert!(keep_log_end(&mut long));
        assert!(long.len() <= LIVE_LOG_KEEP + 1 && long.chars().all(|c| c == 'é'));
    }
}
