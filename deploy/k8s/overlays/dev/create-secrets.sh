#!/usr/bin/env bash
# Creates the dev overlay's two Secrets with fresh random values, in the cluster only (nothing
# is written to disk). Safe to rerun: it keeps Secrets that exist; delete them to rotate.
#   bash deploy/k8s/overlays/dev/create-secrets.sh [namespace]   (default loraplex-dev)
# The agents' node credentials need the migrated database: once the first apply has run,
#   bash deploy/k8s/mint-node-credentials.sh loraplex-dev loraplex-engine-cpu-0
set -euo pipefail
ns="${1:-loraplex-dev}"
random() { python3 -c "import secrets; print(secrets.token_urlsafe(32))"; }

kubectl get namespace "$ns" >/dev/null 2>&1 || kubectl create namespace "$ns"

if ! kubectl -n "$ns" get secret loraplex-dev-services >/dev/null 2>&1; then
  kubectl -n "$ns" create secret generic loraplex-dev-services \
    --from-literal=POSTGRES_PASSWORD="$(random)" \
    --from-literal=REDIS_PASSWORD="$(random)" \
    --from-literal=MINIO_ROOT_USER=loraplex \
    --from-literal=MINIO_ROOT_PASSWORD="$(random)"
fi

if ! kubectl -n "$ns" get secret loraplex-secrets >/dev/null 2>&1; then
  services() { kubectl -n "$ns" get secret loraplex-dev-services -o "jsonpath={.data.$1}" | base64 -d; }
  pg_password="$(services POSTGRES_PASSWORD)"
  redis_password="$(services REDIS_PASSWORD)"
  kubectl -n "$ns" create secret generic loraplex-secrets \
    --from-literal=LORAPLEX_DATABASE_URL="postgresql+asyncpg://loraplex:${pg_password}@loraplex-postgres:5432/loraplex" \
    --from-literal=LORAPLEX_REDIS_URL="redis://:${redis_password}@loraplex-redis:6379/0" \
    --from-literal=LORAPLEX_S3_ACCESS_KEY_ID="$(services MINIO_ROOT_USER)" \
    --from-literal=LORAPLEX_S3_SECRET_ACCESS_KEY="$(services MINIO_ROOT_PASSWORD)" \
    --from-literal=LORAPLEX_SECRET_KEY="$(random)" \
    --from-literal=LORAPLEX_METRICS_TOKEN="$(random)" \
    --from-literal=LORAPLEX_ENGINE_API_KEY="$(random)"
fi
echo "secrets loraplex-secrets and loraplex-dev-services are in namespace $ns"
