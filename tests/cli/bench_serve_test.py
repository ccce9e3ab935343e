#!/usr/bin/env python3
"""`fp4serve bench serve` end to end, against a fake OpenAI server on a loopback port.

The fake server (standard library only) streams a known number of SSE events per request with
known sleeps, packs two tokens into its last event (so the usage count and the event count
differ), sends the usage chunk and [DONE] in chunked transfer encoding, splits events across
writes, sends comment lines, and fails chosen requests in each of the ways a request can fail.
The test then reads the --save-result JSON and checks it against what the server did.

Usage: bench_serve_test.py PATH/TO/fp4serve
"""
import http.server
import json
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

BINARY = sys.argv[1]
FIRST_TOKEN_DELAY = 0.05  # s the server waits before its first event
ITL_SLEEP = 0.02          # s the server waits between events
STALL = 3.0               # s a stalled request waits (more than the client's --timeout 1)
API_KEY = "secret-key"
MODEL = "fake/model-1"

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402


class FakeServer(http.server.ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 1024  # the default backlog of 5 drops connections under a burst

    def handle_error(self, request, client_address):
        # A client that timed out has closed its end; anything else is a bug of this test.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)

    def __init__(self, plan, warm_requests, chunked=True):
        super().__init__(("127.0.0.1", 0), Handler)
        self.plan = plan                    # main-run request index -> mode
        self.warm_requests = warm_requests  # POSTs before the main run (test + warm-ups)
        self.chunked = chunked
        self.lock = threading.Lock()
        self.posts = 0
        self.log = []                       # (mode, body) of main-run requests, as received
        self.counters = {"queries": 0, "hits": 0, "preemptions": 0}


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def send_json(self, status, obj):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/v1/models":
            self.send_json(200, {"object": "list", "data": [
                {"id": MODEL, "object": "model", "created": 0, "owned_by": "fake", "root": MODEL}]})
        elif self.path == "/metrics":
            c = self.server.counters
            text = (f"# TYPE vllm:prefix_cache_queries_total counter\n"
                    f'vllm:prefix_cache_queries_total{{engine="0",model_name="{MODEL}"}} {c["queries"]}\n'
                    f'vllm:prefix_cache_hits_total{{engine="0",model_name="{MODEL}"}} {c["hits"]}\n'
                    f"vllm:num_preemptions_total {c['preemptions']}\n").encode()
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(text)))
            self.end_headers()
            self.wfile.write(text)
        else:
            self.send_json(404, {"error": {"message": "no such path"}})

    def write(self, data):
        if self.server.chunked:
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
        else:
            self.wfile.write(data)

    def event(self, obj):
        self.write(b"data: " + json.dumps(obj).encode() + b"\n\n")

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.headers.get("Authorization") != f"Bearer {API_KEY}":
            self.send_json(401, {"error": {"message": "bad key"}})
            return
        srv = self.server
        with srv.lock:
            srv.posts += 1
            index = srv.posts - 1 - srv.warm_requests
            mode = srv.plan.get(index, "ok") if index >= 0 else "ok"
        chat = "messages" in body
        prompt_len = len(body["prompt"]) if not chat else len(body["messages"][0]["content"].split())
        max_tokens = body["max_tokens"]
        if index >= 0:
            with srv.lock:
                srv.counters["queries"] += prompt_len
                srv.counters["hits"] += 16
                srv.log.append((mode, body))
        if mode == "http500":
            self.send_json(500, {"error": {"message": f"injected failure {index}", "code": 500}})
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if srv.chunked:
            self.send_header("Transfer-Encoding", "chunked")
        else:
            self.send_header("Connection", "close")
        self.end_headers()
        try:
            self.stream(mode, chat, prompt_len, max_tokens)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up (a timeout) or stopped reading (after an error event)
        if not srv.chunked:
            self.close_connection = True

    def stream(self, mode, chat, prompt_len, max_tokens):
        srv = self.server
        self.write(b": ping\n\n")
        time.sleep(STALL if mode == "stall" else FIRST_TOKEN_DELAY)
        # max_tokens tokens in max_tokens - 1 events: the last event carries two.
        events = max_tokens - 1
        for k in range(events):
            if k > 0:
                time.sleep(ITL_SLEEP)
            text = "t%d " % k if k < events - 1 else "t%d t%d " % (k, k + 1)
            choice = {"index": 0, "delta": {"content": text}} if chat else {"index": 0, "text": text}
            data = b"data: " + json.dumps({"id": "x", "choices": [choice]}).encode() + b"\n\n"
            if k == 1:
                # One event split across two writes (and two HTTP chunks) 5 ms apart.
                self.write(data[:9])
                time.sleep(0.005)
                self.write(data[9:])
            else:
                self.write(data)
            if mode == "error_event" and k == 1:
                self.event({"error": {"message": "engine died", "type": "server_error", "code": 500}})
                break
        if mode != "error_event":
            if mode != "no_usage":
                self.event({"id": "x", "choices": [], "usage": {
                    "prompt_tokens": prompt_len, "completion_tokens": max_tokens,
                    "total_tokens": prompt_len + max_tokens}})
        self.write(b"data: [DONE]\n\n")
        if srv.chunked:
            self.wfile.write(b"0\r\n\r\n")


