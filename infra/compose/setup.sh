#!/usr/bin/env bash
# Make what infra/compose/compose.yaml mounts, next to it (or in DIR):
#   tls/            a private CA and the three nodes' certificates (../nats/cluster/gen-certs.sh)
#   keys/           the role nkeys and the reply key that signs decisions (hookaudit nats keys)
#   hookaudit.env   HOOKAUDIT_WORKER_KEY (reply.pub), HOOKAUDIT_SERVE_TOKEN, HOOKAUDIT_LOG_KEY
# Idempotent: what exists is kept. Usage: infra/compose/setup.sh [DIR]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
dir=${1:-$here}
mkdir -p "$dir"
umask 077
[ -f "$dir/tls/ca.pem" ] || "$here/../nats/cluster/gen-certs.sh" "$dir/tls" >/dev/null
[ -f "$dir/keys/reply.pub" ] || hookaudit nats keys --dir "$dir/keys" >/dev/null
if [ ! -f "$dir/hookaudit.env" ]; then
  {
    echo "HOOKAUDIT_WORKER_KEY=$(cat "$dir/keys/reply.pub")"
    echo "HOOKAUDIT_SERVE_TOKEN=$(openssl rand -hex 24)"
    echo "HOOKAUDIT_LOG_KEY=$(openssl rand -hex 32)"
  } > "$dir/hookaudit.env"
fi
# The hookaudit containers run as uid 10001 (Dockerfile): give it the keys, readable by
# nobody else. Not root: they stay yours, and the containers cannot read them.
if [ "$(id -u)" = 0 ]; then
  chown -R 10001 "$dir/keys" "$dir/hookaudit.env"
else
  echo "setup.sh: run as root (or chown -R 10001 $dir/keys $dir/hookaudit.env) for the containers" >&2
fi
chmod 0644 "$dir/tls/ca.pem"
chmod 0755 "$dir/tls"
echo "ready: $dir/tls $dir/keys $dir/hookaudit.env"
