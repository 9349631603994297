import { x402Facilitator } from '@x402/core/facilitator'
import { type FacilitatorClient, x402ResourceServer } from '@x402/core/server'
import type { Network, SupportedResponse } from '@x402/core/types'
import { toFacilitatorEvmSigner } from '@x402/evm'
import { ExactEvmScheme as ExactFacilitatorScheme } from '@x402/evm/exact/facilitator'
import { ExactEvmScheme as ExactServerScheme } from '@x402/evm/exact/server'
import { paymentMiddleware } from '@x402/express'
import express from 'express'
import { createWalletClient, defineChain, type Hex, http, publicActions } from 'viem'
import { nonceManager, privateKeyToAccount } from 'viem/accounts'

/**
 * The x402 reference seller for bench/reference.ts: an Express app with @x402/express's payment
 * middleware on GET /agent/skills, and the reference facilitator (@x402/core's x402Facilitator with
 * @x402/evm's exact scheme) in this same process, signing settlements with FACILITATOR_PRIVATE_KEY
 * on the devnet at RPC_URL. The middleware verifies, runs the route, then settles on chain before
 * it answers: every 200 is a payment already on chain. Prints its address first.
 *
 * Settings: PORT, RPC_URL, CHAIN_ID, FACILITATOR_PRIVATE_KEY, PAY_TO, and the price as our gateway
 * asks it: ASSET, AMOUNT (base units), EXTRA (the JSON of the requirement's `extra`: the EIP-712 name and version).
 */

const setting = (name: string) => {
  const value = process.env[name]
  if (!value) throw new Error(`referenceSeller: ${name} is required`)
  return value
}
const chainId = Number(setting('CHAIN_ID'))
const rpcUrl = setting('RPC_URL')
const network = `eip155:${chainId}` as Network

// one account sends every settlement: viem's nonce manager numbers concurrent transactions
const account = privateKeyToAccount(setting('FACILITATOR_PRIVATE_KEY') as Hex, { nonceManager })
const chain = defineChain({
  id: chainId,
  name: 'devnet',
  nativeCurrency: { name: 'Ether', symbol: 'ETH', decimals: 18 },
  rpcUrls: { default: { http: [rpcUrl] } },
})
// anvil mines each transaction at once: poll for receipts every 25 ms, not viem's default 4 s
const wallet = createWalletClient({ account, chain, transport: http(rpcUrl), pollingInterval: 25 }).extend(publicActions)
const signer = toFacilitatorEvmSigner({
  address: account.address,
  readContract: (args) => wallet.readContract({ ...args, args: args.args ?? [] }),
  verifyTypedData: (args) => wallet.verifyTypedData(args as Parameters<typeof wallet.verifyTypedData>[0]),
  writeContract: (args) => wallet.writeContract(args as Parameters<typeof wallet.writeContract>[0]),
  sendTransaction: (args) => wallet.sendTransaction(args),
  waitForTransactionReceipt: (args) => wallet.waitForTransactionReceipt(args),
  getCode: (args) => wallet.getCode(args),
})

const facilitator = new x402Facilitator().register(network, new ExactFacilitatorScheme(signer))
// in process: the resource server calls the facilitator's functions instead of POSTing to one
const inProcess: FacilitatorClient = {
  verify: (payload, requirements) => facilitator.verify(payload, requirements),
  settle: (payload, requirements) => facilitator.settle(payload, requirements),
  // the same answer; only its networks are typed as plain strings
  getSupported: async () => facilitator.getSupported() as SupportedResponse,
}
const resourceServer = new x402ResourceServer(inProcess).register(network, new ExactServerScheme())

const price = { asset: setting('ASSET'), amount: setting('AMOUNT'), extra: JSON.parse(setting('EXTRA')) as Record<string, unknown> }
const skills = {
  skills: [
    { name: 'quote', description: 'price a swap' },
    { name: 'portfolio', description: 'summarise holdings' },
  ],
}

const app = express()
app.use(
  paymentMiddleware(
    { 'GET /agent/skills': { accepts: { scheme: 'exact', price, network, payTo: setting('PAY_TO') }, description: 'skills' } },
    resourceServer,
  ),
)
app.get('/agent/skills', (_req, res) => {
  res.json(skills)
})
const server = app.listen(Number(setting('PORT')), '127.0.0.1', () => process.stdout.write(`http://127.0.0.1:${setting('PORT')}\n`))
process.on('SIGTERM', () => server.close(() => process.exit(0)))
