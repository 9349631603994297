// Webhook events, written in the transaction of the state change that causes them (a per-schema
// outbox the kit keeps, `<schema>.event_outbox`; outbox.ts says why none is lost), then published
// to the events stream for admin to deliver (docs/webhooks.md), where its unique (subscription,
// event) makes a repeat harmless.
import { randomBytes } from 'node:crypto'
import type { DomainEvent, EventChannels, EventOwner, WebhookEventType } from '@ats/contracts'
import type { NatsConnection } from 'nats'
import pg from 'pg'
import { ensureStream, publishTraced } from './jetstream.ts'
import type { Logger } from './logger.ts'
import { ensureKitTables, quoteIdent } from './migrator.ts'
import { startOutbox } from './outbox.ts'

/** What a state change announces; `owner` decides whose subscriptions get it (nothing crosses owners). */
export interface EventToRecord {
  type: WebhookEventType
  owner: { keyId?: string | null | undefined; wallet?: string | null | undefined }
  data: Record<string, unknown>
}

/** Any transaction client (Prisma's `$transaction` callback argument, or Prisma itself outside one). */
export interface RawExecutor {
  $executeRawUnsafe(query: string, ...values: unknown[]): Promise<number>
}

export const newEventId = () => `evt_${randomBytes(12).toString('base64url')}`

/** The owner as the event carries it: a key id and/or a lower-case wallet, nothing empty. */
export function eventOwner(owner: EventToRecord['owner']): EventOwner {
  return {
    ...(owner.keyId ? { keyId: owner.keyId } : {}),
    ...(owner.wallet && /^0x[0-9a-fA-F]{40}$/.test(owner.wallet) ? { wallet: owner.wallet.toLowerCase() } : {}),
  }
}

/**
 * Writes one event into the service's outbox inside the caller's transaction (the schema's
 * search path: the table is `event_outbox` of the service's own schema) and returns its id.
 * Hand the id to the outbox's `send` after the commit to publish it at once.
 */
export async function recordEvent(t: RawExecutor, event: EventToRecord): Promise<string> {
  const id = newEventId()
  await t.$executeRawUnsafe(
    'INSERT INTO event_outbox (id, type, owner, data) VALUES ($1, $2, $3::jsonb, $4::jsonb)',
    id,
    event.type,
    JSON.stringify(eventOwner(event.owner)),
    JSON.stringify(event.data),
  )
  return id
}

export interface EventOutboxOptions {
  nc: NatsConnection
  channels: EventChannels
  databaseUrl: string
  /** the service's own Postgres schema */
  schema: string
  log: Logger
  /** how often the sweep looks for rows a dead process left (5 s) */
  sweepEveryMs?: number
}

export interface EventOutbox {
  /** publishes events recorded in a committed transaction; never throws (the sweep retries) */
  send(...ids: string[]): void
  stop(): Promise<void>
}

/**
 * The service's event outbox: creates `<schema>.event_outbox` when missing (call it at start,
 * before anything records an event), publishes sent ids at once and sweeps what is left.
 * Published rows are deleted after a day.
 */
export async function startEventOutbox({
  nc,
  channels,
  databaseUrl,
  schema,
  log,
  sweepEveryMs = 5_000,
}: EventOutboxOptions): Promise<EventOutbox> {
  const pool = new pg.Pool({ connectionString: databaseUrl, max: 3 })
  // the message and code only: pg's error carries its whole client
  pool.on('error', (error) =>
    log.warn({ err: { message: error.message, code: (error as { code?: string }).code } }, 'event outbox connection failed'),
  )
  const table = `${quoteIdent(schema)}.event_outbox`
  try {
    await ensureKitTables(pool, schema, [
      `CREATE TABLE IF NOT EXISTS ${table} (
        id text PRIMARY KEY,
        type text NOT NULL,
        owner jsonb NOT NULL,
        data jsonb NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now(),
        published_at timestamptz
      )`,
      `CREATE INDEX IF NOT EXISTS event_outbox_unpublished ON ${table} (created_at) WHERE published_at IS NULL`,
    ])
    await ensureStream(nc, channels.streamSpec)
  } catch (error) {
    await pool.end()
    throw error
  }
  const js = nc.jetstream()
  let purgedAt = 0

  const outbox = startOutbox({
    name: 'event-outbox',
    log,
    sweepEveryMs,
    publish: async (id) => {
      const { rows } = await pool.query<Omit<DomainEvent, 'at'> & { at: Date; published: boolean }>(
        `SELECT id, type, owner, data, created_at AS at, published_at IS NOT NULL AS published FROM ${table} WHERE id = $1`,
        [id],
      )
      const row = rows[0]
      if (!row || row.published) return
      const event: DomainEvent = { id: row.id, type: row.type, at: row.at.getTime(), owner: row.owner, data: row.data }
      await publishTraced(js, channels.subjectOf(row.type), channels.all.message.encode(event), { msgID: row.id, timeout: 5_000 })
      await pool.query(`UPDATE ${table} SET published_at = now() WHERE id = $1`, [id])
      log.debug({ eventId: id, type: row.type }, 'event published')
    },
    unpublished: async (olderThan, limit) => {
      if (Date.now() - purgedAt > 3600_000) {
        purgedAt = Date.now()
        await pool.query(`DELETE FROM ${table} WHERE published_at < now() - interval '1 day'`)
      }
      const { rows } = await pool.query<{ id: string }>(
        `SELECT id FROM ${table} WHERE published_at IS NULL AND created_at < $1 ORDER BY created_at LIMIT $2`,
        [olderThan, limit],
      )
      return rows.map((r) => r.id)
    },
  })

  return {
    send(...ids) {
      for (const id of ids) void outbox.send(id)
    },
    async stop() {
      await outbox.stop()
      await pool.end()
    },
  }
}
