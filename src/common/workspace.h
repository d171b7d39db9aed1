// Host side of an operator's workspace: pieces laid end to end, each
// 256-byte aligned (a launcher's workspace must be 256-byte aligned too), so
// workspace_size and the launch derive the same offsets from one function.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "dsa_topk/dsa_topk.h"

namespace dsa {

inline constexpr std::size_t kWorkspaceAlign = 256;

class WorkspaceLayout {
 public:
  // The offset of a new piece of `bytes` (0 bytes: an empty piece).
  std::size_t take(std::size_t bytes) {
    const std::size_t here = total_;
    total_ += (bytes + kWorkspaceAlign - 1) / kWorkspaceAlign * kWorkspaceAlign;
    return here;
  }
  std::size_t total() const { return total_; }

 private:
  std::size_t total_ = 0;
};

template <class T>
T* workspace_piece(void* base, std::size_t offset) {
  return reinterpret_cast<T*>(static_cast<std::uint8_t*>(base) + offset);
}

// The launchers' check of the caller's workspace against the `needed` bytes
// op's *_workspace_size reported (nothing to check when it is 0).
inline Status check_workspace(const char* op, const void* workspace, std::size_t bytes, std::size_t needed) {
  if (needed == 0) return Status::Ok();
  if (workspace == nullptr || bytes < needed) {
    return {StatusCode::kInvalidArgument, std::string("ctx.workspace: the CUDA ") + op + " needs " +
                                              std::to_string(needed) + " bytes (" + op + "_workspace_size), got " +
                                              std::to_string(workspace == nullptr ? 0 : bytes)};
  }
  if (reinterpret_cast<std::uintptr_t>(workspace) % kWorkspaceAlign != 0) {
    return {StatusCode::kInvalidArgument, "ctx.workspace: must be 256-byte aligned"};
  }
  return Status::Ok();
}

}  // namespace dsa
