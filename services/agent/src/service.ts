// The agent service: the wiring of its job store, queue, workers, runner, credit and payment reports to its routes.
import { fileURLToPath } from 'node:url'
import { agentRoutes as agentApi } from '@ats/contracts'
import {
  createIdempotencyStore,
  startEventOutbox,
  startIdempotencyPurge,
  StartupError,
  type EventOutbox,
  type ServiceDefinition,
  type TypeBoxTypeProvider,
  packageVersion,
} from '@ats/service-kit'
import { PrismaClient } from './generated/prisma/client.ts'
import { createJobEvents } from './jobs/events.ts'
import { jobCounter, watchJobQueue } from './jobs/metrics.ts'
import { createJobPaymentLookup, startPaymentOutcomes, type PaymentOutcomes } from './jobs/paymentOutcomes.ts'
import { createJobQueue } from './jobs/queue.ts'
import { createApprovalWithdrawal } from './jobs/approvals.ts'
import { createPrices } from './credit/prices.ts'
import { startCreditUsage, type CreditUsageReports } from './credit/usageReports.ts'
import { createJobStore, type Owner } from './jobs/store.ts'
import { startJobWorkers } from './jobs/worker.ts'
import { agentRoutes } from './routes/agent.ts'
import { createAnswers } from './answers/answers.ts'
import { chatRoutes } from './routes/chat.ts'
import { messagesRoutes } from './routes/messages.ts'
import { responsesRoutes } from './routes/responses.ts'
import { createLlmRunner } from './runner/llm.ts'
import { createPlanner } from './runner/planner.ts'
import type { Runner } from './runner/runner.ts'
import { createTools } from './runner/tools.ts'
import { agentSettings } from './settings.ts'
import { skillList } from './skills.ts'

