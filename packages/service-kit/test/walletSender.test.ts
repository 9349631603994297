// The wallet sender on a real devnet and Postgres: senders of one wallet in several processes never share a nonce.
import { mkdtempSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { eip3009Abi, ServerWalletNotConfigured, type SignedTx } from '@ats/chain'
import { startDevnet, type Devnet } from '@ats/devnet'
import pg from 'pg'
import t, { type Test } from 'tap'
import { encodeFunctionData, keccak256, type Address, type Hex } from 'viem'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { createChainContext, type ChainConfig, type ChainContext } from '../src/chain.ts'
import type { Logger } from '../src/logger.ts'
import { createService } from '../src/service.ts'
import { baseTestEnv, eventually, freshDatabase } from '../src/testing.ts'

let shared: Promise<Devnet> | undefined
/** One devnet for the file (starting one takes seconds), stopped when the file ends. */
const devnet = () => {
  // its address book in a file of its own: a service on chain 31337 reads it at start
  const addressBookPath = join(mkdtempSync(join(tmpdir(), 'book-')), 'address-book.json')
  shared ??= startDevnet({ port: 0, addressBookPath, snapshot: true }).then((started) => {
    t.teardown(() => started.stop())
    return started
  })
  return shared
}

/** The settings of a process that sends from the server wallet (devnet account 0). */
async function walletConfig(databaseUrl: string | undefined): Promise<ChainConfig> {
  const net = await devnet()
  return { RPC_URL: net.rpcUrl, CHAIN_ID: net.chainId, SERVER_WALLET_PRIVATE_KEY: net.accounts[0]!.privateKey, DATABASE_URL: databaseUrl }
}

/** The chain context of one process: its own clients, mutex and pool. */
function processChain(t: Test, config: ChainConfig, log?: Logger): ChainContext {
  const chain = createChainContext(config, log)
  t.teardown(() => chain.close())
  return chain
}

const freshAddress = (): Address => privateKeyToAccount(generatePrivateKey()).address
const pendingNonce = (chain: ChainContext) =>
  chain.publicClient.getTransactionCount({ address: chain.sender().address, blockTag: 'pending' })
/** 1 wei to an address that holds nothing */
const transfer = () => ({ to: freshAddress(), value: 1n })
/** a call the devnet's USDC refuses with "EIP3009: authorization is expired" */
const expiredAuthorization = (usdc: Address, from: Address): { to: Address; data: Hex } => ({
  to: usdc,
  data: encodeFunctionData({
    abi: eip3009Abi,
    functionName: 'transferWithAuthorization',
    args: [from, freshAddress(), 1n, 0n, 1n, `0x${'11'.repeat(32)}`, 27, `0x${'22'.repeat(32)}`, `0x${'33'.repeat(32)}`],
  }),
})

const failure = (call: Promise<unknown>) =>
  call.then(
    (value) => {
      throw new Error(`expected a failure, got ${JSON.stringify(value, (_, v) => (typeof v === 'bigint' ? String(v) : v))}`)
    },
    (error: Error) => error,
  )

t.test('two processes sending from one wallet at once get distinct nonces, and all 20 transactions are mined', async (t) => {
  const config = await walletConfig(await freshDatabase(t))
  const [first, second] = [processChain(t, config), processChain(t, config)]
  const start = await pendingNonce(first)

  const sent = await Promise.all([first, second].flatMap((chain) => Array.from({ length: 10 }, () => chain.sender().send(transfer()))))

  const nonces = sent.map((s) => s.nonce).sort((a, b) => a - b)
  t.same(
    nonces,
    Array.from({ length: 20 }, (_, i) => start + i),
    'one nonce each, none skipped',
  )
  const receipts = await Promise.all(sent.map(({ hash }) => first.publicClient.waitForTransactionReceipt({ hash })))
  t.ok(
    receipts.every((r) => r.status === 'success'),
    'all mined with success',
  )
  t.same(new Set(receipts.map((r) => r.from)), new Set([first.sender().address.toLowerCase()]), 'all from the server wallet')
})

t.test('an estimate that reverts throws the reason, sends nothing, and the next send takes the nonce', async (t) => {
  const net = await devnet()
  const chain = processChain(t, await walletConfig(await freshDatabase(t)))
  const usdc = net.book.tokens.find((token) => token.symbol === 'USDC')!.address
  const before = await pendingNonce(chain)
  let signed = false

  const error = await failure(
    chain.sender().send(expiredAuthorization(usdc, net.accounts[1]!.address), {
      onSigned: () => {
        signed = true
      },
    }),
  )
  t.equal(error.name, 'EstimateGasExecutionError', "viem's error")
  t.match(error.message, /EIP3009: authorization is expired/, 'with the revert reason')
  t.notOk(signed, 'nothing was signed')
  t.equal(await pendingNonce(chain), before, 'the nonce is unused')

  const next = await chain.sender().send(transfer())
  t.equal(next.nonce, before, 'the next send takes it')
})

t.test('a broadcast the node refuses, or an onSigned that throws, sends nothing and leaves the nonce to the next send', async (t) => {
  const chain = processChain(t, await walletConfig(await freshDatabase(t)))
  const before = await pendingNonce(chain)

  const refused = await failure(chain.sender().send({ ...transfer(), gas: 1_000n }))
  t.match(refused.message, /intrinsic gas too low/i, 'the node refused a gas limit below 21000')
  const stopped = await failure(
    chain.sender().send(transfer(), {
      onSigned: () => {
        throw new Error('could not store the transaction')
      },
    }),
  )
  t.equal(stopped.message, 'could not store the transaction', "onSigned's error")
  t.equal(await pendingNonce(chain), before, 'nothing reached the node')

  const next = await chain.sender().send(transfer())
  t.equal(next.nonce, before, 'the next send takes the nonce')
  t.equal((await chain.publicClient.waitForTransactionReceipt({ hash: next.hash })).status, 'success')
})

t.test('onSigned runs before the broadcast, with the hash and raw transaction that get mined', async (t) => {
  const chain = processChain(t, await walletConfig(await freshDatabase(t)))
  let seen: { signed: SignedTx; knownToNode: boolean } | undefined

  const sent = await chain.sender().send(transfer(), {
    onSigned: async (signed) => {
      const known = await chain.publicClient.getTransaction({ hash: signed.hash }).then(
        () => true,
        () => false,
      )
      seen = { signed, knownToNode: known }
    },
  })

  t.same(seen?.signed, sent, 'onSigned got what send returns')
  t.equal(seen?.knownToNode, false, 'the node had not seen the transaction yet')
  t.equal(keccak256(sent.raw), sent.hash, 'the hash is of the raw transaction')
  const receipt = await chain.publicClient.waitForTransactionReceipt({ hash: sent.hash })
  t.equal(receipt.status, 'success', 'that hash is mined')
  t.equal((await chain.publicClient.getTransaction({ hash: sent.hash })).nonce, sent.nonce, 'with that nonce')
})

t.test('without DATABASE_URL a process still sends one transaction at a time, and warns once', async (t) => {
  const warnings: unknown[] = []
  const log = { warn: (...args: unknown[]) => warnings.push(args) } as unknown as Logger
  const chain = processChain(t, await walletConfig(undefined), log)
  const start = await pendingNonce(chain)

  const sent = await Promise.all(Array.from({ length: 5 }, () => chain.sender().send(transfer())))

  t.same(
    sent.map((s) => s.nonce).sort((a, b) => a - b),
    [start, start + 1, start + 2, start + 3, start + 4],
  )
  t.equal(warnings.length, 1, 'one warning')
  t.match(warnings[0], [/no DATABASE_URL: .* coordinated in this process only/])
})

t.test('without a server wallet key, sender() says the server wallet is not configured (503)', async (t) => {
  const chain = createChainContext({ RPC_URL: 'http://127.0.0.1:1', CHAIN_ID: 31337 })
  t.throws(() => chain.sender(), new ServerWalletNotConfigured())
  t.throws(() => chain.sender(), { statusCode: 503, message: 'server wallet not configured' })
  await chain.close()
})

t.test("a write service's sender locks on the service's DATABASE_URL, and shutdown ends that pool", async (t) => {
  const net = await devnet()
  const env: NodeJS.ProcessEnv = {
    ...(await baseTestEnv(t)),
    RPC_URL: net.rpcUrl,
    CHAIN_ID: String(net.chainId),
    ADDRESS_BOOK: net.addressBookPath!,
    SERVER_WALLET_PRIVATE_KEY: net.accounts[0]!.privateKey,
  }
  const service = await createService(
    {
      name: 'sender',
      version: '0.0.0',
      port: 0,
      chain: 'write',
      database: {
        schema: 'shop',
        migrations: fileURLToPath(new URL('./fixtures/migrations', import.meta.url)),
        client: () => ({ $queryRawUnsafe: async () => [], $disconnect: async () => {} }),
      },
      register: async () => {},
    },
    env,
  )
  t.teardown(() => service.close())
  const watcher = new pg.Client({ connectionString: env.DATABASE_URL })
  await watcher.connect()
  t.teardown(() => watcher.end())
  const others = async () => {
    const { rows } = await watcher.query(
      'SELECT count(*)::int AS n FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()',
    )
    return rows[0].n as number
  }

  const sent = await service.ctx.chain.sender().send(transfer())
  t.equal((await service.ctx.chain.publicClient.waitForTransactionReceipt({ hash: sent.hash })).status, 'success')
  t.equal(await others(), 1, "the lock's pool holds one connection")
  await service.close()
  await eventually('the connection closed', async () => ((await others()) === 0 ? true : undefined))
})
