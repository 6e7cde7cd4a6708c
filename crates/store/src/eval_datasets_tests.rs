//! MLflow 3's evaluation datasets on SQLite and (with TEST_DATABASE_URL)
//! PostgreSQL: merging records, paging, search, owners and bounds.

use serde_json::{Value, json};
use trainyard_domain::query::{Scope, parse_filter, parse_order_by};

use crate::eval_datasets::{MAX_DATASET_RECORDS, MAX_RECORD_BYTES, NewRecord};
use crate::test_support::{person, store};
use crate::{Access, StoreError, Viewer};

fn record(value: Value) -> NewRecord {
    let get = |k: &str| value.get(k).cloned();
    NewRecord {
        inputs: get("inputs").unwrap().as_object().cloned().unwrap(),
        outputs: get("outputs"),
        expectations: get("expectations").and_then(|e| e.as_object().cloned()),
        tags: get("tags").and_then(|e| e.as_object().cloned()),
        source: get("source"),
    }
}

fn parse(text: &Option<String>) -> Value {
    text.as_deref()
        .map(|t| serde_json::from_str(t).unwrap())
        .unwrap_or(Value::Null)
}

#[tokio::test]
async fn records_merge_by_their_inputs_and_page_in_order() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &["vision"]).await;
    let experiment = store
        .create_experiment_with("qa", None, &[], ana.as_owner())
        .await
        .unwrap();
    let made = store
        .create_dataset(
            "qa-set",
            &[("stage".into(), "draft".into())],
            &[experiment],
            ana.as_owner(),
            "ana",
        )
        .await
        .unwrap();
    assert!(made.dataset_id.starts_with("d-"));
    assert_eq!(made.num_records, 0);
    assert_eq!(made.schema, None);
    assert_eq!(made.tags, [("stage".to_owned(), "draft".to_owned())]);
    assert_eq!(made.created_by.as_deref(), Some("ana"));
    let id = made.dataset_id.clone();

    let first = [
        record(json!({
            "inputs": {"question": "2+2?"},
            "expectations": {"answer": "4"},
            "source": {"source_type": "TRACE", "source_data": {"trace_id": "tr-1"}},
        })),
        record(json!({"inputs": {"question": "capital of France?"}, "outputs": "Paris"})),
    ];
    assert_eq!(
        store
            .upsert_dataset_records(&id, &first, "ana")
            .await
            .unwrap(),
        (2, 0)
    );
    let after = store.get_dataset(&id).await.unwrap();
    assert_eq!(after.num_records, 2);
    assert_ne!(after.digest, made.digest);
    let schema: Value = serde_json::from_str(after.schema.as_deref().unwrap()).unwrap();
    assert_eq!(schema["inputs"], json!({"question": "string"}));
    assert_eq!(schema["expectations"], json!({"answer": "string"}));

    // The same inputs again: outputs replaced, expectations and tags added to.
    let again = [record(json!({
        "inputs": {"question": "2+2?"},
        "outputs": {"text": "four"},
        "expectations": {"explanation": "arithmetic"},
        "tags": {"checked": "yes"},
    }))];
    assert_eq!(
        store
            .upsert_dataset_records(&id, &again, "ben")
            .await
            .unwrap(),
        (0, 1)
    );
    let page = store.dataset_records(&id, 10, None).await.unwrap();
    assert_eq!(page.records.len(), 2);
    assert!(page.next.is_none());
    let merged = &page.records[0];
    assert_eq!(
        parse(&Some(merged.inputs.clone())),
        json!({"question": "2+2?"})
    );
    assert_eq!(parse(&merged.outputs), json!({"text": "four"}));
    assert_eq!(
        parse(&merged.expectations),
        json!({"answer": "4", "explanation": "arithmetic"})
    );
    assert_eq!(parse(&merged.tags), json!({"checked": "yes"}));
    assert_eq!(merged.source_type.as_deref(), Some("TRACE"));
    assert_eq!(merged.source_id.as_deref(), Some("tr-1"));
    assert_eq!(merged.created_by.as_deref(), Some("ana"));
    assert_eq!(merged.last_updated_by.as_deref(), Some("ben"));
    // The record that came with outputs keeps them.
    let plain = &page.records[1];
    assert_eq!(parse(&plain.outputs), json!("Paris"));

    // Explicit null clears outputs; no outputs keeps them.
    store
        .upsert_dataset_records(
            &id,
            &[record(
                json!({"inputs": {"question": "2+2?"}, "outputs": null}),
            )],
            "ana",
        )
        .await
        .unwrap();
    store
        .upsert_dataset_records(
            &id,
            &[record(
                json!({"inputs": {"question": "capital of France?"}}),
            )],
            "ana",
        )
        .await
        .unwrap();
    let page = store.dataset_records(&id, 10, None).await.unwrap();
    assert_eq!(page.records[0].outputs, None);
    assert_eq!(parse(&page.records[1].outputs), json!("Paris"));

    // The same inputs twice in one request: one record, merged, as MLflow
    // counts it.
    let twice = [
        record(json!({"inputs": {"question": "why?"}, "expectations": {"a": 1}})),
        record(json!({"inputs": {"question": "why?"}, "expectations": {"b": 2}})),
    ];
    assert_eq!(
        store
            .upsert_dataset_records(&id, &twice, "ana")
            .await
            .unwrap(),
        (1, 1)
    );
    let page = store.dataset_records(&id, 10, None).await.unwrap();
    assert_eq!(page.records.len(), 3);
    assert_eq!(
        parse(&page.records[2].expectations),
        json!({"a": 1, "b": 2})
    );
    store
        .delete_dataset_records(&id, &[page.records[2].dataset_record_id.clone()])
        .await
        .unwrap();

    // Paging goes on after the last record read, in the order added.
    let many: Vec<NewRecord> = (0..25)
        .map(|i| record(json!({"inputs": {"n": i}})))
        .collect();
    assert_eq!(
        store
            .upsert_dataset_records(&id, &many, "ana")
            .await
            .unwrap(),
        (25, 0)
    );
    let mut seen = Vec::new();
    let mut after = None;
    loop {
        let page = store.dataset_records(&id, 10, after).await.unwrap();
        assert!(page.records.len() <= 10);
        seen.extend(page.records.iter().map(|r| r.dataset_record_id.clone()));
        match page.next {
            Some(next) => after = Some(next),
            None => break,
        }
    }
    assert_eq!(seen.len(), 27);
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 27, "no record twice across pages");

    // Deleting records by id; ids of other datasets or unknown ones count nothing.
    let page = store.dataset_records(&id, 2, None).await.unwrap();
    let ids: Vec<String> = page
        .records
        .iter()
        .map(|r| r.dataset_record_id.clone())
        .chain(["dr-nothing".to_owned()])
        .collect();
    assert_eq!(store.delete_dataset_records(&id, &ids).await.unwrap(), 2);
    assert_eq!(store.get_dataset(&id).await.unwrap().num_records, 25);

    // Experiments: shown, added to (twice is once), taken out.
    assert_eq!(
        store.dataset_experiment_ids(&id).await.unwrap(),
        [experiment]
    );
    let other = store
        .create_experiment_with("qa-2", None, &[], ana.as_owner())
        .await
        .unwrap();
    store
        .add_dataset_experiments(&id, &[other, other, experiment])
        .await
        .unwrap();
    assert_eq!(
        store.dataset_experiment_ids(&id).await.unwrap(),
        [experiment, other]
    );
    store
        .remove_dataset_experiments(&id, &[experiment, 999])
        .await
        .unwrap();
    assert_eq!(store.dataset_experiment_ids(&id).await.unwrap(), [other]);

    // Tags: set merges, delete of a missing one is no error.
    store
        .set_dataset_tags(
            &id,
            &[
                ("stage".into(), "final".into()),
                ("owner".into(), "ana".into()),
            ],
        )
        .await
        .unwrap();
    store.delete_dataset_tag(&id, "owner").await.unwrap();
    store.delete_dataset_tag(&id, "never").await.unwrap();
    assert_eq!(
        store.get_dataset(&id).await.unwrap().tags,
        [("stage".to_owned(), "final".to_owned())]
    );

    // Deleting the dataset takes its records; a second delete is no error.
    store.delete_dataset(&id).await.unwrap();
    store.delete_dataset(&id).await.unwrap();
    assert!(matches!(
        store.get_dataset(&id).await,
        Err(StoreError::NotFound(_))
    ));
    assert!(matches!(
        store.dataset_records(&id, 10, None).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn search_finds_what_the_viewer_may_see_by_name_tag_and_experiment() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &["vision"]).await;
    let ben = person(&store, "ben", &["vision"]).await;
    let eve = person(&store, "eve", &["audio"]).await;
    let experiment = store
        .create_experiment_with("qa", None, &[], ana.as_owner())
        .await
        .unwrap();
    let mut ids = Vec::new();
    for (name, owner, stage) in [
        ("qa-small", &ana, "draft"),
        ("qa-large", &ana, "final"),
        ("speech", &eve, "final"),
    ] {
        // Newest first needs times apart: ties go by random ids.
        tokio::time::sleep(std::time::Duration::from_millis(3)).await;
        let exps = if owner.id == ana.id && name == "qa-small" {
            vec![experiment]
        } else {
            vec![]
        };
        ids.push(
            store
                .create_dataset(
                    name,
                    &[("stage".into(), stage.into())],
                    &exps,
                    owner.as_owner(),
                    &owner.username,
                )
                .await
                .unwrap()
                .dataset_id,
        );
    }
    let names = |found: Vec<trainyard_domain::tracking::EvaluationDataset>| {
        found.into_iter().map(|d| d.name).collect::<Vec<_>>()
    };
    let search = |filter: &str, viewer: Viewer, experiments: Vec<i64>| {
        let store = store.clone();
        let filter = filter.to_owned();
        async move {
            let expr = parse_filter(&filter, Scope::EvaluationDatasets).unwrap();
            store
                .search_eval_datasets(&experiments, expr.as_ref(), &[], 100, 0, &viewer)
                .await
                .unwrap()
        }
    };
    // Newest first; ben sees his team's, not eve's.
    assert_eq!(
        names(search("", Viewer::of(&ben), vec![]).await),
        ["qa-large", "qa-small"]
    );
    assert_eq!(
        names(search("", Viewer::of(&eve), vec![]).await),
        ["speech"]
    );
    assert_eq!(
        names(
            search(
                "name LIKE 'qa-%' AND tags.stage = 'final'",
                Viewer::Everyone,
                vec![]
            )
            .await
        ),
        ["qa-large"]
    );
    assert_eq!(
        names(search("name = 'speech'", Viewer::of(&ana), vec![]).await),
        Vec::<String>::new()
    );
    assert_eq!(
        names(search("", Viewer::of(&ana), vec![experiment]).await),
        ["qa-small"]
    );
    assert_eq!(
        names(search("created_by = 'eve'", Viewer::Everyone, vec![]).await),
        ["speech"]
    );
    let by_name = parse_order_by("name ASC", Scope::EvaluationDatasets).unwrap();
    let ordered = store
        .search_eval_datasets(&[], None, &[by_name], 2, 1, &Viewer::Everyone)
        .await
        .unwrap();
    assert_eq!(names(ordered), ["qa-small", "speech"]);

    // Owners change, their team reads, others do not see it at all.
    store
        .dataset_as(&ana, &ids[0], Access::Change)
        .await
        .unwrap();
    store.dataset_as(&ben, &ids[0], Access::Read).await.unwrap();
    assert!(matches!(
        store.dataset_as(&ben, &ids[0], Access::Change).await,
        Err(StoreError::Forbidden(_))
    ));
    assert!(matches!(
        store.dataset_as(&eve, &ids[0], Access::Read).await,
        Err(StoreError::NotFound(_))
    ));
}

