// The tests that need no database, NATS or chain, run in one process: each test file costs
// seconds of CPU to start (tsx, the service's imports) while these take milliseconds. Each
// module registers its own tests on the root test when imported.
import './unit/apiKeys.ts'
import './unit/retrySchedule.ts'
import './unit/settings.ts'
import './unit/webhookSender.ts'
