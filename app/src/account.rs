//! Who is signed in (the top bar's menu and the single-user banner) and
//! the personal API tokens page.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::components::A;
use trainyard_domain::format_utc;
use trainyard_domain::identity::Me;

use crate::api::{CreateToken, RevokeToken, list_tokens, whoami};
use crate::pages::ErrorNote;

/// The caller, read once per page load for the top bar.
pub fn provide_me() -> Resource<Option<Me>> {
    Resource::new_blocking(|| (), |_| async { whoami().await.ok().flatten() })
}

/// The top bar and the single-user banner, drawn from one read of the
/// caller.
///
/// One `<Suspense>` reads `me`, once: a resource read under several
/// suspense boundaries of one page now and then never resolves on the
/// server, and the page's answer hangs without a byte
/// (leptos-rs/leptos#4851).
#[component]
pub fn TopBar(me: Resource<Option<Me>>) -> impl IntoView {
    view! {
        <Suspense>
            {move || Suspend::new(async move {
                let me = me.await;
                let admin = me.as_ref().is_some_and(|m| m.user.is_admin);
                let single_user = me.as_ref().is_some_and(|m| m.single_user);
                view! {
                    <header class="topbar">
                        <a class="brand" href="/">"Trainyard"</a>
                        <nav aria-label="Main">
                            <A href="/experiments">"Experiments"</A>
                            <A href="/models">"Models"</A>
                            <A href="/jobs">"Jobs"</A>
                            <A href="/templates">"Templates"</A>
                            <A href="/usage">"Usage"</A>
                            {admin.then(|| view! { <A href="/admin">"Admin"</A> })}
                        </nav>
                        {user_menu(me)}
                        <crate::theme::ThemeToggle/>
                    </header>
                    {single_user.then(|| view! {
                        <aside class="banner" aria-label="Single-user mode" data-testid="single-user-banner">
                            "Single-user mode: there is no sign-in, and everyone who can reach this server acts as its admin. "
                            "Configure your institution's single sign-on (oidc_issuer_url) before sharing it."
                        </aside>
                    })}
                }
                .into_any()
            })}
        </Suspense>
    }
}

/// The signed-in user's name and menu, or the way to sign in.
fn user_menu(me: Option<Me>) -> AnyView {
    match me {
        Some(me) => {
            let teams = me
                .user
                .teams
                .iter()
                .map(|t| t.name.clone())
                .collect::<Vec<_>>()
                .join(", ");
            let title = if teams.is_empty() {
                me.user.username.clone()
            } else {
                format!("{} · teams: {teams}", me.user.username)
            };
            view! {
                <div class="user-menu" data-testid="user-menu">
                    <span class="user-name" title=title data-testid="user-name">
                        {me.user.display_name.clone()}
                        {me.user.is_admin.then(|| view! { <span class="badge">"admin"</span> })}
                    </span>
                    <a href="/settings/tokens">"API tokens"</a>
                    {(!me.single_user).then(|| view! {
                        <form method="post" action="/auth/logout" class="inline-form">
                            <button type="submit" class="link" data-testid="sign-out">"Sign out"</button>
                        </form>
                    })}
                </div>
            }.into_any()
        }
        None => view! { <a class="button" href="/auth/login">"Sign in"</a> }.into_any(),
    }
}

