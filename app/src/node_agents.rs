//! Admin → Node agents: the agent tokens of a cluster's GPU nodes, made
//! (their secret shown once, with the command that runs the agent) and
//! revoked from the page, as `POST`/`DELETE
//! /api/trainyard/v1/nodes/{node}/tokens` do.

use leptos::prelude::*;
use trainyard_domain::format_utc;
use trainyard_domain::identity::{ApiToken, NewApiToken};

use crate::error::AppError;
use crate::pages::ErrorNote;

/// The most tokens the page lists.
#[cfg(feature = "ssr")]
const NODE_TOKENS_SHOWN: u64 = 500;

/// A token just made for a node, with its secret.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct MadeNodeToken {
    pub node: String,
    pub made: NewApiToken,
}

/// Every node's live agent tokens, by node (admins).
#[server(endpoint = "list_node_tokens")]
pub async fn list_node_tokens() -> Result<Vec<(String, ApiToken)>, AppError> {
    crate::api::admin_only("see node tokens")?;
    Ok(crate::api::store()?
        .all_node_tokens(NODE_TOKENS_SHOWN)
        .await?)
}

/// A new agent token for `node`, lasting `expires_in_days` days (empty:
/// until revoked); admins.
#[server(endpoint = "make_node_token")]
pub async fn make_node_token(
    node: String,
    #[server(default)] expires_in_days: String,
) -> Result<MadeNodeToken, AppError> {
    let me = crate::api::admin_only("make node tokens")?;
    let node = node.trim().to_owned();
    let days = expires_in_days.trim();
    let request = trainyard_domain::identity::NodeTokenRequest {
        expires_in_days: if days.is_empty() {
            None
        } else {
            Some(days.parse().map_err(|_| {
                crate::error::set_error_status(http::StatusCode::BAD_REQUEST);
                AppError::Invalid(trainyard_domain::FieldError::new(
                    "expires_in_days",
                    format!("`{days}` is not a whole number of days; leave it empty for a token that lasts until revoked"),
                ))
            })?)
        },
    };
    let made = crate::api::jobs()?
        .make_node_token(&me.user, &node, &request)
        .await
        .map_err(|e| match e {
            trainyard_jobs::NodeTokenError::ServersOwn(why) => {
                crate::error::set_error_status(http::StatusCode::CONFLICT);
                AppError::Conflict(why)
            }
            trainyard_jobs::NodeTokenError::Store(e) => e.into(),
        })?;
    Ok(MadeNodeToken { node, made })
}

/// Revokes one of `node`'s agent tokens (admins).
#[server(endpoint = "revoke_node_token")]
pub async fn revoke_node_token(node: String, id: i64) -> Result<(), AppError> {
    let me = crate::api::admin_only("revoke node tokens")?;
    if !crate::api::jobs()?
        .revoke_node_token(&me.user, &node, id)
        .await?
    {
        crate::error::set_error_status(http::StatusCode::NOT_FOUND);
        return Err(AppError::NotFound(format!(
            "node {node} has no live token {id}"
        )));
    }
    Ok(())
}

