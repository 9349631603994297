/**
 * The report of every offline check of the deployment files, without a cluster or a Docker
 * engine; each concern lives in its own file:
 *
 *  - the Dockerfile (one, at the root; a target per deployable): linted target by target (src/dockerfile.ts);
 *  - docker-compose.yml (src/compose.ts): `docker-compose config -q` with .env.example, and the fleet's
 *    rules: every deployable built from its Dockerfile target, a healthcheck on every service,
 *    depends_on waiting for health, only the gateway published;
 *  - k8s (src/k8s.ts): base and every overlay rendered by kustomize (kubectl kustomize), every document
 *    validated against its Kubernetes schema (kubernetes-models), and the fleet's rules:
 *    per component a Deployment with startup/readiness (/ready)/liveness (/health) probes on
 *    the ports the process really serves them on, resources, a preStop drain shorter than
 *    the grace period, a non-root read-only securityContext, an HPA and a PDB; every setting
 *    the component reads set from a ConfigMap or (secret ones only) a Secret; NetworkPolicies
 *    that let only the gateway reach the services and only the services the datastores;
 *    KEDA ScaledObjects checked by src/keda.ts (no schema for them here);
 *  - dependencies (src/dependencies.ts): every package a deployable's src/ imports at run time is
 *    among the production dependencies its image holds;
 *  - least privilege (src/access.ts): each component's own NATS user and Postgres role in
 *    compose and k8s, and the generated authorization files up to date;
 *  - image tags (src/release/imageTags.ts): every fleet image tagged with the fleet's version.
 *
 * `root` is where the files are read from (the repository, or a copy in the tests); the
 * components and the settings they read come from the code (src/components.ts, @ats/fleet).
 */
import { checkAccessFiles } from './access.ts'
import { deployables } from './components.ts'
import { checkCompose } from './compose.ts'
import { checkDependencies } from './dependencies.ts'
import { checkDockerfiles } from './dockerfile.ts'
import { checkKubernetes } from './k8s.ts'
import { imageTagProblems } from './release/imageTags.ts'
import { fleetVersion } from './release/release.ts'

export interface Report {
  problems: string[]
  notes: string[]
}

/** What to leave out, for a check that needs only part of it (the tests' cases that break one file) */
export interface CheckOptions {
  /** the k8s/ directories rendered and checked (default: k8s/base and every overlay) */
  k8s?: string[]
  /** false: not `docker-compose config -q`, only the fleet's rules for the compose file */
  dockerCompose?: boolean
}

export async function checkDeployment(root: string, repoRoot = root, options: CheckOptions = {}): Promise<Report> {
  const problems: string[] = []
  const notes: string[] = []
  const { fleet, devnet } = await deployables(repoRoot)
  const imageHealth = checkDockerfiles(root, [...fleet, devnet], problems, notes)
  // what each image's pnpm deploy --prod holds covers what its code imports (src/dependencies.ts)
  checkDependencies(repoRoot, [...fleet, devnet], problems, notes)
  problems.push(...imageTagProblems(root, fleetVersion(repoRoot)))
  // docker-compose and the kustomize renders run side by side; each part's problems are listed in this order
  const parts = await Promise.all(
    [
      (report: Report) => checkCompose(root, [...fleet, devnet], imageHealth, report.problems, report.notes, options.dockerCompose),
      // each component's own NATS user and Postgres role (src/access.ts)
      (report: Report) => checkAccessFiles(root, report.problems),
      (report: Report) => checkKubernetes(root, fleet, report.problems, report.notes, options.k8s),
    ].map(async (check) => {
      const report: Report = { problems: [], notes: [] }
      await check(report)
      return report
    }),
  )
  for (const part of parts) {
    problems.push(...part.problems)
    notes.push(...part.notes)
  }
  return { problems, notes }
}
