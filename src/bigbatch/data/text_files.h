// Reading the text files of a directory by one set of rules, for every reader of text data.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace bigbatch::data {

/// A file's name and its whole text.
using NamedText = std::pair<std::string, std::string>;

/// Whether `name` is passed over when a directory is listed: hidden files, fortune's *.dat
/// indexes and the *.u8 links of Debian's package.
bool is_ignored_name(const std::string& name);

/// The whole of `file`; false with `cause` set when it cannot be read.
bool read_text(const std::string& file, std::string& text, std::string& cause);

/// The text files directly in `directory`, sorted by name: regular files, not symbolic links,
/// not is_ignored_name. Files that cannot be read or hold a NUL byte (not text) go to `skipped`
/// as "<prefix>name: reason". Throws InputError when the directory cannot be listed.
std::vector<NamedText> read_text_files(const std::string& directory, const std::string& prefix,
                                       std::vector<std::string>& skipped);

/// The documents of a text file, or of every text file directly in a directory: each fortune
/// of a file holding fortunes (split_fortunes: between lines of only "%"), or the whole file
/// (without its final line break) otherwise. Throws InputError naming `path` when it does not
/// exist, cannot be read, or holds no document.
std::vector<std::string> read_documents(const std::string& path);

}  // namespace bigbatch::data
