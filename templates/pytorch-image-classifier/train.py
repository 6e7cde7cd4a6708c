"""Trains a torchvision ResNet on CIFAR-10 and logs it with the mlflow client.

Run by Trainyard, `mlflow.start_run()` continues the job's run (the server
sets MLFLOW_TRACKING_URI and MLFLOW_RUN_ID) and CUDA_VISIBLE_DEVICES holds
the GPU the job was given.

Checkpoints: with TRAINYARD_CHECKPOINT_DIR set (a folder kept across the
job's attempts), it saves model, optimizer, schedule and scaler after every
epoch and, when asked to stop (SIGTERM: preempted, cancelled), after the
batch in progress; a later attempt resumes where the last one saved.
"""

import argparse
import os
import signal
import sys
import time

import mlflow
import torch
import torchvision
from torch import nn
from torchvision import transforms

MEAN = (0.4914, 0.4822, 0.4465)
STD = (0.2470, 0.2435, 0.2616)


def loaders(root, batch_size, workers):
    train_tf = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )
    test_tf = transforms.Compose([transforms.ToTensor(), transforms.Normalize(MEAN, STD)])
    train = torchvision.datasets.CIFAR10(root, train=True, download=True, transform=train_tf)
    test = torchvision.datasets.CIFAR10(root, train=False, download=True, transform=test_tf)
    kw = dict(batch_size=batch_size, num_workers=workers, pin_memory=True)
    return (
        torch.utils.data.DataLoader(train, shuffle=True, drop_last=True, **kw),
        torch.utils.data.DataLoader(test, shuffle=False, **kw),
    )


def model_for(name):
    model = getattr(torchvision.models, name)(num_classes=10)
    # CIFAR images are 32x32: a 3x3 stem without the max-pool keeps detail.
    model.conv1 = nn.Conv2d(3, 64, kernel_size=3, stride=1, padding=1, bias=False)
    model.maxpool = nn.Identity()
    return model


def evaluate(model, loader, device, amp):
    model.eval()
    loss_sum, correct, seen = 0.0, 0, 0
    with torch.no_grad(), torch.autocast(device.type, enabled=amp):
        for images, labels in loader:
            images, labels = images.to(device, non_blocking=True), labels.to(device, non_blocking=True)
            logits = model(images)
            loss_sum += nn.functional.cross_entropy(logits, labels, reduction="sum").item()
            correct += (logits.argmax(1) == labels).sum().item()
            seen += labels.numel()
    return loss_sum / seen, correct / seen


def save_checkpoint(folder, state):
    """Writes the state whole, or not at all."""
    path = os.path.join(folder, "image-classifier.pt")
    torch.save(state, path + ".partial")
    os.replace(path + ".partial", path)


def load_checkpoint(folder, device):
    path = os.path.join(folder, "image-classifier.pt")
    if not os.path.isfile(path):
        return None
    try:
        return torch.load(path, map_location=device, weights_only=True)
    except Exception as e:  # a torn or foreign file: start over, say why
        print(f"checkpoint: cannot read it ({e}); starting over", flush=True)
        return None


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--model", default="resnet18")
    parser.add_argument("--amp", default="true")
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--data", default=os.path.join(os.getcwd(), "data"))
    args = parser.parse_args()
    amp = args.amp.lower() == "true"

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    print(f"device {device}" + (f" ({torch.cuda.get_device_name(0)})" if device.type == "cuda" else ""), flush=True)
    torch.backends.cudnn.benchmark = True
    train_loader, test_loader = loaders(args.data, args.batch_size, args.workers)
    model = model_for(args.model).to(device, memory_format=torch.channels_last)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=5e-4, nesterov=True)
    steps = args.epochs * len(train_loader)
    schedule = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr, total_steps=steps, pct_start=0.15)
    scaler = torch.amp.GradScaler(device.type, enabled=amp and device.type == "cuda")

    folder = os.environ.get("TRAINYARD_CHECKPOINT_DIR")
    first_epoch, skip = 0, 0
    saved = load_checkpoint(folder, device) if folder else None
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        schedule.load_state_dict(saved["schedule"])
        scaler.load_state_dict(saved["scaler"])
        first_epoch, skip = int(saved["epoch"]), int(saved["batches"])
        print(f"resumed from the checkpoint: epoch {first_epoch + 1}, after batch {skip}", flush=True)

    stop = {"asked": False}

    def asked_to_stop(signum, frame):
        stop["asked"] = True

    signal.signal(signal.SIGTERM, asked_to_stop)

    def state(epoch, batches):
        return {
            "epoch": epoch,
            "batches": batches,
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "schedule": schedule.state_dict(),
            "scaler": scaler.state_dict(),
        }

    with mlflow.start_run():
        for epoch in range(first_epoch, args.epochs):
            model.train()
            started, seen, loss_sum, correct = time.time(), 0, 0.0, 0
            for batch, (images, labels) in enumerate(train_loader):
                if batch < skip:
                    continue
                if stop["asked"]:
                    if folder:
                        save_checkpoint(folder, state(epoch, batch))
                        print(f"stopping: saved the checkpoint in epoch {epoch + 1} after batch {batch}", flush=True)
                    sys.exit(143)
                images = images.to(device, non_blocking=True, memory_format=torch.channels_last)
                labels = labels.to(device, non_blocking=True)
                with torch.autocast(device.type, enabled=amp):
                    logits = model(images)
                    loss = nn.functional.cross_entropy(logits, labels)
                optimizer.zero_grad(set_to_none=True)
                scaler.scale(loss).backward()
                scaler.step(optimizer)
                scaler.update()
                schedule.step()
                loss_sum += loss.item() * labels.numel()
                correct += (logits.argmax(1) == labels).sum().item()
                seen += labels.numel()
            skip = 0
            if folder:
                save_checkpoint(folder, state(epoch + 1, 0))
            elapsed = time.time() - started
            val_loss, val_accuracy = evaluate(model, test_loader, device, amp)
            metrics = {
                "loss": loss_sum / max(seen, 1),
                "accuracy": correct / max(seen, 1),
                "val_loss": val_loss,
                "val_accuracy": val_accuracy,
                "lr": schedule.get_last_lr()[0],
                "images_per_second": seen / max(elapsed, 1e-9),
            }
            mlflow.log_metrics(metrics, step=epoch)
            print(
                f"epoch {epoch + 1}/{args.epochs}  "
                + "  ".join(f"{k} {v:.4g}" for k, v in metrics.items()),
                flush=True,
            )
        torch.save(model.state_dict(), "model.pt")
        mlflow.log_artifact("model.pt")


if __name__ == "__main__":
    main()
