// Compiles every contracts/*.sol into artifacts/<Contract>.json ({contractName, abi, bytecode}).
// The installed npm packages ship no WETH9, no ERC-20 with settable decimals, no EIP-3009
// USDC, no ERC-721 and no Aave/GMX read stand-ins, so these small contracts are ours; the
// protocols come from npm artifacts. solc is pinned to 0.8.26 and sources are read in sorted
// order, so the same sources give byte-identical artifacts (metadata hash included).
// It compiles the package it is run in (`tsx scripts/compile-tokens.ts`) or the package
// folder given (`tsx <this file> services/trading`: the launchpad's LaunchToken).
import { createRequire } from 'node:module'
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { resolve } from 'node:path'
import { pathToFileURL } from 'node:url'

const solc = createRequire(import.meta.url)('solc')
if (!String(solc.version()).startsWith('0.8.26+')) throw new Error(`compile: need solc 0.8.26, got ${solc.version()}`)
const dir = process.argv[2] ? pathToFileURL(`${resolve(process.argv[2])}/`) : new URL('..', import.meta.url)
const files = readdirSync(new URL('contracts/', dir))
  .filter((f) => f.endsWith('.sol'))
  .sort()
const sources = Object.fromEntries(files.map((f) => [f, { content: readFileSync(new URL(`contracts/${f}`, dir), 'utf8') }]))
const input = {
  language: 'Solidity',
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: 'paris',
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
  },
}
const output = JSON.parse(solc.compile(JSON.stringify(input)))
const diagnostics: Array<{ severity: string; formattedMessage: string }> = output.errors ?? []
for (const w of diagnostics.filter((e) => e.severity !== 'error')) console.warn(w.formattedMessage)
const errors = diagnostics.filter((e) => e.severity === 'error')
if (errors.length) throw new Error(errors.map((e) => e.formattedMessage).join('\n'))

const written = new Map<string, string>()
for (const file of files) {
  for (const [name, contract] of Object.entries<any>(output.contracts[file] ?? {})) {
    // Interfaces have no bytecode and struct-only libraries no ABI: nothing to deploy or call.
    if (!contract.evm.bytecode.object || contract.abi.length === 0) continue
    if (written.has(name)) throw new Error(`compile: contract ${name} in both ${written.get(name)} and ${file}`)
    written.set(name, file)
    const artifact = { contractName: name, abi: contract.abi, bytecode: `0x${contract.evm.bytecode.object}` }
    writeFileSync(new URL(`artifacts/${name}.json`, dir), JSON.stringify(artifact, null, 2) + '\n')
    console.log(`artifacts/${name}.json (${file})`)
  }
}
