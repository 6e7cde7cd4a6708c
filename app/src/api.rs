//! Server functions: the browser's calls into the store, at stable paths
//! (`/api/<name>`) so that scripts and tests can call them too.

use leptos::prelude::*;
use trainyard_domain::identity::{ApiToken, Me, NewApiToken, UserSummary};
#[cfg(feature = "ssr")]
use trainyard_domain::identity::{TokenRequest, Via};
use trainyard_domain::job::{Job, JobEvent};
use trainyard_domain::template::Template;
use trainyard_domain::{ExecutorNodes, Overview};

use crate::error::AppError;

#[cfg(feature = "ssr")]
pub(crate) fn store() -> Result<trainyard_store::Store, AppError> {
    use_context::<trainyard_store::Store>()
        .ok_or_else(|| AppError::Internal("the database is not wired into this request".to_owned()))
}

/// Who is calling: the gate in front of every request put them here.
#[cfg(feature = "ssr")]
pub fn caller() -> Result<trainyard_domain::identity::Principal, AppError> {
    use_context::<http::request::Parts>()
        .and_then(|parts| {
            parts
                .extensions
                .get::<trainyard_domain::identity::Principal>()
                .cloned()
        })
        .ok_or_else(|| AppError::Forbidden("sign in first".to_owned()))
}

#[cfg(feature = "ssr")]
pub(crate) fn admin_only(what: &str) -> Result<trainyard_domain::identity::Principal, AppError> {
    let principal = caller()?;
    if principal.user.is_admin {
        Ok(principal)
    } else {
        crate::error::set_error_status(http::StatusCode::FORBIDDEN);
        Err(AppError::Forbidden(format!("only admins may {what}")))
    }
}

/// The caller, if they came with a browser session (or the single-user
/// mode): a token cannot make or revoke tokens.
#[cfg(feature = "ssr")]
fn from_a_session() -> Result<trainyard_domain::identity::Principal, AppError> {
    let principal = caller()?;
    if principal.has_session() {
        return Ok(principal);
    }
    crate::error::set_error_status(http::StatusCode::FORBIDDEN);
    Err(AppError::Forbidden(
        "tokens are made and revoked in the browser, not with a token".to_owned(),
    ))
}

/// Who the server takes the caller for; None when nobody is signed in.
#[server(endpoint = "whoami")]
pub async fn whoami() -> Result<Option<Me>, AppError> {
    let Ok(principal) = caller() else {
        return Ok(None);
    };
    let single_user = principal.via == Via::Local;
    Ok(Some(Me::of(&principal, single_user)))
}

/// The caller's personal API tokens.
#[server(endpoint = "list_tokens")]
pub async fn list_tokens() -> Result<Vec<ApiToken>, AppError> {
    let principal = caller()?;
    Ok(store()?.api_tokens(principal.user.id).await?)
}

/// Makes a token; its secret is in the answer, and shown once.
#[server(endpoint = "create_token")]
pub async fn create_token(name: String, expires_in_days: String) -> Result<NewApiToken, AppError> {
    let principal = from_a_session()?;
    let days = match expires_in_days.trim() {
        "" => None,
        text => Some(text.parse::<u32>().map_err(|_| {
            AppError::Invalid(trainyard_domain::FieldError::new(
                "expires_in_days",
                "a whole number of days, 1 to 366 (left empty: 90)",
            ))
        })?),
    };
    let request = TokenRequest {
        name,
        expires_in_days: days,
    };
    Ok(store()?
        .create_personal_token(principal.user.id, &request)
        .await?)
}

#[server(endpoint = "revoke_token")]
pub async fn revoke_token(id: i64) -> Result<(), AppError> {
    let principal = from_a_session()?;
    if store()?.revoke_api_token(principal.user.id, id).await? {
        Ok(())
    } else {
        Err(AppError::NotFound(format!("you have no live token {id}")))
    }
}

/// Every account, for admins.
#[server(endpoint = "list_users")]
pub async fn list_users() -> Result<Vec<UserSummary>, AppError> {
    admin_only("list users")?;
    Ok(store()?.users().await?)
}

