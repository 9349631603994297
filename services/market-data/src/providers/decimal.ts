// Decimal numbers as public APIs send them (strings, sometimes in exponent form), as our DecimalString.
const plainDecimal = /^-?[0-9]+(\.[0-9]+)?$/
const anyDecimal = /^([+-]?)([0-9]*)(?:\.([0-9]*))?(?:[eE]([+-]?[0-9]{1,2}))?$/

/**
 * An upstream's decimal as our DecimalString: kept as sent when plain ("3012.57"), else
 * re-printed from its digits ("1.5e-7" → "0.00000015", ".5" → "0.5") so no precision is lost
 * through a float; null, "NaN", other non-numbers and exponents past ±99 (no price or volume) are "0".
 */
export function decimalString(value: unknown): string {
  const text = typeof value === 'number' ? String(value) : typeof value === 'string' ? value.trim() : ''
  if (plainDecimal.test(text)) return text
  const [, sign, whole = '', fraction = '', exponent = '0'] = anyDecimal.exec(text) ?? []
  if (whole === '' && fraction === '') return '0'
  const point = whole.length + Number(exponent)
  const digits = `${'0'.repeat(Math.max(0, -point))}${whole}${fraction}${'0'.repeat(Math.max(0, point - whole.length - fraction.length))}`
  const at = Math.max(0, point)
  const integer = digits.slice(0, at).replace(/^0+(?=[0-9])/, '') || '0'
  const decimals = digits.slice(at).replace(/0+$/, '')
  const printed = decimals ? `${integer}.${decimals}` : integer
  return sign === '-' && /[1-9]/.test(printed) ? `-${printed}` : printed
}
