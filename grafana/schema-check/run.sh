#!/usr/bin/env bash
# Type-check every dashboard in grafana/ against @grafana/schema's Dashboard type.
# Installs the pinned packages once (npm ci with the committed lock file; node_modules is cached
# next to this script), regenerates check.ts and runs tsc --noEmit --strict.
set -euo pipefail
cd "$(dirname "$0")"
if [[ ! -f node_modules/.package-lock.json ]] || ! cmp -s package-lock.json .installed-lock.json; then
  npm ci --no-audit --no-fund --loglevel=error
  cp package-lock.json .installed-lock.json
fi
node generate-check.mjs
npx --no-install tsc --noEmit --strict -p tsconfig.json
echo "schema check: OK"
