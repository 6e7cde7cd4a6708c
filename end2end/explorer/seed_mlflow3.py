"""Logs one run with what MLflow 3 scripts add beside metrics: a dataset
(pandas, from S3), two logged models with a metric each (the first
registered, with an alias), and a trace of two nested spans with a judge's
feedback, a person's that overrides it, and an expectation; and an
evaluation dataset of two records, one of them made from the trace; two
registered scorers, one in two versions; and, in experiments of their own,
a trace that loaded a registered prompt, one whose span raised, and one
that an OpenTelemetry exporter is still sending (its child span ended and
was sent, its root has not). Prints the ids as JSON. Usage:
seed_mlflow3.py URL EXPERIMENT"""

import json
import sys

import mlflow
import pandas as pd
from mlflow.entities import AssessmentSource, LoggedModelStatus
from mlflow.genai.judges import make_judge
from mlflow.genai.scorers import Guidelines
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

url, experiment = sys.argv[1], sys.argv[2]
mlflow.set_tracking_uri(url)
experiment_id = mlflow.set_experiment(experiment).experiment_id
frame = pd.DataFrame({"width": [0.1, 0.5, 0.9], "label": [0, 1, 1]})


@mlflow.trace(span_type="TOOL")
def score(width):
    mlflow.get_current_active_span().set_attribute("scale", "doubled")
    return width * 2


@mlflow.trace
def predict(width):
    mlflow.update_current_trace(tags={"stage": "canary"})
    return int(score(width) > 0.6)


with mlflow.start_run(run_name="with-inputs") as run:
    mlflow.log_input(mlflow.data.from_pandas(frame, source="s3://lab/shapes.csv", name="shapes"), context="training", tags={"split": "v2"})
    model = mlflow.initialize_logged_model(name="classifier", model_type="sklearn")
    mlflow.log_metric("val_acc", 0.875, model_id=model.model_id)
    mlflow.MlflowClient().finalize_logged_model(model.model_id, LoggedModelStatus.READY)
    other = mlflow.initialize_logged_model(name="regressor", model_type="sklearn")
    mlflow.log_metric("val_acc", 0.91, model_id=other.model_id)
    # A value JSON has no word for: the page still comes alive.
    mlflow.log_metric("val_loss", float("nan"), model_id=other.model_id)
    mlflow.MlflowClient().finalize_logged_model(other.model_id, LoggedModelStatus.READY)
    predict(0.7)
mlflow.flush_trace_async_logging()
trace_id = mlflow.get_last_active_trace_id()
judged = mlflow.log_feedback(
    trace_id=trace_id,
    name="correct",
    value=False,
    source=AssessmentSource(source_type="LLM_JUDGE", source_id="judge"),
    rationale="0.7 is too wide",
)
mlflow.override_feedback(
    trace_id=trace_id,
    assessment_id=judged.assessment_id,
    value=True,
    rationale="1 is right for 0.7",
    source=AssessmentSource(source_type="HUMAN", source_id="ana"),
)
mlflow.log_expectation(trace_id=trace_id, name="expected_label", value=1)
questions = mlflow.genai.datasets.create_dataset(
    name="width questions", experiment_id=experiment_id, tags={"stage": "draft"}
)
questions.merge_records([mlflow.get_trace(trace_id)])
questions.merge_records([
    {"inputs": {"width": 0.2}, "expectations": {"label": 0, "why": "narrow"}, "tags": {"checked": "yes"}},
])
# Judges registered in the experiment: guidelines in two versions, and an
# LLM judge.
Guidelines(name="polite", guidelines=["Answer politely"]).register(experiment_id=experiment_id)
Guidelines(name="polite", guidelines=["Answer politely", "Answer in one sentence"]).register(
    experiment_id=experiment_id
)
make_judge(
    name="width check",
    instructions="Does {{ outputs }} match the width in {{ inputs }}?",
    model="openai:/gpt-4o-mini",
    feedback_value_type=bool,
).register(experiment_id=experiment_id)
prompt = f"greeting-{experiment}"
mlflow.genai.register_prompt(name=prompt, template="Hello {{who}}")
prompted_experiment = mlflow.set_experiment(f"{experiment}-prompted").experiment_id


@mlflow.trace
def greet(who):
    return mlflow.genai.load_prompt(f"prompts:/{prompt}/1").format(who=who)


greet("ana")
mlflow.flush_trace_async_logging()
prompted_trace = mlflow.get_last_active_trace_id()
failing_experiment = mlflow.set_experiment(f"{experiment}-failing").experiment_id


@mlflow.trace(span_type="TOOL")
def fetch(url):
    raise ConnectionError(f"no route to {url}")


try:
    fetch("http://docs.internal")
except ConnectionError:
    pass
mlflow.flush_trace_async_logging()
failed_trace = mlflow.get_last_active_trace_id()
otel_experiment_id = mlflow.set_experiment(f"{experiment}-otel").experiment_id
provider = TracerProvider(resource=Resource.create({"service.name": "planner"}))
provider.add_span_processor(
    SimpleSpanProcessor(
        OTLPSpanExporter(endpoint=f"{url}/v1/traces", headers={"x-mlflow-experiment-id": otel_experiment_id})
    )
)
tracer = provider.get_tracer("seed")
root = tracer.start_span("plan")
with otel_trace.use_span(root):
    with tracer.start_as_current_span("search_web") as child:
        child.set_attribute("mlflow.spanType", "TOOL")
provider.force_flush()
otel_trace_id = "tr-" + format(root.get_span_context().trace_id, "032x")
registered = f"shapes-{experiment}"
version = mlflow.register_model(f"models:/{model.model_id}", registered)
client = mlflow.MlflowClient()
client.set_registered_model_alias(registered, "champion", version.version)
client.set_registered_model_tag(registered, "task", "shapes")
client.update_registered_model(
    registered, description="Classifies **shapes**.\n\n<script>alert(1)</script>"
)
client.update_model_version(registered, version.version, description="first cut, *unpruned*")
client.set_model_version_tag(registered, version.version, "validated", "yes")
print(
    json.dumps(
        {
            "experiment_id": experiment_id,
            "run_id": run.info.run_id,
            "model_id": model.model_id,
            "registered": registered,
            "dataset_id": questions.dataset_id,
            "trace_id": trace_id,
            "prompt": prompt,
            "prompted_experiment_id": prompted_experiment,
            "prompted_trace_id": prompted_trace,
            "failing_experiment_id": failing_experiment,
            "failed_trace_id": failed_trace,
            "otel_experiment_id": otel_experiment_id,
            "otel_trace_id": otel_trace_id,
        }
    )
)
