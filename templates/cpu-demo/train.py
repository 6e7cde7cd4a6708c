"""Trains a two-layer network on two generated spirals with NumPy (Adam) and logs
loss and accuracy every epoch with the mlflow client.

Run by Trainyard, `mlflow.start_run()` continues the job's run: the server
sets MLFLOW_TRACKING_URI and MLFLOW_RUN_ID, and has logged the template's
parameters as the run's params already.

Checkpoints: with TRAINYARD_CHECKPOINT_DIR set (a folder kept across the
job's attempts), it saves its state every 25 epochs and when asked to stop
(SIGTERM: preempted, cancelled, out of time), and an attempt that finds a
checkpoint resumes after its epoch instead of starting over.
"""

import argparse
import os
import signal
import sys
import time

import mlflow
import numpy as np


def spirals(n, noise, rng):
    """n points on each of two interleaved spirals, labels 0 and 1."""
    t = np.sqrt(rng.uniform(0.0, 1.0, n)) * 2.0 * np.pi
    arm = np.stack([t * np.cos(t), t * np.sin(t)], axis=1) / (2.0 * np.pi)
    x = np.concatenate([arm, -arm]) + rng.normal(0.0, noise / 3.0, (2 * n, 2))
    y = np.concatenate([np.zeros(n), np.ones(n)])
    order = rng.permutation(2 * n)
    return x[order], y[order]


def forward(params, x):
    w1, b1, w2, b2 = params
    h = np.tanh(x @ w1 + b1)
    p = 1.0 / (1.0 + np.exp(-(h @ w2 + b2)))
    return h, p.ravel()


def evaluate(params, x, y):
    _, p = forward(params, x)
    p = np.clip(p, 1e-7, 1 - 1e-7)
    loss = -np.mean(y * np.log(p) + (1 - y) * np.log(1 - p))
    accuracy = np.mean((p > 0.5) == (y > 0.5))
    return float(loss), float(accuracy)


CHECKPOINT_EVERY = 25


def save_checkpoint(folder, epoch, params, m, v):
    """Writes the state after `epoch` (0-based) whole, or not at all."""
    path = os.path.join(folder, "cpu-demo.npz")
    partial = path + ".partial.npz"
    arrays = {"epoch": np.array(epoch)}
    for name, values in (("p", params), ("m", m), ("v", v)):
        for i, w in enumerate(values):
            arrays[f"{name}{i}"] = w
    np.savez(partial, **arrays)
    os.replace(partial, path)


def load_checkpoint(folder, params, m, v):
    """The epoch a saved state ends with (and the state put in place), or -1."""
    path = os.path.join(folder, "cpu-demo.npz")
    if not os.path.isfile(path):
        return -1
    try:
        with np.load(path) as saved:
            shapes = [w.shape for w in params]
            loaded = [[saved[f"{name}{i}"] for i in range(len(params))] for name in ("p", "m", "v")]
            if any(w.shape != s for values in loaded for w, s in zip(values, shapes)):
                print("checkpoint: its shapes differ from this run's (another --hidden?); starting over", flush=True)
                return -1
            for values, target in zip(loaded, (params, m, v)):
                target[:] = values
            return int(saved["epoch"])
    except (OSError, ValueError, KeyError) as e:
        print(f"checkpoint: cannot read it ({e}); starting over", flush=True)
        return -1


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=150)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--hidden", type=int, default=64)
    parser.add_argument("--noise", type=float, default=0.15)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--delay", type=float, default=0.1)
    parser.add_argument("--samples", type=int, default=1000)
    args = parser.parse_args()

    rng = np.random.default_rng(args.seed)
    x, y = spirals(args.samples, args.noise, rng)
    split = int(0.8 * len(x))
    x_train, y_train, x_val, y_val = x[:split], y[:split], x[split:], y[split:]
    params = [
        rng.normal(0.0, 1.0, (2, args.hidden)),
        np.zeros(args.hidden),
        rng.normal(0.0, 1.0 / np.sqrt(args.hidden), (args.hidden, 1)),
        np.zeros(1),
    ]

    # Adam's moment estimates.
    m = [np.zeros_like(w) for w in params]
    v = [np.zeros_like(w) for w in params]
    beta1, beta2 = 0.9, 0.999

    folder = os.environ.get("TRAINYARD_CHECKPOINT_DIR")
    first = 0
    if folder:
        done = load_checkpoint(folder, params, m, v)
        if done >= 0:
            first = done + 1
            print(f"resumed from the checkpoint after epoch {first}", flush=True)

    stop = {"asked": False}

    def asked_to_stop(signum, frame):
        stop["asked"] = True

    signal.signal(signal.SIGTERM, asked_to_stop)

    with mlflow.start_run():
        for epoch in range(first, args.epochs):
            # One full-batch Adam step on the cross-entropy.
            w1, b1, w2, b2 = params
            h, p = forward(params, x_train)
            d_out = (p - y_train)[:, None] / len(x_train)
            d_h = (d_out @ w2.T) * (1.0 - h**2)
            grads = [x_train.T @ d_h, d_h.sum(0), h.T @ d_out, d_out.sum(0)]
            t = epoch + 1
            for i, g in enumerate(grads):
                m[i] = beta1 * m[i] + (1 - beta1) * g
                v[i] = beta2 * v[i] + (1 - beta2) * g * g
                step = (m[i] / (1 - beta1**t)) / (np.sqrt(v[i] / (1 - beta2**t)) + 1e-8)
                params[i] = params[i] - args.lr * step

            loss, accuracy = evaluate(params, x_train, y_train)
            val_loss, val_accuracy = evaluate(params, x_val, y_val)
            mlflow.log_metrics(
                {
                    "loss": loss,
                    "accuracy": accuracy,
                    "val_loss": val_loss,
                    "val_accuracy": val_accuracy,
                },
                step=epoch,
            )
            print(
                f"epoch {epoch + 1}/{args.epochs}  loss {loss:.4f}  accuracy {accuracy:.3f}"
                f"  val_loss {val_loss:.4f}  val_accuracy {val_accuracy:.3f}",
                flush=True,
            )
            if folder and (stop["asked"] or (epoch + 1) % CHECKPOINT_EVERY == 0):
                save_checkpoint(folder, epoch, params, m, v)
            if stop["asked"]:
                print(f"stopping: saved the checkpoint after epoch {epoch + 1}", flush=True)
                sys.exit(143)
            if args.delay > 0:
                time.sleep(args.delay)


if __name__ == "__main__":
    main()
