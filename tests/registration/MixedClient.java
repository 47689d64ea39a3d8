import java.nio.charset.StandardCharsets;
import java.util.Set;
import java.util.concurrent.*;
import org.apache.rocketmq.client.consumer.DefaultMQPushConsumer;
import org.apache.rocketmq.client.consumer.listener.ConsumeConcurrentlyStatus;
import org.apache.rocketmq.client.consumer.listener.MessageListenerConcurrently;
import org.apache.rocketmq.client.producer.DefaultMQProducer;
import org.apache.rocketmq.client.producer.SendResult;
import org.apache.rocketmq.common.consumer.ConsumeFromWhere;
import org.apache.rocketmq.common.message.Message;
import org.apache.rocketmq.common.message.MessageExt;

/** RocketMQ 4.9.8's stock clients with their defaults (only the name server is set). */
public class MixedClient {
    public static void main(String[] a) throws Exception {
        String mode = a[0], ns = a[1], topic = a[2];
        if (mode.equals("produce")) {
            String prefix = a[3];
            int n = Integer.parseInt(a[4]);
            long pause = Long.parseLong(a[5]);
            DefaultMQProducer p = new DefaultMQProducer("MixedJavaPG");
            p.setNamesrvAddr(ns);
            p.start();
            for (int i = 0; i < n; i++) {
                String body = prefix + "-" + i;
                long t0 = System.nanoTime();
                try {
                    SendResult r = p.send(new Message(topic, "TagM", body,
                        body.getBytes(StandardCharsets.UTF_8)));
                    System.out.println("sent " + body + " " + r.getMessageQueue().getBrokerName()
                        + " " + r.getMessageQueue().getQueueId() + " " + r.getSendStatus() + " "
                        + (System.nanoTime() - t0) / 1000000);
                } catch (Exception e) {
                    System.out.println("failed " + body + " " + e.getClass().getSimpleName()
                        + " " + String.valueOf(e.getMessage()).split("\n")[0]);
                }
                System.out.flush();
                if (pause > 0) Thread.sleep(pause);
            }
            p.shutdown();
        } else {
            String group = a[3];
            int n = Integer.parseInt(a[4]);
            int timeoutS = Integer.parseInt(a[5]);
            Set<String> seen = ConcurrentHashMap.newKeySet();
            CountDownLatch all = new CountDownLatch(1);
            DefaultMQPushConsumer c = new DefaultMQPushConsumer(group);
            c.setNamesrvAddr(ns);
            c.setConsumeFromWhere(ConsumeFromWhere.CONSUME_FROM_FIRST_OFFSET);
            c.subscribe(topic, "*");
            c.registerMessageListener((MessageListenerConcurrently) (msgs, ctx) -> {
                for (MessageExt m : msgs) {
                    String body = new String(m.getBody(), StandardCharsets.UTF_8);
                    synchronized (System.out) {
                        System.out.println("got " + body + " "
                            + ctx.getMessageQueue().getBrokerName() + " " + m.getQueueId());
                    }
                    seen.add(body);
                }
                if (seen.size() >= n) all.countDown();
                return ConsumeConcurrentlyStatus.CONSUME_SUCCESS;
            });
            c.start();
            boolean ok = all.await(timeoutS, TimeUnit.SECONDS);
            c.shutdown();
            if (!ok) { System.out.println("timeout " + seen.size()); System.exit(3); }
        }
        System.out.println("done");
        System.exit(0);
    }
}
