"""A short task's whole life, as the `life` bench's `sleep` workload measures
it at 16 connections, for release binaries started as that bench starts them
(`--ours`: the conformance example on SQLite FULL; otherwise
`rmcp-task-server`): 200 tasks of warm-up, then N creates of `slow_compute`
(`seconds: 0.05`) from 16 keep-alive connections; the window ends when the
last 16 created have completed (then every task is checked, outside it).
Prints the server's CPU per task (`/proc/<pid>/task/*/schedstat`; user and
system from `/proc/<pid>/stat`), tasks/s and the load average; with
`--callgrind FILE` the window's instructions (`FILE.1`).

  python3 .ci/life-cost.py NAME BIN N [--ours] [--callgrind FILE]
"""
import json, os, re, socket, subprocess, sys, tempfile, threading, time, glob
name, binp, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
ours = "--ours" in sys.argv
cg = sys.argv[sys.argv.index("--callgrind") + 1] if "--callgrind" in sys.argv else None
d = tempfile.mkdtemp(prefix="life-")
args = [binp, "--addr", "127.0.0.1:0"]
if ours:
    args += ["--store", d + "/full.db", "--admin", "127.0.0.1:0", "--limit", "creates_per_second=inf",
             "--limit", "max_unfinished_per_principal=1000000000", "--limit", "max_unfinished_per_address=1000000000",
             "--max-connections-per-client", "1000000"]
if cg:
    args = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + cg] + args
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=dict(os.environ, RUST_LOG="error"), start_new_session=True)
m = re.search(r"http://([\d.]+):(\d+)", p.stdout.readline())
host, port = m.group(1), int(m.group(2))
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
def cpu_ns():
    t = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try: t += int(open(f).read().split()[0])
        except OSError: pass
    return t
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
if cg: subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, stdout=subprocess.DEVNULL)
c0, w0, t0 = cpu_ns(), time.perf_counter(), ticks()
run(n, lambda c, i: ids.append(json.loads(c.rt(create))["result"]["taskId"]))
def done(c, i):
    while json.loads(c.rt(request("tasks/get", {"taskId": ids[i]}, ids[i])))["result"]["status"] != "completed":
        time.sleep(0.01)
last = ids[-16:]
c = Conn()
for t in last:
    while json.loads(c.rt(request("tasks/get", {"taskId": t}, t)))["result"]["status"] != "completed":
        time.sleep(0.01)
cpu, wall = cpu_ns() - c0, time.perf_counter() - w0
t1 = ticks(); hz = os.sysconf("SC_CLK_TCK")
split = f"user {(t1[0]-t0[0])*1e6/hz/n:.0f} us, system {(t1[1]-t0[1])*1e6/hz/n:.0f} us"
if cg:
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)
run(n, done)  # every task, outside the window (as the life bench)
print(f"{name}: {n} tasks (50 ms sleep) from 16 connections: {cpu/1e3/n:.0f} us server CPU per task, whole life ({split}), {n/wall:.0f} tasks/s; load {' '.join(open('/proc/loadavg').read().split()[:3])}", flush=True)
os.killpg(p.pid, 15); p.wait()
import shutil; shutil.rmtree(d, ignore_errors=True)
