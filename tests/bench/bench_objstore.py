"""Benchmark: queries over shipped segments (S3, moto's server on loopback) vs the same
segments on local disk, in the same run; shipping rate. Prints JSON.

    .venv/bin/python tests/bench/bench_objstore.py [--records 200000] [--segments 20] [--runs 3]

moto keeps objects in memory and answers over loopback, so the S3 figures here are the
client's per-request and per-byte cost without network latency: a real bucket adds its
round trips (tens of ms each) to every footer and column chunk read.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_log import outcome

from ingest.log.objstore import open_store
from ingest.log.ship import prune, ship
from ingest.log.writer import LogWriter
from queries.db import open_db

QUERIES = {
    "count": "SELECT count(*) FROM outcomes",
    "denied": "SELECT tool_name, count(*) FROM outcomes WHERE blocked GROUP BY 1 ORDER BY 2 DESC",
    "newest": "SELECT id, ts FROM outcomes ORDER BY ts DESC LIMIT 20",
}


def timed(data: Path, runs: int) -> dict[str, float]:
    out: dict[str, list[float]] = {"open": [], **{k: [] for k in QUERIES}}
    for _ in range(runs):
        t0 = time.perf_counter()
        con = open_db(data, cache=False)
        out["open"].append(time.perf_counter() - t0)
        for name, sql in QUERIES.items():
            t0 = time.perf_counter()
            con.sql(sql).fetchall()
            out[name].append(time.perf_counter() - t0)
        con.close()
    return {k: round(statistics.median(v) * 1000, 1) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--segments", type=int, default=20)
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    for k, v in {"AWS_ACCESS_KEY_ID": "b", "AWS_SECRET_ACCESS_KEY": "b", "AWS_REGION": "us-east-1"}.items():  # fmt: skip
        os.environ[k] = v
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    moto = subprocess.Popen([str(Path(sys.executable).parent / "moto_server"), "-H", "127.0.0.1",
                             "-p", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    root = Path(tempfile.mkdtemp())
    try:
        endpoint = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        import pyarrow.fs as pafs

        pafs.S3FileSystem(region="us-east-1", endpoint_override=f"127.0.0.1:{port}",
                          scheme="http", allow_bucket_creation=True).create_dir("bench")  # fmt: skip
        data = root / "data"
        per = args.records // args.segments
        with LogWriter.open(data, "w1", max_bytes=1 << 40) as w:
            for _ in range(args.segments):
                batch = [outcome(i) for i in range(per)]
                for i in range(0, per, 1000):
                    w.append_batch(batch[i : i + 1000])
                w.seal()
        local = timed(data, args.runs)
        sealed = sum(p.stat().st_size for p in (data / "log" / "sealed" / "w1").iterdir())
        t0 = time.perf_counter()
        shipped = ship(data, open_store("s3://bench/h", endpoint=endpoint))
        ship_s = time.perf_counter() - t0
        pruned, _freed = prune(data)
        remote = timed(data, args.runs)
        print(json.dumps({
            "bench": "objstore", "records": per * args.segments, "segments": len(shipped),
            "sealed_bytes": sealed, "ship_mb_per_s": round(sealed / ship_s / 1e6, 1),
            "ship_segments_per_s": round(len(shipped) / ship_s, 1), "pruned": pruned,
            "local_ms": local, "s3_ms": remote,
            "ratio_s3_vs_local": {k: round(remote[k] / max(local[k], 0.1), 2) for k in local},
        }, indent=2))  # fmt: skip
    finally:
        moto.terminate()
        moto.wait(10)
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
