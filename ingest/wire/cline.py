"""`hookaudit wire cline`: Cline's hook files, one executable file per event.

Cline runs every executable file named after an event in its hooks folder and reads no exit
code: the files written here run `hookaudit emit --agent cline`, and print a cancel of their
own when hookaudit cannot start, so an enforced event is blocked then too.

Example:
    >>> sorted(cline_files(Path("/h/.cline/hooks"), data_dir=Path("/d"), hookaudit="ha"))[0].name
    'PostToolUse'
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path

from ingest.wire.agents import Layout, WireError, command_for

__all__ = ["CLINE_MARK", "CLINE_NOTES", "cline_dir", "cline_files", "write_files"]


#: Cline's hook files: the events whose decision it waits for, and those recorded.
CLINE_ENFORCE = ("PreToolUse", "UserPromptSubmit")
CLINE_RECORD = (
    "PostToolUse",
    "TaskStart",
    "TaskResume",
    "TaskComplete",
    "TaskCancel",
    "TaskError",
    "SessionShutdown",
    "PreCompact",
)
CLINE_MARK = "# written by `hookaudit wire cline`"
CLINE_NOTES = (
    "Cline runs every executable file in ~/.cline/hooks/ (or the project's "
    ".clinerules/hooks/) named after an event. Its only block ends the whole task: a call "
    "the policy denies does not run, and the task stops with the reason shown."
)


def cline_dir(*, home: Path | None, project: Path | None) -> Path:
    if project is not None:
        return project / ".clinerules" / "hooks"
    return (home if home is not None else Path.home()) / ".cline" / "hooks"


def cline_files(folder: Path, *, data_dir: Path, hookaudit: str) -> dict[Path, str]:
    """Each hook file `wire cline` writes, with its text. A file already there that is not
    hookaudit's is refused (WireError naming it): Cline runs one file an event, and wiring
    never drops a hook of yours.
    """
    layout = Layout(
        agent="cline", home_file="", project_file="", enforce=CLINE_ENFORCE, record=CLINE_RECORD,
        tool_events=frozenset(), any_tool="", timeout_scale=1, capped={}, named=False, notes="",
    )  # fmt: skip
    # Cline reads no exit code: when hookaudit cannot even start (exit non-zero with nothing
    # said), the file's own cancel blocks an enforced event.
    fallback = '{"cancel":true,"errorMessage":"hookaudit could not run; blocked because the hook fails closed"}'
    out: dict[Path, str] = {}
    for event in (*CLINE_ENFORCE, *CLINE_RECORD):
        path = folder / event
        if path.exists() or path.is_symlink():
            try:
                from engine.userfiles import read_regular

                text = read_regular(path, 1 << 20).decode("utf-8", "replace")
            except OSError as e:
                raise WireError(f"{path}: {e}") from e
            if CLINE_MARK not in text:
                raise WireError(
                    f"{path}: a hook that is not hookaudit's is there; merge it by hand"
                )
        command = command_for(layout, event, data_dir, hookaudit)
        if event in CLINE_ENFORCE:
            body = f"{command} || printf '%s\\n' {shlex.quote(fallback)}\n"
        else:
            body = f"exec {command}\n"
        out[path] = f"#!/bin/sh\n{CLINE_MARK}\n{body}"
    return out


def write_files(files: dict[Path, str]) -> None:
    """Write each executable hook file (aside, then renamed)."""
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.hookaudit-{os.getpid()}")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                f.write(text)
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o755)
            os.replace(tmp, path)
        except OSError as e:
            tmp.unlink(missing_ok=True)
            raise WireError(f"{path}: {e.strerror or e}") from e
