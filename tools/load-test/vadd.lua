-- wrk script for tools/load-test.sh: POST /v1/vadd with a binary body (two
-- arrays of 64 little-endian u32), at most max_requests per wrk thread (the
-- time bound is wrk's -d), and one machine-readable summary line at the end.
local n = 64
local max_requests = tonumber(os.getenv("LOAD_TEST_MAX_REQUESTS") or "5000000")
local req
local sent = 0

local function u32(v)
  return string.char(v % 256, math.floor(v / 256) % 256, math.floor(v / 65536) % 256, math.floor(v / 16777216) % 256)
end

function init(args)
  local parts = {}
  for i = 0, 2 * n - 1 do parts[#parts + 1] = u32(i * 3 + 1) end
  req = wrk.format("POST", "/v1/vadd", { ["Content-Type"] = "application/octet-stream" }, table.concat(parts))
end

function request()
  sent = sent + 1
  if sent > max_requests then wrk.thread:stop() end
  return req
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("LOADTEST requests=%d duration_us=%d p50_us=%d p99_us=%d p999_us=%d " ..
                         "errors_connect=%d errors_read=%d errors_write=%d errors_status=%d errors_timeout=%d\n",
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99), latency:percentile(99.9),
    e.connect, e.read, e.write, e.status, e.timeout))
end
