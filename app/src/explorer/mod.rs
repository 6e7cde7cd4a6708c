//! The experiment explorer: the experiments list, an experiment's runs
//! table, a run's page and the comparison of runs. Every view keeps its state
//! in the URL, so a link shows someone else the same thing.

pub mod api;
pub(crate) mod chart;
mod compare;
pub mod datasets;
pub mod models;
mod run;
pub mod scorers;
mod table;

pub use chart::{ChartOptions, Groups, build_chart};
pub use compare::ComparePage;
pub use run::RunPage;
pub use table::ExperimentPage;

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use trainyard_domain::format_utc;

use crate::pages::ErrorNote;
use api::{ArchiveExperiment, CreateExperiment, RenameExperiment, list_experiments};

/// A query string (`?a=1&b=x%20y`, or empty) of pairs in order. Only
/// RFC 3986's unreserved characters stay as they are, the same on the
/// server and in the browser.
pub(crate) fn query_string<'a>(pairs: impl IntoIterator<Item = (&'a str, &'a str)>) -> String {
    let mut out = String::new();
    for (key, value) in pairs {
        out.push(if out.is_empty() { '?' } else { '&' });
        escape_into(&mut out, key);
        out.push('=');
        escape_into(&mut out, value);
    }
    out
}

fn escape_into(out: &mut String, text: &str) {
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                out.push(byte as char)
            }
            other => out.push_str(&format!("%{other:02X}")),
        }
    }
}

/// The list without `key` if it held it, else with it added at the end.
pub(crate) fn toggled(mut list: Vec<String>, key: String) -> Vec<String> {
    match list.iter().position(|k| *k == key) {
        Some(i) => {
            list.remove(i);
        }
        None => list.push(key),
    }
    list
}

/// The `:experiment` of the route, or -1 (no experiment) when it is not a
/// number.
pub(crate) fn experiment_param() -> Memo<i64> {
    let params = use_params_map();
    Memo::new(move |_| {
        params
            .read()
            .get("experiment")
            .and_then(|e| e.parse::<i64>().ok())
            .unwrap_or(-1)
    })
}

/// The badge of a run status.
pub(crate) fn status_class(status: &str) -> &'static str {
    match status {
        "RUNNING" => "badge badge-run",
        "FINISHED" => "badge badge-ok",
        "FAILED" => "badge badge-bad",
        "KILLED" => "badge badge-off",
        _ => "badge badge-wait",
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn query_strings_escape_all_but_unreserved_characters() {
        assert_eq!(super::query_string([]), "");
        assert_eq!(
            super::query_string([("q", "params.lr = '0.1'"), ("col", "metrics.a/b&c")]),
            "?q=params.lr%20%3D%20%270.1%27&col=metrics.a%2Fb%26c"
        );
        assert_eq!(super::query_string([("k", "ü")]), "?k=%C3%BC");
    }
}

