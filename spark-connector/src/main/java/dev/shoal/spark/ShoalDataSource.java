package dev.shoal.spark;

import java.net.URI;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.sources.DataSourceRegister;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * {@code spark.read.format("shoal")} / {@code df.write.format("shoal")}: the table named by option
 * {@code table} on the daemon(s) of option {@code endpoint} (see {@link ShoalOptions}). The
 * schema is the daemon's ({@code GetSchema}; the union over shards), or the one given with
 * {@code .schema(...)}.
 */
public final class ShoalDataSource implements TableProvider, DataSourceRegister {
  @Override
  public String shortName() {
    return "shoal";
  }

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    SparkLine.check();
    return daemonSchema(ShoalOptions.forTable(options));
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    SparkLine.check();
    ShoalOptions options = ShoalOptions.forTable(properties);
    // Spark passes back the schema inferSchema returned, or the user's/the written DataFrame's.
    return new ShoalTable(options, schema, true);
  }

  /** The table's schema on the daemon: the union of every shard's {@code GetSchema}. */
  static StructType daemonSchema(ShoalOptions options) {
    List<StructType> schemas = new ArrayList<>();
    for (URI shard : options.endpoints()) {
      try (ShoalClient client = options.connect(shard)) {
        schemas.add(ShoalSchemas.toSpark(client.getSchema(options.table())));
      }
    }
    return ShoalSchemas.union(schemas);
  }
}
