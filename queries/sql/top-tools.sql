-- top-tools: the tools agents call most, with how often each was denied or asked.
--
-- Counts live PreToolUse outcomes per tool: calls, denials, asks, distinct users and the
-- time of the first and last call.
--
-- @param since timestamp optional only calls at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only calls before this time
-- @param user text optional only this user
-- @param limit integer default=50 at most this many rows
WITH g AS (
    -- small groups first (tool, decision, user): one hash aggregate, no per-row FILTERs
    SELECT tool_name, decision, "user", count(*) AS n, min(ts) AS first_seen, max(ts) AS last_seen
    FROM outcomes
    WHERE event = 'PreToolUse'
        AND tool_name IS NOT NULL
        AND ($since IS NULL OR ts >= $since)
        AND ($until IS NULL OR ts < $until)
        AND ($user IS NULL OR "user" = $user)
    GROUP BY ALL
)
SELECT
    tool_name AS tool,
    sum(n) AS calls,
    coalesce(sum(n) FILTER (WHERE decision = 'deny'), 0) AS denied,
    coalesce(sum(n) FILTER (WHERE decision = 'ask'), 0) AS asked,
    count(DISTINCT "user") AS users,
    min(first_seen) AS first_seen,
    max(last_seen) AS last_seen
FROM g
GROUP BY tool_name
ORDER BY calls DESC, tool
LIMIT $limit
