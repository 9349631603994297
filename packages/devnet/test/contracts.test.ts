import t from 'tap'
import { randomBytes } from 'node:crypto'
import {
  createWalletClient,
  domainSeparator,
  getAddress,
  http,
  parseAbi,
  parseSignature,
  parseUnits,
  toHex,
  type Address,
  type Hex,
} from 'viem'
import { privateKeyToAccount } from 'viem/accounts'
import { anvilChain } from '@ats/chain'
import { startAnvil } from '../src/anvil.ts'
import { deployerSession } from '../src/session.ts'
import {
  aavePoolAbi,
  eip3009Abi,
  gmxReaderAbi,
  receiveWithAuthorizationTypes,
  transferWithAuthorizationTypes,
  usdcDomain,
} from '@ats/chain'
import { deployUsdc } from '../src/usdc.ts'
import { collectionAbi, deployCollection, listTokensByLogs } from '../src/collection.ts'
import { deployPositions, positionsAdminAbi, SEEDED_LENDING, SEEDED_PERP } from '../src/positions.ts'

// Default anvil accounts 1-4 (account 0 is the deployer).
const KEYS: Hex[] = [
  '0x59c6995e998f97a5a0044966f0945389dc9e86dae88c7a8412f4603b6b78690d',
  '0x5de4111afa1a4b94908f83103eb1f1706367c2e68ca870fc3fb9a804cdab365a',
  '0x7c852118294e51e653712a81e05800f419141751be58f605c371e15141b007a6',
  '0x47e179ec197488593b187f80a00eb0da91f1c9b0b03a5ffbaa6b8e8b8d2bd9a2',
]
const [payer, submitter, payee, server] = KEYS.map((k) => privateKeyToAccount(k)) as [
  ReturnType<typeof privateKeyToAccount>,
  ReturnType<typeof privateKeyToAccount>,
  ReturnType<typeof privateKeyToAccount>,
  ReturnType<typeof privateKeyToAccount>,
]
// secp256k1 group order, to build the high-s twin of a valid signature.
const SECP256K1_N = 0xfffffffffffffffffffffffffffffffebaaedce6af48a03bbfd25e8cd0364141n
const mintAbi = parseAbi(['function mint(address to, uint256 amount)'])

const anvil = await startAnvil({ port: 0 })
t.teardown(() => anvil.stop())
const s = deployerSession(anvil.rpcUrl)
const client = s.publicClient
const walletOf = (account: ReturnType<typeof privateKeyToAccount>) =>
  createWalletClient({ account, chain: anvilChain, transport: http(anvil.rpcUrl) })

