#include "bigbatch/text/jinja_args.h"

#include "bigbatch/text/jinja_error.h"

namespace bigbatch::text::jinja {

std::vector<std::optional<Value>> bind_args(const Args& args, const std::string& function,
                                            std::initializer_list<const char*> params,
                                            std::size_t required) {
  std::vector<std::optional<Value>> bound(params.size());
  if (args.positional.size() > params.size())
    fail(ErrorKind::kType, function + "() takes at most " + std::to_string(params.size()) +
                               " argument(s) (" + std::to_string(args.positional.size()) +
                               " given)");
  for (std::size_t i = 0; i < args.positional.size(); ++i)
    bound[i] = args.positional[i];
  for (const auto& [name, value] : args.keyword) {
    std::size_t i = 0;
    for (const char* param : params) {
      if (name == param)
        break;
      ++i;
    }
    if (i == params.size())
      fail(ErrorKind::kType, function + "() got an unexpected keyword argument '" + name + "'");
    if (bound[i])
      fail(ErrorKind::kType, function + "() got multiple values for argument '" + name + "'");
    bound[i] = value;
  }
  std::size_t i = 0;
  for (const char* param : params) {
    if (i < required && !bound[i])
      fail(ErrorKind::kType,
           function + "() missing required argument '" + std::string(param) + "'");
    ++i;
  }
  return bound;
}

int64_t int_arg(const Value& v, const std::string& what) {
  if (v.is_undefined())
    fail_undefined(v);
  if (!v.is_integral())
    fail(ErrorKind::kType, what + " must be an integer, not '" + type_name(v) + "'");
  return v.as_int();
}

const std::string& string_arg(const Value& v, const std::string& what) {
  if (v.is_undefined())
    fail_undefined(v);
  if (!v.is_string())
    fail(ErrorKind::kType, what + " must be str, not " + type_name(v));
  return v.as_string();
}

std::optional<std::string> optional_string_arg(const std::optional<Value>& v,
                                               const std::string& what) {
  if (!v || v->is_none())
    return std::nullopt;
  return string_arg(*v, what);
}

std::optional<int64_t> optional_int_arg(const std::optional<Value>& v, const std::string& what) {
  if (!v || v->is_none())
    return std::nullopt;
  return int_arg(*v, what);
}

}  // namespace bigbatch::text::jinja
