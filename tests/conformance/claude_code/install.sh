#!/usr/bin/env bash
# Install a pinned Claude Code from npm into tests/conformance/claude_code/.cc/<version>/.
# Idempotent: does nothing when that version is already there. Usage: install.sh [VERSION]
# (default: the pinned version in PINNED). Prints the path of the claude binary.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
version="${1:-$(cat "$here/PINNED")}"
dest="$here/.cc/$version"
bin="$dest/node_modules/.bin/claude"
if [ -x "$bin" ] && "$bin" --version 2>/dev/null | grep -q "^$version "; then
  echo "$bin"
  exit 0
fi
command -v npm >/dev/null 2>&1 || { echo "install.sh: npm is needed (apt-get install npm)" >&2; exit 1; }
mkdir -p "$dest"
[ -f "$dest/package.json" ] || echo '{"name":"cc-conformance","private":true}' > "$dest/package.json"
# The package ships its native binary in a per-platform optional dependency; the postinstall
# script only relinks bin/claude.exe, so the binary is usable without running it.
npm install --prefix "$dest" --no-audit --no-fund --loglevel=error \
  "@anthropic-ai/claude-code@$version" >&2
native=$(ls "$dest"/node_modules/@anthropic-ai/claude-code-linux-*/claude 2>/dev/null | head -1 || true)
if [ -n "$native" ]; then
  mkdir -p "$dest/node_modules/.bin"
  ln -sf "$native" "$bin"
fi
"$bin" --version | grep -q "^$version " || { echo "install.sh: $bin is not Claude Code $version" >&2; exit 1; }
echo "$bin"
