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
- gapP50Ms, gapP99Ms, and gapTailShare: the share of all gap time spent in gaps over 5 ms (a
  few long waits, or many short ones);
- edgeGapMs and middleGapMs: the mean gap within three steps of a bundle's first or last POST,
  and elsewhere. Bundles of one shape started together stay in step, so every connection's
  bundle ends at about the same moment: what a client does once per bundle (reading the next,
  checkpoints, moves) then comes in bursts, and the answers of the steps around them wait;
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

spans, gaps, edge_gaps, middle_gaps, durations = [], [], [], [], []
for entries in by_session.values():
    entries.sort(key=lambda entry: entry["receivedMs"])
    spans.append(entries[-1]["receivedMs"] + entries[-1]["durationMs"] - entries[0]["receivedMs"])
    for index, (a, b) in enumerate(zip(entries, entries[1:])):
        gap = b["receivedMs"] - (a["receivedMs"] + a["durationMs"])
        gaps.append(gap)
        # Gap `index` comes before POST index + 1: within three steps of either end, or not.
        (edge_gaps if index < 3 or index >= len(entries) - 4 else middle_gaps).append(gap)
    durations += [entry["durationMs"] for entry in entries]
ordered = sorted(gaps)
wall = max(e["receivedMs"] + e["durationMs"] for e in log) - min(e["receivedMs"] for e in log)
print(json.dumps({
    "bundles": len(by_session), "requests": len(durations), "wallMs": round(wall, 1),
    "serverMs": round(statistics.mean(durations), 2), "gapMs": round(statistics.mean(gaps), 2),
    "betweenMs": round((concurrency * wall - sum(spans)) / len(by_session), 1),
    "gapP50Ms": round(ordered[len(ordered) // 2], 2), "gapP99Ms": round(ordered[len(ordered) * 99 // 100], 2),
    "gapTailShare": round(sum(gap for gap in gaps if gap > 5) / max(sum(gaps), 1e-9), 2),
    "edgeGapMs": round(statistics.mean(edge_gaps or [0]), 2), "middleGapMs": round(statistics.mean(middle_gaps or [0]), 2),
}))
