package dev.shoal.flink.common;

import java.util.List;
import java.util.function.Consumer;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalClient;
import dev.shoal.client.ShoalClientException;
import dev.shoal.client.ShoalEndpoint;
import dev.shoal.client.ShoalTransportException;
import org.apache.arrow.vector.VectorSchemaRoot;
import org.apache.arrow.vector.types.pojo.Schema;
import org.slf4j.Logger;
import org.slf4j.LoggerFactory;

/**
 * {@link ShoalTableClient} of one table at one endpoint, over shoal's Java client ({@link
 * ShoalClient}: a daemon over Arrow Flight, or the engine in this JVM). Every call goes to that
 * endpoint. Its Flight connection is shared with the JVM's other clients of the endpoint and
 * closes with the last of them, waiting for its threads ({@code idleCloseMillis} 0): on a Flink
 * session cluster nothing of a job may outlive it.
 *
 * <p>Errors are the client's {@link ShoalClientException}s (with the daemon's status code, which
 * {@link ShoalErrors} classifies); a failure to open the embedded engine becomes a {@link
 * ShoalSinkException} naming option {@code endpoint} and what to do.
 */
public final class EndpointTableClient implements ShoalTableClient {
  private static final Logger LOG = LoggerFactory.getLogger(EndpointTableClient.class);

  private final ShoalClient client;
  private final String table;

  private EndpointTableClient(ShoalClient client, String table) {
    this.client = client;
    this.table = table;
  }

  /**
   * A client of {@code table} at {@code endpoint} with the connector's {@code options} (token and
   * request timeout for a daemon; engine keys and keep-alive in embedded mode).
   *
   * @throws IllegalArgumentException on a malformed endpoint
   * @throws ShoalSinkException when the embedded engine cannot be opened
   */
  public static EndpointTableClient open(String endpoint, String table, ShoalClientOptions options) {
    return new EndpointTableClient(connect(endpoint, table, options), table);
  }

  /**
   * The shared client's {@link ShoalClient} of {@code endpoint} with the connector's {@code
   * options}, for {@code table} (a shard's node, for {@code sink.KeyRoutingShoalClient}, as well as the
   * endpoint).
   *
   * @throws IllegalArgumentException on a malformed endpoint
   * @throws ShoalSinkException when the embedded engine cannot be opened
   */
  public static ShoalClient connect(String endpoint, String table, ShoalClientOptions options) {
    boolean embedded = ShoalEndpoint.isEmbedded(endpoint);
    if (embedded && options.token() != null && !options.token().isEmpty()) {
      LOG.info("shoal table \"{}\" at {}: option 'token' is ignored in embedded mode (no network, no authentication)",
          table, endpoint);
    }
    dev.shoal.client.ShoalClientOptions transport = new dev.shoal.client.ShoalClientOptions(options.token(),
        embedded ? null : options.requestTimeout(), options.embeddedConfig(), options.embeddedKeepAlive().toMillis(), 0,
        e -> openFailed(e, table));
    return ShoalClient.open(endpoint, transport);
  }

  /** A failure to open the embedded engine as the sink's advice; any other failure as it is. */
  private static RuntimeException openFailed(ShoalClientException e, String table) {
    if (ShoalClientException.OPEN.equals(e.request()) && e.getCause() instanceof ShoalTransportException cause) {
      return ShoalErrors.embeddedOpenFailed(e.endpoint(), table, ShoalEndpoint.embeddedPath(e.endpoint()), cause);
    }
    return e;
  }

  /** Whether this client runs the engine inside this JVM (embedded mode). */
  public boolean embedded() {
    return ShoalEndpoint.isEmbedded(client.endpoint());
  }

  @Override
  public String endpoint() {
    return client.endpoint();
  }

  @Override
  public String table() {
    return table;
  }

  @Override
  public ShoalClient transport(String table) {
    return client;
  }

  /** The batch's {@code {"transaction": id}} goes as its {@code app_metadata}. */
  @Override
  public PutAcknowledgement put(List<byte[]> records, long bytes, String transaction) throws InterruptedException {
    return put(client, table, records, bytes, transaction);
  }

  /**
   * {@link #put(List, long, String)} through {@code client} into {@code table} (this client's, or
   * a shard's own table {@code T.shard-i} at its node, for {@code sink.KeyRoutingShoalClient}): one
   * {@code DoPut} of one batch.
   */
  public static PutAcknowledgement put(ShoalClient client, String table, List<byte[]> records, long bytes, String transaction)
      throws InterruptedException {
    try (ShoalClient.Put put = client.startPut(table, ShoalTableClient.batchSchema(records))) {
      ShoalTableClient.fill(put.root(), records, bytes);
      JsonNode answer = put.sendBatch(transaction == null ? null : JSON.createObjectNode().put("transaction", transaction));
      put.finish();
      return PutAcknowledgement.parse(answer, table);
    } catch (ShoalClientException e) {
      if (e.getCause() instanceof InterruptedException interrupted) {
        // The writer's sender was interrupted (close): as an interruption, not a failed batch.
        Thread.interrupted();
        throw interrupted;
      }
      throw e;
    }
  }

  @Override
  public JsonNode query(ObjectNode command, Consumer<VectorSchemaRoot> batches) {
    return client.query(command.path("table").asText(table), command, batches);
  }

  @Override
  public List<String> listTables() {
    return client.listTables();
  }

  @Override
  public Schema schema(String table) {
    return client.getSchema(table);
  }

  @Override
  public void close() {
    client.close();
  }
}
