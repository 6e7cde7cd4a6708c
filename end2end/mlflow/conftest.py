"""Starts the release Trainyard server for the official mlflow client tests,
and MLflow's own server for the tests that compare the two.

The database is SQLite in a temporary folder, or the PostgreSQL database named
by MLFLOW_TEST_DATABASE_URL (scripts/test.sh creates one on its throwaway
cluster).
"""

import os
import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import requests

ROOT = Path(__file__).resolve().parents[2]


def _binary() -> str:
    if os.environ.get("E2E_TRAINYARD_BIN"):
        return os.environ["E2E_TRAINYARD_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    return str(Path(target) / "release" / "trainyard")


@pytest.fixture(scope="session")
def server():
    data_dir = tempfile.mkdtemp(prefix="trainyard-mlflow-")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TRAINYARD_")}
    env.update(
        TRAINYARD_LISTEN="127.0.0.1:0",
        TRAINYARD_DATA_DIR=data_dir,
        TRAINYARD_SITE_DIR=str(ROOT / "target" / "site"),
        TRAINYARD_LOG="warn",
        # The webhook tests' receiver listens on loopback, without TLS.
        TRAINYARD_WEBHOOK_ALLOW_PRIVATE_HOSTS="true",
        TRAINYARD_WEBHOOK_SCHEMES="http,https",
    )
    if os.environ.get("MLFLOW_TEST_DATABASE_URL"):
        env["TRAINYARD_DATABASE_URL"] = os.environ["MLFLOW_TEST_DATABASE_URL"]
    proc = subprocess.Popen([_binary(), "serve"], env=env, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    match = re.search(r"running at (http://\S+)", line)
    if not match:
        proc.kill()
        raise RuntimeError(f"the server did not start: {line!r}")
    url = match.group(1)
    os.environ["MLFLOW_TRACKING_URI"] = url
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(scope="session")
def reference_server():
    """MLflow 3.17's own server (SQLite, proxied artifacts), started once, for
    the tests that check Trainyard against what MLflow does."""
    data_dir = tempfile.mkdtemp(prefix="mlflow-reference-")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mlflow_cli = str(Path(sys.executable).parent / "mlflow")
    log = open(os.path.join(data_dir, "server.log"), "w")
    proc = subprocess.Popen(
        [
            mlflow_cli, "server", "--host", "127.0.0.1", "--port", str(port), "--workers", "1",
            "--backend-store-uri", f"sqlite:///{data_dir}/mlflow.db",
            "--artifacts-destination", f"{data_dir}/artifacts",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={
            **os.environ,
            "MLFLOW_DISABLE_TELEMETRY": "true",
            # The webhook tests' receiver listens on loopback, without TLS,
            # and a webhook disabled is disabled at once (not after MLflow's
            # 60 s cache).
            "MLFLOW_WEBHOOK_ALLOW_PRIVATE_IPS": "true",
            "MLFLOW_WEBHOOK_ALLOWED_SCHEMES": "http,https",
            "MLFLOW_WEBHOOK_CACHE_TTL": "0",
        },
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while True:
        try:
            if requests.get(f"{url}/health", timeout=2).ok:
                break
        except requests.RequestException:
            pass
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"MLflow's server did not start; see {log.name}")
        time.sleep(0.5)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture(autouse=True)
def _client_env(monkeypatch, server):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", server)
    # Fail fast: the client would retry a 5xx for minutes.
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    import mlflow

    mlflow.set_tracking_uri(server)
    yield
    while mlflow.active_run():
        mlflow.end_run()


@pytest.fixture
def unique():
    return f"{int(time.time() * 1000)}-{os.getpid()}"
