package dev.shoal.client;

import com.fasterxml.jackson.core.JsonFactory;
import com.fasterxml.jackson.core.JsonParser;
import com.fasterxml.jackson.core.JsonToken;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import java.io.IOException;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;

/**
 * Where each record of a sharded table goes (docs/protocol.md, "Scale-out"; docs/deployment.md):
 * shard {@code FNV-1a(shard key values) mod shards}, the table {@code T.shard-i} on the node the
 * daemon's {@code cluster} action names, computed here exactly as the daemon does so that the sink
 * sends each record to its shard's node directly instead of through one node that forwards it.
 *
 * <p>The hash is 64-bit FNV-1a over each key path's value - a string's UTF-8 bytes, any other
 * value's compact JSON text, {@code null} when the path is absent - with a 0x1F byte between
 * values; of a member named twice in an object the first counts, the one the engine stores ({@code
 * flight-server/tests/data/shard-key-hashes.json} holds vectors both sides check).
 * A record whose key this class cannot spell as the daemon does (a float, an object or array, an
 * integer beyond 64 bits, {@code -0}, a lone surrogate) or that is not a JSON object is
 * <em>unroutable</em> ({@link #UNROUTABLE}): the caller sends it through a node, which routes it.
 *
 * <p>{@link RoutedPut} sends a batch's records by it; the Flink sink's and the Spark writer's
 * routing by key both use that, and their readers the shard map ({@link #shardsOf}).
 */
public final class ShardRouting {
  /** {@link #shardOf}'s answer for a record the daemon must route. */
  public static final int UNROUTABLE = -1;

  private static final JsonFactory FACTORY = new ObjectMapper().getFactory();
  private static final byte[] NULL = "null".getBytes(StandardCharsets.UTF_8);
  private static final BigInteger MAX_U64 = BigInteger.ONE.shiftLeft(64).subtract(BigInteger.ONE);
  private static final long FNV_OFFSET = 0xcbf29ce484222325L;
  private static final long FNV_PRIME = 0x100000001b3L;

  /** One shard: its number, its own table's name, and the Flight location of the node holding it. */
  public record Shard(int number, String table, String location) {}

  private final String table;
  private final List<String[]> keyPaths;
  private final List<Shard> shards;

  /**
   * @param table the sharded table's name
   * @param shardKey its shard key's dotted paths (not empty)
   * @param shards every shard, by number
   */
  public ShardRouting(String table, List<String> shardKey, List<Shard> shards) {
    if (shardKey.isEmpty() || shards.isEmpty()) {
      throw new IllegalArgumentException("a routing needs a shard key and shards, got " + shardKey + " / " + shards);
    }
    this.table = table;
    this.keyPaths = shardKey.stream().map(path -> path.split("\\.", -1)).toList();
    this.shards = List.copyOf(shards);
  }

  /**
   * The routing of {@code table} from a {@code cluster} action's answer ({@code {"tables": [{"name",
   * "shards", "shard_key", "shard_map": [{"shard", "table", "node", "location"}]}]}}), or null when
   * the table is not sharded there, or is sharded without a shard key (spread by batch: any node
   * takes it as well as another).
   */
  public static ShardRouting of(JsonNode cluster, String table) {
    JsonNode entry = entry(cluster, table);
    if (entry == null) {
      return null;
    }
    List<String> key = new ArrayList<>();
    entry.path("shard_key").forEach(path -> key.add(path.asText()));
    return key.isEmpty() ? null : new ShardRouting(table, key, shards(entry, table));
  }

  /**
   * Every shard of {@code table} from a {@code cluster} action's answer, whatever its shard key
   * (one spread by batch too: what a reader follows shard by shard), or null when the table is
   * not sharded there.
   *
   * @throws IllegalStateException when the shard map is malformed
   */
  public static List<Shard> shardsOf(JsonNode cluster, String table) {
    JsonNode entry = entry(cluster, table);
    return entry == null ? null : shards(entry, table);
  }

  private static JsonNode entry(JsonNode cluster, String table) {
    for (JsonNode entry : cluster.path("tables")) {
      if (table.equals(entry.path("name").asText())) {
        return entry;
      }
    }
    return null;
  }

  private static List<Shard> shards(JsonNode entry, String table) {
    List<Shard> shards = new ArrayList<>();
    for (JsonNode shard : entry.path("shard_map")) {
      shards.add(new Shard(shard.path("shard").asInt(), shard.path("table").asText(), shard.path("location").asText()));
    }
    boolean wellFormed = !shards.isEmpty() && shards.size() == entry.path("shards").asInt(-1);
    for (int i = 0; wellFormed && i < shards.size(); i++) {
      wellFormed = shards.get(i).number() == i && !shards.get(i).location().isEmpty() && !shards.get(i).table().isEmpty();
    }
    if (!wellFormed) {
      throw new IllegalStateException("shoal table \"" + table + "\": the cluster's shard map is malformed: " + entry);
    }
    return shards;
  }

  /** The sharded table's name. */
  public String table() {
    return table;
  }

  /** Every shard, by number. */
  public List<Shard> shards() {
    return shards;
  }

  /** The shard {@code record} (UTF-8 JSON) goes to, or {@link #UNROUTABLE}. */
  public int shardOf(byte[] record) {
    return shardOf(record, 0, record.length);
  }

