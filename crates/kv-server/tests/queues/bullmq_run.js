// BullMQ as an application runs it, against the server on $PORT: 20 plain jobs, 3
// failing ones (2 attempts each, fixed backoff), a delayed one, and a flow (a
// parent whose result sums its 3 children's). Prints one line per kind checked
// and "bullmq ok" when every one is as expected.
const { Queue, Worker, FlowProducer } = require('bullmq');
const connection = { host: '127.0.0.1', port: Number(process.env.PORT), maxRetriesPerRequest: null };
(async () => {
  const name = 'pmwire-test';
  const queue = new Queue(name, { connection });
  await queue.obliterate({ force: true });
  const done = [], failed = [];
  const worker = new Worker(name, async job => {
    if (job.name === 'fail') throw new Error('boom ' + job.data.i);
    if (job.name === 'parent') {
      const kids = await job.getChildrenValues();
      return Object.values(kids).reduce((a, b) => a + b, 0);
    }
    return job.data.i * 2;
  }, { connection, concurrency: 4 });
  worker.on('completed', (job, r) => done.push([job.name, job.data.i, r]));
  worker.on('failed', (job, e) => failed.push([job.name, e.message, job.attemptsMade]));
  for (let i = 0; i < 20; i++) await queue.add('plain', { i });
  for (let i = 0; i < 3; i++) await queue.add('fail', { i }, { attempts: 2, backoff: { type: 'fixed', delay: 50 } });
  const queued = Date.now();
  await queue.add('delayed', { i: 100 }, { delay: 300 });
  const flow = new FlowProducer({ connection });
  await flow.add({ name: 'parent', queueName: name, data: {}, children: [1, 2, 3].map(i => ({ name: 'child', data: { i }, queueName: name })) });
  const deadline = Date.now() + 20000;
  while (Date.now() < deadline && (done.length < 25 || failed.length < 6)) await new Promise(r => setTimeout(r, 50));
  const counts = await queue.getJobCounts('completed', 'failed', 'delayed', 'wait', 'active');
  const plain = done.filter(d => d[0] === 'plain');
  const ok = [];
  if (plain.length === 20 && plain.every(d => d[2] === d[1] * 2)) ok.push('plain');
  if (failed.length === 6 && failed.filter(f => f[2] === 2).length === 3 && counts.failed === 3) ok.push('failing');
  const delayed = done.filter(d => d[0] === 'delayed');
  if (delayed.length === 1 && delayed[0][2] === 200 && Date.now() - queued >= 300) ok.push('delayed');
  const parent = done.filter(d => d[0] === 'parent');
  if (parent.length === 1 && parent[0][2] === 2 + 4 + 6) ok.push('flow');
  for (const k of ok) console.log(k + ' ok');
  console.log(JSON.stringify({ done: done.length, failed: failed.length, counts }));
  if (ok.length === 4 && counts.completed === 25 && counts.wait === 0 && counts.active === 0 && counts.delayed === 0) console.log('bullmq ok');
  await worker.close(); await flow.close(); await queue.close();
  process.exit(0);
})().catch(e => { console.error('ERROR', e.stack || e.message); process.exit(1); });
