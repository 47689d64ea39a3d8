'use strict';
// Drives the unmodified npm client ali-ons 3.12.0 (installed by tests/stock/alions_install.py)
// against `kairosmq cluster`: it only knows the cluster's name server. Prints one JSON object
// per line on stdout (tests/cluster/test_cluster_alions.py reads them).
//
// argv[2] is a JSON config: nameSrv, topic, queues (all brokers' queues), producerGroup,
//   consumerGroup, plainCount,
//   delayLevels: [1, 2, ...], retryCount (messages failed once, then consumed), timeoutMs
//
// Flow: producer + push consumer; warm up every queue; send plainCount plain messages, one delayed message per
// level and retryCount "retry-<i>" messages (the listener throws on their first delivery, so
// ali-ons sends them back; they come again with reconsumeTimes 1). Wait until every message
// is consumed (retries twice), close everything and print {"event":"done"}.

const { Producer, Consumer, Message } = require('ali-ons');

const cfg = JSON.parse(process.argv[2]);
const out = obj => process.stdout.write(JSON.stringify(Object.assign({ at: Date.now() }, obj)) + '\n');
const httpclient = {
  async request() { throw new Error('no HTTP address server: nameSrv is set'); },
};
// pollNameServerInteval (sic, ali-ons' spelling; default 30 s): a new group's %RETRY% topic
// exists only after its first heartbeat, which follows ali-ons' first route query; poll the
// name server every second so redeliveries do not wait for the 30 s poll.
const common = {
  httpclient, nameSrv: cfg.nameSrv, rebalanceInterval: 1000, persistConsumerOffsetInterval: 1000,
  pollNameServerInteval: 1000,
};
const errorEvent = (who, err) => ({
  event: 'error', who, name: err.name || null,
  code: typeof err.code === 'number' ? err.code : null, message: err.message,
});

async function main() {
  const seen = new Set();
  let wake = () => {};
  const producer = new Producer(Object.assign({ producerGroup: cfg.producerGroup }, common));
  producer.on('error', err => out(errorEvent('producer', err)));
  await producer.ready();

  const consumer = new Consumer(Object.assign({ consumerGroup: cfg.consumerGroup }, common));
  consumer.on('error', err => {
    if (!/driver: failing/.test(err.message)) out(errorEvent('consumer', err));
  });
  const warmQueues = new Set(); // storeHost/queueId pairs a warm-up came from
  consumer.subscribe(cfg.topic, '*', async msg => {
    const body = msg.body.toString();
    if (body.startsWith('warm-')) { warmQueues.add(msg.storeHost + '/' + msg.queueId); wake(); return; }
    const fail = body.startsWith('retry-') && msg.reconsumeTimes === 0;
    out({ event: fail ? 'attempt.failed' : 'consumed', body, storeHost: msg.storeHost,
      reconsumeTimes: msg.reconsumeTimes, topic: msg.topic, queueId: msg.queueId,
      bornTimestamp: msg.bornTimestamp, storeTimestamp: msg.storeTimestamp });
    if (!fail) { seen.add(body); wake(); }
    if (fail) throw new Error('driver: failing ' + body);
  });
  await consumer.ready();
  out({ event: 'ready' });

  // Warm-up: a new group starts each queue at its max offset once the consumer owns it
  // (QUERY_NOT_FOUND -> GET_MAX_OFFSET), so send one round of warm-ups per second until one
  // has come back from every queue of both brokers: from then on nothing sent is skipped.
  let round = 0;
  await new Promise((resolve, reject) => {
    const giveUp = Date.now() + cfg.timeoutMs;
    wake = () => { if (warmQueues.size >= cfg.queues) { wake = () => {}; resolve(); } };
    (async () => {
      while (warmQueues.size < cfg.queues) {
        if (Date.now() > giveUp) return reject(new Error('warm-up timed out: ' + [...warmQueues]));
        for (let k = 0; k < cfg.queues; k++) await producer.send(new Message(cfg.topic, 'Warm', 'warm-' + round + '-' + k));
        round++;
        await new Promise(r => setTimeout(r, 1000));
      }
    })().catch(reject);
  });
  out({ event: 'warm', rounds: round });

  const expect = [];
  async function send(body, level) {
    const msg = new Message(cfg.topic, 'TagCluster', body);
    if (level) msg.delayTimeLevel = level;
    const sentAt = Date.now();
    const r = await producer.send(msg);
    out({ event: 'sent', body, level: level || 0, sentAt, msgId: r.msgId, sendStatus: r.sendStatus,
      brokerName: r.messageQueue && r.messageQueue.brokerName,
      queueId: r.messageQueue && r.messageQueue.queueId });
    expect.push(body);
  }
  for (let i = 0; i < cfg.plainCount; i++) await send('plain-' + i, 0);
  for (const level of cfg.delayLevels) await send('delayed-' + level, level);
  for (let i = 0; i < cfg.retryCount; i++) await send('retry-' + i, 0);

  await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error('timed out; missing ' +
      expect.filter(b => !seen.has(b)).join(','))), cfg.timeoutMs);
    wake = () => { if (expect.every(b => seen.has(b))) { clearTimeout(timer); resolve(); } };
    wake();
  });
  await new Promise(r => setTimeout(r, 1500)); // offset commits go out
  await consumer.close();
  await producer.close();
  out({ event: 'done' });
}

main().then(() => process.exit(0), err => {
  out({ event: 'fatal', message: err && err.stack || String(err) });
  process.exit(1);
});