/// Ends every session of a user (they must sign in again); for admins.
#[server(endpoint = "end_sessions")]
pub async fn end_sessions(user_id: i64) -> Result<u64, AppError> {
    use trainyard_domain::identity::AuditAction;
    let me = admin_only("end other people's sessions")?;
    let store = store()?;
    let ended = store.end_sessions_of(user_id).await?;
    let whose = store
        .users()
        .await?
        .into_iter()
        .find(|u| u.user.id == user_id)
        .map_or_else(|| format!("user {user_id}"), |u| u.user.username);
    store
        .audit(
            &me.user,
            AuditAction::SessionsEnded,
            &whose,
            &format!("{ended} sessions and API tokens ended"),
        )
        .await;
    Ok(ended)
}

/// The registry's webhooks, newest first (the first 100), each with its
/// last deliveries; for admins.
#[server(endpoint = "list_webhooks")]
pub async fn list_webhooks() -> Result<WebhooksShown, AppError> {
    admin_only("see the registry's webhooks")?;
    let store = store()?;
    let (webhooks, more) = store.list_webhooks(0, WEBHOOKS_SHOWN).await?;
    let mut shown = Vec::with_capacity(webhooks.len());
    for webhook in webhooks {
        let deliveries = store
            .webhook_deliveries(&webhook.webhook_id, WEBHOOK_DELIVERIES_SHOWN)
            .await?;
        shown.push((webhook, deliveries));
    }
    Ok(WebhooksShown { shown, more })
}

/// The newest webhooks, each with its last deliveries, and whether there
/// are more than were shown.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct WebhooksShown {
    pub shown: Vec<(
        trainyard_domain::tracking::Webhook,
        Vec<trainyard_domain::tracking::WebhookDelivery>,
    )>,
    pub more: bool,
}

/// The webhooks shown on the admin page, newest first.
pub const WEBHOOKS_SHOWN: u64 = 100;

/// Turns a webhook on or off (off, what waited for it fails, saying so);
/// for admins.
#[server(endpoint = "set_webhook_active")]
pub async fn set_webhook_active(webhook_id: String, active: bool) -> Result<(), AppError> {
    let me = admin_only("turn webhooks on or off")?;
    let status = if active { "ACTIVE" } else { "DISABLED" };
    let store = store()?;
    store
        .update_webhook(
            &webhook_id,
            trainyard_store::webhooks::WebhookChange {
                status: Some(status.to_owned()),
                ..Default::default()
            },
        )
        .await?;
    store
        .audit(
            &me.user,
            trainyard_domain::identity::AuditAction::WebhookChanged,
            &format!("webhook {webhook_id}"),
            &format!("status {status}"),
        )
        .await;
    Ok(())
}

/// The deliveries shown for each webhook on the admin page.
pub const WEBHOOK_DELIVERIES_SHOWN: u64 = 10;

/// Every team with its guaranteed GPUs, weight, GPUs in use and decayed
/// usage; for admins.
#[server(endpoint = "list_teams")]
pub async fn list_teams() -> Result<Vec<trainyard_domain::teams::TeamPolicy>, AppError> {
    admin_only("see the teams' quotas")?;
    Ok(jobs()?.team_policies().await?)
}

/// Sets a team's guaranteed GPUs and fair-share weight (the form's text,
/// read here so that a mistyped box is a field error); for admins.
#[server(endpoint = "set_team")]
pub async fn set_team(id: i64, quota_gpus: String, share: String) -> Result<(), AppError> {
    use trainyard_domain::FieldError;
    use trainyard_domain::teams::TeamPolicyChange;
    let me = admin_only("set teams' quotas and shares")?;
    let mut errors = Vec::new();
    let quota_gpus = match quota_gpus.trim().parse::<u32>() {
        Ok(q) => Some(q),
        Err(_) => {
            errors.push(FieldError::new(
                "quota_gpus",
                format!("`{}` is not a whole number of GPUs", quota_gpus.trim()),
            ));
            None
        }
    };
    let share = match share.trim().parse::<f64>() {
        Ok(s) => Some(s),
        Err(_) => {
            errors.push(FieldError::new(
                "share",
                format!("`{}` is not a number", share.trim()),
            ));
            None
        }
    };
    let change = TeamPolicyChange { quota_gpus, share };
    if let Err(more) = change.check() {
        errors.extend(more);
    }
    if !errors.is_empty() {
        return Err(AppError::Fields(errors));
    }
    let jobs = jobs()?;
    let saved = jobs.store().set_team_policy(id, &change).await?;
    jobs.team_changed(&me.user, &saved, false).await;
    Ok(())
}

