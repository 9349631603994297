// The chains and tokens the offline bridge model quotes between: mainnet addresses, as LI.FI lists them.
import { ARBITRUM_ONE_CHAIN_ID, arbitrumOneTokens, type Token } from '@ats/chain'
import type { BridgeChain } from '@ats/contracts'
import type { Address } from 'viem'

export type ModelToken = Pick<Token, 'address' | 'symbol' | 'decimals'>

export interface ModelChain extends BridgeChain {
  /** the native coin first, then the canonical ERC-20s */
  tokens: readonly ModelToken[]
}

export const nativeAddress: Address = '0x0000000000000000000000000000000000000000'

const chain = (id: number, key: string, name: string, native: Omit<ModelToken, 'address'>, tokens: readonly ModelToken[]): ModelChain => {
  const nativeToken = { address: nativeAddress, ...native }
  return { id, key, name, nativeToken, tokens: [nativeToken, ...tokens] }
}
const ether = { symbol: 'ETH', decimals: 18 }
const opStackWeth: ModelToken = { symbol: 'WETH', decimals: 18, address: '0x4200000000000000000000000000000000000006' }

export const modelChains: readonly ModelChain[] = [
  chain(ARBITRUM_ONE_CHAIN_ID, 'arb', 'Arbitrum', ether, arbitrumOneTokens),
  chain(1, 'eth', 'Ethereum', ether, [
    { symbol: 'USDC', decimals: 6, address: '0xA0b86991c6218b36c1d19D4a2e9Eb0cE3606eB48' },
    { symbol: 'USDT', decimals: 6, address: '0xdAC17F958D2ee523a2206206994597C13D831ec7' },
    { symbol: 'WETH', decimals: 18, address: '0xC02aaA39b223FE8D0A0e5C4F27eAD9083C756Cc2' },
    { symbol: 'WBTC', decimals: 8, address: '0x2260FAC5E5542a773Aa44fBCfeDf7C193bc2C599' },
    { symbol: 'DAI', decimals: 18, address: '0x6B175474E89094C44Da98b954EedeAC495271d0F' },
    { symbol: 'ARB', decimals: 18, address: '0xB50721BCf8d664c30412Cfbc6cf7a15145234ad1' },
  ]),
  chain(10, 'opt', 'OP Mainnet', ether, [
    { symbol: 'USDC', decimals: 6, address: '0x0b2C639c533813f4Aa9D7837CAf62653d097Ff85' },
    { symbol: 'USDC.e', decimals: 6, address: '0x7F5c764cBc14f9669B88837ca1490cCa17c31607' },
    { symbol: 'USDT', decimals: 6, address: '0x94b008aA00579c1307B0EF2c499aD98a8ce58e58' },
    opStackWeth,
    { symbol: 'WBTC', decimals: 8, address: '0x68f180fcCe6836688e9084f035309E29Bf0A2095' },
    { symbol: 'DAI', decimals: 18, address: '0xDA10009cBd5D07dd0CeCc66161FC93D7c9000da1' },
  ]),
  chain(8453, 'bas', 'Base', ether, [
    { symbol: 'USDC', decimals: 6, address: '0x833589fCD6eDb6E08f4c7C32D4f71b54bdA02913' },
    { symbol: 'USDT', decimals: 6, address: '0xfde4C96c8593536E31F229EA8f37b2ADa2699bb2' },
    opStackWeth,
    { symbol: 'DAI', decimals: 18, address: '0x50c5725949A6F0c72E6C4a641F24049A917DB0Cb' },
  ]),
  chain(137, 'pol', 'Polygon', { symbol: 'POL', decimals: 18 }, [
    { symbol: 'USDC', decimals: 6, address: '0x3c499c542cEF5E3811e1192ce70d8cC03d5c3359' },
    { symbol: 'USDC.e', decimals: 6, address: '0x2791Bca1f2de4661ED88A30C99A7a9449Aa84174' },
    { symbol: 'USDT', decimals: 6, address: '0xc2132D05D31c914a87C6611C10748AEb04B58e8F' },
    { symbol: 'WETH', decimals: 18, address: '0x7ceB23fD6bC0adD59E62ac25578270cFf1b9f619' },
    { symbol: 'WBTC', decimals: 8, address: '0x1BFD67037B42Cf73acF2047067bd4F2C47D9BfD6' },
    { symbol: 'DAI', decimals: 18, address: '0x8f3Cf7ad23Cd3CaDbD9735AFf958023239c6A063' },
  ]),
  // BNB Chain's Binance-Peg tokens have 18 decimals, USDC and USDT included
  chain(56, 'bsc', 'BSC', { symbol: 'BNB', decimals: 18 }, [
    { symbol: 'USDC', decimals: 18, address: '0x8AC76a51cc950d9822D68b83fE1Ad97B32Cd580d' },
    { symbol: 'USDT', decimals: 18, address: '0x55d398326f99059fF775485246999027B3197955' },
    { symbol: 'ETH', decimals: 18, address: '0x2170Ed0880ac9A755fd29B2688956BD959F933F8' },
    { symbol: 'BTCB', decimals: 18, address: '0x7130d2A12B9BCbFAe4f2634d864A1Ee1Ce3Ead9c' },
    { symbol: 'DAI', decimals: 18, address: '0x1AF3F329e8BE154074D8769D1FFa4eE058B1DBc3' },
  ]),
  chain(43114, 'ava', 'Avalanche', { symbol: 'AVAX', decimals: 18 }, [
    { symbol: 'USDC', decimals: 6, address: '0xB97EF9Ef8734C71904D8002F8b6Bc66Dd9c48a6E' },
    { symbol: 'USDT', decimals: 6, address: '0x9702230A8Ea53601f5cD2dc00fDBc13d4dF4A8c7' },
    { symbol: 'WETH.e', decimals: 18, address: '0x49D5c2BdFfac6CE2BFdB6640F4F80f226bc10bAB' },
    { symbol: 'WBTC.e', decimals: 8, address: '0x50b7545627a5162F82A992c33b87aDc75187B218' },
    { symbol: 'BTC.b', decimals: 8, address: '0x152b9d0FdC40C096757F570A51E494bd4b943E50' },
    { symbol: 'DAI.e', decimals: 18, address: '0xd586E7F844cEa2F87f50152665BCbc2C279D8d70' },
  ]),
]
