"""Which changed events of a job still need a row: the rows a report may show.

Rules of this file:
- A report shows the first ``keep`` rows of a replay by (time, event id) and counts all
  of them. A job that has already made ``keep`` rows before a key knows a row with that
  key can never be shown, whatever the other jobs find.
- A changed event is surely counterfactual when this job saw an earlier behavioural
  change in its session: the earliest over all jobs can only be earlier still.
- An event that is both needs no row: `Tally.counterfactual_row` counts it as a settled
  counterfactual row would be counted. Every other changed event gets its row.

Example:
    >>> g = RowGate(keep=1, slack=0)
    >>> g.made("s", (1, "a"), behavioural=True)
    >>> g.made("s", (2, "b"), behavioural=False)
    >>> g.needless("s", (3, "c")), g.needless("t", (3, "d"))
    (True, False)
"""

from __future__ import annotations

__all__ = ["RowGate"]

Key = tuple[int, str]  # (µs since the epoch, event id)


class RowGate:
    """The rows a job has made so far, by key, trimmed to the ``keep`` smallest."""

    def __init__(self, keep: int | None, slack: int = 256) -> None:
        self.keep = keep  # None: every row may be shown
        self.slack = slack  # keys kept beyond twice `keep` before trimming
        self._keys: list[Key] = []
        self._bound: Key | None = None  # rows after it are never shown
        self._first: dict[str, Key] = {}  # session -> its first behavioural change here

    def needless(self, session: str, key: Key) -> bool:
        """Whether a changed event needs no row (surely counterfactual, never shown)."""
        if self.keep is None:
            return False
        first = self._first.get(session)
        if first is None or not first < key:
            return False
        return self.keep <= 0 or (self._bound is not None and key > self._bound)

    def made(self, session: str, key: Key, *, behavioural: bool) -> None:
        """Note a row made for a changed event."""
        if behavioural:
            first = self._first.get(session)
            if first is None or key < first:
                self._first[session] = key
        if self.keep is None:
            return
        keys = self._keys
        keys.append(key)
        if len(keys) >= 2 * self.keep + self.slack:
            keys.sort()
            del keys[self.keep :]
            self._bound = keys[-1] if keys else (-1, "")
