#!/usr/bin/env python3
"""Steers a running ramferry-migrate source through its --control socket:
caps the bandwidth, watches the rounds, starts post-copy once the bytes
left stop shrinking, and exits 0 when the migration completed."""
import argparse, json, socket, sys, time

ap = argparse.ArgumentParser(description=__doc__)
ap.add_argument("socket", help="the source's --control path")
ap.add_argument("--bandwidth", default="1gbit", help="max-bandwidth to set")
ap.add_argument("--patience", type=int, default=3,
                help="rounds without a 5%% lower remainder before switching")
args = ap.parse_args()
sock = socket.socket(socket.AF_UNIX)
for _ in range(300):  # the migration may still be starting
    try:
        sock.connect(args.socket)
        break
    except OSError:
        time.sleep(0.1)
conn, events = sock.makefile("r"), []  # reads; writes go by sendall

def call(cmd, **fields):
    sock.sendall((json.dumps(dict(cmd=cmd, **fields)) + "\n").encode())
    while "event" in (msg := json.loads(conn.readline())):
        events.append(msg)
    return msg

print("set:", call("set", **{"max-bandwidth": args.bandwidth}))
call("subscribe", events=["round-done", "completed", "failed", "cancelled"])
lowest, stale, switched = None, 0, False
while True:
    e = events.pop(0) if events else json.loads(conn.readline())
    if e["event"] != "round-done":
        print(e["event"], e["data"])
        sys.exit(0 if e["event"] == "completed" else 1)
    left = e["data"]["remaining_bytes"]
    print(f"round {e['data']['round']}: {left} bytes left")
    if lowest is None or left < 0.95 * lowest:
        lowest, stale = left, 0
    else:
        stale += 1
    if stale >= args.patience and not switched:
        switched = True
        print("starting post-copy:", call("start-postcopy"))
