// A simulated device wrapped to record what a memory budget says at the
// moment of each native allocation and each native destruction: the test
// of invariant 7 (docs/DESIGN.md), used by test_budget and test_alloc.
#pragma once

#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "xrtio/backend/backend.hpp"
#include "xrtio/memory_budget.hpp"
#include "xrtio/sim.hpp"

namespace btest {

// A device wrapper that records what the budget says at the moment of each
// native allocation and each native destruction.
struct observations {
  std::mutex mutex;
  const xrtio::memory_budget* budget = nullptr;
  std::vector<std::size_t> used_at_alloc, used_at_free;
  bool fail_alloc = false;
};

class observing_buffer final : public xrtio::backend::native_buffer {
 public:
  observing_buffer(std::unique_ptr<native_buffer> inner, observations* o) : inner_(std::move(inner)), o_(o) {}
  ~observing_buffer() override {
    std::lock_guard lock(o_->mutex);
    o_->used_at_free.push_back(o_->budget->used());
  }
  std::size_t size() const noexcept override { return inner_->size(); }
  std::byte* map() override { return inner_->map(); }
  void sync(xrtio::backend::sync_direction d, std::size_t s, std::size_t off) override { inner_->sync(d, s, off); }
  std::unique_ptr<native_buffer> sub(std::size_t s, std::size_t off) override { return inner_->sub(s, off); }

 private:
  std::unique_ptr<native_buffer> inner_;
  observations* o_;
};

class observing_device final : public xrtio::backend::native_device {
 public:
  explicit observing_device(observations* o) : inner_(xrtio::sim::make_device()), o_(o) {}
  std::string name() const override { return "observing " + inner_->name(); }
  std::unique_ptr<xrtio::backend::native_buffer> alloc(std::size_t size, xrtio::backend::buffer_kind k,
                                                       int g) override {
    {
      std::lock_guard lock(o_->mutex);
      o_->used_at_alloc.push_back(o_->budget->used());
      if (o_->fail_alloc) throw std::runtime_error("simulated allocation failure of " + std::to_string(size));
    }
    return std::make_unique<observing_buffer>(inner_->alloc(size, k, g), o_);
  }
  std::unique_ptr<xrtio::backend::native_buffer> import_user_memory(void* p, std::size_t s) override {
    return inner_->import_user_memory(p, s);
  }
  std::unique_ptr<xrtio::backend::native_buffer> import_dmabuf(int fd, std::size_t s) override {
    return inner_->import_dmabuf(fd, s);
  }
  std::shared_ptr<xrtio::backend::native_kernel> kernel(const std::string& n) override { return inner_->kernel(n); }
  std::vector<std::string> kernel_names() const override { return inner_->kernel_names(); }

 private:
  std::shared_ptr<xrtio::sim::device> inner_;
  observations* o_;
};

}  // namespace btest
