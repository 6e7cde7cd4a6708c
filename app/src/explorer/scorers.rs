//! MLflow 3's registered scorers in the explorer: the judges kept in an
//! experiment, each with what it checks, the model it asks, and its earlier
//! versions.

use leptos::prelude::*;
use leptos_meta::Title;
use serde::{Deserialize, Serialize};
use trainyard_domain::format_utc;

use crate::error::AppError;
use crate::pages::ErrorNote;

#[cfg(feature = "ssr")]
use crate::api::{caller, store};

/// Most versions the page reads, all scorers together.
pub const VERSIONS_SHOWN: u64 = 2000;
/// Longest text of what a scorer checks sent to the page, in characters.
#[cfg(feature = "ssr")]
const CHECKS_CHARS: usize = 600;

/// One version as the page shows it; the server reads the serialized
/// scorer, so the wasm bundle takes no JSON parser.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScorerRow {
    pub version: i32,
    pub registered: i64,
    /// `Guidelines`, `make_judge`, a built-in scorer's class, …
    pub kind: String,
    pub model: Option<String>,
    /// Its instructions or guidelines, cut to a cell.
    pub checks: String,
}

/// A scorer: its newest version first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ScorerGroup {
    pub name: String,
    pub versions: Vec<ScorerRow>,
}

/// The experiment's name and its scorers by name; true when versions were
/// left out.
#[server(endpoint = "experiment_scorers")]
pub async fn experiment_scorers(
    experiment_id: i64,
) -> Result<(String, Vec<ScorerGroup>, bool), AppError> {
    let user = caller()?.user;
    let store = store()?;
    store
        .experiment_as(&user, experiment_id, trainyard_store::Access::Read)
        .await?;
    let experiment = store.get_experiment(experiment_id).await?;
    let found = store
        .experiment_scorer_versions(experiment_id, VERSIONS_SHOWN + 1)
        .await?;
    let more = found.len() as u64 > VERSIONS_SHOWN;
    let mut groups: Vec<ScorerGroup> = Vec::new();
    for v in found.iter().take(VERSIONS_SHOWN as usize) {
        let row = summary(v.version, v.creation_time, &v.serialized);
        match groups.last_mut() {
            Some(g) if g.name == v.name => g.versions.push(row),
            _ => groups.push(ScorerGroup {
                name: v.name.clone(),
                versions: vec![row],
            }),
        }
    }
    Ok((experiment.name, groups, more))
}

/// What a serialized scorer is, asks and checks, as people read it.
#[cfg(feature = "ssr")]
fn summary(version: i32, registered: i64, serialized: &str) -> ScorerRow {
    use serde_json::Value;
    let value: Value = serde_json::from_str(serialized).unwrap_or(Value::Null);
    let part = |name: &str| value.get(name).filter(|v| v.is_object());
    let text = |v: Option<&Value>| -> Option<String> {
        match v? {
            Value::String(s) => Some(s.clone()),
            Value::Array(items) => Some(
                items
                    .iter()
                    .map(|i| {
                        i.as_str()
                            .map(str::to_owned)
                            .unwrap_or_else(|| i.to_string())
                    })
                    .collect::<Vec<_>>()
                    .join(" · "),
            ),
            Value::Null => None,
            other => Some(other.to_string()),
        }
    };
    let (kind, data) = if let Some(data) = part("instructions_judge_pydantic_data") {
        ("make_judge".to_owned(), Some(data))
    } else if let Some(data) = part("builtin_scorer_pydantic_data") {
        let class = value
            .get("builtin_scorer_class")
            .and_then(Value::as_str)
            .unwrap_or("built-in");
        (class.to_owned(), Some(data))
    } else if let Some(data) = part("third_party_scorer_data") {
        ("third-party".to_owned(), Some(data))
    } else if let Some(data) = part("memory_augmented_judge_data") {
        ("MemAlign judge".to_owned(), data.get("base_judge"))
    } else if part("ensemble_scorer_data").is_some() {
        ("ensemble".to_owned(), None)
    } else {
        ("scorer".to_owned(), None)
    };
    let inner = |key: &str| {
        data.and_then(|d| {
            d.get(key).or_else(|| {
                d.get("instructions_judge_pydantic_data")
                    .and_then(|i| i.get(key))
            })
        })
    };
    // A built-in scorer's instructions are its own template; the
    // guidelines are what its maker wrote.
    let checks = text(inner("guidelines"))
        .or_else(|| text(inner("instructions")))
        .or_else(|| text(value.get("description")))
        .unwrap_or_default();
    let checks = match checks.char_indices().nth(CHECKS_CHARS) {
        Some((at, _)) => format!("{}…", &checks[..at]),
        None => checks,
    };
    ScorerRow {
        version,
        registered,
        kind,
        model: text(inner("model")),
        checks,
    }
}