/// Makes a team before its group's first member signs in (the form's
/// text, read here so that a mistyped box is a field error); for admins.
#[server(endpoint = "create_team")]
pub async fn create_team(name: String, quota_gpus: String, share: String) -> Result<(), AppError> {
    use trainyard_domain::FieldError;
    use trainyard_domain::teams::{NewTeam, TeamPolicyChange};
    let me = admin_only("make teams")?;
    let mut errors = Vec::new();
    let quota_gpus = match quota_gpus.trim() {
        "" => None,
        text => match text.parse::<u32>() {
            Ok(q) => Some(q),
            Err(_) => {
                errors.push(FieldError::new(
                    "quota_gpus",
                    format!("`{text}` is not a whole number of GPUs"),
                ));
                None
            }
        },
    };
    let share = match share.trim() {
        "" => None,
        text => match text.parse::<f64>() {
            Ok(s) => Some(s),
            Err(_) => {
                errors.push(FieldError::new(
                    "share",
                    format!("`{text}` is not a number"),
                ));
                None
            }
        },
    };
    let new = NewTeam {
        name,
        quota_gpus,
        share,
    };
    let name = match new.check() {
        Ok(name) => Some(name),
        Err(more) => {
            errors.extend(more);
            None
        }
    };
    let Some(name) = name.filter(|_| errors.is_empty()) else {
        return Err(AppError::Fields(errors));
    };
    let jobs = jobs()?;
    let made = jobs
        .store()
        .create_team(&name, &TeamPolicyChange { quota_gpus, share })
        .await?;
    jobs.team_changed(&me.user, &made, true).await;
    Ok(())
}

/// The caller's way back into their work: their latest runs and jobs.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Recent {
    pub runs: Vec<trainyard_domain::RecentRun>,
    pub jobs: Vec<Job>,
}

/// How many runs and jobs the overview lists.
pub const RECENT: u64 = 8;

#[server(endpoint = "get_recent")]
pub async fn get_recent() -> Result<Recent, AppError> {
    let me = caller()?;
    let store = store()?;
    let runs = store.recent_runs(me.user.id, RECENT).await?;
    let mine = trainyard_store::JobsOf::for_user(&me.user, false);
    let jobs = store
        .find_jobs(&[], RECENT, &mine)
        .await?
        .into_iter()
        .map(|r| r.job)
        .collect();
    Ok(Recent { runs, jobs })
}

#[server(endpoint = "get_overview")]
pub async fn get_overview() -> Result<Overview, AppError> {
    let me = caller()?;
    let mut overview = store()?
        .overview(&trainyard_store::Viewer::of(&me.user))
        .await?;
    overview.admin = me.user.is_admin;
    // Where jobs run, as the executor has them now.
    if let Some((nodes, gpus)) = jobs()?.node_figures().await {
        overview.nodes = nodes;
        overview.gpus = gpus;
    }
    Ok(overview)
}

/// Where jobs run: the executor's nodes and who holds their GPUs; for
/// admins.
#[server(endpoint = "node_use")]
pub async fn node_use() -> Result<ExecutorNodes, AppError> {
    admin_only("see the nodes")?;
    Ok(jobs()?.nodes().await?)
}

/// What the admin page's drain form sends.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct DrainForm {
    pub node: String,
    #[serde(default)]
    pub reason: String,
    /// A ticked box: what runs there is stopped and queued again.
    #[serde(default)]
    pub stop_jobs: String,
}

/// Drains a node: it takes no new jobs (and, asked, what runs there is
/// stopped and queued again, its retries untouched); for admins.
#[server(endpoint = "drain_node")]
pub async fn drain_node(drain: DrainForm) -> Result<(), AppError> {
    let me = admin_only("drain nodes")?;
    let stop_jobs = !drain.stop_jobs.trim().is_empty();
    jobs()?
        .drain_node(&drain.node, &drain.reason, stop_jobs, &me.user)
        .await?;
    Ok(())
}

