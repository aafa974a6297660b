"""Partial copies of the records (decoders that read only what they need) stay the records'.

`replay.select.BaseRecord` reads an Outcome without decoding its runs; `ingest.siem.view`'s
`_Event`, `_Outcome`, `_Run` and `_Hook` read what the SIEM formats use. Each field of a copy
must be a field of the original with the same name on the wire, the same type and the same
default, so a record written by the engine decodes the same way through the copy; the only
differences allowed are listed here, each with its reason.
"""

from __future__ import annotations

import typing
from typing import Any

import msgspec
import pytest

from engine.records import HookEvent, HookIdentity, HookRun, Outcome
from ingest.siem import view
from replay.select import BaseRecord

# (copy, field) -> why its type differs from the original's
DIFFERENT_TYPES = {
    (BaseRecord, "runs"): "kept as raw JSON (msgspec.Raw), decoded only for shown rows",
    (BaseRecord, "event"): None,  # the same HookEvent
    (view._Outcome, "event"): "the partial _Event",
    (view._Outcome, "runs"): "a list of the partial _Run",
    (view._Run, "hook"): "the partial _Hook",
}


def _reads(copy_t: Any, orig_t: Any) -> bool:
    """Whether the copy's type reads every value of the original's: the same type, or `str`
    for a Literal of strings (a copy reads a value a later version adds, too)."""
    if copy_t == orig_t:
        return True
    return (
        copy_t is str
        and typing.get_origin(orig_t) is typing.Literal
        and all(isinstance(a, str) for a in typing.get_args(orig_t))
    )


def _fields(cls: Any) -> dict[str, msgspec.structs.FieldInfo]:
    return {f.encode_name: f for f in msgspec.structs.fields(cls)}


@pytest.mark.parametrize(
    ("copy", "original"),
    [
        (BaseRecord, Outcome),
        (view._Outcome, Outcome),
        (view._Event, HookEvent),
        (view._Run, HookRun),
        (view._Hook, HookIdentity),
    ],
    ids=lambda c: c.__qualname__,
)
def test_a_copy_s_fields_are_the_original_s(copy: Any, original: Any) -> None:
    mine, theirs = _fields(copy), _fields(original)
    for name, f in mine.items():
        assert name in theirs, f"{copy.__qualname__}.{name}: not a field of {original.__name__}"
        o = theirs[name]
        if (copy, f.name) not in DIFFERENT_TYPES:
            assert _reads(f.type, o.type), (copy.__qualname__, name, f.type, o.type)
        # a field the original always writes may have a default in the copy (it reads the
        # records of any version); one the original may leave out must default alike
        assert not f.required or o.required, (copy.__qualname__, name)
        if not o.required and (copy, f.name) not in DIFFERENT_TYPES:
            mine_default = f.default if f.default is not msgspec.NODEFAULT else f.default_factory()
            theirs_default = (
                o.default if o.default is not msgspec.NODEFAULT else o.default_factory()
            )
            assert mine_default == theirs_default, (copy.__qualname__, name)
