// Every ATS_ERR_* code of the repository, read from the sources: declared once, in its package's
// errors.ts, for one status under a name made of the code's words (docs/architecture.md, "Errors").
import { type Dirent, readdirSync, readFileSync } from 'node:fs'
import { basename, join } from 'node:path'
import t from 'tap'

const root = join(import.meta.dirname, '../../..')

/** the source folders of the gateway, every package and every service */
const sourceDirs = [
  'gateway/src',
  ...['packages', 'services'].flatMap((group) => readdirSync(join(root, group)).map((name) => `${group}/${name}/src`)),
]

function sourceFiles(dir: string): string[] {
  let entries: Dirent[]
  try {
    entries = readdirSync(join(root, dir), { withFileTypes: true })
  } catch {
    return []
  }
  return entries.flatMap((entry) => {
    const path = `${dir}/${entry.name}`
    if (entry.isDirectory()) return entry.name === 'generated' || entry.name === 'node_modules' ? [] : sourceFiles(path)
    return entry.name.endsWith('.ts') ? [path] : []
  })
}

interface Declaration {
  file: string
  name: string
  code: string
  /** undefined: the status varies (a call between services carries the status it met) */
  status: number | undefined
}

interface Scan {
  declarations: Declaration[]
  /** createError calls that are not a declaration with a literal code and status */
  stray: string[]
  /** every whole code a file names (declares, answers, maps or checks; not a prefix such as ATS_ERR_AGENT_*): code → the first such file */
  named: Map<string, string>
}

