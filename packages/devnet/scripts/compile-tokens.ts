// Compiles contracts/Tokens.sol into artifacts/<Contract>.json ({abi, bytecode}).
// The installed npm packages ship no WETH9 and no ERC-20 with settable decimals, so
// these two small token contracts are ours; the protocols come from npm artifacts.
import { createRequire } from 'node:module'
import { readFileSync, writeFileSync } from 'node:fs'

const solc = createRequire(import.meta.url)('solc')
const dir = new URL('..', import.meta.url)
const input = {
  language: 'Solidity',
  sources: { 'Tokens.sol': { content: readFileSync(new URL('contracts/Tokens.sol', dir), 'utf8') } },
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: 'paris',
    outputSelection: { '*': { '*': ['abi', 'evm.bytecode.object'] } },
  },
}
const output = JSON.parse(solc.compile(JSON.stringify(input)))
const errors = (output.errors ?? []).filter((e: { severity: string }) => e.severity === 'error')
if (errors.length) throw new Error(errors.map((e: { formattedMessage: string }) => e.formattedMessage).join('\n'))
for (const [name, contract] of Object.entries<any>(output.contracts['Tokens.sol'])) {
  const artifact = { contractName: name, abi: contract.abi, bytecode: `0x${contract.evm.bytecode.object}` }
  writeFileSync(new URL(`artifacts/${name}.json`, dir), JSON.stringify(artifact, null, 2) + '\n')
  console.log(`artifacts/${name}.json`)
}
