-- wrk script: every request is one MLflow runs/log-batch of 1,000 metric
-- points. KEYS keys x (1000 / KEYS) steps, steps unique per thread and
-- request (MLflow refuses exact duplicates). The THREADS threads (wrk -t,
-- default 2) interleave their steps, so each run's steps are contiguous like
-- a real training run's. With LIMIT set, each thread
-- sends at most LIMIT batches, then only cheap health checks (for seeding).
-- RUN_IDS is a comma-separated list; requests go round-robin over the runs.

local run_ids = {}
for id in string.gmatch(os.getenv("RUN_IDS") or "", "[^,]+") do
  run_ids[#run_ids + 1] = id
end
local nkeys = tonumber(os.getenv("KEYS") or "10")
local threads = tonumber(os.getenv("THREADS") or "2")
local limit = tonumber(os.getenv("LIMIT") or "0")
local health = os.getenv("HEALTH_PATH") or "/healthz"
local names = { "loss", "acc", "lr", "grad_norm", "val_loss", "val_acc", "throughput", "gpu_util", "mem", "epoch" }

local next_id = 0
function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

function init(args)
  sent = 0
end

-- The body is assembled from pre-formatted pieces (values, key prefixes) and
-- one tostring per step, so the load generator stays cheap beside the server.
local values = {}
for i = 0, 996 do
  values[i] = string.format("%.4f", i / 997)
end
local prefixes = {}
for k = 1, nkeys do
  prefixes[k] = '{"key":"' .. (names[k] or ("m" .. k)) .. '","value":'
end

function request()
  if limit > 0 and sent >= limit then
    return wrk.format("GET", health)
  end
  sent = sent + 1
  local run = run_ids[((sent - 1) % #run_ids) + 1]
  local round = math.floor((sent - 1) / #run_ids)
  local steps = math.floor(1000 / nkeys)
  local base = (round * threads + tid) * steps
  local parts = { '{"run_id":"', run, '","metrics":[' }
  local n = #parts
  for s = 0, steps - 1 do
    local step = base + s
    local tail = ',"timestamp":' .. tostring(1700000000000 + step) .. ',"step":' .. tostring(step) .. '}'
    local value = values[step % 997]
    for k = 1, nkeys do
      if s > 0 or k > 1 then
        n = n + 1
        parts[n] = ","
      end
      parts[n + 1] = prefixes[k]
      parts[n + 2] = value
      parts[n + 3] = tail
      n = n + 3
    end
  end
  parts[n + 1] = "]}"
  return wrk.format("POST", "/api/2.0/mlflow/runs/log-batch", { ["Content-Type"] = "application/json" }, table.concat(parts))
end

function done(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("WRK requests=%d failed=%d seconds=%.3f p50_ms=%.1f p99_ms=%.1f\n",
    summary.requests, bad, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
