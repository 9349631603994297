// Saved devnets of other code are removed from the temporary directory once they are a day old.
import { existsSync, mkdtempSync, rmSync, utimesSync, writeFileSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import t from 'tap'
import { pruneSnapshots } from '../src/snapshot.ts'

t.test("old snapshots of other code and half-written files go; this code's, recent ones and strangers' files stay", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'devnet-prune-'))
  t.teardown(() => rmSync(dir, { recursive: true, force: true }))
  const now = Date.now()
  const twoDaysAgo = (now - 2 * 86_400_000) / 1000
  const file = (name: string, old: boolean) => {
    const path = join(dir, name)
    writeFileSync(path, '{}')
    if (old) utimesSync(path, twoDaysAgo, twoDaysAgo)
    return path
  }
  const ours = join(dir, `ats-devnet-${'a'.repeat(24)}`)
  const kept = [
    file(`ats-devnet-${'a'.repeat(24)}.state.json`, true), // this code's, however old
    file(`ats-devnet-${'a'.repeat(24)}.book.json`, true),
    file(`ats-devnet-${'b'.repeat(24)}.state.json`, false), // another checkout's, written today
    file(`ats-devnet-${'b'.repeat(24)}.book.json`, false),
    file('ats-devnet-notes.txt', true), // not a snapshot
    file('something-else.json', true),
  ]
  const removed = [
    file(`ats-devnet-${'c'.repeat(24)}.state.json`, true),
    file(`ats-devnet-${'c'.repeat(24)}.book.json`, true),
    file(`ats-devnet-${'a'.repeat(24)}.state.json.4242.tmp`, true), // a save that died half-way
  ]
  t.equal(pruneSnapshots(ours, { dir, now }), 3)
  for (const path of kept) t.ok(existsSync(path), `kept ${path.slice(dir.length + 1)}`)
  for (const path of removed) t.notOk(existsSync(path), `removed ${path.slice(dir.length + 1)}`)
  t.equal(pruneSnapshots(ours, { dir, now }), 0, 'a second pass finds nothing')
})
