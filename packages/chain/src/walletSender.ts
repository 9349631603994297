// The server wallet's sender: every transaction of the fleet from one wallet takes its nonce under one lock.
import pg from 'pg'
import { keccak256, type Address, type Hex, type PublicClient } from 'viem'
import type { LocalAccount } from 'viem/accounts'

/** Where the lock reports a connection it dropped: a pino logger fits. */
export interface LockLog {
  warn(details: object, message: string): void
}

export interface SignedTx {
  hash: Hex
  raw: Hex
  nonce: number
}

export interface WalletSender {
  address: Address
  /**
   * Fills gas (estimate +25%, unless given) and fees outside the lock; then, under the
   * fleet-wide lock of this wallet on this chain, takes the wallet's pending nonce, signs, awaits
   * onSigned (e.g. to store hash and raw tx before broadcast) and broadcasts. Returns the signed
   * tx. An estimate that reverts throws viem's error (with the revert reason) and sends nothing.
   */
  send(
    tx: { to?: Address; data?: Hex; value?: bigint; gas?: bigint },
    options?: { onSigned?: (signed: SignedTx) => Promise<void> | void },
  ): Promise<SignedTx>
}

/** Runs one caller at a time: in this process, and with a database in the whole fleet. */
export interface WalletLock {
  run<T>(fn: () => Promise<T>): Promise<T>
  /** ends the lock's Postgres pool */
  close(): Promise<void>
}

/** The advisory lock's name: one per wallet and chain, the same in every process of the fleet. */
export const walletLockName = (chainId: number, address: Address) => `ats:wallet:${chainId}:${address.toLowerCase()}`

/**
 * The wallet's lock. An in-process mutex, so a process waits on one connection at most; then,
 * with `databaseUrl`, `pg_advisory_xact_lock` in a short transaction, which every process of the
 * fleet takes on the same database. A lock ends with its transaction (or its connection).
 */
export function createWalletLock(name: string, databaseUrl: string | undefined, log?: LockLog): WalletLock {
  let tail: Promise<unknown> = Promise.resolve()
  const inProcess = <T>(fn: () => Promise<T>): Promise<T> => {
    const turn = tail.then(fn)
    tail = turn.catch(() => {})
    return turn
  }
  if (!databaseUrl) return { run: inProcess, close: async () => {} }

  const pool = new pg.Pool({ connectionString: databaseUrl, max: 2 })
  // the message and code only: pg's error carries its whole client
  pool.on('error', (error) =>
    log?.warn({ err: { message: error.message, code: (error as { code?: string }).code } }, 'wallet lock connection failed'),
  )
  const fleetWide = async <T>(fn: () => Promise<T>): Promise<T> => {
    const client = await pool.connect()
    try {
      await client.query('BEGIN')
      await client.query('SELECT pg_advisory_xact_lock(hashtext($1))', [name])
    } catch (error) {
      client.release(error as Error)
      throw error
    }
    try {
      return await fn()
    } finally {
      // the transaction wrote nothing: its end only releases the lock, and a connection that
      // cannot end it is dropped, which releases it too
      await client.query('COMMIT').then(
        () => client.release(),
        (error: Error) => {
          log?.warn({ err: error, lock: name }, 'wallet lock: the transaction did not end; its connection is dropped')
          client.release(error)
        },
      )
    }
  }
  let ended: Promise<void> | undefined
  return { run: (fn) => inProcess(() => fleetWide(fn)), close: () => (ended ??= pool.end()) }
}

/** the gas limit sent for an estimate: a quarter more */
export const gasMargin = (estimate: bigint) => (estimate * 125n) / 100n

export interface WalletSenderOptions {
  publicClient: PublicClient
  account: LocalAccount
  chainId: number
  lock: WalletLock
}

/**
 * Sends from `account`. The nonce always comes from the chain's pending count, read under the
 * lock and used before it is released: no counter to keep or repair, and a broadcast that fails
 * leaves that nonce to the next send.
 */
export function createWalletSender({ publicClient, account, chainId, lock }: WalletSenderOptions): WalletSender {
  const from = account.address
  return {
    address: from,
    async send(tx, { onSigned } = {}) {
      const call = { to: tx.to, data: tx.data, value: tx.value }
      const [gas, fees] = await Promise.all([
        tx.gas ?? publicClient.estimateGas({ account: from, ...call }).then(gasMargin),
        publicClient.estimateFeesPerGas(),
      ])
      return lock.run(async () => {
        const nonce = await publicClient.getTransactionCount({ address: from, blockTag: 'pending' })
        const raw = await account.signTransaction({
          type: 'eip1559',
          chainId,
          nonce,
          gas,
          maxFeePerGas: fees.maxFeePerGas,
          maxPriorityFeePerGas: fees.maxPriorityFeePerGas,
          ...call,
        })
        const signed: SignedTx = { hash: keccak256(raw), raw, nonce }
        await onSigned?.(signed)
        await publicClient.sendRawTransaction({ serializedTransaction: raw })
        return signed
      })
    },
  }
}
