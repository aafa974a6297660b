-- policy-changes: which effective settings (settings_id) each host ran, and when it changed.
--
-- One row per host and settings_id, in order of first use: the settings it replaced on
-- that host, when it was first and last seen, how many outcomes and denials it decided.
--
-- @param since timestamp optional only outcomes at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only outcomes before this time
-- @param host text optional only this host
SELECT
    host,
    settings_id,
    lag(settings_id) OVER (PARTITION BY host ORDER BY first_seen, settings_id) AS previous,
    first_seen,
    last_seen,
    outcomes,
    denials
FROM (
    SELECT
        host,
        settings_id,
        min(ts) AS first_seen,
        max(ts) AS last_seen,
        count(*) AS outcomes,
        count(*) FILTER (WHERE decision = 'deny') AS denials
    FROM outcomes
    WHERE ($since IS NULL OR ts >= $since)
        AND ($until IS NULL OR ts < $until)
        AND ($host IS NULL OR host = $host)
    GROUP BY host, settings_id
)
ORDER BY host, first_seen, settings_id
