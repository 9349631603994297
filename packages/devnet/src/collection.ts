import { erc721Abi, getAddress, isAddressEqual, parseAbi, type Address, type PublicClient } from 'viem'
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

/**
 * Token ids `owner` holds in an ERC-721 without the enumerable extension: every id ever
 * transferred to `owner` (Transfer logs from block 0), kept if ownerOf still says `owner`.
 */
export async function listTokensByLogs(client: PublicClient, collection: Address, owner: Address): Promise<bigint[]> {
  const logs = await client.getLogs({
    address: collection,
    event: erc721Abi.find((x) => x.type === 'event' && x.name === 'Transfer')!,
    args: { to: owner },
    fromBlock: 0n,
    toBlock: 'latest',
  })
  const candidates = [...new Set(logs.map((l) => l.args.tokenId!))]
  const owned: bigint[] = []
  for (const tokenId of candidates) {
    const current = await client.readContract({ address: collection, abi: erc721Abi, functionName: 'ownerOf', args: [tokenId] })
    if (isAddressEqual(current, owner)) owned.push(tokenId)
  }
  return owned.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
}
