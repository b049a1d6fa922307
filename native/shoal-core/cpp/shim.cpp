// shoal's shim over simdjson's On-Demand API (see src/parser/simdjson.rs).
//
// One call parses a whole batch of records: for each record, the fields of interest
// (given as a flattened tree of object keys) are located and described (type tag, number,
// or offset + length into the record), and every other token of the record is visited
// too, so that a record is accepted only if it is exactly one valid JSON value. Nothing
// here throws: only simdjson's error-code API is used and the extern "C" entry points are
// noexcept (an exception, were one ever raised, would terminate instead of unwinding
// into Rust).
//
// Kernels: simdjson's library (simdjson.cpp, built by the simdjson-sys crate) holds every
// kernel for the target (icelake, haswell, westmere and fallback on x86-64) and picks one
// from the CPU at run time; stage 1 (structural indexing and UTF-8 validation, the SIMD
// part) runs there. The On-Demand walk below is simdjson header code, compiled for
// `simdjson::builtin`, the kernel the compiler flags allow (fallback on a plain x86-64
// build). Compiling the walk once per kernel (target regions, one translation unit each)
// was tried: identical instruction counts and speed on GitHub events, so it is not done.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <new>
#include <string>

#include "simdjson.h"

namespace shoal {

// Must match `ShimNode`, `ShimChild`, `ShimRecord`, `ShimValue`, `ShimStatus` and the
// constants in src/parser/simdjson.rs.
struct Node {
  int32_t field;         // field id ending here, or -1
  uint32_t first_child;  // index into the children array
  uint32_t child_count;
};
struct Child {
  uint32_t key_offset;  // into the key bytes
  uint32_t key_len;
  uint32_t node;
};
struct Record {
  const uint8_t *ptr;
  size_t len;
};
struct Value {
  uint8_t tag;
  uint8_t escaped;  // STR: the content has escape sequences
  uint16_t pad;
  uint32_t len;     // STR/OBJECT/ARRAY/RAW_NUMBER: length in bytes
  uint64_t data;    // INT: i64; FLOAT: f64 bits; STR/OBJECT/ARRAY/RAW_NUMBER: byte offset
};
struct Status {
  int32_t code;  // 0 or a simdjson::error_code (DEPTH_ERROR: nested deeper than MAX_DEPTH)
  uint32_t pad;
  uint64_t offset;  // where the error was found, or OFFSET_UNKNOWN
};

static_assert(sizeof(Node) == 12 && sizeof(Child) == 12 && sizeof(Record) == 2 * sizeof(size_t), "layout");
static_assert(sizeof(Value) == 16 && sizeof(Status) == 16, "layout");

enum Tag : uint8_t {
  TAG_MISSING = 0,
  TAG_NULL = 1,
  TAG_FALSE = 2,
  TAG_TRUE = 3,
  TAG_INT = 4,
  TAG_FLOAT = 5,
  TAG_STR = 6,
  TAG_OBJECT = 7,
  TAG_ARRAY = 8,
  TAG_RAW_NUMBER = 9,  // a valid number that Rust converts (beyond 64 bits, or > i64::MAX)
};

// Nesting deeper than this (simdjson's default maximum depth) is not walked, as our walk
// recurses once per level: the record gets DEPTH_ERROR and Rust parses it instead.
constexpr uint32_t MAX_DEPTH = 1024;
constexpr uint64_t OFFSET_UNKNOWN = ~uint64_t(0);

// One call's arguments.
struct Batch {
  const Record *records;
  size_t record_count;
  const Node *nodes;
  size_t node_count;
  const Child *children;
  const uint8_t *keys;
  size_t field_count;
  Value *values;
  Status *status;
  // The records are known to be valid JSON (they come from the log, validated when they
  // were ingested): values outside the fields of interest are skipped, not validated, and
  // the walk stops once every field of interest has been found.
  bool trusted;
};

// Buffers kept between calls: the padded copy of the current record and the duplicate-key
// bookkeeping (per tree node, the record generation it was last entered in).
struct Scratch {
  uint8_t *buf = nullptr;
  size_t cap = 0;  // allocated bytes (record + padding)
  uint32_t *visited = nullptr;
  size_t visited_len = 0;
  uint32_t generation = 0;

