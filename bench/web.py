"""``web_p50_ms``/``web_p99_ms``: from ``POST /hooks/github/{inbox}`` (a signed delivery to the
real web edge, ``python -m wakeful.web``) to the agent being called: the edge stores the event and
rings, one broker hop, against Celery's send -> start (``celery_p50/p99_ms``, same run)."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import subprocess
import sys
import time
import uuid

import httpx

from bench import env
from bench.context import Context
from bench.probe import LATENCY_KEY

SECRET = "bench-github-secret"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_edge(ctx: Context) -> tuple[subprocess.Popen, str]:
    port = _free_port()
    e = dict(ctx.wakeful_worker.env, WAKEFUL_GITHUB_SECRETS=SECRET, WAKEFUL_WEB_PORT=str(port),
             WAKEFUL_WEB_HOST="127.0.0.1")
    log = open(ctx.home / "web.log", "ab")
    proc = subprocess.Popen([sys.executable, "-m", "wakeful.web"], env=e, cwd=env.ROOT, stdout=log,
                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/healthz", timeout=1).status_code < 500:
                return proc, base
        except httpx.HTTPError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"the web edge did not start: see {ctx.home / 'web.log'}")


def unloaded(ctx: Context, base: str, probes: int) -> list[float]:
    r = env.redis_client()
    r.delete(LATENCY_KEY)
    samples = []
    with httpx.Client(base_url=base, timeout=10) as http:
        for i in range(probes):
            body = json.dumps({"sent": time.time(), "zen": "probe"}).encode()
            signature = "sha256=" + hmac.new(SECRET.encode(), body, hashlib.sha256).hexdigest()
            response = http.post(f"/hooks/github/probe-{i % 1000}", content=body, headers={
                "Content-Type": "application/json", "X-GitHub-Event": "ping",
                "X-GitHub-Delivery": str(uuid.uuid4()), "X-Hub-Signature-256": signature})
            if response.status_code >= 300:
                raise RuntimeError(f"the web edge answered {response.status_code}: {response.text[:200]}")
            got = r.blpop([LATENCY_KEY], timeout=10)
            if got is None:
                raise TimeoutError(f"web probe {i} never reached the agent")
            samples.append(float(got[1]) * 1000)
            time.sleep(0.002)
    return samples


def run(ctx: Context) -> None:
    from bench.latency import percentile, unloaded as celery_unloaded

    proc, base = start_edge(ctx)
    try:
        unloaded(ctx, base, 20)  # warm-up
        for rep in range(ctx.sizes.reps):
            web = unloaded(ctx, base, ctx.sizes.probes)
            peer = celery_unloaded(ctx, "peer", ctx.sizes.probes)
            for key, samples in (("web", web), ("celery_web_run", peer)):
                ctx.results.add(f"{key}_p50_ms", percentile(samples, 50))
                ctx.results.add(f"{key}_p99_ms", percentile(samples, 99))
            ctx.progress(f"web {rep + 1}/{ctx.sizes.reps}: POST -> agent p50 {percentile(web, 50):.2f} ms "
                         f"p99 {percentile(web, 99):.2f} ms; celery send -> start p50 {percentile(peer, 50):.2f} ms "
                         f"p99 {percentile(peer, 99):.2f} ms")
    finally:
        proc.terminate()
        proc.wait(10)
