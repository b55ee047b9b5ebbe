/**
 * The PowerStore demo page: store dropped files in a Byzantine-fault-tolerant cluster,
 * list, download and delete them, and watch every server's health while doing it.
 *
 * The page needs nothing but `@powerstore/client` and the public `./cluster.json` (the
 * servers). It fetches no secret: it makes its own identity, an Ed25519 key this browser
 * keeps non-extractable in IndexedDB, and writes under that identity's namespace
 * `~<ownerId>/`, then talks WebSockets to every server itself.
 */
import {
  connect,
  Identity,
  openBrowserIdentity,
  PowerStoreError,
  type ServerStatus,
  type Store,
  type TransferProgress,
} from '@powerstore/client';

/** Files are stored under `~<ownerId>/files/<name>`; the page lists that prefix, so the list survives reloads and other tabs. */
let FILE_PREFIX = 'files/';
/** A connected server whose last answer took longer than this is shown as slow. */
const SLOW_ROUND_TRIP_MS = 1_000;
/** …and so is one with this much data queued to it and not yet sent. */
const SLOW_BUFFERED_BYTES = 1024 * 1024;
/** How often the server list is refreshed (round-trip times change without events). */
const SERVER_REFRESH_MS = 500;

interface FileEntry {
  readonly key: string;
  readonly name: string;
  /** `undefined` for a file whose write completed while it was being listed. */
  readonly size: number | undefined;
  /** The write's timestamp number: 1 for the first upload under a name, higher for each replacement. */
  readonly version: number;
}

/** What the page shows for a server's connection. */
type Health = 'connecting' | 'connected' | 'slow' | 'disconnected';

function element<T extends HTMLElement>(id: string): T {
  const e = document.getElementById(id);
  if (!e) throw new Error(`the page has no #${id}`);
  return e as T;
}

const ui = {
  summary: element('summary'),
  identity: element('identity'),
  status: element('status'),
  error: element('error'),
  need: element('need'),
  servers: element<HTMLUListElement>('servers'),
  dropzone: element('dropzone'),
  fileInput: element<HTMLInputElement>('file-input'),
  uploads: element<HTMLUListElement>('uploads'),
  empty: element('empty'),
  files: element<HTMLTableElement>('files'),
  fileRows: element<HTMLTableSectionElement>('file-rows'),
  saveNote: element('save-note'),
};

let store: Store | undefined;
let files: readonly FileEntry[] = [];

// ---------------------------------------------------------------------------- messages

function setStatus(text: string): void {
  ui.status.textContent = text;
}

function showError(context: string, e: unknown): void {
  const message = e instanceof PowerStoreError ? `${e.message} (${e.code})` : e instanceof Error ? e.message : String(e);
  ui.error.textContent = `${context}: ${message}`;
  ui.error.hidden = false;
  console.error(context, e);
}

function clearError(): void {
  ui.error.hidden = true;
  ui.error.textContent = '';
}

function formatBytes(n: number): string {
  if (n < 1024) return `${n} B`;
  const units = ['KiB', 'MiB', 'GiB'];
  let value = n / 1024;
  let unit = 0;
  while (value >= 1024 && unit < units.length - 1) {
    value /= 1024;
    unit++;
  }
  return `${value.toFixed(value < 10 ? 1 : 0)} ${units[unit]}`;
}

// ---------------------------------------------------------------------------- servers

function health(s: ServerStatus): Health {
  if (s.state === 'open') {
    const slow = (s.lastRoundTripMs ?? 0) > SLOW_ROUND_TRIP_MS || s.bufferedBytes > SLOW_BUFFERED_BYTES;
    return slow ? 'slow' : 'connected';
  }
  // A server that was reached before, or failed, and is being retried is disconnected;
  // "connecting" is only the first attempt.
  if (s.state === 'connecting' && s.lastError === undefined) return 'connecting';
  return 'disconnected';
}

const HEALTH_LABEL: Record<Health, string> = {
  connecting: 'connecting',
  connected: 'connected',
  slow: 'slow',
  disconnected: 'disconnected',
};

