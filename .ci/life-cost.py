"""A short task's whole life, as the `life` bench's `sleep` workload measures
it at 16 connections, for release binaries started as that bench starts them
(`--ours`: the conformance example on SQLite FULL; otherwise
`rmcp-task-server`): 200 tasks of warm-up, then N creates of `slow_compute`
(`seconds: 0.05`) from 16 keep-alive connections; the window ends when the
last 16 created have completed (then every task is checked, outside it).
Prints the server's CPU per task (`/proc/<pid>/task/*/schedstat`, in all
and by thread name, which Linux cuts to 15 characters: `mcp-tasks-sqlit`
is the SQLite store's writer and reader threads; user and system from
`/proc/<pid>/stat`), its read and write system calls per task
(`/proc/<pid>/io`), tasks/s and the load average; with `--ours`, the SQLite
store's writes and commits per task and its commits' time (off `/metrics`),
and the floor measured beside it: a 4 KiB write + `fsync` in the store's
directory (what a commit's flush costs: its p50 and the CPU it takes); with
`--callgrind FILE` the window's instructions (`FILE.1`).

`--memory` (with `--ours`) starts ours on its memory store instead: what
the SQLite store adds to a task is the difference.

  python3 .ci/life-cost.py NAME BIN N [--ours [--memory]] [--callgrind FILE]
"""
import json, os, re, socket, subprocess, sys, tempfile, threading, time, glob
name, binp, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ours = "--ours" in sys.argv
memory = "--memory" in sys.argv
cg = sys.argv[sys.argv.index("--callgrind") + 1] if "--callgrind" in sys.argv else None
d = tempfile.mkdtemp(prefix="life-")
args = [binp, "--addr", "127.0.0.1:0"]
if ours:
    args += ["--store", "memory" if memory else d + "/full.db", "--admin", "127.0.0.1:0", "--limit", "creates_per_second=inf",
             "--limit", "max_unfinished_per_principal=1000000000", "--limit", "max_unfinished_per_address=1000000000",
             "--max-connections-per-client", "1000000"]
if cg:
    args = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + cg] + args
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, RUST_LOG="error"), start_new_session=True)
line = p.stdout.readline()
m = re.search(r"http://([\d.]+):(\d+)", line)
host, port = m.group(1), int(m.group(2))
admin = re.search(r"admin on http://([\d.]+):(\d+)", line)
pid = p.pid
META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}}
def request(method, params, name):
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": dict(params, _meta=META)}).encode()
    return (f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"
            f"Mcp-Name: {name}\r\nContent-Length: {len(body)}\r\n\r\n").encode() + body
class Conn:
    def __init__(self):
        self.s = socket.create_connection((host, port)); self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); self.buf = b""
    def rt(self, req):
        self.s.sendall(req)
        while b"\r\n\r\n" not in self.buf: self.buf += self.s.recv(65536)
        h, rest = self.buf.split(b"\r\n\r\n", 1)
        k = int(re.search(rb"(?i)content-length: *(\d+)", h).group(1))
        while len(rest) < k: rest += self.s.recv(65536)
        self.buf = rest[k:]; return rest[:k]
def ticks():
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return int(f[11]), int(f[12])
def threads():
    """CPU (ns) by thread name, and (user, system) ticks by thread name."""
    t, ticks_by = {}, {}
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            comm = open(f[:-len("schedstat")] + "comm").read().strip()
            t[comm] = t.get(comm, 0) + int(open(f).read().split()[0])
            st = open(f[:-len("schedstat")] + "stat").read().rsplit(")", 1)[1].split()
            u, s = ticks_by.get(comm, (0, 0))
            ticks_by[comm] = (u + int(st[11]), s + int(st[12]))
        except OSError: pass
    return t, ticks_by
def io():
    f = dict(l.split(": ") for l in open(f"/proc/{pid}/io").read().splitlines())
    return int(f["syscr"]), int(f["syscw"])
def store_counts():
    """The SQLite store's writes, commits, and seconds spent committing."""
    s = socket.create_connection((admin.group(1), int(admin.group(2))))
    s.sendall(f"GET /metrics HTTP/1.1\r\nHost: {admin.group(1)}\r\nConnection: close\r\n\r\n".encode())
    body = b""
    while chunk := s.recv(65536): body += chunk
    text = body.decode(errors="replace")
    def metric(name):
        m = re.search(rf"^{name}(?:{{[^}}]*}})? ([\d.e+-]+)$", text, re.M)
        return float(m.group(1)) if m else 0.0
    return (metric("mcp_tasks_sqlite_write_seconds_count"), metric("mcp_tasks_sqlite_commit_seconds_count"),
            metric("mcp_tasks_sqlite_commit_seconds_sum"))
