import { Type, type Static } from 'typebox'
import { ErrorBody } from '../errors.ts'
import { TierSchema } from '../identity.ts'
import { route } from './route.ts'

export const KeyEntry = Type.Object({
  id: Type.String({ description: '<key_id>' }),
  tier: TierSchema,
  label: Type.String({ maxLength: 64 }),
  prefix: Type.String({ description: 'the first characters of the raw key, to recognise it; not enough to use it' }),
  createdAt: Type.Integer({ description: 'ms since the Unix epoch' }),
})
export type KeyEntry = Static<typeof KeyEntry>

export const CreatedKey = Type.Intersect([
  KeyEntry,
  Type.Object({ key: Type.String({ description: 'the raw API key; shown in this answer only, never again' }) }),
])

export const CreateKeyBody = Type.Object(
  {
    tier: TierSchema,
    label: Type.String({ minLength: 1, maxLength: 64 }),
  },
  { additionalProperties: false },
)
export type CreateKeyBody = Static<typeof CreateKeyBody>

const KeyIdParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) })

const errors = { 400: ErrorBody, 401: ErrorBody, 403: ErrorBody, 429: ErrorBody }

export const adminRoutes = {
  createKey: route({
    method: 'POST',
    url: '/admin/keys',
    summary: 'Create an API key; the raw key is in this answer only',
    schema: { body: CreateKeyBody, response: { 201: CreatedKey, ...errors } },
  }),
  listKeys: route({
    method: 'GET',
    url: '/admin/keys',
    summary: 'List active API keys (no raw keys, no hashes)',
    schema: { response: { 200: Type.Object({ keys: Type.Array(KeyEntry) }), ...errors } },
  }),
  revokeKey: route({
    method: 'DELETE',
    url: '/admin/keys/:id',
    summary: 'Revoke an API key permanently; every gateway refuses it within a second',
    schema: {
      params: KeyIdParams,
      response: {
        200: Type.Object({ ok: Type.Literal(true), id: Type.String(), revokedAt: Type.Integer() }),
        404: ErrorBody,
        ...errors,
      },
    },
  }),
}
