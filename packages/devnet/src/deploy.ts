import { anvilChain, defaultDevnetAddressBookPath, MULTICALL3_ADDRESS, type AddressBook } from '@ats/chain'
import { localArtifact } from './artifacts.ts'
import type { Address } from 'viem'
import { deployCollection } from './collection.ts'
import { deployPositions } from './positions.ts'
import { deployAlgebra, type AlgebraAddresses } from './algebra.ts'
import { removeAddressBook, writeAddressBook } from './addressBook.ts'
import { startAnvil, type Anvil } from './anvil.ts'
import { findSnapshot, saveSnapshot } from './snapshot.ts'
import { devAccounts, fundAccounts, type DevAccount } from './funding.ts'
import { seedBatch, seededPools, seedingNeeds, tokenAbi } from './seed.ts'
import { deployerSession, type DeployerSession } from './session.ts'
import { deployTokens, tokenBySymbol } from './tokens.ts'
import { deployUniswapV3, type UniswapV3Addresses } from './uniswap.ts'

/** What deployDevnet returns: the chain package's AddressBook with the devnet's pools and pool deployer always present. */
export interface DevnetAddressBook extends AddressBook {
  uniswapV3: UniswapV3Addresses
  algebra: AlgebraAddresses
  aaveV3: { pool: Address }
  gmxV2: { dataStore: Address; reader: Address }
  nfts: { collections: Address[]; spam: Address[] }
}

/**
 * Deploys every Arbitrum One token, Uniswap V3 and Algebra Integral onto a fresh anvil and
 * seeds the main pairs on each (SEEDED_PAIRS: WETH/USDC, WBTC/USDC, ARB/USDC, WETH/ARB, GMX/WETH,
 * USDT/USDC, LINK/USDC).
 * Every transaction comes from the deployer account in a fixed order, so on a fresh chain
 * the addresses are the same on every run.
 */
export async function deployDevnet(rpcUrl: string): Promise<DevnetAddressBook> {
  const s = deployerSession(rpcUrl)
  const tokens = await deployTokens(s)
  const weth = tokenBySymbol(tokens, 'WETH')
  const usdc = tokenBySymbol(tokens, 'USDC')

  // Exactly what the seeded pools of both DEXes take: WETH wrapped from the deployer's ether, the rest minted.
  const seeded = seededPools(tokens)
  await seedBatch(
    s,
    [...seedingNeeds(seeded, 2)].map(([token, amount]) =>
      token === weth
        ? { address: weth, abi: tokenAbi, functionName: 'deposit', value: amount }
        : { address: token, abi: tokenAbi, functionName: 'mint', args: [s.account.address, amount] },
    ),
  )

  const uniswapV3 = await deployUniswapV3(s, weth, seeded)
  const algebra = await deployAlgebra(s, weth, seeded)

  // One contract answers both Aave's getUserAccountData and GMX's getAccountPositions, so
  // the real adapters read it; the server wallet (account 0 by default) holds a position in each.
  const [server, second] = devAccounts(2).map((account) => account.address) as [Address, Address]
  const positions = await deployPositions(s, server, { market: weth, collateralToken: usdc })
  const collection = await deployCollection(s, [server, second], { name: 'Devnet Apes', symbol: 'DAPE' })
  const spam = await deployCollection(s, [server, second], { name: 'Claim Free ETH', symbol: 'CLAIM' })
  await placeMulticall3(s)
  return {
    chainId: anvilChain.id,
    name: 'devnet',
    tokens,
    uniswapV3,
    algebra,
    aaveV3: { pool: positions },
    gmxV2: { dataStore: positions, reader: positions },
    nfts: { collections: [collection.address, spam.address], spam: [spam.address] },
  }
}

/**
 * Multicall3's aggregate3 (contracts/Multicall.sol) at Multicall3's Arbitrum One address
 * (MULTICALL3_ADDRESS), as a genesis account would have it: the creation code is run by an
 * `eth_call` (which returns the runtime code) and the result set with `anvil_setCode`. No
 * transaction: every other address stays what it was.
 */
async function placeMulticall3(s: DeployerSession): Promise<void> {
  const runtime = await s.publicClient.call({ data: localArtifact('DevMulticall').bytecode })
  if (!runtime.data || runtime.data === '0x') throw new Error('devnet deploy: Multicall3 creation returned no code')
  await s.anvil.setCode({ address: MULTICALL3_ADDRESS, bytecode: runtime.data })
}

export interface Devnet {
  anvil: Anvil
  rpcUrl: string
  chainId: number
  book: DevnetAddressBook
  /** where the book was written (absent when not written) */
  addressBookPath?: string
  accounts: DevAccount[]
  timings: { anvilMs: number; deployMs: number; fundMs: number; totalMs: number }
  /** Stops anvil and removes the address book file it wrote. */
  stop(): Promise<void>
}

export interface StartDevnetOptions {
  port: number
  /** the interface anvil listens on (127.0.0.1) */
  host?: string
  /** where to write the address book; defaultDevnetAddressBookPath (where services read it) by default, false to write none */
  addressBookPath?: string | false
  /** how many default accounts to fund (10) */
  accounts?: number
  /**
   * Start from the saved deployment when there is one for this code (see snapshot.ts), and save
   * one when there is not: what tests use. `pnpm devnet` and the bench deploy afresh.
   */
  snapshot?: boolean
}

/** Starts anvil, deploys, funds the default accounts and writes the address book: what `pnpm devnet` runs. */
export async function startDevnet({
  port,
  host,
  addressBookPath = defaultDevnetAddressBookPath,
  accounts: count = 10,
  snapshot = false,
}: StartDevnetOptions): Promise<Devnet> {
  const started = performance.now()
  const kept = snapshot && process.env.ATS_DEVNET_SNAPSHOTS !== '0' ? findSnapshot(count) : undefined
  const saved = kept?.saved
  const anvil = await startAnvil({ port, host, ...(saved ? { loadState: saved.statePath } : {}) })
  try {
    const anvilDone = performance.now()
    const accounts = devAccounts(count)
    let deployed = saved?.book
    if (!deployed) {
      deployed = await deployDevnet(anvil.rpcUrl)
      await fundAccounts(deployerSession(anvil.rpcUrl), deployed.tokens, accounts)
      if (kept) await saveSnapshot(anvil.rpcUrl, deployed, kept.base)
    }
    // with a snapshot, deploying and funding took no time
    const deployDone = saved ? anvilDone : performance.now()
    const fundDone = performance.now()
    const book: DevnetAddressBook = { ...deployed, devnet: { rpcUrl: anvil.rpcUrl, accounts } }
    const path = addressBookPath === false ? undefined : writeAddressBook(book, addressBookPath)
    const ms = (a: number, b: number) => Math.round(b - a)
    return {
      anvil,
      rpcUrl: anvil.rpcUrl,
      chainId: book.chainId,
      book,
      ...(path ? { addressBookPath: path } : {}),
      accounts,
      timings: {
        anvilMs: ms(started, anvilDone),
        deployMs: ms(anvilDone, deployDone),
        fundMs: ms(deployDone, fundDone),
        totalMs: ms(started, fundDone),
      },
      stop: async () => {
        if (path) removeAddressBook(book, path)
        await anvil.stop()
      },
    }
  } catch (error) {
    await anvil.stop()
    throw error
  }
}
