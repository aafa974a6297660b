-- denied: actions the policy denied or blocked, newest first.
--
-- Every live outcome whose decision is deny: a denied tool call, a blocked prompt, a
-- blocked stop, ... with what was attempted (command, file or URL) and why. `decided_by`
-- says whether the agent was stopped: policy or fallback (it waited for this answer), or
-- observed (observe mode, backfill: nobody waited, and the call went ahead).
--
-- @param since timestamp optional only outcomes at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only outcomes before this time
-- @param tool text optional only this tool (exact name, e.g. Bash)
-- @param user text optional only this user
-- @param limit integer default=1000 at most this many rows
SELECT
    ts,
    "user",
    host,
    session_id,
    event,
    tool_name AS tool,
    coalesce(command, file_path, url) AS target,
    reason,
    decided_by,
    settings_id,
    id
FROM outcomes
WHERE decision = 'deny'
    AND ($since IS NULL OR ts >= $since)
    AND ($until IS NULL OR ts < $until)
    AND ($tool IS NULL OR tool_name = $tool)
    AND ($user IS NULL OR "user" = $user)
ORDER BY ts DESC, id
LIMIT $limit
