/** File-system steps durability relies on. */
import { open } from 'node:fs/promises';

/**
 * fsyncs the directory `path`: a file created, renamed or deleted in it is durable (after
 * a power loss, still there or still gone) only once its directory is.
 */
export async function syncDirectory(path: string): Promise<void> {
  const dir = await open(path, 'r');
  try {
    await dir.sync();
  } finally {
    await dir.close();
  }
}
