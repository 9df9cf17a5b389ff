// The Ryzen AI NPU calling convention (mlir-aie / IRON): the checks and the
// instruction upload behind async_run_npu / start_npu / prepare_npu in
// xrtio/xrt.hpp (docs/DESIGN.md, "Backends"). Needs nothing from hw_context.
#include <cstdint>
#include <limits>
#include <string>

#include "xrt_types.hpp"
#include "xrtio/error.hpp"

namespace xrtio::xrt_backend {
namespace {

using backend::arg_kind;

/// Argument 0: the opcode, an 8-byte scalar (npu_opcode).
constexpr unsigned opcode_arg = 0;
constexpr std::size_t opcode_bytes = sizeof(std::uint64_t);
/// Argument 1: the instruction buffer.
constexpr unsigned instructions_arg = 1;
/// Argument 2: the instruction word count, a 4-byte scalar.
constexpr unsigned word_count_arg = 2;
constexpr std::size_t word_count_bytes = sizeof(std::uint32_t);
/// Arguments 3...: the data buffers, data buffer i in argument 3 + i.
constexpr unsigned first_data_arg = 3;
/// Instructions are 32-bit words.
constexpr std::uint64_t instruction_word_bytes = sizeof(std::uint32_t);

using detail::quoted;

// Throws errc::argument_kind unless `k` takes (8-byte scalar, buffer, 4-byte
// scalar, buffer...).
void check_npu_layout(const xrtio::kernel& k) {
  const auto& a = k.args();
  auto bad = [&](const std::string& why) {
    throw error(errc::argument_kind, "kernel " + quoted(k.name()) +
                                         " does not follow the NPU calling convention (opcode: 8-byte scalar, "
                                         "instructions: buffer, instruction count: 4-byte scalar, then data "
                                         "buffers): " + why);
  };
  if (a.size() < first_data_arg) bad("it has " + std::to_string(a.size()) + " arguments");
  auto what = [&](unsigned i) {
    return "argument " + std::to_string(i) + " (" + a[i].name + ") is " +
           (a[i].kind == arg_kind::buffer ? std::string("a buffer")
                                          : "a " + std::to_string(a[i].size) + "-byte scalar");
  };
  if (a[opcode_arg].kind != arg_kind::scalar || a[opcode_arg].size != opcode_bytes) bad(what(opcode_arg));
  if (a[instructions_arg].kind != arg_kind::buffer) bad(what(instructions_arg));
  if (a[word_count_arg].kind != arg_kind::scalar || a[word_count_arg].size != word_count_bytes)
    bad(what(word_count_arg));
  for (unsigned i = first_data_arg; i < a.size(); ++i)
    if (a[i].kind != arg_kind::buffer) bad(what(i));
}

// Throws errc::argument_kind when `b` is known to lie in another memory
// bank than argument `index` of `k` is connected to.
void check_npu_group(const xrtio::kernel& k, unsigned index, const xrtio::buffer& b, const std::string& what) {
  int have = group_id_of(b);
  if (have < 0) return;
  int want = k.args()[index].group_id;
  if (detail::bank_of(have) == detail::bank_of(want)) return;
  throw error(errc::argument_kind, "kernel " + quoted(k.name()) + " argument " + std::to_string(index) + " (" +
                                       k.args()[index].name + "): the " + what + " is in memory group " +
                                       std::to_string(have) + ", the argument needs group " + std::to_string(want) +
                                       " (kernel.group_id(" + std::to_string(index) + "))");
}

}  // namespace

npu_instructions load_npu_instructions(const xrtio::kernel& k, std::span<const std::uint32_t> words) {
  if (words.empty()) throw error(errc::invalid_size, "kernel " + quoted(k.name()) + ": no NPU instructions given");
  if (words.size() > std::numeric_limits<std::uint32_t>::max())
    throw error(errc::invalid_size, "kernel " + quoted(k.name()) + ": " + std::to_string(words.size()) +
                                        " NPU instruction words; the count argument holds at most 2^32 - 1");
  check_npu_layout(k);
  npu_instructions i;
  i.buffer = k.context().alloc(words.size_bytes(),
                               {.kind = backend::buffer_kind::cacheable, .group_id = k.group_id(instructions_arg)});
  i.buffer.write(words);  // copies, then syncs to the device
  i.words = static_cast<std::uint32_t>(words.size());
  return i;
}

void check_npu_run(const xrtio::kernel& k, const npu_instructions& instr,
                   std::span<const xrtio::buffer* const> data) {
  check_npu_layout(k);
  if (!instr.buffer)
    throw error(errc::invalid_size, "kernel " + quoted(k.name()) + ": no NPU instruction buffer");
  if (instr.words == 0)
    throw error(errc::invalid_size, "kernel " + quoted(k.name()) + ": 0 NPU instruction words");
  if (std::uint64_t(instr.words) * instruction_word_bytes > instr.buffer.size())
    throw error(errc::out_of_range, "kernel " + quoted(k.name()) + ": " + std::to_string(instr.words) +
                                        " NPU instruction words do not fit in the " +
                                        std::to_string(instr.buffer.size()) + "-byte instruction buffer");
  check_npu_group(k, instructions_arg, instr.buffer, "instruction buffer");
  const auto n = k.args().size();
  for (std::size_t i = 0; i < data.size() && first_data_arg + i < n; ++i)
    if (data[i] && *data[i])
      check_npu_group(k, static_cast<unsigned>(first_data_arg + i), *data[i], "data buffer " + std::to_string(i));
}

}  // namespace xrtio::xrt_backend
