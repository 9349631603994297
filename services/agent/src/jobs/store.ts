// The agent's jobs, threads, messages, job events and job steps in Postgres (schema "agent").
import { randomBytes } from 'node:crypto'
import type {
  Approval,
  CreditUsage,
  CreditUsageDetail,
  Job as JobView,
  JobEvent,
  JobResult,
  Message as MessageView,
  Thread as ThreadView,
  WebhookEventType,
} from '@ats/contracts'
import { eventOwner, newEventId, NotFound, recordEvent } from '@ats/service-kit'
import { Prisma, type Job, type Message, type PrismaClient } from '../generated/prisma/client.ts'
import type { CreditHold } from '../credit/hold.ts'
import type { CountedStatus } from './metrics.ts'

/** The model of a job that names none (POST /agent/prompt): the deployment's agent, priced as /v1's ats-agent. */
export const defaultModel = 'ats-agent'

const newId = (prefix: string) => `${prefix}_${randomBytes(12).toString('base64url')}`

/** Who a job belongs to: a payer (their lower-case address) or, for /v1, an API key. */
export interface Owner {
  ownerId: string
  keyId?: string | undefined
  /** the wallet "my" refers to (the payer, or the key's bound wallet) */
  wallet?: string | undefined
}

/** Called after the commit of what they tell, not awaited; a publish that never happens is made by its sweep. */
export interface JobStoreHooks {
  /** a paid job reached its final status, stored with its payment's outcome: to publish the outcome */
  paidJobFinished?(jobId: string): void
  /** webhook events were recorded (the event outbox): to publish them at once */
  eventsRecorded?(ids: string[]): void
  /** a job paid by credit was finished, or its work counted (what it keeps of its hold): to publish its usage report */
  creditJobFinished?(jobId: string): void
  /** a job was created (pending) or finished: to count it (/metrics) */
  statusChanged?(status: CountedStatus): void
}

/** What the payment of a finished paid job comes to, stored in the same UPDATE as the final status. */
export type PaymentOutcomeRow = Pick<Job, 'id' | 'paymentReason' | 'updatedAt'> & {
  payment: string
  paymentOutcome: 'charge' | 'void'
  status: 'complete' | 'failed' | 'cancelled'
}

/** The reason a job cancelled before a worker started it voids its payment. */
export const cancelledBeforeStart = 'cancelled before it started'

export interface PromptInput {
  prompt: string
  threadId?: string | undefined
  context?: unknown
  /** earlier messages of the conversation (/v1), oldest first; only with a new thread */
  history?: Array<{ role: 'user' | 'assistant'; content: string }>
  /** the /v1 model asked for */
  model?: string
  /** system and developer messages (/v1) */
  instructions?: string | undefined
  /** paid jobs: the payment that bought it, `<payer>:<nonce>` lower-case (x-ats-payment) */
  payment?: string | undefined
  /** paid jobs: that payment's validBefore, unix seconds (x-ats-payment-valid-before); the job's deadline comes from it */
  paymentValidBefore?: number | null | undefined
  /** what a /v1 API keeps of its request to answer it again later (responses: metadata…), with the prompt message */
  apiRequest?: Record<string, unknown>
  /** paid by credit: the hold the gateway took for the job (x-ats-credit-*) */
  credit?: CreditHold | undefined
}

/** What a job paid by credit keeps of its hold, decided when it ends (or when its worker counted a cancelled run). */
export interface CreditCharge {
  amount: bigint
  usage: CreditUsageDetail
}

/** The reason a job cancelled while it ran but never counted by its worker keeps nothing of its hold. */
export const uncountedReason = 'cancelled while running; its worker stopped before counting the work, so nothing is kept'
/** Why a job cancelled while it ran keeps part of its hold. */
export const cancelledWhileRunning = 'cancelled while running: the work done until then'

const finished = new Set(['complete', 'failed', 'cancelled'])
export const isFinished = (status: string) => finished.has(status)

/** A job as its owner sees it; `full`: with its thread, prompt and outcome. */
export function jobView(job: Job, full = isFinished(job.status)): JobView {
  return {
    id: job.id,
    status: job.status,
    createdAt: job.createdAt.getTime(),
    ...(job.status === 'awaiting_approval' && job.approval
      ? { approval: job.approval as unknown as Approval, notice: job.approvalNotice ?? '' }
      : {}),
    ...(full
      ? {
          threadId: job.threadId,
          prompt: job.prompt,
          updatedAt: job.updatedAt.getTime(),
          ...(job.status === 'complete' && job.result ? { result: job.result as unknown as JobResult } : {}),
          ...(job.status === 'failed' && job.error ? { error: job.error } : {}),
        }
      : {}),
    // paid by credit: what was held, and once decided what was kept
    ...(job.creditHoldAmount === null
      ? {}
      : {
          credit: {
            held: String(job.creditHoldAmount),
            ...(job.creditCharged === null ? {} : { charged: String(job.creditCharged) }),
          },
        }),
  }
}

