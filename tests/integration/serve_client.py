#!/usr/bin/env python3
"""The client side of serve.sh: HTTP requests to a running `dptrain serve`, checked. Standard
library only (http.client, socket, threads). Each command exits non-zero with a line saying what
was expected and seen.

  serve_client.py api URL EXPECTED_FILE PROMPT N   probes, models, a greedy completion equal to
                                                   `dptrain generate`'s, streaming, batching
  serve_client.py bad URL BLOCK_SIZE               every bad request: status and the field named
  serve_client.py full URL                         a full queue answers 429, the rest 200
  serve_client.py auth URL KEY                     401 without the key, 200 with it
  serve_client.py slow URL                         a slow sender is cut off; a reader that leaves
                                                   mid-stream is dropped; the server goes on
  serve_client.py load URL STOP_FILE OUT_JSON      steady requests until STOP_FILE exists; counts
                                                   by status and model step
  serve_client.py long URL TOKENS OUT_JSON         one streamed request to the end (for SIGTERM)
"""
import http.client
import json
import os
import socket
import sys
import threading
import time
import urllib.parse


def fail(msg):
    print(f"FAIL: {msg}", file=sys.stderr)
    sys.exit(1)


def conn(url, timeout=60):
    u = urllib.parse.urlparse(url)
    return http.client.HTTPConnection(u.hostname, u.port, timeout=timeout)


def request(url, method, path, body=None, headers=None, raw=None):
    c = conn(url)
    h = {"Content-Type": "application/json"}
    h.update(headers or {})
    data = raw if raw is not None else (json.dumps(body) if body is not None else None)
    c.request(method, path, body=data, headers=h)
    r = c.getresponse()
    text = r.read().decode("utf-8", "replace")
    c.close()
    return r.status, text, dict(r.getheaders())


def complete(url, body, headers=None):
    status, text, _ = request(url, "POST", "/v1/completions", body, headers)
    return status, (json.loads(text) if text.startswith("{") else text)


def stream(url, body, stop_after=None):
    """The chunks of a streamed completion (stop_after: leave after that many)."""
    c = conn(url)
    c.request("POST", "/v1/completions", body=json.dumps(dict(body, stream=True)),
              headers={"Content-Type": "application/json"})
    r = c.getresponse()
    if r.status != 200:
        fail(f"stream: status {r.status}: {r.read()!r}")
    if not r.getheader("Content-Type", "").startswith("text/event-stream"):
        fail(f"stream: Content-Type {r.getheader('Content-Type')}")
    chunks, buf = [], b""
    while True:
        line = r.fp.readline()
        if not line:
            break
        line = line.strip()
        if not line.startswith(b"data: "):
            continue
        data = line[6:]
        if data == b"[DONE]":
            chunks.append("[DONE]")
            break
        chunks.append(json.loads(data))
        if stop_after and len(chunks) >= stop_after:
            c.sock.close()
            return chunks
    c.close()
    return chunks


