/**
 * The fleet's images are tagged with the fleet's version (the root package.json's): where a tag
 * is set, docker-compose.yml's `image: ats-<name>:<tag>` and k8s/base/kustomization.yaml's
 * `newTag` of each ats- image; overlays give a registry (newName) and keep base's tag. The
 * release (release.ts) sets them; `pnpm validate:deploy` checks them.
 */
import { readdirSync, readFileSync, writeFileSync } from 'node:fs'
import { join } from 'node:path'
import { parse } from 'yaml'

const composeFile = 'docker-compose.yml'
const baseKustomization = 'k8s/base/kustomization.yaml'
const composeImage = /^([ \t]*image:[ \t]*ats-[\w-]+):(\S+)[ \t]*$/gm

interface KustomizeImage {
  name: string
  newName?: string
  newTag?: string
}

/** Every kustomization.yaml under k8s/, relative to the root. */
function kustomizations(root: string): string[] {
  return (readdirSync(join(root, 'k8s'), { recursive: true, encoding: 'utf8' }) as string[])
    .filter((path) => path.endsWith('kustomization.yaml'))
    .map((path) => `k8s/${path}`)
    .sort()
}

/** Each place a fleet image is tagged otherwise than with `version`. */
export function imageTagProblems(root: string, version: string): string[] {
  const problems: string[] = []
  for (const [, image, tag] of readFileSync(join(root, composeFile), 'utf8').matchAll(composeImage)) {
    if (tag !== version)
      problems.push(
        `${composeFile}: ${image!.replace(/^\s*image:\s*/, '')} is tagged ${tag}, not the fleet's version ${version} (package.json)`,
      )
  }
  for (const file of kustomizations(root)) {
    const images = ((parse(readFileSync(join(root, file), 'utf8')) as { images?: KustomizeImage[] } | null)?.images ?? []).filter((i) =>
      i.name.startsWith('ats-'),
    )
    for (const image of images) {
      if (file === baseKustomization && image.newTag !== version) {
        problems.push(`${file}: ${image.name} is tagged ${image.newTag ?? '(none)'}, not the fleet's version ${version} (package.json)`)
      }
      if (file !== baseKustomization && image.newTag !== undefined) {
        problems.push(`${file}: ${image.name} sets newTag ${image.newTag}; the tag is the fleet's version, set in ${baseKustomization}`)
      }
    }
  }
  return problems
}

/** Tags the fleet's images with `version` in docker-compose.yml and k8s/base/kustomization.yaml; returns the files written. */
export function setImageTags(root: string, version: string): string[] {
  const compose = readFileSync(join(root, composeFile), 'utf8')
  writeFileSync(join(root, composeFile), compose.replace(composeImage, `$1:${version}`))
  const base = readFileSync(join(root, baseKustomization), 'utf8')
  // an ats- image's entry: its name line, then its newTag line
  writeFileSync(join(root, baseKustomization), base.replace(/(-\s+name:\s*ats-[\w-]+\s*\n\s+newTag:\s*)"[^"]*"/g, `$1"${version}"`))
  return [composeFile, baseKustomization]
}
