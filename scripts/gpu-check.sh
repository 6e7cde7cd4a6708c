#!/usr/bin/env bash
# The GPU check, for a machine with an NVIDIA GPU and driver: the inventory
# the server reads through NVML matches nvidia-smi's, a job that asks for one
# GPU gets one (CUDA_VISIBLE_DEVICES) and can use it, two jobs get different
# GPUs, and a job asking for more GPUs than the machine has is refused. With
# PyTorch in the machine's python3, a job also multiplies matrices on its GPU.
# Telemetry: every GPU's latest sample agrees with nvidia-smi (memory,
# temperature, power limit), and a job that keeps its GPU busy (PyTorch,
# for 20 s) shows as busy in its GPU chart. Without a driver the same flow
# runs on two simulated GPUs (a held one is busy), and says so.
#
#   scripts/gpu-check.sh [TRAINYARD_BINARY]     (make gpu-check)
#
# Needs only the binary (by default the release build), curl and this
# checkout's templates: a GPU machine without a Rust toolchain can run it
# with a binary built elsewhere.
set -euo pipefail
source "$(dirname "$0")/common.sh"
bin="${1:-$CARGO_TARGET_DIR/release/trainyard}"
[ -x "$bin" ] || die "no Trainyard binary at $bin (make build, or pass one)"
command -v curl >/dev/null || die "curl is required"
command -v python3 >/dev/null || die "python3 is required (it reads the server's JSON)"

passed=0
check() { # NAME CONDITION...
  local name="$1"
  shift
  if "$@"; then
    echo "PASS: $name"
    passed=$((passed + 1))
  else
    echo "FAIL: $name"
    echo "--- server log (last 30 lines)"
    tail -30 "$work/server.log"
    exit 1
  fi
}

work="$(mktemp -d)"
chmod 711 "$work"
pid=""
cleanup() {
  [ -z "$pid" ] || kill "$pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
  mode=nvml
  nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader >"$work/expected.csv"
  gpus=$(wc -l <"$work/expected.csv")
  simulated=0
  step "NVIDIA driver found: $gpus GPU(s) by nvidia-smi"
  cat "$work/expected.csv"
else
  mode=simulated
  gpus=2
  simulated=2
  step "no NVIDIA driver here: checking the flow on $gpus simulated GPUs"
fi

port=$((30000 + RANDOM % 20000))
url="http://127.0.0.1:$port"
step "starting Trainyard ($url, SQLite)"
TRAINYARD_LISTEN="127.0.0.1:$port" TRAINYARD_DATA_DIR="$work/data" TRAINYARD_LOG=info \
  TRAINYARD_GPU_SAMPLE_SECS=1 \
  TRAINYARD_SIMULATED_GPUS="$simulated" TRAINYARD_TEMPLATES_DIR="$ROOT/templates" \
  "$bin" serve >"$work/server.log" 2>&1 &
pid=$!
for _ in $(seq 1 60); do curl -sf "$url/readyz" >/dev/null && break; sleep 0.5; done
curl -sf "$url/readyz" >/dev/null || die "Trainyard did not start: $(tail -5 "$work/server.log")"

# ANSI colours off the log, so its fields can be read.
server_log() { sed 's/\x1b\[[0-9;]*m//g' "$work/server.log"; }
if [ "$mode" = nvml ]; then
  check "the server found the $gpus GPU(s) through NVML" \
    grep -qE "GPUs found by NVML gpus=$gpus( |$)" <(server_log)
  # The same GPUs as nvidia-smi's, by index and UUID.
  while IFS=, read -r index uuid _; do
    uuid="$(echo "$uuid" | tr -d ' ')"
    check "GPU $index is $uuid, as nvidia-smi says" grep -qE "index=$index uuid=$uuid " <(server_log)
  done <"$work/expected.csv"
else
  check "the server offers $gpus simulated GPUs and says why" \
    grep -qE "offering simulated GPUs.*gpus=$gpus" <(server_log)
  for index in $(seq 0 $((gpus - 1))); do
    check "simulated GPU $index is listed with its UUID" \
      grep -qE "index=$index uuid=GPU-simulated-[^ ]+-$index " <(server_log)
  done
fi

submit() { # JSON → the new job's id
  curl -sf -X POST "$url/api/trainyard/v1/jobs" -H 'Content-Type: application/json' -d "$1" \
    | grep -oE '"id":[0-9]+' | head -1 | cut -d: -f2
}
state() { curl -sf "$url/api/trainyard/v1/jobs/$1" | grep -oE '"state":"[A-Z]+"' | head -1 | cut -d'"' -f4; }
wait_end() { # ID → its final state
  local s=""
  for _ in $(seq 1 600); do
    s="$(state "$1")"
    case "$s" in SUCCEEDED | FAILED | CANCELLED | LOST) break ;; esac
    sleep 0.5
  done
  echo "$s"
}
job_log() { curl -sf "$url/api/trainyard/v1/jobs/$1/logs"; }

