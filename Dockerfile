# syntax=docker/dockerfile:1
# Every deployable's image, one target each, built from the repository root (the
# workspace is the context):
#   docker build --target trading -t ats-trading .
#   (docker-compose.yml: build: { context: ., target: trading })
#
#   target       image             runs                                                   port(s)
#   gateway      ats-gateway       API keys, tiers, rate limits, x402 payments, the       3000; /ready and /metrics
#                                  OpenAPI document and /docs, proxying to the services   on ops 9000 only (never published)
#   agent        ats-agent         jobs, threads, /v1 and skills; AGENT_ROLE=worker       3001
#                                  takes jobs only, AGENT_ROLE=api serves routes only
#                                  (k8s/base/agent-worker-deployment.yaml), the default
#                                  "all" does both
#   trading      ats-trading       quotes, prepared transactions, swaps, positions,       3002
#                                  launchpad
#   market-data  ats-market-data   prices, trending pools, NFTs, predictions, bridge      3003
#                                  quotes
#   automation   ats-automation    scheduled and conditional swaps run through trading    3004
#   admin        ats-admin         API keys, the payment ledger, x402 settlement, revenue 3005
#   devnet       ats-devnet        anvil (chain id 31337) with the tokens, Uniswap V3 and 8545
#                                  Algebra Integral deployed and ten test accounts
#                                  funded, for docker-compose.yml only
#
# Every image runs compiled JavaScript with plain node as the non-root "node" user; the
# root filesystem can be read-only. Its /app is what scripts/deploy-package.sh makes of its
# package: dist/, the production dependencies and the package's data files.
# Migrations: at start each service migrates its own schema ("agent", "trading",
# "market_data", "automation", "admin") under a Postgres advisory lock (replicas starting
# together wait). The gateway has no database: nothing to migrate. The devnet is a
# development chain only: its state lives in memory and starts over when the container
# does; it writes the address book to /devnet/address-book.json, a volume the services
# mount read-only (their ADDRESS_BOOK).

# Every package compiled once and every deployable deployed to /out/<target>; each
# target below copies its own directory.
FROM node:22-bookworm-slim AS build
ENV CI=true
RUN npm install -g pnpm@12.21.0 && npm cache clean --force
WORKDIR /src
# every package the lockfile names, in a layer that only a lockfile change invalidates
COPY pnpm-lock.yaml pnpm-workspace.yaml package.json ./
RUN pnpm fetch
COPY . .
RUN pnpm install --frozen-lockfile --offline && pnpm build
# The devnet's Uniswap and Algebra packages are read for their JSON artifacts only; the
# Hardhat runtime they depend on (about 250 MB of native builds for every platform) never runs.
RUN export DEPLOY_PACKAGE_BUILT=1 \
 && sh scripts/deploy-package.sh @ats/gateway /out/gateway \
 && sh scripts/deploy-package.sh @ats/agent /out/agent \
 && sh scripts/deploy-package.sh @ats/trading /out/trading \
 && sh scripts/deploy-package.sh @ats/market-data /out/market-data \
 && sh scripts/deploy-package.sh @ats/automation /out/automation \
 && sh scripts/deploy-package.sh @ats/admin /out/admin \
 && sh scripts/deploy-package.sh @ats/devnet /out/devnet \
 && find /out/devnet/node_modules/.pnpm -maxdepth 1 \( -name '@nomicfoundation+*' -o -name 'hardhat@*' -o -name 'hardhat-*' \) -exec rm -rf {} +

# What every image starts from.
FROM node:22-bookworm-slim AS runtime
ENV NODE_ENV=production
WORKDIR /app

# The gateway and the services: an HTTP server whose /ready answers on OPS_PORT where it
# has one (the gateway), else on PORT.
FROM runtime AS service
USER node
HEALTHCHECK --interval=10s --timeout=5s --start-period=30s --retries=6 \
  CMD ["node", "-e", "fetch('http://127.0.0.1:' + (process.env.OPS_PORT || process.env.PORT) + '/ready').then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# node is PID 1: it handles SIGTERM itself (stops taking requests; a service then drains
# NATS and closes Prisma; then it exits)
CMD ["node", "--conditions=ats-dist", "dist/server.js"]

FROM service AS agent
ENV PORT=3001
EXPOSE 3001
COPY --from=build /out/agent ./

FROM service AS trading
ENV PORT=3002
EXPOSE 3002
COPY --from=build /out/trading ./

FROM service AS market-data
ENV PORT=3003
EXPOSE 3003
COPY --from=build /out/market-data ./

FROM service AS automation
ENV PORT=3004
EXPOSE 3004
COPY --from=build /out/automation ./

FROM service AS admin
ENV PORT=3005
EXPOSE 3005
COPY --from=build /out/admin ./

FROM runtime AS devnet
ENV DEVNET_HOST=0.0.0.0 DEVNET_PORT=8545 ADDRESS_BOOK=/devnet/address-book.json
COPY --from=build /out/devnet ./
RUN mkdir /devnet && chown node:node /devnet
VOLUME /devnet
USER node
EXPOSE 8545
# ready once the address book is written (it is, after the deploy and the funding)
HEALTHCHECK --interval=5s --timeout=5s --start-period=30s --retries=12 \
  CMD ["node", "-e", "require('node:fs').accessSync(process.env.ADDRESS_BOOK); fetch('http://127.0.0.1:' + process.env.DEVNET_PORT, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"eth_chainId\",\"params\":[]}' }).then((r) => process.exit(r.ok ? 0 : 1), () => process.exit(1))"]
# node stops anvil on SIGTERM
CMD ["node", "--conditions=ats-dist", "dist/cli.js"]

# The last stage is what a build without --target makes: the gateway.
FROM service AS gateway
ENV PORT=3000 OPS_PORT=9000
EXPOSE 3000 9000
COPY --from=build /out/gateway ./
