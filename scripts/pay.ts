// `pnpm pay [--credit] [METHOD] <path> [JSON body]`: one request through the gateway paid with
// x402, as an agent's client pays: the 402's requirements are signed by the x402 reference client
// (@x402/fetch) from a devnet account (or PAYER_PRIVATE_KEY), at most PAY_MAX_AMOUNT (base units
// of the asset; default 100000, $0.10, and for /credit/topup the amount asked) a request. With
// --credit the request is paid from the wallet's prepaid credit instead (top it up first with
// `pnpm pay POST '/credit/topup?amount=1000000'`): x402's sign-in-with-x client (wrapFetchWithSIWx)
// signs in once for a session token, nothing is paid on chain. A job it starts
// is followed to its end through its event stream (paid the same way). GATEWAY_URL: default
// http://localhost:3000.
import { readFileSync } from 'node:fs'
import { join } from 'node:path'
import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithSIWx } from '@x402/extensions/sign-in-with-x'
import { wrapFetchWithPayment, x402Client } from '@x402/fetch'
import type { Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { root } from '@ats/fleet'

const fail = (message: string): never => {
  console.error(message)
  process.exit(1)
}
const args = process.argv.slice(2)
const credit = args[0] === '--credit'
if (credit) args.shift()
const method = /^[A-Z]+$/.test(args[0] ?? '') ? args.shift()! : 'GET'
const [path, body] = args
if (!path?.startsWith('/'))
  fail(
    'usage: pnpm pay [--credit] [METHOD] <path> [JSON body], e.g. pnpm pay POST /agent/prompt \'{"prompt":"What is the price of ARB?"}\'',
  )
if (body !== undefined) {
  try {
    JSON.parse(body)
  } catch {
    fail(`the body is not JSON: ${body}`)
  }
}
const gateway = (process.env.GATEWAY_URL ?? 'http://localhost:3000').replace(/\/$/, '')

/** the payer: PAYER_PRIVATE_KEY, else devnet account 1 of the address book `pnpm start` writes */
function payerKey(): Hex {
  if (process.env.PAYER_PRIVATE_KEY) return process.env.PAYER_PRIVATE_KEY as Hex
  const bookPath = process.env.ADDRESS_BOOK ?? join(root, '.devnet', 'address-book.json')
  try {
    const book = JSON.parse(readFileSync(bookPath, 'utf8')) as { devnet?: { accounts?: Array<{ privateKey: Hex }> } }
    return book.devnet?.accounts?.[1]?.privateKey ?? fail(`${bookPath} lists no devnet accounts: set PAYER_PRIVATE_KEY`)
  } catch (error) {
    return fail(
      `no payer: set PAYER_PRIVATE_KEY, or start the devnet (pnpm start) so that ${bookPath} exists (${(error as Error).message})`,
    )
  }
}

const init = { method, ...(body === undefined ? {} : { body, headers: { 'content-type': 'application/json' } }) }
const url = `${gateway}${path}`
const payer = privateKeyToAccount(payerKey())
const unreachable = (error: Error) => fail(`${gateway}: ${error.message} (is the fleet running? pnpm start)`)

/** x402: the 402's requirements, signed by the reference client, at most maxAmount a request */
async function x402Fetch(): Promise<{ pay: typeof fetch; how: (answer: Response) => string }> {
  const unpaid = await fetch(url, init).catch(unreachable)
  const required = unpaid.headers.get('payment-required')
  if (unpaid.status !== 402 || !required)
    fail(`${method} ${path} answered ${unpaid.status}, not 402 with PAYMENT-REQUIRED: ${await unpaid.text()}`)
  await unpaid.body?.cancel()
  const { accepts } = JSON.parse(Buffer.from(required!, 'base64').toString('utf8')) as {
    accepts: Array<{ network: `${string}:${string}`; asset: string; amount: string }>
  }
  const network = accepts[0]!.network
  // a top-up asks for the amount in its own URL: that amount is what the caller chose to pay
  const topUpAmount = path!.startsWith('/credit/topup') ? new URL(url).searchParams.get('amount') : null
  const maxAmount = process.env.PAY_MAX_AMOUNT ?? topUpAmount ?? '100000'
  const client = x402Client.fromConfig({
    schemes: [{ network, client: new ExactEvmScheme(payer) }],
    // the assets the gateway asks for, each at most maxAmount a request: a client that pays without a cap pays anything
    spendControls: { allowedAssets: accepts.map((a) => ({ network: a.network, asset: a.asset, maxAmountPerPayment: maxAmount })) },
  })
  return {
    pay: wrapFetchWithPayment(fetch, client),
    how: () => `paid by ${payer.address}, ${accepts[0]!.amount} base units on ${network}`,
  }
}

/** credit: one sign-in (x402's sign-in-with-x client) for a session token, sent as the bearer (/v1 takes it as an API key) */
async function creditFetch(): Promise<{ pay: typeof fetch; how: (answer: Response) => string }> {
  const signedIn = await wrapFetchWithSIWx(fetch, payer)(`${gateway}/credit/session`, { method: 'POST' }).catch(unreachable)
  if (signedIn.status !== 200) fail(`the sign-in (POST /credit/session) answered ${signedIn.status}: ${await signedIn.text()}`)
  const { token } = (await signedIn.json()) as { token: string }
  const pay: typeof fetch = (input, options = {}) =>
    fetch(input, { ...options, headers: { ...(options.headers as Record<string, string>), authorization: `Bearer ${token}` } })
  return {
    pay,
    how: (answer) => `from ${payer.address}'s credit, ${answer.headers.get('ats-credit-available') ?? 'unknown'} base units left`,
  }
}

const { pay, how } = credit ? await creditFetch() : await x402Fetch()
const answer = await pay(url, init)
const text = await answer.text()
console.log(`${method} ${path}: ${answer.status} (${how(answer)})`)
console.log(text)
const jobId = answer.status === 202 ? (JSON.parse(text) as { jobId?: string }).jobId : undefined
if (jobId) {
  // the job's events: the stream ends with the job; its last status event carries the result
  const events = await pay(`${gateway}/agent/job/${jobId}/events`)
  const stream = await events.text()
  const statuses = [...stream.matchAll(/^event: status\ndata: (.*)$/gm)].map((m) => m[1]!)
  console.log(`job ${jobId}: ${statuses.at(-1) ?? `no status event (${events.status} ${stream.slice(0, 200)})`}`)
}
if (answer.status >= 400) process.exit(1)
