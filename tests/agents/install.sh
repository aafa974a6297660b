#!/usr/bin/env bash
# Install the pinned agent CLIs (PINNED) from npm into tests/agents/.npm/<agent>/, for the
# real-binary tests in this directory. Idempotent: an agent already at its pinned version is
# left alone. Usage: install.sh [AGENT...] (default: every agent in PINNED).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
command -v npm >/dev/null 2>&1 || { echo "install.sh: npm is needed (apt-get install npm)" >&2; exit 1; }
want=("$@")
while read -r agent package version binary; do
  case "$agent" in ''|'#'*) continue ;; esac
  if [ "${#want[@]}" -gt 0 ] && [[ ! " ${want[*]} " == *" $agent "* ]]; then continue; fi
  dest="$here/.npm/$agent"
  bin="$dest/node_modules/.bin/$binary"
  if [ -x "$bin" ] && [ -f "$dest/.version" ] && [ "$(cat "$dest/.version")" = "$package@$version" ]; then
    continue
  fi
  mkdir -p "$dest"
  [ -f "$dest/package.json" ] || echo '{"name":"hookaudit-agent-tests","private":true}' > "$dest/package.json"
  echo "install.sh: $package@$version" >&2
  npm install --prefix "$dest" --no-audit --no-fund --loglevel=error "$package@$version" >&2
  [ -x "$bin" ] || { echo "install.sh: $bin missing after installing $package@$version" >&2; exit 1; }
  echo "$package@$version" > "$dest/.version"
done < "$here/PINNED"