/// `/experiments` (`?archived=1` for the archived ones): run counts, last
/// activity; create, rename, archive and restore.
#[component]
pub fn ExperimentsPage() -> impl IntoView {
    let query = use_query_map();
    let archived = move || query.read().get("archived").is_some_and(|v| v == "1");
    let create = ServerAction::<CreateExperiment>::new();
    let rename = ServerAction::<RenameExperiment>::new();
    let archive = ServerAction::<ArchiveExperiment>::new();
    let experiments = Resource::new(
        move || {
            (
                archived(),
                create.version().get(),
                rename.version().get(),
                archive.version().get(),
            )
        },
        |(archived, ..)| list_experiments(archived),
    );
    let create_error = move || create.value().get().and_then(Result::err);
    let change_error = move || {
        rename
            .value()
            .get()
            .and_then(Result::err)
            .or_else(|| archive.value().get().and_then(Result::err))
    };
    view! {
        <Title text="Experiments"/>
        <section class="page-head">
            <h1>"Experiments"</h1>
            <nav class="tabs" aria-label="Which experiments">
                <a href="/experiments" aria-current=move || (!archived()).then_some("page")>"Active"</a>
                <a href="/experiments?archived=1" data-testid="archived-tab"
                    aria-current=move || archived().then_some("page")>"Archived"</a>
            </nav>
        </section>
        <Show when=move || !archived()>
            <ActionForm action=create attr:class="inline-form" attr:data-testid="create-experiment">
                <label for="experiment-name">"New experiment"</label>
                <input id="experiment-name" type="text" name="name" required maxlength="500"
                    placeholder="e.g. resnet-cifar10" autocomplete="off"
                    aria-invalid=move || create_error().and_then(|e| e.field().map(|_| "true"))/>
                <button type="submit">"Create"</button>
            </ActionForm>
        </Show>
        {move || create_error().map(|e| view! { <ErrorNote error=e/> })}
        {move || change_error().map(|e| view! { <ErrorNote error=e/> })}
        <Transition fallback=|| view! { <p class="muted">"Loading experiments…"</p> }>
            {move || Suspend::new(async move {
                match experiments.await {
                    Ok(list) if list.is_empty() && archived() => view! {
                        <p class="empty" data-testid="experiments-empty">
                            "Nothing is archived. Archiving an experiment hides it and its runs from searches; it can be restored here."
                        </p>
                    }.into_any(),
                    Ok(list) if list.is_empty() => view! {
                        <p class="empty" data-testid="experiments-empty">
                            "No experiments yet. Create one above, or let the mlflow client create it: "
                            <code>"mlflow.set_experiment(\"my-experiment\")"</code>
                        </p>
                    }.into_any(),
                    Ok(list) => view! {
                        <table class="table" data-testid="experiments">
                            <thead><tr>
                                <th>"Name"</th><th class="num">"Runs"</th><th>"Last activity"</th><th><span class="visually-hidden">"Actions"</span></th>
                            </tr></thead>
                            <tbody>
                                // Keyed by id and name: a row keeps its own
                                // state (an open rename box) when others
                                // leave, and a renamed one starts closed.
                                <For each=move || list.clone() key=|e| (e.id, e.name.clone()) let:e>{
                                    let id = e.id;
                                    let is_default = id == 0;
                                    let name = e.name.clone();
                                    view! {
                                        <tr data-experiment=e.name.clone()>
                                            <td><a href=format!("/experiments/{id}")>{e.name.clone()}</a></td>
                                            <td class="num">{e.runs}</td>
                                            <td>{format_utc(e.last_activity)}</td>
                                            <td class="row-actions">
                                                {(!is_default && !archived()).then(|| view! {
                                                    <details class="rename">
                                                        <summary>"Rename"</summary>
                                                        <ActionForm action=rename attr:class="inline-form">
                                                            <input type="hidden" name="id" value=id/>
                                                            <input type="text" name="name" required maxlength="500"
                                                                value=name.clone() aria-label="New name"/>
                                                            <button type="submit">"Save"</button>
                                                        </ActionForm>
                                                    </details>
                                                    <ActionForm action=archive attr:class="inline-form">
                                                        <input type="hidden" name="id" value=id/>
                                                        <input type="hidden" name="archived" value="true"/>
                                                        <button type="submit" class="secondary" data-testid="archive">"Archive"</button>
                                                    </ActionForm>
                                                })}
                                                {archived().then(|| view! {
                                                    <ActionForm action=archive attr:class="inline-form">
                                                        <input type="hidden" name="id" value=id/>
                                                        <input type="hidden" name="archived" value="false"/>
                                                        <button type="submit" class="secondary" data-testid="restore">"Restore"</button>
                                                    </ActionForm>
                                                })}
                                            </td>
                                        </tr>
                                    }
                                    .into_any()
                                }</For>
                            </tbody>
                        </table>
                    }.into_any(),
                    Err(e) => view! { <ErrorNote error=e/> }.into_any(),
                }
            })}
        </Transition>
    }
    .into_any()
}