  Scratch() = default;
  Scratch(const Scratch &) = delete;
  Scratch &operator=(const Scratch &) = delete;
  ~Scratch() {
    delete[] buf;
    delete[] visited;
  }

  // Room for a record of `len` bytes plus simdjson's padding.
  bool reserve(size_t len) noexcept {
    size_t need = len + simdjson::SIMDJSON_PADDING;
    if (need <= cap) return true;
    size_t new_cap = cap < 4096 ? 4096 : cap;
    while (new_cap < need) new_cap *= 2;
    // Value-initialised: simdjson may read the padding, which must be allocated (its content
    // does not matter), and reading it initialised keeps tools like valgrind quiet.
    uint8_t *fresh = new (std::nothrow) uint8_t[new_cap]();
    if (fresh == nullptr) return false;
    delete[] buf;
    buf = fresh;
    cap = new_cap;
    return true;
  }

  bool prepare_nodes(size_t node_count) noexcept {
    if (visited_len < node_count) {
      uint32_t *fresh = new (std::nothrow) uint32_t[node_count]();
      if (fresh == nullptr) return false;
      delete[] visited;
      visited = fresh;
      visited_len = node_count;
      generation = 0;
    }
    return true;
  }

  // A new generation for the next record (every node becomes unvisited).
  uint32_t next_generation() noexcept {
    generation += 1;
    if (generation == 0) {
      std::memset(visited, 0, visited_len * sizeof(uint32_t));
      generation = 1;
    }
    return generation;
  }
};

inline bool is_ws(uint8_t c) noexcept { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

inline bool is_digit(char c) noexcept { return c >= '0' && c <= '9'; }

// True if `text` is exactly one JSON number (RFC 8259 grammar). simdjson rejects some valid
// numbers that Rust accepts (a decimal exponent beyond double range such as 1e400, integers
// of 20 digits above 2^64): those are checked here and handed to Rust as text.
inline bool valid_number(std::string_view text) noexcept {
  size_t i = 0, n = text.size();
  if (i < n && text[i] == '-') i++;
  if (i >= n) return false;
  if (text[i] == '0') {
    i++;
  } else if (text[i] >= '1' && text[i] <= '9') {
    while (i < n && is_digit(text[i])) i++;
  } else {
    return false;
  }
  if (i < n && text[i] == '.') {
    i++;
    size_t start = i;
    while (i < n && is_digit(text[i])) i++;
    if (i == start) return false;
  }
  if (i < n && (text[i] == 'e' || text[i] == 'E')) {
    i++;
    if (i < n && (text[i] == '+' || text[i] == '-')) i++;
    size_t start = i;
    while (i < n && is_digit(text[i])) i++;
    if (i == start) return false;
  }
  return i == n;
}

// `token` less the JSON whitespace at its end (simdjson's tokens run to the next token).
inline std::string_view trimmed(std::string_view token) noexcept {
  size_t n = token.size();
  while (n > 0 && is_ws(uint8_t(token[n - 1]))) n--;
  return token.substr(0, n);
}

// The child of `node` reached by `key` (unescaped bytes), or -1.
inline int64_t child_of(const Batch &b, const Node &node, const char *key, size_t len) noexcept {
  const Child *c = b.children + node.first_child;
  for (uint32_t i = 0; i < node.child_count; i++) {
    if (c[i].key_len == len && (len == 0 || (b.keys[c[i].key_offset] == uint8_t(key[0]) &&
                                             std::memcmp(b.keys + c[i].key_offset, key, len) == 0))) {
      return c[i].node;
    }
  }
  return -1;
}

}  // namespace shoal

namespace {

namespace od = simdjson::builtin::ondemand;
using simdjson::error_code;
using namespace shoal;

// The state of one record's walk.
struct Walk {
  const Batch &b;
  Scratch &s;
  const uint8_t *base;  // the padded copy of the record
  size_t len;
  Value *out;           // this record's field slots
  od::document &doc;
  uint32_t generation;
  // The first backslash at or after the last string checked (or the end of the record):
  // strings are visited in order, so finding escapes costs about one pass over the record
  // instead of a search per string.
  const uint8_t *next_backslash;
  // Fields of interest set so far (each is set at most once per record). A container that
  // is itself a field of interest is set when its walk ends, so a trusted walk cannot stop
  // inside one: its extent is known then.
  size_t found = 0;

