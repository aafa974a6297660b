#!/usr/bin/env bash
# Install hookaudit as systemd services on this host (Debian or Ubuntu, as root): one NATS
# node with the role accounts, the workers, serve and the relay; SIEM sinks on demand.
#
#   infra/systemd/install.sh [--source DIR] [--policy FILE] [--agent-user NAME]
#   systemctl enable --now hookaudit-nats hookaudit-worker@1 hookaudit-serve
#   systemctl enable --now hookaudit-relay          # with --agent-user: the agents' fast emit
#
# What it makes; idempotent (what exists is kept: keys and tokens survive a re-run, and
# a re-run upgrades the package and the units):
#   users               hookaudit (nats-server, workers, SIEM sinks), hookaudit-serve (the
#                       HTTP-facing gateway), hookaudit-relay (the agents' socket; group
#                       hookaudit-agents, which --agent-user NAME joins): no unit can read
#                       another's secrets or environment
#   /opt/hookaudit      a venv with hookaudit from DIR (default: this checkout); pip reads
#                       PIP_INDEX_URL, PIP_FIND_LINKS, ... from the environment
#   /etc/hookaudit/keys     root's (0700): the role seeds and reply.pub (`hookaudit nats
#                       keys`); systemd hands each unit its own seeds (LoadCredential)
#   /etc/hookaudit/nats     node.conf (infra/nats/auth.conf: loopback, the role accounts)
#                       and users.conf (public keys), readable by group hookaudit
#   /etc/hookaudit/policy.json  FILE (default infra/policies/security.json) and the python
#                       hook files beside it
#   /etc/hookaudit/*.env    hookaudit.env (every unit, no secrets: NATS URL, the worker's
#                       public key); root's 0600, read by systemd: worker.env (the log key),
#                       serve.env (the bearer token agents send), relay.env (the agents' users)
#   /etc/systemd/system/hookaudit-*.service, then `systemctl daemon-reload`
# The worker creates the streams when it first connects. The agents' HOOKAUDIT_TOKEN for
# serve is HOOKAUDIT_SERVE_TOKEN in /etc/hookaudit/serve.env.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
source_dir=$(cd "$here/../.." && pwd)
policy=$source_dir/infra/policies/security.json
agent_user=""
while [ $# -gt 0 ]; do
  case "$1" in
    --source) source_dir=$(cd "${2:?--source DIR}" && pwd); shift 2 ;;
    --policy) policy=${2:?--policy FILE}; shift 2 ;;
    --agent-user) agent_user=${2:?--agent-user NAME}; shift 2 ;;
    -h|--help) sed -n '2,28p' "$0"; exit 0 ;;
    *) echo "install.sh: unknown option $1 (try --help)" >&2; exit 2 ;;
  esac
done
[ "$(id -u)" = 0 ] || { echo "install.sh: run as root" >&2; exit 1; }
[ -f "$policy" ] || { echo "install.sh: $policy: no such policy file" >&2; exit 1; }
if [ -n "$agent_user" ] && ! id -u "$agent_user" >/dev/null 2>&1; then
  echo "install.sh: --agent-user $agent_user: no such user" >&2
  exit 1
fi

system_user() {  # NAME: a system account with a group of its name, no login, no home
  getent passwd "$1" >/dev/null ||
    useradd --system --user-group --home-dir /nonexistent --no-create-home \
      --shell /usr/sbin/nologin "$1"
}
system_user hookaudit
system_user hookaudit-serve
system_user hookaudit-relay
getent group hookaudit-agents >/dev/null || groupadd --system hookaudit-agents
usermod -a -G hookaudit-agents hookaudit-relay
[ -z "$agent_user" ] || usermod -a -G hookaudit-agents "$agent_user"

[ -x /opt/hookaudit/bin/python ] || python3 -m venv /opt/hookaudit
/opt/hookaudit/bin/python -m pip install --quiet --disable-pip-version-check "$source_dir"
ha=/opt/hookaudit/bin/hookaudit

umask 077
install -d -m 0755 /etc/hookaudit
install -d -m 0700 /etc/hookaudit/keys
[ -f /etc/hookaudit/keys/users.conf ] || "$ha" nats keys --dir /etc/hookaudit/keys >/dev/null
install -d -m 0750 -g hookaudit /etc/hookaudit/nats
install -m 0640 -g hookaudit "$source_dir/infra/nats/auth.conf" /etc/hookaudit/nats/node.conf
install -m 0640 -g hookaudit /etc/hookaudit/keys/users.conf /etc/hookaudit/nats/users.conf
install -m 0644 "$policy" /etc/hookaudit/policy.json
for py in "$(dirname "$policy")"/*.py; do
  [ -e "$py" ] && install -m 0644 "$py" /etc/hookaudit/
done

env_file() {  # NAME MODE CONTENT: written once, root's
  [ -f "/etc/hookaudit/$1" ] && return 0
  printf '%s\n' "$3" > "/etc/hookaudit/$1"
  chmod "$2" "/etc/hookaudit/$1"
}
env_file hookaudit.env 0644 "HOOKAUDIT_NATS_URL=nats://127.0.0.1:4222
HOOKAUDIT_WORKER_KEY=$(cat /etc/hookaudit/keys/reply.pub)"
env_file worker.env 0600 "HOOKAUDIT_LOG_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')"
env_file serve.env 0600 "HOOKAUDIT_SERVE_TOKEN=$(od -An -tx1 -N24 /dev/urandom | tr -d ' \n')"
env_file relay.env 0600 "HOOKAUDIT_RELAY_USERS=${agent_user:-hookaudit-relay}"

install -m 0644 "$here"/hookaudit-*.service /etc/systemd/system/
if [ -d /run/systemd/system ]; then
  systemctl daemon-reload
fi
echo "installed: $("$ha" --version); next: systemctl enable --now hookaudit-nats hookaudit-worker@1 hookaudit-serve"
