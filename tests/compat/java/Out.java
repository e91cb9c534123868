import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.Collection;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CompletionException;
import java.util.concurrent.ExecutionException;

/**
 * Output helper shared by the compatibility workloads: one JSON object per line on stdout (written by hand: the
 * classpath has no JSON library), plus small conversions (exceptions, digests, common client properties).
 */
public final class Out {
    private Out() {}

    /** Prints one JSON object built from alternating keys and values. */
    public static synchronized void emit(Object... kv) {
        System.out.println(toJson(map(kv)));
        System.out.flush();
    }

    /** An insertion-ordered map from alternating keys and values. */
    public static Map<String, Object> map(Object... kv) {
        if (kv.length % 2 != 0) throw new IllegalArgumentException("odd number of key/value arguments");
        Map<String, Object> m = new LinkedHashMap<>();
        for (int i = 0; i < kv.length; i += 2) m.put(String.valueOf(kv[i]), kv[i + 1]);
        return m;
    }

    public static String toJson(Object o) {
        StringBuilder sb = new StringBuilder();
        write(sb, o);
        return sb.toString();
    }

    private static void write(StringBuilder sb, Object o) {
        if (o == null) {
            sb.append("null");
        } else if (o instanceof String s) {
            quote(sb, s);
        } else if (o instanceof Boolean || o instanceof Integer || o instanceof Long || o instanceof Short
                || o instanceof Byte) {
            sb.append(o);
        } else if (o instanceof Double || o instanceof Float) {
            double d = ((Number) o).doubleValue();
            if (Double.isFinite(d)) sb.append(d); else quote(sb, String.valueOf(d));
        } else if (o instanceof Map<?, ?> m) {
            sb.append('{');
            boolean first = true;
            for (Map.Entry<?, ?> e : m.entrySet()) {
                if (!first) sb.append(',');
                first = false;
                quote(sb, String.valueOf(e.getKey()));
                sb.append(':');
                write(sb, e.getValue());
            }
            sb.append('}');
        } else if (o instanceof Collection<?> c) {
            sb.append('[');
            boolean first = true;
            for (Object x : c) {
                if (!first) sb.append(',');
                first = false;
                write(sb, x);
            }
            sb.append(']');
        } else if (o instanceof Object[] arr) {
            write(sb, List.of(arr));
        } else {
            quote(sb, String.valueOf(o));
        }
    }

    private static void quote(StringBuilder sb, String s) {
        sb.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"' -> sb.append("\\\"");
                case '\\' -> sb.append("\\\\");
                case '\n' -> sb.append("\\n");
                case '\r' -> sb.append("\\r");
                case '\t' -> sb.append("\\t");
                default -> {
                    if (c < 0x20) sb.append(String.format("\\u%04x", (int) c)); else sb.append(c);
                }
            }
        }
        sb.append('"');
    }

    /** The exception a client call really failed with: ExecutionException/CompletionException wrappers removed. */
    public static Throwable unwrap(Throwable t) {
        while ((t instanceof ExecutionException || t instanceof CompletionException) && t.getCause() != null) {
            t = t.getCause();
        }
        return t;
    }

    /** {"error": simple class name, "error_class": full name, "message": ..., "retriable": ..., "causes": [...]} */
    public static Map<String, Object> error(Throwable t) {
        t = unwrap(t);
        List<String> causes = new ArrayList<>();
        for (Throwable c = t.getCause(); c != null && causes.size() < 5; c = c.getCause()) {
            causes.add(c.getClass().getName() + ": " + c.getMessage());
        }
        return map("error", t.getClass().getSimpleName(), "error_class", t.getClass().getName(),
                "message", t.getMessage(),
                "retriable", t instanceof org.apache.kafka.common.errors.RetriableException,
                "causes", causes);
    }

    /** Emits {"op": op, "ok": false, ...error fields...}. */
    public static void emitError(String op, Throwable t, Object... extra) {
        Map<String, Object> m = map("op", op, "ok", false);
        m.putAll(map(extra));
        m.putAll(error(t));
        synchronized (Out.class) {
            System.out.println(toJson(m));
            System.out.flush();
        }
    }

    public static String sha256(byte[] b) {
        if (b == null) return null;
        try {
            StringBuilder sb = new StringBuilder();
            for (byte x : MessageDigest.getInstance("SHA-256").digest(b)) sb.append(String.format("%02x", x));
            return sb.toString();
        } catch (Exception e) {
            throw new IllegalStateException(e);
        }
    }

    public static byte[] utf8(String s) {
        return s == null ? null : s.getBytes(StandardCharsets.UTF_8);
    }

    public static String str(byte[] b) {
        return b == null ? null : new String(b, StandardCharsets.UTF_8);
    }

    /** "topic-partition" list sorted, for assignment output. */
    public static List<String> tps(Collection<org.apache.kafka.common.TopicPartition> c) {
        List<String> l = new ArrayList<>();
        for (org.apache.kafka.common.TopicPartition tp : c) l.add(tp.topic() + "-" + tp.partition());
        l.sort(null);
        return l;
    }

    public static java.util.Properties props(String bootstrap, Object... kv) {
        java.util.Properties p = new java.util.Properties();
        p.put("bootstrap.servers", bootstrap);
        for (int i = 0; i < kv.length; i += 2) p.put(String.valueOf(kv[i]), String.valueOf(kv[i + 1]));
        return p;
    }

    public static java.util.Properties consumerProps(String bootstrap, Object... kv) {
        java.util.Properties p = props(bootstrap,
                "key.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer",
                "value.deserializer", "org.apache.kafka.common.serialization.ByteArrayDeserializer");
        for (int i = 0; i < kv.length; i += 2) p.put(String.valueOf(kv[i]), String.valueOf(kv[i + 1]));
        return p;
    }

    public static java.util.Properties producerProps(String bootstrap, Object... kv) {
        java.util.Properties p = props(bootstrap,
                "key.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer",
                "value.serializer", "org.apache.kafka.common.serialization.ByteArraySerializer");
        for (int i = 0; i < kv.length; i += 2) p.put(String.valueOf(kv[i]), String.valueOf(kv[i + 1]));
        return p;
    }

    public static long now() {
        return System.currentTimeMillis();
    }
}
