"""A worker's resident memory while it delivers a callback to a receiver that answers 200 and then streams without end.

On a private stack (tests.support.evaluation.Stack: the API and one worker as subprocesses, a private redis-server, a
small index built from SN 12, loopback only): a receiver in its own process answers the callback POST with a 200 whose
body is ``--stream-mib`` MiB (the issue's receiver sent 1.5 GB); one assessment is posted with that callback URL and
the worker's VmRSS is sampled every 20 ms until the callback reads delivered or failed. Printed: the worker's VmRSS
idle, its highest sample and VmHWM during the delivery, the bytes the receiver got out before the worker stopped
reading, and the callback's outcome and time.

    .venv/bin/python bench/bench_callback_memory.py [--stream-mib 1536] [--tries 2]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from service.platform.settings import SHARED_DIR  # noqa: E402
from tests.support.evaluation import Stack, wait_ready  # noqa: E402

# the receiver: reads one request, answers 200 with a huge content-length and streams until told size or a closed
# socket; prints how many body bytes it got out
RECEIVER = textwrap.dedent(
    """
    import socket, sys, threading
    limit = int(sys.argv[1])
    sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(8)
    print(sock.getsockname()[1], flush=True)
    total = [0]
    def answer(conn):
        with conn:
            data = b""
            while b"\\r\\n\\r\\n" not in data:
                data += conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\\r\\ncontent-length: %d\\r\\n\\r\\n" % limit)
            chunk, sent = b"x" * (1 << 20), 0
            try:
                while sent < limit:
                    conn.sendall(chunk); sent += len(chunk)
            except OSError:
                pass
            total[0] += sent
            print("sent", sent, flush=True)
    while True:
        conn, _ = sock.accept()
        threading.Thread(target=answer, args=(conn,), daemon=True).start()
    """
)


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def build_index(folder: Path) -> Path:
    from service.core.corpus import FilterRules, load_bilara
    from service.core.novelty import IndexParams, build_index

    bilara = SHARED_DIR / "corpus" / "bilara"
    passages = load_bilara(bilara, subdir="sutta/sn/sn12", translation_dir=bilara / "translation" / "en" / "sujato")
    index = build_index(passages, params=IndexParams(filters=FilterRules()), name="bench-sn12")
    return Path(index.save(folder / "sn12.trisk"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stream-mib", type=int, default=1536)
    parser.add_argument("--tries", type=int, default=2)
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="trisk-bench-cb-"))
    index = build_index(work)
    receiver = subprocess.Popen(
        [sys.executable, "-c", RECEIVER, str(args.stream_mib << 20)], stdout=subprocess.PIPE, text=True
    )
    assert receiver.stdout is not None
    port = int(receiver.stdout.readline())
    env = {
        "TRISK_INDEX_PATH": str(index),
        "TRISK_DB_PATH": str(work / "trisk.db"),
        "TRISK_CALLBACK_ALLOW_HTTP": "1",
        "TRISK_CALLBACK_ALLOW_NETWORKS": "127.0.0.0/8",
        "TRISK_CALLBACK_MAX_TRIES": str(args.tries),
        "TRISK_CALLBACK_BACKOFF_SECONDS": "0.2",
        "TRISK_WORKER_NICE": "0",
    }
    stack = Stack(None, 1, env, log_dir=work)
    try:
        client = httpx.Client(base_url=stack.url, headers={"Authorization": f"Bearer {stack.key}"}, timeout=60)
        wait_ready(client)
        stack.wait_workers()
        worker = stack.workers[0].pid
        time.sleep(2.0)
        idle = status_kib(worker, "VmRSS")
        body = {
            "source": {"text": "Evaṃ me sutaṃ. Ekaṃ samayaṃ bhagavā sāvatthiyaṃ viharati.", "lang": "pli"},
            "candidates": [{"id": "a", "text": "Thus have I heard."}, {"id": "b", "text": "So I heard."}],
            "checks": ["hard_flags"],
            "callback_url": f"http://127.0.0.1:{port}/hook",
        }
        aid = client.post("/v1/assessments", json=body).json()["id"]
        started, peak, callback = time.monotonic(), idle, None
        while time.monotonic() - started < 600:
            peak = max(peak, status_kib(worker, "VmRSS"))
            cb = client.get(f"/v1/assessments/{aid}").json().get("callback") or {}
            if cb.get("status") in ("delivered", "failed"):
                callback = cb
                break
            time.sleep(0.02)
        seconds = time.monotonic() - started
        after = status_kib(worker, "VmRSS")
        hwm = status_kib(worker, "VmHWM")
    finally:
        stack.close()
        receiver.terminate()
    sent = [int(line.split()[1]) for line in receiver.stdout.read().splitlines() if line.startswith("sent")]
    print(f"receiver: {args.stream_mib} MiB offered per POST, {len(sent)} POSTs, body bytes got out: {sent}")
    print(f"worker VmRSS idle {idle / 1024:.0f} MiB; highest sample {peak / 1024:.0f} MiB; VmHWM {hwm / 1024:.0f} MiB;")
    print(f"after {after / 1024:.0f} MiB")
    outcome = {k: callback.get(k) for k in ("status", "attempts", "last_error")} if callback else "no final state"
    print(f"callback: {outcome} after {seconds:.1f} s")


if __name__ == "__main__":
    main()
