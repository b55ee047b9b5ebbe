/**
 * The operator's side of signed policies (`powerstore-server policy …`): read the policy in
 * force on every server (`GET /policy`), make a change to the latest one, sign it with the
 * admin identity, push it to every server (`PUT /policy`), and write it into the local
 * cluster.json. The servers' side, and the document format, are in `policy.ts`.
 *
 * What servers report is their own word, but a signed document in a report is checked here
 * against the admin key before anything builds on it: a lying server can hide the latest
 * policy, never forge one. With answers from `n − t` servers, at least one correct server
 * that applied any policy `n − t` servers applied is among them, so a change is made to
 * the latest such policy, not to an older one.
 */
import { randomBytes } from 'node:crypto';
import { renameSync, rmSync } from 'node:fs';
import { basename, dirname, join } from 'node:path';
import {
  decodePublicKey,
  encodePublicKey,
  identityFromJson,
  isOwnerId,
  ownerIdOf,
  parsePolicy,
  quorum,
  type Cluster,
  type CryptoProvider,
  type PolicyJson,
  type Signer,
} from '@powerstore/protocol';
import { loadClusterFile, readJson, secretFileWarning, writeJson } from './config.js';
import { ConfigError, ServerError } from './errors.js';
import { policyDigest, signPolicy, verifySignedPolicy, withoutVersion, type PolicyReport, type SignedPolicy } from './policy.js';
import { humanBytes } from './status.js';

/** What one server said to `GET /policy`. */
export type PolicyView = { readonly id: number; readonly url: string } & (
  | {
      readonly version: number;
      readonly source: PolicyReport['source'];
      readonly digest: string;
      readonly policy: PolicyJson;
      /** `verified`: its signed document is the admin's; `unsigned`: from its cluster.json; `invalid`: a document that does not verify (or does not match what it claims). */
      readonly signature: 'verified' | 'unsigned' | 'invalid';
      /** The document, when verified. */
      readonly signed?: SignedPolicy;
    }
  | { readonly error: string }
);

/** One server's answer to a pushed document. */
export type PushResult = { readonly id: number; readonly url: string } & (
  | { readonly result: 'applied' | 'unchanged'; readonly previous: number }
  | { readonly result: 'refused'; readonly status: number; readonly code: string; readonly message: string; readonly current?: number }
  | { readonly result: 'unreachable'; readonly error: string }
);

function httpBase(url: string): string {
  return url.replace(/^ws/, 'http');
}

function networkError(err: unknown): string {
  const cause = (err as { cause?: { code?: string; message?: string } }).cause;
  return cause?.code ?? cause?.message ?? (err as Error).message;
}

/** Asks every server of `cluster` for `GET /policy` (in parallel), checking the signed documents they show. */
export async function fetchPolicies(crypto: CryptoProvider, cluster: Cluster, timeoutMs = 5000): Promise<PolicyView[]> {
  return Promise.all(
    cluster.servers.map(async (s): Promise<PolicyView> => {
      let r: PolicyReport;
      try {
        const res = await fetch(`${httpBase(s.url)}/policy`, { signal: AbortSignal.timeout(timeoutMs) });
        if (!res.ok) return { id: s.id, url: s.url, error: `HTTP ${res.status}` };
        r = (await res.json()) as PolicyReport;
      } catch (err) {
        return { id: s.id, url: s.url, error: networkError(err) };
      }
      if (typeof r !== 'object' || r === null || typeof r.version !== 'number' || typeof r.digest !== 'string')
        return { id: s.id, url: s.url, error: 'not a policy report' };
      let signature: 'verified' | 'unsigned' | 'invalid' = 'unsigned';
      let signed: SignedPolicy | undefined;
      if (r.signed !== undefined) {
        try {
          const v = await verifySignedPolicy(crypto, cluster, r.signed);
          const ok = v.doc.version === r.version && policyDigest(v.json) === r.digest;
          signature = ok ? 'verified' : 'invalid';
          if (ok) signed = v.doc;
        } catch {
          signature = 'invalid';
        }
      }
      return {
        id: s.id,
        url: s.url,
        version: r.version,
        source: r.source,
        digest: r.digest,
        policy: r.policy,
        signature,
        ...(signed ? { signed } : {}),
      };
    }),
  );
}