  // A trusted walk has everything it needs.
  bool done() const noexcept { return b.trusted && found == b.field_count; }

  // True if the string content [start, start + n) has a backslash (an escape sequence).
  bool has_escape(const char *start, size_t n) noexcept {
    const uint8_t *a = reinterpret_cast<const uint8_t *>(start);
    if (next_backslash < a) {
      const void *found = std::memchr(a, '\\', size_t(base + len - a));
      next_backslash = found != nullptr ? static_cast<const uint8_t *>(found) : base + len;
    }
    return next_backslash < a + n;
  }

  uint64_t offset_of(const char *p) const noexcept { return uint64_t(reinterpret_cast<const uint8_t *>(p) - base); }

  // The end of the container just walked: where the next token starts (or the end of the
  // record), less the whitespace before it.
  const uint8_t *container_end() noexcept {
    const char *next = nullptr;
    const uint8_t *end = base + len;
    if (!doc.current_location().get(next)) end = reinterpret_cast<const uint8_t *>(next);
    while (end > base && is_ws(end[-1])) end--;
    return end;
  }

  void set(int32_t field, uint8_t tag, uint64_t data, uint32_t length = 0, uint8_t escaped = 0) noexcept {
    Value &v = out[field];
    found++;
    v.tag = tag;
    v.escaped = escaped;
    v.len = length;
    v.data = data;
  }

  error_code object(od::value &v, const Node *node, uint32_t depth) noexcept {
    od::object obj;
    SIMDJSON_TRY(v.get_object().get(obj));
    const bool descend = node != nullptr && node->child_count > 0;
    for (auto field_result : obj) {
      SIMDJSON_TRY(field_result.error());
      od::field &field = field_result.value_unsafe();
      const std::string_view key = field.escaped_key();
      int64_t child = -1;
      if (has_escape(key.data(), key.size())) {
        // Escapes in keys are validated (and lone surrogates replaced, like the Rust
        // parser) by unescaping.
        std::string_view unescaped;
        SIMDJSON_TRY(field.unescaped_key(true).get(unescaped));
        if (descend) child = child_of(b, *node, unescaped.data(), unescaped.size());
      } else if (descend) {
        child = child_of(b, *node, key.data(), key.size());
      }
      const Node *child_node = nullptr;
      if (child >= 0 && s.visited[child] != generation) {
        // The first of duplicate keys wins; later ones are only validated.
        s.visited[child] = generation;
        child_node = &b.nodes[child];
      }
      // Trusted: a value of no interest is left unconsumed, and On-Demand skips it.
      if (b.trusted && child_node == nullptr) continue;
      SIMDJSON_TRY(value(field.value(), child_node, depth + 1));
      if (done()) return simdjson::SUCCESS;
    }
    return simdjson::SUCCESS;
  }

  error_code array(od::value &v, uint32_t depth) noexcept {
    od::array arr;
    SIMDJSON_TRY(v.get_array().get(arr));
    for (auto element_result : arr) {
      od::value element;
      SIMDJSON_TRY(std::move(element_result).get(element));
      // Trusted: elements (never fields of interest) are skipped unconsumed.
      if (!b.trusted) SIMDJSON_TRY(value(element, nullptr, depth + 1));
    }
    return simdjson::SUCCESS;
  }

