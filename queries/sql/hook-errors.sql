-- hook-errors: hooks that failed, by hook and kind of error, most frequent first.
--
-- Hook runs of live outcomes whose outcome is error (timeouts, non-zero exits, crashes,
-- bad output, missing executors), grouped by hook and error kind, with the latest message.
-- The runs themselves (session, tool, stderr size, ...) are in the hook_runs view.
--
-- @param since timestamp optional only runs at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only runs before this time
-- @param hook text optional only this hook_id
-- @param limit integer default=100 at most this many rows
SELECT
    hook_id,
    any_value(type) AS type,
    any_value(coalesce(callable, command, url, prompt)) AS hook,
    error_kind,
    count(*) AS errors,
    min(ts) AS first_seen,
    max(ts) AS last_seen,
    arg_max(exit_code, ts) AS last_exit_code,
    arg_max(message, ts) AS last_message
FROM hook_runs
WHERE outcome = 'error'
    AND ($since IS NULL OR ts >= $since)
    AND ($until IS NULL OR ts < $until)
    AND ($hook IS NULL OR hook_id = $hook)
GROUP BY hook_id, error_kind
ORDER BY errors DESC, hook_id, error_kind
LIMIT $limit
