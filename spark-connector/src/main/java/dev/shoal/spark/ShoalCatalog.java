package dev.shoal.spark;

import java.net.URI;
import java.util.LinkedHashSet;
import java.util.Map;
import java.util.Set;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalClient;
import org.apache.spark.sql.catalyst.analysis.NoSuchNamespaceException;
import org.apache.spark.sql.catalyst.analysis.NoSuchTableException;
import org.apache.spark.sql.catalyst.analysis.TableAlreadyExistsException;
import org.apache.spark.sql.connector.catalog.Identifier;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCatalog;
import org.apache.spark.sql.connector.catalog.TableChange;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * A Spark catalog over the daemon's tables:
 * {@code spark.sql.catalog.shoal = dev.shoal.spark.ShoalCatalog},
 * {@code spark.sql.catalog.shoal.endpoint = grpc://host:port} (plus the other
 * {@link ShoalOptions}). {@code SHOW TABLES IN shoal} lists the tables ({@code ListFlights}, the
 * union over shards), {@code SELECT ... FROM shoal.events} reads one, {@code CREATE TABLE} and
 * {@code DROP TABLE} call the daemon's actions, {@code TBLPROPERTIES} set a table's settings and
 * PSFs ({@link ShoalTableProperties}). Tables live in the root namespace.
 */
public final class ShoalCatalog implements TableCatalog {
  private String name;
  private ShoalOptions options;

  @Override
  public void initialize(String catalogName, CaseInsensitiveStringMap properties) {
    SparkLine.check();
    this.name = catalogName;
    this.options = ShoalOptions.forCatalog(properties);
  }

  @Override
  public String name() {
    return name;
  }

  private void checkNamespace(String[] namespace) throws NoSuchNamespaceException {
    if (namespace.length != 0) {
      throw new NoSuchNamespaceException(namespace);
    }
  }

  @Override
  public Identifier[] listTables(String[] namespace) throws NoSuchNamespaceException {
    checkNamespace(namespace);
    Set<String> names = new LinkedHashSet<>();
    for (URI shard : options.endpoints()) {
      try (ShoalClient client = options.connect(shard)) {
        names.addAll(client.listTables());
      }
    }
    return names.stream().sorted().map(n -> Identifier.of(new String[0], n)).toArray(Identifier[]::new);
  }

  @Override
  public Table loadTable(Identifier ident) throws NoSuchTableException {
    if (ident.namespace().length != 0) {
      throw new NoSuchTableException(ident);
    }
    ShoalOptions tableOptions = options.withTable(ident.name());
    StructType schema;
    try {
      schema = ShoalDataSource.daemonSchema(tableOptions);
    } catch (ShoalException e) {
      if (e.is(ShoalErrors.NOT_FOUND)) {
        throw new NoSuchTableException(ident);
      }
      throw e;
    }
    return new ShoalTable(tableOptions, schema, false);
  }

  @Override
  public Table createTable(Identifier ident, StructType schema, Transform[] partitions, Map<String, String> properties)
      throws TableAlreadyExistsException, NoSuchNamespaceException {
    checkNamespace(ident.namespace());
    // Both are checked before anything is created: a bad property leaves no table behind.
    ObjectNode body = ShoalTableProperties.createTableBody(ident.name(), properties);
    Map<String, ObjectNode> psfs = ShoalTableProperties.psfs(ident.name(), properties);
    for (URI shard : options.endpoints()) {
      try (ShoalClient client = options.connect(shard)) {
        JsonNode answer = client.action("create_table", body.deepCopy(), ident.name());
        boolean created = answer == null || answer.path("created").asBoolean(true);
        if (!created && shard.equals(options.endpoints().get(0))) {
          throw new TableAlreadyExistsException(ident);
        }
        try {
          for (Map.Entry<String, ObjectNode> psf : psfs.entrySet()) {
            registerPsf(client, ident.name(), psf.getKey(), psf.getValue());
          }
        } catch (RuntimeException e) {
          // A PSF the daemon refuses (its expression is checked there) leaves no table behind.
          if (created) {
            try {
              client.action("drop_table", ShoalClient.JSON.createObjectNode().put("name", ident.name()), ident.name());
            } catch (RuntimeException dropping) {
              e.addSuppressed(dropping);
            }
          }
          throw e;
        }
      }
    }
    return new ShoalTable(options.withTable(ident.name()), schema, true);
  }

  private static void registerPsf(ShoalClient client, String table, String name, ObjectNode definition) {
    ObjectNode request = definition.deepCopy().put("table", table).put("name", name);
    client.action("register_psf", request, table);
  }

