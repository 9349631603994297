import { parseAbi, type Address } from 'viem'
import { localArtifact } from './artifacts.ts'
import type { DeployerSession } from './session.ts'

/** What a client needs to pay with EIP-3009 (the FiatToken v2 surface of DevUsdc). */
export const eip3009Abi = parseAbi([
  'function name() view returns (string)',
  'function version() view returns (string)',
  'function decimals() view returns (uint8)',
  'function balanceOf(address account) view returns (uint256)',
  'function DOMAIN_SEPARATOR() view returns (bytes32)',
  'function authorizationState(address authorizer, bytes32 nonce) view returns (bool)',
  'function transferWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'function receiveWithAuthorization(address from, address to, uint256 value, uint256 validAfter, uint256 validBefore, bytes32 nonce, uint8 v, bytes32 r, bytes32 s)',
  'event AuthorizationUsed(address indexed authorizer, bytes32 indexed nonce)',
])

/** EIP-712 types for viem's signTypedData, primaryType 'TransferWithAuthorization'. */
export const transferWithAuthorizationTypes = {
  TransferWithAuthorization: [
    { name: 'from', type: 'address' },
    { name: 'to', type: 'address' },
    { name: 'value', type: 'uint256' },
    { name: 'validAfter', type: 'uint256' },
    { name: 'validBefore', type: 'uint256' },
    { name: 'nonce', type: 'bytes32' },
  ],
} as const

/** Same fields under primaryType 'ReceiveWithAuthorization' (only the payee may submit it). */
export const receiveWithAuthorizationTypes = {
  ReceiveWithAuthorization: transferWithAuthorizationTypes.TransferWithAuthorization,
} as const

/** The EIP-712 domain of USDC (FiatToken v2) and of DevUsdc. */
export function usdcDomain(chainId: number, verifyingContract: Address) {
  return { name: 'USD Coin', version: '2', chainId, verifyingContract } as const
}

/** Deploys DevUsdc ("USD Coin"/"USDC", 6 decimals, mintable by anyone, EIP-3009). */
export async function deployUsdc(s: DeployerSession): Promise<Address> {
  const artifact = localArtifact('DevUsdc')
  return s.deploy(artifact)
}
