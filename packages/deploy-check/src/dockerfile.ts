/** The Dockerfile: every deployable's target linted without a Docker engine, and the facts the other checks read from it. */
import { existsSync, readFileSync } from 'node:fs'
import { join } from 'node:path'
import { validate } from 'dockerfile-utils'
import type { Component } from './components.ts'

/**
 * Lints the repository's one Dockerfile without a Docker engine (hadolint is not installable
 * here: docs/operations.md), one deployable per target. Two layers:
 *  - dockerfile-utils (the VS Code Docker extension's validator): syntax, unknown
 *    instructions and flags, malformed HEALTHCHECK/CMD/ENV/EXPOSE;
 *  - the fleet's image rules, each on what a target's image is made of: its stage and the
 *    stages it builds on (FROM <stage>). The build stage runs `pnpm deploy --prod` (through
 *    scripts/deploy-package.sh) into a directory per deployable; a target builds on a Node
 *    22/24 slim image, not on the build stage, copies only its own deployed directory from
 *    the build stage, runs as a non-root USER, has a HEALTHCHECK and an exec-form CMD that
 *    starts compiled JavaScript with node (no tsx, no pnpm).
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

export interface Stage {
  /** its `AS` name, lower-cased (Docker's stage names are case-insensitive) */
  name?: string
  /** the stage it builds on, when its FROM names an earlier stage rather than an image */
  parent?: Stage
  /** its instructions, starting with its FROM */
  instructions: Instruction[]
}

/** The Dockerfile read into stages, and what its build stage deploys where. */
export interface Dockerfile {
  instructions: Instruction[]
  stages: Stage[]
  /** output directory -> the package scripts/deploy-package.sh deploys there, and the RUN that does */
  deploys: Map<string, { package: string; run: Instruction }>
}

export function readDockerfile(text: string): Dockerfile {
  const instructions = parseDockerfile(text)
  const stages: Stage[] = []
  for (const ins of instructions) {
    if (ins.keyword === 'FROM') {
      const words = ins.args.split(/\s+/).filter((word) => !word.startsWith('--'))
      const parent = stages.find((s) => s.name === words[0]?.toLowerCase())
      const name = /^as$/i.test(words[1] ?? '') && words[2] ? words[2].toLowerCase() : undefined
      stages.push({ ...(name ? { name } : {}), ...(parent ? { parent } : {}), instructions: [] })
    }
    stages.at(-1)?.instructions.push(ins)
  }
  const deploys = new Map<string, { package: string; run: Instruction }>()
  for (const run of instructions.filter((i) => i.keyword === 'RUN')) {
    for (const m of run.args.matchAll(/scripts\/deploy-package\.sh\s+(\S+)\s+(\S+)/g))
      deploys.set(m[2]!.replace(/\/+$/, ''), { package: m[1]!, run })
  }
  return { instructions, stages, deploys }
}

/** A stage and the stages it builds on, the first FROM of an image first. */
export function stageChain(stage: Stage): Stage[] {
  const chain: Stage[] = []
  for (let s: Stage | undefined = stage; s; s = s.parent) chain.unshift(s)
  return chain
}

/** What one target's image is built from and runs, read off its stage chain (nothing judged here). */
export interface ImageFacts {
  /** the target's stage and those it builds on, the first FROM of an image first */
  chain: Stage[]
  /** the package the build stage deploys into the directory the target copies (scripts/deploy-package.sh <package> /out/<dir>) */
  deployedPackage?: string
  /** the COPY --from=build that brings the deployed directory in */
  copy?: Instruction
  /** the image's ENV, as the chain sets it */
  env: Record<string, string>
  /** the last USER of the chain */
  user?: Instruction
  /** the last CMD or ENTRYPOINT of the chain */
  cmd?: Instruction
  /** the last HEALTHCHECK of the chain, unless none or NONE */
  healthcheck?: Instruction
}

