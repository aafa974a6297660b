-- session: the full timeline of one session, in order.
--
-- Every live outcome of the session: prompts, tool calls with their command, file or URL,
-- decisions and reasons, and how many of its hooks ran and failed.
--
-- @param session_id text required the session id (see the sessions view)
-- @param since timestamp optional only events at or after this time
-- @param until timestamp optional only events before this time
WITH runs AS (
    SELECT worker, seq, count(*) FILTER (WHERE outcome = 'error') AS hook_errors
    FROM hook_runs
    WHERE session_id = $session_id
    GROUP BY worker, seq
)
SELECT
    o.ts,
    o.event,
    o.tool_name AS tool,
    coalesce(
        o.command,
        o.file_path,
        o.url,
        json_extract_string(json_extract_string(o.record, '$.event.payload'), '$.prompt')
    ) AS detail,
    o.decision,
    o.reason,
    o.n_runs AS hooks,
    coalesce(r.hook_errors, 0) AS hook_errors,
    o.tool_use_id,
    o."user",
    o.host,
    o.cwd,
    o.id
FROM outcomes o
LEFT JOIN runs r ON r.worker = o.worker AND r.seq = o.seq
WHERE o.session_id = $session_id
    AND ($since IS NULL OR o.ts >= $since)
    AND ($until IS NULL OR o.ts < $until)
ORDER BY o.ts, o.id
