#!/usr/bin/env python3
"""Two ramferry-migrate builds side by side on the real migration, as
before-after.log was made: both ends as two processes (destination first),
4 GiB of random bytes in DATA (a /dev/shm file: head -c 4G /dev/urandom),
warm (the destination file written first) or cold (no file), interleaved
in random order, each destination compared with cmp. Time = the source's
prepare_s + total_s; CPU = both processes' rusage.

  OLD=path/to/old/ramferry-migrate NEW=build/tools/migrate/ramferry-migrate \
  DATA=/dev/shm/rf-data KEY=keyfile before_after.py REPEATS CHANNELS \
      warm,cold mac,none
"""
import json, os, random, resource, statistics, subprocess, sys
NEW = os.environ.get("NEW", "build/tools/migrate/ramferry-migrate")
OLD = os.environ["OLD"]
DATA = os.environ.get("DATA", "/dev/shm/rf-data")
DST = DATA + ".dst"
KEY = os.environ["KEY"]
reps=int(sys.argv[1]) if len(sys.argv)>1 else 3
chans=[int(c) for c in (sys.argv[2] if len(sys.argv)>2 else "2").split(",")]
dests=(sys.argv[3] if len(sys.argv)>3 else "warm,cold").split(",")
protects=(sys.argv[4] if len(sys.argv)>4 else "mac,none").split(",")
def one(binary, ch, dest, protect):
    if os.path.exists(DST): os.remove(DST)
    if dest=="warm":
        with open(DST,"wb") as f:
            z=bytes(64<<20)
            for _ in range(64): f.write(z)
    port=random.randint(20000,40000)
    extra=[] if protect=="mac" else [f"--protect={protect}"]
    before=resource.getrusage(resource.RUSAGE_CHILDREN)
    d=subprocess.Popen([binary,"--role=dest",f"--listen=127.0.0.1:{port}",f"--region-file={DST}","--size=4GiB",f"--key-file={KEY}","--json"]+extra,stdout=subprocess.PIPE,stderr=subprocess.PIPE,text=True)
    line=d.stderr.readline()
    s=subprocess.run([binary,"--role=source",f"--connect=127.0.0.1:{port}",f"--region-file={DATA}",f"--key-file={KEY}","--dirty-rate=0",f"--channels={ch}","--transport=tcp","--json"]+extra,capture_output=True,text=True)
    dout,_=d.communicate()
    after=resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu=(after.ru_utime+after.ru_stime)-(before.ru_utime+before.ru_stime)
    r=json.loads(s.stdout)
    ok=r.get("ok") and subprocess.run(["cmp","-s",DATA,DST]).returncode==0
    os.remove(DST)
    return r["total_s"]+r.get("prepare_s",0), cpu, ok
# warm the host memory
with open("/dev/shm/rf-warm","wb") as f:
    z=bytes(64<<20)
    for _ in range(160): f.write(z)
os.remove("/dev/shm/rf-warm")
res={}
for rep in range(reps):
    pts=[(b,c,d,p) for b in ("old","new") for c in chans for d in dests for p in protects]
    random.shuffle(pts)
    for b,c,d,p in pts:
        t,cpu,ok=one(NEW if b=="new" else OLD,c,d,p)
        res.setdefault((b,c,d,p),[]).append((t,cpu,ok))
        print(f"rep{rep} {b} x{c} {d} {p}: {t:.2f} s cpu {cpu:.2f} ok={ok}",flush=True)
print("\nmedians (time s, cpu s/GiB):")
for c in chans:
  for d in dests:
    for p in protects:
        o=res[("old",c,d,p)]; n=res[("new",c,d,p)]
        mo=statistics.median(x[0] for x in o); mn=statistics.median(x[0] for x in n)
        co=statistics.median(x[1] for x in o)/4; cn=statistics.median(x[1] for x in n)/4
        print(f"x{c} {d} {p}: old {mo:.2f} new {mn:.2f} new/old {mn/mo:.2f}; cpu/GiB old {co:.2f} new {cn:.2f}; all ok {all(x[2] for x in o+n)}")
