#!/usr/bin/env python3
"""fp4serve serve against the official `openai` Python client and raw HTTP, on loopback.

Runs the server on the built-in model (random weights: the text is noise, but greedy decoding is
deterministic, which is what these checks rely on) with an NVFP4 KV cache, and checks:
streaming and non-streaming completions and chat, n > 1, logprobs, stop strings, usage, the
error table (status, type, param, code), a client that disconnects mid-stream, and 64
concurrent streaming clients whose greedy outputs equal the same requests run one at a time,
with every KV page back in the pool afterwards (read from /metrics).

usage: openai_server_test.py FP4SERVE_BINARY MODEL_DIR
"""
import concurrent.futures
import http.client
import json
import re
import socket
import os
import subprocess
import sys
import time

import openai

BINARY, MODEL = sys.argv[1], sys.argv[2]
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
from checklist import check, summary  # noqa: E402


class Server:
    def __init__(self, *extra):
        self.proc = subprocess.Popen(
            [BINARY, "serve", "--model", MODEL, "--port", "0", "--max-model-len", "1024",
             "--max-num-seqs", "32", "--max-num-batched-tokens", "512", "--kv-cache-dtype",
             "nvfp4", "--threads", "2", *extra],
            stderr=subprocess.PIPE, text=True)
        self.log = []
        deadline = time.time() + 120
        while time.time() < deadline:
            line = self.proc.stderr.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"on http://127\.0\.0\.1:(\d+)", line)
            if m:
                self.port = int(m.group(1))
                return
        raise RuntimeError("the server did not start:\n" + "".join(self.log))

    def request(self, method, path, body=None, headers=None, raw=None):
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        data = raw if raw is not None else (json.dumps(body) if body is not None else None)
        conn.request(method, path, body=data, headers={"Content-Type": "application/json", **(headers or {})})
        r = conn.getresponse()
        text = r.read().decode()
        conn.close()
        return r.status, text

    def metrics(self):
        _, text = self.request("GET", "/metrics")
        values = {}
        for line in text.splitlines():
            if line and not line.startswith("#"):
                name, value = line.rsplit(" ", 1)
                # Labelled series keep their finished_reason; the model_name label is dropped.
                reason = re.search(r'finished_reason="(\w+)"', name)
                values[name.split("{")[0] + (f"/{reason.group(1)}" if reason else "")] = float(value)
        return values

    def wait_idle(self, timeout=30):
        deadline = time.time() + timeout
        while time.time() < deadline:
            m = self.metrics()
            if m["fp4serve:kv_cache_pages_used"] == 0 and m["vllm:num_requests_running"] == 0 \
                    and m["vllm:num_requests_waiting"] == 0:
                return m
            time.sleep(0.05)
        return self.metrics()

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        return self.proc.returncode


def greedy(**kw):
    return dict(temperature=0, extra_body={"ignore_eos": True}, **kw)


