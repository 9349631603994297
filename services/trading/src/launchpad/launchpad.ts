import { randomBytes } from 'node:crypto'
import { readFileSync } from 'node:fs'
import { erc20Abi } from '@ats/chain'
import type { LaunchBody, LaunchedToken } from '@ats/contracts'
import { BadRequest, Forbidden, fingerprintOf, type IdempotencyStore, type Logger } from '@ats/service-kit'
import type { WalletControlWatch } from '@ats/wallet'
import { encodeDeployData, getAddress, type Abi, type Address, type Hex, type TransactionReceipt } from 'viem'
import type { ChainTx } from '../chainTx.ts'
import { LaunchFailed } from '../errors.ts'
import type { Launch, PrismaClient } from '../generated/prisma/client.ts'
import { launchesToday, lockSpends, spentToday, startOfUtcDay } from '../spend.ts'
import { checkLaunches, checkUsd, type SpendLimits } from '../swaps/policy.ts'

/** The fixed-supply ERC-20 the launchpad deploys (contracts/LaunchToken.sol, compiled by `pnpm compile:contracts`). */
const artifact = JSON.parse(readFileSync(new URL('../../artifacts/LaunchToken.json', import.meta.url), 'utf8')) as {
  abi: Abi
  bytecode: Hex
}

const newId = () => `lch_${randomBytes(12).toString('base64url')}`

function view(row: Launch): LaunchedToken {
  return {
    address: row.address as Address,
    name: row.name,
    symbol: row.symbol,
    decimals: row.decimals,
    supply: row.supply,
    hash: row.txHash as Hex,
    holder: row.holder as Address,
    chainId: row.chainId,
    blockNumber: String(row.blockNumber ?? 0n),
    createdAt: row.createdAt.getTime(),
  }
}

/** Whole tokens to base units, or a 400. */
function supplyOf(body: LaunchBody): bigint {
  if (!/^[0-9]{1,60}$/.test(body.supply) || BigInt(body.supply) === 0n) {
    throw new BadRequest(`supply must be a positive integer number of whole tokens, got "${body.supply}"`)
  }
  const supply = BigInt(body.supply) * 10n ** BigInt(body.decimals)
  if (supply >= 2n ** 256n) throw new BadRequest('supply × 10^decimals does not fit in a uint256')
  return supply
}

/**
 * The launchpad: deploys LaunchToken from the server wallet (the whole supply to it) and keeps
 * a row per launch in `trading.launches`, pending → submitted (signed deployment kept) →
 * success | reverted. With an idempotency key a launch runs once per key; a try that died
 * after signing is picked up from its row, as swaps are. A launch is a spend of its key: it
 * counts against the key's launches per day and, at the most its gas can cost, against the
 * USD caps (the key's and the wallet-wide ones), checked with swaps under one lock.
 */
