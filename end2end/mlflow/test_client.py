"""The official mlflow client (3.17), unchanged, against Trainyard."""

import math
import os
import uuid

import mlflow
import pytest
import requests
from mlflow import MlflowClient
from mlflow.entities import Metric, ViewType
from mlflow.exceptions import MlflowException


def test_experiments_lifecycle(unique):
    client = MlflowClient()
    name = f"exp-{unique}"
    experiment = mlflow.set_experiment(name)
    assert experiment.name == name
    assert experiment.lifecycle_stage == "active"
    assert experiment.artifact_location == f"mlflow-artifacts:/{experiment.experiment_id}"
    assert mlflow.set_experiment(name).experiment_id == experiment.experiment_id, "found, not created again"

    client.set_experiment_tag(experiment.experiment_id, "team", "vision")
    assert client.get_experiment(experiment.experiment_id).tags["team"] == "vision"

    found = mlflow.search_experiments(filter_string=f"name = '{name}'")
    assert [e.experiment_id for e in found] == [experiment.experiment_id]
    assert client.get_experiment_by_name("Default").experiment_id == "0"

    client.rename_experiment(experiment.experiment_id, f"{name}-renamed")
    assert client.get_experiment_by_name(name) is None
    client.delete_experiment(experiment.experiment_id)
    assert client.get_experiment(experiment.experiment_id).lifecycle_stage == "deleted"
    deleted = client.search_experiments(view_type=ViewType.DELETED_ONLY)
    assert experiment.experiment_id in [e.experiment_id for e in deleted]
    client.restore_experiment(experiment.experiment_id)
    assert client.get_experiment(experiment.experiment_id).lifecycle_stage == "active"

    with pytest.raises(MlflowException) as err:
        client.create_experiment(f"{name}-renamed")
    assert err.value.error_code == "RESOURCE_ALREADY_EXISTS"


def test_a_training_script_logs_everything(unique):
    mlflow.set_experiment(f"train-{unique}")
    with mlflow.start_run(run_name="resnet") as run:
        mlflow.log_param("lr", 0.01)
        mlflow.log_params({"batch_size": 64, "optimizer": "adam"})
        for step in range(5):
            mlflow.log_metric("loss", 1.0 / (step + 1), step=step, timestamp=1_700_000_000_000 + step)
        mlflow.log_metrics({"acc": 0.9, "f1": 0.8}, step=4)
        mlflow.set_tag("stage", "dev")
        mlflow.set_tags({"owner": "alice", "stage": "prod"})
        run_id = run.info.run_id

    got = MlflowClient().get_run(run_id)
    assert got.info.status == "FINISHED"
    assert got.info.end_time is not None and got.info.end_time >= got.info.start_time
    assert got.info.run_name == "resnet"
    assert got.data.params == {"lr": "0.01", "batch_size": "64", "optimizer": "adam"}
    assert got.data.metrics["loss"] == pytest.approx(0.2), "the latest is the highest step"
    assert got.data.metrics["acc"] == pytest.approx(0.9)
    assert got.data.tags["stage"] == "prod", "tags: last write wins"
    assert got.data.tags["mlflow.runName"] == "resnet"


def test_params_are_write_once(unique):
    mlflow.set_experiment(f"params-{unique}")
    with mlflow.start_run():
        mlflow.log_param("lr", "0.1")
        mlflow.log_param("lr", "0.1")
        with pytest.raises(MlflowException) as err:
            mlflow.log_param("lr", "0.2")
        assert err.value.error_code == "INVALID_PARAMETER_VALUE"
        assert "Changing param values is not allowed" in str(err.value)