def api(url, expected_file, prompt, n):
    n = int(n)
    for path, want in (("/healthz", 200), ("/readyz", 200)):
        status, _, _ = request(url, "GET", path)
        if status != want:
            fail(f"GET {path}: {status}, want {want}")
    status, text, _ = request(url, "GET", "/v1/models")
    models = json.loads(text)
    if status != 200 or models["object"] != "list" or models["data"][0]["id"] != "dptrain":
        fail(f"/v1/models: {status} {text}")
    step = models["data"][0]["model_step"]
    # Greedy: the text `dptrain generate --temperature 0` writes for the same prompt.
    expected = open(expected_file, encoding="utf-8").read()[len(prompt):].rstrip("\n")
    body = {"model": "dptrain", "prompt": prompt, "max_tokens": n, "temperature": 0}
    status, r = complete(url, body)
    if status != 200:
        fail(f"completion: {status} {r}")
    choice = r["choices"][0]
    if r["object"] != "text_completion" or not r["id"].startswith("cmpl-") or choice["finish_reason"] != "length":
        fail(f"completion: not the API's shape: {r}")
    if choice["text"] != expected:
        fail(f"completion text {choice['text']!r} differs from generate's {expected!r}")
    u = r["usage"]
    if u["completion_tokens"] != n or u["total_tokens"] != u["prompt_tokens"] + n or r["model_step"] != step:
        fail(f"usage or step wrong: {r}")
    print(f"ok: greedy completion equals dptrain generate: {choice['text'][:40]!r}; step {step}")
    # Streaming: the same text in pieces, finish reason only at the end, then [DONE].
    chunks = stream(url, body)
    if chunks[-1] != "[DONE]" or any(c["choices"][0]["finish_reason"] for c in chunks[:-2]):
        fail(f"stream: bad sequence of chunks: {chunks[-3:]}")
    if chunks[-2]["choices"][0]["finish_reason"] != "length" or "usage" not in chunks[-2]:
        fail(f"stream: the last chunk lacks finish_reason or usage: {chunks[-2]}")
    joined = "".join(c["choices"][0]["text"] for c in chunks[:-1])
    if joined != expected:
        fail(f"stream text {joined!r} differs from {expected!r}")
    print(f"ok: streaming: {len(chunks) - 1} chunks, the same text")
    # Stop strings end the text before them.
    stop = expected[5:7]
    status, r = complete(url, dict(body, stop=[stop]))
    if status != 200 or r["choices"][0]["finish_reason"] != "stop" or r["choices"][0]["text"] != expected[:expected.find(stop)]:
        fail(f"stop {stop!r}: {r}")
    # Batching: 8 requests at once, each the text it gets alone; two of them prompts of the whole
    # block (32), whose first call is one product of their own (kDecodePromptRows).
    prompts = [prompt, "the ", "and ", "a", "in the", "to be", ("the end of the day and " * 2)[:32],
               ("we were in the land of " * 2)[:32]]
    alone = {}
    for p in prompts:
        status, r = complete(url, {"prompt": p, "max_tokens": n, "temperature": 0})
        alone[p] = r["choices"][0]["text"]
    _, before, _ = request(url, "GET", "/metrics")
    together = {}

    def one(p):
        status, r = complete(url, {"prompt": p, "max_tokens": n, "temperature": 0})
        together[p] = r["choices"][0]["text"] if status == 200 else f"status {status}"

    for _ in range(3):
        ts = [threading.Thread(target=one, args=(p,)) for p in prompts]
        [t.start() for t in ts]
        [t.join() for t in ts]
        for p in prompts:
            if together[p] != alone[p]:
                fail(f"batched {p!r}: {together[p]!r}, alone {alone[p]!r}")
    _, after, _ = request(url, "GET", "/metrics")
    m0, m1 = metrics(before), metrics(after)
    steps = m1["dptrain_serve_decode_steps_total"] - m0["dptrain_serve_decode_steps_total"]
    tokens = m1["dptrain_serve_generated_tokens_total"] - m0["dptrain_serve_generated_tokens_total"]
    if not tokens == 3 * len(prompts) * n or not steps < tokens:
        fail(f"batching: {tokens} tokens in {steps} model calls; want fewer calls than tokens")
    print(f"ok: 3 x {len(prompts)} concurrent requests: each its text alone; {tokens} tokens in {steps} model calls "
          f"(mean batch {tokens / steps:.1f})")
    for name in ("dptrain_serve_request_duration_seconds_count", "dptrain_serve_queue_depth",
                 "dptrain_serve_generated_tokens_per_second", "dptrain_serve_model_step"):
        if name not in m1:
            fail(f"/metrics lacks {name}")
    # The decoding thread's own count: serve's default --threads 1, not the machine's cores.
    if m1.get("dptrain_serve_compute_threads") != 1:
        fail(f"/metrics: dptrain_serve_compute_threads {m1.get('dptrain_serve_compute_threads')}, want 1")
    if m1['dptrain_serve_requests_total{code="200"}'] < 3 * len(prompts):
        fail("/metrics: requests_total{code=200} too small")


def metrics(text):
    out = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            k, v = line.rsplit(" ", 1)
            out[k] = float(v)
    return out


