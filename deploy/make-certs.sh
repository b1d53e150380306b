#!/usr/bin/env bash
# Makes the certificates of a cluster's control plane (mutual TLS, docs/security.md): a CA, and for each NAME a
# certificate it signed with its key. Give each process its own: --tls-ca DIR/ca.pem --tls-cert DIR/NAME.pem
# --tls-key DIR/NAME.key. Keys are EC P-256, unencrypted (keep DIR private: chmod 700 is applied); the CA's key
# DIR/ca.key signs more names later (run again with new names: the CA is kept).
# Usage: deploy/make-certs.sh DIR NAME [NAME...]   e.g. deploy/make-certs.sh certs gmanager instance0 instance1 serve
set -euo pipefail
[ $# -ge 2 ] || { echo "usage: $0 DIR NAME [NAME...]" >&2; exit 2; }
command -v openssl >/dev/null || { echo "make-certs: openssl is missing (apt-get install openssl)" >&2; exit 2; }
dir=$1
shift
mkdir -p "$dir"
chmod 700 "$dir"
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
if [ ! -f "$dir/ca.pem" ] || [ ! -f "$dir/ca.key" ]; then
  openssl req -x509 "${ec[@]}" -keyout "$dir/ca.key" -out "$dir/ca.pem" -days 3650 -subj "/CN=illm cluster CA" \
    -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
  echo "make-certs: $dir/ca.pem (the cluster's CA; its key $dir/ca.key)"
fi
ext=$(mktemp)
trap 'rm -f "$ext" "$dir"/*.csr' EXIT
printf 'basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth,clientAuth\n' >"$ext"
for name in "$@"; do
  case "$name" in */* | ca | "") echo "make-certs: bad name '$name'" >&2; exit 2 ;; esac
  openssl req "${ec[@]}" -keyout "$dir/$name.key" -out "$dir/$name.csr" -subj "/CN=$name" 2>/dev/null
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.pem" -CAkey "$dir/ca.key" -CAcreateserial \
    -out "$dir/$name.pem" -days 825 -extfile "$ext" 2>/dev/null
  chmod 600 "$dir/$name.key"
  echo "make-certs: $dir/$name.pem and $dir/$name.key"
done
