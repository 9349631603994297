import { encodeFunctionData, parseAbi, parseUnits, testActions, toHex, type Address, type Hex, type LocalAccount } from 'viem'
import { pbkdf2Sync } from 'node:crypto'
import { HDKey, hdKeyToAccount, privateKeyToAccount } from 'viem/accounts'
import { anvilChain, type Token } from '@ats/chain'
import type { DeployerSession } from './session.ts'

/** anvil's default mnemonic: its accounts are public test accounts, each started with 10,000 ETH. */
export const DEV_MNEMONIC = 'test test test test test test test test test test test junk'

export interface DevAccount {
  address: Address
  /** a public, well-known test key: never use it on a real network */
  privateKey: Hex
}

/**
 * The first `count` default anvil accounts (the first is the deployer), as viem's
 * `mnemonicToAccount(DEV_MNEMONIC, { addressIndex })` derives them (the test checks that).
 * The BIP-39 seed comes from Node's native PBKDF2 once, instead of viem's pure-JS one per
 * account (~35 ms each): this runs on every start.
 */
export function devAccounts(count = 10): DevAccount[] {
  const seed = pbkdf2Sync(DEV_MNEMONIC.normalize('NFKD'), 'mnemonic', 2048, 64, 'sha512')
  const master = HDKey.fromMasterSeed(seed)
  return Array.from({ length: count }, (_, addressIndex) => {
    const account = hdKeyToAccount(master, { addressIndex })
    const privateKey = account.getHdKey().privateKey
    if (!privateKey) throw new Error('devnet: no private key derived')
    return { address: account.address, privateKey: toHex(privateKey) }
  })
}

/** What each funded account gets, in whole tokens, by symbol; every other token gets DEFAULT_FUNDING. */
export const FUNDING: Record<string, string> = { USDC: '1000000', WETH: '100', WBTC: '10' }
export const DEFAULT_FUNDING = '100000'

export const fundingOf = (token: Pick<Token, 'symbol' | 'decimals'>) => parseUnits(FUNDING[token.symbol] ?? DEFAULT_FUNDING, token.decimals)

const fundingAbi = parseAbi(['function mint(address to, uint256 amount)', 'function deposit() payable'])

export interface BatchTx {
  /** the sender; the deployer when absent */
  from?: LocalAccount
  /** absent for a contract creation */
  to?: Address
  data: Hex
  value?: bigint
  gas: bigint
}

/** Keeps one anvil block well under its 30M gas limit. */
const BLOCK_GAS_BUDGET = 25_000_000n

/**
 * Sends many transactions fast: with automine off, every transaction is signed locally
 * (nonces counted here, one fee for all) and sent at once, then one `evm_mine` puts them in
 * a block (several when they need more gas than a block holds). Transactions of one sender
 * run in the order given. Throws if any of them reverted.
 */
export async function sendBatch(s: DeployerSession, txs: BatchTx[]): Promise<void> {
  if (txs.length === 0) return
  const test = s.publicClient.extend(testActions({ mode: 'anvil' }))
  // Nonces by address: the deployer may also appear as an explicit sender.
  const senders = [...new Set(txs.map((tx) => (tx.from ?? s.account).address))]
  const nonces = new Map<Address, number>(
    await Promise.all(
      senders.map(async (address) => [address, await s.publicClient.getTransactionCount({ address, blockTag: 'pending' })] as const),
    ),
  )
  const block = await s.publicClient.getBlock()
  const maxPriorityFeePerGas = 1_000_000_000n
  const maxFeePerGas = 2n * (block.baseFeePerGas ?? 1_000_000_000n) + maxPriorityFeePerGas

  const chunks: BatchTx[][] = [[]]
  let chunkGas = 0n
  for (const tx of txs) {
    if (chunkGas + tx.gas > BLOCK_GAS_BUDGET && chunks.at(-1)!.length > 0) {
      chunks.push([])
      chunkGas = 0n
    }
    chunks.at(-1)!.push(tx)
    chunkGas += tx.gas
  }

  await test.setAutomine(false)
  try {
    for (const chunk of chunks) {
      const signed = await Promise.all(
        chunk.map((tx) => {
          const from = tx.from ?? s.account
          const nonce = nonces.get(from.address)!
          nonces.set(from.address, nonce + 1)
          return from.signTransaction!({
            chainId: anvilChain.id,
            type: 'eip1559',
            nonce,
            to: tx.to ?? null,
            data: tx.data,
            value: tx.value ?? 0n,
            gas: tx.gas,
            maxFeePerGas,
            maxPriorityFeePerGas,
          })
        }),
      )
      // In order, so each sender's nonces arrive in sequence; nothing is mined yet.
      const hashes: Hex[] = []
      for (const serializedTransaction of signed) hashes.push(await s.wallet.sendRawTransaction({ serializedTransaction }))
      await test.mine({ blocks: 1 })
      const receipts = await Promise.all(hashes.map((hash) => s.publicClient.getTransactionReceipt({ hash })))
      const failed = receipts.find((r) => r.status !== 'success')
      if (failed) throw new Error(`devnet: batched transaction ${failed.transactionHash} reverted`)
    }
  } finally {
    await test.setAutomine(true)
  }
}

/**
 * Funds `accounts` with every token: WETH by a deposit from each account itself (real
 * wrapped ether), every other token minted by the deployer. One batch, a block or two.
 */
export async function fundAccounts(s: DeployerSession, tokens: readonly Token[], accounts: DevAccount[]): Promise<void> {
  const txs: BatchTx[] = []
  for (const token of tokens) {
    for (const account of accounts) {
      if (token.symbol === 'WETH') {
        txs.push({
          from: localAccountOf(account),
          to: token.address,
          data: encodeFunctionData({ abi: fundingAbi, functionName: 'deposit' }),
          value: fundingOf(token),
          gas: 100_000n,
        })
      } else {
        txs.push({
          to: token.address,
          data: encodeFunctionData({ abi: fundingAbi, functionName: 'mint', args: [account.address, fundingOf(token)] }),
          gas: 150_000n,
        })
      }
    }
  }
  await sendBatch(s, txs)
}

const localAccounts = new Map<Hex, LocalAccount>()
function localAccountOf(account: DevAccount): LocalAccount {
  let local = localAccounts.get(account.privateKey)
  if (!local) {
    local = privateKeyToAccount(account.privateKey)
    localAccounts.set(account.privateKey, local)
  }
  return local
}