function serverDetail(s: ServerStatus, h: Health): string {
  switch (h) {
    case 'connected':
    case 'slow': {
      const parts: string[] = [];
      if (s.lastRoundTripMs !== undefined) parts.push(`last answer in ${Math.round(s.lastRoundTripMs)} ms`);
      if (s.bufferedBytes > 0) parts.push(`${formatBytes(s.bufferedBytes)} queued`);
      return parts.join(', ') || 'ready';
    }
    case 'connecting':
      return 'opening a WebSocket…';
    case 'disconnected':
      return `${s.lastError ?? 'connection lost'}; reconnecting`;
  }
}

/** Updates a text node only when it changes, so assistive technology is not flooded. */
function setText(parent: HTMLElement, selector: string, text: string): void {
  const e = parent.querySelector<HTMLElement>(selector);
  if (e && e.textContent !== text) e.textContent = text;
}

function serverItem(id: number, url: string): HTMLLIElement {
  let li = ui.servers.querySelector<HTMLLIElement>(`li[data-id="${id}"]`);
  if (li) return li;
  li = document.createElement('li');
  li.className = 'server';
  li.dataset.id = String(id);
  li.dataset.testid = `server-${id}`;
  li.setAttribute('aria-labelledby', `server-${id}-name`);
  li.innerHTML = `
    <div class="server-head">
      <span class="dot" aria-hidden="true"></span>
      <strong class="server-name" id="server-${id}-name"></strong>
      <span class="badge" data-testid="server-state"></span>
      <span class="badge bad" data-testid="server-misbehaving" hidden>misbehaving</span>
    </div>
    <div class="server-url muted small"></div>
    <div class="server-detail small" data-testid="server-detail"></div>
    <div class="server-reason small" data-testid="server-reason" hidden></div>`;
  setText(li, '.server-name', `Server ${id}`);
  setText(li, '.server-url', url);
  ui.servers.append(li);
  return li;
}

function renderServers(servers: readonly ServerStatus[]): void {
  for (const s of servers) {
    const li = serverItem(s.id, s.url);
    const h = health(s);
    li.dataset.connection = h;
    li.dataset.state = s.misbehaving !== undefined ? 'misbehaving' : h;
    setText(li, '[data-testid="server-state"]', HEALTH_LABEL[h]);
    setText(li, '[data-testid="server-detail"]', serverDetail(s, h));
    const flag = li.querySelector<HTMLElement>('[data-testid="server-misbehaving"]')!;
    const reason = li.querySelector<HTMLElement>('[data-testid="server-reason"]')!;
    flag.hidden = s.misbehaving === undefined;
    reason.hidden = s.misbehaving === undefined;
    setText(li, '[data-testid="server-reason"]', s.misbehaving === undefined ? '' : `Caught misbehaving: ${s.misbehaving}`);
  }
}

// ---------------------------------------------------------------------------- the list

/**
 * The files under {@link FILE_PREFIX}, listed from the cluster page by page. No index key
 * to read-modify-write: two tabs storing files at once both see both.
 */
async function listFiles(s: Store): Promise<FileEntry[]> {
  const out: FileEntry[] = [];
  let cursor: string | undefined;
  do {
    const page = await s.list(FILE_PREFIX, cursor === undefined ? {} : { cursor });
    for (const k of page.keys) out.push({ key: k.key, name: k.key.slice(FILE_PREFIX.length), size: k.size, version: k.timestamp.num });
    cursor = page.cursor;
  } while (cursor !== undefined);
  return out;
}

/**
 * A value of this page's identity as a stream, read stripe by stripe as it is saved. Values
 * are encrypted by the client; ones stored by this demo before it encrypted
 * (UNKNOWN_FORMAT, small by construction) are read whole as the bytes they are.
 */
