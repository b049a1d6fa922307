package dev.shoal.spark;

import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.client.ShoalClient;

/**
 * Where a Spark data writer sends its rows as JSON records: one {@code DoPut} stream ({@link
 * #of}), or one per shard of a table sharded by key ({@link ShoalShardedPut}). Each {@link #send}
 * returns once shoal acknowledged the batch.
 */
interface ShoalRecordStream extends AutoCloseable {
  /** Sends one batch and waits for its acknowledgement; returns its metadata ({@code records}, ...). */
  JsonNode send(List<String> records);

  /** Records acknowledged so far. */
  long records();

  /** Ends the stream(s) and waits for shoal to close them. */
  void finish();

  /** Releases the stream(s); what was not finished is cancelled (batches acknowledged stay). */
  @Override
  void close();

  /** One {@code DoPut} stream of plain records. */
  static ShoalRecordStream of(ShoalClient.Put put) {
    return new ShoalRecordStream() {
      @Override
      public JsonNode send(List<String> records) {
        return put.send(records);
      }

      @Override
      public long records() {
        return put.records();
      }

      @Override
      public void finish() {
        put.finish();
      }

      @Override
      public void close() {
        put.close();
      }
    };
  }
}