  /** {@link #shardOf(byte[])} of {@code length} bytes of {@code record} from {@code offset}. */
  public int shardOf(byte[] record, int offset, int length) {
    Long hash = keyHash(record, offset, length);
    return hash == null ? UNROUTABLE : (int) Long.remainderUnsigned(hash, shards.size());
  }

  /** The routing hash of the record's shard key (an unsigned 64-bit value), or null: unroutable. */
  public Long keyHash(byte[] record, int offset, int length) {
    byte[][] values = new byte[keyPaths.size()][];
    try (JsonParser parser = FACTORY.createParser(record, offset, length)) {
      if (parser.nextToken() != JsonToken.START_OBJECT || !readObject(parser, new ArrayList<>(), values)) {
        return null;
      }
      if (parser.nextToken() != null) {
        return null; // trailing content: not one JSON document
      }
    } catch (IOException | RuntimeException e) {
      return null; // not JSON: the daemon applies the table's on_invalid_json policy
    }
    for (int i = 0; i < values.length; i++) {
      if (values[i] == null) {
        values[i] = NULL;
      }
    }
    return hash(Arrays.asList(values));
  }

  /**
   * Reads the object the parser is in (after its {@code START_OBJECT}) at {@code path} (the
   * first of duplicate names counts), filling {@code values} with the spelling of every key path
   * found; false when a key value is unroutable or the object does not end.
   */
  private boolean readObject(JsonParser parser, List<String> path, byte[][] values) throws IOException {
    JsonToken next;
    // Names on a key path met in this object: of a name given twice the first counts (the
    // member the engine stores, and the daemon routes by).
    java.util.Set<String> seen = null;
    while ((next = parser.nextToken()) == JsonToken.FIELD_NAME) {
      String name = parser.currentName();
      path.add(name);
      JsonToken token = parser.nextToken();
      int key = keyAt(path);
      boolean onKeyPath = key >= 0 || leadsToKey(path);
      if (onKeyPath && seen == null) {
        seen = new java.util.HashSet<>();
      }
      if (onKeyPath && !seen.add(name)) {
        parser.skipChildren();
      } else if (key >= 0) {
        byte[] spelled = spell(parser, token);
        if (spelled == null) {
          return false;
        }
        values[key] = spelled;
      } else if (token == JsonToken.START_OBJECT && leadsToKey(path)) {
        if (!readObject(parser, path, values)) {
          return false;
        }
      } else {
        parser.skipChildren();
      }
      path.remove(path.size() - 1);
    }
    return next == JsonToken.END_OBJECT; // else the record ends inside the object: not JSON
  }

  /** The index of the key path equal to {@code path}, or -1. */
  private int keyAt(List<String> path) {
    for (int i = 0; i < keyPaths.size(); i++) {
      if (Arrays.asList(keyPaths.get(i)).equals(path)) {
        return i;
      }
    }
    return -1;
  }

  /** Whether some key path goes on below {@code path}. */
  private boolean leadsToKey(List<String> path) {
    for (String[] key : keyPaths) {
      if (key.length > path.size() && Arrays.asList(key).subList(0, path.size()).equals(path)) {
        return true;
      }
    }
    return false;
  }

  /** A scalar's bytes as the daemon hashes them, or null when this class cannot tell them. */
  private static byte[] spell(JsonParser parser, JsonToken token) throws IOException {
    switch (token) {
      case VALUE_STRING -> {
        String text = parser.getText();
        return wellFormed(text) ? text.getBytes(StandardCharsets.UTF_8) : null;
      }
      case VALUE_NUMBER_INT -> {
        BigInteger value = parser.getBigIntegerValue();
        // serde_json reads -0 and integers beyond 64 bits as floats, spelled its own way.
        boolean inRange = value.compareTo(BigInteger.valueOf(Long.MIN_VALUE)) >= 0 && value.compareTo(MAX_U64) <= 0;
        boolean negativeZero = value.signum() == 0 && parser.getText().startsWith("-");
        return inRange && !negativeZero ? value.toString().getBytes(StandardCharsets.UTF_8) : null;
      }
      case VALUE_TRUE, VALUE_FALSE, VALUE_NULL -> {
        return parser.getText().getBytes(StandardCharsets.UTF_8);
      }
      default -> {
        parser.skipChildren();
        return null;
      }
    }
  }

  /** No lone surrogate (the daemon rejects such JSON; Java would encode it as '?'). */
  private static boolean wellFormed(String text) {
    for (int i = 0; i < text.length(); i++) {
      char c = text.charAt(i);
      if (Character.isHighSurrogate(c) && i + 1 < text.length() && Character.isLowSurrogate(text.charAt(i + 1))) {
        i++;
      } else if (Character.isSurrogate(c)) {
        return false;
      }
    }
    return true;
  }

  /** 64-bit FNV-1a over {@code values}, a 0x1F byte between them. */
  public static long hash(List<byte[]> values) {
    long hash = FNV_OFFSET;
    for (int i = 0; i < values.size(); i++) {
      if (i > 0) {
        hash = (hash ^ 0x1f) * FNV_PRIME;
      }
      for (byte b : values.get(i)) {
        hash = (hash ^ (b & 0xff)) * FNV_PRIME;
      }
    }
    return hash;
  }
}