export function messageView(m: Message): MessageView {
  const metadata = (m.metadata ?? {}) as { jobId?: string }
  return {
    id: m.id,
    role: m.role,
    content: m.content,
    createdAt: m.createdAt.getTime(),
    ...(m.role === 'assistant' ? { toolCalls: m.toolCalls as string[] } : {}),
    metadata: metadata.jobId ? { jobId: metadata.jobId } : {},
  }
}

/**
 * Appends one event to a job's stream, in one statement: the row lock of the job's UPDATE numbers
 * events in commit order. `alongWith`: a statement the event tells of, run in the same one.
 */
async function appendEvent(
  t: Prisma.TransactionClient | PrismaClient,
  jobId: string,
  type: JobEvent['type'],
  data: JobEvent['data'],
  alongWith?: Prisma.Sql,
): Promise<JobEvent> {
  const [row] = await t.$queryRaw<Array<{ seq: number; created_at: Date }>>`
    WITH ${alongWith ? Prisma.sql`s AS (${alongWith}), ` : Prisma.empty}j AS (UPDATE jobs SET event_seq = event_seq + 1 WHERE id = ${jobId} RETURNING event_seq)
    INSERT INTO job_events (job_id, seq, type, data) SELECT ${jobId}, event_seq, ${type}, ${JSON.stringify(data)}::jsonb FROM j
    RETURNING seq, created_at`
  if (!row) throw new NotFound(`job ${jobId}`)
  return { jobId, seq: row.seq, type, at: row.created_at.getTime(), data }
}

/** A job row as Prisma reads it, for statements that return a whole job (RETURNING ${jobColumns}). */
const jobColumns = Prisma.sql`id, owner_id AS "ownerId", key_id AS "keyId", wallet, thread_id AS "threadId", status::text AS status, prompt, context,
  model, instructions, result, error, approval, approval_notice AS "approvalNotice", enqueued_at AS "enqueuedAt", attempts, worker_id AS "workerId",
  lease_until AS "leaseUntil", event_seq AS "eventSeq", payment, payment_valid_before AS "paymentValidBefore",
  payment_outcome AS "paymentOutcome", payment_reason AS "paymentReason",
  outcome_published_at AS "outcomePublishedAt", credit_wallet AS "creditWallet", credit_hold AS "creditHold",
  credit_hold_amount AS "creditHoldAmount", credit_charged AS "creditCharged", credit_outcome AS "creditOutcome",
  credit_reason AS "creditReason", credit_usage AS "creditUsage", credit_published_at AS "creditPublishedAt",
  created_at AS "createdAt", updated_at AS "updatedAt"`

/** What a job's webhook events need of it, returned by the statements that change its status. */
interface EventRow {
  id: string
  paid: boolean
  /** paid by credit: the end stores what it keeps of the hold (or its worker will count it) */
  credited: boolean
  owner_id: string
  key_id: string | null
  wallet: string | null
  prompt: string
  thread_id: string
  /** the approval the job asked for last, when it was not decided before the job went on (to withdraw) */
  approval_id: string | null
}
const eventColumns = Prisma.sql`id, payment IS NOT NULL AS paid, credit_hold IS NOT NULL AS credited, owner_id, key_id, wallet, prompt, thread_id, approval->>'id' AS approval_id`

type WebhookData = { status: string; result?: JobResult; error?: string; approval?: Approval; notice?: string }

/**
 * A job's webhook event. The owner is the key (/v1) with its bound wallet, or the payer's wallet
 * (paid jobs): nothing crosses owners.
 */
function jobWebhookEvent(
  type: WebhookEventType,
  job: Pick<EventRow, 'id' | 'key_id' | 'wallet' | 'owner_id' | 'prompt' | 'thread_id'>,
  data: WebhookData,
) {
  const owner = { keyId: job.key_id, wallet: job.wallet ?? (job.key_id ? null : job.owner_id) }
  return { type, owner: eventOwner(owner), data: { jobId: job.id, prompt: job.prompt, threadId: job.thread_id, ...data } }
}