# What a job sees of its GPUs; with PyTorch, it computes on one.
probe='echo "CVD=$CUDA_VISIBLE_DEVICES"
if command -v nvidia-smi >/dev/null; then nvidia-smi --query-gpu=index,uuid --format=csv,noheader; fi
python3 - <<EOF 2>&1 || true
try:
    import torch
except ImportError:
    print("torch: not installed")
else:
    print("torch: cuda", torch.cuda.is_available(), "devices", torch.cuda.device_count())
    if torch.cuda.is_available():
        x = torch.randn(2048, 2048, device="cuda")
        print("torch: matmul on", torch.cuda.get_device_name(0), "sum", float((x @ x).abs().sum()) > 0)
EOF
sleep 2'
json_string() { printf '%s' "$1" | sed 's/\\/\\\\/g; s/"/\\"/g' | awk '{ printf "%s\\n", $0 }'; }

step "one job, one GPU"
one=$(submit "{\"name\": \"gpu check\", \"command\": \"$(json_string "$probe")\", \"resources\": {\"gpus\": 1, \"memory\": \"8Gi\"}}")
[ -n "$one" ] || die "the job was not accepted"
end="$(wait_end "$one")"
job_log "$one" | tee "$work/one.log"
check "the job succeeded" test "$end" = SUCCEEDED
cvd="$(sed -n 's/^CVD=//p' "$work/one.log")"
check "it got one GPU of the $gpus: CUDA_VISIBLE_DEVICES=$cvd" \
  bash -c "[[ '$cvd' =~ ^[0-9]+$ ]] && [ '$cvd' -lt $gpus ]"
if [ "$mode" = nvml ]; then
  check "nvidia-smi ran in the job and lists the machine's GPUs" \
    bash -c "grep -qF \"\$(cut -d, -f2 '$work/expected.csv' | head -1 | tr -d ' ')\" '$work/one.log'"
  if grep -q "^torch: cuda True" "$work/one.log"; then
    check "PyTorch computed on the job's GPU" grep -q "^torch: matmul on .* sum True" "$work/one.log"
  else
    echo "note: no PyTorch with CUDA in this machine's python3 ($(grep '^torch:' "$work/one.log" || echo 'no python3'))"
  fi
fi

if [ "$gpus" -ge 2 ]; then
  step "two jobs at once get different GPUs"
  hold="echo CVD=\$CUDA_VISIBLE_DEVICES; sleep 4"
  a=$(submit "{\"name\": \"gpu a\", \"command\": \"$hold\", \"resources\": {\"gpus\": 1, \"memory\": \"1Gi\"}}")
  b=$(submit "{\"name\": \"gpu b\", \"command\": \"$hold\", \"resources\": {\"gpus\": 1, \"memory\": \"1Gi\"}}")
  wait_end "$a" >/dev/null
  wait_end "$b" >/dev/null
  ga="$(job_log "$a" | sed -n 's/^CVD=//p')"
  gb="$(job_log "$b" | sed -n 's/^CVD=//p')"
  check "different GPUs: $ga and $gb" bash -c "[ -n '$ga' ] && [ -n '$gb' ] && [ '$ga' != '$gb' ]"
fi

step "GPU samples"
# Every GPU's latest sample, one line each: index uuid mem_total_MiB
# mem_used_MiB temperature_C power_limit_W (or "none").
latest() {
  curl -sf "$url/api/trainyard/v1/gpus" | python3 -c '
import json, sys
for node in json.load(sys.stdin)["nodes"]:
    for g in node["gpus"]:
        l = g["latest"]
        if l is None:
            print(g["index"], g["uuid"], "none")
        else:
            print(g["index"], g["uuid"], g["memory_total_bytes"] >> 20, l["mem_used_bytes"] >> 20,
                  l["temperature_c"], round(l["power_limit_w"]))
'
}
for _ in $(seq 1 20); do
  latest >"$work/latest.txt"
  [ "$(grep -cv ' none$' "$work/latest.txt")" -ge "$gpus" ] && break
  sleep 0.5
