import { Type, type TObjectOptions, type TProperties, type TStringOptions } from 'typebox'

/**
 * Schemas of values every service passes around; each pattern is written here and nowhere
 * else. Each is a function so a field can say what it is (`Address({ description: 'the payer' })`).
 */
export const addressPattern = '^0x[0-9a-fA-F]{40}$'
export const bytes32Pattern = '^0x[0-9a-fA-F]{64}$'
export const integerStringPattern = '^[0-9]{1,78}$'

const string =
  (pattern: string, description: string) =>
  (options: TStringOptions = {}) =>
    Type.String({ pattern, description, ...options })

export const Address = string(addressPattern, 'a 0x-hex address')
export const Bytes32 = string(bytes32Pattern, '32 bytes of 0x-hex')
/** an ECDSA signature r ‖ s ‖ v */
export const Signature65 = string('^0x[0-9a-fA-F]{130}$', '65 bytes of 0x-hex')
/** an unsigned integer as a decimal string (a uint256 fits in 78 digits): token amounts in base units */
export const IntegerString = string(integerStringPattern, 'an unsigned integer as a decimal string')
export const Sha256Hex = string('^[0-9a-f]{64}$', 'a SHA-256 as lower-case hex')
export const EpochMs = (description = 'ms since the Unix epoch') => Type.Integer({ description })

/** One of `values`, typed as their union: a plain `enum` in the JSON schema (TypeBox's union of literals would be an anyOf). */
export const StringEnum = <const T extends readonly string[]>(values: T, options: { default?: T[number]; description?: string } = {}) =>
  Type.Unsafe<T[number]>({ type: 'string', enum: [...values], ...options })

/**
 * The schema keyword saying which control characters a string may hold. The kit's validator puts
 * `'refused'` (no C0 control character, no DEL) on every string of a request that does not say;
 * `FreeText()` says `'whitespace'`: tab, line feed and carriage return are allowed, NUL never.
 */
export const controlCharactersKeyword = 'controlCharacters'
/** Text a person writes (a prompt): it may hold tabs and line breaks; other control characters are refused. */
export const FreeText = (options: TStringOptions = {}) => Type.String({ ...options, [controlCharactersKeyword]: 'whitespace' })

/** An object that refuses fields it does not declare (request bodies and queries): a misspelt field is a 400, not ignored. */
export const StrictObject = <T extends TProperties>(properties: T, options: TObjectOptions = {}) =>
  Type.Object(properties, { additionalProperties: false, ...options })
