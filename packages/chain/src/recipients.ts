// Who a swap from the server wallet may pay out to: the one rule automation checks when an
// automation is created and trading checks before every swap that names a recipient. Here, not in
// the kit: it is a rule about chain addresses, and needs nothing of a service.
import { getAddress } from 'viem'
import { RecipientNotAllowed } from './errors.ts'

/** What an owner (an API key, or an agent payer) may name as the recipient of a swap the server wallet pays for. */
export interface RecipientRule {
  /** for messages: "key key_abc" or "payer 0xAbc…" */
  owner: string
  /** its own wallet: a key's bound wallet, a payer itself; null: none */
  own: string | null
  /** the recipients an admin allowed (allowedRecipients of its spend policy) */
  allowed?: readonly string[] | undefined
}

const same = (a: string, b: string) => a.toLowerCase() === b.toLowerCase()

/** Throws 403 naming the rule unless `recipient` is the owner's own wallet or one an admin allowed it. */
export function checkRecipient(rule: RecipientRule, recipient: string): void {
  if (rule.own && same(rule.own, recipient)) return
  if (rule.allowed?.some((address) => same(address, recipient))) return
  const own = rule.own ? `its own wallet (${getAddress(rule.own)})` : 'its bound wallet (it has none)'
  throw new RecipientNotAllowed(
    `recipient ${getAddress(recipient)} is not allowed for ${rule.owner}: the server wallet pays out only to ${own} or to a recipient an admin allowed for it (allowedRecipients in its spend policy)`,
  )
}
