/**
 * Signed policy documents: how the admin changes the write policy (admitted owners,
 * revocations, quotas) of running servers without editing files on every host.
 *
 * A document is JSON:
 *
 * ```json
 * { "kind": "powerstore-signed-policy", "cluster": "<cluster id>", "version": 7,
 *   "policy": { "writers": "owners", "owners": […], "revoked": { "keys": […], "grants": […] }, "quotas": {…} },
 *   "change": "revoke <key>: laptop stolen", "issuedAt": "2026-11-26T14:00:00.000Z",
 *   "signature": "<Ed25519 signature by the cluster's admin key, base64url>" }
 * ```
 *
 * The signature covers the bytes `"powerstore policy v1\n"` followed by the canonical JSON
 * (keys sorted, no white space) of every other field of the document. The prefix keeps a
 * signature over a policy from being anything else the admin key signs (grants and write
 * certificates are signed under their own `powerstore/v2/…` labels, never under this one),
 * and the cluster id and version inside the signed bytes keep a document from being used
 * on another cluster or after a newer one.
 *
 * A server holds one policy and its version: cluster.json's `policy` (its `version`, 0 when
 * left out) or the last signed document it accepted, kept in its data directory
 * ({@link POLICY_FILE}). It accepts a document only if the admin signed it, it names this
 * cluster, and its version is above the one it holds (equal with the same policy: nothing to
 * do); so an old document replayed, by anyone, changes nothing. At start-up and on SIGHUP
 * it takes cluster.json's policy when its version is at least the held one and keeps the
 * signed one otherwise: the file on the host still wins when the operator edits it and
 * raises (or, with no signed policy newer, keeps) its version.
 */
import { createHash } from 'node:crypto';
import { mkdir, open, readFile, rename, rm } from 'node:fs/promises';
import { basename, dirname, join } from 'node:path';
import {
  ClusterFileError,
  decodeBase64url,
  describeValue,
  encodePublicKey,
  jsonErrorPosition,
  parsePolicy,
  type Cluster,
  type CryptoProvider,
  type PolicyJson,
  type Signer,
  type WritePolicy,
} from '@powerstore/protocol';
import { ServerError } from './errors.js';
import { syncDirectory } from './files.js';

/** What the signed bytes start with; changing it is a format version change. */
export const POLICY_SIGNATURE_DOMAIN = 'powerstore policy v1';

/** The `kind` of a signed policy document. */
export const SIGNED_POLICY_KIND = 'powerstore-signed-policy';

/** The file, in a server's data directory, that keeps the last signed policy it accepted. */
export const POLICY_FILE = 'powerstore-policy.json';

/**
 * The largest `PUT /policy` body a server reads. A policy listing tens of thousands of owners
 * and revoked keys fits; anything larger is refused before it is buffered.
 */
export const MAX_POLICY_BYTES = 1024 * 1024;

/** The longest `change` note a document may carry. */
export const MAX_CHANGE_LENGTH = 1000;

/** A signed policy document (see the module comment). */
export interface SignedPolicy {
  readonly kind: typeof SIGNED_POLICY_KIND;
  /** The cluster id (cluster.json's `id`). */
  readonly cluster: string;
  /** Above every earlier document's: servers refuse a version at or below theirs. */
  readonly version: number;
  /** The policy, without `version` (the document's is its version). */
  readonly policy: PolicyJson;
  /** What changed, for people: logged by each server that applies it. */
  readonly change?: string;
  /** When the admin signed it (ISO 8601), for people; servers do not judge it. */
  readonly issuedAt?: string;
  /** The admin's Ed25519 signature (base64url) of {@link policySigningBytes}. */
  readonly signature: string;
}

/** The policy a server enforces, and where it came from. */
export interface PolicyInForce {
  readonly version: number;
  /** The policy as JSON, without `version`. */
  readonly json: PolicyJson;
  readonly policy: WritePolicy;
  /** `cluster-file`: cluster.json's `policy`; `signed`: a document the admin signed and pushed. */
  readonly source: 'cluster-file' | 'signed';
  /** SHA-256 (hex) of the policy's canonical JSON without `version`: equal digests, equal policies. */
  readonly digest: string;
  /** The document, when `source` is `signed`. */
  readonly signed?: SignedPolicy;
}