async function openOwn(
  s: Store,
  key: string,
  onProgress: (p: TransferProgress) => void,
): Promise<{ size: number; stream: ReadableStream<Uint8Array> } | undefined> {
  try {
    return await s.getStream(key, { onProgress });
  } catch (e) {
    if (!(e instanceof PowerStoreError && e.code === 'UNKNOWN_FORMAT')) throw e;
    const bytes = await s.get(key, { raw: true });
    if (bytes === undefined) return undefined;
    onProgress({ bytesDone: bytes.length, bytesTotal: bytes.length });
    return { size: bytes.length, stream: new Blob([bytes as Uint8Array<ArrayBuffer>]).stream() };
  }
}

async function refreshFiles(s: Store): Promise<void> {
  files = await listFiles(s);
  renderFiles();
}

// ---------------------------------------------------------------------------- file list

/** Where a file's download is: shown in its row, and kept here so a re-rendered list keeps showing it. */
interface DownloadState {
  readonly state: 'reading' | 'saving' | 'done' | 'failed';
  readonly bytesDone: number;
  readonly bytesTotal: number | undefined;
}

const downloads = new Map<string, DownloadState>();

function renderFiles(): void {
  ui.empty.hidden = files.length > 0;
  ui.files.hidden = files.length === 0;
  const rows = files.map((f) => {
    const tr = document.createElement('tr');
    tr.dataset.testid = 'file-row';
    tr.dataset.key = f.key;
    tr.dataset.name = f.name;

    const name = document.createElement('th');
    name.scope = 'row';
    name.className = 'file-name';
    name.textContent = f.name;
    const size = document.createElement('td');
    size.className = 'num';
    size.textContent = f.size === undefined ? '…' : formatBytes(f.size);
    size.title = f.size === undefined ? 'being written' : `${f.size} bytes`;
    const version = document.createElement('td');
    version.className = 'num';
    version.dataset.testid = 'file-version';
    version.textContent = String(f.version);

    const transfer = document.createElement('td');
    transfer.className = 'transfer';
    const bar = document.createElement('progress');
    bar.dataset.testid = 'download-progress';
    bar.max = 100;
    bar.setAttribute('aria-label', `Download of ${f.name}`);
    const text = document.createElement('span');
    text.className = 'small muted';
    text.dataset.testid = 'download-text';
    transfer.append(bar, text);

    const actions = document.createElement('td');
    actions.className = 'actions';
    const download = document.createElement('button');
    download.type = 'button';
    download.textContent = 'Download';
    download.dataset.testid = 'download';
    download.setAttribute('aria-label', `Download ${f.name}`);
    download.addEventListener('click', () => void downloadFile(f));
    const remove = document.createElement('button');
    remove.type = 'button';
    remove.className = 'danger';
    remove.textContent = 'Delete';
    remove.dataset.testid = 'delete';
    remove.setAttribute('aria-label', `Delete ${f.name}`);
    remove.disabled = !store?.canWrite;
    remove.addEventListener('click', () => void deleteFile(f, remove));
    actions.append(download, remove);

    tr.append(name, size, version, transfer, actions);
    renderDownload(tr, downloads.get(f.key));
    return tr;
  });
  ui.fileRows.replaceChildren(...rows);
}

function fileRow(key: string): HTMLTableRowElement | undefined {
  return Array.from(ui.fileRows.querySelectorAll<HTMLTableRowElement>('tr[data-testid="file-row"]')).find((r) => r.dataset.key === key);
}

/** Shows a download's state in its row (the row is found afresh: the list may have been re-rendered). */
function setDownload(key: string, state: DownloadState | undefined): void {
  if (state === undefined) downloads.delete(key);
  else downloads.set(key, state);
  const row = fileRow(key);
  if (row) renderDownload(row, state);
}

