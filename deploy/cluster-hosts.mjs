#!/usr/bin/env node
// Gives each server of a cluster `powerstore-server init` made its own host:
//   node deploy/cluster-hosts.mjs <cluster dir> <host of server 1> <host of server 2> …
// `init --host` names one host for every server; this rewrites cluster.json's URLs to
// wss://<host i>:<port> and makes each server-<i>.json listen on <listen>:<port>.
// Environment: PORT (default 7001, the same on every host), LISTEN (default 0.0.0.0),
// SCHEME (default wss). Run it once, before the files are copied to the hosts and before
// any server starts; it prints nothing secret.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

const [dir, ...hosts] = process.argv.slice(2);
const port = Number(process.env.PORT ?? 7001);
const listen = process.env.LISTEN ?? '0.0.0.0';
const scheme = process.env.SCHEME ?? 'wss';
const fail = (message) => {
  process.stderr.write(`cluster-hosts: ${message}\n`);
  process.exit(2);
};
if (!dir) fail('usage: node cluster-hosts.mjs <cluster dir> <host 1> … <host n>');
const clusterFile = join(dir, 'cluster.json');
const cluster = JSON.parse(readFileSync(clusterFile, 'utf8'));
if (hosts.length !== cluster.servers.length) fail(`the cluster has ${cluster.servers.length} servers: give one host for each`);
if (!Number.isInteger(port) || port < 1 || port > 65535) fail(`PORT ${process.env.PORT} is not a port`);
if (scheme !== 'wss' && scheme !== 'ws') fail('SCHEME is wss or ws');
for (const [i, s] of cluster.servers.entries()) {
  const host = hosts[i].includes(':') ? `[${hosts[i]}]` : hosts[i];
  s.url = `${scheme}://${host}:${port}`;
  const file = join(dir, `server-${s.id}.json`);
  const server = JSON.parse(readFileSync(file, 'utf8'));
  server.host = listen;
  server.port = port;
  writeFileSync(file, `${JSON.stringify(server, null, 2)}\n`); // keeps the file's mode (0600)
  process.stdout.write(`server ${s.id}: ${s.url} (listens on ${listen}:${port})\n`);
}
writeFileSync(clusterFile, `${JSON.stringify(cluster, null, 2)}\n`);
