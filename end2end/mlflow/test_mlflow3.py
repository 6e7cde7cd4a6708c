"""MLflow 3 as scripts use it (logged models, datasets, run inputs and
outputs), each test run against Trainyard and against MLflow 3.17's own
server in the same session, so that what is expected is MLflow's behaviour."""

import json
import os

import mlflow
import numpy as np
import pandas as pd
import pytest
import requests
from mlflow import MlflowClient
from mlflow.entities import LoggedModelStatus
from mlflow.exceptions import MlflowException
from mlflow.models import Model
from sklearn.linear_model import LogisticRegression


# MLflow's answers do not depend on Trainyard's database: compare once, on
# the SQLite pass of the suite.
SERVERS = ["trainyard"] if os.environ.get("MLFLOW_TEST_DATABASE_URL") else ["trainyard", "mlflow"]


@pytest.fixture(params=SERVERS)
def tracking(request, server, monkeypatch):
    """The server under test: Trainyard, or MLflow itself for reference."""
    url = server if request.param == "trainyard" else request.getfixturevalue("reference_server")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
    mlflow.set_tracking_uri(url)
    yield url
    while mlflow.active_run():
        mlflow.end_run()


def _frame(rows=60, seed=0):
    rng = np.random.default_rng(seed)
    x = pd.DataFrame(rng.random((rows, 3)), columns=["width", "height", "depth"])
    y = (x.width + x.height > 1.0).astype(int)
    return x, y


def test_sklearn_autolog_logs_params_metrics_model_and_dataset(tracking, unique):
    experiment = mlflow.set_experiment(f"autolog-{unique}")
    x, y = _frame()
    mlflow.sklearn.autolog(log_input_examples=False, silent=True)
    try:
        with mlflow.start_run() as run:
            LogisticRegression(C=0.5).fit(x, y)
    finally:
        mlflow.sklearn.autolog(disable=True)
    got = MlflowClient().get_run(run.info.run_id)

    assert got.data.params["C"] == "0.5"
    assert 0.5 <= got.data.metrics["training_accuracy_score"] <= 1.0
    datasets = got.inputs.dataset_inputs
    assert len(datasets) == 1
    assert {t.key: t.value for t in datasets[0].tags}["mlflow.data.context"] == "train"
    assert "width" in datasets[0].dataset.schema
    outputs = got.outputs.model_outputs
    assert len(outputs) == 1 and outputs[0].step == 0

    model = mlflow.get_logged_model(outputs[0].model_id)
    assert model.status == LoggedModelStatus.READY
    assert model.source_run_id == run.info.run_id
    assert model.experiment_id == experiment.experiment_id
    assert model.params["C"] == "0.5"
    by_key = {m.key: m for m in model.metrics}
    assert by_key["training_accuracy_score"].value == got.data.metrics["training_accuracy_score"]
    assert by_key["training_accuracy_score"].run_id == run.info.run_id
    assert by_key["training_accuracy_score"].dataset_digest == datasets[0].dataset.digest

    # The model loads back, by its run and by its own id, and predicts the same.
    by_run = mlflow.sklearn.load_model(f"runs:/{run.info.run_id}/model")
    by_id = mlflow.sklearn.load_model(f"models:/{model.model_id}")
    assert list(by_run.predict(x)) == list(by_id.predict(x))
    assert list(by_id.predict(x)) == list(LogisticRegression(C=0.5).fit(x, y).predict(x))


def test_log_model_and_load_it_by_run_and_by_id(tracking, unique, tmp_path):
    mlflow.set_experiment(f"log-model-{unique}")
    x, y = _frame(seed=1)
    fitted = LogisticRegression().fit(x, y)
    with mlflow.start_run() as run:
        info = mlflow.sklearn.log_model(fitted, name="classifier", params={"kind": "logreg"})
        mlflow.log_metric("val_acc", 0.875, model_id=info.model_id, step=3)
    assert info.model_uri == f"models:/{info.model_id}"
    model = mlflow.get_logged_model(info.model_id)
    assert model.name == "classifier"
    assert model.params == {"kind": "logreg"}
    assert [(m.key, m.value, m.step) for m in model.metrics] == [("val_acc", 0.875, 3)]
    assert MlflowClient().get_run(run.info.run_id).data.metrics["val_acc"] == 0.875

    loaded = mlflow.sklearn.load_model(f"runs:/{run.info.run_id}/classifier")
    assert list(loaded.predict(x)) == list(fitted.predict(x))
    files = {a.path for a in MlflowClient().list_logged_model_artifacts(info.model_id)}
    assert {"MLmodel", "requirements.txt"} <= files

    downloaded = mlflow.artifacts.download_artifacts(artifact_uri=info.model_uri, dst_path=str(tmp_path))
    assert "sklearn" in open(os.path.join(downloaded, "MLmodel")).read()

    # What MLflow 2's clients record of every model logged in a run (3's
    # do so for Spark's only): the run's history tag. Without it they
    # warn "Logging model metadata to the tracking server has failed".
    mlmodel = Model.load(info.model_uri)
    mlmodel.run_id = run.info.run_id
    for path in ["classifier", "again"]:
        mlmodel.artifact_path = path
        MlflowClient()._record_logged_model(run.info.run_id, mlmodel)
    history = json.loads(MlflowClient().get_run(run.info.run_id).data.tags["mlflow.log-model.history"])
    assert [(h["artifact_path"], h["run_id"]) for h in history] == [
        ("classifier", run.info.run_id),
        ("again", run.info.run_id),
    ]
    assert "sklearn" in history[0]["flavors"] and "signature" not in history[0]
    del mlmodel.__dict__["utc_time_created"]
    with pytest.raises(MlflowException, match="utc_time_created"):
        MlflowClient()._record_logged_model(run.info.run_id, mlmodel)


