/**
 * pnpm devnet: anvil on 127.0.0.1:8545 (DEVNET_PORT to change) with every token, Uniswap V3
 * and Algebra Integral deployed, the ten default accounts funded and the address book
 * written to <repo>/.devnet/address-book.json. Stays in the foreground until Ctrl-C.
 * In a container (the Dockerfile's devnet target): DEVNET_HOST=0.0.0.0 so that other containers
 * reach it, and ADDRESS_BOOK names the file to write (a volume the services read).
 */
import { realpathSync } from 'node:fs'
import { fileURLToPath } from 'node:url'
import { startDevnet, type Devnet } from './deploy.ts'

export const DEFAULT_DEVNET_PORT = 8545

export function devnetPort(value = process.env.DEVNET_PORT): number {
  if (!value) return DEFAULT_DEVNET_PORT
  const port = Number(value)
  if (!Number.isInteger(port) || port < 1 || port > 65535) throw new Error(`DEVNET_PORT must be a port number (1-65535), not "${value}"`)
  return port
}

/** Starts the devnet and turns a taken port into a message saying what to do. */
export async function startDevnetOrExplain(
  port: number,
  { host, addressBookPath }: { host?: string | undefined; addressBookPath?: string | undefined } = {},
): Promise<Devnet> {
  try {
    return await startDevnet({ port, host, addressBookPath })
  } catch (error) {
    const message = (error as Error).message
    if (/is not free/.test(message)) {
      throw new Error(
        `devnet: port 127.0.0.1:${port} is already in use. Is a devnet already running (pgrep -a anvil)? Stop it, or set DEVNET_PORT to a free port.`,
      )
    }
    throw error
  }
}

/** The lines `pnpm devnet` prints: where it answers, the address book, the funded accounts, the time. */
export function describeDevnet(devnet: Devnet, { accounts = true }: { accounts?: boolean } = {}): string {
  const { devnet: _omitted, ...book } = devnet.book
  const lines = [
    `Devnet (anvil) ready in ${(devnet.timings.totalMs / 1000).toFixed(2)} s ` +
      `(anvil ${devnet.timings.anvilMs} ms, deploy ${devnet.timings.deployMs} ms, fund ${devnet.timings.fundMs} ms)`,
    `  RPC URL:      ${devnet.rpcUrl}`,
    `  Chain id:     ${devnet.chainId}`,
    `  Address book: ${devnet.addressBookPath ?? '(not written)'}`,
  ]
  if (accounts) {
    lines.push(
      '',
      JSON.stringify(book, null, 2),
      '',
      'Funded accounts (anvil test keys, public: never use them on a real network). Each has 10,000 ETH,',
      '1,000,000 USDC, 100 WETH, 10 WBTC and 100,000 of every other token:',
      ...devnet.accounts.map((a, i) => `  (${i}) ${a.address}  ${a.privateKey}`),
    )
  }
  return lines.join('\n')
}

async function main() {
  let port: number
  let devnet: Devnet
  try {
    port = devnetPort()
    devnet = await startDevnetOrExplain(port, {
      host: process.env.DEVNET_HOST || undefined,
      addressBookPath: process.env.ADDRESS_BOOK || undefined,
    })
  } catch (error) {
    process.stderr.write(`${(error as Error).message}\n`)
    process.exit(1)
  }
  process.stdout.write(`${describeDevnet(devnet)}\n\nCtrl-C stops the devnet.\n`)
  let stopping = false
  const stop = async () => {
    if (stopping) return
    stopping = true
    process.stdout.write('\nstopping the devnet…\n')
    await devnet.stop()
    process.exit(0)
  }
  process.on('SIGINT', () => void stop())
  process.on('SIGTERM', () => void stop())
  // anvil's child process keeps the event loop alive; nothing else to do until a signal.
}

const isEntryPoint = () => {
  try {
    return process.argv[1] !== undefined && realpathSync(process.argv[1]) === realpathSync(fileURLToPath(import.meta.url))
  } catch {
    return false
  }
}
if (isEntryPoint()) await main()
