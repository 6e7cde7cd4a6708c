//! `/admin/audit`: the admins' audit trail, newest first: who made or
//! changed a team, drained a node, ended someone's sessions, stopped or
//! moved someone's job, saved a template, made a node token…, filtered by
//! what and by whom, 200 a page.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::Form;
use leptos_router::hooks::use_query_map;
use trainyard_domain::format_utc;
use trainyard_domain::identity::{AuditAction, AuditEvent};

use crate::error::AppError;
use crate::pages::{AdminOnly, ErrorNote};

/// A page of the trail: older than `before` when given, of one `action`
/// (as stored: `team.change`) and one `actor` (a username) when given.
#[server(endpoint = "audit_page")]
pub async fn audit_page(
    before: Option<i64>,
    action: Option<String>,
    actor: Option<String>,
) -> Result<Vec<AuditEvent>, AppError> {
    let principal = crate::api::caller()?;
    if !principal.user.is_admin {
        crate::error::set_error_status(http::StatusCode::FORBIDDEN);
        return Err(AppError::Forbidden(
            "only admins may read the audit trail".to_owned(),
        ));
    }
    let action = match action.as_deref().map(str::trim).filter(|a| !a.is_empty()) {
        None => None,
        Some(text) => Some(AuditAction::parse_field(text).map_err(|field| {
            crate::error::set_error_status(http::StatusCode::BAD_REQUEST);
            AppError::Invalid(field)
        })?),
    };
    let query = trainyard_store::audit::AuditQuery {
        before,
        action,
        actor: actor.map(|a| a.trim().to_owned()).filter(|a| !a.is_empty()),
    };
    Ok(crate::api::store()?
        .audit_events(&query, trainyard_store::audit::AUDIT_PAGE)
        .await?)
}

#[component]
pub fn AuditPage() -> impl IntoView {
    view! {
        <AdminOnly>
            <AuditTrail/>
        </AdminOnly>
    }
}

/// The most entries a page shows (the store's page).
const PAGE: usize = 200;

#[component]
fn AuditTrail() -> impl IntoView {
    let query = use_query_map();
    let get = move |key: &str| query.read().get(key).filter(|v| !v.trim().is_empty());
    let page = Resource::new(
        move || {
            (
                get("before").and_then(|b| b.parse::<i64>().ok()),
                get("action"),
                get("actor"),
            )
        },
        |(before, action, actor)| audit_page(before, action, actor),
    );
    view! {
        <Title text="Audit trail"/>
        <nav class="crumbs" aria-label="Breadcrumbs"><a href="/admin">"Admin"</a> " / "</nav>
        <section class="page-head"><h1>"Audit trail"</h1></section>
        <p class="muted">
            "What was done to what is not one person's alone, newest first: teams made or changed, nodes drained, resumed or removed, node tokens, sessions ended, jobs stopped by an admin or moved between teams, templates, webhooks, and uploads and runs an admin deleted."
        </p>
        <Form method="GET" action="" attr:class="inline-form" attr:data-testid="audit-filter">
            <label>"What "
                <select name="action" data-testid="audit-action">
                    <option value="" selected=move || get("action").is_none()>"anything"</option>
                    {AuditAction::ALL.into_iter().map(|a| view! {
                        <option value=a.as_str() selected=move || get("action").as_deref() == Some(a.as_str())>{a.words()}</option>
                    }).collect_view()}
                </select>
            </label>
            <label>"Who "
                <input type="text" name="actor" maxlength="250" placeholder="a username"
                    value=move || get("actor").unwrap_or_default() data-testid="audit-actor"/>
            </label>
            <button type="submit" class="secondary">"Show"</button>
        </Form>
        <Transition fallback=|| view! { <p class="muted">"Reading the trail…"</p> }>
            {move || Suspend::new(async move {
                match page.await {
                    Ok(events) if events.is_empty() => view! {
                        <p class="empty" data-testid="audit-empty">"Nothing recorded here yet."</p>
                    }.into_any(),
                    Ok(events) => {
                        let older = (events.len() >= PAGE).then(|| {
                            let last = events.last().map(|e| e.id).unwrap_or_default().to_string();
                            let (action, actor) = (get("action"), get("actor"));
                            let mut pairs = vec![("before", last.as_str())];
                            pairs.extend(action.as_deref().map(|a| ("action", a)));
                            pairs.extend(actor.as_deref().map(|a| ("actor", a)));
                            format!("/admin/audit{}", crate::explorer::query_string(pairs))
                        });
                        view! {
                            <div class="table-wrap">
                                <table class="table" data-testid="audit">
                                    <thead><tr><th>"When"</th><th>"Who"</th><th>"What"</th><th>"To"</th><th>"Detail"</th></tr></thead>
                                    <tbody>
                                        {events.into_iter().map(|e| {
                                            let what = AuditAction::parse(&e.action)
                                                .map(|a| a.words().to_owned())
                                                .unwrap_or_else(|| e.action.clone());
                                            view! {
                                                <tr data-action=e.action.clone()>
                                                    <td>{format_utc(e.time)}</td>
                                                    <td>{e.actor.clone()}</td>
                                                    <td>{what}</td>
                                                    <td>{e.target.clone()}</td>
                                                    <td>{e.detail.clone()}</td>
                                                </tr>
                                            }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                            </div>
                            {older.map(|href| view! { <p><a href=href data-testid="audit-older">"Older"</a></p> })}
                        }.into_any()
                    }
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Transition>
    }
}
