import { fileURLToPath } from 'node:url'
import { automationContract, automationRoutes, type AutomationStatus, type CreateAutomationRequest } from '@ats/contracts'
import {
  addNatsService,
  callEndpoint,
  checkRecipient,
  findToken,
  Forbidden,
  NotFound,
  serveEndpoint,
  startEventOutbox,
  tradingTokens,
  Unauthorized,
  Unavailable,
  watchWalletControl,
  type ServiceDefinition,
  type TypeBoxTypeProvider,
} from '@ats/service-kit'
import type { FastifyRequest } from 'fastify'
import { Type } from 'typebox'
import { getAddress, isAddress } from 'viem'
import { PrismaClient } from './generated/prisma/client.ts'
import { startApprovalWatch, withdrawApproval } from './approvals.ts'
import { startScheduler } from './scheduler.ts'
import { automationView, createStore, runCounter, runView, type Owner } from './store.ts'
import { checkConfig } from './types.ts'

const ms = (description: string, defaultMs: number, minimum = 100) => Type.Integer({ minimum, default: defaultMs, description })

const settings = {
  AUTOMATION_SCHEDULER: Type.Boolean({ default: true, description: 'run the scheduler in this process (false: routes only)' }),
  AUTOMATION_TICK_MS: ms('how often the scheduler looks for due automations', 1_000, 50),
  AUTOMATION_BATCH: Type.Integer({ minimum: 1, maximum: 1000, default: 50, description: 'due automations one tick takes at most' }),
  AUTOMATION_MIN_INTERVAL_MS: ms('the shortest interval (and limit-order checkEvery) an automation may have', 60_000, 1_000),
  AUTOMATION_LEASE_MS: ms('a run its scheduler has not finished by then (it died) is resumed by another, with the same idempotency key', 120_000, 1_000),
  AUTOMATION_MAX_FAILURES: Type.Integer({ minimum: 1, maximum: 100, default: 3, description: 'failed runs in a row before an automation fails' }),
  AUTOMATION_MAX_ATTEMPTS: Type.Integer({ minimum: 1, maximum: 20, default: 5, description: 'tries of one run whose swap timed out before the run fails' }),
  AUTOMATION_EXECUTE_TIMEOUT_MS: ms("how long a run waits for trading's swap (mined)", 90_000, 1_000),
  AUTOMATION_MAX_PER_KEY: Type.Integer({
    minimum: 1,
    maximum: 10_000,
    default: 10,
    description: 'active or paused automations one API key (or agent payer) may have; creating or resuming one more answers 409',
  }),
  APPROVAL_POLL_MS: ms("how often the scheduler asks trading whether the approval a run waits for was decided", 2_000),
}

/** The owner of a request: the API key (HTTP through the gateway), or the key or payer of an agent job (NATS). */
function ownerOf(identity: { ownerId?: string | undefined; keyId?: string | undefined }): Owner {
  if (identity.keyId) return { ownerId: identity.keyId, keyId: identity.keyId }
  if (identity.ownerId && isAddress(identity.ownerId, { strict: false })) return { ownerId: identity.ownerId.toLowerCase() }
  throw new Unauthorized('automations need an API key')
}

