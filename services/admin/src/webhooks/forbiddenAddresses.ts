// Which IP addresses a webhook delivery may not reach, and why: node:net BlockLists checked in order.
import { BlockList, isIP } from 'node:net'

// The first match names the reason, so the narrower ranges come first. Documentation ranges
// (192.0.2.0/24, 198.51.100.0/24, 203.0.113.0/24, 2001:db8::/32) are not routed anyway and stay allowed.
const v4Ranges: [string, string][] = [
  ['0.0.0.0/8', 'unspecified (0.0.0.0/8)'],
  ['127.0.0.0/8', 'loopback'],
  ['10.0.0.0/8', 'private (10.0.0.0/8)'],
  ['100.100.100.200/32', 'cloud metadata (100.100.100.200)'],
  ['100.64.0.0/10', 'carrier-grade NAT (100.64.0.0/10)'],
  ['169.254.169.254/32', 'link-local / cloud metadata'],
  ['169.254.0.0/16', 'link-local (169.254.0.0/16)'],
  ['172.16.0.0/12', 'private (172.16.0.0/12)'],
  ['192.0.0.0/24', 'IETF protocol assignment (192.0.0.0/24)'],
  ['192.168.0.0/16', 'private (192.168.0.0/16)'],
  ['198.18.0.0/15', 'benchmarking (198.18.0.0/15)'],
  ['224.0.0.0/4', 'multicast'],
  ['255.255.255.255/32', 'broadcast'],
  ['240.0.0.0/4', 'reserved (240.0.0.0/4)'],
]

/** 1.2.3.4 as the two IPv6 groups 102:304 */
const groups = (v4: string) => {
  const [a, b, c, d] = v4.split('.').map(Number)
  return `${((a! << 8) | b!).toString(16)}:${((c! << 8) | d!).toString(16)}`
}

/**
 * IPv6 ranges that reach an IPv4 host through a gateway: the IPv4 ranges above, placed where the
 * range carries the IPv4 address (its bits after the prefix). An IPv4-mapped address (::ffff:a.b.c.d)
 * is the IPv4 host itself: an IPv4 BlockList rule matches it without help.
 */
const embeddings: [via: string, prefixBits: number, place: (v4: string) => string][] = [
  ['IPv4-translated', 96, (v4) => `::ffff:0:${v4}`],
  ['NAT64', 96, (v4) => `64:ff9b::${v4}`],
  ['6to4', 16, (v4) => `2002:${groups(v4)}::`],
]

const v6Ranges: [string, string][] = [
  ['::/128', 'unspecified (::)'],
  ['::1/128', 'loopback'],
  ['::/96', 'IPv4-compatible (::/96, deprecated)'],
  ['64:ff9b:1::/48', 'NAT64 local-use (64:ff9b:1::/48)'],
  ['100::/64', 'discard-only (100::/64)'],
  ['2001::/32', 'Teredo tunnel (2001::/32)'],
  ['fd00:ec2::254/128', 'unique-local / cloud metadata'],
  ['fc00::/7', 'unique-local (fc00::/7)'],
  ['fe80::/10', 'link-local (fe80::/10)'],
  ['fec0::/10', 'site-local (fec0::/10, deprecated)'],
  ['ff00::/8', 'multicast'],
]

/** One range as a BlockList, with why it is refused. */
function rule(cidr: string, reason: string): { reason: string; list: BlockList } {
  const [address, bits] = cidr.split('/') as [string, string]
  const list = new BlockList()
  list.addSubnet(address, Number(bits), isIP(address) === 4 ? 'ipv4' : 'ipv6')
  return { reason, list }
}

const rules = [
  ...v4Ranges.map(([cidr, reason]) => rule(cidr, reason)),
  ...embeddings.flatMap(([via, prefixBits, place]) =>
    v4Ranges.map(([cidr, reason]) => {
      const [address, bits] = cidr.split('/') as [string, string]
      return rule(`${place(address)}/${prefixBits + Number(bits)}`, `${reason} via ${via}`)
    }),
  ),
  ...v6Ranges.map(([cidr, reason]) => rule(cidr, reason)),
]

/** Why an address may not be sent to (undefined: it may): "loopback", "private (10.0.0.0/8)", "link-local / cloud metadata"… */
export function forbiddenAddress(ip: string): string | undefined {
  // brackets and a zone (%eth0) are not part of the address
  const address = ip.replace(/^\[|\]$|%.*$/g, '')
  const family = isIP(address)
  if (!family) return 'not an IP address'
  return rules.find(({ list }) => list.check(address, family === 4 ? 'ipv4' : 'ipv6'))?.reason
}
