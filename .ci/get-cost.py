"""What a `tasks/get` costs a server (BENCHMARKS.md, "What a `tasks/get` costs,
layer by layer"): starts a release binary as the `peer` bench starts it
(`--ours`: the conformance example on SQLite FULL with the bench's limits;
otherwise `rmcp-task-server`), holds HELD tasks (`slow_compute`, an hour)
created from 16 connections, makes 320 gets of warm-up, then GETS gets from 16
keep-alive connections striding through the tasks, and prints the server's
CPU per get (`/proc/<pid>/task/*/schedstat`), gets/s, p50 and p99, and the
load average. With `--callgrind FILE` the server runs under callgrind,
counting the GETS gets only (`FILE.1`; `callgrind_annotate --inclusive=yes`).

  python3 .ci/get-cost.py NAME BIN HELD GETS [--ours] [--callgrind FILE]
  e.g. python3 .ci/get-cost.py ours target/release/conformance 10000 20000 --ours
"""
import json, os, re, socket, subprocess, sys, tempfile, threading, time, glob

name, binp, held, ngets = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
ours = "--ours" in sys.argv
cg = sys.argv[sys.argv.index("--callgrind") + 1] if "--callgrind" in sys.argv else None
d = tempfile.mkdtemp(prefix="get-cost-")
args = [binp, "--addr", "127.0.0.1:0"]
if ours:
    args += ["--store", d + "/full.db", "--admin", "127.0.0.1:0", "--limit", "creates_per_second=inf",
             "--limit", "max_unfinished_per_principal=1000000000", "--limit", "max_unfinished_per_address=1000000000",
             "--limit", "max_listens_per_principal=1000000", "--limit", "max_listens_per_task=1000000",
             "--max-connections-per-client", "1000000"]
if cg:
    args = ["valgrind", "--tool=callgrind", "--instr-atstart=no", "--callgrind-out-file=" + cg] + args
env = dict(os.environ, RUST_LOG="error")
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env, start_new_session=True)
line = p.stdout.readline()
m = re.search(r"http://([\d.]+):(\d+)", line)
host, port = m.group(1), int(m.group(2))
pid = p.pid  # valgrind runs the server in this same process

META = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"extensions": {"io.modelcontextprotocol/tasks": {}}, "elicitation": {}}}

def request(method, params, name):
    params = dict(params, _meta=META)
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: application/json, text/event-stream\r\n"
            f"Content-Type: application/json\r\nMCP-Protocol-Version: 2026-07-28\r\nMcp-Method: {method}\r\n"
            f"Mcp-Name: {name}\r\nContent-Length: {len(body)}\r\n\r\n").encode()
    return head + body

class Conn:
    def __init__(self):
        self.s = socket.create_connection((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""
    def rt(self, req):
        self.s.sendall(req)
        while b"\r\n\r\n" not in self.buf:
            self.buf += self.s.recv(65536)
        h, rest = self.buf.split(b"\r\n\r\n", 1)
        n = int(re.search(rb"(?i)content-length: *(\d+)", h).group(1))
        while len(rest) < n:
            rest += self.s.recv(65536)
        self.buf = rest[n:]
        body = rest[:n]
        if not h.startswith(b"HTTP/1.1 200"):
            raise SystemExit(f"status: {h[:100]} {body[:200]}")
        return body

def cpu_ns():
    t = 0
    for f in glob.glob(f"/proc/{pid}/task/*/schedstat"):
        try:
            t += int(open(f).read().split()[0])
        except OSError:
            pass
    return t

def run(n, conns, fn):
    lat = []
    lock = threading.Lock()
    nxt = [0]
    def worker():
        c = Conn()
        mine = []
        while True:
            with lock:
                i = nxt[0]; nxt[0] += 1
            if i >= n: break
            t = time.perf_counter()
            fn(c, i)
            mine.append(time.perf_counter() - t)
        with lock:
            lat.extend(mine)
    ts = [threading.Thread(target=worker) for _ in range(conns)]
    for t in ts: t.start()
    for t in ts: t.join()
    lat.sort()
    return lat

ids = []
create = request("tools/call", {"name": "slow_compute", "arguments": {"seconds": 3600, "label": "bench"}}, "slow_compute")
def mk(c, i):
    b = c.rt(create)
    ids.append(json.loads(b)["result"]["taskId"])
t0 = time.time()
run(held, 16, mk)
print(f"{name}: {held} held in {time.time()-t0:.1f}s", flush=True)
reqs = [request("tasks/get", {"taskId": i}, i) for i in ids]
def get(c, i):
    c.rt(reqs[(i * 7919) % len(reqs)])
run(320, 16, get)  # warm-up
if cg:
    subprocess.run(["callgrind_control", "-i", "on", str(pid)], check=True, stdout=subprocess.DEVNULL)
c0, w0 = cpu_ns(), time.perf_counter()
lat = run(ngets, 16, get)
wall = time.perf_counter() - w0
cpu = cpu_ns() - c0
if cg:
    subprocess.run(["callgrind_control", "-i", "off", str(pid)], check=True, stdout=subprocess.DEVNULL)
    subprocess.run(["callgrind_control", "-d", str(pid)], check=True, stdout=subprocess.DEVNULL)
load = open("/proc/loadavg").read().split()[:3]
print(f"{name}: held {held}, {ngets} gets from 16 connections: {cpu/1e3/ngets:.1f} us server CPU per get, "
      f"{ngets/wall:.0f} gets/s, p50 {lat[len(lat)//2]*1e3:.2f} ms, p99 {lat[int(len(lat)*0.99)]*1e3:.2f} ms; load {' '.join(load)}", flush=True)
os.killpg(p.pid, 15)
p.wait()
import shutil
shutil.rmtree(d, ignore_errors=True)