  // Validates the value `v` in full; records it if a field of interest ends at `node`, and
  // walks into it if fields lie below.
  error_code value(od::value &v, const Node *node, uint32_t depth) noexcept {
    od::json_type type;
    SIMDJSON_TRY(v.type().get(type));
    const int32_t field = node != nullptr ? node->field : -1;
    switch (type) {
      case od::json_type::object:
      case od::json_type::array: {
        if (depth >= MAX_DEPTH) return simdjson::DEPTH_ERROR;
        const char *start = v.raw_json_token().data();
        if (type == od::json_type::object) {
          SIMDJSON_TRY(object(v, node, depth));
        } else {
          SIMDJSON_TRY(array(v, depth));
        }
        if (field >= 0) {
          const uint8_t *end = container_end();
          set(field, type == od::json_type::object ? TAG_OBJECT : TAG_ARRAY, offset_of(start),
              uint32_t(end - reinterpret_cast<const uint8_t *>(start)));
        }
        return simdjson::SUCCESS;
      }
      case od::json_type::string: {
        const std::string_view token = v.raw_json_token();
        // The token runs from the opening quote to the next token; the closing quote is the
        // last one in it.
        size_t close = token.size() - 1;
        while (close > 0 && token[close] != '"') close--;
        const char *content = token.data() + 1;
        const size_t content_len = close == 0 ? 0 : close - 1;
        const bool escaped = has_escape(content, content_len);
        if (escaped && !b.trusted) {
          // simdjson validates escape sequences while unescaping (stage 1 has already
          // checked UTF-8, control characters and the closing quote).
          std::string_view unescaped;
          SIMDJSON_TRY(v.get_string(true).get(unescaped));
        } else {
          // Consumed all the same: simdjson skips an unconsumed string followed by ':' as
          // if it were a key, which would accept `["a":1}]` or `{"a":"b":1}`.
          od::raw_json_string raw;
          SIMDJSON_TRY(v.get_raw_json_string().get(raw));
        }
        if (field >= 0) set(field, TAG_STR, offset_of(content), uint32_t(content_len), escaped ? 1 : 0);
        return simdjson::SUCCESS;
      }
      case od::json_type::number:
        return number(v, field);
      case od::json_type::boolean: {
        bool b_value;
        SIMDJSON_TRY(v.get_bool().get(b_value));
        if (field >= 0) set(field, b_value ? TAG_TRUE : TAG_FALSE, 0);
        return simdjson::SUCCESS;
      }
      case od::json_type::null: {
        bool is_null;
        SIMDJSON_TRY(v.is_null().get(is_null));
        if (!is_null) return simdjson::N_ATOM_ERROR;
        if (field >= 0) set(field, TAG_NULL, 0);
        return simdjson::SUCCESS;
      }
      default:
        return simdjson::TAPE_ERROR;
    }
  }

  error_code number(od::value &v, int32_t field) noexcept {
    od::number n;
    const error_code error = v.get_number().get(n);
    if (error) {
      // simdjson's BIGINT_ERROR and NUMBER_ERROR also cover valid numbers out of its range.
      const std::string_view raw = trimmed(v.raw_json_token());
      if (!valid_number(raw)) return error == simdjson::BIGINT_ERROR ? simdjson::NUMBER_ERROR : error;
      if (field >= 0) set(field, TAG_RAW_NUMBER, offset_of(raw.data()), uint32_t(raw.size()));
      return simdjson::SUCCESS;
    }
    if (field < 0) return simdjson::SUCCESS;
    switch (n.get_number_type()) {
      case od::number_type::signed_integer:
        set(field, TAG_INT, uint64_t(n.get_int64()));
        break;
      case od::number_type::floating_point_number: {
        if (trimmed(v.raw_json_token()) == "-0") {
          // Written as an integer (simdjson built with SIMDJSON_MINUS_ZERO_AS_FLOAT).
          set(field, TAG_INT, 0);
        } else {
          const double d = n.get_double();
          uint64_t bits;
          std::memcpy(&bits, &d, sizeof bits);
          set(field, TAG_FLOAT, bits);
        }
        break;
      }
      default: {
        // unsigned_integer (above i64::MAX): Rust converts the text to a float.
        const std::string_view raw = trimmed(v.raw_json_token());
        set(field, TAG_RAW_NUMBER, offset_of(raw.data()), uint32_t(raw.size()));
        break;
      }
    }
    return simdjson::SUCCESS;
  }

