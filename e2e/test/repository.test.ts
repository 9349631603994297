// The repository stands alone: no file names a place outside it or cites a tracker it does not
// hold, every relative link of its Markdown resolves to a file inside it, and one pnpm is installed
// everywhere. It reads the files git tracks.
import { execFileSync } from 'node:child_process'
import { existsSync, readFileSync } from 'node:fs'
import { dirname, join, relative, resolve } from 'node:path'
import { fileURLToPath } from 'node:url'
import t from 'tap'

const root = fileURLToPath(new URL('../..', import.meta.url))

/** what names a place outside the repository: the papers it was first designed from, a machine's own paths, the tool library */
const outside: RegExp[] = [/\bshared\/(spec|ARCHITECTURE|STYLE)/, /\b(ARCHITECTURE|STYLE)\.md\b/, /\/work\//, /[.]library\b/]

/** "file:line: text" for each line that names a place outside the repository */
function outsideReferences(file: string, text: string): string[] {
  const found: string[] = []
  text.split('\n').forEach((line, i) => {
    if (outside.some((pattern) => pattern.test(line))) found.push(`${file}:${i + 1}: ${line.trim().slice(0, 160)}`)
  })
  return found
}

/**
 * A citation of an issue tracker the repository does not hold (the word issue and a number, or a
 * number after # in parentheses): code and docs say what they do and why, and git keeps the
 * history. A link to another project's issue (a URL) is not one.
 */
const trackerCitation = /\bissues? #?\d+\b|\(#\d+\)/i

/** applied migrations are never edited (a changed file would no longer be what ran), so their comments stay as written */
const immutable = (file: string) => /(^|\/)prisma\/migrations\//.test(file)

/** "file:line: text" for each line that cites the tracker */
function trackerCitations(file: string, text: string): string[] {
  if (immutable(file)) return []
  const found: string[] = []
  text.split('\n').forEach((line, i) => {
    if (trackerCitation.test(line)) found.push(`${file}:${i + 1}: ${line.trim().slice(0, 160)}`)
  })
  return found
}

/** "file: target" for each relative Markdown link that leaves the repository or names no file */
function brokenLinks(file: string, text: string): string[] {
  const found: string[] = []
  for (const [, target] of text.matchAll(/\]\(([^)\s]+)\)/g)) {
    if (/^([a-z]+:|#)/i.test(target!)) continue
    const path = resolve(root, dirname(file), decodeURIComponent(target!.split('#')[0]!))
    const inside = !relative(root, path).startsWith('..')
    if (!inside || !existsSync(path)) found.push(`${file}: ${target} ${inside ? 'does not exist' : 'is outside the repository'}`)
  }
  return found
}

const tracked = execFileSync('git', ['ls-files', '-z'], { cwd: root, encoding: 'utf8' }).split('\0').filter(Boolean)
const textOf = (file: string) => {
  const bytes = readFileSync(join(root, file))
  return bytes.includes(0) ? undefined : bytes.toString('utf8')
}

t.test('no tracked file names a place outside the repository', async (t) => {
  const found = tracked.flatMap((file) => {
    const text = existsSync(join(root, file)) ? textOf(file) : undefined
    return text === undefined ? [] : outsideReferences(file, text)
  })
  t.same(found, [])
  t.ok(tracked.length > 100, `read ${tracked.length} files`)
})

t.test('no tracked file cites an issue tracker', async (t) => {
  const found = tracked.flatMap((file) => {
    const text = existsSync(join(root, file)) ? textOf(file) : undefined
    return text === undefined ? [] : trackerCitations(file, text)
  })
  t.same(found, [])
})

t.test('every relative link of the Markdown files resolves inside the repository', async (t) => {
  const markdown = tracked.filter((file) => file.endsWith('.md') && existsSync(join(root, file)))
  t.same(
    markdown.flatMap((file) => brokenLinks(file, textOf(file) ?? '')),
    [],
  )
  t.ok(markdown.length > 10, `read ${markdown.length} Markdown files`)
})

t.test('the checks find what they look for', async (t) => {
  // the names are put together here, so that this file (which the first test reads too) holds none of them
  const spec = ['shared', 'spec', 'agent-trading-api.md'].join('/')
  const design = ['ARCHITECTURE', 'md'].join('.')
  const machine = ['', 'work', 'main', 'docs'].join('/')
  t.equal(outsideReferences('README.md', `The contract: ${spec}`).length, 1)
  t.equal(outsideReferences('x.ts', `// see ${design}`).length, 1)
  t.equal(outsideReferences('x.ts', `const p = '${machine}'`).length, 1)
  t.equal(outsideReferences('docs/a.md', 'docs/architecture.md, in our own words').length, 0)
  const cite = (text: string) => trackerCitations('docs/a.md', text).length
  t.equal(cite(`Reservations (${['issue', '23'].join(' ')}; before, …)`), 1)
  t.equal(cite(`${['Issues', '22'].join(' ')} and 23 asked for it`), 1)
  t.equal(cite(`the batch id ${['(#', '41)'].join('')}`), 1)
  t.equal(cite('a number: 23 issues, nonce #3, https://github.com/owner/project/issues/262'), 0)
  t.equal(trackerCitations('services/admin/prisma/migrations/1_init/migration.sql', `-- ${['issue', '22'].join(' ')}`).length, 0)
  t.same(brokenLinks('docs/a.md', `[spec](../../${spec}) [gone](./missing.md) [ok](architecture.md) [web](https://x.y) [here](#top)`), [
    `docs/a.md: ../../${spec} is outside the repository`,
    'docs/a.md: ./missing.md does not exist',
  ])
})

t.test('every place that installs pnpm installs the one package.json pins', async (t) => {
  const { engines } = JSON.parse(textOf('package.json')!) as { engines?: { pnpm?: string } }
  t.match(engines?.pnpm, /^\d+\.\d+\.\d+$/, 'package.json pins an exact pnpm (engines.pnpm: pnpm refuses another)')
  // .ci/run reads the pin itself; these name it in a command a person or a build runs
  for (const file of ['README.md', 'docs/development.md', 'Dockerfile']) {
    const named = [...(textOf(file) ?? '').matchAll(/\bpnpm@[\w.-]+/g)].map(([name]) => name)
    t.ok(named.length > 0, `${file} installs pnpm`)
    t.same([...new Set(named)], [`pnpm@${engines?.pnpm}`], `${file} installs pnpm@${engines?.pnpm}`)
  }
})