/** Sends `doc` to every server of `cluster` (`PUT /policy`, in parallel). */
export async function pushPolicy(cluster: Cluster, doc: SignedPolicy, timeoutMs = 10_000): Promise<PushResult[]> {
  const body = JSON.stringify(doc);
  return Promise.all(
    cluster.servers.map(async (s): Promise<PushResult> => {
      try {
        const res = await fetch(`${httpBase(s.url)}/policy`, {
          method: 'PUT',
          headers: { 'content-type': 'application/json' },
          body,
          signal: AbortSignal.timeout(timeoutMs),
        });
        const answer = (await res.json().catch(() => ({}))) as {
          status?: string;
          previous?: number;
          error?: string;
          message?: string;
          current?: number;
        };
        if (res.ok && (answer.status === 'applied' || answer.status === 'unchanged'))
          return { id: s.id, url: s.url, result: answer.status, previous: answer.previous ?? 0 };
        return {
          id: s.id,
          url: s.url,
          result: 'refused',
          status: res.status,
          code: answer.error ?? `HTTP_${res.status}`,
          message: answer.message ?? res.statusText,
          ...(typeof answer.current === 'number' ? { current: answer.current } : {}),
        };
      } catch (err) {
        return { id: s.id, url: s.url, result: 'unreachable', error: networkError(err) };
      }
    }),
  );
}

/**
 * The admin identity from an identity file (`init`'s `admin.json`), checked to be this
 * cluster's admin. Errors name the file, never quote it.
 */
export async function loadAdmin(crypto: CryptoProvider, file: string, cluster: Cluster): Promise<{ signer: Signer; warning?: string }> {
  let seed: Uint8Array;
  let publicKey: Uint8Array;
  try {
    ({ seed, publicKey } = identityFromJson(readJson(file)));
  } catch (err) {
    if (err instanceof ConfigError) throw err;
    throw new ConfigError('CONFIG_INVALID', file, undefined, (err as Error).message);
  }
  const signer = await crypto.signerFromSeed(seed);
  if (encodePublicKey(signer.publicKey) !== encodePublicKey(publicKey))
    throw new ConfigError('CONFIG_INVALID', file, 'secretKey', 'is not the secret key of the file\'s "publicKey"');
  if (encodePublicKey(publicKey) !== cluster.file.admin)
    throw new ConfigError(
      'CONFIG_INVALID',
      file,
      undefined,
      `is not this cluster's admin identity (cluster.json's "admin" is ${cluster.file.admin}): only the admin may change the policy`,
    );
  const warning = secretFileWarning(file)?.message;
  return { signer, ...(warning ? { warning } : {}) };
}

/** An owner id, from an owner id or a public key. */
export function ownerArgument(crypto: CryptoProvider, value: string): string {
  if (isOwnerId(value)) return value;
  try {
    return ownerIdOf(crypto, decodePublicKey(value));
  } catch {
    throw new ServerError('CONFIG_INVALID', `not an owner id (32 base32 characters) or a public key (43 base64url characters): ${value}`);
  }
}

/**
 * A size: bytes, or with a unit (`KB`, `MB`, `GB`, `TB` in powers of 1000; `KiB`, `MiB`,
 * `GiB`, `TiB` in powers of 1024), or `unlimited` (`null`).
 */
export function parseSize(value: string): number | null {
  if (value === 'unlimited') return null;
  const m = /^(\d+(?:\.\d+)?)\s*([KMGT]i?B|B)?$/i.exec(value.trim());
  const units: Record<string, number> = {
    b: 1,
    kb: 1e3,
    mb: 1e6,
    gb: 1e9,
    tb: 1e12,
    kib: 2 ** 10,
    mib: 2 ** 20,
    gib: 2 ** 30,
    tib: 2 ** 40,
  };
  const n = m ? Math.round(Number(m[1]) * units[(m[2] ?? 'b').toLowerCase()]!) : NaN;
  if (!Number.isSafeInteger(n) || n < 0)
    throw new ServerError('CONFIG_INVALID', `not a size (e.g. 1073741824, 500MB, 1GiB, unlimited): ${value}`);
  return n;
}

/** A count of keys, or `unlimited` (`null`). */
export function parseCount(value: string): number | null {
  if (value === 'unlimited') return null;
  const n = Number(value);
  if (!/^\d+$/.test(value) || !Number.isSafeInteger(n))
    throw new ServerError('CONFIG_INVALID', `not a number of keys (or unlimited): ${value}`);
  return n;
}

/** A change to a policy: the new policy, and a line saying what changed (`undefined`: nothing to change). */
export type PolicyEdit = (policy: PolicyJson) => { readonly policy: PolicyJson; readonly change: string } | { readonly none: string };