/// Ends a node's drain; for admins.
#[server(endpoint = "resume_node")]
pub async fn resume_node(node: String) -> Result<(), AppError> {
    let me = admin_only("resume drained nodes")?;
    if !jobs()?.resume_node(&node, &me.user).await? {
        return Err(
            trainyard_store::StoreError::NotFound(format!("node {node:?} is not drained")).into(),
        );
    }
    Ok(())
}

#[cfg(feature = "ssr")]
pub(crate) fn jobs() -> Result<trainyard_jobs::Jobs, AppError> {
    use_context::<trainyard_jobs::Jobs>().ok_or_else(|| {
        AppError::Internal("the job service is not wired into this request".to_owned())
    })
}

/// The job service, the caller and job `id`, which the caller may change
/// (its owner, or an admin).
#[cfg(feature = "ssr")]
async fn job_to_change(
    id: i64,
) -> Result<
    (
        trainyard_jobs::Jobs,
        trainyard_domain::identity::User,
        trainyard_store::JobRecord,
    ),
    AppError,
> {
    let jobs = jobs()?;
    let user = caller()?.user;
    let record = jobs
        .store()
        .job_as(&user, id, trainyard_store::Access::Change)
        .await?;
    Ok((jobs, user, record))
}

/// The most jobs the jobs page lists.
pub const JOBS_SHOWN: usize = 200;

/// The newest jobs, with their state, queue position and reason: the
/// caller's own, or (`all`) all they may see; in one state, when given
/// (`QUEUED`, or `RUNNING` for those starting too).
#[server(endpoint = "list_job_page")]
pub async fn list_job_page(
    all: bool,
    #[server(default)] state: String,
) -> Result<JobList, AppError> {
    let principal = caller()?;
    let whose = trainyard_store::JobsOf::for_user(&principal.user, all);
    let states = match state.as_str() {
        "" => Vec::new(),
        "RUNNING" => vec![
            trainyard_domain::JobState::Starting,
            trainyard_domain::JobState::Running,
        ],
        other => match trainyard_domain::JobState::parse(other) {
            Some(state) => vec![state],
            None => {
                return Err(AppError::Invalid(trainyard_domain::FieldError::new(
                    "state",
                    format!(
                        "`{other}` is not a job state; give one of {}",
                        trainyard_domain::JobState::ALL
                            .map(|s| s.as_str())
                            .join(", ")
                    ),
                )));
            }
        },
    };
    let found = store()?
        .find_jobs(&states, JOBS_SHOWN as u64, &whose)
        .await?;
    let deletable = found
        .iter()
        .filter(|r| r.job.state.is_terminal() && principal.user.can_change(r.owner()))
        .map(|r| r.job.id)
        .collect();
    Ok(JobList {
        jobs: found.into_iter().map(|r| r.job).collect(),
        deletable,
    })
}

/// The jobs page's list, and which of its jobs the caller may delete (the
/// ended ones they own, or any ended one for an admin).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobList {
    pub jobs: Vec<Job>,
    pub deletable: Vec<i64>,
}

/// What deleting several jobs at once did: each job deleted, or refused
/// with the reason (one that has not ended, or that a job resumes from).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DeletedJobs {
    pub deleted: Vec<i64>,
    pub refused: Vec<(i64, String)>,
}

