// The server wallet's kill switch as a spending replica sees it: admin's KV entry, watched into
// memory, so a spend checks it without a round trip and a pause applies within a second.
import { walletControlCodec, walletControlKey, walletRunning, type WalletControl } from '@ats/contracts'
import type { KvEntry, NatsConnection } from 'nats'
import { WalletPaused } from './errors.ts'
import { Unavailable, openBucket, type Logger } from '@ats/service-kit'

/** "the server wallet is paused (since 2026-11-26T10:00:00.000Z, by key_abc): incident" */
export function pauseMessage(state: WalletControl): string {
  const since = state.since === null ? '' : `since ${new Date(state.since).toISOString()}`
  const who = [since, state.by ? `by ${state.by}` : ''].filter(Boolean).join(', ')
  return `the server wallet is paused${who ? ` (${who})` : ''}${state.reason ? `: ${state.reason}` : ''}; an admin resumes it with POST /admin/wallet/resume`
}

export interface WalletControlWatch {
  /** the state now; undefined while it is not known (the bucket could not be read yet) */
  state(): WalletControl | undefined
  /** throws 423 while paused, 503 while the state is not known: spends fail safe */
  assertSpendable(): void
  close(): void
}

/**
 * Watches the kill switch. The first read happens before this resolves; when the bucket cannot be
 * read (NATS without JetStream, a broken bucket) the state stays unknown, spends are refused with
 * 503 and the watch is retried every `retryMs`. A watch that ends (the connection closed) makes the
 * state unknown again until it is re-established.
 */
export async function watchWalletControl(
  nc: NatsConnection,
  bucket: string,
  log: Logger,
  { retryMs = 1000 } = {},
): Promise<WalletControlWatch> {
  let current: WalletControl | undefined
  let revision = 0
  let closed = false
  let stop: (() => void) | undefined
  let retry: NodeJS.Timeout | undefined

  function apply(entry: KvEntry | null) {
    if (!entry) {
      if (revision === 0) current = walletRunning
      return
    }
    if (entry.revision <= revision) return
    revision = entry.revision
    try {
      const next = entry.operation === 'PUT' ? walletControlCodec.decode(entry.value) : walletRunning
      if (current?.paused !== next.paused)
        log.warn({ paused: next.paused, by: next.by, reason: next.reason }, next.paused ? 'server wallet paused' : 'server wallet resumed')
      current = next
    } catch (error) {
      // an entry nobody can read: refuse spends rather than guess
      log.error({ err: error }, 'unreadable wallet-control entry: spends are refused until it is rewritten')
      current = undefined
    }
  }

  async function start() {
    const kv = await openBucket(nc, bucket)
    // the watch first, then a read: a change in between is seen by the watch; revisions order them
    const watch = await kv.watch({ key: walletControlKey })
    stop = () => watch.stop()
    void (async () => {
      for await (const entry of watch) apply(entry)
      if (closed) return
      current = undefined
      revision = 0
      log.warn('the wallet-control watch ended: spends are refused until it is back')
      schedule()
    })().catch((error) => log.warn({ err: error }, 'wallet-control watch failed'))
    apply(await kv.get(walletControlKey))
  }

  function schedule() {
    if (closed) return
    retry = setTimeout(() => {
      start().catch((error) => {
        log.warn({ err: error }, 'the wallet-control bucket cannot be read: spends are refused until it can')
        schedule()
      })
    }, retryMs)
  }

  await start().catch((error) => {
    log.error({ err: error }, 'the wallet-control bucket cannot be read: spends are refused until it can')
    schedule()
  })

  return {
    state: () => current,
    assertSpendable() {
      if (!current) throw new Unavailable("the server wallet's kill switch cannot be read right now: nothing is spent until it can")
      if (current.paused) throw new WalletPaused(pauseMessage(current))
    },
    close() {
      closed = true
      clearTimeout(retry)
      stop?.()
    },
  }
}
