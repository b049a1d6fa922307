package dev.shoal.embedded;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.MissingNode;
import java.util.List;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * A planned query: what GetFlightInfo answers (docs/protocol.md, "Queries").
 *
 * <p>Each endpoint covers a part of the table's log; {@link ShoalEmbedded#read(byte[])} of its
 * ticket streams its rows. The endpoints' ranges tile the plan's range, so reading all of them
 * reads the answer (in any order, also in parallel). Under a {@code limit} each endpoint returns
 * at most {@code limit} rows; stop after {@code limit} in total.
 *
 * @param schema the result schema: one column per requested path (named by the path), or per
 *     aggregate
 * @param endpoints the endpoints
 * @param metadata the plan as JSON: {@code {"table", "from", "to", "exact", "plan": {"filter",
 *     "index_scans": [...], "full_scans": [...], "reason"}}}; log addresses are bytes
 * @param totalRecords an estimate of the rows (-1 when unknown; the number of endpoints under
 *     aggregates)
 */
public record ScanPlan(Schema schema, List<Endpoint> endpoints, JsonNode metadata, long totalRecords) {

  /**
   * Creates a plan; the endpoint list is copied.
   *
   * @param schema the result schema
   * @param endpoints the endpoints
   * @param metadata the plan as JSON
   * @param totalRecords an estimate of the rows, -1 when unknown
   */
  public ScanPlan {
    endpoints = List.copyOf(endpoints);
  }

  /**
   * The {@code plan} object of {@link #metadata()}: {@code index_scans}, {@code full_scans},
   * {@code reason}.
   *
   * @return the plan, or a missing node when the metadata has none
   */
  public JsonNode plan() {
    JsonNode plan = metadata.get("plan");
    return plan == null ? MissingNode.getInstance() : plan;
  }

  /**
   * One part of the answer.
   *
   * @param ticket the opaque ticket for {@link ShoalEmbedded#read(byte[])} (JSON text, version 1)
   * @param plan the plan of this endpoint's log range
   */
  public record Endpoint(byte[] ticket, JsonNode plan) {}
}
