"""Agents' hook dialects: each agent's hook input as a canonical event, and the engine's
decision back in exactly the form that agent obeys.

A dialect (`base.Dialect`) is pure functions at the edge: `normalise` (the agent's hook
input to a canonical, Claude Code shaped payload, the agent's own names kept), `express`
(a Decision to the stdout, stderr and exit code the agent obeys) and `block` (its blocking
answer when there is no decision). Nothing between them knows which agent spoke:
planning, aggregation, the log, queries, replay, SIEM and Sigma see canonical events.
`registry.get(name)` returns an agent's dialect; `registry.AGENTS` names them all.
"""