  /** The retention properties ALTER TABLE may set or unset, to their key in {@code alter_table}'s {@code retention}. */
  private static final java.util.Map<String, String> RETENTION_KEYS =
      java.util.Map.of("shoal.retention.keep-bytes", "keep_bytes", "shoal.retention.max-age-secs", "max_age_secs");

  /**
   * {@code ALTER TABLE t SET TBLPROPERTIES ('shoal.psf.NAME' = 'KIND:ARGUMENT')} registers a PSF
   * on every shard, {@code UNSET TBLPROPERTIES ('shoal.psf.NAME')} deregisters it
   * ({@link ShoalTableProperties}); {@code SET}/{@code UNSET} of {@code
   * shoal.retention.keep-bytes} and {@code shoal.retention.max-age-secs} change the table's
   * retention policy ({@code alter_table}, the other rule kept as it is). Nothing else of a
   * shoal table can be altered.
   */
  @Override
  public Table alterTable(Identifier ident, TableChange... changes) throws NoSuchTableException {
    String table = ident.name();
    java.util.Map<String, Long> retentionSet = new java.util.LinkedHashMap<>();
    java.util.Set<String> retentionUnset = new java.util.LinkedHashSet<>();
    java.util.List<TableChange> psfChanges = new java.util.ArrayList<>();
    for (TableChange change : changes) {
      String key = change instanceof TableChange.SetProperty set ? set.property()
          : change instanceof TableChange.RemoveProperty remove ? remove.property() : null;
      if (key == null) {
        throw new UnsupportedOperationException("shoal tables have no declared schema to alter (table '" + table + "')");
      }
      String lower = key.toLowerCase(java.util.Locale.ROOT);
      if (lower.startsWith(ShoalTableProperties.PSF_PREFIX)) {
        psfChanges.add(change);
      } else if (RETENTION_KEYS.containsKey(lower)) {
        if (change instanceof TableChange.SetProperty set) {
          try {
            retentionSet.put(RETENTION_KEYS.get(lower), Long.parseLong(set.value().trim()));
          } catch (NumberFormatException e) {
            throw new IllegalArgumentException("shoal table '" + table + "': property '" + key + "' must be a whole number, not '"
                + set.value() + "'", e);
          }
        } else {
          retentionUnset.add(RETENTION_KEYS.get(lower));
        }
      } else {
        throw new IllegalArgumentException("shoal table '" + table + "': only PSFs (shoal.psf.NAME) and the retention policy"
            + " (shoal.retention.keep-bytes, shoal.retention.max-age-secs) can be set or unset after CREATE TABLE, not '" + key + "'");
      }
    }
    for (URI shard : options.endpoints()) {
      try (ShoalClient client = options.connect(shard)) {
        if (!retentionSet.isEmpty() || !retentionUnset.isEmpty()) {
          JsonNode current = client.action("stats", ShoalClient.JSON.createObjectNode().put("table", table), table).path("retention");
          ObjectNode retention = ShoalClient.JSON.createObjectNode();
          for (String rule : RETENTION_KEYS.values()) {
            if (retentionSet.containsKey(rule)) {
              retention.put(rule, retentionSet.get(rule));
            } else if (!retentionUnset.contains(rule) && current.path(rule).isNumber()) {
              retention.put(rule, current.path(rule).asLong());
            }
          }
          ObjectNode request = ShoalClient.JSON.createObjectNode().put("table", table);
          request.set("retention", retention);
          client.action("alter_table", request, table);
        }
        for (TableChange change : psfChanges) {
          if (change instanceof TableChange.SetProperty set) {
            String name = ShoalTableProperties.psfName(table, set.property());
            registerPsf(client, table, name, ShoalTableProperties.psfDefinition(table, name, set.value()));
          } else {
            String name = ShoalTableProperties.psfName(table, ((TableChange.RemoveProperty) change).property());
            client.action("deregister_psf", ShoalClient.JSON.createObjectNode().put("table", table).put("name", name), table);
          }
        }
      }
    }
    return loadTable(ident);
  }

  @Override
  public boolean dropTable(Identifier ident) {
    boolean dropped = false;
    for (URI shard : options.endpoints()) {
      try (ShoalClient client = options.connect(shard)) {
        client.action("drop_table", ShoalClient.JSON.createObjectNode().put("name", ident.name()), ident.name());
        dropped = true;
      } catch (ShoalException e) {
        if (!e.is(ShoalErrors.NOT_FOUND)) {
          throw e;
        }
      }
    }
    return dropped;
  }

  @Override
  public void renameTable(Identifier oldIdent, Identifier newIdent) {
    throw new UnsupportedOperationException("shoal cannot rename tables (table '" + oldIdent.name() + "')");
  }
}
