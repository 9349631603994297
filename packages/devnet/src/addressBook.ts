import { mkdirSync, readFileSync, renameSync, rmSync, writeFileSync } from 'node:fs'
import { dirname } from 'node:path'
import { defaultDevnetAddressBookPath, type AddressBook } from '@ats/chain'

/** Writes the book as JSON atomically (write, then rename), creating the folder. */
export function writeAddressBook(book: AddressBook, path: string = defaultDevnetAddressBookPath): string {
  mkdirSync(dirname(path), { recursive: true })
  const temporary = `${path}.${process.pid}.tmp`
  writeFileSync(temporary, `${JSON.stringify(book, null, 2)}\n`)
  renameSync(temporary, path)
  return path
}

/** Removes the book at `path` if it is still the one given (another devnet may have replaced it). */
export function removeAddressBook(book: AddressBook, path: string = defaultDevnetAddressBookPath): void {
  try {
    if (readFileSync(path, 'utf8') === `${JSON.stringify(book, null, 2)}\n`) rmSync(path, { force: true })
  } catch {
    // already gone
  }
}
