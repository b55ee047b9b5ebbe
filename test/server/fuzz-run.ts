/**
 * One fuzz campaign against server 1 of a fresh CLI cluster, followed by the checks that
 * matter: the server still serves a real write and read, counted the rejections, and its
 * resident memory stayed bounded.
 */
import { TestClient } from './driver.js';
import { runFuzz, FuzzFailure, signedMessages, type FuzzReport } from './fuzz.js';
import { CliCluster, metricValue } from './harness.js';

/** Frame limit of the fuzzed server: small, so oversized frames are cheap to send. */
export const FUZZ_MAX_FRAME_BYTES = 256 * 1024;

/** What a campaign measured besides the fuzz report. */
export interface CampaignReport extends FuzzReport {
  readonly rssBeforeMiB: number;
  readonly rssAfterMiB: number;
  readonly errorsCounted: number;
  readonly framesTooLargeCounted: number;
}

/** Runs `count` frames from `seed`; throws {@link FuzzFailure} on any violation. */
export async function fuzzCampaign(count: number, seed: number, log?: (line: string) => void): Promise<CampaignReport> {
  const cluster = await CliCluster.create(1, [
    '--max-frame-bytes',
    String(FUZZ_MAX_FRAME_BYTES),
    '--max-buffered-bytes',
    String(FUZZ_MAX_FRAME_BYTES * 8),
  ]);
  try {
    await cluster.startAll();
    const rss = async () => metricValue(await cluster.metrics(1), 'powerstore_process_resident_memory_bytes') / 2 ** 20;
    const rssBefore = await rss();
    const report = await runFuzz({
      url: cluster.urls[0]!,
      config: cluster.config,
      authed: await signedMessages(cluster.config, cluster.cluster.identity, cluster.admin),
      count,
      seed,
      maxFrameBytes: FUZZ_MAX_FRAME_BYTES,
      oversizedEvery: 2500,
      log,
    });
    const rssAfter = await rss();
    if (cluster.process(1)?.exitCode !== null) throw new FuzzFailure('server 1 exited during fuzzing');
    // Still serving: a real write and read through the whole cluster, server 1 included.
    const client = await TestClient.open(cluster, cluster.admin);
    try {
      const value = new TextEncoder().encode(`after ${count} fuzz frames`);
      await client.write('after-fuzz', { kind: 'value', value });
      const read = await client.read('after-fuzz');
      if (new TextDecoder().decode(read.value) !== `after ${count} fuzz frames`)
        throw new FuzzFailure('read after fuzzing returned the wrong value');
    } finally {
      client.close();
    }
    // Every connection the campaign opened, abandoned ones included, is released.
    let open = Infinity;
    for (let i = 0; i < 100 && open > 0; i++) {
      open = metricValue(await cluster.metrics(1), 'powerstore_connections');
      if (open > 0) await new Promise((r) => setTimeout(r, 50));
    }
    if (open > 0) throw new FuzzFailure(`${open} connections still open after the campaign`);
    const metrics = await cluster.metrics(1);
    if (rssAfter > 512 || rssAfter - rssBefore > 200)
      throw new FuzzFailure(`resident memory grew from ${rssBefore.toFixed(0)} to ${rssAfter.toFixed(0)} MiB`);
    return {
      ...report,
      rssBeforeMiB: rssBefore,
      rssAfterMiB: rssAfter,
      errorsCounted: metricValue(metrics, 'powerstore_errors_total'),
      framesTooLargeCounted: metricValue(metrics, 'powerstore_errors_total', { kind: 'frame_too_large' }),
    };
  } finally {
    await cluster.stop();
  }
}