const quoted = String.raw`(?:'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|\x60(?:[^\x60\\]|\\.)*\x60)`
/** `const Name = createError<[…]>('ATS_ERR_…', 'message', 404)` */
const createErrorDeclaration = new RegExp(
  String.raw`const\s+(\w+)\s*=\s*createError(?:<[^(]*?>)?\(\s*'(ATS_ERR_\w+)'\s*,\s*${quoted}\s*,\s*(\d{3})\s*,?\s*\)`,
  'g',
)
/** `class Name extends … { … readonly code = 'ATS_ERR_…' … readonly statusCode = 503 … }` */
const classDeclaration = /class\s+(\w+)\s+extends[^{]*\{([\s\S]*?)\n\}/g

function scan(sources: Array<{ file: string; text: string }>): Scan {
  const result: Scan = { declarations: [], stray: [], named: new Map() }
  for (const { file, text } of sources) {
    let declared = 0
    for (const [, name, code, status] of text.matchAll(createErrorDeclaration)) {
      result.declarations.push({ file, name: name!, code: code!, status: Number(status) })
      declared++
    }
    for (const [, name, body] of text.matchAll(classDeclaration)) {
      const code = /readonly code = '(ATS_ERR_\w+)'/.exec(body!)?.[1]
      if (!code) continue
      const status = /readonly statusCode = (\d{3})\b/.exec(body!)?.[1]
      result.declarations.push({ file, name: name!, code, status: status === undefined ? undefined : Number(status) })
    }
    const calls = [...text.matchAll(/\bcreateError\s*(?:<[^(]*?>)?\(/g)].length
    if (calls > declared)
      result.stray.push(
        `${file}: ${calls - declared} createError call(s) not of the form const Name = createError('ATS_ERR_…', 'message', status)`,
      )
    for (const [code] of text.matchAll(/ATS_ERR_[A-Z][A-Z0-9_]*[A-Z0-9](?![\w*…])/g))
      if (!result.named.has(code)) result.named.set(code, file)
  }
  return result
}

/** Codes declared more than once (by one name and status or not): the second meaning needs a code of its own. */
function declaredTwice(declarations: Declaration[]): string[] {
  const byCode = new Map<string, Declaration[]>()
  for (const d of declarations) byCode.set(d.code, [...(byCode.get(d.code) ?? []), d])
  return [...byCode]
    .filter(([, ds]) => ds.length > 1)
    .map(([code, ds]) => `${code}: ${ds.map((d) => `${d.name} ${d.status ?? '(status varies)'} in ${d.file}`).join(', ')}`)
}

/** The prefixes of a service's own codes; its names may leave them out (ATS_ERR_AGENT_NO_PAYER: NoPayer). */
const servicePrefixes = ['AGENT', 'TRADING', 'MARKET', 'ADMIN', 'AUTOMATION']

const pascal = (words: string[]) => words.map((w) => w[0] + w.slice(1).toLowerCase()).join('')

/** The names a code's error may have: its words in PascalCase, the service's prefix left out or not, `Error` after them or not. */
function namesFor(code: string): string[] {
  const words = code.slice('ATS_ERR_'.length).split('_')
  const bases = [pascal(words), ...(servicePrefixes.includes(words[0]!) ? [pascal(words.slice(1))] : [])]
  return bases.flatMap((base) => [base, `${base}Error`])
}

const misnamed = (declarations: Declaration[]) =>
  declarations
    .filter((d) => !namesFor(d.code).includes(d.name))
    .map((d) => `${d.name} (${d.code}) in ${d.file}: name it ${namesFor(d.code).join(' or ')}`)

const repository = scan(sourceDirs.flatMap(sourceFiles).map((file) => ({ file, text: readFileSync(join(root, file), 'utf8') })))

t.test('the scan finds the registries of the kit, the chain, the gateway and the services', async (t) => {
  const files = new Set(repository.declarations.map((d) => d.file))
  const registries = [
    'packages/service-kit/src/errors.ts',
    'packages/chain/src/errors.ts',
    'gateway/src/errors.ts',
    ...['agent', 'trading', 'market-data', 'admin', 'automation'].map((s) => `services/${s}/src/errors.ts`),
  ]
  for (const file of registries) t.ok(files.has(file), `${file} declares codes`)
  t.ok(repository.declarations.length >= 50, `${repository.declarations.length} declarations`)
})

t.test("every error is declared in its package's errors.ts, never inline", async (t) => {
  t.same(repository.stray, [], 'no createError call outside a declaration')
  const elsewhere = repository.declarations.filter((d) => basename(d.file) !== 'errors.ts').map((d) => `${d.file}: ${d.name} (${d.code})`)
  t.same(elsewhere, [], 'every declaration is in an errors.ts')
})

t.test('a code is declared once: one status, one name', async (t) => {
  t.same(declaredTwice(repository.declarations), [])
})

t.test("an error's name is its code's words", async (t) => {
  t.same(misnamed(repository.declarations), [])
})

t.test('every code the sources name is declared', async (t) => {
  const declared = new Set(repository.declarations.map((d) => d.code))
  const undeclared = [...repository.named].filter(([code]) => !declared.has(code)).map(([code, file]) => `${code} (${file})`)
  t.same(undeclared, [], 'no code answered, mapped or checked that no errors.ts declares')
})

t.test('the checks catch a code of two statuses, a wrong name and an inline error', async (t) => {
  const { declarations, stray } = scan([
    {
      file: 'services/agent/src/errors.ts',
      text: [
        "export const ModelNotFound = createError<[string, string]>('ATS_ERR_MODEL_NOT_FOUND', \"the model '%s' does not exist; models: %s\", 400)",
        "export const UnknownModel = createError<[string, string]>('ATS_ERR_MODEL_NOT_FOUND', \"the model '%s' does not exist; models: %s\", 404)",
        "export const JobNotCancellable = createError<[string]>('ATS_ERR_AGENT_JOB_NOT_FOUND', 'job %s not found, or already finished', 404)",
      ].join('\n'),
    },
    {
      file: 'services/trading/src/chainTx.ts',
      text: "const codeOf = (c: string) => c\nexport const X = createError(codeOf('ATS_ERR_X'), '%s', 400)",
    },
  ])
  t.same(declaredTwice(declarations), [
    'ATS_ERR_MODEL_NOT_FOUND: ModelNotFound 400 in services/agent/src/errors.ts, UnknownModel 404 in services/agent/src/errors.ts',
  ])
  t.same(
    misnamed(declarations).map((line) => line.split(' ')[0]),
    ['UnknownModel', 'JobNotCancellable'],
  )
  t.equal(stray.length, 1, 'a createError call that is not a declaration')
  t.same(namesFor('ATS_ERR_AGENT_NO_PAYER'), ['AgentNoPayer', 'AgentNoPayerError', 'NoPayer', 'NoPayerError'])
})