export const automationService: ServiceDefinition<typeof settings, PrismaClient> = {
  name: 'automation',
  version: '0.1.0',
  port: 3004,
  settings,
  database: {
    schema: 'automation',
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { db, nc, channels, config, version, onClose, log, metrics }) {
    // the webhook events of runs and automations, written in the transaction that ends them
    const events = await startEventOutbox({ nc, channels: channels.admin.events, databaseUrl: config.DATABASE_URL!, schema: 'automation', log })
    onClose(events.stop)
    const store = createStore(db, { maxPerOwner: config.AUTOMATION_MAX_PER_KEY, events, runsCounted: runCounter(metrics) })

    /**
     * The server wallet pays every run and the run sends what it buys to walletAddress: that must be
     * the owner's own wallet (a key's bound wallet, a payer itself) or one an admin allowed it, as
     * admin says (never the caller's word). Trading checks the same before every run's swap.
     */
    async function checkWallet(owner: Owner, walletAddress: string) {
      if (owner.keyId) {
        const { key } = await callEndpoint(nc, channels.admin.keyPolicy, { keyId: owner.keyId }, { timeoutMs: 2000 })
        if (!key) throw new Forbidden(`API key ${owner.keyId} is revoked or unknown`)
        checkRecipient({ owner: `key ${owner.keyId}`, own: key.wallet, allowed: key.policy?.allowedRecipients }, walletAddress)
        return
      }
      if (owner.ownerId === walletAddress.toLowerCase()) return
      const { payer } = await callEndpoint(nc, channels.admin.agentPayer, { address: getAddress(owner.ownerId) }, { timeoutMs: 2000 })
      checkRecipient({ owner: `payer ${getAddress(owner.ownerId)}`, own: owner.ownerId, allowed: payer?.policy.allowedRecipients }, walletAddress)
    }

    // the chain's tokens, from trading (what its swaps accept)
    const tokens = tradingTokens(nc, channels.trading.tokens)
    const tokenList = () =>
      tokens.list().catch((error: Error) => {
        throw new Unavailable(`the token list is not available from trading (${error.message})`)
      })

    async function create(owner: Owner, body: CreateAutomationRequest) {
      await checkWallet(owner, body.walletAddress)
      const list = await tokenList()
      const checked = checkConfig(body.type, body.config, {
        tokenOf: (ref) => findToken(list, ref),
        knownSymbols: list.map((t) => t.symbol),
        minIntervalMs: config.AUTOMATION_MIN_INTERVAL_MS,
        now: Date.now(),
      })
      const row = await store.create(owner, { walletAddress: getAddress(body.walletAddress), type: body.type, name: body.name, config: checked })
      log.info({ automationId: row.id, type: row.type, owner: owner.keyId ?? 'payer' }, 'automation created')
      return { automation: automationView(row) }
    }

    async function setStatus(owner: Owner, id: string, status: AutomationStatus) {
      const row = await store.setStatus(owner, id, status)
      if (!row) throw new NotFound(`automation ${id}`)
      log.info({ automationId: id, status }, 'automation status set')
      return { automation: automationView(row) }
    }

    const nats = await addNatsService(nc, automationContract.name, version, 'automations and their scheduler')
    onClose(async () => {
      await nats.stop()
    })
    const { create: createChannel, list: listChannel, setStatus: setStatusChannel } = channels.automation
    serveEndpoint(nats, 'create', createChannel, log, async (request, { identity }) => create(ownerOf(identity), request))
    serveEndpoint(nats, 'list', listChannel, log, async ({ wallet }, { identity }) => ({
      automations: (await store.list(ownerOf(identity), wallet)).map(automationView),
    }))
    serveEndpoint(nats, 'status-set', setStatusChannel, log, async ({ id, status }, { identity }) => setStatus(ownerOf(identity), id, status))

    const keyOwner = (request: FastifyRequest) => ownerOf({ keyId: request.identity.keyId })
    const api = app.withTypeProvider<TypeBoxTypeProvider>()
    api.route({
      ...automationRoutes.list,
      handler: async (request) => ({ automations: (await store.list(keyOwner(request), request.query.wallet)).map(automationView) }),
    })
    api.route({
      ...automationRoutes.create,
      handler: async (request, reply) => reply.code(201).send(await create(keyOwner(request), request.body)),
    })
    api.route({
      ...automationRoutes.get,
      handler: async (request) => {
        const row = await store.get(keyOwner(request), request.params.id)
        if (!row) throw new NotFound(`automation ${request.params.id}`)
        return { automation: automationView(row) }
      },
    })
    api.route({
      ...automationRoutes.update,
      handler: async (request) => setStatus(keyOwner(request), request.params.id, request.body.status),
    })
    api.route({
      ...automationRoutes.remove,
      handler: async (request) => {
        const row = await store.get(keyOwner(request), request.params.id)
        if (!row) throw new NotFound(`automation ${request.params.id}`)
        // a run waiting for approval: nobody may approve its swap once the automation is gone
        for (const approvalId of await store.waitingApprovals(row.id)) {
          await withdrawApproval({ nc, channels }, row, approvalId, 'automation deleted', 5_000).catch((error: Error) => {
            throw new Unavailable(`automation ${row.id} has a run waiting for approval ${approvalId}, which trading could not withdraw (${error.message}); try again`)
          })
        }
        if (!(await store.remove(keyOwner(request), request.params.id))) throw new NotFound(`automation ${request.params.id}`)
        log.info({ automationId: request.params.id }, 'automation deleted')
        return { ok: true as const }
      },
    })
    api.route({
      ...automationRoutes.runs,
      handler: async (request) => {
        const row = await store.get(keyOwner(request), request.params.id)
        if (!row) throw new NotFound(`automation ${request.params.id}`)
        return { runs: (await store.runs(row.id, request.query.limit)).map(runView) }
      },
    })

    if (config.AUTOMATION_SCHEDULER) {
      const walletControl = await watchWalletControl(nc, channels.admin.walletControl, log)
      onClose(walletControl.close)
      const scheduler = startScheduler({
        walletControl,
        nc,
        channels,
        store,
        log,
        tokens,
        settings: {
          tickMs: config.AUTOMATION_TICK_MS,
          batch: config.AUTOMATION_BATCH,
          leaseMs: config.AUTOMATION_LEASE_MS,
          maxFailures: config.AUTOMATION_MAX_FAILURES,
          maxAttempts: config.AUTOMATION_MAX_ATTEMPTS,
          executeTimeoutMs: config.AUTOMATION_EXECUTE_TIMEOUT_MS,
          approvalPollMs: config.APPROVAL_POLL_MS,
        },
      })
      onClose(scheduler.stop)
      const approvalWatch = startApprovalWatch({
        nc,
        channels,
        store,
        log,
        settings: { pollMs: config.APPROVAL_POLL_MS, batch: config.AUTOMATION_BATCH, maxFailures: config.AUTOMATION_MAX_FAILURES, timeoutMs: 10_000 },
      })
      onClose(approvalWatch.stop)
      log.info({ tickMs: config.AUTOMATION_TICK_MS, minIntervalMs: config.AUTOMATION_MIN_INTERVAL_MS }, 'automation scheduler started')
    }
  },
}
