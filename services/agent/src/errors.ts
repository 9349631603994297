// The agent service's error registry.
import { createError } from '@ats/service-kit'

export const NoPayer = createError<[]>('ATS_ERR_AGENT_NO_PAYER', 'paid routes need a payer: this request came without one', 401)
export const NoKey = createError<[]>('ATS_ERR_AGENT_NO_KEY', 'this route needs an API key', 401)
export const ContextTooLarge = createError<[number]>('ATS_ERR_AGENT_CONTEXT_TOO_LARGE', 'body/context must be at most %d bytes of JSON', 400)
export const JobNotCancellable = createError<[string]>('ATS_ERR_AGENT_JOB_NOT_FOUND', 'job %s not found, or already finished', 404)
export const PromptNotText = createError<[]>('ATS_ERR_AGENT_PROMPT_NOT_TEXT', 'body/prompt must be a string', 400)