/** What `GET /policy` answers. */
export interface PolicyReport {
  readonly server: number;
  readonly cluster: string;
  readonly version: number;
  readonly source: PolicyInForce['source'];
  readonly digest: string;
  readonly policy: PolicyJson;
  readonly signed?: SignedPolicy;
}

/** Why a document was refused: the HTTP status and the `code` of the JSON error. */
export class PolicyRefusal extends Error {
  override readonly name = 'PolicyRefusal';
  constructor(
    readonly status: number,
    readonly code: PolicyRefusalCode,
    message: string,
    /** The version the server holds, for `STALE_VERSION`. */
    readonly current?: number,
  ) {
    super(message);
  }
}

/** The `code`s of refused documents. */
export type PolicyRefusalCode =
  | 'MALFORMED'
  | 'TOO_LARGE'
  | 'TIMEOUT'
  | 'WRONG_CLUSTER'
  | 'BAD_SIGNATURE'
  | 'STALE_VERSION'
  | 'BUSY'
  | 'SHUTTING_DOWN'
  | 'NOT_PERSISTENT'
  | 'PERSIST_FAILED';

/** The outcome of an accepted `PUT /policy`. */
export interface PolicyOffer {
  /** `applied`: the server now enforces it; `unchanged`: it already did (a retried push). */
  readonly status: 'applied' | 'unchanged';
  readonly version: number;
  readonly previous: number;
  readonly digest: string;
}

/**
 * JSON with object keys sorted (by UTF-16 code units, as `Array.prototype.sort` orders them)
 * and no white space: one text per value, so signer and verifier hash the same bytes.
 * Numbers must be finite; only integers occur in a valid policy.
 */
export function canonicalJson(value: unknown): string {
  if (value === null || typeof value === 'boolean' || typeof value === 'string') return JSON.stringify(value);
  if (typeof value === 'number') {
    if (!Number.isFinite(value)) throw new TypeError('canonical JSON has no NaN or infinities');
    return JSON.stringify(value);
  }
  if (Array.isArray(value)) return `[${value.map(canonicalJson).join(',')}]`;
  if (typeof value === 'object') {
    const o = value as Record<string, unknown>;
    const keys = Object.keys(o)
      .filter((k) => o[k] !== undefined)
      .sort();
    return `{${keys.map((k) => `${JSON.stringify(k)}:${canonicalJson(o[k])}`).join(',')}}`;
  }
  throw new TypeError(`canonical JSON cannot encode a ${typeof value}`);
}

/** The bytes the admin signs: the domain prefix and the canonical JSON of the document without its signature. */
export function policySigningBytes(doc: Omit<SignedPolicy, 'signature'>): Uint8Array {
  const { kind, cluster, version, policy, change, issuedAt } = doc;
  return new TextEncoder().encode(`${POLICY_SIGNATURE_DOMAIN}\n${canonicalJson({ kind, cluster, version, policy, change, issuedAt })}`);
}

/** SHA-256 (hex) of a policy's canonical JSON, `version` left out. */
export function policyDigest(policy: PolicyJson): string {
  const { version: _version, ...rest } = policy;
  return createHash('sha256').update(canonicalJson(rest)).digest('hex');
}

/** `policy` without its `version`. */
export function withoutVersion(policy: PolicyJson): PolicyJson {
  const { version: _version, ...rest } = policy;
  return rest;
}

/** Signs `policy` as version `version` of cluster `cluster`'s policy with `admin` (the admin identity). */
export async function signPolicy(
  admin: Signer,
  cluster: string,
  version: number,
  policy: PolicyJson,
  note: { readonly change?: string; readonly issuedAt?: string } = {},
): Promise<SignedPolicy> {
  const unsigned: Omit<SignedPolicy, 'signature'> = {
    kind: SIGNED_POLICY_KIND,
    cluster,
    version,
    policy: withoutVersion(parsePolicy(policy).json),
    ...(note.change !== undefined ? { change: note.change } : {}),
    ...(note.issuedAt !== undefined ? { issuedAt: note.issuedAt } : {}),
  };
  const signature = await admin.sign(policySigningBytes(unsigned));
  return { ...unsigned, signature: Buffer.from(signature).toString('base64url') };
}

