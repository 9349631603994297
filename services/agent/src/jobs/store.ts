// The agent's jobs, threads, messages, job events and job steps in Postgres (schema "agent").
import { randomBytes } from 'node:crypto'
import type { Approval, Job as JobView, JobEvent, JobResult, Message as MessageView, Thread as ThreadView, WebhookEventType } from '@ats/contracts'
import { NotFound, recordEvent } from '@ats/service-kit'
import { Prisma, type Job, type Message, type PrismaClient } from '../generated/prisma/client.ts'

const newId = (prefix: string) => `${prefix}_${randomBytes(12).toString('base64url')}`
type Tx = Prisma.TransactionClient

/** Who a job belongs to: a payer (their lower-case address) or, for /v1, an API key. */
export interface Owner {
  ownerId: string
  keyId?: string | undefined
  /** the wallet "my" refers to (the payer, or the key's bound wallet) */
  wallet?: string | undefined
}

export interface JobStoreHooks {
  /**
   * A paid job reached its final status (the outcome for its payment is stored with it): called
   * after the commit, to publish the outcome. Not awaited by the store; a publish that never
   * happens is made by the sweep (`unpublishedOutcomes`).
   */
  paidJobFinished?(jobId: string): void
  /**
   * Webhook events were recorded in a committed transaction (the event outbox): called after the
   * commit, to publish them at once. A publish that never happens is made by the outbox's sweep.
   */
  eventsRecorded?(ids: string[]): void
}

/** What the payment of a finished paid job comes to, stored in the same UPDATE as the final status. */
export interface PaymentOutcomeRow {
  id: string
  payment: string
  paymentOutcome: 'charge' | 'void'
  paymentReason: string | null
  status: 'complete' | 'failed' | 'cancelled'
  updatedAt: Date
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
  /** what a /v1 API keeps of its request to answer it again later (responses: metadata…), with the prompt message */
  apiRequest?: Record<string, unknown>
}

const finished = new Set(['complete', 'failed', 'cancelled'])
export const isFinished = (status: string) => finished.has(status)