def test_logged_models_are_searched_ordered_tagged_and_deleted(tracking, server, unique):
    experiment_id = mlflow.set_experiment(f"models-{unique}").experiment_id
    client = MlflowClient()
    with mlflow.start_run() as run:
        made = []
        for i, acc in enumerate([0.7, 0.9, 0.8]):
            model = mlflow.initialize_logged_model(
                name=f"candidate-{i}", model_type="classifier", tags={"round": str(i)}
            )
            mlflow.log_metric("acc", acc, model_id=model.model_id)
            made.append(model.model_id)
    assert client.get_logged_model(made[0]).status == LoggedModelStatus.PENDING
    client.finalize_logged_model(made[0], LoggedModelStatus.READY)
    assert client.get_logged_model(made[0]).status == LoggedModelStatus.READY
    assert client.get_logged_model(made[0]).source_run_id == run.info.run_id

    best = mlflow.search_logged_models(
        experiment_ids=[experiment_id],
        filter_string="metrics.acc > 0.75",
        order_by=[{"field_name": "metrics.acc", "ascending": False}],
        output_format="list",
    )
    assert [m.model_id for m in best] == [made[1], made[2]]

    # The datasets clause: metric filters count only metrics on those datasets.
    with mlflow.start_run(run_id=run.info.run_id):
        holdout = mlflow.data.from_pandas(pd.DataFrame({"x": [1, 2]}), name="holdout")
        mlflow.log_metric("acc", 0.95, model_id=made[0], dataset=holdout)

    def on(datasets, filter_string="metrics.acc > 0.75"):
        found = mlflow.search_logged_models(
            experiment_ids=[experiment_id],
            filter_string=filter_string,
            datasets=datasets,
            output_format="list",
        )
        return [m.model_id for m in found]

    assert on([{"dataset_name": "holdout", "dataset_digest": holdout.digest}]) == [made[0]]
    assert on([{"dataset_name": "holdout", "dataset_digest": "other"}]) == []
    assert on([{"dataset_name": "holdout", "dataset_digest": holdout.digest}], None) == [made[0]]
    # A name alone: MLflow's documentation makes the digest optional, but
    # its 3.17 server then matches only metrics logged without a digest
    # (none here). Trainyard matches the name with any digest, as documented.
    assert on([{"dataset_name": "holdout"}]) == ([made[0]] if tracking == server else [])

    newest_first = mlflow.search_logged_models(experiment_ids=[experiment_id], output_format="list")
    assert [m.model_id for m in newest_first] == list(reversed(made))
    named = mlflow.search_logged_models(
        experiment_ids=[experiment_id], filter_string="name = 'candidate-2'", output_format="list"
    )
    assert [m.model_id for m in named] == [made[2]]
    tagged = mlflow.search_logged_models(
        experiment_ids=[experiment_id], filter_string="tags.round = '1'", output_format="list"
    )
    assert [m.model_id for m in tagged] == [made[1]]

    # Pages of one, followed through their tokens.
    seen, token = [], None
    while True:
        page = client.search_logged_models(experiment_ids=[experiment_id], max_results=1, page_token=token)
        seen += [m.model_id for m in page]
        token = page.token
        if not token:
            break
    assert seen == list(reversed(made))

    def own_tags(model_id):
        # The client adds mlflow.source.* and mlflow.user tags of its own.
        tags = client.get_logged_model(model_id).tags
        return {k: v for k, v in tags.items() if not k.startswith("mlflow.")}

    client.set_logged_model_tags(made[0], {"stage": "review", "round": "first"})
    assert own_tags(made[0]) == {"round": "first", "stage": "review"}
    client.delete_logged_model_tag(made[0], "stage")
    assert own_tags(made[0]) == {"round": "first"}
    with pytest.raises(MlflowException) as err:
        client.delete_logged_model_tag(made[0], "stage")
    assert err.value.error_code == "RESOURCE_DOES_NOT_EXIST"

    client.delete_logged_model(made[2])
    with pytest.raises(MlflowException) as err:
        client.get_logged_model(made[2])
    assert err.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    left = mlflow.search_logged_models(experiment_ids=[experiment_id], output_format="list")
    assert [m.model_id for m in left] == [made[1], made[0]]

    with pytest.raises(MlflowException) as err:
        mlflow.initialize_logged_model(name="bad/name")
    assert err.value.error_code == "INVALID_PARAMETER_VALUE"

    # A model whose upload failed says so.
    failed = mlflow.initialize_logged_model(name="broken")
    assert client.finalize_logged_model(failed.model_id, LoggedModelStatus.FAILED).status == (
        LoggedModelStatus.FAILED
    )
    assert client.get_logged_model(failed.model_id).status == LoggedModelStatus.FAILED


