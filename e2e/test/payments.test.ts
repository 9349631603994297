/**
 * Paying for requests through the gateway, on the devnet: x402's own client, payers who try not
 * to pay, the limits of paid routes, the paid routes themselves and idempotent paid requests.
 * Each module starts a fleet of its own inside its test, one after another in this process:
 * a test process spends ~2.5 s of CPU loading the fleet's modules. Each runs alone too
 * (`pnpm exec tap test/payments/limits.ts`).
 */
import './payments/x402Client.ts'
import './payments/abuse.ts'
import './payments/limits.ts'
import './payments/routes.ts'
import './payments/identifier.ts'