export const agentService: ServiceDefinition<typeof agentSettings, PrismaClient> = {
  name: 'agent',
  version: packageVersion(import.meta.url),
  port: 3001,
  settings: agentSettings,
  database: {
    schema: 'agent',
    migrations: fileURLToPath(new URL('../prisma/migrations', import.meta.url)),
    client: (adapter) => new PrismaClient({ adapter }),
  },
  async register(app, { config, db, nc, channels, log, onClose, metrics }) {
    // a paid job's final status carries its payment's outcome, published to admin's ledger
    let outcomes: PaymentOutcomes | undefined
    // and every final status (and a wait for approval) a webhook event, written in the same transaction
    let outbox: EventOutbox | undefined
    // and a credit-paid job's end what it keeps of its hold, reported to admin's ledger
    let credit: CreditUsageReports | undefined
    const jobs = jobCounter(metrics)
    const store = createJobStore(db, {
      paidJobFinished: (jobId) => outcomes?.published(jobId),
      creditJobFinished: (jobId) => credit?.published(jobId),
      eventsRecorded: (ids) => outbox?.send(...ids),
      statusChanged: (state) => jobs.inc({ state }),
    })
    outcomes = await startPaymentOutcomes({ nc, channels: channels.admin.payments, store, log })
    onClose(outcomes.stop)
    credit = await startCreditUsage({ nc, channels: channels.admin.credit, store, log })
    onClose(credit.stop)
    const prices = createPrices({
      modelPrices: config.AGENT_CREDIT_MODEL_PRICES,
      input: config.AGENT_CREDIT_INPUT_PRICE_PER_MTOK,
      output: config.AGENT_CREDIT_OUTPUT_PRICE_PER_MTOK,
      toolCall: config.AGENT_CREDIT_TOOL_CALL_PRICE,
    })
    const withdraw = createApprovalWithdrawal({
      nc,
      endpoint: channels.trading.approvalWithdraw,
      log,
      timeoutMs: config.AGENT_TOOL_TIMEOUT_MS,
    })
    outbox = await startEventOutbox({ nc, channels: channels.admin.events, databaseUrl: config.DATABASE_URL!, schema: 'agent', log })
    onClose(outbox.stop)
    const events = createJobEvents({ nc, channels: channels.agent, store, log, maxStreamsPerOwner: config.AGENT_MAX_STREAMS_PER_OWNER })
    // at shutdown, before the server waits for requests in flight: an open stream would hold it
    // until the client leaves; ended, clients reconnect with Last-Event-ID to another replica
    app.addHook('preClose', async () => events.closeAll())

    if (config.AGENT_ROLE !== 'api') {
      if (config.LLM_BASE_URL && !config.LLM_MODEL) throw new StartupError('LLM_MODEL is required with LLM_BASE_URL')
      const runner: Runner = config.LLM_BASE_URL
        ? createLlmRunner({
            baseUrl: config.LLM_BASE_URL,
            apiKey: config.LLM_API_KEY,
            model: config.LLM_MODEL!,
            maxSteps: config.LLM_MAX_STEPS,
            timeoutMs: config.LLM_TIMEOUT_MS,
          })
        : createPlanner()
      const tools = createTools({
        nc,
        channels,
        timeoutMs: config.AGENT_TOOL_TIMEOUT_MS,
        swapTimeoutMs: config.AGENT_SWAP_TIMEOUT_MS,
        approvalPollMs: config.APPROVAL_POLL_MS,
      })
      const workers = await startJobWorkers({
        nc,
        channels: channels.agent,
        store,
        events,
        tools,
        runner,
        withdraw,
        prices,
        log,
        settings: {
          concurrency: config.AGENT_WORKER_CONCURRENCY,
          ackWaitMs: config.AGENT_ACK_WAIT_MS,
          maxAttempts: config.AGENT_MAX_ATTEMPTS,
          maxRunMs: config.AGENT_JOB_MAX_RUN_MS,
          historyMessages: config.AGENT_HISTORY_MESSAGES,
          paymentMarginSeconds: config.AGENT_JOB_PAYMENT_MARGIN_SECONDS,
        },
      })
      onClose(workers.stop)
      await watchJobQueue(metrics, nc, channels.agent)
    }

    if (config.AGENT_ROLE !== 'worker') {
      const queue = await createJobQueue({ nc, channels: channels.agent, store, log })
      onClose(queue.stop)
      const cancelled = (jobId: string, owner: Owner, approvalId?: string) => {
        nc.publish(channels.agent.cancelled.subject, channels.agent.cancelled.message.encode({ jobId }))
        if (approvalId) void withdraw(owner, approvalId, 'the job was cancelled')
      }
      // paid requests sent again with their payment id; kept longer than the gateway's longest
      // PAYMENT_ID_TTL_SECONDS (24 h), so a repeat the gateway lets through always finds its job
      const idempotency = await createIdempotencyStore(config.DATABASE_URL!, { schema: 'agent', log })
      onClose(() => idempotency.close())
      onClose(startIdempotencyPurge(idempotency, log, 48 * 3600_000).stop)
      // a credit hold that reaches a route and starts no job is given back
      credit.install(app)
      const skills = skillList(config.AGENT_PUBLIC_URL, config.EXTERNAL_SKILLS)
      app.withTypeProvider<TypeBoxTypeProvider>().route({ ...agentApi.skills, handler: async () => ({ skills }) })
      const paymentsOf = createJobPaymentLookup({ nc, endpoint: channels.admin.paymentsOfJobs, log })
      const answers = createAnswers({ store, queue, events, cancelled, waitMs: config.AGENT_CHAT_WAIT_MS })
      await app.register(agentRoutes, {
        answers,
        events,
        idempotency,
        paymentsOf,
        paymentMarginSeconds: config.AGENT_JOB_PAYMENT_MARGIN_SECONDS,
      })
      await app.register(chatRoutes, { prefix: '/v1', answers })
      await app.register(responsesRoutes, { prefix: '/v1/responses', answers })
      await app.register(messagesRoutes, { prefix: '/v1/messages', answers })
    }
  },
}
