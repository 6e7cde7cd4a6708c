//! MLflow 3's evaluation datasets in the explorer: those shown in an
//! experiment, and one dataset's records (inputs, expectations, outputs,
//! where each came from), a page at a time.

use leptos::prelude::*;
use leptos_meta::Title;
use leptos_router::hooks::{use_params_map, use_query_map};
use serde::{Deserialize, Serialize};
use trainyard_domain::format_utc;
#[cfg(feature = "ssr")]
use trainyard_domain::tracking::DatasetRecord;
use trainyard_domain::tracking::EvaluationDataset;

use super::experiment_param;
use crate::error::AppError;
use crate::pages::ErrorNote;

#[cfg(feature = "ssr")]
use crate::api::{caller, store};

/// Most datasets an experiment's list shows.
pub const DATASETS_SHOWN: u64 = 200;
/// Records a page of a dataset shows.
pub const RECORDS_PAGE: u64 = 50;
/// Longest JSON of one cell sent to the page, in characters.
#[cfg(feature = "ssr")]
const CELL_CHARS: usize = 1000;

/// A page of a dataset's records, and where the next begins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DatasetView {
    pub dataset: EvaluationDataset,
    pub experiment_name: String,
    /// The schema's fields as people read them.
    pub schema: String,
    pub records: Vec<RecordRow>,
    pub next: Option<i64>,
}

/// A record as its row shows it: each JSON object as `name: value` pairs
/// (a value that is not an object has an empty name), cut to a cell.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordRow {
    pub id: String,
    pub inputs: Vec<(String, String)>,
    pub expectations: Vec<(String, String)>,
    pub outputs: Vec<(String, String)>,
    pub source_type: Option<String>,
    pub source_id: Option<String>,
    /// Tags people set (not `mlflow.*`), as `name: value, …`.
    pub tags: String,
}

/// The datasets shown in an experiment that the caller may see, newest
/// first, with the experiment's name; true when more follow.
#[server(endpoint = "experiment_datasets")]
pub async fn experiment_datasets(
    experiment_id: i64,
) -> Result<(String, Vec<EvaluationDataset>, bool), AppError> {
    let user = caller()?.user;
    let store = store()?;
    store
        .experiment_as(&user, experiment_id, trainyard_store::Access::Read)
        .await?;
    let experiment = store.get_experiment(experiment_id).await?;
    let mut found = store
        .search_eval_datasets(
            &[experiment_id],
            None,
            &[],
            DATASETS_SHOWN + 1,
            0,
            &trainyard_store::Viewer::of(&user),
        )
        .await?;
    let more = found.len() as u64 > DATASETS_SHOWN;
    found.truncate(DATASETS_SHOWN as usize);
    // The list shows no schema; it stays on the server.
    for d in &mut found {
        d.schema = None;
    }
    Ok((experiment.name, found, more))
}

/// A page of the dataset's records from after `after` (a record's number),
/// each field's JSON cut to what a cell shows.
#[server(endpoint = "dataset_records")]
pub async fn dataset_records(
    experiment_id: i64,
    dataset_id: String,
    after: Option<i64>,
) -> Result<DatasetView, AppError> {
    let user = caller()?.user;
    let store = store()?;
    store
        .experiment_as(&user, experiment_id, trainyard_store::Access::Read)
        .await?;
    store
        .dataset_as(&user, &dataset_id, trainyard_store::Access::Read)
        .await?;
    let experiment = store.get_experiment(experiment_id).await?;
    let dataset = store.get_dataset(&dataset_id).await?;
    // Under an experiment it is shown in only.
    if !store
        .dataset_experiment_ids(&dataset_id)
        .await?
        .contains(&experiment_id)
    {
        crate::error::page_not_found();
        return Err(AppError::NotFound(format!(
            "the dataset {} is not in the experiment {}; its page is under an experiment it was added to",
            dataset.name, experiment.name
        )));
    }
    let page = store
        .dataset_records(&dataset_id, RECORDS_PAGE, after)
        .await?;
    let records = page.records.iter().map(row).collect();
    Ok(DatasetView {
        schema: dataset
            .schema
            .as_deref()
            .map(schema_summary)
            .unwrap_or_default(),
        dataset,
        experiment_name: experiment.name,
        records,
        next: page.next,
    })
}

