package dev.shoal.spark;

import java.net.URI;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import com.fasterxml.jackson.core.JsonProcessingException;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalEndpoint;
import dev.shoal.client.ShoalFlightPlan;
import dev.shoal.client.ShardRouting;
import org.apache.spark.sql.connector.read.InputPartition;
import org.apache.spark.sql.connector.read.PartitionReaderFactory;
import org.apache.spark.sql.connector.read.streaming.CompositeReadLimit;
import org.apache.spark.sql.connector.read.streaming.MicroBatchStream;
import org.apache.spark.sql.connector.read.streaming.Offset;
import org.apache.spark.sql.connector.read.streaming.ReadLimit;
import org.apache.spark.sql.connector.read.streaming.ReadMaxRows;
import org.apache.spark.sql.connector.read.streaming.SupportsAdmissionControl;
import org.apache.spark.sql.connector.read.streaming.SupportsTriggerAvailableNow;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Spark Structured Streaming over a shoal table (docs/spark.md, "Streaming reads"): follows the
 * table by log address. An offset is, per shard, the log address up to which the stream has read;
 * a micro-batch reads {@code [start, end)} of each shard, where {@code end} is at most the shard's
 * {@code complete_until} (every record below it is complete, so no record in flight is skipped
 * and none is read twice, docs/protocol.md "Following a table").
 *
 * <p>Options: {@code startingOffsets} ({@code earliest}: the table's begin address, default;
 * {@code latest}: only what lands after the query starts; or the JSON of an offset),
 * {@code maxRecordsPerTrigger} and {@code maxBytesPerTrigger} (an end address estimated from the
 * log's bytes per record, split evenly over the shards), {@code filter} (a shoal filter
 * expression evaluated by the daemon, so that a PSF subset is what is followed: Spark pushes no
 * filters into streaming sources) and {@code failOnDataLoss} (default true: an offset behind the
 * table's begin address — records dropped by retention — fails the query naming the range; false
 * resumes at the begin address), {@code durableOnly} (default false: true stops each batch at
 * the shard's durable address, so that no record a daemon crash could take back is read).
 * {@code Trigger.AvailableNow} reads up to where the table was complete when the query started.
 *
 * <p>A table sharded over a cluster of daemons (docs/deployment.md) is followed shard by shard:
 * the shard map is asked of the endpoint once (the {@code cluster} action), each shard's own
 * table ({@code events.shard-2}, whose log addresses are its own) is read at the node holding it,
 * and the offset's keys are the shards' tables.
 */
final class ShoalMicroBatchStream implements MicroBatchStream, SupportsAdmissionControl, SupportsTriggerAvailableNow {
  static final String STARTING_OFFSETS = "startingOffsets";
  static final String MAX_RECORDS_PER_TRIGGER = "maxRecordsPerTrigger";
  static final String MAX_BYTES_PER_TRIGGER = "maxBytesPerTrigger";
  static final String FILTER = "filter";
  static final String FAIL_ON_DATA_LOSS = "failOnDataLoss";
  static final String DURABLE_ONLY = "durableOnly";

  private final ShoalOptions options;
  private final ObjectNode command;
  private final PartitionReaderFactory readerFactory;
  private final String startingOffsets;
  private final long maxRecords;
  private final long maxBytes;
  private final boolean failOnDataLoss;
  private final boolean durableOnly;
  private ShoalOffset availableNowTarget;
  /** What the stream follows: each endpoint's table, or each shard of a sharded table (asked once). */
  private List<Source> sources;

  /**
   * One log the stream follows: {@code table} at {@code endpoint}, its position under {@code key}
   * in the offset (the endpoint's text for a table of its own, the shard's table for a shard). A
   * shard's micro-batches are planned at {@code entry} (the endpoint that named the shard map)
   * over the sharded table, so that every shard answers the table's merged schema.
   */
  private record Source(String key, URI endpoint, String table, URI entry) {
    boolean shard() {
      return entry != null;
    }
  }

  ShoalMicroBatchStream(ShoalOptions options, CaseInsensitiveStringMap streamOptions, ObjectNode command,
      PartitionReaderFactory readerFactory) {
    this.options = options;
    this.readerFactory = readerFactory;
    this.startingOffsets = streamOptions.getOrDefault(STARTING_OFFSETS, "earliest").trim();
    this.maxRecords = ShoalOptions.positiveLong(streamOptions, MAX_RECORDS_PER_TRIGGER);
    this.maxBytes = ShoalOptions.positiveLong(streamOptions, MAX_BYTES_PER_TRIGGER);
    this.failOnDataLoss = streamOptions.getBoolean(FAIL_ON_DATA_LOSS, true);
    this.durableOnly = streamOptions.getBoolean(DURABLE_ONLY, false);
    String filter = streamOptions.get(FILTER);
    ObjectNode withFilter = command.deepCopy();
    if (filter != null && !filter.isBlank()) {
      String pushed = withFilter.path("filter").asText(null);
      withFilter.put("filter", pushed == null ? filter : "(" + pushed + ") AND (" + filter + ")");
    }
    withFilter.put("if_truncated", failOnDataLoss ? "error" : "skip");
    withFilter.remove("limit");
    this.command = withFilter;
  }

  /** The logs the stream follows: per endpoint, its table, or every shard when the table is sharded there. */
  private List<Source> sources() {
    if (sources != null) {
      return sources;
    }
    List<Source> found = new ArrayList<>();
    for (URI endpoint : options.endpoints()) {
      List<ShardRouting.Shard> sharded = null;
      if (!ShoalEndpoint.isEmbedded(endpoint)) {
        try (ShoalClient client = options.connect(endpoint)) {
          sharded = ShardRouting.shardsOf(client.action("cluster", ShoalClient.JSON.createObjectNode(), options.table()), options.table());
        } catch (ShoalException e) {
          if (!"INVALID_ARGUMENT".equals(e.code()) && !"UNIMPLEMENTED".equals(e.code())) {
            throw e;
          }
          // a daemon older than clusters: no sharded tables
        }
      }
      if (sharded == null) {
        found.add(new Source(endpoint.toString(), endpoint, options.table(), null));
      } else {
        for (ShardRouting.Shard shard : sharded) {
          found.add(new Source(shard.table(), URI.create(shard.location()), shard.table(), endpoint));
        }
      }
    }
    sources = found;
    return found;
  }

  /** Each log's {@code stats}: begin address, complete-until address, bytes per record. */
  private Map<String, JsonNode> stats() {
    Map<String, JsonNode> out = new LinkedHashMap<>();
    for (Source source : sources()) {
      try (ShoalClient client = options.connect(source.endpoint())) {
        out.put(source.key(), client.action("stats", ShoalClient.JSON.createObjectNode().put("table", source.table()), source.table()));
      }
    }
    return out;
  }

  private ShoalOffset current(String field) {
    Map<String, Long> addresses = new LinkedHashMap<>();
    stats().forEach((shard, stats) -> addresses.put(shard, stats.path(field).asLong()));
    return new ShoalOffset(addresses);
  }

  @Override
  public Offset initialOffset() {
    switch (startingOffsets.toLowerCase(Locale.ROOT)) {
      case "earliest":
        return current("begin_address");
      case "latest":
        return readableEnd();
      default:
        try {
          return ShoalOffset.parse(startingOffsets);
        } catch (IllegalArgumentException e) {
          throw new IllegalArgumentException("shoal: option '" + STARTING_OFFSETS + "' must be earliest, latest or the JSON of an"
              + " offset ({\"<endpoint, or a sharded table's shard table>\": <log address>, ...}), got '" + startingOffsets + "': "
              + e.getMessage(), e);
        }
    }
  }

  @Override
  public Offset latestOffset() {
    return readableEnd();
  }

  /** Where each shard is readable up to: {@code complete_until}, or with durableOnly the durable address below it. */
  private ShoalOffset readableEnd() {
    Map<String, Long> addresses = new LinkedHashMap<>();
    stats().forEach((shard, stats) -> addresses.put(shard, readableEnd(stats)));
    return new ShoalOffset(addresses);
  }

  private long readableEnd(JsonNode stats) {
    long complete = stats.path("complete_until").asLong();
    return durableOnly ? Math.min(complete, stats.path("durable_address").asLong(0)) : complete;
  }

  @Override
  public ReadLimit getDefaultReadLimit() {
    List<ReadLimit> limits = new ArrayList<>();
    if (maxRecords > 0) {
      limits.add(ReadLimit.maxRows(maxRecords));
    }
    if (maxBytes > 0) {
      limits.add(new ReadMaxBytes(maxBytes));
    }
    if (limits.isEmpty()) {
      return ReadLimit.allAvailable();
    }
    return limits.size() == 1 ? limits.get(0) : ReadLimit.compositeLimit(limits.toArray(new ReadLimit[0]));
  }

  @Override
  public Offset latestOffset(Offset startOffset, ReadLimit limit) {
    ShoalOffset start = (ShoalOffset) startOffset;
    Map<String, JsonNode> stats = stats();
    long bytesBudget = bytesAllowed(limit, stats);
    Map<String, Long> end = new LinkedHashMap<>();
    for (Map.Entry<String, JsonNode> e : stats.entrySet()) {
      String shard = e.getKey();
      long complete = readableEnd(e.getValue());
      if (availableNowTarget != null && availableNowTarget.addresses().containsKey(shard)) {
        complete = Math.min(complete, availableNowTarget.addresses().get(shard));
      }
      long from = start.addresses().getOrDefault(shard, 0L);
      long to = complete;
      if (bytesBudget > 0) {
        long share = Math.max(1, bytesBudget / Math.max(1, stats.size()));
        to = Math.min(complete, from + share);
      }
      end.put(shard, Math.max(from, to));
    }
    return new ShoalOffset(end);
  }

  /**
   * The log bytes a micro-batch may span (per query, before it is split over the shards), or -1
   * for no bound: rows are turned into bytes with the log's bytes per record.
   */
  private static long bytesAllowed(ReadLimit limit, Map<String, JsonNode> stats) {
    long bytes = -1;
    List<ReadLimit> limits = new ArrayList<>();
    if (limit instanceof CompositeReadLimit) {
      limits.addAll(List.of(((CompositeReadLimit) limit).getReadLimits()));
    } else {
      limits.add(limit);
    }
    for (ReadLimit l : limits) {
      long allowed = -1;
      if (l instanceof ReadMaxRows) {
        long records = 0;
        long logBytes = 0;
        for (JsonNode s : stats.values()) {
          records += s.path("records").asLong();
          logBytes += Math.max(0, s.path("tail_address").asLong() - 64);
        }
        long perRecord = records == 0 ? 1024 : Math.max(1, logBytes / records);
        allowed = Math.max(1, ((ReadMaxRows) l).maxRows()) * perRecord;
      } else if (l instanceof ReadMaxBytes) {
        allowed = ((ReadMaxBytes) l).maxBytes();
      }
      if (allowed > 0) {
        bytes = bytes < 0 ? allowed : Math.min(bytes, allowed);
      }
    }
    return bytes;
  }

  @Override
  public void prepareForTriggerAvailableNow() {
    availableNowTarget = (ShoalOffset) latestOffset();
  }

  @Override
  public InputPartition[] planInputPartitions(Offset startOffset, Offset endOffset) {
    ShoalOffset start = (ShoalOffset) startOffset;
    ShoalOffset end = (ShoalOffset) endOffset;
    List<InputPartition> partitions = new ArrayList<>();
    // A sharded table's shards with something to read, per endpoint that named them: one plan
    // of the sharded table with each shard's range (endpoints at the shards' nodes, in the
    // table's merged schema).
    Map<URI, ObjectNode[]> shardRanges = new LinkedHashMap<>();
    for (Source source : sources()) {
      long from = start.addresses().getOrDefault(source.key(), 0L);
      Long to = end.addresses().get(source.key());
      if (to == null || to <= from) {
        continue;
      }
      if (source.shard()) {
        ObjectNode[] ranges = shardRanges.computeIfAbsent(source.entry(),
            e -> new ObjectNode[] {ShoalClient.JSON.createObjectNode(), ShoalClient.JSON.createObjectNode()});
        ranges[0].put(source.table(), from);
        ranges[1].put(source.table(), to);
        continue;
      }
      ObjectNode range = command.deepCopy().put("table", source.table()).put("from_address", from).put("to_address", to);
      addPartitions(partitions, source.endpoint(), source.table(), range);
    }
    shardRanges.forEach((entry, ranges) -> {
      ObjectNode range = command.deepCopy();
      range.set("from_address", ranges[0]);
      range.set("to_address", ranges[1]);
      addPartitions(partitions, entry, options.table(), range);
    });
    return partitions.toArray(new InputPartition[0]);
  }

  /** The input partitions of {@code range} planned at {@code endpoint}: one per endpoint of its plan. */
  private void addPartitions(List<InputPartition> partitions, URI endpoint, String table, ObjectNode range) {
    try (ShoalClient client = options.connect(endpoint)) {
      ShoalFlightPlan plan = client.getFlightInfo(table, range);
      for (ShoalFlightPlan.Endpoint part : plan.endpoints()) {
        partitions.add(ShoalInputPartition.of(plan, part));
      }
    }
  }

  @Override
  public PartitionReaderFactory createReaderFactory() {
    return readerFactory;
  }

  @Override
  public Offset deserializeOffset(String json) {
    return ShoalOffset.parse(json);
  }

  @Override
  public void commit(Offset end) {
    // Nothing is held on the daemon for a stream.
  }

  @Override
  public void stop() {
    // Clients are opened per call.
  }

  @Override
  public String toString() {
    return "ShoalMicroBatchStream[table=" + options.table() + ", endpoint=" + options.endpointText() + ", filter="
        + command.path("filter").asText("none") + "]";
  }

  /** A micro-batch's bound in log bytes ({@code maxBytesPerTrigger}). */
  static final class ReadMaxBytes implements ReadLimit {
    private final long maxBytes;

    ReadMaxBytes(long maxBytes) {
      this.maxBytes = maxBytes;
    }

    long maxBytes() {
      return maxBytes;
    }

    @Override
    public String toString() {
      return "MaxBytes: " + maxBytes;
    }
  }

  /** Per log (an endpoint's text, or a shard's table), the log address the stream has read up to. */
  static final class ShoalOffset extends Offset {
    private final Map<String, Long> addresses;

    ShoalOffset(Map<String, Long> addresses) {
      this.addresses = addresses;
    }

    Map<String, Long> addresses() {
      return addresses;
    }

    static ShoalOffset parse(String json) {
      JsonNode node;
      try {
        node = ShoalClient.JSON.readTree(json);
      } catch (JsonProcessingException e) {
        throw new IllegalArgumentException("not JSON: " + e.getOriginalMessage(), e);
      }
      if (node == null || !node.isObject()) {
        throw new IllegalArgumentException("an offset is a JSON object {\"<endpoint>\": <log address>, ...}");
      }
      Map<String, Long> addresses = new LinkedHashMap<>();
      node.fields().forEachRemaining(e -> {
        if (!e.getValue().canConvertToLong() || e.getValue().asLong() < 0) {
          throw new IllegalArgumentException("the address of " + e.getKey() + " is not a log address: " + e.getValue());
        }
        addresses.put(e.getKey(), e.getValue().asLong());
      });
      return new ShoalOffset(addresses);
    }

    @Override
    public String json() {
      ObjectNode node = ShoalClient.JSON.createObjectNode();
      addresses.forEach(node::put);
      return node.toString();
    }
  }
}
