-- commands: Bash commands matching a regular expression, newest first.
--
-- Searches the command of every live PreToolUse of the Bash tool with an RE2 regular
-- expression (a partial match: anchor it with ^ and $ to match the whole command). When
-- the pattern contains a literal substring, a cheap substring test runs before the regex.
--
-- @param pattern regex required RE2 regex over the command, e.g. 'curl .*\|\s*(ba)?sh'
-- @param since timestamp optional only commands at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only commands before this time
-- @param user text optional only this user
-- @param decision text optional only this decision (allow, deny, ask)
-- @param limit integer default=1000 at most this many rows
SELECT
    ts,
    "user",
    host,
    session_id,
    command,
    decision,
    reason,
    cwd,
    id
FROM outcomes
WHERE event = 'PreToolUse'
    AND tool_name = 'Bash'
    AND command IS NOT NULL
    AND ($since IS NULL OR ts >= $since)
    AND ($until IS NULL OR ts < $until)
    AND ($user IS NULL OR "user" = $user)
    AND ($decision IS NULL OR decision = $decision)
    AND contains(command, $pattern_literal)
    AND regexp_matches(command, $pattern)
ORDER BY ts DESC, id
LIMIT $limit
