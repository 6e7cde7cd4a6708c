"""Trains a two-layer network on two generated spirals with NumPy (Adam) and logs
loss and accuracy every epoch with the mlflow client.

Run by Trainyard, `mlflow.start_run()` continues the job's run: the server
sets MLFLOW_TRACKING_URI and MLFLOW_RUN_ID, and has logged the template's
parameters as the run's params already.
"""

import argparse
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

    with mlflow.start_run():
        for epoch in range(args.epochs):
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
            if args.delay > 0:
                time.sleep(args.delay)


if __name__ == "__main__":
    main()