/** One quota of a policy. */
type Quota = NonNullable<NonNullable<PolicyJson['quotas']>['default']>;

const sameQuota = (a: Quota | undefined, b: Quota | undefined) => a?.bytes === b?.bytes && a?.keys === b?.keys;

function describeQuota(q: Quota | undefined): string {
  const parts = [q?.bytes !== undefined ? humanBytes(q.bytes) : undefined, q?.keys !== undefined ? `${q.keys} keys` : undefined];
  return parts.filter(Boolean).join(', ') || 'unlimited';
}

/**
 * `set-quota`: fields given replace those of the target's quota, the others stay. An owner's
 * quota is an override merged over the default field by field, so "unlimited" for an owner
 * whose default is limited is written as the largest integer (JSON has no way to say
 * "this field unset over the default").
 */
export function setQuotaEdit(target: string, fields: { bytes?: number | null; keys?: number | null }, reset: boolean): PolicyEdit {
  return (p) => {
    const quotas = { default: p.quotas?.default, owners: { ...p.quotas?.owners } };
    const isDefault = target === 'default';
    const before = isDefault ? quotas.default : quotas.owners[target];
    let next: Quota | undefined;
    if (reset) {
      if (isDefault) throw new ServerError('CONFIG_INVALID', '--reset applies to an owner (the default has no default to fall back to)');
      next = undefined;
    } else {
      const unlimited = isDefault ? undefined : Number.MAX_SAFE_INTEGER;
      const field = (v: number | null | undefined, old: number | undefined) => (v === undefined ? old : v === null ? unlimited : v);
      const bytes = field(fields.bytes, before?.bytes);
      const keys = field(fields.keys, before?.keys);
      next = { ...(bytes !== undefined ? { bytes } : {}), ...(keys !== undefined ? { keys } : {}) };
    }
    if (sameQuota(before, next) && (before === undefined) === (next === undefined))
      return { none: `the ${isDefault ? 'default quota' : `quota of ${target}`} is already ${describeQuota(before)}` };
    if (isDefault) quotas.default = next;
    else if (next === undefined) delete quotas.owners[target];
    else quotas.owners[target] = next;
    const policy = { ...p, quotas: { ...(quotas.default ? { default: quotas.default } : {}), owners: quotas.owners } };
    const what = isDefault ? 'default quota' : `quota of ${target}`;
    return { policy, change: reset ? `${what}: back to the default` : `${what}: ${describeQuota(next)} (was ${describeQuota(before)})` };
  };
}

/** `revoke` / `unrevoke` of a public key or (`grant`) a grant id. */
export function revocationEdit(value: string, options: { grant: boolean; revoke: boolean; reason?: string }): PolicyEdit {
  const list = options.grant ? 'grants' : 'keys';
  if (options.grant) {
    if (!/^[a-z2-7]{32}$/.test(value)) throw new ServerError('CONFIG_INVALID', `not a grant id (32 base32 characters): ${value}`);
  } else {
    try {
      value = encodePublicKey(decodePublicKey(value));
    } catch {
      throw new ServerError(
        'CONFIG_INVALID',
        /^[a-z2-7]{32}$/.test(value)
          ? `${value} is an owner id or a grant id, not a public key: revoke a grant with --grant <id>; to stop an owner writing, ` +
              '`policy remove <owner>` (writers: owners), or revoke its public key (43 base64url characters, `powerstore id` shows it)'
          : `not a public key (43 base64url characters): ${value}`,
      );
    }
  }
  const what = `${options.grant ? 'grant' : 'key'} ${value}`;
  return (p) => {
    const current = p.revoked?.[list] ?? [];
    const has = current.includes(value);
    if (has === options.revoke) return { none: `${what} is ${options.revoke ? 'already' : 'not'} revoked` };
    const next = options.revoke ? [...current, value] : current.filter((x) => x !== value);
    const revoked = { keys: p.revoked?.keys ?? [], grants: p.revoked?.grants ?? [], [list]: next };
    return {
      policy: { ...p, revoked },
      change: `${options.revoke ? 'revoke' : 'unrevoke'} ${what}${options.reason ? `: ${options.reason}` : ''}`,
    };
  };
}