def start(server):
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def run(*args, timeout=120):
    return subprocess.run([BINARY, "bench", "serve", *args], capture_output=True, text=True, timeout=timeout)


def percentile(values, p):
    """numpy.percentile's default linear interpolation, written out."""
    v = sorted(values)
    h = (len(v) - 1) * p / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (h - lo)


tmp = tempfile.mkdtemp()

# --- Run 1: /v1/completions, token-id prompts, concurrency 4, every failure mode. -------------
NUM = 24
WARMUPS = 2
INPUT, PREFIX, OUTPUT = 32, 16, 7
plan = {3: "http500", 10: "http500", 5: "error_event", 12: "stall", 7: "no_usage", 15: "no_usage"}
server = FakeServer(plan, warm_requests=1 + WARMUPS)
base = start(server)
result_path = os.path.join(tmp, "run1.json")
r = run("--base-url", base, "--num-prompts", str(NUM), "--num-warmups", str(WARMUPS),
        "--random-input-len", str(INPUT), "--random-prefix-len", str(PREFIX),
        "--random-output-len", str(OUTPUT), "--max-concurrency", "4", "--ignore-eos",
        "--api-key", API_KEY, "--timeout", "1", "--vocab-size", "1000", "--seed", "3",
        "--metric-percentiles", "50,90,99", "--save-result", "--result-filename", result_path)
print(r.stdout)
print(r.stderr, file=sys.stderr)
check(r.returncode == 0, f"run 1 exits 0 (got {r.returncode})")
check("Serving Benchmark Result" in r.stdout and "Mean TTFT (ms):" in r.stdout,
      "run 1 prints the Serving Benchmark Result block")
res = json.load(open(result_path))
log = list(server.log)
n_fail = sum(1 for m in plan.values() if m in ("http500", "error_event", "stall"))
check(res["completed"] == NUM - n_fail and res["failed"] == n_fail,
      f"completed/failed {res['completed']}/{res['failed']} == {NUM - n_fail}/{n_fail}")
check(res["model_id"] == MODEL, "model discovered from GET /v1/models")
errors = [e for e in res["errors"] if e]
check(len(errors) == n_fail, f"{n_fail} errors kept (got {len(errors)})")
check(sum("HTTP 500" in e and "injected failure" in e for e in errors) == 2,
      "non-200 failures keep their status and body")
check(sum("engine died" in e for e in errors) == 1, "an SSE error event fails its request with its message")
check(sum("timed out" in e for e in errors) == 1, "a stalled request times out")