def test_log_input_records_a_pandas_dataset_once(tracking, unique):
    experiment_id = mlflow.set_experiment(f"datasets-{unique}").experiment_id
    x, _ = _frame(rows=20, seed=2)
    dataset = mlflow.data.from_pandas(x, source="s3://lab-bucket/shapes.csv", name="shapes")
    with mlflow.start_run() as run:
        mlflow.log_input(dataset, context="training")
        mlflow.log_input(dataset, context="training")
        mlflow.log_input(mlflow.data.from_pandas(x.head(5), name="shapes-eval"), context="eval")
    inputs = MlflowClient().get_run(run.info.run_id).inputs.dataset_inputs
    assert [i.dataset.name for i in inputs] == ["shapes", "shapes-eval"]
    first = inputs[0].dataset
    assert first.digest == dataset.digest
    assert first.source_type == "s3"
    assert json.loads(first.source) == {"uri": "s3://lab-bucket/shapes.csv"}
    assert [c["name"] for c in json.loads(first.schema)["mlflow_colspec"]] == ["width", "height", "depth"]
    assert json.loads(first.profile)["num_rows"] == 20

    summaries = requests.post(
        f"{tracking}/ajax-api/2.0/mlflow/experiments/search-datasets",
        json={"experiment_ids": [experiment_id]},
        timeout=10,
    ).json()["dataset_summaries"]
    assert sorted((s["name"], s["context"]) for s in summaries) == [("shapes", "training"), ("shapes-eval", "eval")]
    assert all(s["experiment_id"] == experiment_id for s in summaries)

    with mlflow.start_run() as other:
        mlflow.log_input(mlflow.data.from_pandas(x.head(3), name="other"), context="training")

    def found(filter_string):
        runs = MlflowClient().search_runs([experiment_id], filter_string)
        return sorted(r.info.run_id for r in runs)

    both = sorted([run.info.run_id, other.info.run_id])
    assert found("datasets.name = 'shapes'") == [run.info.run_id]
    assert found(f"datasets.digest = '{dataset.digest}'") == [run.info.run_id]
    assert found("datasets.context = 'training'") == both
    assert found("datasets.context = 'eval'") == [run.info.run_id]
    assert found("datasets.name IN ('other', 'none')") == [other.info.run_id]
    assert found("datasets.name LIKE 'shapes%'") == [run.info.run_id]


def test_the_registry_registers_versions_aliases_and_loads_them(tracking, unique):
    mlflow.set_experiment(f"registry-{unique}")
    client = MlflowClient()
    x, y = _frame(seed=3)
    fitted = LogisticRegression().fit(x, y)
    with mlflow.start_run() as run:
        info = mlflow.sklearn.log_model(fitted, name="model")
    name = f"shapes-{unique}"

    first = mlflow.register_model(info.model_uri, name)
    assert (first.name, first.version) == (name, "1")
    assert first.run_id == run.info.run_id
    second = mlflow.register_model(f"runs:/{run.info.run_id}/model", name)
    assert second.version == "2"

    client.set_registered_model_alias(name, "champion", "1")
    assert client.get_model_version_by_alias(name, "champion").version == "1"
    assert client.get_model_version_by_alias(name, "latest").version == "2", "the reserved alias"
    with pytest.raises(MlflowException) as err:
        client.set_registered_model_alias(name, "latest", "1")
    assert err.value.error_code == "INVALID_PARAMETER_VALUE"
    for uri in [f"models:/{name}@champion", f"models:/{name}/1", f"models:/{name}/2"]:
        loaded = mlflow.sklearn.load_model(uri)
        assert list(loaded.predict(x)) == list(fitted.predict(x)), uri

    model = client.get_registered_model(name)
    assert model.aliases == {"champion": "1"}
    assert [v.version for v in model.latest_versions] == ["2"]
    assert client.get_model_version(name, "1").aliases == ["champion"]

    client.update_registered_model(name, description="predicts shapes")
    client.set_registered_model_tag(name, "task", "classification")
    client.set_model_version_tag(name, "2", "validated", "yes")
    client.update_model_version(name, "2", description="second try")
    found = client.search_registered_models(filter_string=f"name = '{name}'")
    assert [m.name for m in found] == [name]
    assert found[0].description == "predicts shapes" and found[0].tags == {"task": "classification"}
    versions = client.search_model_versions(f"name = '{name}'")
    assert sorted(v.version for v in versions) == ["1", "2"]
    tagged = client.search_model_versions(f"name = '{name}' and tags.validated = 'yes'")
    assert [(v.version, v.description) for v in tagged] == [("2", "second try")]

    with pytest.warns(FutureWarning):
        client.transition_model_version_stage(name, "1", "Production")
    production = client.get_latest_versions(name, stages=["Production"])
    assert [v.version for v in production] == ["1"]

    client.delete_registered_model_alias(name, "champion")
    with pytest.raises(MlflowException):
        client.get_model_version_by_alias(name, "champion")
    client.delete_model_version(name, "2")
    with pytest.raises(MlflowException) as err:
        client.get_model_version(name, "2")
    assert err.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    assert mlflow.register_model(info.model_uri, name).version == "3", "a deleted version's number is not reused"

    renamed = f"{name}-v2"
    client.rename_registered_model(name, renamed)
    assert client.get_model_version(renamed, "3").name == renamed
    with pytest.raises(MlflowException) as err:
        client.create_registered_model(renamed)
    assert err.value.error_code == "RESOURCE_ALREADY_EXISTS"
    client.delete_registered_model(renamed)
    with pytest.raises(MlflowException) as err:
        client.get_registered_model(renamed)
    assert err.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_traced_functions_are_found_with_their_spans(tracking, server, unique):
    experiment_id = mlflow.set_experiment(f"traces-{unique}").experiment_id

    @mlflow.trace
    def answer(question):
        mlflow.update_current_trace(client_request_id=f"{question}-{unique}")
        return retrieve(question) + "!"

    @mlflow.trace(span_type="RETRIEVER")
    def retrieve(question):
        return question.upper()

    assert answer("why") == "WHY!"
    with mlflow.start_run() as run:
        answer("how")
    mlflow.flush_trace_async_logging()

    traces = mlflow.search_traces(experiment_ids=[experiment_id], return_type="list")
    assert len(traces) == 2
    newest = traces[0]
    assert newest.info.state.value == "OK"
    assert newest.info.request_metadata.get("mlflow.sourceRun") == run.info.run_id
    assert [s.name for s in newest.data.spans] == ["answer", "retrieve"]
    assert newest.data.spans[1].span_type == "RETRIEVER"
    assert newest.data.spans[1].parent_id == newest.data.spans[0].span_id
    assert newest.data.spans[0].inputs == {"question": "how"}
    assert newest.data.spans[0].outputs == "HOW!"

    by_run = mlflow.search_traces(experiment_ids=[experiment_id], run_id=run.info.run_id, return_type="list")
    assert [t.info.trace_id for t in by_run] == [newest.info.trace_id]

    def found(filter_string):
        hits = mlflow.search_traces(experiment_ids=[experiment_id], filter_string=filter_string, return_type="list")
        return [t.info.trace_id for t in hits]

    assert found(f"trace.client_request_id = 'how-{unique}'") == [newest.info.trace_id]
    assert newest.info.client_request_id == f"how-{unique}"
    assert found("trace.end_time_ms > 0") == [t.info.trace_id for t in traces]
    if tracking == server:
        # MLflow 3.17's own server answers 500 here (SqlTraceInfo has no end_time_ms).
        oldest_first = mlflow.search_traces(experiment_ids=[experiment_id], order_by=["end_time_ms ASC"], return_type="list")
        assert [t.info.trace_id for t in oldest_first] == [traces[1].info.trace_id, newest.info.trace_id]

    client = MlflowClient()
    client.set_trace_tag(newest.info.trace_id, "reviewed", "yes")
    assert client.get_trace(newest.info.trace_id).info.tags["reviewed"] == "yes"
    tagged = mlflow.search_traces(
        experiment_ids=[experiment_id], filter_string="tags.reviewed = 'yes'", return_type="list"
    )
    assert [t.info.trace_id for t in tagged] == [newest.info.trace_id]
    client.delete_trace_tag(newest.info.trace_id, "reviewed")
    assert "reviewed" not in client.get_trace(newest.info.trace_id).info.tags

    deleted = client.delete_traces(experiment_id, trace_ids=[traces[1].info.trace_id])
    assert deleted == 1
    left = mlflow.search_traces(experiment_ids=[experiment_id], return_type="list")
    assert [t.info.trace_id for t in left] == [newest.info.trace_id]


