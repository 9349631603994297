// Swaps from a user's own wallet under the permission the user granted on chain (TradeGrants):
// the contract and the delegate signer, a wallet's grants as the chain holds them, the grant a
// swap can use (or why none can, in words), and the transactions a wallet signs to grant or revoke.
import { createWalletLock, createWalletSender, erc20Abi, gasMargin, walletLockName, type AddressBook, type WalletSender } from '@ats/chain'
import {
  grantPeriodSeconds,
  type DexName,
  type Grant,
  type GrantList,
  type GrantTransaction,
  type PrepareGrantBody,
  type PreparedGrant,
} from '@ats/contracts'
import { BadRequest, NotFound, type ChainContext, type Logger } from '@ats/service-kit'
import { readFileSync } from 'node:fs'
import {
  BaseError,
  ContractFunctionRevertedError,
  concatHex,
  decodeErrorResult,
  encodeFunctionData,
  getAddress,
  getContractAddress,
  keccak256,
  maxUint256,
  parseEventLogs,
  zeroHash,
  type Abi,
  type Address,
  type Hex,
  type TransactionReceipt,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { GrantExhausted, GrantRefused, GrantsUnavailable, WouldRevert } from '../errors.ts'
import type { TokenResolver } from '../swaps/tokens.ts'

const artifact = JSON.parse(readFileSync(new URL('../../artifacts/TradeGrants.json', import.meta.url), 'utf8')) as {
  abi: Abi
  bytecode: Hex
}
export const tradeGrantsAbi = artifact.abi

/**
 * The deterministic deployment proxy (github.com/Arachnid/deterministic-deployment-proxy): the
 * same address on Arbitrum One, nearly every chain and anvil. Deployed through it with salt 0,
 * TradeGrants has one address everywhere, which is its default.
 */
export const CREATE2_DEPLOYER: Address = '0x4e59b44847b379578588920ca78fbf26c0b4956c'
/** the transaction that deploys TradeGrants at its deterministic address (anyone may send it, once) */
export const tradeGrantsDeployment = { to: CREATE2_DEPLOYER, data: concatHex([zeroHash, artifact.bytecode]) }
export const defaultTradeGrantsAddress = getContractAddress({
  opcode: 'CREATE2',
  from: CREATE2_DEPLOYER,
  salt: zeroHash,
  bytecodeHash: keccak256(artifact.bytecode),
})

/** the router kinds TradeGrants encodes swaps for */
const routerKinds: Record<DexName, number> = { uniswap: 1, camelot: 2 }

/** A grant as the chain holds it. */
export interface GrantState {
  id: Hex
  owner: Address
  delegate: Address
  tokenIn: Address
  tokensOut: Address[]
  routers: Address[]
  limit: bigint
  periodSeconds: number
  expiry: number
  revoked: boolean
  remaining: bigint
  renewsAt: number
  blockNumber: bigint
}

export interface GrantsOptions {
  chain: ChainContext
  tokens: TokenResolver
  /** GRANT_DELEGATE_PRIVATE_KEY: the signer that uses grants (never the server wallet); without it nothing here works (503) */
  delegateKey: Hex | undefined
  /** TRADE_GRANTS_ADDRESS, else the deterministic address */
  contract: Address | undefined
  /** GRANTS_FROM_BLOCK: where reading a wallet's Granted events starts */
  fromBlock: bigint
  databaseUrl: string | undefined
  log: Logger
  now?: () => number
}

export function createGrants({ chain, tokens, delegateKey, contract, fromBlock, databaseUrl, log, now = Date.now }: GrantsOptions) {
  const client = chain.publicClient
  const address = contract ? getAddress(contract) : defaultTradeGrantsAddress
  const delegate = delegateKey ? privateKeyToAccount(delegateKey) : undefined
  let senderOf: WalletSender | undefined
  let deployed: Promise<void> | undefined

  const book = (): AddressBook => chain.addressBook()
  const routerOf = (dex: DexName): Address => (dex === 'uniswap' ? book().uniswapV3.swapRouter02 : book().algebra.swapRouter)
  const dexOf = (router: Address): DexName | undefined =>
    (['uniswap', 'camelot'] as const).find((dex) => getAddress(routerOf(dex)) === getAddress(router))
  const symbolOf = (token: Address) => tokens.listed({ address: token })?.symbol ?? token

  /** the delegate's sender: its nonces under their own lock (it never sends from the server wallet) */
  function sender(): WalletSender {
    const account = delegateAccount()
    senderOf ??= createWalletSender({
      publicClient: client,
      account,
      chainId: chain.chainId,
      lock: createWalletLock(walletLockName(chain.chainId, account.address), databaseUrl),
    })
    return senderOf
  }

  function delegateAccount() {
    if (!delegate)
      throw new GrantsUnavailable('swaps from your own wallet are not enabled here: the operator has not set GRANT_DELEGATE_PRIVATE_KEY')
    return delegate
  }

  /**
   * The contract, deployed: on the devnet the delegate deploys it through the CREATE2 proxy the
   * first time it is needed (the same address for every replica: a second deployment is a no-op);
   * elsewhere a missing contract is the operator's to deploy (503 saying so).
   */
  function ensureDeployed(): Promise<void> {
    deployed ??= (async () => {
      if (await client.getCode({ address })) return
      if (chain.chainId !== 31337 || address !== defaultTradeGrantsAddress) {
        throw new GrantsUnavailable(`the TradeGrants contract is not deployed at ${address} on chain ${chain.chainId}`)
      }
      let hash: Hex | undefined
      try {
        hash = (await sender().send(tradeGrantsDeployment)).hash
        await client.waitForTransactionReceipt({ hash })
      } catch (error) {
        // another replica's deployment may have landed first: the proxy then reverts ours
        if (!(await client.getCode({ address }))) throw error
      }
      if (!(await client.getCode({ address }))) throw new GrantsUnavailable(`TradeGrants could not be deployed at ${address}`)
      log.info({ contract: address, hash }, 'TradeGrants deployed on the devnet')
    })().catch((error) => {
      deployed = undefined
      throw error
    })
    return deployed
  }

  /** every grant `owner` made to our delegate, newest first, as the chain holds it now */
  async function grantsOf(owner: Address): Promise<GrantState[]> {
    const me = delegateAccount().address
    await ensureDeployed()
    const events = await client.getContractEvents({ address, abi: tradeGrantsAbi, eventName: 'Granted', args: { owner }, fromBlock })
    const granted = parseEventLogs({ abi: tradeGrantsAbi, eventName: 'Granted', logs: events }) as unknown as Array<{
      blockNumber: bigint
      args: {
        id: Hex
        delegate: Address
        tokenIn: Address
        limit: bigint
        period: bigint
        expiry: bigint
        routers: Address[]
        tokensOut: Address[]
      }
    }>
    const ours = granted.filter((event) => getAddress(event.args.delegate) === me).reverse()
    return Promise.all(
      ours.map(async ({ args, blockNumber }) => {
        const [stored, [remaining, renewsAt]] = await Promise.all([
          client.readContract({ address, abi: tradeGrantsAbi, functionName: 'grants', args: [args.id] }) as Promise<readonly unknown[]>,
          client.readContract({ address, abi: tradeGrantsAbi, functionName: 'remaining', args: [args.id] }) as Promise<
            readonly [bigint, bigint]
          >,
        ])
        return {
          id: args.id,
          owner,
          delegate: args.delegate,
          tokenIn: getAddress(args.tokenIn),
          tokensOut: args.tokensOut.map((token) => getAddress(token)),
          routers: args.routers.map((router) => getAddress(router)),
          limit: args.limit,
          periodSeconds: Number(args.period),
          expiry: Number(args.expiry),
          revoked: stored[9] as boolean,
          remaining,
          renewsAt: Number(renewsAt),
          blockNumber,
        }
      }),
    )
  }

  const statusOf = (grant: GrantState): Grant['status'] => (grant.revoked ? 'revoked' : now() / 1000 >= grant.expiry ? 'expired' : 'active')
  const iso = (seconds: number) => new Date(seconds * 1000).toISOString()

  const allowanceOf = (owner: Address, token: Address) =>
    client.readContract({ address: token, abi: erc20Abi, functionName: 'allowance', args: [owner, address] })

  const transaction = (from: Address, kind: GrantTransaction['kind'], to: Address, data: Hex, description: string): GrantTransaction => ({
    kind,
    chainId: chain.chainId,
    from,
    to,
    data,
    value: '0',
    description,
  })

  return {
    address,
    /** the delegate's address, or undefined when grants are not enabled */
    delegate: delegate?.address,

    async list(owner: Address): Promise<GrantList> {
      const grants = await grantsOf(owner)
      const allowances = new Map<Address, bigint>()
      for (const token of new Set(grants.map((grant) => grant.tokenIn))) allowances.set(token, await allowanceOf(owner, token))
      return {
        wallet: owner,
        contract: address,
        delegate: delegateAccount().address,
        grants: grants.map((grant) => ({
          id: grant.id,
          wallet: owner,
          status: statusOf(grant),
          tokenIn: symbolOf(grant.tokenIn),
          tokensOut: grant.tokensOut.map(symbolOf),
          dexes: grant.routers.flatMap((router) => dexOf(router) ?? []),
          amountPerPeriod: grant.limit.toString(),
          periodSeconds: grant.periodSeconds,
          remaining: grant.remaining.toString(),
          renewsAt: iso(grant.renewsAt),
          expiresAt: iso(grant.expiry),
          allowance: (allowances.get(grant.tokenIn) ?? 0n).toString(),
        })),
      }
    },

    /** the approval (when the allowance is short) and the grant, for the wallet to send */
    async prepareGrant(body: PrepareGrantBody): Promise<PreparedGrant> {
      const me = delegateAccount().address
      await ensureDeployed()
      const wallet = getAddress(body.wallet)
      const tokenIn = await tokens.resolve('tokenIn', body.tokenIn)
      const tokensOut = await Promise.all(body.tokensOut.map((ref, i) => tokens.resolve(`tokensOut[${i}]`, ref)))
      const same = tokensOut.find((token) => token.address === tokenIn.address)
      if (same) throw new BadRequest(`tokensOut cannot include tokenIn (${same.symbol})`)
      const limit = BigInt(body.amountPerPeriod)
      if (limit <= 0n || limit >= 2n ** 128n) throw new BadRequest('amountPerPeriod must be above 0 and below 2^128')
      const period = grantPeriodSeconds[body.period]
      const expiresInDays = body.expiresInDays ?? 30
      const expiry = BigInt(Math.floor(now() / 1000) + expiresInDays * 86_400)
      const dexes: DexName[] = [...new Set<DexName>(body.dexes ?? ['uniswap', 'camelot'])]
      const periods = BigInt(Math.ceil((expiresInDays * 86_400) / period))
      const needed = limit * periods > maxUint256 ? maxUint256 : limit * periods
      const transactions: GrantTransaction[] = []
      if ((await allowanceOf(wallet, tokenIn.address)) < needed) {
        transactions.push(
          transaction(
            wallet,
            'approval',
            tokenIn.address,
            encodeFunctionData({ abi: erc20Abi, functionName: 'approve', args: [address, needed] }),
            `let the TradeGrants contract take up to ${needed} base units of ${tokenIn.symbol} from ${wallet} (only a swap under the grant can)`,
          ),
        )
      }
      const grantData = encodeFunctionData({
        abi: tradeGrantsAbi,
        functionName: 'grant',
        args: [
          me,
          tokenIn.address,
          limit,
          period,
          expiry,
          dexes.map(routerOf),
          dexes.map((dex) => routerKinds[dex]),
          tokensOut.map((token) => token.address),
        ],
      })
      const outNames = tokensOut.map((token) => token.symbol).join(', ')
      transactions.push(
        transaction(
          wallet,
          'grant',
          address,
          grantData,
          `grant ${me} swaps of up to ${limit} base units of ${tokenIn.symbol} each ${body.period} into ${outNames} on ${dexes.join(' and ')}, paid out to ${wallet} only, until ${iso(Number(expiry))}`,
        ),
      )
      return { wallet, contract: address, delegate: me, transactions }
    },

    /** every grant `owner` made to this service, as the chain holds it now (read once, then handed to grantFor) */
    of: grantsOf,

    /** whether one of `grants` is active and spends `tokenIn` */
    spends: (grants: readonly GrantState[], tokenIn: Address) =>
      grants.some((grant) => grant.tokenIn === getAddress(tokenIn) && statusOf(grant) === 'active'),

    /** the revocation of grant `id` for its owner to send; 404 when it is not a grant to this service */
    async prepareRevoke(id: Hex): Promise<{ grant: Hex; transactions: GrantTransaction[] }> {
      await ensureDeployed()
      const stored = (await client.readContract({ address, abi: tradeGrantsAbi, functionName: 'grants', args: [id] })) as readonly unknown[]
      const owner = stored[0] as Address
      if (BigInt(owner) === 0n || getAddress(stored[1] as Address) !== delegateAccount().address) throw new NotFound(`grant ${id}`)
      const data = encodeFunctionData({ abi: tradeGrantsAbi, functionName: 'revoke', args: [id] })
      return {
        grant: id,
        transactions: [
          transaction(getAddress(owner), 'revoke', address, data, `revoke grant ${id} for good: the service can no longer swap under it`),
        ],
      }
    },

    /**
     * The grant that can pay for a swap of `amountIn` of tokenIn into tokenOut on `dex` from
     * `owner`'s wallet, or a refusal naming why none can: no grant, revoked, expired, the token
     * or DEX not granted, the period's amount used (and when it renews), the allowance short.
     * `known`: the owner's grants when this swap already read them.
     */
    async grantFor(
      owner: Address,
      swap: { tokenIn: Address; tokenOut: Address; dex: DexName; amountIn: bigint },
      known?: readonly GrantState[],
    ): Promise<GrantState> {
      const all = (known ?? (await grantsOf(owner))).filter((grant) => grant.tokenIn === swap.tokenIn)
      const spends = `${symbolOf(swap.tokenIn)} from ${owner}`
      if (all.length === 0) throw new GrantRefused(`no grant lets the service swap ${spends}: make one with POST /grants/prepare`)
      const live = all.filter((grant) => statusOf(grant) === 'active')
      if (live.length === 0) {
        const latest = all[0]!
        throw new GrantRefused(
          statusOf(latest) === 'revoked'
            ? `the grant to swap ${spends} was revoked (${latest.id}): make a new one with POST /grants/prepare`
            : `the grant to swap ${spends} expired at ${iso(latest.expiry)} (${latest.id}): make a new one with POST /grants/prepare`,
        )
      }
      const intoToken = live.filter((grant) => grant.tokensOut.includes(swap.tokenOut))
      if (intoToken.length === 0) {
        throw new GrantRefused(`no active grant of ${owner} allows buying ${symbolOf(swap.tokenOut)} with ${symbolOf(swap.tokenIn)}`)
      }
      const router = getAddress(routerOf(swap.dex))
      const onDex = intoToken.filter((grant) => grant.routers.includes(router))
      if (onDex.length === 0) throw new GrantRefused(`no active grant of ${owner} allows swapping on ${swap.dex}`)
      const best = onDex.reduce((a, b) => (b.remaining > a.remaining ? b : a))
      if (best.remaining < swap.amountIn) {
        throw new GrantExhausted(
          `the grant ${best.id} has ${best.remaining} base units of ${symbolOf(swap.tokenIn)} left this period, the swap needs ${swap.amountIn}; it renews at ${iso(best.renewsAt)}`,
        )
      }
      const allowance = await allowanceOf(owner, swap.tokenIn)
      if (allowance < swap.amountIn) {
        throw new GrantRefused(
          `${owner} allows the TradeGrants contract ${allowance} base units of ${symbolOf(swap.tokenIn)}, the swap needs ${swap.amountIn}: approve more (POST /grants/prepare answers the approval)`,
        )
      }
      return best
    },

    /** the swap call run against the chain as the delegate, answering the gas limit to send it with; a revert throws (refusalOf names it), nothing is sent */
    async check(call: { to: Address; data: Hex }): Promise<bigint> {
      return gasMargin(await client.estimateGas({ account: delegateAccount().address, ...call }))
    },

    /** the delegate's call of TradeGrants.swap: the router encodes the path, the owner is the only recipient */
    swapCall(grant: GrantState, dex: DexName, path: Hex, amountIn: bigint, minOut: bigint, deadline: bigint): { to: Address; data: Hex } {
      return {
        to: address,
        data: encodeFunctionData({
          abi: tradeGrantsAbi,
          functionName: 'swap',
          args: [grant.id, routerOf(dex), path, amountIn, minOut, deadline],
        }),
      }
    },

    sender,

    /** A revert of TradeGrants in words (a swap that became over its grant between the check and the send), or undefined. */
    refusalOf(error: unknown): Error | undefined {
      const reverted = error instanceof BaseError ? error.walk((e) => e instanceof ContractFunctionRevertedError) : undefined
      const raw = (reverted as ContractFunctionRevertedError | undefined)?.raw ?? findRevertData(error)
      if (!raw) return undefined
      let decoded: { errorName: string; args?: readonly unknown[] | undefined }
      try {
        decoded = decodeErrorResult({ abi: tradeGrantsAbi, data: raw })
      } catch {
        return undefined
      }
      const args = decoded.args ?? []
      switch (decoded.errorName) {
        case 'PeriodLimitExceeded':
          return new GrantExhausted(`the grant has ${args[0]} base units left this period; it renews at ${iso(Number(args[1]))}`)
        case 'GrantRevoked':
          return new GrantRefused(`the grant ${args[0]} was revoked`)
        case 'GrantExpired':
          return new GrantRefused(`the grant ${args[0]} expired at ${iso(Number(args[1]))}`)
        case 'TokenNotAllowed':
          return new GrantRefused(`the grant does not allow token ${args[0]}`)
        case 'RouterNotAllowed':
          return new GrantRefused(`the grant does not allow router ${args[0]}`)
        case 'OutputShort':
          return new WouldRevert(`the swap would pay ${args[0]}, below its minimum ${args[1]}`)
        default:
          return new WouldRevert(`TradeGrants refused the swap: ${decoded.errorName}(${args.join(', ')})`)
      }
    },

    /** what the owner received of `token` in a swap's receipt (the Swapped event) */
    receivedOf(receipt: TransactionReceipt): bigint {
      const [swapped] = parseEventLogs({ abi: tradeGrantsAbi, eventName: 'Swapped', logs: receipt.logs }) as unknown as Array<{
        args: { amountOut: bigint }
      }>
      return swapped?.args.amountOut ?? 0n
    },
  }
}

/** the revert data somewhere in a viem error's causes (an estimateGas failure keeps it as `data`) */
function findRevertData(error: unknown): Hex | undefined {
  let e = error as { data?: unknown; cause?: unknown } | undefined
  for (let depth = 0; e && depth < 8; depth++) {
    if (typeof e.data === 'string' && e.data.startsWith('0x') && e.data.length >= 10) return e.data as Hex
    e = e.cause as typeof e
  }
  return undefined
}

export type Grants = ReturnType<typeof createGrants>
