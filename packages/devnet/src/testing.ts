import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { createChainClients } from '@ats/chain'
import { startDevnet } from './deploy.ts'

/**
 * A devnet of a test's own on a free port, its address book in a temporary file, stopped when
 * the test ends; `chainEnv` is what a service needs to use it (RPC_URL, CHAIN_ID, ADDRESS_BOOK).
 * It starts from the saved deployment (snapshot.ts): the same contracts, balances and nonces as a
 * fresh deploy, in a tenth of the time.
 */
export async function startTestDevnet(t: { teardown(fn: () => unknown): void }) {
  const addressBookPath = join(mkdtempSync(join(tmpdir(), 'book-')), 'address-book.json')
  const devnet = await startDevnet({ port: 0, addressBookPath, snapshot: true })
  t.teardown(() => devnet.stop())
  const chainEnv = { RPC_URL: devnet.rpcUrl, CHAIN_ID: String(devnet.chainId), ADDRESS_BOOK: addressBookPath }
  const { publicClient } = createChainClients({ rpcUrl: devnet.rpcUrl, chainId: devnet.chainId })
  return { devnet, chainEnv, publicClient }
}