const malformed = (message: string): PolicyRefusal => new PolicyRefusal(400, 'MALFORMED', message);

function only(o: Record<string, unknown>, field: string, allowed: readonly string[]): void {
  for (const k of Object.keys(o)) {
    // An unknown field may be a restriction a newer version means and this one would not
    // enforce: refusing it is safer than applying the rest.
    if (!allowed.includes(k)) throw malformed(`${field}: unknown field ${JSON.stringify(k.slice(0, 64))} (allowed: ${allowed.join(', ')})`);
  }
}

function record(x: unknown, field: string): Record<string, unknown> {
  if (typeof x !== 'object' || x === null || Array.isArray(x)) throw malformed(`${field} must be a JSON object`);
  return x as Record<string, unknown>;
}

/**
 * Checks a signed policy document for `cluster`: its shape, that it names this cluster, that
 * its policy is valid, and that the cluster's admin signed it. Returns the document and its
 * policy; throws {@link PolicyRefusal} otherwise. It does not judge the version: that needs
 * the version the caller holds.
 */
export async function verifySignedPolicy(
  crypto: CryptoProvider,
  cluster: Pick<Cluster, 'file' | 'identity'>,
  input: unknown,
): Promise<{ readonly doc: SignedPolicy; readonly json: PolicyJson; readonly policy: WritePolicy }> {
  const o = record(input, 'the document');
  only(o, 'the document', ['kind', 'cluster', 'version', 'policy', 'change', 'issuedAt', 'signature']);
  if (o.kind !== SIGNED_POLICY_KIND) throw malformed(`"kind" must be "${SIGNED_POLICY_KIND}", got ${describeValue(o.kind)}`);
  if (typeof o.cluster !== 'string') throw malformed(`"cluster" must be the cluster id, got ${describeValue(o.cluster)}`);
  // Checked before the signature only to say what is wrong: a document signed for another
  // cluster also fails the signature check unless both clusters share an admin key.
  if (o.cluster !== cluster.file.id)
    throw new PolicyRefusal(
      403,
      'WRONG_CLUSTER',
      `the document is for cluster ${JSON.stringify(o.cluster.slice(0, 64))}, this server is of cluster ${cluster.file.id}`,
    );
  if (typeof o.version !== 'number' || !Number.isSafeInteger(o.version) || o.version < 1)
    throw malformed(`"version" must be an integer of at least 1, got ${describeValue(o.version)}`);
  if (o.change !== undefined && (typeof o.change !== 'string' || o.change.length > MAX_CHANGE_LENGTH))
    throw malformed(`"change" must be a string of at most ${MAX_CHANGE_LENGTH} characters`);
  if (o.issuedAt !== undefined && (typeof o.issuedAt !== 'string' || Number.isNaN(Date.parse(o.issuedAt)) || o.issuedAt.length > 64))
    throw malformed('"issuedAt" must be an ISO 8601 time');
  const p = record(o.policy, '"policy"');
  only(p, '"policy"', ['writers', 'owners', 'revoked', 'quotas']);
  if (p.revoked !== undefined) only(record(p.revoked, '"policy.revoked"'), '"policy.revoked"', ['keys', 'grants']);
  if (p.quotas !== undefined) only(record(p.quotas, '"policy.quotas"'), '"policy.quotas"', ['default', 'owners']);
  let parsed: { policy: WritePolicy; json: PolicyJson };
  try {
    parsed = parsePolicy(p);
  } catch (err) {
    if (err instanceof ClusterFileError) throw malformed(err.message);
    throw err;
  }
  let signature: Uint8Array;
  try {
    signature = decodeBase64url(o.signature, 64, 'signature');
  } catch {
    throw new PolicyRefusal(403, 'BAD_SIGNATURE', '"signature" must be an Ed25519 signature (64 bytes of base64url)');
  }
  const doc: SignedPolicy = {
    kind: SIGNED_POLICY_KIND,
    cluster: o.cluster,
    version: o.version,
    policy: p as unknown as PolicyJson,
    ...(o.change !== undefined ? { change: o.change } : {}),
    ...(o.issuedAt !== undefined ? { issuedAt: o.issuedAt } : {}),
    signature: o.signature as string,
  };
  // Verified over the policy as received (canonically encoded), not over what parsing made
  // of it: the signature then covers every byte that is applied and kept.
  if (!(await crypto.verifyEd25519(cluster.identity.admin, policySigningBytes(doc), signature)))
    throw new PolicyRefusal(
      403,
      'BAD_SIGNATURE',
      `the document is not signed by this cluster's admin key (${encodePublicKey(cluster.identity.admin)})`,
    );
  return { doc, json: withoutVersion(parsed.json), policy: parsed.policy };
}