#[cfg(feature = "ssr")]
fn row(r: &DatasetRecord) -> RecordRow {
    let of = |text: &Option<String>| text.as_deref().map(fields).unwrap_or_default();
    let outputs = r.outputs.clone().filter(|o| o != "{}");
    RecordRow {
        id: r.dataset_record_id.clone(),
        inputs: fields(&r.inputs),
        expectations: of(&r.expectations),
        outputs: of(&outputs),
        source_type: r.source_type.clone(),
        // Linked to as a trace's page: only an id that is one.
        source_id: r.source_id.clone().filter(|s| {
            r.source_type.as_deref() != Some("TRACE")
                || s.chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        }),
        tags: of(&r.tags)
            .into_iter()
            .filter(|(k, _)| !k.starts_with("mlflow."))
            .map(|(k, v)| format!("{k}: {v}"))
            .collect::<Vec<_>>()
            .join(", "),
    }
}

/// Text cut to [`CELL_CHARS`] characters, marked where cut.
#[cfg(feature = "ssr")]
fn clip(text: &str) -> String {
    match text.char_indices().nth(CELL_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_owned(),
    }
}

/// A JSON object's fields as `name: value` pairs for a cell, each value
/// cut to [`CELL_CHARS`]; other JSON as it is. Strings are shown without
/// their quotes.
#[cfg(feature = "ssr")]
fn fields(json: &str) -> Vec<(String, String)> {
    let plain = |v: &serde_json::Value| {
        clip(&match v {
            serde_json::Value::String(s) => s.clone(),
            other => other.to_string(),
        })
    };
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(serde_json::Value::Object(map)) => {
            map.iter().map(|(k, v)| (clip(k), plain(v))).collect()
        }
        Ok(other) => vec![(String::new(), plain(&other))],
        Err(_) => vec![(String::new(), clip(json))],
    }
}

#[component]
pub(super) fn Fields(fields: Vec<(String, String)>) -> impl IntoView {
    if fields.is_empty() {
        return view! { <span class="muted">"–"</span> }.into_any();
    }
    view! {
        <dl class="fields">
            {fields.into_iter().map(|(k, v)| view! {
                {(!k.is_empty()).then(|| view! { <dt>{k}</dt> })}
                <dd>{v}</dd>
            }).collect_view()}
        </dl>
    }
    .into_any()
}

