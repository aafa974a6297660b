-- slow-hooks: hook latency percentiles (p50, p95, p99) per hook, slowest p95 first.
--
-- Exact percentiles (quantile_cont) of duration_ms over every run of each hook in live
-- outcomes, with the run count, the maximum and how many runs timed out.
--
-- @param since timestamp optional only runs at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only runs before this time
-- @param type text optional only hooks of this type (command, http, python, ...)
-- @param min_runs integer default=1 only hooks with at least this many runs
-- @param limit integer default=100 at most this many rows
SELECT
    hook_id,
    type,
    hook,
    runs,
    q[1] AS p50_ms,
    q[2] AS p95_ms,
    q[3] AS p99_ms,
    q[4] AS max_ms,
    timeouts
FROM (
    SELECT
        hook_id,
        any_value(type) AS type,
        any_value(coalesce(callable, command, url, prompt)) AS hook,
        count(*) AS runs,
        quantile_cont(duration_ms, [0.5, 0.95, 0.99, 1.0]) AS q,
        count(error_kind) FILTER (WHERE error_kind = 'timeout') AS timeouts
    FROM hook_runs
    WHERE ($since IS NULL OR ts >= $since)
        AND ($until IS NULL OR ts < $until)
        AND ($type IS NULL OR type = $type)
    GROUP BY hook_id
    HAVING count(*) >= $min_runs
)
ORDER BY p95_ms DESC, hook_id
LIMIT $limit
