"""Write a large, realistic hookaudit log for the query benchmarks (not a test).

    .venv/bin/python tests/bench/gen_log.py /tmp/hookaudit-bench [--rows 10000000] [--active 100000]

How it is realistic and still takes minutes, not hours:
- Template outcomes come from the real engine: `ingest.samples.sessions` events evaluated by
  `engine.run.Engine` against the example security policy plus hooks that fail the way real
  ones do (a formatter that is not installed, a python hook that raises for one session in
  five, an http hook nobody serves), so records carry real HookRuns, decisions and reasons.
- Each row is a template session replayed at another time with new ids: event id (UUIDv7 of
  its ts), session id, tool_use_id (Pre/Post pairs keep theirs), settings_id (the policy
  changes a few times over the period), worker, seq, appended, and real chain hashes. Record
  lines are assembled from byte pieces, so a row costs microseconds; the worker chains are
  written by parallel processes.
- Events of one session land on any worker (a work queue); each worker chain is in `appended`
  order, cut into sealed segments of `--segment-rows` rows. With `--schema proposed` (the
  default) they are what `ingest.log.seal.seal_segment` writes now: `ingest.log.schema.SCHEMA`
  (the flat columns `ingest.log.schema.SEALED_EXTRA_COLUMNS` after `hash`), a runs side file
  (`<seq>.runs.parquet`, `ingest.log.schema.RUN_COLUMNS`) and the encodings of
  `ingest.log.schema.sealed_write_options`; with `--schema current`, what it wrote before them
  (`ingest.log.schema.BASE_SCHEMA`, zstd, no runs file). The newest `--active` rows stay
  active JSONL.
- Duplicates come the way they do in production: `--crashes` times, a worker dies between
  append and ack and the batch it had in hand (`--batch` records) is appended again ~30 s
  later by another worker.

No manifests or keys indexes are written: `hookaudit verify` is not meant for this data.
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import hashlib
import json
import multiprocessing
import os
import random
import re
import sys
import tempfile
import time
import uuid
from array import array
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import msgspec
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.records import Outcome, encode_json, new_event  # noqa: E402
from ingest.log.schema import BASE_SCHEMA as SCHEMA  # noqa: E402
from ingest.log.schema import (  # noqa: E402
    RUN_COLUMNS,
    SEALED_EXTRA_COLUMNS,
    sealed_write_options,
)
from ingest.log.schema import SCHEMA as SEALED_SCHEMA  # noqa: E402
from ingest.samples import sessions  # noqa: E402

_TS = pa.timestamp("us", tz="UTC")
# run columns that come from the outcome row rather than from the run itself
_RUN_FROM_ROW = ("worker", "seq", "id", "ts", "session_id", "settings_id")


def sealed_schema(proposed: bool) -> pa.Schema:
    return SEALED_SCHEMA if proposed else SCHEMA


RUN_SCHEMA = pa.schema([pa.field(name, typ) for name, typ, _, _ in RUN_COLUMNS])

# ----------------------------------------------------------------------------- templates

_STOP_HOOK = """
import hashlib

def stop_summary(event):
    # Decided by the working directory, which a template's copies keep (their session
    # ids are new), so that replaying these settings over the log changes nothing.
    where = str(event.get("cwd")).encode()
    if int(hashlib.sha256(where).hexdigest(), 16) % 5 == 0:
        raise RuntimeError("summary service returned 503")
    return None