function renderDownload(row: HTMLTableRowElement, d: DownloadState | undefined): void {
  const bar = row.querySelector<HTMLProgressElement>('[data-testid="download-progress"]')!;
  const button = row.querySelector<HTMLButtonElement>('[data-testid="download"]')!;
  bar.hidden = d === undefined;
  button.disabled = d?.state === 'reading' || d?.state === 'saving';
  if (d === undefined) {
    delete bar.dataset.state;
    delete bar.dataset.bytesDone;
    delete bar.dataset.bytesTotal;
    setText(row, '[data-testid="download-text"]', '');
    return;
  }
  bar.dataset.state = d.state;
  bar.dataset.bytesDone = String(d.bytesDone);
  if (d.bytesTotal === undefined) delete bar.dataset.bytesTotal;
  else bar.dataset.bytesTotal = String(d.bytesTotal);
  // Indeterminate until the read tells the size.
  if (d.state === 'done') bar.value = 100;
  else if (d.bytesTotal) bar.value = Math.floor((99 * d.bytesDone) / d.bytesTotal);
  else bar.removeAttribute('value');
  const amount = d.bytesTotal === undefined ? formatBytes(d.bytesDone) : `${formatBytes(d.bytesDone)} of ${formatBytes(d.bytesTotal)}`;
  const label: Record<DownloadState['state'], string> = {
    reading: 'reading',
    saving: `saving ${amount}`,
    done: `saved ${amount}`,
    failed: `failed after ${amount}`,
  };
  setText(row, '[data-testid="download-text"]', label[d.state]);
}

/** The File System Access API's save dialog, where the browser has one (Chromium-based browsers, in a secure context). */
type SaveFilePicker = (options: { suggestedName: string }) => Promise<FileSystemFileHandle>;

function saveFilePicker(): SaveFilePicker | undefined {
  const picker = (window as unknown as { showSaveFilePicker?: unknown }).showSaveFilePicker;
  return typeof picker === 'function' ? (picker as SaveFilePicker).bind(window) : undefined;
}

/**
 * Reads a file back as a stream and saves it. With the File System Access API the stream
 * is piped into the chosen file, so no more than a few stripes are in the page at once,
 * whatever the file's size; the browser writes to a temporary file and puts it in place
 * only when the whole stream has arrived, so a failed read leaves no half file. Without
 * it, the stream is collected into a Blob and handed to the browser's downloads: that
 * buffers the whole file (in memory, or where the browser keeps large Blobs).
 */
async function downloadFile(f: FileEntry): Promise<void> {
  if (!store) return;
  const s = store;
  clearError();
  const picker = saveFilePicker();
  let target: FileSystemFileHandle | undefined;
  if (picker) {
    // Asked first, while the click still counts as a user gesture (the dialog needs one).
    try {
      target = await picker({ suggestedName: f.name });
    } catch (e) {
      if (e instanceof DOMException && e.name === 'AbortError') {
        setStatus(`Download of ${f.name} cancelled.`);
        return;
      }
      showError(`Saving ${f.name} failed`, e);
      return;
    }
  }
  setStatus(`Reading ${f.name}…`);
  // The listed size is the file's own (the listing subtracts the envelope its write
  // certificate names); the read reports the size it finds as it goes.
  let progress: DownloadState = { state: 'reading', bytesDone: 0, bytesTotal: f.size };
  setDownload(f.key, progress);
  try {
    const value = await openOwn(s, f.key, (p) => {
      progress = { state: 'saving', bytesDone: p.bytesDone, bytesTotal: p.bytesTotal };
      setDownload(f.key, progress);
    });
    if (value === undefined) {
      setDownload(f.key, undefined);
      setStatus(`${f.name} is no longer stored; refreshing the list.`);
      await refreshFiles(s);
      return;
    }
    progress = { ...progress, state: 'saving', bytesTotal: value.size };
    setDownload(f.key, progress);
    if (target) {
      // pipeTo closes the file when the stream ends and aborts it (discarding the
      // temporary file) when the read fails.
      await value.stream.pipeTo(await target.createWritable());
    } else {
      saveBlob(await new Response(value.stream).blob(), f.name);
    }
    setDownload(f.key, { state: 'done', bytesDone: value.size, bytesTotal: value.size });
    setStatus(
      `Read ${f.name} (${formatBytes(value.size)}) back from the cluster${target ? ', streamed into the file you chose' : ' (buffered: this browser cannot stream to a file)'}.`,
    );
  } catch (e) {
    setDownload(f.key, { ...progress, state: 'failed' });
    showError(`Reading ${f.name} failed`, e);
    setStatus(`Reading ${f.name} failed.`);
  }
}

