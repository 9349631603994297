// Withdrawals: unused credit paid back in USDC from the server wallet, exactly once per Idempotency-Key.
import type { CreditWithdrawal } from '@ats/contracts'
import { firstLine, type ChainContext, type Logger } from '@ats/service-kit'
import type { WalletControlWatch } from '@ats/wallet'
import { encodeFunctionData, erc20Abi, parseTransaction, type Address, type Hex, type TransactionSerialized } from 'viem'
import { CreditWithdrawalOverCap, CreditWithdrawalPaused, CreditWithdrawalNotSent, NoCreditWithdrawal } from '../errors.ts'
import type { CreditWithdrawal as WithdrawalRow, PrismaClient } from '../generated/prisma/client.ts'
import { waitForReceipt } from '../payments/settlement.ts'
import type { AdminConfig } from '../service.ts'
import type { CreditLedger } from './creditLedger.ts'

export interface WithdrawalOptions {
  db: PrismaClient
  chain: ChainContext
  ledger: CreditLedger
  walletControl: Pick<WalletControlWatch, 'assertSpendable'>
  /** resolves once every debit published before the call is in the ledger (snapshot.ts) */
  debitsRecorded(): Promise<void>
  log: Logger
  /** CREDIT_WITHDRAW_* */
  settings: AdminConfig
}

/** How a refused withdrawal is answered again: its status and words, kept with it. */
const refusals: Record<number, new (message: string) => Error> = {
  403: CreditWithdrawalOverCap,
  423: CreditWithdrawalPaused,
  502: CreditWithdrawalNotSent,
}

/** A withdrawal's row, by its wallet and key. */
const rowOf = (w: Pick<WithdrawalRow, 'wallet' | 'id'>) => ({ wallet_id: { wallet: w.wallet, id: w.id } })

const shown = (w: WithdrawalRow): { status: 200 | 202; body: CreditWithdrawal } => ({
  status: w.state === 'paid' ? 200 : 202,
  body: { id: w.id, wallet: w.wallet, amount: String(w.amount), state: w.state === 'paid' ? 'paid' : 'sending', txHash: w.txHash },
})

/**
 * The gateway takes the withdrawal from the wallet's credit (a `withdraw` debit whose ref is the
 * Idempotency-Key) and then asks admin to pay it. Admin pays what the ledger recorded under that
 * key, never what a request says: the transfer is signed, kept (rawTx) before it is broadcast, and
 * its row moves pending → sending → paid once (a conditional UPDATE decides who sends). Refused
 * (paused wallet, over a cap) or not sent (the estimate reverts, the RPC fails before signing, the
 * transfer reverts or is dropped) → the credit is given back (a `refund` entry) and the refusal is
 * kept: a repeat answers the same. A withdrawal whose process died is picked up after its lease
 * (`resume`): its kept transaction is looked up or broadcast again; one never signed is refunded.
 */
