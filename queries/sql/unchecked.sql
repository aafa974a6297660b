-- unchecked: tool calls a transcript shows that no live hook decided (hookaudit backfill).
--
-- Every PreToolUse that `hookaudit backfill` took from an agent's transcript and that
-- has no live PreToolUse of the same tool_use id (unique per call; a resumed session that
-- copies its history into another transcript repeats the id, and is listed once; an id
-- derived for an agent that gives none is shared by identical calls of a session, and the
-- nth such call is unchecked when fewer than n of them were decided live): a call
-- Claude Code made while
-- no decision reached the log (serve unreachable, a hook that could not start or timed out:
-- Claude Code lets the call run). `ran` is what the transcript shows (true: it ran; false:
-- refused; null: no result); `policy` and `reason` are what the policy says of it now.
--
-- @param since timestamp optional only calls at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only calls before this time
-- @param ran boolean optional only calls that ran (true) or were refused (false)
-- @param limit integer default=1000 at most this many rows
WITH live AS (
    -- an id hookaudit derived (`ha-`: an agent that gives none) is shared by identical calls
    -- of a session: those count per session, the nth backfilled call checked by the nth
    -- live decision; any other id is one call wherever it is copied
    -- (a call that ran rewritten counts under the id of its rewritten input, which its
    -- transcript shows: `ha_ran_as_id`)
    SELECT
        ha_ran_as_id(tool_use_id, blocked, record, session_id, tool_name) AS tool_use_id,
        CASE WHEN starts_with(tool_use_id, 'ha-') THEN session_id END AS sess,
        count(DISTINCT id) AS n
    FROM outcomes
    WHERE event = 'PreToolUse' AND source <> 'backfill' AND tool_use_id IS NOT NULL
    GROUP BY ALL
),
backfilled AS (
    SELECT
        o.*,
        TRY_CAST(json_extract_string(
            json_extract_string(o.record, '$.event.payload'), '$.hookaudit_backfill.ran'
        ) AS BOOLEAN) AS ran,
        CASE WHEN starts_with(o.tool_use_id, 'ha-') THEN o.session_id END AS sess,
        row_number() OVER (
            PARTITION BY o.tool_use_id,
                CASE WHEN starts_with(o.tool_use_id, 'ha-') THEN o.session_id END
            ORDER BY o.ts, o.id
        ) AS nth
    FROM outcomes o
    WHERE o.event = 'PreToolUse' AND o.source = 'backfill' AND o.tool_use_id IS NOT NULL
    QUALIFY starts_with(o.tool_use_id, 'ha-') OR nth = 1
)
SELECT
    b.ts,
    b."user",
    b.host,
    b.session_id,
    b.tool_name AS tool,
    coalesce(b.command, b.file_path, b.url) AS target,
    b.ran,
    coalesce(b.decision, 'allow') AS policy,
    b.reason,
    b.tool_use_id,
    b.agent,
    b.id
FROM backfilled b
LEFT JOIN live l ON l.tool_use_id = b.tool_use_id AND l.sess IS NOT DISTINCT FROM b.sess
WHERE coalesce(l.n, 0) < b.nth
    AND ($since IS NULL OR b.ts >= $since)
    AND ($until IS NULL OR b.ts < $until)
    AND ($ran IS NULL OR b.ran = $ran)
ORDER BY b.ts, b.id
LIMIT $limit
