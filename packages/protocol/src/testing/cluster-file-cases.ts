/**
 * `cluster.json` files that every reader must judge alike: the protocol's validator
 * (`parseClusterFile`), the server's loader (`loadClusterFile`, which adds the file name)
 * and the client (`connect`). Each side's tests run all of them, so a rule that one side
 * drops or adds shows up as a failing case rather than as a cluster that servers start
 * and clients refuse (or the other way round).
 *
 * Keys are fixed bytes, not real Ed25519 points: the file's rules are about shape, and
 * no signature is checked while reading it.
 */
import { base64urlnopad } from '@scure/base';
import { encodePublicKey, toBase32 } from '../auth/identity.js';

/** Base64url of any bytes, for keys of the wrong length (`encodePublicKey` refuses them); no `Buffer`, so browsers run the cases too. */
const key = (byte: number, length = 32) => base64urlnopad.encode(new Uint8Array(length).fill(byte));

/** A valid file for t = 1, loopback URLs (so `connect` accepts its transport). */
export function validClusterFile() {
  return {
    version: 2,
    id: toBase32(new Uint8Array(16).fill(0x11)),
    admin: encodePublicKey(new Uint8Array(32).fill(0xad)),
    t: 1,
    n: 4,
    servers: [1, 2, 3, 4].map((id) => ({ id, url: `ws://127.0.0.1:${7000 + id}`, publicKey: key(0xc0 + id) })),
    policy: { writers: 'open', owners: [], revoked: { keys: [], grants: [] }, quotas: { default: { bytes: 1000, keys: 10 }, owners: {} } },
  };
}

type File = ReturnType<typeof validClusterFile>;

/** `f` with server `i` changed. */
function server(f: File, i: number, change: Record<string, unknown>): File {
  return { ...f, servers: f.servers.map((s, j) => (j === i ? { ...s, ...change } : s)) };
}

/** Files every side accepts, by name. */
export function acceptedClusterFiles(): [name: string, file: unknown][] {
  const f = validClusterFile();
  const { n: _n, policy: _policy, ...bare } = f;
  return [
    ['as init writes it', f],
    ['n and policy left out (n is implied, the policy is open)', bare],
    ['wss:// URLs and host names', { ...f, servers: f.servers.map((s, i) => ({ ...s, url: `wss://store-${i}.example.com:443` })) }],
    ['a policy version (the `powerstore-server policy` commands write it)', { ...f, policy: { ...f.policy, version: 12 } }],
    [
      'server 2 replaced in key epoch 1',
      {
        ...server(f, 1, {
          publicKey: key(0xe2),
          keys: [
            { epoch: 0, publicKey: key(0xc2) },
            { epoch: 1, publicKey: key(0xe2) },
          ],
        }),
        epoch: 1,
      },
    ],
    [
      'servers 2 and 4 replaced, and an epoch after the last new key',
      {
        ...server(
          server(f, 1, {
            publicKey: key(0xf2),
            keys: [
              { epoch: 0, publicKey: key(0xc2) },
              { epoch: 1, publicKey: key(0xe2) },
              { epoch: 3, publicKey: key(0xf2) },
            ],
          }),
          3,
          {
            publicKey: key(0xe4),
            keys: [
              { epoch: 0, publicKey: key(0xc4) },
              { epoch: 2, publicKey: key(0xe4) },
            ],
          },
        ),
        epoch: 5,
      },
    ],
    ['epoch 0 written out', { ...f, epoch: 0 }],
    [
      't = 2 with seven servers',
      { ...f, t: 2, n: 7, servers: [1, 2, 3, 4, 5, 6, 7].map((id) => ({ id, url: `ws://[::1]:${7000 + id}`, publicKey: key(0xc0 + id) })) },
    ],
  ];
}

