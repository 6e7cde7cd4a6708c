# The two commands: `make run` and `make test`. The scripts do the work.
.PHONY: run build test bench-tracking bench-scheduler bench-jobs bench-k8s bench-k8s-executor bench-k8s-fragmentation bench-explorer bench-telemetry image gpu-check fmt lint clean-db

run:      ## install what is missing, build the release, serve http://127.0.0.1:3000
	@scripts/run.sh

build:    ## the release build only (server binary + target/site)
	@scripts/build.sh

test:     ## fmt, clippy, tests on SQLite and PostgreSQL, browser tests
	@scripts/test.sh

bench-tracking: ## Trainyard vs MLflow 3.17 on ingest, history, downsampled reads, search, evaluation datasets, OTLP spans
	@scripts/bench-tracking.sh

bench-telemetry: ## GPU telemetry: 1,000 nodes x 8 GPUs, a simulated day; ingest rate, bytes per sample, the 24 h heatmap and a node's week
	@scripts/bench-telemetry.sh

bench-jobs: ## submit-to-start latency of the local executor
	@scripts/bench-jobs.sh

gpu-check: ## on a GPU machine: NVML inventory and samples vs nvidia-smi, GPU pinning, PyTorch in a job and busy in its chart (simulated GPUs without a driver)
	@scripts/gpu-check.sh

bench-explorer: ## the explorer in Chromium: 10,000 runs, 10 runs x 4 metrics x 100,000 points, zoom; bundle size
	@scripts/bench-explorer.sh

bench-k8s: ## the test cluster: build and start-up time, 1,000 nodes, 5,000 GPU pods scheduled
	@end2end/k8s/measure.sh

bench-k8s-executor: ## the Kubernetes executor beside bare Jobs: 1,000 nodes x 8 GPUs, 5,000 one-GPU jobs
	@end2end/k8s/bench-executor.sh

bench-k8s-fragmentation: ## 1/2/4/8-GPU jobs on 100 nodes: Trainyard's placement beside kube-scheduler's (occupancy, 8-GPU waits)
	@end2end/k8s/bench-fragmentation.sh

image:    ## Trainyard's container image (deploy/Dockerfile) from the release build; needs a Docker engine
	@scripts/image.sh

bench-scheduler: ## one scheduling cycle: 10,000 pending jobs of 50 teams and 2,000 people on 1,000 nodes x 8 GPUs
	@bash -c 'source scripts/common.sh && cargo bench --locked -p trainyard-scheduler --bench cycle'

fmt:
	cargo fmt --all

lint:
	cargo clippy --workspace --exclude trainyard-frontend --all-targets -- -D warnings

clean-db: ## remove the embedded database of `make run`
	rm -f data/trainyard.db data/trainyard.db-wal data/trainyard.db-shm