t.test('DevUsdc: EIP-3009 transferWithAuthorization', async (t) => {
  const usdc = await deployUsdc(s)
  const value = parseUnits('25', 6)
  await s.write({ address: usdc, abi: mintAbi, functionName: 'mint', args: [payer.address, parseUnits('100', 6)] })

  t.equal(await client.readContract({ address: usdc, abi: eip3009Abi, functionName: 'name' }), 'USD Coin')
  t.equal(await client.readContract({ address: usdc, abi: eip3009Abi, functionName: 'version' }), '2')
  t.equal(await client.readContract({ address: usdc, abi: eip3009Abi, functionName: 'decimals' }), 6)
  const domain = usdcDomain(31337, usdc)
  t.equal(
    await client.readContract({ address: usdc, abi: eip3009Abi, functionName: 'DOMAIN_SEPARATOR' }),
    domainSeparator({ domain }),
    'DOMAIN_SEPARATOR matches the EIP-712 domain viem computes',
  )

  const now = (await client.getBlock()).timestamp
  const authorize = async (
    signer: ReturnType<typeof privateKeyToAccount>,
    message: { from: Address; to: Address; value: bigint; validAfter: bigint; validBefore: bigint; nonce: Hex },
  ) => {
    const signature = await signer.signTypedData({
      domain,
      types: transferWithAuthorizationTypes,
      primaryType: 'TransferWithAuthorization',
      message,
    })
    const { v, r, s: sigS } = parseSignature(signature)
    const args = [
      message.from,
      message.to,
      message.value,
      message.validAfter,
      message.validBefore,
      message.nonce,
      Number(v),
      r,
      sigS,
    ] as const
    return args
  }
  const transfer = (args: Awaited<ReturnType<typeof authorize>>) =>
    client.simulateContract({ account: submitter, address: usdc, abi: eip3009Abi, functionName: 'transferWithAuthorization', args })
  const balance = (a: Address) => client.readContract({ address: usdc, abi: eip3009Abi, functionName: 'balanceOf', args: [a] })

  const nonce = toHex(randomBytes(32))
  const message = { from: payer.address, to: payee.address, value, validAfter: 0n, validBefore: now + 3600n, nonce }
  const args = await authorize(payer, message)
  const before = { payer: await balance(payer.address), payee: await balance(payee.address) }
  t.equal(
    await client.readContract({ address: usdc, abi: eip3009Abi, functionName: 'authorizationState', args: [payer.address, nonce] }),
    false,
  )

  const { request } = await transfer(args)
  const hash = await walletOf(submitter).writeContract(request)
  const receipt = await client.waitForTransactionReceipt({ hash, pollingInterval: 20 })
  t.equal(receipt.status, 'success', 'a third account submits the authorization')
  t.equal(await balance(payer.address), before.payer - value, 'payer pays the value')
  t.equal(await balance(payee.address), before.payee + value, 'payee receives the value')
  t.equal(
    await client.readContract({ address: usdc, abi: eip3009Abi, functionName: 'authorizationState', args: [payer.address, nonce] }),
    true,
  )
  const [used] = await client.getContractEvents({
    address: usdc,
    abi: eip3009Abi,
    eventName: 'AuthorizationUsed',
    blockHash: receipt.blockHash,
  })
  t.same(used?.args, { authorizer: payer.address, nonce }, 'AuthorizationUsed emitted')

  await t.rejects(transfer(args), /authorization is used/, 'a replay reverts')

  const expired = await authorize(payer, { ...message, nonce: toHex(randomBytes(32)), validBefore: now - 1n })
  await t.rejects(transfer(expired), /authorization is expired/, 'an expired authorization reverts')

  const future = await authorize(payer, { ...message, nonce: toHex(randomBytes(32)), validAfter: now + 3600n, validBefore: now + 7200n })
  await t.rejects(transfer(future), /not yet valid/, 'an authorization before validAfter reverts')

  const forged = await authorize(submitter, { ...message, nonce: toHex(randomBytes(32)) })
  await t.rejects(transfer(forged), /invalid signature/, 'a signature by someone other than `from` reverts')

  const tampered = await authorize(payer, { ...message, nonce: toHex(randomBytes(32)) })
  await t.rejects(
    transfer([tampered[0], tampered[1], value + 1n, ...tampered.slice(3)] as unknown as typeof tampered),
    /invalid signature/,
    'a changed value reverts',
  )

  const good = await authorize(payer, { ...message, nonce: toHex(randomBytes(32)) })
  const highS = toHex(SECP256K1_N - BigInt(good[8]), { size: 32 })
  const twin = [...good.slice(0, 6), good[6] === 27 ? 28 : 27, good[7], highS] as unknown as typeof good
  await t.rejects(transfer(twin), /'s' value/, 'the high-s twin of a valid signature reverts')

  const receiveArgs = good
  await t.rejects(
    client.simulateContract({
      account: submitter,
      address: usdc,
      abi: eip3009Abi,
      functionName: 'receiveWithAuthorization',
      args: receiveArgs,
    }),
    /caller must be the payee/,
    'receiveWithAuthorization only from the payee',
  )

  const receiveMessage = { ...message, nonce: toHex(randomBytes(32)) }
  const receiveSig = parseSignature(
    await payer.signTypedData({
      domain,
      types: receiveWithAuthorizationTypes,
      primaryType: 'ReceiveWithAuthorization',
      message: receiveMessage,
    }),
  )
  const payeeBefore = await balance(payee.address)
  const { request: receiveRequest } = await client.simulateContract({
    account: payee,
    address: usdc,
    abi: eip3009Abi,
    functionName: 'receiveWithAuthorization',
    args: [
      receiveMessage.from,
      receiveMessage.to,
      receiveMessage.value,
      receiveMessage.validAfter,
      receiveMessage.validBefore,
      receiveMessage.nonce,
      Number(receiveSig.v),
      receiveSig.r,
      receiveSig.s,
    ],
  })
  const receiveHash = await walletOf(payee).writeContract(receiveRequest)
  t.equal((await client.waitForTransactionReceipt({ hash: receiveHash, pollingInterval: 20 })).status, 'success')
  t.equal(await balance(payee.address), payeeBefore + value, 'the payee pulls the value with receiveWithAuthorization')
})