/// `/settings/tokens`: make a token (shown once), see and revoke them.
#[component]
pub fn TokensPage() -> impl IntoView {
    let create = ServerAction::<CreateToken>::new();
    let revoke = ServerAction::<RevokeToken>::new();
    let tokens = Resource::new(
        move || (create.version().get(), revoke.version().get()),
        |_| list_tokens(),
    );
    let made = move || create.value().get().and_then(Result::ok);
    let secret_box = NodeRef::<leptos::html::Input>::new();
    let copied = RwSignal::new("");
    let create_error = move || create.value().get().and_then(Result::err);
    view! {
        <Title text="API tokens"/>
        <section class="page-head"><h1>"API tokens"</h1></section>
        <p class="muted">
            "A token lets the command line and the mlflow client act as you: "
            <code>"trainyard --token …"</code>", or "<code>"MLFLOW_TRACKING_TOKEN"</code>
            " (or as the password of MLFLOW_TRACKING_USERNAME/PASSWORD). Jobs get a token of their own that writes to their run only."
        </p>
        {move || made().map(|made| view! {
            <div class="notice" data-testid="new-token">
                <p>"Your new token " <strong>{made.token.name.clone()}</strong> ". Copy it now: it is not shown again."</p>
                <div class="inline-form">
                    <input type="text" readonly class="secret" value=made.secret.clone() data-testid="token-secret"
                        aria-label="The new token" node_ref=secret_box/>
                    <button type="button" class="secondary" data-testid="copy-token"
                        on:click=move |_| leptos::task::spawn_local(async move {
                            copied.set(copy_from(secret_box).await)
                        })>"Copy"</button>
                    <span class="muted" role="status" data-testid="copy-said">{move || copied.get()}</span>
                </div>
            </div>
        })}
        <ActionForm action=create attr:class="form inline-fields" attr:data-testid="create-token">
            <div class="field">
                <label for="token-name">"Name"</label>
                <input id="token-name" type="text" name="name" required maxlength="100" placeholder="laptop"/>
            </div>
            <div class="field">
                <label for="token-days">"Expires after (days)"</label>
                <input id="token-days" type="number" name="expires_in_days" min="1" max="366" value="90"/>
                <small>"1 to 366 days; every token expires."</small>
            </div>
            <button type="submit">"Make a token"</button>
        </ActionForm>
        {move || create_error().map(|e| view! { <ErrorNote error=e/> })}
        <Transition fallback=|| view! { <p class="muted">"Loading tokens…"</p> }>
            {move || Suspend::new(async move {
                match tokens.await {
                    Ok(list) if list.is_empty() => view! { <p class="empty" data-testid="no-tokens">"No tokens yet."</p> }.into_any(),
                    Ok(list) => view! {
                        <table class="table" data-testid="tokens">
                            <thead><tr><th>"Name"</th><th>"Starts with"</th><th>"Made"</th><th>"Last used"</th><th>"Expires"</th><th><span class="visually-hidden">"Actions"</span></th></tr></thead>
                            <tbody>
                                {list.into_iter().map(|t| view! {
                                    <tr data-token=t.id>
                                        <td>{t.name.clone()}</td>
                                        <td><code>{format!("{}…", t.prefix)}</code></td>
                                        <td>{format_utc(t.created_at)}</td>
                                        <td>{t.last_used_at.map(format_utc).unwrap_or_else(|| "never".to_owned())}</td>
                                        <td>{t.expires_at.map(format_utc).unwrap_or_else(|| "never".to_owned())}</td>
                                        <td>
                                            <ActionForm action=revoke attr:class="inline-form">
                                                <input type="hidden" name="id" value=t.id/>
                                                <button type="submit" class="danger" data-testid="revoke">"Revoke"</button>
                                            </ActionForm>
                                        </td>
                                    </tr>
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

/// Copies the token in `input` to the clipboard; where the page may not
/// (a plain-http address other than this machine), selects it for Ctrl+C.
/// What it did, in words, once the browser has answered.
#[allow(unused_variables)]
pub(crate) async fn copy_from(input: NodeRef<leptos::html::Input>) -> &'static str {
    #[cfg(feature = "hydrate")]
    {
        use wasm_bindgen::JsCast;
        let Some(el) = input.get_untracked() else {
            return "";
        };
        el.select();
        let clipboard = web_sys::window()
            .map(|w| w.navigator())
            .and_then(|n| js_sys::Reflect::get(&n, &"clipboard".into()).ok())
            .filter(|c| !c.is_undefined() && !c.is_null())
            .and_then(|c| c.dyn_into::<web_sys::Clipboard>().ok());
        let Some(c) = clipboard else {
            return "Selected: press Ctrl+C (this address may not use the clipboard).";
        };
        match wasm_bindgen_futures::JsFuture::from(c.write_text(&el.value())).await {
            Ok(_) => "Copied.",
            Err(_) => "Selected: press Ctrl+C (the browser did not let the page copy).",
        }
    }
    #[cfg(not(feature = "hydrate"))]
    {
        ""
    }
}
