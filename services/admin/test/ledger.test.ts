import t from 'tap'
import { generatePrivateKey, privateKeyToAccount } from 'viem/accounts'
import { eventually, freshAddress, signCharge, startAdmin } from './helpers.ts'

t.test(
  'ledger dead letters: a batch whose payment cannot be stored is set aside with its reason, and the batches behind it are recorded',
  async (t) => {
    // a failed batch is tried again LEDGER_RETRY_MS later (2 s by default): sooner here
    const admin = await startAdmin(t, { SETTLEMENT_ENABLED: 'false', LEDGER_RETRY_MS: '200' })
    const { stream, charged, deadLetters, ledgerConsumer } = admin.payments
    const payer = privateKeyToAccount(generatePrivateKey())
    // no chain here: the USDC address only goes into what the payer signs
    const usdc = freshAddress()
    // a uint256 the message schema accepts, but over Postgres' bigint: the ledger cannot store it
    const unstorable = await signCharge(usdc, payer, { value: 10n ** 70n })
    const good = await signCharge(usdc, payer)
    await admin.publish([unstorable])
    await admin.publish([good])

    const recorded = await admin.paymentsWhen('the batch behind it recorded', (payments) => payments.length > 0)
    t.match(
      recorded,
      [{ payer: payer.address, amount: '10000', requestId: good.requestId }],
      'the good batch is recorded, the bad one is not',
    )

    const dead = await eventually(
      'the unstorable batch in the dead letters',
      () => admin.jsm.streams.getMessage(stream, { last_by_subj: deadLetters }).catch(() => undefined),
      // two naks of LEDGER_RETRY_MS: ~0.4 s. Far below the 30 s ack wait, which a redelivery dropped by the
      // client used to wait out about one run in ten (the kit's durable consumer read with fetch:
      // packages/service-kit/test/durableConsumer.test.ts shows how)
      12_000,
    )
    t.same(charged.message.decode(dead.data), { charges: [unstorable] }, 'the dead letter is the batch as published')
    t.match(dead.header.get('ats-dead-letter-reason'), /^failed 3 times: .*out of range for type bigint/, 'after 3 tries, saying why')
    t.equal(dead.header.get('ats-dead-letter-subject'), charged.subject)

    const consumer = await admin.jsm.consumers.info(stream, ledgerConsumer)
    t.match(consumer, { num_pending: 0, num_ack_pending: 0 }, 'nothing is left waiting on the ledger consumer')
    t.equal((await admin.revenue()).requestCount, 1)
  },
)