def test_metric_history_keeps_every_point_and_odd_values(unique):
    mlflow.set_experiment(f"history-{unique}")
    client = MlflowClient()
    with mlflow.start_run() as run:
        for step in range(300):
            mlflow.log_metric("loss", step * 0.5, step=step, timestamp=1_000 + step)
        mlflow.log_metrics({"odd": float("nan")}, step=0)
        mlflow.log_metrics({"odd": float("inf")}, step=1)
        mlflow.log_metrics({"odd": float("-inf")}, step=2)
    history = client.get_metric_history(run.info.run_id, "loss")
    assert [m.step for m in history] == list(range(300))
    assert history[10].value == 5.0 and history[10].timestamp == 1_010
    odd = client.get_metric_history(run.info.run_id, "odd")
    assert math.isnan(odd[0].value) and odd[1].value == math.inf and odd[2].value == -math.inf
    assert client.get_metric_history(run.info.run_id, "never-logged") == []


def test_long_histories_come_back_whole_through_the_clients_pages(unique):
    # The client pages get-history by 25,000 points: 60,000 points take three
    # pages. An exact duplicate is kept once, as MLflow keeps it.
    mlflow.set_experiment(f"long-{unique}")
    client = MlflowClient()
    with mlflow.start_run() as run:
        for start in range(0, 60_000, 1_000):
            client.log_batch(
                run.info.run_id,
                metrics=[
                    Metric("loss", 1.0 / (1 + step), 1_700_000_000_000 + step, step)
                    for step in range(start, start + 1_000)
                ],
            )
        mlflow.log_metric("loss", 1.0, step=0, timestamp=1_700_000_000_000)
    history = client.get_metric_history(run.info.run_id, "loss")
    assert len(history) == 60_000
    assert [m.step for m in history] == list(range(60_000))
    assert history[-1].value == 1.0 / 60_000


def test_search_runs_filter_order_and_pages(unique):
    experiment = mlflow.set_experiment(f"search-{unique}")
    for i, (lr, acc) in enumerate([(0.001, 0.91), (0.01, 0.85), (0.1, 0.60), (0.5, 0.40), (1.0, 0.10)]):
        with mlflow.start_run(run_name=f"run-{i}"):
            mlflow.log_param("lr", lr)
            mlflow.log_metric("acc", acc)
            mlflow.set_tag("family", "cnn" if i % 2 == 0 else "mlp")
    client = MlflowClient()
    ids = [experiment.experiment_id]
    best = client.search_runs(ids, "metrics.acc > 0.5", order_by=["metrics.acc DESC"])
    assert [r.info.run_name for r in best] == ["run-0", "run-1", "run-2"]

    page = client.search_runs(ids, "", order_by=["metrics.acc ASC"], max_results=2)
    assert [r.info.run_name for r in page] == ["run-4", "run-3"]
    assert page.token
    rest = client.search_runs(ids, "", order_by=["metrics.acc ASC"], max_results=2, page_token=page.token)
    assert [r.info.run_name for r in rest] == ["run-2", "run-1"]

    # What MLflow lacks: OR, parentheses, NOT IN, numeric params.
    either = client.search_runs(ids, "tags.family = 'mlp' OR (metrics.acc > 0.9)", order_by=["attributes.run_name"])
    assert [r.info.run_name for r in either] == ["run-0", "run-1", "run-3"]
    small = client.search_runs(ids, "params.lr < 0.05 AND tags.family NOT IN ('mlp')")
    assert [r.info.run_name for r in small] == ["run-0"]

    frame = mlflow.search_runs(experiment_ids=ids, filter_string="metrics.acc >= 0.4", order_by=["metrics.acc DESC"])
    assert list(frame["tags.mlflow.runName"]) == ["run-0", "run-1", "run-2", "run-3"]
    assert list(frame["params.lr"])[:2] == ["0.001", "0.01"]

    with pytest.raises(MlflowException) as err:
        client.search_runs(ids, "metrics.acc > 'high'")
    assert err.value.error_code == "INVALID_PARAMETER_VALUE"
    assert "position" in str(err.value)


