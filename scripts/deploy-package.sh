#!/bin/sh
# Builds one deployable into a directory that holds only what runs: the compiled
# JavaScript (dist/), the production dependencies (`pnpm deploy --prod`: no tsx, no
# TypeScript, no test tools) and the package's data files (migrations, artifacts,
# catalog: its package.json "files"). The Dockerfile's build stage runs it for every
# deployable (/out/<target>, which that target copies), and so does
# packages/deploy-check's test, which starts the result with plain node.
#
#   scripts/deploy-package.sh @ats/admin /out/admin      (after pnpm install)
#   node --conditions=ats-dist /out/admin/dist/server.js
#
# "ats-dist" is the export condition under which the workspace packages resolve to
# their dist/*.js; without it (tsx, tests) they resolve to src/*.ts.
set -eu
package=$1
out=$2
cd "$(dirname "$0")/.."

# the package and the workspace packages it depends on: src/*.ts -> dist/*.js
# (DEPLOY_PACKAGE_BUILT=1: `pnpm build` already built every package, as the tests do)
if [ -z "${DEPLOY_PACKAGE_BUILT:-}" ]; then
  pnpm --filter "$package..." --workspace-concurrency=4 build
fi
rm -rf "$out"
pnpm --filter "$package" deploy --prod "$out"

# Prisma's client ships a query compiler for every database; the fleet uses PostgreSQL's.
find "$out/node_modules/.pnpm" -path '*/@prisma/client/runtime/*' \
  \( -name '*mysql*' -o -name '*sqlite*' -o -name '*sqlserver*' -o -name '*cockroachdb*' -o -name '*.map' \) -delete
# install-time files, not read at run time
rm -f "$out/pnpm-lock.yaml" "$out/pnpm-workspace.yaml"
echo "deploy-package: $package -> $out ($(du -sh "$out" | cut -f1))"
