// A worker thread's entry when the service runs from its TypeScript sources (no compiled bundle,
// bin/botpay.mjs): loader hooks are per thread, so tsx is registered here before the worker's own
// module (workerData.entry) is imported. The bundle starts its compiled worker directly.
import { workerData } from 'node:worker_threads';
import { register } from 'tsx/esm/api';

register();
await import(workerData.entry);