def bad(url, block_size):
    block_size = int(block_size)
    cases = [
        ("malformed JSON", None, '{"prompt": "a",', 400, None),
        ("not an object", None, '[1, 2]', 400, None),
        ("no prompt", {"max_tokens": 3}, None, 400, "prompt"),
        ("empty prompt", {"prompt": ""}, None, 400, "prompt"),
        ("prompt of a wrong type", {"prompt": 12}, None, 400, "prompt"),
        ("over-long prompt", {"prompt": "a" * (block_size + 1)}, None, 400, "prompt"),
        ("a character the tokenizer lacks", {"prompt": "snow \u2603"}, None, 400, "prompt"),
        ("a token id outside the vocabulary", {"prompt": [1, 100000]}, None, 400, "prompt"),
        ("max_tokens of a wrong type", {"prompt": "a", "max_tokens": "ten"}, None, 400, "max_tokens"),
        ("max_tokens 0", {"prompt": "a", "max_tokens": 0}, None, 400, "max_tokens"),
        ("max_tokens beyond the limit", {"prompt": "a", "max_tokens": 10 ** 9}, None, 400, "max_tokens"),
        ("temperature out of range", {"prompt": "a", "temperature": -1}, None, 400, "temperature"),
        ("top_p of a wrong type", {"prompt": "a", "top_p": "x"}, None, 400, "top_p"),
        ("stop of a wrong type", {"prompt": "a", "stop": [1]}, None, 400, "stop"),
        ("stream not a boolean", {"prompt": "a", "stream": "yes"}, None, 400, "stream"),
        ("n of 2", {"prompt": "a", "n": 2}, None, 400, "n"),
        ("a misspelled field (max_token)", {"prompt": "the ", "max_token": 200}, None, 400, "max_token"),
        ("an unknown field (temprature)", {"prompt": "a", "temprature": 0.5}, None, 400, "temprature"),
        ("another model", {"prompt": "a", "model": "gpt-4"}, None, 404, "model"),
        ("a model that is not a string", {"prompt": "a", "model": [["gpt"]]}, None, 400, "model"),
        ("a body over --max-body", None, json.dumps({"prompt": "a" * 5000}), 413, "body"),
        # Scoring (echo, logprobs, max_tokens 0) and arrays of prompts.
        ("echo not a boolean", {"prompt": "a", "echo": "yes"}, None, 400, "echo"),
        ("logprobs over 5", {"prompt": "a", "logprobs": 6}, None, 400, "logprobs"),
        ("logprobs negative", {"prompt": "a", "logprobs": -1}, None, 400, "logprobs"),
        ("logprobs a boolean", {"prompt": "a", "logprobs": True}, None, 400, "logprobs"),
        ("max_tokens 0 with echo false", {"prompt": "a", "max_tokens": 0, "echo": False}, None, 400, "max_tokens"),
        ("stream with echo", {"prompt": "a", "echo": True, "stream": True}, None, 400, "stream"),
        ("stream with logprobs", {"prompt": "a", "logprobs": 1, "stream": True}, None, 400, "stream"),
        ("stream with two prompts", {"prompt": ["a", "b"], "stream": True}, None, 400, "stream"),
        ("an empty array of prompts", {"prompt": []}, None, 400, "prompt"),
        ("prompts of strings and ids mixed", {"prompt": ["a", 3]}, None, 400, "prompt"),
        ("prompts nested three deep", {"prompt": [[[1]]]}, None, 400, "prompt"),
        ("an empty prompt among prompts", {"prompt": ["a", ""]}, None, 400, "prompt"),
        ("65 prompts", {"prompt": ["a"] * 65}, None, 400, "prompt"),
        ("an over-long prompt among prompts", {"prompt": ["a", "a" * (block_size + 1)]}, None, 400, "prompt"),
        # Chat.
        ("chat: no messages", {"max_tokens": 2}, None, 400, "messages", "/v1/chat/completions"),
        ("chat: messages not an array", {"messages": "hi"}, None, 400, "messages", "/v1/chat/completions"),
        ("chat: a role it does not know", {"messages": [{"role": "tool", "content": "a"}]}, None, 400, "messages",
         "/v1/chat/completions"),
        ("chat: content not text", {"messages": [{"role": "user", "content": 5}]}, None, 400, "messages",
         "/v1/chat/completions"),
        ("chat: an image part", {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, None, 400,
         "messages", "/v1/chat/completions"),
        ("chat: tools", {"messages": [{"role": "user", "content": "a"}], "tools": [{}]}, None, 400, "tools",
         "/v1/chat/completions"),
        ("chat: logprobs", {"messages": [{"role": "user", "content": "a"}], "logprobs": True}, None, 400, "logprobs",
         "/v1/chat/completions"),
        ("chat: a JSON response format", {"messages": [{"role": "user", "content": "a"}],
                                          "response_format": {"type": "json_object"}}, None, 400, "response_format",
         "/v1/chat/completions"),
        ("chat: max_completion_tokens 0", {"messages": [{"role": "user", "content": "a"}],
                                           "max_completion_tokens": 0}, None, 400, "max_completion_tokens",
         "/v1/chat/completions"),
        ("chat: a completions field", {"messages": [{"role": "user", "content": "a"}], "prompt": "a"}, None, 400,
         "prompt", "/v1/chat/completions"),
        ("chat: a conversation over the context", {"messages": [{"role": "user", "content": "a" * block_size}]}, None,
         400, "messages", "/v1/chat/completions"),
        ("chat: malformed JSON", None, '{"messages": [', 400, None, "/v1/chat/completions"),
    ]
    for what, body, raw, want, param, *path in cases:
        status, text, headers = request(url, "POST", path[0] if path else "/v1/completions", body, raw=raw)
        try:
            err = json.loads(text)["error"]
        except Exception:
            fail(f"{what}: {status} with a body that is not the JSON error: {text!r}")
        if status != want or err["param"] != param or not err["message"]:
            fail(f"{what}: {status} param {err['param']!r}, want {want} param {param!r}: {text}")
        print(f"ok: {what}: {status} ({err['message'][:70]})")
    # A chunked body over --max-body (4096 here): httplib holds only a Content-Length to it, and a
    # chunked body of any size was read whole into memory. Refused by the time 8 KiB arrived; the
    # rest is never sent.
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port))
    s.settimeout(5)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Transfer-Encoding: chunked\r\n\r\n")
    piece = b'{"prompt": "' + b"a" * 1000
    for _ in range(8):
        try:
            s.sendall(b"%x\r\n%s\r\n" % (len(piece), piece))
        except (BrokenPipeError, ConnectionResetError):
            break  # refused and closed before the rest: what is wanted
        piece = b"a" * 1000
    got = b""
    try:
        while b"\r\n\r\n" not in got or not got.rstrip().endswith(b"}"):
            part = s.recv(4096)
            if not part:
                break
            got += part
    except (socket.timeout, ConnectionResetError):
        pass
    s.close()
    if not got.startswith(b"HTTP/1.1 413") or b'"param":"body"' not in got.replace(b" ", b""):
        fail(f"a chunked body over --max-body: want 413 naming body, got {got[:300]!r}")
    print("ok: a chunked body over --max-body: 413 before the rest was sent")
    # A POST without a Content-Length (nor chunked), or with one that is no number: refused at once,
    # the connection closed (each was waited for until --read-timeout, then 400 or a wrong 413).
    for head, want, says in ((b"", b"HTTP/1.1 411", b"needs its body's Content-Length"),
                             (b"Content-Length: -1\r\n", b"HTTP/1.1 400", b"Content-Length '-1' is not a number")):
        got = answer_then_close(url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\n" + head + b"\r\n{}", f"a POST {head!r}")
        if not got.startswith(want) or says not in got:
            fail(f"a POST with {head!r}: want {want!r} saying {says!r}, got {got[:300]!r}")
    print("ok: a POST without a length, or with a length that is no number: 411 / 400 at once, connection closed")
    status, text, _ = request(url, "GET", "/v1/nothing")
    if status != 404 or "no endpoint GET /v1/nothing" not in text:
        fail(f"unknown path: {status} {text}")
    status, text, _ = request(url, "GET", "/v1/completions")
    if status != 404 or "error" not in json.loads(text):
        fail(f"GET /v1/completions: {status} {text}")
    status, _, _ = request(url, "GET", "/healthz")
    if status != 200:
        fail("the server is not healthy after the bad requests")
    print("ok: unknown paths and methods: 404 with the JSON error; the server is healthy")
    # Two requests sent at once on one connection (pipelined) both get their answer: the second may
    # already sit in the server's read buffer when the first is answered.
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port))
    s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\nGET /readyz HTTP/1.1\r\nHost: x\r\n\r\n")
    s.settimeout(3)
    got = b""
    try:
        while got.count(b"HTTP/1.1 200") < 2 or not got.endswith(b"ready\n"):  # the second answer whole
            part = s.recv(4096)
            if not part:
                break
            got += part
    except socket.timeout:
        pass
    s.close()
    if got.count(b"HTTP/1.1 200") != 2 or b"ready" not in got:
        fail(f"two pipelined requests: want two answers within 3 s, got {got!r}")
    print("ok: two pipelined requests on one connection both answered")


