-- files: file reads and writes whose path matches a glob, newest first.
--
-- Read, Edit, MultiEdit, Write and NotebookEdit calls (live PreToolUse) whose file path
-- matches a glob: ** spans directories, * and ? stay within a name, [abc] is a class,
-- ~ is any home directory (/home/*, /Users/*, /root). A glob that starts with neither /
-- nor ~ matches at any depth: '.env' and '**/.env' both match /srv/app/.env.
--
-- @param glob glob required the path glob, e.g. '**/.env', '~/.ssh/**', '/etc/*'
-- @param access text default=any read, write or any
-- @param since timestamp optional only calls at or after this time (7d, 12h, 2026-03-01)
-- @param until timestamp optional only calls before this time
-- @param user text optional only this user
-- @param limit integer default=1000 at most this many rows
SELECT
    ts,
    "user",
    host,
    session_id,
    tool_name AS tool,
    CASE WHEN tool_name = 'Read' THEN 'read' ELSE 'write' END AS access,
    file_path,
    decision,
    reason,
    id
FROM outcomes
WHERE event = 'PreToolUse'
    AND tool_name IN ('Read', 'Edit', 'MultiEdit', 'Write', 'NotebookEdit')
    AND file_path IS NOT NULL
    AND ($access = 'any' OR (CASE WHEN tool_name = 'Read' THEN 'read' ELSE 'write' END) = $access)
    AND ($since IS NULL OR ts >= $since)
    AND ($until IS NULL OR ts < $until)
    AND ($user IS NULL OR "user" = $user)
    AND contains(file_path, $glob_literal)
    AND regexp_full_match(file_path, $glob)
ORDER BY ts DESC, id
LIMIT $limit