/** `admit` / `remove` of an owner in `policy.owners`. */
export function ownerEdit(owner: string, admit: boolean, reason?: string): PolicyEdit {
  return (p) => {
    const owners = p.owners ?? [];
    if (owners.includes(owner) === admit) return { none: `owner ${owner} is ${admit ? 'already' : 'not'} admitted` };
    const next = admit ? [...owners, owner] : owners.filter((o) => o !== owner);
    const note = p.writers === 'open' ? ' (writers: open admits every owner; the list matters once writers is owners)' : '';
    return { policy: { ...p, owners: next }, change: `${admit ? 'admit' : 'remove'} owner ${owner}${reason ? `: ${reason}` : ''}${note}` };
  };
}

/** `writers open|owners`. */
export function writersEdit(writers: 'open' | 'owners'): PolicyEdit {
  return (p) =>
    p.writers === writers ? { none: `writers is already ${writers}` } : { policy: { ...p, writers }, change: `writers: ${writers}` };
}

/** The latest policy known: the local cluster file's, or a verified signed document a server holds. */
export interface PolicyBase {
  readonly version: number;
  readonly policy: PolicyJson;
  /** The signed document of `version`, when the base is one a server holds. */
  readonly signed?: SignedPolicy;
}

/**
 * Picks the base of a change: the verified signed document of the highest version any
 * server shows, or the local cluster file's policy when its version is higher. At equal
 * versions the signed document wins, since it is what servers enforce. Versions a server
 * claims without the admin's signature are not believed: one lying server could otherwise
 * make the admin's next document carry the largest version there is, and no change could
 * follow it. (A correct server whose own cluster.json is newer refuses the push with
 * `STALE_VERSION` and its version; `--policy-version` then goes past it.)
 */
export function policyBase(cluster: Cluster, views: readonly PolicyView[]): PolicyBase {
  let base: PolicyBase = { version: cluster.file.policy.version ?? 0, policy: withoutVersion(cluster.file.policy) };
  for (const v of views) {
    if ('signed' in v && v.signed && (v.signed.version > base.version || (v.signed.version === base.version && !base.signed)))
      base = { version: v.signed.version, policy: v.signed.policy, signed: v.signed };
  }
  return base;
}

/** Writes `policy` as version `version` into the cluster file, atomically (the rest as it was). */
export function writeClusterPolicy(file: string, policy: PolicyJson, version: number): void {
  const current = loadClusterFile(file);
  const next = { ...current.file, policy: { version, ...withoutVersion(parsePolicy(policy).json) } };
  const tmp = join(dirname(file), `.${basename(file)}.${randomBytes(6).toString('hex')}.tmp`);
  try {
    writeJson(tmp, next, false);
    renameSync(tmp, file);
  } finally {
    rmSync(tmp, { force: true });
  }
}

/** How many servers applied (or already held) a push, against the quorum and `n`: the exit code 0, 1 or 2. */
export function pushExitCode(cluster: Cluster, results: readonly PushResult[]): 0 | 1 | 2 {
  const ok = results.filter((r) => r.result === 'applied' || r.result === 'unchanged').length;
  return ok === cluster.config.n ? 0 : ok >= quorum(cluster.config) ? 1 : 2;
}

/** The servers that agree on the highest verified-or-reported policy, and the exit code 0 (all n), 1 (n − t) or 2. */
export function agreement(
  cluster: Cluster,
  views: readonly PolicyView[],
): { version: number; digest: string; servers: number[]; code: 0 | 1 | 2 } {
  const up = views.filter((v): v is Extract<PolicyView, { version: number }> => 'version' in v && v.signature !== 'invalid');
  const groups = new Map<string, { version: number; digest: string; servers: number[] }>();
  for (const v of up) {
    const k = `${v.version}:${v.digest}`;
    const g = groups.get(k) ?? { version: v.version, digest: v.digest, servers: [] };
    g.servers.push(v.id);
    groups.set(k, g);
  }
  const best = [...groups.values()].sort((a, b) => b.servers.length - a.servers.length || b.version - a.version)[0] ?? {
    version: 0,
    digest: '',
    servers: [],
  };
  const code = best.servers.length === cluster.config.n ? 0 : best.servers.length >= quorum(cluster.config) ? 1 : 2;
  return { ...best, code };
}

/** One line about a policy, for people. */
export function summarizePolicy(p: PolicyJson): string {
  const overrides = Object.keys(p.quotas?.owners ?? {}).length;
  return (
    `writers ${p.writers}; ${p.owners?.length ?? 0} owner(s) admitted; revoked: ${p.revoked?.keys?.length ?? 0} key(s), ${p.revoked?.grants?.length ?? 0} grant(s); ` +
    `default quota ${describeQuota(p.quotas?.default)}${overrides ? `; ${overrides} owner quota override(s)` : ''}`
  );
}