def flush_floor(n=200):
    """A 4 KiB write + fsync in the store's directory, n times: p50 and CPU each."""
    fd = os.open(d + "/floor", os.O_WRONLY | os.O_CREAT, 0o600)
    block, lat = b"x" * 4096, []
    c0 = time.thread_time_ns()
    for _ in range(n):
        t = time.perf_counter(); os.pwrite(fd, block, 0); os.fsync(fd); lat.append(time.perf_counter() - t)
    cpu = (time.thread_time_ns() - c0) / n
    os.close(fd); os.unlink(d + "/floor")
    return sorted(lat)[n // 2], cpu
def run(count, fn):
    lock = threading.Lock(); nxt = [0]
    def worker():
        c = Conn()
        while True:
            with lock: i = nxt[0]; nxt[0] += 1
            if i >= count: break
            fn(c, i)
    ts = [threading.Thread(target=worker) for _ in range(16)]
    [t.start() for t in ts]; [t.join() for t in ts]
create = request("tools/call", {"name": "slow_compute", "arguments": {"seconds": 0.05, "label": "life"}}, "slow_compute")
ids = []
run(200, lambda c, i: ids.append(json.loads(c.rt(create))["result"]["taskId"]))  # warm-up
time.sleep(1)
ids.clear()
sqlite = ours and not memory
floor = flush_floor() if sqlite else None
if cg: subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, stdout=subprocess.DEVNULL)
s0 = store_counts() if sqlite else None
th0, tt0 = threads()
c0, w0, t0, io0 = sum(th0.values()), time.perf_counter(), ticks(), io()
run(n, lambda c, i: ids.append(json.loads(c.rt(create))["result"]["taskId"]))
def done(c, i):
    while json.loads(c.rt(request("tasks/get", {"taskId": ids[i]}, ids[i])))["result"]["status"] != "completed":
        time.sleep(0.01)
last = ids[-16:]
c = Conn()
for t in last:
    while json.loads(c.rt(request("tasks/get", {"taskId": t}, t)))["result"]["status"] != "completed":
        time.sleep(0.01)
th1, tt1 = threads()
cpu, wall = sum(th1.values()) - c0, time.perf_counter() - w0
def thread_line(k, v):
    hz = os.sysconf("SC_CLK_TCK"); (u1, s1), (u0, s0_) = tt1.get(k, (0, 0)), tt0.get(k, (0, 0))
    return f"{k} {(v - th0.get(k, 0))/1e3/n:.0f} (user {(u1-u0)*1e6/hz/n:.0f}, system {(s1-s0_)*1e6/hz/n:.0f})"
by_thread = ", ".join(thread_line(k, v) for k, v in sorted(th1.items(), key=lambda kv: -(kv[1] - th0.get(kv[0], 0))) if v - th0.get(k, 0) > 0)
t1, io1 = ticks(), io(); hz = os.sysconf("SC_CLK_TCK")
s1 = store_counts() if sqlite else None
split = f"user {(t1[0]-t0[0])*1e6/hz/n:.0f} us, system {(t1[1]-t0[1])*1e6/hz/n:.0f} us"
calls = f"{(io1[0]-io0[0])/n:.1f} reads and {(io1[1]-io0[1])/n:.1f} writes (system calls) per task"
if cg:
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)
run(n, done)  # every task, outside the window (as the life bench)
print(f"{name}: {n} tasks (50 ms sleep) from 16 connections: {cpu/1e3/n:.0f} us server CPU per task, whole life ({split}; {calls}), {n/wall:.0f} tasks/s; load {' '.join(open('/proc/loadavg').read().split()[:3])}", flush=True)
print(f"  by thread, us per task: {by_thread}", flush=True)
if sqlite:
    w, c, secs = (b - a for a, b in zip(s0, s1))
    print(f"  store: {w/n:.2f} writes and {c/n:.2f} commits per task, {secs*1e6/n:.0f} us committing per task (wall); "
          f"floor: a 4 KiB write + fsync p50 {floor[0]*1e3:.3f} ms, {floor[1]/1e3:.0f} us CPU each, "
          f"so {c/n*floor[1]/1e3:.0f} us CPU per task at this commit rate", flush=True)
os.killpg(p.pid, 15); p.wait()
import shutil; shutil.rmtree(d, ignore_errors=True)
