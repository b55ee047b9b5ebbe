/**
 * Errors of the server host (configuration, storage, transport), each with a stable
 * `code` so the CLI and tests branch on codes and messages can improve freely. Protocol
 * rejections stay {@link ProtocolError}s from `@powerstore/protocol`: they travel on the
 * wire as ERROR replies, these never do.
 */

/** Stable codes of {@link ServerError}. */
export const SERVER_ERROR_CODES = [
  'CONFIG_INVALID',
  'CONFIG_EXISTS',
  'CONFIG_MISSING',
  'STORAGE_CLOSED',
  'STORAGE_FAILED',
  'STORAGE_MISMATCH',
  'STORAGE_CORRUPT',
  'LISTEN_FAILED',
] as const;

/** One of {@link SERVER_ERROR_CODES}. */
export type ServerErrorCode = (typeof SERVER_ERROR_CODES)[number];

/** A failure of the server host, with a stable `code`. */
export class ServerError extends Error {
  override readonly name: string = 'ServerError';
  constructor(
    readonly code: ServerErrorCode,
    message: string,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * A configuration file that cannot be used; names the file and the field so an operator
 * can fix it without reading code.
 */
export class ConfigError extends ServerError {
  override readonly name = 'ConfigError';
  constructor(
    code: 'CONFIG_INVALID' | 'CONFIG_EXISTS' | 'CONFIG_MISSING',
    readonly file: string,
    readonly field: string | undefined,
    detail: string,
  ) {
    super(code, `${file}${field ? `: field "${field}"` : ''}: ${detail}`);
  }
}
