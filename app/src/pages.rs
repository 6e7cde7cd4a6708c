//! The pages of the shell: overview, experiments, jobs, templates, admin, 404.

use leptos::prelude::*;
use leptos_meta::Title;
use trainyard_domain::{JobState, format_utc};

use crate::api::{
    CreateTeam, DrainNode, EndSessions, ResumeNode, SetTeam, SetWebhookActive, WEBHOOKS_SHOWN,
    get_overview, get_recent, list_teams, list_template_specs, list_users, list_webhooks, node_use,
};
use crate::error::AppError;

/// An error as the pages show it: what happened and what to do. A form's
/// refusal names its fields as the form labels them (`labels`: the field
/// as the server names it, then its label); only a failure of the server or
/// of the call itself says that something went wrong.
#[component]
pub(crate) fn ErrorNote(
    error: AppError,
    #[prop(optional)] labels: &'static [(&'static str, &'static str)],
) -> impl IntoView {
    let named = |e: &trainyard_domain::FieldError| {
        let label = (labels.iter().find(|(field, _)| *field == e.field))
            .map_or(e.field.as_str(), |(_, label)| label);
        format!("{label}: {}", e.message)
    };
    let (lead, text) = match &error {
        AppError::Invalid(e) => (None, named(e)),
        AppError::Fields(list) => (None, list.iter().map(named).collect::<Vec<_>>().join("; ")),
        AppError::Internal(_) => (
            Some("Something went wrong on the server: "),
            error.to_string(),
        ),
        AppError::Call(_) => (
            Some("The server did not answer as expected; reload the page and try again. "),
            format!("({error})"),
        ),
        _ => (None, error.to_string()),
    };
    view! {
        <div class="error" role="alert">
            {lead.map(|lead| view! { <strong>{lead}</strong> })}
            {text}
        </div>
    }
}

pub(crate) fn state_class(state: JobState) -> &'static str {
    match state {
        JobState::Queued | JobState::Starting => "badge badge-wait",
        JobState::Running => "badge badge-run",
        JobState::Succeeded => "badge badge-ok",
        JobState::Failed | JobState::Lost => "badge badge-bad",
        JobState::Cancelled => "badge badge-off",
    }
}

/// The mlflow client prints `<tracking URI>/#/experiments/1/runs/ID` (its
/// UI's hash routes); in the browser, those open our pages of the same path.
fn follow_mlflow_link() {
    #[cfg(feature = "hydrate")]
    {
        let navigate = leptos_router::hooks::use_navigate();
        Effect::new(move |_| {
            let hash = window().location().hash().unwrap_or_default();
            if let Some(path) = mlflow_link_path(&hash) {
                navigate(
                    &path,
                    leptos_router::NavigateOptions {
                        replace: true,
                        ..Default::default()
                    },
                );
            }
        });
    }
}

/// Our page for a hash route of MLflow's UI: a run (and its tabs, such as
/// `/artifacts`), an evaluation run (`evaluation-runs?selectedRunUuid=ID`,
/// as `mlflow.genai.evaluate` prints), a trace (`traces?selectedTraceId=`),
/// an experiment's logged models (`/models/m-…`, as `log_model` prints)
/// and registered models (`#/models/NAME/versions/1`).
#[cfg_attr(not(feature = "hydrate"), allow(dead_code))]
fn mlflow_link_path(hash: &str) -> Option<String> {
    let plain = |id: &&str| {
        !id.is_empty()
            && id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if hash == "#/models" || hash.starts_with("#/models/") || hash.starts_with("#/models?") {
        return Some("/models".to_owned());
    }
    let rest = hash.strip_prefix("#/experiments/")?;
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    let path = path.split('#').next().unwrap_or_default();
    let mut segments = path.split('/');
    let experiment = segments
        .next()
        .filter(|e| e.chars().all(|c| c.is_ascii_digit()) && !e.is_empty())?;
    let asked = |key: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
            .filter(plain)
    };
    let path = match (segments.next(), segments.next()) {
        (Some("runs"), Some(run)) if plain(&run) => format!("{experiment}/runs/{run}"),
        (Some("evaluation-runs"), _) => match asked("selectedRunUuid") {
            Some(run) => format!("{experiment}/runs/{run}"),
            None => experiment.to_owned(),
        },
        (Some("traces"), _) => match asked("selectedTraceId") {
            Some(trace) => format!("{experiment}/traces/{trace}"),
            None => format!("{experiment}/traces"),
        },
        (Some("models"), _) => return Some(format!("/models?experiment={experiment}")),
        (Some("datasets"), _) => format!("{experiment}/datasets"),
        _ => experiment.to_owned(),
    };
    Some(format!("/experiments/{path}"))
}

