// xrtio-mkxclbin and xrtio-info as a user runs them: exit codes, output and
// diagnostics (docs/TOOLS.md).
#include <doctest/doctest.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

namespace {

const std::string& scratch() {
  static const std::string dir = [] {
    std::string t = "/tmp/xrtio-test-tools-XXXXXX";
    if (!::mkdtemp(t.data())) throw std::runtime_error("mkdtemp failed");
    return t;
  }();
  return dir;
}

struct result {
  int status = -1;
  std::string out, err;
};

// Runs a shell command, capturing stdout and stderr.
result run(const std::string& cmd) {
  std::string err_file = scratch() + "/stderr.txt";
  result r;
  FILE* p = ::popen((cmd + " 2>" + err_file).c_str(), "r");
  REQUIRE(p);
  char buf[4096];
  std::size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) r.out.append(buf, n);
  int st = ::pclose(p);
  r.status = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + (WIFSIGNALED(st) ? WTERMSIG(st) : 0);
  std::ifstream f(err_file);
  r.err.assign(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
  return r;
}

std::string q(const std::string& s) { return "'" + s + "'"; }
const std::string mk = XRTIO_MKXCLBIN;
const std::string info = std::string(XRTIO_INFO) + " --noop=20";

std::vector<char> slurp(const std::string& p) {
  std::ifstream f(p, std::ios::binary);
  return {std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>()};
}
std::string write_file(const std::string& name, const std::string& text) {
  std::string p = scratch() + "/" + name;
  std::ofstream(p, std::ios::binary) << text;
  return p;
}

}  // namespace

TEST_CASE("tools: xrtio-mkxclbin --vadd writes an xclbin xrtio-info describes") {
  std::string x = scratch() + "/vadd.xclbin";
  auto m = run(mk + " --vadd -o " + q(x));
  REQUIRE_MESSAGE(m.status == 0, m.err);
  auto r = run(info + " " + q(x));
  CHECK_MESSAGE(r.status == 0, r.err);
  CHECK(r.out.find("kernels: 1") != std::string::npos);
  CHECK(r.out.find("  vadd\n") != std::string::npos);
  CHECK(r.out.find("vadd:vadd_1 @ 0x1800000") != std::string::npos);
  CHECK(r.out.find("0 a  buffer  int*  8 bytes  offset 0x10  port M_AXI_GMEM  group_id 0 (0:bank0)") != std::string::npos);
  CHECK(r.out.find("3 n  scalar  uint  4 bytes  offset 0x34  port S_AXI_CONTROL") != std::string::npos);
  CHECK(r.out.find("[0] bank0  DDR4  used  base 0x0  size 1 GiB") != std::string::npos);
  // Reproducible: the same description gives the same bytes (and uuid).
  std::string y = scratch() + "/vadd2.xclbin";
  REQUIRE(run(mk + " --vadd -o " + q(y)).status == 0);
  CHECK(slurp(x) == slurp(y));
  CHECK(slurp(x).size() % 8 == 0);
}

#ifdef XRTIO_SAMPLE_XCLBIN
TEST_CASE("tools: xrtio-mkxclbin --vadd describes like the sample, apart from uuid and size") {
  std::string x = scratch() + "/vadd.xclbin";
  REQUIRE(run(mk + " --vadd -o " + q(x)).status == 0);
  auto mine = run(info + " " + q(x));
  auto sample = run(info + " " + q(XRTIO_SAMPLE_XCLBIN));
  REQUIRE(mine.status == 0);
  REQUIRE(sample.status == 0);
  auto body = [](const std::string& s) { return s.substr(s.find("platform:")); };
  CHECK(body(mine.out) == body(sample.out));
}
#endif

TEST_CASE("tools: xrtio-mkxclbin --print-vadd round-trips through a description file") {
  auto text = run(mk + " --print-vadd");
  REQUIRE(text.status == 0);
  auto d = write_file("vadd.txt", text.out);
  std::string a = scratch() + "/from-text.xclbin", b = scratch() + "/preset.xclbin";
  REQUIRE(run(mk + " " + q(d) + " -o " + q(a)).status == 0);
  REQUIRE(run(mk + " --vadd -o " + q(b)).status == 0);
  CHECK(slurp(a) == slurp(b));
  std::string c = scratch() + "/stdin.xclbin";
  REQUIRE(run(mk + " - -o " + q(c) + " < " + q(d)).status == 0);
  CHECK(slurp(c) == slurp(b));
}

TEST_CASE("tools: xrtio-mkxclbin --npu round-trips through --print-npu, and takes one preset only") {
  auto text = run(mk + " --print-npu");
  REQUIRE(text.status == 0);
  CHECK(text.out.find("kernel MLIR_AIE") != std::string::npos);
  auto d = write_file("npu.txt", text.out);
  std::string a = scratch() + "/npu-text.xclbin", b = scratch() + "/npu-preset.xclbin";
  REQUIRE(run(mk + " " + q(d) + " -o " + q(a)).status == 0);
  REQUIRE(run(mk + " --npu -o " + q(b)).status == 0);
  CHECK(slurp(a) == slurp(b));
  auto both = run(mk + " --vadd --npu -o " + q(scratch() + "/both.xclbin"));
  CHECK(both.status == 2);
  CHECK(both.err.find("more than one preset") != std::string::npos);
  auto with_file = run(mk + " --npu " + q(d) + " -o " + q(scratch() + "/both.xclbin"));
  CHECK(with_file.status == 2);
}

