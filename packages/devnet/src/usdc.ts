import type { Address } from 'viem'
import { localArtifact } from './artifacts.ts'
import type { DeployerSession } from './session.ts'

/** Deploys DevUsdc ("USD Coin"/"USDC", 6 decimals, mintable by anyone, EIP-3009). */
export async function deployUsdc(s: DeployerSession): Promise<Address> {
  const artifact = localArtifact('DevUsdc')
  return s.deploy(artifact)
}
