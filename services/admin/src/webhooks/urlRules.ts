// Which URLs a webhook may be sent to: scheme, credentials, and a host whose addresses are not internal,
// checked when a subscription is made and again when a delivery connects.
import * as dns from 'node:dns'
import { lookup as resolveAll } from 'node:dns/promises'
import { isIP, type LookupFunction } from 'node:net'
import { BadRequest } from '@ats/service-kit'
import { forbiddenAddress } from './forbiddenAddresses.ts'

/** Where deliveries may go: development settings loosen it (WEBHOOK_ALLOW_HTTP, WEBHOOK_ALLOW_PRIVATE_ADDRESSES). */
export interface UrlRules {
  allowHttp: boolean
  allowPrivate: boolean
}

const privateHint = 'set WEBHOOK_ALLOW_PRIVATE_ADDRESSES=true for development only'

/**
 * Checks a webhook URL when a subscription is made or changed: https (http only with allowHttp),
 * no credentials in it, and a host that does not resolve to a loopback, private, link-local,
 * metadata or otherwise internal address (unless allowPrivate). Throws BadRequest naming what is wrong.
 */
export async function checkWebhookUrl(url: string, rules: UrlRules): Promise<void> {
  const parsed = checkedUrl(url, rules)
  const host = hostOf(parsed)
  if (rules.allowPrivate || isIP(host)) return
  const addresses = await resolveAll(host, { all: true }).catch((error: { code?: string }) => {
    throw new BadRequest(`webhook URL host ${host} could not be resolved (${error.code ?? 'DNS error'})`)
  })
  if (addresses.length === 0) throw new BadRequest(`webhook URL host ${host} has no address`)
  const refusal = resolvedRefusal(host, addresses)
  if (refusal) throw new BadRequest(refusalMessage(parsed, refusal))
}

/**
 * The checks that need no DNS: scheme, credentials, fragment, host, and a host given as an IP
 * address (the connect-time lookup is not called for one). Throws BadRequest.
 */
export function checkedUrl(url: string, rules: UrlRules): URL {
  let parsed: URL
  try {
    parsed = new URL(url)
  } catch {
    throw new BadRequest('webhook URL is not a valid absolute URL')
  }
  const schemes = rules.allowHttp ? ['https:', 'http:'] : ['https:']
  if (!schemes.includes(parsed.protocol)) {
    throw new BadRequest(
      rules.allowHttp
        ? 'webhook URL must use https or http'
        : 'webhook URL must use https (http is allowed only with WEBHOOK_ALLOW_HTTP=true, for development)',
    )
  }
  if (parsed.username || parsed.password) throw new BadRequest('webhook URL must not contain a username or password')
  if (parsed.href.includes('#')) throw new BadRequest('webhook URL must not contain a fragment (#…)')
  if (!parsed.hostname) throw new BadRequest('webhook URL has no host')
  const host = hostOf(parsed)
  const reason = !rules.allowPrivate && isIP(host) ? forbiddenAddress(host) : undefined
  if (reason) throw new BadRequest(refusalMessage(parsed, `${host} is ${article(reason)} ${reason} address`))
  return parsed
}

/** The host to resolve or connect to: IPv6 literals without their brackets. */
export const hostOf = (url: URL) => url.hostname.replace(/^\[(.*)\]$/, '$1')

/** The URL as a message may show it: no query, which may carry a token. */
const shown = (url: URL) => `${url.origin}${url.pathname}`

export function refusalMessage(url: URL, detail: string): string {
  return `webhook URL ${shown(url)} is refused: ${detail} (${privateHint})`
}

function resolvedRefusal(host: string, addresses: Array<{ address: string }>): string | undefined {
  for (const { address } of addresses) {
    const reason = forbiddenAddress(address)
    if (reason) return `${host} resolves to ${address}, ${article(reason)} ${reason} address`
  }
  return undefined
}

const article = (word: string) => (/^([aeio]|un(?!i))/i.test(word) ? 'an' : 'a')

/** A connect-time refusal, carried through undici to the attempt. */
class RefusedAddress extends Error {
  readonly code = 'ATS_WEBHOOK_REFUSED_ADDRESS'
  constructor(readonly detail: string) {
    super(detail)
  }
}

/** The connect-time refusal behind an undici error, if that is what it was. */
export function refusedAddress(error: unknown): RefusedAddress | undefined {
  for (let e = error; e instanceof Error; e = e.cause) if (e instanceof RefusedAddress) return e
  return undefined
}

/** dns.lookup that refuses a host if any of its addresses is forbidden: the addresses it returns are the ones connected to. */
export const guardedLookup: LookupFunction = (hostname, options, callback) => {
  dns.lookup(hostname, { ...options, all: true }, (error, addresses) => {
    if (error) return callback(error, [])
    const refusal = resolvedRefusal(hostname, addresses)
    if (refusal) return callback(new RefusedAddress(refusal), [])
    if (options.all) return callback(null, addresses)
    const [first] = addresses
    if (!first) return callback(Object.assign(new Error(`${hostname} has no address`), { code: 'ENOTFOUND' }), [])
    callback(null, first.address, first.family)
  })
}
