"""Admission's column check agrees with `new_event`'s reading of a payload."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.records import HookEvent, new_event
from ingest.worker.admit import FROM_PAYLOAD, columns_agree

_GIVEN = {"id", "ts", "payload", "source", "host", "user", "fallback", "rejected", "agent",
          "agent_event", "agent_tool", "agent_payload", "project_dir"}  # fmt: skip


def test_every_event_field_is_either_given_or_read_from_the_payload() -> None:
    """A new HookEvent field must be placed here (and checked by `columns_agree`)."""
    assert set(HookEvent.__struct_fields__) == _GIVEN | set(FROM_PAYLOAD)


def _old_check(ev: HookEvent, payload: dict[str, Any]) -> bool:
    """The check as it was: build the expected event and compare."""
    expected = new_event(
        payload, raw=ev.payload, source=ev.source, host=ev.host, user=ev.user,
        event_id=ev.id, ts=ev.ts,
    )  # fmt: skip
    return msgspec.structs.replace(expected, fallback=ev.fallback) == ev


_value = st.one_of(st.none(), st.text(max_size=3), st.integers(), st.booleans(), st.just(""))
_payload = st.dictionaries(
    st.sampled_from(["hook_event_name", "session_id", *FROM_PAYLOAD[2:], "other"]), _value
)
_column = st.one_of(st.none(), st.text(max_size=3), st.just(""))


@settings(max_examples=400, deadline=None)
@given(
    payload=_payload,
    cols=st.fixed_dictionaries({f: _column for f in FROM_PAYLOAD}),
    from_payload=st.booleans(),
    ev_id=st.sampled_from(["", "e1"]),
)
def test_the_column_check_is_the_new_event_comparison(
    payload: dict[str, Any], cols: dict[str, str | None], from_payload: bool, ev_id: str
) -> None:
    ts = datetime(2026, 1, 1, tzinfo=UTC)
    if from_payload:  # the honest event; otherwise columns drawn apart from the payload
        ev = new_event(payload, raw="{}", source="s", host="h", user="u", event_id=ev_id, ts=ts)
        ev = msgspec.structs.replace(ev, id=ev_id)
    else:
        base = HookEvent(id=ev_id, ts=ts, event="", payload="{}", source="s", host="h", user="u")
        values = {k: (v or "") if k in ("event", "session_id") else v for k, v in cols.items()}
        ev = msgspec.structs.replace(base, **values)
    assert columns_agree(ev, payload) == _old_check(ev, payload)