#[component]
fn Version(row: ScorerRow) -> impl IntoView {
    view! {
        <span class="muted">{row.kind}</span>
        {row.model.map(|m| view! { <span class="muted">" · "</span><code>{m}</code> })}
        <p class="checks">{if row.checks.is_empty() { "–".to_owned() } else { row.checks }}</p>
    }
}

/// `/experiments/:experiment/scorers`: the judges registered in the
/// experiment.
#[component]
pub fn ScorersPage() -> impl IntoView {
    let experiment = super::experiment_param();
    // Blocking, so that the scorers of no experiment answer 404.
    let found = Resource::new_blocking(move || experiment.get(), experiment_scorers);
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading scorers…"</p> }>
            {move || found.get().map(|f| match f {
                Ok((name, groups, more)) => {
                    let id = experiment.get();
                    view! {
                        <Title text=format!("Scorers of {name}")/>
                        <nav class="crumbs" aria-label="Breadcrumbs">
                            <a href="/experiments">"Experiments"</a> " / "
                            <a href=format!("/experiments/{id}")>{name.clone()}</a> " / "
                        </nav>
                        <section class="page-head"><h1>"Scorers"</h1></section>
                        {if groups.is_empty() {
                            view! {
                                <p class="muted" data-testid="no-scorers">
                                    "No scorer registered here yet. Register a judge with "
                                    <code>"make_judge(...).register()"</code>" or a built-in scorer's "
                                    <code>".register()"</code>", and load it back with "
                                    <code>"mlflow.genai.scorers.get_scorer(name=...)"</code>"."
                                </p>
                            }.into_any()
                        } else {
                            view! {
                                <table class="table" data-testid="scorer-list">
                                    <thead><tr><th>"Name"</th><th class="num">"Version"</th><th>"What it checks"</th><th>"Registered"</th></tr></thead>
                                    <tbody>
                                        {groups.into_iter().map(|g| {
                                            let mut versions = g.versions.into_iter();
                                            let Some(latest) = versions.next() else {
                                                return ().into_any();
                                            };
                                            let earlier: Vec<ScorerRow> = versions.collect();
                                            view! {
                                                <tr data-scorer=g.name.clone()>
                                                    <td>{g.name.clone()}</td>
                                                    <td class="num" data-testid="scorer-version">{latest.version}</td>
                                                    <td data-testid="scorer-checks">
                                                        <Version row=latest.clone()/>
                                                        {(!earlier.is_empty()).then(|| view! {
                                                            <details data-testid="scorer-earlier">
                                                                <summary>{format!("{} earlier", earlier.len())}</summary>
                                                                <ol class="versions">
                                                                    {earlier.into_iter().map(|v| view! {
                                                                        <li>
                                                                            <strong>{format!("v{}", v.version)}</strong>
                                                                            <span class="muted">{format!(" {} · ", format_utc(v.registered))}</span>
                                                                            <Version row=v/>
                                                                        </li>
                                                                    }).collect_view()}
                                                                </ol>
                                                            </details>
                                                        })}
                                                    </td>
                                                    <td>{format_utc(latest.registered)}</td>
                                                </tr>
                                            }.into_any()
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                {more.then(|| view! { <p class="muted">{format!("Only {VERSIONS_SHOWN} versions are shown; list_scorer_versions reads the rest.")}</p> })}
                            }.into_any()
                        }}
                    }.into_any()
                }
                Err(e) => view! { <Title text="Scorers"/><ErrorNote error=e/> }.into_any(),
            })}
        </Suspense>
    }
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn a_scorer_reads_as_its_kind_model_and_checks() {
        let judge = r#"{"name": "tone", "instructions_judge_pydantic_data": {"instructions": "Is {{ outputs }} polite?", "model": "openai:/gpt-4o-mini"}}"#;
        let row = summary(2, 5, judge);
        assert_eq!(row.kind, "make_judge");
        assert_eq!(row.model.as_deref(), Some("openai:/gpt-4o-mini"));
        assert_eq!(row.checks, "Is {{ outputs }} polite?");
        let guidelines = r#"{"builtin_scorer_class": "Guidelines", "builtin_scorer_pydantic_data": {"name": "polite", "instructions": "Given the following set of guidelines", "guidelines": ["Be polite", "Be brief"]}}"#;
        let row = summary(1, 5, guidelines);
        assert_eq!((row.kind.as_str(), row.model), ("Guidelines", None));
        assert_eq!(row.checks, "Be polite · Be brief");
        let long = format!(
            r#"{{"instructions_judge_pydantic_data": {{"instructions": "{}"}}}}"#,
            "x".repeat(CHECKS_CHARS + 9)
        );
        assert_eq!(
            summary(1, 0, &long).checks.chars().count(),
            CHECKS_CHARS + 1
        );
        assert_eq!(summary(1, 0, "not json").kind, "scorer");
    }
}