def full(url):
    results = []

    def one():
        # Long enough that the first is still decoding when the fifth arrives 80 ms later, at
        # 50k tokens/s and more.
        status, r = complete(url, {"prompt": "a", "max_tokens": 20000, "temperature": 0})
        results.append((status, r))

    ts = [threading.Thread(target=one) for _ in range(5)]
    for t in ts:
        t.start()
        time.sleep(0.02)
    [t.join() for t in ts]
    codes = sorted(s for s, _ in results)
    if codes.count(429) < 1 or codes.count(200) < 2 or set(codes) - {200, 429}:
        fail(f"5 long requests to --max-batch 1 --max-queue 1: statuses {codes}")
    r = next(r for s, r in results if s == 429)
    if r["error"]["type"] != "rate_limit_error":
        fail(f"429 body: {r}")
    print(f"ok: a full queue: statuses {codes}; {r['error']['message']}")


def auth(url, key):
    status, r = complete(url, {"prompt": "a", "max_tokens": 2})
    if status != 401 or r["error"]["type"] != "authentication_error":
        fail(f"no key: {status} {r}")
    status, r = complete(url, {"prompt": "a", "max_tokens": 2}, {"Authorization": "Bearer wrong"})
    if status != 401:
        fail(f"wrong key: {status}")
    status, r = complete(url, {"prompt": "a", "max_tokens": 2}, {"Authorization": f"Bearer {key}"})
    if status != 200:
        fail(f"right key: {status} {r}")
    # The scheme's name in any case (RFC 9110); the key itself exactly.
    for header, want in ((f"bearer {key}", 200), (f"BEARER {key}", 200), (f"Bearer {key.upper()}x", 401),
                         (f"Basic {key}", 401)):
        status, r = complete(url, {"prompt": "a", "max_tokens": 2}, {"Authorization": header})
        if status != want:
            fail(f"Authorization {header!r}: {status}, want {want}")
    # The refused requests are counted by status.
    m = metrics(request(url, "GET", "/metrics")[1])
    if m.get('dptrain_serve_requests_total{code="401"}', 0) < 4:
        fail(f"401s are not counted in /metrics: {[k for k in m if 'requests_total' in k]}")
    status, _, _ = request(url, "GET", "/healthz")
    if status != 200:
        fail("probes must not need the key")
    print("ok: --api-key: 401 without it or with a wrong one, 200 with it; probes open")
    # Under the default --max-body (1 MiB): a form-encoded body over 8 KiB (what `curl -d` sends
    # without a Content-Type), which httplib's own read refused as over --max-body; and a model
    # of arrays nested 300,000 deep, whose error message once recursed the server off its stack.
    key_h = {"Authorization": f"Bearer {key}"}
    body = json.dumps({"prompt": "a", "max_tokens": 2}) + " " * 9000
    status, text, _ = request(url, "POST", "/v1/completions", raw=body,
                              headers=dict(key_h, **{"Content-Type": "application/x-www-form-urlencoded"}))
    if status != 200:
        fail(f"a 9 KB form-encoded JSON body: {status} {text}")
    deep = '{"prompt": "a", "model": ' + "[" * 300000 + "]" * 300000 + "}"
    status, text, _ = request(url, "POST", "/v1/completions", raw=deep, headers=key_h)
    if status != 400 or json.loads(text)["error"]["param"] != "model":
        fail(f"a model nested 300,000 deep: {status} {text[:200]}")
    status, _, _ = request(url, "GET", "/healthz")
    if status != 200:
        fail("the server is not healthy after the nested body")
    print("ok: a 9 KB form-encoded body is read; a model nested 300,000 deep gets 400 and the server lives")