export function jobView(job: Job, full = isFinished(job.status)): JobView {
  const short = {
    id: job.id,
    status: job.status,
    createdAt: job.createdAt.getTime(),
    ...(job.status === 'awaiting_approval' && job.approval ? { approval: job.approval as unknown as Approval, notice: job.approvalNotice ?? '' } : {}),
  }
  if (!full) return short
  return {
    ...short,
    threadId: job.threadId,
    prompt: job.prompt,
    updatedAt: job.updatedAt.getTime(),
    ...(job.status === 'complete' && job.result ? { result: job.result as unknown as JobResult } : {}),
    ...(job.status === 'failed' && job.error ? { error: job.error } : {}),
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

/** Appends one event to a job's stream; the row lock on the job numbers events in commit order. */
async function appendEvent(t: Tx, jobId: string, type: JobEvent['type'], data: JobEvent['data']): Promise<JobEvent> {
  const [row0] = await t.$queryRaw<Array<{ event_seq: number }>>`
    UPDATE jobs SET event_seq = event_seq + 1 WHERE id = ${jobId} RETURNING event_seq`
  const seq = row0!.event_seq
  const row = await t.jobEvent.create({ data: { jobId, seq, type, data: data as Prisma.InputJsonValue } })
  return { jobId, seq, type, at: row.createdAt.getTime(), data }
}

/** What a job's webhook events need of it, returned by the statements that change its status. */
interface EventRow {
  id: string
  paid: boolean
  owner_id: string
  key_id: string | null
  wallet: string | null
  prompt: string
  thread_id: string
  /** the approval the job asked for last, when it was not decided before the job went on (to withdraw) */
  approval_id: string | null
}
const eventColumns = Prisma.sql`id, payment IS NOT NULL AS paid, owner_id, key_id, wallet, prompt, thread_id, approval->>'id' AS approval_id`

/**
 * Records a job's webhook event in the transaction of its status change. The owner is the key
 * (/v1) with its bound wallet, or the payer's wallet (paid jobs): nothing crosses owners.
 */
function recordJobEvent(t: Tx, type: WebhookEventType, job: EventRow, data: { status: string; result?: JobResult; error?: string; approval?: Approval; notice?: string }) {
  return recordEvent(t, {
    type,
    owner: { keyId: job.key_id, wallet: job.wallet ?? (job.key_id ? null : job.owner_id) },
    data: { jobId: job.id, prompt: job.prompt, threadId: job.thread_id, ...data },
  })
}

/** A job ended by cancel or fail: its status event, and the approval it waited for, if any, to withdraw. */
export interface Ended {
  event: JobEvent
  approvalId?: string | undefined
  owner: Pick<Owner, 'ownerId' | 'keyId'>
}

export type ClaimOutcome = { claimed: Job; event: JobEvent } | { finished: true } | { busyForMs: number } | { missing: true }

export function createJobStore(db: PrismaClient, hooks: JobStoreHooks = {}) {
  /** after the commit of a final status: paid jobs have an outcome to publish */
  const outcomeStored = (rows: Array<{ paid: boolean }>, jobId: string) => {
    if (rows[0]?.paid) hooks.paidJobFinished?.(jobId)
  }
  const recorded = (ids: string[]) => {
    if (ids.length > 0) hooks.eventsRecorded?.(ids)
  }
  return {
    /**
     * The thread (new, or the owner's), the user message and the pending job, in one transaction.
     * `history` (a /v1 conversation's earlier messages) goes into the new thread before the prompt.
     */
    async createPrompt(owner: Owner, input: PromptInput) {
      return db.$transaction(async (t) => {
        let threadId = input.threadId
        if (threadId) {
          const thread = await t.thread.findFirst({ where: { id: threadId, ownerId: owner.ownerId }, select: { id: true } })
          if (!thread) throw new NotFound(`thread ${threadId}`)
          await t.thread.update({ where: { id: threadId }, data: { updatedAt: new Date() } })
        } else {
          threadId = newId('thr')
          await t.thread.create({ data: { id: threadId, ownerId: owner.ownerId } })
        }
        const jobId = newId('job')
        await t.job.create({
          data: {
            id: jobId,
            ownerId: owner.ownerId,
            payment: input.payment ?? null,
            keyId: owner.keyId ?? null,
            wallet: owner.wallet ?? null,
            threadId,
            prompt: input.prompt,
            model: input.model ?? null,
            instructions: input.instructions ?? null,
            ...(input.context === undefined ? {} : { context: input.context as Prisma.InputJsonValue }),
          },
        })
        // one clock for the lot, a millisecond apart: the thread reads back in this order
        const at = Date.now()
        const history = input.history ?? []
        if (history.length > 0) {
          await t.message.createMany({
            data: history.map((m, i) => ({ id: newId('msg'), threadId, role: m.role, content: m.content, createdAt: new Date(at - history.length + i) })),
          })
        }
        const metadata = { jobId, ...(input.apiRequest ? { apiRequest: input.apiRequest as Prisma.InputJsonObject } : {}) }
        await t.message.create({ data: { id: newId('msg'), threadId, role: 'user', content: input.prompt, metadata, createdAt: new Date(at) } })
        const event = await appendEvent(t, jobId, 'status', { status: 'pending' })
        return { jobId, threadId, event }
      })
    },

    markEnqueued: (jobIds: string[]) => db.job.updateMany({ where: { id: { in: jobIds } }, data: { enqueuedAt: new Date() } }),

    /** Pending jobs whose enqueue did not happen (NATS was down when they were made). */
    notEnqueued: (olderThan: Date, limit: number) =>
      db.job.findMany({ where: { status: 'pending', enqueuedAt: null, createdAt: { lt: olderThan } }, select: { id: true }, take: limit, orderBy: { createdAt: 'asc' } }),

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
     * already finished. `approvalId`: the approval a waiting job asked for, to withdraw.
     */
    async cancel(owner: Owner, id: string): Promise<Ended | null> {
      // a paid job cancelled while running (or waiting) is charged (work was done), one cancelled
      // before a worker started it is voided: decided from the status it had, in the same statement;
      // `approval` is kept from a wait that was not decided, so that the caller withdraws it
      const { rows, event, eventId } = await db.$transaction(async (t) => {
        const rows = await t.$queryRaw<EventRow[]>`
          UPDATE jobs SET status = 'cancelled', worker_id = NULL, lease_until = NULL, updated_at = now(),
            payment_outcome = CASE WHEN payment IS NULL THEN NULL WHEN status IN ('running', 'awaiting_approval') THEN 'charge' ELSE 'void' END,
            payment_reason = CASE WHEN payment IS NULL OR status IN ('running', 'awaiting_approval') THEN NULL ELSE ${cancelledBeforeStart} END
          WHERE id = ${id} AND owner_id = ${owner.ownerId} AND status IN ('pending', 'running', 'awaiting_approval') RETURNING ${eventColumns}`
        if (rows.length === 0) return { rows, event: null, eventId: null }
        const eventId = await recordJobEvent(t, 'job.cancelled', rows[0]!, { status: 'cancelled' })
        return { rows, event: await appendEvent(t, id, 'status', { status: 'cancelled' }), eventId }
      })
      outcomeStored(rows, id)
      if (eventId) recorded([eventId])
      const row = rows[0]
      return event && row ? { event, approvalId: row.approval_id ?? undefined, owner: { ownerId: row.owner_id, keyId: row.key_id ?? undefined } } : null
    },

    async thread(owner: Owner, id: string): Promise<ThreadView | null> {
      const thread = await db.thread.findFirst({
        where: { id, ownerId: owner.ownerId },
        include: { messages: { orderBy: [{ createdAt: 'asc' }, { id: 'asc' }] } },
      })
      if (!thread) return null
      return { id: thread.id, createdAt: thread.createdAt.getTime(), updatedAt: thread.updatedAt.getTime(), messages: thread.messages.map(messageView) }
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
     */
    async claim(jobId: string, workerId: string, leaseMs: number): Promise<ClaimOutcome> {
      return db.$transaction(async (t) => {
        const rows = await t.$queryRaw<Job[]>`
          UPDATE jobs SET status = 'running', worker_id = ${workerId}, attempts = attempts + 1, updated_at = now(),
            lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
          WHERE id = ${jobId} AND (status = 'pending' OR (status IN ('running', 'awaiting_approval') AND (lease_until < now() OR worker_id = ${workerId})))
          RETURNING id`
        if (rows.length === 0) {
          const job = await t.job.findUnique({ where: { id: jobId }, select: { status: true, leaseUntil: true } })
          if (!job) return { missing: true as const }
          if (isFinished(job.status)) return { finished: true as const }
          return { busyForMs: Math.max(100, (job.leaseUntil?.getTime() ?? Date.now()) - Date.now()) }
        }
        const event = await appendEvent(t, jobId, 'status', { status: 'running' })
        const claimed = await t.job.findUniqueOrThrow({ where: { id: jobId } })
        return { claimed, event }
      })
    },

    /** Extends a running (or waiting) job's lease; false when the job is no longer this worker's (cancelled). */
    async renew(jobId: string, workerId: string, leaseMs: number): Promise<boolean> {
      const rows = await db.$queryRaw<Array<{ id: string }>>`
        UPDATE jobs SET lease_until = now() + make_interval(secs => ${leaseMs / 1000}::float8)
        WHERE id = ${jobId} AND worker_id = ${workerId} AND status IN ('running', 'awaiting_approval') RETURNING id`
      return rows.length > 0
    },

    /**
     * running -> awaiting_approval: a swap of the job waits for a person's decision. The approval,
     * the status event that carries it and the job.awaiting_approval webhook event, in one
     * transaction; null when the job is no longer this worker's.
     */
    async awaitApproval(jobId: string, workerId: string, approval: Approval, notice: string): Promise<JobEvent | null> {
      const { event, eventId } = await db.$transaction(async (t) => {
        const rows = await t.$queryRaw<EventRow[]>`
          UPDATE jobs SET status = 'awaiting_approval', approval = ${JSON.stringify(approval)}::jsonb, approval_notice = ${notice}, updated_at = now()
          WHERE id = ${jobId} AND worker_id = ${workerId} AND status = 'running' RETURNING ${eventColumns}`
        if (rows.length === 0) return { event: null, eventId: null }
        const eventId = await recordJobEvent(t, 'job.awaiting_approval', rows[0]!, { status: 'awaiting_approval', approval, notice })
        return { event: await appendEvent(t, jobId, 'status', { status: 'awaiting_approval', approval, notice }), eventId }
      })
      if (eventId) recorded([eventId])
      return event
    },

    /** awaiting_approval -> running: the approval was decided; null when the job is no longer this worker's. */
    async resume(jobId: string, workerId: string): Promise<JobEvent | null> {
      return db.$transaction(async (t) => {
        const rows = await t.$queryRaw<Array<{ id: string }>>`
          UPDATE jobs SET status = 'running', approval = NULL, approval_notice = NULL, updated_at = now()
          WHERE id = ${jobId} AND worker_id = ${workerId} AND status = 'awaiting_approval' RETURNING id`
        if (rows.length === 0) return null
        return appendEvent(t, jobId, 'status', { status: 'running' })
      })
    },

    /** The thread's messages before this job's prompt, oldest first: the runner's context. */
    async history(threadId: string, jobId: string, limit: number) {
      const messages = await db.message.findMany({ where: { threadId }, orderBy: [{ createdAt: 'desc' }, { id: 'desc' }], take: limit + 20 })
      const ordered = messages.reverse()
      const own = ordered.findIndex((m) => (m.metadata as { jobId?: string } | null)?.jobId === jobId && m.role === 'user')
      return (own === -1 ? ordered : ordered.slice(0, own)).slice(-limit).map((m) => ({ role: m.role, content: m.content }))
    },

    /**
     * running -> complete, with the assistant's message; null when the job was cancelled meanwhile.
     * `approvalId`: an approval an earlier run of the job waited for and this one did not (a
     * re-run that planned otherwise), to withdraw.
     */
    async complete(job: Job, workerId: string, result: JobResult): Promise<Ended | null> {
      const { rows, event, eventId } = await db.$transaction(async (t) => {
        const rows = await t.$queryRaw<EventRow[]>`
          UPDATE jobs SET status = 'complete', result = ${JSON.stringify(result)}::jsonb, worker_id = NULL, lease_until = NULL, updated_at = now(),
            payment_outcome = CASE WHEN payment IS NULL THEN NULL ELSE 'charge' END
          WHERE id = ${job.id} AND status = 'running' AND worker_id = ${workerId} RETURNING ${eventColumns}`
        if (rows.length === 0) return { rows, event: null, eventId: null }
        const eventId = await recordJobEvent(t, 'job.completed', rows[0]!, { status: 'complete', result })
        await t.message.create({
          data: { id: newId('msg'), threadId: job.threadId, role: 'assistant', content: result.text, toolCalls: result.toolCalls, metadata: { jobId: job.id } },
        })
        await t.thread.update({ where: { id: job.threadId }, data: { updatedAt: new Date() } })
        return { rows, event: await appendEvent(t, job.id, 'status', { status: 'complete', result }), eventId }
      })
      outcomeStored(rows, job.id)
      if (eventId) recorded([eventId])
      const row = rows[0]
      return event && row ? { event, approvalId: row.approval_id ?? undefined, owner: { ownerId: row.owner_id, keyId: row.key_id ?? undefined } } : null
    },

    /**
     * -> failed with a message for the client; by its worker, or by anyone when `workerId` is null.
     * `approvalId`: the approval a waiting job asked for, to withdraw.
     */
    async fail(jobId: string, workerId: string | null, error: string): Promise<Ended | null> {
      // a failed paid job voids its payment, with the job's error as the reason
      const { rows, event, eventId } = await db.$transaction(async (t) => {
        const rows = workerId
          ? await t.$queryRaw<EventRow[]>`
              UPDATE jobs SET status = 'failed', error = ${error}, worker_id = NULL, lease_until = NULL, updated_at = now(),
                payment_outcome = CASE WHEN payment IS NULL THEN NULL ELSE 'void' END, payment_reason = CASE WHEN payment IS NULL THEN NULL ELSE ${error} END
              WHERE id = ${jobId} AND status IN ('running', 'awaiting_approval') AND worker_id = ${workerId} RETURNING ${eventColumns}`
          : await t.$queryRaw<EventRow[]>`
              UPDATE jobs SET status = 'failed', error = ${error}, worker_id = NULL, lease_until = NULL, updated_at = now(),
                payment_outcome = CASE WHEN payment IS NULL THEN NULL ELSE 'void' END, payment_reason = CASE WHEN payment IS NULL THEN NULL ELSE ${error} END
              WHERE id = ${jobId} AND status IN ('pending', 'running', 'awaiting_approval') RETURNING ${eventColumns}`
        if (rows.length === 0) return { rows, event: null, eventId: null }
        const eventId = await recordJobEvent(t, 'job.failed', rows[0]!, { status: 'failed', error })
        return { rows, event: await appendEvent(t, jobId, 'status', { status: 'failed', error }), eventId }
      })
      outcomeStored(rows, jobId)
      if (eventId) recorded([eventId])
      const row = rows[0]
      return event && row ? { event, approvalId: row.approval_id ?? undefined, owner: { ownerId: row.owner_id, keyId: row.key_id ?? undefined } } : null
    },

    /** The outcome of a finished paid job, to publish; null when it has none (unpaid, or not finished). */
    async paymentOutcome(jobId: string): Promise<PaymentOutcomeRow | null> {
      const job = await db.job.findUnique({
        where: { id: jobId },
        select: { id: true, payment: true, paymentOutcome: true, paymentReason: true, status: true, updatedAt: true },
      })
      if (!job?.payment || !job.paymentOutcome || !isFinished(job.status)) return null
      return job as PaymentOutcomeRow
    },

    markOutcomePublished: (jobId: string) => db.job.updateMany({ where: { id: jobId, outcomePublishedAt: null }, data: { outcomePublishedAt: new Date() } }),

    /** Finished paid jobs whose outcome is not yet in the stream (the process died before it published). */
    unpublishedOutcomes: (olderThan: Date, limit: number) =>
      db.job.findMany({
        where: { paymentOutcome: { not: null }, outcomePublishedAt: null, updatedAt: { lt: olderThan } },
        select: { id: true },
        orderBy: { updatedAt: 'asc' },
        take: limit,
      }),

    /** Gives a running (or waiting) job back to the queue (its worker is stopping). */
    release: (jobId: string, workerId: string) =>
      db.$executeRaw`UPDATE jobs SET lease_until = now() WHERE id = ${jobId} AND worker_id = ${workerId} AND status IN ('running', 'awaiting_approval')`,

    appendStepEvent: (jobId: string, data: JobEvent['data']) => db.$transaction((t) => appendEvent(t, jobId, 'step', data)),

    async eventsAfter(jobId: string, seq: number): Promise<JobEvent[]> {
      const rows = await db.jobEvent.findMany({ where: { jobId, seq: { gt: seq } }, orderBy: { seq: 'asc' } })
      return rows.map((r) => ({ jobId, seq: r.seq, type: r.type as JobEvent['type'], at: r.createdAt.getTime(), data: r.data as JobEvent['data'] }))
    },

    /** whether the job has reached a final status (what ends its event streams) */
    async hasFinished(jobId: string): Promise<boolean> {
      const job = await db.job.findUnique({ where: { id: jobId }, select: { status: true } })
      return job !== null && finished.has(job.status)
    },

    stepsOf: (jobId: string) => db.jobStep.findMany({ where: { jobId }, orderBy: { step: 'asc' } }),
    startStep: (jobId: string, step: number, tool: string, input: unknown) =>
      db.jobStep.upsert({
        where: { jobId_step: { jobId, step } },
        create: { jobId, step, tool, input: input as Prisma.InputJsonValue },
        update: { tool, input: input as Prisma.InputJsonValue, output: undefined, error: null, startedAt: new Date(), finishedAt: null },
      }),
    finishStep: (jobId: string, step: number, outcome: { output: unknown } | { error: string }) =>
      db.jobStep.update({
        where: { jobId_step: { jobId, step } },
        data: 'error' in outcome ? { error: outcome.error, finishedAt: new Date() } : { output: outcome.output as Prisma.InputJsonValue, error: null, finishedAt: new Date() },
      }),
  }
}
export type JobStore = ReturnType<typeof createJobStore>
