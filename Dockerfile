# syntax=docker/dockerfile:1
#
# One image for the whole workspace. The command picks the process:
#   pnpm --filter @ats/gateway start   (listens on 3000)
#   pnpm --filter @ats/admin start     (listens on 3005)
# Processes run TypeScript directly with tsx (`tsx src/server.ts`), so the image
# keeps the workspace's dev dependencies; services migrate their own Postgres
# schema at start.
#
#   docker build -t agent-trading-service .

ARG NODE_IMAGE=node:20-bookworm-slim

FROM ${NODE_IMAGE} AS base
# CI=true: non-interactive pnpm (no prompts, no update notices)
ENV CI=true
# the pnpm that "packageManager" in package.json pins
RUN npm install -g pnpm@12.21.0 && npm cache clean --force
WORKDIR /app

# ---- build: install from the lockfile, generate the Prisma clients ----------
FROM base AS build
# Download every package the lockfile names; this layer only depends on the
# lockfile and the workspace file, so a source change does not refetch.
COPY pnpm-lock.yaml pnpm-workspace.yaml package.json ./
RUN pnpm fetch
COPY . .
RUN pnpm install --frozen-lockfile --offline
# Prisma clients (services/*/src/generated); each service's `generate` script
# points PRISMA_SCHEMA_ENGINE_BINARY at scripts/prisma-engine-stub.
RUN pnpm generate

# ---- runtime ------------------------------------------------------------------
FROM ${NODE_IMAGE} AS runtime
ENV CI=true
# tini as PID 1: forwards SIGTERM to pnpm (which passes it on to the service,
# which drains NATS and closes Prisma) and reaps zombies
RUN apt-get update \
 && apt-get install -y --no-install-recommends tini \
 && rm -rf /var/lib/apt/lists/* \
 && npm install -g pnpm@12.21.0 \
 && npm cache clean --force
WORKDIR /app
# owned by root and read-only to the process; only /tmp needs to be writable
# (tsx's compile cache, pnpm's run locks), so the root filesystem can be read-only
COPY --from=build /app /app
USER node
EXPOSE 3000 3005
ENTRYPOINT ["/usr/bin/tini", "--"]
CMD ["pnpm", "--filter", "@ats/gateway", "start"]
