import { Type, type Static } from 'typebox'
import { codec, type Codec } from './codec.ts'
import { TierSchema } from './identity.ts'
import { subjectsFor } from './subjects.ts'

/** A request/reply endpoint: its subject and both message codecs. */
export interface Endpoint<Req, Rep> {
  subject: string
  request: Codec<Req>
  reply: Codec<Rep>
}

/** A broadcast or stream message: its subject and codec. */
export interface Topic<M> {
  subject: string
  message: Codec<M>
}

const Sha256Hex = Type.String({ pattern: '^[0-9a-f]{64}$' })

/** ats.admin.keys.verify request: the SHA-256 of the raw key (raw keys never travel). */
export const KeyVerifyRequest = Type.Object({ hash: Sha256Hex })
export type KeyVerifyRequest = Static<typeof KeyVerifyRequest>

/** ats.admin.keys.verify reply: the active key, or null when unknown or revoked. */
export const KeyVerifyReply = Type.Object({
  key: Type.Union([Type.Object({ id: Type.String(), tier: TierSchema }), Type.Null()]),
})
export type KeyVerifyReply = Static<typeof KeyVerifyReply>

/** ats.admin.keys.revoked broadcast. */
export const KeyRevoked = Type.Object({ id: Type.String(), hash: Sha256Hex })
export type KeyRevoked = Static<typeof KeyRevoked>

const keyVerifyRequest = codec(KeyVerifyRequest)
const keyVerifyReply = codec(KeyVerifyReply)
const keyRevokedMessage = codec(KeyRevoked)

/** The key channels of one namespace: verification (request/reply) and revocations (broadcast). */
export function keyChannels(namespace: string): { keyVerify: Endpoint<KeyVerifyRequest, KeyVerifyReply>; keyRevoked: Topic<KeyRevoked> } {
  const subjects = subjectsFor(namespace)
  return {
    keyVerify: { subject: subjects.keys.verify, request: keyVerifyRequest, reply: keyVerifyReply },
    keyRevoked: { subject: subjects.keys.revoked, message: keyRevokedMessage },
  }
}
