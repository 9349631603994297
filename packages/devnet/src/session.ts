import { createPublicClient, createTestClient, createWalletClient, getAddress, http, type Abi, type Address, type Hex } from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { anvilChain } from '@ats/chain'
import type { Artifact } from './artifacts.ts'

/** First default anvil account (mnemonic "test test … junk"). */
export const DEPLOYER_PRIVATE_KEY: Hex = '0xac0974bec39a17e36ba4a6b4d238ff944bacb478cbed5efcae784d7bf4f2ff80'

/** Deployer clients plus helpers that send one transaction and wait for it to succeed. */
export function deployerSession(rpcUrl: string) {
  const account = privateKeyToAccount(DEPLOYER_PRIVATE_KEY)
  const transport = http(rpcUrl)
  // anvil mines each transaction at once, so poll receipts quickly.
  const publicClient = createPublicClient({ chain: anvilChain, transport, pollingInterval: 20 })
  const wallet = createWalletClient({ account, chain: anvilChain, transport, pollingInterval: 20 })
  // anvil's own methods (anvil_setCode)
  const anvil = createTestClient({ chain: anvilChain, mode: 'anvil', transport })

  const confirm = async (hash: Hex) => {
    const receipt = await publicClient.waitForTransactionReceipt({ hash, pollingInterval: 20 })
    if (receipt.status !== 'success') throw new Error(`devnet deploy: transaction ${hash} reverted`)
    return receipt
  }
  const deploy = async ({ abi, bytecode }: Artifact, args: unknown[] = []): Promise<Address> => {
    const receipt = await confirm(await wallet.deployContract({ abi, bytecode, args }))
    if (!receipt.contractAddress) throw new Error('devnet deploy: no contract address')
    return getAddress(receipt.contractAddress)
  }
  const write = async (call: { address: Address; abi: Abi; functionName: string; args?: readonly unknown[]; value?: bigint }) => {
    await confirm(await wallet.writeContract(call as Parameters<typeof wallet.writeContract>[0]))
  }
  return { account, publicClient, wallet, anvil, deploy, write }
}

export type DeployerSession = ReturnType<typeof deployerSession>