"""
_EXTRA_SETTINGS = {
    "hooks": {
        "SessionStart": [
            {"hooks": [{"type": "http", "url": "http://127.0.0.1:9/session-start", "timeout": 5}]}
        ],
        "PostToolUse": [
            {
                "matcher": "Write",
                "hooks": [
                    {
                        "type": "command",
                        "command": "echo 'prettier: command not found' >&2; exit 127",
                        "timeout": 30,
                    }
                ],
            }
        ],
        "Stop": [{"hooks": [{"type": "python", "callable": "@DIR@/stop_hook.py:stop_summary"}]}],
    },
    "allowedHttpHookUrls": ["http://127.0.0.1:*/*"],
}
_USERS = [
    f"{n}{i:02d}" for n in ("alice", "bob", "carol", "dave", "erin", "frank") for i in range(8)
]
_HOSTS = [f"{p}-{i:02d}" for p in ("dev-laptop", "build", "ws-berlin", "ws-nyc") for i in range(10)]
_MARK = re.compile(rb"@@(ID|TS|SID|TU\d+|SET)@@")


@dataclass
class Template:
    """One template session: its rows in the template table and their time offsets."""

    rows: list[int]
    offsets_ms: list[int]


def _templates(n_sessions: int, seed: int, proposed: bool) -> tuple[list[Template], dict[str, Any]]:
    from engine.run import Engine
    from engine.sources import load_sources

    tmp = Path(tempfile.mkdtemp(prefix="hookaudit-gen-"))
    (tmp / "stop_hook.py").write_text(_STOP_HOOK)
    extra = tmp / "extra.json"
    extra.write_text(json.dumps(_EXTRA_SETTINGS).replace("@DIR@", str(tmp)))
    eff = load_sources(
        [("project", str(ROOT / "infra" / "policies" / "security.json")), ("user", str(extra))]
    )
    rng = random.Random(seed)
    engine = Engine(home=str(tmp))
    pieces: list[list[bytes]] = []
    marks: list[list[bytes]] = []
    outs: list[Outcome] = []
    run_rows: list[list[int]] = []
    templates: list[Template] = []

    async def run() -> None:
        by_session: dict[str, list[dict[str, Any]]] = {}
        for raw in sessions(n_sessions, seed=seed):
            by_session.setdefault(raw["session_id"], []).append(dict(raw))
        n_runs = 0
        for sid, evs in by_session.items():
            orig_user = evs[0]["_user"]
            user, host = rng.choice(_USERS), rng.choice(_HOSTS)
            tuids: dict[str, int] = {}
            rows: list[int] = []
            offsets: list[int] = []
            t = 0
            denied: set[str] = set()
            for raw in evs:
                raw.pop("_user")
                raw.pop("_host")
                if raw.get("tool_use_id") in denied:
                    continue  # a denied tool never runs: no PostToolUse
                text = json.dumps(raw).replace(f"/home/{orig_user}", f"/home/{user}")
                event = new_event(json.loads(text), source="claude-code", host=host, user=user)
                o = await engine.evaluate(event, eff)
                if o.event.event == "PreToolUse" and o.decision == "deny":
                    denied.add(str(raw.get("tool_use_id")))
                line = encode_json(o)
                line = line.replace(o.event.id.encode(), b"@@ID@@")
                line = line.replace(msgspec.json.encode(o.event.ts), b'"@@TS@@"')
                line = line.replace(sid.encode(), b"@@SID@@")
                line = line.replace(
                    f'"settings_id":"{o.settings_id}"'.encode(), b'"settings_id":"@@SET@@"'
                )
                tuid = o.event.tool_use_id
                if tuid:
                    k = tuids.setdefault(tuid, len(tuids))
                    line = line.replace(tuid.encode(), f"@@TU{k}@@".encode())
                tail = b',"worker":"","seq":0,"appended":null,"prev_hash":"","hash":""}'
                assert line.endswith(tail), line[-120:]
                parts = _MARK.split(line[: -len(tail)])
                pieces.append(parts[0::2])
                marks.append(parts[1::2])
                rows.append(len(pieces) - 1)
                outs.append(o)
                run_rows.append(list(range(n_runs, n_runs + len(o.runs))))
                n_runs += len(o.runs)
                offsets.append(t)
                t += rng.randint(800, 45_000)
            templates.append(Template(rows, offsets))

    asyncio.run(run())
    flat = {
        f.name: pa.array([_flat_value(f.name, o) for o in outs], type=f.type)
        for f in SCHEMA
        if f.name != "record"
    }
    extras = (
        {
            name: pa.array([get(o) for o in outs], type=typ)
            for name, typ, get, _ in SEALED_EXTRA_COLUMNS
        }
        if proposed
        else {}
    )
    runs = {
        name: pa.array([get(o, i, r) for o in outs for i, r in enumerate(o.runs, 1)], type=typ)
        for name, typ, get, _ in RUN_COLUMNS
        if name not in _RUN_FROM_ROW
    }
    table = {"pieces": pieces, "marks": marks, "flat": flat, "extra": extras, "runs": runs}
    table["run_rows"] = run_rows
    return templates, table


def _flat_value(name: str, o: Outcome) -> object:
    ev = o.event
    if name in ("settings_id", "posture", "profile", "blocked", "decision", "reason", "replay_id"):
        return getattr(o, name)
    if name in ("worker", "seq", "appended", "prev_hash", "hash"):
        return getattr(o, name)
    return getattr(ev, name)


# ----------------------------------------------------------------------------- the stream


@dataclass
class Plan:
    """Every row of the generated log, as int64 Arrow arrays in global `appended` order."""

    tmpl_row: Any
    inst: Any  # session instance
    ts_us: Any
    appended_us: Any
    worker: Any
    settings: Any  # index into settings_ids
    rand: Any  # random bits of the event id (a re-delivered copy has the same)
    sids: list[str]
    settings_ids: list[str]
    tuid_base: list[int]  # per instance


def _plan(
    templates: list[Template],
    rows: int,
    workers: int,
    crashes: int,
    batch: int,
    days: float,
    seed: int,
) -> Plan:
    rng = random.Random(seed)
    mean = sum(len(t.rows) for t in templates) / len(templates)
    n_inst = int(rows / mean * 1.05) + 10
    span_us = int(days * 86400e6)
    start0 = int(datetime(2026, 3, 1, tzinfo=UTC).timestamp() * 1e6)
    starts = sorted(rng.randrange(span_us) + start0 for _ in range(n_inst))
    tmpl_row, inst, ts_us, appended = (array("q") for _ in range(4))
    for k, start in enumerate(starts):
        t = templates[rng.randrange(len(templates))]
        scale = rng.uniform(0.5, 2.0)
        for row, off in zip(t.rows, t.offsets_ms, strict=True):
            ts = start + int(off * scale * 1000) + rng.randrange(1, 999)  # never a whole ms
            tmpl_row.append(row)
            inst.append(k)
            ts_us.append(ts)
            appended.append(ts + rng.randrange(3_000, 80_000))
    order = pc.sort_indices(pa.array(appended))[:rows]
    cols = [
        pa.array(c, type=pa.int64()).take(order).to_pylist()
        for c in (tmpl_row, inst, ts_us, appended)
    ]
    tmpl_l, inst_l, ts_l, app_l = cols
    n = len(tmpl_l)
    worker_l = [rng.randrange(workers) for _ in range(n)]
    rand_l = [rng.getrandbits(62) for _ in range(n)]
    if crashes and workers > 1:
        # a worker dies between append and ack: its batch is appended again by another worker
        for _ in range(crashes):
            w = rng.randrange(workers)
            at = rng.randrange(n // 10, n - n // 10)
            held = [i for i in range(at, min(n, at + batch * workers * 2)) if worker_l[i] == w]
            other = (w + rng.randrange(1, workers)) % workers
            for i in held[:batch]:
                for col, value in (
                    (tmpl_l, tmpl_l[i]),
                    (inst_l, inst_l[i]),
                    (ts_l, ts_l[i]),
                    (app_l, app_l[i] + 30_000_000),
                    (worker_l, other),
                    (rand_l, rand_l[i]),
                ):
                    col.append(value)
        order = pc.sort_indices(pa.array(app_l)).to_pylist()
        tmpl_l, inst_l, ts_l, app_l, worker_l, rand_l = (
            [c[i] for i in order] for c in (tmpl_l, inst_l, ts_l, app_l, worker_l, rand_l)
        )
    changes = sorted(rng.randrange(span_us) + start0 for _ in range(4))
    settings = [bisect.bisect_left(changes, ts) for ts in ts_l]
    settings_ids = [hashlib.sha256(f"policy-v{i}".encode()).hexdigest()[:16] for i in range(5)]
    sids = [str(uuid.UUID(int=rng.getrandbits(128), version=4)) for _ in range(n_inst)]
    tuid_base = [rng.getrandbits(40) for _ in range(n_inst)]
    arr = [pa.array(c, type=pa.int64()) for c in (tmpl_l, inst_l, ts_l, app_l, worker_l)]
    return Plan(
        *arr,
        pa.array(settings, type=pa.int64()),
        pa.array(rand_l, type=pa.int64()),
        sids,
        settings_ids,
        tuid_base,
    )


# ----------------------------------------------------------------------------- writing

_G: dict[str, Any] = {}


def _iso(us: int) -> str:
    s, frac = divmod(us, 1_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + f".{frac:06d}Z"


def _uuid7(ts_us: int, r: int) -> str:
    ms = ts_us // 1000
    h = f"{ms:012x}7{r & 0xFFF:03x}{0x8000 | ((r >> 12) & 0x3FFF):04x}{(r >> 26) & 0xFFFFFFFFFFFF:012x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


def _write_worker(w: int) -> tuple[int, int]:
    plan: Plan = _G["plan"]
    table: dict[str, Any] = _G["table"]
    out: Path = _G["out"]
    seg_rows: int = _G["segment_rows"]
    active_from: int = _G["active_from"]
    schema: pa.Schema = _G["schema"]
    proposed: bool = _G["proposed"]
    name = f"w{w}"
    idx = pc.indices_nonzero(pc.equal(plan.worker, w)).to_pylist()
    tmpl_row, inst_col = plan.tmpl_row.to_pylist(), plan.inst.to_pylist()
    ts_col, app_col = plan.ts_us.to_pylist(), plan.appended_us.to_pylist()
    rand_col, set_col = plan.rand.to_pylist(), plan.settings.to_pylist()
    pieces, marks, run_rows = table["pieces"], table["marks"], table["run_rows"]
    has_tu = table["flat"]["tool_use_id"].is_valid().to_pylist()
    set_b = [s.encode() for s in plan.settings_ids]
    prev, seq, segment, sealed_rows, pos = "", 0, 0, 0, 0
    while pos < len(idx):
        rows = idx[pos : pos + seg_rows]
        active = rows[0] >= active_from
        rows = idx[pos:] if active else [i for i in rows if i < active_from]
        pos += len(rows)
        segment += 1
        lines: list[bytes] = []
        ids: list[str] = []
        tus: list[str | None] = []
        hashes: list[str] = []
        prevs: list[str] = []
        for i in rows:
            t, k, ts = tmpl_row[i], inst_col[i], ts_col[i]
            eid = _uuid7(ts, rand_col[i])
            vals = {
                b"ID": eid.encode(),
                b"TS": _iso(ts).encode(),
                b"SID": plan.sids[k].encode(),
                b"SET": set_b[set_col[i]],
            }
            parts = pieces[t]
            buf = [parts[0]]
            tu = None
            for j, m in enumerate(marks[t]):
                if m[:2] == b"TU":
                    tu = f"toolu_{(plan.tuid_base[k] * 131 + int(m[2:])) & (2**80 - 1):020x}"
                    buf.append(tu.encode())
                else:
                    buf.append(vals[m])
                buf.append(parts[j + 1])
            seq += 1
            head = (
                b"".join(buf)
                + (
                    f',"worker":"{name}","seq":{seq},"appended":"{_iso(app_col[i])}",'
                    f'"prev_hash":"{prev}","hash":"'
                ).encode()
            )
            digest = hashlib.sha256(head + b'"}').hexdigest()
            lines.append(head + digest.encode() + b'"}')
            ids.append(eid)
            tus.append(tu if has_tu[t] else None)
            prevs.append(prev)
            hashes.append(digest)
            prev = digest
        folder = out / "log" / ("active" if active else "sealed") / name
        folder.mkdir(parents=True, exist_ok=True)
        if active:
            (folder / f"{segment:08d}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
            break
        take = pa.array([tmpl_row[i] for i in rows], type=pa.int64())
        cols: dict[str, Any] = {}
        for f in schema:
            if f.name in table["flat"]:
                cols[f.name] = table["flat"][f.name].take(take)
            elif f.name in table["extra"]:
                cols[f.name] = table["extra"][f.name].take(take)
        first = seq - len(rows) + 1
        row_cols: dict[str, Any] = {
            "id": pa.array(ids),
            "ts": pa.array([ts_col[i] for i in rows], type=pa.int64()).cast(_TS),
            "session_id": pa.array([plan.sids[inst_col[i]] for i in rows]),
            "settings_id": pa.array([plan.settings_ids[set_col[i]] for i in rows]),
            "worker": pa.array([name] * len(rows)),
            "seq": pa.array(range(first, seq + 1), type=pa.int64()),
        }
        cols.update(row_cols)
        cols["tool_use_id"] = pa.array(tus, type=pa.string())
        cols["appended"] = pa.array([app_col[i] for i in rows], type=pa.int64()).cast(_TS)
        cols["prev_hash"] = pa.array(prevs)
        cols["hash"] = pa.array(hashes)
        cols["record"] = pa.array(lines, type=pa.binary())
        tbl = pa.Table.from_arrays([cols[f.name] for f in schema], schema=schema)
        pq.write_table(tbl, folder / f"{segment:08d}.parquet", **_G["write"](schema.names))
        if proposed:
            owner: list[int] = []
            which: list[int] = []
            for r, i in enumerate(rows):
                for x in run_rows[tmpl_row[i]]:
                    owner.append(r)
                    which.append(x)
            own = pa.array(owner, type=pa.int64())
            rcols = {n: a.take(own) for n, a in row_cols.items()}
            rcols["event"] = cols["event"].take(own)
            rcols["tool_name"] = cols["tool_name"].take(own)
            rcols["replay_id"] = cols["replay_id"].take(own)
            for n, a in table["runs"].items():
                rcols[n] = a.take(pa.array(which, type=pa.int64()))
            rtbl = pa.Table.from_arrays([rcols[f.name] for f in RUN_SCHEMA], schema=RUN_SCHEMA)
            pq.write_table(
                rtbl,
                folder / f"{segment:08d}.runs.parquet",
                **sealed_write_options(RUN_SCHEMA.names),
            )
        sealed_rows += len(rows)
    return sealed_rows, seq - sealed_rows


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    ap.add_argument("dir", type=Path)
    ap.add_argument("--rows", type=int, default=10_000_000, help="rows before duplicates")
    ap.add_argument("--active", type=int, default=100_000, help="rows left in active JSONL")
    ap.add_argument("--workers", type=int, default=4)
    ap.add_argument("--segment-rows", type=int, default=50_000)
    ap.add_argument("--crashes", type=int, default=2, help="worker crashes between append and ack")
    ap.add_argument("--batch", type=int, default=256, help="records a crashed worker held")
    ap.add_argument("--days", type=float, default=30.0)
    ap.add_argument("--template-sessions", type=int, default=600)
    ap.add_argument("--schema", choices=["proposed", "current"], default="proposed")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--procs", type=int, default=os.cpu_count() or 1)
    args = ap.parse_args(argv)
    if (args.dir / "log").exists():
        ap.error(f"{args.dir}/log exists: give an empty directory")
    t0 = time.perf_counter()
    proposed = args.schema == "proposed"
    templates, table = _templates(args.template_sessions, args.seed, proposed)
    n_tmpl = sum(len(t.rows) for t in templates)
    print(
        f"templates: {len(templates)} sessions, {n_tmpl} outcomes ({time.perf_counter() - t0:.0f}s)",
        file=sys.stderr,
    )
    total = args.rows + args.active
    plan = _plan(templates, total, args.workers, args.crashes, args.batch, args.days, args.seed)
    n = len(plan.worker)
    _G.update(
        plan=plan,
        table=table,
        out=args.dir,
        segment_rows=args.segment_rows,
        active_from=n - args.active,
        schema=sealed_schema(proposed),
        proposed=proposed,
        write=sealed_write_options if proposed else (lambda names: {"compression": "zstd"}),
    )
    print(f"plan: {n} rows ({time.perf_counter() - t0:.0f}s)", file=sys.stderr)
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(min(args.procs, args.workers)) as pool:
        done = pool.map(_write_worker, range(args.workers), chunksize=1)
    print(
        json.dumps(
            {
                "dir": str(args.dir),
                "sealed_rows": sum(s for s, _ in done),
                "active_rows": sum(a for _, a in done),
                "duplicates": n - total,
                "workers": args.workers,
                "schema": args.schema,
                "seconds": round(time.perf_counter() - t0, 1),
            }
        )
    )


if __name__ == "__main__":
    main()
