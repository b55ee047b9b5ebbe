/**
 * How much of a round's frames left this process, for `onProgress`: a frame counts as
 * sent once its link's buffer has drained below where it stood when the frame was queued.
 */
import type { Progress } from '../types.js';
import type { CancelTimer, Clock } from './clock.js';
import type { Link } from './link.js';

/** How often progress is polled while a round's frames drain. */
const PROGRESS_INTERVAL_MS = 100;

/** A frame handed to a link: its length, and the link's buffered bytes just before. */
export type SentFrame = readonly [link: Link, length: number, bufferedBefore: number];

/**
 * Reports `phase`'s progress over `sent` now, and every {@link PROGRESS_INTERVAL_MS} until
 * everything is sent. Returns what stops the polling.
 */
export function trackProgress(
  clock: Clock,
  phase: Progress['phase'],
  sent: readonly SentFrame[],
  onProgress: (progress: Progress) => void,
): CancelTimer {
  const bytesTotal = sent.reduce((a, [, len]) => a + len, 0);
  let stop: CancelTimer = () => {};
  const report = () => {
    let bytesSent = 0;
    for (const [link, len, before] of sent) bytesSent += Math.max(0, Math.min(len, before + len - link.bufferedBytes));
    onProgress({ phase, bytesSent, bytesTotal });
    if (bytesSent < bytesTotal) stop = clock.setTimer(PROGRESS_INTERVAL_MS, report);
  };
  report();
  return () => stop();
}
