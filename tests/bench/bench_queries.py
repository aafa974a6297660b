"""Benchmark: each named query through the views vs. the same query on the raw Parquet files.

    .venv/bin/python tests/bench/gen_log.py /tmp/hookaudit-bench        # 10M sealed + 100k active
    .venv/bin/python tests/bench/bench_queries.py /tmp/hookaudit-bench [--runs 7]

Prints JSON: for each named query the median (and minimum) wall time (ms, every row fetched)
of `--runs` runs through `queries.db.open_db`'s views, and of the same SQL with `outcomes` /
`hook_runs` replaced by `read_parquet` over the sealed segment files (and their runs side
files), plus the ratio of medians; also how long opening the views takes, cold (no dedup
cache) and warm, and the load average, since other processes skew the times. The two
variants alternate run by run, so both see the same cache state. Targets: views median
<= 300 ms and ratio <= 1.5 at 10M rows on a 2-core machine.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import duckdb  # noqa: E402

from ingest.log.layout import runs_path, segments  # noqa: E402
from queries.catalog import bind_params, load_catalog  # noqa: E402
from queries.db import open_db  # noqa: E402


def _paths(files: list[Path]) -> str:
    return "[" + ", ".join("'" + str(f).replace("'", "''") + "'" for f in files) + "]"


def _raw_sql(sql: str, sealed: list[Path], runs: list[Path]) -> str:
    """The named query with its views replaced by the raw sealed files, as one would hand-write it."""
    raw_outcomes = f"read_parquet({_paths(sealed)}, binary_as_string = true)"
    sql = re.sub(r"\bFROM outcomes\b", f"FROM {raw_outcomes}", sql)
    return re.sub(r"\bFROM hook_runs\b", f"FROM read_parquet({_paths(runs)})", sql)


def _time(con: Any, sql: str, params: dict[str, object]) -> tuple[float, int]:
    t0 = time.perf_counter()
    rows = con.sql(sql, params=params or None).fetchall()
    return (time.perf_counter() - t0) * 1000, len(rows)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("dir", type=Path)
    ap.add_argument("--runs", type=int, default=7)
    ap.add_argument("--only", default=None, help="comma-separated query names")
    args = ap.parse_args(argv)

    cache = args.dir / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    t0 = time.perf_counter()
    open_db(args.dir).close()
    cold = time.perf_counter() - t0
    t0 = time.perf_counter()
    con = open_db(args.dir)
    warm = time.perf_counter() - t0

    segs = segments(args.dir)
    sealed = [s.path for s in segs if s.kind == "sealed"]
    runs = [p for p in (runs_path(s) for s in segs if s.kind == "sealed") if p.exists()]
    n_sealed = con.sql(f"SELECT count(*) FROM read_parquet({_paths(sealed)})").fetchall()[0][0]
    n_views = con.sql("SELECT count(*) FROM outcomes").fetchall()[0][0]
    active_rows = con.sql("SELECT count(*) FROM _ha_active").fetchall()[0][0]
    hidden = con.sql("SELECT count(*) FROM _ha_hidden").fetchall()[0][0]
    # a session from the middle of the period, with a typical number of events
    sid = con.sql(
        "SELECT session_id FROM sessions WHERE started >= (SELECT min(ts) + (max(ts) - min(ts)) / 2 "
        "FROM outcomes) ORDER BY started, session_id LIMIT 1"
    ).fetchall()[0][0]
    given: dict[str, dict[str, str]] = {
        "commands": {"pattern": r"curl .*\|\s*(sudo\s+)?(ba|z)?sh"},
        "files": {"glob": "~/.ssh/**"},
        "session": {"session_id": sid},
    }
    catalog = load_catalog()
    names = args.only.split(",") if args.only else list(catalog)
    results: dict[str, dict[str, object]] = {}
    for name in names:
        q = catalog[name]
        values = bind_params(q, given.get(name, {}))
        used = set(re.findall(r"\$([a-z_][a-z0-9_]*)", q.sql))
        params = {k: v for k, v in values.items() if k in used}
        raw: str | None = _raw_sql(q.sql, sealed, runs)
        _time(con, q.sql, params)  # warm-up both
        try:
            _time(con, raw or "", params)
        except duckdb.Error:  # today's sealed layout: the raw files lack the flat columns
            raw = None
        v_ms: list[float] = []
        r_ms: list[float] = []
        n_rows = n_raw = 0
        for _ in range(args.runs):
            ms, n_rows = _time(con, q.sql, params)
            v_ms.append(ms)
            if raw is not None:
                ms, n_raw = _time(con, raw, params)
                r_ms.append(ms)
        v = statistics.median(v_ms)
        r = statistics.median(r_ms) if r_ms else None
        results[name] = {
            "views_ms": round(v, 1),
            "raw_ms": round(r, 1) if r is not None else None,
            "views_min_ms": round(min(v_ms), 1),
            "raw_min_ms": round(min(r_ms), 1) if r_ms else None,
            "ratio": round(v / r, 2) if r else None,
            "rows": n_rows,
            "raw_rows": n_raw,
            "ok": v <= 300 and (r is None or v / r <= 1.5),
        }
        ratio = f"x{v / r:4.2f}" if r else "  -  "
        print(
            f"{name:15s} views {v:7.1f} ms  raw {r or 0:7.1f} ms  {ratio}  rows {n_rows}",
            file=sys.stderr,
        )
    print(
        json.dumps(
            {
                "dir": str(args.dir),
                "sealed_rows": n_sealed,
                "active_rows": active_rows,
                "outcomes_visible": n_views,
                "duplicates_hidden": hidden,
                "sealed_files": len(sealed),
                "runs_files": len(runs),
                "open_cold_s": round(cold, 2),
                "open_warm_s": round(warm, 2),
                "runs": args.runs,
                "cpus": os.cpu_count(),
                "load_avg_1m": round(os.getloadavg()[0], 2),
                "python": platform.python_version(),
                "duckdb": duckdb.__version__,
                "queries": results,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
