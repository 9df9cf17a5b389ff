// The description parser: one statement a line into a checked description
// (description.hpp has the format).
#include "description.hpp"

#include <algorithm>
#include <iterator>
#include <sstream>
#include <utility>

#include "fields.hpp"

namespace xrtio::mkxclbin {
namespace {

/// The longest platform name: axlf_header::m_platformVBNV holds it NUL-terminated.
constexpr std::size_t max_platform_chars = sizeof(axlf_header::m_platformVBNV) - 1;
/// The longest bank tag: mem_data::m_tag holds it NUL-terminated.
constexpr std::size_t max_tag_chars = sizeof(mem_data::m_tag) - 1;
/// The longest "kernel:cu": ip_data::m_name holds it NUL-terminated.
constexpr std::size_t max_ip_name_chars = sizeof(ip_data::m_name) - 1;
/// MEM_TOPOLOGY stores bank sizes in KB, so a size is a whole number of them.
constexpr std::uint64_t bank_size_unit = 1024;
/// A buffer argument's register holds a 64-bit device address.
constexpr std::uint64_t pointer_bytes = 8;
/// The largest scalar argument, in bytes (docs/TOOLS.md: 1-64).
constexpr std::uint64_t max_scalar_bytes = 64;
/// bank and cu lines: KEYWORD NAME, then KEY[=VALUE] options from this word on.
constexpr std::size_t first_option = 2;
/// arg NAME KIND TYPE BANKS-or-SIZE: five words, whatever the kind.
constexpr std::size_t arg_words = 5;

using words = std::vector<std::string>;

// Calls on(key, value, has_value) for each KEY[=VALUE] word from w[from] on.
template <class F>
void for_each_option(const words& w, std::size_t from, F&& on) {
  for (std::size_t i = from; i < w.size(); ++i) {
    auto eq = w[i].find('=');
    on(w[i].substr(0, eq), eq == std::string::npos ? std::string() : w[i].substr(eq + 1), eq != std::string::npos);
  }
}

// Reads a description line by line; each statement checks what it can alone
// and against the statements before it, finish() what needs all of them.
class parser {
 public:
  void read_line(std::string raw);
  description finish();

 private:
  using statement = void (parser::*)(const words&);
  bad_input fail(const std::string& why) const { return at_line(line_, why); }
  kernel_desc& current_kernel(const char* keyword);
  void platform(const words& w);
  void uuid(const words& w);
  void bank(const words& w);
  void bank_options(const words& w, bank_desc& b);
  void kernel(const words& w);
  void cu(const words& w);
  void arg(const words& w);
  void arg_kind(const words& w, arg_desc& a);