#[tokio::test]
async fn records_keep_their_numbers_and_grow_only_to_their_bound() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let id = store
        .create_dataset("numbered", &[], &[], ana.as_owner(), "ana")
        .await
        .unwrap()
        .dataset_id;
    // A new record without outputs has empty ones, as in MLflow.
    let three: Vec<NewRecord> = (0..3)
        .map(|i| record(json!({"inputs": {"i": i}})))
        .collect();
    store
        .upsert_dataset_records(&id, &three, "ana")
        .await
        .unwrap();
    let page = store.dataset_records(&id, 2, None).await.unwrap();
    assert_eq!(parse(&page.records[0].outputs), json!({}));
    let token = page.next.unwrap();
    // The last record deleted and one added: the newcomer does not take its
    // number, so a reader holding a token after it still finds it.
    let all = store.dataset_records(&id, 10, None).await.unwrap();
    store
        .delete_dataset_records(&id, &[all.records[2].dataset_record_id.clone()])
        .await
        .unwrap();
    let after_token = store
        .dataset_records(&id, 10, Some(token + 1))
        .await
        .unwrap();
    assert!(after_token.records.is_empty());
    store
        .upsert_dataset_records(&id, &[record(json!({"inputs": {"i": 9}}))], "ana")
        .await
        .unwrap();
    let later = store
        .dataset_records(&id, 10, Some(token + 1))
        .await
        .unwrap();
    assert_eq!(later.records.len(), 1);
    assert_eq!(
        parse(&Some(later.records[0].inputs.clone())),
        json!({"i": 9})
    );
    // Each change gives a new digest, however fast they come.
    let mut digests = vec![store.get_dataset(&id).await.unwrap().digest];
    for n in 0..3 {
        store
            .upsert_dataset_records(
                &id,
                &[record(json!({"inputs": {"i": 0}, "tags": {"n": n}}))],
                "ana",
            )
            .await
            .unwrap();
        digests.push(store.get_dataset(&id).await.unwrap().digest);
    }
    digests.dedup();
    assert_eq!(digests.len(), 4, "{digests:?}");

    // Expectations merged into one record grow it; past 1 MiB the merge is
    // refused whole, and the record stays as it was.
    let half = "x".repeat((MAX_RECORD_BYTES / 2) as usize);
    let with = |key: &str| record(json!({"inputs": {"i": 1}, "expectations": {key: half}}));
    store
        .upsert_dataset_records(&id, &[with("a")], "ana")
        .await
        .unwrap();
    let refused = store.upsert_dataset_records(&id, &[with("b")], "ana").await;
    match refused {
        Err(StoreError::Rejected(message)) => assert!(message.contains("records[0]"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let kept = store.dataset_records(&id, 10, None).await.unwrap();
    let one = kept
        .records
        .iter()
        .find(|r| parse(&Some(r.inputs.clone())) == json!({"i": 1}))
        .unwrap();
    let expectations = parse(&one.expectations);
    assert!(expectations.get("a").is_some() && expectations.get("b").is_none());
}

#[tokio::test]
async fn a_dataset_past_its_bounds_is_refused_whole() {
    let (_db, store) = store().await;
    let ana = person(&store, "ana", &[]).await;
    let id = store
        .create_dataset("big", &[], &[], ana.as_owner(), "ana")
        .await
        .unwrap()
        .dataset_id;
    // Over the record count: nothing of the request stays.
    let too_many: Vec<NewRecord> = (0..MAX_DATASET_RECORDS + 1)
        .map(|i| record(json!({"inputs": {"i": i}})))
        .collect();
    let refused = store.upsert_dataset_records(&id, &too_many, "ana").await;
    match refused {
        Err(StoreError::Rejected(message)) => assert!(message.contains("100000"), "{message}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    let after = store.get_dataset(&id).await.unwrap();
    assert_eq!(after.num_records, 0);
    assert!(
        store
            .dataset_records(&id, 10, None)
            .await
            .unwrap()
            .records
            .is_empty()
    );
}