def answer_then_close(url, data, who):
    """Sends data on a new connection; what comes back until the server closes it (10 s at most)."""
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port))
    s.settimeout(10)
    s.sendall(data)
    got = b""
    try:
        while True:
            part = s.recv(4096)
            if not part:
                break
            got += part
    except socket.timeout:
        fail(f"{who}: the connection was not closed within 10 s: {got[:300]!r}")
    s.close()
    return got


def trickle(url, data, limit, who):
    """Sends data a byte every 0.3 s until the server cuts the connection; the seconds it took
    (failing past `limit`)."""
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port))
    t0 = time.time()
    for i in range(len(data)):
        try:
            s.sendall(data[i:i + 1])
        except OSError:
            break
        time.sleep(0.3)
        if time.time() - t0 > limit:
            fail(f"{who} was not cut off within {limit} s")
    s.close()
    return time.time() - t0


def wait_dropped(url, before, who):
    """Waits (10 s at most) until /metrics counts one more cancelled request and none decoding."""
    for _ in range(100):
        _, after, _ = request(url, "GET", "/metrics")
        m = metrics(after)
        if m["dptrain_serve_cancelled_total"] > metrics(before)["dptrain_serve_cancelled_total"] and \
                m["dptrain_serve_active_sequences"] == 0:
            return
        time.sleep(0.1)
    fail(f"{who} was not dropped (cancelled_total did not grow)")


