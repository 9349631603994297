import { erc721Abi, getAddress, parseAbi, type Address } from 'viem'
import { localArtifact } from './artifacts.ts'
import type { DeployerSession } from './session.ts'

/** ERC-721 plus DevCollection's open mint. */
export const collectionAbi = [...erc721Abi, ...parseAbi(['function mint(address to, uint256 tokenId)'])] as const

/** How many tokens deployCollection mints to owners[0], owners[1], … */
export const COLLECTION_MINTS = [3, 2] as const

/**
 * Deploys DevCollection and mints token ids 1, 2, … in order: 3 to owners[0], 2 to
 * owners[1] (owners beyond the second get none).
 */
export async function deployCollection(
  s: DeployerSession,
  owners: Address[],
  { name, symbol }: { name: string; symbol: string } = { name: 'Devnet Collection', symbol: 'DEVNFT' },
): Promise<{ address: Address; tokens: Array<{ owner: Address; tokenId: bigint }> }> {
  const address = await s.deploy(localArtifact('DevCollection'), [name, symbol])
  const tokens: Array<{ owner: Address; tokenId: bigint }> = []
  let tokenId = 0n
  for (const [i, count] of COLLECTION_MINTS.entries()) {
    const owner = owners[i]
    if (!owner) break
    for (let n = 0; n < count; n++) {
      tokenId++
      await s.write({ address, abi: collectionAbi, functionName: 'mint', args: [owner, tokenId] })
      tokens.push({ owner: getAddress(owner), tokenId })
    }
  }
  return { address, tokens }
}

/** Lives in packages/chain (the NFT source of market-data reads it too); re-exported for the devnet's tests. */
export { listTokensByLogs } from '@ats/chain'
