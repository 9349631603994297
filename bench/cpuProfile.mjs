// A CPU profile of a bench's server: `BENCH_GATEWAY_NODE_OPTIONS='--import ./bench/cpuProfile.mjs'`
// (node refuses --cpu-prof in NODE_OPTIONS). Starts the inspector's profiler at load and writes
// <PROFILE_DIR or the working directory>/<pid>.cpuprofile when the process is stopped (SIGTERM) or exits.
import { writeFileSync } from 'node:fs'
import { Session } from 'node:inspector'

const session = new Session()
session.connect()
session.post('Profiler.enable')
session.post('Profiler.setSamplingInterval', { interval: 200 })
session.post('Profiler.start')
let written = false
const write = () => {
  if (written) return
  written = true
  session.post('Profiler.stop', (error, result) => {
    if (!error) writeFileSync(`${process.env.PROFILE_DIR ?? '.'}/${process.pid}.cpuprofile`, JSON.stringify(result.profile))
  })
}
process.prependListener('SIGTERM', write)
process.on('exit', write)
