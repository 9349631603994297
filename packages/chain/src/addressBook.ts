import { existsSync, readFileSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { isAddress } from 'viem'
import { arbitrumOne, type AddressBook } from './networks.ts'

export const ARBITRUM_ONE_CHAIN_ID = 42161
export const DEVNET_CHAIN_ID = 31337

/** Where `pnpm devnet` (and `pnpm start` without RPC_URL) writes the devnet's address book: <repo>/.devnet/address-book.json */
export const defaultDevnetAddressBookPath = fileURLToPath(new URL('../../../.devnet/address-book.json', import.meta.url))

export class AddressBookError extends Error {
  override name = 'AddressBookError'
}

function checkAddresses(path: string, where: string, value: unknown, keys: string[]) {
  if (typeof value !== 'object' || value === null) throw new AddressBookError(`address book ${path}: ${where} is missing`)
  for (const key of keys) {
    const address = (value as Record<string, unknown>)[key]
    if (typeof address !== 'string' || !isAddress(address)) {
      throw new AddressBookError(`address book ${path}: ${where}.${key} is not an address`)
    }
  }
}

/** Reads an address book written as JSON (the devnet's), checking its shape. */
export function loadAddressBook(path: string): AddressBook {
  if (!existsSync(path)) {
    throw new AddressBookError(`address book ${path} not found: start the devnet: pnpm devnet`)
  }
  let book: AddressBook
  try {
    book = JSON.parse(readFileSync(path, 'utf8')) as AddressBook
  } catch (error) {
    throw new AddressBookError(`address book ${path} is not valid JSON (${(error as Error).message})`)
  }
  if (typeof book !== 'object' || book === null) throw new AddressBookError(`address book ${path} is not an object`)
  if (!Number.isInteger(book.chainId)) throw new AddressBookError(`address book ${path}: chainId is missing`)
  if (typeof book.name !== 'string') throw new AddressBookError(`address book ${path}: name is missing`)
  if (!Array.isArray(book.tokens) || book.tokens.length === 0) throw new AddressBookError(`address book ${path}: tokens are missing`)
  book.tokens.forEach((token, i) => {
    checkAddresses(path, `tokens[${i}]`, token, ['address'])
    if (typeof token.symbol !== 'string' || !Number.isInteger(token.decimals)) {
      throw new AddressBookError(`address book ${path}: tokens[${i}] needs a symbol and decimals`)
    }
  })
  checkAddresses(path, 'uniswapV3', book.uniswapV3, ['factory', 'quoterV2', 'swapRouter02', 'positionManager'])
  checkAddresses(path, 'algebra', book.algebra, ['factory', 'quoterV2', 'swapRouter', 'positionManager'])
  return book
}

/**
 * The address book of a chain: Arbitrum One's built in for 42161, the devnet's JSON file
 * (written by `pnpm devnet`, default `<repo>/.devnet/address-book.json`) for 31337.
 */
export function addressBookFor({ chainId, addressBookPath }: { chainId: number; addressBookPath?: string | undefined }): AddressBook {
  if (chainId === ARBITRUM_ONE_CHAIN_ID) return arbitrumOne
  if (chainId === DEVNET_CHAIN_ID) {
    const path = addressBookPath || defaultDevnetAddressBookPath
    const book = loadAddressBook(path)
    if (book.chainId !== chainId) {
      throw new AddressBookError(`address book ${path} is for chain ${book.chainId}, not ${chainId}`)
    }
    return book
  }
  throw new AddressBookError(
    `no address book for chain ${chainId}: supported are ${ARBITRUM_ONE_CHAIN_ID} (Arbitrum One) and ${DEVNET_CHAIN_ID} (devnet)`,
  )
}
