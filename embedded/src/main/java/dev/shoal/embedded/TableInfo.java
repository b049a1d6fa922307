package dev.shoal.embedded;

/**
 * One table of the store, as ListFlights describes it.
 *
 * @param name the table's name
 * @param records records ingested (including records since dropped by {@code truncate})
 * @param bytes payload bytes of those records
 */
public record TableInfo(String name, long records, long bytes) {}