/** What the changing `policy` commands take. */
export interface PolicyCommandOptions {
  /** The cluster file: where the servers are, and where the new policy is written. */
  readonly cluster: string;
  /** The admin identity file; default `admin.json` beside the cluster file. */
  readonly identity?: string;
  readonly json: boolean;
  /** Go on with fewer than `n − t` servers answering `GET /policy`. */
  readonly force: boolean;
  /** The new version, instead of one above every version seen. */
  readonly version?: number;
}

const out = (text: string) => process.stdout.write(text);

/** `policy show`: the policy each server enforces, and whether they agree. Exit 0 when all n agree, 1 when n − t do, 2 otherwise. */
export async function runPolicyShow(o: { readonly cluster: string; readonly json: boolean }, crypto: CryptoProvider): Promise<void> {
  const cluster = loadClusterFile(o.cluster);
  const views = await fetchPolicies(crypto, cluster);
  const agreed = agreement(cluster, views);
  const local = { version: cluster.file.policy.version ?? 0, digest: policyDigest(cluster.file.policy) };
  process.exitCode = agreed.code;
  if (o.json) {
    out(
      `${JSON.stringify(
        {
          cluster: cluster.file.id,
          agree: agreed.code === 0,
          version: agreed.version,
          digest: agreed.digest,
          agreeing: agreed.servers,
          quorum: quorum(cluster.config),
          n: cluster.config.n,
          local,
          servers: views.map((v) => ('error' in v ? v : { ...v, signed: undefined })),
          policy: views.find((v): v is Extract<PolicyView, { policy: PolicyJson }> => 'digest' in v && v.digest === agreed.digest)?.policy,
        },
        null,
        2,
      )}\n`,
    );
    return;
  }
  const lines = ['server  version  source        signature  digest'];
  for (const v of views) {
    if ('error' in v) lines.push(`s${v.id}      DOWN (${v.error})`);
    else
      lines.push(
        `s${v.id}      ${String(v.version).padEnd(7)}  ${v.source.padEnd(12)}  ${v.signature.padEnd(9)}  ${v.digest.slice(0, 16)}`,
      );
  }
  lines.push(
    `local   ${String(local.version).padEnd(7)}  ${'cluster file'.padEnd(12)}  ${'-'.padEnd(9)}  ${local.digest.slice(0, 16)}  (${o.cluster})`,
  );
  const n = cluster.config.n;
  if (agreed.servers.length === 0) lines.push('no server answered');
  else {
    const shown = views.find((v): v is Extract<PolicyView, { policy: PolicyJson }> => 'digest' in v && v.digest === agreed.digest);
    lines.push(
      agreed.code === 0
        ? `all ${n} servers agree: policy version ${agreed.version}`
        : `servers ${agreed.servers.map((s) => `s${s}`).join(', ')} (${agreed.servers.length} of ${n}, n − t = ${quorum(cluster.config)}) agree on policy version ${agreed.version}; the others differ or did not answer` +
            ' (`powerstore-server policy sync` pushes the latest signed policy to every server)',
    );
    if (shown) lines.push(`policy: ${summarizePolicy(shown.policy)}`);
    if (local.digest !== agreed.digest || local.version !== agreed.version)
      lines.push(
        `the local cluster file holds version ${local.version}${local.digest === agreed.digest ? ' of the same policy' : ', a different policy'}`,
      );
  }
  out(`${lines.join('\n')}\n`);
}

/**
 * A changing `policy` command: `edit` made to the latest policy (see {@link policyBase}),
 * signed with the admin identity as the next version, pushed to every server, and written
 * into the local cluster file once a server holds it. `sync` changes nothing: it pushes the
 * latest policy again (the signed document as it is, or the local cluster file's policy,
 * signed, when that is newer than every signed one). Exit 0 when all n servers hold it,
 * 1 when n − t do, 2 otherwise.
 */