TEST_CASE("tools: xrtio-mkxclbin honours banks, compute units, scalars and an explicit uuid") {
  auto d = write_file("multi.txt", R"(# two banks, two kernels
platform my_platform
uuid 01234567-89ab-cdef-0123-456789abcdef
bank ddr0 size=512M type=DDR4
bank hbm0 size=256M type=HBM base=0x40000000
kernel mm
cu mm_1
cu mm_2 base=0x2000000
arg a buffer float* ddr0,hbm0
arg b buffer float* hbm0
arg m scalar uint 4
arg k scalar ulong 8
kernel copy
cu copy_1
arg src buffer char* ddr0
arg dst buffer char* ddr0
)");
  std::string x = scratch() + "/multi.xclbin";
  auto m = run(mk + " " + q(d) + " -o " + q(x));
  REQUIRE_MESSAGE(m.status == 0, m.err);
  auto r = run(info + " " + q(x));
  REQUIRE_MESSAGE(r.status == 0, r.err);
  CHECK(r.out.find("uuid:     01234567-89ab-cdef-0123-456789abcdef") != std::string::npos);
  CHECK(r.out.find("platform: my_platform") != std::string::npos);
  CHECK(r.out.find("[1] hbm0  HBM  used  base 0x40000000  size 256 MiB") != std::string::npos);
  CHECK(r.out.find("mm:mm_2 @ 0x2000000") != std::string::npos);
  CHECK(r.out.find("group_id 0 (0:ddr0, 1:hbm0)") != std::string::npos);
  CHECK(r.out.find("1 b  buffer  float*  8 bytes  offset 0x1c  port M_AXI_GMEM  group_id 1 (1:hbm0)") !=
        std::string::npos);
  CHECK(r.out.find("3 k  scalar  ulong  8 bytes  offset 0x30") != std::string::npos);
  CHECK(r.out.find("kernels: 2") != std::string::npos);
}

TEST_CASE("tools: xrtio-mkxclbin rejects bad descriptions with a line number") {
  struct bad {
    const char* text;
    const char* says;
  } cases[] = {
      {"kernel k\narg a buffer int* nowhere\ncu k_1\n", "no bank \"nowhere\""},
      {"bank b size=1M\ncu c\n", "line 2: cu before any kernel"},
      {"bank b size=1M\nkernel k\narg n scalar uint\n", "line 3:"},
      {"bank b size=1M\nkernel k\narg n scalar uint 0\ncu k_1\n", "scalar size"},
      {"bank b size=1M\nkernel k\n", "no compute unit"},
      {"bank b size=12x\n", "not a number"},
      {"bank b\n", "line 1:"},
      {"frobnicate\n", "unknown statement"},
      {"", "no kernel"},
      {"bank b size=1M\nkernel k\ncu c base=0x1800000\nkernel j\ncu d base=0x1800000\n", "share base address"},
      {"uuid 1234\nbank b size=1M\nkernel k\ncu c\n", "not 32 hex digits"},
  };
  int i = 0;
  for (auto& c : cases) {
    auto d = write_file("bad" + std::to_string(i) + ".txt", c.text);
    auto r = run(mk + " " + q(d) + " -o " + q(scratch() + "/bad" + std::to_string(i++) + ".xclbin"));
    CAPTURE(c.text);
    CHECK(r.status == 2);
    CHECK_MESSAGE(r.err.find(c.says) != std::string::npos, r.err);
  }
  CHECK(run(mk + " --vadd").status == 2);  // no -o
  CHECK(run(mk + " " + q(scratch() + "/missing.txt") + " -o " + q(scratch() + "/x.xclbin")).status == 1);
}

TEST_CASE("tools: xrtio-info lists the no-op device") {
  auto r = run(info + " --devices");
  REQUIRE_MESSAGE(r.status == 0, r.err);
  CHECK(r.out.find("devices: 1") != std::string::npos);
  CHECK(r.out.find("0: ") != std::string::npos);
  CHECK(r.out.find("emulation: noop") != std::string::npos);
}

TEST_CASE("tools: xrtio-info reports missing, truncated and corrupt xclbins on stderr and exits 1") {
  std::string x = scratch() + "/good.xclbin";
  REQUIRE(run(mk + " --vadd -o " + q(x)).status == 0);
  auto good = slurp(x);
  std::string truncated(good.begin(), good.begin() + long(good.size() / 2));
  std::mt19937 rng(7);
  std::string noise(3000, '\0');
  for (auto& c : noise) c = static_cast<char>(rng());
  struct bad {
    std::string path;
    const char* says;
  } cases[] = {
      {scratch() + "/missing.xclbin", "cannot open"},
      {write_file("truncated.xclbin", truncated), "truncated"},
      {write_file("random.xclbin", noise), "not an xclbin"},
      {write_file("empty.xclbin", ""), "truncated"},
  };
  for (auto& c : cases) {
    auto r = run(info + " " + q(c.path));
    CAPTURE(c.path);
    CHECK(r.status == 1);
    CHECK_MESSAGE(r.err.find(c.path) != std::string::npos, r.err);
    CHECK_MESSAGE(r.err.find(c.says) != std::string::npos, r.err);
  }
  // A bad file does not stop the good ones after it.
  auto r = run(info + " " + q(cases[1].path) + " " + q(x));
  CHECK(r.status == 1);
  CHECK(r.out.find("kernels: 1") != std::string::npos);
  CHECK(run(std::string(XRTIO_INFO) + " --bogus").status == 2);
}
