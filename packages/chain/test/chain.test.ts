import t from 'tap'
import { arbitrumOne, arbitrumOneTokens, createChainClients, createTokenRegistry, ServerWalletNotConfigured } from '../src/index.ts'

const registry = createTokenRegistry(arbitrumOneTokens)

t.test('tokens are found by symbol or address, case-insensitively', async (t) => {
  t.equal(registry.find('weth')?.address, '0x82aF49447D8a07e3bd95BD0d56f35241523fBab1')
  t.equal(registry.find('USDC.E')?.symbol, 'USDC.e')
  t.equal(registry.find('0xaf88d065e77c8cc2239327c5edb3a432268e5831')?.symbol, 'USDC')
  t.equal(registry.find(' 0xAF88D065E77C8CC2239327C5EDB3A432268E5831 ')?.decimals, 6)
  t.equal(registry.find('DOGE'), undefined)
  t.equal(registry.find('0x0000000000000000000000000000000000000001'), undefined)
})

t.test('the Arbitrum One registry holds the nine tokens with their decimals', async (t) => {
  t.same(
    registry.all.map((token) => [token.symbol, token.decimals]),
    [
      ['WETH', 18],
      ['USDC', 6],
      ['USDC.e', 6],
      ['USDT', 6],
      ['ARB', 18],
      ['WBTC', 8],
      ['GMX', 18],
      ['LINK', 18],
      ['DAI', 18],
    ],
  )
})

t.test('a registry refuses a symbol or address given twice', async (t) => {
  const [weth] = arbitrumOneTokens
  t.throws(() => createTokenRegistry([weth!, { ...weth!, symbol: 'WETH2' }]), /appears twice/)
  t.throws(() => createTokenRegistry([weth!, { ...weth!, address: '0x0000000000000000000000000000000000000002' }]), /weth appears twice/)
})

t.test('every address in the Arbitrum One book is checksummed', async (t) => {
  const addresses = JSON.stringify(arbitrumOne).match(/0x[0-9a-fA-F]{40}/g) ?? []
  t.ok(addresses.length >= 20)
  const { getAddress } = await import('viem')
  for (const address of addresses) t.equal(getAddress(address), address)
})

t.test('without a private key, write access says the server wallet is not configured', async (t) => {
  const clients = createChainClients({ rpcUrl: 'http://127.0.0.1:8545', chainId: 42161 })
  t.equal(clients.chain.id, 42161)
  t.throws(() => clients.wallet(), new ServerWalletNotConfigured())
  t.throws(() => clients.wallet(), { message: 'server wallet not configured' })
})

t.test('with a private key, the wallet is that account on the configured chain', async (t) => {
  const clients = createChainClients({
    rpcUrl: 'http://127.0.0.1:8545',
    chainId: 31337,
    privateKey: '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80',
  })
  t.equal(clients.wallet().account.address, '0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266')
  t.equal(clients.chain.name, 'devnet')
})