export async function runPolicyChange(o: PolicyCommandOptions, edit: PolicyEdit | 'sync', crypto: CryptoProvider): Promise<void> {
  const cluster = loadClusterFile(o.cluster);
  const admin = await loadAdmin(crypto, o.identity ?? join(dirname(o.cluster), 'admin.json'), cluster);
  if (admin.warning) process.stderr.write(`powerstore-server: warning: ${admin.warning}\n`);
  const views = await fetchPolicies(crypto, cluster);
  const answered = views.filter((v) => 'version' in v).length;
  const q = quorum(cluster.config);
  if (answered < q && !o.force) {
    const down = views.flatMap((v) => ('error' in v ? [`s${v.id} (${v.error})`] : []));
    process.stderr.write(
      `powerstore-server: only ${answered} of ${cluster.config.n} servers answered GET /policy; with fewer than n − t = ${q} the latest policy may be among those missing, ` +
        `and a change to an older one would undo it where it applies. Unreachable: ${down.join(', ')}. Retry when they are up, or pass --force to build on what answered and ${o.cluster}.\n`,
    );
    process.exitCode = 2;
    return;
  }
  const base = policyBase(cluster, views);
  let doc: SignedPolicy;
  if (edit === 'sync') {
    if (base.signed && o.version === undefined) doc = base.signed;
    else {
      // The local file's policy, newer than any signed one: signed at its own version, so
      // servers that started with this same file answer `unchanged`.
      const version = o.version ?? Math.max(base.version, 1);
      doc = await signPolicy(admin.signer, cluster.file.id, version, base.policy, {
        change: `sync: the policy of ${basename(o.cluster)}`,
        issuedAt: new Date().toISOString(),
      });
    }
  } else {
    const r = edit(base.policy);
    if ('none' in r) {
      if (o.json) out(`${JSON.stringify({ cluster: cluster.file.id, version: base.version, change: null, unchanged: r.none }, null, 2)}\n`);
      else out(`no change: ${r.none} (policy version ${base.version})\n`);
      return;
    }
    const version = o.version ?? base.version + 1;
    if (version <= base.version)
      throw new ServerError(
        'CONFIG_INVALID',
        `--version ${version} is not above the latest policy version ${base.version}: servers would refuse it`,
      );
    doc = await signPolicy(admin.signer, cluster.file.id, version, r.policy, { change: r.change, issuedAt: new Date().toISOString() });
  }
  const results = await pushPolicy(cluster, doc);
  const held = results.filter((r) => r.result === 'applied' || r.result === 'unchanged').length;
  // The local file follows what the servers hold, not what none of them took.
  const written = held > 0;
  if (written) writeClusterPolicy(o.cluster, doc.policy, doc.version);
  const code = pushExitCode(cluster, results);
  process.exitCode = code;
  if (o.json) {
    out(
      `${JSON.stringify(
        {
          cluster: cluster.file.id,
          version: doc.version,
          previous: base.version,
          change: doc.change ?? null,
          digest: policyDigest(doc.policy),
          servers: results,
          applied: held,
          n: cluster.config.n,
          quorum: q,
          clusterFile: { path: o.cluster, written },
          policy: doc.policy,
        },
        null,
        2,
      )}\n`,
    );
    return;
  }
  const lines = [`policy version ${doc.version}${doc.change ? `: ${doc.change}` : ''}`];
  for (const r of results) {
    if (r.result === 'applied') lines.push(`  s${r.id}  applied (was version ${r.previous})`);
    else if (r.result === 'unchanged') lines.push(`  s${r.id}  already held it`);
    else if (r.result === 'refused')
      lines.push(
        `  s${r.id}  REFUSED (${r.status} ${r.code}): ${r.message}` +
          (r.current !== undefined && r.current >= doc.version
            ? ` (if its version ${r.current} is one you set by hand, run again with --policy-version ${r.current + 1})`
            : ''),
      );
    else if (r.result === 'unreachable') lines.push(`  s${r.id}  UNREACHABLE: ${r.error}`);
  }
  const n = cluster.config.n;
  lines.push(
    code === 0
      ? `all ${n} servers hold it`
      : code === 1
        ? `${held} of ${n} servers hold it (at least n − t = ${q}: the cluster enforces it); run \`powerstore-server policy sync --cluster ${o.cluster}\` once the others are back`
        : `only ${held} of ${n} servers hold it (fewer than n − t = ${q}): writes may still be admitted under the old policy; fix the servers listed and run \`powerstore-server policy sync --cluster ${o.cluster}\``,
  );
  lines.push(
    written
      ? `${o.cluster}: policy version ${doc.version} written (servers started or sent SIGHUP with it keep this policy)`
      : `${o.cluster}: not changed, since no server holds the new policy`,
  );
  out(`${lines.join('\n')}\n`);
}
