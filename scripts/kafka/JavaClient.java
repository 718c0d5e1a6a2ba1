// The Apache Kafka Java client (kafka-clients, the jars scripts/kafka-broker fetched), for tests
// that need records written or checked by another client than librdkafka. Run through
// `scripts/kafka-broker produce|codecs ...` (java's single-file source launcher, no build step).
//   produce BOOTSTRAP TOPIC COMPRESSION COUNT   COUNT records, key k<i>, value <COMPRESSION>-<i>,
//                                               header codec=<COMPRESSION>, in batches of 100
//                                               compressed with COMPRESSION (none, gzip, snappy,
//                                               lz4, zstd); prints the count written
//   topic BOOTSTRAP TOPIC PARTITIONS             (re)creates TOPIC with PARTITIONS partitions: deletes
//                                               it first if it exists, waits until it is gone
//   codecs LOG_DIR TOPIC                         the compression codecs of the record batches on
//                                               the broker's disk for TOPIC (all partitions), one
//                                               per line (control batches left out)
import java.io.File;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.util.List;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.serialization.StringSerializer;

public class JavaClient {
    public static void main(String[] args) throws Exception {
        switch (args.length > 0 ? args[0] : "") {
            case "produce" -> produce(args[1], args[2], args[3], Integer.parseInt(args[4]));
            case "codecs" -> codecs(args[1], args[2]);
            case "topic" -> topic(args[1], args[2], Integer.parseInt(args[3]));
            default -> {
                System.err.println("usage: JavaClient produce BOOTSTRAP TOPIC COMPRESSION COUNT | topic BOOTSTRAP TOPIC PARTITIONS | codecs LOG_DIR TOPIC");
                System.exit(2);
            }
        }
    }

    static void produce(String bootstrap, String topic, String compression, int count) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        p.put("compression.type", compression);
        p.put("linger.ms", "50");
        p.put("batch.size", "1048576");
        p.put("acks", "all");
        try (KafkaProducer<String, String> producer =
                new KafkaProducer<>(p, new StringSerializer(), new StringSerializer())) {
            for (int i = 0; i < count; i++) {
                ProducerRecord<String, String> r =
                        new ProducerRecord<>(topic, "k" + i, compression + "-" + i);
                r.headers().add("codec", compression.getBytes(StandardCharsets.UTF_8));
                producer.send(r);
                if (i % 100 == 99) {
                    producer.flush();
                }
            }
            producer.flush();
        }
        System.out.println(count);
    }

    static void topic(String bootstrap, String topic, int partitions) throws Exception {
        Properties p = new Properties();
        p.put("bootstrap.servers", bootstrap);
        try (Admin admin = Admin.create(p)) {
            if (admin.listTopics().names().get().contains(topic)) {
                admin.deleteTopics(List.of(topic)).all().get();
                for (int i = 0; i < 300 && admin.listTopics().names().get().contains(topic); i++) {
                    Thread.sleep(100);
                }
            }
            for (int attempt = 0; ; attempt++) {
                try {
                    admin.createTopics(Set.of(new NewTopic(topic, partitions, (short) 1))).all().get();
                    break;
                } catch (java.util.concurrent.ExecutionException e) {
                    // A topic just deleted may still be marked for deletion for a moment.
                    if (attempt >= 50) {
                        throw e;
                    }
                    Thread.sleep(200);
                }
            }
        }
        System.out.println(topic + " " + partitions);
    }

    static final String[] CODECS = {"none", "gzip", "snappy", "lz4", "zstd"};

    // Reads the record batch headers of each segment file (Kafka's log format v2: baseOffset
    // int64, batchLength int32, partitionLeaderEpoch int32, magic int8, crc int32, attributes
    // int16 whose low 3 bits are the codec), skipping each batch's records.
    static void codecs(String logDir, String topic) throws Exception {
        TreeSet<String> out = new TreeSet<>();
        File[] dirs = new File(logDir).listFiles((d, n) -> n.startsWith(topic + "-"));
        if (dirs == null || dirs.length == 0) {
            throw new IllegalStateException("no partition folder of " + topic + " in " + logDir);
        }
        for (File dir : dirs) {
            File[] logs = dir.listFiles((d, n) -> n.endsWith(".log"));
            for (File log : logs == null ? new File[0] : logs) {
                byte[] b = Files.readAllBytes(log.toPath());
                ByteBuffer buf = ByteBuffer.wrap(b);
                int pos = 0;
                while (pos + 23 <= b.length) {
                    int length = buf.getInt(pos + 8);
                    if (length <= 0) {
                        break;
                    }
                    byte magic = buf.get(pos + 16);
                    short attributes = buf.getShort(pos + 21);
                    boolean control = (attributes & 0x20) != 0;
                    if (magic == 2 && !control) {
                        out.add(CODECS[attributes & 0x7]);
                    }
                    pos += 12 + length;
                }
            }
        }
        out.forEach(System.out::println);
    }
}
