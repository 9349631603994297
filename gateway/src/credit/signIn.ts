// Sign-in with a wallet (x402's sign-in-with-x extension, CAIP-122 / EIP-4361): the challenge
// every paid route's 402 carries, and the check of a SIGN-IN-WITH-X header that answers it.
import { firstLine, replicaAcknowledgement } from '@ats/service-kit'
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto'
import { caip2Network } from '@ats/contracts'
import { buildSIWxSchema, parseSIWxHeader, SIGN_IN_WITH_X, validateSIWxMessage, type SIWxPayload } from '@x402/extensions/sign-in-with-x'
import createKeccak from 'keccak'
import type { Redis } from 'ioredis'
import secp from 'secp256k1'
import { getAddress, type Address } from 'viem'
import { CreditUnavailable, SignInRefused } from '../errors.ts'

export { SIGN_IN_WITH_X }

const statement = 'Sign in to pay with your prepaid credit at Agent Trading Service'

export interface SignInOptions {
  redis: Redis
  namespace: string
  chainId: number
  /** keys the nonces' MACs: a nonce the gateways did not issue is refused */
  secret: string
  /** how long a challenge may be answered (its expirationTime) */
  challengeTtlSeconds: number
  now?: () => number
}

const keccak = (data: Buffer) => createKeccak('keccak256').update(data).digest()
const sameText = (a: string, b: string) => a.length === b.length && timingSafeEqual(Buffer.from(a), Buffer.from(b))
const halfN = 0x7fffffffffffffffffffffffffffffff5d576e7357a4501ddfe92f46681b20a0n

/**
 * The EIP-4361 message an EVM wallet signs for this payload, as `@x402/extensions` builds it with
 * the siwe library (which parses what it builds: ~1 ms a message, here a few µs). A field with a
 * line break is refused first: it could make one message read as other fields.
 */
export function siweMessage(p: SIWxPayload, chainId: number): string {
  const lines = [`URI: ${p.uri}`, `Version: ${p.version}`, `Chain ID: ${chainId}`, `Nonce: ${p.nonce}`, `Issued At: ${p.issuedAt}`]
  if (p.expirationTime) lines.push(`Expiration Time: ${p.expirationTime}`)
  if (p.notBefore) lines.push(`Not Before: ${p.notBefore}`)
  if (p.requestId) lines.push(`Request ID: ${p.requestId}`)
  if (p.resources?.length) lines.push('Resources:', ...p.resources.map((r) => `- ${r}`))
  const header = `${p.domain} wants you to sign in with your Ethereum account:\n${getAddress(p.address)}\n\n`
  return `${header}${p.statement ? `${p.statement}\n` : ''}\n${lines.join('\n')}`
}

/** The lower-case address whose EIP-191 signature `signature` is over `message`, by native recovery. */
function recoverPersonal(message: string, signature: string): string {
  const sig = /^0x[0-9a-fA-F]{130}$/.test(signature) ? Buffer.from(signature.slice(2), 'hex') : undefined
  if (!sig) throw new SignInRefused('the signature must be 65 bytes of hex (an EOA signature; contract wallets are not supported)')
  const v = sig[64]!
  const recid = v >= 27 ? v - 27 : v
  if (recid !== 0 && recid !== 1) throw new SignInRefused(`the signature's v must be 27 or 28, not ${v}`)
  if (BigInt(`0x${signature.slice(66, 130)}`) > halfN)
    throw new SignInRefused('the signature is not canonical (EIP-2: s in the lower half)')
  const body = Buffer.from(message, 'utf8')
  const digest = keccak(Buffer.concat([Buffer.from(`\x19Ethereum Signed Message:\n${body.length}`, 'utf8'), body]))
  let pub: Uint8Array
  try {
    pub = secp.ecdsaRecover(sig.subarray(0, 64), recid, digest, false)
  } catch {
    throw new SignInRefused('no public key recovers from the signature')
  }
  return `0x${keccak(Buffer.from(pub.subarray(1)))
    .subarray(12)
    .toString('hex')}`
}

