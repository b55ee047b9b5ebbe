/**
 * Servers as users name them (1-based: `s1` is the cluster file's first), for the words an
 * operation that cannot finish says about them: one phrasing for a read's, a write's and a
 * listing's `waiting` ("s2, s3 sent one; s1 sent one that fails verification") and the
 * client's errors.
 */

/** Server `index` (0-based) as users name it: `s1` for 0. */
export function serverName(index: number): string {
  return `s${index + 1}`;
}

/** Servers (0-based) as users name them, in ascending order: "s1, s3". */
export function serverNames(indices: Iterable<number>): string {
  return [...indices]
    .sort((a, b) => a - b)
    .map(serverName)
    .join(', ');
}

/**
 * Servers grouped by what they did, each group its servers in ascending order and then what
 * they did, groups in the order their first server comes in `did`: `[[1, 'sent one'], [2,
 * 'sent one'], [0, 'sent one that fails verification']]` says "s2, s3 sent one; s1 sent one
 * that fails verification". Empty when `did` is.
 */
export function whoDidWhat(did: Iterable<readonly [server: number, what: string]>): string {
  const groups = new Map<string, number[]>();
  for (const [server, what] of did) {
    const servers = groups.get(what);
    if (servers) servers.push(server);
    else groups.set(what, [server]);
  }
  return [...groups].map(([what, servers]) => `${serverNames(servers)} ${what}`).join('; ');
}