ok_idx = [i for i, e in enumerate(res["errors"]) if not e]
ttfts = [res["ttfts"][i] for i in ok_idx]
check(min(ttfts) >= FIRST_TOKEN_DELAY, f"TTFT >= the server's first-token delay (min {min(ttfts):.4f})")
# Output tokens: usage says OUTPUT; the two requests without usage fall back to their
# OUTPUT - 1 events.
outs = sorted(res["output_lens"][i] for i in ok_idx)
n_ok = len(ok_idx)
check(outs == sorted([OUTPUT] * (n_ok - 2) + [OUTPUT - 1] * 2), f"output tokens from usage, else events: {outs}")
check(res["output_tokens_from_usage"] == n_ok - 2, "requests counted from usage")
check(all(res["input_lens"][i] == INPUT + PREFIX for i in ok_idx), "input lengths from usage.prompt_tokens")
check(res["total_output_tokens"] == sum(outs), "total output tokens")
# ITL: OUTPUT - 1 events, so OUTPUT - 2 = 5 gaps per request. Each request's mean gap is
# (t_last - t_first) / 5. The server's writes are at least ITL_SLEEP apart (sleep never returns
# early), so that mean can fall below ITL_SLEEP only by the first event's delivery delay spread
# over the gaps: under 5 ms / 5 = 1 ms on loopback. Above, the split event adds its 5 ms pause
# to one gap (1 ms on the mean), and each gap adds the server's per-event work and the sleep's
# overshoot, a few ms at most on a busy machine: 10 ms in all. A gap measured from the wrong
# event (the usage chunk, the request start) would be off by 20 to 50 ms.
for i in ok_idx:
    gaps = res["itls"][i]
    check(len(gaps) == OUTPUT - 2, f"request {i}: {OUTPUT - 2} ITL gaps (got {len(gaps)})")
    mean_gap = sum(gaps) / len(gaps)
    check(ITL_SLEEP - 0.001 <= mean_gap <= ITL_SLEEP + 0.010, f"request {i}: mean ITL {mean_gap:.4f} ~ {ITL_SLEEP}")
    check(abs(res["e2els"][i] - res["ttfts"][i] - sum(gaps)) < 1e-6, f"request {i}: E2EL = TTFT + sum(ITL)")
# The aggregates are the per-request arrays' statistics.
tpots = [(res["e2els"][i] - res["ttfts"][i]) / (res["output_lens"][i] - 1) for i in ok_idx]
check(abs(res["mean_tpot_ms"] - 1000 * sum(tpots) / len(tpots)) < 1e-6, "mean TPOT = mean of (E2EL-TTFT)/(out-1)")
check(abs(res["p99_ttft_ms"] - 1000 * percentile(ttfts, 99)) < 1e-6, "P99 TTFT is numpy's linear percentile")
check(abs(res["median_ttft_ms"] - 1000 * percentile(ttfts, 50)) < 1e-6, "median TTFT")
all_itl = [g for i in ok_idx for g in res["itls"][i]]
check(abs(res["p90_itl_ms"] - 1000 * percentile(all_itl, 90)) < 1e-6, "P90 ITL pools every gap")
mean_ttft = sum(ttfts) / len(ttfts)
std_ttft = math.sqrt(sum((t - mean_ttft) ** 2 for t in ttfts) / len(ttfts))
check(abs(res["std_ttft_ms"] - 1000 * std_ttft) < 1e-6, "std TTFT is the population std")
check(1 <= res["max_concurrent_requests"] <= NUM and res["max_output_tokens_per_s"] > 0, "peaks reported")
# What the server received.
bodies = [b for (_, b) in log]
check(len(bodies) == NUM, f"the server saw {NUM} main-run requests (got {len(bodies)})")
check(all(b["stream"] is True and b["stream_options"] == {"include_usage": True} and b["temperature"] == 0
          and b["ignore_eos"] is True and b["max_tokens"] == OUTPUT and b["model"] == MODEL for b in bodies),
      "every request streams with usage, greedy, ignore_eos, max_tokens")
prompts = [b["prompt"] for b in bodies]
check(all(len(p) == INPUT + PREFIX and all(0 <= t < 1000 for t in p) for p in prompts),
      "prompts are token ids of the exact length, below --vocab-size")
check(len({tuple(p[:PREFIX]) for p in prompts}) == 1 and len({tuple(p[PREFIX:]) for p in prompts}) == NUM,
      "the prefix is shared, the rest differs")
