package dev.shoal.flink.catalog;

import java.util.ArrayList;
import java.util.HashMap;
import java.util.LinkedHashSet;
import java.util.List;
import java.util.Map;
import java.util.Set;
import java.util.concurrent.ConcurrentHashMap;

import com.fasterxml.jackson.databind.JsonNode;
import dev.shoal.client.ShoalEndpoint;
import dev.shoal.flink.common.ShoalClientOptions;
import dev.shoal.flink.common.ShoalErrors;
import dev.shoal.flink.common.ShoalTableClient;
import dev.shoal.flink.table.ShoalConnectorOptions;
import org.apache.arrow.vector.types.pojo.ArrowType;
import org.apache.arrow.vector.types.pojo.Field;
import org.apache.flink.table.api.DataTypes;
import org.apache.flink.table.api.Schema;
import org.apache.flink.table.catalog.CatalogBaseTable;
import org.apache.flink.table.catalog.CatalogTable;
import org.apache.flink.table.catalog.GenericInMemoryCatalog;
import org.apache.flink.table.catalog.ObjectPath;
import org.apache.flink.table.catalog.exceptions.CatalogException;
import org.apache.flink.table.catalog.exceptions.DatabaseNotExistException;
import org.apache.flink.table.catalog.exceptions.TableAlreadyExistException;
import org.apache.flink.table.catalog.exceptions.TableNotExistException;
import org.apache.flink.table.types.DataType;

/**
 * A Flink catalog over a shoal endpoint's tables: {@code CREATE CATALOG shoal WITH ('type' =
 * 'shoal', 'endpoint' = 'grpc://host:port')} ({@link ShoalCatalogFactory}). Its one database
 * ({@code default-database}, default {@code default}) lists the endpoint's tables
 * ({@code ListFlights}) with their inferred schemas ({@code GetSchema}), as tables of connector
 * {@code shoal} ({@code endpoint}, {@code table}, {@code token} set: like the password of Flink's
 * JDBC catalog, the token shows in {@code SHOW CREATE TABLE}), so that {@code INSERT INTO
 * shoal.`default`.events ...} needs no {@code CREATE TABLE}. {@code CREATE TABLE} in it calls
 * {@code create_table}, {@code DROP TABLE} {@code drop_table}.
 *
 * <p>Schemas are inferred from the records a table holds: a table with none has no columns yet. A
 * table created through this catalog keeps the columns it was declared with for the catalog's
 * lifetime (the daemon stores no declared schema); its inferred columns, once records landed, come
 * first and win. Types: strings STRING, integers BIGINT, other numbers DOUBLE, booleans BOOLEAN,
 * objects ROW, arrays ARRAY, a path with mixed JSON types STRING (JSON text). A {@code SELECT} from
 * these tables reads through the connector's source ({@code ShoalDynamicSource}). Views,
 * functions, partitions and statistics are Flink's in-memory ones.
 */
public final class ShoalCatalog extends GenericInMemoryCatalog {
  private final String endpoint;
  private final ShoalClientOptions clientOptions;
  /** Columns declared by {@code CREATE TABLE} through this catalog, by table. */
  private final Map<String, Schema> declared = new ConcurrentHashMap<>();

  /**
   * @param name the catalog's name in Flink
   * @param defaultDatabase the name of its one database
   * @param endpoint {@code grpc://host:port}, {@code grpc+tls://host:port}, {@code host:port} or
   *     {@code embedded:/path}
   * @param token bearer token, or null
   */
  public ShoalCatalog(String name, String defaultDatabase, String endpoint, String token) {
    super(name, defaultDatabase);
    ShoalEndpoint.validate(endpoint);
    this.endpoint = endpoint;
    this.clientOptions = ShoalClientOptions.of(token, ShoalConnectorOptions.REQUEST_TIMEOUT.defaultValue());
  }

  /** The catalog's connection, from {@link #open} to {@link #close}. */
  private ShoalTableClient client;

  private interface Call<T> {
    T run(ShoalTableClient client) throws Exception;
  }

  @Override
  public void open() {
    super.open();
    try {
      client = ShoalTableClient.open(endpoint, "", clientOptions);
    } catch (RuntimeException e) {
      throw new CatalogException("shoal catalog '" + getName() + "': cannot open " + endpoint + ": " + e.getMessage(), e);
    }
  }

  @Override
  public void close() {
    try {
      if (client != null) {
        client.close();
      }
    } catch (InterruptedException e) {
      Thread.currentThread().interrupt();
    } finally {
      client = null;
      super.close();
    }
  }

  private synchronized <T> T call(String table, Call<T> call) {
    if (client == null) {
      throw new CatalogException("shoal catalog '" + getName() + "' is not open");
    }
    try {
      return call.run(client);
    } catch (CatalogException e) {
      throw e;
    } catch (Exception e) {
      throw new CatalogException("shoal catalog '" + getName() + "' at " + endpoint + (table.isEmpty() ? "" : ", table '" + table + "'")
          + ": " + ShoalErrors.describe(e), e);
    }
  }

  private void checkDatabase(String database) throws DatabaseNotExistException {
    if (!getDefaultDatabase().equals(database)) {
      throw new DatabaseNotExistException(getName(), database);
    }
  }