export function createSignIn({ redis, namespace, chainId, secret, challengeTtlSeconds, now = Date.now }: SignInOptions) {
  const network = caip2Network(chainId)
  // with Sentinel, a challenge counts as used once a replica holds it: a failover would let it sign in again otherwise
  const acknowledgement = replicaAcknowledgement(redis)
  const macKey = createHmac('sha256', secret).update('ats sign-in-with-x nonces').digest()
  const macOf = (random: string, issuedAt: string, expirationTime: string) =>
    createHmac('sha256', macKey).update(`${random}|${issuedAt}|${expirationTime}`).digest('hex').slice(0, 32)
  const schema = buildSIWxSchema()
  const supportedChains = [{ chainId: network, type: 'eip191' as const, signatureScheme: 'eip191' as const }]

  return {
    /**
     * A fresh challenge for the resource `origin` + `path`, for a 402's extensions. Its nonce is
     * the gateways' own (a random part and its MAC over the times), so no made-up or stretched
     * challenge passes, and any gateway can check it without storing it.
     */
    extension(origin: string, path: string) {
      const uri = `${origin}${path}`
      const issued = now()
      const issuedAt = new Date(issued).toISOString()
      const expirationTime = new Date(issued + challengeTtlSeconds * 1000).toISOString()
      const random = randomBytes(12).toString('hex')
      const info = {
        domain: new URL(origin).host,
        uri,
        statement,
        version: '1',
        nonce: `${random}${macOf(random, issuedAt, expirationTime)}`,
        issuedAt,
        expirationTime,
        resources: [uri],
      }
      return { [SIGN_IN_WITH_X]: { info, supportedChains, schema } }
    },

    /**
     * The wallet a SIGN-IN-WITH-X header proves, or SignInRefused (401) saying why: malformed,
     * another chain, not our domain or origin, too old or expired, a nonce we did not issue or
     * already used (on any gateway), a signature that is not the address's.
     */
    async verify(header: string, origin: string): Promise<Address> {
      let payload: SIWxPayload
      try {
        payload = parseSIWxHeader(header)
      } catch (error) {
        throw new SignInRefused(`malformed ${SIGN_IN_WITH_X} header (${(error as Error).message})`)
      }
      if (payload.chainId !== network || payload.type !== 'eip191') {
        throw new SignInRefused(`sign in on ${network} with an eip191 signature (got ${payload.chainId}, ${payload.type})`)
      }
      const fields = [payload.domain, payload.uri, payload.statement, payload.nonce, payload.issuedAt, payload.expirationTime]
      if (fields.some((f) => f?.includes('\n') || f?.includes('\r'))) throw new SignInRefused('a field holds a line break')
      if (!/^0x[0-9a-fA-F]{40}$/.test(payload.address)) throw new SignInRefused('address must be a 0x address')
      const checked = await validateSIWxMessage(payload, new URL(origin), { maxAge: challengeTtlSeconds * 1000 })
      if (!checked.isValid) throw new SignInRefused(checked.invalidMessage)
      const [random, mac] = [payload.nonce.slice(0, 24), payload.nonce.slice(24)]
      if (!payload.expirationTime || !sameText(mac, macOf(random, payload.issuedAt, payload.expirationTime))) {
        throw new SignInRefused('the challenge was not issued by this service (nonce, issuedAt or expirationTime changed)')
      }
      const signer = recoverPersonal(siweMessage(payload, chainId), payload.signature)
      if (signer !== payload.address.toLowerCase()) throw new SignInRefused(`the signature is not ${payload.address}'s`)
      let first: string | null
      try {
        const ttlMs = Math.max(1, new Date(payload.expirationTime).getTime() - now() + 60_000)
        const acknowledged = acknowledgement?.()
        first = await redis.set(`ats-siwx:${namespace}:${payload.nonce}`, '1', 'PX', ttlMs, 'NX')
        if (first === 'OK' && acknowledged) await acknowledged()
      } catch (error) {
        throw new CreditUnavailable(`the sign-in store failed: ${firstLine(error)}`)
      }
      if (first !== 'OK') throw new SignInRefused('this challenge was already used: sign the one of a new 402')
      return getAddress(payload.address)
    },
  }
}

export type SignIn = ReturnType<typeof createSignIn>
