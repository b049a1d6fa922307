package dev.shoal.embedded;

import java.nio.file.Files;
import java.nio.file.Path;
import java.util.List;

/**
 * Run in a child JVM by {@link NativeLoaderTest}: loads the library the way the JVM is configured
 * to, opens a store in the directory given as argument, ingests and scans one record, and prints
 * {@code loaded from <origin>} and {@code rows <n>}; on a failure prints {@code failed <code>:
 * <message>} and exits 3.
 */
public final class LoaderProbe {
  private LoaderProbe() {}

  public static void main(String[] args) throws Exception {
    try {
      NativeLoader.load();
      System.out.println("loaded from " + NativeLoader.loadedFrom());
      Path dir = args.length > 0 ? Path.of(args[0]) : Files.createTempDirectory("shoal-probe");
      try (ShoalEmbedded shoal = ShoalEmbedded.open(dir)) {
        shoal.createTable("probe");
        shoal.ingest("probe", List.of("{\"a\":1}"));
        System.out.println("rows " + shoal.scan("probe", "a = 1", List.of("a"), null, root -> { }));
      }
    } catch (ShoalEmbeddedException e) {
      System.out.println("failed " + e.code() + ": " + e.getMessage());
      System.exit(3);
    }
  }
}
