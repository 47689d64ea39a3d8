'use strict';
// The unmodified npm client ali-ons 3.12.0 with accessKey/secretKey against a kairosmq broker
// started with --acl (tests/security/test_alions_acl.py). Prints one JSON object per line.
//
// argv[2] is a JSON config: nameSrv, topic, producerGroup, consumerGroup, accessKey,
// secretKey, count, badSecret, timeoutMs.
// Flow: a producer with the right keys sends `count` messages; a push consumer with the
// right keys consumes them (the first delivery of "m0" fails once, so a send-back and a
// %RETRY% redelivery are signed too); then a producer with the wrong secret tries one send.

const { Producer, Consumer, Message } = require('ali-ons');

const cfg = JSON.parse(process.argv[2]);
const out = obj => process.stdout.write(JSON.stringify(obj) + '\n');
const httpclient = { async request() { throw new Error('no HTTP address server'); } };
const common = {
  httpclient, nameSrv: cfg.nameSrv, rebalanceInterval: 1000, persistConsumerOffsetInterval: 1000,
  accessKey: cfg.accessKey, secretKey: cfg.secretKey,
  // %RETRY%<group> is routable once the first heartbeat created it (a lookup before that
  // answers TOPIC_NOT_EXIST, as on RocketMQ): ali-ons finds it at its next route poll
  pollNameServerInteval: 1000,
};
const errorEvent = (who, err) => ({
  event: 'error', who, code: typeof err.code === 'number' ? err.code : null, message: err.message,
});

async function main() {
  const producer = new Producer(Object.assign({ producerGroup: cfg.producerGroup }, common));
  producer.on('error', err => out(errorEvent('producer', err)));
  await producer.ready();
  for (let i = 0; i < cfg.count; i++) {
    const r = await producer.send(new Message(cfg.topic, 'TagA', 'm' + i));
    out({ event: 'sent', body: 'm' + i, sendStatus: r.sendStatus });
  }
  const consumed = [];
  let failedOnce = false;
  const consumer = new Consumer(Object.assign({ consumerGroup: cfg.consumerGroup }, common));
  consumer.on('error', err => {
    if (!/driver: failing/.test(err.message)) out(errorEvent('consumer', err));
  });
  consumer.subscribe(cfg.topic, '*', async msg => {
    const body = msg.body.toString();
    if (body === 'm0' && !failedOnce) {
      failedOnce = true;
      out({ event: 'attempt.failed', body });
      throw new Error('driver: failing m0 once');
    }
    out({ event: 'consumed', body, reconsumeTimes: msg.reconsumeTimes });
    consumed.push(body);
  });
  await consumer.ready();
  const deadline = Date.now() + cfg.timeoutMs;
  while (consumed.length < cfg.count && Date.now() < deadline) {
    await new Promise(r => setTimeout(r, 50));
  }
  await new Promise(r => setTimeout(r, 1200)); // offset commits go out
  await consumer.close();
  await producer.close();

  const bad = new Producer(Object.assign({ producerGroup: cfg.producerGroup + '-bad' }, common,
    { secretKey: cfg.badSecret }));
  bad.on('error', err => out(errorEvent('badProducer', err)));
  try {
    await bad.ready();
    await bad.send(new Message(cfg.topic, 'TagA', 'evil'));
    out({ event: 'sent', body: 'evil' });
  } catch (err) {
    out(errorEvent('badProducer', err));
  }
  await bad.close();
  out({ event: 'done' });
}

main().then(() => process.exit(0), err => {
  out({ event: 'fatal', message: err && err.stack || String(err) });
  process.exit(1);
});