/// Deletes ended jobs for good, as `delete_job` each, from the jobs list
/// (at most a page of it at a time). One refused leaves the others.
#[server(endpoint = "delete_jobs")]
pub async fn delete_jobs(#[server(default)] ids: Vec<i64>) -> Result<DeletedJobs, AppError> {
    let field =
        |message: String| AppError::Invalid(trainyard_domain::FieldError::new("ids", message));
    if ids.is_empty() {
        return Err(field(
            "choose the jobs to delete: tick them in the list".to_owned(),
        ));
    }
    if ids.len() > JOBS_SHOWN {
        return Err(field(format!(
            "{} jobs were chosen; delete at most {JOBS_SHOWN} at once",
            ids.len()
        )));
    }
    let mut ids = ids;
    ids.sort_unstable();
    ids.dedup();
    let mut done = DeletedJobs::default();
    for id in ids {
        let deleted = async {
            let (jobs, user, record) = job_to_change(id).await?;
            jobs.delete_job(&record, &user).await?;
            Ok::<_, AppError>(())
        };
        match deleted.await {
            Ok(()) => done.deleted.push(id),
            Err(AppError::Invalid(e)) => done.refused.push((id, e.message)),
            Err(e) => done.refused.push((id, e.to_string())),
        }
    }
    // Each refusal set the response's status to its own; the call as a
    // whole did what it could, and says what it could not. Cleared, not
    // set to 200: a form posted without JavaScript is answered with a
    // redirect back, which a status set here would replace.
    if let Some(response) = use_context::<leptos_axum::ResponseOptions>() {
        response
            .0
            .write()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
            .status = None;
    }
    // Without JavaScript, only an error reaches the page it goes back to:
    // the refusals are said as one.
    if crate::error::plain_form_post() && !done.refused.is_empty() {
        let kept: Vec<String> = done
            .refused
            .iter()
            .map(|(id, why)| format!("job {id} was kept: {why}"))
            .collect();
        return Err(AppError::Conflict(format!(
            "{} deleted; {}",
            match done.deleted.len() {
                1 => "1 job was".to_owned(),
                n => format!("{n} jobs were"),
            },
            kept.join("; ")
        )));
    }
    Ok(done)
}

/// A job's page: the job and its timeline.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct JobDetail {
    pub job: Job,
    pub events: Vec<JobEvent>,
    /// The teams the caller may file the job under now (empty: it has
    /// ended, or it is not theirs to change).
    pub team_choices: Vec<String>,
    /// Whether the caller may cancel it or run it again (its owner or an
    /// admin; a teammate sees it only).
    pub yours: bool,
    /// The checkpoints it left, while they are kept for a job to resume
    /// from.
    pub checkpoints: Option<trainyard_domain::job::KeptCheckpoints>,
    /// Whether the caller may resume a job of their own from them (its
    /// owner alone: an admin's Resume runs the job as its owner's).
    pub resumable: bool,
}

#[server(endpoint = "get_job")]
pub async fn get_job(id: i64) -> Result<JobDetail, AppError> {
    let store = store()?;
    let user = caller()?.user;
    let record = store
        .job_as(&user, id, trainyard_store::Access::Read)
        .await?;
    let events = store.job_events(id).await?;
    let yours = store
        .job_as(&user, id, trainyard_store::Access::Change)
        .await
        .is_ok();
    let may_change = yours && !record.job.state.is_terminal();
    let team_choices = if !may_change {
        Vec::new()
    } else if user.is_admin {
        store
            .team_quotas()
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect()
    } else {
        user.teams.iter().map(|t| t.name.clone()).collect()
    };
    let checkpoints = store.kept_checkpoints(id).await?;
    let resumable = checkpoints.is_some() && record.owner_id == Some(user.id);
    Ok(JobDetail {
        job: record.job,
        events,
        team_choices,
        yours,
        checkpoints,
        resumable,
    })
}

/// Deletes the checkpoints an ended job keeps (its owner, or an admin).
#[server(endpoint = "delete_job_checkpoints")]
pub async fn delete_job_checkpoints(id: i64) -> Result<(), AppError> {
    let (jobs, user, record) = job_to_change(id).await?;
    if !jobs.delete_checkpoints(&record, &user).await? {
        return Err(AppError::NotFound(format!(
            "job {id} keeps no checkpoints any more (deleted, expired or resumed from)"
        )));
    }
    Ok(())
}

/// Files a job that has not ended under another team (its owner: one of
/// theirs; an admin: any).
#[server(endpoint = "move_job_team")]
pub async fn move_job_team(id: i64, team: String) -> Result<(), AppError> {
    let (jobs, user, record) = job_to_change(id).await?;
    jobs.set_team(&record, &team, &user).await?;
    Ok(())
}

