// The agent service's error registry.
import { createError } from '@ats/service-kit'

export const NoPayer = createError<[]>('ATS_ERR_AGENT_NO_PAYER', 'paid routes need a payer: this request came without one', 401)
export const NoKey = createError<[]>('ATS_ERR_AGENT_NO_KEY', 'this route needs an API key', 401)
export const ContextTooLarge = createError<[number]>(
  'ATS_ERR_AGENT_CONTEXT_TOO_LARGE',
  'body/context must be at most %d bytes of JSON',
  400,
)
export const JobNotCancellable = createError<[string]>('ATS_ERR_AGENT_JOB_NOT_CANCELLABLE', 'job %s not found, or already finished', 404)
export const TooManyStreams = createError<[number]>(
  'ATS_ERR_AGENT_TOO_MANY_STREAMS',
  'too many open event streams: at most %d at once per payer or API key (AGENT_MAX_STREAMS_PER_OWNER); close one first',
  429,
)
export const MalformedCreditHold = createError<[]>(
  'ATS_ERR_AGENT_MALFORMED_CREDIT_HOLD',
  'the credit hold of this request cannot be read (x-ats-credit-hold, x-ats-credit-wallet, x-ats-credit-hold-amount)',
  400,
)
export const PromptNotText = createError<[]>('ATS_ERR_AGENT_PROMPT_NOT_TEXT', 'body/prompt must be a string', 400)

// /v1: answered in OpenAI's error shape; `param` names the field at fault. These codes have no
// AGENT_ prefix, unlike the rest (docs/architecture.md, "Errors"): /v1 clients see them in lower
// case without ATS_ERR_ (invalid_request, timeout, …), so adding the prefix would change the wire.
export const InvalidRequest = createError<[string]>('ATS_ERR_INVALID_REQUEST', '%s', 400)
/** A request body naming a model that is not ours: 400, as OpenAI answers it (its code on the wire is OpenAI's model_not_found). */
export const InvalidModel = createError<[string, string]>('ATS_ERR_INVALID_MODEL', "the model '%s' does not exist; models: %s", 400)
/** A model asked for by name that is not ours: GET /v1/models/{model}, and Anthropic's messages (which answer 404). */
export const ModelNotFound = createError<[string, string]>('ATS_ERR_MODEL_NOT_FOUND', "the model '%s' does not exist; models: %s", 404)
export const JobFailed = createError<[string]>('ATS_ERR_JOB_FAILED', '%s', 500)
export const Timeout = createError<[number]>(
  'ATS_ERR_TIMEOUT',
  'the agent did not answer within %d s (AGENT_CHAT_WAIT_MS); the job was cancelled',
  504,
)
export const ResponseNotFound = createError<[string]>('ATS_ERR_RESPONSE_NOT_FOUND', 'no response %s of this API key', 404)

/** An error about one field of a /v1 request: its `param` goes into OpenAI's error shape. */
export function atParam<E extends Error>(param: string, error: E): E & { param: string } {
  return Object.assign(error, { param })
}

/** A /v1 request refused (400) for what `param` holds. */
export const invalidAt = (param: string, message: string) => atParam(param, new InvalidRequest(message))