t.test('DevPositions: Aave V3 getUserAccountData and GMX V2 getAccountPositions', async (t) => {
  const market = getAddress('0x70d95587d40a2caf56bd97485ab3eec10bee6336') // stand-in market address
  const collateralToken = await deployUsdc(s)
  const positions = await deployPositions(s, server.address, { market, collateralToken })

  const [totalCollateralBase, totalDebtBase, availableBorrowsBase, currentLiquidationThreshold, ltv, healthFactor] =
    await client.readContract({ address: positions, abi: aavePoolAbi, functionName: 'getUserAccountData', args: [server.address] })
  t.same(
    { totalCollateralBase, totalDebtBase, availableBorrowsBase, currentLiquidationThreshold, ltv, healthFactor },
    SEEDED_LENDING,
    'Aave account data of the server wallet',
  )
  const [, , , , , emptyHealth] = await client.readContract({
    address: positions,
    abi: aavePoolAbi,
    functionName: 'getUserAccountData',
    args: [payer.address],
  })
  t.equal(emptyHealth, 2n ** 256n - 1n, 'no debt: health factor is max uint256, as on Aave')

  const dataStore = getAddress('0xfd70de6b91282d8017aa4e741e9ae325cab992d8') // any address is accepted
  const list = await client.readContract({
    address: positions,
    abi: gmxReaderAbi,
    functionName: 'getAccountPositions',
    args: [dataStore, server.address, 0n, 10n],
  })
  t.equal(list.length, 1, 'one perp position')
  const p = list[0]!
  t.same(p.addresses, { account: server.address, market, collateralToken })
  t.equal(p.numbers.sizeInUsd, SEEDED_PERP.sizeInUsd)
  t.equal(p.numbers.sizeInTokens, SEEDED_PERP.sizeInTokens)
  t.equal(p.numbers.collateralAmount, SEEDED_PERP.collateralAmount)
  t.equal(p.numbers.pendingImpactAmount, 0n)
  t.ok(p.numbers.increasedAtTime > 0n, 'increasedAtTime is set')
  t.equal(p.flags.isLong, true)
  t.same(
    await client.readContract({
      address: positions,
      abi: gmxReaderAbi,
      functionName: 'getAccountPositions',
      args: [dataStore, server.address, 1n, 10n],
    }),
    [],
    'range past the end is empty',
  )
  t.same(
    await client.readContract({
      address: positions,
      abi: gmxReaderAbi,
      functionName: 'getAccountPositions',
      args: [dataStore, payer.address, 0n, 10n],
    }),
    [],
    'other accounts have none',
  )
  await t.rejects(
    client.simulateContract({
      account: payer,
      address: positions,
      abi: positionsAdminAbi,
      functionName: 'setAccountData',
      args: [payer.address, 1n, 0n, 0n, 0n],
    }),
    /not the owner/,
    'only the deployer seeds positions',
  )
})

t.test('DevCollection: list owned tokens from Transfer logs + ownerOf', async (t) => {
  const owners = [payer.address, submitter.address]
  const { address: nft, tokens } = await deployCollection(s, owners)
  t.same(
    tokens.map((x) => [x.owner, x.tokenId]),
    [
      [payer.address, 1n],
      [payer.address, 2n],
      [payer.address, 3n],
      [submitter.address, 4n],
      [submitter.address, 5n],
    ],
  )
  t.equal(
    await client.readContract({ address: nft, abi: collectionAbi, functionName: 'tokenURI', args: [3n] }),
    'https://devnet.invalid/collection/3',
  )
  const supports = (id: Hex) =>
    client.readContract({
      address: nft,
      abi: parseAbi(['function supportsInterface(bytes4) view returns (bool)']),
      functionName: 'supportsInterface',
      args: [id],
    })
  t.equal(await supports('0x80ac58cd'), true, 'ERC-721')
  t.equal(await supports('0x5b5e139f'), true, 'ERC-721 metadata')
  t.equal(await supports('0xffffffff'), false)

  t.same(await listTokensByLogs(client, nft, payer.address), [1n, 2n, 3n])
  t.same(await listTokensByLogs(client, nft, submitter.address), [4n, 5n])

  const hash = await walletOf(payer).writeContract({
    address: nft,
    abi: collectionAbi,
    functionName: 'transferFrom',
    args: [payer.address, submitter.address, 2n],
  })
  t.equal((await client.waitForTransactionReceipt({ hash, pollingInterval: 20 })).status, 'success')
  t.equal(await client.readContract({ address: nft, abi: collectionAbi, functionName: 'ownerOf', args: [2n] }), submitter.address)
  t.equal(await client.readContract({ address: nft, abi: collectionAbi, functionName: 'balanceOf', args: [payer.address] }), 2n)
  t.same(await listTokensByLogs(client, nft, payer.address), [1n, 3n], 'the sender no longer lists token 2')
  t.same(await listTokensByLogs(client, nft, submitter.address), [2n, 4n, 5n], 'the receiver lists it')
  await t.rejects(
    client.simulateContract({
      account: payer,
      address: nft,
      abi: collectionAbi,
      functionName: 'transferFrom',
      args: [submitter.address, payer.address, 4n],
    }),
    /not owner nor approved/,
    'a non-owner cannot move a token',
  )
})
