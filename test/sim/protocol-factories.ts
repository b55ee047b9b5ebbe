/**
 * How the simulator builds protocol objects. Mutants replace one of these with a
 * subclass that overrides a single predicate, so production code carries no test flags.
 */
import {
  ListOperation,
  ReadOperation,
  Server,
  WriteOperation,
  type ListOptions,
  type ReaderOptions,
  type ReadTarget,
  type ServerOptions,
  type WriterOptions,
  type WriteValue,
} from '@powerstore/protocol';

/** Constructors for the three roles, and listing. */
export interface ProtocolFactories {
  server(options: ServerOptions): Server;
  /** `target`: which stripe, and (pinned) which version, for the stripes of a striped value. */
  reader(options: ReaderOptions, key: string, opId: number, target?: ReadTarget): ReadOperation;
  writer(options: WriterOptions, key: string, value: WriteValue, opId: number): WriteOperation;
  lister(options: ListOptions, prefix: string, after: string, limit: number, opId: number): ListOperation;
}

/** The production classes, unmodified. */
export const correctProtocol: ProtocolFactories = {
  server: (o) => new Server(o),
  reader: (o, key, opId, target) => new ReadOperation(o, key, opId, target),
  writer: (o, key, value, opId) => new WriteOperation(o, key, value, opId),
  lister: (o, prefix, after, limit, opId) => new ListOperation(o, prefix, after, limit, opId),
};