export function createLaunchpad({
  db,
  tx,
  idempotency,
  chainId,
  log,
  walletControl,
  limitsOf,
  gasUsd,
  now = Date.now,
}: {
  db: PrismaClient
  tx: ChainTx
  idempotency: IdempotencyStore
  chainId: number
  log: Logger
  walletControl: Pick<WalletControlWatch, 'assertSpendable'>
  /** the limits a key's spends are held to (policy from admin, fail closed) */
  limitsOf: (keyId: string) => Promise<SpendLimits[]>
  /** wei of gas in USD (undefined: no price) */
  gasUsd: (wei: bigint) => Promise<number | undefined>
  now?: () => number
}) {
  /** Checks the launch against the key's limits and records it pending, under the spend lock. */
  async function reserve(
    body: LaunchBody,
    supply: bigint,
    keyId: string,
    idem: { scope: string; key: string } | undefined,
    data: Hex,
    holder: Address,
  ) {
    const limits = await limitsOf(keyId)
    const cost = await tx.costOf({ data })
    const usd = await gasUsd(cost)
    return db.$transaction(async (t) => {
      await lockSpends(t)
      const since = startOfUtcDay(now())
      for (const limit of limits) {
        if (!limit.walletWide) checkLaunches(limit, await launchesToday(t, keyId, since))
        const unpriced = 'no route from WETH to USDC to price its gas'
        checkUsd(
          limit,
          { what: "this launch's gas", value: usd, unpriced },
          await spentToday(t, limit.walletWide ? 'everyone' : { keyId }, since),
        )
      }
      return t.launch.create({
        data: {
          id: newId(),
          keyId,
          idempotencyScope: idem?.scope ?? null,
          idempotencyKey: idem?.key ?? null,
          name: body.name,
          symbol: body.symbol,
          decimals: body.decimals,
          supply: supply.toString(),
          chainId,
          holder,
          usdValue: usd ?? 0,
        },
      })
    })
  }

  async function finish(row: Launch, receipt: TransactionReceipt): Promise<LaunchedToken> {
    if (receipt.status !== 'success' || !receipt.contractAddress) {
      await db.launch.update({
        where: { id: row.id },
        data: { status: 'reverted', blockNumber: receipt.blockNumber, error: 'the deployment reverted' },
      })
      throw new LaunchFailed(`the deployment of ${row.symbol} reverted (${receipt.transactionHash})`)
    }
    const done = await db.launch.update({
      where: { id: row.id },
      data: { status: 'success', address: getAddress(receipt.contractAddress), blockNumber: receipt.blockNumber },
    })
    log.info({ launchId: row.id, address: done.address, hash: done.txHash }, 'token launched')
    return view(done)
  }

  async function perform(body: LaunchBody, supply: bigint, keyId: string | undefined, idem: { scope: string; key: string } | undefined) {
    let row = idem
      ? await db.launch.findUnique({
          where: { idempotencyScope_idempotencyKey: { idempotencyScope: idem.scope, idempotencyKey: idem.key } },
        })
      : null
    if (row?.status === 'success') return view(row)
    if (row?.status === 'submitted' && row.txHash && row.rawTx) {
      const outcome = await tx.resume(row.txHash as Hex, row.rawTx as Hex)
      if (outcome !== 'dropped') return finish(row, outcome)
    }
    walletControl.assertSpendable()
    // nothing is launched outside a key's policy
    if (!keyId) throw new Forbidden('a launch from the server wallet needs an API key')
    const holder = tx.sender().address
    const data = encodeDeployData({ abi: artifact.abi, bytecode: artifact.bytecode, args: [body.name, body.symbol, body.decimals, supply] })
    row ??= await reserve(body, supply, keyId, idem, data, holder)
    const pending = row
    const { receipt } = await tx.send({ data }, async (signed) => {
      await db.launch.update({
        where: { id: pending.id },
        data: { status: 'submitted', txHash: signed.hash, rawTx: signed.raw, nonce: signed.nonce },
      })
    })
    return finish(pending, receipt)
  }

  return {
    async launch(body: LaunchBody, keyId: string | undefined, idempotencyKey?: string) {
      tx.sender()
      const supply = supplyOf(body)
      if (!idempotencyKey) return { result: await perform(body, supply, keyId, undefined), replayed: false }
      const scope = `launch:${keyId ?? 'anonymous'}`
      return idempotency.run(scope, idempotencyKey, fingerprintOf(body), () => perform(body, supply, keyId, { scope, key: idempotencyKey }))
    },

    async list(keyId: string, limit: number) {
      const rows = await db.launch.findMany({ where: { keyId, status: 'success' }, orderBy: { createdAt: 'desc' }, take: limit })
      return rows.map(view)
    },

    /** A launched token of this key, with name, symbol, decimals and supply read from the chain now. */
    async get(keyId: string, address: Address): Promise<LaunchedToken | undefined> {
      const row = await db.launch.findFirst({ where: { keyId, address: getAddress(address), status: 'success' } })
      if (!row) return undefined
      const token = getAddress(address)
      const read = <F extends 'name' | 'symbol' | 'decimals' | 'totalSupply'>(functionName: F) =>
        tx.client.readContract({ address: token, abi: erc20Abi, functionName })
      const [name, symbol, decimals, totalSupply] = await Promise.all([read('name'), read('symbol'), read('decimals'), read('totalSupply')])
      return { ...view(row), name, symbol, decimals, supply: (totalSupply as bigint).toString() }
    },
  }
}

export type Launchpad = ReturnType<typeof createLaunchpad>
