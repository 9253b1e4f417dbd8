// Compiled (never run) by test/types.test.js: the declarations in index.d.ts
// must accept this usage under --strict.
import { Pool } from 'pg';
import {
  Worker, Client, RetryError, StaleTokenError, PgClaimError, NotSupportedError, handleSignals, mapError,
  Job, JobContext, ItemState, QueueStats, WorkerStats, Outcome,
} from '../..';

interface Email { to: string }

const ac = new AbortController();
const worker = new Worker<Email, { sent: boolean }>({
  connectionString: 'postgresql://user@localhost/db',
  queue: 'emails',
  concurrency: 8,
  lease: '30 seconds',
  wait: 10_000,
  grace: 5_000,
  transactional: true,
  signal: ac.signal,
  logger: { warn: (m: string) => void m },
  handler: async (job: Job<Email>, ctx: JobContext) => {
    const to: string = job.payload.to;
    const attempt: number = job.attempt;
    if (ctx.client) await ctx.client.query('SELECT 1');
    if (!to || attempt > 3) throw new RetryError(1000, 'later');
    const until: Date = await ctx.extend(60_000);
    void until;
    return { sent: !ctx.signal.aborted };
  },
});
worker.on('completed', (job, result) => { const sent: boolean = result.sent; void sent; void job.token; });
worker.on('settled', (_job, outcome: Outcome) => void outcome);
const stats: WorkerStats = worker.stats;
void stats;
const remove: () => void = handleSignals(worker, ['SIGTERM']);
remove();

const client = new Client({ pool: new Pool() });
async function use(): Promise<void> {
  const id: string = await client.enqueue('emails', { to: 'a@example.com' }, { priority: 1, groupKey: 'g', runAt: new Date() });
  const ids: string[] = await client.enqueueBatch('emails', [{ to: 'b' }, null, [1, 2]]);
  const state: ItemState | null = await client.itemState('emails', id, { wait: '5 seconds' });
  const n: number = await client.cancel('emails', ids);
  const rows: QueueStats[] = await client.stats('emails');
  await client.createQueue('other', { lease: 30_000, maxAttempts: 3, backoff: '1 second' });
  try {
    await worker.run();
  } catch (e) {
    const mapped = mapError(e);
    if (mapped instanceof StaleTokenError || mapped instanceof NotSupportedError) {
      const code: string | null = mapped.code;
      void code;
    } else if (mapped instanceof PgClaimError) {
      void mapped.hint;
    }
  }
  await worker.stop();
  await client.close();
  void state; void n; void rows;
}
void use;

// Durable runs (docs/steps.md).
import { durable, Suspended } from '../..';
const orderRun = durable<{ amount: number }, { paid: number }>(async (ctx) => {
  const paid = await ctx.transaction('charge', async (client) => {
    await client.query('SELECT 1');
    return ctx.payload.amount;
  });
  await ctx.sleep(1000);
  await ctx.step('ship', () => ctx.key('ship'));
  const kids: number[] = await ctx.awaitChildren<number>(['1', 2]);
  void kids;
  void (await ctx.awaitEvent('paid', '1 hour'));
  return { paid };
});
void orderRun.run('orders', { maxRuns: 1 });
void Suspended;
