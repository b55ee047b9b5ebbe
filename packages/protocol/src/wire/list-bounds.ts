/**
 * The bounds of a LIST (and PENDING) exchange, which client and server both hold each
 * other to: how many keys one request asks for, how large an answer may grow, how many
 * key records a server reads for it, and the fewest keys an answer cut short must carry.
 * They sit below the codec (which refuses frames past them) and the storage (which stops
 * its scans at them), not beside the listing operation that reads the answers.
 */
/** Most keys one LIST asks for (and one answer carries). */
export const MAX_LIST_LIMIT = 1000;
/** The size a server keeps a LIST answer under, cutting it short (with `more`) if needed. */
export const MAX_LIST_REPLY_BYTES = 1 << 20;
/**
 * Fewest keys an answer cut short by its size may carry: the largest entry (a 1 KiB key,
 * a candidate with a grant, a cross-checksum of 255 hashes) is under 16 KiB, so a correct
 * server always fits this many in {@link MAX_LIST_REPLY_BYTES}.
 */
export const MIN_LIST_PAGE = 64;
/**
 * Most key records a server reads for one LIST, the keys it lists included. Keys holding
 * only writes never completed (no `lc`) are read and skipped; without a bound, a LIST
 * for one key could read every such key an identity left in its namespace. A full page
 * of completed keys reads {@link MAX_LIST_LIMIT} + 1 records and is never cut by it; a
 * LIST that reads this many records, whatever they hold, costs a server about what a
 * full page does (a skipped record is decoded, a listed one decoded and its entry read
 * too). A LIST stopped by it answers with the key it stopped at (`resumeAfter`).
 */
export const MAX_LIST_SCAN = 2 * MAX_LIST_LIMIT;