def test_traces_are_found_by_their_spans(tracking, unique):
    experiment_id = mlflow.set_experiment(f"span-search-{unique}").experiment_id

    @mlflow.trace(span_type="AGENT")
    def agent(question):
        return search_web(question) + look_up(question)

    @mlflow.trace(span_type="TOOL")
    def search_web(question):
        mlflow.get_current_active_span().set_attribute("engine", "duck")
        return question.upper()

    @mlflow.trace(span_type="TOOL")
    def look_up(question):
        if question == "fail":
            raise ValueError("no such page")
        return "!"

    agent("why")
    with pytest.raises(ValueError):
        agent("fail")
    mlflow.flush_trace_async_logging()
    traces = mlflow.search_traces(experiment_ids=[experiment_id], return_type="list")
    assert len(traces) == 2
    failed = next(t.info.trace_id for t in traces if t.info.state.value == "ERROR")
    ok = next(t.info.trace_id for t in traces if t.info.state.value == "OK")

    def found(filter_string):
        hits = mlflow.search_traces(experiment_ids=[experiment_id], filter_string=filter_string, return_type="list")
        return sorted(t.info.trace_id for t in hits)

    assert found("span.type = 'TOOL'") == sorted([ok, failed])
    assert found("span.name = 'search_web'") == sorted([ok, failed])
    # Comparisons of spans joined by AND hold for one and the same span.
    assert found("span.name = 'look_up' AND span.status = 'ERROR'") == [failed]
    assert found("span.name = 'search_web' AND span.status = 'ERROR'") == []
    assert found("span.type = 'AGENT' AND span.status = 'OK'") == [ok]
    assert found("span.type IN ('AGENT', 'LLM') AND span.status = 'ERROR'") == [failed]
    assert found("span.type NOT IN ('TOOL', 'AGENT')") == []
    assert found("span.attributes.engine LIKE '%duck%'") == sorted([ok, failed])
    assert found("span.content LIKE '%no such page%'") == [failed]
    assert found("trace.text ILIKE '%NO SUCH PAGE%'") == [failed]
    with pytest.raises(MlflowException):
        found("span.duration = '1'")


