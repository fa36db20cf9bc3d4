#!/usr/bin/env python3
"""Streaming chat benchmark: what the broker adds to each token.

A minimal OpenAI-format LLM (in this file) streams chunks whose text is the
monotonic time at which it wrote them.  Clients read the tokens either
through the broker (/llmchat/chat, SSE, one user per stream) or directly
from the LLM (the floor), and record receive time minus send time for each
token.  Both run in the same process, so their clocks are the same.

    python3 tests/bench/chat_stream_bench.py [--streams 1,100,1000]
        [--tokens 50] [--interval-ms 20] [--bin build/bin]

Prints one line per configuration; docs/PERFORMANCE.md keeps the results.
This is a measurement, not a test: nothing here passes or fails.
"""
import argparse
import asyncio
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))

# ---- the stamping LLM -------------------------------------------------

TOKENS = 50
INTERVAL = 0.02


async def llm_handle(reader, writer):
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line.lower().startswith(b"content-length:"):
                length = int(line.split(b":", 1)[1])
        if length:
            await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                     b"Transfer-Encoding: chunked\r\nConnection: close\r\n"
                     b"\r\n")
        for i in range(TOKENS):
            if i:
                await asyncio.sleep(INTERVAL)
            chunk = {"id": "c", "object": "chat.completion.chunk",
                     "created": 0, "model": "m", "choices": [{
                         "index": 0, "delta": {"content":
                                               "%.6f " % time.monotonic()},
                         "finish_reason": None}]}
            data = b"data: " + json.dumps(chunk).encode() + b"\n\n"
            writer.write(b"%x\r\n%s\r\n" % (len(data), data))
            await writer.drain()
        done = {"id": "c", "object": "chat.completion.chunk", "created": 0,
                "model": "m", "choices": [{"index": 0, "delta": {},
                                           "finish_reason": "stop"}]}
        data = (b"data: " + json.dumps(done).encode() + b"\n\ndata: [DONE]"
                b"\n\n")
        writer.write(b"%x\r\n%s\r\n0\r\n\r\n" % (len(data), data))
        await writer.drain()
    except (ConnectionError, asyncio.IncompleteReadError):
        pass
    finally:
        writer.close()


# ---- clients ----------------------------------------------------------

async def read_stream(host, port, request, latencies, stalls):
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(request)
    await writer.drain()
    last = None
    event = None
    try:
        while True:
            line = await reader.readline()
            if not line:
                break
            now = time.monotonic()
            text = line.decode(errors="replace")
            if text.startswith("event: "):
                event = text[7:].strip()
                continue
            # Through the broker: "event: token" + "data: {"content":"T "}";
            # directly: an OpenAI chunk with delta.content "T ".
            if not text.startswith("data: {") or event not in (None,
                                                                "token"):
                continue
            doc = json.loads(text[6:])
            content = doc.get("content")
            if content is None:
                choices = doc.get("choices") or [{}]
                content = choices[0].get("delta", {}).get("content")
            if not content:
                continue
            latencies.append((now - float(content)) * 1000)
            if last is not None and now - last > 10 * INTERVAL + 0.1:
                stalls.append(now - last)
            last = now
    finally:
        writer.close()


def http_post(path, body, headers=()):
    payload = json.dumps(body).encode()
    head = ["POST %s HTTP/1.1" % path, "Host: bench",
            "Content-Type: application/json",
            "Content-Length: %d" % len(payload), "Connection: close"]
    head += list(headers)
    return ("\r\n".join(head) + "\r\n\r\n").encode() + payload


def pct(values, p):
    if not values:
        return float("nan")
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * p / 100))]


async def run(streams, broker, keys, llm_port):
    via_broker, direct = [], []
    stalls_b, stalls_d = [], []
    tasks = []
    for i in range(streams):
        req = http_post("/llmchat/chat", {"message": "go"},
                        ["Authorization: Bearer " + keys[i]])
        tasks.append(read_stream("127.0.0.1", broker.port, req, via_broker,
                                 stalls_b))
        req = http_post("/v1/chat/completions",
                        {"model": "m", "stream": True, "messages": []})
        tasks.append(read_stream("127.0.0.1", llm_port, req, direct,
                                 stalls_d))
    start = time.monotonic()
    await asyncio.gather(*tasks)
    return via_broker, direct, stalls_b, time.monotonic() - start


async def connect_all(broker, keys):
    async def one(key):
        reader, writer = await asyncio.open_connection("127.0.0.1",
                                                       broker.port)
        writer.write(http_post("/llmchat/connect", {"provider": "llm"},
                               ["Authorization: Bearer " + key]))
        await writer.drain()
        await reader.read()
        writer.close()
    for i in range(0, len(keys), 100):
        await asyncio.gather(*(one(k) for k in keys[i:i + 100]))


async def main_async(args):
    global TOKENS, INTERVAL
    TOKENS, INTERVAL = args.tokens, args.interval_ms / 1000
    server = await asyncio.start_server(llm_handle, "127.0.0.1", 0,
                                        backlog=4096)
    llm_port = server.sockets[0].getsockname()[1]
    from broker import Broker   # after --bin has set MCPBROKER_BIN
    counts = [int(n) for n in args.streams.split(",")]
    broker = Broker('auth { api-keys }\nprovider "llm" { type '
                    'openai-compatible base-url "http://127.0.0.1:%d/v1" '
                    'model "m" }\nlimits { llm-timeout 10m }' % llm_port)
    try:
        broker.start()
        keys = [broker.ctl("user", "add", "u%d" % i).stdout.split()[-1]
                for i in range(max(counts))]
        await connect_all(broker, keys)
        print("streams tokens interval_ms | broker p50 p99 max ms | "
              "direct p50 p99 ms | added p50 p99 ms | stalls | wall s")
        for n in counts:
            b, d, stalls, wall = await run(n, broker, keys, llm_port)
            print("%7d %6d %11d | %6.2f %6.2f %7.2f | %6.2f %6.2f | "
                  "%6.2f %6.2f | %6d | %6.1f" % (
                      n, TOKENS, args.interval_ms, pct(b, 50), pct(b, 99),
                      max(b) if b else float("nan"), pct(d, 50), pct(d, 99),
                      pct(b, 50) - pct(d, 50), pct(b, 99) - pct(d, 99),
                      len(stalls), wall), flush=True)
            if len(b) != n * TOKENS:
                print("  (broker delivered %d of %d tokens)"
                      % (len(b), n * TOKENS), flush=True)
    finally:
        broker.stop()
        server.close()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--streams", default="1,100,1000")
    p.add_argument("--tokens", type=int, default=50)
    p.add_argument("--interval-ms", type=int, default=20)
    p.add_argument("--bin", default=None)
    args = p.parse_args()
    if args.bin:
        os.environ["MCPBROKER_BIN"] = os.path.abspath(args.bin)
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
