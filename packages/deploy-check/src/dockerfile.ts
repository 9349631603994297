/** Dockerfiles: each deployable's linted without a Docker engine, and the facts the other checks read from it. */
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { validate } from 'dockerfile-utils'
import type { Component } from './components.ts'

/**
 * Lints a deployable's Dockerfile without a Docker engine (hadolint is not installable
 * here: docs/operations.md). Two layers:
 *  - dockerfile-utils (the VS Code Docker extension's validator): syntax, unknown
 *    instructions and flags, malformed HEALTHCHECK/CMD/ENV/EXPOSE;
 *  - the fleet's image rules: multi-stage; the build stage runs `pnpm deploy --prod`
 *    (through scripts/deploy-package.sh); the runtime stage is a Node 22/24 slim image
 *    that copies only from the build stage, runs as a non-root USER, has a HEALTHCHECK
 *    and an exec-form CMD that starts compiled JavaScript with node (no tsx, no pnpm).
 */
export interface Instruction {
  keyword: string
  args: string
  line: number
}

/** Instructions with their continuation lines joined; comments and blank lines dropped. */
export function parseDockerfile(text: string): Instruction[] {
  const out: Instruction[] = []
  const lines = text.split('\n')
  for (let i = 0; i < lines.length; i++) {
    const first = lines[i]!.trim()
    if (first === '' || first.startsWith('#')) continue
    const line = i + 1
    let joined = first
    while (joined.endsWith('\\') && i + 1 < lines.length) {
      joined = joined.slice(0, -1)
      const next = lines[++i]!.trim()
      if (!next.startsWith('#')) joined += ` ${next}`
    }
    const match = /^(\S+)\s*(.*)$/s.exec(joined)
    if (match) out.push({ keyword: match[1]!.toUpperCase(), args: match[2]!.trim(), line })
  }
  return out
}

/** What a Dockerfile builds and runs, read off its instructions (nothing judged here). */
export interface ImageFacts {
  /** the package the build stage deploys (scripts/deploy-package.sh <package> /out) */
  deployedPackage?: string
  /** every instruction, in order */
  instructions: Instruction[]
  /** the instructions of each stage, each starting with its FROM */
  stages: Instruction[][]
  /** the runtime (last) stage's ENV */
  env: Record<string, string>
  /** the runtime stage's last CMD or ENTRYPOINT */
  cmd?: Instruction
  /** the runtime stage's HEALTHCHECK, unless none or NONE */
  healthcheck?: Instruction
}

export function readImage(text: string): ImageFacts {
  const instructions = parseDockerfile(text)
  const stages: Instruction[][] = []
  for (const ins of instructions) {
    if (ins.keyword === 'FROM') stages.push([])
    stages.at(-1)?.push(ins)
  }
  const runtime = stages.at(-1) ?? []
  const env: Record<string, string> = {}
  for (const e of runtime.filter((i) => i.keyword === 'ENV')) for (const m of e.args.matchAll(/([A-Z0-9_]+)=(\S+)/g)) env[m[1]!] = m[2]!
  const deploy = instructions.map((i) => (i.keyword === 'RUN' ? /scripts\/deploy-package\.sh\s+(\S+)\s/.exec(i.args) : null)).find(Boolean)
  const healthcheck = runtime.filter((i) => i.keyword === 'HEALTHCHECK').at(-1)
  const cmd = runtime.filter((i) => i.keyword === 'CMD' || i.keyword === 'ENTRYPOINT').at(-1)
  return {
    instructions,
    stages,
    env,
    ...(deploy ? { deployedPackage: deploy[1]! } : {}),
    ...(cmd ? { cmd } : {}),
    ...(healthcheck && !/^NONE$/i.test(healthcheck.args) ? { healthcheck } : {}),
  }
}

/** An exec-form argument list (`["node", "x.js"]`), or undefined for the shell form. */
export function execForm(args: string): string[] | undefined {
  try {
    const parsed: unknown = JSON.parse(args)
    return Array.isArray(parsed) && parsed.every((x) => typeof x === 'string') ? parsed : undefined
  } catch {
    return undefined
  }
}

