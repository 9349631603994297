// The settings of the agent: external skills, its role, job workers and their limits, the model it runs, credit prices.
import { httpUrlSetting, isHttpUrl, msSetting } from '@ats/service-kit'
import { Type, type TString } from 'typebox'
import { modelPricesProblem } from './credit/prices.ts'
import { externalSkillsProblem } from './skills.ts'

/** A whole-number setting, as msSetting is for durations. */
const intSetting = (description: string, fallback: number, minimum: number, maximum: number) =>
  Type.Integer({ minimum, maximum, default: fallback, description })

/** A price of work paid by credit, in USDC base units. */
const creditPrice = (per: string, fallback: number) => intSetting(`work paid by credit: USDC base units per ${per}`, fallback, 0, 1e15)

/** A text setting refused with what `problem` finds wrong with it. */
const checked = (setting: TString, problem: (raw: string) => string | undefined) =>
  Type.Refine(
    setting,
    (raw) => problem(raw) === undefined,
    (raw) => problem(raw) ?? 'not valid',
  )

export const agentSettings = {
  EXTERNAL_SKILLS: Type.Optional(
    checked(Type.String({ description: 'external skills, a JSON array of {"name", "url"} objects' }), externalSkillsProblem),
  ),
  AGENT_PUBLIC_URL: Type.Refine(
    Type.String({ default: '', description: 'base URL of the public API, put before built-in skill paths; unset: relative paths' }),
    (raw) => raw === '' || isHttpUrl(raw),
    () => 'must be an absolute http(s) URL',
  ),
  AGENT_ROLE: Type.Union([Type.Literal('all'), Type.Literal('api'), Type.Literal('worker')], {
    default: 'all',
    description: 'all: routes and job workers in one process; api: routes only; worker: job workers only (scale them apart)',
  }),
  AGENT_WORKER_CONCURRENCY: intSetting('jobs one worker process runs at once', 16, 1, 256),
  AGENT_ACK_WAIT_MS: msSetting('a job whose worker stops (killed, partitioned) is given to another worker after this', 30_000, 500),
  AGENT_MAX_ATTEMPTS: intSetting('runs a job gets when its workers keep dying, before it fails', 3, 1, 20),
  AGENT_JOB_MAX_RUN_MS: msSetting('a run longer than this is stopped and the job fails', 120_000, 1_000),
  AGENT_TOOL_TIMEOUT_MS: msSetting('how long a tool waits for trading, market-data or automation', 10_000),
  AGENT_SWAP_TIMEOUT_MS: msSetting('how long the swap tool waits for a swap to be mined', 90_000, 1_000),
  AGENT_JOB_PAYMENT_MARGIN_SECONDS: intSetting(
    "a paid job must end this long before its payment's validBefore, so that the payment can still be settled after it: a job taken from the queue later is not run, a wait for approval expires then at the latest, and a job still running or waiting then is stopped; each is failed with the reason and its payment voided (keep it below the gateway's JOB_PAYMENT_MIN_VALIDITY_SECONDS)",
    60,
    1,
    3600,
  ),
  APPROVAL_POLL_MS: msSetting("how often a job whose swap waits for a person's approval asks trading whether it was decided", 1_000),
  AGENT_CHAT_WAIT_MS: msSetting(
    "how long a /v1 completion waits for its job; then the job is cancelled and the answer is 504 (keep it under the gateway's CHAT_TIMEOUT_MS)",
    150_000,
    1_000,
  ),
  AGENT_MAX_STREAMS_PER_OWNER: intSetting(
    'event streams (GET /agent/job/:id/events, /v1 stream: true) one payer or API key may hold open at once, per agent API process; one more is 429',
    5,
    1,
    1000,
  ),
  AGENT_HISTORY_MESSAGES: intSetting('earlier messages of the thread given to the runner', 20, 0, 200),
  LLM_BASE_URL: Type.Optional(
    httpUrlSetting({ description: 'an OpenAI-compatible chat-completions API (…/v1); unset: the offline planner' }),
  ),
  LLM_API_KEY: Type.Optional(Type.String({ minLength: 1, secret: true, description: 'sent as Authorization: Bearer to LLM_BASE_URL' })),
  LLM_MODEL: Type.Optional(Type.String({ minLength: 1, description: 'the model name (required with LLM_BASE_URL)' })),
  LLM_MAX_STEPS: intSetting('model turns per job before it fails', 8, 1, 50),
  LLM_TIMEOUT_MS: msSetting('one completion, retries included', 60_000, 1_000),
  AGENT_CREDIT_MODEL_PRICES: checked(
    Type.String({
      default: '{}',
      description:
        'work paid by prepaid credit: prices per /v1 model (ats-agent also prices POST /agent/prompt jobs), a JSON object {"<model>": {"input": n, "output": n}} in USDC base units per 1M tokens (3000000 = $3 per 1M tokens); a model not listed costs the two defaults below',
    }),
    modelPricesProblem,
  ),
  AGENT_CREDIT_INPUT_PRICE_PER_MTOK: creditPrice('1M input tokens, for a model AGENT_CREDIT_MODEL_PRICES does not list ($3)', 3_000_000),
  AGENT_CREDIT_OUTPUT_PRICE_PER_MTOK: creditPrice(
    '1M output tokens, for a model AGENT_CREDIT_MODEL_PRICES does not list ($15)',
    15_000_000,
  ),
  AGENT_CREDIT_TOOL_CALL_PRICE: creditPrice('tool call an agent job or /v1 completion makes ($0.001)', 1_000),
}