def slow(url):
    u = urllib.parse.urlparse(url)
    t0 = time.time()
    got = answer_then_close(url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{\"prompt\"",
                            "a client that never finishes its body")
    if not got.startswith(b"HTTP/1.1 408") or b"Connection: close" not in got or b"--read-timeout" not in got:
        fail(f"a client that never finishes its body: want 408 naming --read-timeout and Connection: close, got {got!r}")
    print(f"ok: a slow sender is cut off after {time.time() - t0:.1f} s ({got[:30]!r}), the connection closed")
    # A request that cannot be parsed gets one 400 and the connection is closed: what follows it on
    # the connection (here a valid request) is not answered as a request of its own, which would put
    # answers and requests out of step behind a proxy.
    got = answer_then_close(url, b"GARBAGE\r\n\r\nGET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", "an unparsable request")
    if got.count(b"HTTP/1.1 ") != 1 or not got.startswith(b"HTTP/1.1 400") or b"could not be parsed" not in got:
        fail(f"an unparsable request: want one 400 and the connection closed, got {got!r}")
    print("ok: an unparsable request gets one 400 and its connection is closed")
    # A negative chunk size: httplib read "-5" as a size near 2^64 and waited for the read timeout
    # (408 after --read-timeout). At once now, and what followed it is not taken for a request.
    chunked = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
               b"Transfer-Encoding: chunked\r\n\r\n")
    for size in (b"-5", b"0x10", b"zz"):
        t0 = time.time()
        got = answer_then_close(url, chunked + size + b"\r\nhello\r\n0\r\n\r\n", f"a chunk size of {size!r}")
        took = time.time() - t0
        if got.count(b"HTTP/1.1 ") != 1 or not got.startswith(b"HTTP/1.1 400") or b"chunk" not in got or took > 0.5:
            fail(f"a chunk size of {size!r}: want one 400 naming the chunk at once, got {got!r} after {took:.2f} s")
    body = b'{"prompt": "a", "max_tokens": 1}'
    two = b"5\r\n%s\r\n%x;x=1\r\n%s\r\n0\r\n\r\n" % (body[:5], len(body) - 5, body[5:])
    got = answer_then_close(url, chunked + two + b"GET /nothing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
                            "a chunked body")
    if not got.startswith(b"HTTP/1.1 200") or got.count(b"HTTP/1.1 404") != 1:
        fail(f"a chunked body in two chunks (one with an extension): want 200 then the next request's 404, got {got!r}")
    print("ok: a chunk size that is not hexadecimal (-5, 0x10, zz) gets one 400 at once; a valid chunked body is read")
    # A byte every 0.3 s, each read within --read-timeout (1 s) but the request never whole within
    # it: cut off too. httplib's timeout alone applied to each read, and held the connection
    # thread for as long as the client went on (enough such clients took every thread).
    took = trickle(url, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n" + b" " * 100, 10,
                   "a client trickling its request a byte every 0.3 s")
    if took > 3:
        fail(f"a client trickling its request was cut off after {took:.1f} s, want about 1 s (--read-timeout)")
    print(f"ok: a client trickling its request a byte every 0.3 s is cut off after {took:.1f} s")
    # A client that stops waiting for its (non-streamed) answer: the request is cancelled, not
    # decoded to max_tokens for nobody.
    _, before, _ = request(url, "GET", "/metrics")
    c = conn(url)
    c.request("POST", "/v1/completions", body=json.dumps({"prompt": "a", "max_tokens": 100000, "temperature": 0}),
              headers={"Content-Type": "application/json"})
    time.sleep(0.2)
    c.close()
    wait_dropped(url, before, "a client that left before its answer")
    # ... and counted as 499, not as the 200 it was counted as when it was submitted.
    ok, bad = 'dptrain_serve_requests_total{code="200"}', 'dptrain_serve_requests_total{code="499"}'
    for _ in range(100):
        m = metrics(request(url, "GET", "/metrics")[1])
        if m.get(bad, 0) == metrics(before).get(bad, 0) + 1:
            break
        time.sleep(0.1)
    else:
        fail(f"a client that left before its answer: requests_total 499 is {m.get(bad, 0)}, want one more")
    if m.get(ok, 0) != metrics(before).get(ok, 0):
        fail(f"a client that left before its answer was counted as 200 too")
    print("ok: a client that leaves before its answer is dropped, and counted as 499")
    _, before, _ = request(url, "GET", "/metrics")
    chunks = stream(url, {"prompt": "a", "max_tokens": 50000, "temperature": 0}, stop_after=2)
    if len(chunks) != 2:
        fail("stream ended early")
    wait_dropped(url, before, "a reader that left mid-stream")
    status, r = complete(url, {"prompt": "a", "max_tokens": 3})
    if status != 200:
        fail("the server does not answer after the slow clients")
    print("ok: a reader that leaves mid-stream is dropped; the server goes on")