sm = res["server_metrics"]
check(sm is not None and sm["vllm:prefix_cache_queries_total"] == NUM * (INPUT + PREFIX)
      and sm["vllm:prefix_cache_hits_total"] == NUM * 16 and sm["vllm:num_preemptions_total"] == 0,
      f"server counter differences over the main run: {sm}")
check(res["workload"]["seed"] == 3 and res["max_concurrency"] == 4 and res["request_rate"] == "inf",
      "workload metadata")
server.shutdown()

# --- Run 2: the same seed reproduces the same prompts. ---------------------------------------
server2 = FakeServer({}, warm_requests=1)
base2 = start(server2)
r = run("--base-url", base2, "--num-prompts", str(NUM), "--random-input-len", str(INPUT),
        "--random-prefix-len", str(PREFIX), "--random-output-len", "3", "--api-key", API_KEY,
        "--vocab-size", "1000", "--seed", "3", "--request-rate", "200", "--model", MODEL)
check(r.returncode == 0, f"run 2 exits 0 (got {r.returncode}): {r.stderr}")
check(sorted(tuple(b["prompt"]) for (_, b) in server2.log) == sorted(tuple(p) for p in prompts),
      "the same --seed sends the same prompts")
server2.shutdown()

# --- Run 3: openai-chat with a tokenizer, a server that ends its body by closing. ------------
vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
for b in range(256):
    vocab[f"<0x{b:02X}>"] = len(vocab)
for w in ["▁the", "▁cat", "▁sat", "▁on", "▁mat", "▁a", "▁dog"]:
    vocab[w] = len(vocab)
tokenizer = {
    "version": "1.0",
    "added_tokens": [{"id": i, "content": t, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True} for i, t in enumerate(["<unk>", "<s>", "</s>"])],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "pre_tokenizer": None, "post_processor": None,
    "decoder": {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "fuse_unk": True, "byte_fallback": True,
              "vocab": vocab, "merges": []},
}
tok_path = os.path.join(tmp, "tokenizer.json")
json.dump(tokenizer, open(tok_path, "w"))
server3 = FakeServer({1: "http500"}, warm_requests=1, chunked=False)
base3 = start(server3)
result3 = os.path.join(tmp, "run3.json")
r = run("--base-url", base3, "--backend", "openai-chat", "--tokenizer", tok_path, "--num-prompts", "6",
        "--random-input-len", "8", "--random-output-len", "4", "--api-key", API_KEY,
        "--request-rate", "100", "--burstiness", "0.5", "--result-filename", result3)
print(r.stdout)
check(r.returncode == 0, f"run 3 exits 0 (got {r.returncode}): {r.stderr}")
res3 = json.load(open(result3))
check(res3["completed"] == 5 and res3["failed"] == 1, f"chat: 5 completed, 1 failed ({res3['completed']}/{res3['failed']})")
check(all(b.get("messages") and isinstance(b["messages"][0]["content"], str) and "prompt" not in b
          and b["max_completion_tokens"] == 4 for (_, b) in server3.log),
      "chat requests carry one user message of text")
check(res3["backend"] == "openai-chat" and res3["endpoint"] == "/v1/chat/completions", "chat endpoint by default")
check(min(t for t, e in zip(res3["ttfts"], res3["errors"]) if not e) >= FIRST_TOKEN_DELAY, "chat TTFT")
server3.shutdown()

# --- Bad input and an absent server. ----------------------------------------------------------
r = run("--backend", "openai-chat", "--model", "m")
check(r.returncode == 2 and "--tokenizer" in r.stderr, "openai-chat without --tokenizer exits 2 and names the flag")
r = run("--request-rate", "fast")
check(r.returncode == 2 and "--request-rate" in r.stderr, "a bad --request-rate exits 2")
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    free_port = s.getsockname()[1]
r = run("--port", str(free_port), "--model", "m", "--ready-check-timeout-sec", "0", "--num-prompts", "2", timeout=60)
check(r.returncode == 1 and "initial test request failed" in r.stderr, "no server: exits 1 and says why")
top = subprocess.run([BINARY, "bench", "--help"], capture_output=True, text=True, timeout=60)
check(top.returncode == 0 and "serve" in top.stdout, "fp4serve bench --help lists serve")

sys.exit(summary())
