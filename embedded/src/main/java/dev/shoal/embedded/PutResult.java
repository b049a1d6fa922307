package dev.shoal.embedded;

import com.fasterxml.jackson.databind.JsonNode;

/**
 * The answer to one ingested batch: DoPut's {@code PutResult} metadata (docs/protocol.md,
 * "Ingestion").
 *
 * <p>Addresses are logical addresses of the table's hybrid log (bytes from the start of the log).
 * A field the answer does not carry (e.g. the addresses of a batch staged in a transaction, or of
 * a batch with no valid record) is {@code -1}.
 *
 * @param records records written (valid JSON records of the batch)
 * @param skipped records not written because they were not valid JSON (only under {@code
 *     on_invalid_json = "skip"}; under {@code "reject"} such a batch throws instead)
 * @param firstAddress log address of the first record written
 * @param lastAddress log address of the last record written
 * @param endAddress one past the last byte the batch wrote
 * @param durableAddress everything below it survives a crash; under the durability policies {@code
 *     group_commit} and {@code fsync} it is at least {@code endAddress}
 * @param raw the whole answer ({@code skipped_examples}, {@code duplicate}, {@code transaction}, ...)
 */
public record PutResult(
    long records,
    long skipped,
    long firstAddress,
    long lastAddress,
    long endAddress,
    long durableAddress,
    JsonNode raw) {

  static PutResult of(JsonNode raw) {
    return new PutResult(
        number(raw, "records"),
        number(raw, "skipped"),
        number(raw, "first_address"),
        number(raw, "last_address"),
        number(raw, "end_address"),
        number(raw, "durable_address"),
        raw);
  }

  private static long number(JsonNode raw, String key) {
    JsonNode value = raw.get(key);
    return value != null && value.canConvertToLong() ? value.asLong() : -1L;
  }
}