done
cat "$work/latest.txt"
check "every GPU has a sample (sampled each second here)" \
  bash -c "[ \"\$(grep -cv ' none\$' '$work/latest.txt')\" -ge $gpus ]"
if [ "$mode" = nvml ]; then
  nvidia-smi --query-gpu=index,memory.total,memory.used,temperature.gpu,power.limit \
    --format=csv,noheader,nounits >"$work/smi.csv"
  cat "$work/smi.csv"
  # Memory total to 1 MiB, memory used to 512 MiB (it moves between the two
  # reads), temperature to 5 °C, the power limit to 2 W; what nvidia-smi
  # cannot read ([N/A]) is not compared.
  check "every GPU's sample agrees with nvidia-smi (memory, temperature, power limit)" python3 -c '
import sys
ours = {l.split()[0]: l.split() for l in open(sys.argv[1])}
bad = []
for line in open(sys.argv[2]):
    index, total, used, temp, limit = [f.strip() for f in line.split(",")]
    _, uuid, o_total, o_used, o_temp, o_limit = ours[index]
    for name, theirs, mine, within in [("memory total MiB", total, o_total, 1),
                                       ("memory used MiB", used, o_used, 512),
                                       ("temperature C", temp, o_temp, 5),
                                       ("power limit W", limit, o_limit, 2)]:
        try:
            theirs = float(theirs)
        except ValueError:
            print(f"GPU {index}: {name}: nvidia-smi says {theirs}; not compared")
            continue
        ok = abs(float(mine) - theirs) <= within
        print(f"GPU {index}: {name}: ours {mine}, nvidia-smi {theirs:g}", "" if ok else "DIFFERS")
        if not ok:
            bad.append(index)
sys.exit(1 if bad else 0)
' "$work/latest.txt" "$work/smi.csv"
fi

step "a busy job shows as busy in its GPU chart"
busy_job=""
if [ "$mode" = nvml ]; then
  if grep -q "^torch: cuda True" "$work/one.log"; then
    busy='python3 - <<EOF
import time, torch
x = torch.randn(4096, 4096, device="cuda")
end = time.time() + 20
while time.time() < end:
    x = (x @ x).clamp_(-1, 1)
torch.cuda.synchronize()
print("busy: done")
EOF'
    busy_job=$(submit "{\"name\": \"gpu busy\", \"command\": \"$(json_string "$busy")\", \"resources\": {\"gpus\": 1, \"memory\": \"8Gi\"}}")
  else
    echo "note: no PyTorch with CUDA in this machine's python3: the busy job is not run"
  fi
else
  # A simulated GPU held by a job runs at 90 % unless SIMULATED_GPU_UTIL says.
  busy_job=$(submit '{"name": "gpu busy", "command": "sleep 8", "resources": {"gpus": 1, "memory": "1Gi"}}')
fi
if [ -n "$busy_job" ]; then
  end="$(wait_end "$busy_job")"
  check "the busy job succeeded" test "$end" = SUCCEEDED
  sleep 2
  curl -sf "$url/api/trainyard/v1/jobs/$busy_job/gpus" | python3 -c '
import json, sys
w = json.load(sys.stdin)
for g in w["gpus"]:
    print(g["index"], len(g["points"]), max([p["gpu_util_max"] for p in g["points"]] or [0]))
' >"$work/busy.txt"
  cat "$work/busy.txt"
  check "its chart has its one GPU, with samples, at 50 % or more at its busiest" python3 -c '
import sys
rows = [line.split() for line in open(sys.argv[1])]
sys.exit(0 if len(rows) == 1 and int(rows[0][1]) >= 3 and float(rows[0][2]) >= 50 else 1)
' "$work/busy.txt"
fi

step "more GPUs than the machine has"
status=$(curl -s -o "$work/refused.json" -w '%{http_code}' -X POST "$url/api/trainyard/v1/jobs" \
  -H 'Content-Type: application/json' \
  -d "{\"name\": \"too big\", \"command\": \"true\", \"resources\": {\"gpus\": $((gpus + 1))}}")
cat "$work/refused.json"
echo
check "a job asking for $((gpus + 1)) GPUs is refused (400) with the reason" \
  bash -c "[ '$status' = 400 ] && grep -q 'resources.gpus' '$work/refused.json'"

echo
echo "gpu-check: $passed passed, 0 failed ($mode)"