  @Override
  public List<String> listTables(String databaseName) throws DatabaseNotExistException {
    checkDatabase(databaseName);
    Set<String> names = new LinkedHashSet<>(call("", ShoalTableClient::listTables));
    names.addAll(super.listTables(databaseName)); // views
    return new ArrayList<>(names);
  }

  @Override
  public boolean tableExists(ObjectPath path) {
    return super.tableExists(path) || daemonSchema(path) != null;
  }

  /** The table's schema on the endpoint ({@code GetSchema}); null when there is no such table. */
  private org.apache.arrow.vector.types.pojo.Schema daemonSchema(ObjectPath path) {
    if (!getDefaultDatabase().equals(path.getDatabaseName())) {
      return null;
    }
    String table = path.getObjectName();
    return call(table, c -> {
      try {
        return c.schema(table);
      } catch (RuntimeException e) {
        if ("NOT_FOUND".equals(ShoalErrors.code(e))) {
          return null;
        }
        throw e;
      }
    });
  }

  @Override
  public CatalogBaseTable getTable(ObjectPath path) throws TableNotExistException {
    if (super.tableExists(path)) {
      return super.getTable(path); // a view
    }
    org.apache.arrow.vector.types.pojo.Schema arrow = daemonSchema(path);
    if (arrow == null) {
      throw new TableNotExistException(getName(), path);
    }
    String table = path.getObjectName();
    Schema.Builder schema = Schema.newBuilder();
    Set<String> seen = new LinkedHashSet<>();
    for (Field field : arrow.getFields()) {
      schema.column(field.getName(), toFlink(field));
      seen.add(field.getName());
    }
    Schema declaredColumns = declared.get(table);
    if (declaredColumns != null) {
      for (Schema.UnresolvedColumn column : declaredColumns.getColumns()) {
        if (!seen.contains(column.getName()) && column instanceof Schema.UnresolvedPhysicalColumn physical) {
          schema.column(column.getName(), physical.getDataType());
        }
      }
    }
    Map<String, String> options = new HashMap<>();
    options.put("connector", "shoal");
    options.put(ShoalConnectorOptions.ENDPOINT.key(), endpoint);
    options.put(ShoalConnectorOptions.TABLE.key(), table);
    if (clientOptions.token() != null) {
      options.put(ShoalConnectorOptions.TOKEN.key(), clientOptions.token());
    }
    return CatalogTable.newBuilder()
        .schema(schema.build())
        .comment("shoal table '" + table + "' at " + endpoint + " (schema inferred from its records)")
        .options(options)
        .build();
  }

  /** A Flink type for an Arrow field of the daemon's schema (see the class comment). */
  static DataType toFlink(Field field) {
    if ("true".equals(field.getMetadata().get("shoal.json_text"))) {
      return DataTypes.STRING();
    }
    ArrowType type = field.getType();
    return switch (type.getTypeID()) {
      case Utf8, LargeUtf8, Null -> DataTypes.STRING();
      case Int -> ((ArrowType.Int) type).getBitWidth() <= 32 ? DataTypes.INT() : DataTypes.BIGINT();
      case FloatingPoint -> DataTypes.DOUBLE();
      case Bool -> DataTypes.BOOLEAN();
      case Struct -> {
        List<DataTypes.Field> fields = new ArrayList<>();
        for (Field child : field.getChildren()) {
          fields.add(DataTypes.FIELD(child.getName(), toFlink(child)));
        }
        yield fields.isEmpty() ? DataTypes.STRING() : DataTypes.ROW(fields.toArray(new DataTypes.Field[0]));
      }
      case List, LargeList -> DataTypes.ARRAY(toFlink(field.getChildren().get(0)));
      default -> DataTypes.STRING();
    };
  }

  @Override
  public void createTable(ObjectPath path, CatalogBaseTable table, boolean ignoreIfExists)
      throws TableAlreadyExistException, DatabaseNotExistException {
    checkDatabase(path.getDatabaseName());
    if (table.getTableKind() == CatalogBaseTable.TableKind.VIEW) {
      super.createTable(path, table, ignoreIfExists);
      return;
    }
    String name = path.getObjectName();
    JsonNode answer = call(name, client -> client.createTableIfNotExists(name));
    if (answer != null && !answer.path("created").asBoolean(true) && !ignoreIfExists) {
      throw new TableAlreadyExistException(getName(), path);
    }
    declared.put(name, table.getUnresolvedSchema());
  }

  @Override
  public void dropTable(ObjectPath path, boolean ignoreIfNotExists) throws TableNotExistException {
    if (super.tableExists(path)) {
      super.dropTable(path, ignoreIfNotExists);
      return;
    }
    if (!tableExists(path)) {
      if (ignoreIfNotExists) {
        return;
      }
      throw new TableNotExistException(getName(), path);
    }
    String name = path.getObjectName();
    call(name, client -> client.action("drop_table", ShoalTableClient.JSON.createObjectNode().put("table", name)));
    declared.remove(name);
  }

  @Override
  public void renameTable(ObjectPath path, String newName, boolean ignoreIfNotExists) {
    throw new CatalogException("shoal cannot rename tables (table '" + path.getObjectName() + "')");
  }

  @Override
  public void alterTable(ObjectPath path, CatalogBaseTable newTable, boolean ignoreIfNotExists) {
    throw new CatalogException("shoal tables have no declared schema to alter (table '" + path.getObjectName() + "')");
  }
}