def test_delete_and_restore_runs(unique):
    experiment = mlflow.set_experiment(f"lifecycle-{unique}")
    client = MlflowClient()
    with mlflow.start_run() as run:
        pass
    client.delete_run(run.info.run_id)
    assert client.get_run(run.info.run_id).info.lifecycle_stage == "deleted"
    assert client.search_runs([experiment.experiment_id]) == []
    deleted = client.search_runs([experiment.experiment_id], run_view_type=ViewType.DELETED_ONLY)
    assert [r.info.run_id for r in deleted] == [run.info.run_id]
    client.restore_run(run.info.run_id)
    assert client.get_run(run.info.run_id).info.lifecycle_stage == "active"
    with pytest.raises(MlflowException) as err:
        client.get_run(uuid.uuid4().hex)
    assert err.value.error_code == "RESOURCE_DOES_NOT_EXIST"


def test_artifacts_round_trip(unique, tmp_path):
    mlflow.set_experiment(f"artifacts-{unique}")
    (tmp_path / "model.txt").write_text("weights")
    tree = tmp_path / "plots"
    (tree / "sub").mkdir(parents=True)
    (tree / "loss.csv").write_text("step,loss\n0,1.0\n")
    (tree / "sub" / "deep.bin").write_bytes(os.urandom(100_000))
    with mlflow.start_run() as run:
        mlflow.log_artifact(str(tmp_path / "model.txt"))
        mlflow.log_artifacts(str(tree), artifact_path="plots")
        mlflow.log_text("hello", "notes/readme.txt")
    client = MlflowClient()
    top = sorted(a.path for a in client.list_artifacts(run.info.run_id))
    assert top == ["model.txt", "notes", "plots"]
    nested = sorted(a.path for a in client.list_artifacts(run.info.run_id, "plots"))
    assert nested == ["plots/loss.csv", "plots/sub"]
    # MLflow's ListArtifacts over REST, as the R client and MLflow's UI ask.
    listed = requests.get(
        f"{mlflow.get_tracking_uri()}/api/2.0/mlflow/artifacts/list",
        params={"run_id": run.info.run_id, "path": "plots"},
        timeout=10,
    ).json()
    assert listed["root_uri"] == run.info.artifact_uri
    assert [(f["path"], f["is_dir"]) for f in listed["files"]] == [("plots/loss.csv", False), ("plots/sub", True)]
    assert listed["files"][0]["file_size"] == len("step,loss\n0,1.0\n")

    out = tmp_path / "download"
    out.mkdir()
    local = mlflow.artifacts.download_artifacts(run_id=run.info.run_id, dst_path=str(out))
    assert (out / "model.txt").read_text() == "weights"
    assert (out / "plots" / "sub" / "deep.bin").read_bytes() == (tree / "sub" / "deep.bin").read_bytes()
    assert os.path.isdir(local)
    single = client.download_artifacts(run.info.run_id, "notes/readme.txt", str(out))
    assert open(single).read() == "hello"


def test_hostile_artifact_paths_are_refused(server, unique):
    mlflow.set_experiment(f"hostile-{unique}")
    with mlflow.start_run() as run:
        pass
    exp = run.info.experiment_id
    base = f"{server}/api/2.0/mlflow-artifacts/artifacts"
    for path in [
        f"{exp}/{run.info.run_id}/artifacts/%2E%2E/%2E%2E/escape.txt",
        f"{exp}/{run.info.run_id}/other/x.txt",
        f"{exp}/{uuid.uuid4().hex}/artifacts/x.txt",
    ]:
        response = requests.put(f"{base}/{path}", data=b"x", timeout=10)
        assert response.status_code in (400, 404), (path, response.status_code)
        assert response.json()["error_code"] in ("INVALID_PARAMETER_VALUE", "RESOURCE_DOES_NOT_EXIST")
    for path in ["../..", "a/../../b", "x:y"]:
        response = requests.get(
            f"{server}/api/2.0/mlflow/artifacts/list", params={"run_id": run.info.run_id, "path": path}, timeout=10
        )
        assert response.status_code == 400, (path, response.status_code)
        assert response.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    # A client that does not normalise `..` itself is refused too.
    raw = requests.Request("PUT", f"{base}/{exp}/{run.info.run_id}/artifacts/../../../escape.txt", data=b"x").prepare()
    raw.url = f"{base}/{exp}/{run.info.run_id}/artifacts/../../../escape.txt"
    response = requests.Session().send(raw, timeout=10)
    assert response.status_code in (400, 404)
    assert MlflowClient().list_artifacts(run.info.run_id) == []


