package dev.shoal.spark;

import java.util.EnumSet;
import java.util.Map;
import java.util.Set;

import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.connector.catalog.SupportsDeleteV2;
import org.apache.spark.sql.connector.catalog.SupportsRead;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.connector.read.ScanBuilder;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.types.ArrayType;
import org.apache.spark.sql.types.DataType;
import org.apache.spark.sql.types.StructField;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A shoal table (over one or several shards): batch reads with pushdown and batch appends.
 * Records are schemaless JSON, so appends accept any schema ({@code ACCEPT_ANY_SCHEMA}). On a
 * keyed table (created with {@code shoal.primary-key}) appends are upserts by key and {@code
 * DELETE FROM t WHERE ...} deletes the matching rows ({@link SupportsDeleteV2}: the {@code delete}
 * action on every shard).
 */
public final class ShoalTable implements SupportsRead, SupportsWrite, SupportsDeleteV2 {
  private final ShoalOptions options;
  private final StructType schema;
  private final boolean userSchema;

  /**
   * @param schema the daemon's schema, or the user's ({@code .schema(...)}, or the written
   *     DataFrame's) when {@code userSchema}
   */
  ShoalTable(ShoalOptions options, StructType schema, boolean userSchema) {
    this.options = options;
    this.schema = schema;
    this.userSchema = userSchema;
  }

  @Override
  public String name() {
    return options.table();
  }

  @Override
  public StructType schema() {
    return schema;
  }

  private volatile Map<String, String> properties;

  /**
   * {@code shoal.psf.NAME = KIND:ARGUMENT} for each PSF registered on the table's first shard
   * ({@code list_psfs}; {@link ShoalTableProperties}), read when Spark first asks
   * ({@code SHOW TBLPROPERTIES}, {@code DESCRIBE TABLE EXTENDED}), not when a query loads the table.
   */
  @Override
  public Map<String, String> properties() {
    Map<String, String> p = properties;
    if (p == null) {
      p = new java.util.TreeMap<>();
      try (ShoalClient client = options.connect(options.endpoints().get(0))) {
        com.fasterxml.jackson.databind.JsonNode psfs =
            client.action("list_psfs", ShoalClient.JSON.createObjectNode().put("table", options.table()), options.table());
        if (psfs != null) {
          for (com.fasterxml.jackson.databind.JsonNode psf : psfs) {
            if (!psf.path("active").asBoolean(true)) {
              continue; // deregistered; its index entries still serve older parts of the log
            }
            p.put(ShoalTableProperties.PSF_PREFIX + psf.path("name").asText(), ShoalTableProperties.psfValue(psf.path("definition")));
          }
        }
      } catch (ShoalException e) {
        if (!e.is(ShoalErrors.NOT_FOUND)) {
          throw e;
        }
      }
      properties = java.util.Collections.unmodifiableMap(p);
    }
    return p;
  }

  @Override
  public Set<TableCapability> capabilities() {
    return EnumSet.of(TableCapability.BATCH_READ, TableCapability.MICRO_BATCH_READ, TableCapability.BATCH_WRITE,
        TableCapability.ACCEPT_ANY_SCHEMA);
  }

  @Override
  public ScanBuilder newScanBuilder(CaseInsensitiveStringMap scanOptions) {
    ShoalOptions merged = options;
    StructType daemonSchema = schema;
    if (userSchema) {
      daemonSchema = ShoalDataSource.daemonSchema(merged);
      checkUserSchema(schema, daemonSchema, "");
    }
    return new ShoalScanBuilder(merged, daemonSchema, schema, scanOptions);
  }

  /** Fails naming the column and the option when the user's schema disagrees with the daemon's. */
  private void checkUserSchema(StructType user, StructType daemon, String prefix) {
    for (StructField f : user.fields()) {
      String column = prefix + f.name();
      StructField d = ShoalSchemas.fieldAt(daemon, new String[] {f.name()});
      if (d == null) {
        throw new ShoalException("shoal table '" + options.table() + "' at " + options.endpointText() + ": unknown column '"
            + column + "' (no record has it). Remove it from the schema given with .schema(...).");
      }
      checkType(f.dataType(), d.dataType(), column);
    }
  }

  private void checkType(DataType user, DataType daemon, String column) {
    if (user instanceof StructType && daemon instanceof StructType) {
      checkUserSchema((StructType) user, (StructType) daemon, column + ".");
    } else if (user instanceof ArrayType && daemon instanceof ArrayType) {
      checkType(((ArrayType) user).elementType(), ((ArrayType) daemon).elementType(), column + "[]");
    } else if (!user.sameType(daemon)) {
      throw new ShoalException("shoal table '" + options.table() + "': type mismatch for column '" + column + "': the schema given with"
          + " .schema(...) declares " + user.simpleString() + " but the daemon has " + daemon.simpleString()
          + ". Declare it " + daemon.simpleString() + " (or omit .schema(...); without .schema(...) the table's schema changed"
          + " since the DataFrame was loaded: load it again).");
    }
  }

  /** Whether shoal can evaluate every predicate exactly (the filter language, as scans push them). */
  @Override
  public boolean canDeleteWhere(Predicate[] predicates) {
    for (Predicate predicate : predicates) {
      if (ShoalV2Filters.translate(predicate, schema) == null) {
        return false;
      }
    }
    return true;
  }

  /**
   * {@code DELETE FROM t WHERE predicates}: the {@code delete} action with their conjunction on
   * every shard (each deletes its live rows that match; a keyed table only, else the daemon's
   * {@code INVALID_ARGUMENT} says so).
   */
  @Override
  public void deleteWhere(Predicate[] predicates) {
    java.util.List<String> parts = new java.util.ArrayList<>();
    for (Predicate predicate : predicates) {
      String text = ShoalV2Filters.translate(predicate, schema);
      if (text == null) {
        throw new ShoalException("shoal table '" + options.table() + "': DELETE with a condition shoal cannot evaluate: " + predicate);
      }
      parts.add("(" + text + ")");
    }
    com.fasterxml.jackson.databind.node.ObjectNode body = ShoalClient.JSON.createObjectNode().put("table", options.table());
    if (!parts.isEmpty()) {
      body.put("filter", String.join(" AND ", parts));
    }
    for (java.net.URI endpoint : options.endpoints()) {
      try (ShoalClient client = options.connect(endpoint)) {
        client.action("delete", body, options.table());
      }
    }
  }

  @Override
  public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
    return new ShoalWriteBuilder(options, info.schema());
  }
}
