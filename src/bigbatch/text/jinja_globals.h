// The global functions a chat template sees, as transformers' environment defines them:
// jinja2's range(), dict() and namespace() (transformers' restricted versions), and
// transformers' raise_exception() and strftime_now().
#pragma once

#include "bigbatch/text/jinja_value.h"

namespace bigbatch::text::jinja {

/// The globals by name: range, dict, namespace, raise_exception, strftime_now, and jinja2's
/// lipsum, cycler and joiner as callables that refuse (not supported).
Dict make_globals();

}  // namespace bigbatch::text::jinja
