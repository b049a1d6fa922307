package dev.shoal.demo.flink;

import java.nio.charset.StandardCharsets;
import java.util.Iterator;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ObjectNode;
import org.apache.arrow.flight.Action;
import org.apache.arrow.flight.FlightClient;
import org.apache.arrow.flight.Location;
import org.apache.arrow.flight.Result;
import org.apache.arrow.memory.BufferAllocator;
import org.apache.arrow.memory.RootAllocator;

/**
 * The administrative actions of the shoal Flight protocol the demo job needs ({@code create_table},
 * {@code register_psf}, {@code stats}; docs/protocol.md): JSON body in, the first result's JSON out.
 * The sink itself has its own client in the connector.
 */
final class ShoalAdmin implements AutoCloseable {
  static final ObjectMapper JSON = new ObjectMapper();

  private final String endpoint;
  private final BufferAllocator allocator = new RootAllocator(Long.MAX_VALUE);
  private final FlightClient client;

  ShoalAdmin(String endpoint) {
    this.endpoint = endpoint;
    this.client = FlightClient.builder(allocator, new Location(java.net.URI.create(endpoint))).build();
  }

  JsonNode action(String name, ObjectNode body) {
    try {
      Iterator<Result> results = client.doAction(new Action(name, JSON.writeValueAsBytes(body)));
      JsonNode first = null;
      while (results.hasNext()) {
        byte[] bytes = results.next().getBody();
        if (first == null) {
          first = JSON.readTree(new String(bytes, StandardCharsets.UTF_8));
        }
      }
      return first == null ? JSON.createObjectNode() : first;
    } catch (java.io.IOException e) {
      throw new IllegalStateException("shoal at " + endpoint + ": action " + name + ": cannot encode or read JSON", e);
    } catch (RuntimeException e) {
      throw new IllegalStateException("shoal at " + endpoint + ": action " + name + " " + body + " failed: " + e.getMessage(), e);
    }
  }

  JsonNode createTableIfNotExists(String table) {
    return action("create_table", JSON.createObjectNode().put("name", table).put("if_not_exists", true));
  }

  JsonNode stats(String table) {
    return action("stats", JSON.createObjectNode().put("table", table));
  }

  JsonNode registerPsf(String table, ObjectNode definition) {
    ObjectNode body = definition.deepCopy();
    body.put("table", table);
    return action("register_psf", body);
  }

  /**
   * Waits until the backfill of every registered PSF of {@code table} is done (they cover the
   * records ingested before them too: docs/protocol.md, register_psf); returns the lowest
   * address they cover from.
   */
  long waitForBackfills(String table, java.time.Duration timeout) throws InterruptedException {
    long deadline = System.nanoTime() + timeout.toNanos();
    while (true) {
      JsonNode psfs = action("list_psfs", JSON.createObjectNode().put("table", table));
      boolean done = true;
      long from = Long.MAX_VALUE;
      for (JsonNode psf : psfs) {
        if (!psf.path("active").asBoolean()) {
          continue;
        }
        JsonNode backfill = psf.path("backfill");
        done &= backfill.isNull() || backfill.isMissingNode() || backfill.path("done").asBoolean();
        from = Math.min(from, psf.path("coverage").path("from").asLong());
      }
      if (done) {
        return from;
      }
      if (System.nanoTime() > deadline) {
        throw new IllegalStateException("the PSFs' backfills of " + table + " did not finish in " + timeout + ": " + psfs);
      }
      Thread.sleep(100);
    }
  }

  @Override
  public void close() throws InterruptedException {
    client.close();
    allocator.close();
  }
}
