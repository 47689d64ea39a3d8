'use strict';
// Drives the unmodified npm client ali-ons 3.12.0 against a kairosmq broker and prints one
// JSON object per line on stdout for everything it observes (tests/stock/test_alions.py
// reads them). ali-ons' own warnings go to stderr.
//
// argv[2] is a JSON config:
//   nameSrv, delayTopic, retryTopic, producerGroup, okGroup, failGroup,
//   delayLevels: [1, 2, ...], plainCount, maxReconsumeTimes, succeedAt, timeoutMs,
//   startDeliverDelays: [ms, ...] (timer messages: Message#setStartDeliverTime)
//
// Flow: start a producer; send one warm-up message to each topic; start two push consumers
// (okGroup on delayTopic, failGroup on retryTopic with a small maxReconsumeTimes); once both
// warm-ups are consumed, send delayed messages (one per level) and plain ones to delayTopic,
// and "retry-me" / "dlq-me" to retryTopic. failGroup fails (throws) "retry-me" until
// reconsumeTimes == succeedAt, and "dlq-me" always. Then close everything
// (UNREGISTER_CLIENT) and print {"event":"done"}.

const { Producer, Consumer, Message } = require('ali-ons');

const cfg = JSON.parse(process.argv[2]);
const out = obj => process.stdout.write(JSON.stringify(Object.assign({ at: Date.now() }, obj)) + '\n');
// ali-ons asserts an httpclient is given; it is only used to ask an HTTP address server
// (onsAddr) for the name-server list, which `nameSrv` replaces.
const httpclient = {
  async request() { throw new Error('no HTTP address server: nameSrv is set'); },
};
const common = {
  httpclient,
  nameSrv: cfg.nameSrv,
  // Aliyun credentials are optional: without them ali-ons signs nothing.
  rebalanceInterval: 1000,
  persistConsumerOffsetInterval: 1000,
  // ali-ons looks up %RETRY%<group> before its first heartbeat creates it; like a RocketMQ
  // name server, kairosmq's answers TOPIC_NOT_EXIST then, and ali-ons only asks again at
  // its next route poll (30 s by default): poll every second so retries start at once.
  pollNameServerInteval: 1000,
};

const waiters = [];
function waitFor(pred, what) {
  return new Promise((resolve, reject) => {
    if (pred()) return resolve();
    const timer = setTimeout(() => reject(new Error('timed out waiting for ' + what)), cfg.timeoutMs);
    waiters.push({ pred, resolve: () => { clearTimeout(timer); resolve(); } });
  });
}
function poke() {
  for (let i = waiters.length - 1; i >= 0; i--) {
    if (waiters[i].pred()) { waiters[i].resolve(); waiters.splice(i, 1); }
  }
}

// ali-ons errors carry the broker's response code (err.code) when a request was refused.
const errorEvent = (who, err) => ({
  event: 'error', who, name: err.name || null,
  code: typeof err.code === 'number' ? err.code : null, message: err.message,
});

function describe(msg) {
  return {
    msgId: msg.msgId,
    topic: msg.topic,
    queueId: msg.queueId,
    queueOffset: msg.queueOffset,
    commitLogOffset: msg.commitLogOffset,
    tags: msg.tags || null,
    keys: msg.keys || null,
    body: msg.body ? msg.body.toString() : null,
    reconsumeTimes: msg.reconsumeTimes,
    bornTimestamp: msg.bornTimestamp,
    storeTimestamp: msg.storeTimestamp,
    storeHost: msg.storeHost,
    bornHost: msg.bornHost,
    originMessageId: msg.originMessageId || null,
    retryTopic: msg.retryTopic || null,
    delayLevelProp: msg.properties && msg.properties.DELAY || null,
  };
}

