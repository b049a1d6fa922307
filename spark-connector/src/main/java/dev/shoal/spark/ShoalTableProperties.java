package dev.shoal.spark;

import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import dev.shoal.client.ShoalClient;

/**
 * Spark SQL table properties ({@code CREATE TABLE ... TBLPROPERTIES}, {@code ALTER TABLE ... SET /
 * UNSET TBLPROPERTIES}, {@code SHOW TBLPROPERTIES}) mapped onto the daemon's actions
 * ({@code create_table}, {@code register_psf}, {@code deregister_psf}, {@code list_psfs};
 * docs/protocol.md).
 *
 * <p>Settings at creation ({@link #SETTINGS}; each the {@code create_table} key it names):
 * {@code shoal.durability} ({@code none} | {@code group_commit} | {@code fsync}),
 * {@code shoal.group-commit-ms}, {@code shoal.on-invalid-json} ({@code reject} | {@code skip}),
 * {@code shoal.memory-budget-bytes}, {@code shoal.columnar.enabled},
 * {@code shoal.columnar.file-log-bytes}, {@code shoal.columnar.row-group-rows},
 * {@code shoal.columnar.codec}, {@code shoal.columnar.idle-ms}, {@code shoal.columnar.cache-bytes},
 * {@code shoal.retention.keep-bytes},
 * {@code shoal.retention.max-age-secs} (the table's retention policy, Kafka's {@code
 * retention.bytes}/{@code retention.ms}), {@code shoal.primary-key} (a keyed table: its key's
 * fields, comma-separated; appends then upsert by key and {@code DELETE FROM} deletes). The daemon checks their values and names the key it
 * refuses.
 *
 * <p>PSFs, at creation or any time after: {@code shoal.psf.NAME = 'KIND:ARGUMENT'} registers the
 * PSF {@code NAME}, {@code UNSET TBLPROPERTIES ('shoal.psf.NAME')} deregisters it. The value is
 * {@code projection:PATH}, {@code predicate:SQL EXPRESSION}, {@code range:PATH:B1,B2,...} (ascending
 * numbers) or {@code composite:PATH,PATH,...}. {@code SHOW TBLPROPERTIES} lists the registered
 * PSFs the same way. Any other {@code shoal.*} key is refused, naming the keys there are; keys
 * without the prefix (Spark's own, such as {@code provider} or {@code owner}) are ignored.
 */
final class ShoalTableProperties {
  private ShoalTableProperties() {}

  /** The prefix of every shoal property. */
  static final String PREFIX = "shoal.";
  /** The prefix of PSF properties: {@code shoal.psf.NAME}. */
  static final String PSF_PREFIX = "shoal.psf.";

  /**
   * Creation settings: property key to {@code create_table} key ("columnar." and "retention." keys go
   * into its {@code columnar} and {@code retention} objects).
   */
  static final Map<String, String> SETTINGS = settings();

  private static Map<String, String> settings() {
    Map<String, String> m = new LinkedHashMap<>();
    m.put("shoal.durability", "durability");
    m.put("shoal.group-commit-ms", "group_commit_ms");
    m.put("shoal.on-invalid-json", "on_invalid_json");
    m.put("shoal.memory-budget-bytes", "memory_budget_bytes");
    m.put("shoal.columnar.enabled", "columnar.enabled");
    m.put("shoal.columnar.file-log-bytes", "columnar.file_log_bytes");
    m.put("shoal.columnar.row-group-rows", "columnar.row_group_rows");
    m.put("shoal.columnar.codec", "columnar.codec");
    m.put("shoal.columnar.idle-ms", "columnar.idle_ms");
    m.put("shoal.columnar.cache-bytes", "columnar.cache_bytes");
    m.put("shoal.retention.keep-bytes", "retention.keep_bytes");
    m.put("shoal.retention.max-age-secs", "retention.max_age_secs");
    m.put("shoal.primary-key", "primary_key");
    return m;
  }

