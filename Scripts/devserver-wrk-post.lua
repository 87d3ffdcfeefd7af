-- wrk script: small JSON POSTs to a running dopesync-devserver, each a new session with its own
-- clientId and Idempotency-Key (as the worker sends them).
--   wrk -t2 -c4 -d10s -s Scripts/devserver-wrk-post.lua http://127.0.0.1:8080
-- Token from DOPESYNC_DEVSERVER_TOKEN (default dev-token). Set NO_KEYS=1 to send no key.
local token = os.getenv("DOPESYNC_DEVSERVER_TOKEN") or "dev-token"
local sendKeys = os.getenv("NO_KEYS") == nil
local threads = 0

function setup(thread)
  threads = threads + 1
  thread:set("thread_id", threads)
end

function init(args)
  counter = 0
end

function request()
  counter = counter + 1
  local uuid = string.format("%08x-0000-4000-8000-%012x", thread_id, counter)
  local body = '{"clientId":"' .. uuid .. '","sessionDate":"2024-05-01T10:00:00Z","rifleSetupId":1,"notes":"wrk"}'
  local headers = {
    ["Authorization"] = "Bearer " .. token,
    ["Content-Type"] = "application/json",
  }
  if sendKeys then headers["Idempotency-Key"] = "wrk-" .. uuid end
  return wrk.format("POST", "/api/sessions", headers, body)
end
