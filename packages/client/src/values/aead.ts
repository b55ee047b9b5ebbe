/**
 * AES-256-GCM behind a conditional import (`#aead`): `node:crypto` in Node, WebCrypto
 * elsewhere. Both give the same bytes (the client tests check it).
 */
/** Bytes of a GCM tag. */
export const GCM_TAG_LENGTH = 16;
