package dev.shoal.client;

import java.net.URI;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import org.apache.arrow.vector.types.pojo.Schema;

/**
 * A query plan of one shard: what {@code GetFlightInfo} answers, from either transport — the
 * result schema, the endpoints (ticket, location, the plan of the endpoint's log range) and
 * shoal's plan JSON ({@code app_metadata} of the FlightInfo).
 */
public final class ShoalFlightPlan {
  private final String shard;
  private final Schema schema;
  private final JsonNode metadata;
  private final List<Endpoint> endpoints;

  /**
   * @param shard the endpoint (a shard's location, or an embedded directory) that planned it
   * @param metadata the plan JSON, or null
   */
  public ShoalFlightPlan(String shard, Schema schema, JsonNode metadata, List<Endpoint> endpoints) {
    this.shard = shard;
    this.schema = schema;
    this.metadata = metadata == null ? NullNode.getInstance() : metadata;
    this.endpoints = List.copyOf(endpoints);
  }

  /** One endpoint: where to read it, its ticket, and the plan of its log range. */
  public static final class Endpoint {
    private final byte[] ticket;
    private final URI location;
    private final JsonNode metadata;

    /**
     * @param location where to {@code DoGet} the ticket, or null for the shard that planned it
     * @param metadata the endpoint's plan JSON ({@code index_scans}, {@code full_scans}), or null
     */
    public Endpoint(byte[] ticket, URI location, JsonNode metadata) {
      this.ticket = ticket;
      this.location = location;
      this.metadata = metadata == null ? NullNode.getInstance() : metadata;
    }

    public byte[] ticket() {
      return ticket;
    }

    /** The endpoint's own location, or null: read it at the shard that planned it. */
    public URI location() {
      return location;
    }

    /** The plan JSON of the endpoint's log range (its index and full scans). */
    public JsonNode metadata() {
      return metadata;
    }
  }

  /** The endpoint (a shard's location, or an embedded directory) that planned this. */
  public String shard() {
    return shard;
  }

  /** The result schema. */
  public Schema schema() {
    return schema;
  }

  public List<Endpoint> endpoints() {
    return endpoints;
  }

  /** The FlightInfo's plan JSON ({@code {"table", "from", "to", "exact", "plan": {...}}}). */
  public JsonNode metadata() {
    return metadata;
  }

  /** Whether shoal evaluated the whole filter on every row it returns. */
  public boolean exact() {
    return metadata.path("exact").asBoolean(false);
  }
}