/** cluster.json's policy as the one in force. */
function fromClusterFile(cluster: Cluster): PolicyInForce {
  const json = withoutVersion(cluster.file.policy);
  return { version: cluster.file.policy.version ?? 0, json, policy: cluster.policy, source: 'cluster-file', digest: policyDigest(json) };
}

/** What {@link PolicyKeeper.open} takes. */
export interface PolicyKeeperOptions {
  readonly cluster: Cluster;
  readonly crypto: CryptoProvider;
  /** Where accepted documents are kept ({@link POLICY_FILE} in the data directory); without it, `PUT /policy` is refused. */
  readonly file?: string;
}

/**
 * One server's policy: which one is in force (cluster.json's or a signed document's, by the
 * version rule in the module comment), offers of new documents, one at a time, and their
 * persistence. It only decides; the server applies what it returns.
 */
export class PolicyKeeper {
  readonly #crypto: CryptoProvider;
  readonly #file: string | undefined;
  #cluster: Cluster;
  #current: PolicyInForce;
  /** Offers are judged and persisted one at a time: two could otherwise both pass the version check. */
  #queue: Promise<unknown> = Promise.resolve();

  private constructor(options: PolicyKeeperOptions, current: PolicyInForce) {
    this.#crypto = options.crypto;
    this.#file = options.file;
    this.#cluster = options.cluster;
    this.#current = current;
  }

  /**
   * Reads the kept document, if any, and picks the policy in force. A kept document that does
   * not verify fails the start (`CONFIG_INVALID`): starting on cluster.json's older policy
   * instead could quietly undo a revocation.
   */
  static async open(options: PolicyKeeperOptions): Promise<PolicyKeeper> {
    const fromFile = fromClusterFile(options.cluster);
    let current = fromFile;
    if (options.file !== undefined) {
      let text: string | undefined;
      try {
        text = await readFile(options.file, 'utf8');
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'ENOENT')
          throw new ServerError('CONFIG_INVALID', `${options.file}: cannot read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
      }
      if (text !== undefined) {
        const fix = `; delete it to start with cluster.json's policy (version ${fromFile.version}), then push the policy again`;
        let value: unknown;
        try {
          value = JSON.parse(text);
        } catch (err) {
          const at = jsonErrorPosition(text, err);
          throw new ServerError('CONFIG_INVALID', `${options.file}: not valid JSON${at ? ` (at ${at})` : ''}${fix}`);
        }
        let kept;
        try {
          kept = await verifySignedPolicy(options.crypto, options.cluster, value);
        } catch (err) {
          if (err instanceof PolicyRefusal) throw new ServerError('CONFIG_INVALID', `${options.file}: ${err.message}${fix}`);
          throw err;
        }
        if (kept.doc.version > fromFile.version) {
          current = {
            version: kept.doc.version,
            json: kept.json,
            policy: kept.policy,
            source: 'signed',
            digest: policyDigest(kept.json),
            signed: kept.doc,
          };
        }
      }
    }
    return new PolicyKeeper(options, current);
  }

  /** The policy in force. */
  get current(): PolicyInForce {
    return this.#current;
  }

  /** Whether documents can be accepted (there is a file to keep them in). */
  get persistent(): boolean {
    return this.#file !== undefined;
  }