/// How much of a job's log its page shows when it opens.
pub const LOG_TAIL_BYTES: u64 = 64 * 1024;

/// The end of a job's log as its page opens.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct LogTail {
    /// The last [`LOG_TAIL_BYTES`] of the current attempt's log …
    pub text: String,
    /// … and where the log ends: the live stream goes on from here.
    pub end: u64,
}

#[server(endpoint = "get_log_tail")]
pub async fn get_log_tail(id: i64) -> Result<LogTail, AppError> {
    let jobs = jobs()?;
    let record = jobs
        .store()
        .job_as(&caller()?.user, id, trainyard_store::Access::Read)
        .await?;
    let (text, end) = jobs
        .log_tail(id, record.job.attempt, LOG_TAIL_BYTES)
        .await
        .map_err(|e| AppError::Internal(format!("could not read the job's log: {e}")))?;
    Ok(LogTail { text, end })
}

#[server(endpoint = "cancel_job")]
pub async fn cancel_job(id: i64) -> Result<(), AppError> {
    let (jobs, user, record) = job_to_change(id).await?;
    jobs.cancel(id, record.someone_else(&user)).await?;
    Ok(())
}

/// Deletes an ended job for good (its owner, or an admin); the browser
/// goes to the jobs list.
#[server(endpoint = "delete_job")]
pub async fn delete_job(id: i64) -> Result<(), AppError> {
    let (jobs, user, record) = job_to_change(id).await?;
    jobs.delete_job(&record, &user).await?;
    leptos_axum::redirect("/jobs");
    Ok(())
}

/// Submits a finished job again; the browser goes to the new job's page.
/// A new job with the same spec and files; `resume`: from the checkpoints
/// this one left.
#[server(endpoint = "retry_job")]
pub async fn retry_job(id: i64, #[server(default)] resume: bool) -> Result<i64, AppError> {
    let (jobs, user, record) = job_to_change(id).await?;
    let record = jobs.retry(id, record.acted_on_by(&user), resume).await?;
    leptos_axum::redirect(&format!("/jobs/{}", record.job.id));
    Ok(record.job.id)
}

#[server(endpoint = "get_template")]
pub async fn get_template(slug: String) -> Result<Option<Template>, AppError> {
    Ok(store()?.get_template(&slug).await?)
}

#[server(endpoint = "list_template_specs")]
pub async fn list_template_specs() -> Result<Vec<Template>, AppError> {
    Ok(store()?.templates().await?)
}

/// Each template that could never start here as it stands, with why (what
/// it asks beyond the largest node): the catalog and the form say so before
/// anyone submits, and the form's fields can ask for less.
#[server(endpoint = "templates_too_big")]
pub async fn templates_too_big() -> Result<Vec<(String, String)>, AppError> {
    let jobs = jobs()?;
    let mut slugs = Vec::new();
    let mut asks = Vec::new();
    for t in jobs.store().templates().await? {
        let r = &t.spec.resources;
        let Ok(memory_mib) = trainyard_domain::job::parse_memory(&r.memory) else {
            continue;
        };
        slugs.push(t.slug);
        asks.push(trainyard_jobs::Ask {
            gpus: r.gpus,
            cpu_millis: (r.cpus * 1000.0).round() as u32,
            memory_mib,
        });
    }
    let fits = jobs.fits(&asks).await;
    Ok(slugs
        .into_iter()
        .zip(fits)
        .filter_map(|(slug, fit)| {
            let errors = fit.err()?;
            let why: Vec<String> = errors.into_iter().map(|e| e.message).collect();
            Some((slug, why.join("; ")))
        })
        .collect())
}

