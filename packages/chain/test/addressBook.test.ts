import t from 'tap'
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { addressBookFor, arbitrumOne, defaultDevnetAddressBookPath, loadAddressBook, type AddressBook } from '../src/index.ts'

const devnetBook: AddressBook = {
  chainId: 31337,
  name: 'devnet',
  tokens: [{ symbol: 'WETH', name: 'Wrapped Ether', decimals: 18, address: '0x5FbDB2315678afecb367f032d93F642f64180aa3' }],
  uniswapV3: {
    factory: '0xe7f1725E7734CE288F8367e1Bb143E90bb3F0512',
    quoterV2: '0x9fE46736679d2D9a65F0992F2272dE9f3c7fa6e0',
    swapRouter02: '0xCf7Ed3AccA5a467e9e704C703E8D87F634fB0Fc9',
    positionManager: '0xDc64a140Aa3E981100a9becA4E685f962f0cF6C9',
    pools: { WETH_USDC_500: '0x5FC8d32690cc91D4c39d9d3abcBD16989F875707' },
  },
  algebra: {
    factory: '0x0165878A594ca255338adfa4d48449f69242Eb8F',
    quoterV2: '0xa513E6E4b8f2a923D98304ec87F64353C4D5C853',
    swapRouter: '0x2279B7A0a67DB372996a5FaB50D91eAA73d2eBe6',
    positionManager: '0x8A791620dd6260079BF849Dc5567aDC3F2FdC318',
    poolDeployer: '0x610178dA211FEF7D417bC0e6FeD39F05609AD788',
  },
  devnet: { rpcUrl: 'http://127.0.0.1:8545', accounts: [] },
}

const dir = mkdtempSync(join(tmpdir(), 'address-book-'))
t.teardown(() => rmSync(dir, { recursive: true, force: true }))
const write = (name: string, content: unknown) => {
  const path = join(dir, name)
  writeFileSync(path, typeof content === 'string' ? content : JSON.stringify(content))
  return path
}

t.test('42161 is the built-in Arbitrum One book, whatever the path', async (t) => {
  t.equal(addressBookFor({ chainId: 42161 }), arbitrumOne)
  t.equal(addressBookFor({ chainId: 42161, addressBookPath: join(dir, 'nope.json') }), arbitrumOne)
})

t.test('31337 reads the devnet JSON', async (t) => {
  const path = write('devnet.json', devnetBook)
  t.same(loadAddressBook(path), devnetBook)
  const book = addressBookFor({ chainId: 31337, addressBookPath: path })
  t.same(book, devnetBook)
  t.equal(book.algebra.poolDeployer, devnetBook.algebra.poolDeployer)
  t.equal(book.devnet?.rpcUrl, 'http://127.0.0.1:8545')
})

t.test('a missing devnet book says to start the devnet', async (t) => {
  const path = join(dir, 'missing.json')
  t.throws(() => addressBookFor({ chainId: 31337, addressBookPath: path }), {
    name: 'AddressBookError',
    message: `address book ${path} not found: start the devnet: pnpm devnet`,
  })
  t.match(defaultDevnetAddressBookPath, /\.devnet\/address-book\.json$/)
})

t.test('bad files and unknown chains are refused clearly', async (t) => {
  t.throws(() => loadAddressBook(write('garbage.json', '{not json')), /is not valid JSON/)
  t.throws(
    () => loadAddressBook(write('no-router.json', { ...devnetBook, algebra: { ...devnetBook.algebra, swapRouter: '0x12' } })),
    /algebra\.swapRouter is not an address/,
  )
  t.throws(() => loadAddressBook(write('no-tokens.json', { ...devnetBook, tokens: [] })), /tokens are missing/)
  t.throws(
    () => addressBookFor({ chainId: 31337, addressBookPath: write('other-chain.json', { ...devnetBook, chainId: 1 }) }),
    /is for chain 1, not 31337/,
  )
  t.throws(() => addressBookFor({ chainId: 10 }), /no address book for chain 10/)
})
