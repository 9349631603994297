// The chain's rules for what clients send: amounts in base units, and who a server-wallet swap may pay.
import t from 'tap'
import { checkRecipient, InvalidAmount, parseAmount, RecipientNotAllowed } from '../src/index.ts'

t.test('an amount is a positive integer in base units that fits a uint256', async (t) => {
  t.equal(parseAmount('amountIn', '1000000'), 1_000_000n)
  t.equal(parseAmount('amountIn', (2n ** 256n - 1n).toString()), 2n ** 256n - 1n)
  t.throws(
    () => parseAmount('amountIn', '1.5'),
    new InvalidAmount('amountIn must be a positive integer in base units (e.g. "1000000" for 1 USDC), got "1.5"'),
  )
  t.throws(() => parseAmount('amountIn', '0'), {
    code: 'ATS_ERR_INVALID_AMOUNT',
    statusCode: 400,
    message: 'amountIn must be greater than 0',
  })
  t.throws(() => parseAmount('amountIn', (2n ** 256n).toString()), { statusCode: 400, message: 'amountIn does not fit in a uint256' })
})

t.test('a server-wallet swap pays out only to its owner or to a recipient an admin allowed', async (t) => {
  const own = '0x1111111111111111111111111111111111111111'
  const allowed = '0x2222222222222222222222222222222222222222'
  const stranger = '0x3333333333333333333333333333333333333333'
  t.doesNotThrow(() => checkRecipient({ owner: 'key k', own, allowed: [allowed] }, own.toUpperCase().replace('0X', '0x')))
  t.doesNotThrow(() => checkRecipient({ owner: 'key k', own, allowed: [allowed] }, allowed))
  t.throws(() => checkRecipient({ owner: 'key k', own: null }, stranger), {
    code: 'ATS_ERR_RECIPIENT_NOT_ALLOWED',
    statusCode: 403,
    message:
      /^recipient 0x3333333333333333333333333333333333333333 is not allowed for key k: the server wallet pays out only to its bound wallet \(it has none\)/,
  })
  t.throws(() => checkRecipient({ owner: 'key k', own, allowed: [allowed] }, stranger), RecipientNotAllowed)
})