def test_an_opentelemetry_exporters_spans_make_a_trace(tracking, unique):
    """Spans from OpenTelemetry's own SDK and OTLP exporter (any language's
    would do), sent to /v1/traces as they end, make a trace that MLflow's
    client reads and finds by its spans."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.trace import Status, StatusCode

    experiment_id = mlflow.set_experiment(f"otel-{unique}").experiment_id
    with mlflow.start_run() as run:
        pass
    provider = TracerProvider(resource=Resource.create({"service.name": f"agent-{unique}"}))
    exporter = OTLPSpanExporter(
        endpoint=f"{tracking}/v1/traces",
        headers={"x-mlflow-experiment-id": experiment_id, "x-mlflow-run-id": run.info.run_id},
        compression=Compression.Gzip,
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("plan") as root:
        with tracer.start_as_current_span("search_web") as child:
            child.set_attribute("mlflow.spanType", "TOOL")
            child.set_attribute("engine", "duck")
        with tracer.start_as_current_span("look_up") as failing:
            failing.set_status(Status(StatusCode.ERROR, "no such page"))
    provider.shutdown()
    trace_id = "tr-" + format(root.get_span_context().trace_id, "032x")

    trace = mlflow.get_trace(trace_id)
    assert trace.info.state.value == "OK"
    assert trace.info.tags["service.name"] == f"agent-{unique}"
    spans = {s.name: s for s in trace.data.spans}
    assert sorted(spans) == ["look_up", "plan", "search_web"]
    assert spans["plan"].parent_id is None
    assert spans["search_web"].parent_id == spans["plan"].span_id
    assert spans["search_web"].span_type == "TOOL"
    assert spans["search_web"].attributes["engine"] == "duck"
    assert spans["look_up"].status.status_code == "ERROR"
    assert spans["look_up"].status.description == "no such page"

    def found(**query):
        hits = mlflow.search_traces(experiment_ids=[experiment_id], return_type="list", **query)
        return [t.info.trace_id for t in hits]

    assert found(filter_string="span.name = 'look_up' AND span.status = 'ERROR'") == [trace_id]
    assert found(filter_string="span.name = 'search_web' AND span.status = 'ERROR'") == []
    assert found(filter_string="span.attributes.engine LIKE '%duck%'") == [trace_id]
    assert found(run_id=run.info.run_id) == [trace_id]

    # Without the experiment header, the server says what is missing.
    response = requests.post(
        f"{tracking}/v1/traces", data=b"", headers={"Content-Type": "application/x-protobuf"}
    )
    assert response.status_code in (400, 422)
    assert "x-mlflow-experiment-id" in response.text.lower()


def test_feedback_and_expectations_on_traces_are_kept_overridden_and_deleted(tracking, unique):
    from mlflow.entities import AssessmentError, AssessmentSource, Feedback

    experiment_id = mlflow.set_experiment(f"assessed-{unique}").experiment_id

    @mlflow.trace
    def answer(question):
        return question.upper()

    answer("why")
    mlflow.flush_trace_async_logging()
    trace_id = mlflow.get_last_active_trace_id()
    answer("unjudged")
    mlflow.flush_trace_async_logging()
    judge = AssessmentSource(source_type="LLM_JUDGE", source_id="gpt-judge")
    person = AssessmentSource(source_type="HUMAN", source_id="ana@lab.edu")

    judged = mlflow.log_feedback(
        trace_id=trace_id,
        name="relevance",
        value=False,
        source=judge,
        rationale="it shouted",
        metadata={"chunk": "0"},
    )
    assert judged.assessment_id and judged.value is False and judged.valid
    failed = mlflow.log_feedback(
        trace_id=trace_id,
        name="safety",
        source=judge,
        error=AssessmentError(error_code="RATE_LIMITED", error_message="try later"),
    )
    expected = mlflow.log_expectation(
        trace_id=trace_id,
        name="expected_facts",
        value={"facts": ["why", "because"], "score": 1},
        source=person,
    )
    assert expected.value == {"facts": ["why", "because"], "score": 1}

    # A person overrides the judge: the judge's verdict is kept, not valid.
    overridden = mlflow.override_feedback(
        trace_id=trace_id, assessment_id=judged.assessment_id, value=True, rationale="fine", source=person
    )
    assert overridden.overrides == judged.assessment_id and overridden.valid
    assert mlflow.get_assessment(trace_id, judged.assessment_id).valid is False

    info = MlflowClient().get_trace(trace_id).info
    by_id = {a.assessment_id: a for a in info.assessments}
    assert set(by_id) == {judged.assessment_id, failed.assessment_id, expected.assessment_id, overridden.assessment_id}
    assert by_id[overridden.assessment_id].value is True
    assert by_id[overridden.assessment_id].source.source_id == "ana@lab.edu"
    assert by_id[judged.assessment_id].rationale == "it shouted"
    assert by_id[judged.assessment_id].metadata == {"chunk": "0"}
    assert by_id[failed.assessment_id].error.error_code == "RATE_LIMITED"
    assert by_id[expected.assessment_id].value == {"facts": ["why", "because"], "score": 1}
    found = mlflow.search_traces(experiment_ids=[experiment_id], return_type="list")
    assert {a.assessment_id for a in found[1].info.assessments} == set(by_id)
    assert found[0].info.assessments == []

    # Search looks at the verdicts that stand.
    def matching(filter_string):
        hits = mlflow.search_traces(experiment_ids=[experiment_id], filter_string=filter_string, return_type="list")
        return [t.info.trace_id for t in hits]

    assert matching("feedback.relevance = 'true'") == [trace_id]
    assert matching("feedback.relevance = 'false'") == []

    # An update changes the value and rationale, not the source.
    updated = mlflow.update_assessment(
        trace_id=trace_id,
        assessment_id=overridden.assessment_id,
        assessment=Feedback(name="relevance", value=0.75, rationale="mostly"),
    )
    assert (updated.value, updated.rationale) == (0.75, "mostly")
    assert matching("feedback.relevance > 0.5") == [trace_id]
    assert matching("feedback.relevance < 0.5") == []
    again = mlflow.get_assessment(trace_id, overridden.assessment_id)
    assert again.value == 0.75 and again.source.source_id == "ana@lab.edu"

    # Deleting the person's verdict makes the judge's valid again.
    mlflow.delete_assessment(trace_id=trace_id, assessment_id=overridden.assessment_id)
    assert mlflow.get_assessment(trace_id, judged.assessment_id).valid is True
    with pytest.raises(MlflowException) as missing:
        mlflow.get_assessment(trace_id, overridden.assessment_id)
    assert missing.value.error_code == "RESOURCE_DOES_NOT_EXIST"
    left = {a.assessment_id for a in MlflowClient().get_trace(trace_id).info.assessments}
    assert left == {judged.assessment_id, failed.assessment_id, expected.assessment_id}


def test_genai_evaluate_records_each_scorers_verdict_on_its_trace(tracking, unique):
    from mlflow.genai.scorers import scorer

    experiment_id = mlflow.set_experiment(f"evaluate-{unique}").experiment_id

    @scorer
    def exact(outputs, expectations):
        return outputs == expectations["expected_response"]

    data = [
        {"inputs": {"question": "a"}, "expectations": {"expected_response": "A"}},
        {"inputs": {"question": "b"}, "expectations": {"expected_response": "nope"}},
    ]
    result = mlflow.genai.evaluate(data=data, predict_fn=lambda question: question.upper(), scorers=[exact])
    assert result.metrics["exact/mean"] == 0.5
    mlflow.flush_trace_async_logging()

    traces = mlflow.search_traces(experiment_ids=[experiment_id], run_id=result.run_id, return_type="list")
    assert len(traces) == 2
    verdicts = {}
    for trace in traces:
        kinds = {a.name: a for a in trace.info.assessments}
        assert kinds["exact"].source.source_type == "CODE"
        assert "expected_response" in kinds
        verdicts[kinds["expected_response"].value] = kinds["exact"].value
    assert verdicts == {"A": True, "nope": False}


def test_traces_are_found_by_the_prompt_versions_they_used(tracking, unique):
    experiment_id = mlflow.set_experiment(f"prompted-{unique}").experiment_id
    name = f"greet-{unique}"
    mlflow.genai.register_prompt(name=name, template="Hello {{who}}")
    mlflow.genai.register_prompt(name=name, template="Hi {{who}}")
    assert mlflow.genai.load_prompt(f"prompts:/{name}@latest").version == 2
    # As MLflow's server: a prompt's versions are not model versions.
    assert MlflowClient().search_model_versions(f"name = '{name}'") == []
    assert [v.version for v in MlflowClient().search_prompt_versions(name)] == [2, 1]

    @mlflow.trace
    def greet(who, version):
        return mlflow.genai.load_prompt(f"prompts:/{name}/{version}").format(who=who)

    for who, version in [("ana", 1), ("ben", 2), ("eve", 2)]:
        greet(who, version)
    mlflow.flush_trace_async_logging()

    def who_used(filter_string):
        found = mlflow.search_traces(experiment_ids=[experiment_id], filter_string=filter_string, return_type="list")
        return sorted(t.data.spans[0].inputs["who"] for t in found)

    assert who_used(f'prompt = "{name}/1"') == ["ana"]
    assert who_used(f'prompt = "{name}/2"') == ["ben", "eve"]
    assert who_used(f'tags.`mlflow.linkedPrompts` = "{name}/2"') == ["ben", "eve"]
    assert who_used(f'prompt = "{name}/3"') == []
    with pytest.raises(MlflowException):
        who_used(f'prompt != "{name}/2"')


def test_judges_are_registered_in_versions_and_loaded_back(tracking, unique):
    from mlflow.genai.judges import make_judge
    from mlflow.genai.scorers import (
        Guidelines,
        ScorerSamplingConfig,
        delete_scorer,
        get_scorer,
        list_scorers,
        scorer,
    )
    from mlflow.genai.scorers.registry import list_scorer_versions

    experiment_id = mlflow.set_experiment(f"judges-{unique}").experiment_id
    Guidelines(name="polite", guidelines=["Be polite"]).register()
    polite = Guidelines(name="polite", guidelines=["Be polite", "Be brief"]).register()
    make_judge(
        name="tone",
        instructions="Is {{ outputs }} polite?",
        model="openai:/gpt-4o-mini",
        feedback_value_type=bool,
    ).register()

    assert sorted((s.name, type(s).__name__) for s in list_scorers()) == [
        ("polite", "Guidelines"),
        ("tone", "InstructionsJudge"),
    ]
    assert get_scorer(name="polite").guidelines == ["Be polite", "Be brief"]
    assert get_scorer(name="polite", version=1).guidelines == ["Be polite"]
    assert get_scorer(name="tone").instructions == "Is {{ outputs }} polite?"
    assert [v for _, v in list_scorer_versions(name="polite")] == [1, 2]
    # Another experiment has its own.
    assert list_scorers(experiment_id=mlflow.create_experiment(f"no-judges-{unique}")) == []

    # Online scoring needs an AI gateway model; neither server scores a
    # provider's model as traces come.
    with pytest.raises(MlflowException, match="gateway"):
        polite.start(sampling_config=ScorerSamplingConfig(sample_rate=0.5))

    # Custom code is not registered: whoever loads a scorer would run it.
    @scorer
    def exact(outputs, expectations):
        return outputs == expectations["x"]

    with pytest.raises(MlflowException, match="@scorer"):
        exact.register(name="exact")

    delete_scorer(name="polite", version=2)
    assert get_scorer(name="polite").guidelines == ["Be polite"]
    delete_scorer(name="polite", version="all")
    assert [s.name for s in list_scorers(experiment_id=experiment_id)] == ["tone"]
    with pytest.raises(MlflowException, match="not found"):
        get_scorer(name="polite")


def test_evaluation_datasets_merge_records_by_their_inputs(tracking, unique):
    from mlflow.genai import datasets

    experiment_id = mlflow.set_experiment(f"datasets-{unique}").experiment_id
    other = MlflowClient().create_experiment(f"datasets-other-{unique}")
    made = datasets.create_dataset(name=f"qa-{unique}", experiment_id=experiment_id, tags={"stage": "draft"})
    assert made.dataset_id.startswith("d-")
    assert made.experiment_ids == [experiment_id]
    assert made.tags["stage"] == "draft"

    made.merge_records([
        {"inputs": {"question": "2+2?"}, "expectations": {"answer": "4"}},
        {"inputs": {"question": "capital of France?"}, "expectations": {"answer": "Paris"}, "tags": {"topic": "geo"}},
    ])
    # The same inputs again: outputs replaced, expectations added to.
    made.merge_records([{"inputs": {"question": "2+2?"}, "outputs": "four", "expectations": {"why": "arithmetic"}}])

    found = datasets.get_dataset(dataset_id=made.dataset_id)
    assert found.name == f"qa-{unique}" and found.digest != made.digest
    assert json.loads(found.profile) == {"num_records": 2}
    assert json.loads(found.schema)["expectations"] == {"answer": "string", "why": "string"}
    assert datasets.get_dataset(name=f"qa-{unique}").dataset_id == made.dataset_id
    rows = {r["inputs"]["question"]: r for r in found.to_df().to_dict(orient="records")}
    assert set(rows) == {"2+2?", "capital of France?"}
    assert rows["2+2?"]["outputs"] == "four"
    assert rows["2+2?"]["expectations"] == {"answer": "4", "why": "arithmetic"}
    assert rows["capital of France?"]["tags"]["topic"] == "geo"
    assert rows["capital of France?"]["source_type"] == "HUMAN"

    # Search: by experiment, by tag, by name.
    def names(**kw):
        return [d.name for d in datasets.search_datasets(**kw)]

    assert names(experiment_ids=[experiment_id]) == [f"qa-{unique}"]
    assert names(filter_string=f"name = 'qa-{unique}' AND tags.stage = 'draft'") == [f"qa-{unique}"]
    assert names(filter_string=f"name = 'qa-{unique}' AND tags.stage = 'final'") == []

    # Tags and experiments.
    datasets.set_dataset_tags(made.dataset_id, {"stage": "final"})
    datasets.delete_dataset_tag(made.dataset_id, "stage")
    assert "stage" not in datasets.get_dataset(dataset_id=made.dataset_id).tags
    added = datasets.add_dataset_to_experiments(made.dataset_id, [other])
    assert sorted(added.experiment_ids) == sorted([experiment_id, other])
    left = datasets.remove_dataset_from_experiments(made.dataset_id, [experiment_id])
    assert left.experiment_ids == [other]
    assert names(experiment_ids=[experiment_id]) == []

    # Deleting records, then the dataset.
    record_id = rows["2+2?"]["dataset_record_id"]
    assert found.delete_records([record_id]) == 1
    assert [r["inputs"] for r in datasets.get_dataset(dataset_id=made.dataset_id).to_df().to_dict(orient="records")] == [
        {"question": "capital of France?"}
    ]
    datasets.delete_dataset(dataset_id=made.dataset_id)
    with pytest.raises(MlflowException) as gone:
        datasets.get_dataset(dataset_id=made.dataset_id)
    assert gone.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_a_dataset_of_traces_pages_and_feeds_genai_evaluate(tracking, unique):
    from mlflow.genai import datasets
    from mlflow.genai.scorers import scorer

    experiment_id = mlflow.set_experiment(f"dataset-eval-{unique}").experiment_id

    @mlflow.trace
    def answer(question):
        return question.upper()

    for question in ["a", "b"]:
        answer(question)
    mlflow.flush_trace_async_logging()
    traces = mlflow.search_traces(experiment_ids=[experiment_id], return_type="list")
    from_traces = datasets.create_dataset(name=f"traced-{unique}", experiment_id=experiment_id)
    from_traces.merge_records(traces)
    records = from_traces.to_df().to_dict(orient="records")
    assert sorted((r["inputs"]["question"], r["outputs"]) for r in records) == [("a", "A"), ("b", "B")]
    assert {r["source_type"] for r in records} == {"TRACE"}
    assert {r["source_id"] for r in records} == {t.info.trace_id for t in traces}

    # More records than one page holds come back whole.
    large = datasets.create_dataset(name=f"large-{unique}", experiment_id=experiment_id)
    large.merge_records([{"inputs": {"i": i}, "expectations": {"double": 2 * i}} for i in range(2100)])
    frame = datasets.get_dataset(dataset_id=large.dataset_id).to_df()
    assert sorted(frame["inputs"].map(lambda x: x["i"])) == list(range(2100))

    @scorer
    def exact(outputs, expectations):
        return outputs == expectations["expected"]

    graded = datasets.create_dataset(name=f"graded-{unique}", experiment_id=experiment_id)
    graded.merge_records([
        {"inputs": {"question": "a"}, "expectations": {"expected": "A"}},
        {"inputs": {"question": "b"}, "expectations": {"expected": "nope"}},
    ])
    result = mlflow.genai.evaluate(
        data=datasets.get_dataset(dataset_id=graded.dataset_id),
        predict_fn=lambda question: question.upper(),
        scorers=[exact],
    )
    assert result.metrics["exact/mean"] == 0.5
    inputs = mlflow.get_run(result.run_id).inputs.dataset_inputs
    assert [(i.dataset.name, i.dataset.source_type) for i in inputs] == [
        (f"graded-{unique}", "mlflow_evaluation_dataset")
    ]
    assert json.loads(inputs[0].dataset.source) == {"dataset_id": graded.dataset_id}


def test_a_large_artifact_goes_up_in_parts_when_asked(
    tracking, server, unique, tmp_path, monkeypatch
):
    """MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD: the client asks for part URLs
    and PUTs the parts there in parallel. MLflow's own server, storing
    artifacts on a local disk, refuses (the client then sends the file
    whole); Trainyard takes the parts."""
    import mlflow.store.artifact.http_artifact_repo as http_repo

    monkeypatch.setenv("MLFLOW_ENABLE_PROXY_MULTIPART_UPLOAD", "true")
    monkeypatch.setenv("MLFLOW_MULTIPART_UPLOAD_MINIMUM_FILE_SIZE", str(1 << 20))
    monkeypatch.setenv("MLFLOW_MULTIPART_UPLOAD_CHUNK_SIZE", str(1 << 20))
    parts = []
    real_put = http_repo.requests.put

    def put(url, *args, **kwargs):
        parts.append(url)
        return real_put(url, *args, **kwargs)

    monkeypatch.setattr(http_repo.requests, "put", put)
    weights = tmp_path / "weights.bin"
    data = np.random.default_rng(7).bytes((3 << 20) + 12345)
    weights.write_bytes(data)
    mlflow.set_experiment(f"multipart-{unique}")
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(weights), artifact_path="checkpoints")
    back = mlflow.artifacts.download_artifacts(
        run_id=run.info.run_id, artifact_path="checkpoints/weights.bin", dst_path=str(tmp_path / "back")
    )
    assert open(back, "rb").read() == data
    listed = MlflowClient().list_artifacts(run.info.run_id, "checkpoints")
    assert [(f.path, f.file_size) for f in listed] == [("checkpoints/weights.bin", len(data))]
    if tracking == server:
        assert len(parts) == 4 and all("/mpu/part/" in url for url in parts), parts
    else:
        assert parts == []


def test_webhooks_tell_a_receiver_of_registry_events_signed(tracking, server, unique):
    import base64
    import hashlib
    import hmac
    import threading
    import time
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    from mlflow.entities.webhook import WebhookStatus

    received = []
    answers = []  # what the receiver answers next; then 200

    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"])).decode()
            status = answers.pop(0) if answers else 200
            # Header names are case-insensitive (Trainyard sends them in lower case).
            received.append((status, {k.lower(): v for k, v in self.headers.items()}, body))
            self.send_response(status)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        client = MlflowClient()
        hook = client.create_webhook(
            name=f"ci-{unique}",
            url=f"http://127.0.0.1:{httpd.server_port}/hook",
            events=["model_version.created", "model_version_alias.created", "prompt_version.created"],
            description="deploy on champion",
            secret="s3cret",
        )
        assert hook.status == WebhookStatus.ACTIVE
        got = client.get_webhook(hook.webhook_id)
        assert (got.name, got.description) == (f"ci-{unique}", "deploy on champion")
        assert sorted(str(e) for e in got.events) == [
            "model_version.created",
            "model_version_alias.created",
            "prompt_version.created",
        ]
        assert hook.webhook_id in [w.webhook_id for w in client.list_webhooks(max_results=1000)]

        # The test call sends MLflow's example payload, now.
        tested = client.test_webhook(hook.webhook_id, event="model_version_alias.created")
        assert (tested.success, tested.response_status, tested.response_body) == (True, 200, "ok")
        example = json.loads(received[-1][2])
        assert (example["entity"], example["action"]) == ("model_version_alias", "created")
        assert example["data"] == {"name": "example_model", "alias": "example_alias", "version": "1"}
        received.clear()
        answers.append(503)  # busy once

        mlflow.set_experiment(f"hooked-{unique}")
        x, y = _frame(seed=5)
        with mlflow.start_run() as run:
            info = mlflow.sklearn.log_model(LogisticRegression().fit(x, y), name="model")
        name = f"hooked-{unique}"
        mlflow.register_model(info.model_uri, name)
        client.set_registered_model_alias(name, "champion", "1")
        client.set_model_version_tag(name, "1", "stage", "prod")  # not asked for
        prompt = f"greeting-{unique}"
        mlflow.genai.register_prompt(name=prompt, template="Hello {{who}}")

        def delivered():
            return [(json.loads(b), h) for s, h, b in received if s == 200]

        deadline = time.monotonic() + 60
        while len(delivered()) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        events = {f'{p["entity"]}.{p["action"]}': (p, h) for p, h in delivered()}
        assert sorted(events) == ["model_version.created", "model_version_alias.created", "prompt_version.created"]
        version, headers = events["model_version.created"]
        assert version["data"]["name"] == name and version["data"]["version"] == "1"
        # MLflow's server sends the run only when the client named it;
        # Trainyard sends the run that the model's source came from.
        assert version["data"]["run_id"] == (run.info.run_id if tracking == server else None)
        assert events["model_version_alias.created"][0]["data"] == {"name": name, "alias": "champion", "version": "1"}
        template = events["prompt_version.created"][0]["data"]
        assert (template["name"], template["version"], template["template"]) == (prompt, "1", "Hello {{who}}")
        assert "mlflow.prompt.is_prompt" not in template["tags"]
        for payload, headers in events.values():
            delivery = headers["x-mlflow-delivery-id"]
            body = next(b for s, h, b in received if h["x-mlflow-delivery-id"] == delivery and s == 200)
            signed = f'{delivery}.{headers["x-mlflow-timestamp"]}.{body}'
            mac = hmac.new(b"s3cret", signed.encode(), hashlib.sha256).digest()
            assert headers["x-mlflow-signature"] == "v1," + base64.b64encode(mac).decode()
        # The one the busy receiver refused was sent again.
        assert [s for s, _, _ in received].count(503) == 1

        # Disabled, it is told nothing; deleted, it is gone.
        client.update_webhook(hook.webhook_id, status=WebhookStatus.DISABLED)
        assert client.get_webhook(hook.webhook_id).status == WebhookStatus.DISABLED
        count = len(received)
        client.set_registered_model_alias(name, "challenger", "1")
        time.sleep(1.5)
        assert len(received) == count
        client.delete_webhook(hook.webhook_id)
        with pytest.raises(MlflowException, match="not found"):
            client.get_webhook(hook.webhook_id)
    finally:
        httpd.shutdown()