/// The section of the admin page: make a node's token, see and revoke them.
#[component]
pub fn NodeAgents() -> impl IntoView {
    let make = ServerAction::<MakeNodeToken>::new();
    let revoke = ServerAction::<RevokeNodeToken>::new();
    let tokens = Resource::new(
        move || (make.version().get(), revoke.version().get()),
        |_| list_node_tokens(),
    );
    let made = move || make.value().get().and_then(Result::ok);
    let secret_box = NodeRef::<leptos::html::Input>::new();
    let copied = RwSignal::new("");
    // The address the browser reached this server at, for the command
    // (the node may need another: said beside it).
    let origin = RwSignal::new("https://THIS-SERVER".to_owned());
    Effect::new(move |_| {
        #[cfg(feature = "hydrate")]
        if let Some(here) = web_sys::window().and_then(|w| w.location().origin().ok()) {
            origin.set(here);
        }
    });
    let error = move || {
        make.value()
            .get()
            .and_then(Result::err)
            .or_else(|| revoke.value().get().and_then(Result::err))
    };
    view! {
        <h2>"Node agents"</h2>
        <p class="hint">
            "On a cluster, " <code>"trainyard agent"</code> " runs on each GPU node and sends its GPUs' samples with the node's own token, which writes that node's samples and nothing else. "
            "With the Helm chart's DaemonSet (" <code>"agent.enabled"</code> ") agents sign in with their pod's ServiceAccount, and no token is needed."
        </p>
        {move || made().map(|m| {
            let command = format!(
                "trainyard agent --server {} --node {} --token-file /etc/trainyard/node-token",
                origin.get(),
                m.node
            );
            view! {
                <div class="notice" data-testid="new-node-token">
                    <p>"The token of node " <strong>{m.node.clone()}</strong> ". Copy it now: it is not shown again. On the node, write it to a file only root reads, and run the agent:"</p>
                    <div class="inline-form">
                        <input type="text" readonly class="secret" value=m.made.secret.clone() data-testid="node-token-secret"
                            aria-label="The new node token" node_ref=secret_box/>
                        <button type="button" class="secondary" data-testid="copy-node-token"
                            on:click=move |_| leptos::task::spawn_local(async move {
                                copied.set(crate::account::copy_from(secret_box).await)
                            })>"Copy"</button>
                        <span class="muted" role="status">{move || copied.get()}</span>
                    </div>
                    <code class="block" data-testid="node-agent-command">{command}</code>
                    <p class="hint">"(with the address the node reaches this server at)"</p>
                </div>
            }
        })}
        <ActionForm action=make attr:class="form inline-fields" attr:data-testid="make-node-token">
            <div class="field">
                <label for="node-token-node">"Node"</label>
                <input id="node-token-node" type="text" name="node" required maxlength="253" placeholder="gpu-node-7"/>
                <small>"its name, as --node gives it (the hostname by default)"</small>
            </div>
            <div class="field">
                <label for="node-token-days">"Expires after (days)"</label>
                <input id="node-token-days" type="number" name="expires_in_days" min="1" max="366"/>
                <small>"empty: until revoked (an agent runs unattended)"</small>
            </div>
            <button type="submit">"Make a node token"</button>
        </ActionForm>
        {move || error().map(|e| view! { <div data-testid="node-token-error"><ErrorNote error=e/></div> })}
        <Transition fallback=|| view! { <p class="muted">"Loading node tokens…"</p> }>
            {move || Suspend::new(async move {
                match tokens.await {
                    Ok(list) if list.is_empty() => view! {
                        <p class="empty" data-testid="no-node-tokens">"No node has an agent token."</p>
                    }.into_any(),
                    Ok(list) => view! {
                        <table class="table" data-testid="node-tokens">
                            <thead><tr>
                                <th>"Node"</th><th>"Starts with"</th><th>"Made"</th><th>"Last used"</th><th>"Expires"</th>
                                <th><span class="visually-hidden">"Actions"</span></th>
                            </tr></thead>
                            <tbody>
                                {list.into_iter().map(|(node, t)| {
                                    let question = format!("Revoke this token of node {node}? Its agent stops sending until it has another.");
                                    let (row, link, name) = (node.clone(), format!("/admin/gpus/{node}"), node.clone());
                                    view! {
                                        <tr data-node=row data-token=t.id>
                                            <td><a href=link>{name}</a></td>
                                            <td><code>{format!("{}…", t.prefix)}</code></td>
                                            <td>{format_utc(t.created_at)}</td>
                                            <td>{t.last_used_at.map(format_utc).unwrap_or_else(|| "never".to_owned())}</td>
                                            <td>{t.expires_at.map(format_utc).unwrap_or_else(|| "never".to_owned())}</td>
                                            <td>
                                                <ActionForm action=revoke attr:class="inline-form">
                                                    <input type="hidden" name="node" value=node/>
                                                    <input type="hidden" name="id" value=t.id/>
                                                    <button type="submit" class="danger" data-testid="revoke-node-token"
                                                        on:click=crate::pages::confirm_first(question)>"Revoke"</button>
                                                </ActionForm>
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
        </Transition>
    }
}
