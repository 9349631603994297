// The logs NFT source: the tokens of the address book's ERC-721 collections an owner holds, found from their Transfer logs.
import { listTokensByLogs, type AddressBook } from '@ats/chain'
import type { Nft } from '@ats/contracts'
import { erc721Abi, getAddress, type Address, type PublicClient } from 'viem'
import type { NftSource } from '../providers/types.ts'

const byCollectionThenId = (a: Nft, b: Nft) =>
  a.collection.localeCompare(b.collection) ||
  a.contractAddress.localeCompare(b.contractAddress) ||
  Number(BigInt(a.tokenId) - BigInt(b.tokenId))

/**
 * Every token of book().nfts.collections `owner` holds (listTokensByLogs), sorted by collection,
 * then token id, all on one page. A token is named "<collection> #<id>"; imageUrl is its
 * tokenURI: the devnet's collection has no image, so its metadata URI stands in. isSpam: the
 * collection is in book().nfts.spam or `extraSpam`. A book without nfts lists none.
 */
export function logNfts({
  client,
  book,
  extraSpam = [],
}: {
  client: PublicClient
  book: () => AddressBook
  extraSpam?: Address[]
}): NftSource {
  return {
    name: 'logs',
    async nftsOf(owner) {
      const { nfts } = book()
      if (!nfts) return { nfts: [] }
      const spam = new Set([...nfts.spam, ...extraSpam].map((address) => address.toLowerCase()))
      const held = await Promise.all(
        nfts.collections.map(async (collectionAddress) => {
          const contractAddress = getAddress(collectionAddress)
          const [collection, tokenIds] = await Promise.all([
            client.readContract({ address: contractAddress, abi: erc721Abi, functionName: 'name' }),
            listTokensByLogs(client, contractAddress, owner),
          ])
          const uris = await Promise.all(
            tokenIds.map((tokenId) =>
              client.readContract({ address: contractAddress, abi: erc721Abi, functionName: 'tokenURI', args: [tokenId] }),
            ),
          )
          return tokenIds.map(
            (tokenId, i): Nft => ({
              contractAddress,
              tokenId: tokenId.toString(),
              name: `${collection} #${tokenId}`,
              collection,
              imageUrl: uris[i]!,
              isSpam: spam.has(contractAddress.toLowerCase()),
            }),
          )
        }),
      )
      return { nfts: held.flat().sort(byCollectionThenId) }
    },
  }
}