  /**
   * The {@code create_table} body for {@code table} with the creation settings among
   * {@code properties}.
   *
   * @throws IllegalArgumentException for an unknown {@code shoal.*} key or a number that is not one
   */
  static ObjectNode createTableBody(String table, Map<String, String> properties) {
    ObjectNode body = ShoalClient.JSON.createObjectNode().put("name", table).put("if_not_exists", true);
    for (Map.Entry<String, String> e : properties.entrySet()) {
      String key = e.getKey().toLowerCase(Locale.ROOT);
      if (!key.startsWith(PREFIX) || key.startsWith(PSF_PREFIX)) {
        continue;
      }
      String target = SETTINGS.get(key);
      if (target == null) {
        throw unknown(table, e.getKey());
      }
      ObjectNode into = body;
      int dot = target.indexOf('.');
      if (dot > 0) {
        String object = target.substring(0, dot);
        into = body.has(object) ? (ObjectNode) body.get(object) : body.putObject(object);
        target = target.substring(dot + 1);
      }
      String value = e.getValue().trim();
      switch (target) {
        case "primary_key" -> {
          // A keyed table: its key's fields, comma-separated dotted paths.
          com.fasterxml.jackson.databind.node.ArrayNode fields = into.putArray(target);
          for (String field : value.split(",")) {
            if (field.isBlank()) {
              throw new IllegalArgumentException("shoal table '" + table + "': property '" + e.getKey()
                  + "' must list the key's fields, comma-separated (e.g. 'id' or 'tenant,id'), not '" + value + "'");
            }
            fields.add(field.trim());
          }
        }
        case "durability", "on_invalid_json", "codec" -> {
          List<String> allowed = switch (target) {
            case "durability" -> List.of("none", "group_commit", "fsync");
            case "on_invalid_json" -> List.of("reject", "skip");
            default -> List.of("zstd", "lz4", "none");
          };
          String lower = value.toLowerCase(Locale.ROOT);
          if (!allowed.contains(lower)) {
            throw new IllegalArgumentException("shoal table '" + table + "': property '" + e.getKey() + "' must be one of "
                + String.join(", ", allowed) + ", not '" + value + "'");
          }
          into.put(target, lower);
        }
        case "enabled" -> {
          if (!value.equalsIgnoreCase("true") && !value.equalsIgnoreCase("false")) {
            throw new IllegalArgumentException("shoal table '" + table + "': property '" + e.getKey() + "' must be true or false, not '" + value + "'");
          }
          into.put(target, Boolean.parseBoolean(value.toLowerCase(Locale.ROOT)));
        }
        default -> {
          try {
            into.put(target, Long.parseLong(value));
          } catch (NumberFormatException nfe) {
            throw new IllegalArgumentException("shoal table '" + table + "': property '" + e.getKey() + "' must be a whole number, not '" + value + "'");
          }
        }
      }
    }
    return body;
  }

  /** The PSFs among {@code properties}: name to its {@code register_psf} definition. */
  static Map<String, ObjectNode> psfs(String table, Map<String, String> properties) {
    Map<String, ObjectNode> out = new LinkedHashMap<>();
    for (Map.Entry<String, String> e : properties.entrySet()) {
      if (e.getKey().toLowerCase(Locale.ROOT).startsWith(PSF_PREFIX)) {
        String name = psfName(table, e.getKey());
        out.put(name, psfDefinition(table, name, e.getValue()));
      }
    }
    return out;
  }

  /** The PSF name of a {@code shoal.psf.NAME} key. */
  static String psfName(String table, String key) {
    String name = key.substring(PSF_PREFIX.length());
    if (name.isEmpty()) {
      throw new IllegalArgumentException("shoal table '" + table + "': property '" + key + "' names no PSF (shoal.psf.NAME)");
    }
    return name;
  }

  /**
   * The {@code register_psf} definition ({@code kind} and its arguments) of a property value
   * {@code KIND:ARGUMENT}.
   *
   * @throws IllegalArgumentException naming the PSF and the forms there are
   */
  static ObjectNode psfDefinition(String table, String name, String value) {
    int colon = value.indexOf(':');
    String kind = colon < 0 ? "" : value.substring(0, colon).trim().toLowerCase(Locale.ROOT);
    String argument = colon < 0 ? "" : value.substring(colon + 1).trim();
    ObjectNode spec = ShoalClient.JSON.createObjectNode().put("kind", kind);
    switch (kind) {
      case "projection" -> spec.put("field", argument);
      case "predicate" -> spec.put("expr", argument);
      case "composite" -> {
        ArrayNode fields = spec.putArray("fields");
        for (String f : argument.split(",")) {
          fields.add(f.trim());
        }
      }
      case "range" -> {
        int last = argument.lastIndexOf(':');
        if (last < 0) {
          throw badPsf(table, name, value);
        }
        spec.put("field", argument.substring(0, last).trim());
        ArrayNode boundaries = spec.putArray("boundaries");
        for (String b : argument.substring(last + 1).split(",")) {
          try {
            boundaries.add(Double.parseDouble(b.trim()));
          } catch (NumberFormatException e) {
            throw badPsf(table, name, value);
          }
        }
      }
      default -> throw badPsf(table, name, value);
    }
    if (argument.isEmpty()) {
      throw badPsf(table, name, value);
    }
    return spec;
  }

  /** A registered PSF's definition (from {@code list_psfs}) as a property value. */
  static String psfValue(JsonNode definition) {
    String kind = definition.path("kind").asText();
    return switch (kind) {
      case "projection" -> "projection:" + definition.path("field").asText();
      case "predicate" -> "predicate:" + definition.path("expr").asText();
      case "composite" -> {
        List<String> fields = new ArrayList<>();
        definition.path("fields").forEach(f -> fields.add(f.asText()));
        yield "composite:" + String.join(",", fields);
      }
      case "range" -> {
        List<String> bounds = new ArrayList<>();
        definition.path("boundaries").forEach(b -> bounds.add(b.asText()));
        yield "range:" + definition.path("field").asText() + ":" + String.join(",", bounds);
      }
      default -> kind + ":" + definition;
    };
  }

  private static IllegalArgumentException badPsf(String table, String name, String value) {
    return new IllegalArgumentException("shoal table '" + table + "': PSF property 'shoal.psf." + name + "' = '" + value
        + "' is not projection:PATH, predicate:EXPRESSION, range:PATH:B1,B2,... or composite:PATH,PATH,...");
  }

  private static IllegalArgumentException unknown(String table, String key) {
    return new IllegalArgumentException("shoal table '" + table + "': unknown property '" + key + "'; shoal's are "
        + String.join(", ", SETTINGS.keySet()) + " and shoal.psf.NAME (docs/spark.md, \"Table properties\")");
  }
}
