"""Starts the release Trainyard server for the official mlflow client tests.

The database is SQLite in a temporary folder, or the PostgreSQL database named
by MLFLOW_TEST_DATABASE_URL (scripts/test.sh creates one on its throwaway
cluster).
"""

import os
import re
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

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
