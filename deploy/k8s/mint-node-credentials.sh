#!/usr/bin/env bash
# Mints one node credential per engine name (`loraplex nodes mint`, run in an API pod: it
# needs the migrated database) and stores each under its name in the Secret
# loraplex-node-credentials, which the engines' agents read by pod name. Run it once after
# the first apply, and again with the new names when a class gets more replicas. Names that
# already have a key are kept (delete the key, or the Secret, to rotate).
#   bash deploy/k8s/mint-node-credentials.sh NAMESPACE ENGINE_NAME...
#   bash deploy/k8s/mint-node-credentials.sh loraplex loraplex-engine-r16-{0..3} loraplex-engine-r64-{0..3}
set -euo pipefail
ns="$1"
shift
secret=loraplex-node-credentials
kubectl -n "$ns" get secret "$secret" >/dev/null 2>&1 || kubectl -n "$ns" create secret generic "$secret"
for name in "$@"; do
  if [ -n "$(kubectl -n "$ns" get secret "$secret" -o "jsonpath={.data.$name}")" ]; then
    echo "$name: has a credential"
    continue
  fi
  credential="$(kubectl -n "$ns" exec deploy/loraplex-api -c api -- loraplex nodes mint "$name")"
  value="$(printf %s "$credential" | base64 | tr -d '\n')"
  kubectl -n "$ns" patch secret "$secret" --type merge -p "{\"data\": {\"$name\": \"$value\"}}" >/dev/null
  echo "$name: minted"
done