def test_mlflow_errors_and_limits_over_rest(server, unique):
    api = f"{server}/api/2.0/mlflow"
    experiment_id = mlflow.set_experiment(f"rest-{unique}").experiment_id
    run = requests.post(f"{api}/runs/create", json={"experiment_id": experiment_id}, timeout=10).json()["run"]
    run_id = run["info"]["run_id"]

    # A batch is atomic: a param conflict keeps its metrics out too.
    ok = requests.post(f"{api}/runs/log-batch", json={"run_id": run_id, "params": [{"key": "p", "value": "1"}]}, timeout=10)
    assert ok.status_code == 200
    bad = requests.post(
        f"{api}/runs/log-batch",
        json={"run_id": run_id, "params": [{"key": "p", "value": "2"}],
              "metrics": [{"key": "m", "value": 1, "timestamp": 1, "step": 0}]},
        timeout=10,
    )
    assert bad.status_code == 400 and bad.json()["error_code"] == "INVALID_PARAMETER_VALUE"
    assert "m" not in MlflowClient().get_run(run_id).data.metrics

    too_many = [{"key": "m", "value": 1, "timestamp": 1, "step": i} for i in range(1001)]
    response = requests.post(f"{api}/runs/log-batch", json={"run_id": run_id, "metrics": too_many}, timeout=10)
    assert response.status_code == 400 and "at most 1000 metrics" in response.json()["message"]

    response = requests.post(f"{api}/runs/log-parameter", json={"run_id": run_id, "key": "k" * 251, "value": "v"}, timeout=10)
    assert response.status_code == 400 and "250" in response.json()["message"]

    # Artifacts are the server's to keep: a location of the client's own is
    # refused, saying so, rather than taken and then failing every upload.
    for location in ["s3://bucket/prefix", f"mlflow-artifacts:/custom/{unique}"]:
        with pytest.raises(MlflowException) as err:
            MlflowClient().create_experiment(f"located-{unique}", artifact_location=location)
        assert err.value.error_code == "INVALID_PARAMETER_VALUE"
        assert "leave artifact_location empty" in err.value.message
    assert MlflowClient().get_experiment_by_name(f"located-{unique}") is None

    response = requests.post(f"{api}/runs/log-metric", data="{not json", headers={"Content-Type": "application/json"}, timeout=10)
    assert response.status_code == 400 and response.json()["error_code"] == "MALFORMED_REQUEST"

    response = requests.post(f"{api}/runs/log-metric", json={"run_id": run_id, "key": "m", "value": "high", "timestamp": 1}, timeout=10)
    assert response.status_code == 400

    response = requests.post(f"{api}/runs/log-batch", data=b"{" + b" " * (5 * 1024 * 1024) + b"}", headers={"Content-Type": "application/json"}, timeout=30)
    assert response.status_code == 413 and response.json()["error_code"] == "REQUEST_LIMIT_EXCEEDED"

    response = requests.get(f"{api}/runs/get", params={"run_id": uuid.uuid4().hex}, timeout=10)
    assert response.status_code == 404 and response.json()["error_code"] == "RESOURCE_DOES_NOT_EXIST"

    response = requests.get(f"{api}/no/such/endpoint", timeout=10)
    assert response.status_code == 404 and response.json()["error_code"] == "ENDPOINT_NOT_FOUND"

    # Python's json writes bare NaN / Infinity; MLflow accepts them, so do we.
    response = requests.post(
        f"{api}/runs/log-metric",
        data='{"run_id": "%s", "key": "bare", "value": NaN, "timestamp": 5, "step": 0}' % run_id,
        headers={"Content-Type": "application/json"},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    assert math.isnan(MlflowClient().get_run(run_id).data.metrics["bare"])

    # The server is still fine, and so is the run.
    assert MlflowClient().get_run(run_id).data.params == {"p": "1"}


def test_history_bulk_interval_samples_for_charts(server, unique):
    mlflow.set_experiment(f"bulk-{unique}")
    with mlflow.start_run() as run:
        MlflowClient().log_batch(
            run.info.run_id,
            metrics=[mlflow.entities.Metric("loss", float(i), 1_000 + i, i) for i in range(1000)],
        )
    response = requests.get(
        f"{server}/ajax-api/2.0/mlflow/metrics/get-history-bulk-interval",
        params={"run_ids": [run.info.run_id], "metric_key": "loss", "max_results": 10},
        timeout=10,
    )
    metrics = response.json()["metrics"]
    assert len(metrics) == 10
    assert metrics[0]["step"] == 0 and metrics[-1]["step"] == 999
    assert all(m["run_id"] == run.info.run_id for m in metrics)


def test_version_health_server_info_and_json_errors_under_every_prefix(server):
    assert requests.get(f"{server}/version", timeout=10).text == mlflow.__version__
    assert requests.get(f"{server}/health", timeout=10).text == "OK"
    info = requests.get(f"{server}/api/3.0/mlflow/server-info", timeout=10).json()
    # Artifacts go through the multipart upload when the client asks (mpu/*).
    assert info["store_type"] == "SqlStore" and info["multipart_uploads_enabled"] is True
    # MLflow answers these with an HTML page; a client wants JSON it can read.
    for path in ["/api/3.0/mlflow/no/such/thing", "/ajax-api/3.0/mlflow/x", "/api/2.0/mlflow/registered-models/nope"]:
        response = requests.post(f"{server}{path}", json={}, timeout=10)
        assert response.status_code == 404, path
        assert response.json()["error_code"] == "ENDPOINT_NOT_FOUND", path
    # A known path asked with the wrong method says so, in JSON too.
    response = requests.post(f"{server}/api/3.0/mlflow/traces/tr-1", json={}, timeout=10)
    assert response.status_code == 405 and "does not take POST" in response.json()["message"]


def test_long_params_and_tags_are_kept_whole(server, unique):
    # MLflow 3.17 cuts a 7,000-character param to 6,000 (and a 9,000-character
    # tag to 8,000) without a word; here both are kept as sent.
    api = f"{server}/api/2.0/mlflow"
    experiment_id = mlflow.set_experiment(f"long-{unique}").experiment_id
    run_id = requests.post(f"{api}/runs/create", json={"experiment_id": experiment_id}, timeout=10).json()["run"]["info"]["run_id"]
    param, tag = "p" * 7000, "t" * 9000
    assert requests.post(f"{api}/runs/log-parameter", json={"run_id": run_id, "key": "config", "value": param}, timeout=10).ok
    assert requests.post(f"{api}/runs/set-tag", json={"run_id": run_id, "key": "notes", "value": tag}, timeout=10).ok
    data = MlflowClient().get_run(run_id).data
    assert data.params["config"] == param and data.tags["notes"] == tag
    too_long = requests.post(f"{api}/runs/set-tag", json={"run_id": run_id, "key": "big", "value": "x" * 65_537}, timeout=10)
    assert too_long.status_code == 400 and "65536" in too_long.json()["message"]
    # A script's long param, which MLflow's server would cut, arrives whole.
    with mlflow.start_run(experiment_id=experiment_id) as run:
        mlflow.log_param("long", "q" * 6500)
        mlflow.set_tag("long", "r" * 8500)
    data = MlflowClient().get_run(run.info.run_id).data
    assert data.params["long"] == "q" * 6500 and data.tags["long"] == "r" * 8500
