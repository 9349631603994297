import { encodeDeployData, getAddress, getContractAddress, type Address, type Hex } from 'viem'
import { arbitrumOneTokens, type Token } from '@ats/chain'
import { localArtifact, type Artifact } from './artifacts.ts'
import { sendBatch, type BatchTx } from './funding.ts'
import type { DeployerSession } from './session.ts'

/** How each token is built on the devnet: its artifact and constructor arguments. */
function tokenDeployment(token: Token): { artifact: Artifact; args: unknown[] } {
  if (token.symbol === 'WETH') return { artifact: localArtifact('WrappedEther'), args: [] }
  // EIP-3009 (transferWithAuthorization), EIP-712 domain "USD Coin" / "2": x402 settles on it
  if (token.symbol === 'USDC') return { artifact: localArtifact('DevUsdc'), args: [] }
  return { artifact: localArtifact('DevToken'), args: [token.name, token.symbol, token.decimals] }
}

/**
 * Deploys every Arbitrum One token (same symbols, names and decimals) in the order of
 * `arbitrumOneTokens`, all from the deployer in one batch: on a fresh chain the addresses
 * are the same on every run. Returns the tokens with their devnet addresses.
 */
export async function deployTokens(s: DeployerSession, tokens: readonly Token[] = arbitrumOneTokens): Promise<Token[]> {
  const nonce = await s.publicClient.getTransactionCount({ address: s.account.address, blockTag: 'pending' })
  const txs: BatchTx[] = await Promise.all(
    tokens.map(async (token) => {
      const { artifact, args } = tokenDeployment(token)
      const data: Hex = encodeDeployData({ abi: artifact.abi, bytecode: artifact.bytecode, args })
      const gas = await s.publicClient.estimateGas({ account: s.account.address, data })
      return { data, gas: (gas * 12n) / 10n }
    }),
  )
  await sendBatch(s, txs)
  return tokens.map((token, i) => ({
    symbol: token.symbol,
    name: token.name,
    decimals: token.decimals,
    address: getAddress(getContractAddress({ from: s.account.address, nonce: BigInt(nonce + i) })),
  }))
}

/** A token of the book by symbol (throws when the book has no such token). */
export function tokenOf(tokens: readonly Token[], symbol: string): Token {
  const token = tokens.find((t) => t.symbol === symbol)
  if (!token) throw new Error(`devnet: no token ${symbol}`)
  return token
}

export const tokenBySymbol = (tokens: readonly Token[], symbol: string): Address => tokenOf(tokens, symbol).address
