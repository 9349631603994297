import { ExactEvmScheme } from '@x402/evm/exact/client'
import { wrapFetchWithSIWx } from '@x402/extensions/sign-in-with-x'
import { wrapFetchWithPayment, x402Client } from '@x402/fetch'
import type { PrivateKeyAccount } from 'viem/accounts'
import { adminKey, eventually, fundedAccount, type startPaidFleet } from './fleet.ts'

/** A wallet's credit as GET /credit answers it. */
export interface Credit {
  available: string
  balance: string
  held: string
  pendingTopUps: unknown[]
  recent: Array<{ kind: string; amount: string }>
}

const network = 'eip155:31337'

/**
 * A client's way to prepaid credit through the gateway at `publicUrl` (its PUBLIC_URL, so that
 * sign-ins name it), on a fleet whose admin settles top-ups on chain (SETTLEMENT_ENABLED).
 */
export function creditFlow(
  fleet: Pick<Awaited<ReturnType<typeof startPaidFleet>>, 'devnet' | 'publicClient' | 'usdc' | 'request'>,
  publicUrl: string,
) {
  /** A fresh wallet holding `amount` USDC; it needs no ETH: settlement pays the gas. */
  const fundedWallet = (amount: bigint) => fundedAccount(fleet, amount)

  /** GET /credit of `wallet`, asked with the admin key */
  async function creditOf(wallet: string) {
    const res = await fleet.request(`/credit?wallet=${wallet}`, { key: adminKey })
    if (res.status !== 200) throw new Error(`GET /credit answered ${res.status}: ${JSON.stringify(res.body)}`)
    return res.body as Credit
  }

  /** POST /credit/topup paid with @x402/fetch (answered 202 pending), then spendable once settled on chain */
  async function toppedUp(payer: PrivateKeyAccount, amount: bigint) {
    const wallet = payer.address.toLowerCase()
    const before = BigInt((await creditOf(wallet)).available)
    // the devnet's USDC is not one of the client's default assets: allowed, up to the top-up
    const pay = wrapFetchWithPayment(
      fetch,
      x402Client.fromConfig({
        schemes: [{ network, client: new ExactEvmScheme(payer) }],
        spendControls: { allowedAssets: [{ network, asset: fleet.usdc, maxAmountPerPayment: String(amount) }] },
      }),
    )
    const topUp = await pay(`${publicUrl}/credit/topup?amount=${amount}`, { method: 'POST' })
    if (topUp.status !== 202) throw new Error(`the top-up answered ${topUp.status}: ${await topUp.text()}`)
    const answer = (await topUp.json()) as { state: string }
    if (answer.state !== 'pending') throw new Error(`the top-up answered ${JSON.stringify(answer)}`)
    return eventually(
      'the top-up settled on chain and credited',
      async () => {
        const c = await creditOf(wallet)
        return BigInt(c.available) === before + amount ? c : undefined
      },
      30_000,
    )
  }

  /** a session token (atcs_…) from one sign-in (SIWx) with the wallet */
  async function sessionTokenOf(payer: PrivateKeyAccount) {
    const res = await wrapFetchWithSIWx(fetch, payer)(`${publicUrl}/credit/session`, { method: 'POST' })
    if (res.status !== 200) throw new Error(`POST /credit/session answered ${res.status}: ${await res.text()}`)
    return ((await res.json()) as { token: string }).token
  }

  /** the headers that pay with a session token from one sign-in with the wallet */
  const sessionOf = async (payer: PrivateKeyAccount) => ({ authorization: `Bearer ${await sessionTokenOf(payer)}` })

  return { fundedWallet, creditOf, toppedUp, sessionTokenOf, sessionOf }
}