  /** What `GET /policy` answers. */
  report(server: number): PolicyReport {
    const c = this.#current;
    return {
      server,
      cluster: this.#cluster.file.id,
      version: c.version,
      source: c.source,
      digest: c.digest,
      policy: c.json,
      ...(c.signed ? { signed: c.signed } : {}),
    };
  }

  /**
   * A reloaded cluster file (SIGHUP): its policy takes over when its version is at least the
   * one in force; otherwise the signed policy stays. Returns the policy in force afterwards
   * and whether it changed hands, or the version cluster.json was ignored at.
   */
  reload(cluster: Cluster): { readonly current: PolicyInForce; readonly ignored?: number } {
    this.#cluster = cluster;
    const next = fromClusterFile(cluster);
    if (next.version < this.#current.version) return { current: this.#current, ignored: next.version };
    this.#current = next;
    return { current: next };
  }

  /**
   * Judges a `PUT /policy` body and, when accepted, keeps it on disk before it takes effect
   * (`apply` is called with it): a restart then never enforces an older policy than a
   * client was told is in force. Throws {@link PolicyRefusal}; nothing changes then.
   */
  offer(body: Buffer, apply: (current: PolicyInForce, previous: PolicyInForce) => void): Promise<PolicyOffer> {
    const run = this.#queue.then(() => this.#offer(body, apply));
    this.#queue = run.catch(() => undefined);
    return run;
  }

  async #offer(body: Buffer, apply: (current: PolicyInForce, previous: PolicyInForce) => void): Promise<PolicyOffer> {
    if (this.#file === undefined)
      throw new PolicyRefusal(501, 'NOT_PERSISTENT', 'this server has no data directory to keep a signed policy in');
    let value: unknown;
    try {
      value = JSON.parse(body.toString('utf8'));
    } catch {
      throw malformed('the body is not valid JSON');
    }
    const { doc, json, policy } = await verifySignedPolicy(this.#crypto, this.#cluster, value);
    const previous = this.#current;
    const digest = policyDigest(json);
    if (doc.version === previous.version && digest === previous.digest)
      return { status: 'unchanged', version: doc.version, previous: previous.version, digest };
    if (doc.version <= previous.version)
      throw new PolicyRefusal(
        409,
        'STALE_VERSION',
        `version ${doc.version} is not above the version this server holds (${previous.version}${previous.source === 'cluster-file' ? ', from cluster.json' : ''}): ` +
          'an old document replayed, or a change signed without seeing the latest policy',
        previous.version,
      );
    try {
      await writeDurably(this.#file, `${JSON.stringify(doc, null, 2)}\n`);
    } catch (err) {
      throw new PolicyRefusal(500, 'PERSIST_FAILED', `cannot keep the policy: ${(err as NodeJS.ErrnoException).code ?? String(err)}`);
    }
    // A SIGHUP while the file was written may have brought a cluster.json of a higher
    // version: it stays (and outranks the kept document at the next start too).
    if (this.#current !== previous && doc.version <= this.#current.version)
      throw new PolicyRefusal(
        409,
        'STALE_VERSION',
        `version ${doc.version} is not above the version this server took from cluster.json meanwhile (${this.#current.version})`,
        this.#current.version,
      );
    const current: PolicyInForce = { version: doc.version, json, policy, source: 'signed', digest, signed: doc };
    this.#current = current;
    apply(current, previous);
    return { status: 'applied', version: doc.version, previous: previous.version, digest };
  }
}

/** Writes `text` to `file` so that after a crash it holds the old or the new text, whole. */
async function writeDurably(file: string, text: string): Promise<void> {
  const dir = dirname(file);
  await mkdir(dir, { recursive: true });
  const tmp = join(dir, `.${basename(file)}.${process.pid}.tmp`);
  try {
    const handle = await open(tmp, 'w', 0o644);
    try {
      await handle.writeFile(text);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await rename(tmp, file);
  } finally {
    await rm(tmp, { force: true });
  }
  // The rename is durable once the directory is synced.
  await syncDirectory(dir);
}
