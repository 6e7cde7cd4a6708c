-- wrk script: every request is one OTLP/JSON export (POST /v1/traces, as an
-- OpenTelemetry SDK's batch processor sends it) of one new trace of SPANS
-- spans (default 10): a root and its children, each with a few attributes
-- and inputs/outputs as MLflow's autologging sets them. Trace and span ids
-- are random per request. EXPERIMENT is the x-mlflow-experiment-id.

local spans = tonumber(os.getenv("SPANS") or "10")
local experiment = os.getenv("EXPERIMENT") or "0"
local next_id = 0

function setup(thread)
  thread:set("tid", next_id)
  next_id = next_id + 1
end

function init(args)
  math.randomseed(os.time() * 1000 + tid)
end

local function hex(bytes)
  local out = {}
  for i = 1, bytes do
    out[i] = string.format("%02x", math.random(0, 255))
  end
  return table.concat(out)
end

local function attribute(key, value)
  return '{"key":"' .. key .. '","value":{"stringValue":"' .. value .. '"}}'
end

function request()
  local trace = hex(16)
  local root = hex(8)
  local parts = {}
  for i = 1, spans do
    local id = i == 1 and root or hex(8)
    -- Nanoseconds as text: wrk's Lua numbers are doubles.
    local start = string.format("1765000000%09d", i * 1000000)
    local stop = string.format("1765000000%09d", i * 1000000 + 500000)
    parts[i] = '{"traceId":"' .. trace .. '","spanId":"' .. id .. '"'
      .. (i == 1 and "" or (',"parentSpanId":"' .. root .. '"'))
      .. ',"name":"step_' .. i .. '","kind":1'
      .. ',"startTimeUnixNano":"' .. start .. '","endTimeUnixNano":"' .. stop .. '"'
      .. ',"attributes":[' .. attribute("mlflow.spanType", i == 1 and "AGENT" or "TOOL") .. ","
      .. attribute("mlflow.spanInputs", '{\\"question\\": \\"what is the width of step ' .. i .. '?\\"}') .. ","
      .. attribute("mlflow.spanOutputs", '\\"about ' .. i .. ' cm\\"') .. ","
      .. attribute("model", "gpt-4o-mini") .. ']'
      .. ',"status":{"code":1}}'
  end
  local body = '{"resourceSpans":[{"resource":{"attributes":[' .. attribute("service.name", "bench") .. ']},'
    .. '"scopeSpans":[{"scope":{"name":"bench"},"spans":[' .. table.concat(parts, ",") .. ']}]}]}'
  return wrk.format("POST", "/v1/traces", {
    ["Content-Type"] = "application/json",
    ["x-mlflow-experiment-id"] = experiment,
  }, body)
end

function done(summary, latency, requests)
  local bad = summary.errors.status + summary.errors.connect + summary.errors.read + summary.errors.write + summary.errors.timeout
  io.write(string.format("WRK requests=%d failed=%d seconds=%.3f p50_ms=%.1f p99_ms=%.1f\n",
    summary.requests, bad, summary.duration / 1e6, latency:percentile(50) / 1000, latency:percentile(99) / 1000))
end
