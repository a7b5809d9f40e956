-- wrk script for a forward proxy: send absolute-form request lines.
-- TARGET_URL (e.g. http://127.0.0.1:8081/) is the origin the proxy should reach;
-- wrk itself connects to the proxy given on its command line.
-- Request line: "GET http://127.0.0.1:8081/ HTTP/1.1", Host: 127.0.0.1:8081.
local target = os.getenv("TARGET_URL")
if not target or target == "" then
  error("bench/wrk/proxy.lua: set TARGET_URL to the absolute URL to request")
end
wrk.path = target
wrk.headers["Host"] = target:match("^%a+://([^/]+)")
