#!/usr/bin/env bash
# Generate a private CA and one certificate per cluster node (for tests and a first install).
#   infra/nats/cluster/gen-certs.sh DIR [NAME...]      default names: nats-1 nats-2 nats-3
# Each certificate names the node, localhost and 127.0.0.1 (SANs), so clients and routes can
# verify it. Keys are written 0600. Use your own PKI in production if you have one.
set -euo pipefail
dir=${1:?usage: gen-certs.sh DIR [NAME...]}
shift
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(nats-1 nats-2 nats-3)
mkdir -p "$dir"
umask 077
if [ ! -f "$dir/ca.pem" ]; then
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -days 825 \
    -subj "/CN=hookaudit NATS CA" -keyout "$dir/ca-key.pem" -out "$dir/ca.pem" 2>/dev/null
fi
for n in "${names[@]}"; do
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -subj "/CN=$n" \
    -keyout "$dir/$n-key.pem" -out "$dir/$n.csr" 2>/dev/null
  printf 'subjectAltName=DNS:%s,DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth,clientAuth\n' "$n" \
    > "$dir/$n.ext"
  openssl x509 -req -in "$dir/$n.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca-key.pem" \
    -CAcreateserial -days 825 -extfile "$dir/$n.ext" -out "$dir/$n.pem" 2>/dev/null
  rm -f "$dir/$n.csr" "$dir/$n.ext"
done
chmod 0644 "$dir/ca.pem" "$dir"/*.pem
chmod 0600 "$dir"/*-key.pem
echo "certificates in $dir: ca.pem ${names[*]/%/.pem}"
