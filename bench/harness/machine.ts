// What the machine did besides the bench during a run, read from /proc (steal, shared services, other processes).

import { readdirSync, readFileSync } from 'node:fs'
import { basename } from 'node:path'

/** What the machine did besides the bench during one run. */
export interface MachineLoad {
  seconds: number
  /** share of all CPUs' time the hypervisor gave to someone else, % */
  stealPercent: number
  /** CPU used by processes outside the bench (and not one of the shared services), % of one core */
  othersPercent: number
  /** CPU used by the shared services (Redis, NATS, Postgres), % of one core */
  servicesPercent: number
  /** the biggest of the others (% of one core), largest first */
  topOthers: Array<{ name: string; percent: number }>
}

const DEFAULT_SERVICES = ['redis-server', 'nats-server', 'postgres']

interface CpuTimes {
  /** user + nice + system, all CPUs, clock ticks */
  busy: number
  steal: number
  total: number
}

function readCpuTimes(): CpuTimes {
  try {
    const line = readFileSync('/proc/stat', 'utf8').split('\n', 1)[0]!
    const [user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0] = line
      .trim()
      .split(/\s+/)
      .slice(1)
      .map(Number)
    return { busy: user + nice + system, steal, total: user + nice + system + idle + iowait + irq + softirq + steal }
  } catch {
    return { busy: Number.NaN, steal: Number.NaN, total: Number.NaN }
  }
}

interface Proc {
  ppid: number
  /** utime + stime, clock ticks */
  ticks: number
  name: string
}

function readProcesses(): Map<number, Proc> {
  const procs = new Map<number, Proc>()
  let entries: string[] = []
  try {
    entries = readdirSync('/proc')
  } catch {}
  for (const entry of entries) {
    if (!/^\d+$/.test(entry)) continue
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, 'utf8')
      const close = stat.lastIndexOf(')')
      const fields = stat.slice(close + 2).split(' ')
      procs.set(Number(entry), {
        ppid: Number(fields[1]),
        ticks: Number(fields[11]) + Number(fields[12]),
        name: stat.slice(stat.indexOf('(') + 1, close),
      })
    } catch {} // gone meanwhile
  }
  return procs
}

/** `node contracts.test.ts` or `node tsc` rather than `node` (the script it runs); else the process name */
function describe(pid: number, name: string): string {
  if (!/^(node|python3?|sh|bash|deno|bun)$/.test(name)) return name
  try {
    const script = readFileSync(`/proc/${pid}/cmdline`, 'utf8')
      .split('\0')
      .slice(1)
      .find((a) => a.includes('/') && !a.startsWith('-'))
    return script ? `${name} ${basename(script).slice(0, 40)}` : name
  } catch {
    return name
  }
}

/**
 * Starts watching the machine; `stop()` says what happened since outside this process and its
 * descendants, with the processes named in `services` counted apart.
 */
export function machineMeter(services: string[] = DEFAULT_SERVICES): { stop(): MachineLoad } {
  const started = performance.now()
  const cpuBefore = readCpuTimes()
  const procsBefore = readProcesses()
  return {
    stop() {
      const seconds = (performance.now() - started) / 1000
      const cpuAfter = readCpuTimes()
      const procsAfter = readProcesses()
      // the bench: this process and every descendant (servers, devnet, whatever they started)
      const bench = new Set([process.pid])
      for (let grown = true; grown; ) {
        grown = false
        for (const [pid, proc] of [...procsBefore, ...procsAfter])
          if (!bench.has(pid) && bench.has(proc.ppid)) {
            bench.add(pid)
            grown = true
          }
      }
      let benchTicks = 0
      let serviceTicks = 0
      const others = new Map<string, number>()
      for (const [pid, after] of procsAfter) {
        const used = after.ticks - (procsBefore.get(pid)?.ticks ?? 0)
        if (bench.has(pid)) benchTicks += used
        else if (services.includes(after.name)) serviceTicks += used
        else if (used > 0) {
          const name = describe(pid, after.name)
          others.set(name, (others.get(name) ?? 0) + used)
        }
      }
      const perCore = (ticks: number) => ticks / seconds // 100 ticks a second: ticks/s = % of one core
      const total = cpuAfter.total - cpuBefore.total
      return {
        seconds,
        stealPercent: total > 0 ? ((cpuAfter.steal - cpuBefore.steal) / total) * 100 : Number.NaN,
        othersPercent: Math.max(0, perCore(cpuAfter.busy - cpuBefore.busy - benchTicks - serviceTicks)),
        servicesPercent: perCore(serviceTicks),
        topOthers: [...others]
          .map(([name, ticks]) => ({ name, percent: perCore(ticks) }))
          .filter((o) => o.percent >= 2)
          .sort((a, b) => b.percent - a.percent)
          .slice(0, 3),
      }
    },
  }
}
