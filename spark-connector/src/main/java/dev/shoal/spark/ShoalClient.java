package dev.shoal.spark;

import java.net.URI;
import java.util.List;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * One shard of shoal as the connector sees it: the calls of the protocol ({@code docs/protocol.md})
 * with their JSON bodies, errors as {@link ShoalException}s that name the table and the option to
 * fix. Two transports speak it:
 *
 * <ul>
 *   <li>{@link FlightShoalClient}: a daemon over Arrow Flight ({@code grpc://host:port},
 *       {@code grpc+tls://host:port});
 *   <li>{@link EmbeddedShoalClient}: the engine inside this JVM through JNI
 *       ({@code embedded:/path/to/data}), which answers with the same plans, tickets and errors.
 * </ul>
 *
 * <p>Either way a read yields Arrow {@link org.apache.arrow.vector.VectorSchemaRoot} batches that
 * the readers hand to Spark without copying. A client owns its Arrow allocator; {@link #close()}
 * closes it and fails if Arrow memory leaked.
 */
public interface ShoalClient extends AutoCloseable {
  ObjectMapper JSON = new ObjectMapper();

  /**
   * A client of {@code endpoint} (either transport, by its scheme) with the connection settings
   * of {@code options} (token; embedded engine configuration and keep-alive).
   */
  static ShoalClient connect(URI endpoint, ShoalOptions options) {
    if (ShoalOptions.isEmbedded(endpoint)) {
      if (!ShoalOptions.currentJvm().equals(options.originJvm())) {
        throw new ShoalException("shoal table '" + options.table() + "': option 'endpoint' " + endpoint + " runs the engine inside"
            + " the JVM of Spark's driver, but this task runs in another JVM (a Spark cluster's executor). Embedded mode works"
            + " in Spark local mode only (driver and tasks in one JVM: --master local[N]); on a cluster, serve the directory"
            + " with `shoal serve --data-dir` and use its grpc://host:port endpoint.");
      }
      return EmbeddedShoalClient.open(endpoint, options.embeddedConfig(), options.embeddedKeepAliveMillis());
    }
    return FlightShoalClient.open(endpoint, options.token());
  }

  /** A client of {@code endpoint} with a bearer token (ignored in embedded mode) and default settings otherwise. */
  static ShoalClient open(URI endpoint, String token) {
    if (ShoalOptions.isEmbedded(endpoint)) {
      return EmbeddedShoalClient.open(endpoint, Map.of(), ShoalOptions.DEFAULT_EMBEDDED_KEEP_ALIVE_MS);
    }
    return FlightShoalClient.open(endpoint, token);
  }

  /** The location this client talks to (an entry of option {@code endpoint}). */
  URI endpoint();

  /** {@code GetSchema(path=[table])}: the table's schema (declared, else inferred). */
  Schema getSchema(String table);

  /** {@code ListFlights}: the names of the tables. */
  List<String> listTables();

  /** {@code GetFlightInfo(cmd)}: plans a query ({@code {"table", "filter", "columns", "limit", "aggregates", "max_endpoints"}}). */
  ShoalFlightPlan getFlightInfo(String table, ObjectNode command);

  /** {@code DoGet(ticket)}: the record batches of one endpoint of a plan. */
  ShoalBatchStream doGet(String table, byte[] ticket);

  /** {@code DoAction(name, body)}: the first result's JSON body (or null when there is none). */
  JsonNode action(String name, ObjectNode body, String table);

  /** Creates {@code table} unless it exists. */
  default void createTableIfNotExists(String table) {
    action("create_table", JSON.createObjectNode().put("name", table).put("if_not_exists", true), table);
  }

  /**
   * An open {@code DoPut} to {@code table}: batches of JSON records, each acknowledged (durable
   * under the table's policy, visible) before {@link Put#send} returns.
   */
  Put startPut(String table);

  @Override
  void close();

  /** One {@code DoPut} stream. */
  interface Put extends AutoCloseable {
    /** Sends one batch of records and waits for its acknowledgement; returns its metadata ({@code records}, addresses, ...). */
    JsonNode send(List<String> records);

    /** Records acknowledged so far. */
    long records();

    /** Ends the stream and waits for shoal to close it. */
    void finish();

    /** Releases the stream; a stream not finished is cancelled (batches acknowledged so far stay). */
    @Override
    void close();
  }
}
