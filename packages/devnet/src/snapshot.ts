import { createHash } from 'node:crypto'
import { readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { gunzipSync } from 'node:zlib'
import { anvilBinary, rpcResult } from './anvil.ts'
import type { DevnetAddressBook } from './deploy.ts'

/**
 * A deployed and funded devnet, saved once and loaded by later starts. A test run starts about
 * thirty devnets; deploying one is ~1.5 s and ~1.7 s of CPU, loading the saved one ~0.1 s. The
 * chain is the same: anvil's own dump (accounts, code, storage, nonces, blocks) taken right after
 * the deployment and funding, under a name that hashes everything that decides them (this
 * package's code and artifacts, the anvil binary, the number of funded accounts), so a change to
 * any of them deploys afresh. ATS_DEVNET_SNAPSHOTS=0 turns it off.
 */
export interface Snapshot {
  /** the state file `anvil --load-state` reads */
  statePath: string
  book: DevnetAddressBook
}

const here = dirname(fileURLToPath(import.meta.url))

function hashDirectory(hash: ReturnType<typeof createHash>, dir: string): void {
  for (const entry of readdirSync(dir, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
    const path = join(dir, entry.name)
    if (entry.isDirectory()) hashDirectory(hash, path)
    else if (entry.isFile()) hash.update(entry.name).update(readFileSync(path))
  }
}

function snapshotName(accounts: number): string {
  const hash = createHash('sha256')
  hashDirectory(hash, here)
  hashDirectory(hash, join(here, '..', 'artifacts'))
  const bin = anvilBinary()
  const { size, mtimeMs } = statSync(bin)
  hash.update(`${bin} ${size} ${mtimeMs} accounts=${accounts}`)
  return join(tmpdir(), `ats-devnet-${hash.digest('hex').slice(0, 24)}`)
}

/**
 * Where the saved devnet for this code and this many funded accounts is kept (`base`, hashed
 * once per start), and what it holds, if one was saved.
 */
export function findSnapshot(accounts: number): { base: string; saved?: Snapshot } {
  const base = snapshotName(accounts)
  try {
    // the book is written last: when it is there, the state file is complete
    const book = JSON.parse(readFileSync(`${base}.book.json`, 'utf8')) as DevnetAddressBook
    return { base, saved: { statePath: `${base}.state.json`, book } }
  } catch {
    return { base }
  }
}

/** Saves a freshly deployed and funded devnet's state (anvil_dumpState) and book under `base` (findSnapshot's). */
export async function saveSnapshot(rpcUrl: string, book: DevnetAddressBook, base: string): Promise<void> {
  const result = await rpcResult(rpcUrl, 'anvil_dumpState')
  if (typeof result !== 'string' || !result.startsWith('0x')) throw new Error('devnet snapshot: anvil_dumpState returned no state')
  // written under a temporary name and renamed, so a test starting at the same time never reads half a file
  const write = (path: string, content: string | Buffer) => {
    const temporary = `${path}.${process.pid}.tmp`
    writeFileSync(temporary, content)
    renameSync(temporary, path)
  }
  write(`${base}.state.json`, gunzipSync(Buffer.from(result.slice(2), 'hex')))
  write(`${base}.book.json`, JSON.stringify(book))
  pruneSnapshots(base)
}

/**
 * Removes the saved devnets of other code (an older commit, another checkout: the anvil binary's
 * path is part of the name, so every clone saves its own) last written more than `maxAgeMs` ago
 * (a day), and half-written files left by a process that died while saving. Each is ~4.5 MB;
 * without this a machine that runs CI often gathers hundreds in its temporary directory. A
 * snapshot in use by a run started within the day is never one of them; `keep` (this code's) never is.
 * Returns how many files it removed.
 */
export function pruneSnapshots(keep: string, { dir = tmpdir(), now = Date.now(), maxAgeMs = 86_400_000 } = {}): number {
  let removed = 0
  for (const name of readdirSync(dir)) {
    if (!/^ats-devnet-[0-9a-f]{24}\.(state|book)\.json(\.\d+\.tmp)?$/.test(name)) continue
    const path = join(dir, name)
    if (path.startsWith(`${keep}.`) && !name.endsWith('.tmp')) continue
    try {
      if (now - statSync(path).mtimeMs <= maxAgeMs) continue
      rmSync(path, { force: true })
      removed++
    } catch {
      // gone meanwhile (another run pruned it): nothing to do
    }
  }
  return removed
}
