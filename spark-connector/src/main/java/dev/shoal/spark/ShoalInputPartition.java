package dev.shoal.spark;

import java.net.URI;

import dev.shoal.client.ShoalFlightPlan;
import org.apache.spark.sql.connector.read.InputPartition;

/**
 * One endpoint of a query's FlightInfo: where to {@code DoGet} (the endpoint's location, else
 * the shard it was planned on), its ticket, and how many index and full scans its log range uses.
 */
public final class ShoalInputPartition implements InputPartition {
  private static final long serialVersionUID = 1L;

  private final URI location;
  private final byte[] ticket;
  private final int indexScans;
  private final int fullScans;

  /** The partition of one endpoint of a shard's plan, read where the endpoint says (or at the shard). */
  static ShoalInputPartition of(ShoalFlightPlan plan, ShoalFlightPlan.Endpoint endpoint) {
    URI location = endpoint.location() == null ? ShoalOptions.endpointUri(plan.shard()) : endpoint.location();
    return new ShoalInputPartition(location, endpoint.ticket(), endpoint.metadata().path("index_scans").size(),
        endpoint.metadata().path("full_scans").size());
  }

  ShoalInputPartition(URI location, byte[] ticket, int indexScans, int fullScans) {
    this.location = location;
    this.ticket = ticket;
    this.indexScans = indexScans;
    this.fullScans = fullScans;
  }

  public URI location() {
    return location;
  }

  /**
   * The host of the node holding this endpoint's data (its Flight location's host), so that
   * Spark schedules the task on an executor there when it has one (data locality, as for HDFS
   * blocks or Kafka partitions); none for the embedded engine, or a location without a host.
   */
  @Override
  public String[] preferredLocations() {
    String host = location == null ? null : location.getHost();
    return host == null || host.isEmpty() ? new String[0] : new String[] {host};
  }

  public byte[] ticket() {
    return ticket;
  }

  public int indexScans() {
    return indexScans;
  }

  public int fullScans() {
    return fullScans;
  }
}
