#include "bigbatch/text/jinja_globals.h"

#include <sys/time.h>

#include <ctime>
#include <memory>
#include <string>

#include "bigbatch/text/jinja_error.h"
#include "bigbatch/text/jinja_operators.h"

namespace bigbatch::text::jinja {
namespace {

/// jinja2's sandbox refuses longer ranges (MAX_RANGE).
constexpr int64_t kMaxRange = 100000;

int64_t range_arg(const Value& v) {
  if (!v.is_integral())
    fail(ErrorKind::kType, "'" + type_name(v) + "' object cannot be interpreted as an integer");
  return v.as_int();
}

Value range(Args& args) {
  if (!args.keyword.empty())
    fail(ErrorKind::kType, "range() takes no keyword arguments");
  const List& a = args.positional;
  if (a.empty() || a.size() > 3)
    fail(ErrorKind::kType, "range expected at most 3 arguments, got " + std::to_string(a.size()));
  int64_t start = 0, stop = 0, step = 1;
  if (a.size() == 1) {
    stop = range_arg(a[0]);
  } else {
    start = range_arg(a[0]);
    stop = range_arg(a[1]);
    if (a.size() == 3)
      step = range_arg(a[2]);
  }
  if (step == 0)
    fail(ErrorKind::kValue, "range() arg 3 must not be zero");
  int64_t count = 0;
  if (step > 0 && start < stop)
    count = (stop - start - 1) / step + 1;
  else if (step < 0 && start > stop)
    count = (start - stop - 1) / -step + 1;
  if (count > kMaxRange)
    fail(ErrorKind::kOverflow,
         "Range too big. The sandbox blocks ranges larger than MAX_RANGE (100000).");
  return Value::range(start, stop, step);
}

/// Python's dict(*args, **kwargs).
Dict make_dict(const Args& args) {
  if (args.positional.size() > 1)
    fail(ErrorKind::kType,
         "dict expected at most 1 argument, got " + std::to_string(args.positional.size()));
  Dict d;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      d = source.as_dict();
    } else {
      const List items = iterate(source);
      for (std::size_t i = 0; i < items.size(); ++i) {
        List pair;
        try {
          pair = iterate(items[i]);
        } catch (const Error&) {
          fail(ErrorKind::kType, "cannot convert dictionary update sequence element #" +
                                     std::to_string(i) + " to a sequence");
        }
        if (pair.size() != 2)
          fail(ErrorKind::kValue, "dictionary update sequence element #" + std::to_string(i) +
                                      " has length " + std::to_string(pair.size()) +
                                      "; 2 is required");
        check_hashable(pair[0]);
        d.set(pair[0], pair[1]);
      }
    }
  }
  for (const auto& [name, value] : args.keyword)
    d.set(Value::string(name), value);
  return d;
}

Value make_namespace(Args& args) {
  const Dict d = make_dict(args);
  auto ns = std::make_shared<Namespace>();
  for (const auto& [key, value] : d.items) {
    if (!key.is_string())
      fail(ErrorKind::kType, "namespace attribute names must be strings");
    if (!key.as_string().empty() && key.as_string()[0] == '_')
      fail(ErrorKind::kSecurity,
           "Chat templates cannot store underscore-prefixed attributes on a namespace, but got " +
               to_repr(key) + ". Please rename the attribute.");
    ns->set(key.as_string(), value);
  }
  return Value::make_namespace(std::move(ns));
}

Value raise_exception(Args& args) {
  if (args.positional.size() != 1 || !args.keyword.empty())
    fail(ErrorKind::kType, "raise_exception() takes exactly one argument");
  fail(ErrorKind::kRaised, to_str(args.positional[0]));
}

/// datetime.now().strftime(format): %f is the microseconds, %z and %Z are empty (a naive
/// datetime), the rest is the C library's strftime, as CPython's is.
Value strftime_now(Args& args) {
  if (args.positional.size() != 1 || !args.keyword.empty())
    fail(ErrorKind::kType, "strftime_now() takes exactly one argument");
  if (!args.positional[0].is_string())
    fail(ErrorKind::kType,
         "strftime() argument 1 must be str, not " + type_name(args.positional[0]));
  const std::string& format = args.positional[0].as_string();
  timeval now{};
  gettimeofday(&now, nullptr);
  const std::time_t seconds = now.tv_sec;
  std::tm local{};
  localtime_r(&seconds, &local);
  std::string c_format;
  for (std::size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 == format.size()) {
      c_format += format[i];
      continue;
    }
    const char c = format[++i];
    if (c == 'f') {
      char buf[16];
      std::snprintf(buf, sizeof buf, "%06ld", static_cast<long>(now.tv_usec));
      c_format += buf;
    } else if (c != 'z' && c != 'Z') {
      c_format += '%';
      c_format += c;
    }
  }
  if (c_format.empty())
    return Value::string("");
  std::string out(c_format.size() * 8 + 256, '\0');
  const std::size_t n = std::strftime(out.data(), out.size(), c_format.c_str(), &local);
  out.resize(n);
  return Value::string(std::move(out));
}

Value refuse(const std::string& name) {
  return Value::callable(
      name,
      [name](Args&) -> Value {
        fail(ErrorKind::kUnsupported, "the '" + name + "' global is not supported");
      },
      "function");
}

}  // namespace

Dict make_globals() {
  Dict g;
  g.set(Value::string("range"), Value::callable("range", range, "type"));
  g.set(Value::string("dict"),
        Value::callable(
            "dict", [](Args& args) { return Value::dict(make_dict(args)); }, "TemplateDict"));
  g.set(Value::string("namespace"),
        Value::callable("transformers.utils.chat_template_utils.TemplateNamespace", make_namespace,
                        "type"));
  g.set(Value::string("raise_exception"),
        Value::callable("raise_exception", raise_exception, "function"));
  g.set(Value::string("strftime_now"), Value::callable("strftime_now", strftime_now, "function"));
  for (const char* name : {"lipsum", "cycler", "joiner"})
    g.set(Value::string(name), refuse(name));
  return g;
}

}  // namespace bigbatch::text::jinja