export function createWithdrawals(o: WithdrawalOptions) {
  const { db, chain, ledger, log } = o
  const { CREDIT_WITHDRAW_RECEIPT_MS: receiptMs, CREDIT_WITHDRAW_LEASE_MS: leaseMs } = o.settings
  const max = BigInt(o.settings.CREDIT_WITHDRAW_MAX)
  const dailyMax = BigInt(o.settings.CREDIT_WITHDRAW_DAILY_MAX)
  const client = chain.publicClient

  const usdc = (): Address => {
    const token = chain.tokens().find('USDC')
    if (!token) throw new CreditWithdrawalNotSent('no USDC on this chain')
    return token.address as Address
  }

  async function refuse(w: WithdrawalRow, status: number, reason: string): Promise<never> {
    await ledger.refund(w.wallet, w.id, w.amount, reason)
    await db.creditWithdrawal.update({
      where: rowOf(w),
      data: { state: 'refunded', status, error: reason, endedAt: new Date(), leaseUntil: null },
    })
    log.warn(
      { wallet: w.wallet, withdrawal: w.id, amount: String(w.amount), reason },
      'credit withdrawal refused: the credit is given back',
    )
    throw new refusals[status]!(reason)
  }

  /** pending → sending for the one caller that gets there, within the caps (checked under one fleet-wide lock) */
  async function claim(wallet: string, id: string): Promise<{ row: WithdrawalRow; overCap?: string } | undefined> {
    return db.$transaction(async (tx) => {
      await tx.$executeRaw`SELECT pg_advisory_xact_lock(hashtextextended('ats:credit:withdrawals', 0))`
      const [row] = await tx.$queryRaw<Array<{ amount: bigint; state: string }>>`
        SELECT amount, state FROM credit_withdrawals WHERE wallet = ${wallet} AND id = ${id} FOR UPDATE`
      if (row?.state !== 'pending') return undefined
      const claimed = await tx.creditWithdrawal.update({
        where: rowOf({ wallet, id }),
        data: { state: 'sending', leaseUntil: new Date(Date.now() + leaseMs) },
      })
      if (row.amount > max)
        return { row: claimed, overCap: `a withdrawal pays at most ${max} (CREDIT_WITHDRAW_MAX); this one is ${row.amount}` }
      const [today] = await tx.$queryRaw<Array<{ total: bigint }>>`
        SELECT coalesce(sum(amount), 0)::bigint AS total FROM credit_withdrawals
        WHERE state IN ('sending', 'paid') AND created_at >= date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
          AND NOT (wallet = ${wallet} AND id = ${id})`
      if (today!.total + row.amount > dailyMax) {
        return {
          row: claimed,
          overCap: `withdrawals pay at most ${dailyMax} a UTC day in all (CREDIT_WITHDRAW_DAILY_MAX); ${today!.total} is paid today`,
        }
      }
      return { row: claimed }
    })
  }

  async function paid(w: WithdrawalRow, hash: Hex) {
    const row = await db.creditWithdrawal.update({
      where: rowOf(w),
      data: { state: 'paid', txHash: hash, endedAt: new Date(), leaseUntil: null },
    })
    log.info({ wallet: w.wallet, withdrawal: w.id, amount: String(w.amount), txHash: hash }, 'credit withdrawal paid on chain')
    return row
  }

  async function send(w: WithdrawalRow) {
    try {
      o.walletControl.assertSpendable()
    } catch (error) {
      return refuse(w, 423, (error as Error).message)
    }
    let signed: Hex | undefined
    try {
      const tx = await chain.sender().send(
        { to: usdc(), data: encodeFunctionData({ abi: erc20Abi, functionName: 'transfer', args: [w.wallet as Address, w.amount] }) },
        {
          onSigned: async ({ hash, raw }) => {
            await db.creditWithdrawal.update({ where: rowOf(w), data: { txHash: hash, rawTx: raw } })
            signed = hash
          },
        },
      )
      signed = tx.hash
    } catch (error) {
      // nothing signed: nothing can reach the chain, so the credit goes back
      if (!signed) return refuse(w, 502, `the transfer could not be sent: ${firstLine(error)}`)
      log.warn(
        { err: error, withdrawal: w.id },
        'credit withdrawal: broadcast failed; its kept transaction is checked again after the lease',
      )
      return db.creditWithdrawal.findUniqueOrThrow({ where: rowOf(w) })
    }
    const mined = await waitForReceipt(client, signed, receiptMs, Math.min(500, Math.max(50, receiptMs / 20))).catch(() => null)
    if (!mined) return db.creditWithdrawal.findUniqueOrThrow({ where: rowOf(w) })
    if (mined.status !== 'success') return refuse(w, 502, `the transfer ${signed} reverted`)
    return paid(w, signed)
  }

  return {
    /** POST /credit/withdraw: pays the withdrawal recorded under `id`, or answers how it went. */
    async withdraw(wallet: string, id: string) {
      await o.debitsRecorded()
      const entry = await ledger.entry(wallet, 'withdraw', id)
      if (!entry) throw new NoCreditWithdrawal(id)
      await db.$executeRaw`
        INSERT INTO credit_withdrawals (id, wallet, amount, state) VALUES (${id}, ${wallet}, ${entry.amount}, 'pending')
        ON CONFLICT (wallet, id) DO NOTHING`
      const claimed = await claim(wallet, id)
      if (claimed?.overCap) return refuse(claimed.row, 403, claimed.overCap)
      const row = claimed ? await send(claimed.row) : await db.creditWithdrawal.findUniqueOrThrow({ where: rowOf({ wallet, id }) })
      if (row.state === 'refunded') throw new refusals[row.status ?? 502]!(row.error ?? 'refused')
      return shown(row)
    },

    /**
     * Withdrawals whose lease ran out (their process died, or their block was late): the kept
     * transaction's receipt, else its bytes broadcast again; dropped (its nonce went to another
     * transaction) or never signed → refunded. Returns how many it looked at.
     */
    async resume(): Promise<number> {
      const due = await db.$queryRaw<WithdrawalRow[]>`
        UPDATE credit_withdrawals SET lease_until = now() + ${leaseMs} * interval '1 millisecond'
        WHERE (wallet, id) IN (
          SELECT wallet, id FROM credit_withdrawals WHERE state = 'sending' AND lease_until < now()
          ORDER BY lease_until LIMIT 20 FOR UPDATE SKIP LOCKED)
        RETURNING id, wallet, amount, state, tx_hash AS "txHash", raw_tx AS "rawTx", status, error,
          lease_until AS "leaseUntil", created_at AS "createdAt", ended_at AS "endedAt"`
      for (const w of due) {
        try {
          await resumeOne(w)
        } catch (error) {
          log.warn({ err: error, withdrawal: w.id }, 'credit withdrawal: not settled yet; looked at again after its lease')
        }
      }
      return due.length
    },
  }

  async function resumeOne(w: WithdrawalRow) {
    if (!w.rawTx || !w.txHash) {
      await refuse(w, 502, 'the transfer was never signed (its process stopped first)').catch(() => undefined)
      return
    }
    const hash = w.txHash as Hex
    const mined = await client.getTransactionReceipt({ hash }).catch(() => null)
    if (mined) {
      if (mined.status === 'success') await paid(w, hash)
      else await refuse(w, 502, `the transfer ${hash} reverted`).catch(() => undefined)
      return
    }
    const { nonce } = parseTransaction(w.rawTx as TransactionSerialized)
    const used = (await client.getTransactionCount({ address: chain.sender().address, blockTag: 'latest' })) > nonce!
    if (used && !(await client.getTransactionReceipt({ hash }).catch(() => null))) {
      await refuse(w, 502, `the transfer ${hash} was dropped (its nonce went to another transaction)`).catch(() => undefined)
      return
    }
    // signed before a pause: held until the wallet resumes (throws; looked at again after the lease)
    o.walletControl.assertSpendable()
    await client.sendRawTransaction({ serializedTransaction: w.rawTx as Hex }).catch(() => undefined)
  }
}

export type Withdrawals = ReturnType<typeof createWithdrawals>