/// `/experiments/:experiment/datasets`: the evaluation datasets shown in
/// the experiment.
#[component]
pub fn DatasetsPage() -> impl IntoView {
    let experiment = experiment_param();
    // Blocking, so that the datasets of no experiment answer 404.
    let found = Resource::new_blocking(move || experiment.get(), experiment_datasets);
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading datasets…"</p> }>
            {move || found.get().map(|f| match f {
                Ok((name, datasets, more)) => {
                    let id = experiment.get();
                    view! {
                        <Title text=format!("Datasets of {name}")/>
                        <nav class="crumbs" aria-label="Breadcrumbs">
                            <a href="/experiments">"Experiments"</a> " / "
                            <a href=format!("/experiments/{id}")>{name.clone()}</a> " / "
                        </nav>
                        <section class="page-head"><h1>"Evaluation datasets"</h1></section>
                        {if datasets.is_empty() {
                            view! {
                                <p class="muted" data-testid="no-datasets">
                                    "No evaluation dataset yet. Make one with "
                                    <code>{format!("mlflow.genai.datasets.create_dataset(name=..., experiment_id=\"{id}\")")}</code>
                                    ", fill it with its "<code>"merge_records"</code>" and evaluate with "
                                    <code>"mlflow.genai.evaluate(data=dataset, ...)"</code>"."
                                </p>
                            }.into_any()
                        } else {
                            view! {
                                <table class="table" data-testid="dataset-list">
                                    <thead><tr><th>"Name"</th><th class="num">"Records"</th><th>"Tags"</th><th>"Made by"</th><th>"Changed"</th><th>"Digest"</th></tr></thead>
                                    <tbody>
                                        {datasets.into_iter().map(|d| {
                                            let tags = d.tags.iter()
                                                .filter(|(k, _)| !k.starts_with("mlflow."))
                                                .map(|(k, v)| format!("{k}: {v}"))
                                                .collect::<Vec<_>>()
                                                .join(", ");
                                            view! {
                                                <tr data-dataset=d.name.clone()>
                                                    <td><a href=format!("/experiments/{id}/datasets/{}", d.dataset_id)>{d.name.clone()}</a></td>
                                                    <td class="num" data-testid="dataset-records">{d.num_records}</td>
                                                    <td>{tags}</td>
                                                    <td>{d.created_by.clone().unwrap_or_default()}</td>
                                                    <td>{format_utc(d.last_update_time)}</td>
                                                    <td><code>{d.digest.clone()}</code></td>
                                                </tr>
                                            }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                {more.then(|| view! { <p class="muted">{format!("Only the newest {DATASETS_SHOWN} are shown; search_datasets finds the rest.")}</p> })}
                            }.into_any()
                        }}
                    }.into_any()
                }
                Err(e) => view! { <Title text="Datasets"/><ErrorNote error=e/> }.into_any(),
            })}
        </Suspense>
    }
}

/// `/experiments/:experiment/datasets/:dataset`: its records in the order
/// they were added, a page at a time; a record made from a trace links to
/// it.
#[component]
pub fn DatasetPage() -> impl IntoView {
    let experiment = experiment_param();
    let params = use_params_map();
    let query = use_query_map();
    let dataset = Memo::new(move |_| params.read().get("dataset").unwrap_or_default());
    let after = Memo::new(move |_| {
        query
            .read()
            .get("after")
            .and_then(|a| a.parse::<i64>().ok())
    });
    // Blocking, so that a page of no dataset answers 404.
    let page = Resource::new_blocking(
        move || (experiment.get(), dataset.get(), after.get()),
        |(experiment, dataset, after)| dataset_records(experiment, dataset, after),
    );
    view! {
        <Suspense fallback=|| view! { <p class="muted">"Loading the dataset…"</p> }>
            {move || page.get().map(|p| match p {
                Ok(view) => {
                    let id = experiment.get();
                    let d = view.dataset.clone();
                    let schema = view.schema.clone();
                    view! {
                        <Title text=format!("Dataset {}", d.name)/>
                        <nav class="crumbs" aria-label="Breadcrumbs">
                            <a href="/experiments">"Experiments"</a> " / "
                            <a href=format!("/experiments/{id}")>{view.experiment_name.clone()}</a> " / "
                            <a href=format!("/experiments/{id}/datasets")>"Datasets"</a> " / "
                        </nav>
                        <section class="page-head">
                            <h1 data-testid="dataset-name">{d.name.clone()}</h1>
                            <span class="muted" data-testid="dataset-count">{format!("{} records", d.num_records)}</span>
                            <span class="muted">"digest " <code>{d.digest.clone()}</code></span>
                            <span class="muted">{format!("changed {}", format_utc(d.last_update_time))}</span>
                        </section>
                        {(!schema.is_empty()).then(|| view! {
                            <p class="muted" data-testid="dataset-schema">{schema}</p>
                        })}
                        {if view.records.is_empty() {
                            view! { <p class="muted" data-testid="no-records">"No record here. Add some with the dataset's merge_records."</p> }.into_any()
                        } else {
                            view! {
                                <table class="table records" data-testid="records">
                                    <thead><tr><th>"Inputs"</th><th>"Expectations"</th><th>"Outputs"</th><th>"Source"</th><th>"Tags"</th></tr></thead>
                                    <tbody>
                                        {view.records.into_iter().map(|r| {
                                            let source = match (r.source_type.as_deref(), r.source_id.clone()) {
                                                (Some("TRACE"), Some(trace)) => view! {
                                                    <a href=format!("/experiments/{id}/traces/{trace}")>"trace"</a>
                                                }.into_any(),
                                                (Some(kind), Some(source)) => view! { {format!("{} · {source}", kind.to_lowercase())} }.into_any(),
                                                (Some(kind), None) => view! { {kind.to_lowercase()} }.into_any(),
                                                (None, _) => view! { "–" }.into_any(),
                                            };
                                            view! {
                                                <tr data-record=r.id.clone()>
                                                    <td data-testid="record-inputs"><Fields fields=r.inputs/></td>
                                                    <td data-testid="record-expectations"><Fields fields=r.expectations/></td>
                                                    <td data-testid="record-outputs"><Fields fields=r.outputs/></td>
                                                    <td data-testid="record-source">{source}</td>
                                                    <td>{r.tags}</td>
                                                </tr>
                                            }
                                        }).collect_view()}
                                    </tbody>
                                </table>
                                <nav class="pager">
                                    {after.get().is_some().then(|| view! { <a href="?">"← First"</a> })}
                                    {view.next.map(|n| view! { <a href=format!("?after={n}")>"Next →"</a> })}
                                </nav>
                            }.into_any()
                        }}
                    }.into_any()
                }
                Err(e) => view! { <Title text="Dataset"/><ErrorNote error=e/> }.into_any(),
            })}
        </Suspense>
    }
}

/// The schema's fields as people read them: `inputs: question (string) ·
/// expectations: answer (string)`.
#[cfg(feature = "ssr")]
fn schema_summary(schema: &str) -> String {
    let Ok(serde_json::Value::Object(parts)) = serde_json::from_str::<serde_json::Value>(schema)
    else {
        return String::new();
    };
    ["inputs", "expectations", "outputs"]
        .into_iter()
        .filter_map(|part| {
            let described = match parts.get(part)? {
                serde_json::Value::Object(fields) if !fields.is_empty() => fields
                    .iter()
                    .map(|(k, v)| format!("{k} ({})", v.as_str().unwrap_or("?")))
                    .collect::<Vec<_>>()
                    .join(", "),
                serde_json::Value::String(kind) => kind.clone(),
                _ => return None,
            };
            Some(format!("{part}: {described}"))
        })
        .collect::<Vec<_>>()
        .join(" · ")
}

#[cfg(all(test, feature = "ssr"))]
mod tests {
    use super::*;

    #[test]
    fn cells_show_fields_and_plain_values() {
        assert_eq!(
            fields(r#"{"question": "why?", "k": 3}"#),
            [
                ("k".to_owned(), "3".to_owned()),
                ("question".to_owned(), "why?".to_owned())
            ]
        );
        assert_eq!(fields(r#""Paris""#), [(String::new(), "Paris".to_owned())]);
        assert_eq!(fields("{\"cut"), [(String::new(), "{\"cut".to_owned())]);
        let long = "x".repeat(CELL_CHARS + 5);
        assert_eq!(clip(&long).chars().count(), CELL_CHARS + 1);
    }

    #[test]
    fn the_schema_reads_as_fields_and_types() {
        let schema = r#"{"inputs": {"question": "string"}, "outputs": "string", "expectations": {}, "version": "1.0"}"#;
        assert_eq!(
            schema_summary(schema),
            "inputs: question (string) · outputs: string"
        );
        assert_eq!(schema_summary("nope"), "");
    }
}
