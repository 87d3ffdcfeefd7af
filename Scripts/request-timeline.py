#!/usr/bin/env python3
"""Where a client's time went, read off the dev server after a run or a raw-capacity pass.

Usage: request-timeline.py URL DATABASE CONCURRENCY [TOKEN]

Reads GET /admin/requests (each request's arrival and duration; start the server with a
--request-log-capacity above the requests sent) and the server's SQLite file (which session each
record belongs to), and prints one JSON object:
- serverMs: a POST's mean time in the server, the added latency included;
- gapMs: the mean time from one of a bundle's answers to its next request (the client's own work
  between steps: checkpoints, reading the archive, its HTTP stack, waiting for a core);
- betweenMs: per bundle, the connection time outside its POSTs (claiming, reading, validating,
  moving, lookups, and the end of the run when fewer bundles than connections are left);
- bundles, requests (the POSTs counted), wallMs (first arrival to last answer).
"""
import json
import re
import sqlite3
import statistics
import sys
import urllib.request

url, database, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
token = sys.argv[4] if len(sys.argv) > 4 else "bench"
request = urllib.request.Request(f"{url}/admin/requests?since=0&limit=10000000",
                                 headers={"Authorization": f"Bearer {token}"})
log = json.load(urllib.request.urlopen(request))["requests"]

# Which session each POST belongs to: the session's own POST by its idempotency key, the others
# by the session or group id in their path.
with sqlite3.connect(database) as connection:
    session_of_key = {}
    for key, body in connection.execute("SELECT key, body FROM idempotency_keys"):
        found = re.search(r'"id":(\d+)', body)
        if found:
            session_of_key[key] = int(found.group(1))
    session_of_group = dict(connection.execute("SELECT id, session_id FROM records WHERE kind = 'group'"))

by_session = {}
for entry in log:
    if entry["method"] != "POST":
        continue
    path, session = entry["path"], None
    if path == "/api/sessions":
        session = session_of_key.get(entry["idempotencyKey"])
    elif match := re.match(r"/api/sessions/(\d+)", path):
        session = int(match.group(1))
    elif match := re.match(r"/api/groups/(\d+)", path):
        session = session_of_group.get(int(match.group(1)))
    if session is not None:
        by_session.setdefault(session, []).append(entry)

spans, gaps, durations = [], [], []
for entries in by_session.values():
    entries.sort(key=lambda entry: entry["receivedMs"])
    spans.append(entries[-1]["receivedMs"] + entries[-1]["durationMs"] - entries[0]["receivedMs"])
    gaps += [b["receivedMs"] - (a["receivedMs"] + a["durationMs"]) for a, b in zip(entries, entries[1:])]
    durations += [entry["durationMs"] for entry in entries]
wall = max(e["receivedMs"] + e["durationMs"] for e in log) - min(e["receivedMs"] for e in log)
print(json.dumps({
    "bundles": len(by_session), "requests": len(durations), "wallMs": round(wall, 1),
    "serverMs": round(statistics.mean(durations), 2), "gapMs": round(statistics.mean(gaps), 2),
    "betweenMs": round((concurrency * wall - sum(spans)) / len(by_session), 1),
}))