  // A top-level scalar (simdjson has separate, trailing-content-checking calls for them).
  // Sets `checked_to_end` when it has checked that nothing follows the scalar.
  error_code root_scalar(od::json_type type, bool &checked_to_end) noexcept {
    switch (type) {
      case od::json_type::string: {
        std::string_view unescaped;
        return doc.get_string(true).get(unescaped);
      }
      case od::json_type::number: {
        od::number n;
        const error_code error = doc.get_number().get(n);
        if (error == simdjson::BIGINT_ERROR || error == simdjson::NUMBER_ERROR) {
          // Maybe valid but out of simdjson's range (see valid_number): then the token must
          // be all there is but whitespace.
          const std::string_view raw = trimmed(doc.raw_json_token());
          const uint8_t *after = reinterpret_cast<const uint8_t *>(raw.data() + raw.size());
          while (after < base + len && is_ws(*after)) after++;
          if (!valid_number(raw)) return simdjson::NUMBER_ERROR;
          if (after != base + len) return simdjson::TRAILING_CONTENT;
          checked_to_end = true;
          return simdjson::SUCCESS;
        }
        return error;
      }
      case od::json_type::boolean: {
        // simdjson 4.6's root-level check compares only "fals" of "false" (`fals\` passes).
        const std::string_view raw = trimmed(doc.raw_json_token());
        if (raw != "true" && raw != "false") return raw[0] == 't' ? simdjson::T_ATOM_ERROR : simdjson::F_ATOM_ERROR;
        bool b_value;
        return doc.get_bool().get(b_value);
      }
      case od::json_type::null: {
        bool is_null;
        SIMDJSON_TRY(doc.is_null().get(is_null));
        return is_null ? simdjson::SUCCESS : simdjson::N_ATOM_ERROR;
      }
      default:
        return simdjson::TAPE_ERROR;
    }
  }

  error_code run() noexcept {
    od::json_type type;
    SIMDJSON_TRY(doc.type().get(type));
    if (type == od::json_type::object || type == od::json_type::array) {
      od::value root;
      SIMDJSON_TRY(doc.get_value().get(root));
      SIMDJSON_TRY(value(root, &b.nodes[0], 0));
      // Trusted: the rest of the record is known to be valid (and may not have been read).
      if (b.trusted) return simdjson::SUCCESS;
    } else {
      bool checked_to_end = false;
      SIMDJSON_TRY(root_scalar(type, checked_to_end));
      if (checked_to_end) return simdjson::SUCCESS;
    }
    return doc.at_end() ? simdjson::SUCCESS : simdjson::TRAILING_CONTENT;
  }
};

// A parser context: simdjson's parser and our scratch buffers.
struct Context {
  od::parser parser;
  Scratch scratch;

