// Current-XRT API declarations for xrtio's syntax check (tests/xrt_current_api/README.md).
// Mirrors upstream xrt/xrt_uuid.h. Declarations only; never linked.
#pragma once
#include <uuid/uuid.h>

#include <string>

typedef uuid_t xuid_t;

namespace xrt {

// A copyable value wrapper around a raw uuid.
class uuid {
 public:
  uuid();
  uuid(const xuid_t raw);
  explicit uuid(const std::string& text);
  uuid(const uuid&);
  uuid(uuid&&) = default;
  uuid& operator=(const uuid&);
  uuid& operator=(uuid&&) = default;
  uuid& operator=(const xuid_t raw);

  const xuid_t& get() const;
  std::string to_string() const;
  operator bool() const;
  bool operator==(const uuid& other) const;
  bool operator!=(const uuid& other) const;
  bool operator<(const uuid& other) const;

 private:
  xuid_t value_;
};

}  // namespace xrt
