// What the /v1 APIs (chat completions, responses, messages) read from a request alike: who owns
// the job (the API key or the paying wallet), the model asked for, a content's text, the
// conversation's bound.
import { chatModels, type ApiRoute } from '@ats/contracts'
import type { FastifyRequest } from 'fastify'
import { atParam, InvalidModel, invalidAt, type ModelNotFound, NoKey } from '../errors.ts'
import { creditWalletOf } from '../credit/hold.ts'
import type { Owner } from '../jobs/store.ts'

/** The job a /v1 request asks for. */
export interface Conversation {
  prompt: string
  history: Array<{ role: 'user' | 'assistant'; content: string }>
  instructions: string | undefined
}

/** A route of the contracts, for a plugin registered under `prefix` (the plugin's own not-found and error handlers then answer under it). */
export const under = <R extends ApiRoute>(prefix: string, r: R): R => ({ ...r, url: r.url.slice(prefix.length) || '/' })

/** the models of /v1, as error messages list them */
export const modelIds = chatModels.map((m) => m.id).join(', ')

/** Refuses a model that is not one of ours: 400 by default (OpenAI's answer), or `ModelNotFound` (Anthropic answers 404). */
export function checkModel(model: string, Refusal: typeof InvalidModel | typeof ModelNotFound = InvalidModel) {
  if (!chatModels.some((m) => m.id === model)) throw atParam('model', new Refusal(model, modelIds))
}

/** The whole conversation's text, at most: a runner reads only the recent part anyway. */
export const maxConversationChars = 65_536

/**
 * The owner of /v1 jobs: the API key (the gateway forwards its id and bound wallet), or the wallet
 * whose prepaid credit pays the request (signed in with SIWx or a session token).
 */
export function keyOwner(request: FastifyRequest): Owner {
  const { keyId, wallet } = request.identity
  if (keyId) return { ownerId: keyId, keyId, wallet }
  const payer = creditWalletOf(request)
  if (!payer) throw new NoKey()
  return { ownerId: payer, wallet: payer }
}

/** Refuses client-defined tools (the body's `fields`): the agent runs its own, shown in the `answer`'s "agent" field. */
export function refuseTools(body: object, fields: readonly string[], answer = 'answer') {
  for (const field of fields) {
    const value = (body as Record<string, unknown>)[field]
    if (Array.isArray(value) ? value.length > 0 : value != null)
      throw invalidAt(field, `${field} is not supported: the agent runs its own tools and shows them in the ${answer}'s "agent" field`)
  }
}

/** The text of a content (at: its path): a string, or its text parts (of `partTypes`) joined; other parts are refused. */
export function textOf(content: unknown, at: string, partTypes: readonly string[] = ['text']): string {
  if (content === undefined || content === null) return ''
  if (typeof content === 'string') return content
  if (!Array.isArray(content)) throw invalidAt(at, `${at} must be a string or an array of text parts`)
  return content
    .map((part: unknown, j) => {
      const { type, text } = (part && typeof part === 'object' ? part : {}) as { type?: unknown; text?: unknown }
      if (typeof type !== 'string' || !partTypes.includes(type) || typeof text !== 'string') {
        const what = typeof type === 'string' ? `a ${type} part` : 'not a {type, text} part'
        const supported = partTypes.map((p) => `{type: "${p}", text}`).join(' or ')
        throw invalidAt(`${at}[${j}]`, `${at}[${j}] is ${what}: only text parts (${supported}) are supported`)
      }
      return text
    })
    .join('\n')
}