def load(url, stop_file, out):
    # Until the test creates stop_file (it waits for the swap first), 120 s at most: a fixed
    # duration raced the training run that writes the newer checkpoint on a busy machine.
    end = time.time() + 120
    counts, steps, lock = {}, {}, threading.Lock()

    def worker():
        while time.time() < end and not os.path.exists(stop_file):
            try:
                status, r = complete(url, {"prompt": "the ", "max_tokens": 20, "temperature": 0})
            except Exception as e:
                status, r = f"exception {e}", None
            with lock:
                counts[str(status)] = counts.get(str(status), 0) + 1
                if status == 200:
                    steps[str(r["model_step"])] = steps.get(str(r["model_step"]), 0) + 1

    ts = [threading.Thread(target=worker) for _ in range(4)]
    [t.start() for t in ts]
    [t.join() for t in ts]
    json.dump({"status": counts, "steps": steps}, open(out, "w"))


def abandoned(url):
    """Against --max-batch 1 --max-queue 1: a queued request whose client leaves (whole, then
    streamed) gives its place up; the next client is queued, not refused with 429."""
    u = urllib.parse.urlparse(url)
    for streamed in (False, True):
        holder = threading.Thread(target=complete, args=(url, {"prompt": "a", "max_tokens": 100000, "temperature": 0}))
        holder.start()
        time.sleep(0.2)  # the holder decodes in the one slot
        s = socket.create_connection((u.hostname, u.port))
        body = json.dumps({"prompt": "a", "max_tokens": 10, "stream": streamed}).encode()
        s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: %d\r\n\r\n%s" % (len(body), body))
        time.sleep(0.2)  # queued behind the holder
        s.close()
        time.sleep(0.6)  # looked at every 0.2 s
        queued = metrics(request(url, "GET", "/metrics")[1]).get("dptrain_serve_queue_depth")
        status, r = complete(url, {"prompt": "a", "max_tokens": 1, "temperature": 0})
        holder.join()
        what = "streamed" if streamed else "whole"
        if status != 200 or queued != 0:
            fail(f"a queued {what} request whose client left: queue depth {queued}, the next request {status}: {r}")
        print(f"ok: a queued {what} request whose client left gave its place up (queue depth 0, the next one 200)")