/** The facts of one target (a stage name); undefined when the Dockerfile has no such stage. */
export function readImage(file: Dockerfile, target: string): ImageFacts | undefined {
  const stage = file.stages.find((s) => s.name === target.toLowerCase())
  if (!stage) return undefined
  const chain = stageChain(stage)
  const all = chain.flatMap((s) => s.instructions)
  const last = (...keywords: string[]) => all.filter((i) => keywords.includes(i.keyword)).at(-1)
  const env: Record<string, string> = {}
  for (const e of all.filter((i) => i.keyword === 'ENV')) for (const m of e.args.matchAll(/([A-Z0-9_]+)=(\S+)/g)) env[m[1]!] = m[2]!
  // the last COPY --from=<a stage that is, or builds on, one that deploys> <its output directory>
  const deployed = all
    .flatMap((c) => {
      const from = c.keyword === 'COPY' && file.stages.find((s) => s.name === /--from=(\S+)/.exec(c.args)?.[1]?.toLowerCase())
      if (!from) return []
      const source = c.args.split(/\s+/).find((word) => !word.startsWith('--'))
      const deploy = file.deploys.get(source?.replace(/\/+$/, '') ?? '')
      const built = stageChain(from).flatMap((s) => s.instructions)
      return deploy && built.includes(deploy.run) ? [{ deployedPackage: deploy.package, copy: c }] : []
    })
    .at(-1)
  const user = last('USER')
  const cmd = last('CMD', 'ENTRYPOINT')
  const healthcheck = last('HEALTHCHECK')
  return {
    chain,
    env,
    ...deployed,
    ...(user ? { user } : {}),
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

/**
 * Lints the Dockerfile at the repository root and each target's image, a target per deployable;
 * returns target -> whether its image has a HEALTHCHECK, for the compose check.
 */
export function checkDockerfiles(root: string, components: Component[], problems: string[], notes: string[]): Map<string, boolean> {
  const imageHealth = new Map<string, boolean>()
  for (const c of components.filter((c) => existsSync(join(root, c.dir, 'Dockerfile'))))
    problems.push(
      `${c.dir}/Dockerfile: a Dockerfile of its own; ${c.name} is the target "${c.name}" of the Dockerfile at the repository root`,
    )
  if (!existsSync(join(root, 'Dockerfile'))) {
    problems.push('Dockerfile: missing (every deployable is a target of the Dockerfile at the repository root)')
    return imageHealth
  }
  // a problem found in a stage several targets build on is listed once, with those targets
  const found = new Map<string, { line: number; message: string; targets: string[] }>()
  const problem = (line: number, message: string, target?: string) => {
    const key = `${line}\0${message}`
    const entry = found.get(key) ?? { line, message, targets: [] }
    if (target) entry.targets.push(target)
    found.set(key, entry)
  }
  const text = readFileSync(join(root, 'Dockerfile'), 'utf8')
  for (const d of validate(text)) problem(d.range.start.line + 1, `dockerfile-utils: ${d.message}`)

  const file = readDockerfile(text)
  const { instructions, stages } = file
  for (const stage of stages.filter((s) => !s.parent)) {
    const from = stage.instructions[0]!
    const image = from.args.split(/\s+/).find((word) => !word.startsWith('--')) ?? ''
    if (!/[:@]/.test(image)) problem(from.line, `FROM ${image}: pin a tag (an untagged image is :latest, which changes under you)`)
    else if (/:latest$/.test(image)) problem(from.line, `FROM ${image}: pin a version, not :latest`)
  }
  for (const r of instructions.filter((i) => i.keyword === 'RUN' && /apt-get install/.test(i.args))) {
    if (!/--no-install-recommends/.test(r.args)) problem(r.line, 'apt-get install without --no-install-recommends')
    if (!/rm -rf \/var\/lib\/apt\/lists/.test(r.args))
      problem(r.line, 'apt-get install without removing /var/lib/apt/lists in the same RUN')
  }
  for (const add of instructions.filter((i) => i.keyword === 'ADD'))
    problem(add.line, 'ADD: use COPY (and fetch remote files in a RUN you can verify)')
  for (const env of instructions.filter((i) => i.keyword === 'ENV' || i.keyword === 'ARG')) {
    const secret = /\b([A-Z0-9_]*(?:PASSWORD|SECRET|TOKEN|PRIVATE_KEY|API_KEY)[A-Z0-9_]*)\s*=\s*\S/.exec(env.args)
    if (secret) problem(env.line, `${env.keyword} ${secret[1]}: secrets never go into an image (pass them at run time)`)
  }

  for (const c of components) {
    const target = c.name
    const facts = readImage(file, target)
    if (!facts) {
      problem(1, `no stage "${target}": every deployable is a target of this Dockerfile (FROM service AS ${target})`)
      continue
    }
    imageHealth.set(target, facts.healthcheck !== undefined)
    if (facts.deployedPackage && facts.deployedPackage !== c.packageName)
      problems.push(
        `Dockerfile:${facts.copy!.line}: target ${target}: deploys ${facts.deployedPackage}, but ${target} is ${c.packageName} (${c.dir})`,
      )
    const fail = (line: number, message: string) => problem(line, message, target)
    const { chain } = facts
    const from = chain[0]!.instructions[0]!
    const own = chain.at(-1)!.instructions[0]!
    const runs = chain.flatMap((s) => s.instructions).filter((i) => i.keyword === 'RUN')
    const build = runs.find((r) => /deploy-package\.sh|\bpnpm\b.*\b(install|deploy)\b/.test(r.args))
    if (build)
      fail(
        build.line,
        'builds on the build stage: the image would hold the whole workspace; it must copy only what runs (COPY --from=build)',
      )
    if (!facts.deployedPackage)
      fail(
        facts.copy?.line ?? own.line,
        'copies no package the build stage deploys with its production dependencies only (COPY --from=build /out/<dir> of a scripts/deploy-package.sh <package> /out/<dir>, i.e. pnpm deploy --prod)',
      )
    if (!/^node:(22|24)(\.\d+)*-[a-z]*-?slim\b/.test(from.args.split(/\s+/)[0]!))
      fail(from.line, `the image must build on a Node 22 or 24 LTS slim image (found ${from.args})`)
    for (const copy of chain.flatMap((s) => s.instructions).filter((i) => i.keyword === 'COPY')) {
      if (!/--from=/.test(copy.args))
        fail(copy.line, "the image copies from the build context: it must copy only the build stage's output (COPY --from=build)")
    }
    const { user, cmd } = facts
    if (!user) fail(own.line, 'no USER: the container would run as root')
    else if (/^(root|0)(:|$)/.test(user.args)) fail(user.line, `USER ${user.args}: the container must not run as root`)
    if (!facts.healthcheck) fail(own.line, 'no HEALTHCHECK')
    const argv = cmd && execForm(cmd.args)
    if (!cmd) fail(own.line, 'no CMD')
    else if (!argv)
      fail(
        cmd.line,
        `${cmd.keyword} must be in exec form (a JSON array): the shell form puts sh, not node, at PID 1 and SIGTERM never reaches the process`,
      )
    else {
      if (argv[0] !== 'node') fail(cmd.line, `${cmd.keyword} must start node directly (found ${argv[0]})`)
      if (argv.some((a) => /\btsx\b|\bts-node\b|\.ts$|^pnpm$|^npm$/.test(a)))
        fail(cmd.line, `${cmd.keyword} runs ${argv.join(' ')}: the image runs compiled JavaScript, without tsx or a package manager`)
      if (!argv.some((a) => /\.js$/.test(a))) fail(cmd.line, `${cmd.keyword} names no .js entry point`)
    }
  }
  for (const { line, message, targets } of found.values()) {
    const which = targets.length === 0 ? '' : `${targets.length === 1 ? 'target' : 'targets'} ${targets.join(', ')}: `
    problems.push(`Dockerfile:${line}: ${which}${message}`)
  }
  notes.push(`Dockerfile: ${imageHealth.size} targets linted (${[...imageHealth.keys()].join(', ')})`)
  return imageHealth
}
