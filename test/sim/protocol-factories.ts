/**
 * How the simulator builds protocol objects. Mutants replace one of these with a
 * subclass that overrides a single predicate, so production code carries no test flags.
 */
import {
  CertificateVerifier,
  ListOperation,
  RepairOperation,
  ReadOperation,
  Server,
  WriteOperation,
  type ListOperationOptions,
  type ReaderOptions,
  type Candidate,
  type ClusterIdentity,
  type CryptoProvider,
  type ReadTarget,
  type RepairOptions,
  type ServerOptions,
  type StripeLayout,
  type WriterOptions,
  type WriteValue,
} from '@powerstore/protocol';
import type { RoundBook } from '@powerstore/client/host';

/** Constructors for the three roles, listing, and a rebuilding server's host (`rebuild.ts`). */
export interface ProtocolFactories {
  server(options: ServerOptions): Server;
  /** `target`: which stripe, and (pinned) which version, for the stripes of a striped value. */
  reader(options: ReaderOptions, key: string, opId: number, target?: ReadTarget): ReadOperation;
  writer(options: WriterOptions, key: string, value: WriteValue, opId: number): WriteOperation;
  lister(options: ListOperationOptions, prefix: string, after: string, limit: number, opId: number): ListOperation;
  /** A repair of one stripe of a completed write (`repair.ts`). */
  repairer(
    options: RepairOptions,
    key: string,
    candidate: Candidate,
    opId: number,
    target?: { stripe?: number; layout?: StripeLayout; pending?: boolean },
  ): RepairOperation;
  /** What a rebuilding server's host checks the candidates it lists and repairs with. */
  rebuildVerifier(crypto: CryptoProvider, cluster: ClusterIdentity): CertificateVerifier;
  /** The clients' operation hosts' book of rounds (a mutant's subclass; by default the client's own). */
  readonly roundBook?: <F>() => RoundBook<F>;
}

/** The production classes, unmodified. */
export const correctProtocol: ProtocolFactories = {
  server: (o) => new Server(o),
  reader: (o, key, opId, target) => new ReadOperation(o, key, opId, target),
  writer: (o, key, value, opId) => new WriteOperation(o, key, value, opId),
  lister: (o, prefix, after, limit, opId) => new ListOperation(o, prefix, after, limit, opId),
  repairer: (o, key, candidate, opId, target) => new RepairOperation(o, key, candidate, opId, target),
  rebuildVerifier: (crypto, cluster) => new CertificateVerifier(crypto, cluster),
};
