package dev.shoal.spark;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import dev.shoal.client.ShoalEndpoint;
import java.nio.file.Path;
import java.util.Map;
import org.junit.jupiter.api.Test;

/** The {@code endpoint} option's embedded forms name the directory the client opens. */
class ShoalOptionsTest {
  private static ShoalOptions options(String endpoint) {
    return ShoalOptions.forTable(Map.of("endpoint", endpoint, "table", "t"));
  }

  @Test
  void every_spelling_of_an_absolute_embedded_directory_names_it() {
    for (String endpoint : new String[] {"embedded:/tmp/shoal-x", "embedded:///tmp/shoal-x", "embedded:////tmp/shoal-x", "EMBEDDED:///tmp/shoal-x"}) {
      ShoalOptions options = options(endpoint);
      assertEquals(1, options.endpoints().size(), endpoint);
      String text = ShoalEndpoint.text(options.endpoints().get(0));
      assertEquals(Path.of("/tmp/shoal-x"), ShoalEndpoint.embeddedPath(text), endpoint + " -> " + text);
      assertEquals(ShoalEndpoint.embeddedPath(endpoint), ShoalEndpoint.embeddedPath(text), endpoint);
    }
  }

  @Test
  void an_embedded_endpoint_naming_a_host_is_refused() {
    String m = assertThrows(IllegalArgumentException.class, () -> options("embedded://somehost/data")).getMessage();
    assertTrue(m.contains("option 'endpoint'") && m.contains("names a host"), m);
  }
}
