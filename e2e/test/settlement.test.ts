/**
 * Payments settled on the devnet through the gateway: the ledger, settlement keeping up with
 * paid traffic, a paid prompt settled when its job completes, and a paid job ending while its
 * payment can still settle. Each module starts a fleet of its own inside its tests, one after
 * another in this process: a test process spends ~2.5 s of CPU loading the fleet's modules.
 * Each runs alone too (`pnpm exec tap test/settlement/ledger.ts`).
 */
import './settlement/ledger.ts'
import './settlement/batches.ts'
import './settlement/lifecycle.ts'
import './settlement/jobDeadline.ts'
