#include "bigbatch/text/jinja_json.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>

#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_strings.h"

namespace bigbatch::text::jinja {
namespace {

constexpr int kMaxDepth = 200;

template <typename Json>
Value convert(const Json& json) {
  switch (json.type()) {
    case nlohmann::json::value_t::null:
      return Value::none();
    case nlohmann::json::value_t::boolean:
      return Value::boolean(json.template get<bool>());
    case nlohmann::json::value_t::number_integer:
      return Value::integer(json.template get<int64_t>());
    case nlohmann::json::value_t::number_unsigned: {
      const auto u = json.template get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(ErrorKind::kValue, "integer " + std::to_string(u) + " is beyond 64 bits");
      return Value::integer(static_cast<int64_t>(u));
    }
    case nlohmann::json::value_t::number_float:
      return Value::floating(json.template get<double>());
    case nlohmann::json::value_t::string:
      return Value::string(json.template get<std::string>());
    case nlohmann::json::value_t::array: {
      List items;
      items.reserve(json.size());
      for (const auto& item : json)
        items.push_back(convert(item));
      return Value::list(std::move(items));
    }
    case nlohmann::json::value_t::object: {
      Dict d;
      d.items.reserve(json.size());
      for (auto it = json.begin(); it != json.end(); ++it)
        d.items.emplace_back(Value::string(it.key()), convert(it.value()));
      return Value::dict(std::move(d));
    }
    default:
      fail(ErrorKind::kValue,
           std::string("JSON ") + json.type_name() + " values are not supported");
  }
}

void append_json_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  char buf[16];
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (ensure_ascii && static_cast<unsigned char>(c) >= 0x80) {
      std::size_t p = i;
      char32_t cp = decode_code_point(s, p);
      i = p - 1;
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", static_cast<unsigned>(0xD800 + (cp >> 10)),
                      static_cast<unsigned>(0xDC00 + (cp & 0x3FF)));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(cp));
      }
      out += buf;
      continue;
    }
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d))
    return "NaN";
  if (std::isinf(d))
    return d > 0 ? "Infinity" : "-Infinity";
  return python_float_repr(d);
}

/// A dict key as json.dumps writes it: str, int, float, bool or None, else TypeError.
std::string json_key(const Value& key) {
  switch (key.type()) {
    case Type::kString:
      return key.as_string();
    case Type::kBool:
      return key.as_bool() ? "true" : "false";
    case Type::kInt:
      return std::to_string(key.as_int());
    case Type::kFloat:
      return json_float(key.as_double());
    case Type::kNone:
      return "null";
    default:
      fail(ErrorKind::kType, "keys must be str, int, float, bool or None, not " + type_name(key));
  }
}

class Writer {
 public:
  Writer(const JsonFormat& format, std::string& out) : format_(format), out_(out) {}

  void write(const Value& v, int depth) {
    if (depth > kMaxDepth)
      fail(ErrorKind::kValue, "Circular reference detected");
    switch (v.type()) {
      case Type::kNone:
        out_ += "null";
        return;
      case Type::kBool:
        out_ += v.as_bool() ? "true" : "false";
        return;
      case Type::kInt:
        out_ += std::to_string(v.as_int());
        return;
      case Type::kFloat:
        out_ += json_float(v.as_double());
        return;
      case Type::kString:
        append_json_string(out_, v.as_string(), format_.ensure_ascii);
        return;
      case Type::kList:
      case Type::kTuple: {
        const List& items = v.as_list();
        if (items.empty()) {
          out_ += "[]";
          return;
        }
        out_ += '[';
        for (std::size_t i = 0; i < items.size(); ++i) {
          if (i)
            out_ += format_.item_separator;
          newline(depth + 1);
          write(items[i], depth + 1);
        }
        newline(depth);
        out_ += ']';
        return;
      }
      case Type::kDict: {
        const auto& items = v.as_dict().items;
        std::vector<std::size_t> order(items.size());
        for (std::size_t i = 0; i < order.size(); ++i)
          order[i] = i;
        if (format_.sort_keys) {
          std::stable_sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
            return compare(items[a].first, items[b].first, CompareOp::kLess);
          });
        }
        std::vector<std::pair<std::string, const Value*>> entries;
        entries.reserve(items.size());
        for (std::size_t i : order)
          entries.emplace_back(json_key(items[i].first), &items[i].second);
        if (entries.empty()) {
          out_ += "{}";
          return;
        }
        out_ += '{';
        for (std::size_t i = 0; i < entries.size(); ++i) {
          if (i)
            out_ += format_.item_separator;
          newline(depth + 1);
          append_json_string(out_, entries[i].first, format_.ensure_ascii);
          out_ += format_.key_separator;
          write(*entries[i].second, depth + 1);
        }
        newline(depth);
        out_ += '}';
        return;
      }
      default:
        fail(ErrorKind::kType, "Object of type " + type_name(v) + " is not JSON serializable");
    }
  }

 private:
  void newline(int depth) {
    if (!format_.indent)
      return;
    out_ += '\n';
    for (int i = 0; i < depth; ++i)
      out_ += *format_.indent;
  }

  const JsonFormat& format_;
  std::string& out_;
};

}  // namespace

Value from_json(const nlohmann::json& json) {
  return convert(json);
}

Value from_json(const nlohmann::ordered_json& json) {
  return convert(json);
}

std::string to_json(const Value& value, const JsonFormat& format) {
  std::string out;
  Writer(format, out).write(value, 0);
  return out;
}

}  // namespace bigbatch::text::jinja
