-- wrk script for bench/guarded: POST a JSON body that is unique per request,
-- so that through idemgate every request is a new intent.
--
-- Environment:
--   REQUEST_TARGET  the request-target on the request line: an absolute URL
--                   ("http://127.0.0.1:8081/w", forward proxy) or a path ("/w",
--                   the upstream directly); required
--   NONCE           mixed into every body, so that two wrk runs never send the
--                   same payload (default: the time)
--   RUN_PREFIX      Idemgate-Run header value prefix (default "bench")
--   RUNS            number of distinct runs; request i of thread t goes to run
--                   RUN_PREFIX-t-(i mod RUNS) (default 1: one fixed run per thread)
--
-- done() prints one machine-readable line:
--   guarded-wrk: requests=N non200=N statuses=CODE:N,... p50_us=N p99_us=N first_non200=CODE:BODY
local target = os.getenv("REQUEST_TARGET")
if not target or target == "" then
  error("bench/wrk/guarded.lua: set REQUEST_TARGET to an absolute URL or a path")
end
local host = target:match("^%a+://([^/]+)")
local nonce = os.getenv("NONCE") or tostring(os.time())
local prefix = os.getenv("RUN_PREFIX") or "bench"
local runs = tonumber(os.getenv("RUNS") or "1")

local threads = {}

function setup(thread)
  thread:set("tid", #threads)
  table.insert(threads, thread)
end

function init(args)
  counter = 0
  non200 = 0
  statuses = ""     -- "CODE:N,..." per thread, only non-200s
  first_non200 = ""
  codes = {}
  -- wrk.host is the address wrk connects to; the Host header must name the origin.
  hdr_host = host or wrk.headers["Host"] or wrk.host
end

function request()
  counter = counter + 1
  local body = string.format('{"nonce":"%s","thread":%d,"n":%d,"amount":1000,"currency":"eur"}',
                             nonce, tid, counter)
  local headers = {
    ["Host"] = hdr_host,
    ["Content-Type"] = "application/json",
    ["Idemgate-Run"] = string.format("%s-%d-%d", prefix, tid, counter % runs),
  }
  return wrk.format("POST", target, headers, body)
end

function response(status, headers, body)
  if status ~= 200 then
    non200 = non200 + 1
    codes[status] = (codes[status] or 0) + 1
    local parts = {}
    for code, n in pairs(codes) do table.insert(parts, code .. ":" .. n) end
    statuses = table.concat(parts, ",")
    if first_non200 == "" then
      first_non200 = status .. ":" .. (body or ""):sub(1, 300):gsub("[\r\n ]+", " ")
    end
  end
end

function done(summary, latency, requests)
  local bad, st, first = 0, {}, ""
  for _, t in ipairs(threads) do
    bad = bad + t:get("non200")
    local s = t:get("statuses")
    if s ~= "" then table.insert(st, s) end
    if first == "" then first = t:get("first_non200") end
  end
  io.write(string.format("guarded-wrk: requests=%d non200=%d statuses=%s p50_us=%d p99_us=%d first_non200=%s\n",
                         summary.requests, bad, (#st > 0 and table.concat(st, ",") or "-"),
                         latency:percentile(50), latency:percentile(99),
                         (first ~= "" and first or "-")))
end