def api_tests(s):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none")
    status, body = s.request("GET", "/health")
    check(status == 200, "/health is 200")
    models = client.models.list().data
    check(len(models) == 1 and models[0].id == MODEL, "/v1/models lists the served model")
    raw = json.loads(s.request("GET", "/v1/models")[1])["data"][0]
    check(raw["root"] == MODEL and raw["max_model_len"] == 1024, "/v1/models carries root and max_model_len")

    # Completions: non-streaming, then streaming, same greedy text; one event per token.
    prompt = "The capital of France is"
    full = client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, **greedy())
    ntok = json.loads(s.request("POST", "/tokenize", {"prompt": prompt})[1])["count"]
    check(full.usage.prompt_tokens == ntok, f"usage.prompt_tokens {full.usage.prompt_tokens} == /tokenize count {ntok}")
    check(full.usage.completion_tokens == 12 and full.choices[0].finish_reason == "length",
          "ignore_eos runs to max_tokens with finish_reason length")
    events, text, usage = 0, "", None
    for chunk in client.completions.create(model=MODEL, prompt=prompt, max_tokens=12, stream=True,
                                           stream_options={"include_usage": True}, **greedy()):
        if chunk.choices:
            events += 1
            text += chunk.choices[0].text
        if chunk.usage:
            usage = chunk.usage
    check(events == 12, f"one SSE event per token (got {events} for 12)")
    check(text == full.choices[0].text, "streamed text equals the non-streamed text")
    check(usage is not None and usage.completion_tokens == 12 and usage.prompt_tokens == ntok,
          "the final usage chunk counts prompt and completion tokens")

    # Token ids as the prompt, and echo.
    ids = json.loads(s.request("POST", "/tokenize", {"prompt": prompt})[1])["tokens"]
    by_ids = client.completions.create(model=MODEL, prompt=ids, max_tokens=12, **greedy())
    check(by_ids.choices[0].text == full.choices[0].text, "a token-id prompt gives the same text")
    echoed = client.completions.create(model=MODEL, prompt=prompt, max_tokens=4, echo=True, **greedy())
    check(echoed.choices[0].text.startswith(prompt), "echo puts the prompt before the completion")
    detok = json.loads(s.request("POST", "/detokenize", {"tokens": ids})[1])["prompt"]
    check(detok == prompt, "/detokenize inverts /tokenize")

    # Chat: the role arrives with the first token, not before it.
    messages = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Say hi."}]
    chat = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, **greedy())
    check(chat.choices[0].message.role == "assistant" and chat.usage.completion_tokens == 10, "chat completion")
    chunks = list(client.chat.completions.create(model=MODEL, messages=messages, max_tokens=10, stream=True,
                                                 stream_options={"include_usage": True}, **greedy()))
    token_chunks = [c for c in chunks if c.choices]
    check(len(token_chunks) == 10, f"chat: one event per token ({len(token_chunks)})")
    check(token_chunks[0].choices[0].delta.role == "assistant" and all(
        c.choices[0].delta.role is None for c in token_chunks[1:]), "chat: the role comes with the first token only")
    check("".join(c.choices[0].delta.content or "" for c in token_chunks) == chat.choices[0].message.content,
          "chat: streamed content equals the non-streamed content")
    rendered = json.loads(s.request("POST", "/tokenize", {"messages": messages})[1])["count"]
    check(chat.usage.prompt_tokens == rendered, "chat prompt tokens equal /tokenize of the messages")

    # n > 1 with a seed: distinct choices, reproducible.
    a = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, n=3, temperature=1.0, seed=7,
                                  extra_body={"ignore_eos": True})
    b = client.completions.create(model=MODEL, prompt=prompt, max_tokens=8, n=3, temperature=1.0, seed=7,
                                  extra_body={"ignore_eos": True})
    check(sorted(c.index for c in a.choices) == [0, 1, 2], "n=3 gives choices 0, 1, 2")
    check([c.text for c in a.choices] == [c.text for c in b.choices], "the same seed gives the same choices")
    check(len({c.text for c in a.choices}) > 1, "n choices from one seed differ")
    check(a.usage.completion_tokens == 24, "usage counts every choice's tokens")
    check(a.usage.prompt_tokens == ntok and a.usage.prompt_tokens_details.cached_tokens <= ntok,
          "n=3: prompt tokens and their cache hits count once per prompt")

    # Logprobs.
    lp = client.completions.create(model=MODEL, prompt=prompt, max_tokens=5, logprobs=2, **greedy())
    l = lp.choices[0].logprobs
    check(len(l.tokens) == 5 and len(l.token_logprobs) == 5 and all(x <= 0 for x in l.token_logprobs),
          "completion logprobs: one per token, each <= 0")
    # Keyed by token text, as OpenAI's format is: alternatives whose text coincides (e.g. bytes
    # of an unfinished character, all shown as U+FFFD) share a key.
    check(all(1 <= len(t) <= 3 for t in l.top_logprobs), "completion top_logprobs: 2 alternatives (+ the sampled)")
    check(all(max(t.values()) == lp_ for t, lp_ in zip(l.top_logprobs, l.token_logprobs)),
          "greedy: the sampled token has the best logprob")
    clp = client.chat.completions.create(model=MODEL, messages=messages, max_tokens=4, logprobs=True,
                                         top_logprobs=3, **greedy())
    content = clp.choices[0].logprobs.content
    check(len(content) == 4 and all(len(c.top_logprobs) == 3 for c in content), "chat logprobs with top_logprobs=3")

    # Stop strings: the text ends before the stop string, whose name is the stop_reason.
    long = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, **greedy()).choices[0].text
    stop = long[len(long) // 2:len(long) // 2 + 3]
    if stop and len(stop) == 3:
        st = client.completions.create(model=MODEL, prompt=prompt, max_tokens=40, stop=[stop], **greedy())
        c = st.choices[0]
        check(c.finish_reason == "stop" and c.text == long[:long.find(stop)], f"stop string {stop!r} cuts the text")
        check(c.model_extra.get("stop_reason") == stop, "stop_reason names the stop string")
        streamed = "".join(ch.choices[0].text for ch in client.completions.create(
            model=MODEL, prompt=prompt, max_tokens=40, stop=[stop], stream=True, **greedy()) if ch.choices)
        check(streamed == c.text, "streamed text with a stop string never shows the stop string")


def error_tests(s):
    def expect(status, body=None, raw=None, param=None, code=None, method="POST",
               path="/v1/completions", what="", headers=None):
        got, text = s.request(method, path, body, raw=raw, headers=headers)
        ok = got == status
        try:
            err = json.loads(text)["error"]
            ok = ok and isinstance(err["message"], str) and err["message"] and "type" in err
            ok = ok and (param is None or err.get("param") == param) and (code is None or err.get("code") == code)
        except (ValueError, KeyError, TypeError):
            ok = False
        check(ok, f"{what}: expected {status} param={param} code={code}, got {got} {text[:200]}")

    base = {"model": MODEL, "prompt": "hi", "max_tokens": 4}
    expect(400, raw="{not json", what="malformed JSON")
    expect(400, raw="[1, 2]", what="a JSON array body")
    expect(400, {**base, "temperature": -1}, param="temperature", what="negative temperature")
    expect(400, {**base, "temperature": "hot"}, param="temperature", what="temperature of the wrong type")
    expect(400, {**base, "n": "3"}, param="n", what="n of the wrong type")
    expect(400, {**base, "max_tokens": 0}, param="max_tokens", what="max_tokens 0")
    expect(400, {**base, "max_tokens": 5000}, param="max_tokens", code="context_length_exceeded", what="max_tokens beyond the context")
    expect(400, {**base, "prompt": [1] * 1100}, param="prompt", code="context_length_exceeded", what="a prompt longer than the context")
    expect(400, {"model": MODEL, "max_tokens": 4}, param="prompt", what="no prompt")
    expect(400, {**base, "prompt": [10 ** 9]}, param="prompt", what="a token id outside the vocabulary")
    expect(400, {**base, "top_p": 0}, param="top_p", what="top_p 0")
    expect(400, {**base, "logprobs": 50}, param="logprobs", what="too many logprobs")
    expect(400, {**base, "logit_bias": {"1": 5}}, param="logit_bias", what="logit_bias")
    expect(400, {**base, "stream_options": {"include_usage": True}}, param="stream_options", what="stream_options without stream")
    expect(404, {**base, "model": "no-such-model"}, param="model", code="model_not_found", what="unknown model")
    expect(400, {"model": MODEL, "messages": []}, param="messages", path="/v1/chat/completions", what="empty messages")
    expect(400, {"model": MODEL, "messages": [{"content": "x"}]}, param="messages", path="/v1/chat/completions", what="a message without a role")
    expect(400, {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "top_logprobs": 2},
           param="top_logprobs", path="/v1/chat/completions", what="top_logprobs without logprobs")
    expect(404, None, method="GET", path="/v1/nothing", what="unknown path")
    expect(405, None, method="GET", path="/v1/completions", what="GET on a POST route")
    expect(413, raw=json.dumps({**base, "prompt": "x" * 100000}), what="a body over --max-body-bytes")
    # The server is still healthy after all of that.
    check(s.request("GET", "/health")[0] == 200, "the server survives the bad requests")


def disconnect_test(s):
    body = json.dumps({"model": MODEL, "prompt": "Once upon a time", "max_tokens": 900, "stream": True,
                       "temperature": 0, "ignore_eos": True}).encode()
    sock = socket.create_connection(("127.0.0.1", s.port))
    sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    got = b""
    while got.count(b"data: ") < 3:
        got += sock.recv(4096)
    held = s.metrics()
    check(held["fp4serve:kv_cache_pages_used"] > 0, "a running stream holds pages")
    sock.close()
    m = s.wait_idle()
    check(m["fp4serve:kv_cache_pages_used"] == 0 and m["vllm:num_requests_running"] == 0,
          "a client that disconnects mid-stream has its request aborted and its pages freed")
    check(m["vllm:request_success_total/abort"] == held["vllm:request_success_total/abort"] + 1,
          "the disconnected request is counted as aborted in request_success_total")


def concurrency_test(s):
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{s.port}/v1", api_key="none", max_retries=0, timeout=300)
    # Two shared openings longer than a 128-token page, so the prefix cache has pages to hit.
    openings = ["Once upon a time, in a land far away, " * 5, "The quick brown fox jumps over the lazy dog. " * 4]
    prompts = [openings[i % 2] + f"Request {i}: " + "story " * (i % 13) for i in range(64)]

    def stream_one(i):
        text, events = "", 0
        for chunk in client.completions.create(model=MODEL, prompt=prompts[i], max_tokens=8 + i % 9, stream=True,
                                               stream_options={"include_usage": True}, **greedy()):
            if chunk.choices:
                events += 1
                text += chunk.choices[0].text
        return text, events

    alone = [client.completions.create(model=MODEL, prompt=p, max_tokens=8 + i % 9, **greedy()).choices[0].text
             for i, p in enumerate(prompts)]
    before = s.metrics()
    with concurrent.futures.ThreadPoolExecutor(64) as pool:
        results = list(pool.map(stream_one, range(64)))
    check(all(ev == 8 + i % 9 for i, (_, ev) in enumerate(results)), "64 concurrent streams all complete")
    mismatched = [i for i in range(64) if results[i][0] != alone[i]]
    check(not mismatched, f"64 concurrent greedy streams equal the same requests run alone (differ: {mismatched})")
    m = s.wait_idle()
    check(m["fp4serve:kv_cache_pages_used"] == 0, "every page is back in the pool after the concurrent run")
    check(m["vllm:prefix_cache_hits_total"] > before["vllm:prefix_cache_hits_total"],
          "the repeated prompts hit the prefix cache")
    check(m["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"] == sum(8 + i % 9 for i in range(64)),
          "generation_tokens_total counts every streamed token")


def auth_test():
    s = Server("--api-key", "sesame")
    try:
        status, text = s.request("GET", "/v1/models")
        check(status == 401 and json.loads(text)["error"]["code"] == "invalid_api_key", "401 without the key")
        status, _ = s.request("GET", "/v1/models", headers={"Authorization": "Bearer wrong"})
        check(status == 401, "401 with a wrong key")
        status, _ = s.request("GET", "/v1/models", headers={"Authorization": "Bearer sesame"})
        check(status == 200, "200 with the key")
        check(s.request("GET", "/health")[0] == 200, "/health needs no key")
    finally:
        check(s.stop() == 0, "the server with --api-key exits cleanly on SIGTERM")


server = Server("--max-body-bytes", "65536")
try:
    log = "".join(server.log)
    check("KV cache size:" in log and "Maximum concurrency for 1024 tokens per request" in log,
          "start-up logs the KV capacity and the concurrency at max_model_len")
    api_tests(server)
    error_tests(server)
    disconnect_test(server)
    concurrency_test(server)
finally:
    check(server.stop() == 0, "the server exits cleanly on SIGTERM")
auth_test()

sys.exit(summary())