  description d_;
  int line_ = 0;
};

void parser::read_line(std::string raw) {
  static const std::pair<std::string_view, statement> statements[] = {
      {"platform", &parser::platform}, {"uuid", &parser::uuid}, {"bank", &parser::bank},
      {"kernel", &parser::kernel},     {"cu", &parser::cu},     {"arg", &parser::arg}};
  ++line_;
  if (auto h = raw.find('#'); h != std::string::npos) raw.erase(h);
  std::istringstream ls(raw);
  words w{std::istream_iterator<std::string>(ls), std::istream_iterator<std::string>()};
  if (w.empty()) return;
  for (auto& [keyword, handle] : statements)
    if (w[0] == keyword) return (this->*handle)(w);
  throw fail("unknown statement \"" + w[0] + "\"");
}

kernel_desc& parser::current_kernel(const char* keyword) {
  if (d_.kernels.empty()) throw fail(std::string(keyword) + " before any kernel");
  return d_.kernels.back();
}

void parser::platform(const words& w) {
  if (w.size() != 2 || w[1].size() > max_platform_chars || !printable(w[1]))
    throw fail("platform takes one name of at most " + std::to_string(max_platform_chars) +
               " printable ASCII characters");
  d_.platform = w[1];
}

void parser::uuid(const words& w) {
  if (w.size() != 2) throw fail("uuid takes one value");
  d_.uuid = w[1];
}

void parser::bank(const words& w) {
  if (w.size() <= first_option) throw fail("bank TAG size=SIZE [base=ADDR] [type=TYPE] [unused]");
  bank_desc b;
  b.tag = w[1];
  if (!valid_name(b.tag) || b.tag.size() > max_tag_chars)
    throw fail("bank tag \"" + b.tag + "\": 1-" + std::to_string(max_tag_chars) + " name characters");
  for (auto& o : d_.banks)
    if (o.tag == b.tag) throw fail("bank \"" + b.tag + "\" declared twice");
  bank_options(w, b);
  if (b.size == 0 || b.size % bank_size_unit != 0)
    throw fail("bank \"" + b.tag + "\" needs size=SIZE, a non-zero multiple of 1K");
  d_.banks.push_back(std::move(b));
}

void parser::bank_options(const words& w, bank_desc& b) {
  for_each_option(w, first_option, [&](const std::string& k, const std::string& v, bool has) {
    if (k == "size" && has) b.size = parse_number(v, true, line_);
    else if (k == "base" && has) b.base = parse_number(v, true, line_);
    else if (k == "type" && has) b.type = parse_mem_type(v, line_);
    else if (k == "unused" && !has) b.used = false;
    else throw fail("unknown bank option \"" + k + "\"");
  });
}

void parser::kernel(const words& w) {
  if (w.size() != 2 || !valid_identifier(w[1])) throw fail("kernel takes one name of letters, digits and _");
  for (auto& k : d_.kernels)
    if (k.name == w[1]) throw fail("kernel \"" + w[1] + "\" declared twice");
  d_.kernels.push_back({w[1], {}, {}});
}

void parser::cu(const words& w) {
  auto& k = current_kernel("cu");
  if (w.size() < 2 || !valid_name(w[1])) throw fail("cu NAME [base=ADDR]");
  cu_desc c{w[1], std::nullopt};
  if (k.name.size() + 1 + c.name.size() > max_ip_name_chars)
    throw fail("\"" + k.name + ":" + c.name + "\" exceeds " + std::to_string(max_ip_name_chars) + " characters");
  for (auto& kk : d_.kernels)
    for (auto& o : kk.cus)
      if (o.name == c.name) throw fail("compute unit \"" + c.name + "\" declared twice");
  for_each_option(w, first_option, [&](const std::string& key, const std::string& v, bool has) {
    if (key == "base" && has) c.base = parse_number(v, true, line_);
    else throw fail("unknown cu option \"" + key + "\"");
  });
  k.cus.push_back(std::move(c));
}

void parser::arg(const words& w) {
  auto& k = current_kernel("arg");
  if (w.size() != arg_words) throw fail("arg NAME buffer TYPE BANK[,BANK...]  or  arg NAME scalar TYPE SIZE");
  arg_desc a;
  a.name = w[1];
  a.type = w[3];
  if (!valid_name(a.name)) throw fail("bad argument name \"" + a.name + "\"");
  for (auto& o : k.args)
    if (o.name == a.name) throw fail("argument \"" + a.name + "\" declared twice in kernel " + k.name);
  // The type lands in an XML attribute as written.
  if (!printable(a.type) || a.type.find_first_of("<>&\"'") != std::string::npos)
    throw fail("bad type \"" + a.type + "\": printable ASCII but < > & \" '");
  arg_kind(w, a);
  k.args.push_back(std::move(a));
}

// "buffer BANKS" or "scalar SIZE" (w[2], w[4]).
void parser::arg_kind(const words& w, arg_desc& a) {
  if (w[2] == "buffer") {
    a.buffer = true;
    a.size = pointer_bytes;
    a.banks = split(w[4], ',');
    for (auto& b : a.banks)
      if (b.empty()) throw fail("empty bank name in \"" + w[4] + "\"");
  } else if (w[2] == "scalar") {
    a.buffer = false;
    // XRT 2.13 records no address qualifier: a reader takes a pointer type
    // for a buffer (xrtio's does), so a scalar's type must not be one.
    if (a.type.find('*') != std::string::npos) throw fail("scalar type \"" + a.type + "\" is a pointer");
    a.size = parse_number(w[4], false, line_);
    if (a.size == 0 || a.size > max_scalar_bytes)
      throw fail("scalar size must be 1.." + std::to_string(max_scalar_bytes) + " bytes");
  } else {
    throw fail("argument kind must be buffer or scalar, not \"" + w[2] + "\"");
  }
}

description parser::finish() {
  if (d_.kernels.empty()) throw bad_input("no kernel declared");
  for (auto& k : d_.kernels) {
    if (k.cus.empty()) throw bad_input("kernel " + k.name + " has no compute unit (cu line)");
    for (auto& a : k.args)
      for (auto& b : a.banks)
        if (std::none_of(d_.banks.begin(), d_.banks.end(), [&](auto& x) { return x.tag == b; }))
          throw bad_input("kernel " + k.name + " argument " + a.name + ": no bank \"" + b + "\"");
  }
  return std::move(d_);
}

}  // namespace

description parse_description(std::string_view text) {
  std::istringstream in{std::string(text)};
  parser p;
  for (std::string raw; std::getline(in, raw);) p.read_line(std::move(raw));
  return p.finish();
}

}  // namespace xrtio::mkxclbin
