package dev.shoal.spark;

import java.io.IOException;
import java.net.URI;
import java.net.URISyntaxException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.NullNode;
import com.google.protobuf.ByteString;
import com.google.protobuf.Descriptors;
import com.google.protobuf.Message;
import com.google.protobuf.UnknownFieldSet;
import org.apache.arrow.flight.FlightEndpoint;
import org.apache.arrow.flight.FlightInfo;
import org.apache.arrow.flight.impl.Flight;

/**
 * A query plan of one shard: the {@link FlightInfo} (result schema, endpoints with tickets) and
 * shoal's plan JSON from the {@code app_metadata} of the FlightInfo and of each endpoint.
 */
public final class ShoalFlightPlan {
  private static final int FLIGHT_INFO_APP_METADATA = 7;
  private static final int FLIGHT_ENDPOINT_APP_METADATA = 4;

  private final URI shard;
  private final FlightInfo info;
  private final JsonNode metadata;
  private final List<JsonNode> endpointMetadata;

  private ShoalFlightPlan(URI shard, FlightInfo info, JsonNode metadata, List<JsonNode> endpointMetadata) {
    this.shard = shard;
    this.info = info;
    this.metadata = metadata;
    this.endpointMetadata = endpointMetadata;
  }

  static ShoalFlightPlan fromProtocol(URI shard, Flight.FlightInfo proto) {
    FlightInfo info;
    try {
      info = FlightInfo.deserialize(proto.toByteString().asReadOnlyByteBuffer());
    } catch (IOException | URISyntaxException e) {
      throw new ShoalException("shoal at " + shard + ": cannot read the FlightInfo: " + e, e);
    }
    JsonNode metadata = appMetadata(proto, FLIGHT_INFO_APP_METADATA);
    List<JsonNode> endpoints = new ArrayList<>();
    for (Flight.FlightEndpoint endpoint : proto.getEndpointList()) {
      endpoints.add(appMetadata(endpoint, FLIGHT_ENDPOINT_APP_METADATA));
    }
    return new ShoalFlightPlan(shard, info, metadata, Collections.unmodifiableList(endpoints));
  }

  /**
   * The {@code app_metadata} bytes (field {@code number}) of a Flight message as JSON. Arrow Java
   * 12's generated Flight.proto predates the field, so there it is an unknown field; Arrow Java
   * 14 and later (Spark 4.x builds) know it. Protobuf reflection reads it in both cases.
   */
  private static JsonNode appMetadata(Message message, int number) {
    ByteString value = ByteString.EMPTY;
    Descriptors.FieldDescriptor field = message.getDescriptorForType().findFieldByNumber(number);
    if (field != null && field.getJavaType() == Descriptors.FieldDescriptor.JavaType.BYTE_STRING) {
      value = (ByteString) message.getField(field);
    } else {
      UnknownFieldSet fields = message.getUnknownFields();
      if (fields.hasField(number) && !fields.getField(number).getLengthDelimitedList().isEmpty()) {
        value = fields.getField(number).getLengthDelimitedList().get(0);
      }
    }
    if (value.isEmpty()) {
      return NullNode.getInstance();
    }
    try {
      return ShoalClient.JSON.readTree(value.toByteArray());
    } catch (IOException e) {
      return NullNode.getInstance();
    }
  }

  /** The shard (the {@code endpoint} option's location) that planned this. */
  public URI shard() {
    return shard;
  }

  public FlightInfo info() {
    return info;
  }

  public List<FlightEndpoint> endpoints() {
    return info.getEndpoints();
  }

  /** The FlightInfo's plan JSON ({@code {"table", "from", "to", "exact", "plan": {...}}}). */
  public JsonNode metadata() {
    return metadata;
  }

  /** The plan JSON of endpoint {@code i} (its log range's index and full scans). */
  public JsonNode endpointMetadata(int i) {
    return i < endpointMetadata.size() ? endpointMetadata.get(i) : NullNode.getInstance();
  }

  /** Whether the daemon evaluated the whole filter on every row it returns. */
  public boolean exact() {
    return metadata.path("exact").asBoolean(false);
  }
}
