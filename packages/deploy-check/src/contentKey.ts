/** Content hashes of files, so the renders and the compose check run once per distinct content. */
import { createHash } from 'node:crypto'
import { existsSync, readdirSync, readFileSync, statSync } from 'node:fs'
import { basename, join } from 'node:path'

/**
 * The renders and `docker-compose config` are pure functions of the files, and most of a
 * check's time (~0.8 s of ~1 s); the tests check two dozen copies that differ in one file
 * each, so a process runs each once per distinct content. Only successes are kept: a failure
 * is re-run, so its message names the copy it was found in. The key: a hash of the files' names
 * and contents, directories walked in name order.
 */
export function contentKey(paths: string[]): string {
  const hash = createHash('sha256')
  const add = (path: string): void => {
    hash.update(`${basename(path)}\0`)
    if (!existsSync(path)) hash.update('(missing)\0')
    else if (statSync(path).isDirectory()) for (const name of readdirSync(path).sort()) add(join(path, name))
    else hash.update(readFileSync(path)).update('\0')
  }
  for (const path of paths) add(path)
  return hash.digest('hex')
}
