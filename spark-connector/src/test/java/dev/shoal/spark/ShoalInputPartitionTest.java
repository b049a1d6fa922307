package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;

import java.net.URI;
import org.junit.jupiter.api.Test;

/** An input partition's preferred location is the host of the node its endpoint names. */
class ShoalInputPartitionTest {
  private static String[] preferred(String location) {
    return new ShoalInputPartition(URI.create(location), new byte[0], 0, 0).preferredLocations();
  }

  @Test
  void theEndpointsHostIsThePreferredLocation() {
    assertArrayEquals(new String[] {"shoal-2.shoal.default.svc"}, preferred("grpc://shoal-2.shoal.default.svc:50051"));
    assertArrayEquals(new String[] {"10.0.0.7"}, preferred("grpc+tls://10.0.0.7:50051"));
    assertArrayEquals(new String[0], preferred("embedded:/var/lib/shoal"));
    assertArrayEquals(new String[0], new ShoalInputPartition(null, new byte[0], 0, 0).preferredLocations());
  }
}
