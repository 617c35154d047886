import sys, os, time, json
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '../../../tests/tools'))
os.environ.setdefault('RAMFERRY_MIGRATE', 'build/tools/migrate/ramferry-migrate')
import control_socket_test as t
import tempfile
d=tempfile.mkdtemp()
flags = ["--postcopy=auto", "--dirty-rate=256MiB", "--dirty-set=64MiB"]
p=t.Pair(d, size="256MiB", source_args=flags+["--max-bandwidth=100MB","--downtime-limit=5ms","--stall-rounds=0","--max-rounds=1000"], dest_args=flags)
log=[]
class LC(t.Client):
    def send_line(self, text):
        log.append("-> "+text); super().send_line(text)
    def read(self):
        m=super().read(); log.append("<- "+json.dumps(m)); return m
import atexit
atexit.register(lambda: print("\n".join(log)))
c=LC(p.src_ctl)
c.call("subscribe", events=["round-done","switchover","postcopy-armed","completed","failed","cancelled","settings-changed","paused"])
c.wait_state("active")
time.sleep(1.0)
c.call("query")
c.call("set", **{"max-bandwidth":"150MB"})
while sum(e["event"]=="round-done" for e in c.events) < 4:
    c.events.append(c.read())
c.call("start-postcopy")
c.wait_event("completed")
r=p.wait()
print("SOURCE EXIT", r[0], "DEST EXIT", r[3], r[1]["converged_by"], r[1]["switchover"], r[1]["verified"])