/** Hands a Blob to the browser's downloads, as a link clicked for the user. */
function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(new Blob([blob], { type: 'application/octet-stream' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = name;
  a.hidden = true;
  document.body.append(a);
  a.click();
  a.remove();
  setTimeout(() => URL.revokeObjectURL(url), 60_000);
}

async function deleteFile(f: FileEntry, button: HTMLButtonElement): Promise<void> {
  if (!store) return;
  const s = store;
  button.disabled = true;
  clearError();
  setStatus(`Deleting ${f.name}…`);
  try {
    await s.delete(f.key);
    downloads.delete(f.key);
    await refreshFiles(s);
    setStatus(`Deleted ${f.name}.`);
  } catch (e) {
    showError(`Deleting ${f.name} failed`, e);
    setStatus(`Deleting ${f.name} failed.`);
    button.disabled = false;
  }
}

// ---------------------------------------------------------------------------- uploads

function uploadItem(file: File): { li: HTMLLIElement; bar: HTMLProgressElement; text: HTMLElement } {
  const li = document.createElement('li');
  li.className = 'upload';
  li.dataset.testid = 'upload';
  li.dataset.name = file.name;
  li.dataset.state = 'queued';
  li.dataset.bytesDone = '0';
  li.dataset.bytesTotal = String(file.size);
  const id = `upload-${Math.random().toString(36).slice(2)}`;
  const label = document.createElement('label');
  label.htmlFor = id;
  label.className = 'upload-name';
  label.textContent = `${file.name} (${formatBytes(file.size)})`;
  const bar = document.createElement('progress');
  bar.id = id;
  bar.max = 100;
  bar.value = 0;
  bar.dataset.testid = 'upload-progress';
  const text = document.createElement('span');
  text.className = 'upload-text small muted';
  text.dataset.testid = 'upload-text';
  text.textContent = 'queued';
  li.append(label, bar, text);
  ui.uploads.prepend(li);
  return { li, bar, text };
}

let uploadQueue: Promise<void> = Promise.resolve();

function storeFiles(list: FileList | readonly File[]): void {
  const s = store;
  if (!s) return;
  if (!s.canWrite) {
    showError('Storing files', new Error('this page has no identity, so it can only read'));
    return;
  }
  for (const file of Array.from(list)) {
    const item = uploadItem(file);
    // One upload at a time: each one's progress then means something, and two large
    // files do not compete for the connection.
    uploadQueue = uploadQueue.then(() => storeFile(s, file, item));
  }
}

/**
 * Stores a file with `putStream`, straight from the `File`: the client reads it stripe by
 * stripe as it sends, so the page never holds the whole file, whatever its size.
 */
async function storeFile(s: Store, file: File, item: ReturnType<typeof uploadItem>): Promise<void> {
  const key = FILE_PREFIX + file.name;
  const show = (state: string, value: number, text: string) => {
    item.li.dataset.state = state;
    item.bar.value = value;
    item.text.textContent = text;
  };
  clearError();
  setStatus(`Storing ${file.name}…`);
  try {
    show('storing', 0, `sending: 0 B of ${formatBytes(file.size)}`);
    const { size } = await s.putStream(key, file, {
      size: file.size,
      onProgress: ({ bytesDone, bytesTotal = file.size }) => {
        item.li.dataset.bytesDone = String(bytesDone);
        item.li.dataset.bytesTotal = String(bytesTotal);
        // The bar's last few percent are for refreshing the list.
        show(
          'storing',
          bytesTotal > 0 ? Math.floor((95 * bytesDone) / bytesTotal) : 95,
          `stored ${formatBytes(bytesDone)} of ${formatBytes(bytesTotal)}`,
        );
      },
    });
    show('listing', 97, 'refreshing the file list');
    await refreshFiles(s);
    show('done', 100, `stored ${formatBytes(size)}`);
    setStatus(`Stored ${file.name} (${formatBytes(size)}).`);
  } catch (e) {
    show('failed', 0, 'failed');
    showError(`Storing ${file.name} failed`, e);
    setStatus(`Storing ${file.name} failed.`);
  }
}

function wireUploads(): void {
  const zone = ui.dropzone;
  ui.fileInput.addEventListener('change', () => {
    if (ui.fileInput.files) storeFiles(ui.fileInput.files);
    ui.fileInput.value = '';
  });
  zone.addEventListener('dragover', (e) => {
    e.preventDefault();
    if (e.dataTransfer) e.dataTransfer.dropEffect = store?.canWrite ? 'copy' : 'none';
    zone.classList.add('over');
  });
  zone.addEventListener('dragleave', () => zone.classList.remove('over'));
  zone.addEventListener('drop', (e) => {
    e.preventDefault();
    zone.classList.remove('over');
    if (e.dataTransfer?.files.length) storeFiles(e.dataTransfer.files);
  });
}

// ---------------------------------------------------------------------------- start

/** `undefined` when the file is not there (404). */
async function fetchJson(path: string): Promise<unknown> {
  const response = await fetch(path, { cache: 'no-store' });
  if (response.status === 404) return undefined;
  if (!response.ok) throw new Error(`GET ${path}: HTTP ${response.status}`);
  return response.json();
}

async function main(): Promise<void> {
  wireUploads();
  ui.saveNote.hidden = saveFilePicker() !== undefined;
  let cluster: { t?: unknown; servers?: { id: number; url: string }[] } | undefined;
  try {
    cluster = (await fetchJson('./cluster.json')) as typeof cluster;
  } catch (e) {
    showError('Loading the cluster description failed', e);
    setStatus('No cluster.');
    document.body.dataset.ready = 'error';
    return;
  }
  if (cluster === undefined) {
    showError('Loading the cluster description failed', new Error('./cluster.json is missing: serve it next to this page'));
    setStatus('No cluster.');
    document.body.dataset.ready = 'error';
    return;
  }
  const servers = Array.isArray(cluster.servers) ? cluster.servers : [];
  const t = typeof cluster.t === 'number' ? cluster.t : NaN;
  // This browser's identity: made on the first visit and kept in IndexedDB, its private
  // key non-extractable. Where a browser cannot keep one, a temporary identity for this visit.
  let identity: Identity;
  let temporary = false;
  try {
    identity = await openBrowserIdentity('demo');
  } catch {
    identity = await Identity.generate();
    temporary = true;
  }
  FILE_PREFIX = `${identity.namespace}files/`;
  ui.identity.textContent = `${identity.namespace}${temporary ? ' (temporary: this browser cannot keep an identity)' : ''}`;
  ui.summary.textContent = `${servers.length} servers, tolerating ${t} faulty (crashed, slow or malicious) ${t === 1 ? 'server' : 'servers'}`;
  ui.need.textContent = Number.isFinite(t) ? String(t + 1) : 't + 1';
  servers.forEach((s) => serverItem(s.id, s.url));
  renderServers(
    servers.map((s): ServerStatus => ({
      id: s.id,
      url: s.url,
      state: 'connecting',
      lastError: undefined,
      misbehaving: undefined,
      bufferedBytes: 0,
      lastRoundTripMs: undefined,
    })),
  );

  setStatus('Connecting to the servers…');
  try {
    store = await connect({ cluster, identity, timeoutMs: 15_000, onServerStatus: renderServers });
  } catch (e) {
    showError('Connecting failed', e);
    setStatus('Not connected. Start the servers and reload the page.');
    document.body.dataset.ready = 'error';
    return;
  }
  const s = store;
  renderServers(s.servers());
  setInterval(() => renderServers(s.servers()), SERVER_REFRESH_MS);
  window.addEventListener('pagehide', () => s.close());

  if (s.canWrite) {
    ui.fileInput.disabled = false;
    ui.dropzone.dataset.disabled = 'false';
  }
  setStatus('Connected. Loading the file list…');
  try {
    await refreshFiles(s);
    setStatus('Ready.');
  } catch (e) {
    showError('Reading the file list failed', e);
    setStatus('Connected, but the file list could not be read.');
  }
  document.body.dataset.ready = 'true';
}

void main();
