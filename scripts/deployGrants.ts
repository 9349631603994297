// pnpm grants:deploy: deploys the TradeGrants contract at its deterministic address (CREATE2
// through the deployment proxy, salt 0) on the chain of RPC_URL, from DEPLOYER_PRIVATE_KEY (any
// funded key: the contract has no owner). Once per chain; a second run finds it and says so.
import { createPublicClient, createWalletClient, http, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { defaultTradeGrantsAddress, tradeGrantsDeployment } from '../services/trading/src/grants/grants.ts'

const rpcUrl = process.env.RPC_URL
const key = process.env.DEPLOYER_PRIVATE_KEY
if (!rpcUrl || !key || !/^0x[0-9a-fA-F]{64}$/.test(key)) {
  console.error('pnpm grants:deploy needs RPC_URL and DEPLOYER_PRIVATE_KEY (0x + 64 hex, holding gas on that chain)')
  process.exit(2)
}
const client = createPublicClient({ transport: http(rpcUrl) })
const address = defaultTradeGrantsAddress
const deployed = await client.getCode({ address }).catch((error: Error) => {
  console.error(`the chain at RPC_URL did not answer: ${error.message.split('\n')[0]}`)
  process.exit(1)
})
if (deployed) {
  console.log(`TradeGrants is already deployed at ${address} (chain ${await client.getChainId()})`)
  process.exit(0)
}
if (!(await client.getCode({ address: tradeGrantsDeployment.to }))) {
  console.error(
    `this chain has no CREATE2 deployment proxy at ${tradeGrantsDeployment.to}: deploy TradeGrants another way and set TRADE_GRANTS_ADDRESS`,
  )
  process.exit(1)
}
const wallet = createWalletClient({ account: privateKeyToAccount(key as Hex), transport: http(rpcUrl) })
const hash = await wallet.sendTransaction({ ...tradeGrantsDeployment, chain: null })
const receipt = await client.waitForTransactionReceipt({ hash })
if (receipt.status !== 'success' || !(await client.getCode({ address }))) {
  console.error(`the deployment ${hash} did not leave TradeGrants at ${address}`)
  process.exit(1)
}
console.log(`TradeGrants deployed at ${address} in block ${receipt.blockNumber} (${hash}): set GRANTS_FROM_BLOCK=${receipt.blockNumber}`)