/** Files every side refuses, by name, with the field (JSON path) it must name. */
export function refusedClusterFiles(): [name: string, file: unknown, field: string | undefined][] {
  const f = validClusterFile();
  return [
    ['not an object', [f], undefined],
    ['version 1 (MAC keys)', { version: 1, t: 1, n: 4, servers: f.servers, serverKeys: [] }, 'version'],
    ['an unknown version', { ...f, version: 3 }, 'version'],
    ['a cluster id of 15 bytes', { ...f, id: toBase32(new Uint8Array(15).fill(0x11)) }, 'id'],
    ['a cluster id that is not base32', { ...f, id: 'not base32!' }, 'id'],
    ['an admin key of 31 bytes', { ...f, admin: key(0xad, 31) }, 'admin'],
    ['an admin key of 33 bytes', { ...f, admin: key(0xad, 33) }, 'admin'],
    ['an admin key with padding', { ...f, admin: `${f.admin}=` }, 'admin'],
    ['t = 0', { ...f, t: 0 }, 't'],
    ['n that is not 3t + 1', { ...f, n: 5 }, 'n'],
    ['three servers for t = 1', { ...f, servers: f.servers.slice(0, 3) }, 'servers'],
    ['servers out of order', server(f, 1, { id: 3 }), 'servers[1].id'],
    ['a server key of 16 bytes', server(f, 2, { publicKey: key(0xc3, 16) }), 'servers[2].publicKey'],
    ['a server key of 64 bytes', server(f, 2, { publicKey: key(0xc3, 64) }), 'servers[2].publicKey'],
    ['a server without a key', server(f, 3, { publicKey: undefined }), 'servers[3].publicKey'],
    ['two servers sharing a key', server(f, 3, { publicKey: f.servers[1]!.publicKey }), 'servers[3].publicKey'],
    ["a server holding the admin's key", server(f, 0, { publicKey: f.admin }), 'servers[0].publicKey'],
    ['a negative epoch', { ...f, epoch: -1 }, 'epoch'],
    ['an epoch beyond a u32', { ...f, epoch: 2 ** 32 }, 'epoch'],
    ...rotationRefusals(f),
    ['an http:// URL', server(f, 0, { url: 'http://127.0.0.1:7001' }), 'servers[0].url'],
    ['a URL with a path', server(f, 0, { url: 'ws://127.0.0.1:7001/ws' }), 'servers[0].url'],
    ['an unknown writers mode', { ...f, policy: { writers: 'some' } }, 'policy.writers'],
    ['an admitted owner that is not an owner id', { ...f, policy: { writers: 'owners', owners: ['alice'] } }, 'policy.owners[0]'],
    ['a revoked key of 31 bytes', { ...f, policy: { writers: 'open', revoked: { keys: [key(1, 31)] } } }, 'policy.revoked.keys[0]'],
    ['a negative quota', { ...f, policy: { writers: 'open', quotas: { default: { bytes: -1 } } } }, 'policy.quotas.default.bytes'],
    ['a policy version that is not an integer', { ...f, policy: { writers: 'open', version: 1.5 } }, 'policy.version'],
  ];
}

/** Key histories every side refuses (server 2 replaced in epoch 1, bent one way each). */
function rotationRefusals(f: File): [name: string, file: unknown, field: string][] {
  const rotated = (keys: unknown, publicKey = key(0xe2), epoch = 1) => ({ ...server(f, 1, { publicKey, keys }), epoch });
  const k = (epoch: number, byte: number) => ({ epoch, publicKey: key(byte) });
  return [
    ['an empty key history', rotated([]), 'servers[1].keys'],
    ['a key history not starting at epoch 0', rotated([k(1, 0xc2), k(2, 0xe2)], key(0xe2), 2), 'servers[1].keys[0].epoch'],
    ['a key history going down', rotated([k(0, 0xc2), k(2, 0xd2), k(1, 0xe2)], key(0xe2), 2), 'servers[1].keys[2].epoch'],
    ['two keys from one epoch', rotated([k(0, 0xc2), k(0, 0xe2)]), 'servers[1].keys[1].epoch'],
    ['a key history not ending with the current key', rotated([k(0, 0xc2), k(1, 0xd2)]), 'servers[1].keys[1].publicKey'],
    ['a key from after the current epoch', rotated([k(0, 0xc2), k(1, 0xe2)], key(0xe2), 0), 'servers[1].keys[1].epoch'],
    [
      'a key history with epoch 1 and no "epoch"',
      { ...server(f, 1, { publicKey: key(0xe2), keys: [k(0, 0xc2), k(1, 0xe2)] }) },
      'servers[1].keys[1].epoch',
    ],
    ['a retired key used again by its server', rotated([k(0, 0xc2), k(1, 0xe2), k(2, 0xc2)], key(0xc2), 2), 'servers[1].keys[2].publicKey'],
    ["another server's retired key", { ...server(rotated([k(0, 0xc2), k(1, 0xe2)]), 3, { publicKey: key(0xc2) }) }, 'servers[3].publicKey'],
    ['a key entry with an unknown field', rotated([k(0, 0xc2), { ...k(1, 0xe2), from: 1 }]), 'servers[1].keys[1].from'],
    ['a key entry with a bad key', rotated([k(0, 0xc2), { epoch: 1, publicKey: key(0xe2, 31) }]), 'servers[1].keys[1].publicKey'],
  ];
}
