-- egress: network destinations agents reached or tried: WebFetch, curl, wget, git remotes.
--
-- Domains of WebFetch URLs, of the URLs in Bash commands that run curl or wget, and of git
-- remotes (a URL, user@host:path, or the remote's name when the command has none), per
-- domain and tool, with how many calls were denied and by how many users. Live PreToolUse
-- outcomes only; `commands` and the tool_calls view show when each call was made.
--
-- @param since timestamp optional only calls at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only calls before this time
-- @param user text optional only this user
-- @param limit integer default=200 at most this many rows
WITH calls AS (
    -- distinct (call, user, decision) first: the regexes below run once per distinct command
    SELECT tool_name, coalesce(url, command) AS text, "user", decision, count(*) AS n
    FROM outcomes
    WHERE event = 'PreToolUse'
        AND ($since IS NULL OR ts >= $since)
        AND ($until IS NULL OR ts < $until)
        AND ($user IS NULL OR "user" = $user)
        AND (
            (tool_name = 'WebFetch' AND url IS NOT NULL)
            OR (tool_name = 'Bash' AND (
                contains(command, 'curl') OR contains(command, 'wget')
                OR (contains(command, 'git') AND (
                    contains(command, 'push') OR contains(command, 'pull')
                    OR contains(command, 'fetch') OR contains(command, 'clone')
                    OR contains(command, 'remote') OR contains(command, 'submodule')))))
        )
    GROUP BY ALL
),
parts AS (
    -- each command of a compound line (a && b; c | d) on its own, so a URL is credited to
    -- the tool whose command holds it
    SELECT "user", decision, n,
        unnest(string_split_regex(text, '&&|\|\||;|\||\n')) AS text
    FROM calls
    WHERE tool_name = 'Bash'
),
bash AS (
    SELECT *,
        CASE
            WHEN regexp_matches(text, '(^|[\s(])curl\s') THEN 'curl'
            WHEN regexp_matches(text, '(^|[\s(])wget\s') THEN 'wget'
            WHEN regexp_matches(text, '(^|[\s(])git\s+(-\S+\s+)*(clone|fetch|pull|push|remote|ls-remote|submodule)\b')
                THEN 'git'
        END AS via
    FROM parts
),
targets AS (
    SELECT "user", decision, n, 'WebFetch' AS via, text AS target
    FROM calls
    WHERE tool_name = 'WebFetch'
    UNION ALL
    SELECT "user", decision, n, via,
        unnest(CASE
            WHEN regexp_matches(text, '[a-zA-Z][a-zA-Z0-9+.-]*://|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:')
                THEN regexp_extract_all(text,
                    '[a-zA-Z][a-zA-Z0-9+.-]*://[^\s''"|;&<>()]+|[A-Za-z0-9._-]+@[A-Za-z0-9.-]+:[^\s''"|;&<>()]*')
            WHEN via = 'git'
                THEN [regexp_extract(text,
                    'git\s+(?:-\S+\s+)*(?:push|pull|fetch|ls-remote)\s+(?:-\S+\s+)*([A-Za-z0-9._-]+)', 1)]
            ELSE []
        END) AS target
    FROM bash
    WHERE via IS NOT NULL
)
SELECT
    CASE
        WHEN contains(target, '://') THEN lower(regexp_extract(target, '://(?:[^@/]*@)?([^/:?#]+)', 1))
        WHEN regexp_matches(target, '^[^/]*@[^/]*:') THEN lower(regexp_extract(target, '@([^:]+):', 1))
        ELSE 'git remote ' || target
    END AS domain,
    via,
    sum(n) AS calls,
    coalesce(sum(n) FILTER (WHERE decision = 'deny'), 0) AS denied,
    count(DISTINCT "user") AS users,
    min(target) AS example
FROM targets
WHERE target IS NOT NULL AND target <> ''
GROUP BY ALL
ORDER BY calls DESC, domain, via
LIMIT $limit
