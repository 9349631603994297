import { fileURLToPath } from 'node:url'
import {
  createIdempotencyStore,
  httpUrlSetting,
  isHttpUrl,
  startEventOutbox,
  startIdempotencyPurge,
  StartupError,
  type EventOutbox,
  type ServiceDefinition,
} from '@ats/service-kit'
import { Type } from 'typebox'
import { PrismaClient } from './generated/prisma/client.ts'
import { createJobEvents } from './jobs/events.ts'
import { jobCounter, watchJobQueue } from './jobs/metrics.ts'
import { createJobPaymentLookup, startPaymentOutcomes, type PaymentOutcomes } from './jobs/paymentOutcomes.ts'
import { createJobQueue } from './jobs/queue.ts'
import { createApprovalWithdrawal } from './jobs/approvals.ts'
import { createPrices, modelPricesProblem } from './credit/prices.ts'
import { startCreditUsage, type CreditUsageReports } from './credit/usageReports.ts'
import { createJobStore, type Owner } from './jobs/store.ts'
import { startJobWorkers } from './jobs/worker.ts'
import { agentRoutesPlugin } from './routes/agent.ts'
import { createAnswers } from './routes/answers.ts'
import { chatRoutesPlugin } from './routes/chat.ts'
import { messagesRoutesPlugin } from './routes/messages.ts'
import { portfolioRoutes } from './routes/portfolio.ts'
import { responsesRoutesPlugin } from './routes/responses.ts'
import { skillRoutes } from './routes/skills.ts'
import { createLlmRunner } from './runner/llm.ts'
import { createPlanner } from './runner/planner.ts'
import type { Runner } from './runner/runner.ts'
import { createTools } from './runner/tools.ts'
import { externalSkillsProblem, parseExternalSkills, skillList } from './skills.ts'

const ms = (description: string, defaultMs: number, minimum = 100) => Type.Integer({ minimum, default: defaultMs, description })

