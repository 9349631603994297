import { erc721Abi, isAddressEqual, type Address, type PublicClient } from 'viem'

const transferEvent = erc721Abi.find((item) => item.type === 'event' && item.name === 'Transfer')!

/**
 * Token ids `owner` holds in an ERC-721 without the enumerable extension: every id ever
 * transferred to `owner` (Transfer logs from block 0), kept if ownerOf still says `owner`.
 * Ascending by id.
 */
export async function listTokensByLogs(client: PublicClient, collection: Address, owner: Address): Promise<bigint[]> {
  const logs = await client.getLogs({ address: collection, event: transferEvent, args: { to: owner }, fromBlock: 0n, toBlock: 'latest' })
  const candidates = [...new Set(logs.map((log) => log.args.tokenId!))]
  const owners = await Promise.all(
    candidates.map((tokenId) => client.readContract({ address: collection, abi: erc721Abi, functionName: 'ownerOf', args: [tokenId] })),
  )
  return candidates.filter((_, i) => isAddressEqual(owners[i]!, owner)).sort((a, b) => (a < b ? -1 : a > b ? 1 : 0))
}
