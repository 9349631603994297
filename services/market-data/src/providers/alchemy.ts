// Alchemy NFT API v3 getNFTsForOwner (https://docs.alchemy.com/reference/getnftsforowner-v3): an owner's NFTs, a page at a time.
import type { Nft } from '@ats/contracts'
import type { HttpClient } from '@ats/service-kit'
import { getAddress, isAddress } from 'viem'
import { UnexpectedAnswer } from '../errors.ts'
import type { NftSource } from './types.ts'

interface OwnedNft {
  contract?: { address?: unknown; name?: unknown; isSpam?: unknown; openSeaMetadata?: { collectionName?: unknown } }
  tokenId?: unknown
  name?: unknown
  image?: { cachedUrl?: unknown; originalUrl?: unknown; pngUrl?: unknown; thumbnailUrl?: unknown }
}

const text = (value: unknown): string | undefined => (typeof value === 'string' && value !== '' ? value : undefined)

/** v3 sends decimal token ids; v2 and some collections hex ones. */
const tokenIdOf = (value: unknown): string | undefined =>
  typeof value === 'string' && /^([0-9]{1,78}|0x[0-9a-fA-F]{1,64})$/.test(value) ? BigInt(value).toString() : undefined

function nftOf(owned: OwnedNft): Nft | undefined {
  const address = owned.contract?.address
  const tokenId = tokenIdOf(owned.tokenId)
  if (typeof address !== 'string' || !isAddress(address) || tokenId === undefined) return undefined
  const collection = text(owned.contract?.openSeaMetadata?.collectionName) ?? text(owned.contract?.name) ?? ''
  const image = owned.image ?? {}
  return {
    contractAddress: getAddress(address),
    tokenId,
    name: text(owned.name) ?? `${collection || 'Token'} #${tokenId}`,
    collection,
    imageUrl: text(image.cachedUrl) ?? text(image.originalUrl) ?? text(image.pngUrl) ?? text(image.thumbnailUrl) ?? '',
    // null when Alchemy has not classified the contract (or the plan has no spam detection)
    isSpam: owned.contract?.isSpam === true,
  }
}

export function alchemyNfts(http: HttpClient): NftSource {
  return {
    name: 'alchemy',
    async nftsOf(owner, { pageKey }) {
      const answer = await http.getJson<{ ownedNfts?: unknown; pageKey?: unknown }>('/getNFTsForOwner', {
        query: { owner, withMetadata: true, pageSize: 100, pageKey },
      })
      if (!Array.isArray(answer?.ownedNfts)) throw new UnexpectedAnswer('alchemy', 'no ownedNfts array')
      const nfts = (answer.ownedNfts as OwnedNft[]).flatMap((owned) => nftOf(owned) ?? [])
      const next = text(answer.pageKey)
      return next ? { nfts, pageKey: next } : { nfts }
    },
  }
}