const settings = {
  EXTERNAL_SKILLS: Type.Optional(
    Type.Refine(
      Type.String({ description: 'external skills, a JSON array of {"name", "url"} objects' }),
      (raw) => externalSkillsProblem(raw) === undefined,
      (raw) => externalSkillsProblem(raw) ?? 'not valid',
    ),
  ),
  AGENT_PUBLIC_URL: Type.Refine(
    Type.String({ default: '', description: 'base URL of the public API, put before built-in skill paths; unset: relative paths' }),
    (raw) => raw === '' || isHttpUrl(raw),
    () => 'must be an absolute http(s) URL',
  ),
  AGENT_ROLE: Type.Union([Type.Literal('all'), Type.Literal('api'), Type.Literal('worker')], {
    default: 'all',
    description: 'all: routes and job workers in one process; api: routes only; worker: job workers only (scale them apart)',
  }),
  AGENT_WORKER_CONCURRENCY: Type.Integer({ minimum: 1, maximum: 256, default: 16, description: 'jobs one worker process runs at once' }),
  AGENT_ACK_WAIT_MS: ms('a job whose worker stops (killed, partitioned) is given to another worker after this', 30_000, 500),
  AGENT_MAX_ATTEMPTS: Type.Integer({
    minimum: 1,
    maximum: 20,
    default: 3,
    description: 'runs a job gets when its workers keep dying, before it fails',
  }),
  AGENT_JOB_MAX_RUN_MS: ms('a run longer than this is stopped and the job fails', 120_000, 1_000),
  AGENT_TOOL_TIMEOUT_MS: ms('how long a tool waits for trading, market-data or automation', 10_000),
  AGENT_SWAP_TIMEOUT_MS: ms('how long the swap tool waits for a swap to be mined', 90_000, 1_000),
  AGENT_JOB_PAYMENT_MARGIN_SECONDS: Type.Integer({
    minimum: 1,
    maximum: 3600,
    default: 60,
    description:
      "a paid job must end this long before its payment's validBefore, so that the payment can still be settled after it: a job taken from the queue later is not run, a wait for approval expires then at the latest, and a job still running or waiting then is stopped; each is failed with the reason and its payment voided (keep it below the gateway's JOB_PAYMENT_MIN_VALIDITY_SECONDS)",
  }),
  APPROVAL_POLL_MS: ms("how often a job whose swap waits for a person's approval asks trading whether it was decided", 1_000),
  AGENT_CHAT_WAIT_MS: ms(
    "how long a /v1 completion waits for its job; then the job is cancelled and the answer is 504 (keep it under the gateway's CHAT_TIMEOUT_MS)",
    150_000,
    1_000,
  ),
  AGENT_MAX_STREAMS_PER_OWNER: Type.Integer({
    minimum: 1,
    maximum: 1000,
    default: 5,
    description:
      'event streams (GET /agent/job/:id/events, /v1 stream: true) one payer or API key may hold open at once, per agent API process; one more is 429',
  }),
  AGENT_HISTORY_MESSAGES: Type.Integer({
    minimum: 0,
    maximum: 200,
    default: 20,
    description: 'earlier messages of the thread given to the runner',
  }),
  LLM_BASE_URL: Type.Optional(
    httpUrlSetting({ description: 'an OpenAI-compatible chat-completions API (…/v1); unset: the offline planner' }),
  ),
  LLM_API_KEY: Type.Optional(Type.String({ minLength: 1, secret: true, description: 'sent as Authorization: Bearer to LLM_BASE_URL' })),
  LLM_MODEL: Type.Optional(Type.String({ minLength: 1, description: 'the model name (required with LLM_BASE_URL)' })),
  LLM_MAX_STEPS: Type.Integer({ minimum: 1, maximum: 50, default: 8, description: 'model turns per job before it fails' }),
  LLM_TIMEOUT_MS: ms('one completion, retries included', 60_000, 1_000),
  AGENT_CREDIT_MODEL_PRICES: Type.Refine(
    Type.String({
      default: '{}',
      description:
        'work paid by prepaid credit: prices per /v1 model (ats-agent also prices POST /agent/prompt jobs), a JSON object {"<model>": {"input": n, "output": n}} in USDC base units per 1M tokens (3000000 = $3 per 1M tokens); a model not listed costs the two defaults below',
    }),
    (raw) => modelPricesProblem(raw) === undefined,
    (raw) => modelPricesProblem(raw) ?? 'not valid',
  ),
  AGENT_CREDIT_INPUT_PRICE_PER_MTOK: Type.Integer({
    minimum: 0,
    maximum: 1e15,
    default: 3_000_000,
    description: 'work paid by credit: USDC base units per 1M input tokens, for a model AGENT_CREDIT_MODEL_PRICES does not list ($3)',
  }),
  AGENT_CREDIT_OUTPUT_PRICE_PER_MTOK: Type.Integer({
    minimum: 0,
    maximum: 1e15,
    default: 15_000_000,
    description: 'work paid by credit: USDC base units per 1M output tokens, for a model AGENT_CREDIT_MODEL_PRICES does not list ($15)',
  }),
  AGENT_CREDIT_TOOL_CALL_PRICE: Type.Integer({
    minimum: 0,
    maximum: 1e15,
    default: 1_000,
    description: 'work paid by credit: USDC base units per tool call an agent job or /v1 completion makes ($0.001)',
  }),
}

export const agentService: ServiceDefinition<typeof settings, PrismaClient> = {
  name: 'agent',
  version: '0.2.0',
  port: 3001,
  settings,
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
      let runner: Runner = createPlanner()
      if (config.LLM_BASE_URL) {
        runner = createLlmRunner({
          baseUrl: config.LLM_BASE_URL,
          apiKey: config.LLM_API_KEY,
          model: config.LLM_MODEL!,
          maxSteps: config.LLM_MAX_STEPS,
          timeoutMs: config.LLM_TIMEOUT_MS,
        })
      }
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
      const skills = skillList(config.AGENT_PUBLIC_URL, parseExternalSkills(config.EXTERNAL_SKILLS))
      await app.register(skillRoutes, { skills })
      const paymentsOf = createJobPaymentLookup({ nc, endpoint: channels.admin.paymentsOfJobs, log })
      await app.register(agentRoutesPlugin, {
        store,
        queue,
        events,
        cancelled,
        idempotency,
        paymentsOf,
        paymentMarginSeconds: config.AGENT_JOB_PAYMENT_MARGIN_SECONDS,
      })
      await app.register(portfolioRoutes, { store, paymentsOf })
      const answers = createAnswers({ store, queue, events, cancelled, waitMs: config.AGENT_CHAT_WAIT_MS })
      await app.register(chatRoutesPlugin, { prefix: '/v1', answers })
      await app.register(responsesRoutesPlugin, { prefix: '/v1/responses', answers })
      await app.register(messagesRoutesPlugin, { prefix: '/v1/messages', answers })
    }
  },
}
