"""Seeds an experiment for the explorer's browser tests with the official
mlflow client, as a researcher's script would, and prints what it made as
JSON on its last line.

    seed.py URI EXPERIMENT RUNS STEPS [--live] [--keys N]

Runs get params lr (3 values), batch (2 values) and seed (the same in all),
a tag, and the metrics loss, accuracy, val_loss and lr_now over STEPS steps.
--keys N adds metrics extra_00..extra_N-1 to the first run (the run page's
lazy charts). --live leaves the last run RUNNING.
"""

import io
import json
import math
import sys
import time
from contextlib import redirect_stdout

import mlflow
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient


def main() -> None:
    uri, name, runs, steps = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    live = "--live" in sys.argv
    extra = int(sys.argv[sys.argv.index("--keys") + 1]) if "--keys" in sys.argv else 0
    mlflow.set_tracking_uri(uri)
    client = MlflowClient()
    experiment = mlflow.set_experiment(name)
    made = []
    printed = io.StringIO()
    now = int(time.time() * 1000)
    for i in range(runs):
        lr = [0.1, 0.01, 0.001][i % 3]
        batch = [32, 64][i % 2]
        run_name = f"lr{lr}-b{batch}-{i:02d}"
        keep_running = live and i == runs - 1
        with redirect_stdout(printed):
            if keep_running:
                # Not the fluent API: it ends its runs when the script exits.
                run = client.create_run(experiment.experiment_id, run_name=run_name)
            else:
                run = mlflow.start_run(run_name=run_name)
            run_id = run.info.run_id
            client.log_batch(
                run_id,
                params=[Param("lr", str(lr)), Param("batch", str(batch)), Param("seed", "7")],
                tags=[RunTag("purpose", "explorer-e2e")],
            )
            metrics = []
            for step in range(steps):
                t = now + step * 100
                decay = math.exp(-step * lr * (1 + i % 4) / 2)
                noise = 0.05 * math.sin(step * 0.7 + i)
                metrics += [
                    Metric("loss", 2.0 * decay + 0.1 + noise, t, step),
                    Metric("val_loss", 2.2 * decay + 0.15 + noise, t, step),
                    Metric("accuracy", 1.0 - 0.9 * decay, t, step),
                    Metric("lr_now", lr * (0.99**step), t, step),
                ]
            if i == 0:
                for k in range(extra):
                    metrics += [Metric(f"extra_{k:02d}", float(k + s), now + s, s) for s in range(5)]
            for start in range(0, len(metrics), 1000):
                client.log_batch(run_id, metrics=metrics[start : start + 1000])
            if not keep_running:
                # Prints "View run … at: URI/#/experiments/ID/runs/RUN".
                mlflow.end_run()
        made.append(run_id)
    print(printed.getvalue(), end="")
    print(json.dumps({"experiment_id": experiment.experiment_id, "runs": made}))


if __name__ == "__main__":
    main()
