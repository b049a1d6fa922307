package dev.shoal.flink.source;

/**
 * What a {@link ShoalSplitReader} hands to the {@link ShoalSourceReader}: a record (its JSON bytes
 * as put and its log address) or a progress mark (no bytes; the split is read up to {@code next}).
 *
 * @param json the record's bytes, or null for a progress mark
 * @param address the record's log address (bytes), or -1 for a progress mark
 * @param next the address reading resumes at after this element
 */
record ShoalSourceRecord(byte[] json, long address, long next) {

  static ShoalSourceRecord record(byte[] json, long address) {
    return new ShoalSourceRecord(json, address, address + 1);
  }

  static ShoalSourceRecord progress(long next) {
    return new ShoalSourceRecord(null, -1, next);
  }
}