#[component]
pub fn HomePage() -> impl IntoView {
    // It follows the jobs that run, as the jobs pages do.
    let tick = RwSignal::new(0u32);
    let overview = Resource::new(move || tick.get(), |_| get_overview());
    let recent = Resource::new(move || tick.get(), |_| get_recent());
    // While a job of theirs waits or runs (a run whose script died stays
    // RUNNING for ever, so runs alone do not keep it polling).
    crate::jobs::refresh_while(tick, move || {
        recent
            .get_untracked()
            .and_then(Result::ok)
            .is_some_and(|r| r.jobs.iter().any(|j| !j.state.is_terminal()))
    });
    follow_mlflow_link();
    view! {
        <Title text=""/>
        <section class="page-head">
            <h1>"Overview"</h1>
            <button type="button" class="secondary" data-testid="refresh" on:click=move |_| tick.update(|t| *t += 1)>
                "Refresh"
            </button>
        </section>
        <Suspense fallback=|| view! { <p class="muted">"Loading figures…"</p> }>
            {move || Suspend::new(async move {
                match overview.await {
                    Ok(o) => {
                        let total = o.jobs_total();
                        view! {
                            <div class="cards">
                                <a class="card" href="/experiments" data-testid="figure-experiments">
                                    <span class="figure">{o.experiments}</span>
                                    <span class="label">{plural(o.experiments, "experiment", "experiments")}</span>
                                </a>
                                <div class="card" data-testid="figure-runs">
                                    <span class="figure">{o.runs}</span>
                                    <span class="label">{plural(o.runs, "run", "runs")}</span>
                                    <span class="sub">{o.active_runs} " running"</span>
                                </div>
                                <a class="card" href="/jobs" data-testid="figure-jobs">
                                    <span class="figure">{total}</span>
                                    <span class="label">{plural(total, "job", "jobs")}</span>
                                </a>
                                {
                                    let figure = view! {
                                        <span class="figure">{o.gpus}</span>
                                        <span class="label">{plural(o.gpus, "GPU", "GPUs")}</span>
                                        <span class="sub">"on " {o.nodes} " " {plural(o.nodes, "node", "nodes")}</span>
                                    };
                                    // The nodes' page is the admins'.
                                    if o.admin {
                                        view! { <a class="card" href="/admin" data-testid="figure-gpus">{figure}</a> }.into_any()
                                    } else {
                                        view! { <div class="card" data-testid="figure-gpus">{figure}</div> }.into_any()
                                    }
                                }
                            </div>
                            <h2>"Jobs by state"</h2>
                            <table class="table narrow" data-testid="jobs-by-state">
                                <tbody>
                                    {o.jobs_by_state.into_iter().map(|(state, n)| view! {
                                        <tr>
                                            <td><span class=state_class(state)>{state.label()}</span></td>
                                            <td class="num">{n}</td>
                                        </tr>
                                    }).collect_view()}
                                </tbody>
                            </table>
                            {(o.runs == 0).then(|| view! {
                                <p class="hint">
                                    "No runs yet. Point your training script's "
                                    <code>"MLFLOW_TRACKING_URI"</code>
                                    " at this server and log one, or create an experiment to group them."
                                </p>
                            })}
                        }.into_any()
                    }
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
        <Transition fallback=|| ()>
            {move || Suspend::new(async move {
                match recent.await {
                    Ok(r) => recent_view(r).into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Transition>
    }
}

/// The caller's latest runs and jobs, each a link back to it.
fn recent_view(recent: crate::api::Recent) -> impl IntoView {
    use crate::explorer::status_class;
    view! {
        <div class="two-col">
            <section aria-labelledby="recent-runs">
                <h2 id="recent-runs">"Your latest runs"</h2>
                {if recent.runs.is_empty() {
                    view! { <p class="empty">"None yet."</p> }.into_any()
                } else {
                    view! {
                        <table class="table" data-testid="recent-runs">
                            <thead><tr><th>"Run"</th><th>"Experiment"</th><th>"Status"</th><th>"Started"</th></tr></thead>
                            <tbody>
                                {recent.runs.into_iter().map(|r| view! {
                                    <tr data-run=r.run_id.clone()>
                                        <td><a href=format!("/experiments/{}/runs/{}", r.experiment_id, r.run_id)>{r.name.clone()}</a></td>
                                        <td><a href=format!("/experiments/{}", r.experiment_id)>{r.experiment.clone()}</a></td>
                                        <td><span class=status_class(&r.status)>{r.status.clone()}</span></td>
                                        <td>{format_utc(r.start_time)}</td>
                                    </tr>
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any()
                }}
            </section>
            <section aria-labelledby="recent-jobs">
                <h2 id="recent-jobs">"Your latest jobs"</h2>
                {if recent.jobs.is_empty() {
                    view! { <p class="empty">"None yet. " <a href="/submit">"Submit one"</a></p> }.into_any()
                } else {
                    view! {
                        <table class="table" data-testid="recent-jobs">
                            <thead><tr><th>"Job"</th><th>"State"</th><th>"Queue"</th></tr></thead>
                            <tbody>
                                {recent.jobs.into_iter().map(|j| {
                                    let queue = crate::jobs::queue_text(&j);
                                    view! {
                                        <tr data-job=j.id>
                                            <td><a href=format!("/jobs/{}", j.id)>{j.name.clone()}</a></td>
                                            <td><span class=state_class(j.state)>{j.state.label()}</span></td>
                                            <td class="muted">{queue}</td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any()
                }}
            </section>
        </div>
    }
}

#[component]
pub fn TemplatesPage() -> impl IntoView {
    let templates = Resource::new(
        || (),
        |_| async {
            let list = list_template_specs().await?;
            // A note on a card is no reason to hide the catalog.
            let too_big = crate::api::templates_too_big().await.unwrap_or_default();
            Ok::<_, AppError>((list, too_big))
        },
    );
    view! {
        <Title text="Templates"/>
        <section class="page-head">
            <h1>"Templates"</h1>
            <a class="button" href="/submit">"Run your own command"</a>
            <a class="button" href="/templates/new" data-testid="new-template">"New template"</a>
        </section>
        <Suspense fallback=|| view! { <p class="muted">"Loading templates…"</p> }>
            {move || Suspend::new(async move {
                match templates.await {
                    Ok((list, _)) if list.is_empty() => view! {
                        <p class="empty" data-testid="templates-empty">
                            "The catalog is empty. Templates describe a training recipe (command, parameters, resources) that anyone can launch on their own data; "
                            "they live in the templates folder (the templates_dir setting)."
                        </p>
                    }.into_any(),
                    Ok((list, too_big)) => view! {
                        <ul class="catalog" data-testid="templates">
                            {list.into_iter().map(|t| {
                                let beyond = too_big.iter().find(|(slug, _)| *slug == t.slug).map(|(_, why)| why.clone());
                                let r = &t.spec.resources;
                                let needs = format!(
                                    "{} · {} CPU · {}",
                                    if r.gpus == 0 { "no GPU".to_owned() } else { format!("{} {}", r.gpus, plural(r.gpus.into(), "GPU", "GPUs")) },
                                    r.cpus,
                                    r.memory
                                );
                                let params: Vec<String> = t.spec.parameters.keys().cloned().collect();
                                view! {
                                    <li class="card" data-template=t.slug.clone()>
                                        <strong>{t.spec.title.clone()}</strong>
                                        <p>{with_code(&t.spec.description)}</p>
                                        <p class="hint">{needs}</p>
                                        {beyond.map(|why| view! {
                                            <p class="hint warn" data-testid="too-big">
                                                "More than this server has: " {why} ". Ask for less on the form."
                                            </p>
                                        })}
                                        {(!params.is_empty()).then(|| view! { <p class="hint">"Parameters: " {params.join(", ")}</p> })}
                                        {t.spec.data.clone().map(|d| view! { <p class="hint">"Data: " {d}</p> })}
                                        <a class="button" href=format!("/submit?template={}", t.slug)>"Use this template"</a>
                                        {(!t.builtin).then(|| view! {
                                            <a class="hint" href=format!("/templates/{}/edit", t.slug)>"Edit"</a>
                                        })}
                                    </li>
                                }
                            }).collect_view()}
                        </ul>
                    }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
pub fn AdminPage() -> impl IntoView {
    view! {
        <AdminOnly>
            <Title text="Admin"/>
            <section class="page-head"><h1>"Admin"</h1></section>
            <p><a href="/admin/gpus" data-testid="admin-gpus">"GPU utilization: the heatmap of every GPU, each node's charts, idle GPUs"</a></p>
            <p><a href="/admin/audit" data-testid="admin-audit">"Audit trail: who changed teams, nodes, node tokens, templates and webhooks, ended sessions, stopped or moved jobs"</a></p>
            <Users/>
            <Teams/>
            <Nodes/>
            <crate::node_agents::NodeAgents/>
            <Webhooks/>
        </AdminOnly>
    }
}

/// Whether the caller may see the admin pages: 403 with the reason if not.
#[server(endpoint = "check_admin")]
pub async fn check_admin() -> Result<(), AppError> {
    let principal = crate::api::caller()?;
    if principal.user.is_admin {
        return Ok(());
    }
    crate::error::set_error_status(http::StatusCode::FORBIDDEN);
    Err(AppError::Forbidden(format!(
        "the admin pages are for admins, and {} is not one; admins are the members of the sign-in's admin group (the server's `oidc_admin_group`): ask whoever runs Trainyard to add you to it",
        principal.user.username
    )))
}

/// A page only admins may see: to anyone else it answers 403 and says so
/// once, rather than drawing forms whose every section is refused.
#[component]
pub fn AdminOnly(children: ChildrenFn) -> impl IntoView {
    // Blocking, so that the page's status is 403 for them.
    let gate = Resource::new_blocking(|| (), |_| check_admin());
    let children = StoredValue::new(children);
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading…"</p> }>
            {move || Suspend::new(async move {
                match gate.await {
                    Ok(()) => children.read_value()().into_any(),
                    Err(e) => view! {
                        <Title text="Admins only"/>
                        <section class="page-head"><h1>"Admins only"</h1></section>
                        <div data-testid="admins-only"><ErrorNote error=e/></div>
                    }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// The registry's webhooks (made with MLflow's client) and what was sent to
/// each: when, which event, whether the receiver took it and how it
/// answered.
#[component]
fn Webhooks() -> impl IntoView {
    let switch = ServerAction::<SetWebhookActive>::new();
    let webhooks = Resource::new(move || switch.version().get(), |_| list_webhooks());
    let error = Signal::derive(move || switch.value().get().and_then(Result::err));
    view! {
        <h2>"Registry webhooks"</h2>
        <p class="hint">
            "Made with MLflow's client (" <code>"MlflowClient().create_webhook(…)"</code> "), a webhook is told of the registry's events it asked for, signed with its secret. "
            "What its receiver does not take (no answer, 408, 429 or 5xx) is tried again after 1 s, 10 s, 1 min and 10 min; the last deliveries of each are shown. "
            "Turned off, a webhook is sent nothing, and what waited for it fails."
        </p>
        {move || error.get().map(|e| view! { <ErrorNote error=e/> })}
        <Suspense fallback=|| view! { <p class="muted">"Loading webhooks…"</p> }>
            {move || Suspend::new(async move {
                match webhooks.await {
                    Ok(list) if list.shown.is_empty() => view! {
                        <p class="empty" data-testid="webhooks-empty">"No webhooks."</p>
                    }.into_any(),
                    Ok(list) => view! {
                        <div data-testid="webhooks">
                            {list.more.then(|| view! {
                                <p class="hint" data-testid="webhooks-more">
                                    "The newest " {WEBHOOKS_SHOWN} " webhooks are shown; "
                                    <code>"MlflowClient().list_webhooks()"</code> " pages through them all."
                                </p>
                            })}
                            {list.shown.into_iter().map(|(w, deliveries)| view! {
                                <section class="card" data-webhook=w.name.clone()>
                                    <p>
                                        <strong>{w.name.clone()}</strong> " "
                                        <span class={if w.status == "ACTIVE" { "badge badge-ok" } else { "badge badge-off" }}>{w.status.clone()}</span> " "
                                        <code>{w.url.clone()}</code>
                                        {(!w.has_secret).then(|| view! { <span class="hint">" · unsigned"</span> })}
                                    </p>
                                    <ActionForm action=switch attr:class="inline-form">
                                        <input type="hidden" name="webhook_id" value=w.webhook_id.clone()/>
                                        <input type="hidden" name="active" value=(w.status != "ACTIVE").to_string()/>
                                        <button type="submit" class="secondary" data-testid="switch-webhook">
                                            {if w.status == "ACTIVE" { "Turn off" } else { "Turn on" }}
                                        </button>
                                    </ActionForm>
                                    {w.description.clone().map(|d| view! { <p class="hint">{d}</p> })}
                                    <p class="hint">"Events: " {w.events.join(", ")}</p>
                                    {if deliveries.is_empty() {
                                        view! { <p class="muted">"Nothing sent yet."</p> }.into_any()
                                    } else {
                                        view! { <Deliveries deliveries/> }.into_any()
                                    }}
                                </section>
                            }).collect_view()}
                        </div>
                    }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

#[component]
fn Deliveries(deliveries: Vec<trainyard_domain::tracking::WebhookDelivery>) -> impl IntoView {
    view! {
        <table class="table" data-testid="deliveries">
            <thead><tr>
                <th>"Event"</th><th>"Raised"</th><th>"State"</th><th class="num">"Tries"</th><th>"Answer"</th>
            </tr></thead>
            <tbody>
                {deliveries.into_iter().map(|d| {
                    let class = match d.state.as_str() {
                        "delivered" => "badge badge-ok",
                        "failed" => "badge badge-bad",
                        _ => "badge badge-wait",
                    };
                    let answer = match (d.response_status, d.error) {
                        (_, Some(error)) => error,
                        (Some(status), None) => format!("HTTP {status}"),
                        (None, None) => String::new(),
                    };
                    view! {
                        <tr data-delivery=d.delivery_id.clone()>
                            <td><code>{d.event.clone()}</code></td>
                            <td>{format_utc(d.created)}</td>
                            <td><span class=class>{d.state.clone()}</span></td>
                            <td class="num">{d.attempts}</td>
                            <td class="muted">{answer}</td>
                        </tr>
                    }
                }).collect_view()}
            </tbody>
        </table>
    }
}

/// Each team's guaranteed GPUs and fair-share weight, which an admin sets
/// here, beside what the team holds now and its decayed usage.
#[component]
fn Teams() -> impl IntoView {
    let set = ServerAction::<SetTeam>::new();
    let create = ServerAction::<CreateTeam>::new();
    let teams = Resource::new(
        move || (set.version().get(), create.version().get()),
        |_| list_teams(),
    );
    let error = Signal::derive(move || set.value().get().and_then(Result::err));
    let create_error = Signal::derive(move || create.value().get().and_then(Result::err));
    // The GPUs the guarantees are promised out of.
    let capacity = Resource::new(|| (), |_| node_use());
    view! {
        <h2>"Teams"</h2>
        <p class="hint">
            "A team may always use its guaranteed GPUs: when others borrowed them, their borrowed jobs are preempted (stopped, and queued again) to give them back. "
            "Beyond its guarantee a team borrows idle GPUs. Waiting jobs go by priority, then by GPU-hours used (decayed, divided by the team's weight), then by the person's. "
            "Teams appear here when someone of the group first signs in, or when you add one below, named as the identity provider's group, to set its guarantee before its people arrive."
        </p>
        {move || error.get().map(|e| view! { <ErrorNote error=e/> })}
        <Suspense fallback=|| view! { <p class="muted">"Loading teams…"</p> }>
            {move || Suspend::new(async move {
                match teams.await {
                    Ok(list) if list.is_empty() => view! {
                        <p class="empty">"No teams yet: they come from the identity provider's groups at sign-in."</p>
                    }.into_any(),
                    Ok(list) => {
                        let promised: u64 = list.iter().map(|t| u64::from(t.quota_gpus)).sum();
                        let there: Option<u64> = capacity
                            .await
                            .ok()
                            .filter(|n| n.unavailable.is_none())
                            .map(|n| n.nodes.iter().map(|n| u64::from(n.gpus)).sum());
                        view! {
                        {there.filter(|&there| promised > there).map(|there| view! {
                            <p class="warning" data-testid="overcommitted">
                                {format!(
                                    "The guarantees add up to {promised} GPUs, more than the {there} the nodes have: \
                                     not every team can have its guarantee at once. Lower some, or add GPUs."
                                )}
                            </p>
                        })}
                        <table class="table" data-testid="teams">
                            <thead><tr>
                                <th>"Team"</th><th class="num">"People"</th><th>"Guaranteed GPUs"</th><th>"Weight"</th>
                                <th class="num">"GPUs in use"</th><th class="num">"GPU-hours (decayed)"</th><th><span class="visually-hidden">"Actions"</span></th>
                            </tr></thead>
                            <tbody>
                                {list.into_iter().map(|t| {
                                    let form = format!("team-{}", t.id);
                                    let in_use = if t.gpus_borrowed > 0 {
                                        format!("{} ({} borrowed)", t.gpus_in_use, t.gpus_borrowed)
                                    } else {
                                        t.gpus_in_use.to_string()
                                    };
                                    view! {
                                        <tr data-team=t.name.clone()>
                                            <td>{t.name.clone()}</td>
                                            <td class="num">{t.members}</td>
                                            <td><input type="number" name="quota_gpus" form=form.clone() min="0" max="100000" step="1"
                                                value=t.quota_gpus aria-label=format!("guaranteed GPUs of {}", t.name) data-testid="quota"/></td>
                                            <td><input type="number" name="share" form=form.clone() min="0.01" max="100" step="any"
                                                value=t.share aria-label=format!("fair-share weight of {}", t.name) data-testid="share"/></td>
                                            <td class="num" data-testid="in-use">{in_use}</td>
                                            <td class="num">{format!("{:.1}", t.decayed_gpu_hours)}</td>
                                            <td>
                                                <ActionForm action=set attr:class="inline-form" attr:id=form>
                                                    <input type="hidden" name="id" value=t.id/>
                                                    <button type="submit" class="secondary" data-testid="save-team">"Save"</button>
                                                </ActionForm>
                                            </td>
                                        </tr>
                                        {(!t.waiting_beyond_guarantee.is_empty()).then(|| view! {
                                            <tr class="warning-row">
                                                <td colspan="7" class="warning" data-testid="beyond-guarantee">
                                                    {if t.waiting_beyond_guarantee.len() == 1 {
                                                        format!("A queued job that may not be preempted asks for more than {}'s {} guaranteed GPUs: it starts only once the guarantee is raised, or in another team: ", t.name, t.quota_gpus)
                                                    } else {
                                                        format!("Queued jobs that may not be preempted ask for more than {}'s {} guaranteed GPUs: they start only once the guarantee is raised, or in another team: ", t.name, t.quota_gpus)
                                                    }}
                                                    {t.waiting_beyond_guarantee.iter().map(|id| view! { <a href=format!("/jobs/{id}")>{format!("#{id}")}</a>" " }).collect_view()}
                                                </td>
                                            </tr>
                                        })}
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any()
                    }
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
        <h3>"Add a team"</h3>
        {move || create_error.get().filter(|e| e.field().is_none()).map(|e| view! { <ErrorNote error=e/> })}
        <ActionForm action=create attr:class="form inline-fields" attr:data-testid="new-team">
            <label>"Group name"
                <input type="text" name="name" required maxlength="250" placeholder="vision" data-testid="new-team-name"/>
            </label>
            <label>"Guaranteed GPUs"
                <input type="number" name="quota_gpus" min="0" max="100000" step="1" value="0" data-testid="new-team-quota"/>
            </label>
            <label>"Weight"
                <input type="number" name="share" min="0.01" max="100" step="any" value="1"/>
            </label>
            <button type="submit" data-testid="add-team">"Add team"</button>
            {move || create_error.get().filter(|e| e.field().is_some()).map(|e| view! {
                <p class="field-error" data-testid="new-team-error">{e.to_string()}</p>
            })}
        </ActionForm>
    }
}

/// Where jobs run: each node of the executor with its GPUs, held by
/// Trainyard's jobs, by others, or free, as a bar and in numbers.
#[component]
fn Nodes() -> impl IntoView {
    let drain = ServerAction::<DrainNode>::new();
    let resume = ServerAction::<ResumeNode>::new();
    let nodes = Resource::new(
        move || (drain.version().get(), resume.version().get()),
        |_| node_use(),
    );
    // The error shown is the last action's: one completing clears the
    // other's.
    Effect::new(move |_| {
        drain.version().track();
        resume.value().set(None);
    });
    Effect::new(move |_| {
        resume.version().track();
        drain.value().set(None);
    });
    let error = Signal::derive(move || {
        drain
            .value()
            .get()
            .and_then(Result::err)
            .or_else(|| resume.value().get().and_then(Result::err))
    });
    view! {
        <h2>"GPU nodes"</h2>
        <p class="hint">
            "A drained node takes no new jobs (for a driver update, a failing GPU): those waiting for it say so. "
            "What runs there goes on to its end, or, with \"stop its jobs\", is stopped and queued again without spending its retries."
        </p>
        {move || error.get().map(|e| view! { <p class="field-error" data-testid="drain-error">{e.to_string()}</p> })}
        <Suspense fallback=|| view! { <p class="muted">"Loading nodes…"</p> }>
            {move || Suspend::new(async move {
                match nodes.await {
                    Ok(view) => {
                        let executor = view.executor.clone();
                        let total: u32 = view.nodes.iter().map(|n| n.gpus).sum();
                        let used: u32 = view.nodes.iter().map(|n| n.used).sum();
                        let free: u32 = view.nodes.iter().filter(|n| n.takes_jobs).map(|n| n.free).sum();
                        // Free GPUs of nodes that take no new jobs are not
                        // free to anyone: said apart, so the figures add up.
                        let idle_closed: u32 = view.nodes.iter().filter(|n| !n.takes_jobs).map(|n| n.free).sum();
                        let nodes = view.nodes.len();
                        let summary = format!(
                            "{nodes} {} of the {executor} executor: {total} {}, {used} held by Trainyard's jobs, {free} free{}",
                            plural(nodes as u64, "node", "nodes"),
                            plural(u64::from(total), "GPU", "GPUs"),
                            if idle_closed > 0 { format!(", {idle_closed} unused on nodes that take no new jobs") } else { String::new() },
                        );
                        if let Some(why) = view.unavailable {
                            view! {
                                <p class="empty" data-testid="nodes-unavailable">
                                    {format!("The {executor} executor cannot tell its nodes now: {why}")}
                                </p>
                            }.into_any()
                        } else if view.nodes.is_empty() {
                            view! {
                                <p class="empty" data-testid="nodes-empty">
                                    {format!("The {executor} executor has no nodes that take jobs: check its node selector and that the nodes offer GPUs.")}
                                </p>
                            }.into_any()
                        } else {
                            view! {
                                <p class="muted" data-testid="nodes-summary">{summary}</p>
                                <table class="table" data-testid="nodes">
                                    <thead><tr>
                                        <th>"Node"</th><th>"State"</th><th>"GPUs"</th>
                                        <th class="num">"Trainyard"</th><th class="num">"Others"</th>
                                        <th class="num">"Free"</th><th>"Jobs"</th><th>"Drain"</th>
                                    </tr></thead>
                                    <tbody>
                                        {view.nodes.into_iter().map(|n| {
                                            let share = |k: u32| format!("width: {}%", if n.gpus == 0 { 0.0 } else { 100.0 * k as f64 / n.gpus as f64 });
                                            let title = format!("{} of {} {} held by Trainyard's jobs, {} by others, {} free", n.used, n.gpus, plural(u64::from(n.gpus), "GPU", "GPUs"), n.others, n.free);
                                            // Draining with "stop its jobs" asks first.
                                            let stop_jobs = RwSignal::new(false);
                                            view! {
                                                <tr data-node=n.name.clone()>
                                                    <td>{n.name.clone()}</td>
                                                    <td data-testid="node-state">{match &n.drain {
                                                        Some(d) => format!(
                                                            "drained by {}: {}{}",
                                                            d.by.as_deref().unwrap_or("a removed account"),
                                                            d.reason,
                                                            if d.stop_jobs { " (its jobs stopped and queued again)" } else { "" }
                                                        ),
                                                        None if n.takes_jobs => "takes jobs".to_owned(),
                                                        None => "takes no new jobs".to_owned(),
                                                    }}</td>
                                                    <td>
                                                        <div class="gpu-bar" role="img" aria-label=title.clone() title=title>
                                                            <span class="gpu-used" style=share(n.used)></span>
                                                            <span class="gpu-others" style=share(n.others)></span>
                                                        </div>
                                                        <span class="muted">{n.gpus}</span>
                                                    </td>
                                                    <td class="num" data-testid="node-used">{n.used}</td>
                                                    <td class="num" data-testid="node-others">{n.others}</td>
                                                    <td class="num" data-testid="node-free">{n.free}</td>
                                                    <td>
                                                        {n.jobs.iter().map(|id| view! {
                                                            <a href=format!("/jobs/{id}")>{format!("#{id}")}</a>" "
                                                        }).collect_view()}
                                                    </td>
                                                    <td>
                                                        {let name = n.name.clone(); if n.drain.is_some() {
                                                            view! {
                                                                <ActionForm action=resume attr:class="inline-form">
                                                                    <input type="hidden" name="node" value=name/>
                                                                    <button type="submit" class="secondary" data-testid="resume-node">"Resume"</button>
                                                                </ActionForm>
                                                            }.into_any()
                                                        } else {
                                                            view! {
                                                                <ActionForm action=drain attr:class="inline-form">
                                                                    <input type="hidden" name="drain[node]" value=name.clone()/>
                                                                    <input type="text" name="drain[reason]" required maxlength=trainyard_domain::MAX_DRAIN_REASON_CHARS.to_string() placeholder="why (e.g. driver update)" aria-label="why the node is drained" data-testid="drain-reason"/>
                                                                    <label><input type="checkbox" name="drain[stop_jobs]" value="on" data-testid="drain-stop-jobs"
                                                                        on:change=move |ev| stop_jobs.set(event_target_checked(&ev))/>" stop its jobs"</label>
                                                                    <button type="submit" class="secondary" data-testid="drain-node"
                                                                        on:click={
                                                                            let ask = confirm_first(format!(
                                                                                "Drain {name} and stop its running jobs ({})? They are stopped now and queued again, without spending their retries; what they have not saved is lost.",
                                                                                if n.jobs.is_empty() { "none now".to_owned() } else { n.jobs.iter().map(|id| format!("#{id}")).collect::<Vec<_>>().join(", ") }
                                                                            ));
                                                                            move |ev| if stop_jobs.get_untracked() { ask(ev) }
                                                                        }>"Drain"</button>
                                                                </ActionForm>
                                                            }.into_any()
                                                        }}
                                                    </td>
                                                </tr>
                                            }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            }.into_any()
                        }
                    }
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// The accounts, their teams and sessions; an admin ends someone's sessions.
#[component]
fn Users() -> impl IntoView {
    let end = ServerAction::<EndSessions>::new();
    let users = Resource::new(move || end.version().get(), |_| list_users());
    view! {
        <h2>"People"</h2>
        {move || end.value().get().map(|ended| match ended {
            Ok(n) => view! { <p class="muted" role="status" data-testid="sessions-ended">{format!("Ended {n} session(s) and revoked their API tokens.")}</p> }.into_any(),
            Err(e) => view! { <ErrorNote error=e/> }.into_any(),
        })}
        <Suspense fallback=|| view! { <p class="muted">"Loading people…"</p> }>
            {move || Suspend::new(async move {
                match users.await {
                    Ok(list) => view! {
                        <table class="table" data-testid="users">
                            <thead><tr><th>"User"</th><th>"Teams"</th><th>"Last sign-in"</th><th class="num">"Sessions"</th><th class="num">"API tokens"</th><th><span class="visually-hidden">"Actions"</span></th></tr></thead>
                            <tbody>
                                {list.into_iter().map(|u| {
                                    let teams = u.user.teams.iter().map(|t| t.name.clone()).collect::<Vec<_>>().join(", ");
                                    view! {
                                        <tr data-user=u.user.username.clone()>
                                            <td>
                                                {u.user.display_name.clone()} " " <span class="muted">{format!("({})", u.user.username)}</span>
                                                {u.user.is_admin.then(|| view! { " " <span class="badge">"admin"</span> })}
                                            </td>
                                            <td>{teams}</td>
                                            <td>{u.last_login_at.map(format_utc).unwrap_or_else(|| "never".to_owned())}</td>
                                            <td class="num" data-testid="sessions">{u.live_sessions}</td>
                                            <td class="num" data-testid="tokens">{u.live_tokens}</td>
                                            <td>
                                                {(u.live_sessions + u.live_tokens > 0).then(|| {
                                                    let question = format!(
                                                        "Sign {} out everywhere? Their {} session(s) end and their {} API token(s) are revoked; they can sign in again while the identity provider lets them.",
                                                        u.user.username, u.live_sessions, u.live_tokens
                                                    );
                                                    view! {
                                                        <ActionForm action=end attr:class="inline-form">
                                                            <input type="hidden" name="user_id" value=u.user.id/>
                                                            <button type="submit" class="danger" data-testid="end-sessions"
                                                                on:click=confirm_first(question)>"End sessions and tokens"</button>
                                                        </ActionForm>
                                                    }
                                                })}
                                            </td>
                                        </tr>
                                    }
                                }).collect_view()}
                            </tbody>
                        </table>
                    }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Suspense>
    }
}

/// Asks `question` before a form's button sends it: declining leaves the
/// form unsent. For what cannot be undone.
#[allow(unused_variables)]
pub(crate) fn confirm_first(question: String) -> impl Fn(leptos::ev::MouseEvent) {
    move |ev| {
        #[cfg(feature = "hydrate")]
        {
            let yes = web_sys::window()
                .and_then(|w| w.confirm_with_message(&question).ok())
                .unwrap_or(true);
            if !yes {
                ev.prevent_default();
            }
        }
    }
}

/// Text with its `code` spans (between backticks, as templates write
/// them) shown as code; text with an unpaired backtick stays as it is.
pub(crate) fn with_code(text: &str) -> AnyView {
    if text.matches('`').count() % 2 == 1 {
        return text.to_owned().into_any();
    }
    text.split('`')
        .enumerate()
        .map(|(i, part)| {
            if i % 2 == 1 {
                view! { <code>{part.to_owned()}</code> }.into_any()
            } else {
                part.to_owned().into_any()
            }
        })
        .collect_view()
        .into_any()
}

#[component]
pub fn NotFound() -> impl IntoView {
    view! {
        <Title text="Not found"/>
        <section class="not-found" data-testid="not-found">
            <h1>"Page not found"</h1>
            <p>"Nothing lives at this address. It may have moved, or the link may be mistyped."</p>
            <p><a href="/">"Go to the overview"</a></p>
        </section>
    }
}

/// The word for `n` things: "1 node", "2 nodes", "0 nodes".
pub fn plural(n: u64, one: &'static str, many: &'static str) -> &'static str {
    if n == 1 { one } else { many }
}

#[cfg(test)]
mod tests {
    use super::mlflow_link_path;

    #[test]
    fn mlflow_ui_links_open_our_pages() {
        let to = |hash: &str| mlflow_link_path(hash);
        assert_eq!(
            to("#/experiments/3/runs/abc123").as_deref(),
            Some("/experiments/3/runs/abc123")
        );
        assert_eq!(
            to("#/experiments/3/runs/abc123/artifacts").as_deref(),
            Some("/experiments/3/runs/abc123")
        );
        assert_eq!(
            to("#/experiments/3/evaluation-runs?selectedRunUuid=r9").as_deref(),
            Some("/experiments/3/runs/r9")
        );
        assert_eq!(
            to("#/experiments/3/traces?selectedTraceId=tr-1f").as_deref(),
            Some("/experiments/3/traces/tr-1f")
        );
        assert_eq!(
            to("#/experiments/3/models/m-77").as_deref(),
            Some("/models?experiment=3")
        );
        assert_eq!(to("#/models/digits/versions/2").as_deref(), Some("/models"));
        assert_eq!(to("#/experiments/3").as_deref(), Some("/experiments/3"));
        // Nothing that leaves our paths: odd ids and other hashes stay.
        assert_eq!(
            to("#/experiments/3/runs/..%2F..").as_deref(),
            Some("/experiments/3")
        );
        assert_eq!(to("#/experiments/x/runs/a"), None);
        assert_eq!(to("#section"), None);
    }
}
