#!/usr/bin/env python3
"""A scripted command hook: log stdin, then answer as its behaviour file says.

`hook.py DIR LABEL`: reads DIR/behaviours/LABEL.json (`{"stdout": str, "stderr": str,
"exit": int, "sleep": float, "when": {field: value}}`, all optional; with `when`, inputs
lacking those values get exit 0 and no output), appends `{"label", "input"}` to the file named
by $CONFORM_LOG (when set), then prints, sleeps and exits as told. Both Claude Code and
`hookaudit eval` run the same command, so the same behaviour answers both.
"""

from __future__ import annotations

import json
import os
import sys
import time

d, label = sys.argv[1], sys.argv[2]
raw = sys.stdin.read()
try:
    data = json.loads(raw)
except ValueError:
    data = raw
log = os.environ.get("CONFORM_LOG")
if log:
    with open(log, "a", encoding="utf-8") as f:
        f.write(json.dumps({"label": label, "input": data}) + "\n")
try:
    with open(os.path.join(d, "behaviours", label + ".json"), encoding="utf-8") as f:
        b = json.load(f)
except OSError:
    b = {}
when = b.get("when")
if isinstance(when, dict) and not (
    isinstance(data, dict) and all(data.get(k) == v for k, v in when.items())
):
    b = {}  # the behaviour applies only to inputs that carry these field values
if b.get("sleep"):
    time.sleep(float(b["sleep"]))
if b.get("stdout"):
    sys.stdout.write(b["stdout"])
if b.get("stderr"):
    sys.stderr.write(b["stderr"])
sys.exit(int(b.get("exit", 0)))
