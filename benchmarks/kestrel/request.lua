-- wrk script of benchmarks/run-kestrel.sh:  wrk ... -s request.lua URL -- PATH DEPTH [close]
-- Sends DEPTH copies of the TechEmpower request for PATH (or a POST, for /upload?size=N) in one write (pipelined when DEPTH > 1), with
-- "Connection: close" when the third argument is "close" (wrk then reconnects after every response).
-- There is deliberately no request() function: wrk then builds the request once per connection from wrk.format()
-- instead of calling Lua for every write, which keeps the generator cheaper. wrk counts the requests in that string
-- to know how many responses to wait for.
init = function(args)
  local path, depth = args[1] or "/plaintext", tonumber(args[2] or "1")
  local headers = {
    ["Accept"] = "text/plain,text/html;q=0.9,application/xhtml+xml;q=0.9,application/xml;q=0.8,*/*;q=0.7",
    ["Connection"] = args[3] == "close" and "close" or "keep-alive",
  }
  local format, r = wrk.format, {}
  -- /upload?size=N: a POST of N bytes to /upload (the sample answers with the length it read)
  local method, body, size = "GET", nil, path:match("^/upload%?size=(%d+)$")
  if size then
    method, path, body = "POST", "/upload", string.rep("u", tonumber(size))
    headers["Content-Type"] = "application/octet-stream"
  end
  for i = 1, depth do
    r[i] = format(method, path, headers, body)
  end
  local req = table.concat(r)
  -- wrk.init calls wrk.format() right after init() returns and serves its result to every connection
  wrk.format = function() return req end
end