/// The submit form as posted: every field as text, read here, so an empty
/// or mistyped box becomes a field error rather than a failed call.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct SubmitForm {
    pub name: String,
    #[serde(default)]
    pub experiment: String,
    /// A template's slug, or empty for a command of one's own.
    #[serde(default)]
    pub template: String,
    #[serde(default)]
    pub command: String,
    /// A template's parameters by name.
    #[serde(default)]
    pub hp: std::collections::BTreeMap<String, String>,
    /// For a command of one's own: `name=value`, one per line.
    #[serde(default)]
    pub hyperparameters: String,
    #[serde(default)]
    pub gpus: String,
    #[serde(default)]
    pub cpus: String,
    #[serde(default)]
    pub memory: String,
    #[serde(default)]
    pub max_runtime: String,
    #[serde(default)]
    pub retries: String,
    #[serde(default)]
    pub priority: String,
    /// An uploaded project archive's id.
    #[serde(default)]
    pub project: String,
    /// Dataset names, separated by commas.
    #[serde(default)]
    pub datasets: String,
    /// The team its GPUs count against (for someone in several).
    #[serde(default)]
    pub team: String,
    /// A ticked box: the job never borrows GPUs, so it is never preempted.
    #[serde(default)]
    pub never_preempt: String,
    /// A ticked box: the id of the job whose kept checkpoints it starts
    /// from.
    #[serde(default)]
    pub resume_from: String,
}

/// Submits the form; on success the browser goes to the job's page (also
/// without JavaScript: the answer is a redirect).
#[server(endpoint = "submit_job")]
pub async fn submit_job(form: SubmitForm) -> Result<i64, AppError> {
    let jobs = jobs()?;
    let template = match form.template.trim() {
        "" => None,
        slug => jobs.store().get_template(slug).await?,
    };
    let spec = crate::submit::spec_from_form(&form, template.as_ref().map(|t| &t.spec))
        .map_err(|fields| AppError::from(trainyard_jobs::SubmitError::Invalid(fields)))?;
    let record = jobs.submit(spec, &caller()?.user).await?;
    leptos_axum::redirect(&format!("/jobs/{}", record.job.id));
    Ok(record.job.id)
}

/// A template as text to edit (pretty JSON, which is YAML too), or an
/// example for a new one; and whether it ships with Trainyard.
#[server(endpoint = "template_text")]
pub async fn template_text(slug: String) -> Result<Option<(bool, String)>, AppError> {
    if slug.is_empty() {
        return Ok(Some((false, NEW_TEMPLATE.to_owned())));
    }
    let Some(template) = store()?.get_template(&slug).await? else {
        return Ok(None);
    };
    let text = serde_json::to_string_pretty(&template.spec)
        .map_err(|e| AppError::Internal(e.to_string()))?;
    // It is rendered inside a <textarea>, whose text the framework does
    // not escape: `<` (only ever inside JSON strings) is written as the
    // JSON escape `\u003c`, which reads back as the same text.
    Ok(Some((template.builtin, text.replace('<', "\\u003c"))))
}

/// What the editor starts from for a new template.
pub const NEW_TEMPLATE: &str = "title: My training recipe
description: What it trains, on what data, and what it logs.
command: python train.py --lr {lr} --epochs {epochs}
parameters:
  lr: {type: float, default: 0.001, min: 0.000001, max: 1, help: learning rate}
  epochs: {type: int, default: 10, min: 1, max: 1000}
resources: {gpus: 1, cpus: 4, memory: 16Gi}
data: the project archive uploaded with the job
requirements: [mlflow-skinny==3.17.*]
max_runtime: 12h
";

/// Saves a template an admin wrote; the browser goes back to the catalog.
#[server(endpoint = "save_template")]
pub async fn save_template(
    slug: String,
    text: String,
    #[server(default)] new: bool,
) -> Result<String, AppError> {
    let me = admin_only("write templates")?;
    // A new template (or a shipped one saved under another name) does not
    // replace one that has its name.
    if new && store()?.get_template(slug.trim()).await?.is_some() {
        return Err(AppError::Conflict(format!(
            "a template named `{}` exists already; choose another name, or edit that one (/templates/{}/edit)",
            slug.trim(),
            slug.trim()
        )));
    }
    let template = jobs()?
        .save_template(slug.trim(), text.as_bytes(), &me.user)
        .await?;
    leptos_axum::redirect("/templates");
    Ok(template.slug)
}

#[server(endpoint = "delete_template")]
pub async fn delete_template(slug: String) -> Result<(), AppError> {
    let me = admin_only("delete templates")?;
    jobs()?.delete_template(&slug, &me.user).await?;
    leptos_axum::redirect("/templates");
    Ok(())
}