async function main() {
  const consumed = new Map(); // group -> [body]
  const seen = (group, body) => (consumed.get(group) || []).includes(body);
  const record = (group, body) => {
    if (!consumed.has(group)) consumed.set(group, []);
    consumed.get(group).push(body);
    poke();
  };

  const producer = new Producer(Object.assign({ producerGroup: cfg.producerGroup }, common));
  producer.on('error', err => out(errorEvent('producer', err)));
  await producer.ready();
  out({ event: 'producer.ready' });

  async function send(topic, tag, body, keys, level, startDeliverDelay) {
    const msg = new Message(topic, tag, body);
    msg.keys = [ keys ];
    if (level) msg.delayTimeLevel = level;
    const sentAt = Date.now();
    const startDeliverTime = startDeliverDelay ? sentAt + startDeliverDelay : 0;
    if (startDeliverTime) msg.setStartDeliverTime(startDeliverTime);
    const r = await producer.send(msg);
    out({ event: 'sent', topic, body, keys, level: level || 0, sentAt, startDeliverTime, msgId: r.msgId,
      sendStatus: r.sendStatus, queueId: r.messageQueue && r.messageQueue.queueId, queueOffset: r.queueOffset });
    return r;
  }

  await send(cfg.delayTopic, 'Warm', 'warm-delay', 'warm-delay', 0);
  await send(cfg.retryTopic, 'Warm', 'warm-retry', 'warm-retry', 0);

  const okConsumer = new Consumer(Object.assign({ consumerGroup: cfg.okGroup }, common));
  okConsumer.on('error', err => out(errorEvent('okConsumer', err)));
  okConsumer.subscribe(cfg.delayTopic, '*', async msg => {
    out(Object.assign({ event: 'consumed', group: cfg.okGroup }, describe(msg)));
    record(cfg.okGroup, msg.body.toString());
  });

  const failConsumer = new Consumer(Object.assign({
    consumerGroup: cfg.failGroup, maxReconsumeTimes: cfg.maxReconsumeTimes,
  }, common));
  failConsumer.on('error', err => {
    // The deliberate failures come back here as "process mq message failed" errors.
    if (!/driver: failing/.test(err.message)) out(errorEvent('failConsumer', err));
  });
  failConsumer.subscribe(cfg.retryTopic, '*', async msg => {
    const body = msg.body.toString();
    const info = describe(msg);
    let fail = false;
    if (body === 'retry-me') fail = msg.reconsumeTimes < cfg.succeedAt;
    if (body === 'dlq-me') fail = true;
    out(Object.assign({ event: fail ? 'attempt.failed' : 'consumed', group: cfg.failGroup }, info));
    record(cfg.failGroup, body + '#' + msg.reconsumeTimes);
    // Throw rather than return Consumer.ACTION_RETRY: ali-ons 3.12.0 wraps the handler of
    // a redelivered (%RETRY%) message without passing its return value on, so ACTION_RETRY
    // only works on the first delivery; an exception works on every delivery.
    if (fail) throw new Error('driver: failing ' + body + ' at reconsumeTimes ' + msg.reconsumeTimes);
  });

  await okConsumer.ready();
  await failConsumer.ready();
  out({ event: 'consumers.ready' });
  await waitFor(() => seen(cfg.okGroup, 'warm-delay') && seen(cfg.failGroup, 'warm-retry#0'), 'warm-up');
  out({ event: 'warm.consumed' });

  const expectOk = [];
  for (const level of cfg.delayLevels) {
    const body = 'delayed-level-' + level;
    await send(cfg.delayTopic, 'TagDelay', body, 'key-' + body, level);
    expectOk.push(body);
  }
  for (const d of cfg.startDeliverDelays || []) {
    const body = 'timer-' + d;
    await send(cfg.delayTopic, 'TagTimer', body, 'key-' + body, 0, d);
    expectOk.push(body);
  }
  for (let i = 0; i < cfg.plainCount; i++) {
    const body = 'plain-' + i;
    await send(cfg.delayTopic, 'TagPlain', body, 'key-' + body, 0);
    expectOk.push(body);
  }
  await send(cfg.retryTopic, 'TagRetry', 'retry-me', 'key-retry-me', 0);
  await send(cfg.retryTopic, 'TagRetry', 'dlq-me', 'key-dlq-me', 0);

  await waitFor(() => expectOk.every(b => seen(cfg.okGroup, b)), 'delayed and plain messages');
  await waitFor(() => seen(cfg.failGroup, 'retry-me#' + cfg.succeedAt), 'retry-me to succeed');
  await waitFor(() => seen(cfg.failGroup, 'dlq-me#' + cfg.maxReconsumeTimes), 'dlq-me last attempt');
  // Let the last send-back (to the DLQ) and the offset commits go out.
  await new Promise(r => setTimeout(r, 1500));
  out({ event: 'closing' });
  await okConsumer.close();
  await failConsumer.close();
  await producer.close();
  out({ event: 'done' });
}

main().then(() => process.exit(0), err => {
  out({ event: 'fatal', message: err && err.stack || String(err) });
  process.exit(1);
});
