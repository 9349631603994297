// The agent's allowlist: payers whose paid jobs may swap from the server wallet, each within a spend policy.
import type { AgentPayer, SpendPolicy } from '@ats/contracts'
import { getAddress } from 'viem'
import type { AgentPayer as Row, PrismaClient } from '../generated/prisma/client.ts'

const entryOf = (row: Row): AgentPayer => ({
  address: getAddress(row.address),
  label: row.label,
  // the column holds only policies the contract's schema accepted on the way in
  policy: row.spendPolicy as SpendPolicy,
  createdAt: row.createdAt.getTime(),
  updatedAt: row.updatedAt.getTime(),
})

export function createAgentPayers(db: PrismaClient) {
  return {
    async put(address: string, policy: SpendPolicy, label: string | undefined): Promise<AgentPayer> {
      const key = address.toLowerCase()
      const row = await db.agentPayer.upsert({
        where: { address: key },
        create: { address: key, label: label ?? '', spendPolicy: policy },
        update: { spendPolicy: policy, ...(label === undefined ? {} : { label }) },
      })
      return entryOf(row)
    },
    list: async () => (await db.agentPayer.findMany({ orderBy: { createdAt: 'asc' } })).map(entryOf),
    async get(address: string): Promise<AgentPayer | null> {
      const row = await db.agentPayer.findUnique({ where: { address: address.toLowerCase() } })
      return row ? entryOf(row) : null
    },
    /** false when the payer was not on the list */
    async remove(address: string): Promise<boolean> {
      const { count } = await db.agentPayer.deleteMany({ where: { address: address.toLowerCase() } })
      return count > 0
    },
  }
}
export type AgentPayers = ReturnType<typeof createAgentPayers>