/** A job ended by cancel or fail: its status event, and the approval it waited for, if any, to withdraw. */
export interface Ended {
  event: JobEvent
  approvalId?: string | undefined
  owner: Pick<Owner, 'ownerId' | 'keyId'>
}

const endedOf = (event: JobEvent, row: EventRow): Ended => ({
  event,
  approvalId: row.approval_id ?? undefined,
  owner: { ownerId: row.owner_id, keyId: row.key_id ?? undefined },
})

/** A thread's message, as a runner reads its history. */
export interface HistoryMessage {
  role: 'user' | 'assistant'
  content: string
}

export type ClaimOutcome =
  | { claimed: Job; event: JobEvent; history: HistoryMessage[] }
  /** finished, or not there (nothing to do) */
  | { finished: true }
  | { busyForMs: number }
  /** the job would be taken, but its payment's validBefore (unix seconds) is too close: it must not start */
  | { late: bigint }

/** A job a worker may take: pending, or running (or waiting) under a lease that expired or is this worker's own. */
const claimable = (workerId: string) =>
  Prisma.sql`(status = 'pending' OR (status IN ('running', 'awaiting_approval') AND (lease_until < now() OR worker_id = ${workerId})))`

export function createJobStore(db: PrismaClient, hooks: JobStoreHooks = {}) {
  /** The hooks of a job that ended (committed): its payment's or credit's outcome, its webhook event, its status. */
  const jobEnded = (jobId: string, row: EventRow, eventId: string, status: CountedStatus) => {
    if (row.paid) hooks.paidJobFinished?.(jobId)
    if (row.credited) hooks.creditJobFinished?.(jobId)
    hooks.eventsRecorded?.([eventId])
    hooks.statusChanged?.(status)
  }
  /**
   * A status change: `update` (UPDATE … RETURNING ${eventColumns}), its webhook event and its status
   * event, in one transaction; null when `update` changed nothing.
   */
  const changeStatus = (jobId: string, update: Prisma.Sql, type: WebhookEventType, data: WebhookData & JobEvent['data']) =>
    db.$transaction(async (t) => {
      const [row] = await t.$queryRaw<EventRow[]>(update)
      if (!row) return null
      const eventId = await recordEvent(t, jobWebhookEvent(type, row, data))
      return { row, eventId, event: await appendEvent(t, jobId, 'status', data) }
    })
  /** Cancel or fail (`update`), then the hooks; null when the job was not there to end. */
  async function endJob(
    jobId: string,
    update: Prisma.Sql,
    type: WebhookEventType,
    data: { status: 'cancelled' } | { status: 'failed'; error: string },
  ): Promise<Ended | null> {
    const changed = await changeStatus(jobId, update, type, data)
    if (!changed) return null
    jobEnded(jobId, changed.row, changed.eventId, data.status)
    return endedOf(changed.event, changed.row)
  }
  /** -> failed where `condition` holds: a failed paid job voids its payment, with the job's error as the reason. */
  const failWhere = (jobId: string, condition: Prisma.Sql, error: string) =>
    endJob(
      jobId,
      Prisma.sql`
        UPDATE jobs SET status = 'failed', error = ${error}, worker_id = NULL, lease_until = NULL, updated_at = now(),
          payment_outcome = CASE WHEN payment IS NULL THEN NULL ELSE 'void' END, payment_reason = CASE WHEN payment IS NULL THEN NULL ELSE ${error} END,
          credit_charged = CASE WHEN credit_hold IS NULL THEN NULL ELSE 0 END, credit_outcome = CASE WHEN credit_hold IS NULL THEN NULL ELSE 'failed' END,
          credit_reason = CASE WHEN credit_hold IS NULL THEN NULL ELSE ${error} END
        WHERE id = ${jobId} AND ${condition} RETURNING ${eventColumns}`,
      'job.failed',
      { status: 'failed', error },
    )
  /** The usage report of a finished credit-paid job, to publish; null when it has none yet (or none at all). */
  async function creditReport(jobId: string): Promise<CreditUsage | null> {
    const job = await db.job.findUnique({ where: { id: jobId } })
    if (!job?.creditHold || !job.creditWallet || job.creditCharged === null || !job.creditOutcome || !isFinished(job.status)) return null
    const usage = (job.creditUsage as CreditUsageDetail | null) ?? { inputTokens: 0, outputTokens: 0 }
    return {
      hold: job.creditHold,
      wallet: job.creditWallet,
      amount: String(job.creditCharged),
      usage: { model: job.model ?? defaultModel, ...usage },
      outcome: job.creditOutcome as CreditUsage['outcome'],
      ...(job.creditReason === null ? {} : { reason: job.creditReason.slice(0, 2000) }),
      at: job.updatedAt.getTime(),
    }
  }
  return {
    /**
     * The thread (new, or the owner's), the user message, the pending job and its first event, in
     * one statement (atomic, and one round trip); a thread that is not the owner's answers 404.
     * `history` (a /v1 conversation's earlier messages) goes into the new thread before the prompt.
     */
    async createPrompt(owner: Owner, input: PromptInput) {
      // no thread (another owner's, or none) inserts nothing
      const jobId = newId('job')
      const threadId = input.threadId ?? newId('thr')
      const thread = input.threadId
        ? Prisma.sql`UPDATE threads SET updated_at = now() WHERE id = ${threadId} AND owner_id = ${owner.ownerId} RETURNING id`
        : Prisma.sql`INSERT INTO threads (id, owner_id, updated_at) VALUES (${threadId}, ${owner.ownerId}, now()) RETURNING id`
      // one clock for the lot, a millisecond apart: the thread reads back in this order
      const at = Date.now()
      const history = input.history ?? []
      const metadata = { jobId, ...(input.apiRequest ? { apiRequest: input.apiRequest } : {}) }
      const messages = [...history, { role: 'user', content: input.prompt }].map((m, i) => ({
        id: newId('msg'),
        role: m.role,
        content: m.content,
        // the prompt, last, says which job it started
        metadata: i === history.length ? metadata : null,
        created_at: new Date(at - history.length + i).toISOString(),
      }))
      const pending: JobEvent['data'] = { status: 'pending' }
      const context = input.context === undefined || input.context === null ? null : JSON.stringify(input.context)
      const [row] = await db.$queryRaw<Array<{ created_at: Date }>>`
        WITH th AS (${thread}),
        j AS (
          INSERT INTO jobs (id, owner_id, payment, payment_valid_before, key_id, wallet, thread_id, prompt, model, instructions, context, event_seq, updated_at,
            credit_wallet, credit_hold, credit_hold_amount)
          SELECT ${jobId}, ${owner.ownerId}, ${input.payment ?? null}, ${input.paymentValidBefore ?? null}::bigint, ${owner.keyId ?? null}, ${owner.wallet ?? null}, th.id, ${input.prompt},
            ${input.model ?? null}, ${input.instructions ?? null}, ${context}::jsonb, 1, now(),
            ${input.credit?.wallet ?? null}, ${input.credit?.hold ?? null}, ${input.credit?.amount ?? null}::bigint FROM th
          RETURNING id, thread_id),
        m AS (
          INSERT INTO messages (id, thread_id, role, content, metadata, created_at)
          SELECT x.id, j.thread_id, x.role::"MessageRole", x.content, x.metadata, x.created_at
          FROM j, jsonb_to_recordset(${JSON.stringify(messages)}::jsonb) AS x(id text, role text, content text, metadata jsonb, created_at timestamptz))
        INSERT INTO job_events (job_id, seq, type, data) SELECT id, 1, 'status', ${JSON.stringify(pending)}::jsonb FROM j RETURNING created_at`
      if (!row) throw new NotFound(`thread ${threadId}`)
      hooks.statusChanged?.('pending')
      const event: JobEvent = { jobId, seq: 1, type: 'status', at: row.created_at.getTime(), data: pending }
      return { jobId, threadId, event }
    },

    markEnqueued: (jobIds: string[]) => db.job.updateMany({ where: { id: { in: jobIds } }, data: { enqueuedAt: new Date() } }),

    /** Pending jobs whose enqueue did not happen (NATS was down when they were made). */
    notEnqueued: (olderThan: Date, limit: number) =>
      db.job.findMany({
        where: { status: 'pending', enqueuedAt: null, createdAt: { lt: olderThan } },
        select: { id: true },
        take: limit,
        orderBy: { createdAt: 'asc' },
      }),

    getJob: (owner: Owner, id: string) => db.job.findFirst({ where: { id, ownerId: owner.ownerId } }),

    /** what createPrompt kept of a job's /v1 request (`apiRequest`), or null */
    async apiRequestOf(job: Pick<Job, 'id' | 'threadId'>): Promise<Record<string, unknown> | null> {
      const prompt = await db.message.findFirst({
        where: { threadId: job.threadId, role: 'user', metadata: { path: ['jobId'], equals: job.id } },
        select: { metadata: true },
      })
      return ((prompt?.metadata ?? null) as { apiRequest?: Record<string, unknown> } | null)?.apiRequest ?? null
    },

    /**
     * pending, running or awaiting_approval -> cancelled; null when the job is not the owner's or
     * already finished. A paid job cancelled while running (or waiting) is charged (work was done),
     * one cancelled before a worker started it is voided: decided from the status it had, in the
     * same statement; a credit-paid one keeps nothing of its hold before it started, else what its
     * worker counts (countCancelled).
     */
    cancel: (owner: Owner, id: string) =>
      endJob(
        id,
        Prisma.sql`
        UPDATE jobs SET status = 'cancelled', worker_id = NULL, lease_until = NULL, updated_at = now(),
          payment_outcome = CASE WHEN payment IS NULL THEN NULL WHEN status IN ('running', 'awaiting_approval') THEN 'charge' ELSE 'void' END,
          payment_reason = CASE WHEN payment IS NULL OR status IN ('running', 'awaiting_approval') THEN NULL ELSE ${cancelledBeforeStart} END,
          credit_charged = CASE WHEN credit_hold IS NULL OR status IN ('running', 'awaiting_approval') THEN NULL ELSE 0 END,
          credit_outcome = CASE WHEN credit_hold IS NULL OR status IN ('running', 'awaiting_approval') THEN NULL ELSE 'voided' END,
          credit_reason = CASE WHEN credit_hold IS NULL OR status IN ('running', 'awaiting_approval') THEN NULL ELSE ${cancelledBeforeStart} END
        WHERE id = ${id} AND owner_id = ${owner.ownerId} AND status IN ('pending', 'running', 'awaiting_approval') RETURNING ${eventColumns}`,
        'job.cancelled',
        { status: 'cancelled' },
      ),

    async thread(owner: Owner, id: string): Promise<ThreadView | null> {
      const thread = await db.thread.findFirst({
        where: { id, ownerId: owner.ownerId },
        include: { messages: { orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] } },
      })
      if (!thread) return null
      return {
        id: thread.id,
        createdAt: thread.createdAt.getTime(),
        updatedAt: thread.updatedAt.getTime(),
        messages: thread.messages.map(messageView),
      }
    },

    /** A key's jobs: made with the key (/v1), and the paid jobs of the wallet bound to it. */
    listForKey: (keyId: string, wallet: string | undefined, limit: number) =>
      db.job.findMany({
        where: { OR: [{ keyId }, ...(wallet ? [{ ownerId: wallet.toLowerCase(), keyId: null }] : [])] },
        orderBy: [{ createdAt: 'desc' }, { id: 'desc' }],
        take: limit,
      }),

    /**
     * Takes a job for a worker: pending, or running under a lease that expired (its worker died)
     * or is this worker's own. A job another live worker holds answers how long its lease lasts.
     * `history`: the thread's last `historyMessages` messages before the job's prompt, oldest first.
     * `startBy` (unix seconds): a paid job whose payment's validBefore is not after it is not taken
     * but answered `late`, for the worker to void (voidLate).
     */
    async claim(
      jobId: string,
      workerId: string,
      { leaseMs, historyMessages, startBy }: { leaseMs: number; historyMessages: number; startBy: number },
    ): Promise<ClaimOutcome> {
      // the claim, its status event, the job and its thread's recent messages, in one statement
      const running: JobEvent['data'] = { status: 'running' }
      const [row] = await db.$queryRaw<
        Array<Job & { eventSeq: number; eventAt: Date; thread: Array<HistoryMessage & { jobId: string | null }> }>
      >`
        WITH c AS (
          UPDATE jobs SET status = 'running', worker_id = ${workerId}, attempts = attempts + 1, updated_at = now(),
            lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8), event_seq = event_seq + 1
          WHERE id = ${jobId} AND ${claimable(workerId)} AND (payment_valid_before IS NULL OR payment_valid_before > ${startBy}::bigint)
          RETURNING ${jobColumns}),
        e AS (INSERT INTO job_events (job_id, seq, type, data) SELECT id, "eventSeq", 'status', ${JSON.stringify(running)}::jsonb FROM c RETURNING created_at)
        SELECT c.*, e.created_at AS "eventAt",
          (SELECT coalesce(json_agg(json_build_object('role', m.role, 'content', m.content, 'jobId', m.metadata->>'jobId') ORDER BY m.created_at, m.id), '[]'::json)
           FROM (SELECT role, content, metadata, created_at, id FROM messages WHERE thread_id = c."threadId" ORDER BY created_at DESC, id DESC LIMIT ${historyMessages + 20}) m) AS thread
        FROM c, e`
      if (!row) {
        // why not: finished, held by another worker, or free to take but too late for its payment
        const [job] = await db.$queryRaw<
          Array<{ status: string; leaseUntil: Date | null; free: boolean; paymentValidBefore: bigint | null }>
        >`
          SELECT status::text AS status, lease_until AS "leaseUntil", ${claimable(workerId)} AS free, payment_valid_before AS "paymentValidBefore"
          FROM jobs WHERE id = ${jobId}`
        if (!job || isFinished(job.status)) return { finished: true as const }
        if (job.free && job.paymentValidBefore !== null && job.paymentValidBefore <= BigInt(startBy))
          return { late: job.paymentValidBefore }
        return { busyForMs: Math.max(100, (job.leaseUntil?.getTime() ?? Date.now()) - Date.now()) }
      }
      const { eventAt, thread, ...claimed } = row
      const own = thread.findIndex((m) => m.jobId === jobId && m.role === 'user')
      const history = (own === -1 ? thread : thread.slice(0, own))
        .slice(-historyMessages)
        .map((m) => ({ role: m.role, content: m.content }))
      return { claimed, event: { jobId, seq: claimed.eventSeq, type: 'status', at: eventAt.getTime(), data: running }, history }
    },

    /** Extends a running (or waiting) job's lease; false when the job is no longer this worker's (cancelled). */
    renew: async (jobId: string, workerId: string, leaseMs: number): Promise<boolean> =>
      (await db.$executeRaw`
        UPDATE jobs SET lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
        WHERE id = ${jobId} AND worker_id = ${workerId} AND status IN ('running', 'awaiting_approval')`) > 0,

    /**
     * running -> awaiting_approval: a swap of the job waits for a person's decision. The approval,
     * the status event that carries it and the job.awaiting_approval webhook event, in one
     * transaction; null when the job is no longer this worker's.
     */
    async awaitApproval(jobId: string, workerId: string, approval: Approval, notice: string): Promise<JobEvent | null> {
      const changed = await changeStatus(
        jobId,
        Prisma.sql`
          UPDATE jobs SET status = 'awaiting_approval', approval = ${JSON.stringify(approval)}::jsonb, approval_notice = ${notice}, updated_at = now()
          WHERE id = ${jobId} AND worker_id = ${workerId} AND status = 'running' RETURNING ${eventColumns}`,
        'job.awaiting_approval',
        { status: 'awaiting_approval', approval, notice },
      )
      if (changed) hooks.eventsRecorded?.([changed.eventId])
      return changed?.event ?? null
    },

    /** awaiting_approval -> running: the approval was decided; null when the job is no longer this worker's. */
    async resume(jobId: string, workerId: string): Promise<JobEvent | null> {
      return db.$transaction(async (t) => {
        const resumed = await t.$executeRaw`
          UPDATE jobs SET status = 'running', approval = NULL, approval_notice = NULL, updated_at = now()
          WHERE id = ${jobId} AND worker_id = ${workerId} AND status = 'awaiting_approval'`
        return resumed === 0 ? null : appendEvent(t, jobId, 'status', { status: 'running' })
      })
    },

    /**
     * running -> complete, with the assistant's message; null when the job was cancelled meanwhile.
     * `approvalId`: an approval an earlier run of the job waited for and this one did not (a
     * re-run that planned otherwise), to withdraw.
     */
    async complete(job: Job, workerId: string, result: JobResult, credit?: CreditCharge): Promise<Ended | null> {
      // the status, the assistant's message, the thread's time, the job.completed webhook event
      // and the status event, in one statement (one round trip): all or nothing, as a transaction
      const data: JobEvent['data'] = { status: 'complete', result }
      const webhookId = newEventId()
      const webhook = jobWebhookEvent(
        'job.completed',
        { id: job.id, key_id: job.keyId, wallet: job.wallet, owner_id: job.ownerId, prompt: job.prompt, thread_id: job.threadId },
        data,
      )
      const [row] = await db.$queryRaw<Array<EventRow & { event_seq: number; event_at: Date }>>`
        WITH u AS (
          UPDATE jobs SET status = 'complete', result = ${JSON.stringify(result)}::jsonb, worker_id = NULL, lease_until = NULL, updated_at = now(),
            payment_outcome = CASE WHEN payment IS NULL THEN NULL ELSE 'charge' END, event_seq = event_seq + 1,
            credit_charged = CASE WHEN credit_hold IS NULL THEN NULL ELSE LEAST(${credit?.amount ?? 0n}::bigint, credit_hold_amount) END,
            credit_outcome = CASE WHEN credit_hold IS NULL THEN NULL ELSE 'complete' END,
            credit_usage = CASE WHEN credit_hold IS NULL THEN NULL ELSE ${JSON.stringify(credit?.usage ?? null)}::jsonb END
          WHERE id = ${job.id} AND status = 'running' AND worker_id = ${workerId} RETURNING ${eventColumns}, event_seq),
        m AS (
          INSERT INTO messages (id, thread_id, role, content, tool_calls, metadata)
          SELECT ${newId('msg')}, thread_id, 'assistant', ${result.text}, ${JSON.stringify(result.toolCalls)}::jsonb, ${JSON.stringify({ jobId: job.id })}::jsonb FROM u),
        th AS (UPDATE threads SET updated_at = now() WHERE id = (SELECT thread_id FROM u)),
        o AS (
          INSERT INTO event_outbox (id, type, owner, data)
          SELECT ${webhookId}, ${webhook.type}, ${JSON.stringify(webhook.owner)}::jsonb, ${JSON.stringify(webhook.data)}::jsonb FROM u),
        e AS (INSERT INTO job_events (job_id, seq, type, data) SELECT id, event_seq, 'status', ${JSON.stringify(data)}::jsonb FROM u RETURNING created_at)
        SELECT u.*, e.created_at AS event_at FROM u, e`
      if (!row) return null
      jobEnded(job.id, row, webhookId, 'complete')
      return endedOf({ jobId: job.id, seq: row.event_seq, type: 'status', at: row.event_at.getTime(), data }, row)
    },

    /** -> failed with a message for the client; by its worker, or by anyone when `workerId` is null. */
    fail: (jobId: string, workerId: string | null, error: string) =>
      failWhere(
        jobId,
        workerId
          ? Prisma.sql`status IN ('running', 'awaiting_approval') AND worker_id = ${workerId}`
          : Prisma.sql`status IN ('pending', 'running', 'awaiting_approval')`,
        error,
      ),

    /**
     * A paid job taken too late to settle its payment (claim answered `late`) -> failed, never run:
     * only while this worker could still take it and its payment's validBefore is not after `startBy`.
     */
    voidLate: (jobId: string, workerId: string, startBy: number, error: string): Promise<Ended | null> =>
      failWhere(jobId, Prisma.sql`${claimable(workerId)} AND payment_valid_before <= ${startBy}::bigint`, error),

    /** The outcome of a finished paid job, to publish; null when it has none (unpaid, or not finished). */
    async paymentOutcome(jobId: string): Promise<PaymentOutcomeRow | null> {
      const job = await db.job.findUnique({
        where: { id: jobId },
        select: { id: true, payment: true, paymentOutcome: true, paymentReason: true, status: true, updatedAt: true },
      })
      if (!job?.payment || !job.paymentOutcome || !isFinished(job.status)) return null
      return job as PaymentOutcomeRow
    },

    markOutcomePublished: (jobId: string) =>
      db.job.updateMany({ where: { id: jobId, outcomePublishedAt: null }, data: { outcomePublishedAt: new Date() } }),

    /** Finished paid jobs whose outcome is not yet in the stream (the process died before it published). */
    unpublishedOutcomes: (olderThan: Date, limit: number) =>
      db.job.findMany({
        where: { paymentOutcome: { not: null }, outcomePublishedAt: null, updatedAt: { lt: olderThan } },
        select: { id: true },
        orderBy: { updatedAt: 'asc' },
        take: limit,
      }),

    /**
     * A credit-paid job cancelled while it ran: what its worker counted of the work until then is
     * kept from the hold (at most the hold). Only once, and only for a job whose count is awaited.
     */
    async countCancelled(jobId: string, credit: CreditCharge): Promise<boolean> {
      const rows = await db.$queryRaw<Array<{ id: string }>>`
        UPDATE jobs SET credit_charged = LEAST(${credit.amount}::bigint, credit_hold_amount), credit_outcome = 'complete',
          credit_reason = ${cancelledWhileRunning}, credit_usage = ${JSON.stringify(credit.usage)}::jsonb
        WHERE id = ${jobId} AND status = 'cancelled' AND credit_hold IS NOT NULL AND credit_charged IS NULL RETURNING id`
      if (rows.length > 0) hooks.creditJobFinished?.(jobId)
      return rows.length > 0
    },

    creditReport,

    /**
     * A credit-paid job cancelled while it ran before `before`, whose worker never counted it:
     * nothing is kept (voided), and its report is answered; null when it is not such a job.
     */
    async creditUncounted(jobId: string, before: Date): Promise<CreditUsage | null> {
      await db.$executeRaw`
        UPDATE jobs SET credit_charged = 0, credit_outcome = 'voided', credit_reason = ${uncountedReason}
        WHERE id = ${jobId} AND status = 'cancelled' AND credit_hold IS NOT NULL AND credit_charged IS NULL AND updated_at < ${before}`
      return creditReport(jobId)
    },

    markCreditPublished: (jobId: string) =>
      db.job.updateMany({ where: { id: jobId, creditPublishedAt: null }, data: { creditPublishedAt: new Date() } }),

    /**
     * Credit-paid jobs whose report is not yet in the stream: finished before `olderThan` with
     * their charge decided, or cancelled while running before `uncountedBefore` and never counted.
     */
    unpublishedCredit: async (olderThan: Date, uncountedBefore: Date, limit: number) =>
      (
        await db.$queryRaw<Array<{ id: string }>>`
          SELECT id FROM jobs
          WHERE credit_hold IS NOT NULL AND credit_published_at IS NULL AND status IN ('complete', 'failed', 'cancelled')
            AND ((credit_charged IS NOT NULL AND updated_at < ${olderThan}) OR updated_at < ${uncountedBefore})
          ORDER BY updated_at LIMIT ${limit}`
      ).map((row) => row.id),

    /** Gives a running (or waiting) job back to the queue (its worker is stopping). */
    release: (jobId: string, workerId: string) =>
      db.$executeRaw`UPDATE jobs SET lease_until = now() WHERE id = ${jobId} AND worker_id = ${workerId} AND status IN ('running', 'awaiting_approval')`,

    stepsOf: (jobId: string) => db.jobStep.findMany({ where: { jobId }, orderBy: { step: 'asc' } }),
    /** Records that step `step` starts (again, for a re-run) and its `started` event, in one statement. */
    startStep: (jobId: string, step: number, tool: string, input: unknown) =>
      appendEvent(
        db,
        jobId,
        'step',
        { step, tool, phase: 'started', input },
        Prisma.sql`INSERT INTO job_steps (job_id, step, tool, input) VALUES (${jobId}, ${step}, ${tool}, ${JSON.stringify(input)}::jsonb)
          ON CONFLICT (job_id, step) DO UPDATE SET tool = EXCLUDED.tool, input = EXCLUDED.input, error = NULL, started_at = now(), finished_at = NULL`,
      ),
    /** Records how step `step` ended and its `finished` or `failed` event, in one statement. */
    finishStep: (jobId: string, step: number, tool: string, outcome: { output: unknown } | { error: string }) => {
      const failed = 'error' in outcome
      const set = failed
        ? Prisma.sql`error = ${outcome.error}`
        : Prisma.sql`output = ${JSON.stringify(outcome.output)}::jsonb, error = NULL`
      return appendEvent(
        db,
        jobId,
        'step',
        failed ? { step, tool, phase: 'failed', error: outcome.error } : { step, tool, phase: 'finished' },
        Prisma.sql`UPDATE job_steps SET ${set}, finished_at = now() WHERE job_id = ${jobId} AND step = ${step}`,
      )
    },

    /**
     * The events of many jobs, each after its own seq (job id → seq), in one statement: per job
     * found, its events in order and whether it has finished. One snapshot: a job finished has
     * its terminal event among them (what the event streams' shared catch-up relies on).
     */
    async eventsOfJobs(after: ReadonlyMap<string, number>): Promise<Map<string, { finished: boolean; events: JobEvent[] }>> {
      const rows = await db.$queryRaw<
        Array<{ job_id: string; finished: boolean; seq: number | null; type: string; data: unknown; created_at: Date }>
      >`
        SELECT w.job_id, j.status IN ('complete', 'failed', 'cancelled') AS finished, e.seq, e.type, e.data, e.created_at
        FROM unnest(${[...after.keys()]}::text[], ${[...after.values()]}::int[]) AS w(job_id, after_seq)
        JOIN jobs j ON j.id = w.job_id
        LEFT JOIN job_events e ON e.job_id = w.job_id AND e.seq > w.after_seq
        ORDER BY w.job_id, e.seq`
      const found = new Map<string, { finished: boolean; events: JobEvent[] }>()
      for (const r of rows) {
        const job = found.get(r.job_id) ?? { finished: r.finished, events: [] }
        found.set(r.job_id, job)
        if (r.seq !== null)
          job.events.push({
            jobId: r.job_id,
            seq: r.seq,
            type: r.type as JobEvent['type'],
            at: r.created_at.getTime(),
            data: r.data as JobEvent['data'],
          })
      }
      return found
    },
  }
}
export type JobStore = ReturnType<typeof createJobStore>
