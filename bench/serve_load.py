"""Load test of ``sapiens2-ft serve`` on this machine: throughput and latency against ``--max_batch_size`` and the
number of concurrent clients, the server's peak memory, and the same with a share of bad requests mixed in.

A COCO-17 pose model of preset ``--size`` (random weights, no download; ``tiny`` by default: 4 blocks of width 128
at 256 x 192, so that a run on 2 shared cores gathers enough answers for its percentiles) is served on 127.0.0.1 only, once per ``--max_batch_size`` of ``--batch_sizes``, and asked by ``--clients``
concurrent clients (threads of plain ``requests``, each sending its next request when its answer comes): one
``--image_size`` photo with ``--people`` person boxes per request, multipart uploads. Each run is bounded: it stops
after ``--requests`` requests or ``--seconds`` seconds, whichever comes first. With ``--bad`` (default 0.1) a second
run of each setting mixes that share of bad requests in (a truncated PNG, a decompression bomb of 144 megapixels in a
17 kB PNG, a text file), each of which must be answered 4xx; every good request must be answered 200.

Reported per run: requests answered, good requests per second, p50 / p95 / p99 latency of the good ones (ms), good
requests not answered 200 (must be 0), bad requests not answered 4xx (must be 0), the peak resident memory of the
server's processes (MiB, sampled every 0.2 s) and its growth from the start of the run to its end (flat: the bad
requests leave nothing behind). The batching gain is the ratio of requests per second to ``--max_batch_size 1`` at
the same number of clients, measured here; first, the gain of the model path alone (``--paired_rounds``): the largest
batch's number of requests run one by one and as one batch in this process, alternated so that a shared machine's
load hits both (HTTP runs follow one another, and the load of others moves between them).

Run: ``nice -n 5 python bench/serve_load.py [--size tiny] [--batch_sizes 1 4 8] [--clients 1 4 16]
[--requests 120] [--seconds 45] [--json bench/out/serve_load.json]`` (at most 18 runs of 45 s and three starts: about
15 minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import cv2
import numpy as np
import psutil
import requests

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from bombs import png_bomb  # noqa: E402

HOST = "127.0.0.1"  # localhost only


def pose_model(out: Path, size: str, input_size: tuple[int, int]) -> Path:
    """A COCO-17 pose model of preset ``size``, random weights, saved as an export is."""
    import torch

    from datamodules.keypoints.metainfo import load_metainfo
    from sapiens2_ft.tasks.registry import build_task_model

    torch.manual_seed(0)
    names = list(load_metainfo("coco17").keypoint_names)
    model, _ = build_task_model("pose", names, input_size, size=size, flip_pairs=load_metainfo("coco17").flip_pairs)
    model.config.architectures = [type(model).__name__]
    model.save_pretrained(out)
    return out


def photo(size: tuple[int, int], seed: int) -> bytes:
    image = np.random.default_rng(seed).integers(0, 255, (*size, 3), dtype=np.uint8)
    image = cv2.GaussianBlur(image, (0, 0), 3)  # a photo compresses; noise would not
    return cv2.imencode(".jpg", image, [cv2.IMWRITE_JPEG_QUALITY, 90])[1].tobytes()


def bad_requests(good: bytes) -> list[tuple[str, bytes]]:
    png = cv2.imencode(".png", cv2.imdecode(np.frombuffer(good, np.uint8), cv2.IMREAD_COLOR))[1].tobytes()
    return [("truncated.png", png[: len(png) // 2]), ("bomb.png", png_bomb()), ("notes.txt", b"not an image " * 40)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind((HOST, 0))
        return s.getsockname()[1]


def start(model: Path, batch: int, args, log: Path) -> tuple[subprocess.Popen, str]:
    port = free_port()
    command = [sys.executable, "-m", "sapiens2_ft.serve", "--model", str(model), "--keypoints", "coco17",
               "--host", HOST, "--port", str(port), "--accelerator", "cpu", "--max_batch_size", str(batch),
               "--batch_timeout", str(args.batch_timeout if batch > 1 else 0.0), "--backend", args.backend,
               "--max_queue", "64", "--timeout", str(args.timeout)]
    process = subprocess.Popen(command, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://{HOST}:{port}"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        if process.poll() is not None:
            sys.exit(f"the server stopped:\n{log.read_text()[-3000:]}")
        try:
            if requests.get(f"{url}/health", timeout=2).status_code == 200:
                return process, url
        except requests.ConnectionError:
            pass
        time.sleep(0.5)
    stop(process)
    sys.exit(f"the server did not start in 300 s:\n{log.read_text()[-3000:]}")


def stop(process: subprocess.Popen) -> None:
    process.terminate()
    try:
        process.wait(60)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(process.pid, signal.SIGKILL)  # the server's own process group: what this script started
    except ProcessLookupError:
        pass


class Memory:
    """The resident memory of a process and its children, sampled every 0.2 s in a thread."""

    def __init__(self, pid: int):
        self.root, self.samples, self.running = psutil.Process(pid), [], True
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()

    def now(self) -> float:
        total = 0
        for process in [self.root, *self.root.children(recursive=True)]:
            try:
                total += process.memory_info().rss
            except psutil.Error:
                pass
        return total / 2**20

    def sample(self):
        while self.running:
            self.samples.append(self.now())
            time.sleep(0.2)

    def stop(self) -> list[float]:
        self.running = False
        self.thread.join()
        return self.samples


def run(url: str, clients: int, bad_share: float, args, good: list[bytes], bad: list[tuple[str, bytes]],
        pid: int) -> dict:
    """``clients`` closed-loop clients until ``args.requests`` requests or ``args.seconds`` seconds."""
    boxes = json.dumps([[20 + 60 * k, 20, 100, 280] for k in range(args.people)])
    lock, issued, results = threading.Lock(), [0], []
    bad_every = round(1 / bad_share) if bad_share else 0
    deadline = time.monotonic() + args.seconds

    def client(k: int):
        session = requests.Session()
        while True:
            with lock:
                n = issued[0]
                if n >= args.requests or time.monotonic() > deadline:
                    return
                issued[0] += 1
            is_bad = bad_every and n % bad_every == bad_every - 1
            name, raw = bad[n % len(bad)] if is_bad else (f"{n}.jpg", good[n % len(good)])
            started = time.perf_counter()
            try:
                answer = session.post(f"{url}/predict", files={"image": (name, raw)}, data={"boxes": boxes},
                                      timeout=120)
                status = answer.status_code
            except requests.RequestException:
                status = 0
            with lock:
                results.append((bool(is_bad), status, time.perf_counter() - started))

    memory = Memory(pid)
    start_rss = memory.now()
    started = time.perf_counter()
    with ThreadPoolExecutor(clients) as pool:
        list(pool.map(client, range(clients)))
    wall = time.perf_counter() - started
    end_rss = memory.now()
    samples = memory.stop()
    latencies = sorted(seconds for is_bad, status, seconds in results if not is_bad and status == 200)
    pct = lambda q: 1000 * latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else float("nan")  # noqa: E731
    return {"clients": clients, "bad_share": bad_share, "requests": len(results),
            "good_per_s": len(latencies) / wall, "p50_ms": pct(0.5), "p95_ms": pct(0.95), "p99_ms": pct(0.99),
            "good_not_200": sum(1 for is_bad, status, _ in results if not is_bad and status != 200),
            "bad": sum(1 for is_bad, _, _ in results if is_bad),
            "bad_not_4xx": sum(1 for is_bad, status, _ in results if is_bad and not 400 <= status < 500),
            "peak_mib": max(samples + [start_rss, end_rss]), "start_mib": start_rss, "end_mib": end_rss,
            "wall_s": wall}


def paired_gain(model: Path, args, good: list[bytes]) -> dict:
    """The batching gain of the server's model path alone, in this process: ``args.batch_sizes[-1]`` requests run
    one at a time against the same requests as one batch (``ServedModels.run``, what a worker's ``predict`` does),
    alternated over ``args.paired_rounds`` rounds so that the machine's load hits both (``bench.timing.paired``;
    the gain: the median of the rounds' ratios)."""
    import io

    from starlette.datastructures import FormData, UploadFile

    from bench.timing import paired
    from sapiens2_ft.serve.models import ModelOptions, ServedModels
    from sapiens2_ft.serve.requests import ServeLimits, parse_request

    served = ServedModels.load(ModelOptions([str(model)], ["coco17"], backend=args.backend,
                                            threads=os.cpu_count() or 1), "cpu")
    boxes = json.dumps([[20 + 60 * k, 20, 100, 280] for k in range(args.people)])
    n = args.batch_sizes[-1]
    requests_ = [parse_request(FormData([("image", UploadFile(io.BytesIO(good[k % len(good)]))), ("boxes", boxes)]),
                               served.served, ServeLimits()) for k in range(n)]
    alone, together, ratio = paired(lambda: [served.run([r]) for r in requests_], lambda: served.run(requests_),
                                    args.paired_rounds)
    return {"requests": n, "one_by_one_per_s": n / alone, "batched_per_s": n / together, "gain": 1 / ratio,
            "rounds": args.paired_rounds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="tiny", help="the pose model's preset (random weights)")
    parser.add_argument("--input", type=int, nargs=2, default=[256, 192], help="its crop size (H W)")
    parser.add_argument("--batch_sizes", type=int, nargs="+", default=[1, 4, 8], help="serve --max_batch_size")
    parser.add_argument("--batch_timeout", type=float, default=0.01, help="serve --batch_timeout (batches > 1)")
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 4, 16], help="concurrent clients")
    parser.add_argument("--bad", type=float, default=0.1, help="share of bad requests in the second run (0: none)")
    parser.add_argument("--requests", type=int, default=120, help="requests of one run at most")
    parser.add_argument("--seconds", type=float, default=45.0, help="seconds of one run at most")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="serve --timeout: above the queue's wait at the most clients (clients x a request's time), "
                             "so that a slow machine is measured, not refused")
    parser.add_argument("--people", type=int, default=2, help="person boxes per request")
    parser.add_argument("--image_size", type=int, nargs=2, default=[480, 640], help="the photos (H W)")
    parser.add_argument("--backend", default="torch", choices=["torch", "onnxruntime"])
    parser.add_argument("--paired_rounds", type=int, default=5,
                        help="rounds of the in-process paired measure of batching (0: none)")
    parser.add_argument("--no-http", dest="http", action="store_false", help="the paired measure only")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped (SIGTERM)"))  # the server is stopped on the way out

    work = Path(tempfile.mkdtemp(prefix="serve_load-"))
    model = pose_model(work / "model", args.size, tuple(args.input))
    if args.backend == "onnxruntime":
        from sapiens2_ft.training.onnx_export import write_onnx

        write_onnx(model)
    good = [photo(tuple(args.image_size), seed) for seed in range(8)]
    bad = bad_requests(good[0])
    load = os.getloadavg()
    print(f"serve load test: pose {args.size} at {args.input[0]}x{args.input[1]}, {args.backend}, "
          f"{os.cpu_count()} CPUs, load average at start {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}", flush=True)
    rows = []
    if args.paired_rounds:
        gain = paired_gain(model, args, good)
        print(f"model path alone, {gain['requests']} requests of {args.people} people: one by one "
              f"{gain['one_by_one_per_s']:.2f}/s, as one batch {gain['batched_per_s']:.2f}/s: x{gain['gain']:.2f} "
              f"(median of {gain['rounds']} alternated rounds; load {os.getloadavg()[0]:.2f})", flush=True)
        rows.append({"paired": gain})
    for batch in args.batch_sizes if args.http else []:
        process, url = start(model, batch, args, work / f"serve_{batch}.log")
        try:
            for url_clients in args.clients:
                for share in ([0.0, args.bad] if args.bad else [0.0]):
                    row = {"max_batch_size": batch, **run(url, url_clients, share, args, good, bad, process.pid),
                           "load_1min": os.getloadavg()[0]}
                    rows.append(row)
                    print(json.dumps({k: round(v, 2) if isinstance(v, float) else v for k, v in row.items()}),
                          flush=True)
        finally:
            stop(process)
    table = [r for r in rows if "paired" not in r]
    base = {(r["clients"], r["bad_share"]): r["good_per_s"] for r in table if r["max_batch_size"] == 1}
    print("\n| --max_batch_size | clients | bad | requests | good/s | x batch 1 | p50 ms | p95 ms | p99 ms | "
          "good not 200 | bad not 4xx | peak MiB | MiB start -> end |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        gain = r["good_per_s"] / base[(r["clients"], r["bad_share"])] if (r["clients"], r["bad_share"]) in base \
            else float("nan")
        print(f"| {r['max_batch_size']} | {r['clients']} | {r['bad_share']:.0%} | {r['requests']} | "
              f"{r['good_per_s']:.2f} | {gain:.2f} | {r['p50_ms']:.0f} | {r['p95_ms']:.0f} | {r['p99_ms']:.0f} | "
              f"{r['good_not_200']} | {r['bad_not_4xx']} of {r['bad']} | {r['peak_mib']:.0f} | "
              f"{r['start_mib']:.0f} -> {r['end_mib']:.0f} |")
    load = os.getloadavg()
    print(f"\nload average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(rows, indent=1))
    failed = [r for r in table if r["good_not_200"] or r["bad_not_4xx"]]
    if failed:
        sys.exit(f"{len(failed)} runs had good requests not answered 200 or bad ones not answered 4xx")


if __name__ == "__main__":
    main()
