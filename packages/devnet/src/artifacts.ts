import { readFileSync } from 'node:fs'
import { createRequire } from 'node:module'
import type { Abi, Hex } from 'viem'

export interface Artifact {
  abi: Abi
  bytecode: Hex
}

const require = createRequire(import.meta.url)

function read(path: string): Artifact {
  const { abi, bytecode } = JSON.parse(readFileSync(path, 'utf8')) as Artifact
  return { abi, bytecode }
}

/** A Hardhat artifact shipped in an npm package, e.g. ('@uniswap/v3-core', 'contracts/UniswapV3Factory.sol/UniswapV3Factory'). */
export function npmArtifact(pkg: string, contract: string): Artifact {
  return read(require.resolve(`${pkg}/artifacts/${contract}.json`))
}

export type LocalContract = 'DevToken' | 'WrappedEther' | 'DevUsdc' | 'DevCollection' | 'DevPositions' | 'DevMulticall'

/** One of our own contracts' artifacts in packages/devnet/artifacts (see scripts/compile-tokens.ts). */
export function localArtifact(name: LocalContract): Artifact {
  return read(new URL(`../artifacts/${name}.json`, import.meta.url).pathname)
}