def held(url):
    """Against a server of --read-timeout 10: a new connection that sends nothing is closed after
    about 1 s (it held a connection thread for the 5 s keep-alive wait), and one that trickles its
    headers after about 2 s (for the whole --read-timeout): 85 such clients took the pool's threads
    and kept /healthz waiting 4.5-7.5 s."""
    u = urllib.parse.urlparse(url)
    s = socket.create_connection((u.hostname, u.port))
    s.settimeout(10)
    t0 = time.time()
    try:
        got = s.recv(100)
    except socket.timeout:
        fail("a connection that sends nothing was not closed within 10 s")
    took = time.time() - t0
    s.close()
    if got != b"" or took > 3:
        fail(f"a connection that sends nothing: closed after {took:.1f} s with {got!r}, want about 1 s and nothing")
    print(f"ok: a connection that sends nothing is closed after {took:.1f} s")
    took = trickle(url, b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n", 8, "a client trickling its headers")
    if took > 4:
        fail(f"a client trickling its headers was cut off after {took:.1f} s, want about 2 s")
    print(f"ok: a client trickling its headers is cut off after {took:.1f} s (--read-timeout 10)")
    # 200 connections that send nothing, on a server of 10 connection threads: each held a thread
    # for its 1 s, so /readyz waited about 20 s (1.95 s on the default 80). An idle connection now
    # gives its thread up to the ones waiting; the probe must come back within Kubernetes' default
    # 1 s, idle connections that then send a request are answered, and the rest are still closed.
    t0 = time.time()
    idle = [socket.create_connection((u.hostname, u.port)) for _ in range(200)]
    connected = time.time() - t0
    t0 = time.time()
    status, _, _ = request(url, "GET", "/readyz")
    took = time.time() - t0
    if status != 200 or took > 1.0:
        fail(f"/readyz behind 200 idle connections: {status} after {took:.2f} s, want 200 within 1 s")
    for s in idle[-20:]:
        s.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    for s in idle[-20:]:
        s.settimeout(5)
        got = s.recv(100)
        if not got.startswith(b"HTTP/1.1 200"):
            fail(f"an idle connection that then sent a request {time.time() - t0:.2f} s after the probe's: {got!r}")
    for s in idle[:-20]:
        s.settimeout(10)
        if s.recv(100) != b"":
            fail("an idle connection got bytes it did not ask for")
    [s.close() for s in idle]
    print(f"ok: 200 idle connections made in {connected:.2f} s; /readyz behind them (10 threads) answered in {took:.2f} s; "
          f"idle ones are answered when they ask and closed when they do not")


def long(url, tokens, out):
    chunks = stream(url, {"prompt": "a", "max_tokens": int(tokens), "temperature": 0})
    last = chunks[-2] if len(chunks) > 1 else {}
    json.dump({"done": chunks[-1] == "[DONE]", "finish": last.get("choices", [{}])[0].get("finish_reason"),
               "tokens": last.get("usage", {}).get("completion_tokens")}, open(out, "w"))


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"api": api, "bad": bad, "full": full, "abandoned": abandoned, "held": held, "auth": auth, "slow": slow,
     "load": load, "long": long}[cmd](*args)
