// A paid job's deadline: the job must end while the payment that bought it can still be settled
// after it, so it ends AGENT_JOB_PAYMENT_MARGIN_SECONDS before the payment's validBefore at the
// latest. A job not started by then is voided without running; one still running or waiting for
// an approval then is stopped and voided: nothing is done for a payment that cannot be collected.

/**
 * The validBefore of a job's payment from the gateway's x-ats-payment-valid-before (unix seconds):
 * a number, or null when there is none or it is too far away to matter (more than 15 digits);
 * undefined when the value is malformed.
 */
export function validBeforeOf(header: unknown): number | null | undefined {
  if (header === undefined || header === '') return null
  if (typeof header !== 'string' || !/^\d+$/.test(header)) return undefined
  return header.length <= 15 ? Number(header) : null
}

/** The deadline (ms since the epoch) of a job paid with a payment valid before `validBefore`; undefined without one. */
export const deadlineOf = (validBefore: bigint | number | null | undefined, marginSeconds: number): number | undefined =>
  validBefore === null || validBefore === undefined ? undefined : (Number(validBefore) - marginSeconds) * 1000

const tooSoon = (validBefore: bigint | number, marginSeconds: number) =>
  `the payment that bought it expires at ${new Date(Number(validBefore) * 1000).toISOString()} (validBefore), too soon to settle it after the job (a job must end ${marginSeconds} s before, AGENT_JOB_PAYMENT_MARGIN_SECONDS); the payment is voided, nothing is charged`

/** Why a job taken from the queue after its deadline was not run. */
export const notStartedReason = (validBefore: bigint | number, marginSeconds: number) =>
  `the job was not started: ${tooSoon(validBefore, marginSeconds)}`

/** Why a job still running, or waiting for an approval, at its deadline was stopped. */
export const stoppedReason = (validBefore: bigint | number, marginSeconds: number) =>
  `the job was stopped: ${tooSoon(validBefore, marginSeconds)}`