  void parse_batch(const Batch &b) noexcept {
    Scratch &s = scratch;
    // Records of 4 GiB or more (beyond simdjson) go to the Rust fallback one by one.
    size_t max_len = 0;
    for (size_t r = 0; r < b.record_count; r++) {
      if (b.records[r].len > max_len && b.records[r].len <= 0xFFFFFFFFu) max_len = b.records[r].len;
    }
    bool ready = s.reserve(max_len);
    if (ready && parser.capacity() < max_len) {
      // Sized once per batch instead of growing record by record.
      size_t capacity = parser.capacity() < 4096 ? 4096 : parser.capacity();
      while (capacity < max_len) capacity *= 2;
      ready = !parser.allocate(capacity, parser.max_depth());
    }
    for (size_t r = 0; r < b.record_count; r++) {
      Status &st = b.status[r];
      st.code = 0;
      st.pad = 0;
      st.offset = OFFSET_UNKNOWN;
      Value *out = b.values + r * b.field_count;
      std::memset(out, 0, b.field_count * sizeof(Value));
      const Record &rec = b.records[r];
      if (!ready || rec.len > 0xFFFFFFFFu) {
        // Not parseable here (too large, or out of memory): the Rust fallback takes it.
        st.code = simdjson::CAPACITY;
        continue;
      }
      if (rec.len >= 3 && rec.ptr[0] == 0xEF && rec.ptr[1] == 0xBB && rec.ptr[2] == 0xBF) {
        // simdjson skips a UTF-8 byte order mark; JSON text has none (RFC 8259 §8.1).
        st.code = simdjson::TAPE_ERROR;
        st.offset = 0;
        continue;
      }
      if (rec.len > 0) std::memcpy(s.buf, rec.ptr, rec.len);
      od::document doc;
      error_code error = parser.iterate(s.buf, rec.len, s.cap).get(doc);
      if (!error) {
        Walk walk{b, s, s.buf, rec.len, out, doc, s.next_generation(), s.buf};
        error = walk.run();
        if (error) {
          const char *at = nullptr;
          if (!doc.current_location().get(at)) {
            st.offset = uint64_t(reinterpret_cast<const uint8_t *>(at) - s.buf);
          } else {
            st.offset = rec.len;
          }
        }
      }
      if (error) {
        st.code = int32_t(error);
        std::memset(out, 0, b.field_count * sizeof(Value));
      }
    }
  }
};

}  // namespace

extern "C" {

// A parser context, or null if out of memory.
void *shoal_simdjson_new() noexcept { return new (std::nothrow) Context(); }

void shoal_simdjson_free(void *ctx) noexcept { delete static_cast<Context *>(ctx); }

// The kernel simdjson picked for this CPU ("icelake", "haswell", "westmere", "fallback",
// "arm64"...), NUL-terminated, static.
const char *shoal_simdjson_kernel() noexcept {
  // name() returns a std::string by value: keep one copy (the active kernel does not change).
  static const std::string name = simdjson::get_active_implementation()->name();
  return name.c_str();
}

// simdjson's message for an error code, NUL-terminated, static.
const char *shoal_simdjson_error_message(int32_t code) noexcept {
  if (code < 0 || code >= int32_t(simdjson::NUM_ERROR_CODES)) return "unknown error";
  return simdjson::error_message(simdjson::error_code(code));
}

// Parses `record_count` records. For record r, `status[r]` gets the outcome and, when it
// is 0, `values[r * field_count + f]` the value of field f. `nodes` is the tree of fields of
// interest (node 0 is the record itself), `children` the keys leading from a node to its
// children (bytes in `keys`). Returns 0, or a simdjson error code if nothing could be
// parsed (out of memory). `trusted` (0 or 1): the records are known to be valid JSON; see
// `Batch::trusted`.
int32_t shoal_simdjson_parse_batch(void *ctx_ptr, const shoal::Record *records, size_t record_count,
                                   const shoal::Node *nodes, size_t node_count, const shoal::Child *children,
                                   const uint8_t *keys, size_t field_count, shoal::Value *values,
                                   shoal::Status *status, uint8_t trusted) noexcept {
  Context *ctx = static_cast<Context *>(ctx_ptr);
  if (!ctx->scratch.prepare_nodes(node_count)) return simdjson::MEMALLOC;
  const shoal::Batch batch{records,     record_count, nodes,  node_count, children,
                           keys,        field_count,  values, status,     trusted != 0};
  ctx->parse_batch(batch);
  return 0;
}

}  // extern "C"