export function lintDockerfile(text: string, problem: (line: number, message: string) => void): ImageFacts {
  for (const d of validate(text)) problem(d.range.start.line + 1, `dockerfile-utils: ${d.message}`)

  const facts = readImage(text)
  const { instructions, stages } = facts
  if (stages.length < 2) problem(1, 'must be multi-stage: a build stage, then a runtime stage that copies only what runs')

  const stageNames = new Set<string>()
  for (const from of instructions.filter((i) => i.keyword === 'FROM')) {
    const words = from.args.split(/\s+/).filter((word) => !word.startsWith('--'))
    const image = words[0] ?? ''
    const fromStage = stageNames.has(image.toLowerCase())
    if (/^as$/i.test(words[1] ?? '') && words[2]) stageNames.add(words[2].toLowerCase())
    if (fromStage) continue
    if (!/[:@]/.test(image)) problem(from.line, `FROM ${image}: pin a tag (an untagged image is :latest, which changes under you)`)
    else if (/:latest$/.test(image)) problem(from.line, `FROM ${image}: pin a version, not :latest`)
  }

  const runs = instructions.filter((i) => i.keyword === 'RUN')
  if (!facts.deployedPackage && !runs.some((r) => /pnpm\b.*\bdeploy\b.*--prod/.test(r.args))) {
    problem(
      1,
      'the build stage must deploy the package with its production dependencies only (scripts/deploy-package.sh, i.e. pnpm deploy --prod)',
    )
  }
  for (const r of runs) {
    if (/apt-get install/.test(r.args) && !/--no-install-recommends/.test(r.args))
      problem(r.line, 'apt-get install without --no-install-recommends')
    if (/apt-get install/.test(r.args) && !/rm -rf \/var\/lib\/apt\/lists/.test(r.args))
      problem(r.line, 'apt-get install without removing /var/lib/apt/lists in the same RUN')
  }
  for (const add of instructions.filter((i) => i.keyword === 'ADD'))
    problem(add.line, 'ADD: use COPY (and fetch remote files in a RUN you can verify)')
  for (const env of instructions.filter((i) => i.keyword === 'ENV' || i.keyword === 'ARG')) {
    const secret = /\b([A-Z0-9_]*(?:PASSWORD|SECRET|TOKEN|PRIVATE_KEY|API_KEY)[A-Z0-9_]*)\s*=\s*\S/.exec(env.args)
    if (secret) problem(env.line, `${env.keyword} ${secret[1]}: secrets never go into an image (pass them at run time)`)
  }

  const runtime = stages.at(-1) ?? []
  const from = runtime[0]
  if (from && !/^node:(22|24)(\.\d+)*-[a-z]*-?slim\b|^node:(22|24)(\.\d+)*-slim\b/.test(from.args.split(/\s+/)[0]!)) {
    problem(from.line, `the runtime stage must be a Node 22 or 24 LTS slim image (found ${from.args})`)
  }
  for (const copy of runtime.filter((i) => i.keyword === 'COPY')) {
    if (!/--from=/.test(copy.args))
      problem(copy.line, "the runtime stage copies from the build context: it must copy only the build stage's output (COPY --from=build)")
  }
  const user = runtime.filter((i) => i.keyword === 'USER').at(-1)
  if (!user) problem(from?.line ?? 1, 'the runtime stage has no USER: the container would run as root')
  else if (/^(root|0)(:|$)/.test(user.args)) problem(user.line, `USER ${user.args}: the container must not run as root`)
  if (!facts.healthcheck) problem(from?.line ?? 1, 'the runtime stage has no HEALTHCHECK')
  const { cmd } = facts
  const argv = cmd && execForm(cmd.args)
  if (!cmd) problem(from?.line ?? 1, 'the runtime stage has no CMD')
  else if (!argv)
    problem(
      cmd.line,
      `${cmd.keyword} must be in exec form (a JSON array): the shell form puts sh, not node, at PID 1 and SIGTERM never reaches the process`,
    )
  else {
    if (argv[0] !== 'node') problem(cmd.line, `${cmd.keyword} must start node directly (found ${argv[0]})`)
    if (argv.some((a) => /\btsx\b|\bts-node\b|\.ts$|^pnpm$|^npm$/.test(a)))
      problem(cmd.line, `${cmd.keyword} runs ${argv.join(' ')}: the image runs compiled JavaScript, without tsx or a package manager`)
    if (!argv.some((a) => /\.js$/.test(a))) problem(cmd.line, `${cmd.keyword} names no .js entry point`)
  }
  return facts
}

/**
 * Lints every deployable's Dockerfile; returns Dockerfile (relative path) -> whether its image
 * has a HEALTHCHECK, for the compose check.
 */
export function checkDockerfiles(root: string, components: Component[], problems: string[], notes: string[]): Map<string, boolean> {
  const imageHealth = new Map<string, boolean>()
  const linted: string[] = []
  for (const c of components) {
    const file = `${c.dir}/Dockerfile`
    if (!existsSync(join(root, file))) {
      problems.push(`${file}: missing (every deployable has its own Dockerfile)`)
      continue
    }
    const facts = lintDockerfile(readFileSync(join(root, file), 'utf8'), (line, message) => problems.push(`${file}:${line}: ${message}`))
    imageHealth.set(file, facts.healthcheck !== undefined)
    linted.push(c.name)
    if (facts.deployedPackage && facts.deployedPackage !== c.packageName) {
      problems.push(`${file}: deploys ${facts.deployedPackage}, but the directory holds ${c.packageName}`)
    }
  }
  notes.push(`Dockerfiles: ${linted.length} linted (${linted.join(', ')})`)
  return imageHealth
}
